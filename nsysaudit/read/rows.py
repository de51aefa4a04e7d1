"""Every row of a large evidence table, read in rowid batches: what ``nsysaudit.open``'s lazy
frames collect (``Session.cuda_api()``, ``Session.memory_events()``, and the GPU's own rows:
``Session.kernels()``, ``memcpy()``, ``memset()``, ``synchronization()``, the tables
:mod:`nsysaudit.read.gpu_work` reads for the host stalls).

A :class:`RowQuery` is the SQL of one table with the raw schema of its rows; :func:`rowid_batches`
runs it from a rowid on, ``size`` rows at a time, through the export's own read-only connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

import polars as pl

from nsysaudit.core.errors import UnusableInput
from nsysaudit.core.shapes import Schema
from nsysaudit.read.gpu_work import INVALID_ID, KERNEL, MEMCPY, MEMSET, SYNC, _usable
from nsysaudit.read.source import ExportFile, Table, quote
from nsysaudit.read.trace import frame

CUDA_API_RAW: Schema = {
    "rowid": pl.Int64,
    "global_tid": pl.Int64,
    "api": pl.String,
    "return_code": pl.Int64,
    "correlation_id": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}
MEMORY_RAW: Schema = {
    "rowid": pl.Int64,
    "global_pid": pl.Int64,
    "start_ns": pl.Int64,
    "operation": pl.String,
    "memory_kind": pl.String,
    "bytes": pl.Int64,
    "address": pl.Int64,
    "device_id": pl.Int64,
    "stream_id": pl.Int64,
    "correlation_id": pl.Int64,
}

# The GPU's rows (CUPTI_ACTIVITY_KIND_*): the columns every kind has, then each kind's own.
GPU_RAW: Schema = {
    "rowid": pl.Int64,
    "global_pid": pl.Int64,
    "device_id": pl.Int64,
    "context_id": pl.Int64,
    "stream_id": pl.Int64,
    "correlation_id": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}
GPU_OWN: dict[str, Schema] = {
    "kernel": {"name": pl.String, "demangled_name": pl.String, "grid_x": pl.Int64, "grid_y": pl.Int64,
               "grid_z": pl.Int64, "block_x": pl.Int64, "block_y": pl.Int64, "block_z": pl.Int64},
    "memcpy": {"bytes": pl.Int64, "copy_kind": pl.String, "src_kind": pl.String, "dst_kind": pl.String},
    "memset": {"bytes": pl.Int64, "value": pl.Int64, "memory_kind": pl.String},
    "synchronization": {"sync_type": pl.Int64, "event_id": pl.Int64},
}
GPU_TABLES = {"kernel": KERNEL, "memcpy": MEMCPY, "memset": MEMSET, "synchronization": SYNC}


@dataclass(frozen=True)
class RowQuery:
    """``sql`` takes two parameters, the last rowid read and the batch size; ``raw`` is its rows' schema."""

    sql: str
    raw: Schema


def cuda_api_query(export: ExportFile) -> RowQuery | None:
    """Every ``CUPTI_ACTIVITY_KIND_RUNTIME`` row with its name from ``StringIds`` (None: no such tables)."""
    table = export.table("CUPTI_ACTIVITY_KIND_RUNTIME")
    strings = export.table("StringIds")
    if table is None or strings is None:
        return None
    correlation = "r.correlationId" if table.has("correlationId") else "NULL"
    sql = f"""SELECT r.rowid, r.globalTid, s.value, r.returnValue, {correlation}, r.start, r."end"
              FROM {quote(table.name)} AS r LEFT JOIN {quote(strings.name)} AS s ON s.id = r.nameId
              WHERE r.rowid > ? ORDER BY r.rowid LIMIT ?"""
    return RowQuery(sql, CUDA_API_RAW)


def memory_events_query(export: ExportFile) -> RowQuery | None:
    """Every ``CUDA_GPU_MEMORY_USAGE_EVENTS`` row, its operation and memory kind labelled by the
    export's own enum tables (the raw id as text where it has none); None: no usable table."""
    table = export.table("CUDA_GPU_MEMORY_USAGE_EVENTS")
    if table is None or not table.has("start", "globalPid"):
        return None

    def column(name: str) -> str:
        return f"m.{quote(name)}" if table.has(name) else "NULL"

    operation = _enum_label(export, "ENUM_CUDA_DEV_MEM_EVENT_OPER", column("memoryOperationType"))
    memory_kind = _enum_label(export, "ENUM_CUDA_MEM_KIND", column("memKind"))
    sql = f"""SELECT m.rowid, m.globalPid, m.start, {operation}, {memory_kind}, {column("bytes")},
                     {column("address")}, {column("deviceId")}, {column("streamId")}, {column("correlationId")}
              FROM {quote(table.name)} AS m WHERE m.rowid > ? ORDER BY m.rowid LIMIT ?"""
    return RowQuery(sql, MEMORY_RAW)


def gpu_table(export: ExportFile, kind: str) -> Table | None:
    """The table of ``kind``'s rows (``kernel``, ``memcpy``, ``memset``, ``synchronization``); None
    where the export has none, or one without the columns every such row has (start, end, process)."""
    return _usable(export, GPU_TABLES[kind], "start", "end", "globalPid")


def gpu_rows_query(export: ExportFile, kind: str) -> RowQuery | None:
    """Every row of ``kind``'s table (:func:`gpu_table`; None: no usable table): :data:`GPU_RAW`,
    then :data:`GPU_OWN`'s columns of the kind (null where the table lacks one). A kernel's names
    are StringIds' (``shortName``, ``demangledName``); copy and memory kinds the labels of the
    export's own enum tables, as :func:`memory_events_query` gives them; a synchronization's
    ``syncType`` is its raw id (nsys releases number it unlike their own ENUM_CUPTI_SYNC_TYPE: the
    bundled nsys 2025.3 export's 48 cudaStreamSynchronize rows carry 2, "Stream wait sync"), and its
    stream and event null where CUPTI writes its invalid value, 2^32 - 1 (a context synchronization
    has no stream, a stream synchronization no event)."""
    table = gpu_table(export, kind)
    if table is None:
        return None

    def column(name: str) -> str:
        return f"g.{quote(name)}" if table.has(name) else "NULL"

    def valid(name: str) -> str:  # CUPTI's invalid value in a synchronization's ids: none (null)
        return column(name) if column(name) == "NULL" else f"nullif({column(name)}, {INVALID_ID})"

    stream = valid("streamId") if kind == "synchronization" else column("streamId")
    joins = ""
    if kind == "kernel":
        strings = export.table("StringIds")
        names = []
        for alias, source in (("n", "shortName"), ("d", "demangledName")):
            if strings is None or not table.has(source):
                names.append("NULL")
                continue
            joins += f" LEFT JOIN {quote(strings.name)} AS {alias} ON {alias}.id = g.{quote(source)}"
            names.append(f"{alias}.value")
        own = [*names, *map(column, ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"))]
    elif kind == "memcpy":
        own = [column("bytes"), _enum_label(export, "ENUM_CUDA_MEMCPY_OPER", column("copyKind")),
               *(_enum_label(export, "ENUM_CUDA_MEM_KIND", column(c)) for c in ("srcKind", "dstKind"))]
    elif kind == "memset":
        own = [column("bytes"), column("value"), _enum_label(export, "ENUM_CUDA_MEM_KIND", column("memKind"))]
    else:
        own = [column("syncType"), valid("eventId")]
    common = ["g.rowid", "g.globalPid", column("deviceId"), column("contextId"), stream, column("correlationId"),
              "g.start", 'g."end"']
    sql = f"""SELECT {', '.join([*common, *own])} FROM {quote(table.name)} AS g{joins}
              WHERE g.rowid > ? ORDER BY g.rowid LIMIT ?"""
    return RowQuery(sql, GPU_RAW | GPU_OWN[kind])


def _enum_label(export: ExportFile, enum: str, value: str) -> str:
    table = export.table(enum)
    if value == "NULL" or table is None or not table.has("id"):
        return f"CAST({value} AS TEXT)"
    label = "label" if table.has("label") else "name" if table.has("name") else None
    if label is None:
        return f"CAST({value} AS TEXT)"
    return f"coalesce((SELECT e.{label} FROM {quote(table.name)} AS e WHERE e.id = {value}), CAST({value} AS TEXT))"


def rowid_batches(export: ExportFile, query: RowQuery, size: int) -> Iterator[pl.DataFrame]:
    """``query``'s rows in rowid order, at most ``size`` a batch (each with its ``rowid``).

    SQLite failing under the read (a file damaged or changed since it was opened) is
    :class:`~nsysaudit.core.errors.UnusableInput`, one line naming the export.
    """
    conn: sqlite3.Connection = export.conn
    last = -(1 << 63)
    while True:
        try:
            rows = frame(conn, query.sql, query.raw, (last, size))
        except sqlite3.DatabaseError as exc:
            raise UnusableInput(export.path, f"SQLite failed while reading the export: {exc}") from None
        if rows.height == 0:
            return
        last = int(rows["rowid"][-1])
        yield rows
        if rows.height < size:  # the last batch
            return
