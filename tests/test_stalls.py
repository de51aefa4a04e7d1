"""Host stalls (docs/stalls.md): which calls blocked the host, what ran on the device meanwhile, by
stream, launch and NVTX range, each rule in a small export built from the real DDL (tests/builder.py).

Times are in microseconds of the scenario (``us``); a process's CUDA API trace spans its calls.
"""

from __future__ import annotations

import random
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, Kernel, LibCall, Memcpy, Memset, Range, Sync
from conftest import FIXTURES, needs_native, requires_nsys

import nsysaudit
from nsysaudit.analysis.stalls import STALL_MIN_NS
from nsysaudit.read.gpu_work import LONGEST_CALLS, MergeWay, SumsWay, _longest, _merge, _sums

PID = 100
US = 1_000


def us(n: float) -> int:
    return int(n * US)


def analyze(make_export: Any, spec: Export) -> dict[str, Any]:
    return nsysaudit.analyze(make_export(spec)).to_dict()


def serialized_readback() -> Export:
    """train_epoch_0 launches 4 kernels of 2 ms on stream 13; validation_0 reads back with a pageable
    device-to-host copy (its own copy 0.1 ms) and a stream synchronization, on the same stream."""
    calls = [Call("cudaLaunchKernel_v7000", us(10 + i), us(11 + i), corr=10 + i) for i in range(4)]
    calls += [
        Call("cudaMemcpyAsync_v3020", us(20), us(8_200), corr=20),  # waits behind the 4 kernels, then copies
        Call("cudaStreamSynchronize_v3020", us(8_210), us(8_230), corr=21),
        Call("cudaLaunchKernel_v7000", us(9_000), us(9_001), corr=22),  # after: the trace's end
    ]
    kernels = [Kernel(us(100 + 2_000 * i), us(100 + 2_000 * (i + 1)), 10 + i, stream=13, name="gemm") for i in range(4)]
    return Export(
        calls=calls,
        kernels=kernels,
        memcpys=[Memcpy(us(8_100), us(8_200), 20, stream=13, copy_kind=2, src_kind=2, dst_kind=0, bytes=16)],
        syncs=[Sync(us(8_212), us(8_228), 21, stream=13)],
        ranges=[Range("train_epoch_0", us(5), us(15)), Range("validation_0", us(18), us(8_300))],
        thread_names={(PID, PID): "python3"},
    )


def test_a_pageable_readback_waits_behind_the_training_kernels(make_export: Any) -> None:
    s = analyze(make_export, serialized_readback())["stalls"]
    assert s["blocking_calls"] == 2 and s["stalls"] == 1  # the launches do not block
    copy = next(c for c in s["calls"] if c["kind"] == "async_copy")
    assert (copy["blocked_ns"], copy["own_ns"], copy["waited_ns"]) == (us(8_180), us(100), us(8_080))
    assert copy["copy"] == {"rows": 1, "bytes": 16, "copy_kind": "Device-to-Host", "memory_kinds": "Pageable, Device"}
    assert copy["synchronized"]["scope"] == "stream" and copy["synchronized"]["stream_id"] == 13
    assert copy["behind"] == [{"stream_id": 13, "work": "kernel", "rows": 4, "busy_ns": us(8_000),
                               "synchronized_stream": True}]
    assert copy["covered_ns"] == us(8_100) and copy["idle_ns"] == us(80)  # the first kernel began 80 us into the call
    a = copy["attribution"]
    assert a is not None and a["launched_before_rows"] == 4 and a["launch_unknown_rows"] == 0
    assert a["ranges"] == [{"nvtx_range": "train_epoch_0", "rows": 4, "busy_ns": us(8_000)}]
    assert a["kernels"] == [{"name": "gemm", "rows": 4, "busy_ns": us(8_000)}]
    assert copy["nvtx"] == ["validation_0"]
    assert copy["statement"] == (
        "cudaMemcpyAsync on python3 (pid 100, tid 100), correlation 20, blocked the host 8.2 ms; its own copy "
        "(Device-to-Host, Pageable, Device, 16 B) ran 100.0 µs of it; 8.0 ms behind 4 kernels on stream 13 (the "
        "stream it synchronized); of that work: launched before it inside train_epoch_0; no GPU work of the "
        "process at all for 80.0 µs of it"
    )
    sync = next(c for c in s["calls"] if c["kind"] == "explicit")
    assert (sync["blocked_ns"], sync["behind"], sync["idle_ns"]) == (us(20), None, None)  # not a stall
    assert sync["synchronized"]["source"] == "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    [validation] = [r for r in s["ranges"] if r["range"] == "validation_0"]
    assert (validation["calls"], validation["blocked_ns"]) == (2, us(8_200))
    assert validation["statement"] == (
        "validation_0 (pid 100): 2 blocking calls, 8.2 ms blocked, 8.0 ms of it behind stream 13, 80.0 µs with no "
        "GPU work of the process"
    )


@pytest.mark.parametrize("bound", [30, 200])
def test_the_union_behind_a_stall_is_known_within_its_bound(make_export: Any, monkeypatch: Any, bound: int) -> None:
    """120 kernels inside one stall, 60 on stream 13 then 60 on stream 14, each overlapping its
    neighbour on the other stream, read in batches of 4 rows: 121 pieces held (the copy's own among
    them); within the bound on the intervals held the union is exact (61 intervals), past it unknown
    (null, said): the memory is bounded, and nothing is guessed."""
    import nsysaudit.read.gpu_work as gpu_work

    monkeypatch.setattr(gpu_work, "BATCH_ROWS", 4)
    monkeypatch.setattr(gpu_work, "MAX_BUSY_INTERVALS", bound)
    spec = serialized_readback()
    spec.kernels = [Kernel(us(100 + 100 * i + lag), us(150 + 100 * i + lag), 10, stream=stream, name="k")
                    for stream, lag in ((13, 0), (14, 20)) for i in range(60)]
    d = analyze(make_export, spec)
    copy = next(c for c in d["stalls"]["calls"] if c["kind"] == "async_copy")
    union = [w for w in d["warnings"] if w["kind"] == "gpu_work_union_unknown"]
    if bound < 121:
        assert copy["covered_ns"] is None and f"more than {bound} separate intervals" in union[0]["message"]
        assert copy["behind"][0]["rows"] == 60  # the sums per stream are still counted
    else:
        assert copy["covered_ns"] == us(60 * 70 + 100) and not union  # the kernels' union and its own copy


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_text_in_a_gpu_tables_integer_column_is_a_wrong_type_on_every_engine(make_export: Any, monkeypatch: Any,
                                                                              native: str) -> None:
    """A damaged record's bytes read as text in MEMCPY's start: counted as a value of the wrong type and
    read as NULL by the native reader and by the frame builder alike, never decoded as a name."""
    monkeypatch.setenv("NSYSAUDIT_NATIVE", native)
    spec = serialized_readback()
    spec.raw_sql = ["UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = CAST(X'FF80' AS TEXT)"]
    d = analyze(make_export, spec)
    kinds = {w["kind"]: w for w in d["warnings"]}
    # read twice (the pageable copies' rows before the scan, the GPU pass after), counted each time
    assert "invalid_utf8_text" not in kinds and kinds["type_mismatch"]["count"] == 2
    assert "CUPTI_ACTIVITY_KIND_MEMCPY" in kinds["type_mismatch"]["message"]


def test_a_time_outside_the_capture_is_damage_left_out_of_the_stalls(make_export: Any) -> None:
    """nsys records nothing outside its capture: a blocking call or a GPU row dated there is left out
    and counted (as the failure analysis reads such rows: issue 34), never read as a wait of 2^63 ns."""
    spec = serialized_readback()
    spec.analysis_duration = us(10_000)  # ANALYSIS_DETAILS: the capture lasts 10 ms
    spec.raw_sql = [
        f'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = {(1 << 63) - 1} WHERE correlationId = 21',
        f'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = {us(20_000)} WHERE correlationId = 13',
    ]
    d = analyze(make_export, spec)
    s = d["stalls"]
    assert s["blocking_calls"] == 1 and [c["kind"] for c in s["calls"]] == ["async_copy"]
    [copy] = s["calls"]
    assert copy["behind"] == [{"stream_id": 13, "work": "kernel", "rows": 3, "busy_ns": us(6_000),
                               "synchronized_stream": True}]
    [outside] = [w for w in d["warnings"] if w["kind"] == "gpu_work_outside_capture"]
    assert outside["count"] == 2 and outside["message"].startswith(
        "1 CUDA API row(s) of a blocking call and 1 GPU activity row(s) have a start or end outside the capture")


def test_the_answer_says_the_stalls_above_five_percent_of_the_trace(make_export: Any) -> None:
    d = analyze(make_export, serialized_readback())
    [said] = d["answer"]["stalls"]
    assert said.startswith("pid 100 (proc): 1 blocking call of at least 1 ms blocked the host 8.2 ms, 91.0% of "
                           "its 9.0 ms CUDA API trace (2 blocking calls in all, 8.2 ms); the longest: cudaMemcpyAsync")
    assert d["verdict"] == "no_failure"  # the verdict is about failures only
    # The same stall in a trace 200 times as long is under 5%: counted, not in the answer.
    spec = serialized_readback()
    spec.calls.append(Call("cudaLaunchKernel_v7000", us(1_800_000), us(1_800_001), corr=99))
    d = analyze(make_export, spec)
    assert d["answer"]["stalls"] == [] and d["stalls"]["stalls"] == 1 and not d["stalls"]["processes"][0]["above"]


def test_work_on_another_stream_is_said_to_be_another_stream(make_export: Any) -> None:
    spec = Export(
        calls=[Call("cudaLaunchKernel_v7000", us(1), us(2), corr=1),
               Call("cudaStreamSynchronize_v3020", us(10), us(3_010), corr=2)],
        kernels=[Kernel(us(5), us(3_005), 1, stream=14)],
        syncs=[Sync(us(11), us(3_009), 2, stream=13)],
    )
    [c] = analyze(make_export, spec)["stalls"]["calls"]
    assert c["behind"][0]["synchronized_stream"] is False
    assert "behind 1 kernel on stream 14 (not the stream it synchronized, stream 13)" in c["statement"]


def test_a_device_synchronization_and_a_launch_after_it_began(make_export: Any) -> None:
    """cudaDeviceSynchronize waits for the device; a kernel another thread launched while it waited
    ran inside it too: it is behind it in time, said to be launched after it began."""
    spec = Export(
        calls=[Call("cudaLaunchKernel_v7000", us(1), us(2), corr=1),
               Call("cudaDeviceSynchronize_v3020", us(10), us(4_010), corr=2),
               Call("cudaLaunchKernel_v7000", us(20), us(21), corr=3, tid=101)],
        kernels=[Kernel(us(5), us(2_005), 1), Kernel(us(2_005), us(4_005), 3)],
    )
    [c] = analyze(make_export, spec)["stalls"]["calls"]
    assert c["synchronized"]["scope"] == "device" and c["synchronized"]["stream_id"] is None
    a = c["attribution"]
    assert (a["launched_before_rows"], a["launched_after_rows"]) == (1, 1)
    [after] = [g for g in a["groups"] if g["launched"] == "after"]
    assert after["launch_thread"]["tid"] == 101 and after["busy_ns"] == us(2_000)
    assert "it synchronized the whole device" in c["statement"] and "launched after it began" in c["statement"]


def test_a_kernel_launched_inside_a_cublas_call_names_the_library(make_export: Any) -> None:
    spec = Export(
        calls=[Call("cudaLaunchKernel_v7000", us(2), us(3), corr=1),
               Call("cudaStreamSynchronize_v3020", us(10), us(2_010), corr=2)],
        lib_calls=[LibCall("cublasGemmEx", us(1), us(4))],
        kernels=[Kernel(us(5), us(2_005), 1, name="sm90_xmma_gemm")],
    )
    [c] = analyze(make_export, spec)["stalls"]["calls"]
    assert c["attribution"]["libraries"] == [{"library": "cuBLAS", "library_api": "cublasGemmEx", "rows": 1,
                                              "busy_ns": us(1_995)}]
    assert "inside library calls: cuBLAS 100%" in c["statement"]


def test_what_does_not_block(make_export: Any) -> None:
    """An asynchronous copy of pinned memory, a device-to-device synchronous copy, a memset into
    device memory: none blocks the host; a memset into pinned memory does."""
    spec = Export(
        calls=[Call("cudaMemcpyAsync_v3020", us(1), us(2), corr=1),
               Call("cudaMemcpy_v3020", us(3), us(4), corr=2),
               Call("cudaMemset_v3020", us(5), us(6), corr=3),
               Call("cudaMemset_v3020", us(7), us(9), corr=4),
               Call("cudaMemcpyAsync_v3020", us(10), us(12), corr=5),  # pageable: some copy is, so names are marked
               Call("cudaStreamWaitEvent_v3020", us(13), us(14), corr=6)],
        memcpys=[Memcpy(us(1), us(2), 1, src_kind=1), Memcpy(us(3), us(4), 2, copy_kind=8, src_kind=2),
                 Memcpy(us(10), us(12), 5, src_kind=0)],
        memsets=[Memset(us(5), us(6), 3, mem_kind=2), Memset(us(7), us(8), 4, mem_kind=1)],
    )
    s = analyze(make_export, spec)["stalls"]
    assert sorted((c["correlation_id"], c["kind"]) for c in s["calls"]) == [(4, "sync_memset"), (5, "async_copy")]


def test_explicit_synchronizations_by_name() -> None:
    from nsysaudit.core.blocking import blocking_kind

    named = {
        "cudaStreamSynchronize_v3020": "explicit", "cudaStreamSynchronize_ptsz": "explicit",
        "cudaDeviceSynchronize_v3020": "explicit", "cudaEventSynchronize_v3020": "explicit",
        "cudaThreadSynchronize_v3020": "explicit", "cuCtxSynchronize": "explicit", "cuStreamSynchronize": "explicit",
        "cuEventSynchronize": "explicit", "cuMemcpyDtoH_v2": "sync_copy", "cudaMemcpy2DAsync_v3020": "async_copy",
        "cuMemsetD32_v2": "sync_memset", "cuMemFree_v2": "free", "cudaFreeHost_v3020": None,
        "cudaFreeAsync_v11020": None, "cudaStreamQuery_v3020": None, "cudaEventQuery_v3020": None,
        "cudaStreamWaitEvent_v3020": None, "cuMemsetD8Async": None,
    }
    assert {api: blocking_kind(api) for api in named} == named


@pytest.mark.parametrize("way", ["as-of", "numpy", "pairs", None])
def test_the_sums_equal_a_brute_force_overlap_over_random_rows(way: SumsWay | None) -> None:
    """_sums (as-of joins over starts and ends, numpy's binary searches, one query over the pairs, or
    the one _sums picks) against the pairs, in Python."""
    rng = random.Random(32)
    for _ in range(30):
        work = [(rng.choice([1, 2]), rng.choice([7, 8]), s, s + rng.randint(0, 50))
                for s in (rng.randint(0, 500) for _ in range(rng.randint(1, 60)))]
        windows = [(i, rng.choice([1, 2]), a, a + rng.randint(0, 200)) for i, a in
                   enumerate(rng.randint(0, 500) for _ in range(rng.randint(1, 20)))]
        got = _sums(
            pl.DataFrame(windows, schema=["call_id", "gpid", "a", "b"], orient="row"),
            pl.DataFrame(work, schema=["gpid", "stream_id", "start_ns", "end_ns"], orient="row"),
            way=way,
        )
        want: dict[tuple[int, int], list[int]] = {}
        for call, g, a, b in windows:
            for wg, stream, s, e in work:
                if wg == g and s < b and e > a:
                    n, busy = want.setdefault((call, stream), [0, 0])
                    want[(call, stream)] = [n + 1, busy + min(e, b) - max(s, a)]
        assert {(c, st): [n, b] for c, st, n, b in got.iter_rows()} == want


@pytest.mark.parametrize("way", ["polars", "numpy", None])
def test_the_merged_intervals_equal_a_brute_force_union_over_random_rows(way: MergeWay | None) -> None:
    """_merge by process (polars' one query, numpy's running maximum, or the one _merge picks): per
    process the union of the rows' intervals (touching ones one piece, empty ones points), the same
    frame whatever the way, ordered by process then start."""
    rng = random.Random(33)
    for _ in range(40):
        rows = [(rng.choice([3, 1, 2]), s, s + rng.choice([0, 0, 1, 5, 30]))
                for s in (rng.randint(0, 120) for _ in range(rng.randint(0, 40)))]
        frame = pl.DataFrame(rows, schema=["gpid", "start_ns", "end_ns"], orient="row")
        got = _merge(frame, ["gpid"], way=way)
        want = []
        for g in sorted({r[0] for r in rows}):
            for s, e in sorted((s, e) for gg, s, e in rows if gg == g):
                if want and want[-1][0] == g and s <= want[-1][2]:
                    want[-1][2] = max(want[-1][2], e)
                else:
                    want.append([g, s, e])
        assert [list(r) for r in got.iter_rows()] == want
        assert got.equals(_merge(frame, ["gpid"], way="polars"))
    with pytest.raises(ValueError):
        _merge(pl.DataFrame({"call_id": [1], "start_ns": [0], "end_ns": [1]}), ["call_id"], way="numpy")


REAL_STALLS = ["public/nsys-ai_h100_2gpu_1s_2026.2.sqlite", "public/nsys-ai_mfu_2gpu_after_2026.2.sqlite",
               "h200-cuda13-nsys2025.3/sync/serialized.sqlite", "h200-cuda13-nsys2025.3/sync/forked.sqlite"]


@pytest.mark.parametrize("name", REAL_STALLS)
@pytest.mark.parametrize("batch_rows", [1 << 18, 64])
def test_the_page_readers_own_sums_change_no_number(name: str, batch_rows: int, monkeypatch: Any) -> None:
    """The page reader adds up the rows the stalls' reduction would only add up (native.Stalls): the
    whole analysis is the same as where it returns every row it keeps to be reduced in polars, in one
    batch per table or in batches of 64 rows (a batch with rows of both kinds: its union merged again).
    One call attributed, so that the rows behind the others are the reader's to add up."""
    from pathlib import Path

    import nsysaudit.read.gpu_work as gpu_work
    from nsysaudit.read import native

    if native.load() is None:
        pytest.skip("the native engine is not built")
    monkeypatch.setattr(gpu_work, "BATCH_ROWS", batch_rows)
    monkeypatch.setattr(gpu_work, "MAX_ATTRIBUTED_CALLS", 1)
    path = Path(__file__).parent / "fixtures" / name
    summed = nsysaudit.analyze(path).to_dict()
    monkeypatch.setattr(native, "Stalls", lambda *args: None)
    assert nsysaudit.analyze(path).to_dict() == summed
    assert summed["stalls"]["stalls"] > 0


@pytest.mark.parametrize("name", REAL_STALLS)
def test_real_exports_against_plain_sql(name: str) -> None:
    """Every blocking call's blocked time, its work per stream and its covered time, held to plain SQL."""
    import sqlite3
    from pathlib import Path

    path = Path(__file__).parent / "fixtures" / name
    s = nsysaudit.analyze(path).to_dict()["stalls"]
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    syncs = conn.execute(
        """SELECT r.correlationId, r."end" - r.start FROM CUPTI_ACTIVITY_KIND_RUNTIME r
           JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE 'cudaStreamSynchronize%'
           OR s.value LIKE 'cudaDeviceSynchronize%' OR s.value = 'cudaFree_v3020'""").fetchall()
    pageable = conn.execute(
        """SELECT r.correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_MEMCPY m
           ON m.correlationId = r.correlationId AND (m.globalPid >> 24) = (r.globalTid >> 24)
           WHERE m.srcKind = 0 OR m.dstKind = 0""").fetchall()
    assert s["blocking_calls"] == len(syncs) + len(pageable) == s["calls_total"]
    by_corr = {c["correlation_id"]: c for c in s["calls"]}
    for corr, blocked in syncs:
        if corr in by_corr:
            assert by_corr[corr]["blocked_ns"] == blocked
    for c in s["calls"]:
        gpid = c["global_tid"] - c["global_tid"] % (1 << 24)
        for b in c["behind"] if c["stall"] else []:  # per stream: the stalls'
            table = {"kernel": "KERNEL", "memcpy": "MEMCPY", "memset": "MEMSET"}[b["work"]]
            n, busy = conn.execute(
                f"""SELECT count(*), sum(min("end", ?) - max(start, ?)) FROM CUPTI_ACTIVITY_KIND_{table}
                    WHERE globalPid = ? AND streamId = ? AND start < ? AND "end" > ? AND correlationId != ?""",
                (c["end_ns"], c["start_ns"], gpid, b["stream_id"], c["end_ns"], c["start_ns"], c["correlation_id"]),
            ).fetchone()
            assert (b["rows"], b["busy_ns"]) == (n, busy)
        if not c["stall"]:  # the union, as the sums per stream, only inside the stalls
            assert (c["covered_ns"], c["idle_ns"]) == (None, None)
            continue
        intervals = sorted(conn.execute(
            """SELECT max(start, ?), min("end", ?) FROM (SELECT start, "end", globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL
               UNION ALL SELECT start, "end", globalPid FROM CUPTI_ACTIVITY_KIND_MEMCPY UNION ALL SELECT start, "end",
               globalPid FROM CUPTI_ACTIVITY_KIND_MEMSET) WHERE globalPid = ? AND start < ? AND "end" > ?""",
            (c["start_ns"], c["end_ns"], gpid, c["end_ns"], c["start_ns"])).fetchall())
        covered, reach = 0, None
        for lo, hi in intervals:  # the union, merged by hand
            if reach is None or lo > reach:
                covered += hi - lo
                reach = hi
            elif hi > reach:
                covered += hi - reach
                reach = hi
        assert c["covered_ns"] == covered and c["idle_ns"] == c["blocked_ns"] - covered
    longest = max(s["calls"], key=lambda c: c["blocked_ns"])
    assert longest["blocked_ns"] >= STALL_MIN_NS and longest["behind"]


def test_check_holds_a_run_to_its_stall_budgets(capsys: Any, make_export: Any, tmp_path: Any) -> None:
    from conftest import run

    make_export(serialized_readback(), "serialized.sqlite")
    expect = tmp_path / "expect.toml"

    def check(budgets: str) -> tuple[int, str]:
        expect.write_text(f'[[expect]]\nfiles = "serialized.sqlite"\n{budgets}\n')
        code, out, _ = run(capsys, "check", tmp_path / "serialized.sqlite", "--expect", expect)
        return code, out

    assert check("stall_ms_max = 50\nstall_ms_max_by_range = { \"validation_*\" = 9 }")[0] == 0
    code, out = check('stall_ms_max = 5\nstall_ms_max_by_range = { "validation_*" = 2, "train_*" = 0 }')
    assert code == 1
    assert ("host stalls took 8.2 ms (1 call(s) that each blocked at least 1 ms), at most 5 ms expected; host stalls "
            "in NVTX range validation_0 (pid 100) took 8.2 ms, at most 2 ms expected for 'validation_*'") in out
    code, out = check('stall_ms_max = -1')
    assert code == 2


def test_batch_rows_carry_the_stall_totals(make_export: Any) -> None:
    table = nsysaudit.audit_many([make_export(serialized_readback())], jobs=1)
    assert table.select("blocking_calls", "blocked_ns", "stalls", "stalled_ns").row(0) == (2, us(8_200), 1, us(8_180))


def forked_readback() -> Export:
    """The same training work; validation reads back once, after a pinned copy: one short synchronization."""
    spec = serialized_readback()
    spec.calls = [c for c in spec.calls if c.corr not in (20, 21)] + [
        Call("cudaMemcpyAsync_v3020", us(20), us(21), corr=20),
        Call("cudaStreamSynchronize_v3020", us(8_190), us(8_210), corr=21),
    ]
    spec.memcpys = [Memcpy(us(8_100), us(8_110), 20, stream=13, copy_kind=2, src_kind=2, dst_kind=1, bytes=16)]
    return spec


def test_compare_says_what_changed_in_the_arms_own_names(capsys: Any, make_export: Any, tmp_path: Any) -> None:
    from conftest import run

    observe = make_export(serialized_readback(), "serialized.sqlite")
    release = make_export(forked_readback(), "forked.sqlite")
    out = tmp_path / "cmp"
    code, _, err = run(capsys, "compare", observe, release, "--out", out, "--labels", "serialized,forked", "--json")
    assert code == 0, err
    import json

    doc = json.loads((out / "report.json").read_text())
    assert doc["labels"] == {"observe": "serialized", "release": "forked"}
    assert doc["options"]["labels"] == ["serialized", "forked"]
    assert doc["answer"]["stalls"] == (
        "serialized: 2 blocking calls blocked the host 8.2 ms; in validation_0: 2 calls, 8.2 ms, 8.0 ms of it behind "
        "stream 13; forked: 1 blocking call blocked the host 20.0 µs; in validation_0: 1 call, 20.0 µs (forked blocked "
        "8.2 ms less than serialized)"
    )
    assert "--labels serialized,forked" in " ".join(json.loads((out / "metadata.json").read_text())["command"])
    seal = err.strip().splitlines()[-1].split()[-1]
    code, _, err = run(capsys, "verify", out, "--inputs", observe, release, "--seal", seal)
    assert code == 0, err
    for bad in ("one", "a,a", "a,b,c", "a,\x1b[31m"):
        code, _, err = run(capsys, "compare", observe, release, "--out", tmp_path / "no", "--labels", bad)
        assert code == 2 and "--labels takes two different names" in err


def _nsys_rows(nsys: str, rule: str, export: Any, tmp: Any) -> list[dict[str, str]]:
    """The rows ``nsys analyze -r RULE`` finds in ``export`` (its CSV output)."""
    import csv
    import shutil
    import subprocess

    copy = tmp / export.name
    if not copy.exists():
        shutil.copy(export, copy)  # nsys writes nothing beside a .sqlite, but the fixture stays untouched
    out = subprocess.run([nsys, "analyze", "-r", rule, "--format", "csv", "--output", "-", "--force-overwrite",
                          "true", str(copy)], capture_output=True, text=True, timeout=300, check=True).stdout
    lines = [line for line in out.splitlines() if line.count(",") >= 3]
    return list(csv.DictReader(lines))


@requires_nsys
@pytest.mark.parametrize("name", ["nsys-ai_h100_2gpu_1s_2026.2.sqlite", "nsys-ai_mfu_2gpu_after_2026.2.sqlite",
                                  "pipit_cloverleaf_2024.5.sqlite"])
def test_the_blocking_calls_are_those_nsys_analyze_lists(name: str, tmp_path: Any) -> None:
    """nsys's own rules (cuda_api_sync: stream and device synchronizations; cuda_memcpy_async: copies
    of pageable memory) find the same calls, with the same durations."""
    from pathlib import Path

    from conftest import find_nsys

    nsys = find_nsys()
    assert nsys is not None
    path = Path(__file__).parent / "fixtures" / "public" / name
    d = nsysaudit.analyze(path).to_dict()["stalls"]
    syncs = _nsys_rows(nsys, "cuda_api_sync:rows=-1", path, tmp_path)
    by_kind = {k["kind"]: k["calls"] for k in d["by_kind"]}
    assert len(syncs) == by_kind["explicit"]  # these exports synchronize streams and devices only
    theirs = sorted(((int(r["Duration (ns)"]), int(r["Start (ns)"])) for r in syncs), reverse=True)
    explicit = sorted(((c["blocked_ns"], c["start_ns"]) for c in d["calls"] if c["kind"] == "explicit"), reverse=True)
    assert theirs[: len(explicit)] == explicit  # the calls the document lists (the longest), one by one
    pageable = _nsys_rows(nsys, "cuda_memcpy_async:rows=-1", path, tmp_path)
    assert len(pageable) == by_kind.get("async_copy", 0)


def test_the_serialized_capture_waits_behind_training_the_forked_one_on_another_stream() -> None:
    """The real H200 pair (tests/fixtures/h200-cuda13-nsys2025.3/sync, its README): the readbacks of the
    serialized arm wait behind the training kernels on the stream they synchronize, launched inside
    train_epoch_N; the forked arm's one synchronization per validation waits on stream 17 while the
    training kernels run on stream 13."""
    from pathlib import Path

    sync = Path(__file__).parent / "fixtures" / "h200-cuda13-nsys2025.3" / "sync"
    serialized = nsysaudit.analyze(sync / "serialized.sqlite").to_dict()["stalls"]
    assert (serialized["blocking_calls"], serialized["blocked_ns"], serialized["stalls"]) == (75, 877_016_429, 8)
    assert {k["kind"]: k["calls"] for k in serialized["by_kind"]} == {"async_copy": 24, "explicit": 50, "free": 1}
    first = serialized["calls"][0]
    assert (first["api"], first["correlation_id"], first["blocked_ns"]) == ("cudaMemcpyAsync_v3020", 26025, 292_276_211)
    assert first["copy"]["memory_kinds"] == "Pageable, Device" and first["synchronized"]["stream_id"] == 13
    assert [(b["stream_id"], b["work"], b["rows"], b["synchronized_stream"]) for b in first["behind"]] == [
        (13, "kernel", 382, True), (13, "memset", 189, True)]
    assert first["attribution"]["ranges"][0]["nvtx_range"] == "train_epoch_3"
    assert [r["range"] for r in serialized["ranges"][:3]] == ["validation_3", "validation_2", "validation_1"]
    forked = nsysaudit.analyze(sync / "forked.sqlite").to_dict()["stalls"]
    assert (forked["blocking_calls"], forked["stalls"]) == (7, 4)
    longest = forked["calls"][0]
    assert longest["api"] == "cudaStreamSynchronize_v3020" and longest["synchronized"]["stream_id"] == 17
    top = longest["behind"][0]
    assert (top["stream_id"], top["work"], top["synchronized_stream"]) == (13, "kernel", False)
    assert "(not the stream it synchronized, stream 17)" in longest["statement"]


def test_the_picture_draws_the_stall_and_the_work_behind_it(capsys: Any, tmp_path: Any) -> None:
    from pathlib import Path

    from conftest import run

    sync = Path(__file__).parent / "fixtures" / "h200-cuda13-nsys2025.3" / "sync"
    out = tmp_path / "stall.svg"
    code, stdout, err = run(capsys, "plot", sync / "serialized.sqlite", "--around", "stall:1", "--out", out)
    assert code == 0, err
    assert "focus: stall 1 (--around), cudaMemcpyAsync blocked the host 292.276 ms" in stdout
    svg = out.read_text()
    assert 'id="arm-context-stall-0"' in svg and 'id="arm-context-gpu-lane-0"' in svg
    assert "GPU · stream 13" in svg and "blocked 292.276 ms (cudaMemcpyAsync)" in svg
    code, _, err = run(capsys, "plot", sync / "serialized.sqlite", "--around", "stall:9", "--out", out)
    assert code == 2 and "the export has 8 call(s) that blocked the host at least 1 ms" in err


def test_a_gpu_table_without_a_needed_column_is_said_not_read(make_export: Any) -> None:
    spec = serialized_readback()
    spec.raw_sql = ["ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN streamId"]
    d = analyze(make_export, spec)
    [said] = [w for w in d["warnings"] if w["kind"] == "gpu_work_unreadable"]
    assert said["message"].startswith("CUPTI_ACTIVITY_KIND_KERNEL lacks a column of start, end, globalPid, streamId")
    copy = next(c for c in d["stalls"]["calls"] if c["kind"] == "async_copy")
    assert copy["behind"] == [] and copy["blocked_ns"] == us(8_180)  # what the kernels did is not known
    [union] = [w for w in d["warnings"] if w["kind"] == "gpu_work_union_unknown"]  # nor that the device idled
    assert union["count"] == 1 and copy["covered_ns"] is None and d["stalls"]["idle_ns"] is None
    spec.calls = [c for c in spec.calls if c.corr != 20]  # without the stall: nothing unknown is claimed
    spec.memcpys = []
    d = analyze(make_export, spec)
    assert d["stalls"]["stalls"] == 0 and "gpu_work_union_unknown" not in {w["kind"] for w in d["warnings"]}


def test_the_docs_show_what_nsysaudit_says_of_the_sync_captures() -> None:
    """docs/stalls.md's two examples and the README's line are the golden reports' own lines."""
    import re
    from pathlib import Path

    repo = Path(__file__).parent.parent
    golden = repo / "tests" / "golden"
    doc = (repo / "docs" / "stalls.md").read_text()
    blocks = re.findall(r"```text\n\$ [^\n]*\n(.*?)```", doc, re.S)
    answer = (golden / "answer-sync-serialized.txt").read_text()
    compared = (golden / "nsys2025-sync-compare.txt").read_text()
    assert len(blocks) == 2 and blocks[0] in answer
    assert blocks[1].removeprefix("[...]\n") in compared
    readme = (repo / "README.md").read_text()
    said = re.search(r'sync/serialized.sqlite, "(stall: [^"]*)"', readme)
    assert said is not None
    flat = " ".join(answer.split())
    assert all(part.strip() in flat for part in said.group(1).split("[...]"))


def test_the_longest_calls_are_those_a_sort_of_every_call_puts_first() -> None:
    """gpu_work._longest sorts only the calls that can be among the longest; the ids must be those the
    first rows of a sort of every call give (unknown lengths first, ties, repeated ids, few calls)."""
    rng = random.Random(33)
    for _ in range(400):
        n = rng.choice([0, 1, 49, 50, 51, 200])
        span = rng.choice([3, 1000, 10**6])
        unknown = rng.choice([0.0, 0.01, 0.3])
        rows = []
        for i in range(n):
            start = None if rng.random() < unknown else rng.randrange(span)
            end = None if rng.random() < unknown else rng.randrange(span) + (start or 0)
            rows.append((rng.choice([i, i, rng.randrange(n)]), start, end))
        calls = pl.DataFrame(rows, schema={"call_id": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
        every = calls.select((pl.col("end_ns") - pl.col("start_ns")).alias("b"), "start_ns", "call_id").sort(
            "b", "start_ns", "call_id", descending=[True, False, False]).head(LONGEST_CALLS)
        assert set(_longest(calls).to_list()) == set(every["call_id"].to_list())


PAGEABLE_READ = ("globalTid", "start", "end")  # the columns a second pass reads the copies' API rows by
LAUNCHES_READ = ("globalTid", "start", "correlationId")  # and the launches'


@needs_native
@pytest.mark.parametrize("name", ["h200-cuda13-nsys2025.3/sync/serialized.sqlite",
                                  "public/nsys-ai_h100_2gpu_1s_2026.2.sqlite"])
def test_the_scans_one_pass_serves_the_pageable_copies_and_the_launches_with_the_same_answer(name: str,
                                                                                           monkeypatch: Any) -> None:
    """With the native engine the CUDA API rows of the asynchronous copies of pageable memory come from
    the scan's one pass over the CUDA API table (issue 33: no work twice), not from a second pass by
    correlation id, and the launches' search reads only the leaves the scan's groups say can hold one
    of its ids; the answer is the one that reading every leaf twice gives, byte for byte."""
    from nsysaudit.read import gpu_work, trace
    from nsysaudit.render import analysis_json

    passes: list[tuple[tuple[str, ...], bool]] = []
    by_correlation = gpu_work._by_correlation

    def recording(export: Any, runtime: Any, columns: Any, *args: Any, **kwargs: Any) -> pl.DataFrame:
        grouped = len(args) > 4 and args[4] is not None
        passes.append((tuple(columns)[:3], grouped))
        return by_correlation(export, runtime, columns, *args, **kwargs)

    monkeypatch.setattr(gpu_work, "_by_correlation", recording)
    path = FIXTURES / name
    one_pass = analysis_json(nsysaudit.analyze(path))
    assert [c for c, _ in passes].count(PAGEABLE_READ) == 0 and (LAUNCHES_READ, True) in passes
    assert b'"kind":"async_copy"' in one_pass and b'"launch_thread":{"global_tid"' in one_pass  # not vacuous
    read_gpu_work = trace.read_gpu_work
    monkeypatch.setattr(trace, "read_gpu_work",
                        lambda *a, **k: read_gpu_work(*a, **{**k, "pageable": None, "corr_groups": None}))
    passes.clear()
    assert analysis_json(nsysaudit.analyze(path)) == one_pass
    assert (PAGEABLE_READ, False) in passes and (LAUNCHES_READ, False) in passes  # every leaf, twice


@needs_native
def test_a_value_of_another_type_in_the_cuda_api_table_reads_the_copies_again_on_every_engine(
        make_export: Any, monkeypatch: Any) -> None:
    """Where the scan read a CUDA API value of another type (as NULL), the pageable copies' rows are
    read again by correlation id, which counts those among them (a type_mismatch warning), as the
    engines without the scan's rows do: the same answer on the native engine and the stdlib reader."""
    from conftest import engine_free

    from nsysaudit.render import analysis_json

    spec = serialized_readback()
    spec.raw_sql = ["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET returnValue = 0.5 WHERE correlationId = 20"]
    path = make_export(spec)
    said = {}
    for native in ("1", "0"):
        monkeypatch.setenv("NSYSAUDIT_NATIVE", native)
        said[native] = engine_free(analysis_json(nsysaudit.analyze(path)))[0]
    assert said["1"] == said["0"]
    d = nsysaudit.analyze(path).to_dict()
    assert any(w["kind"] == "type_mismatch" and "CUPTI_ACTIVITY_KIND_RUNTIME" in w["message"] for w in d["warnings"])


@pytest.mark.parametrize("seed", range(5))
def test_each_calls_attribution_is_its_own_rows_summed_whatever_the_other_calls(seed: int) -> None:
    """The attribution summed for every listed call at once (analysis/stalls._summed) says for each call
    what its own rows alone say: the groups (the most busy first, at most MAX_GROUPS), the first
    MAX_KERNEL_NAMES kernels, ranges and libraries and their totals, the launches before, after and
    unknown, checked against a plain Python reference over random rows of several calls."""
    from nsysaudit.analysis import stalls

    rng = random.Random(seed)
    rows = [{
        "call_id": rng.choice([3, 7, 11]), "stream_id": rng.choice([7, 13]), "work": rng.choice(["kernel", "memcpy"]),
        "launched": rng.choice(["before", "after", "unknown"]), "launch_gtid": rng.choice([None, 5 << 24 | 9]),
        "launch_thread_name": rng.choice([None, "pt_autograd_0"]), "nvtx_range": rng.choice([None, *"abcdefg"]),
        "library": rng.choice([None, "cuBLAS", "NCCL"]), "library_api": rng.choice([None, "gemm"]),
        "name": rng.choice([f"k{i}" for i in range(8)]), "overlap_ns": rng.choice([None, *range(1, 40)]),
    } for _ in range(rng.randint(1, 300))]
    frame = pl.DataFrame(rows, schema={"call_id": pl.Int64, "stream_id": pl.Int64, "work": pl.String,
                                       "launched": pl.String, "launch_gtid": pl.Int64, "launch_thread_name": pl.String,
                                       "nvtx_range": pl.String, "library": pl.String, "library_api": pl.String,
                                       "name": pl.String, "overlap_ns": pl.Int64})
    summed = stalls._summed(frame)

    def by(mine: list[dict[str, Any]], *keys: str) -> list[tuple[Any, ...]]:  # (keys..., rows, busy), busiest first
        out: dict[tuple[Any, ...], list[int]] = {}
        for r in mine:
            acc = out.setdefault(tuple(r[k] for k in keys), [0, 0])
            acc[0] += 1
            acc[1] += r["overlap_ns"] or 0
        def order(item: tuple[tuple[Any, ...], list[int]]) -> tuple[Any, ...]:
            return (-item[1][1], *((v is None, v if v is not None else "") for v in item[0]))
        return [(*k, n, b) for k, (n, b) in sorted(out.items(), key=order)]

    for call in (3, 7, 11, 99):
        mine = [r for r in rows if r["call_id"] == call]
        got = stalls._attribution(call, summed, complete=True)
        kernels = by([r for r in mine if r["work"] == "kernel"], "name")
        ranges = by([r for r in mine if r["launched"] == "before"], "nvtx_range")
        libraries = by([r for r in mine if r["library"] is not None], "library", "library_api")
        assert [(k["name"], k["rows"], k["busy_ns"]) for k in got["kernels"]] == kernels[:stalls.MAX_KERNEL_NAMES]
        assert [(r["nvtx_range"], r["rows"], r["busy_ns"]) for r in got["ranges"]] == ranges[:stalls.MAX_KERNEL_NAMES]
        assert got["ranges_total"] == len(ranges)
        assert [(x["library"], x["library_api"], x["rows"], x["busy_ns"]) for x in got["libraries"]] == \
            libraries[:stalls.MAX_KERNEL_NAMES]
        groups = by(mine, *stalls.ATTRIBUTION_KEYS)
        assert got["groups_total"] == len(groups) and len(got["groups"]) == min(len(groups), stalls.MAX_GROUPS)
        assert [g["busy_ns"] for g in got["groups"]] == [g[-1] for g in groups[:stalls.MAX_GROUPS]]
        for state in ("before", "after", "unknown"):
            of = [r for r in mine if r["launched"] == state]
            said = {"before": "launched_before", "after": "launched_after", "unknown": "launch_unknown"}[state]
            assert (got[f"{said}_rows"], got[f"{said}_ns"]) == (len(of), sum(r["overlap_ns"] or 0 for r in of))
        assert (got["rows"], got["busy_ns"]) == (len(mine), sum(r["overlap_ns"] or 0 for r in mine))
