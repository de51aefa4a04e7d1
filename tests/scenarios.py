"""Named builder scenarios shared by the tests (one function per situation a user meets)."""

from __future__ import annotations

from builder import Call, Export, LibCall, Range, strip_not_null

MAIN, WORKER, PID = 611, 642, 611
MiB = 1 << 20
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"  # the CUDA API table


def observe_nested_failure() -> Export:
    """cublasCreate_v2 on the worker: two cudaMallocs succeed, the third returns 2."""
    return Export(
        calls=[
            Call("cudaMalloc_v3020", 1_000, 2_000, PID, MAIN, corr=10, bytes=256 * MiB),
            Call("cudaMalloc_v3020", 10_000, 10_500, PID, WORKER, corr=20, bytes=4 * MiB),
            Call("cudaMalloc_v3020", 11_000, 11_500, PID, WORKER, corr=21, bytes=2 * MiB),
            Call("cudaMalloc_v3020", 12_000, 12_400, PID, WORKER, ret=2, corr=22),
            Call("cudaFree_v3020", 30_000, 30_100, PID, MAIN, corr=30),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
        ranges=[Range("backward", 8_500, 13_500, PID, WORKER)],
        thread_names={(PID, MAIN): "python3", (PID, WORKER): "bwd_worker_0"},
        processes={PID: "python3"},
    )


def release_three_allocations() -> Export:
    """cublasCreate_v2 on the worker with three successful nested cudaMallocs."""
    return Export(
        calls=[
            Call("cudaMalloc_v3020", 10_000, 10_500, PID, WORKER, corr=20, bytes=4 * MiB),
            Call("cudaMalloc_v3020", 11_000, 11_500, PID, WORKER, corr=21, bytes=2 * MiB),
            Call("cudaMalloc_v3020", 12_000, 12_400, PID, WORKER, corr=22, bytes=8 * MiB),
            Call("cudaFree_v3020", 30_000, 30_100, PID, MAIN, corr=30),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
        thread_names={(PID, MAIN): "python3", (PID, WORKER): "bwd_worker_0"},
        processes={PID: "python3"},
    )


SECOND = 700  # a second worker thread with its own cublasCreate_v2


def two_workers(*, failure_on_first: bool) -> Export:
    """The observe (or release) scenario plus a second worker whose cublasCreate_v2 holds a
    successful cudaMalloc (corr 40), a kernel launch (41) and a failed cudaMalloc (42)."""
    spec = observe_nested_failure() if failure_on_first else release_three_allocations()
    spec.calls += [
        Call("cudaMalloc_v3020", 40_000, 40_500, PID, SECOND, corr=40, bytes=MiB),
        Call("cudaLaunchKernel_v7000", 41_000, 41_200, PID, SECOND, corr=41),
        Call("cudaMalloc_v3020", 42_000, 42_400, PID, SECOND, ret=2, corr=42),
        Call("cudaStreamSynchronize_v3020", 60_000, 60_100, PID, MAIN, corr=60),
    ]
    spec.lib_calls.append(LibCall("cublasCreate_v2", 39_000, 43_000, PID, SECOND))
    spec.thread_names[(PID, SECOND)] = "bwd_worker_1"
    return spec


def damage(kind: str, corr: int) -> list[str]:
    """raw_sql that damages the CUDA API row with correlation id ``corr`` in one way."""
    where = f"WHERE correlationId = {corr}"
    return {
        "dangling_name_id": [f"UPDATE {RUNTIME} SET nameId = 9999 {where}"],
        "null_start": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET start = NULL {where}"],
        "null_end": [strip_not_null(RUNTIME), f'UPDATE {RUNTIME} SET "end" = NULL {where}'],
        "null_return": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET returnValue = NULL {where}"],
        "null_name_id": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET nameId = NULL {where}"],
        "null_global_tid": [strip_not_null(RUNTIME), f"UPDATE {RUNTIME} SET globalTid = NULL {where}"],
        "reversed": [f'UPDATE {RUNTIME} SET start = "end" + 100 {where}'],
        "duplicate_correlation": [f"UPDATE {RUNTIME} SET correlationId = 40 {where}"],
    }[kind]
