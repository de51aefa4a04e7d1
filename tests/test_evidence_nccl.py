"""NCCL's calls as library calls: its NVTX ranges (named domain, or payload schemas and API names), the
threads it starts for a call, a failed allocation inside a collective's initialization, its answer,
the verdict rule for out-of-memory failures outside library calls, and NCCL in check and batch.

The real capture (tests/fixtures/h200-cuda13-nsys2025.3/nccl: NCCL 2.28.9, nsys 2025.3) fails on the
calling thread, inside ``ncclCommInitRankConfig``. The builder case (tests/scenarios.py, ``nccl_arm``),
modelled on NCCL 2.27's source, covers what the capture does not show: the initialization on a thread
NCCL starts for the call. The real nsys 2026.2 export tests/fixtures/public/nsys-ai_mfu_2gpu_after_2026.2.sqlite
holds NCCL's ranges in a domain without its name, and no failure. Every number pinned is also read back
with plain SQL.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import global_tid
from conftest import FIXTURES, H200_2025, PUBLIC, sql
from scenarios import NCCL_JOB, NCCL_MAIN, NCCL_PID, nccl_arm, nccl_telemetry

import nsysaudit
from nsysaudit.batch.check import Expectations, check
from nsysaudit.core.codes import is_allocation_api, is_allocation_failure
from nsysaudit.core.ids import global_pid
from nsysaudit.read.recovery import out_of_memory_allocations

MFU = PUBLIC / "nsys-ai_mfu_2gpu_after_2026.2.sqlite"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"


@pytest.fixture
def nccl_pair(make_export, tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    """Both arms of the NCCL builder case with their telemetry files."""
    out = {}
    for arm in ("observe", "release"):
        path = make_export(nccl_arm(arm), f"{arm}.sqlite")
        telemetry = tmp_path / f"{arm}.telemetry.jsonl"
        telemetry.write_text("".join(json.dumps(line) + "\n" for line in nccl_telemetry(arm)))
        out[arm] = (path, telemetry)
    return out


def analyze(pair: dict[str, tuple[Path, Path]], arm: str) -> dict[str, Any]:
    path, telemetry = pair[arm]
    return nsysaudit.analyze(path, telemetry=telemetry).to_dict()


# --- the real mfu export: NCCL's domain has no NvtxDomainCreate row -----------------------------


def test_mfu_nccl_ranges_are_library_calls_known_by_payload_schemas_and_api_names() -> None:
    d = nsysaudit.analyze(MFU).to_dict()
    # The rows: NCCL's ranges are in domain 1 of each process, a domain no NvtxDomainCreate row names;
    # NCCL's payload schemas are registered in domain 1.
    assert sql(MFU, "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 75") == [(0,)]
    schemas = "SELECT DISTINCT domainId FROM NVTX_PAYLOAD_SCHEMA_ENTRIES WHERE name = 'NCCL communicator ID'"
    assert sql(MFU, schemas) == [(1,)]
    rows = sql(
        MFU,
        """SELECT coalesce(n.text, s.value), (n.globalTid >> 24) & 16777215, count(*) FROM NVTX_EVENTS n
           LEFT JOIN StringIds s ON s.id = n.textId WHERE n.domainId = 1 AND n.eventType = 59 GROUP BY 1, 2""",
    )
    assert sum(n for *_, n in rows) == 420
    calls = Counter((lc["api"], lc["pid"]) for lc in d["library_calls"])
    assert calls == Counter({(api, pid): n for api, pid, n in rows})
    assert {(lc["library"], lc["source"]) for lc in d["library_calls"]} == {("NCCL", "NVTX:NCCL")}
    [source] = [s for s in d["coverage"]["library_sources"] if s["library"] == "NCCL"]
    assert (source["status"], source["calls"], source["helper_threads"]) == ("traced", 420, [])
    assert "no NvtxDomainCreate row" in source["evidence"] and "payload schemas" in source["evidence"]
    assert source["calls_by_api"] == {"ncclRecv": 120, "ncclSend": 120, "ncclCommCount": 60, "ncclGroupEnd": 60,
                                      "ncclGroupStart": 60}
    # No failure is invented: no failed call at all, every call covered.
    assert sql(MFU, f"SELECT count(*) FROM {RUNTIME} WHERE returnValue != 0") == [(0,)]
    assert (d["verdict"], d["findings"], d["failed_calls"]) == ("no_failure", [], [])
    assert {lc["coverage"] for lc in d["library_calls"]} == {"complete"}


def test_exports_without_nccl_do_not_list_it() -> None:
    d = nsysaudit.analyze(H200_2025 / "torch" / "observe.sqlite").to_dict()
    assert [s["library"] for s in d["coverage"]["library_sources"]] == ["cuBLAS", "cuDNN"]


# --- the builder case: a failed cuMemCreate on NCCL's initialization thread ----------------------


def test_nccl_observe_finds_the_failed_cumemcreate_inside_the_communicators_initialization(nccl_pair) -> None:
    path, _ = nccl_pair["observe"]
    d = analyze(nccl_pair, "observe")
    assert d["verdict"] == "failure_found"
    [f] = d["findings"]
    assert (f["kind"], f["api"], f["return_code"], f["return_name"], f["out_of_memory"]) == (
        "nested_alloc_failure", "cuMemCreate", 2, "CUDA_ERROR_OUT_OF_MEMORY", True
    )
    [(corr, start, end, gtid)] = sql(path, f"""SELECT r.correlationId, r.start, r."end", r.globalTid FROM {RUNTIME} r
                                           JOIN StringIds s ON s.id = r.nameId WHERE r.returnValue = 2
                                           AND s.value = 'cuMemCreate'""")
    assert (f["correlation_id"], f["start_ns"], f["end_ns"], f["global_tid"]) == (corr, start, end, gtid)
    assert (f["pid"], f["tid"], f["thread_name"], f["requested_bytes"]) == (NCCL_PID, NCCL_JOB, None, None)
    enc = f["enclosing"]
    assert (enc["api"], enc["library"], enc["source"], enc["coverage"]) == (
        "ncclCommInitRankConfig", "NCCL", "NVTX:NCCL", "complete"
    )
    # The NCCL range is on the main thread, in the domain nsys names NCCL.
    [(lib_start, lib_end, lib_gtid)] = sql(
        path, """SELECT n.start, n."end", n.globalTid FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                 WHERE s.value = 'ncclCommInitRankConfig'""")
    assert (enc["start_ns"], enc["end_ns"], lib_gtid) == (lib_start, lib_end, global_tid(NCCL_PID, NCCL_MAIN))
    assert sql(path, "SELECT text FROM NVTX_EVENTS WHERE eventType = 75") == [("NCCL",)]
    # The helper thread: every one of its CUDA API records lies inside the NCCL call.
    [(first, last, calls)] = sql(path, f'SELECT min(start), max("end"), count(*) FROM {RUNTIME} WHERE globalTid = ?',
                                 gtid)
    assert lib_start <= first and last <= lib_end
    helper = enc["helper_thread"]
    assert (helper["tid"], helper["calling_tid"], helper["first_ns"], helper["last_ns"], helper["calls"]) == (
        NCCL_JOB, NCCL_MAIN, first, last, calls
    )
    # What succeeded before it: the cuMemCreates (sizes not in the export) and their mappings' bytes.
    created = sql(path, f"""SELECT count(*) FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId
                           WHERE r.globalTid = ? AND s.value = 'cuMemCreate' AND r.returnValue = 0 AND r.start < ?""",
                  gtid, start)
    mapped = sql(path, f"""SELECT m.bytes FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId
                          JOIN CUDA_GPU_MEMORY_USAGE_EVENTS m ON m.correlationId = r.correlationId
                          WHERE r.globalTid = ? AND s.value = 'cuMemSetAccess' AND r.start < ? ORDER BY r.start""",
                 gtid, start)
    assert enc["allocations_before"] == {"count": created[0][0], "bytes_each": [None] * created[0][0], "bytes": None}
    assert enc["mapped_before"]["bytes_each"] == [b for (b,) in mapped] == [2 << 20, 2 << 20]
    # The failed call is not also a failed_calls group; the admission probes are.
    [group] = d["failed_calls"]
    assert (group["api"], group["count"], group["tid"], group["nvtx_range"]) == ("cudaMalloc_v3020", 3, NCCL_MAIN,
                                                                                  "admission")
    assert d["verdict_reasons"][0].startswith("1 failed allocation call(s) inside an NCCL call, on a thread NCCL "
                                              "started for it")


def test_nccl_observe_answer_places_it_on_the_applications_clock_with_the_holder_and_nccls_error(nccl_pair) -> None:
    path, _ = nccl_pair["observe"]
    d = analyze(nccl_pair, "observe")
    [f] = d["findings"]
    lines = nccl_telemetry("observe")
    start_line = next(i for i, line in enumerate(lines, 1) if line["event"] == "dp_reduce_start")
    [(utc,)] = sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    placed = lines[start_line - 1]["realtime_ns"] - utc
    ms = (f["start_ns"] - placed) / 1e6
    answer = d["answer"]
    assert answer["summary"] == (
        "cuMemCreate returned 2 (CUDA_ERROR_OUT_OF_MEMORY) inside ncclCommInitRankConfig (NCCL communicator "
        f"initialization) on tid {NCCL_JOB} (name unknown), {ms:.3f} ms after dp_reduce_start "
        f"(telemetry line {start_line})"
    )
    [said] = answer["findings"]
    assert said["what"].startswith("cuMemCreate returned 2 (CUDA_ERROR_OUT_OF_MEMORY) inside ncclCommInitRankConfig "
                                   f"(NCCL communicator initialization), on thread (name unknown) (pid {NCCL_PID}, "
                                   f"tid {NCCL_JOB})")
    # Who held the device: the ledger from the memory events up to the failure, and the allocator's own
    # figures from the handoff line (dp_reduce_start, in force, carries only its message's bytes).
    [(total,)] = sql(path, "SELECT totalMemory FROM TARGET_INFO_GPU")
    [(live,)] = sql(path, """SELECT sum(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END)
                             FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE start <= ?""", f["start_ns"])
    handoff = next(line for line in lines if line["event"] == "handoff")
    unused = (handoff["reserved"] - handoff["allocated"]) / (1 << 30)
    assert f"all by pid {NCCL_PID} (python3)" in said["held"]
    assert f"at most {total - live:,} B" in said["held"]
    allocator = f"Telemetry line 3 (handoff), the allocator's own figures: reserved but unused {unused:.1f} GiB"
    assert allocator in said["held"]
    # NCCL's error text, tied to the failed call, and the trace confirms an out-of-memory.
    [failure] = d["telemetry"]["library_failures"]
    assert (failure["event"], failure["library"], failure["finding"], failure["trace_confirms_out_of_memory"]) == (
        "runtime_error", "NCCL", 0, True
    )
    assert failure["statuses"] == ["ncclUnhandledCudaError", "Failed to CUDA calloc async 24 bytes"]
    assert failure["explained"] and failure["after"]["api"] == "ncclCommInitRankConfig"
    assert said["reported"].endswith("the trace confirms an out-of-memory: cuMemCreate returned 2 "
                                     "(CUDA_ERROR_OUT_OF_MEMORY)")


def test_nccl_release_has_no_failure_and_its_initialization_allocates_on_the_helper_thread(nccl_pair) -> None:
    path, _ = nccl_pair["release"]
    d = analyze(nccl_pair, "release")
    assert (d["verdict"], d["findings"]) == ("no_failure", [])
    assert sql(path, f"SELECT count(*) FROM {RUNTIME} WHERE returnValue != 0 AND globalTid = ?",
               global_tid(NCCL_PID, NCCL_JOB)) == [(0,)]
    [init] = [lc for lc in d["library_calls"] if lc["api"] == "ncclCommInitRankConfig"]
    created = [c for c in init["children"] if c["api"] == "cuMemCreate"]
    assert len(created) == 3 and {c["return_code"] for c in created} == {0}
    assert init["allocated_bytes_traced"] == 3 * (2 << 20)
    # The admission probes stay failed calls: the process allocated successfully after them.
    [group] = d["failed_calls"]
    assert (group["api"], group["count"]) == ("cudaMalloc_v3020", 3)
    assert not any("out-of-memory allocation failure(s) outside library calls" in r for r in d["verdict_reasons"])


def test_nccl_compare_says_the_cache_was_freed_and_what_ncclss_initialization_then_allocated(nccl_pair) -> None:
    arms = [nsysaudit.analyze(nccl_pair[a][0], telemetry=nccl_pair[a][1]) for a in ("observe", "release")]
    doc = nsysaudit.compare_results(*arms).to_dict()
    assert doc["differences"]["nested_alloc_failure"]["present_in"] == ["observe"]
    memory = doc["answer"]["memory"]
    assert ("release: ncclCommInitRankConfig (NCCL communicator initialization) allocated 6,291,456 B of device "
            "memory (6.0 MiB, from the memory events of the calls inside it) in 3 cuMemCreate call(s), all "
            "succeeded") in memory
    assert ("observe: ncclCommInitRankConfig (NCCL communicator initialization) allocated 4,194,304 B of device "
            "memory (4.0 MiB, from the memory events of the calls inside it) in 3 cuMemCreate call(s), 1 failed "
            "(cuMemCreate returned 2)") in memory
    freed = [s for s in memory if s.startswith("release: between telemetry line 3 (handoff) and ncclCommInit")]
    assert freed and f"pid {NCCL_PID} freed 137.0 GiB" in freed[0]


def test_ncclss_domain_known_only_by_payload_schemas_gives_the_same_finding(make_export) -> None:
    d = nsysaudit.analyze(make_export(nccl_arm("observe", domain_row=False))).to_dict()
    [f] = d["findings"]
    assert (f["api"], f["enclosing"]["api"], f["enclosing"]["library"], f["tid"]) == (
        "cuMemCreate", "ncclCommInitRankConfig", "NCCL", NCCL_JOB
    )
    [source] = [s for s in d["coverage"]["library_sources"] if s["library"] == "NCCL"]
    assert "payload schemas" in source["evidence"]


def test_without_nccls_ranges_the_failure_is_unrecovered_and_the_verdict_inconclusive(make_export) -> None:
    """No domain name and no payload schemas: nothing says the ranges are NCCL's. The failed
    cuMemCreate is then outside every library call, and nothing after it shows the process recovered."""
    spec = nccl_arm("observe", domain_row=False)
    spec.payload_schema_entries = None
    path = make_export(spec)
    d = nsysaudit.analyze(path).to_dict()
    assert d["findings"] == [] and d["verdict"] == "inconclusive"
    assert "NCCL" not in [s["library"] for s in d["coverage"]["library_sources"]]
    [(start,)] = sql(path, f"SELECT r.start FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId "
                           "WHERE s.value = 'cuMemCreate' AND r.returnValue = 2")
    [(last_ok,)] = sql(path, f"""SELECT max(r.start) FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId
                               WHERE r.returnValue = 0 AND (s.value LIKE 'cudaMalloc%' OR s.value = 'cuMemCreate')""")
    assert last_ok < start
    [reason] = [r for r in d["verdict_reasons"] if "out-of-memory allocation failure(s) outside library calls" in r]
    assert reason.startswith(
        "1 out-of-memory allocation failure(s) outside library calls after which their process made no successful "
        f"allocation in the trace: cuMemCreate returned 2 (CUDA_ERROR_OUT_OF_MEMORY) on pid {NCCL_PID} tid "
        f"{NCCL_JOB} (name unknown) at {start:,} ns"
    )


def test_cumemmap_out_of_memory_is_an_allocation_failure() -> None:
    assert is_allocation_failure("cuMemMap", 2) and not is_allocation_failure("cuMemMap", 1)
    assert is_allocation_failure("cuMemCreate", 2) and is_allocation_failure("cudaMallocAsync_v11020", 2)


# --- the verdict rule on the real captures: admission failures are recovered -------------------


@pytest.mark.parametrize("arm", ["torch/observe", "torch/release", "expandable/observe", "async/observe"])
def test_real_admission_failures_are_recovered_and_stay_failed_calls(arm: str) -> None:
    path = H200_2025 / f"{arm}.sqlite"
    d = nsysaudit.analyze(path).to_dict()
    admission = [g for g in d["failed_calls"] if g["nvtx_range"] == "admission"]
    assert admission and all(g["out_of_memory"] for g in admission)
    assert not any("outside library calls after which" in r for r in d["verdict_reasons"])
    for g in admission:  # its process allocated successfully after the group's last failure
        [(later,)] = sql(path, f"""SELECT count(*) FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId
                                  WHERE r.returnValue = 0 AND r.start > ? AND (r.globalTid >> 24) & 16777215 = ?
                                  AND (s.value LIKE 'cudaMalloc%' OR s.value LIKE 'cuMemAlloc%'
                                       OR s.value = 'cuMemCreate')""", g["last_ns"], g["pid"])
        assert later > 0


def test_the_thread_rule_would_call_26_of_torchs_27_admission_failures_unrecovered() -> None:
    """Why the rule is per process: on its own thread, only one of the 27 admission failures is
    followed by a successful allocation (PyTorch's retry fails too; the program goes on from its cache)."""
    path = H200_2025 / "torch" / "observe.sqlite"
    [(followed, failures)] = sql(path, f"""
        WITH alloc AS (SELECT id FROM StringIds WHERE value LIKE 'cudaMalloc%'),
             failed AS (SELECT globalTid, start FROM {RUNTIME} WHERE returnValue = 2
                        AND nameId IN (SELECT id FROM alloc) AND globalTid & 16777215 = 683)
        SELECT sum(EXISTS (SELECT 1 FROM {RUNTIME} r WHERE r.globalTid = f.globalTid AND r.start > f.start
                           AND r.returnValue = 0 AND r.nameId IN (SELECT id FROM alloc))), count(*) FROM failed f""")
    assert (followed, failures) == (1, 27)


def test_capi_observe_is_inconclusive_its_last_failure_unrecovered_in_the_trace() -> None:
    path = H200_2025 / "capi" / "observe.sqlite"
    d = nsysaudit.analyze(path).to_dict()
    assert d["verdict"] == "inconclusive" and d["findings"] == []
    [reason] = [r for r in d["verdict_reasons"] if "outside library calls after which" in r]
    [(corr,)] = sql(path, f"""SELECT r.correlationId FROM {RUNTIME} r WHERE r.returnValue = 2
                              ORDER BY r.start DESC LIMIT 1""")
    assert f"correlation {corr}" in reason
    assert nsysaudit.analyze(H200_2025 / "capi" / "release.sqlite").verdict == "no_failure"


# --- check and batch carry the library ----------------------------------------------------------


def test_check_expects_the_library_and_batch_rows_carry_it(make_export, tmp_path: Path) -> None:
    path = make_export(nccl_arm("observe"), "observe.sqlite")
    expectations = Expectations.parse(
        '[[expect]]\nfiles = "observe.sqlite"\nverdict = "failure_found"\n'
        'findings = [{ kind = "nested_alloc_failure", api = "cuMemCreate", return_code = 2, library = "NCCL" }]\n',
        base=path.parent,
    )
    assert check([path], expectations).lines()[-1] == "1 passed, 0 failed"
    wrong = Expectations.parse(
        '[[expect]]\nfiles = "observe.sqlite"\nfindings = [{ api = "cuMemCreate", library = "cuBLAS" }]\n',
        base=path.parent,
    )
    assert "library NCCL, not cuBLAS" in "\n".join(check([path], wrong).lines())
    table = nsysaudit.audit_many([path], jobs=1)
    assert table["library"].to_list() == ["NCCL"]


# --- the real capture (tests/fixtures/h200-cuda13-nsys2025.3/nccl, NCCL 2.28.9, nsys 2025.3) ---------

REAL_NCCL = H200_2025 / "nccl"


def real(arm: str) -> dict[str, Any]:
    return nsysaudit.analyze(REAL_NCCL / f"{arm}.sqlite", telemetry=REAL_NCCL / f"{arm}.telemetry.jsonl").to_dict()


def test_real_nccl_observe_cumemcreate_fails_inside_ncclcomminitrankconfig_on_the_calling_thread() -> None:
    path = REAL_NCCL / "observe.sqlite"
    d = real("observe")
    assert d["verdict"] == "failure_found"
    [f] = d["findings"]
    [(corr, start, end, gtid)] = sql(path, f"""SELECT r.correlationId, r.start, r."end", r.globalTid FROM {RUNTIME} r
                                           JOIN StringIds s ON s.id = r.nameId
                                           WHERE s.value = 'cuMemCreate' AND r.returnValue = 2""")
    assert (f["kind"], f["api"], f["return_code"], f["return_name"], f["out_of_memory"]) == (
        "nested_alloc_failure", "cuMemCreate", 2, "CUDA_ERROR_OUT_OF_MEMORY", True
    )
    assert (f["correlation_id"], f["start_ns"], f["end_ns"], f["global_tid"]) == (corr, start, end, gtid) == (
        3276, 4_909_102_068, f["end_ns"], gtid
    )
    assert (f["pid"], f["tid"], f["thread_name"], f["requested_bytes"]) == (533, 533, "python3", None)
    # The enclosing range: NCCL's, on the same thread (NCCL 2.28.9 runs a lone init job on the caller).
    [(domain,)] = sql(path, "SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'NCCL'")
    [(lib_start, lib_end, lib_gtid)] = sql(
        path, """SELECT n.start, n."end", n.globalTid FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                 WHERE s.value = 'ncclCommInitRankConfig' AND n.domainId = ?""", domain)
    enc = f["enclosing"]
    assert (enc["api"], enc["library"], enc["source"], enc["coverage"]) == (
        "ncclCommInitRankConfig", "NCCL", "NVTX:NCCL", "complete"
    )
    assert (enc["start_ns"], enc["end_ns"], lib_gtid) == (lib_start, lib_end, gtid)
    assert "helper_thread" not in enc
    assert sql(path, f"SELECT count(DISTINCT globalTid) FROM {RUNTIME}") == [(1,)]
    # What succeeded inside it before: allocation calls (bytes from their events; a cuMemCreate has
    # none) and the mappings' events.
    before = sql(path, f"""SELECT s.value, m.bytes FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId
                          LEFT JOIN CUDA_GPU_MEMORY_USAGE_EVENTS m ON m.correlationId = r.correlationId
                          AND m.memoryOperationType = 0
                          WHERE r.globalTid = ? AND r.start >= ? AND r.start < ? AND r.returnValue = 0
                          AND (s.value = 'cuMemCreate' OR s.value LIKE 'cudaHostAlloc%' OR s.value = 'cuMemSetAccess')
                          ORDER BY r.start""", gtid, lib_start, start)
    allocated = [b for api, b in before if api != "cuMemSetAccess"]
    assert enc["allocations_before"] == {"count": 7, "bytes_each": allocated, "bytes": None}
    assert allocated == [None, 4, None, None, None, None, None]
    assert enc["mapped_before"]["bytes_each"] == [b for api, b in before if api == "cuMemSetAccess"] == [2 << 20] * 5
    # The admission failures stay one failed-calls group; the verdict names the nested failure.
    [group] = d["failed_calls"]
    assert (group["api"], group["count"], group["nvtx_range"]) == ("cudaMalloc_v3020", 27, "admission")
    assert d["verdict_reasons"][0] == "1 failed allocation call(s) wholly inside a library call on the same thread"


def test_real_nccl_observe_answer_holder_and_nccls_own_error() -> None:
    path = REAL_NCCL / "observe.sqlite"
    d = real("observe")
    [f] = d["findings"]
    [said] = d["answer"]["findings"]
    [(utc,)] = sql(path, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")
    lines = [json.loads(line) for line in (REAL_NCCL / "observe.telemetry.jsonl").read_text().splitlines()]
    ms = (f["start_ns"] - (lines[3]["realtime_ns"] - utc)) / 1e6
    assert lines[3]["event"] == "dp_reduce_start"
    assert said["when"] == f"{ms:.3f} ms after dp_reduce_start (telemetry line 4)"
    assert d["answer"]["summary"] == (
        "cuMemCreate returned 2 (CUDA_ERROR_OUT_OF_MEMORY) inside ncclCommInitRankConfig (NCCL communicator "
        f"initialization) on python3, {ms:.3f} ms after dp_reduce_start (telemetry line 4)"
    )
    # Who held the device at the failure: the memory events up to it (device and static memory, and
    # the CUDA memory pool NCCL created, 32 MiB) against the device's total.
    [(total,)] = sql(path, "SELECT totalMemory FROM TARGET_INFO_GPU")
    [(held,)] = sql(path, """SELECT sum(CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END)
                             FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE start <= ? AND memKind IN (2, 5)""", f["start_ns"])
    [(pool,)] = sql(path, "SELECT localMemoryPoolSize FROM CUDA_GPU_MEMORY_POOL_EVENTS WHERE start <= ? "
                          "ORDER BY start DESC LIMIT 1", f["start_ns"])
    assert total - held - pool == 653_889_626
    assert said["held"].startswith("139.2 GiB of 139.8 GiB held at the failure, all by pid 533 (python3)")
    assert f"at most {total - held - pool:,} B (623.6 MiB) free" in said["held"]
    handoff = lines[2]
    assert handoff["event"] == "handoff" and said["held"].endswith(
        f"Telemetry line 3 (handoff), the allocator's own figures: reserved but unused 138.5 GiB (reserved "
        f"{handoff['reserved']:,} B, allocated {handoff['allocated']:,} B)."
    )
    # NCCL's error as PyTorch reported it, tied to the failed call: the trace confirms an out-of-memory.
    [failure] = d["telemetry"]["library_failures"]
    assert (failure["line"], failure["event"], failure["library"], failure["finding"]) == (
        5, "runtime_error", "NCCL", 0
    )
    assert failure["statuses"] == ["ncclUnhandledCudaError", "Failed to CUDA calloc async 4 bytes"]
    assert failure["trace_confirms_out_of_memory"] and failure["explained"]
    assert said["reported"].endswith("the trace confirms an out-of-memory: cuMemCreate returned 2 "
                                     "(CUDA_ERROR_OUT_OF_MEMORY)")


def test_real_nccl_release_has_no_failure_and_its_initialization_allocated_on_the_main_thread() -> None:
    path = REAL_NCCL / "release.sqlite"
    d = real("release")
    assert (d["verdict"], d["findings"]) == ("no_failure", [])
    nccl_ranges = sql(path, """SELECT s.value FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId
                               WHERE n.domainId = (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75
                                                   AND text = 'NCCL') ORDER BY n.start""")
    assert [lc["api"] for lc in d["library_calls"] if lc["library"] == "NCCL"] == [api for (api,) in nccl_ranges] == [
        "ncclCommInitRankConfig", "ncclAllReduce", "ncclCommFinalize", "ncclCommDestroy"
    ]
    [source] = [s for s in d["coverage"]["library_sources"] if s["library"] == "NCCL"]
    assert source["helper_threads"] == []  # pt_nccl_watchdg's 5 calls lie between two NCCL calls
    [group] = d["failed_calls"]
    assert (group["api"], group["count"]) == ("cudaMalloc_v3020", 27)


def test_real_nccl_compare_says_the_cache_was_freed_and_what_the_initialization_then_allocated() -> None:
    arms = [nsysaudit.analyze(REAL_NCCL / f"{a}.sqlite", telemetry=REAL_NCCL / f"{a}.telemetry.jsonl")
            for a in ("observe", "release")]
    doc = nsysaudit.compare_results(*arms).to_dict()
    path = REAL_NCCL / "release.sqlite"
    inside = f"""FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId
                 JOIN (SELECT n.start AS s0, n."end" AS e0 FROM NVTX_EVENTS n JOIN StringIds t ON t.id = n.textId
                       WHERE t.value = 'ncclCommInitRankConfig') ON r.start >= s0 AND r."end" <= e0"""
    [(created,)] = sql(path, f"SELECT count(*) {inside} WHERE s.value = 'cuMemCreate' AND r.returnValue = 0")
    [(mapped,)] = sql(path, f"""SELECT sum(m.bytes) {inside} JOIN CUDA_GPU_MEMORY_USAGE_EVENTS m
                               ON m.correlationId = r.correlationId WHERE s.value = 'cuMemSetAccess'""")
    [(hosts, host_bytes)] = sql(path, f"""SELECT count(*), sum(m.bytes) {inside} JOIN CUDA_GPU_MEMORY_USAGE_EVENTS m
                                          ON m.correlationId = r.correlationId WHERE s.value LIKE 'cudaHostAlloc%'""")
    assert (created, mapped, hosts, host_bytes) == (195, 406_847_488, 4, 1_179_652)
    memory = doc["answer"]["memory"]
    assert (f"release: ncclCommInitRankConfig (NCCL communicator initialization) allocated {mapped:,} B of device "
            f"memory (388.0 MiB, from the memory events of the calls inside it) in {created} cuMemCreate call(s), all "
            f"succeeded; and {host_bytes:,} B of pinned host memory in {hosts} cudaHostAlloc call(s)") in memory
    [freed] = [m for m in memory if m.startswith("release: between telemetry line 3 (handoff) and ncclCommInit")]
    assert "pid 647 freed 138.5 GiB" in freed
    assert doc["differences"]["nested_alloc_failure"]["present_in"] == ["observe"]


def test_with_many_library_calls_ncclss_initialization_is_still_compared(make_export) -> None:
    """Past 10 library calls only the telling ones are compared: an NCCL communicator's initialization
    (main thread, no failure in release) is one of them."""
    from builder import LibCall

    results = []
    for arm in ("observe", "release"):
        spec = nccl_arm(arm)
        spec.lib_calls += [LibCall("ncclGroupStart", 1_391_600_000 + i * 10_000, 1_391_602_000 + i * 10_000,
                                   NCCL_PID, NCCL_MAIN, library="NCCL") for i in range(12)]
        results.append(nsysaudit.analyze(make_export(spec, f"{arm}.sqlite")))
    doc = nsysaudit.compare_results(*results).to_dict()
    assert "an NCCL communicator's initialization" in doc["arms"]["release"]["library_calls_selection"]
    assert any(s.startswith("release: ncclCommInitRankConfig (NCCL communicator initialization) allocated 6,291,456 B "
                            "of device memory")
               for s in doc["answer"]["memory"])


def test_without_ncclss_ranges_its_error_line_is_tied_to_the_unenclosed_out_of_memory(make_export, tmp_path) -> None:
    spec = nccl_arm("observe", domain_row=False)
    spec.payload_schema_entries = None
    path = make_export(spec)
    telemetry = tmp_path / "observe.telemetry.jsonl"
    telemetry.write_text("".join(json.dumps(line) + "\n" for line in nccl_telemetry("observe")))
    d = nsysaudit.analyze(path, telemetry=telemetry).to_dict()
    [failure] = d["telemetry"]["library_failures"]
    [(corr,)] = sql(path, f"SELECT r.correlationId FROM {RUNTIME} r JOIN StringIds s ON s.id = r.nameId "
                          "WHERE s.value = 'cuMemCreate' AND r.returnValue = 2")
    assert (failure["finding"], failure["trace_confirms_out_of_memory"], failure["explained"]) == (None, True, False)
    assert (failure["failed_call"]["api"], failure["failed_call"]["correlation_id"]) == ("cuMemCreate", corr)
    assert d["verdict"] == "inconclusive"
    assert any(r.startswith("telemetry line 5 (runtime_error) records ncclUnhandledCudaError") and
               f"the trace shows an out-of-memory before it, cuMemCreate returned 2 (CUDA_ERROR_OUT_OF_MEMORY) on tid "
               f"{NCCL_JOB} (correlation {corr}), but no traced library call encloses it" in r
               for r in d["verdict_reasons"])


def test_a_thread_that_outlives_the_nccl_call_is_not_its_helper(make_export) -> None:
    """NCCL's proxy threads live as long as the communicator: a thread with one CUDA API call after the
    NCCL call ends is not the call's helper, and its failure stays outside every library call."""
    from builder import Call

    spec = nccl_arm("observe")
    spec.calls.append(Call("cudaGetDevice_v3020", 1_395_000_000, 1_395_001_000, NCCL_PID, NCCL_JOB, corr=900))
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["findings"] == [] and d["verdict"] == "inconclusive"
    [source] = [s for s in d["coverage"]["library_sources"] if s["library"] == "NCCL"]
    assert source["helper_threads"] == []


def test_many_processes_read_every_threads_span(make_export, monkeypatch) -> None:
    """Past MAX_PROCESS_RANGES processes the span query reads every thread: the same helper threads."""
    from nsysaudit.read import nccl as read_nccl

    path = make_export(nccl_arm("observe"))
    before = nsysaudit.analyze(path).to_dict()["findings"]
    monkeypatch.setattr(read_nccl, "MAX_PROCESS_RANGES", 0)
    assert nsysaudit.analyze(path).to_dict()["findings"] == before != []


# --- the last successful allocation: from the scan's marked rows, as the whole-table query said ------


def _last_allocations_by_query(path: Path, failed_after: int) -> list[tuple[int, int, int]]:
    """The query nsysaudit ran over the whole CUDA API table before the scan marked the allocation
    calls (issue 31's): per process, the last successful allocation call after ``failed_after``."""
    ids = [i for i, v in sql(path, "SELECT id, value FROM StringIds WHERE value LIKE 'cu%'")
           if type(i) is int and isinstance(v, str) and is_allocation_api(v)]
    return sql(path, f"""SELECT globalTid - globalTid % 16777216 AS gpid, max(start), count(*) FROM {RUNTIME}
                         WHERE returnValue = 0 AND nameId IN (SELECT value FROM json_each(?))
                         AND globalTid IS NOT NULL AND start > ? GROUP BY gpid ORDER BY gpid""",
               json.dumps(ids), failed_after)


@pytest.mark.parametrize("engine", ["1", "0"])
def test_the_last_successful_allocations_are_the_whole_tables_answer(engine: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Every bundled export with an out-of-memory allocation failure: the rows the scan marks give the
    processes, starts and counts the query over the whole table gives (native engine, and without it)."""
    monkeypatch.setenv("NSYSAUDIT_NATIVE", engine)
    seen = 0
    for path in sorted(FIXTURES.rglob("*.sqlite")):
        with nsysaudit.open(path) as session:
            trace = session._trace
        oom = out_of_memory_allocations(trace.cuda_api_rows.filter(
            pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null()))
        if not oom.height:
            assert trace.last_allocations.height == 0, path
            continue
        seen += 1
        gpids = set(oom.select(global_pid(pl.col("gtid")))["gtid"].to_list())
        expected = [r for r in _last_allocations_by_query(path, int(oom["start_ns"].min())) if r[0] in gpids]
        assert trace.last_allocations.rows() == expected, path
    assert seen >= 5  # the admission captures, capi, the NCCL ones
