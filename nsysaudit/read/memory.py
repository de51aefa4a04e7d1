"""Device-memory evidence: every CUDA_GPU_MEMORY_USAGE_EVENTS row, read once, and each device's total.

nsys records an allocation (+) and a deallocation (-) event for every device, pinned or managed
allocation the CUDA trace saw (``--cuda-memory-usage=true``), with its bytes, kind, device, process
and address; an allocation from a CUDA memory pool (``cudaMallocAsync``) also carries the pool's
address, release threshold, size and utilized size at that event, and one from a pool imported from
another process that pool's address and owner. From this one frame come the per-call allocation
bytes the joins attach (grouped by (globalPid, correlationId); correlation id 0, memory the driver
allocates itself, joins nothing) and the ledger of live bytes (:mod:`nsysaudit.analysis.ledger`).
``CUDA_GPU_MEMORY_POOL_EVENTS`` says when a pool was created, trimmed or destroyed, with its size
then; ``TARGET_INFO_GPU`` gives each device's total memory.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import polars as pl

from nsysaudit.core.ids import vm_sql
from nsysaudit.core.order import sort_stable
from nsysaudit.core.shapes import Schema
from nsysaudit.read import native
from nsysaudit.read.source import ExportFile, Table, quote
from nsysaudit.read.unique import one_per_key

EVENT_SCHEMA: Schema = {
    "start_ns": pl.Int64,
    "gpid": pl.Int64,
    "device_id": pl.Int64,
    "address": pl.Int64,
    "bytes": pl.Int64,
    "mem_kind": pl.Int64,
    "operation": pl.Int64,
    "correlation_id": pl.Int64,
    # The pool columns (NULL for memory outside a pool, and where the export has no such column).
    "pool_address": pl.Int64,
    "pool_threshold": pl.Int64,
    "pool_size": pl.Int64,
    "pool_utilized": pl.Int64,
    "imported_pool_address": pl.Int64,
    "imported_pool_pid": pl.Int64,
}
POOL_COLUMNS = {
    "pool_address": "localMemoryPoolAddress",
    "pool_threshold": "localMemoryPoolReleaseThreshold",
    "pool_size": "localMemoryPoolSize",
    "pool_utilized": "localMemoryPoolUtilizedSize",
    "imported_pool_address": "importedMemoryPoolAddress",
    "imported_pool_pid": "importedMemoryPoolProcessId",
}
# CUDA_GPU_MEMORY_POOL_EVENTS, ``operation`` normalized to POOL_CREATED / POOL_DESTROYED / POOL_TRIMMED
# (null: another or unknown operation) and ``pool_type`` to 1 local / 2 imported (null: unknown).
POOL_EVENT_SCHEMA: Schema = {
    "start_ns": pl.Int64,
    "gpid": pl.Int64,
    "device_id": pl.Int64,
    "address": pl.Int64,
    "operation": pl.Int64,
    "pool_type": pl.Int64,
    "correlation_id": pl.Int64,
    "min_bytes_to_keep": pl.Int64,
    "pool_threshold": pl.Int64,
    "pool_size": pl.Int64,
    "pool_utilized": pl.Int64,
}
POOL_CREATED, POOL_DESTROYED, POOL_TRIMMED = 1, 2, 3  # ENUM_CUDA_MEMPOOL_OPER of nsys 2023.4 to 2025.3
POOL_LOCAL, POOL_IMPORTED = 1, 2  # ENUM_CUDA_MEMPOOL_TYPE
DEVICE_SCHEMA: Schema = {"vm": pl.Int64, "device_id": pl.Int64, "name": pl.String, "total_bytes": pl.Int64}
# MemoryEvidence.devices: DEVICE_SCHEMA, one row per device, and whether its rows disagree about the total.
DEVICES_SCHEMA: Schema = {**DEVICE_SCHEMA, "total_disagrees": pl.Boolean}
ALLOC_SCHEMA: Schema = {"gpid": pl.Int64, "correlation_id": pl.Int64, "bytes": pl.Int64, "events": pl.Int64}
SPAN_SCHEMA: Schema = {"gpid": pl.Int64, "first_ns": pl.Int64, "last_ns": pl.Int64, "rows": pl.Int64}
# ENUM_CUDA_MEM_KIND of nsys 2022.2 through 2026.2, for exports without the enum table.
MEM_KINDS_FALLBACK = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
ALLOCATION, DEALLOCATION = 0, 1  # ENUM_CUDA_DEV_MEM_EVENT_OPER fallback


class FrameBuilder(Protocol):
    """The strict frame builder of :mod:`nsysaudit.read.trace` (its ``frame``): the rows of ``sql`` as
    a frame with exactly ``schema``, a value whose type contradicts its column NULL and counted in
    ``mismatched[source]``."""

    def __call__(
        self, conn: sqlite3.Connection, sql: str, schema: Schema, *, mismatched: Counter[str] | None = None,
        source: str = "",
    ) -> pl.DataFrame: ...


@dataclass(frozen=True)
class MemoryEvidence:
    """What the export says about device memory.

    - ``events``: every event (:data:`EVENT_SCHEMA`), ``operation`` normalized to 0 (allocation) / 1
      (deallocation) / null (unknown); sorted by time.
    - ``devices``: ``vm, device_id, name, total_bytes, total_disagrees`` from TARGET_INFO_GPU, one row
      per device (``total_bytes`` null where the export does not say, or where its rows disagree:
      ``total_disagrees``).
    - ``kinds``: memKind id -> name (the export's ENUM_CUDA_MEM_KIND labels).
    - ``allocations``: allocation events grouped by (globalPid, correlationId) for the joins, without
      correlation id 0 or NULL; ``bytes`` null where any event's size is unknown.
    - ``unattributed``: ``gpid, events, bytes`` of allocation events with correlation id 0 or NULL.
    - ``span``: per globalPid the first and last event and the row count (coverage).
    - ``unsized``: allocation events whose bytes are NULL or not an integer.
    - ``table``: the table read, or None when the export has none usable.
    - ``pool_events``: CUDA_GPU_MEMORY_POOL_EVENTS (:data:`POOL_EVENT_SCHEMA`), sorted by time; empty
      where the export has no such table (``pool_table`` None).
    - ``pool_columns``: whether the usage table has the pool columns (``localMemoryPoolSize``...).
    """

    events: pl.DataFrame
    devices: pl.DataFrame
    kinds: dict[int, str]
    allocations: pl.DataFrame
    unattributed: pl.DataFrame
    span: pl.DataFrame
    unsized: int
    table: str | None
    pool_events: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=POOL_EVENT_SCHEMA))
    pool_table: str | None = None
    pool_columns: bool = False




def _enum_ids(export: ExportFile, table: str) -> dict[str, int]:
    t = export.table(table)
    if t is None or not t.has("id", "name"):
        return {}
    out: dict[str, int] = {}
    for key, name in export.conn.execute(f"SELECT id, name FROM {quote(t.name)}"):
        if type(key) is int and isinstance(name, str):
            out[name] = key
    return out


def _mem_kinds(export: ExportFile) -> dict[int, str]:
    t = export.table("ENUM_CUDA_MEM_KIND")
    if t is None or not t.has("id"):
        return dict(MEM_KINDS_FALLBACK)
    label = "label" if t.has("label") else "name"
    kinds = {
        key: name
        for key, name in export.conn.execute(f"SELECT id, {quote(label)} FROM {quote(t.name)}")
        if type(key) is int and isinstance(name, str)
    }
    return kinds or dict(MEM_KINDS_FALLBACK)


def _usable(export: ExportFile) -> Table | None:
    mem = export.table("CUDA_GPU_MEMORY_USAGE_EVENTS")
    return mem if mem is not None and mem.has("start", "globalPid", "bytes", "correlationId") else None


class _Plan(NamedTuple):
    """How the events are read: ``ordered`` (time, then rowid: the frame builder's SQL), ``by_start``
    (time alone, where the table has no rowid), ``unordered`` (table order with the rowid as a last
    column, for the native reader; None where a declared column named rowid hides it)."""

    ordered: str
    by_start: str
    unordered: str | None


def _plan(export: ExportFile, mem: Table) -> _Plan:
    """The columns of :data:`EVENT_SCHEMA` from ``mem``, read once (the export's enums), in each
    order. Built on the caller's thread: it reads the export through its connection."""
    ops = _enum_ids(export, "ENUM_CUDA_DEV_MEM_EVENT_OPER")
    alloc_op = ops.get("CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", ALLOCATION)
    free_op = ops.get("CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", DEALLOCATION)
    # Without memoryOperationType every row is an allocation (what the export can say).
    op = (
        f"CASE memoryOperationType WHEN {int(alloc_op)} THEN 0 WHEN {int(free_op)} THEN 1 END"
        if mem.has("memoryOperationType")
        else "0"
    )
    columns = ", ".join(
        [
            "start",
            "globalPid",
            "deviceId" if mem.has("deviceId") else "NULL",
            "address" if mem.has("address") else "NULL",
            "bytes",
            "memKind" if mem.has("memKind") else "NULL",
            op,
            "correlationId",
            *(column if mem.has(column) else "NULL" for column in POOL_COLUMNS.values()),
        ]
    )
    select = f"SELECT {columns} FROM {quote(mem.name)}"
    return _Plan(
        f"{select} ORDER BY start, rowid",
        f"{select} ORDER BY start",
        None if mem.hides_rowid else f"SELECT {columns}, rowid FROM {quote(mem.name)}",
    )


def _read_native(uri: str, plan: _Plan) -> tuple[pl.DataFrame, int] | None:
    """The native reader's frame and wrong-typed count (a Python object per value costs ~10x: 2 s
    for 755k events), or None (not built, or it failed: the strict frame builder reads it and says
    what is wrong).

    Read in table order and sorted by polars on (start, rowid), SQLite's ``ORDER BY start, rowid``
    exactly (NULL starts first, rowids unique), without SQLite's single-threaded sorter (0.4 s of
    1.1 s at 755k events). Touches no Python sqlite3 connection: it may run on any thread."""
    try:
        if plan.unordered is None:
            return native.read_ints(uri, plan.ordered, EVENT_SCHEMA, ordered=True)
        events, wrong = native.read_ints(uri, plan.unordered, {**EVENT_SCHEMA, "_rowid": pl.Int64})
        return events.sort("start_ns", "_rowid", nulls_last=False).drop("_rowid"), wrong
    except native.NativeScanError:
        return None


def _read_and_group(uri: str, plan: _Plan) -> tuple[pl.DataFrame, int, _Grouped] | None:
    """:func:`_read_native` and the events' groupings, on the prefetch thread."""
    read = _read_native(uri, plan)
    return None if read is None else (*read, _grouped(read[0]))


class Prefetch:
    """The memory events read by the native reader on a thread of its own (it holds no GIL), while
    the caller reads other tables; :func:`read_memory` takes the result. Nothing is read when the
    native reader is not built or the export has no usable table."""

    def __init__(self, export: ExportFile) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future[tuple[pl.DataFrame, int, _Grouped] | None] | None = None
        mem = _usable(export)
        self.plan = _plan(export, mem) if mem is not None else None
        if self.plan is None or native.load() is None:
            return
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nsysaudit-memory")
        self._future = self._pool.submit(_read_and_group, export.uri, self.plan)

    def result(self) -> tuple[pl.DataFrame, int, _Grouped] | None:
        try:
            return self._future.result() if self._future is not None else None
        finally:
            self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def read_memory(
    export: ExportFile, frame: FrameBuilder, typed: Counter[str], prefetched: Prefetch | None = None
) -> MemoryEvidence:
    """Read the memory events and device totals of ``export``.

    ``frame`` is the strict frame builder of :mod:`nsysaudit.read.trace` (wrong-typed values become
    NULL and are counted in ``typed``); ``prefetched``: the events already being read.
    """
    conn = export.conn
    kinds = _mem_kinds(export)
    devices = pl.DataFrame(schema=DEVICES_SCHEMA)
    gpu = export.table("TARGET_INFO_GPU")
    if gpu is not None and gpu.has("id"):
        cols = [
            vm_sql("vmId") if gpu.has("vmId") else "0",
            "id",
            "name" if gpu.has("name") else "NULL",
            "totalMemory" if gpu.has("totalMemory") else "NULL",
        ]
        rows = frame(conn, f"SELECT {', '.join(cols)} FROM {quote(gpu.name)} ORDER BY 1, 2", DEVICE_SCHEMA,
                     mismatched=typed, source=gpu.name)
        # One row per device: rows of one (vm, id) that disagree leave the value unknown (the device
        # reader warns); ``total_disagrees`` says why a total is unknown where its rows disagree.
        disagrees = rows.group_by("vm", "device_id").agg(
            (pl.col("total_bytes").n_unique() > 1).alias("total_disagrees"))
        devices = one_per_key(rows, ["vm", "device_id"], gpu.name)[0].join(
            disagrees, on=["vm", "device_id"], how="left", nulls_equal=True, maintain_order="left")
    mem = _usable(export)
    if mem is None:
        empty = pl.DataFrame(schema=EVENT_SCHEMA)
        return MemoryEvidence(empty, devices, kinds, pl.DataFrame(schema=ALLOC_SCHEMA),
                              pl.DataFrame(schema={"gpid": pl.Int64, "events": pl.Int64, "bytes": pl.Int64}),
                              pl.DataFrame(schema=SPAN_SCHEMA), 0, None)
    grouped: _Grouped | None = None
    if prefetched is not None and prefetched.plan is not None:
        plan, read = prefetched.plan, prefetched.result()
    else:
        plan = _plan(export, mem)
        read = _read_and_group(export.uri, plan)
    events: pl.DataFrame | None = None
    if read is not None:
        events, wrong, grouped = read
        if wrong:
            typed[mem.name] += wrong
    try:
        if events is None:
            events = frame(conn, plan.ordered, EVENT_SCHEMA, mismatched=typed, source=mem.name)
    except sqlite3.OperationalError:  # a user column named rowid hides nothing here: order by start alone
        events = frame(conn, plan.by_start, EVENT_SCHEMA, mismatched=typed, source=mem.name)
    allocations, unattributed, span, unsized = _grouped(events) if grouped is None else grouped
    pools = export.table("CUDA_GPU_MEMORY_POOL_EVENTS")
    pool_events = pl.DataFrame(schema=POOL_EVENT_SCHEMA)
    if pools is not None and pools.has("start", "globalPid", "address"):
        pool_events = frame(conn, _pool_sql(export, pools), POOL_EVENT_SCHEMA, mismatched=typed, source=pools.name)
    return MemoryEvidence(
        events=events,
        devices=devices,
        kinds=kinds,
        allocations=allocations,
        unattributed=unattributed,
        span=span,
        unsized=unsized,
        table=mem.name,
        pool_events=pool_events,
        pool_table=pools.name if pools is not None and pools.has("start", "globalPid", "address") else None,
        pool_columns=mem.has("localMemoryPoolSize"),
    )


def _pool_sql(export: ExportFile, pools: Table) -> str:
    """The SELECT of :data:`POOL_EVENT_SCHEMA` from CUDA_GPU_MEMORY_POOL_EVENTS, its enums mapped."""
    ops = _enum_ids(export, "ENUM_CUDA_MEMPOOL_OPER")
    types = _enum_ids(export, "ENUM_CUDA_MEMPOOL_TYPE")

    def case(column: str, ids: dict[str, int], wanted: dict[str, int]) -> str:
        if not pools.has(column):
            return "NULL"
        whens = " ".join(f"WHEN {int(ids.get(name, fallback))} THEN {fallback}" for name, fallback in wanted.items())
        return f"CASE {quote(column)} {whens} END"

    def col(name: str) -> str:
        return quote(name) if pools.has(name) else "NULL"

    columns = [
        "start", "globalPid", col("deviceId"), "address",
        case("operationType", ops, {"CUDA_MEMPOOL_OPERATION_TYPE_CREATED": POOL_CREATED,
                                    "CUDA_MEMPOOL_OPERATION_TYPE_DESTROYED": POOL_DESTROYED,
                                    "CUDA_MEMPOOL_OPERATION_TYPE_TRIMMED": POOL_TRIMMED}),
        case("poolType", types, {"CUDA_MEMPOOL_TYPE_LOCAL": POOL_LOCAL, "CUDA_MEMPOOL_TYPE_IMPORTED": POOL_IMPORTED}),
        col("correlationId"), col("minBytesToKeep"), col("localMemoryPoolReleaseThreshold"),
        col("localMemoryPoolSize"), col("localMemoryPoolUtilizedSize"),
    ]
    order = "start, rowid" if not pools.hides_rowid else "start"
    return f"SELECT {', '.join(columns)} FROM {quote(pools.name)} ORDER BY {order}"


class _Grouped(NamedTuple):
    """What the joins and the coverage take from the events (see :class:`MemoryEvidence`)."""

    allocations: pl.DataFrame
    unattributed: pl.DataFrame
    span: pl.DataFrame
    unsized: int


def _grouped(events: pl.DataFrame) -> _Grouped:
    """The events grouped: allocations per (globalPid, correlationId), those tied to no call, the
    span per process and the unsized allocations. Pure polars: it may run on any thread."""
    allocs = events.filter(pl.col("operation") == 0)
    # A NULL (or non-integer) size makes the call's bytes unknown, never a partial sum.
    grouped = allocs.group_by("gpid", "correlation_id").agg(
        pl.when(pl.col("bytes").null_count() == 0).then(pl.col("bytes").sum()).otherwise(None).alias("bytes"),
        pl.len().cast(pl.Int64).alias("events"),
    )
    # Correlation id 0 (or NULL) marks memory the driver allocates itself (module and static
    # memory): no API call made it, so it joins nothing and is never a duplicate.
    no_call = pl.col("correlation_id").is_null() | (pl.col("correlation_id") == 0)
    return _Grouped(
        sort_stable(grouped.filter(~no_call).select(list(ALLOC_SCHEMA)), ["gpid", "correlation_id"]),  # one row a key
        grouped.filter(no_call).group_by("gpid").agg(pl.col("events").sum(), pl.col("bytes").sum()).sort(
            "gpid", nulls_last=True
        ),
        memory_span(events),
        int(allocs["bytes"].null_count()),
    )


def memory_span(events: pl.DataFrame) -> pl.DataFrame:
    """Per globalPid the first and last event and the row count (:data:`SPAN_SCHEMA`; coverage)."""
    span = (
        events.group_by("gpid")
        .agg(
            pl.col("start_ns").min().alias("first_ns"),
            pl.col("start_ns").max().alias("last_ns"),
            pl.len().cast(pl.Int64).alias("rows"),
        )
        .sort("gpid", nulls_last=True)
    )
    return span.cast(SPAN_SCHEMA)  # type: ignore[arg-type]
