"""nsys's serialized global ids: ``globalTid`` = VM id (bits 48+) | PID << 24 | TID, ``globalPid`` the same
with the TID bits cleared. Decoded here only, for frames (polars expressions) and for single values.

>>> g = (1 << 48) | (683 << 24) | 720
>>> pid_of(g), tid_of(g), gpid_of(g) == (1 << 48) | (683 << 24)
(683, 720, True)
"""

from __future__ import annotations

import polars as pl

_ID = 1 << 24


def decode_pid(gtid: pl.Expr) -> pl.Expr:
    """PID from a serialized globalTid/globalPid: ``(g >> 24) & 0xFFFFFF``."""
    return (gtid // _ID) % _ID


def decode_tid(gtid: pl.Expr) -> pl.Expr:
    """TID from a serialized globalTid: ``g & 0xFFFFFF``."""
    return gtid % _ID


def global_pid(gtid: pl.Expr) -> pl.Expr:
    """The globalPid part of a globalTid (VM and PID bits, TID bits cleared)."""
    return gtid - (gtid % _ID)


def pid_of(g: int | None) -> int | None:
    """PID of one globalTid/globalPid; None for None and for nsys's negative session-level ids."""
    return None if g is None or g < 0 else (g >> 24) & 0xFFFFFF


def tid_of(g: int | None) -> int | None:
    """TID of one globalTid; None for None."""
    return None if g is None or g < 0 else g & 0xFFFFFF


def gpid_of(g: int | None) -> int | None:
    """globalPid of one globalTid; None for None."""
    return None if g is None else g - g % _ID
