"""A ``_name`` is private to its package: no module imports one from another package (what another
package needs gets a public name). Within a package the modules share them freely, though none does
now but ``read/native.py``, which loads the C extension ``read/_native``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nsysaudit"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str, path: Path | None = None) -> str:
    """The package a module is in (a package's ``__init__`` is in that package)."""
    if path is not None and path.name == "__init__.py":
        return module
    return module.rpartition(".")[0]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_a_private_name_of_another_package(path: Path) -> None:
    mine = package_of(module_name(path), path)
    tree = ast.parse(path.read_text(), filename=str(path))
    crossing = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.module is None or not node.module.startswith("nsysaudit"):
            continue
        module = node.module
        # from a package (its submodule, or a name of its __init__), or from a module of a package
        source = module if (PACKAGE.parent / module.replace(".", "/")).is_dir() else package_of(module)
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__") and source != mine:
                crossing.append(f"{module_name(path)}:{node.lineno} imports {alias.name} from {module}")
    assert crossing == []
