"""The code is read as named steps: no function of the package is over 80 lines (issues 25 and 35).
A long function is split where its steps are, each with its inputs and outputs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nsysaudit"
MAX_LINES = 80
PATHS = sorted(PACKAGE.rglob("*.py"))


def lengths(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        f"{node.name}:{node.lineno}": (node.end_lineno or node.lineno) - node.lineno + 1
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }


@pytest.mark.parametrize("path", PATHS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_function_over_80_lines(path: Path) -> None:
    long = {f: n for f, n in lengths(path).items() if n > MAX_LINES}
    assert long == {}, f"{path.relative_to(PACKAGE)}: functions of more than {MAX_LINES} lines (name:line: lines)"


def test_the_test_sees_a_long_function(tmp_path: Path) -> None:
    long = tmp_path / "long.py"
    long.write_text("def f():\n" + "    x = 1\n" * MAX_LINES)
    assert lengths(long) == {"f:1": MAX_LINES + 1}
