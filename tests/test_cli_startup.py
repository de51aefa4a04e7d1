"""Small exports start fast: a command imports only what it needs.

Checked by which modules a fresh process has loaded, not by timing (benchmarks/run.py times it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OBSERVE = ROOT / "tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite"
HEAVY = ("rich", "sqlite_utils", "numpy", "pyarrow", "adbc_driver_sqlite", "matplotlib", "dask", "markdown_it",
         "nsysaudit.seal", "nsysaudit.batch")  # nsysaudit.session holds analyze(): every analysis loads it


def loaded_after(code: str) -> set[str]:
    probe = (
        "import sys, io, json, contextlib\n"
        f"{code}\n"
        "sys.__stdout__.write(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m in HEAVY or m.startswith(HEAVY))


def test_importing_the_package_loads_nothing_heavy() -> None:
    modules = loaded_after("import nsysaudit")
    assert "polars" not in modules
    assert heavy(modules) == []


def loaded_by(args: list[str]) -> set[str]:
    """The modules a fresh process has loaded after the command line ran ``args`` (exit 0)."""
    return loaded_after(
        "from nsysaudit.cli import main\n"
        "with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())):\n"
        "    try:\n"
        f"        rc = main({args!r})\n"
        "    except SystemExit as exc:\n"
        "        rc = exc.code\n"
        "assert rc == 0, rc\n"
    )


@pytest.mark.parametrize("args", [["analyze", str(OBSERVE), "--json"], ["--version"]])
def test_json_analysis_of_a_small_export_loads_only_what_it_uses(args: list[str]) -> None:
    assert heavy(loaded_by(args)) == []


def test_an_export_loads_nothing_only_other_inputs_need() -> None:
    """An export (.sqlite) is read as it is: the ``nsys export`` of a report and its cache
    (nsysaudit.read.nsys, nsysaudit.read.cache) are loaded only for an .nsys-rep, ``statistics`` only
    to align telemetry, ``html`` only for a notebook's view of a session (or a report.html)."""
    modules = loaded_by(["analyze", str(OBSERVE), "--json"])
    assert "nsysaudit.session" in modules
    assert {"nsysaudit.read.nsys", "nsysaudit.read.cache", "statistics", "html"}.isdisjoint(modules)


def test_the_console_script_exits_without_walking_what_lives_until_the_exit() -> None:
    """Once the command is done, ``run()`` moves what is alive out of the collector's reach
    (``gc.freeze``: the interpreter's last collections skip it); the document is whole and atexit's
    handlers (temporary folders) still run."""
    code = (
        "import atexit, gc, sys\n"
        "sys.argv = ['nsysaudit', 'analyze', sys.argv[1], '--json']\n"
        "atexit.register(lambda: sys.stderr.write(f'frozen {gc.get_freeze_count()}'))\n"
        "from nsysaudit.__main__ import run\n"
        "run()\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(OBSERVE)], cwd=ROOT, capture_output=True, check=True)
    assert json.loads(out.stdout)["schema"]["kind"] == "analysis"
    frozen = out.stderr.decode().split()
    assert frozen[0] == "frozen" and int(frozen[1]) > 10_000, frozen


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["analyze", "--help"], ["verify", "--help"]])
def test_the_command_line_starts_without_polars(args: list[str]) -> None:
    """Polars is imported when an export is read, not before: the command line, its help (and the
    defaults it shows, nsysaudit/core/defaults.py) and its version need none of it."""
    modules = loaded_by(args)
    assert "polars" not in modules and "nsysaudit.session" not in modules, sorted(m for m in modules if "polars" in m)


def test_the_defaults_the_help_shows_are_the_ones_the_analysis_uses() -> None:
    from nsysaudit.analysis import joins
    from nsysaudit.core import defaults
    from nsysaudit.read import trace
    from nsysaudit.reports import timeline

    assert joins.DEFAULT_MAX_PAIRS is defaults.DEFAULT_MAX_PAIRS
    assert trace.DEFAULT_LIBRARY_DOMAINS is defaults.DEFAULT_LIBRARY_DOMAINS
    assert timeline.DEFAULT_BOUNDARY is defaults.DEFAULT_BOUNDARY


def test_terminal_output_loads_rich_and_the_package_face_resolves_every_name() -> None:
    import nsysaudit

    modules = loaded_after(
        "from nsysaudit.cli import main\n"
        "with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())):\n"
        f"    main(['analyze', {str(OBSERVE)!r}])\n"
    )
    assert "rich" in modules  # the test above would pass if nothing loaded at all
    for name in nsysaudit.__all__:
        assert getattr(nsysaudit, name) is not None, name
    assert set(dir(nsysaudit)) >= set(nsysaudit.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        nsysaudit.nope  # noqa: B018


def after_the_console_script(name: str, preset: str | None, shown: str) -> str:
    """The value of the expression ``shown`` once the console script has analyzed the torch export
    --json in a fresh process whose environment holds ``name`` only as ``preset`` (None: not at all)."""
    env = {k: v for k, v in os.environ.items() if k != name}
    if preset is not None:
        env[name] = preset
    code = (
        "import os, sys\n"
        "sys.argv = ['nsysaudit', 'analyze', sys.argv[1], '--json']\n"
        "import nsysaudit.__main__ as entry\n"
        "try:\n"
        "    entry.run()\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'polars' in sys.modules\n"
        "import polars\n"
        f"sys.stderr.write({shown})\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(OBSERVE)], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True)
    return out.stderr.strip()


@pytest.mark.parametrize("preset", [None, "narenas:2"])
def test_the_cli_asks_jemalloc_to_return_freed_memory_unless_the_user_said(preset: str | None) -> None:
    """polars puts its own settings first and appends ``_RJEM_MALLOC_CONF`` (jemalloc reads left to
    right, a later value wins): the CLI's, or the user's untouched."""
    conf = after_the_console_script("_RJEM_MALLOC_CONF", preset, "os.environ['_RJEM_MALLOC_CONF']").split(",")
    if preset is None:
        assert conf[-2:] == ["dirty_decay_ms:200", "muzzy_decay_ms:0"], conf
    else:
        assert conf[-1] == preset and "dirty_decay_ms:200" not in conf, conf


@pytest.mark.parametrize("preset", [None, "streaming"])
def test_the_cli_gives_polars_lazy_queries_the_in_memory_engine_unless_the_user_said(preset: str | None) -> None:
    """The console script's lazy queries run on polars' in-memory engine (its streaming engine took
    2-3x as long on the analysis's few-row queries); a POLARS_ENGINE_AFFINITY the user set is kept."""
    said = after_the_console_script(
        "POLARS_ENGINE_AFFINITY", preset, "polars.Config.state(if_set=True).get('POLARS_ENGINE_AFFINITY') or 'unset'")
    assert said == (preset or "in-memory"), said


TORCH_DIR = OBSERVE.parent


def drawing(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in ("matplotlib", "PIL"))


@pytest.mark.parametrize("args", [
    ["analyze", str(OBSERVE)],
    ["analyze", str(OBSERVE), "--details"],
    ["check", str(TORCH_DIR), "--expect", str(ROOT / "tests/fixtures/expectations.toml"), "--only-matching"],
    ["batch", str(OBSERVE), "--out", "{tmp}/audit", "--jobs", "1"],
    ["batch", str(OBSERVE), "--out", "{tmp}/audit.csv", "--jobs", "1"],
    ["schema", "batch-finding"],
], ids=["analyze", "details", "check", "batch", "batch-csv", "schema"])
def test_matplotlib_is_imported_only_when_a_picture_is_drawn(args: list[str], tmp_path: Path) -> None:
    """matplotlib (and Pillow, through it) is a dependency for the pictures alone: a command that draws
    none never imports it (``python -X importtime -m nsysaudit ...`` shows the same)."""
    assert drawing(loaded_by([a.format(tmp=tmp_path) for a in args])) == []


def test_a_picture_imports_matplotlib(tmp_path: Path) -> None:
    """The test above would pass if nothing loaded at all: drawing does load it."""
    assert "matplotlib" in drawing(loaded_by(["plot", str(OBSERVE), "--out", str(tmp_path / "t.svg")]))


def test_the_package_face_lists_each_public_name_once_as_an_import() -> None:
    """``nsysaudit/__init__.py``'s imports are the one list of public names: each ``from MODULE import
    NAME as NAME`` is what ``__all__`` and the first-use import read, none written another way."""
    import ast

    import nsysaudit

    face = ROOT / "nsysaudit" / "__init__.py"
    imported = {
        alias.asname or alias.name: node.module
        for node in ast.walk(ast.parse(face.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("nsysaudit")
        for alias in node.names
        if alias.name not in ("declared_homes", "lazy_attributes")
    }
    assert imported == nsysaudit._HOMES
    assert nsysaudit.__all__ == sorted(imported)
    for name, module in imported.items():  # each from the module that defines it, not a re-export
        assert getattr(getattr(nsysaudit, name), "__module__", module) == module, name
