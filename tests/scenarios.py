"""Named builder scenarios shared by the tests (one function per situation a user meets)."""

from __future__ import annotations

from builder import Call, Diagnostic, Export, LibCall, MemoryEvent, Range, strip_not_null

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


# --- NCCL: a communicator's first collective while the caching allocator holds the device ----------
#
# Modelled on NCCL 2.27's source and on ../shared/capture/nccl_workload.py until a real capture
# replaces it: ncclCommInitRankConfig (NVTX domain "NCCL", a payload schema registered in it) runs
# the communicator's initialization on a thread NCCL starts for the call (ncclAsyncJobMain), whose
# ncclCudaCallocAsync maps device memory with cuMemCreate, cuMemAddressReserve, cuMemMap and
# cuMemSetAccess (nsys writes the allocation event at cuMemSetAccess); in observe the third
# cuMemCreate returns 2. Admission leaves the cache holding the device (three failed cudaMalloc
# probes on the main thread, handled); release frees the cache (empty_cache) before dp_reduce.

NCCL_PID, NCCL_MAIN, NCCL_JOB = 812, 812, 830
GiB = 1 << 30
H200_TOTAL = 150_109_880_320
NCCL_BASE = 0x7F00_0000_0000
NCCL_SESSION_START = 1_796_064_718_689_501_058
NCCL_MONOTONIC_OFFSET = 51_234_567_890  # the application's monotonic clock minus the trace clock
DP_REDUCE = (1_320_010_000, 1_400_000_000)
INIT = (1_320_100_000, 1_390_000_000)
# NCCL's payload schemas as nsys 2026.2 records them (the mfu export): CommInitRankConfig's, AllReduce's.
NCCL_SCHEMAS = [(1, 16777227, 0, "NCCL communicator ID"), (1, 16777227, 1, "No. of ranks"), (1, 16777227, 2, "Rank"),
                (1, 16777227, 3, "CUDA device"), (1, 16777221, 0, "NCCL communicator ID"),
                (1, 16777221, 1, "Message size [bytes]"), (1, 16777221, 2, "Reduction operation")]


def _nccl_segments() -> list[tuple[int, int]]:
    """(correlation id, bytes) of the main thread's successful cudaMallocs: 2 GiB of model and
    activations, then admission's 17 x 8 GiB and 1 GiB of cache."""
    return [(10, 2 * GiB)] + [(20 + i, 8 * GiB) for i in range(17)] + [(41, GiB)]


def nccl_arm(arm: str, *, domain_row: bool = True) -> Export:
    """One arm of the NCCL case (``observe`` or ``release``); ``domain_row`` False: NCCL's domain has
    no NvtxDomainCreate row (only its payload schemas and API names say it is NCCL's)."""
    p, m, j = NCCL_PID, NCCL_MAIN, NCCL_JOB
    calls: list[Call] = []
    memory: list[MemoryEvent] = []
    address = {}
    for i, (corr, size) in enumerate(_nccl_segments()):
        start = 1_000_100_000 if corr == 10 else 1_200_000_000 + i * 1_000_000
        calls.append(Call("cudaMalloc_v3020", start, start + 50_000, p, m, corr=corr))
        address[corr] = NCCL_BASE + i * 16 * GiB
        memory.append(MemoryEvent(start + 10_000, p, size, corr=corr, mem_kind=2, op=0, address=address[corr]))
    # Admission's probes that found no memory (the allocator raised, the workload halved its chunk).
    calls += [Call("cudaMalloc_v3020", 1_225_000_000, 1_225_100_000, p, m, ret=2, corr=40),
              Call("cudaMalloc_v3020", 1_232_000_000, 1_232_100_000, p, m, ret=2, corr=42),
              Call("cudaMalloc_v3020", 1_233_000_000, 1_233_100_000, p, m, ret=2, corr=43)]
    ranges = [Range("prepass", 1_000_000_000, 1_100_000_000, p, m),
              Range("admission", 1_200_000_000, 1_300_000_000, p, m), Range("dp_reduce", *DP_REDUCE, p, m)]
    if arm == "release":  # empty_cache(): every admission block back to the device
        ranges.append(Range("cache_release", 1_301_000_000, 1_310_000_000, p, m))
        for i, (corr, size) in enumerate(_nccl_segments()[1:]):
            start = 1_301_100_000 + i * 400_000
            calls.append(Call("cudaFree_v3020", start, start + 100_000, p, m, corr=100 + i))
            memory.append(MemoryEvent(start + 10_000, p, size, corr=100 + i, mem_kind=2, op=1, address=address[corr]))
    # NCCL's initialization thread: each ncclCudaCallocAsync maps one 2 MiB piece.
    corr, t = 200, 1_320_200_000
    calls.append(Call("cudaSetDevice_v3020", t, t + 5_000, p, j, corr=corr))
    pieces = 2 if arm == "observe" else 3
    for k in range(pieces):
        base = t + 100_000 + k * 400_000
        calls += [Call("cudaThreadExchangeStreamCaptureMode_v10010", base, base + 2_000, p, j, corr=corr + 1),
                  Call("cuMemCreate", base + 10_000, base + 60_000, p, j, corr=corr + 2),
                  Call("cuMemAddressReserve", base + 70_000, base + 80_000, p, j, corr=corr + 3),
                  Call("cuMemMap", base + 90_000, base + 120_000, p, j, corr=corr + 4),
                  Call("cuMemSetAccess", base + 130_000, base + 180_000, p, j, corr=corr + 5),
                  Call("cudaMemsetAsync_v3020", base + 190_000, base + 200_000, p, j, corr=corr + 6),
                  Call("cudaThreadExchangeStreamCaptureMode_v10010", base + 210_000, base + 212_000, p, j,
                       corr=corr + 7)]
        memory.append(MemoryEvent(base + 140_000, p, 2 << 20, corr=corr + 5, mem_kind=2, op=0,
                                  address=NCCL_BASE + 300 * GiB + k * (2 << 20)))
        corr += 10
    if arm == "observe":
        base = t + 100_000 + pieces * 400_000
        calls += [Call("cudaThreadExchangeStreamCaptureMode_v10010", base, base + 2_000, p, j, corr=corr + 1),
                  Call("cuMemCreate", base + 10_000, base + 40_000, p, j, ret=2, corr=corr + 2),
                  Call("cudaThreadExchangeStreamCaptureMode_v10010", base + 50_000, base + 52_000, p, j,
                       corr=corr + 3)]
    lib_calls = [LibCall("ncclCommInitRankConfig", *INIT, p, m, library="NCCL", domain_row=domain_row)]
    if arm == "release":  # the collective itself, once the communicator exists
        lib_calls.append(LibCall("ncclAllReduce", 1_391_000_000, 1_391_500_000, p, m, library="NCCL",
                                 domain_row=domain_row))
        calls.append(Call("cuLaunchKernelEx", 1_391_100_000, 1_391_200_000, p, m, corr=300))
        calls.append(Call("cudaStreamSynchronize_v3020", 1_392_000_000, 1_393_000_000, p, m, corr=301))
    calls.append(Call("cudaStreamIsCapturing_v10000", 1_410_000_000, 1_410_010_000, p, m, corr=400))  # teardown
    return Export(
        calls=calls, lib_calls=lib_calls, ranges=ranges, memory_events=memory,
        thread_names={(p, m): "python3"}, processes={p: "python3"}, gpus=[(0, "NVIDIA H200", H200_TOTAL)],
        nsys_version="2025.3.2.0", schema_version="3.20.3", session_start_utc_ns=NCCL_SESSION_START,
        diagnostics=[Diagnostic(900_000_000, "Profiling has started."),
                     Diagnostic(1_900_000_000, "Profiling has stopped.")],
        payload_schema_entries=list(NCCL_SCHEMAS),
    )


def nccl_telemetry(arm: str) -> list[dict[str, object]]:
    """The application's lines of :func:`nccl_arm` (as ../shared/capture/common.py writes them)."""
    reserved = sum(size for _, size in _nccl_segments())
    lines: list[tuple[int, str, dict[str, object]]] = [
        (999_000_000, "start", {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.27.7"}),
        (1_100_500_000, "prepass_end", {}),
        (1_300_500_000, "handoff", {"allocated": 2 * GiB, "reserved": reserved, "physical_free": 18_350_080,
                                    "total": H200_TOTAL}),
    ]
    if arm == "release":
        lines.append((1_310_500_000, "cache_release",
                      {"released": reserved - 2 * GiB, "physical_free": 147_700_000_000}))
    lines.append((DP_REDUCE[0] - 5_000, "dp_reduce_start", {"bytes": 24}))
    if arm == "observe":
        lines.append((1_395_000_000, "runtime_error", {
            "type": "DistBackendError",
            "message": "NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error "
                       "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7\nncclUnhandledCudaError: Call to "
                       "CUDA function failed.\nLast error:\nFailed to CUDA calloc async 24 bytes"}))
    else:
        lines.append((DP_REDUCE[1] + 5_000, "dp_reduce_end", {"ok": True, "value": [1.0, 2.0, 3.0]}))
    lines.append((1_420_000_000, "exit", {}))
    return [{**fields, "event": event, "arm": arm, "pid": NCCL_PID, "tid": NCCL_MAIN, "thread": "MainThread",
             "monotonic_ns": t + NCCL_MONOTONIC_OFFSET, "realtime_ns": NCCL_SESSION_START + t}
            for t, event, fields in lines]
