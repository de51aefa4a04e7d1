"""Host stalls' device-side evidence: which CUDA calls blocked the host, and the GPU work that ran
while each did, from CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY, _MEMSET and _SYNCHRONIZATION.

The blocking calls themselves are CUDA API rows the scan keeps by name (:mod:`nsysaudit.core.blocking`;
:func:`blocking_name_ids` gives the scan its marked name ids). Whether an implicit one blocked is
decided here, from the rows of its own correlation id (same process): a synchronous copy unless
every copy row of it is device to device, an asynchronous copy only from or to pageable memory, a
synchronous memset only into pinned or managed memory (CUDA's API synchronization rules, as
``nsys analyze`` applies them). For each blocking call:

- ``blocked_ns``: the call's own duration (end - start): the host was inside it;
- ``own_ns``: how long its own copy or memset rows ran on the device inside that time (their union);
- per stream, the other GPU work of the process that ran inside the call (``busy_ns``: the sum of
  each row's part inside the call; a stream runs one thing at a time), and how many rows;
- ``covered_ns``: for a stall, how much of the call some GPU work of the process (its own included)
  covered, the union over all streams; the rest, ``blocked - covered``, the device did nothing of
  this process's while the host waited (null for a shorter call, as its per stream sums).

The GPU tables hold as many rows as the CUDA API table. They are read in batches of a few columns
(where the native engine is built, runs of their leaves by its page reader on two threads, which keeps
only the rows inside some stall and those the reduction must judge; else rowid ranges through
SQLite), and each batch is reduced at once:
per (call, stream) counts and sums by as-of joins over the stream's rows (no (call, row) pairs), the
union as merged intervals, both inside the stalls only. Memory is bounded by the batch, the calls
and the merged intervals (:data:`MAX_BUSY_INTERVALS`: above it ``covered_ns`` is unknown, and a
warning says so).

For the longest waits (:data:`ATTRIBUTION_RULE`) the work rows are kept one by one, and their
launches read by correlation id from the CUDA API table (one more pass over it, from its pages
where the native engine is built): which thread
launched each, when (before the call or not), and so inside which NVTX range and library call
(:mod:`nsysaudit.analysis.stalls`). The trace shows what ran while the host waited, not a dependency
graph: the reports say "behind", never "because".
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import polars as pl

from nsysaudit.core.blocking import NAME_PATTERNS, blocking_kind
from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.ids import global_pid
from nsysaudit.core.intervals import PAIRS_MAX, union_windows
from nsysaudit.core.progress import Progress
from nsysaudit.core.reasons import Reason
from nsysaudit.core.shapes import Schema
from nsysaudit.read import native
from nsysaudit.read.damage import column_classes
from nsysaudit.read.diagnostics import NO_CAPTURE, Capture
from nsysaudit.read.memory import FrameBuilder
from nsysaudit.read.scan import CALL_SCHEMA as API_CALL_SCHEMA
from nsysaudit.read.scan import INT64_MAX, INT64_MIN, page_layout, rowid_name
from nsysaudit.read.source import ExportFile, Table, quote, uncounted
from nsysaudit.words import attribution_rule, warned

if TYPE_CHECKING:
    import numpy as np  # imported where it is used: a small export never loads it

KERNEL, MEMCPY, MEMSET, SYNC = (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
)
WORK_TABLES = {"kernel": KERNEL, "memcpy": MEMCPY, "memset": MEMSET}
WORK_COLUMNS = ("start", "end", "globalPid", "streamId")
# ENUM_CUDA_MEM_KIND / ENUM_CUDA_MEMCPY_OPER ids by name, for exports without the enum tables
# (nsys 2022.2 through 2026.2 number them so).
MEM_KIND_FALLBACK = {"PAGEABLE": 0, "PINNED": 1, "DEVICE": 2, "MANAGED": 4}
COPY_KIND_FALLBACK = {"DTOD": 8}
INVALID_ID = 0xFFFFFFFF  # CUPTI_SYNCHRONIZATION_INVALID_VALUE: no stream (a context or event synchronization)

BATCH_ROWS = 1 << 18
MAX_BUSY_INTERVALS = 4_000_000
STALL_MIN_NS = 1_000_000  # a blocking call is a stall from this wait on (also the answer's rule)
MAX_ATTRIBUTED_CALLS = 20
MAX_ATTRIBUTED_ROWS = 200_000
ATTRIBUTION_RULE = attribution_rule(MAX_ATTRIBUTED_CALLS, STALL_MIN_NS, MAX_ATTRIBUTED_ROWS)

CANDIDATE_SCHEMA: Schema = API_CALL_SCHEMA  # the CUDA API rows of a blocking name
CALL_SCHEMA: Schema = {
    "call_id": pl.Int64,
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "correlation_id": pl.Int64,
    "api": pl.String,
    "return_code": pl.Int64,
    "kind": pl.String,
    "own_ns": pl.Int64,
    "covered_ns": pl.Int64,
}
# What the reports say of a call beyond its sums, for the stalls and the longest calls only (10^6
# short synchronizations would otherwise carry ten columns of nothing each).
DETAIL_SCHEMA: Schema = {
    "call_id": pl.Int64,
    "scope": pl.String,  # stream | device | event | unknown: what the call waited for
    "stream_id": pl.Int64,  # the stream it synchronized, where a row says (else null)
    "stream_source": pl.String,  # the table that says so
    "device_id": pl.Int64,
    "context_id": pl.Int64,
    "own_rows": pl.Int64,
    "own_bytes": pl.Int64,
    "copy_kind": pl.String,
    "memory_kinds": pl.String,
}
LONGEST_CALLS = 50  # the calls the reports list: those that blocked longest (nsysaudit.analysis.stalls)
BEHIND_SCHEMA: Schema = {
    "call_id": pl.Int64,
    "work": pl.String,
    "stream_id": pl.Int64,
    "rows": pl.Int64,
    "busy_ns": pl.Int64,
}
ATTRIBUTED_SCHEMA: Schema = {
    "call_id": pl.Int64,
    "work": pl.String,
    "stream_id": pl.Int64,
    "device_id": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "overlap_ns": pl.Int64,
    "correlation_id": pl.Int64,
    "name": pl.String,
    "bytes": pl.Int64,
    "launch_gtid": pl.Int64,
    "launch_start_ns": pl.Int64,
    "launch_api": pl.String,
}
OWN_SCHEMA: Schema = {
    "gpid": pl.Int64,
    "correlation_id": pl.Int64,
    "work": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "stream_id": pl.Int64,
    "device_id": pl.Int64,
    "context_id": pl.Int64,
    "bytes": pl.Int64,
    "copy_kind": pl.Int64,
    "src_kind": pl.Int64,
    "dst_kind": pl.Int64,
    "mem_kind": pl.Int64,
}


@dataclass(frozen=True)
class Enums:
    """The ids and labels of the memory and copy kinds, from the export's enum tables (or nsys's ids)."""

    pageable: int
    pinned: int
    managed: int
    dtod: int
    memory_labels: dict[int, str] = field(default_factory=dict)
    copy_labels: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Prepared:
    """What is read before the CUDA API scan: the name ids the scan marks, and the pageable copies
    (an asynchronous copy blocks only from or to pageable memory: without one, no asynchronous copy
    name is marked)."""

    name_ids: pl.DataFrame  # name_id, api, kind
    pageable: pl.DataFrame  # OWN_SCHEMA: the copy rows of pageable memory
    enums: Enums


@dataclass(frozen=True)
class GpuWork:
    """The blocking calls and what ran while they blocked (see the module docstring).

    ``calls``: :data:`CALL_SCHEMA`, one row per blocking call in (start, gtid, correlation id) order;
    ``details``: :data:`DETAIL_SCHEMA`, of the stalls and the :data:`LONGEST_CALLS` longest calls.
    ``behind``: :data:`BEHIND_SCHEMA`, per stall (a call that blocked at least :data:`STALL_MIN_NS`),
    kind of work and stream: the rows of other work of the process that ran inside the call and their
    time there (not for shorter calls: a trace of 10^6 short synchronizations would make 10^7 rows).
    ``attributed``: :data:`ATTRIBUTED_SCHEMA`, for the calls :data:`ATTRIBUTION_RULE` chooses, each
    such row with its launch (null where the CUDA API table has no single row of its correlation id).
    ``work_rows``: the rows read per kind of work. ``attributed_calls``: the calls attributed;
    ``attribution_complete``: no row was left out by the row limit. ``checked``: per GPU table the page
    reader read whole, what its check of the table's pages found ("" sound, as ``PRAGMA quick_check``
    would find it; else why it is unsure), handed to the damage check (:mod:`nsysaudit.read.damage`)
    so that it does not read the table a second time.
    """

    calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA))
    details: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=DETAIL_SCHEMA))
    behind: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=BEHIND_SCHEMA))
    attributed: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ATTRIBUTED_SCHEMA))
    work_rows: dict[str, int] = field(default_factory=dict)
    attributed_calls: tuple[int, ...] = ()
    attribution_complete: bool = True
    covered_known: bool = True
    synchronization_rows: int = 0
    tables: dict[str, str] = field(default_factory=dict)
    warnings: tuple[ReportWarning, ...] = ()
    checked: dict[str, str] = field(default_factory=dict)


# --- before the scan -------------------------------------------------------------------------------


def _enum_ids(export: ExportFile, table: str, prefix: str) -> tuple[dict[str, int], dict[int, str]]:
    """``{SUFFIX: id}`` of an enum table's names ``PREFIX_SUFFIX``, and ``{id: label}``."""
    t = export.table(table)
    if t is None or not t.has("id", "name"):
        return {}, {}
    label = "label" if t.has("label") else "name"
    ids: dict[str, int] = {}
    labels: dict[int, str] = {}
    for i, name, text in export.conn.execute(f"SELECT id, name, {quote(label)} FROM {quote(t.name)}"):
        if type(i) is int and isinstance(name, str):
            if name.startswith(prefix):
                ids.setdefault(name[len(prefix):], i)
            if isinstance(text, str):
                labels.setdefault(i, text)
    return ids, labels


def read_enums(export: ExportFile) -> Enums:
    kinds, memory_labels = _enum_ids(export, "ENUM_CUDA_MEM_KIND", "CUDA_MEMOPR_MEMORY_KIND_")
    copies, copy_labels = _enum_ids(export, "ENUM_CUDA_MEMCPY_OPER", "CUDA_MEMCPY_KIND_")
    mem = {**MEM_KIND_FALLBACK, **kinds}
    return Enums(mem["PAGEABLE"], mem["PINNED"], mem["MANAGED"], {**COPY_KIND_FALLBACK, **copies}["DTOD"],
                 memory_labels, copy_labels)


def _usable(export: ExportFile, base: str, *columns: str) -> Table | None:
    t = export.table(base)
    return t if t is not None and t.has(*columns) else None


def _col(t: Table, column: str) -> str:
    return quote(column) if t.has(column) else "NULL"


def _own(
    export: ExportFile, t: Table, work: str, where: str, frame: FrameBuilder, typed: Counter[str]
) -> pl.DataFrame:
    """The OWN_SCHEMA columns of ``t`` (a MEMCPY or MEMSET table) for the rows ``where`` selects (its
    integer columns read as :func:`_read` reads them, ``work`` added after)."""
    ints = {k: v for k, v in OWN_SCHEMA.items() if k != "work"}
    rows = _read(export, _own_sql(t, work, where), ints, frame, typed, t.name)
    return rows.with_columns(pl.lit(work).alias("work")).select(list(OWN_SCHEMA))


def _own_sql(t: Table, work: str, where: str) -> str:
    """The OWN_SCHEMA columns but ``work`` of ``t`` (a MEMCPY or MEMSET table) for the rows ``where`` selects."""
    copy = work == "memcpy"
    columns = [
        "globalPid", "correlationId", "start", '"end"', "streamId", _col(t, "deviceId"),
        _col(t, "contextId"), _col(t, "bytes"),
        _col(t, "copyKind") if copy else "NULL", _col(t, "srcKind") if copy else "NULL",
        _col(t, "dstKind") if copy else "NULL", "NULL" if copy else _col(t, "memKind"),
    ]
    return f"SELECT {', '.join(columns)} FROM {quote(t.name)} NOT INDEXED WHERE {where}"


def _strings_like(conn: sqlite3.Connection, strings: str, patterns: tuple[str, ...]) -> list[tuple[int, str]]:
    where = " OR ".join("value LIKE ?" for _ in patterns)
    rows = conn.execute(f"SELECT id, value FROM {quote(strings)} WHERE {where}", patterns).fetchall()
    return [(i, v) for i, v in rows if type(i) is int and isinstance(v, str)]


def prepare(export: ExportFile, strings: Table, frame: FrameBuilder, typed: Counter[str]) -> Prepared:
    """The blocking calls' name ids for the scan, and the copy rows of pageable memory."""
    enums = read_enums(export)
    pageable = pl.DataFrame(schema=OWN_SCHEMA)
    t = _usable(export, MEMCPY, "start", "end", "globalPid", "streamId", "correlationId")
    if t is not None and (t.has("srcKind") or t.has("dstKind")):
        kinds = " OR ".join(f"{c} = {int(enums.pageable)}" for c in ("srcKind", "dstKind") if t.has(c))
        pageable = _own(export, t, "memcpy", kinds, frame, typed)
    rows = [(i, v, blocking_kind(v)) for i, v in _strings_like(export.conn, strings.name, NAME_PATTERNS)]
    # Asynchronous copies are not marked: an export holds millions, a few of pageable memory, whose
    # CUDA API rows are read by correlation id after the scan (:func:`_pageable_calls`).
    rows = [(i, v, k) for i, v, k in rows if k is not None and k != "async_copy"]
    name_ids = pl.DataFrame(rows, schema={"name_id": pl.Int64, "api": pl.String, "kind": pl.String}, orient="row")
    return Prepared(name_ids, pageable, enums)


def _read(
    export: ExportFile, sql: str, schema: Schema, frame: FrameBuilder, typed: Counter[str], source: str
) -> pl.DataFrame:
    """The rows of ``sql`` (integer columns) with the native reader where it is built (on its own
    connection: any thread), else the strict frame builder. A text in one of these columns is a value
    of the wrong type either way, counted and read as NULL: the builder gets it as bytes, never
    decoded (a damaged record's text is no invalid UTF-8 of a name), as the native reader counts it."""
    ints = all(d != pl.String for d in schema.values())
    if native.load() is not None and ints:
        try:
            rows, wrong = native.read_ints(export.uri, sql, schema)
            if wrong:
                typed[source] += wrong
            return rows
        except native.NativeScanError:
            pass
    saved = export.conn.text_factory
    if ints:
        export.conn.text_factory = bytes
    try:
        return frame(export.conn, sql, schema, mismatched=typed, source=source)
    finally:
        export.conn.text_factory = saved


# --- after the scan --------------------------------------------------------------------------------


def read_gpu_work(
    export: ExportFile,
    candidates: pl.DataFrame,
    prepared: Prepared,
    frame: FrameBuilder,
    typed: Counter[str],
    cuda_api_table: str | None,
    *,
    progress: Progress | None = None,
    capture: Capture = NO_CAPTURE,
    pageable: pl.DataFrame | None = None,
    corr_groups: pl.DataFrame | None = None,
    checked: Callable[[Mapping[str, str]], None] | None = None,
) -> GpuWork:
    """The blocking calls among ``candidates`` (the CUDA API rows of a blocking name, ``CANDIDATE_SCHEMA``
    with ``kind``) and the GPU work that ran while they blocked. A call or a GPU row with a start or end
    outside the ``capture`` is damage (nsys records nothing there): left out, and a warning counts it.
    ``pageable``: the CUDA API rows of the pageable copies' keys, where the scan gathered them
    (:func:`_pageable_calls`); ``corr_groups``: the scan's groups of the CUDA API table's leaves by
    correlation id, where it has them (:func:`_by_correlation`). ``checked`` hears what the page
    reader's check of the GPU tables found (:attr:`GpuWork.checked`) as soon as it has read them,
    and may raise (a damaged file refused before the rest is read)."""
    tables: dict[str, str] = {}
    candidates = pl.concat([candidates, _pageable_calls(export, prepared, cuda_api_table, frame, typed, pageable)])
    start, end = pl.col("start_ns"), pl.col("end_ns")  # or a duration past 2^63 - 1 ns (292 years)
    damaged = capture.outside(start) | capture.outside(end) | (
        (end.cast(pl.Int128) - start.cast(pl.Int128)) > INT64_MAX).fill_null(False)
    outside = candidates.filter(damaged).height
    if outside:
        candidates = candidates.filter(~damaged)
    own = _own_rows(export, candidates, prepared, frame, typed, tables)
    calls, copies = _decide(candidates, own, prepared.enums)
    del candidates  # 10^6 rows: the caller let go of them too
    if not calls.height:
        return GpuWork(tables=tables, warnings=_outside(outside, 0, capture))
    sync_rows, details = _details(export, calls, copies, frame, typed, tables)
    top = _attributed_calls(calls)
    passed = _pass(export, calls, top, frame, typed, tables, progress, capture)
    if checked is not None:
        checked(passed.checked)
    behind = _without_own(passed.behind, calls, own)
    # A copy's own rows ran inside it too: they are its own time (own_ns), not work it was behind.
    own_corr = pl.col("_own")
    attributed = (
        _launches(export, passed.attributed, cuda_api_table, frame, typed, tables, corr_groups)
        .join(calls.select("call_id", pl.col("correlation_id").alias("_own")), on="call_id", how="left")
        .filter(pl.col("correlation_id").is_null() | own_corr.is_null() | (pl.col("correlation_id") != own_corr))
        .select(list(ATTRIBUTED_SCHEMA))
    )
    calls = calls.join(passed.covered, on="call_id", how="left").with_columns(
        pl.col("covered_ns") if passed.covered_known else pl.lit(None, dtype=pl.Int64).alias("covered_ns")
    )
    said = list(_outside(outside, passed.outside, capture))
    stalls = calls.filter(pl.col("end_ns") - pl.col("start_ns") >= STALL_MIN_NS).height
    if not passed.covered_known and stalls:  # covered_ns is a stall's only
        said.append(warned(Reason.of("gpu_work_union_unknown", kernels_read="kernel" in passed.rows,
                                     max_intervals=MAX_BUSY_INTERVALS), stalls))
    for name in passed.unreadable:
        said.append(warned(Reason.of("gpu_work_unreadable", name=name, columns=', '.join(WORK_COLUMNS)), 1))
    # 10^6 calls: their few distinct texts kept once each (categorical), not once per row.
    texts = [c for c, t in CALL_SCHEMA.items() if t == pl.String]
    return GpuWork(
        calls=calls.select(list(CALL_SCHEMA)).sort("call_id").with_columns(pl.col(texts).cast(pl.Categorical)),
        details=details,
        behind=behind,
        attributed=attributed,
        work_rows=passed.rows,
        attributed_calls=tuple(int(c) for c in top["call_id"].to_list()),
        attribution_complete=passed.complete,
        covered_known=passed.covered_known,
        synchronization_rows=sync_rows,
        tables=tables,
        warnings=tuple(said),
        checked=passed.checked,
    )


def _outside(calls: int, rows: int, capture: Capture) -> tuple[ReportWarning, ...]:
    """The warning that blocking calls or GPU rows dated outside the capture were left out."""
    if not calls and not rows:
        return ()
    return (warned(
        Reason.of("gpu_work_outside_capture", calls=calls, rows=rows, bounds_words=capture.bounds_words),
        calls + rows,
    ),)


def _pageable_calls(
    export: ExportFile, prepared: Prepared, cuda_api_table: str | None, frame: FrameBuilder, typed: Counter[str],
    scanned: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The asynchronous copies whose copy rows are of pageable memory: the CUDA API rows of their
    process and correlation id, those of an asynchronous copy's name (``CANDIDATE_SCHEMA`` with
    ``kind``). The rows are ``scanned`` (``ROW_SCHEMA``: the native scan gathered them in its pass),
    else read here by correlation id (one pass: the scan marks no asynchronous copy by its name, an
    export holds millions of them); in rowid order either way."""
    schema = {**CANDIDATE_SCHEMA, "kind": pl.String}
    runtime = export.table(cuda_api_table) if cuda_api_table is not None else None
    strings = export.table("StringIds")
    keys = prepared.pageable.select("gpid", "correlation_id").drop_nulls().unique()
    if runtime is None or strings is None or not keys.height:
        return pl.DataFrame(schema=schema)
    corrs = keys["correlation_id"].unique().sort()
    read_schema = {k: v for k, v in CANDIDATE_SCHEMA.items() if k != "api"} | {"_api": pl.Int64}
    if scanned is not None:
        rows = scanned.with_columns(pl.lit(None, dtype=pl.Int64).alias("_api")).select(list(read_schema))
    else:
        rows = _by_correlation(
            export, runtime, ("globalTid", "start", "end", "correlationId", "nameId", "returnValue", "NULL"),
            read_schema, corrs, frame, typed,
        )
    rows = rows.with_columns(global_pid(pl.col("gtid")).alias("gpid")).join(keys, on=["gpid", "correlation_id"],
                                                                           how="semi")
    names = _strings_of(export, rows["name_id"], ("name_id", "api"), frame, typed)
    named = rows.drop("_api").join(names, on="name_id", how="left")
    kinds = pl.DataFrame([(a, blocking_kind(a)) for a in named["api"].unique().to_list()],
                         schema={"api": pl.String, "kind": pl.String}, orient="row")
    return named.join(kinds, on="api", how="inner", nulls_equal=True).filter(pl.col("kind") == "async_copy").select(
        list(schema))


def _strings_of(
    export: ExportFile, ids: pl.Series, columns: tuple[str, str], frame: FrameBuilder, typed: Counter[str]
) -> pl.DataFrame:
    """``id column, text column`` (``columns``) of the StringIds rows of ``ids`` (ids without a row: absent)."""
    strings = export.table("StringIds")
    wanted = ids.drop_nulls().unique().sort().to_list()
    schema: Schema = {columns[0]: pl.Int64, columns[1]: pl.String}
    if strings is None or not wanted:
        return pl.DataFrame(schema=schema)
    return frame(export.conn, f"SELECT id, value FROM {quote(strings.name)} WHERE id IN "
                 f"(SELECT value FROM json_each('{json.dumps(wanted)}'))", schema, mismatched=typed,
                 source=strings.name)


def _own_rows(
    export: ExportFile, candidates: pl.DataFrame, prepared: Prepared, frame: FrameBuilder, typed: Counter[str],
    tables: dict[str, str],
) -> pl.DataFrame:
    """The copy and memset rows of the candidate copies and memsets (OWN_SCHEMA): the pageable copies
    read before the scan, the synchronous copies' rows by correlation id, the memsets into pinned or
    managed memory."""
    keyed = candidates.filter(pl.col("kind").is_in(COPY_KINDS)).with_columns(global_pid(pl.col("gtid")).alias("gpid"))
    parts = [prepared.pageable]
    copy = _usable(export, MEMCPY, "start", "end", "globalPid", "streamId", "correlationId")
    if copy is not None:
        tables["memcpy"] = copy.name
    sync_copies = keyed.filter(pl.col("kind") == "sync_copy")["correlation_id"].drop_nulls().unique().sort()
    if copy is not None and sync_copies.len():
        ids = json.dumps(sync_copies.to_list())
        parts.append(_own(export, copy, "memcpy", f"correlationId IN (SELECT value FROM json_each('{ids}'))", frame,
                          typed))
    sets = _usable(export, MEMSET, "start", "end", "globalPid", "streamId", "correlationId")
    if sets is not None:
        tables["memset"] = sets.name
    e = prepared.enums
    if sets is not None and sets.has("memKind") and keyed.filter(pl.col("kind") == "sync_memset").height:
        parts.append(_own(export, sets, "memset", f"memKind IN ({int(e.pinned)}, {int(e.managed)})", frame, typed))
    own = pl.concat(parts).unique(maintain_order=True)
    return own.join(keyed.select("gpid", "correlation_id").unique(), on=["gpid", "correlation_id"], how="semi")


COPY_KINDS = ("sync_copy", "async_copy", "sync_memset")


COPY_DETAILS = ("own_rows", "own_bytes", "copy_kind", "memory_kinds", "stream_id", "device_id", "context_id")


def _decide(candidates: pl.DataFrame, own: pl.DataFrame, e: Enums) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The candidates that blocked (:mod:`nsysaudit.core.blocking`) in (start, thread, correlation id)
    order with their ``call_id`` and ``gpid`` (the columns of :data:`CALL_SCHEMA` but ``covered_ns``),
    and the copies' and memsets' own rows summed (``call_id`` and :data:`COPY_DETAILS`).
    Synchronizations and frees block by their name; a copy or memset by its rows, so only those are
    joined to them."""
    keyed = candidates.with_columns(global_pid(pl.col("gtid")).alias("gpid")).filter(
        pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null() & pl.col("gtid").is_not_null()
    )
    core = [*(c for c in CALL_SCHEMA if c not in ("call_id", "own_ns", "covered_ns")), "gpid"]
    by_name = keyed.filter(~pl.col("kind").is_in(COPY_KINDS)).select(*core, pl.lit(0, pl.Int64).alias("own_ns"))
    copies = keyed.filter(pl.col("kind").is_in(COPY_KINDS))
    decided = _copies(copies, own, e) if copies.height else None
    parts = [by_name] if decided is None else [by_name, decided.select(by_name.columns)]
    calls = (
        pl.concat(parts)  # ties (a duplicated row) kept in the order read: call ids never depend on a sort's luck
        .sort("start_ns", "gtid", "correlation_id", "end_ns", nulls_last=True, maintain_order=True)
        .with_row_index("call_id")
        .with_columns(pl.col("call_id").cast(pl.Int64))
    )
    details = pl.DataFrame(schema={"gpid": pl.Int64, "correlation_id": pl.Int64, **{
        c: DETAIL_SCHEMA[c] for c in COPY_DETAILS}})
    if decided is not None:
        details = decided.select("gpid", "correlation_id", *COPY_DETAILS).unique(["gpid", "correlation_id"],
                                                                                 keep="first", maintain_order=True)
    return calls, details


def _copies(copies: pl.DataFrame, own: pl.DataFrame, e: Enums) -> pl.DataFrame:
    """The copies and memsets that blocked: a synchronous copy unless every copy row of it is device to
    device (with no row, by its name), an asynchronous copy with a row of pageable memory, a memset with
    a row of pinned or managed memory; each with its rows summed (their union's length: ``own_ns``)."""
    pageable = pl.col("src_kind").is_in([e.pageable]) | pl.col("dst_kind").is_in([e.pageable])
    summed = own.group_by("gpid", "correlation_id").agg(
        pl.len().cast(pl.Int64).alias("own_rows"),
        pl.col("bytes").sum().alias("own_bytes"),
        pageable.any().alias("_pageable"),
        (pl.col("copy_kind") != e.dtod).fill_null(True).any().alias("_not_dtod"),
        pl.col("mem_kind").is_in([e.pinned, e.managed]).any().alias("_host_memset"),
        pl.col("copy_kind").drop_nulls().first().alias("_copy_kind"),
        pl.concat([pl.col("src_kind"), pl.col("dst_kind"), pl.col("mem_kind")]).drop_nulls().unique().sort()
        .alias("_kinds"),
        pl.col("stream_id").first().alias("stream_id"),
        pl.col("device_id").first().alias("device_id"),
        pl.col("context_id").first().alias("context_id"),
    ).join(_union_length(own, ["gpid", "correlation_id"]), on=["gpid", "correlation_id"], how="left")
    sync = copies.filter(pl.col("kind") == "sync_copy").join(summed, on=["gpid", "correlation_id"], how="left")
    rowed = copies.filter(pl.col("kind") != "sync_copy").join(summed, on=["gpid", "correlation_id"], how="inner")
    has_own = pl.col("own_rows").is_not_null()
    blocked = (
        ((pl.col("kind") == "sync_copy") & (~has_own | pl.col("_not_dtod")))
        | ((pl.col("kind") == "async_copy") & pl.col("_pageable"))
        | ((pl.col("kind") == "sync_memset") & pl.col("_host_memset"))
    )
    labels, copy_labels = e.memory_labels, e.copy_labels
    return (
        pl.concat([sync, rowed])
        .filter(blocked.fill_null(False))
        .with_columns(
            pl.col("own_rows").fill_null(0),
            pl.col("own_ns").fill_null(0),
            # An id the export's enum tables do not name is said as the id (an export without them).
            pl.col("_copy_kind").replace_strict(copy_labels, default=pl.format("copyKind {}", "_copy_kind"),
                                                return_dtype=pl.String).alias("copy_kind"),
            pl.col("_kinds").list.eval(
                pl.element().replace_strict(labels, default=pl.format("memory kind {}", pl.element()),
                                            return_dtype=pl.String)
            ).list.join(", ").alias("memory_kinds"),
        )
    )


def _union_length(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """``keys..., own_ns``: per key the length of the union of its rows' [start, end] intervals."""
    if not rows.height:
        return pl.DataFrame(schema={**{k: pl.Int64 for k in keys}, "own_ns": pl.Int64})
    merged = _merge(rows.select(*keys, "start_ns", "end_ns").filter(pl.col("end_ns") >= pl.col("start_ns")), keys)
    return merged.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("own_ns"))


MergeWay = Literal["polars", "numpy"]


def _merge(rows: pl.DataFrame, keys: list[str], *, way: MergeWay | None = None) -> pl.DataFrame:
    """Per key, the union of the rows' intervals as disjoint sorted intervals (``keys, start_ns, end_ns``,
    in that order). By process (``keys`` ``["gpid"]``) with numpy (:func:`_merge_numpy`) from
    :data:`NUMPY_MIN_ROWS` rows, else in polars: the same frame."""
    if way is None:
        way = "numpy" if keys == ["gpid"] and rows.height >= NUMPY_MIN_ROWS else "polars"
    if way == "numpy":
        if keys != ["gpid"]:
            raise ValueError(f"numpy merges by process only, not by {keys}")
        return _merge_numpy(rows)
    reach = pl.col("end_ns").cum_max().over(keys)
    same = pl.all_horizontal([pl.col(k) == pl.col(k).shift(1) for k in keys])
    new = ~(same & (pl.col("start_ns") <= reach.shift(1))).fill_null(False)
    return (  # one query (each step alone costs 0.1-0.3 ms on a few rows)
        rows.lazy().sort(*keys, "start_ns")
        .with_columns(new.cum_sum().alias("_piece"))
        .group_by("_piece", maintain_order=True)
        .agg(*(pl.col(k).first() for k in keys), pl.col("start_ns").min(), pl.col("end_ns").max())
        .drop("_piece")
        .collect()
    )


def _merge_numpy(rows: pl.DataFrame) -> pl.DataFrame:
    """:func:`_merge` by process with numpy (a running maximum of the ends, per process; the processes
    in ascending order)."""
    import numpy as np

    parts = []
    for (gpid,), mine in sorted(rows.partition_by("gpid", as_dict=True).items(), key=lambda item: item[0]):
        s, e = mine["start_ns"].to_numpy(), mine["end_ns"].to_numpy()
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        new = np.ones(len(s), bool)
        new[1:] = s[1:] > reach[:-1]
        first = np.flatnonzero(new)
        last = np.append(first[1:], len(s)) - 1
        parts.append(pl.DataFrame({"gpid": np.full(len(first), gpid, np.int64), "start_ns": s[first],
                                   "end_ns": reach[last]}))
    return pl.concat(parts) if parts else rows.select("gpid", "start_ns", "end_ns").clear()


SCOPES = {"Stream": "stream", "Device": "device", "Ctx": "device", "Thread": "device", "Event": "event"}


def _detailed(calls: pl.DataFrame) -> pl.DataFrame:
    """The calls the reports say more of: the stalls and the :data:`LONGEST_CALLS` that blocked
    longest (of equals, the earliest, as :mod:`nsysaudit.analysis.stalls` lists them)."""
    blocked = pl.col("end_ns") - pl.col("start_ns")
    return calls.filter((blocked >= STALL_MIN_NS) | pl.col("call_id").is_in(_longest(calls).implode()))


def _longest(calls: pl.DataFrame) -> pl.Series:
    """The ids of the :data:`LONGEST_CALLS` first calls by blocked time, longest first (an unknown
    one first of all, as polars sorts NULL first), then start and id. Only the calls that can be
    among them are sorted, by their three keys: those at least as long as the longest
    ``LONGEST_CALLS`` less the unknown ones (10^6 blocking calls: a sort of a few dozen)."""
    keys = calls.select((pl.col("end_ns") - pl.col("start_ns")).alias("_b"), "start_ns", "call_id")
    known = keys["_b"].drop_nulls()
    wanted = LONGEST_CALLS - (keys.height - known.len())
    if 0 < wanted < known.len():
        keys = keys.filter(pl.col("_b").is_null() | (pl.col("_b") >= known.top_k(wanted).min()))
    order = keys.sort("_b", "start_ns", "call_id", descending=[True, False, False])
    return order.head(LONGEST_CALLS)["call_id"]


def _details(
    export: ExportFile, calls: pl.DataFrame, copies: pl.DataFrame, frame: FrameBuilder, typed: Counter[str],
    tables: dict[str, str],
) -> tuple[int, pl.DataFrame]:
    """:data:`DETAIL_SCHEMA` of the detailed calls (:func:`_detailed`): a copy's own rows summed, and
    each call's scope and stream (:func:`_synchronized`). Returns the synchronization rows joined too."""
    chosen = _detailed(calls).join(copies, on=["gpid", "correlation_id"], how="left").with_columns(
        pl.when(pl.col("kind").is_in(COPY_KINDS) & pl.col("stream_id").is_not_null())
        .then(pl.when(pl.col("kind") == "sync_memset").then(pl.lit(MEMSET)).otherwise(pl.lit(MEMCPY)))
        .otherwise(None).alias("stream_source"),
        pl.col("own_rows").fill_null(0),
    )
    rows, chosen = _synchronized(export, chosen, frame, typed, tables)
    return rows, chosen.select(list(DETAIL_SCHEMA)).sort("call_id")


def _synchronized(
    export: ExportFile, calls: pl.DataFrame, frame: FrameBuilder, typed: Counter[str], tables: dict[str, str]
) -> tuple[int, pl.DataFrame]:
    """Each call's scope (what it waited for) and, for an explicit synchronization, the stream,
    device and context its CUPTI_ACTIVITY_KIND_SYNCHRONIZATION row names (joined by process and
    correlation id; that row's syncType is not read: nsys releases number it differently, measured
    on the bundled exports). Returns the synchronization rows joined, and the calls."""
    name = pl.col("api").str.replace(r"_v\d+$", "")
    scope = (
        pl.when(pl.col("kind").is_in(["sync_copy", "async_copy", "sync_memset"])).then(pl.lit("stream"))
        .when(pl.col("kind") == "free").then(pl.lit("device"))
        .otherwise(
            name.str.extract(r"^cu(?:da)?(Stream|Device|Event|Ctx|Thread)Synchronize", 1)
            .replace_strict(SCOPES, default="unknown")
        )
    )
    calls = calls.with_columns(scope.alias("scope"))
    t = _usable(export, SYNC, "globalPid", "correlationId", "streamId")
    explicit = calls.filter(pl.col("kind") == "explicit")
    if t is None or not explicit.height:
        return 0, calls
    tables["synchronization"] = t.name
    corrs = explicit["correlation_id"].drop_nulls()
    if not corrs.len():
        return 0, calls
    wanted = corrs.unique().sort()
    schema: Schema = {"gpid": pl.Int64, "correlation_id": pl.Int64, "_sync_stream": pl.Int64, "_sync_device": pl.Int64,
                      "_sync_context": pl.Int64}
    # From the table's pages where the native reader can read them (1.2M rows at 20M API rows: 0.19 s
    # of SQLite's VDBE), else through SQLite: the same rows, in rowid order.
    columns = ("globalPid", "correlationId", "streamId",
               *(c if t.has(c) else "NULL" for c in ("deviceId", "contextId")))
    rows = _by_correlation(export, t, columns, schema, wanted, frame, typed)
    # One row per (process, correlation id); several rows for one call name it ambiguously: none is used.
    rows = rows.join(explicit.select("gpid", "correlation_id"), on=["gpid", "correlation_id"], how="semi")
    single = rows.filter(pl.len().over("gpid", "correlation_id") == 1)
    valid = pl.col("_sync_stream").is_not_null() & (pl.col("_sync_stream") != INVALID_ID)
    joined = calls.join(single, on=["gpid", "correlation_id"], how="left").with_columns(
        pl.when((pl.col("kind") == "explicit") & valid).then(pl.col("_sync_stream"))
        .otherwise(pl.col("stream_id")).alias("stream_id"),
        pl.when((pl.col("kind") == "explicit") & valid).then(pl.lit(SYNC))
        .otherwise(pl.col("stream_source")).alias("stream_source"),
        pl.coalesce("device_id", "_sync_device").alias("device_id"),
        pl.coalesce("context_id", "_sync_context").alias("context_id"),
    )
    return single.height, joined.drop("_sync_stream", "_sync_device", "_sync_context")


def _attributed_calls(calls: pl.DataFrame) -> pl.DataFrame:
    """``call_id, gpid, start_ns, end_ns`` of the calls whose work is attributed row by row
    (:data:`ATTRIBUTION_RULE`)."""
    waited = pl.col("end_ns") - pl.col("start_ns") - pl.col("own_ns")
    return (
        calls.filter(waited >= STALL_MIN_NS)
        .sort(waited, "start_ns", "call_id", descending=[True, False, False])
        .head(MAX_ATTRIBUTED_CALLS)
        .select("call_id", "gpid", "start_ns", "end_ns")
    )


# --- the pass over the GPU tables ------------------------------------------------------------------


@dataclass
class _Passed:
    behind: pl.DataFrame
    covered: pl.DataFrame
    attributed: pl.DataFrame
    rows: dict[str, int]
    covered_known: bool
    complete: bool
    unreadable: list[str]  # GPU tables without a column the pass needs
    outside: int = 0  # rows with a start or end outside the capture: damage, left out
    checked: dict[str, str] = field(default_factory=dict)  # GpuWork.checked


@dataclass
class _Acc:
    """What the batches add up to (added by the worker threads under ``lock``, read once they are done)."""

    behind: list[pl.DataFrame] = field(default_factory=list)
    pieces: list[pl.DataFrame] = field(default_factory=list)
    pieces_rows: int = 0
    attributed: list[pl.DataFrame] = field(default_factory=list)
    wrong: Counter[str] = field(default_factory=Counter)  # values of the wrong type, per table
    outside: int = 0
    checks: dict[str, list[str]] = field(default_factory=dict)  # per table, the page reader's check of each run
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class _Pages:
    """A run of a GPU table's leaves for the native page reader (:func:`nsysaudit.read.native.read_pages`)."""

    plan: native.Plan
    run: tuple[int, int]  # leaves [first, last)
    classes: bytes
    layout: list[int]


# (kind of work, SQLite's SELECT of the batch, its table, the page reader's run of the same rows or None)
_Batch = tuple[str, str, Table, "_Pages | None"]


def _plan(export: ExportFile, tables: dict[str, str], *, paged: bool) -> tuple[list[_Batch], list[str]]:
    """The batches to read and the GPU tables that lack a column the pass needs (not read); the
    tables read go into ``tables``, even one that holds no row. ``paged``: each batch a run of the
    table's leaves where the native page reader can read them (:func:`_page_runs`)."""
    work: list[_Batch] = []
    unreadable = []
    for kind, base in WORK_TABLES.items():
        t = _usable(export, base, *WORK_COLUMNS)
        if t is None:
            present = export.table(base)
            if present is not None:
                unreadable.append(present.name)
            continue
        tables[kind] = t.name
        work += [(kind, sql, t, pages) for sql, pages in _batches(export, t, paged=paged)]
    return work, unreadable


def _batches(export: ExportFile, t: Table, *, paged: bool = False) -> list[tuple[str, _Pages | None]]:
    """The SELECTs of ``t``'s work columns (and rowid), one per rowid range of :data:`BATCH_ROWS`
    rows, or (``paged``, where the page reader can) one per run of as many leaves as there are such
    ranges, with the run (its SELECT: the run's rowids, for SQLite to read where the reader gives
    the run back)."""
    rowid = rowid_name(export.conn, t.name, t.columns)
    columns = f"{rowid if rowid else 'NULL'}, start, \"end\", globalPid, streamId"
    select = f"SELECT {columns} FROM {quote(t.name)} NOT INDEXED"
    if rowid is None:
        return [(select, None)]
    # Two queries: SQLite seeks a lone min() or max() of the rowid in the b-tree (a few pages), but
    # both in one SELECT visit every row (2 s of CPU at 22.5M kernels). Where the seeks disagree (an
    # empty table, or a damaged b-tree: the damage check's to say), every row is visited, as before.
    (lo,) = export.conn.execute(f"SELECT min({rowid}) FROM {quote(t.name)} NOT INDEXED").fetchone()
    (hi,) = export.conn.execute(f"SELECT max({rowid}) FROM {quote(t.name)} NOT INDEXED").fetchone()
    if lo is None or hi is None or hi < lo:
        lo, hi = export.conn.execute(f"SELECT min({rowid}), max({rowid}) FROM {quote(t.name)} NOT INDEXED").fetchone()
    if lo is None:
        return []
    bounds = list(range(int(lo), int(hi) + 1, BATCH_ROWS))
    if paged:
        runs = _page_runs(export, t, len(bounds), WORK_COLUMNS, rowid=True)
        if runs:
            return [(f"{select} WHERE {rowid} BETWEEN {a} AND {b}", pages) for pages, a, b in runs]
    out: list[tuple[str, _Pages | None]] = []
    for i, first in enumerate(bounds):
        a = INT64_MIN if i == 0 else first
        b = INT64_MAX if i == len(bounds) - 1 else first + BATCH_ROWS - 1
        out.append((f"{select} WHERE {rowid} BETWEEN {a} AND {b}", None))
    return out


def _page_runs(
    export: ExportFile, t: Table, n: int, columns: Sequence[str], *, rowid: bool
) -> list[tuple[_Pages, int, int]]:
    """``t``'s leaves in ``n`` runs for the page reader to read ``columns`` of (``NULL``: none), after
    the rowid where ``rowid``, each run with its rowids ``lo..hi``; none where the reader cannot read
    the table (its plan unsure, a column it cannot decode: SQLite reads it)."""
    with uncounted(export.conn):  # the sqlite3 engine reads no declaration here
        classes = column_classes(export.conn, t.name)
        layout = page_layout(export.conn, t.name, {c: c for c in columns}, columns)
    if classes is None or layout is None:
        return []
    try:
        plan = native.plan(export.uri, t.name)
    except native.NativeScanError:
        return []
    if plan.why or plan.leaves < 1:
        return []
    return [(_Pages(plan, (first, last), classes, [PAGE_ROWID, *layout] if rowid else layout), lo, hi)
            for first, last, lo, hi in plan.runs(n)]


def _by_correlation(
    export: ExportFile, runtime: Table, columns: Sequence[str], schema: Schema, corrs: pl.Series,
    frame: FrameBuilder, typed: Counter[str], groups: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The CUDA API rows whose ``correlationId`` is one of ``corrs`` (sorted, unique; not empty), their
    ``columns`` (a name of the table's, or ``NULL``) as ``schema``, in rowid order. Where the native
    page reader can read the table, its leaves are read in two runs on two threads and only the rows
    of those ids kept (a run it gives back, or one holding a value of another type, is read by SQLite:
    the same rows, and the count of such values among them); else one SQLite query, each row visited
    by its VDBE (2 s at 20M rows). With ``groups`` (the scan's groups of the table's leaves and the
    least and greatest correlation id of their rows: ``CudaApiScan.corr_groups``), only the leaves
    of the groups whose bounds hold one of the ids are read, the same rows in the same order: no row
    of another group carries one (every leaf read as a whole again where a run is given back)."""
    ids = f"(SELECT value FROM json_each('{json.dumps(corrs.to_list())}'))"
    select = ", ".join(c if c == "NULL" else quote(c) for c in columns)
    sql = (f"SELECT {select} FROM {quote(runtime.name)} NOT INDEXED WHERE correlationId BETWEEN {int(corrs[0])} "
           f"AND {int(corrs[-1])} AND correlationId IN {ids}")
    rowid = rowid_name(export.conn, runtime.name, runtime.columns)
    runs = (_page_runs(export, runtime, 2, columns, rowid=False)
            if native.load() is not None and rowid is not None and "correlationId" in columns else [])
    if not runs:
        return _read(export, sql, schema, frame, typed, runtime.name)
    key = list(columns).index("correlationId")
    some = _grouped_runs(runs[0][0], groups, corrs) if groups is not None else None
    # on this thread, where they are at most half the leaves (else every leaf, on two threads)
    if some is not None and 2 * sum(p.run[1] - p.run[0] for p in some) <= runs[0][0].plan.leaves:
        read = [native.read_pages(export.uri, p.plan, p.run, p.classes, p.layout, schema, keys=(corrs, key))
                for p in some]
        if all(got.rows is not None and got.mismatched == 0 for got in read):
            kept = [got.rows for got in read if got.rows is not None]
            return pl.concat(kept) if kept else pl.DataFrame(schema=schema)

    def one(item: tuple[_Pages, int, int]) -> tuple[pl.DataFrame, int]:
        pages, lo, hi = item
        got = native.read_pages(export.uri, pages.plan, pages.run, pages.classes, pages.layout, schema,
                                keys=(corrs, key))
        if got.rows is not None and got.mismatched == 0:
            return got.rows, 0
        return native.read_ints(export.uri, f"{sql} AND {rowid} BETWEEN {lo} AND {hi}", schema)

    try:
        with ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="nsysaudit-api") as pool:
            parts = list(pool.map(one, runs))
    except native.NativeScanError:
        return _read(export, sql, schema, frame, typed, runtime.name)
    wrong = sum(w for _, w in parts)
    if wrong:
        typed[runtime.name] += wrong
    return pl.concat([rows for rows, _ in parts])


def _grouped_runs(pages: _Pages, groups: pl.DataFrame, corrs: pl.Series) -> list[_Pages]:
    """``pages`` (a run of the table's plan) as the runs of the ``groups`` (``first, last, lo, hi``:
    leaves and their rows' correlation ids) whose bounds hold one of ``corrs`` (sorted), adjacent
    groups in one run, in leaf order."""
    n = corrs.len()
    if not groups.height or not n:
        return []
    at = corrs.search_sorted(groups["lo"], side="left")  # the first id at or above each group's least
    hit = (at < n) & (corrs.gather(at.clip(upper_bound=n - 1)) <= groups["hi"])
    chosen = groups.filter(hit).sort("first")
    runs = (
        chosen.with_columns((pl.col("first") != pl.col("last").shift(1)).fill_null(True).cum_sum().alias("_run"))
        .group_by("_run", maintain_order=True)
        .agg(pl.col("first").min(), pl.col("last").max())
    )
    return [_Pages(pages.plan, (first, last), pages.classes, pages.layout) for first, last in
            runs.select("first", "last").iter_rows()]


PAGE_ROWID = -2  # in a page layout: the cell's rowid


WORK_ROW_SCHEMA: Schema = {"rowid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "gpid": pl.Int64,
                           "stream_id": pl.Int64}


def _pass(
    export: ExportFile, calls: pl.DataFrame, top: pl.DataFrame, frame: FrameBuilder, typed: Counter[str],
    tables: dict[str, str], progress: Progress | None, capture: Capture = NO_CAPTURE,
) -> _Passed:
    """Every row of the GPU tables once, in rowid batches, each reduced against the calls; a row dated
    outside the ``capture`` is damage, left out and counted."""
    windows = calls.filter(pl.col("end_ns") > pl.col("start_ns")).select(
        "call_id", "gpid", pl.col("start_ns").alias("a"), pl.col("end_ns").alias("b"))
    # Only behind the stalls, the per stream sums and the union (the sums' (call, stream) rows grow with
    # calls x streams: a trace of 10^6 short synchronizations would hold 10^7 of them, and the rows
    # inside them all, millions of separate intervals).
    stalls = windows.filter(pl.col("b") - pl.col("a") >= STALL_MIN_NS)
    spans = union_windows(stalls.select(pl.col("gpid").alias("gtid"), pl.col("a").alias("start_ns"),
                                        pl.col("b").alias("end_ns")))
    top_spans = union_windows(top.select(pl.col("gpid").alias("gtid"), "start_ns", "end_ns"))
    acc = _Acc()
    work, unreadable = _plan(export, tables, paged=native.load() is not None)
    rows = {kind: 0 for kind in WORK_TABLES if kind in tables}
    threads = 2 if native.load() is not None and len(work) > 1 else 1
    keep = _keep(spans, stalls, top_spans, capture)
    if progress is not None and work:
        progress.start(f"reading GPU activity ({len(work)} batch(es))", len(work))

    def one(item: _Batch, reduced: _Acc, threaded: bool) -> tuple[str, int]:
        kind = item[0]
        batch, n, kept, added = _batch_rows(export, item, keep, reduced, frame, typed, threaded=threaded)
        if capture.bounded:
            before = batch.height
            batch = batch.filter(~(capture.outside(pl.col("start_ns")) | capture.outside(pl.col("end_ns"))))
            with reduced.lock:
                reduced.outside += before - batch.height
        _reduce(kind, batch, stalls, spans, top, reduced, top_spans, kept=kept, added=added)
        if progress is not None:
            progress.advance(1)
        return kind, n

    try:
        done = None
        if threads > 1:
            try:
                with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="nsysaudit-gpu") as pool:
                    done = list(pool.map(lambda item: one(item, acc, True), work))
            except native.NativeScanError:  # read again, one batch at a time, as the fallback reads
                acc = _Acc()
        if done is None:
            done = [one(item, acc, False) for item in work]
    finally:
        if progress is not None and work:
            progress.finish()
    typed.update({t: n for t, n in acc.wrong.items() if n})
    for kind, n in done:
        rows[kind] += n
    behind = (
        pl.concat(acc.behind).group_by("call_id", "work", "stream_id")
        .agg(pl.col("rows").sum(), pl.col("busy_ns").sum())
        if acc.behind else pl.DataFrame(schema=BEHIND_SCHEMA)
    )
    # Without the kernels no claim that the device did nothing: the union of the rest is not the union.
    covered_known = acc.pieces_rows <= MAX_BUSY_INTERVALS and "kernel" in rows
    covered = pl.DataFrame(schema={"call_id": pl.Int64, "covered_ns": pl.Int64})
    if covered_known:
        merged = (
            _merge(pl.concat(acc.pieces), ["gpid"]) if acc.pieces
            else pl.DataFrame(schema={"gpid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64})
        )
        covered = _sums(stalls, merged.with_columns(pl.lit(0, dtype=pl.Int64).alias("stream_id")))
        covered = stalls.select("call_id").join(
            covered.select("call_id", pl.col("busy_ns").alias("covered_ns")), on="call_id", how="left"
        ).with_columns(pl.col("covered_ns").fill_null(0))
    attributed = (
        pl.concat(acc.attributed).sort("call_id", "start_ns", "work", "rowid") if acc.attributed
        else pl.DataFrame(schema=_PAIR_SCHEMA)
    )
    complete = attributed.height <= MAX_ATTRIBUTED_ROWS
    return _Passed(behind.select(list(BEHIND_SCHEMA)), covered, attributed.head(MAX_ATTRIBUTED_ROWS), rows,
                   covered_known, complete, unreadable, acc.outside, _checked(work, acc.checks))


def _keep(spans: pl.DataFrame, stalls: pl.DataFrame, top_spans: pl.DataFrame, capture: Capture) -> native.Keep:
    """What the page reader keeps: only the rows _reduce can use (inside a stall's span) and those it
    must judge (a NULL or outside the capture): at 20M rows a third of the rows, and no frame of the
    rest. Of those it adds up itself the rows _reduce would only add up (native.Stalls: not the rows
    behind the attributed calls, ``top_spans``, nor a row it must judge): no frame of them either."""
    return native.Keep(spans.rename({"gtid": "gpid"}), capture.start_ns, capture.stop_ns, (3, 1, 2),
                       native.Stalls(stalls, top_spans.rename({"gtid": "gpid"}), 4))


def _checked(work: list[_Batch], checks: dict[str, list[str]]) -> dict[str, str]:
    """:attr:`GpuWork.checked`: a table every batch of which the page reader read (and so checked:
    the plan its interior pages, each run its leaves) is sound where every check is; one with a run
    it doubted is not (the first doubt said); the rest (read by SQLite, whole or in part) are left
    out: the damage check reads them."""
    batches = Counter(t.name for _, _, t, _ in work)
    paged = Counter(t.name for _, _, t, pages in work if pages is not None)
    out = {}
    for name, runs in checks.items():
        doubts = [why for why in runs if why]
        if doubts:
            out[name] = doubts[0]
        elif len(runs) == batches[name] == paged[name]:
            out[name] = ""
    return out


def _batch_rows(
    export: ExportFile, item: _Batch, keep: native.Keep, reduced: _Acc, frame: FrameBuilder, typed: Counter[str],
    *, threaded: bool,
) -> tuple[pl.DataFrame, int, bool, _Added | None]:
    """One batch's rows, how many rows it read, whether the page reader kept them (``keep``), and
    what it added up of them itself (the rows not returned: :class:`nsysaudit.read.native.Stalls`).
    ``threaded``: on a worker thread, the native reader only (its own connection; its values of another
    type counted into ``reduced``); else the batch's SELECT as :func:`_read` reads it."""
    _, sql, t, pages = item
    if not threaded:
        batch = _read(export, sql, WORK_ROW_SCHEMA, frame, typed, t.name)
        return batch, batch.height, False, None
    read = (
        native.read_pages(export.uri, pages.plan, pages.run, pages.classes, pages.layout, WORK_ROW_SCHEMA, keep)
        if pages is not None else None
    )
    added = None
    if read is not None and read.rows is not None:  # the rows it kept, of n read
        batch, wrong, n = read.rows, read.mismatched, read.visited
        kept = True
        if read.sums is not None and read.pieces is not None:
            added = (read.sums, read.pieces)
    else:  # SQLite reads the run (or the batch)
        batch, wrong = native.read_ints(export.uri, sql, WORK_ROW_SCHEMA)
        n, kept = batch.height, False
    with reduced.lock:
        reduced.wrong[t.name] += wrong
        if read is not None:  # the run's leaves checked, whoever read its rows
            reduced.checks.setdefault(t.name, []).append(read.check)
    return batch, n, kept, added


_Added = tuple[pl.DataFrame, pl.DataFrame]  # the page reader's sums and union pieces (native.PagesRead)

_PAIR_SCHEMA: Schema = {"call_id": pl.Int64, "work": pl.String, "rowid": pl.Int64, "gpid": pl.Int64,
                        "stream_id": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "overlap_ns": pl.Int64}


def _reduce(kind: str, batch: pl.DataFrame, windows: pl.DataFrame, spans: pl.DataFrame, top: pl.DataFrame,
            acc: _Acc, top_spans: pl.DataFrame | None = None, *, kept: bool = False,
            added: _Added | None = None) -> None:
    """One batch of work rows against the calls' windows: the per (call, stream) sums behind the stalls
    (``windows``), the merged intervals inside some call (``spans``: the calls' windows' union), the
    rows behind the attributed calls (``top``; ``top_spans``, their windows' union, picks the rows
    that can overlap one before they are paired with them); added to ``acc`` under its lock (batches
    are reduced on two threads: what is kept never depends on which finishes first). ``kept``: the
    page reader kept the batch's rows (:class:`nsysaudit.read.native.Keep`): each with a known start,
    end and process inside the capture overlaps a span already, :func:`_inside`'s test made in C.
    ``added``: the sums and union pieces of the batch's rows the page reader added up itself (not in
    ``batch``): the batch's numbers are theirs and those of its rows."""
    work = batch.filter(
        pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null() & pl.col("gpid").is_not_null()
        & pl.col("stream_id").is_not_null() & (pl.col("end_ns") >= pl.col("start_ns"))
    )
    if not work.height or not spans.height:
        inside = work.clear()
    elif kept:  # the page reader's test already
        inside = work
    else:
        inside = _inside(work, spans)
    more_sums, more_pieces = added if added is not None and added[1].height else (None, None)
    if not inside.height and more_pieces is None:
        return
    sums = _batch_sums(inside, windows)
    pieces = _merge(inside.select("gpid", "start_ns", "end_ns"), ["gpid"]) if inside.height else None
    if more_pieces is not None:  # the union of both: merged again where the batch has rows of its own
        pieces = more_pieces if pieces is None else _merge(pl.concat([pieces, more_pieces]), ["gpid"])
    assert pieces is not None
    pairs = pl.DataFrame(schema=_PAIR_SCHEMA)
    if top.height and inside.height:
        near_top = _inside(inside, top_spans) if top_spans is not None else inside
        pairs = (
            near_top.join(top.rename({"start_ns": "a", "end_ns": "b"}), on="gpid")
            .filter((pl.col("start_ns") < pl.col("b")) & (pl.col("end_ns") > pl.col("a")))
            .select("call_id", pl.lit(kind).alias("work"), "rowid", "gpid", "stream_id", "start_ns", "end_ns",
                    (pl.min_horizontal("end_ns", "b") - pl.max_horizontal("start_ns", "a")).alias("overlap_ns"))
            .sort("call_id", "start_ns", "work", "rowid")
            .head(MAX_ATTRIBUTED_ROWS + 1)  # the rows kept are the first in this order over every batch
        )
    with acc.lock:
        for part in (sums, more_sums):
            if part is not None:
                acc.behind.append(part.with_columns(pl.lit(kind).alias("work")).select(list(BEHIND_SCHEMA)))
        acc.pieces_rows += pieces.height
        if acc.pieces_rows > MAX_BUSY_INTERVALS:
            acc.pieces.clear()  # the union is unknown (covered_known false): the memory is freed
        else:
            acc.pieces.append(pieces)
        if pairs.height:
            acc.attributed.append(pairs)


def _batch_sums(inside: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame | None:
    """:func:`_sums` of the batch's rows inside some span against the windows near them (None: no row)."""
    if not inside.height:
        return None
    span = inside.group_by("gpid").agg(pl.col("start_ns").min().alias("_lo"), pl.col("end_ns").max().alias("_hi"))
    near = windows.join(span, on="gpid").filter((pl.col("a") < pl.col("_hi")) & (pl.col("b") > pl.col("_lo")))
    return _sums(near.drop("_lo", "_hi"), inside)


def _inside(work: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """The rows inside some call's window: the first window of the process ending after the row's
    start overlaps it iff it starts before the row's end (a process's windows are disjoint, sorted)."""
    if work.height >= NUMPY_MIN_ROWS:
        import numpy as np

        keep = np.zeros(work.height, bool)
        gpid, s, e = work["gpid"].to_numpy(), work["start_ns"].to_numpy(), work["end_ns"].to_numpy()
        for (g,), w in spans.partition_by("gtid", as_dict=True).items():
            mine = gpid == g
            ws, we = w["w_start"].to_numpy(), w["w_end"].to_numpy()
            k = np.searchsorted(we, s[mine], "right")
            hit = k < len(we)
            hit[hit] = ws[k[hit]] < e[mine][hit]
            keep[np.flatnonzero(mine)[hit]] = True
        return work.filter(pl.Series(keep))
    return (
        work.sort("start_ns")
        .join_asof(spans.rename({"gtid": "gpid"}), left_on="start_ns", right_on="w_end", by="gpid",
                   strategy="forward", allow_exact_matches=False, check_sortedness=False)
        .filter(pl.col("w_start") < pl.col("end_ns"))
        .drop("w_start", "w_end")
    )


NUMPY_MIN_ROWS = 10_000  # from this many work rows or windows a batch is summed with numpy
SUMS_SCHEMA: Schema = {"call_id": pl.Int64, "stream_id": pl.Int64, "rows": pl.Int64, "busy_ns": pl.Int64}


SumsWay = Literal["pairs", "as-of", "numpy"]


def _sums(windows: pl.DataFrame, work: pl.DataFrame, *, way: SumsWay | None = None) -> pl.DataFrame:
    """``call_id, stream_id, rows, busy_ns``: per window and stream, the ``work`` rows overlapping it
    and the sum of their parts inside it (:func:`_sums_polars` says how). A few rows and windows are
    summed over their pairs (:func:`_sums_pairs`), large batches with numpy's binary searches per
    stream (:func:`_sums_numpy`): the same sums."""
    if not windows.height or not work.height:
        return pl.DataFrame(schema=SUMS_SCHEMA)
    if way is None:
        way = ("pairs" if windows.height * work.height <= PAIRS_MAX
               else "numpy" if max(work.height, windows.height) >= NUMPY_MIN_ROWS else "as-of")
    if way == "pairs":
        return _sums_pairs(windows, work)
    if way == "numpy":
        summed = _sums_numpy(windows, work)
        if summed is not None:
            return summed
    return _sums_polars(windows, work)


def _sums_pairs(windows: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """:func:`_sums` by its definition: every (window, row) pair of a process that overlaps, counted
    and its overlap added up (in 128 bits, as :func:`_sums_polars`), in one query."""
    a, b, s, e = (pl.col(c).cast(pl.Int128) for c in ("a", "b", "start_ns", "end_ns"))
    return (
        windows.lazy().select("call_id", "gpid", "a", "b")
        .join(work.lazy().select("gpid", "stream_id", "start_ns", "end_ns"), on="gpid")
        .filter((s < b) & (e > a))
        .group_by("call_id", "stream_id")
        .agg(pl.len().cast(pl.Int64).alias("rows"), (pl.min_horizontal(e, b) - pl.max_horizontal(s, a)).sum()
             .cast(pl.Int64).alias("busy_ns"))
        .collect()
    )


def _sums_numpy(windows: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame | None:
    """:func:`_sums_polars`' sums per (process, stream) with numpy: the starts and ends sorted, their
    prefix sums, the windows' edges found by binary search; times relative to the stream's first
    start. None where a product could pass 2^62 (then the polars sums, in 128 bits, are used)."""
    import numpy as np

    by_gpid = {g: f for (g,), f in windows.partition_by("gpid", as_dict=True).items()}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    for (gpid, stream), rows in work.partition_by("gpid", "stream_id", as_dict=True).items():
        mine = by_gpid.get(gpid)
        if mine is None:
            continue
        s = rows["start_ns"].to_numpy()
        e = rows["end_ns"].to_numpy()
        lo, hi = int(s.min()), int(e.max())
        a_all, b_all = mine["a"].to_numpy(), mine["b"].to_numpy()
        near = (a_all < hi) & (b_all > lo)
        if not near.any():
            continue
        a, b = a_all[near] - lo, b_all[near] - lo
        n, span = len(s), hi - lo
        if span * (n + 1) >= 1 << 62:
            return None
        starts, ends = np.sort(s - lo), np.sort(e - lo)
        ps = np.concatenate(([0], np.cumsum(starts)))
        pe = np.concatenate(([0], np.cumsum(ends)))

        count = np.searchsorted(starts, b, "left") - np.searchsorted(ends, a, "right")
        # Outside the rows' span F is flat: the edges clipped to it give the same, exact sums.
        busy = (_before(np.clip(b, 0, span), starts, ends, ps, pe)
                - _before(np.clip(a, 0, span), starts, ends, ps, pe))
        keep = count > 0
        parts.append((mine["call_id"].to_numpy()[near][keep], np.full(int(keep.sum()), stream, np.int64),
                      count[keep], busy[keep]))
    if not parts:
        return pl.DataFrame(schema=SUMS_SCHEMA)
    return pl.DataFrame(
        {name: np.concatenate([p[i] for p in parts]).astype(np.int64) for i, name in enumerate(SUMS_SCHEMA)},
        schema=SUMS_SCHEMA,
    )


def _before(t: np.ndarray, starts: np.ndarray, ends: np.ndarray, ps: np.ndarray, pe: np.ndarray) -> np.ndarray:
    """F(t) of :func:`_sums_polars` (numpy arrays): over the rows, the sum of their parts before ``t``."""
    import numpy as np

    ns, ne = np.searchsorted(starts, t, "left"), np.searchsorted(ends, t, "left")
    before: np.ndarray = t * ns - ps[ns] - t * ne + pe[ne]
    return before


def _sums_polars(windows: pl.DataFrame, work: pl.DataFrame) -> pl.DataFrame:
    """``call_id, stream_id, rows, busy_ns``: per window (``call_id, gpid, a, b``) and stream of its
    process, how many ``work`` rows (``gpid, stream_id, start_ns, end_ns``) overlap it and the sum of
    their parts inside it, without forming (window, row) pairs.

    With F(t) = sum over rows of |[s, e] before t| = t*Ns(t) - Ss(t) - t*Ne(t) + Se(t) (Ns, Ss: the
    count and sum of the starts before t; Ne, Se: of the ends), a window's sum is F(b) - F(a), and its
    rows those starting before b less those ending at or before a. Each count and sum is an as-of
    join by (process, stream) over the rows sorted by start, or by end (computed in 128 bits: the
    sums of timestamps pass 2^63 on large traces). It holds for any rows, overlapping or not."""
    if not windows.height or not work.height:
        return pl.DataFrame(schema={"call_id": pl.Int64, "stream_id": pl.Int64, "rows": pl.Int64, "busy_ns": pl.Int64})
    by = ["gpid", "stream_id"]

    def ranked(column: str) -> pl.DataFrame:
        return (
            work.select(*by, pl.col(column).alias("t"))
            .sort(*by, "t")
            .with_columns(
                pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over(by).alias("n"),
                pl.col("t").cast(pl.Int128).cum_sum().over(by).alias("s"),
            )
            .sort("t")
        )

    starts, ends = ranked("start_ns"), ranked("end_ns")
    streams = work.select(*by).unique()
    q = windows.join(streams, on="gpid")

    def at(edge: str, table: pl.DataFrame, tag: str, exact: bool) -> pl.DataFrame:
        return (
            q.select("call_id", *by, edge)
            .sort(edge)
            .join_asof(table.rename({"t": f"_t{tag}"}), left_on=edge, right_on=f"_t{tag}", by=by,
                       strategy="backward", allow_exact_matches=exact, check_sortedness=False)
            .select("call_id", "stream_id", pl.col("n").fill_null(0).alias(f"n{tag}"),
                    pl.col("s").fill_null(0).cast(pl.Int128).alias(f"s{tag}"))
        )

    keys = ["call_id", "stream_id"]
    joined = (
        q.select(*keys, pl.col("a").cast(pl.Int128), pl.col("b").cast(pl.Int128))
        .join(at("a", starts, "sa", False), on=keys)
        .join(at("b", starts, "sb", False), on=keys)
        .join(at("a", ends, "ea", False), on=keys)
        .join(at("b", ends, "eb", False), on=keys)
        .join(at("a", ends, "ela", True).select(*keys, "nela"), on=keys)
    )
    f_b = pl.col("b") * pl.col("nsb") - pl.col("ssb") - pl.col("b") * pl.col("neb") + pl.col("seb")
    f_a = pl.col("a") * pl.col("nsa") - pl.col("ssa") - pl.col("a") * pl.col("nea") + pl.col("sea")
    return joined.select(
        *keys,
        (pl.col("nsb") - pl.col("nela")).alias("rows"),
        (f_b - f_a).cast(pl.Int64).alias("busy_ns"),
    ).filter(pl.col("rows") > 0)


def _without_own(behind: pl.DataFrame, calls: pl.DataFrame, own: pl.DataFrame) -> pl.DataFrame:
    """``behind`` less each copy's or memset's own rows (they are the call's own time, ``own_ns``)."""
    order = dict(by=["call_id", "busy_ns", "work", "stream_id"], descending=[False, True, False, False])
    if not own.height or not behind.height:
        return behind.sort(**order)  # type: ignore[arg-type]
    mine = (
        own.join(calls.select("call_id", "gpid", "correlation_id", pl.col("start_ns").alias("a"),
                              pl.col("end_ns").alias("b")), on=["gpid", "correlation_id"])
        .filter((pl.col("start_ns") < pl.col("b")) & (pl.col("end_ns") > pl.col("a")) | (
            (pl.col("start_ns") == pl.col("end_ns")) & (pl.col("start_ns") > pl.col("a"))
            & (pl.col("start_ns") < pl.col("b"))))
        .group_by("call_id", "work", "stream_id")
        .agg(pl.len().cast(pl.Int64).alias("_rows"),
             (pl.min_horizontal("end_ns", "b") - pl.max_horizontal("start_ns", "a")).clip(0).sum().alias("_ns"))
    )
    return (
        behind.join(mine, on=["call_id", "work", "stream_id"], how="left")
        .with_columns((pl.col("rows") - pl.col("_rows").fill_null(0)).alias("rows"),
                      (pl.col("busy_ns") - pl.col("_ns").fill_null(0)).alias("busy_ns"))
        .filter(pl.col("rows") > 0)
        .select(list(BEHIND_SCHEMA))
        .sort(**order)  # type: ignore[arg-type]
    )


# --- the launches of the attributed rows -----------------------------------------------------------


def _launches(
    export: ExportFile, pairs: pl.DataFrame, cuda_api_table: str | None, frame: FrameBuilder, typed: Counter[str],
    tables: dict[str, str], corr_groups: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The attributed rows with their correlation id, name, bytes and device (read by rowid), and
    their launch: the one CUDA API row of the process with that correlation id (the CUDA API table
    searched by correlation id: only the scan's ``corr_groups`` that can hold one, where given)."""
    if not pairs.height:
        return pl.DataFrame(schema=ATTRIBUTED_SCHEMA)
    parts = []
    for kind, base in WORK_TABLES.items():
        mine = pairs.filter(pl.col("work") == kind)
        t = export.table(base)
        if not mine.height or t is None:
            continue
        name = "shortName" if kind == "kernel" and t.has("shortName") else "NULL"
        ids = json.dumps(mine["rowid"].unique().sort().to_list())
        extra = _read(
            export,
            f"SELECT rowid, correlationId, {_col(t, 'deviceId')}, {_col(t, 'bytes') if kind != 'kernel' else 'NULL'}, "
            f"{name}, {_col(t, 'copyKind') if kind == 'memcpy' else 'NULL'} FROM {quote(t.name)} NOT INDEXED "
            f"WHERE rowid IN (SELECT value FROM json_each('{ids}'))",
            {"rowid": pl.Int64, "correlation_id": pl.Int64, "device_id": pl.Int64, "bytes": pl.Int64,
             "_name_id": pl.Int64, "_copy_kind": pl.Int64},
            frame, typed, t.name,
        )
        parts.append(mine.join(extra, on="rowid", how="left"))
    rows = pl.concat(parts)
    names = _strings_of(export, rows["_name_id"], ("_name_id", "_kernel"), frame, typed)
    enums = read_enums(export)
    rows = rows.join(names, on="_name_id", how="left").with_columns(
        pl.when(pl.col("work") == "kernel").then(pl.col("_kernel"))
        .when(pl.col("work") == "memcpy").then(
            pl.col("_copy_kind").replace_strict(enums.copy_labels, default=pl.col("_copy_kind").cast(pl.String),
                                                return_dtype=pl.String))
        .otherwise(pl.lit(None, dtype=pl.String)).alias("name")
    )
    launches = pl.DataFrame(schema={"gpid": pl.Int64, "correlation_id": pl.Int64, "launch_gtid": pl.Int64,
                                    "launch_start_ns": pl.Int64, "launch_api": pl.String})
    corrs = rows["correlation_id"].drop_nulls().unique().sort()
    runtime = export.table(cuda_api_table) if cuda_api_table is not None else None
    if runtime is not None and corrs.len():
        tables["launches"] = runtime.name
        found = _by_correlation(
            export, runtime, ("globalTid", "start", "correlationId", "nameId"),
            {"launch_gtid": pl.Int64, "launch_start_ns": pl.Int64, "correlation_id": pl.Int64, "_api_id": pl.Int64},
            corrs, frame, typed, corr_groups,
        ).with_columns(global_pid(pl.col("launch_gtid")).alias("gpid"))
        # A correlation id several rows of the process carry names no single launch: left unknown.
        found = found.filter(pl.len().over("gpid", "correlation_id") == 1)
        apis = _strings_of(export, found["_api_id"], ("_api_id", "launch_api"), frame, typed)
        launches = found.join(apis, on="_api_id", how="left").select(list(launches.schema))
    return (
        rows.join(launches, on=["gpid", "correlation_id"], how="left")
        .sort("call_id", "start_ns", "work", "rowid")
        .select(list(ATTRIBUTED_SCHEMA))
    )


def blocking_candidates(marked: pl.DataFrame, failed: pl.DataFrame, prepared: Prepared | None) -> pl.DataFrame:
    """The CUDA API rows of a blocking name (``CANDIDATE_SCHEMA`` and ``kind``): the successful ones
    the scan marked, and the failed ones (a failed synchronization blocked the host too). An
    asynchronous copy is kept only where a copy row of its process and correlation id is of pageable
    memory (millions of them are marked; a few are candidates)."""
    schema = {**CANDIDATE_SCHEMA, "kind": pl.String}
    if prepared is None:
        return pl.DataFrame(schema=schema)
    keep = prepared.name_ids.select("name_id", "kind")
    ok = marked.join(keep, on="name_id", how="inner")
    bad = failed.filter(pl.col("return_code").is_null() | (pl.col("return_code") != 0)).join(keep, on="name_id")
    rows = pl.concat([ok, bad]).select(*CANDIDATE_SCHEMA, "kind")
    pageable = prepared.pageable.select("gpid", "correlation_id").unique()
    copy = pl.col("kind") == "async_copy"
    if rows.select((~copy).fill_null(False).all()).item():  # no copy (10^6 synchronizations): no copy of them
        return rows
    copies = rows.filter(copy).with_columns(global_pid(pl.col("gtid")).alias("gpid")).join(
        pageable, on=["gpid", "correlation_id"], how="semi").drop("gpid")
    return pl.concat([rows.filter(~copy), copies])


__all__ = [
    "ATTRIBUTION_RULE",
    "STALL_MIN_NS",
    "GpuWork",
    "Prepared",
    "blocking_candidates",
    "prepare",
    "read_gpu_work",
]
