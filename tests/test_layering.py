"""The package's layers, and a check that data flows one way: no module imports from a layer above it.

Read from the bottom up (docs/layout.md, "How the code is laid out"):

0. shared modules: errors, ids, intervals, joins, codes, text, canonical, digests, paths, progress, _version, _lazy
1. ``read/``: open an export read-only, probe it, scan it, load frames, nsys's diagnostics, telemetry
2. ``analysis/``: pure functions on frames: coverage, findings, failed calls, verdict, alignment
3. ``reports/``: one document per analysis or comparison, built once
4. ``render/``: a document in, text or bytes out (the only rich code)
5. ``api``: ``analyze(path)`` = read, then analysis, then report; ``session``: the notebook API
   (``open(path)``: one export read once, lazy frames, ``analyze()``)
6. ``seal/``: sealed folders (write, manifests, verify, re-run recipe)
7. workflows over many inputs: ``batch`` (``audit``), ``fleet`` (``batch`` command: parts, resumption,
   local or dask workers), ``check`` (expectations, JUnit)
8. the package's face (``nsysaudit/__init__.py``), ``cli.py`` (the only click code), ``__main__``

Imports are read from the source (``ast``), those inside functions too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nsysaudit"

LAYERS: dict[str, int] = {
    **{
        f"nsysaudit.{m}": 0
        for m in ("errors", "ids", "intervals", "joins", "codes", "text", "canonical", "digests", "paths", "progress",
                  "_version", "_lazy")
    },
    "nsysaudit.read": 1,
    "nsysaudit.analysis": 2,
    "nsysaudit.reports": 3,
    "nsysaudit.render": 4,
    "nsysaudit.api": 5,
    "nsysaudit.session": 5,
    "nsysaudit.seal": 6,
    "nsysaudit.batch": 7,
    "nsysaudit.fleet": 7,
    "nsysaudit.check": 7,
    "nsysaudit": 8,
    "nsysaudit.cli": 8,
    "nsysaudit.__main__": 8,
}
# Within the shared bottom layer the order still matters: a shared module may use only those below it.
SHARED_ORDER = ["errors", "_version", "_lazy", "codes", "text", "canonical", "digests", "paths", "progress", "ids",
                "intervals", "joins"]


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
    mine, my_prefix = layer_of(me)
    for line, target in imports(path):
        if target != "nsysaudit" and not target.startswith("nsysaudit."):
            continue
        theirs, their_prefix = layer_of(target)
        assert theirs <= mine, f"{me}:{line} imports {target} (layer {theirs}) from layer {mine}"
        if mine == theirs == 0 and my_prefix != their_prefix:
            a, b = my_prefix.split(".")[1], their_prefix.split(".")[1]
            assert SHARED_ORDER.index(b) < SHARED_ORDER.index(a), f"{me}:{line} imports {target}: shared order"


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
    allowed = {"nsysaudit", "nsysaudit.errors", "nsysaudit.render"}
    for line, target in imports(PACKAGE / "cli.py"):
        if target.startswith("nsysaudit"):
            assert target in allowed or target.startswith("nsysaudit.render."), (
                f"nsysaudit/cli.py:{line} imports {target}: the CLI calls the public API (nsysaudit) and renders"
            )
