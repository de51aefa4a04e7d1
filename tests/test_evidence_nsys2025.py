"""The real nsys 2025.3 H200 captures (tests/fixtures/h200-cuda13-nsys2025.3, see its README).

Every number pinned here is also read back from the export with plain SQL, so the test checks the
analysis against the rows, not against itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import H200, H200_2025, sql

import nsysaudit

TORCH, CAPI, EVENT, STOP = (H200_2025 / d for d in ("torch", "capi", "event", "capture-stop"))


def analyze(path: Path, telemetry: Path | None = None) -> dict[str, Any]:
    return nsysaudit.analyze(path, telemetry=telemetry).to_dict()


def worker_create(d: dict[str, Any]) -> dict[str, Any]:
    [lib] = [lc for lc in d["library_calls"] if lc["api"] == "cublasCreate_v2" and lc["tid"] != lc["pid"]]
    return lib


# --- torch: the failure itself ------------------------------------------------------------------


def test_torch_observe_finds_the_failed_cudamalloc_inside_the_workers_cublas_create() -> None:
    path = TORCH / "observe.sqlite"
    d = analyze(path)
    assert d["verdict"] == "failure_found"
    [f] = d["findings"]
    assert (f["kind"], f["api"], f["return_code"], f["return_name"]) == (
        "nested_alloc_failure", "cudaMalloc_v3020", 2, "cudaErrorMemoryAllocation"
    )
    assert (f["correlation_id"], f["pid"], f["tid"], f["thread_name"]) == (2433, 683, 720, "pt_autograd_0")
    assert f["enclosing"]["api"] == "cublasCreate_v2" and f["enclosing"]["coverage"] == "complete"
    assert f["enclosing"]["allocations_before"] == {"count": 2, "bytes_each": [1024, 131072], "bytes": 132096}
    # The same facts from the rows: the failed call, its thread, and the bytes by correlation id.
    [(start, end, gtid)] = sql(path, "SELECT start, end, globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                               "WHERE correlationId = 2433 AND returnValue = 2")
    assert (f["start_ns"], f["end_ns"], f["global_tid"]) == (start, end, gtid)
    assert (gtid >> 24) & 0xFFFFFF == 683 and gtid & 0xFFFFFF == 720
    assert sql(path, "SELECT s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId WHERE t.globalTid = ?",
               gtid) == [("pt_autograd_0",)]
    lib = worker_create(d)
    nested_bytes = sql(
        path,
        """SELECT m.bytes FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUDA_GPU_MEMORY_USAGE_EVENTS m
           ON m.correlationId = r.correlationId AND m.globalPid = r.globalTid - r.globalTid % 16777216
           WHERE r.globalTid = ? AND r.start >= ? AND r.end <= ? AND m.memoryOperationType = 0 ORDER BY r.start""",
        gtid, lib["start_ns"], lib["end_ns"],
    )
    assert [b for (b,) in nested_bytes] == [1024, 131072] == f["enclosing"]["allocations_before"]["bytes_each"]
    # It is the process's last CUDA API record, yet the call is covered: nsys profiled on for 0.7 s
    # after it and never warned that CUDA events were lost.
    assert lib["coverage"] == "complete" and lib["coverage_evidence"] == "capture_continued_without_cuda_warning"
    assert d["coverage"]["capture"]["stop_ns"] == 5_617_749_898 > lib["end_ns"]
    assert d["coverage"]["nsys_diagnostics"] == []


def test_torch_observe_admission_failures_are_one_failed_calls_group() -> None:
    path = TORCH / "observe.sqlite"
    d = analyze(path)
    [group] = d["failed_calls"]
    assert (group["api"], group["return_code"], group["count"]) == ("cudaMalloc_v3020", 2, 27)
    assert (group["pid"], group["tid"], group["thread_name"], group["nvtx_range"]) == (683, 683, "python3", "admission")
    [(n, first, last)] = sql(
        path,
        """SELECT count(*), min(r.start), max(r.end) FROM CUPTI_ACTIVITY_KIND_RUNTIME r, NVTX_EVENTS n
           WHERE r.returnValue = 2 AND n.text = 'admission' AND r.globalTid = n.globalTid
           AND r.start >= n.start AND r.end <= n.end""",
    )
    assert (group["count"], group["first_ns"], group["last_ns"]) == (n, first, last)
    assert any(r.startswith("27 failed CUDA API call(s) outside library calls") for r in d["verdict_reasons"])
    # 457 module-memory events carry correlation id 0: no correlation, so never a duplicate.
    assert sql(path, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE correlationId = 0") == [(457,)]
    assert [w for w in d["warnings"] if "correlation" in w["kind"]] == []


def test_torch_observe_with_telemetry_places_the_failure_between_backward_start_and_runtime_error() -> None:
    d = analyze(TORCH / "observe.sqlite", TORCH / "observe.telemetry.jsonl")
    assert d["alignment"]["checked"] is True
    [f] = d["findings"]
    pos = f["telemetry"]
    assert pos["after"]["event"] == "backward_start" and pos["before"]["event"] == "runtime_error"
    assert pos["verified"] is True
    # The telemetry's CUBLAS_STATUS_ALLOC_FAILED line is explained by the traced failure.
    [line] = d["telemetry"]["library_failures"]
    assert line["event"] == "runtime_error" and line["explained"] is True
    assert d["verdict"] == "failure_found"


def test_torch_release_worker_cublas_create_is_complete_with_three_allocations() -> None:
    d = analyze(TORCH / "release.sqlite")
    assert d["verdict"] == "no_failure"
    assert d["findings"] == []
    lib = worker_create(d)
    assert (lib["pid"], lib["tid"], lib["thread_name"]) == (783, 817, None)  # no ThreadNames row: unknown
    assert lib["coverage"] == "complete" and lib["coverage_evidence"] == "cuda_api_record_after_end"
    assert [c["bytes"] for c in lib["children"] if c["bytes"] is not None] == [1024, 131072, 67108864]
    assert lib["allocated_bytes"] == 1024 + 131072 + 67108864
    [group] = d["failed_calls"]
    assert (group["count"], group["nvtx_range"]) == (27, "admission")


# --- capi: through the C API -------------------------------------------------------------------


def test_capi_release_is_complete_from_diagnostics_though_its_last_record_is_inside() -> None:
    path = CAPI / "release.sqlite"
    d = analyze(path)
    lib = worker_create(d)
    [(last,)] = sql(path, "SELECT max(end) FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    assert lib["start_ns"] < last < lib["end_ns"]  # no CUDA call after it: the program made none
    [(stopped,)] = sql(path, "SELECT timestamp FROM DIAGNOSTIC_EVENT WHERE text = 'Profiling has stopped.'")
    assert d["coverage"]["capture"]["stop_ns"] == stopped > lib["end_ns"] + 600_000_000
    assert lib["coverage"] == "complete" and lib["censored_reason"] is None
    assert lib["coverage_evidence"] == "capture_continued_without_cuda_warning"
    assert [c["bytes"] for c in lib["children"] if c["bytes"] is not None] == [1024, 131072, 67108864]
    assert d["verdict"] == "no_failure"


def test_capi_observe_is_inconclusive_without_telemetry() -> None:
    """No traced call inside cublasCreate_v2 failed (nsys skipped it), but the last admission failure is
    followed by no successful allocation of the process: nothing shows it recovered (issue 31's rule;
    tests/test_evidence_nccl.py). The release arm allocates inside cublasCreate_v2 after it: no_failure."""
    d = analyze(CAPI / "observe.sqlite")
    assert d["verdict"] == "inconclusive"
    assert worker_create(d)["coverage"] == "complete"
    assert d["findings"] == []
    assert analyze(CAPI / "release.sqlite")["verdict"] == "no_failure"


def test_capi_observe_with_telemetry_is_inconclusive_naming_the_line_and_the_skipped_calls() -> None:
    d = analyze(CAPI / "observe.sqlite", CAPI / "observe.telemetry.jsonl")
    assert d["verdict"] == "inconclusive"
    [line] = d["telemetry"]["library_failures"]
    assert (line["line"], line["event"], line["explained"]) == (6, "runtime_error", False)
    assert "CUBLAS_STATUS_ALLOC_FAILED" in line["statuses"]
    assert line["after"]["api"] == "cublasCreate_v2" and line["after"]["tid"] == 518
    first = d["verdict_reasons"][0]
    assert first.startswith("telemetry line 6 (runtime_error) records ")
    assert "CUDA_SKIP_SOME_API_CALLS=true" in first and "--cuda-trace-all-apis=true" in first


# --- event: a captured event waited on from outside the capture ------------------------------------


def test_event_observe_finds_the_failed_wait_on_an_event_recorded_inside_the_capture() -> None:
    path = EVENT / "observe.sqlite"
    d = analyze(path)
    assert d["verdict"] == "failure_found"
    [f] = d["findings"]
    assert (f["kind"], f["api"], f["return_code"], f["return_name"]) == (
        "captured_event_wait_failure", "cuStreamWaitEvent", 1, "CUDA_ERROR_INVALID_VALUE"
    )
    assert f["enclosing"] is None
    cap = f["stream_capture"]
    assert (cap["begin"]["api"], cap["end"]["api"]) == ("cuStreamBeginCapture_v2", "cuStreamEndCapture")
    assert cap["event_records_count"] == 4 and {r["api"] for r in cap["event_records"]} == {"cuEventRecord"}
    rows = dict(
        sql(path, "SELECT s.value, r.end FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                  "WHERE s.value IN ('cuStreamEndCapture')")
    )
    assert cap["end"]["end_ns"] == rows["cuStreamEndCapture"]
    assert cap["ns_from_capture_end"] == f["start_ns"] - rows["cuStreamEndCapture"]
    assert d["failed_calls"] == []
    assert d["coverage"]["library_sources"][0]["status"] == "not_requested"


def test_event_release_is_no_failure() -> None:
    d = analyze(EVENT / "release.sqlite")
    assert d["verdict"] == "no_failure"
    assert d["findings"] == [] and d["failed_calls"] == [] and d["census"]["nonzero_returns"] == 0
    assert d["verdict_reasons"][0] == "none of the 270 traced CUDA API calls failed"


# --- capture-stop: the capture ended while cublasCreate_v2 ran --------------------------------------


def test_capture_stop_censors_the_call_the_capture_ended_inside() -> None:
    path = STOP / "stop.sqlite"
    d = analyze(path)
    assert d["verdict"] == "inconclusive"
    [lib] = d["library_calls"]
    assert lib["api"] == "cublasCreate_v2"
    assert lib["coverage"] == "censored" and lib["censored_reason"] == "capture_ended_inside"
    assert lib["censored_reasons"] == ["capture_ended_inside", "nsys_warned_cuda_events_missing"]
    # nsys clamped the open range to the capture's stop: its true end and duration are unknown.
    assert lib["recorded_end_ns"] == d["coverage"]["capture"]["stop_ns"] == 19_603_056
    assert lib["end_ns"] is None and lib["duration_ns"] is None and lib["end_known"] is False
    texts = [w["text"] for w in d["coverage"]["nsys_diagnostics"]]
    assert texts == ["Not all NVTX events might have been collected.", "Not all CUDA events might have been collected."]
    assert [w["category"] for w in d["coverage"]["nsys_diagnostics"]] == ["nvtx_events_missing", "cuda_events_missing"]
    [cen] = d["coverage"]["censored"]
    assert cen["end_ns"] is None and cen["recorded_end_ns"] == 19_603_056


# --- the older nsys 2023.4 pair: still censored, nothing to confirm the trace ---------------------


@pytest.mark.parametrize("arm", ["observe", "release"])
def test_nsys_2023_pair_stays_inconclusive_without_diagnostics(arm: str) -> None:
    d = analyze(H200 / f"{arm}.sqlite")
    assert d["verdict"] == "inconclusive"
    lib = worker_create(d)
    assert lib["censored_reason"] == "cuda_api_trace_ends_inside"
    assert d["coverage"]["capture"]["diagnostics_table"] is False
