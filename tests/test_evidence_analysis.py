"""The core analysis: census, nested joins, coverage/censoring and verdict."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import pytest
from builder import Call, Export, LibCall, global_tid
from conftest import H200, PUBLIC
from scenarios import MAIN, PID, WORKER, MiB, observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.core.codes import display_name, is_allocation_api, return_name


def sql_census(path: Path) -> tuple[int, Counter[tuple[str | None, int]]]:
    """The census as a person would compute it with plain SQL."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        total = con.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        rows = con.execute(
            "SELECT s.value, r.returnValue, count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "LEFT JOIN StringIds s ON s.id = r.nameId WHERE r.returnValue != 0 GROUP BY 1, 2"
        ).fetchall()
    finally:
        con.close()
    return total, Counter({(a, rc): n for a, rc, n in rows})


# --- the real H200 captures ---------------------------------------------------------------------


def test_observe_capture_is_inconclusive_with_censored_worker_cublas_create() -> None:
    d = nsysaudit.analyze(H200 / "observe.sqlite").to_dict()
    assert d["input"]["kind"] == "sqlite"
    assert d["input"]["nsys_version"] == "2023.4.4.54"
    assert d["input"]["schema_version"] == "3.7.2"
    assert d["census"]["cuda_api_calls"] == 925
    assert d["census"]["nonzero_returns"] == 13
    assert d["census"]["by_return"] == [
        {"api": "cudaMalloc_v3020", "display_api": "cudaMalloc", "return_code": 2,
         "return_name": "cudaErrorMemoryAllocation", "count": 13, "classification": "failure"}
    ]
    assert d["findings"] == []
    [lib] = d["library_calls"]
    assert (lib["api"], lib["pid"], lib["tid"], lib["source"]) == ("cublasCreate_v2", 611, 642, "NVTX:cuBLAS")
    # nsys 2023.4 wrote no DIAGNOSTIC_EVENT: nothing confirms the trace went on without losing events.
    assert d["coverage"]["capture"]["diagnostics_table"] is False
    assert d["coverage"]["capture"]["stop_from"] == "ANALYSIS_DETAILS"
    assert lib["thread_name"] is None  # bwd_worker_0 is not in ThreadNames: unknown, not guessed
    assert lib["coverage"] == "censored"
    assert lib["censored_reason"] == "cuda_api_trace_ends_inside"
    assert lib["cuda_api_last_ns"] == 5_355_878_635 < lib["end_ns"] == 5_358_165_195
    # The last traced call of the process is inside the range, on the worker thread.
    assert lib["children"][-1]["api"] == "cuModuleGetLoadingMode"
    assert all(c["return_code"] == 0 for c in lib["children"])
    assert [c["lib_id"] for c in d["coverage"]["censored"]] == [lib["lib_id"]]
    assert d["verdict"] == "inconclusive"


def test_release_capture_is_also_censored_so_inconclusive() -> None:
    d = nsysaudit.analyze(H200 / "release.sqlite").to_dict()
    [lib] = d["library_calls"]
    assert lib["api"] == "cublasCreate_v2" and lib["coverage"] == "censored"
    assert d["findings"] == []
    assert d["verdict"] == "inconclusive"


@pytest.mark.parametrize("name", ["observe.sqlite", "release.sqlite"])
def test_h200_census_equals_plain_sql(name: str) -> None:
    d = nsysaudit.analyze(H200 / name).to_dict()
    total, nonzero = sql_census(H200 / name)
    assert d["census"]["cuda_api_calls"] == total
    assert Counter({(r["api"], r["return_code"]): r["count"] for r in d["census"]["by_return"]}) == nonzero


# --- public exports of five other nsys versions ----------------------------------------------------

MFU = "nsys-ai_mfu_2gpu_after_2026.2.sqlite"  # NCCL's ranges: tests/test_evidence_nccl.py
PUBLIC_FILES = sorted(p.name for p in PUBLIC.glob("*.sqlite") if p.name != MFU)


def test_public_fixtures_are_present_with_licenses() -> None:
    assert len(PUBLIC_FILES) == 5 and (PUBLIC / MFU).is_file()
    for lic in ("LICENSE.flameox", "LICENSE.nsys-ai", "LICENSE.pipit", "README.md"):
        assert (PUBLIC / lic).is_file()


@pytest.mark.parametrize("name", PUBLIC_FILES)
def test_public_exports_census_and_honest_verdict(name: str) -> None:
    path = PUBLIC / name
    d = nsysaudit.analyze(path).to_dict()
    total, nonzero = sql_census(path)
    assert d["census"]["cuda_api_calls"] == total
    assert Counter({(r["api"], r["return_code"]): r["count"] for r in d["census"]["by_return"]}) == nonzero
    assert d["census"]["nonzero_returns"] == sum(nonzero.values())
    # None of them traced cuBLAS/cuDNN, and none has a failed call: with a CUDA API trace, zero
    # failed calls is no_failure, and the reasons say which libraries were not traced.
    assert d["library_calls"] == [] and d["failed_calls"] == [] and nonzero == Counter()
    assert d["verdict"] == "no_failure"
    assert d["verdict_reasons"][0] == f"none of the {total:,} traced CUDA API calls failed"
    assert {s["library"] for s in d["coverage"]["library_sources"] if s["status"] != "traced"} == {"cuBLAS", "cuDNN"}
    assert any(r.startswith("cuBLAS was not traced") for r in d["verdict_reasons"])
    assert d["input"]["schema_version"] is not None
    cuda = [s for s in d["coverage"]["by_source"] if s["source"] == "cuda_api"]
    assert sum(s["rows"] for s in cuda) == total


def test_old_2022_export_reads_export_meta_data() -> None:
    d = nsysaudit.analyze(PUBLIC / "pipit_saxpy_2022.2.sqlite").to_dict()
    assert d["input"]["nsys_version"] == "2022.2.1.31"
    assert d["input"]["schema_version"] == "2.9.1"


# --- builder scenarios ---------------------------------------------------------------------------


def test_failed_cudamalloc_inside_cublas_create_after_two_successful(make_export) -> None:
    d = nsysaudit.analyze(make_export(observe_nested_failure())).to_dict()
    assert d["verdict"] == "failure_found"
    [f] = d["findings"]
    assert f["kind"] == "nested_alloc_failure"
    assert (f["api"], f["return_code"], f["return_name"]) == ("cudaMalloc_v3020", 2, "cudaErrorMemoryAllocation")
    assert (f["correlation_id"], f["pid"], f["tid"], f["thread_name"]) == (22, PID, WORKER, "bwd_worker_0")
    assert (f["start_ns"], f["end_ns"]) == (12_000, 12_400)
    assert f["requested_bytes"] is None  # a failed allocation has no allocation event
    assert f["enclosing"]["api"] == "cublasCreate_v2"
    assert (f["enclosing"]["start_ns"], f["enclosing"]["end_ns"]) == (9_000, 13_000)
    assert f["global_tid"] == global_tid(PID, WORKER)
    [lib] = d["library_calls"]
    assert [(c["correlation_id"], c["return_code"], c["bytes"]) for c in lib["children"]] == [
        (20, 0, 4 * MiB), (21, 0, 2 * MiB), (22, 2, None)
    ]
    assert lib["allocated_bytes"] == 6 * MiB
    assert lib["coverage"] == "complete"


def test_release_three_successful_nested_allocations_with_bytes(make_export) -> None:
    d = nsysaudit.analyze(make_export(release_three_allocations())).to_dict()
    assert d["verdict"] == "no_failure"
    assert d["findings"] == []
    [lib] = d["library_calls"]
    assert [c["bytes"] for c in lib["children"]] == [4 * MiB, 2 * MiB, 8 * MiB]
    assert lib["allocated_bytes"] == 14 * MiB


def test_same_tid_in_another_process_is_not_nested(make_export) -> None:
    spec = Export(
        calls=[
            Call("cudaMalloc_v3020", 10_000, 10_500, 700, WORKER, ret=2, corr=5),
            Call("cudaFree_v3020", 20_000, 20_100, PID, MAIN, corr=6),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["findings"] == []
    assert d["library_calls"][0]["children"] == []
    assert d["census"]["nonzero_returns"] == 1


def test_same_pid_and_tid_in_another_vm_is_not_the_same_thread(make_export) -> None:
    spec = Export(
        calls=[
            Call("cudaMalloc_v3020", 10_000, 10_500, PID, WORKER, ret=2, corr=5, vm=1),
            Call("cudaFree_v3020", 20_000, 20_100, PID, MAIN, corr=6),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["findings"] == []


def test_straddling_failed_call_is_reported_separately_not_nested(make_export) -> None:
    spec = Export(
        calls=[
            Call("cudaMalloc_v3020", 12_500, 13_500, PID, WORKER, ret=2, corr=7),
            Call("cudaFree_v3020", 20_000, 20_100, PID, MAIN, corr=8),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    [f] = d["findings"]
    assert f["kind"] == "straddling_alloc_failure"
    assert d["library_calls"][0]["children"] == []
    assert [c["correlation_id"] for c in d["library_calls"][0]["straddling"]] == [7]
    assert d["verdict"] == "no_failure"


@pytest.mark.parametrize("source,expected", [("table", "CUBLAS_EVENTS"), ("nvtx", "NVTX:cuBLAS")])
def test_cublas_ranges_from_table_and_from_nvtx_domain(make_export, source: str, expected: str) -> None:
    spec = observe_nested_failure()
    spec.lib_calls = [LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER, source=source)]
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    [lib] = d["library_calls"]
    assert lib["source"] == expected
    [f] = d["findings"]
    assert f["correlation_id"] == 22 and f["enclosing"]["source"] == expected


def test_cudnn_ranges_are_library_calls_too(make_export) -> None:
    spec = observe_nested_failure()
    spec.lib_calls = [LibCall("cudnnCreate", 9_000, 13_000, PID, WORKER, library="cuDNN", source="table")]
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["findings"][0]["enclosing"]["api"] == "cudnnCreate"
    assert d["library_calls"][0]["library"] == "cuDNN"


def test_censored_library_call_makes_the_verdict_inconclusive(make_export) -> None:
    # The process's CUDA API trace ends at 10_500, inside cublasCreate_v2 [9_000, 13_000].
    spec = Export(
        calls=[Call("cudaMalloc_v3020", 10_000, 10_500, PID, WORKER, corr=1, bytes=MiB)],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    [lib] = d["library_calls"]
    assert lib["coverage"] == "censored" and lib["censored_reason"] == "cuda_api_trace_ends_inside"
    assert d["coverage"]["censored"][0]["cuda_api_last_ns"] == 10_500
    assert d["verdict"] == "inconclusive"


def test_library_call_without_end_is_censored(make_export) -> None:
    spec = observe_nested_failure()
    spec.calls = [c for c in spec.calls if c.ret == 0]
    spec.lib_calls = [LibCall("cublasCreate_v2", 9_000, None, PID, WORKER)]
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["library_calls"][0]["censored_reason"] == "library_call_has_no_end"
    assert d["verdict"] == "inconclusive"
    assert any(w["kind"] == "library_call_without_end" for w in d["warnings"])


def test_export_without_cuda_trace_is_inconclusive_never_no_failure(make_export) -> None:
    spec = release_three_allocations()
    spec.omit_tables = {"CUPTI_ACTIVITY_KIND_RUNTIME"}
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["census"]["cuda_api_calls"] == 0
    assert d["coverage"]["cuda_api_trace"] is False
    assert d["library_calls"][0]["censored_reason"] == "no_cuda_api_trace"
    assert d["verdict"] == "inconclusive"


def test_no_failed_call_and_no_library_tracing_is_no_failure_naming_the_untraced_libraries(make_export) -> None:
    spec = Export(calls=[Call("cudaFree_v3020", 1, 2)], capture_meta={"CAPTURE_EVENT_TYPE": "Cuda"})
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["verdict"] == "no_failure"
    assert d["verdict_reasons"] == [
        "none of the 1 traced CUDA API calls failed",
        "cuBLAS was not traced (not_requested): the capture's CAPTURE_EVENT_TYPE does not request it",
        "cuDNN was not traced (not_requested): the capture's CAPTURE_EVENT_TYPE does not request it",
    ]


def test_allocation_failure_with_no_library_tracing_is_inconclusive(make_export) -> None:
    spec = Export(calls=[Call("cudaMalloc_v3020", 1, 2, ret=2)], capture_meta={"CAPTURE_EVENT_TYPE": "Cuda"})
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["verdict"] == "inconclusive"
    assert d["verdict_reasons"][0] == (
        "1 allocation or out-of-memory failure(s), and no library API (cuBLAS/cuDNN/NCCL) was traced: "
        "whether any happened inside a library call cannot be told"
    )
    [group] = d["failed_calls"]
    assert (group["api"], group["return_code"], group["count"]) == ("cudaMalloc_v3020", 2, 1)


def test_non_allocation_failure_with_no_library_tracing_is_no_failure_and_said(make_export) -> None:
    spec = Export(calls=[Call("cudaSetDevice_v3020", 1, 2, ret=101)], capture_meta={"CAPTURE_EVENT_TYPE": "Cuda"})
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["verdict"] == "no_failure"
    assert d["verdict_reasons"][0] == (
        "no library API was traced; none of the failed calls is an allocation or out-of-memory failure"
    )
    assert "1 cudaSetDevice returned 101 (cudaErrorInvalidDevice) on pid 100 tid 100" in d["verdict_reasons"][-1]


def test_no_library_calls_with_cublas_tracing_on_is_no_failure(make_export) -> None:
    spec = Export(calls=[Call("cudaFree_v3020", 1, 2)])  # builder's capture meta lists CuBLAS
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["verdict"] == "no_failure"


def test_nested_library_calls_give_one_finding_with_innermost_enclosing(make_export) -> None:
    spec = observe_nested_failure()
    spec.lib_calls.append(LibCall("cublasLtCreate", 11_800, 12_800, PID, WORKER))
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    [f] = d["findings"]
    assert f["enclosing"]["api"] == "cublasLtCreate"
    assert [e["api"] for e in f["enclosing_chain"]] == ["cublasLtCreate", "cublasCreate_v2"]


def test_driver_allocation_failure_uses_curesult_names(make_export) -> None:
    spec = Export(
        calls=[Call("cuMemAlloc_v2", 10_000, 10_500, PID, WORKER, ret=2, corr=3), Call("cuInit", 20_000, 20_001)],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
    )
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    [f] = d["findings"]
    assert f["return_name"] == "CUDA_ERROR_OUT_OF_MEMORY"


def test_failed_non_allocation_call_inside_is_a_nested_call_failure(make_export) -> None:
    spec = release_three_allocations()
    spec.calls.append(Call("cudaGetDevice", 12_500, 12_600, PID, WORKER, ret=100, corr=40))
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    [f] = d["findings"]
    assert (f["kind"], f["api"], f["return_code"], f["return_name"]) == (
        "nested_call_failure", "cudaGetDevice", 100, "cudaErrorNoDevice"
    )
    assert f["out_of_memory"] is False and f["requested_bytes"] is None
    assert f["enclosing"]["api"] == "cublasCreate_v2"
    assert d["library_calls"][0]["failed_children"] == 1
    assert d["failed_calls"] == []  # explained by the finding
    assert d["verdict"] == "failure_found"


def test_out_of_memory_from_a_non_allocation_call_inside_is_flagged(make_export) -> None:
    # With --cuda-trace-all-apis=true the failure inside cublasCreate_v2 can be cudaGetSymbolAddress
    # returning cudaErrorMemoryAllocation (lazy module loading).
    spec = release_three_allocations()
    spec.calls.append(Call("cudaGetSymbolAddress_v3020", 12_500, 12_600, PID, WORKER, ret=2, corr=40))
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    [f] = d["findings"]
    assert (f["kind"], f["display_api"], f["return_name"], f["out_of_memory"]) == (
        "nested_call_failure", "cudaGetSymbolAddress", "cudaErrorMemoryAllocation", True
    )


def test_codes() -> None:
    assert display_name("cudaMalloc_v3020") == "cudaMalloc"
    assert display_name("cublasCreate_v2") == "cublasCreate"
    assert is_allocation_api("cudaMallocAsync_ptsz_v11020")
    assert is_allocation_api("cuMemAlloc_v2")
    assert not is_allocation_api("cudaFree_v3020")
    assert return_name("cudaMalloc_v3020", 2) == "cudaErrorMemoryAllocation"
    assert return_name("cuMemAlloc_v2", 2) == "CUDA_ERROR_OUT_OF_MEMORY"
    assert return_name("cudaMalloc_v3020", 123456) is None


def test_unknown_schema_major_version_is_a_warning_not_a_crash(make_export) -> None:
    spec = observe_nested_failure()
    spec.schema_version = "9.1.0"
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["input"]["schema_version"] == "9.1.0"
    [w] = [w for w in d["warnings"] if w["kind"] == "unknown_schema_major"]
    assert "9" in w["message"]
    assert d["verdict"] == "failure_found"  # the analysis still ran on the tables it found


def test_suffixed_tables_of_newer_exports_are_found_by_looking(make_export) -> None:
    spec = observe_nested_failure()
    spec.raw_sql = [
        "ALTER TABLE NVTX_EVENTS RENAME TO NVTX_EVENTS_V2",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME TO CUPTI_ACTIVITY_KIND_RUNTIME_V3",
        "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME_V3 ADD COLUMN someNewColumn INTEGER",
    ]
    d = nsysaudit.analyze(make_export(spec)).to_dict()
    assert d["input"]["tables"]["nvtx"] == "NVTX_EVENTS_V2"
    assert d["input"]["tables"]["cuda_api"] == "CUPTI_ACTIVITY_KIND_RUNTIME_V3"
    [f] = d["findings"]
    assert f["correlation_id"] == 22 and f["enclosing"]["api"] == "cublasCreate_v2"
