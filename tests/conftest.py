"""Shared test fixtures: paths to the bundled real captures and a builder-backed factory."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

from builder import Export, build_export  # noqa: E402

from nsysaudit.read import native  # noqa: E402
from nsysaudit.seal.recipe import ENGINE_KEYS  # noqa: E402

FIXTURES = TESTS / "fixtures"
H200 = FIXTURES / "h200-cuda13-nsys2023.4"
H200_2025 = FIXTURES / "h200-cuda13-nsys2025.3"
PUBLIC = FIXTURES / "public"


def pytest_configure(config: pytest.Config) -> None:
    """``NSYSAUDIT_REQUIRE_NATIVE=1`` (``make test``, CI): a missing native extension stops the run
    at once, saying why, instead of its tests being skipped."""
    missing = native.installed()
    if os.environ.get("NSYSAUDIT_REQUIRE_NATIVE") == "1" and missing is not None:
        raise pytest.UsageError(f"NSYSAUDIT_REQUIRE_NATIVE=1, but the native extension is {missing}")


@pytest.fixture
def native_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native engine on for this test, whatever NSYSAUDIT_NATIVE the run has (CI runs once with 0)."""
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "1")


# Tests of the native engine itself: run with it on; skipped only where it is not built and the
# run does not require it (outside make test and CI).
NEEDS_NATIVE = [
    pytest.mark.skipif(native.installed() is not None, reason=f"the native extension is {native.installed()}"),
    pytest.mark.usefixtures("native_on"),
]


def needs_native(test: Callable[..., object]) -> Callable[..., object]:
    for mark in reversed(NEEDS_NATIVE):
        test = mark(test)
    return test


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


@functools.cache
def _nobody_runs_nsysaudit(setpriv: str) -> bool:
    """Whether ``nobody`` can import nsysaudit here: not from a checkout (or venv) under a 0700
    folder, such as the one ``mktemp -d`` makes."""
    command = [setpriv, *NOBODY, sys.executable, "-c", "import nsysaudit.cli"]
    return subprocess.run(command, capture_output=True, check=False).returncode == 0


NOBODY = ["--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture
def read_only_folder() -> Iterator[tuple[Path, list[str]]]:
    """A folder a command cannot write into, and the command prefix under which that holds.

    As root (permissions do not apply), the command runs as ``nobody`` through ``setpriv`` in a
    root-owned 0755 folder; where nobody cannot read nsysaudit (a checkout under a 0700 folder), it
    runs as root in a folder made immutable (``chattr +i``: no entry can be made in it, by root
    either). Otherwise the folder is made read-only (0555).
    """
    base = Path(tempfile.mkdtemp(prefix="nsysaudit-ro-"))  # not under pytest's 0700 tmp folders
    base.chmod(0o755)
    locked = base / "read-only"
    locked.mkdir()
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
    env = {**os.environ, "NSYSAUDIT_CACHE": str(cache)}
    command = [*prefix, sys.executable, "-m", "nsysaudit", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, check=False)


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
