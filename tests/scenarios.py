"""Named builder scenarios shared by the tests (one function per situation a user meets)."""

from __future__ import annotations

from builder import Call, Export, LibCall, Range

MAIN, WORKER, PID = 611, 642, 611
MiB = 1 << 20


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
