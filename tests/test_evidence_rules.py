"""One builder fixture per evidence rule: coverage from nsys's diagnostics, every failed call explained.

Each scenario is a small export built from the real DDL (tests/builder.py), named for the
situation it tests.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from builder import Call, Diagnostic, Export, LibCall, MemoryEvent
from rich.console import Console
from scenarios import MAIN, PID, WORKER, MiB, observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.render.markdown import analysis_markdown
from nsysaudit.render.terminal import analysis_renderable

STARTED = Diagnostic(0, "Profiling has started.")


def stopped(at: int) -> Diagnostic:
    return Diagnostic(at, "Profiling has stopped.")


def analyze(make_export: Any, spec: Export, **options: Any) -> dict[str, Any]:
    return nsysaudit.analyze(make_export(spec), **options).to_dict()


def worker_only(spec: Export) -> Export:
    """The spec without calls after the worker's library call: its last record lies inside it."""
    spec.calls = [c for c in spec.calls if c.start < 13_000]
    return spec


# --- coverage from evidence ------------------------------------------------------------------------


def test_no_record_after_the_call_but_capture_went_on_without_warnings_is_complete(make_export) -> None:
    spec = worker_only(release_three_allocations())
    spec.diagnostics = [STARTED, stopped(50_000)]
    d = analyze(make_export, spec)
    [lib] = d["library_calls"]
    assert (lib["coverage"], lib["coverage_evidence"]) == ("complete", "capture_continued_without_cuda_warning")
    assert d["verdict"] == "no_failure"


def test_the_same_without_diagnostics_is_censored(make_export) -> None:
    spec = worker_only(release_three_allocations())
    spec.analysis_duration = 50_000  # the capture's length alone says nothing about lost events
    d = analyze(make_export, spec)
    [lib] = d["library_calls"]
    assert (lib["coverage"], lib["censored_reason"]) == ("censored", "cuda_api_trace_ends_inside")
    assert d["coverage"]["capture"] == {
        "start_ns": 0, "stop_ns": 50_000, "start_from": "ANALYSIS_DETAILS", "stop_from": "ANALYSIS_DETAILS",
        "diagnostics_table": False,
    }
    assert d["verdict"] == "inconclusive"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Not all CUDA events might have been collected.", "nsys_warned_cuda_events_missing"),
        ("Installed CUDA driver version (13.0) is not supported by this build of Nsight Systems. CUDA trace will be "
         "collected using libraries for driver version 12.8", "cuda_trace_degraded"),
        ("CUPTI buffer overflow: 1024 CUDA events were dropped", "nsys_warned_cuda_events_missing"),
    ],
)
def test_a_cuda_warning_of_the_process_censors_a_call_no_record_follows(make_export, text: str, reason: str) -> None:
    spec = worker_only(release_three_allocations())
    spec.diagnostics = [STARTED, Diagnostic(100, text, severity=2, pid=PID), stopped(50_000)]
    d = analyze(make_export, spec)
    [lib] = d["library_calls"]
    assert (lib["coverage"], lib["censored_reason"]) == ("censored", reason)
    [said] = d["coverage"]["nsys_diagnostics"]
    assert (said["text"], said["severity"], said["pid"]) == (text, "warning", PID)
    assert f"nsys warned: {text}" in d["verdict_reasons"]
    assert d["verdict"] == "inconclusive"


def test_a_cuda_warning_with_a_record_after_the_call_leaves_it_complete(make_export) -> None:
    spec = release_three_allocations()  # a cudaFree at 30,000 follows the call
    spec.diagnostics = [STARTED, Diagnostic(100, "Not all CUDA events might have been collected.", 2, PID),
                        stopped(50_000)]
    [lib] = analyze(make_export, spec)["library_calls"]
    assert (lib["coverage"], lib["coverage_evidence"]) == ("complete", "cuda_api_record_after_end")


def test_a_warning_for_another_process_does_not_apply_but_a_session_warning_does(make_export) -> None:
    spec = worker_only(release_three_allocations())
    warning = "Not all CUDA events might have been collected."
    spec.diagnostics = [STARTED, Diagnostic(100, warning, 2, pid=999), stopped(50_000)]
    spec.processes[999] = "other"
    [lib] = analyze(make_export, spec)["library_calls"]
    assert lib["coverage"] == "complete"
    spec.diagnostics = [STARTED, Diagnostic(100, warning, 2, pid=None), stopped(50_000)]
    [lib] = analyze(make_export, spec)["library_calls"]
    assert lib["censored_reason"] == "nsys_warned_cuda_events_missing"


def test_unrelated_warnings_are_shown_and_change_nothing(make_export) -> None:
    spec = worker_only(release_three_allocations())
    spec.diagnostics = [STARTED, Diagnostic(100, "No NVTX events collected. Does the process use NVTX?", 2, PID),
                        stopped(50_000)]
    d = analyze(make_export, spec)
    assert d["library_calls"][0]["coverage"] == "complete"
    assert [w["category"] for w in d["coverage"]["nsys_diagnostics"]] == ["other"]


def test_the_capture_ending_inside_a_call_makes_its_end_unknown(make_export) -> None:
    spec = release_three_allocations()
    spec.calls = [c for c in spec.calls if c.start < 13_000]
    spec.lib_calls = [LibCall("cublasCreate_v2", 9_000, 12_450, PID, WORKER)]  # nsys clamped it to the stop
    spec.calls = [c for c in spec.calls if c.end <= 12_450]
    spec.diagnostics = [STARTED, stopped(12_450)]
    d = analyze(make_export, spec)
    [lib] = d["library_calls"]
    assert (lib["coverage"], lib["censored_reasons"]) == ("censored", ["capture_ended_inside"])
    assert (lib["end_ns"], lib["recorded_end_ns"], lib["duration_ns"], lib["end_known"]) == (None, 12_450, None, False)
    # The calls inside it before the stop are still its children.
    assert [c["correlation_id"] for c in lib["children"]] == [20, 21, 22]
    assert d["verdict"] == "inconclusive"
    text = render(d, spec, make_export)
    assert "unknown (recorded 12,450: the capture's stop)" in text and "duration unknown" in text
    assert "4.6" not in text


def test_a_trace_that_ended_before_the_call_began_is_censored_as_such(make_export) -> None:
    spec = Export(
        calls=[Call("cudaMalloc_v3020", 1_000, 2_000, PID, MAIN, corr=1, bytes=MiB)],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
    )
    [lib] = analyze(make_export, spec)["library_calls"]
    assert lib["censored_reason"] == "cuda_api_trace_ended_before_call"


# --- library sources --------------------------------------------------------------------------------


def test_a_library_nsys_could_not_trace_is_not_traced_never_no_calls(make_export) -> None:
    spec = Export(
        calls=[Call("cudaMalloc_v3020", 1_000, 2_000, PID, MAIN, ret=2)],
        capture_meta={"CAPTURE_EVENT_TYPE": "CuDNN"},
        diagnostics=[STARTED, Diagnostic(50, "Tracing cuDNN library version 91.9 is currently not supported", 2, PID),
                     stopped(50_000)],
    )
    d = analyze(make_export, spec)
    cudnn = {s["library"]: s for s in d["coverage"]["library_sources"]}["cuDNN"]
    assert (cudnn["status"], cudnn["requested"], cudnn["calls"]) == ("not_traced", True, 0)
    assert "91.9" in cudnn["reason"]
    # No library was traced and an allocation failed: it may have been inside one.
    assert d["verdict"] == "inconclusive"
    assert any(r.startswith("cuDNN was not traced (not_traced): nsys: Tracing cuDNN") for r in d["verdict_reasons"])


def test_library_marker_rows_are_not_library_calls(make_export) -> None:
    spec = release_three_allocations()
    # nsys's zero-length "cuBLAS start" / "cuBLAS finish" markers on tid 0; the finish lies after the trace.
    spec.lib_calls = [
        LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER, source="table"),
        LibCall("cuBLAS start", 500, 500, PID, 0, source="table", event_class=35),
        LibCall("cuBLAS finish", 99_000, 99_000, PID, 0, source="table", event_class=36),
    ]
    d = analyze(make_export, spec)
    assert [lc["api"] for lc in d["library_calls"]] == ["cublasCreate_v2"]
    assert d["library_calls"][0]["coverage"] == "complete"
    assert {s["library"]: s["markers"] for s in d["coverage"]["library_sources"]}["cuBLAS"] == 2
    assert d["verdict"] == "no_failure"


# --- every failed call explained ----------------------------------------------------------------------


def test_error_reporting_calls_and_not_ready_polls_are_not_failures(make_export) -> None:
    spec = release_three_allocations()
    spec.calls += [
        Call("cudaGetLastError_v3020", 11_600, 11_700, PID, WORKER, ret=2, corr=50),  # inside cublasCreate_v2
        Call("cudaPeekAtLastError_v3020", 20_000, 20_010, PID, MAIN, ret=2, corr=51),
        Call("cudaStreamQuery_v3020", 21_000, 21_010, PID, MAIN, ret=600, corr=52),
        Call("cuEventQuery", 21_100, 21_110, PID, MAIN, ret=600, corr=53),
        Call("cudaLaunchKernel_v7000", 22_000, 22_010, PID, MAIN, ret=600, corr=54),  # 600 from no query: a failure
    ]
    d = analyze(make_export, spec)
    meaning = {(r["display_api"], r["return_code"]): r["classification"] for r in d["census"]["by_return"]}
    assert meaning == {
        ("cudaGetLastError", 2): "reports_earlier_error",
        ("cudaPeekAtLastError", 2): "reports_earlier_error",
        ("cudaStreamQuery", 600): "not_ready_poll",
        ("cuEventQuery", 600): "not_ready_poll",
        ("cudaLaunchKernel", 600): "failure",
    }
    assert d["census"]["nonzero_returns"] == 5 and d["census"]["failed_calls"] == 1
    assert d["findings"] == []  # the cudaGetLastError inside cublasCreate_v2 is no finding
    [group] = d["failed_calls"]
    assert (group["display_api"], group["return_code"]) == ("cudaLaunchKernel", 600)
    assert d["verdict"] == "no_failure"


def test_correlation_id_zero_joins_nothing_and_is_never_a_duplicate(make_export) -> None:
    spec = observe_nested_failure()
    spec.calls[1].corr = 0  # a nested cudaMalloc whose correlation id is 0: its own event gets 0 too
    spec.memory_events = [MemoryEvent(100 + i, PID, 512 * (i + 1)) for i in range(5)]  # driver module memory
    d = analyze(make_export, spec)
    assert [w["kind"] for w in d["warnings"]] == []
    [lib] = d["library_calls"]
    by_corr = {c["correlation_id"]: c["bytes"] for c in lib["children"]}
    assert by_corr[0] is None  # unknown: correlation 0 ties the event to no call
    assert by_corr[21] == 2 * MiB
    assert d["findings"][0]["enclosing"]["allocations_before"] == {
        "count": 2, "bytes_each": [None, 2 * MiB], "bytes": None
    }


# --- a captured event waited on from outside the capture ----------------------------------------------


def capture_scenario(*, record_inside: bool, runtime: bool = False) -> Export:
    begin, end, record, wait = (
        ("cudaStreamBeginCapture_v10000", "cudaStreamEndCapture_v10000", "cudaEventRecord_v3020",
         "cudaStreamWaitEvent_v3020")
        if runtime
        else ("cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuEventRecord", "cuStreamWaitEvent")
    )
    calls = [Call(begin, 1_000, 1_100, PID, MAIN)]
    if record_inside:
        calls += [Call(record, 1_200 + 100 * i, 1_250 + 100 * i, PID, MAIN) for i in range(3)]
    calls += [Call(end, 2_000, 2_100, PID, MAIN), Call("cuGraphLaunch", 3_000, 3_050, PID, MAIN)]
    if not record_inside:
        calls.append(Call(record, 4_000, 4_050, PID, MAIN))
    calls.append(Call(wait, 9_000, 9_100, PID, MAIN, ret=1 if not runtime else 400, corr=77))
    return Export(calls=calls, capture_meta={"CAPTURE_EVENT_TYPE": "Cuda"})


@pytest.mark.parametrize("runtime", [False, True])
def test_failed_wait_after_a_capture_that_recorded_events_is_a_finding(make_export, runtime: bool) -> None:
    d = analyze(make_export, capture_scenario(record_inside=True, runtime=runtime))
    [f] = d["findings"]
    assert f["kind"] == "captured_event_wait_failure" and f["correlation_id"] == 77
    cap = f["stream_capture"]
    assert (cap["begin"]["start_ns"], cap["end"]["end_ns"], cap["event_records_count"]) == (1_000, 2_100, 3)
    assert (cap["pid"], cap["tid"], cap["ns_from_capture_end"]) == (PID, MAIN, 9_000 - 2_100)
    assert d["failed_calls"] == [] and d["verdict"] == "failure_found"


def test_failed_wait_after_a_capture_without_event_records_is_a_failed_call(make_export) -> None:
    d = analyze(make_export, capture_scenario(record_inside=False))
    assert d["findings"] == []
    [group] = d["failed_calls"]
    assert (group["api"], group["return_code"], group["return_name"]) == (
        "cuStreamWaitEvent", 1, "CUDA_ERROR_INVALID_VALUE"
    )
    assert d["verdict"] == "no_failure"
    assert "1 cuStreamWaitEvent returned 1 (CUDA_ERROR_INVALID_VALUE)" in d["verdict_reasons"][-1]


def test_failed_wait_before_the_capture_is_not_tied_to_it(make_export) -> None:
    spec = capture_scenario(record_inside=True)
    spec.calls[-1] = Call("cuStreamWaitEvent", 500, 600, PID, MAIN, ret=1, corr=77)
    d = analyze(make_export, spec)
    assert d["findings"] == [] and d["failed_calls"][0]["api"] == "cuStreamWaitEvent"


# --- reading what older nsys wrote -------------------------------------------------------------------


def test_an_export_without_any_metadata_table_is_read_with_the_version_unknown(make_export) -> None:
    spec = observe_nested_failure()
    spec.omit_tables = {"META_DATA_EXPORT"}
    d = analyze(make_export, spec)
    assert (d["input"]["nsys_version"], d["input"]["schema_version"]) == (None, None)
    assert [w["kind"] for w in d["warnings"]] == ["no_metadata_table"]
    assert d["verdict"] == "failure_found"


def test_no_metadata_and_no_cuda_table_is_still_not_an_export(make_export) -> None:
    spec = Export(omit_tables={"META_DATA_EXPORT"})
    with pytest.raises(nsysaudit.UnusableInput, match="not an Nsight Systems export"):
        nsysaudit.analyze(make_export(spec))


# --- identifiers are never printed with thousands separators ------------------------------------------


def render(d: dict[str, Any], spec: Export, make_export: Any) -> str:
    result = nsysaudit.analyze(make_export(spec))
    console = Console(width=200, color_system=None, force_terminal=False, record=True, file=io.StringIO())
    console.print(analysis_renderable(result, details=True))
    return console.export_text() + analysis_markdown(result.to_dict())


def test_pids_tids_and_correlation_ids_are_printed_without_separators(make_export) -> None:
    big = 1_293_703
    spec = Export(
        calls=[
            Call("cudaMalloc_v3020", 10_000, 10_500, big, big + 1, corr=4_567_890, bytes=MiB),
            Call("cudaMalloc_v3020", 11_000, 11_500, big, big + 1, ret=2, corr=4_567_891),
            Call("cudaMalloc_v3020", 20_000, 20_100, big, big, ret=2, corr=4_567_892),
            Call("cudaFree_v3020", 30_000, 30_100, big, big, corr=4_567_893),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, big, big + 1)],
    )
    d = analyze(make_export, spec)
    text = render(d, spec, make_export)
    for ident in ("1293703", "1293704", "4567891"):
        assert ident in text
    for grouped in ("1,293,703", "1,293,704", "4,567,891", "4,567,892"):
        assert grouped not in text
