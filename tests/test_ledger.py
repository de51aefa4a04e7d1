"""The device-memory ledger: live bytes per device and process, and the bound on free memory.

Numbers on the real captures are checked against plain SQL sums over CUDA_GPU_MEMORY_USAGE_EVENTS.
"""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, LibCall, MemoryEvent, PoolEvent, strip_not_null
from conftest import H200_2025, PUBLIC

import nsysaudit
import nsysaudit.render
from nsysaudit.analysis.ledger import build_ledger
from nsysaudit.read.memory import DEVICE_SCHEMA, EVENT_SCHEMA, MemoryEvidence
from nsysaudit.read.memory import MEM_KINDS_FALLBACK as MEM_KINDS
from nsysaudit.reports import conformance, documents

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
    assert by_call[("matched", "cudaMalloc_v3020")] == (32, 149_428_635_648)  # pinned as well as held to the SQL


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
    assert observe["free_at_most_bytes"] == 697_930_894 < 1_000_000_000 < release["free_at_most_bytes"]
    assert release["freed_before_bytes"] == 148_721_631_232
    said = [s for s in pair["statements"] if "held at cublasCreate_v2's start" in s]
    assert said[0].startswith("observe: 139.2 GiB of 139.8 GiB held at cublasCreate_v2's start, all by pid 683")
    assert "at most 697,930,894 B (665.6 MiB) free" in said[0]
    assert said[1].startswith("release: 738.3 MiB of 139.8 GiB held at cublasCreate_v2's start, all by pid 783")
    # what changed, in the release arm and between the arms
    assert ("release: between telemetry line 4 (handoff) and cublasCreate_v2's start, pid 783 freed 138.4 GiB; "
            "139.2 GiB held before, 738.3 MiB after") in pair["statements"]
    assert any(s.startswith("At cublasCreate_v2's start the release arm held 138.4 GiB less device memory than the "
                            "observe arm") for s in pair["statements"])
    assert any(s.startswith("observe: 139.2 GiB of 139.8 GiB held at telemetry line 4 (handoff)")
               for s in doc["differences"]["memory"]["statements"])


def test_an_export_without_deallocation_events_is_a_ledger_of_what_was_never_freed() -> None:
    """Zero deallocation events is evidence that nothing was freed, not a gap (an earlier rule took it for one):
    the capi observe capture frees nothing, so every allocation up to a moment is live then."""
    path = CAPI / "observe.sqlite"
    m = memory(path, CAPI / "observe.telemetry.jsonl")
    assert m["ledger"] is True and m["deallocation_events"] == 0 == sql1(
        path, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memoryOperationType = 1")
    assert m["devices"][0]["allocated_bytes"] == 149_524_840_448
    handoff = next(p for p in m["at"] if p["point"] == "telemetry" and p["label"] == "handoff")
    [at] = handoff["devices"]
    live = sql1(path, "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE start <= ?", handoff["t_ns"])
    assert at["device_resident_live_bytes"] == live and at["free_at_most_bytes"] == 150_109_880_320 - live


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
        MemoryEvent(1_800, 100, 2_000_000, corr=2, mem_kind=DEVICE, address=0x1000, op=1),
        MemoryEvent(1_900, 100, 1_000_000, corr=3, mem_kind=DEVICE, address=0x2000),
    )
    spec.processes = {100: "trainer", 200: "neighbour"}
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    at = at_finding(d)
    assert (at["process_live_bytes"], at["device_resident_live_bytes"], at["free_at_most_bytes"]) == (
        1_000_000, 7_000_000, 3_000_000
    )
    assert [(p["pid"], p["resident_bytes"]) for p in at["processes"]] == [(200, 6_000_000), (100, 1_000_000)]
    [dev] = d["memory"]["devices"]
    assert sorted((p["pid"], p["live_bytes_at_end"]) for p in dev["processes"]) == [(100, 1_000_000), (200, 6_000_000)]
    [point] = [p for p in d["memory"]["at"] if p["point"] == "finding"]
    assert point["holder"].startswith(
        "6.7 MiB of 9.5 MiB held at the failure by 2 traced processes: pid 200 (neighbour): 5.7 MiB allocated "
        "(cudaMalloc, cuMemAlloc); pid 100 (trainer, the failing process): 976.6 KiB allocated"
    )


def test_a_free_subtracts_the_allocation_it_frees_and_a_size_that_differs_is_warned(make_export) -> None:
    spec = scenario(
        MemoryEvent(1_000, 100, 2_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(1_800, 100, 1_000_000, corr=2, mem_kind=DEVICE, address=0x1000, op=1),  # says 1 MB
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert at_finding(d)["device_resident_live_bytes"] == 0  # the whole 2 MB allocation is gone
    [w] = [w for w in d["warnings"] if w["kind"] == "deallocation_size_differs"]
    assert w["count"] == 1


def test_a_free_before_an_allocation_at_its_address_does_not_leave_the_allocation_live(make_export) -> None:
    """Memory allocated before the capture, freed in it, then allocated and freed again at the same
    address: the second free frees the second allocation (the first free matched nothing)."""
    spec = scenario(
        MemoryEvent(1_000, 100, 3_000_000, corr=1, mem_kind=DEVICE, address=0x1000, op=1),
        MemoryEvent(1_200, 100, 2_000_000, corr=2, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(1_400, 100, 2_000_000, corr=3, mem_kind=DEVICE, address=0x1000, op=1),
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["memory"]["freed_never_allocated"] == {"events": 1, "bytes": 3_000_000}
    assert at_finding(d)["device_resident_live_bytes"] == 0


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


def test_a_document_of_unknown_processes_and_devices_conforms_to_its_type(make_export) -> None:
    """The unknown vm, device and process of the events above are null in the document wherever the
    ledger names them (its devices and their processes, the devices at a moment, the pools),
    and the document's type says so: ``integer or null``."""
    spec = scenario(
        MemoryEvent(1_000, 100, 4_000_000, corr=1, mem_kind=DEVICE, address=0x1000),
        MemoryEvent(2_000, 100, 3_000_000, corr=2, mem_kind=DEVICE, address=0x2000),
        MemoryEvent(2_500, 100, 1_000_000, corr=3, mem_kind=DEVICE, address=0x3000),
        # a pool allocation of an unknown process, on an unknown device
        MemoryEvent(2_600, 100, 1_000, corr=5, mem_kind=DEVICE, address=0x9000, pool_address=0x8000,
                    pool_size=2_000, pool_utilized=1_000),
        calls=[Call("cudaMalloc_v3020", 5_000, 5_100, 300, 300, ret=2, corr=99)],
    )
    spec.lib_calls = [LibCall("cublasCreate_v2", 4_900, 5_200, 300, 300)]
    spec.processes = {100: "trainer", 300: "neighbour"}
    spec.pool_events = [PoolEvent(2_700, 100, 0xA000, op=1, size=4_096)]  # a pool of unknown address
    spec.raw_sql = [
        strip_not_null("CUDA_GPU_MEMORY_USAGE_EVENTS"),
        strip_not_null("CUDA_GPU_MEMORY_POOL_EVENTS"),
        "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET globalPid = NULL WHERE start IN (2000, 2600)",
        "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET deviceId = NULL WHERE start IN (2500, 2600)",
        "UPDATE CUDA_GPU_MEMORY_POOL_EVENTS SET address = NULL",
    ]
    d = json.loads(json.dumps(nsysaudit.analyze(make_export(spec)).to_dict()))
    [point] = [p for p in d["memory"]["at"] if p["point"] == "finding"]
    assert [(x["vm"], x["device_id"]) for x in point["devices"]] == [(None, None), (None, 0), (0, None), (0, 0)]
    assert [p["global_pid"] for x in d["memory"]["devices"] for p in x["processes"]][:2] == [None, None]
    assert [(p["global_pid"], p["device_id"], p["address"]) for p in d["memory"]["pools"]] == [
        (None, None, 0x8000), (100 << 24, 0, None)]
    assert conformance.problems(d, documents.AnalysisDocument) == []


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
    assert d["memory"]["ledger"] is True and at_finding(d)["device_resident_live_bytes"] == 2_000_000
    spec = scenario()
    spec.capture_meta = {"PROCESS_0:COLLECT_GPU_MEMORY_USAGE": "false"}
    spec.omit_tables = {"CUDA_GPU_MEMORY_USAGE_EVENTS"}
    m = nsysaudit.analyze(make_export(spec)).to_dict()["memory"]
    assert (m["ledger"], m["collected"]) == (False, False) and "collection was off" in m["why_no_ledger"]


def test_an_empty_memory_table_without_capture_settings_claims_no_ledger() -> None:
    """nsys 2022.2 writes CUDA_GPU_MEMORY_USAGE_EVENTS empty when collection is off and has no
    META_DATA_CAPTURE: pipit's saxpy export has 15 cudaMalloc calls and not one memory event."""
    path = PUBLIC / "pipit_saxpy_2022.2.sqlite"
    assert sql1(path, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS") == 0
    m = memory(path)
    assert m["ledger"] is False and m["collected"] is None
    assert "is empty and the capture settings do not say memory-usage collection was on" in m["why_no_ledger"]


# --- the matching against a plain Python reference ------------------------------------------------


def _reference(rows: list[tuple[Any, ...]]) -> tuple[list[tuple[Any, ...]], int, int, int]:
    """The ledger's rule in plain Python over events in frame order: a deallocation whose address is
    known frees the oldest allocation still live at its (process, device, address), if there is one,
    and subtracts that allocation's size; allocations and matched deallocations are counted, in
    (start, frame) order. Returns (start, gpid, device, delta, process_live, device_resident_live) per
    counted event, the unmatched deallocations and their bytes, and the counted events without a size."""
    live: dict[tuple[Any, ...], list[Any]] = {}
    counted, unmatched, unmatched_bytes = [], 0, 0
    for i, (start, gpid, device, address, size, kind, op, _corr) in enumerate(rows):
        key = (gpid, device, address)
        if op == 0:
            counted.append((start, i, gpid, device, size, kind))
            live.setdefault(key, []).append(size)
        elif op == 1:
            if address is not None and live.get(key):
                freed = live[key].pop(0)
                counted.append((start, i, gpid, device, None if freed is None else -freed, kind))
            else:
                unmatched += 1
                unmatched_bytes += size or 0
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
# It reads no export (its events are built here): make test-pure would run it unchanged.
@pytest.mark.slow
@pytest.mark.pure_skip
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
        events = pl.DataFrame([(*r, *([None] * 6)) for r in rows], schema=EVENT_SCHEMA, orient="row")
        evidence = MemoryEvidence(events, pl.DataFrame(schema=DEVICE_SCHEMA), dict(MEM_KINDS), pl.DataFrame(),
                                  pl.DataFrame(), pl.DataFrame(), 0, "CUDA_GPU_MEMORY_USAGE_EVENTS")
        ledger = build_ledger(evidence, {"PROCESS_0:COLLECT_GPU_MEMORY_USAGE": ["true"]})
        expected, unmatched, unmatched_bytes, unsized = _reference(rows)
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
                got = ledger.at(t, gpid)
                # The reference sums; where two allocation events lie at one live address the ledger
                # says so as well (the totals here are unknown, so no bound either way).
                for dev in got:
                    assert "already live" in dev.pop("bound_unknown", "already live")
                assert got == _reference_at(series, t, gpid), (t, gpid)
    assert checked > 50


def _none_first(value: Any) -> tuple[bool, Any]:
    return (value is not None, value if value is not None else 0)


def _reference_at(series: list[dict[str, Any]], t: int, gpid: int) -> list[dict[str, Any]]:
    """Ledger.at read naively off the series rows: a device's events with a start at or before t, and
    its deallocations without a start (none where its vm or id is unknown), held bytes clamped at
    zero; the process's devices, or every device if it has none."""
    mine = [r for r in series if r["gpid"] == gpid]
    pairs = sorted({(r["vm"], r["device_id"]) for r in (mine or series)},
                   key=lambda p: (_none_first(p[0]), _none_first(p[1])))
    out = []
    for vm, device in pairs:
        here = [r for r in series if vm is not None and device is not None and r["vm"] == vm
                and r["device_id"] == device
                and ((r["start_ns"] is not None and r["start_ns"] <= t) or (r["start_ns"] is None and r["delta"] < 0))]
        own = [r for r in here if r["gpid"] == gpid]
        sums: dict[Any, int] = {}
        for r in here:
            sums[r["kind"]] = sums.get(r["kind"], 0) + r["delta"]
        by_kind = {str(k): v for k, v in sorted(sums.items(), key=lambda kv: str(kv[0])) if v > 0}
        resident = max(0, sum(r["resident_delta"] for r in here))
        processes: dict[int, dict[str, int]] = {}
        for r in here:
            mech = processes.setdefault(r["gpid"], {})
            mech[r["mechanism"]] = mech.get(r["mechanism"], 0) + (
                r["resident_delta"] if r["mechanism"] in ("segments", "mapped", "static") else r["delta"]
            )
        listed = []
        for g, mech in processes.items():
            held = {m: max(0, mech.get(m, 0)) for m in ("segments", "mapped", "static")}
            entry = {"pid": (g >> 24) & 0xFFFFFF, "global_pid": g, "resident_bytes": sum(held.values()),
                     "by_mechanism": {**held, "pool_reserved": 0, "pool_utilized": 0},
                     "managed_bytes": max(0, mech.get("managed", 0)), "imported_pool_bytes": 0}
            if entry["resident_bytes"] or entry["managed_bytes"] or g == gpid:
                listed.append(entry)
        listed.sort(key=lambda p: (-p["resident_bytes"], p["global_pid"]))
        out.append({
            "vm": vm, "device_id": device, "process_has_events": bool(mine),
            "process_live_bytes": max(0, sum(r["delta"] for r in own)),
            "device_resident_live_bytes": resident,
            "managed_live_bytes": sum(v for k, v in by_kind.items() if k in {"Managed", "Managed Static"}),
            "live_bytes_by_kind": by_kind, "total_bytes": None, "free_at_most_bytes": None,
            "freed_before_bytes": sum(-r["delta"] for r in here if r["delta"] < 0),
            "by_mechanism": {
                m: sum(p["by_mechanism"][m] for p in listed)
                for m in ("segments", "mapped", "pool_reserved", "pool_utilized", "static")
            },
            "processes": listed,
        })
    return out


def test_a_column_joined_by_its_keys_alone_is_the_whole_left_join() -> None:
    """analysis.joins.join_column (the series' call names, the pairs' bytes) against polars' left join of
    the whole frame, on random keys with NULLs, keys of the other frame that repeat (the join makes rows:
    the whole join is taken) and keys no row has."""
    from nsysaudit.analysis.joins import join_column

    rng = random.Random(33)
    for _ in range(200):
        def key() -> int | None:
            return rng.choice([None, 1, 2, 3, 4, 5])

        n = rng.choice([0, 1, 20])
        frame = pl.DataFrame({"a": [key() for _ in range(n)], "b": [key() for _ in range(n)],
                              "v": list(range(n))}, schema={"a": pl.Int64, "b": pl.Int64, "v": pl.Int64})
        m = rng.choice([0, 3, 20])
        other = pl.DataFrame({"a": [key() for _ in range(m)], "b": [key() for _ in range(m)],
                              "c": [rng.randrange(100) for _ in range(m)], "extra": [0] * m},
                             schema={"a": pl.Int64, "b": pl.Int64, "c": pl.Int64, "extra": pl.Int64})
        if rng.random() < 0.5:
            other = other.unique(["a", "b"], keep="first", maintain_order=True)
        whole = frame.join(other.select("a", "b", "c"), on=["a", "b"], how="left", maintain_order="left")
        assert join_column(frame, other, ["a", "b"], "c").equals(whole)
