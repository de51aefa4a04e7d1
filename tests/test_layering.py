"""The package's layers, and a check that data flows one way: no module imports from a layer above it.

Read from the bottom up (docs/layout.md, "How the code is laid out"):

0. ``core/``: the shared pieces (errors, ids, codes, intervals, text, digests, paths, progress, lazy, reasons,
   files), and ``_version``
1. ``read/``: open an export read-only, probe it, scan it, load frames, nsys's diagnostics, telemetry
2. ``analysis/``: pure functions on frames: joins, coverage, findings, failed calls, verdict, alignment,
   ledger (``nsysaudit.joins`` re-exports ``analysis.joins`` for the design card)
3. ``reports/``: one document per analysis or comparison, built once
4. ``render/``: a document in, text or bytes out (the only rich code), canonical JSON
5. ``session``: ``open(path)`` (one export read once, lazy frames) and ``analyze(path)``, which is
   ``open(path).analyze()``
6. ``seal/``: sealed folders (write, manifests, verify, re-run recipe)
7. ``batch/``: workflows over many inputs: ``run`` (the ``batch`` command: discovery, the run),
   ``workers`` (local or dask engines), ``output`` (tables, resumable parts), ``check`` (expectations,
   JUnit), ``audit`` (deprecated)
8. the package's face (``nsysaudit/__init__.py``), ``cli.py`` (the only click code), ``__main__``

Imports are read from the source (``ast``), those inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nsysaudit"

LAYERS: dict[str, int] = {
    "nsysaudit.core": 0,
    "nsysaudit._version": 0,
    "nsysaudit.words": 0,
    "nsysaudit.read": 1,
    "nsysaudit.analysis": 2,
    "nsysaudit.joins": 2,
    "nsysaudit.reports": 3,
    "nsysaudit.render": 4,
    "nsysaudit.session": 5,
    "nsysaudit.seal": 6,
    "nsysaudit.batch": 7,
    "nsysaudit": 8,
    "nsysaudit.cli": 8,
    "nsysaudit.schemas": 8,
    "nsysaudit.__main__": 8,
}
# Within the bottom layer the order still matters: a core module may use only those before it.
CORE_ORDER = ["nsysaudit.core.errors", "nsysaudit.core.limits", "nsysaudit.core.shapes", "nsysaudit._version",
              "nsysaudit.core.lazy",
              "nsysaudit.core.defaults",
              "nsysaudit.core.files",
              "nsysaudit.core.codes", "nsysaudit.core.blocking", "nsysaudit.core.text", "nsysaudit.core.digests",
              "nsysaudit.core.paths",
              "nsysaudit.core.progress", "nsysaudit.core.ids", "nsysaudit.core.order", "nsysaudit.core.intervals",
              "nsysaudit.core.reasons",
              "nsysaudit.core",
              "nsysaudit.words"]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> tuple[int, str]:
    """The layer of a module: the longest prefix in LAYERS."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in LAYERS:
            return LAYERS[prefix], prefix
    raise AssertionError(f"{module} is in no layer: add it to LAYERS (and to docs/layout.md)")


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, resolved to absolute module names."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            if base == "nsysaudit":  # from nsysaudit import x: x may be a module
                out += [(node.lineno, f"nsysaudit.{alias.name}") for alias in node.names]
            else:
                out.append((node.lineno, base))
    return out


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    for path in MODULES:
        layer_of(module_name(path))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_module_imports_from_a_layer_above_it(path: Path) -> None:
    me = module_name(path)
    mine = layer_of(me)[0]
    for line, target in imports(path):
        if target != "nsysaudit" and not target.startswith("nsysaudit."):
            continue
        theirs = layer_of(target)[0]
        assert theirs <= mine, f"{me}:{line} imports {target} (layer {theirs}) from layer {mine}"
        if mine == theirs == 0 and me != target and me in CORE_ORDER and target in CORE_ORDER:
            assert CORE_ORDER.index(target) < CORE_ORDER.index(me), f"{me}:{line} imports {target}: core order"


def test_every_core_module_has_a_place_in_the_core_order() -> None:
    for path in MODULES:
        me = module_name(path)
        if layer_of(me)[0] == 0:
            assert me in CORE_ORDER, f"{me} is in core/ but not in CORE_ORDER"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_click_only_in_the_cli_and_rich_only_in_render(path: Path) -> None:
    me = module_name(path)
    for line, target in imports(path):
        root = target.split(".")[0]
        if root == "click":
            assert me == "nsysaudit.cli", f"{me}:{line} imports click: only nsysaudit/cli.py may"
        if root == "rich":
            assert me.startswith("nsysaudit.render"), f"{me}:{line} imports rich: only nsysaudit/render/ may"


def test_the_cli_uses_only_the_public_api_and_the_renderers() -> None:
    allowed = {"nsysaudit", "nsysaudit.core.errors", "nsysaudit.render"}
    for line, target in imports(PACKAGE / "cli.py"):
        if target.startswith("nsysaudit"):
            assert target in allowed or target.startswith("nsysaudit.render."), (
                f"nsysaudit/cli.py:{line} imports {target}: the CLI calls the public API (nsysaudit) and renders"
            )
