"""The one way nsysaudit writes a file: atomically, so that a reader (or a kill) sees the old file
or the new one, never half of one.

The bytes go to a temporary file beside the target (``.NAME.<12 hex>.tmp``, the same folder so the
rename cannot cross file systems), are flushed to the disk, then renamed over the target; on any
failure, an interrupt too, the temporary file is removed and the exception propagates (each caller
turns an ``OSError`` into its own one-line error). Folders are swapped by :mod:`nsysaudit.seal.fsops`.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as d:
...     target = pathlib.Path(d) / "report.json"
...     write_atomic(target, b"{}\\n")
...     write_with(target, lambda f: f.write(b"[]\\n"))
...     target.read_bytes(), sorted(p.name for p in pathlib.Path(d).iterdir())
(b'[]\\n', ['report.json'])
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def temporary_name(target: Path) -> Path:
    """Where :func:`write_atomic` writes before the rename: ``.NAME.<12 hex>.tmp`` beside ``target``."""
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")


def write_with(target: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> None:
    """Write ``target`` atomically with ``write(handle)`` (a binary file opened for the temporary
    name): for output streamed by a library (parquet, CSV)."""
    final = Path(target)
    tmp = temporary_name(final)
    try:
        with open(tmp, "xb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    except BaseException:
        with contextlib.suppress(OSError):  # the write's own error says more
            tmp.unlink(missing_ok=True)
        raise


def write_atomic(target: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``target`` atomically (see the module's docstring)."""
    write_with(target, lambda handle: handle.write(data))
