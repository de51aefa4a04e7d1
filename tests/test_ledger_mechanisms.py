"""Who held the device: the ledger under each memory mechanism PyTorch users run.

PyTorch's default caching allocator (plain cudaMalloc segments), expandable segments (virtual memory
management: mapped from cuMemSetAccess to cuMemUnmap), ``backend:cudaMallocAsync`` (a CUDA memory
pool: its size is what the device holds), and two processes sharing one GPU. The real captures'
numbers are held to plain SQL over their own rows; each mechanism's edge cases to builder exports.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, LibCall, MemoryEvent, PoolEvent
from conftest import H200_2025

import nsysaudit
import nsysaudit.render
from nsysaudit.analysis.ledger import build_ledger
from nsysaudit.read.memory import DEVICE_SCHEMA, EVENT_SCHEMA, MemoryEvidence
from nsysaudit.read.memory import MEM_KINDS_FALLBACK as MEM_KINDS

ASYNC, EXPANDABLE, SHARED, TORCH = (H200_2025 / n for n in ("async", "expandable", "shared", "torch"))
TOTAL = 150_109_880_320
DEVICE = 2
GPU = (0, "Test GPU", 10_000_000)
POOL = 0x7000_0000


def q(path: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(query, params).fetchall()
    finally:
        con.close()


def q1(path: Path, query: str, *params: Any) -> Any:
    return q(path, query, *params)[0][0]


def analyzed(path: Path, telemetry: Path | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = nsysaudit.analyze(path, telemetry=telemetry).to_dict()
    return doc


def finding_point(doc: dict[str, Any]) -> dict[str, Any]:
    [point] = [p for p in doc["memory"]["at"] if p["point"] == "finding"]
    return point


# Usage events joined to the one CUDA API call of their (process, correlation id).
WITH_API = """WITH m AS (
    SELECT m.*, s.value AS api FROM CUDA_GPU_MEMORY_USAGE_EVENTS m
    LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = m.correlationId
        AND (r.globalTid >> 24) = (m.globalPid >> 24)
    LEFT JOIN StringIds s ON s.id = r.nameId)"""
SIGNED = "CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END"


def pool_at(path: Path, t: int) -> tuple[int, int]:
    """The pool's size and utilized size just after ``t``, by hand: its last snapshot at or before ``t``
    among the usage events (utilized after a free = the event's value less its bytes) and the pool events."""
    return q(path, """
        SELECT size, utilized FROM (
            SELECT start, 0 AS src, rowid AS o, localMemoryPoolSize AS size,
                   CASE memoryOperationType WHEN 1 THEN localMemoryPoolUtilizedSize - bytes
                        ELSE localMemoryPoolUtilizedSize END AS utilized
            FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE localMemoryPoolAddress IS NOT NULL AND start <= ?1
            UNION ALL
            SELECT start, 1, rowid, localMemoryPoolSize, localMemoryPoolUtilizedSize
            FROM CUDA_GPU_MEMORY_POOL_EVENTS WHERE start <= ?1)
        ORDER BY start DESC, src DESC, o DESC LIMIT 1""", t)[0]


# --- cudaMallocAsync: a CUDA memory pool --------------------------------------------------------------


def test_async_observe_the_pool_holds_the_device_at_the_failure() -> None:
    """The README's hand SQL: pool 149,283,667,968 B (655,425,544 in use), 67,373,056 B of cudaMalloc and
    223,090 B of module memory live, so at most 758,616,206 B free; the usage events' alloc - free
    (~723 MB) would have said 149,386,858,630 B, as the ledger once did."""
    doc = analyzed(ASYNC / "observe.sqlite", ASYNC / "observe.telemetry.jsonl")
    point = finding_point(doc)
    t = point["t_ns"]
    [dev] = point["devices"]
    size, utilized = pool_at(ASYNC / "observe.sqlite", t)
    outside = q1(ASYNC / "observe.sqlite", f"""{WITH_API} SELECT sum({SIGNED}) FROM m
                 WHERE localMemoryPoolAddress IS NULL AND start <= ? AND correlationId != 0""", t)
    static = q1(ASYNC / "observe.sqlite",
                "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE correlationId = 0 AND start <= ?", t)
    assert (size, utilized, outside, static) == (149_283_667_968, 655_425_544, 67_373_056, 223_090)
    assert dev["by_mechanism"] == {"segments": outside, "mapped": 0, "pool_reserved": size,
                                   "pool_utilized": utilized, "static": static}
    assert dev["device_resident_live_bytes"] == size + outside + static == 149_351_264_114
    assert dev["free_at_most_bytes"] == TOTAL - (size + outside + static) == 758_616_206
    [proc] = dev["processes"]
    assert (proc["pid"], proc["resident_bytes"]) == (729, 149_351_264_114)
    # What the usage events alone would have claimed, and the ledger no longer does.
    naive = q1(ASYNC / "observe.sqlite", f"SELECT sum({SIGNED}) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE start <= ?", t)
    assert TOTAL - naive == 149_386_858_630 != dev["free_at_most_bytes"]
    assert point["holder"].startswith(
        "139.1 GiB of 139.8 GiB held at the failure, all by pid 729 (python3): 139.0 GiB in its CUDA memory pool "
        "(625.1 MiB of it in use), 64.3 MiB allocated outside it")
    assert "at most 758,616,206 B (723.5 MiB) free" in point["holder"]
    assert ("Telemetry line 4 (handoff), the allocator's own figures: reserved but unused 138.4 GiB (reserved "
            "149,283,667,968 B, allocated 638,648,324 B)") in point["holder"]


def test_async_pools_summary_and_mechanisms_match_sql() -> None:
    path = ASYNC / "observe.sqlite"
    m = analyzed(path)["memory"]
    [pool] = m["pools"]
    trims = q1(path, "SELECT count(*) FROM CUDA_GPU_MEMORY_POOL_EVENTS WHERE operationType = 3")
    peak = q1(path, "SELECT max(localMemoryPoolSize) FROM (SELECT localMemoryPoolSize FROM "
                    "CUDA_GPU_MEMORY_USAGE_EVENTS UNION ALL "
                    "SELECT localMemoryPoolSize FROM CUDA_GPU_MEMORY_POOL_EVENTS)")
    end = pool_at(path, 1 << 62)
    assert (pool["pid"], pool["address"], pool["trims"], pool["created"], pool["destroyed"]) == (
        729, q1(path, "SELECT DISTINCT address FROM CUDA_GPU_MEMORY_POOL_EVENTS"), trims, True, False)
    assert (pool["peak_size_bytes"], pool["size_at_end_bytes"], pool["utilized_at_end_bytes"]) == (peak, *end)
    assert m["mechanisms"]["pool"] == {
        "allocation_events": q1(path, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                                      "WHERE localMemoryPoolAddress IS NOT NULL AND memoryOperationType = 0"),
        "deallocation_events": 38,
        "allocated_bytes": q1(path, "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                                    "WHERE localMemoryPoolAddress IS NOT NULL AND memoryOperationType = 0"),
    }
    # A free into the pool gives nothing back to the device: the device's released bytes are only
    # what trims gave back, and this arm never trimmed the pool below its size.
    assert m["devices"][0]["freed_bytes"] == 0


def test_async_release_trims_the_pool_before_the_workers_cublas_create() -> None:
    arms = [nsysaudit.analyze(ASYNC / f"{a}.sqlite", telemetry=ASYNC / f"{a}.telemetry.jsonl")
            for a in ("observe", "release")]
    release = arms[1].to_dict()["memory"]
    [call] = [p for p in release["at"] if p["point"] == "library_call" and p["pid"] != p.get("tid")
              and p["t_ns"] > 6_400_000_000]
    [dev] = call["devices"]
    assert (dev["by_mechanism"]["pool_reserved"], dev["by_mechanism"]["pool_utilized"]) == pool_at(
        ASYNC / "release.sqlite", call["t_ns"])
    doc = nsysaudit.compare_results(*arms).to_dict()
    [pair] = [p for p in doc["differences"]["library_calls"] if p["match_key"]["thread_role"] == "other"]
    assert ("release: between telemetry line 4 (handoff) and cublasCreate_v2's start, pid 845 trimmed its CUDA "
            "memory pool by 138.3 GiB; 139.1 GiB held before, 768.3 MiB after") in pair["statements"]
    assert any("CUDA memory pools 138.3 GiB smaller" in s for s in pair["statements"])


# --- expandable segments: virtual memory management -----------------------------------------------------


def test_expandable_observe_mapped_memory_is_live_without_any_deallocation_event() -> None:
    """Nothing is unmapped in the observe arm: the export truthfully has no deallocation event, and
    the ledger holds every mapped piece (the allocation event is written at cuMemSetAccess)."""
    path = EXPANDABLE / "observe.sqlite"
    doc = analyzed(path, EXPANDABLE / "observe.telemetry.jsonl")
    m = doc["memory"]
    assert m["ledger"] is True and m["deallocation_events"] == 0
    point = finding_point(doc)
    [dev] = point["devices"]
    mapped = q1(path, f"{WITH_API} SELECT sum({SIGNED}) FROM m WHERE api = 'cuMemSetAccess' AND start <= ?",
                point["t_ns"])
    assert dev["by_mechanism"]["mapped"] == mapped == 149_340_291_072
    assert dev["free_at_most_bytes"] == 701_993_102
    calls = dict(q(path, "SELECT s.value, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                         "ON s.id = r.nameId WHERE r.returnValue = 0 AND s.value LIKE 'cuMem%' GROUP BY 1"))
    vmm = m["virtual_memory"]
    assert (vmm["handles_created"], vmm["handles_released"], vmm["address_reservations"]) == (
        calls["cuMemCreate"], calls["cuMemRelease"], calls["cuMemAddressReserve"]) == (7_820, 698, 2)
    assert (vmm["mapped_events"], vmm["unmapped_events"]) == (7_122, 0)
    assert "mapped (virtual memory: cuMemMap, cuMemSetAccess)" in point["holder"]


def test_expandable_release_unmaps_before_the_workers_cublas_create() -> None:
    path = EXPANDABLE / "release.sqlite"
    m = analyzed(path)["memory"]
    assert m["mechanisms"]["mapped"]["deallocation_events"] == 7_090 == q1(
        path, f"{WITH_API} SELECT count(*) FROM m WHERE api = 'cuMemUnmap' AND memoryOperationType = 1")
    assert m["freed_never_allocated"] == {"events": 0, "bytes": 0}
    [call] = [p for p in m["at"] if p["point"] == "library_call" and p["t_ns"] > 6_500_000_000]
    [dev] = call["devices"]
    assert dev["by_mechanism"]["mapped"] == q1(
        path, f"{WITH_API} SELECT sum({SIGNED}) FROM m WHERE api IN ('cuMemSetAccess', 'cuMemUnmap') AND start <= ?",
        call["t_ns"])
    assert m["devices"][0]["freed_bytes"] == 148_688_076_800  # the telemetry's "released", exactly


# --- two processes on one GPU ---------------------------------------------------------------------------


def test_two_processes_the_co_tenant_is_named_with_its_share() -> None:
    path = SHARED / "observe.sqlite"
    doc = analyzed(path)
    point = finding_point(doc)
    [dev] = point["devices"]
    held = dict(q(path, f"SELECT (globalPid >> 24) & 16777215, sum({SIGNED}) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                        "WHERE start <= ? GROUP BY 1", point["t_ns"]))
    assert held == {885: 79_456_894_976, 851: 69_376_372_594}
    assert [(p["pid"], p["resident_bytes"]) for p in dev["processes"]] == [(885, held[885]), (851, held[851])]
    assert dev["free_at_most_bytes"] == TOTAL - sum(held.values()) == 1_276_612_750
    assert point["holder"].startswith(
        "138.6 GiB of 139.8 GiB held at the failure by 2 traced processes: pid 885 (python3): 74.0 GiB allocated "
        "(cudaMalloc, cuMemAlloc); pid 851 (python3, the failing process): 64.6 GiB allocated")


# --- free calls without a deallocation event ---------------------------------------------------------


def test_free_calls_without_their_own_deallocation_event_are_counted_and_named() -> None:
    path = TORCH / "observe.sqlite"
    doc = analyzed(path)
    gaps = doc["memory"]["free_calls_without_event"]
    by_sql = q(path, """SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId
                        WHERE s.value LIKE 'cudaFree%' AND r.returnValue = 0 AND NOT EXISTS (
                            SELECT 1 FROM CUDA_GPU_MEMORY_USAGE_EVENTS m WHERE m.memoryOperationType = 1
                            AND m.correlationId = r.correlationId AND (m.globalPid >> 24) = (r.globalTid >> 24))
                        ORDER BY r.start""")
    assert gaps["count"] == len(by_sql) == 2 and gaps["example_correlation_ids"] == [c for (c,) in by_sql]
    assert gaps["by_api"] == {"cudaFree_v3020": 2}
    point = finding_point(doc)
    assert (point["free_calls_without_event_before"], point["free_calls_without_event_examples"]) == (2, [819, 2412])
    assert ("The bound assumes that the 2 earlier free call(s) without a deallocation event (correlation 819, 2412) "
            "freed nothing, as cudaFree(NULL) does") in point["holder"]


def test_cu_mem_release_is_not_a_free_without_event() -> None:
    """cuMemRelease drops a handle; the memory stays mapped until cuMemUnmap (7,788 of them in the
    release capture, none with a memory event): never counted as a free that lacks its event."""
    gaps = analyzed(EXPANDABLE / "release.sqlite")["memory"]["free_calls_without_event"]
    assert gaps["by_api"] == {"cudaFree_v3020": 2}


# --- builder cases -----------------------------------------------------------------------------------


def spec(events: list[MemoryEvent], calls: list[Call] | None = None, pools: list[PoolEvent] | None = None,
         gpus: list[Any] | None = None) -> Export:
    return Export(
        calls=[Call("cudaMalloc_v3020", 5_000, 5_100, 100, 100, ret=2, corr=99), *(calls or [])],
        lib_calls=[LibCall("cublasCreate_v2", 4_900, 5_200, 100, 100)],
        memory_events=events,
        pool_events=pools or [],
        gpus=[GPU] if gpus is None else gpus,
    )


def at_failure(d: dict[str, Any]) -> dict[str, Any]:
    [dev] = finding_point(d)["devices"]
    return dev


def test_vmm_memory_stays_live_after_its_handle_is_released_until_unmapped(make_export) -> None:
    calls = [
        Call("cuMemCreate", 1_000, 1_010, corr=1), Call("cuMemMap", 1_020, 1_030, corr=2),
        Call("cuMemSetAccess", 1_040, 1_050, corr=3), Call("cuMemRelease", 1_060, 1_070, corr=4),
        Call("cuMemCreate", 2_000, 2_010, corr=5), Call("cuMemMap", 2_020, 2_030, corr=6),
        Call("cuMemSetAccess", 2_040, 2_050, corr=7), Call("cuMemRelease", 2_060, 2_070, corr=8),
        Call("cuMemUnmap", 3_000, 3_010, corr=9), Call("cuMemAddressReserve", 900, 910, corr=10),
    ]
    events = [
        MemoryEvent(1_045, 100, 3_000_000, corr=3, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(2_045, 100, 2_000_000, corr=7, mem_kind=DEVICE, address=0x2000),
        MemoryEvent(3_005, 100, 2_000_000, corr=9, mem_kind=DEVICE, address=0x2000, op=1),
    ]
    d = nsysaudit.analyze(make_export(spec(events, calls))).to_dict()
    dev = at_failure(d)
    assert dev["by_mechanism"]["mapped"] == 3_000_000 and dev["free_at_most_bytes"] == 7_000_000
    vmm = d["memory"]["virtual_memory"]
    assert (vmm["handles_created"], vmm["handles_released"], vmm["address_reservations"]) == (2, 2, 1)
    assert (vmm["mapped_events"], vmm["unmapped_events"]) == (2, 1)
    assert d["memory"]["free_calls_without_event"]["count"] == 0


def test_a_pool_that_grows_is_trimmed_and_destroyed(make_export) -> None:
    calls = [Call("cudaMallocAsync_v11020", 1_000, 1_010, corr=1), Call("cudaFreeAsync_v11020", 2_000, 2_010, corr=2),
             Call("cudaMemPoolTrimTo_v11020", 3_000, 3_010, corr=3),
             Call("cudaMallocAsync_v11020", 4_000, 4_010, corr=4),
             Call("cudaMemPoolDestroy_v11020", 6_000, 6_010, corr=5)]
    events = [
        MemoryEvent(1_005, 100, 4_000_000, corr=1, mem_kind=DEVICE, address=POOL, pool_address=POOL,
                    pool_size=4_194_304, pool_utilized=4_000_000, pool_threshold=-1),
        MemoryEvent(2_005, 100, 4_000_000, corr=2, mem_kind=DEVICE, address=POOL, op=1, pool_address=POOL,
                    pool_size=4_194_304, pool_utilized=4_000_000, pool_threshold=-1),
        MemoryEvent(4_005, 100, 1_000_000, corr=4, mem_kind=DEVICE, address=POOL, pool_address=POOL,
                    pool_size=2_097_152, pool_utilized=1_000_000, pool_threshold=-1),
    ]
    pools = [PoolEvent(500, 100, POOL, op=1, size=0, threshold=0),
             PoolEvent(3_005, 100, POOL, op=3, size=0, utilized=0, corr=3),
             PoolEvent(6_005, 100, POOL, op=2, size=2_097_152, utilized=1_000_000, corr=5)]
    result = nsysaudit.analyze(make_export(spec(events, calls, pools)))
    d = result.to_dict()
    dev = at_failure(d)  # after the trim and the second allocation, before the destroy
    assert (dev["by_mechanism"]["pool_reserved"], dev["by_mechanism"]["pool_utilized"]) == (2_097_152, 1_000_000)
    assert dev["free_at_most_bytes"] == 10_000_000 - 2_097_152
    [pool] = d["memory"]["pools"]
    assert (pool["peak_size_bytes"], pool["size_at_end_bytes"], pool["trims"], pool["destroyed"]) == (
        4_194_304, 0, 1, True)
    # before the trim the pool still held its 4 MiB, though the allocation in it was freed
    [before] = result.analysis.ledger.at(2_500, 100 << 24)
    assert (before["by_mechanism"]["pool_reserved"], before["by_mechanism"]["pool_utilized"]) == (4_194_304, 0)
    assert d["memory"]["devices"][0]["freed_bytes"] == 4_194_304 + 2_097_152  # given back by the trim, the destroy


def test_an_imported_pool_counts_once_in_its_owner(make_export) -> None:
    calls = [Call("cudaMallocAsync_v11020", 1_000, 1_010, pid=200, tid=200, corr=1),
             Call("cudaMallocFromPoolAsync_v11020", 2_000, 2_010, corr=2)]
    events = [
        MemoryEvent(1_005, 200, 3_000_000, corr=1, mem_kind=DEVICE, address=POOL, pool_address=POOL,
                    pool_size=4_194_304, pool_utilized=3_000_000),
        MemoryEvent(2_005, 100, 1_000_000, corr=2, mem_kind=DEVICE, address=POOL + 0x300000,
                    imported_pool_address=POOL, imported_pool_pid=200),
    ]
    s = spec(events, calls)
    s.processes = {100: "trainer", 200: "server"}
    d = nsysaudit.analyze(make_export(s)).to_dict()
    dev = at_failure(d)
    assert dev["device_resident_live_bytes"] == 4_194_304  # the owner's pool, once
    procs = {p["pid"]: p for p in dev["processes"]}
    assert procs[200]["by_mechanism"]["pool_reserved"] == 4_194_304
    assert (procs[100]["resident_bytes"], procs[100]["imported_pool_bytes"]) == (0, 1_000_000)


def test_pool_allocations_without_the_pools_size_claim_no_ledger(make_export) -> None:
    calls = [Call("cudaMallocAsync_v11020", 1_000, 1_010, corr=1)]
    events = [MemoryEvent(1_005, 100, 3_000_000, corr=1, mem_kind=DEVICE, address=POOL)]  # no pool columns
    m = nsysaudit.analyze(make_export(spec(events, calls))).to_dict()["memory"]
    assert m["ledger"] is False
    assert m["why_no_ledger"] == ("1 memory event(s) of CUDA memory pool calls (cudaMallocAsync, cudaFreeAsync) "
                                  "carry no pool address or size: what the pool held on the device is unknown")
    events = [MemoryEvent(1_005, 100, 3_000_000, corr=1, mem_kind=DEVICE, address=POOL, pool_address=POOL)]
    m = nsysaudit.analyze(make_export(spec(events, calls))).to_dict()["memory"]
    assert m["ledger"] is False and m["why_no_ledger"].startswith("1 CUDA memory pool(s) with no size information")


def test_cuda_free_null_is_named_in_the_bound(make_export) -> None:
    calls = [Call("cudaFree_v3020", 1_000, 1_010, corr=1), Call("cudaMalloc_v3020", 1_100, 1_110, corr=2),
             Call("cudaFree_v3020", 1_200, 1_210, corr=3), Call("cudaFree_v3020", 6_000, 6_010, corr=4)]
    events = [MemoryEvent(1_105, 100, 2_000_000, corr=2, mem_kind=DEVICE, address=0x1000),
              MemoryEvent(1_205, 100, 2_000_000, corr=3, mem_kind=DEVICE, address=0x1000, op=1)]
    d = nsysaudit.analyze(make_export(spec(events, calls))).to_dict()
    gaps = d["memory"]["free_calls_without_event"]
    assert (gaps["count"], gaps["example_correlation_ids"]) == (2, [1, 4])
    point = finding_point(d)
    assert (point["free_calls_without_event_before"], point["free_calls_without_event_examples"]) == (1, [1])
    assert "the 1 earlier free call(s) without a deallocation event (correlation 1) freed nothing" in point["holder"]


def test_sizes_past_any_device_are_damage_never_a_wrapped_sum(make_export) -> None:
    """allocation sizes of 2^63-1 once summed to -2 B allocated and "at most 150,109,880,808 B free":
    now no ledger is claimed, a warning says why, and the totals are exact."""
    big = (1 << 63) - 1
    events = [MemoryEvent(1_000, 100, big, corr=1, mem_kind=DEVICE, address=0x1000),
              MemoryEvent(1_100, 100, big, corr=2, mem_kind=DEVICE, address=0x2000),
              MemoryEvent(1_200, 100, big, corr=3, mem_kind=DEVICE, address=0x2000, op=1)]
    d = nsysaudit.analyze(make_export(spec(events))).to_dict()
    m = d["memory"]
    assert m["ledger"] is False and "past any device (2^62 B): damaged sizes" in m["why_no_ledger"]
    assert m["devices"][0]["allocated_bytes"] == 2 * big  # an exact integer, not wrapped
    assert any(w["kind"] == "memory_size_overflow" for w in d["warnings"])
    assert m["at"] == []


def test_a_negative_size_is_unknown_never_an_inflated_bound(make_export) -> None:
    events = [MemoryEvent(1_000, 100, 4_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
              MemoryEvent(1_100, 100, -3_000_000, corr=2, mem_kind=DEVICE, address=0x2000)]
    d = nsysaudit.analyze(make_export(spec(events))).to_dict()
    assert d["memory"]["ledger"] is False and d["memory"]["why_no_ledger"].startswith("1 memory event(s) have no size")
    [w] = [w for w in d["warnings"] if w["kind"] == "memory_negative_size"]
    assert w["count"] == 1


def test_the_real_torch_capture_with_a_damaged_size_is_refused_not_wrapped(tmp_path: Path) -> None:
    """A damaged size on the real capture: every size set to 2^63-1."""
    copy = tmp_path / "observe.sqlite"
    copy.write_bytes((TORCH / "observe.sqlite").read_bytes())
    con = sqlite3.connect(copy)
    con.execute("UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET bytes = 9223372036854775807")
    con.commit()
    con.close()
    m = analyzed(copy)["memory"]
    assert m["ledger"] is False and m["at"] == []
    assert m["devices"][0]["allocated_bytes"] == 489 * ((1 << 63) - 1)


@pytest.mark.filterwarnings("ignore:Comparisons with None")
def test_the_bound_never_exceeds_the_device_total_nor_goes_below_zero() -> None:
    """Random events, frees of other sizes than their allocations, frees before allocations, unknown
    starts, pools that grow and shrink: at every moment held bytes are >= 0 and the bound on free
    memory is within [0, total] or not claimed."""
    rng = random.Random(21)
    total = 50_000_000
    devices = pl.DataFrame([(1, 0, "GPU", total)], schema=DEVICE_SCHEMA, orient="row")
    checked = 0
    for _ in range(120):
        rows = []
        for _ in range(rng.randint(1, 60)):
            start = None if rng.random() < 0.05 else rng.randint(0, 40)
            pooled = rng.random() < 0.3
            size = rng.choice([512, 1 << 20, 7_000_000, 30_000_000])
            rows.append((start, 1 << 48, 0, rng.choice([1, 2, 3]), size, 2, rng.choice([0, 0, 1]),
                         rng.randint(1, 5), POOL if pooled else None, -1 if pooled else None,
                         rng.choice([size, 2 * size, 60_000_000]) if pooled else None,
                         rng.randint(0, size) if pooled else None, None, None))
        rows.sort(key=lambda r: (r[0] is not None, r[0] or 0))
        events = pl.DataFrame(rows, schema=EVENT_SCHEMA, orient="row")
        evidence = MemoryEvidence(events, devices, dict(MEM_KINDS), pl.DataFrame(), pl.DataFrame(), pl.DataFrame(), 0,
                                  "CUDA_GPU_MEMORY_USAGE_EVENTS", pool_columns=True)
        ledger = build_ledger(evidence, {"PROCESS_0:COLLECT_GPU_MEMORY_USAGE": ["true"]})
        if not ledger.claimed:
            continue
        for point in ledger.at_many([(t, 1 << 48) for t in range(-1, 42)]):
            for dev in point:
                checked += 1
                assert dev["device_resident_live_bytes"] >= 0
                assert all(v >= 0 for p in dev["processes"] for v in p["by_mechanism"].values())
                free = dev["free_at_most_bytes"]
                assert free is None or 0 <= free <= total
                # Not claimed where the held bytes exceed the total, or where the events contradict
                # themselves (an allocation at an address already live, a pool with more in use than its size).
                why = dev.get("bound_unknown", "")
                conflict = "already live" in why or "more in use" in why
                assert (free is None) == (dev["device_resident_live_bytes"] > total or conflict)
                assert (free is None) == ("bound_unknown" in dev)
    assert checked > 1000


# --- the holder sentence in every output ---------------------------------------------------------------


def test_every_output_says_who_held_the_memory(tmp_path: Path) -> None:
    """The terminal, report.md, report.html, the picture and compare all carry the finding's sentence."""
    result = nsysaudit.analyze(ASYNC / "observe.sqlite", telemetry=ASYNC / "observe.telemetry.jsonl")
    holder = finding_point(result.to_dict())["holder"]
    from rich.console import Console

    console = Console(width=4000, color_system=None, record=True, file=open(tmp_path / "t.txt", "w"))  # noqa: SIM115
    console.print(nsysaudit.render.analysis_renderable(result, details=True))
    assert f"held: {holder}" in console.export_text()
    assert f"- held: {holder}" in nsysaudit.render.analysis_markdown(result.to_dict())
    sealed = nsysaudit.seal_analysis(ASYNC / "observe.sqlite", tmp_path / "sealed",
                                     telemetry=ASYNC / "observe.telemetry.jsonl")
    page = (sealed.dir / "report.html").read_text("utf-8")
    assert "139.1 GiB of 139.8 GiB held at the failure, all by pid 729 (python3)" in page
    svg = (sealed.dir / "timeline.svg").read_text("utf-8")
    assert "held at the focus: 139.1 GiB of 139.8 GiB held at the failure" in svg
    doc = nsysaudit.compare_results(result, nsysaudit.analyze(ASYNC / "release.sqlite")).to_dict()
    assert holder in nsysaudit.render.comparison_markdown(doc).replace("\\", "")
    assert any(s.startswith("observe: 139.1 GiB of 139.8 GiB held at cublasCreate_v2's start")
               for p in doc["differences"]["library_calls"] for s in p["statements"])


def test_a_telemetry_log_of_calls_is_read_at_its_phases_not_at_every_line() -> None:
    """The event capture's telemetry logs every driver call (284 lines): the ledger is read at the
    lines whose event occurs at most 4 times (its phases), and the document says so."""
    event = H200_2025 / "event"
    m = analyzed(event / "observe.sqlite", event / "observe.telemetry.jsonl")["memory"]
    lines = (event / "observe.telemetry.jsonl").read_text().splitlines()
    assert m["telemetry_points"]["lines"] == len(lines) == 284
    read = [p["label"] for p in m["at"] if p["point"] == "telemetry"]
    assert read == ["warmup", "capture_start", "capture_end", "train_start", "train_end", "eval_start", "eval_error",
                    "exit"]
    assert m["telemetry_points"]["read_at"] == len(read)
    assert "event occurs at most 4 times" in m["telemetry_points"]["rule"]
    torch = analyzed(TORCH / "observe.sqlite", TORCH / "observe.telemetry.jsonl")["memory"]
    assert [p["line"] for p in torch["at"] if p["point"] == "telemetry"] == [1, 2, 3, 4, 5, 6, 7]  # all of 7


def test_no_bound_where_the_trace_does_not_cover_the_moment() -> None:
    """nsys 2023.4's CUDA trace stops inside cublasCreate_v2: at the telemetry lines after it, a free
    could be missing from the trace, so no bound is claimed there (the same rule that censors a call)."""
    from conftest import H200

    m = analyzed(H200 / "observe.sqlite", H200 / "observe.telemetry.jsonl")["memory"]
    after = {p["label"]: p for p in m["at"] if p["point"] == "telemetry" and p["label"] in ("runtime_error", "exit")}
    for p in after.values():
        assert p["covered"] is False and p["censored_reasons"] == ["cuda_api_trace_ended_before_call"]
        [dev] = p["devices"]
        assert dev["free_at_most_bytes"] is None and "does not cover this moment" in dev["bound_unknown"]
        assert "does not cover this moment" in p["holder"]
    handoff = next(p for p in m["at"] if p["label"] == "handoff")
    assert handoff["covered"] is True and handoff["devices"][0]["free_at_most_bytes"] == 585_039_872
