# nsysaudit: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
NSYSAUDIT := $(VENV)/bin/nsysaudit
TORCH := tests/fixtures/h200-cuda13-nsys2025.3/torch
OLD := tests/fixtures/h200-cuda13-nsys2023.4
OUT ?= out
# The native extension (native/scan.c), as setup.py builds it for this Python.
NATIVE := nsysaudit/read/_native$(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")

.DEFAULT_GOAL := help
.PHONY: help venv native nsys chromium demo test test-pure test-fast check-fixtures lint golden contract \
	bench clean

# Every line make prints (this list, the commands it echoes, the demo's lines) fits 80 columns
# (tests/test_makefile.py).
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) \
		| awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=77'
	CFLAGS="$${CFLAGS:-} -Werror" $(PY) -m pip install --quiet \
		-e '.[test,fleet,notebook,adbc]'
	touch $@

# The bytecode is compiled here, as pip does for a regular install: an editable install under
# PYTHONDONTWRITEBYTECODE=1 (set on these machines) compiles every module at each start (~0.08 s).
venv: $(VENV)/.installed $(NATIVE) ## .venv: nsysaudit (editable, native), the test tools
	@$(PY) -m compileall -q nsysaudit

# pip's editable install builds the extension too; this rebuilds it after an edit of scan.c.
$(NATIVE): native/scan.c setup.py | $(VENV)/.installed
	CFLAGS="$${CFLAGS:-} -Werror" $(PY) setup.py -q build_ext --inplace

native: $(NATIVE) ## rebuild the native extension (needs cc, SQLite's header)

nsys: ## install the nsys CLI (Debian non-free, 2023.4.4) into .tools/
	bash scripts/install-nsys.sh

chromium: ## install Chromium (apt-get; report.html's browser test)
	bash scripts/install-chromium.sh

demo: venv ## the bundled H200 failure: analyzed, compared, sealed, verified
	@echo "--- 1. a CUDA failure in PyTorch's cublasCreate_v2, traced by nsys 2025.3 ---"
	@$(NSYSAUDIT) analyze $(TORCH)/observe.sqlite \
		--telemetry $(TORCH)/observe.telemetry.jsonl
	@echo; echo "--- its observe and release arms compared, sealed, verified ---"
	@$(NSYSAUDIT) compare $(TORCH)/observe.sqlite $(TORCH)/release.sqlite \
		--out $(OUT)/torch-compare --force \
		--observe-telemetry $(TORCH)/observe.telemetry.jsonl \
		--release-telemetry $(TORCH)/release.telemetry.jsonl
	@$(NSYSAUDIT) verify $(OUT)/torch-compare --inputs \
		$(TORCH)/observe.sqlite $(TORCH)/release.sqlite \
		$(TORCH)/observe.telemetry.jsonl $(TORCH)/release.telemetry.jsonl
	@echo; echo "--- 2. the same failure under nsys 2023.4, whose CUDA trace stops inside"
	@echo "    cublasCreate_v2: censored, so inconclusive ---"
	@$(NSYSAUDIT) analyze $(OLD)/observe.sqlite \
		--telemetry $(OLD)/observe.telemetry.jsonl
	@echo; echo "open $(OUT)/torch-compare/report.html: the whole comparison, both timelines"

# The environment as variables of the target, so that the command make echoes is short.
test: export NSYSAUDIT_NSYS ?= $(CURDIR)/.tools/nsys/target-linux-x64/nsys
test: export NSYSAUDIT_REQUIRE_CHROMIUM := 1
test: export NSYSAUDIT_REQUIRE_NATIVE := 1
# pytest-xdist: the suite spread over every core (`make test PYTEST_ADDOPTS=` runs it on one). Work
# stealing: a worker that runs out takes half of the other's queue (the default hands each worker a
# first block of the suite, an eighth of it on two cores, to run whatever comes after: with the
# sweep's shards first in one, that worker ran on 186 s after the other had run out, in one run).
# Each worker runs on cores of its own (tests/conftest.py; NSYSAUDIT_TEST_PIN=0 leaves them free).
test test-pure test-fast: export PYTEST_ADDOPTS ?= -n auto --dist worksteal
test: venv nsys chromium ## every test (installs the deps, nsys and Chromium first)
	$(PY) -m pytest -q

# The tests of what reads an export (listed in tests/reader-tests.txt, one a line: pytest reads
# @FILE as arguments), which CI runs a second time without the native engine: the bundled exports
# are under ADBC's 50,000 rows, so on the stdlib reader (an install without the native extension and
# the adbc extra); tests/test_reading_scan.py holds the ADBC engine to the same answers in make test.
# tests/test_hostile_damage.py and the native engine's own tests (needs_native) switch engines themselves.
# Left out: the tests marked pure_skip: verify's checks of a sealed folder, not the reading (a changed
# byte of a sealed folder, a forged metadata value: the second was 50 s of this run's 193 s), and the
# tests that set NSYSAUDIT_NATIVE for each of their cases, which would run here unchanged (the 4M-row
# export under ulimit -v: 26 s of this run's 149 s), and those that read no export (the ledger's
# matching against a reference, its events built in the test: 9 s).
test-pure: export NSYSAUDIT_NATIVE := 0
test-pure: venv ## the reader tests on the pure engines (NSYSAUDIT_NATIVE=0)
	$(PY) -m pytest -q @tests/reader-tests.txt -m "not pure_skip"

test-fast: venv ## the tests but the slow ones (fuzzing, sweeps, nsys, ...)
	$(PY) -m pytest -q -m "not slow"

check-fixtures: venv ## check the bundled exports' expectations (JUnit in out/)
	@mkdir -p $(OUT)
	$(NSYSAUDIT) check tests/fixtures \
		--expect tests/fixtures/expectations.toml --junit $(OUT)/fixtures-junit.xml

lint: venv ## ruff and mypy (strict on the package)
	$(VENV)/bin/ruff check nsysaudit tests benchmarks
	$(VENV)/bin/mypy

golden: venv ## regenerate tests/golden's reports (review the diff)
	NSYSAUDIT_REGEN_GOLDEN=1 $(PY) -m pytest -q tests/test_golden.py

contract: venv ## regenerate docs/json.md's tables and the JSON Schemas
	$(PY) -m nsysaudit.render.contract docs/json.md
	$(PY) -m nsysaudit.schemas

bench: venv nsys ## run the benchmark (see benchmarks/RESULTS.md)
	$(PY) benchmarks/run.py

clean: ## remove build and test leftovers (not the venv or tools)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis $(OUT) build
