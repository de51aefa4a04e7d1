"""Atomic folder renames: swap two folders, or move one into place only if nothing is there.

``os.rename`` can do neither for folders: it replaces an existing *empty* folder silently, and
replacing a non-empty one takes two renames (old aside, new in), so a kill between them leaves
neither. Linux has ``renameat2(2)`` with ``RENAME_EXCHANGE`` (swap both names in one step) and
``RENAME_NOREPLACE`` (fail with ``EEXIST`` rather than replace); it is called through ``ctypes``
(glibc 2.28+). Where it is missing (another OS, an old kernel or C library, a file system that
does not support the flag), these functions return False and the caller falls back to plain
renames, which :mod:`nsysaudit.seal` makes recoverable.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable
from pathlib import Path

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2
# What renameat2 answers when the call or the flag is not supported here.
_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP}


def _load() -> Callable[[int, bytes, int, bytes, int], int] | None:
    """libc's ``renameat2(olddirfd, oldpath, newdirfd, newpath, flags)``, or None where it is missing."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        func = libc.renameat2
    except (OSError, AttributeError):
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    func.restype = ctypes.c_int
    return func


_renameat2 = _load()


def _call(src: Path, dst: Path, flags: int) -> bool:
    if _renameat2 is None:
        return False
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in _UNSUPPORTED:
        return False
    raise OSError(code, os.strerror(code), os.fspath(dst))


def exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` atomically (both must exist); False where not supported."""
    return _call(a, b, _RENAME_EXCHANGE)


def rename_noreplace(src: Path, dst: Path) -> bool:
    """Rename ``src`` to ``dst`` atomically, raising ``FileExistsError`` if ``dst`` exists;
    False where not supported."""
    try:
        return _call(src, dst, _RENAME_NOREPLACE)
    except OSError as exc:
        if exc.errno == errno.EEXIST:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(dst)) from None
        raise
