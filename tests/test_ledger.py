"""The device-memory ledger (issue 13): live bytes per device and process, and the bound on free memory.

Numbers on the real captures are checked against plain SQL sums over CUDA_GPU_MEMORY_USAGE_EVENTS.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, LibCall, MemoryEvent, strip_not_null
from conftest import H200_2025

import nsysaudit
import nsysaudit.render
from nsysaudit.analysis.ledger import build_ledger
from nsysaudit.read.memory import DEVICE_SCHEMA, EVENT_SCHEMA, MemoryEvidence
from nsysaudit.read.memory import MEM_KINDS_FALLBACK as MEM_KINDS

TORCH, CAPI = H200_2025 / "torch", H200_2025 / "capi"
GPU = (0, "Test GPU", 10_000_000)
DEVICE = 2  # memKind Device


def sql1(path: Path, query: str, *params: Any) -> Any:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, params).fetchone()[0]
    finally:
        con.close()


def memory(path: Path, telemetry: Path | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = nsysaudit.analyze(path, telemetry=telemetry).to_dict()["memory"]
    return doc


# --- the real torch pair ---------------------------------------------------------------------------


def test_observe_ledger_at_the_failure_matches_plain_sql() -> None:
    path = TORCH / "observe.sqlite"
    m = memory(path)
    assert m["ledger"] is True and m["collected"] is True
    [dev] = m["devices"]
    assert (dev["name"], dev["total_bytes"]) == ("NVIDIA H200", 150_109_880_320)
    assert dev["allocated_bytes_by_kind"]["Device"] == 149_428_635_648 == sql1(
        path, "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memKind = 2 AND memoryOperationType = 0"
    )
    [point] = [p for p in m["at"] if p["point"] == "finding"]
    t = point["t_ns"]
    allocated = sql1(path, "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memoryOperationType = 0 "
                           "AND start <= ?", t)
    freed = sql1(path, "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memoryOperationType = 1 "
                       "AND start <= ?", t)
    total = sql1(path, "SELECT totalMemory FROM TARGET_INFO_GPU WHERE id = 0")
    [at] = point["devices"]
    assert freed == at["freed_before_bytes"] == 16_777_216
    assert at["device_resident_live_bytes"] == allocated - freed == 149_412_081_522
    assert at["free_at_most_bytes"] == total - (allocated - freed) == 697_798_798  # ~666 MiB
    assert at["process_live_bytes"] == at["device_resident_live_bytes"]  # one process on the GPU


def test_allocation_events_are_matched_to_their_call_and_driver_memory_is_its_own_line() -> None:
    path = TORCH / "observe.sqlite"
    [dev] = memory(path)["devices"]
    [proc] = dev["processes"]
    by_call = {(c["call"], c["api"]): (c["events"], c["bytes"]) for c in proc["allocations_by_call"]}
    matched = sql1(
        path,
        "SELECT count(*) || ' ' || sum(m.bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS m JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
        "ON r.correlationId = m.correlationId AND (r.globalTid >> 24) = (m.globalPid >> 24) "
        "WHERE m.memoryOperationType = 0 AND r.nameId IN (SELECT id FROM StringIds WHERE value = 'cudaMalloc_v3020')",
    )
    driver = sql1(path, "SELECT count(*) || ' ' || sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                        "WHERE memoryOperationType = 0 AND correlationId = 0")
    assert by_call == {
        ("matched", "cudaMalloc_v3020"): tuple(int(x) for x in matched.split()),
        ("driver", None): tuple(int(x) for x in driver.split()),
    }
    assert by_call[("matched", "cudaMalloc_v3020")] == (32, 149_428_635_648)  # the numbers


def test_observe_ledger_at_the_telemetry_handoff(capsys) -> None:
    m = memory(TORCH / "observe.sqlite", TORCH / "observe.telemetry.jsonl")
    handoff = next(p for p in m["at"] if p["point"] == "telemetry" and p["label"] == "handoff")
    [at] = handoff["devices"]
    # The telemetry's own reading at the handoff was 17,891,328 B physically free: the ledger's
    # bound (what the trace can prove) is larger, by the contexts and memory no event records.
    assert at["free_at_most_bytes"] == 697_931_947 > 17_891_328


def test_release_frees_the_cache_before_the_workers_cublas_create() -> None:
    path = TORCH / "release.sqlite"
    m = memory(path, TORCH / "release.telemetry.jsonl")
    assert m["deallocation_events"] == 19
    assert m["devices"][0]["freed_bytes"] == 148_721_631_232 == sql1(
        path, "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memoryOperationType = 1"
    )
    release = next(p for p in m["at"] if p["label"] == "cache_release")
    [at] = release["devices"]
    assert at["freed_before_bytes"] == 148_721_631_232
    assert at["device_resident_live_bytes"] < 1_000_000_000


def test_compare_shows_both_arms_headroom_side_by_side() -> None:
    arms = [nsysaudit.analyze(TORCH / f"{a}.sqlite", telemetry=TORCH / f"{a}.telemetry.jsonl")
            for a in ("observe", "release")]
    doc = nsysaudit.compare_results(*arms).to_dict()
    [pair] = [p for p in doc["differences"]["library_calls"] if p["match_key"]["thread_role"] == "other"]
    observe, release = (pair[n]["memory_at_start"][0] for n in ("observe", "release"))
    assert observe["free_at_most_bytes"] < 1_000_000_000 < release["free_at_most_bytes"]
    assert release["freed_before_bytes"] == 148_721_631_232
    said = [s for s in pair["statements"] if "at cublasCreate_v2's start" in s]
    assert said[0].startswith("observe: at cublasCreate_v2's start, device 0: live 149,411,949,426 B (139.2 GiB)")
    assert "at most 697,930,894 B (665.6 MiB) free" in said[0]
    assert "after 148,721,631,232 B (138.5 GiB) released" in said[1]
    assert any(s.startswith("observe: at the handoff") for s in doc["differences"]["memory"]["statements"])


def test_allocation_records_only_claim_no_ledger_only_totals() -> None:
    m = memory(CAPI / "observe.sqlite")  # 24 allocations, no deallocation event in the export
    assert m["ledger"] is False and "allocation events only" in m["why_no_ledger"]
    assert m["at"] == []
    assert m["devices"][0]["allocated_bytes"] == 149_524_840_448
    assert "free_at_most_bytes" not in str(m["devices"])


def test_the_series_is_a_polars_frame_with_each_events_call() -> None:
    series = nsysaudit.analyze(TORCH / "release.sqlite").frames["memory_series"]
    frees = series.filter(series["operation"] == "deallocation")
    assert frees.height == 19 and set(frees["api"].to_list()) == {"cudaFree_v3020"}
    module = series.filter(series["correlation_id"] == 0)
    assert module.height == 709 and module["api"].null_count() == 709  # driver memory: no API call
    assert set(module["kind"].to_list()) == {"Device Static"}


# --- builder scenarios --------------------------------------------------------------------------------


def scenario(*events: MemoryEvent, calls: list[Call] | None = None, gpus: list[Any] | None = None) -> Export:
    return Export(
        calls=calls or [Call("cudaMalloc_v3020", 5_000, 5_100, 100, 100, ret=2, corr=99)],
        lib_calls=[LibCall("cublasCreate_v2", 4_900, 5_200, 100, 100)],
        memory_events=list(events),
        gpus=[GPU] if gpus is None else gpus,
    )


def at_finding(d: dict[str, Any]) -> dict[str, Any]:
    [point] = [p for p in d["memory"]["at"] if p["point"] == "finding"]
    [device] = point["devices"]
    return device


def test_allocations_and_frees_give_live_bytes_and_the_bound(make_export) -> None:
    spec = scenario(
        MemoryEvent(1_000, 100, 4_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(2_000, 100, 3_000_000, corr=2, mem_kind=DEVICE, address=0x2000),
        MemoryEvent(3_000, 100, 4_000_000, corr=3, mem_kind=DEVICE, address=0x1000, op=1),
        MemoryEvent(6_000, 100, 1_000_000, corr=4, mem_kind=DEVICE, address=0x3000),  # after the failure
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    at = at_finding(d)
    assert (at["device_resident_live_bytes"], at["total_bytes"], at["free_at_most_bytes"]) == (
        3_000_000, 10_000_000, 7_000_000
    )
    assert d["memory"]["devices"][0]["live_bytes_at_end"] == 4_000_000


def test_a_free_of_memory_allocated_before_the_capture_is_left_out_and_said(make_export) -> None:
    spec = scenario(
        MemoryEvent(1_000, 100, 2_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(2_000, 100, 5_000_000, corr=2, mem_kind=DEVICE, address=0x9000, op=1),  # never allocated here
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["memory"]["freed_never_allocated"] == {"events": 1, "bytes": 5_000_000}
    # Not subtracted: the traced live bytes stay a lower bound, the free bound an upper bound.
    assert at_finding(d)["device_resident_live_bytes"] == 2_000_000


def test_two_processes_on_one_device_are_both_counted(make_export) -> None:
    spec = scenario(
        MemoryEvent(1_000, 100, 2_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(1_500, 200, 6_000_000, corr=1, mem_kind=DEVICE, address=0x5000),
        MemoryEvent(1_800, 100, 1_000_000, corr=2, mem_kind=DEVICE, address=0x1000, op=1),
    )
    spec.processes = {100: "trainer", 200: "neighbour"}
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    at = at_finding(d)
    assert (at["process_live_bytes"], at["device_resident_live_bytes"], at["free_at_most_bytes"]) == (
        1_000_000, 7_000_000, 3_000_000
    )
    [dev] = d["memory"]["devices"]
    assert sorted((p["pid"], p["live_bytes_at_end"]) for p in dev["processes"]) == [(100, 1_000_000), (200, 6_000_000)]


def test_events_of_an_unknown_process_or_device_are_summed_under_unknown(make_export) -> None:
    """A NULL globalPid or deviceId (NOT NULL columns) leaves the vm or device unknown: those events
    are their own device entry, counted, never dropped (a NULL globalPid once ended in a traceback)."""
    spec = scenario(
        MemoryEvent(1_000, 100, 4_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(2_000, 100, 3_000_000, corr=2, mem_kind=DEVICE, address=0x2000),
        MemoryEvent(2_500, 100, 1_000_000, corr=3, mem_kind=DEVICE, address=0x3000),
        MemoryEvent(3_000, 100, 4_000_000, corr=4, mem_kind=DEVICE, address=0x1000, op=1),
    )
    spec.raw_sql = [
        strip_not_null("CUDA_GPU_MEMORY_USAGE_EVENTS"),
        "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET globalPid = NULL WHERE start = 2000",
        "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET deviceId = NULL WHERE start = 2500",
    ]
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    devices = {(x["vm"], x["device_id"]): x for x in d["memory"]["devices"]}
    assert list(devices) == [(None, 0), (0, None), (0, 0)]  # unknown first, then by id
    assert devices[(None, 0)]["allocated_bytes"] == 3_000_000 and devices[(None, 0)]["processes"][0]["pid"] is None
    assert devices[(0, None)]["allocated_bytes"] == 1_000_000
    assert devices[(0, None)]["processes"][0]["live_bytes_at_end"] == 1_000_000
    assert (devices[(0, 0)]["allocated_bytes"], devices[(0, 0)]["live_bytes_at_end"]) == (4_000_000, 0)
    assert sum(x["allocation_events"] for x in devices.values()) == d["memory"]["allocation_events"] == 3


def test_a_failing_process_without_memory_events_sees_every_device(make_export, tmp_path) -> None:
    # The neighbour holds the memory; the process whose cudaMalloc fails never allocated anything, so
    # the trace does not say which device it used: every traced device is given, and said so.
    spec = scenario(
        MemoryEvent(1_500, 200, 7_000_000, corr=1, mem_kind=DEVICE, address=0x5000),
        MemoryEvent(1_600, 200, 1_000_000, corr=2, mem_kind=DEVICE, address=0x6000),
        MemoryEvent(1_700, 200, 1_000_000, corr=3, mem_kind=DEVICE, address=0x6000, op=1),
        calls=[Call("cudaMalloc_v3020", 5_000, 5_100, 300, 300, ret=2, corr=99)],
    )
    spec.lib_calls = [LibCall("cublasCreate_v2", 4_900, 5_200, 300, 300)]
    spec.processes = {200: "neighbour", 300: "trainer"}
    path = make_export(spec)
    result = nsysaudit.analyze(path)
    at = at_finding(result.to_dict())
    assert at["process_has_events"] is False
    assert (at["process_live_bytes"], at["device_resident_live_bytes"], at["free_at_most_bytes"]) == (
        0, 7_000_000, 3_000_000
    )
    shown = nsysaudit.render.analysis_markdown(result.to_dict())
    assert "process 300 has no memory event, so its device is unknown" in shown


def test_module_memory_and_managed_memory(make_export) -> None:
    spec = scenario(
        MemoryEvent(1_000, 100, 500, corr=0, mem_kind=5, address=0x100),  # the driver's module memory
        MemoryEvent(1_100, 100, 2_000_000, corr=1, mem_kind=4, address=0x2000),  # managed: may be on the host
        MemoryEvent(1_200, 100, 1_000_000, corr=2, mem_kind=DEVICE, address=0x3000),
        MemoryEvent(1_300, 100, 1_000_000, corr=2, mem_kind=DEVICE, address=0x3000, op=1),
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    at = at_finding(d)
    assert at["device_resident_live_bytes"] == 500 and at["managed_live_bytes"] == 2_000_000
    assert at["free_at_most_bytes"] == 10_000_000 - 500
    [proc] = d["memory"]["devices"][0]["processes"]
    assert proc["driver_allocated_bytes"] == 500


def test_a_device_without_a_total_has_no_bound(make_export) -> None:
    spec = scenario(
        MemoryEvent(1_000, 100, 2_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(1_100, 100, 2_000_000, corr=1, mem_kind=DEVICE, address=0x1000, op=1),
        gpus=[],
    )
    at = at_finding(nsysaudit.analyze(make_export(spec)).to_dict())
    assert at["total_bytes"] is None and at["free_at_most_bytes"] is None


def test_allocation_events_only_and_collection_off(make_export) -> None:
    d = nsysaudit.analyze(make_export(scenario(MemoryEvent(1_000, 100, 2_000_000, mem_kind=DEVICE)))).to_dict()
    assert d["memory"]["ledger"] is False and "allocation events only" in d["memory"]["why_no_ledger"]
    spec = scenario()
    spec.capture_meta = {"PROCESS_0:COLLECT_GPU_MEMORY_USAGE": "false"}
    spec.omit_tables = {"CUDA_GPU_MEMORY_USAGE_EVENTS"}
    m = nsysaudit.analyze(make_export(spec)).to_dict()["memory"]
    assert (m["ledger"], m["collected"]) == (False, False) and "collection was off" in m["why_no_ledger"]


# --- the matching against a plain Python reference ------------------------------------------------


def _reference(rows: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], int, int, int]:
    """The ledger's rule in plain Python over events in frame order: a deallocation is matched when
    its address is known and more allocations than deallocations came before it at its (process,
    device, address); allocations and matched deallocations are counted, in (start, frame) order.
    Returns (start, gpid, device, delta, process_live, device_resident_live) per counted event, the
    unmatched deallocations and their bytes, and the counted events without a size."""
    allocs: dict[tuple[Any, ...], int] = {}
    frees: dict[tuple[Any, ...], int] = {}
    counted, unmatched, unmatched_bytes = [], 0, 0
    for i, (start, gpid, device, address, size, kind, op, _corr) in enumerate(rows):
        key = (gpid, device, address)
        if op == 0:
            counted.append((start, i, gpid, device, size, kind))
        elif op == 1:
            if address is not None and allocs.get(key, 0) > frees.get(key, 0):
                counted.append((start, i, gpid, device, None if size is None else -size, kind))
            else:
                unmatched += 1
                unmatched_bytes += size or 0
        allocs[key] = allocs.get(key, 0) + (op == 0)
        frees[key] = frees.get(key, 0) + (op == 1)
    counted.sort(key=lambda c: (_none_first(c[0]), c[1]))  # no start first, as polars sorts
    process: dict[tuple[Any, ...], int] = {}
    device_live: dict[tuple[Any, ...], int] = {}
    out = []
    for start, _, gpid, device, delta, kind in counted:
        vm = gpid // (1 << 48)
        if delta is not None:
            process[(gpid, vm, device)] = process.get((gpid, vm, device), 0) + delta
            resident = MEM_KINDS.get(kind) in {"Device", "Array", "Device Static"}
            device_live[(vm, device)] = device_live.get((vm, device), 0) + (delta if resident else 0)
        out.append((start, gpid, device, delta, process.get((gpid, vm, device)), device_live.get((vm, device))))
    return out, unmatched, unmatched_bytes, sum(1 for c in counted if c[4] is None)


# Events of an unknown device (null deviceId) make _summary compare with None (a polars warning).
@pytest.mark.filterwarnings("ignore:Comparisons with None")
def test_the_matching_equals_a_plain_python_reference() -> None:
    """Random events with reused addresses, frees before allocations, unknown starts, operations,
    addresses, devices and sizes: the ledger's series, its unmatched deallocations and what it reads
    at a moment (Ledger.at) are the reference's."""
    rng = random.Random(13)

    def maybe(value: Any, p: float = 0.08) -> Any:
        return None if rng.random() < p else value

    gpids = [1 << 48, 2 << 48, (1 << 48) | (7 << 24)]
    checked = 0
    for _ in range(150):
        rows = sorted(
            (
                (maybe(rng.randint(0, 30), 0.03), rng.choice(gpids), maybe(rng.randint(0, 1)), maybe(rng.randint(0, 3)),
                 maybe(rng.choice([512, 4096, 1 << 20]), 0.02), rng.choice([2, 2, 4, 5, None]),
                 maybe(rng.choice([0, 0, 1]), 0.05), rng.randint(0, 4))
                for _ in range(rng.randint(1, 80))
            ),
            key=lambda r: _none_first(r[0]),
        )
        events = pl.DataFrame(rows, schema=EVENT_SCHEMA, orient="row")
        evidence = MemoryEvidence(events, pl.DataFrame(schema=DEVICE_SCHEMA), dict(MEM_KINDS), pl.DataFrame(),
                                  pl.DataFrame(), pl.DataFrame(), 0, "CUDA_GPU_MEMORY_USAGE_EVENTS")
        ledger = build_ledger(evidence, {})
        expected, unmatched, unmatched_bytes, unsized = _reference(rows)
        if not any(r[6] == 1 for r in rows):
            assert not ledger.claimed
            continue
        if unsized:
            assert not ledger.claimed and ledger.why_not and ledger.why_not.startswith(f"{unsized} memory event")
            continue
        checked += 1
        assert ledger.claimed
        got = ledger.series.select("start_ns", "gpid", "device_id", "delta", "process_live", "device_resident_live")
        assert got.rows() == expected
        assert ledger.summary["freed_never_allocated"] == {"events": unmatched, "bytes": unmatched_bytes}
        series = ledger.series.to_dicts()
        for t in (-1, 0, rng.randint(1, 29), 30):
            for gpid in [*gpids, 3 << 48]:
                assert ledger.at(t, gpid) == _reference_at(series, t, gpid), (t, gpid)
    assert checked > 50


def _none_first(value: Any) -> tuple[bool, Any]:
    return (value is not None, value if value is not None else 0)


def _reference_at(series: list[dict[str, Any]], t: int, gpid: int) -> list[dict[str, Any]]:
    """Ledger.at read naively off the series rows: a device's events with a start at or before t
    (none where its vm or id is unknown); the process's devices, or every device if it has none."""
    mine = [r for r in series if r["gpid"] == gpid]
    pairs = sorted({(r["vm"], r["device_id"]) for r in (mine or series)},
                   key=lambda p: (_none_first(p[0]), _none_first(p[1])))
    out = []
    for vm, device in pairs:
        here = [r for r in series if vm is not None and device is not None and r["vm"] == vm
                and r["device_id"] == device and r["start_ns"] is not None and r["start_ns"] <= t]
        own = [r for r in here if r["gpid"] == gpid]
        sums: dict[Any, int] = {}
        for r in here:
            sums[r["kind"]] = sums.get(r["kind"], 0) + r["delta"]
        by_kind = {str(k): v for k, v in sorted(sums.items(), key=lambda kv: _none_first(kv[0])) if v}
        resident = here[-1]["device_resident_live"] if here else 0
        out.append({
            "vm": vm, "device_id": device, "process_has_events": bool(mine),
            "process_live_bytes": own[-1]["process_live"] if own else 0,
            "device_resident_live_bytes": resident,
            "managed_live_bytes": sum(v for k, v in by_kind.items() if k in {"Managed", "Managed Static"}),
            "live_bytes_by_kind": by_kind, "total_bytes": None, "free_at_most_bytes": None,
            "freed_before_bytes": sum(-r["delta"] for r in here if r["delta"] < 0),
        })
    return out
