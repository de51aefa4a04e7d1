"""The allocator's own view (docs/ledger.md, "The allocator's own view"): PyTorch memory snapshots
joined to the trace of the same run.

The joined figures are pinned against the snapshot's own sums and the trace's own events (plain SQL)
on the real H200 captures (``snap/``), and against a brute-force reference on runs built from code
(``tests/snapshots.py``): which process, which clock, the replayed sums, the inactive ranges and who
last used them, what lies outside the allocator, and the refusals of snapshots of other runs.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from builder import global_pid
from conftest import H200_2025
from snapshots import EPOCH_US, SESSION_START, Toy, frames, reference

import nsysaudit
from nsysaudit.analysis.allocator import AllocatorView, allocator_view
from nsysaudit.core.errors import UnusableInput
from nsysaudit.read.snapshot import load_snapshot
from nsysaudit.read.source import probe
from nsysaudit.read.trace import Trace, load
from nsysaudit.reports import conformance, documents

SNAP = H200_2025 / "snap"
MIB, GIB = 1 << 20, 1 << 30


def trace_of(path: Path) -> Trace:
    export = probe(path)
    try:
        return load(export)
    finally:
        export.close()


def view(trace: Trace, paths: list[Path], moments: list[tuple[int, int]], *, tolerance_ns: int = 1_000_000
         ) -> AllocatorView:
    """The snapshots joined to ``trace`` and read at ``moments`` (``(t_ns, gpid)``, as telemetry lines)."""
    return allocator_view(
        [load_snapshot(p) for p in paths], trace.memory, trace.alloc_calls,
        session_start_utc_ns=trace.session_start_utc_ns, capture=trace.capture_bounds,
        traced_gpids=trace.processes["gpid"].drop_nulls().to_list(), tolerance_ns=tolerance_ns,
        telemetry_checked=None, wanted=[("telemetry", f"t{i}", t, g, "line", i) for i, (t, g) in enumerate(moments)],
    )


def sql(path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query).fetchall()


@pytest.fixture(scope="module")
def observe() -> nsysaudit.AnalysisResult:
    return nsysaudit.analyze(SNAP / "observe.sqlite", telemetry=SNAP / "observe.telemetry.jsonl",
                             snapshots=[SNAP / "observe-handoff.pickle", SNAP / "observe-end.pickle"])


@pytest.fixture(scope="module")
def release() -> nsysaudit.AnalysisResult:
    return nsysaudit.analyze(SNAP / "release.sqlite", telemetry=SNAP / "release.telemetry.jsonl",
                             snapshots=[SNAP / "release-handoff.pickle", SNAP / "release-end.pickle"])


def at(result: nsysaudit.AnalysisResult, point: str, label: str | None = None) -> dict[str, Any]:
    found = [p for p in result.to_dict()["allocator"]["at"] if p["point"] == point and label in (None, p["label"])]
    assert found, (point, label)
    return found[-1]["states"][0]


# --- the real captures ---------------------------------------------------------------------------------


@pytest.mark.parametrize("arm", ["observe", "release", "expandable"])
def test_the_end_snapshot_replayed_to_the_handoff_snapshot_gives_the_handoff_snapshots_own_sums(arm: str) -> None:
    trace = trace_of(SNAP / f"{arm}.sqlite")
    handoff = load_snapshot(SNAP / f"{arm}-handoff.pickle")
    end_view = view(trace, [SNAP / f"{arm}-end.pickle"], [])
    gpid = end_view.joined[0].global_pid
    assert gpid is not None
    last = end_view.joined[0].devices[0]
    # the handoff snapshot's last entry, on the trace clock (the same entry is in the end snapshot)
    handoff_view = view(trace, [SNAP / f"{arm}-handoff.pickle"], [])
    t = handoff_view.joined[0].section["history"]["last_ns"]
    assert t is not None and last.first_ns is not None and last.first_ns <= t
    state = view(trace, [SNAP / f"{arm}-end.pickle"], [(t, gpid)]).points[0]["states"][0]
    blocks, segments = handoff.blocks, handoff.segments
    active = blocks.filter(blocks["state"] == "active_allocated")
    assert state["history"] == "within"
    assert state["reserved_bytes"] == segments["total_size"].sum()
    assert state["requested_bytes"] == active["requested_size"].sum()
    assert state["awaiting_free_bytes"] == 0
    assert state["inactive_bytes"] == segments["total_size"].sum() - active["requested_size"].sum()
    # the inactive ranges, reconstructed from the history, are the handoff snapshot's inactive blocks
    inactive = blocks.filter(blocks["state"] == "inactive")
    assert state["inactive_ranges_bytes"] == inactive["size"].sum()
    if arm != "expandable":  # an expandable segment's free blocks at its mapped ranges' seams are split
        assert state["inactive_ranges"] == inactive.height


@pytest.mark.parametrize("arm", ["observe", "release", "expandable"])
def test_a_snapshot_replayed_to_its_own_last_entry_gives_its_own_sums(arm: str) -> None:
    trace = trace_of(SNAP / f"{arm}.sqlite")
    snap = load_snapshot(SNAP / f"{arm}-end.pickle")
    joined = view(trace, [SNAP / f"{arm}-end.pickle"], []).joined[0]
    section = joined.section
    t, gpid = section["history"]["last_ns"], joined.global_pid
    assert t is not None and gpid is not None
    state = view(trace, [SNAP / f"{arm}-end.pickle"], [(t, gpid)]).points[0]["states"][0]
    own = section["at_snapshot"]
    assert own["reserved_bytes"] == snap.segments["total_size"].sum() == state["reserved_bytes"]
    assert own["requested_bytes"] == state["requested_bytes"]
    assert own["inactive_bytes"] == snap.blocks.filter(snap.blocks["state"] == "inactive")["size"].sum()
    assert own["inactive_bytes"] == state["inactive_ranges_bytes"]
    assert section["history"]["reserved_before_bytes"] == 0  # the history reaches back to an empty allocator
    assert [n["code"] for n in section["notes"] if n["code"] == "replay_below_zero"] == []


def test_observe_snapshot_segments_are_the_traces_cudamalloc_events_and_the_rest_is_cublas(
        observe: nsysaudit.AnalysisResult) -> None:
    doc = observe.to_dict()
    assert conformance.problems(doc, documents.AnalysisDocument) == []
    end = doc["allocator"]["snapshots"][1]
    path = SNAP / "observe.sqlite"
    (pid,), = sql(path, "SELECT pid FROM PROCESSES")
    assert end["process"]["pid"] == pid == 965
    assert end["process"]["rule"] == "segment_events"
    # 27 segment_alloc + 1 segment_free, each at the address of one of the trace's events
    assert end["process"]["segment_events"] == end["process"]["segment_events_matched_in_time"] == 28
    assert end["process"]["segments"] == end["process"]["segments_matched"] == 26
    (allocs, alloc_bytes), = sql(path, "SELECT COUNT(*), SUM(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                                       "WHERE memKind = 2 AND memoryOperationType = 0")
    mapped = sum(b["bytes"] for b in end["history"]["by_action"] if b["action"] == "segment_alloc")
    assert (allocs, alloc_bytes) == (32, 149_428_635_648)
    assert mapped == 149_361_262_592
    outside = end["outside_allocator"]
    assert outside["allocations"] == 32 - 27 and outside["bytes"] == alloc_bytes - mapped == 67_373_056
    assert outside["by_api"] == [{"api": "cudaMalloc_v3020", "allocations": 5, "bytes": 67_373_056}]
    # the clock: the export's own session start, checked by every matched segment event
    (utc,), = sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    clock = end["clock"]
    assert clock["method"] == "utc" and clock["offset_ns"] == -utc and clock["checked"] is True
    assert clock["residuals"] == 28 and clock["max_abs_residual_ns"] == 14_482
    assert clock["telemetry_alignment_checked"] is True


def test_at_the_failure_the_admission_blocks_are_inactive_and_cublas_is_outside(
        observe: nsysaudit.AnalysisResult) -> None:
    doc = observe.to_dict()
    state = at(observe, "finding")
    assert state["history"] == "within" and state["verified"] is True
    assert state["reserved_bytes"] == 149_344_485_376
    assert state["inactive_bytes"] == 148_689_059_832
    assert (state["inactive_ranges"], state["largest_inactive_bytes"]) == (20, {"small": 982_016, "large": 8 * GIB})
    top = state["inactive_holders"][0]
    assert (top["bytes"], top["ranges"], top["allocations"]) == (148_636_762_112, 18, 18)
    stacks = {(s["snapshot"], s["stack"]): s for s in doc["allocator"]["stacks"]}
    site = stacks[(state["snapshot"], top["stack"])]["frames"]
    assert site == [{"filename": "snap_workload.py", "line": 33, "name": "<module>"}]
    freed = stacks[(state["snapshot"], top["freed_stack"])]["frames"]
    assert freed[-1]["line"] == 37  # `del blocks`
    # three 16 MiB blocks of the backward pass, allocated with no Python frame on the autograd thread
    assert state["inactive_holders"][1]["bytes"] == 3 * 16 * MIB
    assert stacks[(state["snapshot"], state["inactive_holders"][1]["stack"])]["frames"] == []
    assert sum(h["bytes"] for h in state["inactive_holders"]) + state["unattributed_inactive_bytes"] == \
        state["inactive_ranges_bytes"]
    # outside the allocator at the failure: the main thread's cuBLAS (1,024 + 131,072 + 67,108,864 B) and the
    # worker's two successful allocations before the failed one (1,024 + 131,072 B)
    assert state["outside_allocator"]["bytes"] == 67_373_056
    finding = next(p for p in doc["allocator"]["at"] if p["point"] == "finding")
    assert "snap_workload.py:33" in finding["statement"] and "148.7" not in finding["statement"]


def test_at_the_handoff_the_figures_are_the_telemetrys_own(observe: nsysaudit.AnalysisResult) -> None:
    state = at(observe, "telemetry", "handoff")
    handoff = next(e for e in observe.to_dict()["telemetry"]["timeline"] if e["event"] == "handoff")
    assert state["reserved_bytes"] == handoff["values"]["reserved"] == 149_344_485_376
    # PyTorch's `allocated` counts the rounding of the live blocks (a 4-byte tensor holds 512 B)
    assert handoff["values"]["allocated"] - state["requested_bytes"] == 508


def test_release_gave_the_admission_segments_back_at_empty_cache(release: nsysaudit.AnalysisResult) -> None:
    doc = release.to_dict()
    end = doc["allocator"]["snapshots"][1]
    frees = end["segment_frees"]
    stacks = {(s["snapshot"], s["stack"]): s for s in doc["allocator"]["stacks"]}
    empty_cache = frees[0]
    assert (empty_cache["segments"], empty_cache["bytes"]) == (18, 148_704_854_016)
    assert stacks[(1, empty_cache["stack"])]["frames"][-1] == {"filename": "snap_workload.py", "line": 48,
                                                               "name": "<module>"}
    # the trace's cudaFree events between the handoff and backward_start are the same 18 segments
    (n, freed), = sql(SNAP / "release.sqlite", "SELECT COUNT(*), SUM(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS "
                                               "WHERE memoryOperationType = 1 AND start BETWEEN 7000000000 AND "
                                               "7240000000")
    assert (n, freed) == (18, 148_704_854_016)
    after = at(release, "telemetry", "cache_release")
    assert after["reserved_bytes"] == 149_344_485_376 - 148_704_854_016


def test_compare_says_what_the_release_did_to_the_blocks(
        observe: nsysaudit.AnalysisResult, release: nsysaudit.AnalysisResult) -> None:
    from nsysaudit.reports.compare import compare_results

    doc = compare_results(observe, release).to_dict()
    assert conformance.problems(doc, documents.ComparisonDocument) == []
    diff = doc["differences"]["allocator"]
    assert diff["release"] is not None and diff["release"]["segments_released"] is not None
    assert diff["release"]["segments_released"]["segments"] == 19  # 18 at empty_cache, 1 during admission
    worker = next(p for p in diff["library_calls"] if p["match_key"]["thread_role"] == "other")
    assert worker["observe"] is not None and worker["release"] is not None
    assert worker["observe"]["inactive_bytes"] == 148_689_059_832
    assert worker["release"]["inactive_bytes"] == 51_314_680
    assert worker["inactive_release_minus_observe"] == 51_314_680 - 148_689_059_832
    assert [x["code"] for x in doc["not_established"]] == ["single_run_per_arm"]


def test_expandable_segments_maps_are_joined_to_their_page_events() -> None:
    result = nsysaudit.analyze(SNAP / "expandable.sqlite", snapshots=[SNAP / "expandable-end.pickle"])
    end = result.to_dict()["allocator"]["snapshots"][0]
    assert [n["code"] for n in end["notes"]] == ["expandable_segments"]
    assert end["expandable_segments"] is True and end["at_snapshot"]["expandable_segments"] == 2
    (pages, mapped), = sql(SNAP / "expandable.sqlite", """
        SELECT COUNT(*), SUM(m.bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS m JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = m.correlationId JOIN StringIds s ON s.id = r.nameId
         WHERE s.value = 'cuMemSetAccess' AND m.memoryOperationType = 0""")
    maps = next(b for b in end["history"]["by_action"] if b["action"] == "segment_map")
    assert (pages, maps["entries"]) == (7_122, 32)
    assert mapped == maps["bytes"] == end["at_snapshot"]["reserved_bytes"] == 149_340_291_072
    assert end["process"]["segment_events_matched_in_time"] == 32
    assert end["clock"]["checked"] is True and end["clock"]["max_abs_residual_ns"] == 11_761
    state = at(result, "finding")
    assert state["largest_inactive_bytes"]["large"] == 148_633_550_848  # one expandable segment: one range


def test_a_snapshot_of_another_run_is_refused() -> None:
    with pytest.raises(UnusableInput, match=r"not a snapshot of this run: none of its 26 segment\(s\) and 28 segment "
                                            r"event\(s\) .* ends 1.937 s before the capture began"):
        nsysaudit.analyze(SNAP / "release.sqlite", snapshots=[SNAP / "observe-end.pickle"])
    # the expandable capture of another day: cuMemAddressReserve gave the same addresses, not the same times
    with pytest.raises(UnusableInput, match=r"not at their times \(the nearest 435,196.525 s away"):
        nsysaudit.analyze(H200_2025 / "expandable" / "observe.sqlite", snapshots=[SNAP / "expandable-end.pickle"])


def test_without_a_snapshot_the_document_has_no_allocator_key() -> None:
    result = nsysaudit.analyze(SNAP / "observe.sqlite")
    assert "allocator" not in result.to_dict() and result.analysis.allocator is None


# --- runs built from code, against the brute-force reference --------------------------------------------


def random_run(seed: int) -> Toy:
    rng = random.Random(seed)
    toy = Toy(stacks=[[], frames(("a.py", 1, "f")), frames(("b.py", 2, "g")), frames(("c.py", 3, "h"))])
    t, segments, live_allocs = 1_000_000, [], {}
    base = 0x7F00_0000_0000
    for _ in range(rng.randint(20, 60)):
        t += rng.randint(1, 50)
        choice = rng.random()
        if choice < 0.15 or not segments:
            size = rng.choice([2 * MIB, 20 * MIB, 64 * 1024])
            addr = base + len(segments) * 64 * MIB
            segments.append((addr, size))
            toy.segment(t, addr, size, rng.randint(1, 3))
        elif choice < 0.6:
            addr, size = rng.choice(segments)
            if size == 0:
                continue
            offset = rng.randrange(0, size // 512) * 512
            want = rng.choice([1, 511, 512, 513, 4096, 100_000])
            end = addr + offset + ((want + 511) // 512) * 512
            if end > addr + size or any(a < end and a + ((s + 511) // 512) * 512 > addr + offset
                                        for a, s in live_allocs.items()):
                continue
            live_allocs[addr + offset] = want
            toy.alloc(t, addr + offset, want, rng.randint(1, 3))
        elif choice < 0.95 and live_allocs:
            a = rng.choice(sorted(live_allocs))
            del live_allocs[a]
            toy.free(t, a, rng.randint(1, 3))
        else:
            idle = [(a, s) for a, s in segments if s and not any(a <= x < a + s for x in live_allocs)]
            if idle:
                a, s = rng.choice(idle)
                segments[segments.index((a, s))] = (a, 0)
                toy.release(t, a, 1)
    return toy


@pytest.mark.parametrize("seed", [pytest.param(s, marks=pytest.mark.slow) if s > 2 else s for s in range(12)])
def test_the_columnar_join_agrees_with_the_brute_force_reference(tmp_path: Path, seed: int) -> None:
    toy = random_run(seed)
    export = toy.export(tmp_path / "run.sqlite")
    snap = toy.write(tmp_path / "run-end.pickle")
    trace = trace_of(export)
    gpid = global_pid(toy.pid)
    times = sorted({a.t_us for a in toy.actions})
    moments = [times[len(times) * k // 8] for k in range(8)] + [times[-1]]
    result = view(trace, [snap], [(toy.trace_ns(t), gpid) for t in moments])
    assert result.joined[0].section["clock"]["checked"] is True
    for t, point in zip(moments, result.points, strict=True):
        state, ref = point["states"][0], reference(toy, t)
        assert state["history"] == ("within" if t >= times[0] else "before")
        assert (state["reserved_bytes"], state["requested_bytes"], state["inactive_bytes"]) == (
            ref["reserved"], ref["requested"], ref["inactive"]), t
        assert (state["inactive_ranges"], state["inactive_ranges_bytes"]) == (ref["ranges"], ref["ranges_bytes"]), t
        stacks = {s["stack"]: s["frames"][0]["filename"] for s in result.stacks}  # a.py, b.py, c.py
        holders = {stacks[h["stack"]]: h["bytes"] for h in state["inactive_holders"]}
        assert holders == {toy.stacks[k][0]["filename"]: v for k, v in ref["holders"].items()}, t
        assert state["unattributed_inactive_bytes"] == ref["unattributed"], t


def test_a_history_the_ring_buffer_cut_still_replays_back_from_the_snapshot(tmp_path: Path) -> None:
    toy = random_run(3)
    export = toy.export(tmp_path / "run.sqlite")
    snap = toy.write(tmp_path / "run-end.pickle", drop_first=10)
    trace = trace_of(export)
    first = next(a.t_us for a in toy.actions if a.t_us * 1000 >= (toy.entries()[10]["time_us"] - EPOCH_US) * 1000)
    later = [a.t_us for a in toy.actions if a.t_us > first]
    result = view(trace, [snap], [(toy.trace_ns(first - 1), global_pid(toy.pid)),
                                  (toy.trace_ns(later[len(later) // 2]), global_pid(toy.pid))])
    before, within = (p["states"][0] for p in result.points)
    assert before["history"] == "before" and before["reserved_bytes"] is None
    ref = reference(toy, later[len(later) // 2])
    assert (within["reserved_bytes"], within["requested_bytes"]) == (ref["reserved"], ref["requested"])


def test_without_the_session_start_the_clock_comes_from_the_segment_events(tmp_path: Path) -> None:
    toy = Toy().segment(1_000_000, 0x7F00_0000_0000, 20 * MIB).alloc(1_000_010, 0x7F00_0000_0000, 4096)
    toy.segment(1_000_020, 0x7F00_1000_0000, 2 * MIB)
    export = toy.export(tmp_path / "run.sqlite", session_start=None)
    snap = toy.write(tmp_path / "run-end.pickle")
    trace = trace_of(export)
    clock = view(trace, [snap], []).joined[0].section["clock"]
    assert clock["method"] == "segment_events" and clock["checked"] is True
    assert clock["offset_ns"] == -SESSION_START - 2_000  # each event 2 µs before its entry
    assert clock["max_abs_residual_ns"] == 0


def test_two_processes_with_the_same_addresses_are_told_apart_by_time(tmp_path: Path) -> None:
    mine = Toy(pid=100).segment(1_000_000, 0x7F00_0000_0000, 20 * MIB).alloc(1_000_010, 0x7F00_0000_0000, 4096)
    other = Toy(pid=200).segment(1_500_000, 0x7F00_0000_0000, 20 * MIB)
    export = mine.export(tmp_path / "run.sqlite", others=[other])
    trace = trace_of(export)
    joined = view(trace, [mine.write(tmp_path / "mine.pickle")], []).joined[0]
    assert joined.section["process"]["pid"] == 100
    assert view(trace, [other.write(tmp_path / "other.pickle")], []).joined[0].section["process"]["pid"] == 200


def test_a_snapshot_is_tied_to_the_only_process_when_the_trace_has_no_memory_events(tmp_path: Path) -> None:
    toy = Toy().segment(1_000_000, 0x7F00_0000_0000, 20 * MIB)
    export = toy.export(tmp_path / "run.sqlite", memory=False)
    joined = view(trace_of(export), [toy.write(tmp_path / "run.pickle")], []).joined[0]
    assert joined.section["process"]["rule"] == "only_traced_process"
    assert joined.section["clock"]["checked"] is False  # no segment event checked it


def test_a_history_outside_the_capture_cannot_be_tied_without_memory_events(tmp_path: Path) -> None:
    toy = Toy().segment(1_000_000, 0x7F00_0000_0000, 20 * MIB)
    export = toy.export(tmp_path / "run.sqlite", memory=False)
    late = Toy().segment(9_000_000_000_000, 0x7F00_0000_0000, 20 * MIB)
    with pytest.raises(UnusableInput, match="cannot be tied to this trace: the export has no device-memory events"):
        view(trace_of(export), [late.write(tmp_path / "late.pickle")], [])


def test_a_cuda_malloc_async_snapshot_with_nothing_in_it_is_refused(tmp_path: Path) -> None:
    import pickle

    toy = Toy().segment(1_000_000, 0x7F00_0000_0000, 20 * MIB)
    export = toy.export(tmp_path / "run.sqlite")
    path = tmp_path / "async.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[]],
                                   "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}}))
    with pytest.raises(UnusableInput, match="cudaMallocAsync backend holds no segments, blocks or history"):
        view(trace_of(export), [path], [])
