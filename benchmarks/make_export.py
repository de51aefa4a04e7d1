#!/usr/bin/env python3
"""Generate large synthetic Nsight Systems SQLite exports (nsys 2023.4.4 schema) for benchmarks.

    python benchmarks/make_export.py OUT.sqlite --rows N [--processes P] [--threads T]
        [--seed S] [--library-every K] [--failures F] [--variant observe|release]

The layout follows the real H200 export in tests/fixtures/h200-cuda13-nsys2023.4 (see its README.md):

* CUPTI_ACTIVITY_KIND_RUNTIME: N CUDA API rows (runtime names with their CUPTI version suffix,
  e.g. ``cudaLaunchKernel_v7000``; driver names such as ``cuLaunchKernel`` with eventClass 1) over
  P processes x T threads, ``globalTid = (1 << 48) | (pid << 24) | tid``. Calls on one thread
  never overlap; correlationIds are unique and increase with the start time over the whole file
  (with small gaps), and rows are stored in that order, like real exports.
* NVTX_EVENTS: per process one NvtxDomainCreate row (eventType 75, text ``cuBLAS``, domainId 1, on
  the main thread) and cuBLAS API ranges as push/pop ranges (eventType 59, domainId 1, textId ->
  StringIds, text/endGlobalTid NULL). On the "library" threads (the first ceil(T/2) threads of
  each process) every K-th region is such a range; it encloses 1-5 API calls of the same thread.
  The first range of each library thread is a successful ``cublasCreate_v2``.
* CUDA_GPU_MEMORY_USAGE_EVENTS (memKind 2, joined to the runtime row by correlationId, its start
  inside the call): one allocation row (memoryOperationType 0, near the end of the call) per
  successful cudaMalloc_v3020; failed calls have none. Each successful cudaFree_v3020 frees its
  thread's oldest allocation still live (FIFO per thread, over the whole run): a deallocation row
  (memoryOperationType 1, just after the call starts) with that allocation's globalPid, deviceId,
  address and bytes. A successful cudaFree with nothing live on its thread frees nothing and has
  no row (like cudaFree(NULL)). Rows are stored in time order within each merge window. With the
  API mix below (2 % mallocs, 1.5 % frees, sizes up to 8 GiB) live bytes grow with time: after
  about 300,000 rows (4 x 8 threads) they exceed the device total, so the free-memory bound of
  nsysaudit's ledger is negative from there on.
* TARGET_INFO_GPU: one row per device used (process p on device p % 8; "NVIDIA H200",
  150109880320 bytes, like the real export).
* Failures: F "nested" failures, a cudaMalloc_v3020 returning 2 as the last call inside a
  ``cublasCreate_v2`` range (each followed, just after the range on the same thread, by a failing
  cudaMalloc_v3020 outside it); max(3, F) more failing cudaMalloc_v3020 outside any range;
  cudaFree_v3020 / cudaMemcpyAsync_v3020 / cudaMalloc_v3020 returning 1 outside ranges, and
  cudaEventQuery_v3020 returning 600 (cudaErrorNotReady) now and then. ``--variant release`` is
  the same file except that the mallocs of those F cublasCreate_v2 ranges succeed (return 0, with
  a memory event; later cudaFree calls on those threads may then free other allocations).
* StringIds, META_DATA_EXPORT, META_DATA_CAPTURE, TARGET_INFO_SESSION_START_TIME, PROCESSES and
  ThreadNames like the real export (the last thread of each process has no ThreadNames row).
* GPU activity, only with ``--kernels-per-launch K`` (K > 0; the host stalls' evidence): K kernels on
  average per launch call (``floor(K)``, one more for a fraction of them, by correlation id: like a
  graph launch, one correlation id for several kernels), one after another on the launching thread's
  stream (``7 + tid % 8``) from 1 us after the launch returns, 2-10 us each; one MEMCPY row per
  successful ``cudaMemcpyAsync_v3020`` (2 % of them device to host into pageable memory, the rest host
  to device from pinned memory), one MEMSET row per ``cudaMemsetAsync_v3020``, one SYNCHRONIZATION row
  per ``cudaStreamSynchronize_v3020`` (its thread's stream) and ``cudaDeviceSynchronize_v3020``
  (no stream). Written by SQLite from the CUDA API rows (``INSERT ... SELECT``), after everything
  else: the file without them is byte-identical to the one this option is not given for. Rows of a
  stream may overlap where a launch follows the previous one's kernels too closely (synthetic timing;
  nsysaudit's sums do not assume a stream runs one row at a time).

Every table is created with the verbatim DDL of tests/fixtures/schema, no index (like nsys's
lazy export). The output is byte-identical for the same arguments (no wall clock, no path).

Speed: the big table does not go through SQLite's INSERT. Rows are generated with numpy per
thread, merged by start time in windows (bounded memory), encoded as SQLite records (minimal
serial types, as SQLite writes them) and packed into table-leaf pages written straight into the
file after the pages SQLite allocated for the empty schema; the interior pages are built at the
end and the table's root page is overwritten with the top of the tree (page packing and writes
run in a background thread). The small tables (memory events and NVTX ranges, ~5 % of the rows,
kept in memory until then) are then inserted with sqlite3, which appends its pages after ours.
Per thread only its live allocations are carried from one batch to the next.
Forced regions (failures, cublasCreate_v2) that do not fit in a thread's share of the rows are
reported as WARNING in the summary line printed to stderr.
"""

from __future__ import annotations

import argparse
import math
import queue
import re
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from statistics import NormalDist

import numpy as np

SCHEMA_SQL = (Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "schema"
              / "nsys-2023.4.4-export-schema.sql")
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
TABLES = ("StringIds", "META_DATA_EXPORT", "META_DATA_CAPTURE", "TARGET_INFO_SESSION_START_TIME",
          "TARGET_INFO_GPU", "PROCESSES", "ThreadNames", RUNTIME, "CUDA_GPU_MEMORY_USAGE_EVENTS",
          "NVTX_EVENTS")

PAGE = 4096
GEN_ROWS = 1 << 20  # rows generated per round over all threads
WINDOW_ROWS = 1 << 17  # rows merged and encoded at once (cache-sized)
VM = 1
SESSION_EPOCH_NS = 1_796_064_718_689_501_058  # utcEpochNs of the real H200 observe export
DOMAIN_ID = 1
NVTX_PUSHPOP, NVTX_DOMAIN_CREATE = 59, 75
ERR_MEMORY_ALLOCATION, ERR_INVALID_VALUE, ERR_NOT_READY = 2, 1, 600
MIB = 1 << 20
GPU_NAME, GPU_TOTAL_MEMORY = "NVIDIA H200", 150_109_880_320  # TARGET_INFO_GPU of the real export
ALLOC_OP, FREE_OP = 0, 1  # memoryOperationType
QBITS = 12  # random bits per drawn quantity (lookup tables of 4096 quantiles)
QMASK = (1 << QBITS) - 1

# name, eventClass (0 runtime, 1 driver), weight outside ranges, weight inside gemm-like ranges,
# median duration (ns), lognormal sigma
API = (
    ("cudaLaunchKernel_v7000", 0, 0.34, 0.55, 3_500, 0.45),
    ("cuLaunchKernel", 1, 0.07, 0.20, 3_000, 0.45),
    ("cudaMemcpyAsync_v3020", 0, 0.12, 0.00, 7_500, 0.80),
    ("cudaMemsetAsync_v3020", 0, 0.03, 0.10, 4_000, 0.50),
    ("cudaEventRecord_v3020", 0, 0.08, 0.05, 2_200, 0.40),
    ("cudaStreamWaitEvent_v3020", 0, 0.05, 0.00, 1_800, 0.40),
    ("cudaEventQuery_v3020", 0, 0.04, 0.00, 1_200, 0.40),
    ("cudaStreamSynchronize_v3020", 0, 0.05, 0.00, 45_000, 1.40),
    ("cudaStreamIsCapturing_v10000", 0, 0.06, 0.10, 700, 0.30),
    ("cudaMalloc_v3020", 0, 0.02, 0.00, 60_000, 0.90),
    ("cudaFree_v3020", 0, 0.015, 0.00, 15_000, 0.80),
    ("cudaMemGetInfo_v3020", 0, 0.005, 0.00, 20_000, 0.50),
    ("cudaDeviceSynchronize_v3020", 0, 0.005, 0.00, 250_000, 1.50),
    ("cuGetProcAddress_v2", 1, 0.01, 0.00, 600, 0.40),
    ("cuLibraryGetKernel", 1, 0.01, 0.00, 900, 0.40),
    ("cuModuleGetLoadingMode", 1, 0.00, 0.00, 1_100, 0.30),
)
API_NAMES = tuple(a[0] for a in API)
A = {name: i for i, name in enumerate(API_NAMES)}
API_CLASS = np.array([a[1] for a in API], np.int64)
MALLOC, FREE, EVENT_QUERY = A["cudaMalloc_v3020"], A["cudaFree_v3020"], A["cudaEventQuery_v3020"]

LIB = ("cublasGemmEx", "cublasLtMatmul", "cublasSgemm_v2", "cublasGemmStridedBatchedEx",
       "cublasGemmBatchedEx", "cublasCreate_v2")
LIB_P = (0.30, 0.30, 0.15, 0.15, 0.10, 0.0)
CREATE = LIB.index("cublasCreate_v2")
NCALLS_P = (0.35, 0.30, 0.20, 0.10, 0.05)  # 1..5 calls inside a gemm-like range
MEAN_NCALLS = sum((i + 1) * p for i, p in enumerate(NCALLS_P))

# Forced regions ("templates"): calls (api, returnValue, bytes, tag).
TAG_NONE, TAG_NESTED, TAG_OOM, TAG_OOM_ADJ, TAG_OTHER = 0, 1, 2, 3, 4
T_CREATE_OK, T_CREATE_NESTED, T_OOM, T_OOM_ADJ, T_FREE_ERR, T_MEMCPY_ERR, T_MALLOC_INVAL = range(7)
LIB_TEMPLATES = (T_CREATE_OK, T_CREATE_NESTED)

# packed per-call word: duration | api | returnValue | tag | thread index
DUR_BITS, API_SHIFT, RV_SHIFT, TAG_SHIFT, THR_SHIFT = 31, 31, 36, 46, 49
MAX_DUR = (1 << DUR_BITS) - 1
MAX_THREADS = 1 << 12


def _templates(variant: str) -> list[list[tuple[int, int, int, int]]]:
    nested_rv = ERR_MEMORY_ALLOCATION if variant == "observe" else 0
    create = [(A["cuModuleGetLoadingMode"], 0, 0, TAG_NONE),
              (A["cudaMemGetInfo_v3020"], 0, 0, TAG_NONE), (MALLOC, 0, 4 * MIB, TAG_NONE)]
    return [
        [*create, (MALLOC, 0, 32 * MIB, TAG_NONE)],
        [*create, (MALLOC, nested_rv, 32 * MIB, TAG_NESTED)],
        [(MALLOC, ERR_MEMORY_ALLOCATION, 1 << 30, TAG_OOM)],
        [(MALLOC, ERR_MEMORY_ALLOCATION, 64 * MIB, TAG_OOM_ADJ)],
        [(A["cudaFree_v3020"], ERR_INVALID_VALUE, 0, TAG_OTHER)],
        [(A["cudaMemcpyAsync_v3020"], ERR_INVALID_VALUE, 0, TAG_OTHER)],
        [(MALLOC, ERR_INVALID_VALUE, 0, TAG_OTHER)],
    ]


@dataclass(frozen=True)
class _Tables:
    """Lookup tables indexed by QBITS random bits (quantiles; small enough for the cache)."""

    dur: np.ndarray  # (api, 65536) call durations
    gap: np.ndarray  # idle time before a region
    pre: np.ndarray  # range start -> first enclosed call
    post: np.ndarray  # last enclosed call -> range end
    inner: np.ndarray  # between calls inside a range
    plain_api: np.ndarray  # api outside ranges
    inner_api: np.ndarray  # api inside gemm-like ranges
    lib_call: np.ndarray  # cuBLAS function * 8 + number of enclosed calls
    tpl: tuple[np.ndarray, ...]  # template api, rv, bytes, tag (template, position); lengths


@cache
def _tables(variant: str) -> _Tables:
    q = (np.arange(1 << QBITS) + 0.5) / (1 << QBITS)
    nd = NormalDist()
    z = np.array([nd.inv_cdf(x) for x in q])

    def logn(median: float, sigma: float, lo: int, hi: int) -> np.ndarray:
        return np.clip(np.exp(math.log(median) + sigma * z), lo, hi).astype(np.int64)

    def pick(weights: list[float] | tuple[float, ...], u: np.ndarray) -> np.ndarray:
        cdf = np.cumsum(weights) / sum(weights)
        return np.minimum(np.searchsorted(cdf, u, side="right"), len(weights) - 1)

    dur = np.stack([logn(a[4], a[5], 150, MAX_DUR) for a in API])
    func = pick(LIB_P, q)
    lo = (np.cumsum(LIB_P) - LIB_P)[func] / sum(LIB_P)
    within = np.clip((q - lo) / np.array(LIB_P)[func], 0, 1 - 1e-12)
    ncalls = pick(NCALLS_P, within) + 1
    tps = _templates(variant)
    width = max(len(t) for t in tps)
    tarr = np.zeros((4, len(tps), width), np.int64)
    for i, t in enumerate(tps):
        for j, call in enumerate(t):
            tarr[:, i, j] = call
    return _Tables(
        dur=dur, gap=logn(5_000, 1.0, 100, 50_000_000), pre=logn(2_500, 0.5, 50, 1_000_000),
        post=logn(1_800, 0.5, 50, 1_000_000), inner=logn(1_200, 0.5, 40, 1_000_000),
        plain_api=pick([a[2] for a in API], q), inner_api=pick([a[3] for a in API], q),
        lib_call=func * 8 + ncalls,
        tpl=(tarr[0], tarr[1], tarr[2], tarr[3], np.array([len(t) for t in tps], np.int64)))


# ----------------------------------------------------------------------------------------------
# Per-thread generation


@dataclass
class _Thread:
    index: int  # global thread index (process-major)
    proc: int
    gtid: int
    rows: int  # rows this thread must produce
    library: bool
    phase: int
    t: int  # time cursor: end of the last generated region; later calls start after it
    rng: np.random.Generator
    addr_base: int
    addr_span: int
    forced: list[tuple[int, int]] = field(default_factory=list)  # (row threshold, template)
    done: int = 0
    regions: int = 0
    addr_cursor: int = 0
    lost: int = 0  # forced regions that did not fit in the row budget
    calls: list[np.ndarray] = field(default_factory=list)  # start, packed
    mallocs: list[np.ndarray] = field(default_factory=list)  # start, bytes, address
    # successful cudaFree calls: start, bytes, address of the allocation freed (bytes 0: none)
    frees: list[np.ndarray] = field(default_factory=list)
    # live allocations (successful cudaMalloc not yet freed), oldest first: bytes, address
    live: list[np.ndarray] = field(default_factory=list)
    ranges: list[np.ndarray] = field(default_factory=list)  # start, end, cuBLAS function

    @property
    def finished(self) -> bool:
        return self.done >= self.rows


def _append(buf: list[np.ndarray], new: list[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate((b, n)) for b, n in zip(buf, new, strict=True)] if buf else new


def _generate(th: _Thread, nreg: int, every: int, tb: _Tables) -> None:
    """Append the next nreg regions (fewer at the end of its budget) of thread th."""
    tpl_api, tpl_rv, tpl_bytes, tpl_tag, tpl_len = tb.tpl
    rng = th.rng
    ridx = th.regions + np.arange(nreg)
    is_lib = (ridx % every == th.phase) if th.library else np.zeros(nreg, bool)
    q = rng.bit_generator.random_raw(nreg)
    gap = tb.gap[(q & QMASK).astype(np.intp)]
    lib, ncalls = np.full(nreg, -1), np.ones(nreg, np.int64)
    pre, post = np.zeros(nreg, np.int64), np.zeros(nreg, np.int64)
    li = np.flatnonzero(is_lib)
    if li.size:
        ql = q[li]
        pre[li] = tb.pre[((ql >> 16) & QMASK).astype(np.intp)]
        post[li] = tb.post[((ql >> 32) & QMASK).astype(np.intp)]
        lc = tb.lib_call[((ql >> 48) & QMASK).astype(np.intp)]
        lib[li], ncalls[li] = lc >> 3, lc & 7
    idle = int(rng.binomial(nreg, 0.002))
    if idle:
        np.add.at(gap, rng.integers(0, nreg, idle), rng.integers(1_000_000, 40_000_000, idle))
    tmpl = np.full(nreg, -1)

    # forced regions (templates) replace the first eligible region at/after their row threshold
    # that leaves room for the whole template within the thread's row budget
    pending = []
    for thr, kind in th.forced:
        row0 = th.done + np.cumsum(ncalls) - ncalls
        need = tpl_len[kind] + (kind == T_CREATE_NESTED)
        elig = ((row0 >= thr) & (row0 + need <= th.rows) & (tmpl < 0)
                & (is_lib if kind in LIB_TEMPLATES else ~is_lib))
        if kind == T_CREATE_NESTED:
            elig[-1] = False  # keep room for the adjacent failure that follows it
        hit = np.flatnonzero(elig)
        if hit.size == 0:
            pending.append((thr, kind))
            continue
        j = int(hit[0])
        tmpl[j], ncalls[j] = kind, tpl_len[kind]
        if kind in LIB_TEMPLATES:
            lib[j] = CREATE
            pre[j] += 150_000
        if kind == T_CREATE_NESTED and not is_lib[j + 1] and tmpl[j + 1] < 0:
            tmpl[j + 1] = T_OOM_ADJ
            gap[j + 1] = 300 + gap[j + 1] % 1_200

    th.forced = pending
    # stop at the thread's row budget (the last region may lose trailing calls)
    row0 = th.done + np.cumsum(ncalls) - ncalls
    keep = int(np.searchsorted(row0, th.rows, side="left"))
    th.lost += int((tmpl[keep:] >= 0).sum())  # templates pushed out by later placements
    if keep and tmpl[keep - 1] >= 0 and row0[keep - 1] + ncalls[keep - 1] > th.rows:
        th.lost += 1
    if keep < nreg:
        is_lib, lib, ncalls, tmpl = is_lib[:keep], lib[:keep], ncalls[:keep], tmpl[:keep]
        gap, pre, post = gap[:keep], pre[:keep], post[:keep]
    if keep:
        ncalls[-1] = min(int(ncalls[-1]), th.rows - int(row0[keep - 1]))
    th.regions += keep
    total = int(ncalls.sum())
    th.done += total
    if total == 0:
        return

    # expand regions into calls
    if total == keep:  # only one call per region (common for non-library threads)
        reg = np.arange(keep)
        pos = np.zeros(total, np.int64)
        first_row = reg
    else:
        reg = np.repeat(np.arange(keep), ncalls)
        first_row = np.cumsum(ncalls) - ncalls
        pos = np.arange(total) - first_row[reg]
    first = pos == 0
    last = pos == ncalls[reg] - 1
    in_lib = is_lib[reg]
    r = rng.bit_generator.random_raw(total)
    name_u = ((r >> 16) & QMASK).astype(np.intp)
    api = tb.plain_api[name_u]
    if li.size:
        api[in_lib] = tb.inner_api[name_u[in_lib]]
    rv = np.where((api == EVENT_QUERY) & ((r >> 48) < 3277), ERR_NOT_READY, 0)  # 5 %
    tag = np.zeros(total, np.int64)
    nbytes = np.zeros(total, np.int64)
    ct = tmpl[reg]
    forced = ct >= 0
    if forced.any():
        fi, fp = ct[forced], pos[forced]
        api[forced], rv[forced] = tpl_api[fi, fp], tpl_rv[fi, fp]
        nbytes[forced], tag[forced] = tpl_bytes[fi, fp], tpl_tag[fi, fp]
    is_malloc = api == MALLOC
    drawn = is_malloc & ~forced
    m = int(drawn.sum())
    if m:
        u = rng.random(m)
        nbytes[drawn] = np.where(
            u < 0.5, (2 * MIB) * rng.integers(1, 11, m),
            np.where(u < 0.8, 512 * rng.integers(1, 4097, m), 1 << rng.integers(20, 34, m)))

    dur = tb.dur.reshape(-1)[(api << QBITS) + (r & QMASK).astype(np.intp)]
    lead = gap[reg] + pre[reg]
    if total != keep:
        inner = ~first
        lead[inner] = tb.inner[((r[inner] >> 32) & QMASK).astype(np.intp)]
    trail = np.where(last, post[reg], 0)
    cum = th.t + np.cumsum(lead + dur + trail)
    start = cum - dur - trail
    th.t = int(cum[-1])
    packed = (dur | (api << API_SHIFT) | (rv << RV_SHIFT) | (tag << TAG_SHIFT)
              | (th.index << THR_SHIFT))
    th.calls = _append(th.calls, [start, packed])

    mi = np.flatnonzero(is_malloc)
    if mi.size:
        aligned = (nbytes[mi] + 2 * MIB - 1) // (2 * MIB) * (2 * MIB)
        addr = th.addr_base + (th.addr_cursor + np.cumsum(aligned) - aligned) % th.addr_span
        th.addr_cursor = (th.addr_cursor + int(aligned.sum())) % th.addr_span
        th.mallocs = _append(th.mallocs, [start[mi], nbytes[mi], addr])
    else:
        addr = np.empty(0, np.int64)
    _free(th, start, api, rv, nbytes, mi, addr)
    lib_regs = np.flatnonzero(is_lib)
    if lib_regs.size:
        f_row = first_row[lib_regs]
        l_row = f_row + ncalls[lib_regs] - 1
        th.ranges = _append(th.ranges, [start[f_row] - pre[lib_regs],
                                        start[l_row] + dur[l_row] + post[lib_regs],
                                        lib[lib_regs]])


def _free(th: _Thread, start: np.ndarray, api: np.ndarray, rv: np.ndarray, nbytes: np.ndarray,
          mi: np.ndarray, addr: np.ndarray) -> None:
    """Match this batch's successful cudaFree calls to the thread's live allocations, FIFO: each
    frees the oldest allocation still live (all made by earlier calls of the thread, so their
    memory events are earlier); one with nothing live frees nothing (like cudaFree(NULL))."""
    fi = np.flatnonzero((api == FREE) & (rv == 0))
    ok = rv[mi] == 0
    queue = _append(th.live, [nbytes[mi][ok], addr[ok]]) if mi.size else th.live
    if fi.size == 0:
        th.live = queue
        return
    # live allocations just before each free if none were freed: those live before the batch
    # plus this batch's successful mallocs before it (a free is never a malloc: inclusive count)
    before = len(th.live[0]) if th.live else 0
    avail = before + np.cumsum((api == MALLOC) & (rv == 0))[fi]
    # frees done after the i-th free (1-based): e_i = min(e_{i-1} + 1, avail_i), e_0 = 0, i.e.
    # e_i = i + min(0, min_{j<=i} (avail_j - j))
    i = np.arange(1, fi.size + 1)
    done = i + np.minimum(0, np.minimum.accumulate(avail - i))
    freed = np.diff(done, prepend=0) == 1
    q_bytes, q_addr = queue if queue else (np.empty(0, np.int64), np.empty(0, np.int64))
    f_bytes, f_addr = np.zeros(fi.size, np.int64), np.zeros(fi.size, np.int64)
    f_bytes[freed], f_addr[freed] = q_bytes[done[freed] - 1], q_addr[done[freed] - 1]
    th.frees = _append(th.frees, [start[fi], f_bytes, f_addr])
    n = int(done[-1])
    th.live = [q_bytes[n:], q_addr[n:]]


def _take(buf: list[np.ndarray], limit: float) -> tuple[list[np.ndarray], int]:
    """Split off the rows of buf (sorted by its first column) that start at or before limit."""
    if not buf:
        return [], 0
    n = len(buf[0]) if math.isinf(limit) else int(np.searchsorted(buf[0], limit, side="right"))
    head = [b[:n] for b in buf]
    buf[:] = [b[n:] for b in buf]
    return head, n


def _merge(parts: list[list[np.ndarray]], extra: list[np.ndarray] | None = None
           ) -> list[np.ndarray]:
    """Concatenate per-thread parts (thread order) and sort them stably by their first column."""
    cols = [np.concatenate(c) for c in zip(*parts, strict=True)]
    if extra is not None:
        cols.append(np.concatenate(extra))
    order = np.argsort(cols[0], kind="stable")
    return [c[order] for c in cols]


# ----------------------------------------------------------------------------------------------
# SQLite record and B-tree page encoding

_LEN_BOUNDS = np.array([2, 1 << 7, 1 << 15, 1 << 23, 1 << 31, 1 << 47], np.int64)
_LEN_OF_BUCKET = np.array([0, 1, 2, 3, 4, 6, 8], np.int64)
_SERIAL_OF_BUCKET = np.array([8, 1, 2, 3, 4, 5, 6], np.int64)
_SERIAL_OF_LEN = np.array([8, 1, 2, 3, 4, 0, 5, 0, 6], np.int64)

Serial = tuple[np.ndarray | int, np.ndarray | int]


def _int_serial(v: np.ndarray) -> Serial:
    """Minimal SQLite integer serial types and body lengths (scalars when constant)."""
    if v.size == 0:
        return 0, 0
    mn, mx = int(v.min()), int(v.max())
    if mn < 0:  # general case (not produced here)
        length = np.full(v.shape, 8, np.int64)
        for nbytes, bits in ((6, 47), (4, 31), (3, 23), (2, 15), (1, 7)):
            length[(v >= -(1 << bits)) & (v < (1 << bits))] = nbytes
        small = (v == 0) | (v == 1)
        length[small] = 0
        return np.where(small, 8 + v, _SERIAL_OF_LEN[length]), length
    b_mn, b_mx = np.searchsorted(_LEN_BOUNDS, [mn, mx], side="right")
    if b_mn == b_mx:
        ln = int(_LEN_OF_BUCKET[b_mn])
        if ln:
            return int(_SERIAL_OF_BUCKET[b_mn]), ln
        return (8 + mn if mn == mx else 8 + v), 0
    b = np.searchsorted(_LEN_BOUNDS, v, side="right")
    return np.where(b == 0, 8 + v, _SERIAL_OF_BUCKET[b]), _LEN_OF_BUCKET[b]


def _varint_len(v: np.ndarray) -> np.ndarray:
    n = np.ones(v.shape, np.int64)
    for k in range(1, 8):
        n += v >= (1 << (7 * k))
    return n


def _varint_bytes(v: int) -> bytes:
    if v < 0 or v >= 1 << 56:
        raise ValueError(v)
    groups = [v & 0x7F]
    v >>= 7
    while v:
        groups.append((v & 0x7F) | 0x80)
        v >>= 7
    return bytes(reversed(groups))


def encode_cells(cols: list[np.ndarray | None], rowid: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray]:
    """SQLite table-leaf cells (varint payload size, varint rowid, record) for rows of integer
    columns (None: a NULL column). Returns the concatenated cells and each cell's length."""
    n = rowid.size
    if n == 0:
        return np.empty(0, np.uint8), np.empty(0, np.int64)
    ser = [(0, 0) if c is None else _int_serial(c) for c in cols]
    rl = _varint_len(rowid)
    hdr = 1 + len(cols)  # header-size byte + one byte per serial type (all < 128)
    payload = hdr + sum(ln for _, ln in ser)
    lens = 1 + rl + payload
    if np.max(payload) > 127:
        raise ValueError("record header or payload too long for this encoder")
    # rows sharing the most common layout (lengths of all parts) are written with fixed
    # strides; the other rows are encoded recursively and spliced in
    sig = rl.copy()
    for _, ln in ser:
        if isinstance(ln, np.ndarray):
            sig = sig * 16 + ln
    uniq, counts = np.unique(sig, return_counts=True)
    main_sig = uniq[np.argmax(counts)]
    main = sig == main_sig if uniq.size > 1 else None
    i0 = 0 if main is None else int(np.argmax(main))
    lengths = [int(ln[i0]) if isinstance(ln, np.ndarray) else ln for _, ln in ser]
    cells = _encode_fixed(cols, [s for s, _ in ser], lengths, int(rl[i0]), hdr, rowid)
    if main is None:
        return cells.reshape(-1), lens
    width = cells.shape[1]
    cells = cells.reshape(-1)
    odd = ~main
    odd_cells, odd_lens = encode_cells([None if c is None else c[odd] for c in cols], rowid[odd])
    odd_off = np.concatenate(([0], np.cumsum(odd_lens)))
    odd_rank = np.cumsum(odd) - 1
    edges = np.concatenate(([0], np.flatnonzero(main[1:] != main[:-1]) + 1, [n]))
    pieces = []
    for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        if main[a]:
            pieces.append(cells[a * width:b * width])
        else:
            pieces.append(odd_cells[odd_off[odd_rank[a]]:odd_off[odd_rank[b - 1] + 1]])
    return np.concatenate(pieces), lens


def _encode_fixed(cols: list[np.ndarray | None], serials: list[np.ndarray | int],
                  lengths: list[int], rl: int, hdr: int, rowid: np.ndarray) -> np.ndarray:
    """Cells of all rows laid out with the given part lengths, one row per cell (n, width).
    Rows whose values need another layout get garbage (the caller drops them).

    Everything is written with big-endian 8-byte stores that end where a part ends; their high
    bytes spill into the bytes before, which are written afterwards: first the prefix (payload
    size, rowid varint, header size; spilling into the previous row's body), then the columns
    from last to first, then the 8 serial types as one word."""
    if len(cols) != 8:
        raise ValueError("this encoder writes records of exactly 8 columns")
    n = rowid.size
    head = 1 + rl + hdr
    width = head + sum(lengths)
    buf = np.empty(8 + n * width, np.uint8)  # 8 bytes of slack before the first row

    def store(end: int, values: np.ndarray | int) -> None:
        view = np.ndarray((n,), ">i8", buf, offset=8 + end - 8, strides=(width,))
        view[:] = values

    varint = np.zeros(n, np.int64)
    for k in range(rl):
        byte = (rowid >> (7 * (rl - 1 - k))) & 0x7F
        varint = (varint << 8) | (byte | 0x80 if k < rl - 1 else byte)
    store(rl + 2, ((width - 1 - rl) << (8 * (rl + 1))) | (varint << 8) | hdr)
    offs = np.cumsum([head, *lengths]).tolist()
    for c, ln, end in reversed(list(zip(cols, lengths, offs[1:], strict=True))):
        if ln and c is not None:
            store(end, c)
    word: np.ndarray | int = 0
    for st in serials:
        word = (word << 8) | st
    store(1 + rl + hdr, word)
    return buf[8:].reshape(n, width)


class _Background:
    """Runs TableWriter.add (page packing and file writes) in a thread, in order, so that it
    overlaps with generating and encoding the next window (numpy and I/O release the GIL)."""

    def __init__(self, writer: TableWriter) -> None:
        self.writer = writer
        self.queue: queue.Queue[tuple[np.ndarray, ...] | None] = queue.Queue(maxsize=3)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            if self.error is None:
                try:
                    self.writer.add(*item)
                except BaseException as exc:  # re-raised by finish()
                    self.error = exc

    def add(self, cells: np.ndarray, lens: np.ndarray, keys: np.ndarray) -> None:
        if self.error is not None:
            raise self.error
        self.queue.put((cells, lens, keys))

    def finish(self) -> int:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.writer.finish()


class TableWriter:
    """Writes a rowid table's B-tree into an SQLite file, in pages from `first_page` on."""

    LEAF_ROOM = PAGE - 8  # leaf header is 8 bytes; each cell also takes a 2-byte pointer

    def __init__(self, path: Path, root_page: int, first_page: int) -> None:
        self.f = open(path, "r+b")  # noqa: SIM115 - closed in finish()
        self.root = root_page
        self.next_page = first_page
        self.leaf_keys: list[int] = []
        self.cells = np.empty(0, np.uint8)
        self.lens = np.empty(0, np.int64)
        self.keys = np.empty(0, np.int64)
        self.f.seek((first_page - 1) * PAGE)

    def add(self, cells: np.ndarray, lens: np.ndarray, keys: np.ndarray) -> None:
        """Queue cells (in key order); write every leaf page that is full."""
        if self.lens.size:
            cells = np.concatenate((self.cells, cells))
            lens = np.concatenate((self.lens, lens))
            keys = np.concatenate((self.keys, keys))
        # greedy packing: each page takes as many cells as fit
        cum = np.concatenate(([0], np.cumsum(lens + 2)))
        n, room = lens.size, self.LEAF_ROOM
        step = max(1, room // (int(np.median(lens[:1024])) + 2))
        edges = [0]
        a = 0
        while True:
            limit = cum.item(a) + room
            b = min(a + step, n)
            while b < n and cum.item(b + 1) <= limit:
                b += 1
            while cum.item(b) > limit:
                b -= 1
            if b >= n:
                break
            edges.append(b)
            a = b
        coff = np.concatenate(([0], np.cumsum(lens)))
        a = edges[-1]
        if a:
            self._write_leaves(cells, coff, keys, np.array(edges))
        self.cells, self.lens, self.keys = cells[coff[a]:], lens[a:], keys[a:]

    @staticmethod
    def _leaves(cells: np.ndarray, coff: np.ndarray, edges: np.ndarray) -> np.ndarray:
        npg = edges.size - 1
        ncell = np.diff(edges)
        cstart = PAGE - (coff[edges[1:]] - coff[edges[:-1]])
        pages = np.zeros((npg, PAGE), np.uint8)
        pages[:, 0] = 0x0D
        pages[:, 3:5] = ncell.astype(">u2").view(np.uint8).reshape(npg, 2)
        pages[:, 5:7] = cstart.astype(">u2").view(np.uint8).reshape(npg, 2)
        page_of = np.repeat(np.arange(npg), ncell)
        first = edges[:-1][page_of]
        j = np.arange(edges[-1]) - first
        ptr = (cstart[page_of] + coff[:edges[-1]] - coff[first]).astype(">u2")
        dst = page_of * PAGE + 8 + 2 * j
        flat = pages.reshape(-1)
        pb = ptr.view(np.uint8).reshape(-1, 2)
        flat[dst], flat[dst + 1] = pb[:, 0], pb[:, 1]
        cs, co = cstart.tolist(), coff[edges].tolist()
        for k in range(npg):
            pages[k, cs[k]:] = cells[co[k]:co[k + 1]]
        return pages

    def _write_leaves(self, cells: np.ndarray, coff: np.ndarray, keys: np.ndarray,
                      edges: np.ndarray) -> None:
        self.f.write(self._leaves(cells, coff, edges).data)
        self.leaf_keys.extend(keys[edges[1:] - 1].tolist())
        self.next_page += edges.size - 1

    def finish(self) -> int:
        """Flush, build the interior levels, write the root, fix the header; return page count."""
        first_leaf = self.next_page - len(self.leaf_keys)
        if self.lens.size:
            coff = np.concatenate(([0], np.cumsum(self.lens)))
            edges = np.array([0, self.lens.size])
            if not self.leaf_keys:  # the whole table fits in its root page
                self._write_page(self.root, self._leaves(self.cells, coff, edges).tobytes())
            else:
                self._write_leaves(self.cells, coff, self.keys, edges)
        children = list(range(first_leaf, self.next_page))
        keys = self.leaf_keys
        if len(children) > 1:
            cap = (PAGE - 12) // (4 + len(_varint_bytes(max(keys))) + 2) + 1
            while len(children) > cap:
                ngroups = math.ceil(len(children) / cap)
                up_pages, up_keys = [], []
                for g in np.array_split(np.arange(len(children)), ngroups):
                    lo, hi = int(g[0]), int(g[-1]) + 1
                    self._write_page(self.next_page, _interior(children[lo:hi], keys[lo:hi]))
                    up_pages.append(self.next_page)
                    up_keys.append(keys[hi - 1])
                    self.next_page += 1
                children, keys = up_pages, up_keys
            self._write_page(self.root, _interior(children, keys))
        pages = self.next_page - 1
        header = bytearray(PAGE)
        self.f.seek(0)
        self.f.readinto(header)
        counter = (int.from_bytes(header[24:28], "big") + 1).to_bytes(4, "big")
        header[24:28] = counter  # file change counter
        header[28:32] = pages.to_bytes(4, "big")  # database size in pages
        header[92:96] = counter  # version-valid-for: makes the size above authoritative
        self._write_page(1, bytes(header))
        self.f.close()
        return pages

    def _write_page(self, pageno: int, data: bytes) -> None:
        assert len(data) == PAGE
        self.f.seek((pageno - 1) * PAGE)
        self.f.write(data)


def _interior(children: list[int], keys: list[int]) -> bytes:
    """A table-interior page: a cell (left child, its largest key) per child but the last."""
    m = len(children) - 1
    ks = np.asarray(keys[:-1], np.int64)
    if m < 1 or ks.min() < 0 or ks.max() >= 1 << 56:
        raise ValueError("bad interior page")
    mat = np.empty((m, 12), np.uint8)  # 4-byte child page number, varint key right-aligned
    mat[:, :4] = np.asarray(children[:-1], ">u4").view(np.uint8).reshape(m, 4)
    for j in range(8):
        mat[:, 4 + j] = ((ks >> (7 * (7 - j))) & 0x7F) | (0x80 if j < 7 else 0)
    vl = _varint_len(ks)
    mask = np.ones((m, 12), bool)
    mask[:, 4:] = np.arange(8) >= 8 - vl[:, None]
    content = mat[mask]
    cstart = PAGE - content.size
    ptrs = (cstart + np.cumsum(4 + vl) - (4 + vl)).astype(">u2")
    head = (b"\x05\x00\x00" + m.to_bytes(2, "big") + cstart.to_bytes(2, "big") + b"\x00"
            + children[-1].to_bytes(4, "big"))
    page = head + ptrs.tobytes()
    assert len(page) <= cstart
    return bytes(page + bytes(cstart - len(page)) + content.tobytes())


# ----------------------------------------------------------------------------------------------
# Driver


@dataclass
class Summary:
    path: Path
    variant: str
    failures_requested: int = 0
    rows: int = 0
    library_ranges: int = 0
    nested_failures: list[int] = field(default_factory=list)  # correlationIds (observe only)
    nested_sites: list[int] = field(default_factory=list)  # same calls, either variant
    outside_oom: int = 0  # failed cudaMalloc (returnValue 2) outside any cuBLAS range
    other_nonzero: int = 0  # other non-zero returnValues (1, 600), all outside ranges
    memory_events: int = 0  # allocation and deallocation events
    deallocation_events: int = 0
    unplaced: int = 0  # forced regions that did not fit (too few rows)
    size: int = 0
    seconds: float = 0.0
    gpu: dict[str, int] = field(default_factory=dict)  # GPU activity rows per table (--kernels-per-launch)

    def line(self) -> str:
        nested = (f"nested_failures={len(self.nested_failures)} "
                  f"nested_corr={self.nested_failures}" if self.variant == "observe" else
                  f"nested_failures=0 release_ok_corr={self.nested_sites}")
        warn = f" WARNING unplaced_forced_regions={self.unplaced}" if self.unplaced else ""
        if len(self.nested_sites) < self.failures_requested:
            warn += (f" WARNING only {len(self.nested_sites)} of {self.failures_requested} nested"
                     " failures fit (more rows or a smaller --library-every)")
        return (f"make_export: {self.path} variant={self.variant} rows={self.rows} "
                f"library_ranges={self.library_ranges} {nested} outside_oom={self.outside_oom} "
                f"other_nonzero={self.other_nonzero} memory_events={self.memory_events} "
                f"deallocation_events={self.deallocation_events} "
                + "".join(f"{k}_rows={n} " for k, n in self.gpu.items())
                + f"size={self.size / 1e6:.1f}MB seconds={self.seconds:.2f}{warn}")


def load_ddl(path: Path = SCHEMA_SQL) -> dict[str, str]:
    """CREATE TABLE statements of the schema file by table name, verbatim, in file order."""
    text = path.read_text()
    return {m.group(1): m.group(0)
            for m in re.finditer(r"^CREATE TABLE (\w+) \(.*?^\);", text, re.S | re.M)}


def _strings(threads: int) -> list[str]:
    names = ["python3", *(f"pt_autograd_{k}" for k in range(threads)),
             *(f"pt_data_worker_{k}" for k in range(threads))]
    return [*names, *API_NAMES, *LIB]


def default_library_every(rows: int, processes: int, threads: int) -> int:
    """K such that there are about rows/100 cuBLAS ranges."""
    lib_rows = rows * math.ceil(threads / 2) / threads
    return max(1, round(lib_rows / max(1.0, rows / 100) - (MEAN_NCALLS - 1)))


def _setup_threads(rows: int, processes: int, threads: int, seed: int, every: int,
                   failures: int) -> tuple[list[_Thread], list[int], list[int], np.random.Generator]:
    ss = np.random.SeedSequence(seed)
    plan_rng = np.random.default_rng(ss.spawn(1)[0])
    thread_ss = ss.spawn(processes * threads)
    pids = sorted(int(p) for p in plan_rng.choice(np.arange(300, 4_000_000), processes,
                                                   replace=False))
    nthr = processes * threads
    per, extra = divmod(rows, nthr)
    span = 1 << int(math.log2((1 << 44) // threads))  # device addresses like 0x7fxxxxxxxxxx
    out: list[_Thread] = []
    proc_t0 = []
    for p, pid in enumerate(pids):
        t0 = 150_000_000 + p * 23_000_000 + int(plan_rng.integers(0, 1_000_000))
        proc_t0.append(t0)
        for k in range(threads):
            i = p * threads + k
            tid = pid if k == 0 else pid + 7 + 2 * k
            rng = np.random.default_rng(thread_ss[i])
            out.append(_Thread(
                index=i, proc=p, gtid=(VM << 48) | (pid << 24) | tid,
                rows=per + (i < extra), library=k < math.ceil(threads / 2),
                phase=int(rng.integers(every)), rng=rng,
                t=t0 + (k * 1_500_000 + int(rng.integers(0, 500_000)) if k else 0),
                addr_base=(7 << 44) + k * span, addr_span=span))
    lib_threads = [th for th in out if th.library]
    for th in lib_threads:
        th.forced.append((0, T_CREATE_OK))
    plans: list[tuple[_Thread, int]] = []
    if failures:
        picks = plan_rng.choice(len(lib_threads), failures, replace=failures > len(lib_threads))
        plans += [(lib_threads[int(i)], T_CREATE_NESTED) for i in picks]
    for kind, count in ((T_OOM, max(3, failures)), (T_FREE_ERR, 2), (T_MEMCPY_ERR, 1),
                        (T_MALLOC_INVAL, 1)):
        plans += [(out[int(i)], kind) for i in plan_rng.integers(0, nthr, count)]
    for th, kind in plans:
        th.forced.append((int(th.rows * plan_rng.uniform(0.1, 0.85)), kind))
    for th in out:
        th.forced.sort()
    return out, pids, proc_t0, plan_rng


def generate(out: Path | str, rows: int, processes: int = 4, threads: int = 8, seed: int = 0,
             library_every: int | None = None, failures: int = 5, variant: str = "observe"
             ) -> Summary:
    """Write the export to `out` (replaced) and return what was generated."""
    t_begin = time.perf_counter()
    out = Path(out)
    if processes * threads > MAX_THREADS or processes >= 1 << 8:
        raise ValueError("too many processes/threads")
    every = library_every or default_library_every(rows, processes, threads)
    tb = _tables(variant)
    ths, pids, proc_t0, plan_rng = _setup_threads(rows, processes, threads, seed, every, failures)
    gtid = np.array([th.gtid for th in ths], np.int64)
    gpid = gtid >> 24 << 24
    device = np.array([th.proc % 8 for th in ths], np.int64)
    strings = _strings(threads)
    sid = {s: i + 1 for i, s in enumerate(strings)}
    api_sid = np.array([sid[n] for n in API_NAMES], np.int64)
    lib_sid = np.array([sid[n] for n in LIB], np.int64)

    ddl = load_ddl()
    out.unlink(missing_ok=True)
    con = sqlite3.connect(out, isolation_level=None)
    con.execute("PRAGMA page_size=4096")
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("BEGIN")
    for name in sorted(TABLES, key=list(ddl).index):  # schema-file order
        con.execute(ddl[name])
    con.execute("COMMIT")
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name=?", (RUNTIME,)).fetchone()[0]
    first_page = con.execute("PRAGMA page_count").fetchone()[0] + 1
    con.close()

    summary = Summary(out, variant, failures)
    writer = _Background(TableWriter(out, root, first_page))
    nvtx_parts: list[list[np.ndarray]] = []
    mem_parts: list[list[np.ndarray]] = []
    batch = max(256, GEN_ROWS // len(ths))
    corr_next, rowid_next = 1, 1
    target: float | None = None
    delta = 1.0
    while True:
        live = [th for th in ths if not th.finished]
        if target is None:  # first round: one batch per thread sets the window length
            spans = []
            for th in live:
                t_before = th.t
                _generate(th, batch, every, tb)
                spans.append(th.t - t_before)
            if spans:
                delta = max(1.0, float(np.median(spans)) * WINDOW_ROWS / (batch * len(ths)))
        else:
            for th in live:
                while not th.finished and th.t < target:
                    _generate(th, batch, every, tb)
        live = [th for th in ths if not th.finished]
        limit = float(min(th.t for th in live)) if live else math.inf
        target = limit + delta

        calls, mallocs, frees, ranges, m_thr, f_thr, r_thr = [], [], [], [], [], [], []
        for th in ths:
            head, n = _take(th.calls, limit)
            if n:
                calls.append(head)
            head, n = _take(th.mallocs, limit)
            if n:
                mallocs.append(head)
                m_thr.append(np.full(n, th.index))
            head, n = _take(th.frees, limit)
            if n:
                frees.append(head)
                f_thr.append(np.full(n, th.index))
            head, n = _take(th.ranges, limit)
            if n:
                ranges.append(head)
                r_thr.append(np.full(n, th.index))
        if calls:
            start, packed = _merge(calls)
            n = start.size
            corr = corr_next + np.cumsum(1 + (plan_rng.random(n) < 0.08)) - 1
            corr_next = int(corr[-1]) + 1
            rowid = np.arange(rowid_next, rowid_next + n, dtype=np.int64)
            rowid_next += n
            thr = packed >> THR_SHIFT
            api = (packed >> API_SHIFT) & 31
            rv = (packed >> RV_SHIFT) & 1023
            tag = (packed >> TAG_SHIFT) & 7
            end = start + (packed & MAX_DUR)
            cells, lens = encode_cells(
                [start, end, API_CLASS[api], gtid[thr], corr, api_sid[api], rv, None], rowid)
            writer.add(cells, lens, rowid)
            is_malloc = api == MALLOC
            events = []
            if mallocs:  # an allocation event near the end of each successful cudaMalloc
                m_start, m_bytes, m_addr, m_thr_s = _merge(mallocs, m_thr)
                assert m_start.size == int(is_malloc.sum())
                ok = rv[is_malloc] == 0
                s, e = start[is_malloc][ok], end[is_malloc][ok]
                events.append([s + (e - s) * 9 // 10, gpid[m_thr_s[ok]], device[m_thr_s[ok]],
                               m_addr[ok], m_bytes[ok], corr[is_malloc][ok],
                               np.full(s.size, ALLOC_OP)])
            if frees:  # a deallocation event early in each cudaFree that freed an allocation
                is_free = (api == FREE) & (rv == 0)
                f_start, f_bytes, f_addr, f_thr_s = _merge(frees, f_thr)
                assert f_start.size == int(is_free.sum())
                ok = f_bytes > 0
                s, e = start[is_free][ok], end[is_free][ok]
                events.append([s + (e - s) // 10, gpid[f_thr_s[ok]], device[f_thr_s[ok]],
                               f_addr[ok], f_bytes[ok], corr[is_free][ok],
                               np.full(s.size, FREE_OP)])
            if events:
                mem_parts.append(_merge(events))
            nested = tag == TAG_NESTED
            summary.nested_sites += corr[nested].tolist()
            summary.nested_failures += corr[nested & (rv != 0)].tolist()
            outside = (rv != 0) & ~nested
            summary.outside_oom += int((outside & (rv == ERR_MEMORY_ALLOCATION)).sum())
            summary.other_nonzero += int((outside & (rv != ERR_MEMORY_ALLOCATION)).sum())
            summary.rows += n
        if ranges:
            r_start, r_end, r_lib, r_thr_s = _merge(ranges, r_thr)
            nvtx_parts.append([r_start, r_end, gtid[r_thr_s], lib_sid[r_lib]])
            summary.library_ranges += r_start.size
        if not live:
            break
    summary.unplaced = sum(len(th.forced) + th.lost for th in ths)
    writer.finish()

    con = sqlite3.connect(out, isolation_level=None)
    for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE",
                   "cache_size=-131072"):
        con.execute(f"PRAGMA {pragma}")
    con.execute("BEGIN")
    last_end = max([int(p[1].max()) for p in nvtx_parts] + [th.t for th in ths])
    devices = sorted({int(d) for d in device})
    _write_small_tables(con, summary, seed, variant, threads, pids, proc_t0, ths, strings,
                        last_end, nvtx_parts, mem_parts, devices)
    con.execute("COMMIT")
    con.close()
    summary.size = out.stat().st_size
    summary.seconds = time.perf_counter() - t_begin
    return summary


def _write_small_tables(con: sqlite3.Connection, summary: Summary, seed: int, variant: str,
                        threads: int, pids: list[int], proc_t0: list[int], ths: list[_Thread],
                        strings: list[str], last_end: int, nvtx_parts: list[list[np.ndarray]],
                        mem_parts: list[list[np.ndarray]], devices: list[int]) -> None:
    sid = {s: i + 1 for i, s in enumerate(strings)}
    con.executemany("INSERT INTO StringIds VALUES (?,?)", [(i, s) for s, i in sid.items()])

    epoch = SESSION_EPOCH_NS + seed * 86_400_000_000_000

    def utc(ns: int) -> str:
        return datetime.fromtimestamp(ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%S")

    start_txt, export_txt = utc(epoch), utc(epoch + last_end + 20 * 10**9)
    con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?,?,?)",
                (epoch, start_txt, start_txt))
    rep = f"synthetic_{variant}_s{seed}"
    meta_export = [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
        ("EXPORT_PRODUCT_VERSION", "2023.4.4.54"),
        ("EXPORT_PRODUCT_DATE", "2023.4"),
        ("EXPORT_SCHEMA_VERSION", "3.7.2"),
        ("EXPORT_SCHEMA_VERSION_MAJOR", "3"),
        ("EXPORT_SCHEMA_VERSION_MINOR", "7"),
        ("EXPORT_SCHEMA_VERSION_MICRO", "2"),
        ("EXPORT_SCHEMA_VERSION_CKSUM", "2307844469 139029"),
        ("EXPORT_PLATFORM", "linux-desktop"),
        ("EXPORT_ARCH", "x64"),
        ("EXPORT_TIME_UTC", export_txt),
        ("EXPORT_TIME_LOCAL", f"{export_txt} +0000 UTC"),
        ("EXPORT_HOST", ""),
        ("EXPORT_USER", ""),
        ("EXPORT_PARAM_INPUT_FILE", f"{rep}.nsys-rep"),
        ("EXPORT_PARAM_OUTUPT_FILE", f"{rep}.sqlite"),
        ("EXPORT_PARAM_INPUT_PATH", f"{rep}.nsys-rep"),
        ("EXPORT_PARAM_OUTUPT_PATH", f"{rep}.sqlite"),
        ("EXPORT_PARAM_INPUT_PATH_ABS", f"{rep}.nsys-rep"),
        ("EXPORT_PARAM_OUTUPT_PATH_ABS", f"{rep}.sqlite"),
        ("EXPORT_PARAM_OVERWRITE", "true"),
        ("EXPORT_PARAM_APPEND", "false"),
        ("EXPORT_PARAM_LAZY", "true"),
        ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
        ("EXPORT_PARAM_TIME_SHIFT", "0"),
        ("EXPORT_PARAM_TABLES_TO_EXPORT", ""),
        ("EXPORT_PARAM_TIMES_TO_EXPORT", ""),
        ("EXPORT_CONFIG_TIME_SHIFT", "0"),
        ("EXPORT_TIME", "0.01 sec"),
    ]
    con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?,?)", meta_export)
    u = np.random.default_rng(seed).bytes(16).hex()
    capture = [("DEVICE_ID", "Local (CLI)"), ("CAPTURE_EVENT_TYPE", "CuBLAS"),
               ("CAPTURE_EVENT_TYPE", "NvtxEvents"), ("CAPTURE_EVENT_TYPE", "Cuda")]
    for p in range(len(pids)):
        capture += [(f"PROCESS_{p}:HOW_TO_ATTACH", "LaunchAnother"),
                    (f"PROCESS_{p}:COMMAND", "python3"),
                    (f"PROCESS_{p}:ARGUMENT_0", "synthetic_workload.py"),
                    (f"PROCESS_{p}:ARGUMENT_1", variant),
                    (f"PROCESS_{p}:ARGUMENT_2", f"--seed={seed}"),
                    (f"PROCESS_{p}:WORKING_DIR", "."),
                    (f"PROCESS_{p}:PID", "0"),
                    (f"PROCESS_{p}:COLLECT_NVTX_TRACE", "true"),
                    (f"PROCESS_{p}:COLLECT_CUDA_TRACE", "true"),
                    (f"PROCESS_{p}:COLLECT_GPU_MEMORY_USAGE", "true")]
    capture += [("PROFILING_SESSION_UUID", f"{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}"),
                ("APPLICATION_PID", "0"), ("RUN_DURATION_MS", str(last_end // 1_000_000 + 1)),
                ("NVTX_OPTIONS:NVTX_DOMAIN_FILTER_STRING", "")]
    con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?,?)", capture)
    con.executemany("INSERT INTO TARGET_INFO_GPU (vmId, id, name, totalMemory) VALUES (?,?,?,?)",
                    [(VM << 48, d, GPU_NAME, GPU_TOTAL_MEMORY) for d in devices])
    con.executemany("INSERT INTO PROCESSES VALUES (?,?,?)",
                    [((VM << 48) | (pid << 24), pid, "python3") for pid in pids])
    names = []
    for th in ths:
        k = th.index % threads
        if threads > 1 and k == threads - 1:
            continue  # like the real export: a thread whose name nsys did not record
        if k == 0:
            name = "python3"
        elif th.library:
            name = f"pt_autograd_{k - 1}"
        else:
            name = f"pt_data_worker_{k - math.ceil(threads / 2)}"
        names.append((sid[name], 20, th.gtid))
    con.executemany("INSERT INTO ThreadNames VALUES (?,?,?)", names)

    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
        "VALUES (?,NULL,?,?,?,?)",
        [(t0 - 2_000, NVTX_DOMAIN_CREATE, "cuBLAS", (VM << 48) | (pid << 24) | pid, DOMAIN_ID)
         for pid, t0 in zip(pids, proc_t0, strict=True)])
    for part in nvtx_parts:
        con.executemany(
            "INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, textId, domainId) "
            f"VALUES (?,?,{NVTX_PUSHPOP},?,?,{DOMAIN_ID})",
            zip(*(c.tolist() for c in part), strict=True))
    for part in mem_parts:
        con.executemany(
            "INSERT INTO CUDA_GPU_MEMORY_USAGE_EVENTS (start, globalPid, deviceId, contextId, "
            "address, pc, bytes, memKind, correlationId, memoryOperationType) "
            "VALUES (?,?,?,1,?,0,?,2,?,?)", zip(*(c.tolist() for c in part), strict=True))
        summary.memory_events += part[0].size
        summary.deallocation_events += int((part[-1] == FREE_OP).sum())


GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
              "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
KERNEL_NAMES = ("sm90_xmma_gemm_bf16bf16_bf16f32", "vectorized_elementwise_kernel")


def add_gpu_tables(out: Path, kernels_per_launch: float) -> dict[str, int]:
    """The GPU activity rows of ``out`` (see the module docstring), made by SQLite from its CUDA API
    rows; returns each table's row count."""
    ddl = load_ddl()
    con = sqlite3.connect(out, isolation_level=None)
    for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE", "cache_size=-262144"):
        con.execute(f"PRAGMA {pragma}")
    con.execute("BEGIN")
    for name in GPU_TABLES:
        con.execute(ddl[name])
    (top,) = con.execute("SELECT max(id) FROM StringIds").fetchone()
    con.executemany("INSERT INTO StringIds VALUES (?,?)", [(top + 1 + i, n) for i, n in enumerate(KERNEL_NAMES)])

    def ids(*names: str) -> str:
        marks = ", ".join(f"'{n}'" for n in names)
        return f"(SELECT id FROM StringIds WHERE value IN ({marks}))"

    whole, part = int(kernels_per_launch), round((kernels_per_launch % 1) * 1000)
    copies = max(whole + (part > 0), 1)
    stream = "7 + (r.globalTid & 7)"
    gpid = "(r.globalTid >> 24) << 24"
    device = "((r.globalTid >> 24) & 7)"
    duration = "(2000 + (r.correlationId * 2654435761) % 8000)"  # 2-10 us, by correlation id
    con.execute(f"""
        WITH k(i) AS (VALUES {", ".join(f"({i})" for i in range(copies))})
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL
        SELECT r."end" + 1000 + k.i * ({duration} + 500), r."end" + 1000 + k.i * ({duration} + 500) + {duration},
               {device}, 1, NULL, {stream}, r.correlationId, {gpid},
               {top + 1} + (k.i > 0), {top + 1} + (k.i > 0), NULL, 1, 0, 32, 128, 1, 1, 256, 1, 1, 0, 0, 0, 0,
               r.rowid * 16 + k.i, 0, NULL, NULL
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r, k
        WHERE r.nameId IN {ids("cudaLaunchKernel_v7000", "cuLaunchKernel")} AND r.returnValue = 0
          AND k.i < {whole} + ((r.correlationId * 40503) % 1000 < {part})""")
    con.execute(f"""
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY
        SELECT r."end" - 1500, r."end" - 500, {device}, 1, NULL, {stream}, r.correlationId, {gpid},
               1048576, CASE WHEN r.correlationId % 50 = 0 THEN 2 ELSE 1 END, NULL,
               CASE WHEN r.correlationId % 50 = 0 THEN 2 ELSE 1 END,
               CASE WHEN r.correlationId % 50 = 0 THEN 0 ELSE 2 END, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        WHERE r.nameId IN {ids("cudaMemcpyAsync_v3020")} AND r.returnValue = 0""")
    con.execute(f"""
        INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET
        SELECT r."end" + 500, r."end" + 1500, {device}, 1, NULL, {stream}, r.correlationId, {gpid}, 0, 65536,
               NULL, 2
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        WHERE r.nameId IN {ids("cudaMemsetAsync_v3020")} AND r.returnValue = 0""")
    con.execute(f"""
        INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION
        SELECT r.start + 200, r."end" - 200, {device}, 1, NULL,
               CASE WHEN r.nameId IN {ids("cudaStreamSynchronize_v3020")} THEN {stream} ELSE 4294967295 END,
               r.correlationId, {gpid},
               CASE WHEN r.nameId IN {ids("cudaStreamSynchronize_v3020")} THEN 3 ELSE 4 END, 4294967295
        FROM CUPTI_ACTIVITY_KIND_RUNTIME r
        WHERE r.nameId IN {ids("cudaStreamSynchronize_v3020", "cudaDeviceSynchronize_v3020")}""")
    con.execute("COMMIT")
    counts = {t.removeprefix("CUPTI_ACTIVITY_KIND_").lower(): con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in GPU_TABLES}
    con.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--rows", type=int, required=True, help="CUDA API rows")
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--threads", type=int, default=8, help="threads per process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--library-every", type=int, default=None, metavar="K",
                    help="every K-th region on library threads is a cuBLAS range "
                         "(default: about rows/100 ranges)")
    ap.add_argument("--failures", type=int, default=5,
                    help="failed cudaMalloc nested in cublasCreate_v2 (observe variant)")
    ap.add_argument("--variant", choices=("observe", "release"), default="observe")
    ap.add_argument("--kernels-per-launch", type=float, default=0.0, metavar="K",
                    help="write KERNEL, MEMCPY, MEMSET and SYNCHRONIZATION rows: K kernels per launch on "
                         "average (default 0: none; 2.45 gives about as many kernels as API rows)")
    a = ap.parse_args(argv)
    if not 0 <= a.kernels_per_launch <= 16:
        ap.error("--kernels-per-launch must be between 0 and 16")
    if min(a.rows, a.failures, a.seed) < 0 or min(a.processes, a.threads) < 1:
        ap.error("rows, failures and seed must be >= 0; processes and threads >= 1")
    if a.library_every is not None and a.library_every < 1:
        ap.error("--library-every must be >= 1")
    if a.processes * a.threads > MAX_THREADS or a.processes >= 1 << 8:
        ap.error(f"at most 255 processes and {MAX_THREADS} threads in all")
    s = generate(a.out, a.rows, a.processes, a.threads, a.seed, a.library_every, a.failures,
                 a.variant)
    if a.kernels_per_launch > 0:
        t0 = time.perf_counter()
        counts = add_gpu_tables(a.out, a.kernels_per_launch)
        s.seconds += time.perf_counter() - t0
        s.size = a.out.stat().st_size
        s.gpu = counts
    print(s.line(), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
