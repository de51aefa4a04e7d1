"""The notebook API: ``t = nsysaudit.open(path)`` reads an export once and serves polars frames.

``open`` probes the export (read-only, ``immutable`` URI: see :func:`nsysaudit.read.source.readonly_uri`),
loads what the analysis needs (:func:`nsysaudit.read.trace.load`) and keeps the read-only connection
open: the :class:`Session` owns it until :meth:`Session.close` (or the end of a ``with`` block).
Every frame is a polars ``LazyFrame`` with readable columns (``pid``, ``tid``, ``thread_name``,
``api``, ``return_code``, ``start_ns``, ``end_ns``, ...; timestamps are the export's nanoseconds):

- :meth:`~Session.cuda_api`: **every** row of ``CUPTI_ACTIVITY_KIND_RUNTIME`` (runtime and driver
  calls), read from the export only when collected, in rowid batches, with only the columns asked
  for; names joined from ``StringIds`` and ``ThreadNames``;
- :meth:`~Session.library_calls`: cuBLAS/cuDNN calls (``CUBLAS_EVENTS``/``CUDNN_EVENTS`` and NVTX
  ranges of the library domains), as loaded; their coverage is in ``analyze().frames``;
- :meth:`~Session.memory_events`: every row of ``CUDA_GPU_MEMORY_USAGE_EVENTS``, read when collected;
- :meth:`~Session.nvtx`: NVTX push/pop and start/end ranges, as loaded, with their domain;
- :meth:`~Session.threads`: the threads ``ThreadNames`` names, with their process's name.

:meth:`Session.analyze` runs the analysis over what was loaded: the export is not read again.

>>> import nsysaudit
>>> with nsysaudit.open("tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite") as t:
...     calls = t.cuda_api().filter(pl.col("return_code") != 0).collect()
...     result = t.analyze()
>>> calls.height, result.verdict
(28, 'failure_found')
>>> calls.filter(pl.col("thread_name") == "pt_autograd_0").select("api", "return_code", "return_name").row(0)
('cudaMalloc_v3020', 2, 'cudaErrorMemoryAllocation')
"""

from __future__ import annotations

import html
import os
import sqlite3
from collections.abc import Iterator, Sequence
from types import TracebackType
from typing import Any

import polars as pl
from polars.io.plugins import register_io_source

from nsysaudit.api import Loaded, load_input
from nsysaudit.codes import return_name
from nsysaudit.errors import BadOption, UnusableInput, Warning
from nsysaudit.joins import DEFAULT_MAX_PAIRS
from nsysaudit.read.telemetry import TelemetryOptions, load_telemetry
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS, frame, q
from nsysaudit.reports.analysis import AnalysisResult, duration_ns
from nsysaudit.text import escape

BATCH_ROWS = 1 << 17  # most rows read per query (polars may ask for fewer)
TID = 1 << 24

CUDA_API_SCHEMA: dict[str, Any] = {
    "pid": pl.Int64,
    "tid": pl.Int64,
    "global_tid": pl.Int64,
    "thread_name": pl.String,
    "api": pl.String,
    "return_code": pl.Int64,
    "return_name": pl.String,
    "correlation_id": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "duration_ns": pl.Int64,
}
MEMORY_SCHEMA: dict[str, Any] = {
    "pid": pl.Int64,
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


def open(  # nsysaudit.open(path), like io.open: the notebook's one entry point
    path: str | os.PathLike[str],
    *,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    nsys_path: str | os.PathLike[str] | None = None,
) -> Session:
    """Open one export (``.sqlite``) or report (``.nsys-rep``, exported once through the cache).

    Reads it exactly as :func:`nsysaudit.analyze` does (:func:`nsysaudit.api.load_input`). Raises
    :class:`~nsysaudit.errors.UnusableInput` (one line) when it cannot be analyzed at all.
    """
    return Session(load_input(path, nsys_path=nsys_path, library_domains=library_domains))


class Session:
    """One export opened for exploration (see the module docstring); made by :func:`open`.

    ``input``: what was opened (path, SHA-256, versions); ``warnings``: what reading it found partly
    broken (the same list ``analyze().warnings`` starts from).
    """

    def __init__(self, loaded: Loaded) -> None:
        self._loaded = loaded
        self._export = loaded.export
        self._trace = trace = loaded.trace
        self._closed = False
        self.input = loaded.info
        names = trace.thread_names.filter(pl.col("gtid").is_not_null()).group_by("gtid", maintain_order=True).last()
        self._names = names.rename({"gtid": "global_tid"})

    # --- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the read-only connection; frames already collected stay usable."""
        if not self._closed:
            self._closed = True
            self._export.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def warnings(self) -> list[Warning]:
        return list(self._trace.warnings)

    @property
    def database(self) -> Any:
        """The export as a ``sqlite_utils.Database`` over the session's read-only connection, for
        looking around the schema: ``t.database.table_names()``, ``t.database["StringIds"].count``,
        ``.columns``, ``.rows_where(...)``. Writes fail: the connection is read-only (``immutable``).
        sqlite-utils is imported here, on first use, not by ``open``."""
        if self._closed:
            raise BadOption(f"{self.input.path}: this session was closed; nsysaudit.open() it again")
        import sqlite_utils

        return sqlite_utils.Database(self._export.conn, recursive_triggers=False)

    # --- analysis ---------------------------------------------------------------------------------
    def analyze(
        self,
        *,
        telemetry: str | os.PathLike[str] | None = None,
        telemetry_options: TelemetryOptions | None = None,
        max_pairs: int | None = DEFAULT_MAX_PAIRS,
    ) -> AnalysisResult:
        """:func:`nsysaudit.analyze` over what :func:`open` loaded (the export is not read again);
        the same result, call after call."""
        log = load_telemetry(telemetry, telemetry_options) if telemetry is not None else None
        return self._loaded.analyze(telemetry=log, max_pairs=max_pairs)

    # --- frames -----------------------------------------------------------------------------------
    def _with_thread(self, lazy: pl.LazyFrame, gtid: str = "global_tid") -> pl.LazyFrame:
        return lazy.with_columns(
            (pl.col(gtid) // TID % TID).alias("pid"), (pl.col(gtid) % TID).alias("tid")
        ).join(self._names.lazy(), left_on=gtid, right_on="global_tid", how="left", maintain_order="left")

    def library_calls(self) -> pl.LazyFrame:
        """``lib_id, api, library, source, pid, tid, global_tid, thread_name, start_ns, end_ns``."""
        lazy = self._trace.library_calls.lazy().rename({"gtid": "global_tid"})
        return self._with_thread(lazy).select(
            "lib_id", "api", "library", "source", "pid", "tid", "global_tid", "thread_name", "start_ns", "end_ns"
        )

    def nvtx(self) -> pl.LazyFrame:
        """``pid, tid, global_tid, thread_name, domain, text, start_ns, end_ns, event_type``
        (``end_ns`` null for a range nsys recorded without an end)."""
        lazy = self._trace.nvtx_ranges.lazy().rename({"gtid": "global_tid"})
        return self._with_thread(lazy).select(
            "pid", "tid", "global_tid", "thread_name", "domain", "text", "start_ns", "end_ns", "event_type"
        )

    def threads(self) -> pl.LazyFrame:
        """``pid, tid, global_tid, thread_name, process_name``: one row per named thread."""
        processes = self._trace.processes.select(pl.col("gpid").alias("global_pid"), "process_name").unique(
            "global_pid", keep="first", maintain_order=True
        )
        return (
            self._names.lazy()
            .with_columns(
                (pl.col("global_tid") // TID % TID).alias("pid"),
                (pl.col("global_tid") % TID).alias("tid"),
                (pl.col("global_tid") - pl.col("global_tid") % TID).alias("global_pid"),
            )
            .join(processes.lazy(), on="global_pid", how="left", maintain_order="left")
            .select("pid", "tid", "global_tid", "thread_name", "process_name")
            .sort("global_tid")
        )

    def cuda_api(self) -> pl.LazyFrame:
        """Every CUDA API row (:data:`CUDA_API_SCHEMA`), read from the export when collected.

        A value whose type contradicts its column is read as null (the reading's ``warnings`` count
        them); a ``nameId`` with no StringIds row gives a null ``api``.
        """
        table = self._export.table("CUPTI_ACTIVITY_KIND_RUNTIME")
        strings = self._export.table("StringIds")
        if table is None or strings is None:
            return pl.LazyFrame(schema=CUDA_API_SCHEMA)
        correlation = "r.correlationId" if table.has("correlationId") else "NULL"
        sql = f"""SELECT r.rowid, r.globalTid, s.value, r.returnValue, {correlation}, r.start, r."end"
                  FROM {q(table.name)} AS r LEFT JOIN {q(strings.name)} AS s ON s.id = r.nameId
                  WHERE r.rowid > ? ORDER BY r.rowid LIMIT ?"""
        raw = {
            "rowid": pl.Int64,
            "global_tid": pl.Int64,
            "api": pl.String,
            "return_code": pl.Int64,
            "correlation_id": pl.Int64,
            "start_ns": pl.Int64,
            "end_ns": pl.Int64,
        }

        def shape(batch: pl.DataFrame) -> pl.DataFrame:
            pairs = batch.select("api", "return_code").unique().drop_nulls()
            names = pl.DataFrame(
                [(a, rc, return_name(a, rc)) for a, rc in pairs.iter_rows()],
                schema={"api": pl.String, "return_code": pl.Int64, "return_name": pl.String},
                orient="row",
            )
            out = self._with_thread(batch.lazy()).join(
                names.lazy(), on=["api", "return_code"], how="left", maintain_order="left"
            )
            return out.with_columns(duration_ns().alias("duration_ns")).select(
                list(CUDA_API_SCHEMA)
            ).collect()

        return self._scan(sql, raw, shape, CUDA_API_SCHEMA)

    def memory_events(self) -> pl.LazyFrame:
        """Every ``CUDA_GPU_MEMORY_USAGE_EVENTS`` row (:data:`MEMORY_SCHEMA`), read when collected.

        ``operation`` and ``memory_kind`` are the labels of the export's own enum tables
        (``Allocation``, ``Device``, ...), or the raw id as text when it has none.
        """
        table = self._export.table("CUDA_GPU_MEMORY_USAGE_EVENTS")
        if table is None or not table.has("start", "globalPid"):
            return pl.LazyFrame(schema=MEMORY_SCHEMA)

        def column(name: str) -> str:
            return f"m.{q(name)}" if table.has(name) else "NULL"

        operation = self._enum_label("ENUM_CUDA_DEV_MEM_EVENT_OPER", column("memoryOperationType"))
        memory_kind = self._enum_label("ENUM_CUDA_MEM_KIND", column("memKind"))
        sql = f"""SELECT m.rowid, m.globalPid, m.start, {operation}, {memory_kind}, {column("bytes")},
                         {column("address")}, {column("deviceId")}, {column("streamId")}, {column("correlationId")}
                  FROM {q(table.name)} AS m WHERE m.rowid > ? ORDER BY m.rowid LIMIT ?"""
        raw = {"rowid": pl.Int64, "global_pid": pl.Int64, **{k: v for k, v in MEMORY_SCHEMA.items() if k != "pid"}}

        def shape(batch: pl.DataFrame) -> pl.DataFrame:
            return batch.with_columns((pl.col("global_pid") // TID % TID).alias("pid")).select(list(MEMORY_SCHEMA))

        return self._scan(sql, raw, shape, MEMORY_SCHEMA)

    def _enum_label(self, enum: str, value: str) -> str:
        table = self._export.table(enum)
        if value == "NULL" or table is None or not table.has("id"):
            return f"CAST({value} AS TEXT)"
        label = "label" if table.has("label") else "name" if table.has("name") else None
        if label is None:
            return f"CAST({value} AS TEXT)"
        return f"coalesce((SELECT e.{label} FROM {q(table.name)} AS e WHERE e.id = {value}), CAST({value} AS TEXT))"

    def _scan(
        self,
        sql: str,
        raw: dict[str, Any],
        shape: Any,
        schema: dict[str, Any],
    ) -> pl.LazyFrame:
        """A LazyFrame over ``sql`` (rowid-keyed batches from the session's connection): only the
        columns asked for are kept, the filter applied per batch, reading stops at ``n_rows``."""
        conn: sqlite3.Connection = self._export.conn
        source = self._export.path

        def batches(
            with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
        ) -> Iterator[pl.DataFrame]:
            if self._closed:
                raise BadOption(f"{source}: this session was closed; nsysaudit.open() it again")
            last, left = -(1 << 63), n_rows
            size = min(batch_size or BATCH_ROWS, BATCH_ROWS)
            while left is None or left > 0:
                try:
                    rows = frame(conn, sql, raw, (last, size))
                except sqlite3.DatabaseError as exc:
                    raise UnusableInput(source, f"SQLite failed while reading the export: {exc}") from None
                if rows.height == 0:
                    return
                last = int(rows["rowid"][-1])
                out = shape(rows)
                if predicate is not None:
                    out = out.filter(predicate)
                if with_columns is not None:
                    out = out.select(with_columns)
                if left is not None:
                    out = out.head(left)
                    left -= out.height
                yield out
                if rows.height < size:  # the last batch
                    return

        return register_io_source(batches, schema=pl.Schema(schema))

    # --- notebook display -------------------------------------------------------------------------
    def _summary(self) -> list[str]:
        t = self._trace
        return [
            f"{self.input.path} ({self.input.kind}, nsys {self.input.nsys_version or 'unknown'}, "
            f"schema {self.input.schema_version or 'unknown'})",
            f"sha256 {self.input.sha256}",
            f"{t.cuda_api_total:,} CUDA API calls, {t.library_calls.height:,} library calls, "
            f"{t.nvtx_ranges.height:,} NVTX ranges, {t.thread_names.height:,} named threads, "
            f"{len(t.warnings)} warning(s)" + (" (closed)" if self._closed else ""),
        ]

    def __repr__(self) -> str:
        return "Session(" + "; ".join(map(escape, self._summary())) + ")"

    def _repr_html_(self) -> str:
        first, *rest = (html.escape(escape(line)) for line in self._summary())
        return f"<b>nsysaudit session</b> {first}<ul>{''.join(f'<li>{line}</li>' for line in rest)}</ul>"
