"""Every failed CUDA API call, explained: pure functions over the frames already read.

- :func:`classify_returns` adds ``classification`` to rows with a return code: ``failure``, or why a
  non-zero return is not a failure of that call (``reports_earlier_error``: cudaGetLastError and
  cudaPeekAtLastError report an error an earlier call raised; ``not_ready_poll``: a query call's
  600, "not ready yet").
- :func:`capture_regions` pairs stream-capture begin/end calls into regions, per thread.
- :func:`captured_event_waits`: a failed stream wait on an event (``cuStreamWaitEvent*``,
  ``cudaStreamWaitEvent*``) after a capture region of its process in which events were recorded:
  the event recorded inside the capture became a captured event, and waiting on it from outside
  the capture fails (CUDA_ERROR_INVALID_VALUE) long after the capture that caused it. The trace
  does not record which event a call used, so the finding names the region and its records.
- :func:`failed_calls`: every other failure, grouped by (api, return code, thread, innermost
  enclosing NVTX range), so 27 admission failures of one cudaMalloc are one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypedDict

import polars as pl

from nsysaudit.analysis.joins import held_by, more_pairs_than
from nsysaudit.core.codes import (
    is_allocation_api,
    is_allocation_failure,
    is_capture_begin,
    is_capture_end,
    is_event_record,
    is_out_of_memory,
    is_stream_wait,
    return_class,
)
from nsysaudit.core.ids import global_pid, gpid_of
from nsysaudit.core.intervals import overlaps
from nsysaudit.core.shapes import Schema
from nsysaudit.read.trace import Trace

CALL_COLUMNS = ["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"]
REGION_SCHEMA: Schema = {
    "region_id": pl.Int64,
    "gtid": pl.Int64,
    "begin_api": pl.String,
    "begin_start_ns": pl.Int64,
    "begin_end_ns": pl.Int64,
    "begin_correlation_id": pl.Int64,
    "end_api": pl.String,
    "end_start_ns": pl.Int64,
    "end_end_ns": pl.Int64,
    "end_correlation_id": pl.Int64,
}
EXAMPLE_IDS = 3


# ``api, start_ns, end_ns, correlation_id`` of a call (a row of CALL_COLUMNS' frame, but gtid and return_code).
CallEdge = tuple[str | None, int | None, int | None, int | None]


def _names(frame: pl.DataFrame, predicate: Callable[[str], bool]) -> list[str]:
    return [a for a in frame["api"].drop_nulls().unique().to_list() if predicate(a)]


def classify_returns(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (``api``, ``return_code``) with ``classification`` (null for success or unknown return)."""
    # Only the failed rows (few) are looked up; every other row's class is null. The frame keeps
    # its order.
    failed = frame.select("api", "return_code").with_row_index("_row").filter(
        pl.col("return_code").is_not_null() & (pl.col("return_code") != 0)
    )
    keys = failed.select("api", "return_code").unique()
    table = pl.DataFrame(
        [(api, rc, return_class(api, rc)) for api, rc in keys.iter_rows()],
        schema={"api": pl.String, "return_code": pl.Int64, "classification": pl.String},
        orient="row",
    )
    looked_up = failed.join(table, on=["api", "return_code"], how="left", nulls_equal=True)
    classes = pl.repeat(None, frame.height, dtype=pl.String, eager=True).alias("classification")
    if looked_up.height:
        classes = classes.scatter(looked_up["_row"], looked_up["classification"])
    return frame.with_columns(classes)


def is_failure() -> pl.Expr:
    return pl.col("classification") == "failure"


def capture_regions(capture_calls: pl.DataFrame) -> pl.DataFrame:
    """Stream-capture regions: each successful begin with the next successful end on its thread.

    A begin with no end after it (the capture never ended in the trace) is a region whose end
    columns are null. Columns: :data:`REGION_SCHEMA`.
    """
    calls = capture_calls.filter(
        pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null()
    )
    begins = _names(calls, is_capture_begin)
    ends = _names(calls, is_capture_end)
    rows: list[tuple[int | str | None, ...]] = []  # REGION_SCHEMA's columns but region_id
    no_end: CallEdge = (None, None, None, None)
    for (gtid,), thread in calls.sort("start_ns", "correlation_id", nulls_last=True).partition_by(
        "gtid", as_dict=True, maintain_order=True
    ).items():
        open_begin: CallEdge | None = None
        call: CallEdge
        for call in thread.select("api", "start_ns", "end_ns", "correlation_id").iter_rows():
            if call[0] in begins:
                if open_begin is not None:  # a second begin before an end: the first never closed here
                    rows.append((gtid, *open_begin, *no_end))
                open_begin = call
            elif call[0] in ends and open_begin is not None:
                rows.append((gtid, *open_begin, *call))
                open_begin = None
        if open_begin is not None:
            rows.append((gtid, *open_begin, *no_end))
    regions = pl.DataFrame(rows, schema=[c for c in REGION_SCHEMA if c != "region_id"], orient="row")
    return (
        regions.cast({k: v for k, v in REGION_SCHEMA.items() if k != "region_id"})
        .sort("begin_start_ns", "gtid")
        .with_row_index("region_id")
        .with_columns(pl.col("region_id").cast(pl.Int64))
    )


def failed_waits(cuda_api_rows: pl.DataFrame) -> pl.DataFrame:
    """Failed stream waits on an event (classified rows of ``cuda_api_rows``)."""
    waits = _names(cuda_api_rows, is_stream_wait)
    return cuda_api_rows.filter(pl.col("api").is_in(waits) & is_failure() & pl.col("start_ns").is_not_null())


def regions_before_waits(regions: pl.DataFrame, waits: pl.DataFrame) -> pl.DataFrame:
    """The closed capture regions that ended, in the wait's process, before some failed wait began.

    Only these need their event records read (see :func:`nsysaudit.read.trace.event_records_in`).
    """
    closed = regions.filter(pl.col("end_end_ns").is_not_null())
    if closed.height == 0 or waits.height == 0:
        return closed.clear()
    gpid = global_pid(pl.col("gtid"))
    latest = waits.group_by(gpid.alias("gpid")).agg(pl.col("start_ns").max().alias("last_wait"))
    return (
        closed.with_columns(gpid.alias("gpid"))
        .join(latest, on="gpid", how="inner")
        .filter(pl.col("end_end_ns") <= pl.col("last_wait"))
        .drop("gpid", "last_wait")
    )


def records_in_regions(records: pl.DataFrame, regions: pl.DataFrame) -> pl.DataFrame:
    """Event-record calls on the capturing thread wholly inside each region: ``region_id`` + call columns."""
    names = _names(records, is_event_record)
    records = records.filter(pl.col("api").is_in(names))
    if records.height == 0 or regions.height == 0:
        return pl.DataFrame(schema={"region_id": pl.Int64, **dict(records.select(CALL_COLUMNS).schema)})
    return (
        records.join(regions.select("region_id", "gtid", "begin_start_ns", "end_end_ns"), on="gtid", how="inner")
        .filter((pl.col("start_ns") >= pl.col("begin_start_ns")) & (pl.col("end_ns") <= pl.col("end_end_ns")))
        .select("region_id", *CALL_COLUMNS)
        .sort("region_id", "start_ns", "correlation_id", nulls_last=True)
    )


class CallTimes(TypedDict):
    """A call a stream-capture finding names: a region's begin or end, an event record in it."""

    api: str | None
    start_ns: int | None
    end_ns: int | None
    correlation_id: int | None


@dataclass(frozen=True)
class CapturedWait:
    """A failed wait (``api`` ... ``end_ns``) after a capture region of its process (``region_gtid``:
    the capturing thread; ``begin``, ``end``, its event ``records``) that ended ``region_end_ns``;
    ``regions_before``: how many such regions of the process ended before the wait."""

    api: str
    return_code: int
    correlation_id: int | None
    gtid: int
    start_ns: int
    end_ns: int | None
    region_gtid: int
    begin: CallTimes
    end: CallTimes
    region_end_ns: int
    records: list[CallTimes]
    regions_before: int


def _call_times(row: pl.DataFrame) -> list[CallTimes]:
    """``api, start_ns, end_ns, correlation_id`` of each row of ``row``."""
    return [{"api": api, "start_ns": start, "end_ns": end, "correlation_id": corr}
            for api, start, end, corr in row.select("api", "start_ns", "end_ns", "correlation_id").iter_rows()]


def captured_event_waits(waits: pl.DataFrame, regions: pl.DataFrame, records: pl.DataFrame) -> list[CapturedWait]:
    """One finding per failed wait that follows, in its process, a capture region holding event records.

    The region named is the latest one that ended before the wait; ``regions_with_records_before``
    counts all such regions of the process.
    """
    with_records = regions.join(records.select("region_id").unique(), on="region_id", how="semi")
    if waits.height == 0 or with_records.height == 0:
        return []
    by_region = {
        rid: _call_times(frame)
        for (rid,), frame in records.partition_by("region_id", as_dict=True, maintain_order=True).items()
    }
    out: list[CapturedWait] = []
    regions_rows = with_records.sort("end_end_ns", "region_id").to_dicts()
    for wait in waits.sort("start_ns", "gtid").iter_rows(named=True):
        gpid = gpid_of(wait["gtid"])
        before = [
            r for r in regions_rows
            if gpid is not None and gpid_of(r["gtid"]) == gpid and r["end_end_ns"] <= wait["start_ns"]
        ]
        if not before:
            continue
        region = before[-1]
        # The wait's api, gtid and start are known (a failed wait of a process); the region is closed.
        out.append(CapturedWait(
            api=wait["api"], return_code=wait["return_code"], correlation_id=wait["correlation_id"],
            gtid=wait["gtid"], start_ns=wait["start_ns"], end_ns=wait["end_ns"], region_gtid=region["gtid"],
            begin={"api": region["begin_api"], "start_ns": region["begin_start_ns"],
                   "end_ns": region["begin_end_ns"], "correlation_id": region["begin_correlation_id"]},
            end={"api": region["end_api"], "start_ns": region["end_start_ns"],
                 "end_ns": region["end_end_ns"], "correlation_id": region["end_correlation_id"]},
            region_end_ns=region["end_end_ns"], records=by_region[region["region_id"]], regions_before=len(before),
        ))
    return out


def nested_failure_kind(api: str | None, relation: str, code: int | None = None) -> str | None:
    """The finding kind of a failed call in a (library call, call) pair, or None (not a finding).
    ``code``: its return (``cuMemMap`` returning out of memory is an allocation failure)."""
    if api is None:
        return None
    if is_allocation_api(api) or is_allocation_failure(api, code):
        return "nested_alloc_failure" if relation == "nested" else "straddling_alloc_failure"
    return "nested_call_failure" if relation == "nested" else None


def nested_failures(pairs: pl.DataFrame) -> pl.DataFrame:
    """Pairs whose call failed, with ``kind`` and ``out_of_memory``.

    ``nested_alloc_failure`` / ``straddling_alloc_failure``: an allocation API wholly inside, or
    across the edge of, the library call. ``nested_call_failure``: any other API whose failure
    (see :func:`classify_returns`) lies wholly inside the library call; ``out_of_memory`` when its
    code means out of memory (cudaGetSymbolAddress returning cudaErrorMemoryAllocation inside
    cublasCreate_v2, from lazy module loading).
    """
    failed = classify_returns(pairs).filter(is_failure() & pl.col("api").is_not_null())
    keys = failed.select("api", "relation", "return_code").unique()
    table = pl.DataFrame(
        [(a, rel, rc, nested_failure_kind(a, rel, rc), is_out_of_memory(a, rc)) for a, rel, rc in keys.iter_rows()],
        schema={
            "api": pl.String,
            "relation": pl.String,
            "return_code": pl.Int64,
            "kind": pl.String,
            "out_of_memory": pl.Boolean,
        },
        orient="row",
    )
    return (
        failed.join(table, on=["api", "relation", "return_code"], how="left", nulls_equal=True)
        .filter(pl.col("kind").is_not_null())
        .drop("classification")
    )


def innermost_nvtx(calls: pl.DataFrame, ranges: pl.DataFrame, max_pairs: int | None) -> tuple[pl.DataFrame, bool]:
    """``calls`` with ``nvtx_range``/``nvtx_domain``: the shortest NVTX range of their thread holding them wholly.

    ``ranges``: ``gtid, start_ns, end_ns, text, domain``. The containment pairs are counted first
    (:func:`nsysaudit.analysis.joins.count_pairs`) and not formed past ``max_pairs``: then the second value
    is False and the ranges are unknown (null).
    """
    out_schema = {"nvtx_range": pl.String, "nvtx_domain": pl.String}

    def timed(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.filter(
            pl.col("gtid").is_not_null()
            & pl.col("start_ns").is_not_null()
            & pl.col("end_ns").is_not_null()
            & (pl.col("end_ns") >= pl.col("start_ns"))
        )

    closed = timed(ranges).with_row_index("range_id").with_columns(pl.col("range_id").cast(pl.Int64))
    keyed = calls.with_row_index("_call")
    usable_keyed = timed(keyed)
    empty = calls.with_columns(*(pl.lit(None, dtype=t).alias(c) for c, t in out_schema.items()))
    if closed.height == 0 or usable_keyed.height == 0:
        return empty, True
    if max_pairs is not None and more_pairs_than(max_pairs, closed, usable_keyed, "start_ns", "end_ns"):
        return empty, False
    held = held_by(
        usable_keyed.select("_call", "gtid", "start_ns", "end_ns"),
        closed.select("gtid", pl.col("start_ns").alias("r_start"), pl.col("end_ns").alias("r_end"), "text", "domain",
                      "range_id"),
        "start_ns", "end_ns",
    )
    if not held.height:
        return empty, True
    # The innermost range: the shortest. Two shortest ranges of one span that name different texts
    # leave it unknown (never the first row's).
    span = pl.col("r_end") - pl.col("r_start")
    inner = (
        held
        .filter(span == span.min().over("_call"))
        .sort("_call", "range_id")
        .group_by("_call", maintain_order=True)
        .agg(pl.col("text").first(), pl.col("domain").first(),
             (pl.struct("text", "domain").n_unique() > 1).alias("_ambiguous"))
        .select("_call",
                pl.when(pl.col("_ambiguous")).then(None).otherwise(pl.col("text")).alias("nvtx_range"),
                pl.when(pl.col("_ambiguous")).then(None).otherwise(pl.col("domain")).alias("nvtx_domain"))
    )
    return keyed.join(inner, on="_call", how="left").drop("_call"), True


FAILED_CALL_SCHEMA: Schema = {
    "api": pl.String,
    "return_code": pl.Int64,
    "gtid": pl.Int64,
    "nvtx_range": pl.String,
    "nvtx_domain": pl.String,
    "straddles_library_call": pl.Boolean,
    "library_call_unexamined": pl.Boolean,
    "count": pl.Int64,
    "first_ns": pl.Int64,
    "last_ns": pl.Int64,
    "example_correlation_ids": pl.List(pl.Int64),
}


def failed_calls(
    cuda_api_rows: pl.DataFrame,
    explained: pl.DataFrame,
    straddling: pl.DataFrame,
    nvtx_ranges: pl.DataFrame,
    max_pairs: int | None,
    unexamined: pl.DataFrame | None = None,
) -> tuple[pl.DataFrame, bool]:
    """The failures no finding explains, grouped (:data:`FAILED_CALL_SCHEMA`), and whether NVTX
    ranges were attributed (False past ``max_pairs``).

    ``cuda_api_rows``: classified (:func:`classify_returns`: the analysis classifies them once and
    hands them on); ``explained``: calls (``CALL_COLUMNS``) that are part of a finding; ``straddling``: calls
    that cross a library call's edge; ``unexamined``: the union windows of the library calls a pair
    limit left unexamined (a failure overlapping one may be nested in it: ``library_call_unexamined``).
    """
    rows = cuda_api_rows.filter(is_failure())
    rows = rows.join(explained.select(CALL_COLUMNS).unique(), on=CALL_COLUMNS, how="anti", nulls_equal=True)
    if rows.height == 0:
        return pl.DataFrame(schema=FAILED_CALL_SCHEMA), True
    rows = rows.join(
        straddling.select(CALL_COLUMNS).unique().with_columns(pl.lit(True).alias("straddles_library_call")),
        on=CALL_COLUMNS,
        how="left",
        nulls_equal=True,
    ).with_columns(pl.col("straddles_library_call").fill_null(False))
    rows = rows.with_columns(
        overlaps(rows, unexamined).alias("library_call_unexamined")
        if unexamined is not None
        else pl.lit(False).alias("library_call_unexamined")
    )
    rows, attributed = innermost_nvtx(rows, nvtx_ranges, max_pairs)
    key = [
        "api", "return_code", "gtid", "nvtx_range", "nvtx_domain", "straddles_library_call", "library_call_unexamined"
    ]
    grouped = (
        rows.sort("start_ns", "correlation_id", nulls_last=True)
        .group_by(key, maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("start_ns").min().alias("first_ns"),
            pl.max_horizontal(pl.col("end_ns").max(), pl.col("start_ns").max()).alias("last_ns"),
            pl.col("correlation_id").drop_nulls().head(EXAMPLE_IDS).alias("example_correlation_ids"),
        )
        .sort("first_ns", "gtid", "api", "return_code", nulls_last=True)
    )
    return grouped.select(list(FAILED_CALL_SCHEMA)).cast(FAILED_CALL_SCHEMA), attributed  # type: ignore[arg-type]


def regions_needing_records(trace: Trace) -> pl.DataFrame:
    """The capture regions a failed stream wait of their process follows: only their event records
    are read (one query, :func:`nsysaudit.read.trace.event_records_in`), and only when there are any."""
    if trace.cuda_api_table is None or trace.capture_calls.height == 0:
        return capture_regions(trace.capture_calls).clear()
    regions = capture_regions(trace.capture_calls)
    return regions_before_waits(regions, failed_waits(classify_returns(trace.cuda_api_rows)))
