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
- :meth:`~Session.kernels`, :meth:`~Session.memcpy`, :meth:`~Session.memset`,
  :meth:`~Session.synchronization`: every row of the GPU's own tables (``CUPTI_ACTIVITY_KIND_KERNEL``,
  ``_MEMCPY``, ``_MEMSET``, ``_SYNCHRONIZATION``), read when collected; an export without one gives
  an empty frame of the same columns, and :attr:`~Session.gpu_tables` (and the session's repr) say so;
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

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING

import polars as pl
from polars.io.plugins import register_io_source

from nsysaudit.analysis import analyze_trace
from nsysaudit.analysis.failures import regions_needing_records
from nsysaudit.analysis.joins import DEFAULT_MAX_PAIRS
from nsysaudit.core.codes import return_name
from nsysaudit.core.errors import BadOption, ReportWarning, UnusableInput
from nsysaudit.core.ids import decode_pid, decode_tid, global_pid
from nsysaudit.core.progress import Progress
from nsysaudit.core.shapes import Schema
from nsysaudit.core.text import escape
from nsysaudit.read.damage import Damage, DamageCheck
from nsysaudit.read.gpu_work import WORK_TABLES
from nsysaudit.read.inputs import Engine, InputInfo, check_input, open_input
from nsysaudit.read.rows import (
    GPU_OWN,
    GPU_RAW,
    GPU_TABLES,
    MEMORY_RAW,
    RowQuery,
    cuda_api_query,
    gpu_rows_query,
    gpu_table,
    memory_events_query,
    rowid_batches,
)
from nsysaudit.read.snapshot import Snapshot, load_snapshot
from nsysaudit.read.source import ExportFile
from nsysaudit.read.telemetry import TelemetryLog, TelemetryOptions, load_telemetry
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS, Trace, event_records_in, load
from nsysaudit.reports.analysis import AnalysisResult, duration_ns, report_analysis
from nsysaudit.words import NATIVE_NOT_USED, gpu_tables_summary, session_html, session_summary

if TYPE_CHECKING:
    import sqlite_utils

BATCH_ROWS = 1 << 17  # most rows read per query (polars may ask for fewer)

CUDA_API_SCHEMA: Schema = {
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
# The rows as read (read/rows.py), the pid decoded from the global pid in place of the rowid.
MEMORY_SCHEMA: Schema = {"pid": pl.Int64} | {k: v for k, v in MEMORY_RAW.items() if k != "rowid"}
# The GPU's rows: the pid decoded from the global pid, the columns every kind has, the kind's own, the
# duration (no thread: a GPU row names only its process; its launch is the CUDA API row of the same
# pid and correlation_id).
GPU_SCHEMAS: dict[str, Schema] = {
    kind: {"pid": pl.Int64} | {k: v for k, v in GPU_RAW.items() if k != "rowid"} | own | {"duration_ns": pl.Int64}
    for kind, own in GPU_OWN.items()
}
KERNEL_SCHEMA, MEMCPY_SCHEMA, MEMSET_SCHEMA, SYNCHRONIZATION_SCHEMA = (
    GPU_SCHEMAS["kernel"], GPU_SCHEMAS["memcpy"], GPU_SCHEMAS["memset"], GPU_SCHEMAS["synchronization"]
)


def open(  # nsysaudit.open(path), like io.open: the notebook's one entry point
    path: str | os.PathLike[str],
    *,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    nsys_path: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Session:
    """Open one export (``.sqlite``) or report (``.nsys-rep``, exported once through the cache).

    Checks the input, exports a report, starts SQLite's damage check of the evidence tables beside
    the reading (:mod:`nsysaudit.read.damage`: it alone says whether the file is damaged, whichever
    engine reads it) and loads what the analysis needs. Raises
    :class:`~nsysaudit.core.errors.UnusableInput` (one line) when it cannot be analyzed at all; on
    any error the export is closed here. ``progress`` hears about long steps (the nsys export, the
    CUDA API scan).
    """
    given = check_input(path)
    opened = open_input(given, shown_as=os.fspath(path), nsys_path=nsys_path, progress=progress)
    check: DamageCheck | None = None
    try:
        check = started = DamageCheck(opened.export, handed=tuple(WORK_TABLES.values()))

        def refuse(settled: Damage | None) -> None:  # a damaged file: nothing more read of it
            if settled is not None:
                settled.raise_if_damaged(opened.export.path)

        try:
            trace = load(opened.export, library_domains, progress=progress,
                         scanned=lambda checked: refuse(started.settled(checked)),
                         read=lambda checked: refuse(started.settled_by_reader(checked)))
            # Event records are read (one query) only for capture regions that a failed wait follows.
            records = event_records_in(opened.export, trace.cuda_api_table, regions_needing_records(trace))
        except UnusableInput:
            check.result().raise_if_damaged(opened.export.path)  # a reader's error on a damaged file: SQLite's words
            raise
        damage = check.result(trace.cuda_api_checked, trace.gpu_work.checked)
        damage.raise_if_damaged(opened.export.path)
        trace = replace(trace, warnings=(*trace.warnings, *damage.warnings))
        info = opened.info(trace.tables_used, trace.session_start_utc_ns, engine_of(trace))
    except BaseException:
        if check is not None:
            check.cancel()
        opened.export.close()
        raise
    return Session(opened.export, trace, info, records, tuple(library_domains))


def engine_of(trace: Trace) -> Engine:
    """What read the CUDA API table: the engine, its SQLite, and why not the native engine (None: it did)."""
    from nsysaudit.read import native
    from nsysaudit.read.scan import engine_sqlite_version

    engine = trace.scan_engine
    why = native.unavailable()
    if why is None and engine not in ("native", "none"):
        why = NATIVE_NOT_USED
    return Engine(engine, engine_sqlite_version(engine), why)


def analyze(
    path: str | os.PathLike[str],
    *,
    nsys_path: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    telemetry: str | os.PathLike[str] | None = None,
    telemetry_options: TelemetryOptions | None = None,
    max_pairs: int | None = DEFAULT_MAX_PAIRS,
    progress: Progress | None = None,
    snapshots: Sequence[str | os.PathLike[str]] = (),
) -> AnalysisResult:
    """Analyze one Nsight Systems export (``.sqlite``) or report (``.nsys-rep``): :func:`open`, then
    :meth:`Session.analyze`, then close.

    ``progress`` hears about long steps (the nsys export, the CUDA API scan); see
    :mod:`nsysaudit.core.progress`.

    ``max_pairs`` bounds the (library call, CUDA API call) pairs formed (None: no limit); hitting
    it is a warning, and makes the verdict inconclusive when it could hide a finding.

    Raises :class:`~nsysaudit.core.errors.UnusableInput` (exit code 2 in the CLI) when the input cannot
    be analyzed at all. Partly broken input is analyzed and its problems listed in ``warnings``.

    ``telemetry``: a JSON Lines file of the application's own receipts (see
    :mod:`nsysaudit.read.telemetry`); its clocks are aligned with the trace (see
    :mod:`nsysaudit.analysis.alignment`) and every finding and library call is placed among its lines.
    Unusable telemetry raises :class:`~nsysaudit.core.errors.UnusableInput` before the export is read.

    ``snapshots``: PyTorch memory snapshots of the same run (``torch.cuda.memory._dump_snapshot``,
    :mod:`nsysaudit.read.snapshot`), joined to the trace: the allocator's own view at each moment
    the ledger is read at (:mod:`nsysaudit.analysis.allocator`; their clock is checked within
    ``telemetry_options.tolerance_ns``). Each is read before the export; one that is unusable, or of
    another run, raises :class:`~nsysaudit.core.errors.UnusableInput`.

    >>> result = analyze("tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite")
    >>> result.verdict
    'failure_found'
    >>> [(f["kind"], f["correlation_id"], f["thread_name"]) for f in result.to_dict()["findings"]]
    [('nested_alloc_failure', 2433, 'pt_autograd_0')]
    """
    check_input(path)
    log = load_telemetry(telemetry, telemetry_options) if telemetry is not None else None
    read = tuple(load_snapshot(s) for s in snapshots)
    tolerance = (telemetry_options or TelemetryOptions()).tolerance_ns
    with open(path, nsys_path=nsys_path, library_domains=library_domains, progress=progress) as session:
        return session.analyze_log(log, max_pairs=max_pairs, snapshots=read, snapshot_tolerance_ns=tolerance)


class Session:
    """One export opened for exploration (see the module docstring); made by :func:`open`.

    ``input``: what was opened (path, SHA-256, versions); ``warnings``: what reading it found partly
    broken (the same list ``analyze().warnings`` starts from).
    """

    def __init__(
        self,
        export: ExportFile,
        trace: Trace,
        info: InputInfo,
        event_records: pl.DataFrame,
        library_domains: tuple[str, ...],
    ) -> None:
        self._export = export
        self._trace = trace
        self._event_records = event_records
        self._library_domains = library_domains
        self._closed = False
        self.input = info
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
    def warnings(self) -> list[ReportWarning]:
        return list(self._trace.warnings)

    @property
    def database(self) -> sqlite_utils.Database:
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
        snapshots: Sequence[str | os.PathLike[str]] = (),
    ) -> AnalysisResult:
        """:func:`nsysaudit.analyze` over what :func:`open` loaded (the export is not read again);
        the same result, call after call."""
        log = load_telemetry(telemetry, telemetry_options) if telemetry is not None else None
        read = tuple(load_snapshot(s) for s in snapshots)
        tolerance = (telemetry_options or TelemetryOptions()).tolerance_ns
        return self.analyze_log(log, max_pairs=max_pairs, snapshots=read, snapshot_tolerance_ns=tolerance)

    def analyze_log(
        self,
        telemetry: TelemetryLog | None,
        *,
        max_pairs: int | None = DEFAULT_MAX_PAIRS,
        snapshots: Sequence[Snapshot] = (),
        snapshot_tolerance_ns: int | None = None,
    ) -> AnalysisResult:
        """:meth:`analyze` with telemetry and snapshots already read (:func:`~nsysaudit.read.telemetry.load_telemetry`,
        :func:`~nsysaudit.read.snapshot.load_snapshot`); the snapshots' clock checked within
        ``snapshot_tolerance_ns`` (default: the telemetry's tolerance, else 1 ms)."""
        tolerance = snapshot_tolerance_ns if snapshot_tolerance_ns is not None else (
            telemetry.options.tolerance_ns if telemetry is not None else TelemetryOptions().tolerance_ns)
        analysis = analyze_trace(
            self._trace,
            max_pairs=max_pairs,
            telemetry=telemetry,
            event_records=self._event_records,
            library_domains=self._library_domains,
            snapshots=snapshots,
            snapshot_tolerance_ns=tolerance,
        )
        return report_analysis(self.input, analysis)

    # --- frames -----------------------------------------------------------------------------------
    def _with_thread(self, lazy: pl.LazyFrame, gtid: str = "global_tid") -> pl.LazyFrame:
        return lazy.with_columns(
            decode_pid(pl.col(gtid)).alias("pid"), decode_tid(pl.col(gtid)).alias("tid")
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
                decode_pid(pl.col("global_tid")).alias("pid"),
                decode_tid(pl.col("global_tid")).alias("tid"),
                global_pid(pl.col("global_tid")).alias("global_pid"),
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
        query = cuda_api_query(self._export)
        if query is None:
            return pl.LazyFrame(schema=CUDA_API_SCHEMA)

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

        return self._scan(query, shape, CUDA_API_SCHEMA)

    def memory_events(self) -> pl.LazyFrame:
        """Every ``CUDA_GPU_MEMORY_USAGE_EVENTS`` row (:data:`MEMORY_SCHEMA`), read when collected.

        ``operation`` and ``memory_kind`` are the labels of the export's own enum tables
        (``Allocation``, ``Device``, ...), or the raw id as text when it has none.
        """
        query = memory_events_query(self._export)
        if query is None:
            return pl.LazyFrame(schema=MEMORY_SCHEMA)

        def shape(batch: pl.DataFrame) -> pl.DataFrame:
            return batch.with_columns(decode_pid(pl.col("global_pid")).alias("pid")).select(list(MEMORY_SCHEMA))

        return self._scan(query, shape, MEMORY_SCHEMA)

    @property
    def gpu_tables(self) -> dict[str, str | None]:
        """The table each GPU frame reads (``kernel``: :meth:`kernels`, ``memcpy``, ``memset``,
        ``synchronization``); None where the export has none (or one without start, end and
        globalPid): that frame is empty, with its columns."""
        if self._closed:
            raise BadOption(f"{self.input.path}: this session was closed; nsysaudit.open() it again")
        return {kind: (t.name if (t := gpu_table(self._export, kind)) is not None else None) for kind in GPU_TABLES}

    def kernels(self) -> pl.LazyFrame:
        """Every ``CUPTI_ACTIVITY_KIND_KERNEL`` row (:data:`KERNEL_SCHEMA`), read when collected:
        ``name`` (shortName) and ``demangled_name`` from StringIds (null where an id has no row),
        the grid and block."""
        return self._gpu("kernel")

    def memcpy(self) -> pl.LazyFrame:
        """Every ``CUPTI_ACTIVITY_KIND_MEMCPY`` row (:data:`MEMCPY_SCHEMA`), read when collected;
        ``copy_kind``, ``src_kind``, ``dst_kind``: the labels of the export's enum tables
        (``Host-to-Device``, ``Pageable``, ...), or the raw id as text where it has none."""
        return self._gpu("memcpy")

    def memset(self) -> pl.LazyFrame:
        """Every ``CUPTI_ACTIVITY_KIND_MEMSET`` row (:data:`MEMSET_SCHEMA`), read when collected;
        ``memory_kind`` labelled as :meth:`memcpy`'s kinds."""
        return self._gpu("memset")

    def synchronization(self) -> pl.LazyFrame:
        """Every ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` row (:data:`SYNCHRONIZATION_SCHEMA`), read
        when collected. ``sync_type`` is the raw ``syncType`` id, not labelled: nsys releases number it
        unlike their own ENUM_CUPTI_SYNC_TYPE (:func:`nsysaudit.read.rows.gpu_rows_query`);
        ``stream_id`` and ``event_id`` are null where CUPTI wrote its invalid value."""
        return self._gpu("synchronization")

    def _gpu(self, kind: str) -> pl.LazyFrame:
        schema = GPU_SCHEMAS[kind]
        if self._closed:
            raise BadOption(f"{self.input.path}: this session was closed; nsysaudit.open() it again")
        query = gpu_rows_query(self._export, kind)
        if query is None:
            return pl.LazyFrame(schema=schema)

        def shape(batch: pl.DataFrame) -> pl.DataFrame:
            return batch.with_columns(
                decode_pid(pl.col("global_pid")).alias("pid"), duration_ns().alias("duration_ns")
            ).select(list(schema))

        return self._scan(query, shape, schema)

    def _scan(
        self, query: RowQuery, shape: Callable[[pl.DataFrame], pl.DataFrame], schema: Schema
    ) -> pl.LazyFrame:
        """A LazyFrame over ``query`` (rowid-keyed batches from the session's connection): only the
        columns asked for are kept, the filter applied per batch, reading stops at ``n_rows``."""
        source = self._export.path

        def batches(
            with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
        ) -> Iterator[pl.DataFrame]:
            if self._closed:
                raise BadOption(f"{source}: this session was closed; nsysaudit.open() it again")
            left = n_rows
            if left is not None and left <= 0:
                return
            for rows in rowid_batches(self._export, query, min(batch_size or BATCH_ROWS, BATCH_ROWS)):
                out = shape(rows)
                if predicate is not None:
                    out = out.filter(predicate)
                if with_columns is not None:
                    out = out.select(with_columns)
                if left is not None:
                    out = out.head(left)
                    left -= out.height
                yield out
                if left is not None and left <= 0:
                    return

        return register_io_source(batches, schema=pl.Schema(schema))

    # --- notebook display -------------------------------------------------------------------------
    def _summary(self) -> list[str]:
        t = self._trace
        return [
            *session_summary(
                self.input.path, self.input.kind, self.input.nsys_version, self.input.schema_version,
                self.input.sha256,
                (t.cuda_api_total, t.library_calls.height, t.nvtx_ranges.height, t.thread_names.height,
                 len(t.warnings)),
                self._closed,
            ),
            *([] if self._closed else [self._gpu_summary()]),
        ]

    def _gpu_summary(self) -> str:
        tables = self.gpu_tables
        have = [kind for kind, name in tables.items() if name is not None]
        absent = [GPU_TABLES[kind] for kind, name in tables.items() if name is None]
        return gpu_tables_summary(have, absent)

    def __repr__(self) -> str:
        return "Session(" + "; ".join(map(escape, self._summary())) + ")"

    def _repr_html_(self) -> str:
        import html  # a notebook's only: the command line never loads it

        first, *rest = (html.escape(escape(line)) for line in self._summary())
        return session_html(first, rest)
