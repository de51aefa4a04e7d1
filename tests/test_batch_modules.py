"""batch/ in three parts, each on its own: the run on top, its engines and its output below it, and
no part setting the state of an object another part owns (values are passed and returned)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BATCH = Path(__file__).resolve().parent.parent / "nsysaudit" / "batch"


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports (``from nsysaudit.batch import ranks``: ``nsysaudit.batch.ranks``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.module:
            package = n.module == "nsysaudit.batch"
            names |= {f"{n.module}.{a.name}" for a in n.names} if package else {n.module}
    return names


@pytest.mark.parametrize("part", ["workers", "output"])
def test_the_engines_and_the_output_are_below_the_run(part: str) -> None:
    # the engines stand alone; so does the output: the tables' columns are made from its own row types
    # (the device and rank columns too, which batch/ranks fills)
    assert {m for m in imported(BATCH / f"{part}.py") if m.startswith("nsysaudit.batch")} == set()


def test_the_run_is_built_on_its_engines_and_its_output() -> None:
    assert {"nsysaudit.batch.workers", "nsysaudit.batch.output"} <= imported(BATCH / "run.py")


@pytest.mark.parametrize("path", sorted(BATCH.glob("*.py")), ids=lambda p: p.name)
def test_no_batch_module_sets_an_attribute_of_another_object(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    stored = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            for sub in ast.walk(target):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store)
                        and isinstance(sub.value, ast.Name) and sub.value.id not in ("self", "cls")):
                    stored.append(f"{path.name}:{node.lineno}: {ast.unparse(target)}")
    assert stored == []
