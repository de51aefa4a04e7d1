"""nsys's serialized global ids: ``globalTid`` = VM id (bits 48+) | PID << 24 | TID, ``globalPid`` the same
with the TID bits cleared. Decoded here only: for frames (polars expressions), for single values and
for SQL (the C scan computes a row's globalPid itself, ``native/scan.c``, the same way).

>>> g = (1 << 48) | (683 << 24) | 720
>>> pid_of(g), tid_bits(g), gpid_of(g) == (1 << 48) | (683 << 24)
(683, 720, True)

The expressions and :func:`pid_bits` / :func:`tid_bits` read the bits of any value, a negative one
too (floor division, as Python's ``>>`` and ``&``); :func:`pid_of` says None for nsys's
negative session-level ids.
"""

from __future__ import annotations

import polars as pl

_ID = 1 << 24
_VM = 1 << 48


def decode_pid(gtid: pl.Expr) -> pl.Expr:
    """PID from a serialized globalTid/globalPid: ``(g >> 24) & 0xFFFFFF``."""
    return (gtid // _ID) % _ID


def decode_tid(gtid: pl.Expr) -> pl.Expr:
    """TID from a serialized globalTid: ``g & 0xFFFFFF``."""
    return gtid % _ID


def global_pid(gtid: pl.Expr) -> pl.Expr:
    """The globalPid part of a globalTid (VM and PID bits, TID bits cleared)."""
    return gtid - (gtid % _ID)


def decode_vm(gid: pl.Expr) -> pl.Expr:
    """The VM id of a globalTid/globalPid: ``g >> 48``."""
    return gid // _VM


def vm_sql(column: str) -> str:
    """SQL for the VM id of a serialized id column (``TARGET_INFO_GPU.vmId``): SQLite's integer division."""
    return f"{column} / {_VM}"


def thread_ids_of(gpid: int) -> tuple[int, int]:
    """``[lo, hi)``: the globalTids of process ``gpid``'s threads (its globalPid plus any TID bits)."""
    return gpid, gpid + _ID


def pid_bits(g: int) -> int:
    """PID bits of one globalTid/globalPid, as :func:`decode_pid` reads them: ``(g >> 24) & 0xFFFFFF``."""
    return (g >> 24) & 0xFFFFFF


def tid_bits(g: int) -> int:
    """TID bits of one globalTid, as :func:`decode_tid` reads them: ``g & 0xFFFFFF``."""
    return g & 0xFFFFFF


def pid_of(g: int | None) -> int | None:
    """PID of one globalTid/globalPid; None for None and for nsys's negative session-level ids."""
    return None if g is None or g < 0 else pid_bits(g)


def vm_of(g: int) -> int:
    """VM id of one globalTid/globalPid, as :func:`decode_vm` reads it: ``g >> 48``."""
    return g >> 48


def gpid_of(g: int | None) -> int | None:
    """globalPid of one globalTid; None for None."""
    return None if g is None else g - g % _ID
