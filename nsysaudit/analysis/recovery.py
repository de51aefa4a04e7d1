"""Out-of-memory failures outside library calls: recovered from, or not?

A failed allocation that no library call encloses is listed in ``failed_calls``, not as a finding:
nothing says who made it. Most are handled: PyTorch's caching allocator probes with ``cudaMalloc``,
and on an out-of-memory frees its cache and retries, then raises ``OutOfMemoryError``, which the
program may catch (the bundled captures' ``admission``: 27 failed ``cudaMalloc`` each). The rule that
tells them from a failure the process did not survive comes from those captures:

- a failure is **recovered** when its process made a successful allocation call after it (any thread;
  :func:`nsysaudit.read.recovery.last_successful_allocations`);
- otherwise it is **unrecovered**, and the verdict cannot be ``no_failure``: the trace shows an
  out-of-memory that nothing after it shows the process survived, and no library call to name as its
  cause. It is ``inconclusive``, never a finding (a finding names the call that made the failed one),
  and ``verdict_reasons`` names the failures.

"A later successful allocation on the same thread" would be the narrower rule, and the captures
contradict it: in ``torch/observe`` 26 of the 27 admission failures have no successful allocation
after them on their thread (the allocator's retry fails too, and the program goes on to smaller
requests served from its cache), yet the program handled every one.
"""

from __future__ import annotations

import polars as pl

from nsysaudit.analysis.failures import CALL_COLUMNS, is_failure
from nsysaudit.core.ids import global_pid
from nsysaudit.read.recovery import out_of_memory_allocations


def unrecovered(cuda_api_rows: pl.DataFrame, explained: pl.DataFrame, last_allocations: pl.DataFrame) -> pl.DataFrame:
    """The out-of-memory allocation failures among ``cuda_api_rows`` (classified:
    :func:`nsysaudit.analysis.failures.classify_returns`) that no finding explains (``explained``: the
    findings' calls, ``CALL_COLUMNS``) and after which their process made no successful allocation
    call (``last_allocations``: per process, the last one's start). Columns ``CALL_COLUMNS``, in time
    order."""
    rows = cuda_api_rows.filter(is_failure() & pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null())
    oom = out_of_memory_allocations(rows.select(CALL_COLUMNS))
    if oom.height == 0:
        return oom
    oom = oom.join(explained.select(CALL_COLUMNS).unique(), on=CALL_COLUMNS, how="anti", nulls_equal=True)
    return (
        oom.with_columns(global_pid(pl.col("gtid")).alias("gpid"))
        .join(last_allocations.select("gpid", "last_ok_ns"), on="gpid", how="left")
        .filter(pl.col("last_ok_ns").is_null() | (pl.col("last_ok_ns") <= pl.col("start_ns")))
        .select(CALL_COLUMNS)
        .sort("start_ns", "gtid", "correlation_id", nulls_last=True)
    )
