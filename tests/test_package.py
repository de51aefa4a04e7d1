"""The package as pip builds it: the wheel carries the native extension (and is tagged for the
platform); where no C compiler can build it, the wheel still builds, installs and analyzes, on the
pure engines, and its reports say why."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from conftest import H200_2025, REPO

TORCH = H200_2025 / "torch" / "observe.sqlite"

pytestmark = pytest.mark.slow  # pip builds the wheel (and the C extension) in each test


def build_wheel(tmp: Path, **env: str) -> Path:
    """``pip wheel .`` of a clean copy of this checkout's sources (nothing built before; no build
    isolation: the venv's own setuptools, no network)."""
    source = tmp / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, source / name)
    for folder in ("native", "nsysaudit"):
        shutil.copytree(REPO / folder, source / folder, ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.pyc"))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "wheels"), "."],
        capture_output=True, text=True, env={**os.environ, **env}, cwd=source, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = (tmp / "wheels").glob("nsysaudit-*.whl")
    return wheel


def run_from(wheel: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` importing nsysaudit from the unpacked wheel alone (``-S``: not the checkout's
    editable install), its dependencies from this venv."""
    unpacked = tmp / "unpacked"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(unpacked)
    path = os.pathsep.join([str(unpacked), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    env = {**os.environ, "PYTHONPATH": path, "NSYSAUDIT_CACHE": str(tmp / "cache")}
    env.pop("NSYSAUDIT_NATIVE", None)
    return subprocess.run([sys.executable, "-S", *args], capture_output=True, text=True, env=env, cwd=tmp, check=False)


WHERE = "import nsysaudit.read.native as n; print(n.__file__); print(n.unavailable())"


@pytest.mark.skipif(sys.platform != "linux", reason="the platform tag and the C compiler's name are Linux's")
def test_the_wheel_carries_the_native_extension(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    assert not wheel.name.endswith("py3-none-any.whl") and "linux" in wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("nsysaudit/read/_native.") and n.endswith(".so") for n in names), names
    assert "nsysaudit/read/_native.pyi" in names and "nsysaudit/py.typed" in names
    assert {n for n in names if n.endswith(".schema.json")} == {  # the published JSON Schemas ship too
        f"nsysaudit/schemas/{p.name}" for p in (REPO / "nsysaudit" / "schemas").glob("*.schema.json")
    }
    proc = run_from(wheel, tmp_path, "-c", WHERE)
    assert proc.returncode == 0, proc.stderr
    where, why = proc.stdout.splitlines()
    assert where.startswith(str(tmp_path / "unpacked")) and why == "None"
    proc = run_from(wheel, tmp_path, "-m", "nsysaudit", "schema", "analysis")
    assert proc.returncode == 0 and proc.stdout == (REPO / "nsysaudit/schemas/analysis.schema.json").read_text()


@pytest.mark.skipif(sys.platform != "linux", reason="the platform tag and the C compiler's name are Linux's")
def test_without_a_compiler_the_wheel_installs_and_runs_on_the_pure_engines(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path, CC=str(tmp_path / "no-such-cc"))
    assert not any("_native." in n and n.endswith(".so") for n in zipfile.ZipFile(wheel).namelist())
    proc = run_from(wheel, tmp_path, "-c", WHERE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "not built (nsysaudit was installed without a C compiler or SQLite's header)"
    proc = run_from(wheel, tmp_path, "-m", "nsysaudit", "analyze", str(TORCH))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    said = [line for line in proc.stdout.splitlines() if "engine" in line]
    assert len(said) == 1 and said[0].endswith("(native engine not built)"), said
    assert "\nfailure_found: " in proc.stdout  # the answer, first
