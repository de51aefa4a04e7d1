"""benchmarks/make_export.py's memory events: every successful cudaFree frees the oldest live
allocation of its thread, and analyze's device-memory ledger equals the plain SQL sums."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO

import nsysaudit

SCRIPT = REPO / "benchmarks" / "make_export.py"
ROWS = 30_000

# memory events with the thread of the call behind them (joined by correlationId), ranked per
# thread and operation in time order
EVENTS = """
    SELECT m.rowid AS id, m.start, m.globalPid, m.deviceId, m.address, m.bytes,
           m.memoryOperationType AS op, r.globalTid AS tid, s.value AS api, r.returnValue AS rv,
           r.start AS call_start, r.end AS call_end,
           row_number() OVER (PARTITION BY r.globalTid, m.memoryOperationType
                              ORDER BY m.start, m.rowid) AS k
    FROM CUDA_GPU_MEMORY_USAGE_EVENTS m
    JOIN CUPTI_ACTIVITY_KIND_RUNTIME r USING (correlationId)
    JOIN StringIds s ON s.id = r.nameId
"""
OK_FREES = """
    SELECT r.globalTid AS tid, r.start, r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r
    JOIN StringIds s ON s.id = r.nameId WHERE s.value = 'cudaFree_v3020' AND r.returnValue = 0
"""


def _q(path: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(sql, args).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bench-memory") / "observe.sqlite"
    proc = subprocess.run([sys.executable, str(SCRIPT), str(out), "--rows", str(ROWS), "--seed", "3"],
                          capture_output=True, text=True, check=True)
    return out, proc.stderr


def _events(path: Path) -> sqlite3.Connection:
    """A read-only connection with the temporary table ``ev`` (:data:`EVENTS`)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.execute(f"CREATE TEMP TABLE ev AS {EVENTS}")
    return con


def test_deallocations_free_the_oldest_live_allocation_of_the_thread(export: tuple[Path, str]) -> None:
    path, stderr = export
    counts = dict(_q(path, "SELECT memoryOperationType, count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS GROUP BY 1"))
    assert set(counts) == {0, 1}
    assert counts[0] > 0 and counts[1] > 0.5 * counts[0]
    assert f"memory_events={counts[0] + counts[1]} deallocation_events={counts[1]}" in stderr
    con = _events(path)
    assert con.execute("SELECT count(*) FROM ev").fetchone() == (counts[0] + counts[1],)
    # every deallocation: inside a successful cudaFree of its process, just after it starts
    assert con.execute("""SELECT count(*) FROM ev WHERE op = 1 AND (api <> 'cudaFree_v3020' OR rv <> 0
                          OR start <= call_start OR start >= call_end
                          OR globalPid <> (tid >> 24) << 24)""").fetchone() == (0,)
    # the k-th deallocation of a thread frees its k-th allocation (FIFO), made earlier, same size
    pairs = con.execute("""SELECT count(*), sum(a.id IS NOT NULL), sum(a.start < f.start), sum(a.bytes = f.bytes)
                           FROM ev f LEFT JOIN ev a ON a.op = 0 AND a.tid = f.tid AND a.k = f.k
                            AND a.globalPid = f.globalPid AND a.deviceId = f.deviceId
                            AND a.address = f.address
                           WHERE f.op = 1""").fetchall()
    assert pairs == [(counts[1], counts[1], counts[1], counts[1])]
    # a successful cudaFree frees nothing exactly when nothing of its thread is live
    frees = con.execute(f"""SELECT d.rowid IS NOT NULL,
                              (SELECT count(*) FROM ev WHERE ev.tid = c.tid AND ev.op = 0 AND ev.start < c.start),
                              (SELECT count(*) FROM ev WHERE ev.tid = c.tid AND ev.op = 1 AND ev.start < c.start)
                            FROM ({OK_FREES}) c LEFT JOIN CUDA_GPU_MEMORY_USAGE_EVENTS d
                              ON d.correlationId = c.correlationId AND d.memoryOperationType = 1""").fetchall()
    con.close()
    assert len(frees) >= counts[1]
    assert all(freed == (allocated > released) for freed, allocated, released in frees)
    assert any(not freed for freed, _, _ in frees)  # frees with nothing live exist
    # ... and what is freed was still live: at its address, events alternate allocation, deallocation
    assert _q(path, """SELECT count(*) FROM (
                         SELECT memoryOperationType op, lag(memoryOperationType) OVER w AS prev
                         FROM CUDA_GPU_MEMORY_USAGE_EVENTS
                         WINDOW w AS (PARTITION BY globalPid, deviceId, address ORDER BY start, rowid))
                       WHERE op = prev OR (prev IS NULL AND op = 1)""") == [(0,)]
    # every device used has its total
    devices = _q(path, "SELECT DISTINCT deviceId FROM CUDA_GPU_MEMORY_USAGE_EVENTS ORDER BY 1")
    assert _q(path, "SELECT id, name, totalMemory, vmId FROM TARGET_INFO_GPU ORDER BY id") == [
        (d, "NVIDIA H200", 150_109_880_320, 1 << 48) for (d,) in devices]


LIVE = """SELECT coalesce(sum(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END), 0),
                 coalesce(sum(CASE memoryOperationType WHEN 1 THEN bytes END), 0)
          FROM CUDA_GPU_MEMORY_USAGE_EVENTS
          WHERE deviceId = ?1 AND start <= ?2 AND (?3 IS NULL OR globalPid = ?3)"""


def test_ledger_equals_the_sql_sums(export: tuple[Path, str]) -> None:
    path, _ = export
    memory = nsysaudit.analyze(path).to_dict()["memory"]
    assert memory["ledger"] is True and memory["why_no_ledger"] is None
    assert memory["freed_never_allocated"] == {"events": 0, "bytes": 0}
    assert (memory["allocation_events"], memory["deallocation_events"]) == tuple(
        n for _, n in _q(path, "SELECT memoryOperationType, count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS GROUP BY 1"))
    findings = [p for p in memory["at"] if p["point"] == "finding"]
    assert len(findings) == 5
    end = 1 << 62
    for point in memory["at"]:
        gpid = (1 << 48) | (point["pid"] << 24)
        [dev] = point["devices"]
        assert dev["process_has_events"]
        device, t = dev["device_id"], point["t_ns"]
        live, freed = _q(path, LIVE, device, t, None)[0]
        assert live > 0
        assert (dev["device_resident_live_bytes"], dev["freed_before_bytes"]) == (live, freed)
        assert dev["process_live_bytes"] == _q(path, LIVE, device, t, gpid)[0][0]
        assert dev["free_at_most_bytes"] == 150_109_880_320 - live
    for dev in memory["devices"]:
        live, freed = _q(path, LIVE, dev["device_id"], end, None)[0]
        assert (dev["live_bytes_at_end"], dev["freed_bytes"]) == (live, freed)
        for proc in dev["processes"]:
            assert proc["live_bytes_at_end"] == _q(path, LIVE, dev["device_id"], end, proc["global_pid"])[0][0]


def test_without_deallocations_the_ledger_holds_every_allocation(export: tuple[Path, str], tmp_path: Path) -> None:
    """The same export with its deallocation events deleted: nothing was freed, which is evidence, not
    a gap, so the ledger is claimed and holds every allocation made up to each moment."""
    path, _ = export
    off = tmp_path / "off.sqlite"
    shutil.copy(path, off)
    con = sqlite3.connect(off)
    con.execute("DELETE FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memoryOperationType = 1")
    con.commit()
    con.close()
    memory = nsysaudit.analyze(off).to_dict()["memory"]
    assert memory["ledger"] is True and memory["deallocation_events"] == 0
    assert len(memory["at"]) >= 5
    for point in memory["at"]:
        [dev] = point["devices"]
        live, freed = _q(off, LIVE, dev["device_id"], point["t_ns"], None)[0]
        assert (dev["device_resident_live_bytes"], freed) == (live, 0)
        if live <= 150_109_880_320:
            assert dev["free_at_most_bytes"] == 150_109_880_320 - live
        else:  # the generator's sizes outgrow the device once nothing is freed: no bound is claimed
            assert dev["free_at_most_bytes"] is None and "exceed the device's total" in dev["bound_unknown"]
