"""Locate the real NVIDIA Nsight Systems CLI (`nsys`) for tests that need it.

`scripts/install-nsys.sh` installs it into `<repo>/.tools/nsys` (or `$NSYSAUDIT_TOOLS`).
Tests that need it are marked `@requires_nsys` and skip when it is absent.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_NSYS = REPO_ROOT / ".tools" / "nsys" / "target-linux-x64" / "nsys"


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


requires_nsys = pytest.mark.skipif(
    find_nsys() is None,
    reason="real nsys CLI not installed: run `make nsys` (scripts/install-nsys.sh)",
)
