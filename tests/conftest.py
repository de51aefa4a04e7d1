"""What the tests share: the bundled captures' paths, the markers, the builder-backed factory, the
CLI run in-process, the evidence helpers, the hostile trace texts, and the read-only folder.

Markers (registered in pyproject.toml, ``--strict-markers``):

* ``slow``: fuzzing, benchmark runs, exhaustive or randomized sweeps (:func:`sweep` keeps one
  representative case out of it), and tests that drive an external program (headless Chromium, the
  real nsys CLI, a Jupyter kernel, pip building wheels); ``make test-fast`` leaves them out,
  ``make test`` runs them.
* ``first``: a test of a minute or so (the damaged-exports sweep's shards), run before the others
  (:func:`pytest_collection_modifyitems`), so that pytest-xdist's workers do not end the run on it.
* :data:`needs_native`: a test of the native engine itself (run with it on; skipped only where it
  is not built and the run does not require it).
* :func:`requires_nsys`: a test of the real nsys CLI (slow; skipped where it is not installed).
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from nsysaudit.batch.workers import worker_env  # imports no polars
from nsysaudit.core.limits import prefer_in_memory_engine  # nor this

# pytest-xdist's workers share the machine's cores: each worker's polars gets its share of them, as
# nsysaudit's batch gives its worker processes theirs (worker_env), set before polars is first
# imported (its pool is sized then). A pool of a thread per core in every worker spins and wakes on
# the other workers' cores: 38 % of one shard of the damaged-exports sweep's CPU samples were polars'
# idle threads. A POLARS_MAX_THREADS the run sets is kept; that the answers do not depend on it is
# tests/test_order.py's test_the_answers_do_not_depend_on_polars_threads.
if _WORKERS := os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    os.environ.update(worker_env(max(1, int(_WORKERS))))
    # Each worker on cores of its own (gw0 the first share, gw1 the next, ...), its polars pool with
    # it. Every polars step that goes through the pool (a filter, a join, a sort) hands its work to a
    # pool thread and waits: on another core, a wake-up costs more than the step on a few rows (on
    # these 2-core VMs, a 10-row filter is 100-125 us, 38 us with both threads on one core). Measured
    # on the whole suite, same machine, back to back: `make test` 473 -> 404 s, `make test-pure`
    # 90 -> 78 s. A worker's default batch jobs (the cores it may run on) are then its share.
    # NSYSAUDIT_TEST_PIN=0 leaves the workers free (to measure the difference).
    _worker = re.fullmatch(r"gw(\d+)", os.environ.get("PYTEST_XDIST_WORKER", ""))
    if _worker and os.environ.get("NSYSAUDIT_TEST_PIN", "1") == "1" and hasattr(os, "sched_setaffinity"):
        _cpus = sorted(os.sched_getaffinity(0))
        _share = len(_cpus) // max(1, int(_WORKERS))
        _n = int(_worker.group(1))
        if _share >= 1 and _n < int(_WORKERS):
            os.sched_setaffinity(0, _cpus[_n * _share:(_n + 1) * _share])
# The engine the console script gives polars' lazy queries (nsysaudit/__main__.py), for the analyses
# the tests run in process.
prefer_in_memory_engine()

import polars as pl  # noqa: E402
import pytest  # noqa: E402

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

from builder import Export, LibCall, build_export  # noqa: E402
from scenarios import PID, WORKER, observe_nested_failure  # noqa: E402

import nsysaudit  # noqa: E402
from nsysaudit.cli import main  # noqa: E402
from nsysaudit.read import native, scan  # noqa: E402
from nsysaudit.read.source import probe  # noqa: E402
from nsysaudit.read.trace import load  # noqa: E402
from nsysaudit.seal.recipe import ENGINE_KEYS  # noqa: E402

# --- the bundled captures ------------------------------------------------------------------------

REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
H200 = FIXTURES / "h200-cuda13-nsys2023.4"
H200_2025 = FIXTURES / "h200-cuda13-nsys2025.3"
PUBLIC = FIXTURES / "public"
OBSERVE = H200 / "observe.sqlite"  # the nsys 2023.4 H200 capture's observe arm
TORCH = H200_2025 / "torch"  # the nsys 2025.3 H200 capture: observe and release arms, telemetry


# --- markers: the native engine, the real nsys CLI -----------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """``NSYSAUDIT_REQUIRE_NATIVE=1`` (``make test``, CI): a missing native extension stops the run
    at once, saying why, instead of its tests being skipped."""
    missing = native.installed()
    if os.environ.get("NSYSAUDIT_REQUIRE_NATIVE") == "1" and missing is not None:
        raise pytest.UsageError(f"NSYSAUDIT_REQUIRE_NATIVE=1, but the native extension is {missing}")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``first`` (the damaged-exports sweep's shards) at the front of the run, in
    their order: pytest-xdist hands the tests out in order, so the longest start at once and the
    short ones fill the workers' time at the end (a shard started last would keep its worker busy
    alone for a minute). After pytest's own ordering (``trylast``); a stable sort keeps the rest."""
    items.sort(key=lambda item: item.get_closest_marker("first") is None)


@pytest.fixture
def native_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native engine on for this test, whatever NSYSAUDIT_NATIVE the run has (CI runs once with 0);
    the test is skipped where the extension is not built (``pytest_configure`` makes that an error
    where the run requires it)."""
    missing = native.installed()
    if missing is not None:
        pytest.skip(f"the native extension is {missing}")
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "1")


# Tests of the native engine itself, as a decorator or a module's ``pytestmark``. A fixture named by
# usefixtures is set up after the autouse ones, so a module's own engine choice cannot undo it.
needs_native = pytest.mark.usefixtures("native_on")

DEFAULT_NSYS = REPO.resolve() / ".tools" / "nsys" / "target-linux-x64" / "nsys"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_nsys() -> str | None:
    """Path of the nsys CLI: $NSYSAUDIT_NSYS, else the private install, else PATH.

    An explicit $NSYSAUDIT_NSYS is returned as given (a wrong one should fail loudly, not skip).
    The private install is `$NSYSAUDIT_TOOLS/target-linux-x64/nsys` when that is set, then
    `<repo>/.tools/nsys/target-linux-x64/nsys` (where scripts/install-nsys.sh puts it).
    """
    env = os.environ.get("NSYSAUDIT_NSYS")
    if env:
        return env
    tools = os.environ.get("NSYSAUDIT_TOOLS")
    candidates = [Path(tools) / "target-linux-x64" / "nsys"] if tools else []
    candidates.append(DEFAULT_NSYS)
    for candidate in candidates:
        if _is_executable(candidate):
            return str(candidate)
    return shutil.which("nsys")


_NSYS_MISSING = pytest.mark.skipif(
    find_nsys() is None,
    reason="real nsys CLI not installed: run `make nsys` (scripts/install-nsys.sh)",
)


def requires_nsys(test: Callable[..., object]) -> Callable[..., object]:
    """A test of the real nsys CLI (`scripts/install-nsys.sh` installs it into `<repo>/.tools/nsys`):
    slow, as every test that drives an external program, and skipped where nsys is not installed."""
    return pytest.mark.slow(_NSYS_MISSING(test))


def sweep(values: Iterable[object], keep: object) -> list[object]:
    """The parameters of an exhaustive sweep: ``keep``, the representative case, runs in
    ``make test-fast``; every other value is marked slow."""
    return [value if value == keep else pytest.param(value, marks=pytest.mark.slow) for value in values]

NSYS_WORKLOAD = """
import time
total = 0
for i in range(200000):
    total += i * i
time.sleep(0.05)
print(total)
"""


@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real report made here by `nsys profile` of a CPU-only Python program."""
    nsys = find_nsys()
    if nsys is None:
        pytest.skip("real nsys CLI not installed: run `make nsys` (scripts/install-nsys.sh)")
    work = tmp_path_factory.mktemp("profile")
    script = work / "workload.py"
    script.write_text(NSYS_WORKLOAD)
    out = work / "cpu"
    proc = subprocess.run(
        [
            nsys,
            "profile",
            "-t",
            "nvtx,osrt",
            "-s",
            "none",
            "--cpuctxsw=none",
            "-o",
            str(out),
            sys.executable,
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=work,
        stdin=subprocess.DEVNULL,
    )
    report = out.with_suffix(".nsys-rep")
    assert proc.returncode == 0 and report.is_file(), proc.stderr[-2000:]
    # Keep only the report in its own folder, so "nothing written beside it" can be checked.
    evidence = tmp_path_factory.mktemp("evidence") / "cpu.nsys-rep"
    evidence.write_bytes(report.read_bytes())
    return evidence


# --- exports built from a description, the cache kept apart --------------------------------------


@pytest.fixture
def make_export(tmp_path: Path) -> Callable[..., Path]:
    """Build an nsys-schema SQLite from an :class:`Export` description into tmp_path."""
    counter = iter(range(1_000_000))

    def make(spec: Export, name: str | None = None) -> Path:
        return build_export(spec, tmp_path / (name or f"export-{next(counter)}.sqlite"))

    return make


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test's .nsys-rep export cache out of the user's real cache folder."""
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path_factory.mktemp("cache")))


# --- the CLI in this process ---------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """``nsysaudit ARGS`` through the CLI's ``main``: its exit code, stdout and stderr."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, path: Path, problem: str) -> None:
    assert code == 2, err
    assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1, err
    assert str(path) in err, err
    assert problem in err, err
    assert "Traceback" not in err


def sql(path: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """``query``'s rows over the export at ``path``, opened read-only: plain SQL to check the analysis against."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, params).fetchall()
    finally:
        con.close()


def warning_counts(doc: dict[str, Any]) -> dict[str, int]:
    """An analysis document's warnings, as a count per kind (each warning checked well-formed)."""
    out: dict[str, int] = {}
    for w in doc["warnings"]:
        assert set(w) >= {"kind", "count", "message"} and w["count"] > 0 and w["message"]
        out[w["kind"]] = out.get(w["kind"], 0) + w["count"]
    return out


# --- evidence: a folder of inputs, and its state --------------------------------------------------


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    """An evidence folder of its own (nothing else is written into it by the tests)."""
    folder = tmp_path / "evidence"
    folder.mkdir()
    return folder


def copy_in(folder: Path, source: Path, name: str | None = None) -> Path:
    target = folder / (name or source.name)
    shutil.copyfile(source, target)
    return target


def folder_state(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path) with its SHA-256: the evidence as it stands."""
    state = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            state[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[str(path.relative_to(folder)) + "/"] = "dir"
    return state


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reseal_tags(bag: Path) -> None:
    """Rewrite the tag manifest so that it matches a changed manifest (a consistent forgery)."""
    (bag / "tagmanifest-sha256.txt").write_text(
        f"{sha(bag / 'manifest-sha256.txt')}  manifest-sha256.txt\n{sha(bag / 'metadata.json')}  metadata.json\n"
    )


# --- hostile input: bytes that are not an export, text that is not plain -------------------------

# Files that are not a usable export: (content, the problem the one error line names)
UNUSABLE: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty file"),
    "random-bytes": (random.Random(6).randbytes(64 * 1024), "not a SQLite database"),
    "text": (b"this is not a trace\n" * 50, "not a SQLite database"),
    "header-only": (OBSERVE.read_bytes()[:100], "truncated SQLite file"),
    "magic-only": (b"SQLite format 3\x00", "not a SQLite database"),
    "bad-page-size": (OBSERVE.read_bytes()[:16] + b"\x00\x03" + OBSERVE.read_bytes()[18:4096], "page size 3"),
}

HOSTILE_TEXT = {
    "markup": "[bold red]x[/]",
    "link": "[link=https://evil.example]click[/link]",
    "ansi": "\x1b[2J\x1b[31mRED\x1b]8;;https://evil.example\x07here\x1b]8;;\x07",
    "forged-line": "ok\nverdict: no_failure",
    "bidi": "abc\u202eexe.txt",
    "c1": "x\x9b31my",
    "nul": "a\x00b",
    "html": "<script>alert(1)</script> | *em* `code`",
    "zero-width": "ad\u200bmin\u200d\u2060\u2064\ufeff",
    "tag": "x\U000e0041\U000e007fy",
    "bidi-isolate": "a\u2067b\u2069\u061c\u200fc",
}
# Every character a renderer must never emit as it is (the one definition in nsysaudit.core.text);
# a real line break is the report's own, so it is checked per line.
UNSAFE_SHOWN = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064"
                          "\u2066-\u2069\ufeff\U000e0000-\U000e007f]")
# A name that forges a seal line, a terminal title and a bidi override
FORGED = "x\nseal: sha256:" + "0" * 64 + "\x1b]0;title\x07\u202e"
HUGE_INT = "9" * 5_000  # past Python's 4,300-digit limit for int(): a ValueError, not a JSON error
DEEP_JSON = "[" * 100_000 + "]" * 100_000  # past the stdlib decoder's recursion limit


def hostile_export(text: str) -> Export:
    """The nested-failure scenario with ``text`` as thread name, library API name and process name."""
    spec = observe_nested_failure()
    spec.thread_names[(PID, WORKER)] = text
    spec.lib_calls = [LibCall(text, lc.start, lc.end, lc.pid, lc.tid) for lc in spec.lib_calls]
    spec.processes = {PID: text}
    return spec


# --- the CUDA API scan ---------------------------------------------------------------------------


def selected(path: Path, **kw: object) -> tuple[scan.CudaApiScan, pl.DataFrame]:
    export = probe(path)
    try:
        trace = load(export)
        table = export.table("CUPTI_ACTIVITY_KIND_RUNTIME")
        assert table is not None
        ids = pl.Series("id", [r[0] for r in export.conn.execute("SELECT id FROM StringIds")], dtype=pl.Int64)
        result = scan.scan_cuda_api(export.conn, path, table.name, table.columns, trace.library_windows, ids, **kw)  # type: ignore[arg-type]
        return result, trace.library_calls
    finally:
        export.close()


def assert_same_scan(a: scan.CudaApiScan, b: scan.CudaApiScan) -> None:
    assert a.total == b.total
    assert a.selected.equals(b.selected), (a.selected, b.selected)
    assert a.span.equals(b.span), (a.span, b.span)
    assert a.problems == b.problems
    assert a.marked.equals(b.marked)
    assert a.alloc_rows.equals(b.alloc_rows), (a.alloc_rows, b.alloc_rows)
    assert a.counted == b.counted
    assert a.type_mismatch_rows == b.type_mismatch_rows


def engine_free(text: bytes) -> tuple[bytes, dict[str, object]]:
    """An analysis's JSON (``analysis_json``) with the keys that say which engine read it
    (``input.engine``, ``sqlite_version``, ``native_unavailable``) set to ``"<engine>"``, and their values.
    Each is written once, as canonical JSON writes it: ``"key":value``."""
    import json

    values = {k: json.loads(text)["input"][k] for k in ENGINE_KEYS}
    for key, value in values.items():
        written = b'"' + key.encode() + b'":' + json.dumps(value, separators=(",", ":")).encode()
        assert text.count(written) == 1, key
        text = text.replace(written, b'"' + key.encode() + b'":"<engine>"')
    return text, values


# --- a folder a command cannot write into --------------------------------------------------------

NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"]


def _share_readable(source: Path, target: Path, share: Path) -> None:
    """Copy ``source`` (a file or a folder) to ``target`` under ``share``: folders 0755 (``target``'s
    parents up to ``share`` too), files 0644, whatever the umask or the source's own modes."""
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    for parent in target.parents:
        if parent == share or share not in parent.parents:
            break
        parent.chmod(0o755)


@functools.cache
def _nobody_share() -> Path:
    """A folder ``nobody`` can read, whatever the checkout's permissions (a checkout under a 0700
    folder, or made with umask 077): ``lib/nsysaudit`` is a copy of the package under test, and
    ``checkout/`` receives the inputs a test gives from this checkout (:func:`unprivileged`)."""
    share = Path(tempfile.mkdtemp(prefix="nsysaudit-nobody-"))
    atexit.register(shutil.rmtree, share, True)
    share.chmod(0o755)
    _share_readable(Path(nsysaudit.__file__).parent, share / "lib" / "nsysaudit", share)
    return share


def _nobody_env() -> dict[str, str]:
    """The environment of a command run as ``nobody``: nsysaudit imported from its readable copy
    (the variable, not ``env`` in the command: setpriv itself execs the interpreter)."""
    return {**os.environ, "PYTHONPATH": str(_nobody_share() / "lib")}


@functools.cache
def _nobody_runs_nsysaudit(setpriv: str) -> bool:
    """Whether ``nobody`` runs this nsysaudit (its copy) on this interpreter, and the nsys CLI where it
    is installed: not where the interpreter or nsys lies under a folder nobody cannot read."""
    share = _nobody_share()
    probe = "import nsysaudit.cli; print(nsysaudit.__file__)"
    proc = subprocess.run([setpriv, *NOBODY, sys.executable, "-c", probe], capture_output=True, text=True,
                          env=_nobody_env(), cwd=share, check=False)
    if proc.returncode != 0 or proc.stdout.strip() != str(share / "lib" / "nsysaudit" / "__init__.py"):
        return False
    nsys = find_nsys()
    return nsys is None or subprocess.run([setpriv, *NOBODY, nsys, "--version"], capture_output=True,
                                          cwd=share, check=False).returncode == 0


@pytest.fixture
def read_only_folder() -> Iterator[tuple[Path, list[str]]]:
    """A folder a command cannot write into, and the command prefix under which that holds
    (:func:`unprivileged` runs the command).

    As root (permissions do not apply), the command runs as ``nobody`` through ``setpriv`` in a
    root-owned 0755 folder, on a world-readable copy of nsysaudit and of its inputs, so that it
    never depends on the checkout's permissions; where nobody cannot run it even so (the
    interpreter under a folder nobody cannot read), it runs as root in a folder made immutable
    (``chattr +i``: no entry can be made in it, by root either). Otherwise the folder is made
    read-only (0555).
    """
    base = Path(tempfile.mkdtemp(prefix="nsysaudit-ro-"))  # not under pytest's 0700 tmp folders
    base.chmod(0o755)
    locked = base / "read-only"
    locked.mkdir()
    locked.chmod(0o755)
    prefix: list[str] = []
    immutable = False
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0:
        locked.chmod(0o555)
    elif setpriv and _nobody_runs_nsysaudit(setpriv):
        prefix = [setpriv, *NOBODY]
    elif shutil.which("chattr") and subprocess.run(["chattr", "+i", str(locked)], check=False).returncode == 0:
        immutable = True
    else:
        shutil.rmtree(base)
        pytest.skip("root, and neither nobody can run nsysaudit here nor chattr +i works: no read-only folder")
    yield locked, prefix
    if immutable:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    locked.chmod(0o755)
    shutil.rmtree(base)


def unprivileged(prefix: list[str], *args: object, cache: Path) -> subprocess.CompletedProcess[str]:
    """``nsysaudit ARGS`` in a child process under ``prefix`` (:func:`read_only_folder`'s). As
    ``nobody``, an argument that is a path in this checkout is given as its world-readable copy (the
    same path under the share's ``checkout/``), and the command runs from the share, on its copy of
    nsysaudit."""
    env = {**os.environ, "NSYSAUDIT_CACHE": str(cache)}
    cwd = None
    if prefix:
        env = {**_nobody_env(), "NSYSAUDIT_CACHE": str(cache)}
        cwd = _nobody_share()
        args = tuple(_readable_copy(a, cwd) if isinstance(a, Path) else a for a in args)
    command = [*prefix, sys.executable, "-m", "nsysaudit", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, check=False)


def _readable_copy(path: Path, share: Path) -> Path:
    repo = REPO.resolve()
    resolved = path.resolve()
    if resolved != repo and repo not in resolved.parents:
        return path
    copy = share / "checkout" / resolved.relative_to(repo)
    if not copy.exists():
        _share_readable(resolved, copy, share)
    return copy
