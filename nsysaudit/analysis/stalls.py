"""Host stalls: every CUDA call that blocked the host, what ran on the device meanwhile, by NVTX range.

Pure functions over what :mod:`nsysaudit.read.gpu_work` read (the blocking calls, per call and stream
the GPU work that ran inside it, the rows behind the longest waits with their launches) and the
loaded NVTX ranges and library calls:

- each call's NVTX ranges (its thread's ranges holding it wholly, outermost first; ranges of the
  library domains are library calls, not ranges);
- for the attributed calls, each row's launch: before or after the call began, on which thread,
  inside which NVTX range and library call of that thread;
- the sums per process and per NVTX range (a call counts in every range that holds it).

A call is a *stall* when it blocked the host at least :data:`STALL_MIN_NS`; a process's stalls are
said in the answer when together they take at least :data:`ANSWER_SHARE` of its CUDA API trace.
The trace shows what ran during the wait, not what the call waited for: "behind", never "because".
"""

# No `from __future__ import annotations` here: typing would compile each TypedDict's string
# annotations into ForwardRefs at import, a small export's start-up (docs/performance.md).
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

import polars as pl

from nsysaudit import words
from nsysaudit.analysis.joins import held_by, more_pairs_than
from nsysaudit.core.ids import decode_pid, decode_tid, global_pid, pid_bits, tid_bits
from nsysaudit.core.intervals import closed_library_calls
from nsysaudit.read.gpu_work import ATTRIBUTION_RULE, LONGEST_CALLS, STALL_MIN_NS, GpuWork

__all__ = [
    "ANSWER_SHARE", "STALL_MIN_NS", "Attribution", "CallCopy", "KernelName", "LaunchGroup", "LaunchLibrary",
    "LaunchRange", "ProcessStalls",
    "RangeStalls", "StallCall", "StallKind", "StallStream", "StallTotals", "StallsAnalysis", "Synchronized",
    "WorkKind",
    "analyze_stalls", "empty_stalls",
]

ANSWER_SHARE = 0.05
MAX_LISTED_CALLS = LONGEST_CALLS
MAX_LISTED_RANGES = 50
MAX_STACK_PAIRS = 1_000_000
MAX_GROUPS = 12
MAX_KERNEL_NAMES = 5
LISTED_RULE = words.stalls_listed_rule(MAX_LISTED_CALLS)
RANGES_RULE = words.stall_ranges_rule(MAX_LISTED_RANGES)

StallKind = Literal["explicit", "sync_copy", "async_copy", "sync_memset", "free"]
WorkKind = Literal["kernel", "memcpy", "memset"]
Scope = Literal["stream", "device", "event", "unknown"]
Launched = Literal["before", "after", "unknown"]


class StallStream(TypedDict):
    """GPU work of one kind on one stream that ran inside a blocking call (its own copy excluded)."""

    stream_id: int
    work: WorkKind
    rows: int
    busy_ns: int
    synchronized_stream: bool | None  # the stream the call synchronized (None: which one is unknown)


class LaunchThread(TypedDict):
    pid: int
    tid: int
    global_tid: int
    thread_name: str | None


class LaunchGroup(TypedDict):
    """Rows behind an attributed call that share their stream, kind and launch."""

    stream_id: int
    work: WorkKind
    rows: int
    busy_ns: int
    launched: Launched  # before the call began, after it (another thread), or unknown (no launch row)
    launch_thread: LaunchThread | None
    nvtx_range: str | None  # the innermost NVTX range of the launching thread holding the launch
    library: str | None  # the library call holding the launch (cuBLAS, ...), where one does
    library_api: str | None


class KernelName(TypedDict):
    name: str | None
    rows: int
    busy_ns: int


class LaunchRange(TypedDict):
    """The rows behind a call launched before it inside one NVTX range (``None``: outside every range)."""

    nvtx_range: str | None
    rows: int
    busy_ns: int


class LaunchLibrary(TypedDict):
    """The rows behind a call launched inside calls of one library (cuBLAS, ...), by library API."""

    library: str
    library_api: str | None
    rows: int
    busy_ns: int


class Attribution(TypedDict):
    """The rows behind one call, each with its launch (:data:`nsysaudit.read.gpu_work.ATTRIBUTION_RULE`):
    how many were launched before the call began, after it (on another thread), or by no CUDA API row
    the trace holds; the NVTX ranges and library calls the launches lay in; the kernels' names."""

    rows: int
    busy_ns: int
    complete: bool  # every row behind the call is here (no row limit reached)
    launched_before_rows: int
    launched_before_ns: int
    launched_after_rows: int
    launched_after_ns: int
    launch_unknown_rows: int
    launch_unknown_ns: int
    ranges: list[LaunchRange]
    ranges_total: int
    libraries: list[LaunchLibrary]
    groups: list[LaunchGroup]
    groups_total: int
    kernels: list[KernelName]


class Synchronized(TypedDict):
    """What the call waited for: a stream (which one, where a row says), the device, an event."""

    scope: Scope
    stream_id: int | None
    source: str | None  # the table that names the stream
    device_id: int | None
    context_id: int | None


class CallCopy(TypedDict):
    """A copy's or memset's own rows: how many, their bytes, copy kind and memory kinds."""

    rows: int
    bytes: int | None
    copy_kind: str | None
    memory_kinds: str | None


class StallCall(TypedDict):
    call_id: int
    api: str | None
    kind: StallKind
    return_code: int | None
    correlation_id: int | None
    pid: int
    tid: int
    global_tid: int
    thread_name: str | None
    start_ns: int
    end_ns: int
    blocked_ns: int
    own_ns: int
    waited_ns: int
    covered_ns: int | None
    idle_ns: int | None  # blocked - covered: no GPU work of the process ran (None: unknown, or not a stall)
    stall: bool
    synchronized: Synchronized
    copy: CallCopy | None
    nvtx: list[str]
    behind: list[StallStream] | None  # per stream: for the stalls only (null for a shorter call)
    attribution: Attribution | None


class RangeStreamTime(TypedDict):
    stream_id: int
    busy_ns: int


class RangeStalls(TypedDict):
    range: str | None  # None: the calls outside every NVTX range
    pid: int
    global_pid: int
    calls: int
    stalls: int
    blocked_ns: int
    stalled_ns: int  # of the calls that blocked at least the stall minimum (compare check's stall budgets)
    waited_ns: int
    idle_ns: int | None
    behind: list[RangeStreamTime]


class ProcessStalls(TypedDict):
    pid: int
    global_pid: int
    name: str | None
    blocking_calls: int
    blocked_ns: int
    waited_ns: int
    stalls: int
    stalled_ns: int
    span_ns: int | None  # the process's CUDA API trace, first record to last
    share: float | None  # stalled_ns / span_ns
    above: bool  # its stalls are said in the answer


class KindStalls(TypedDict):
    kind: StallKind
    calls: int
    blocked_ns: int


class StallRules(TypedDict):
    stall_min_ns: int
    answer_share: float
    listed: str
    ranges: str
    attribution: str


class StallTotals(TypedDict):
    """The sums over every blocking call, and what was read and the rules applied."""

    blocking_calls: int
    blocked_ns: int
    own_ns: int
    waited_ns: int
    idle_ns: int | None
    stalls: int
    stalled_ns: int
    by_kind: list[KindStalls]
    ranges_total: int
    calls_total: int
    work_rows: dict[str, int]
    synchronization_rows: int
    attribution_complete: bool
    covered_known: bool
    rules: StallRules


class StallsAnalysis(StallTotals):
    processes: list[ProcessStalls]
    ranges: list[RangeStalls]
    calls: list[StallCall]


def analyze_stalls(
    work: GpuWork,
    nvtx_ranges: pl.DataFrame,
    library_calls: pl.DataFrame,
    thread_names: pl.DataFrame,
    processes: pl.DataFrame,
    cuda_api_span: pl.DataFrame,
    library_domains: Sequence[str],
) -> StallsAnalysis:
    """The host stalls of one trace (see the module docstring)."""
    plain = nvtx_ranges.filter(pl.col("domain").is_null() | ~pl.col("domain").is_in(list(library_domains)))
    calls = work.calls.with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("blocked_ns"),
    ).with_columns(
        (pl.col("blocked_ns") - pl.col("own_ns")).alias("waited_ns"),
        (pl.col("blocked_ns") - pl.col("covered_ns")).alias("idle_ns"),
        (pl.col("blocked_ns") >= STALL_MIN_NS).alias("stall"),
    )
    stacks = _stacks(calls, plain)
    names = thread_names.filter(pl.col("gtid").is_not_null()).group_by("gtid", maintain_order=True).last()
    # The longest first; of equals, the earliest (top_k then a sort of the few it keeps).
    longest = calls.top_k(MAX_LISTED_CALLS, by="blocked_ns")["blocked_ns"].min()
    listed = (
        calls.filter(pl.col("blocked_ns") >= longest).sort("blocked_ns", "start_ns", "call_id",
                                                           descending=[True, False, False]).head(MAX_LISTED_CALLS)
        if calls.height else calls
    )
    groups = _groups(work, calls, plain, library_calls, names)
    ranges, ranges_total = _ranges(calls, stacks, work.behind)
    idle = None if not work.covered_known else int(calls.filter(pl.col("stall"))["idle_ns"].sum() or 0)
    return {
        "blocking_calls": calls.height,
        "blocked_ns": int(calls["blocked_ns"].sum() or 0),
        "own_ns": int(calls["own_ns"].sum() or 0),
        "waited_ns": int(calls["waited_ns"].sum() or 0),
        "idle_ns": idle,
        "stalls": int(calls["stall"].sum() or 0),
        "stalled_ns": int(calls.filter(pl.col("stall"))["blocked_ns"].sum() or 0),
        "by_kind": [
            {"kind": k, "calls": n, "blocked_ns": b}
            for k, n, b in calls.group_by(pl.col("kind").cast(pl.String)).agg(pl.len().cast(pl.Int64),
                                                                               pl.col("blocked_ns").sum())
            .sort("kind").iter_rows()
        ],
        "processes": _processes(calls, processes, cuda_api_span),
        "ranges": ranges,
        "ranges_total": ranges_total,
        "calls": _calls(listed, stacks, work, groups, names),
        "calls_total": calls.height,
        "work_rows": dict(work.work_rows),
        "synchronization_rows": work.synchronization_rows,
        "attribution_complete": work.attribution_complete,
        "covered_known": work.covered_known,
        "rules": {"stall_min_ns": STALL_MIN_NS, "answer_share": ANSWER_SHARE, "listed": LISTED_RULE,
                  "ranges": RANGES_RULE, "attribution": ATTRIBUTION_RULE},
    }


def _containing(points: pl.DataFrame, ranges: pl.DataFrame, start: str, end: str) -> pl.DataFrame:
    """``_row, text, r_start, r_end, range_id`` for every range of ``ranges`` (``gtid, start_ns, end_ns,
    text``) on the thread of a row of ``points`` (``_row, gtid, start, end``) that holds it wholly.
    :func:`~nsysaudit.analysis.joins.held_by` (the pairs counted first where there could be more than
    :data:`MAX_STACK_PAIRS`: past it, none)."""
    closed, usable = pl.collect_all([  # one entry into polars for both
        ranges.lazy().filter(
            pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
            & (pl.col("end_ns") >= pl.col("start_ns"))
        ).with_row_index("range_id").with_columns(pl.col("range_id").cast(pl.Int64)),
        points.lazy().filter(pl.col("gtid").is_not_null() & pl.col(start).is_not_null() & pl.col(end).is_not_null())
        .select("_row", "gtid", *dict.fromkeys((start, end))),
    ])
    empty = pl.DataFrame(schema={"_row": pl.Int64, "text": pl.String, "r_start": pl.Int64, "r_end": pl.Int64,
                                 "range_id": pl.Int64})
    if not closed.height or not usable.height:
        return empty
    if more_pairs_than(MAX_STACK_PAIRS, closed, usable, start, end):
        return empty
    held = held_by(
        usable,
        closed.select("gtid", pl.col("start_ns").alias("r_start"), pl.col("end_ns").alias("r_end"), "text", "range_id"),
        start, end,
    )
    return held.select("_row", "text", "r_start", "r_end", "range_id")


def _stacks(calls: pl.DataFrame, plain: pl.DataFrame) -> pl.DataFrame:
    """``call_id, nvtx`` (the texts of the NVTX ranges holding the call, outermost first)."""
    held = _containing(calls.select(pl.col("call_id").alias("_row"), "gtid", "start_ns", "end_ns"), plain,
                       "start_ns", "end_ns")
    return (
        held.sort("_row", "r_start", pl.col("r_end"), "range_id", descending=[False, False, True, False])
        .group_by("_row", maintain_order=True)
        .agg(pl.col("text").alias("nvtx"))
        .rename({"_row": "call_id"})
    )


def _groups(
    work: GpuWork, calls: pl.DataFrame, plain: pl.DataFrame, library_calls: pl.DataFrame, names: pl.DataFrame
) -> pl.DataFrame:
    """The attributed rows with their launch's thread, NVTX range and library call, and whether the
    launch came before the call."""
    rows = work.attributed.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64))
    points = rows.select("_row", pl.col("launch_gtid").alias("gtid"), pl.col("launch_start_ns").alias("t"))
    innermost = pl.col("r_end") - pl.col("r_start")
    # The steps after the two joins of ranges, and the joins of what they found to the rows, each one
    # query (a step alone costs 0.1-0.3 ms on a few rows), the rows kept in their order.
    held = (
        _containing(points, plain, "t", "t").lazy().sort("_row", innermost, "range_id")
        .group_by("_row", maintain_order=True).first().select("_row", pl.col("text").alias("nvtx_range"))
    )
    libs = closed_library_calls(library_calls).select(
        "gtid", "start_ns", "end_ns", pl.concat_str(pl.col("library"), pl.lit("\x00"), pl.col("api").fill_null(""))
        .alias("text"))
    in_lib = (
        _containing(points, libs, "t", "t").lazy().sort("_row", innermost, "range_id")
        .group_by("_row", maintain_order=True).first()
        .select("_row", pl.col("text").str.split_exact("\x00", 1).struct.rename_fields(["library", "library_api"])
                .alias("_lib"))
        .unnest("_lib")
        .with_columns(pl.when(pl.col("library_api") == "").then(None).otherwise(pl.col("library_api"))
                      .alias("library_api"))
    )
    starts = calls.lazy().select("call_id", pl.col("start_ns").alias("_call_start"))
    thread_names = names.lazy().rename({"gtid": "launch_gtid", "thread_name": "launch_thread_name"})
    return (
        rows.lazy().join(held, on="_row", how="left", maintain_order="left")
        .join(in_lib, on="_row", how="left", maintain_order="left")
        .join(starts, on="call_id", maintain_order="left")
        .join(thread_names, on="launch_gtid", how="left", maintain_order="left")
        .with_columns(
            pl.when(pl.col("launch_start_ns").is_null()).then(pl.lit("unknown"))
            .when(pl.col("launch_start_ns") < pl.col("_call_start")).then(pl.lit("before"))
            .otherwise(pl.lit("after")).alias("launched")
        )
        .collect()
    )


def _by_call(frame: pl.DataFrame, *, include_key: bool = True) -> dict[int, pl.DataFrame]:
    """``frame``'s rows per ``call_id``, each call's in ``frame``'s order: one query for every listed
    call, rather than a filter (and a few sums) for each: a query costs polars' entry into its thread
    pool, some 0.1-0.2 ms even on a few rows (the serialized capture's 48 listed calls cost 202)."""
    if not frame.height:
        return {}
    parts = frame.partition_by("call_id", as_dict=True, maintain_order=True, include_key=include_key)
    return {int(key[0]): part for key, part in parts.items() if key[0] is not None}


ATTRIBUTION_KEYS = ["stream_id", "work", "launched", "launch_gtid", "launch_thread_name", "nvtx_range", "library",
                    "library_api"]


@dataclass(frozen=True)
class _Summed:
    """The attributed rows of :func:`_groups` summed every way the report says them, for every call at
    once (a query each), then kept per call: ``groups``, ``kernels``, ``ranges`` and ``libraries`` in
    the order they are listed, ``launched`` by (call, launched before/after/unknown) and ``totals`` by
    call, each ``(rows, busy_ns)``."""

    groups: dict[int, pl.DataFrame]
    kernels: dict[int, pl.DataFrame]
    ranges: dict[int, pl.DataFrame]
    libraries: dict[int, pl.DataFrame]
    launched: dict[tuple[int, str], tuple[int, int]]
    totals: dict[int, tuple[int, int]]


def _summed(rows: pl.DataFrame) -> _Summed:
    if not rows.height:
        return _Summed({}, {}, {}, {}, {}, {})
    counted = (pl.len().cast(pl.Int64).alias("rows"), pl.col("overlap_ns").sum().alias("busy_ns"))

    def summed(which: pl.Expr, *keys: str) -> dict[int, pl.DataFrame]:  # the most busy first, then by key
        return _by_call(
            rows.lazy().filter(which).group_by("call_id", *keys).agg(*counted)
            .sort("call_id", "busy_ns", *keys, descending=[False, True, *([False] * len(keys))], nulls_last=True)
            .collect(),
            include_key=False,
        )

    keys = ATTRIBUTION_KEYS
    return _Summed(
        groups=_by_call(
            rows.lazy().group_by("call_id", *keys).agg(*counted)
            .sort("call_id", "busy_ns", "rows", *keys, descending=[False, True, True, *([False] * len(keys))],
                  nulls_last=True)
            .collect()
        ),
        kernels=summed(pl.col("work") == "kernel", "name"),
        ranges=summed(pl.col("launched") == "before", "nvtx_range"),
        libraries=summed(pl.col("library").is_not_null(), "library", "library_api"),
        launched={(c, state): (n, int(b or 0)) for c, state, n, b in
                  rows.group_by("call_id", "launched").agg(*counted).iter_rows()},
        totals={c: (n, int(b or 0)) for c, n, b in rows.group_by("call_id").agg(*counted).iter_rows()},
    )


def _attribution(call_id: int, summed: _Summed, complete: bool) -> Attribution:
    """One call's attributed rows (:func:`_groups`), as the report says them."""
    grouped = summed.groups.get(call_id)
    out: list[LaunchGroup] = []
    for r in grouped.head(MAX_GROUPS).iter_rows(named=True) if grouped is not None else []:
        g = r["launch_gtid"]
        out.append({
            "stream_id": r["stream_id"], "work": r["work"], "rows": r["rows"], "busy_ns": r["busy_ns"],
            "launched": r["launched"],
            "launch_thread": None if g is None else {
                "pid": pid_bits(g), "tid": tid_bits(g), "global_tid": g,
                "thread_name": r["launch_thread_name"]},
            "nvtx_range": r["nvtx_range"], "library": r["library"], "library_api": r["library_api"],
        })

    def listed(part: dict[int, pl.DataFrame]) -> list[tuple[Any, ...]]:  # the first few, as polars gives rows
        frame = part.get(call_id)
        return frame.head(MAX_KERNEL_NAMES).rows() if frame is not None else []

    ranges = summed.ranges.get(call_id)
    (before, before_ns), (after, after_ns), (unknown, unknown_ns) = (
        summed.launched.get((call_id, state), (0, 0)) for state in ("before", "after", "unknown"))
    rows, busy_ns = summed.totals.get(call_id, (0, 0))
    return {
        "rows": rows, "busy_ns": busy_ns, "complete": complete,
        "launched_before_rows": before, "launched_before_ns": before_ns, "launched_after_rows": after,
        "launched_after_ns": after_ns, "launch_unknown_rows": unknown, "launch_unknown_ns": unknown_ns,
        "ranges": [{"nvtx_range": t, "rows": n, "busy_ns": b} for t, n, b in listed(summed.ranges)],
        "ranges_total": ranges.height if ranges is not None else 0,
        "libraries": [{"library": lib, "library_api": api, "rows": n, "busy_ns": b}
                      for lib, api, n, b in listed(summed.libraries)],
        "groups": out, "groups_total": grouped.height if grouped is not None else 0,
        "kernels": [{"name": n, "rows": k, "busy_ns": b} for n, k, b in listed(summed.kernels)],
    }


def _calls(
    listed: pl.DataFrame, stacks: pl.DataFrame, work: GpuWork, groups: pl.DataFrame, names: pl.DataFrame
) -> list[StallCall]:
    rows = (  # in the listed order; every listed call has its details (read/gpu_work)
        listed.lazy().join(stacks.lazy(), on="call_id", how="left", maintain_order="left")
        .join(names.lazy(), on="gtid", how="left", maintain_order="left")
        .join(work.details.lazy(), on="call_id", how="left", maintain_order="left")
        .with_columns(decode_pid(pl.col("gtid")).alias("pid"), decode_tid(pl.col("gtid")).alias("tid"))
        .collect()
    )
    ids = listed.select("call_id")
    behind = work.behind.lazy().join(ids.lazy(), on="call_id", how="semi", maintain_order="left").select(
        "call_id", "stream_id", "work", "rows", "busy_ns").collect()
    attributed = set(work.attributed_calls)
    mine = groups.join(ids, on="call_id", how="semi")
    behind_of, grouped = _by_call(behind, include_key=False), set(mine["call_id"].to_list())
    summed = _summed(mine.filter(pl.col("call_id").is_in(list(attributed))))
    out: list[StallCall] = []
    for r in rows.iter_rows(named=True):
        synced = r["stream_id"]
        own = behind_of.get(r["call_id"])
        streams: list[StallStream] = [
            {"stream_id": s, "work": w, "rows": n, "busy_ns": b,
             "synchronized_stream": None if synced is None else s == synced}
            for s, w, n, b in (own.iter_rows() if own is not None else ())
        ]
        copy: CallCopy | None = None
        if r["kind"] in ("sync_copy", "async_copy", "sync_memset"):
            copy = {"rows": r["own_rows"], "bytes": r["own_bytes"], "copy_kind": r["copy_kind"],
                    "memory_kinds": r["memory_kinds"] or None}
        complete = work.attribution_complete or r["call_id"] not in grouped
        out.append({
            "call_id": r["call_id"], "api": r["api"], "kind": r["kind"], "return_code": r["return_code"],
            "correlation_id": r["correlation_id"], "pid": r["pid"], "tid": r["tid"], "global_tid": r["gtid"],
            "thread_name": r["thread_name"], "start_ns": r["start_ns"], "end_ns": r["end_ns"],
            "blocked_ns": r["blocked_ns"], "own_ns": r["own_ns"], "waited_ns": r["waited_ns"],
            "covered_ns": r["covered_ns"], "idle_ns": r["idle_ns"], "stall": r["stall"],
            "synchronized": {"scope": r["scope"], "stream_id": synced, "source": r["stream_source"],
                             "device_id": r["device_id"], "context_id": r["context_id"]},
            "copy": copy,
            "nvtx": list(r["nvtx"] or []),
            "behind": streams if r["stall"] else None,
            "attribution": _attribution(r["call_id"], summed, complete) if r["call_id"] in attributed else None,
        })
    return out


def _ranges(calls: pl.DataFrame, stacks: pl.DataFrame, behind: pl.DataFrame) -> tuple[list[RangeStalls], int]:
    """Per (process, NVTX range text) the calls it holds, summed; ``None`` for the calls no range holds."""
    # Without lists for the calls no range holds (10^6 synchronizations outside any range are common).
    # Three queries in all (each a few steps; a step alone costs 0.1-0.3 ms on a few rows): no order
    # of their rows is relied on (the sums' and each range's streams' sorts are total).
    base = calls.lazy().select("call_id", global_pid(pl.col("gtid")).alias("gpid"), "stall", "blocked_ns",
                               "waited_ns", "idle_ns")
    columns = ["call_id", "gpid", "stall", "blocked_ns", "waited_ns", "idle_ns", "range"]
    held = (
        stacks.lazy().select("call_id", pl.col("nvtx").list.unique(maintain_order=True).alias("range"))
        .explode("range")
        .join(base, on="call_id")
        .select(columns)
    )
    # No call in a range (10^6 synchronizations of a program without NVTX): every call is outside,
    # without the anti join's copy of them.
    outside = (base.join(stacks.lazy().select("call_id"), on="call_id", how="anti") if stacks.height else base)
    keyed = pl.concat([held, outside.with_columns(pl.lit(None, pl.String).alias("range")).select(columns)]).collect()
    if not keyed.height:
        return [], 0
    sums = keyed.lazy().group_by("gpid", "range").agg(
        pl.len().cast(pl.Int64).alias("calls"),
        pl.col("stall").sum().cast(pl.Int64).alias("stalls"),
        pl.col("blocked_ns").sum(),
        pl.col("blocked_ns").filter(pl.col("stall")).sum().alias("stalled_ns"),
        pl.col("waited_ns").sum(),
        pl.when(pl.col("idle_ns").filter(pl.col("stall")).is_null().any()).then(None)
        .otherwise(pl.col("idle_ns").filter(pl.col("stall")).sum()).alias("idle_ns"),
    ).sort("stalled_ns", "blocked_ns", "calls", "gpid", "range", descending=[True, True, True, False, False],
           nulls_last=True).collect()
    shown = sums.head(MAX_LISTED_RANGES)
    streams = (
        keyed.lazy().select("call_id", "gpid", "range")
        .join(shown.lazy().select("gpid", "range"), on=["gpid", "range"], how="semi", nulls_equal=True)
        .join(behind.lazy(), on="call_id")
        .group_by("gpid", "range", "stream_id").agg(pl.col("busy_ns").sum())
        .sort("busy_ns", "stream_id", descending=[True, False])
        .collect()
    )
    # Each shown range's streams, the busiest first (a few rows: taken in Python, not a query a range).
    streams_of: dict[tuple[int, str | None], list[tuple[int, int]]] = {}
    for gpid, text, stream, busy in streams.select("gpid", "range", "stream_id", "busy_ns").iter_rows():
        streams_of.setdefault((gpid, text), []).append((stream, busy))
    out: list[RangeStalls] = []
    for r in shown.iter_rows(named=True):
        out.append({
            "range": r["range"], "pid": pid_bits(r["gpid"]), "global_pid": r["gpid"], "calls": r["calls"],
            "stalls": r["stalls"], "blocked_ns": r["blocked_ns"], "stalled_ns": r["stalled_ns"],
            "waited_ns": r["waited_ns"], "idle_ns": r["idle_ns"],
            "behind": [{"stream_id": s, "busy_ns": b} for s, b in streams_of.get((r["gpid"], r["range"]), [])[:3]],
        })
    return out, sums.height


def _processes(calls: pl.DataFrame, processes: pl.DataFrame, span: pl.DataFrame) -> list[ProcessStalls]:
    keyed = calls.with_columns(global_pid(pl.col("gtid")).alias("gpid"))
    sums = keyed.group_by("gpid").agg(
        pl.len().cast(pl.Int64).alias("blocking_calls"),
        pl.col("blocked_ns").sum(),
        pl.col("waited_ns").sum(),
        pl.col("stall").sum().cast(pl.Int64).alias("stalls"),
        pl.col("blocked_ns").filter(pl.col("stall")).sum().alias("stalled_ns"),
    ).sort("gpid")
    named = {g: n for g, n in processes.select("gpid", "process_name").iter_rows()}
    spans = {g: (last - first) for g, first, last in span.select("gpid", "first_ns", "last_ns").iter_rows()
             if g is not None and first is not None and last is not None}
    out: list[ProcessStalls] = []
    for r in sums.iter_rows(named=True):
        g = r["gpid"]
        length = spans.get(g)
        share = r["stalled_ns"] / length if length else None
        out.append({
            "pid": pid_bits(g), "global_pid": g, "name": named.get(g), "blocking_calls": r["blocking_calls"],
            "blocked_ns": r["blocked_ns"], "waited_ns": r["waited_ns"], "stalls": r["stalls"],
            "stalled_ns": r["stalled_ns"], "span_ns": length, "share": None if share is None else round(share, 6),
            "above": r["stalls"] > 0 and share is not None and share >= ANSWER_SHARE,
        })
    return out



def empty_stalls() -> StallsAnalysis:
    """The stalls of an analysis made without them (an :class:`~nsysaudit.analysis.run.Analysis` built by hand)."""
    return {
        "blocking_calls": 0, "blocked_ns": 0, "own_ns": 0, "waited_ns": 0, "idle_ns": 0, "stalls": 0,
        "stalled_ns": 0, "by_kind": [], "processes": [], "ranges": [], "ranges_total": 0, "calls": [],
        "calls_total": 0, "work_rows": {}, "synchronization_rows": 0, "attribution_complete": True,
        "covered_known": True,
        "rules": {"stall_min_ns": STALL_MIN_NS, "answer_share": ANSWER_SHARE, "listed": LISTED_RULE,
                  "ranges": RANGES_RULE, "attribution": ATTRIBUTION_RULE},
    }
