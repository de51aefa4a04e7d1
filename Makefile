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

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip 'setuptools>=77'
	CFLAGS="$${CFLAGS:-} -Werror" $(PY) -m pip install --quiet -e '.[test,fleet,notebook,adbc]'
	touch $@

# The bytecode is compiled here, as pip does for a regular install: an editable install under
# PYTHONDONTWRITEBYTECODE=1 (set on these machines) compiles every module at each start (~0.08 s).
venv: $(VENV)/.installed $(NATIVE) ## create .venv with nsysaudit (editable, its native extension built) and its test tools, compile the bytecode
	@$(PY) -m compileall -q nsysaudit

# pip's editable install builds the extension too; this rebuilds it after an edit of scan.c.
$(NATIVE): native/scan.c setup.py | $(VENV)/.installed
	CFLAGS="$${CFLAGS:-} -Werror" $(PY) setup.py -q build_ext --inplace

native: $(NATIVE) ## rebuild the native extension (a C compiler and SQLite's header; nsysaudit runs without it, slower)

nsys: ## install the real nsys CLI (Debian non-free, 2023.4.4) into .tools/nsys
	bash scripts/install-nsys.sh

chromium: ## install Debian's Chromium (apt-get; the report.html browser test) unless /usr/bin/chromium runs
	bash scripts/install-chromium.sh

demo: venv ## the main job on the bundled real H200 captures: the censored nsys 2023.4 case, then the nsys 2025.3 failure analyzed and its observe/release pair compared, sealed into out/torch-compare (report.html) and verified
	@echo "--- the experiment under nsys 2023.4, whose CUDA trace stops inside cublasCreate_v2 (censored) ---"
	@$(NSYSAUDIT) analyze $(OLD)/observe.sqlite --telemetry $(OLD)/observe.telemetry.jsonl
	@echo; echo "--- the same failure under nsys 2025.3, which traces inside cublasCreate_v2 ---"
	@$(NSYSAUDIT) analyze $(TORCH)/observe.sqlite --telemetry $(TORCH)/observe.telemetry.jsonl
	@echo; echo "--- its observe and release arms compared, sealed ---"
	@$(NSYSAUDIT) compare $(TORCH)/observe.sqlite $(TORCH)/release.sqlite --out $(OUT)/torch-compare --force \
		--observe-telemetry $(TORCH)/observe.telemetry.jsonl --release-telemetry $(TORCH)/release.telemetry.jsonl
	@$(NSYSAUDIT) verify $(OUT)/torch-compare --inputs $(TORCH)/observe.sqlite $(TORCH)/release.sqlite \
		$(TORCH)/observe.telemetry.jsonl $(TORCH)/release.telemetry.jsonl
	@echo; echo "open $(OUT)/torch-compare/report.html: the whole report, both arms' timelines inline (nsysaudit analyze ... --details in the terminal)"

test: venv nsys chromium ## run the whole test suite (installs deps, the nsys CLI and Chromium first)
	NSYSAUDIT_NSYS="$${NSYSAUDIT_NSYS:-$(CURDIR)/.tools/nsys/target-linux-x64/nsys}" NSYSAUDIT_REQUIRE_CHROMIUM=1 \
		NSYSAUDIT_REQUIRE_NATIVE=1 $(PY) -m pytest -q

# The tests of what reads an export, which CI runs a second time without the native engine: the bundled
# exports are under ADBC's 50,000 rows, so on the stdlib reader (an install without the native extension
# and the adbc extra); tests/test_reading_scan.py holds the ADBC engine to the same answers in make test.
# tests/test_hostile_damage.py and the native engine's own tests (needs_native) switch engines themselves.
READER_TESTS := tests/test_reading_scan.py tests/test_reading_nvtx.py tests/test_golden.py \
	tests/test_evidence_nsys2025.py tests/test_evidence_rules.py tests/test_evidence_analysis.py tests/test_ledger.py \
	tests/test_check.py tests/test_hostile_input.py tests/test_hostile_warnings.py tests/test_hostile_analysis.py \
	tests/test_hostile_limits.py tests/test_hostile_text.py tests/test_hostile_seal.py tests/test_hostile_telemetry.py \
	tests/test_hostile_fuzz.py

test-pure: venv ## run the reader tests on the pure engines (NSYSAUDIT_NATIVE=0), as an install without the native extension
	NSYSAUDIT_NATIVE=0 $(PY) -m pytest -q $(READER_TESTS) -k "not sealed_folder"

test-fast: venv ## run the tests but the slow ones (fuzzing, benchmarks, sweeps, Chromium, nsys, notebook, wheels)
	$(PY) -m pytest -q -m "not slow"

check-fixtures: venv ## check every bundled export against tests/fixtures/expectations.toml (JUnit into out/)
	@mkdir -p $(OUT)
	$(NSYSAUDIT) check tests/fixtures --expect tests/fixtures/expectations.toml --junit $(OUT)/fixtures-junit.xml

lint: venv ## ruff and mypy (strict on the package)
	$(VENV)/bin/ruff check nsysaudit tests benchmarks
	$(VENV)/bin/mypy

golden: venv ## regenerate the golden report files in tests/golden (review the diff)
	NSYSAUDIT_REGEN_GOLDEN=1 $(PY) -m pytest -q tests/test_golden.py

contract: venv ## regenerate docs/json.md's tables and the JSON Schemas from the types
	$(PY) -m nsysaudit.render.contract docs/json.md
	$(PY) -m nsysaudit.schemas

bench: venv nsys ## run the benchmark (see benchmarks/RESULTS.md)
	$(PY) benchmarks/run.py

clean: ## remove build and test leftovers (not the venv or tools)
	rm -rf .pytest_cache .mypy_cache .ruff_cache .hypothesis $(OUT) build
