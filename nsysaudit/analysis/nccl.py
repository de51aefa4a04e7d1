"""NCCL's calls in the joins: the calls of the threads NCCL starts for a call, nested in that call.

A CUDA API call is nested in a library call on its own thread (:mod:`nsysaudit.analysis.joins`). NCCL
does a communicator's initialization, its device allocations included, on a thread it starts for the
call and joins before the call returns (:mod:`nsysaudit.read.nccl`); the read calls such a thread a
*helper thread* of the NCCL call when every one of its CUDA API records lies inside the call. Its
calls are nested in that call here: wholly inside it by construction, so their relation is
``nested``, and a failure among them is a finding enclosed by the NCCL call (``enclosing.helper_thread``
says the call ran on another thread, and why it is counted inside).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import polars as pl

from nsysaudit import words
from nsysaudit.analysis import joins
from nsysaudit.analysis.integrity import joinable_calls
from nsysaudit.analysis.joins import PAIR_ORDER, PAIR_SCHEMA
from nsysaudit.core.ids import pid_bits
from nsysaudit.read.diagnostics import Capture
from nsysaudit.read.nccl import COMMUNICATOR_ENTRY, NCCL
from nsysaudit.read.trace import Trace

if TYPE_CHECKING:  # the entry's type is verdict's, which imports this module
    from nsysaudit.analysis.verdict import LibrarySource as LibrarySourceEntry

# Why a helper thread's calls are inside an NCCL call, in the words every output shows.
HELPER_RULE = words.NCCL_HELPER_RULE


def helper_pairs(helper_calls: pl.DataFrame, *, complete: bool, capture: Capture) -> pl.DataFrame:
    """The (NCCL call, CUDA API call) pairs of the helper threads' calls (``helper_calls``: their rows
    with ``lib_id``, :class:`nsysaudit.read.nccl.NcclEvidence`), relation ``nested``. ``complete``
    False (a pair limit listed only failing calls): only the calls that failed or whose return is
    unknown. Rows whose thread or times cannot be used are left out, as the joins leave them out."""
    if helper_calls.height == 0:
        return pl.DataFrame(schema=PAIR_SCHEMA)
    rows = joinable_calls(helper_calls, capture)
    if not complete:
        rows = rows.filter(pl.col("return_code").is_null() | (pl.col("return_code") != 0))
    return rows.with_columns(pl.lit("nested").alias("relation")).select(list(PAIR_SCHEMA)).cast(PAIR_SCHEMA)  # type: ignore[arg-type]


def with_helper_pairs(pairs: pl.DataFrame, helpers: pl.DataFrame) -> pl.DataFrame:
    """``pairs`` (the joins' pairs) and the helper threads' pairs, in the order the joins give
    (:data:`~nsysaudit.analysis.joins.PAIR_ORDER`)."""
    if helpers.height == 0:
        return pairs
    return pl.concat([pairs.select(list(PAIR_SCHEMA)), helpers]).sort(PAIR_ORDER, nulls_last=True, maintain_order=True)


class HelperThread(TypedDict):
    """A thread NCCL started for one of its calls: its ids and name, the call (``lib_id``, ``api``) and
    the call's own thread, and the span of its CUDA API records (all inside the call)."""

    lib_id: int
    api: str | None
    global_tid: int
    pid: int
    tid: int
    thread_name: str | None
    calling_tid: int | None
    first_ns: int
    last_ns: int
    calls: int
    rule: str


def helper_threads(trace: Trace, libs: pl.DataFrame) -> list[HelperThread]:
    """The helper threads of the NCCL calls (:class:`HelperThread`), in (lib_id, thread) order."""
    threads = trace.nccl.helper_threads
    if threads.height == 0:
        return []
    named = joins.with_ids(threads, trace.thread_names).join(
        libs.select("lib_id", "api", pl.col("tid").alias("calling_tid")), on="lib_id", how="left"
    )
    return [
        {"lib_id": r["lib_id"], "api": r["api"], "global_tid": r["gtid"], "pid": r["pid"], "tid": r["tid"],
         "thread_name": r["thread_name"], "calling_tid": r["calling_tid"], "first_ns": r["first_ns"],
         "last_ns": r["last_ns"], "calls": r["rows"], "rule": HELPER_RULE}
        for r in named.sort("lib_id", "gtid").iter_rows(named=True)
    ]


def library_source(trace: Trace, libs: pl.DataFrame, requested: bool | None) -> LibrarySourceEntry:
    """NCCL's entry of ``coverage.library_sources``: traced where its NVTX ranges are recorded,
    ``not_traced`` where the launched command's environment sets ``NCCL_NVTX_DISABLE`` and no NCCL
    range is recorded (NCCL then writes none); ``evidence`` says how the export shows NCCL,
    ``calls_by_api`` counts its calls, ``helper_threads`` lists the threads it started for them."""
    seen = trace.nccl
    mine = libs.filter(pl.col("library") == NCCL)
    evidence = words.nccl_evidence(
        _pids(seen.named) if seen.named else None,
        sorted({d for _, d in seen.by_schemas}), _pids([g for g, _ in seen.by_schemas]), COMMUNICATOR_ENTRY,
    )
    by_api = mine.group_by("api").len().sort("len", "api", descending=[True, False])
    entry: LibrarySourceEntry = {
        "library": NCCL, "status": "traced", "requested": requested, "calls": mine.height, "markers": 0,
        "reason": None, "evidence": evidence,
        "calls_by_api": {str(api): int(n) for api, n in by_api.iter_rows()},
        "helper_threads": helper_threads(trace, libs),
    }
    if seen.nvtx_disabled is not None and not mine.height:
        entry["status"] = "not_traced"
        entry["reason"] = words.nccl_nvtx_disabled(seen.nvtx_disabled)
    return entry


def _pids(gpids: Sequence[int]) -> str:
    return ", ".join(str(pid_bits(g)) for g in sorted(set(gpids)))


# --- NCCL's error text in the application's telemetry -----------------------------------------------

# NCCL's own words for a failure: its ncclResult_t names, and the warning of its allocation helpers
# (src/include/alloc.h: "Failed to CUDA calloc async %ld bytes", ...), which PyTorch's DistBackendError
# repeats as NCCL's "Last error".
ERROR_TEXT = re.compile(
    r"\bnccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError)\b"
    r"|Failed to CUDA (?:calloc async|calloc|malloc|host alloc|host calloc) \d+ bytes"
)


def error_text(value: str) -> list[str]:
    """NCCL's error names and allocation warnings in a telemetry value, in order (none: [])."""
    if "nccl" not in value.lower() and "Failed to CUDA" not in value:
        return []
    return [m.group(0) for m in ERROR_TEXT.finditer(value)]


class FailedCall(TypedDict):
    """A failed CUDA API call a telemetry line is tied to, where no finding holds it."""

    api: str | None
    return_code: int | None
    correlation_id: int | None
    tid: int | None
    start_ns: int | None


@dataclass(frozen=True)
class Tie:
    """What an NCCL error line is tied to: the index of a finding (``finding``), or, with none, an
    out-of-memory failure no library call encloses (``failed_call``); ``out_of_memory``: whether the
    trace confirms an out-of-memory."""

    finding: int | None
    out_of_memory: bool
    failed_call: FailedCall | None = None


def tie(
    findings: pl.DataFrame,
    unrecovered: pl.DataFrame | None,
    pid: int | None,
    trace_ns: int | None,
    *,
    kinds: Collection[str] | None = None,
) -> Tie:
    """The failed call an NCCL error line of process ``pid``, placed at ``trace_ns`` (None: not placed),
    is tied to: the last of ``findings`` (the findings frame, its row index the finding's) of ``kinds``
    (None: any) of the process that started at or before the line; with none, the last unrecovered
    out-of-memory failure of the process before it (:func:`nsysaudit.analysis.recovery.unrecovered`,
    with pid and tid). The kinds are chosen after the rows are numbered: the index is the finding's in
    the whole frame, as the document's ``findings`` are."""
    keyed = findings.with_row_index("_i")
    if kinds is not None:
        keyed = keyed.filter(pl.col("kind").is_in(list(kinds)))
    if pid is not None:
        keyed = keyed.filter(pl.col("pid") == pid)
    if trace_ns is not None:
        keyed = keyed.filter(pl.col("start_ns") <= trace_ns)
    if keyed.height:
        last = keyed.sort("start_ns", "_i").row(-1, named=True)
        return Tie(int(last["_i"]), bool(last["out_of_memory"]))
    if unrecovered is None or unrecovered.height == 0 or pid is None:
        return Tie(None, False)
    rows = unrecovered.filter(pl.col("pid") == pid)
    if trace_ns is not None:
        rows = rows.filter(pl.col("start_ns") <= trace_ns)
    if rows.height == 0:
        return Tie(None, False)
    r = rows.sort("start_ns").row(-1, named=True)
    return Tie(None, True, {"api": r["api"], "return_code": r["return_code"], "correlation_id": r["correlation_id"],
                            "tid": r["tid"], "start_ns": r["start_ns"]})
