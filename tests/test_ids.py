"""globalTid / globalPid are decoded in core/ids only, the same way for a frame, a value and SQL."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from nsysaudit.core.ids import (
    decode_pid,
    decode_tid,
    decode_vm,
    global_pid,
    gpid_of,
    pid_bits,
    pid_of,
    tid_bits,
    vm_of,
    vm_sql,
)

PACKAGE = Path(__file__).resolve().parent.parent / "nsysaudit"
# 24-bit fields and the VM's 48-bit shift, in every spelling seen before core/ids held them all.
BY_HAND = re.compile(r">>\s*(24|48)\b|<<\s*(24|48)\b|0x[fF]{6}\b|\b16777216\b|\b281474976710656\b")
IDS = [0, 720, (683 << 24) | 720, (1 << 48) | (683 << 24) | 720, (3 << 48) | (0xFFFFFF << 24) | 0xFFFFFF,
       -1, -(1 << 24) - 3, -((2 << 48) | (7 << 24) | 9)]


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_but_core_ids_decodes_an_id_by_hand(path: Path) -> None:
    if path == PACKAGE / "core" / "ids.py":
        return
    found = [f"{path.name}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
             if BY_HAND.search(line)]
    assert found == []


def test_the_expressions_read_the_same_bits_as_the_values() -> None:
    frame = pl.DataFrame({"g": IDS}, schema={"g": pl.Int64}).select(
        decode_pid(pl.col("g")).alias("pid"), decode_tid(pl.col("g")).alias("tid"),
        global_pid(pl.col("g")).alias("gpid"), decode_vm(pl.col("g")).alias("vm"),
    )
    assert frame["pid"].to_list() == [pid_bits(g) for g in IDS] == [(g >> 24) & 0xFFFFFF for g in IDS]
    assert frame["tid"].to_list() == [tid_bits(g) for g in IDS] == [g & 0xFFFFFF for g in IDS]
    assert frame["gpid"].to_list() == [gpid_of(g) for g in IDS] == [g - g % (1 << 24) for g in IDS]
    assert frame["vm"].to_list() == [vm_of(g) for g in IDS] == [g // (1 << 48) for g in IDS]


def test_a_negative_session_id_has_no_pid_and_none_stays_none() -> None:
    assert [pid_of(g) for g in (-1, None, (1 << 48) | (683 << 24) | 720)] == [None, None, 683]
    assert gpid_of(None) is None


def test_the_sql_form_is_sqlites_integer_division() -> None:
    with sqlite3.connect(":memory:") as conn:
        got = conn.execute(f"SELECT {vm_sql('v')} FROM (SELECT ? AS v UNION ALL SELECT ?)", (3 << 48, 0)).fetchall()
    assert vm_sql("vmId") == "vmId / 281474976710656" and got == [(3,), (0,)]
