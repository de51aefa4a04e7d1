"""Typed frames read from a probed export. Every frame documents its columns.

The reading is version-tolerant: tables are looked up through :meth:`ExportFile.table`, optional
columns are used only when present, enum ids are read from the export's own ENUM tables when it
has them. What cannot be read is recorded as a warning, never silently dropped.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import polars as pl

from nsysaudit.core.codes import (
    VMM_ROLES,
    display_name,
    is_capture_begin,
    is_capture_end,
    is_device_free_api,
    is_event_record,
)
from nsysaudit.core.defaults import DEFAULT_LIBRARY_DOMAINS as DEFAULT_LIBRARY_DOMAINS
from nsysaudit.core.errors import ReportWarning, UnusableInput
from nsysaudit.core.ids import global_pid
from nsysaudit.core.intervals import closed_library_calls, union_windows
from nsysaudit.core.limits import return_freed_memory
from nsysaudit.core.progress import Progress
from nsysaudit.core.reasons import Reason
from nsysaudit.core.shapes import Schema
from nsysaudit.read import nccl, recovery
from nsysaudit.read.bounds import within_capture
from nsysaudit.read.devices import DeviceTables, read_devices
from nsysaudit.read.diagnostics import DIAGNOSTIC_SCHEMA, NO_CAPTURE, Capture, read_diagnostics
from nsysaudit.read.gpu_work import GpuWork, Prepared, blocking_candidates, read_gpu_work
from nsysaudit.read.gpu_work import prepare as prepare_gpu_work
from nsysaudit.read.memory import MemoryEvidence, Prefetch, read_memory
from nsysaudit.read.nvtx import RANGE_SCHEMA, read_ranges
from nsysaudit.read.nvtx import source as nvtx_source
from nsysaudit.read.scan import ALLOC_ROWS_SCHEMA, CALL_SCHEMA, PARALLEL_MIN_ROWS, SPAN_SCHEMA, scan_cuda_api
from nsysaudit.read.scan import COLUMNS as SCAN_COLUMNS
from nsysaudit.read.source import ExportFile, Table, quote, sql_name
from nsysaudit.read.unique import disagreement, one_per_key
from nsysaudit.words import warned

# Fallback event type ids (ENUM_NSYS_EVENT_TYPE in nsys 2022.2 through 2026.2) for exports
# that do not carry the enum table.
NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 59, 60, 75
LIBRARY_TABLES = {"CUBLAS_EVENTS": "cuBLAS", "CUDNN_EVENTS": "cuDNN"}
# ENUM_NSYS_EVENT_CLASS ids of the zero-length "cuBLAS start/finish", "cuDNN start/finish" marker
# rows nsys writes into CUBLAS_EVENTS / CUDNN_EVENTS (nsys 2022.2 through 2026.2), for exports
# without the enum table. They mark when library tracing began and ended, not library calls.
LIBRARY_MARKER_CLASSES = (33, 34, 35, 36)




def frame(
    conn: sqlite3.Connection,
    sql: str,
    schema: Schema,
    params: Sequence[int | str] = (),
    *,
    mismatched: Counter[str] | None = None,
    source: str = "",
) -> pl.DataFrame:
    """Run ``sql`` and return its rows as a frame with exactly ``schema``.

    Columns are built strictly: polars' row constructor would turn 1.5 into 1 or 5 into "5"
    without a word. A value whose type contradicts its column (TEXT in an integer column, an
    integer over 64 bits, a BLOB where text belongs) becomes NULL and is counted in
    ``mismatched[source]`` for a warning; it is never "fixed".
    """
    cursor = conn.execute(sql, params)
    parts: list[pl.DataFrame] = []
    # In chunks: a list of Python tuples costs ~10x the frame it becomes (755k memory events
    # were 240 MB of tuples), so only one chunk of them is alive at a time.
    while rows := cursor.fetchmany(FRAME_CHUNK_ROWS):
        parts.append(_strict_frame(rows, schema, mismatched, source))
    if not parts:
        return pl.DataFrame(schema=schema)
    return parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=True)


FRAME_CHUNK_ROWS = 65_536


def _strict_frame(
    rows: list[tuple[object, ...]], schema: Schema, mismatched: Counter[str] | None, source: str
) -> pl.DataFrame:
    series = []
    for (name, dtype), values in zip(schema.items(), zip(*rows, strict=True), strict=True):
        try:
            series.append(pl.Series(name, values, dtype=dtype, strict=True))
        except (TypeError, OverflowError, pl.exceptions.PolarsError):
            fits = _fits(dtype)
            cleaned = [v if v is None or fits(v) else None for v in values]
            if mismatched is not None:
                mismatched[source] += sum(
                    1 for v, c in zip(values, cleaned, strict=True) if v is not None and c is None
                )
            series.append(pl.Series(name, cleaned, dtype=dtype, strict=True))
    return pl.DataFrame(series)


def _fits(dtype: pl.DataType | type[pl.DataType]) -> Callable[[object], bool]:
    if dtype == pl.String:
        return lambda v: type(v) is str
    return lambda v: type(v) is int and -(1 << 63) <= v < (1 << 63)




ALLOC_CALL_SCHEMA: Schema = {"gpid": pl.Int64, "correlation_id": pl.Int64, "api": pl.String}


@dataclass
class Trace:
    """What the analysis reads from one export.

    Frames (all timestamps are the export's own nanoseconds):

    - ``cuda_api_total``: number of CUPTI_ACTIVITY_KIND_RUNTIME rows (runtime and driver calls).
    - ``cuda_api_span``: per process ``gpid, first_ns, last_ns, rows`` of the CUDA API trace.
    - ``cuda_api_rows``: the CUDA API rows that matter (``CALL_SCHEMA``): every non-zero or NULL return and
      every call overlapping a library call of its thread (``api`` null when the nameId has no
      StringIds row). Read in one streaming pass by :mod:`nsysaudit.read.scan`.
    - ``nvtx_ranges``: NVTX push/pop and start/end ranges:
      ``gtid, start_ns, end_ns, text, domain_id, domain, event_type``.
    - ``library_calls``: library API ranges (CUBLAS_EVENTS/CUDNN_EVENTS rows and NVTX ranges in a
      library domain): ``lib_id, api, library, source, gtid, start_ns, end_ns``.
    - ``library_windows``: the union of the closed library calls per thread (``gtid, w_start, w_end``,
      :func:`nsysaudit.core.intervals.union_windows`): what the scan selects rows by, and the joins use.
    - ``allocations``: CUDA_GPU_MEMORY_USAGE_EVENTS allocation rows grouped by
      ``gpid, correlation_id`` with ``bytes`` (sum) and ``events`` (row count).
    - ``thread_names``: ``gtid, thread_name``. ``processes``: ``pid, gpid, process_name``.
    - ``memory_span``: ``gpid, first_ns, last_ns, rows`` of all memory usage events.
    - ``capture_calls``: the successful stream-capture begin/end calls (``CALL_SCHEMA``), read in the
      same pass (:mod:`nsysaudit.analysis.failures` pairs them into capture regions).
    - ``diagnostics``: nsys's own DIAGNOSTIC_EVENT messages, classified
      (:data:`nsysaudit.read.diagnostics.DIAGNOSTIC_SCHEMA`); ``capture_bounds`` the capture's start and stop.
    - ``library_markers``: per library table, the marker rows left out of ``library_calls``.
    - ``unattributed_allocations``: ``gpid, events, bytes`` of allocation events with correlation id
      0 or NULL (memory the driver allocates itself, such as module memory): tied to no API call.
    - ``shared_alloc_ids``: ``gpid, correlation_id, rows``: allocation events' correlation ids that
      several CUDA API rows of the process carry (counted over the whole table in the same scan): the
      event cannot be attributed to one of them.
    - ``memory``: every memory usage event and each device's total (:class:`MemoryEvidence`).
    - ``alloc_calls``: ``gpid, correlation_id, api``: the one CUDA API call behind an allocation
      event's (process, correlation id), where exactly one row carries it.
    - ``memory_calls``: the successful calls that give device memory back (cudaFree*, cuMemFree*,
      cuMemUnmap, ...) and the virtual memory management calls (cuMemCreate, cuMemRelease,
      cuMemAddressReserve, ...) (``CALL_SCHEMA``), read in the same pass: the ledger checks each free
      against its own deallocation event and counts handles and reserved address ranges.
    - ``devices``: the GPUs, which process used which, and the launched command
      (:class:`nsysaudit.read.devices.DeviceTables`).
    - ``gpu_work``: the calls that blocked the host and the GPU work that ran while they did
      (:class:`nsysaudit.read.gpu_work.GpuWork`; the blocking calls' rows come from the same scan).
    - ``nccl``: NCCL's domains, the threads NCCL started for its calls and their CUDA API rows
      (:class:`nsysaudit.read.nccl.NcclEvidence`).
    - ``last_allocations``: per process with an out-of-memory allocation failure, its last successful
      allocation call (:data:`nsysaudit.read.recovery.LAST_ALLOCATION_SCHEMA`; from the rows the scan marks).
    ``cuda_api_checked``: what the native reader's own check of the CUDA API table found as it read
    it (:attr:`nsysaudit.read.scan.CudaApiScan.checked`; None: it did not check it).
    """

    export: ExportFile
    has_cuda_api: bool
    cuda_api_table: str | None
    cuda_api_total: int
    cuda_api_span: pl.DataFrame
    cuda_api_rows: pl.DataFrame
    scan_engine: str
    nvtx_ranges: pl.DataFrame
    library_calls: pl.DataFrame
    library_windows: pl.DataFrame
    allocations: pl.DataFrame
    thread_names: pl.DataFrame
    processes: pl.DataFrame
    memory_span: pl.DataFrame
    session_start_utc_ns: int | None
    capture: dict[str, list[str]]
    tables_used: dict[str, str]
    warnings: tuple[ReportWarning, ...] = ()
    capture_calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA))
    diagnostics: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=DIAGNOSTIC_SCHEMA))
    capture_bounds: Capture = NO_CAPTURE
    library_markers: dict[str, int] = field(default_factory=dict)
    unattributed_allocations: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema={"gpid": pl.Int64, "events": pl.Int64, "bytes": pl.Int64})
    )
    shared_alloc_ids: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ALLOC_ROWS_SCHEMA))
    memory: MemoryEvidence | None = None
    memory_calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA))
    alloc_calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ALLOC_CALL_SCHEMA))
    devices: DeviceTables = field(default_factory=DeviceTables)
    gpu_work: GpuWork = field(default_factory=GpuWork)
    nccl: nccl.NcclEvidence = field(default_factory=nccl.NcclEvidence)
    last_allocations: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema=recovery.LAST_ALLOCATION_SCHEMA)
    )
    cuda_api_checked: str | None = None



NVTX_SCHEMA = RANGE_SCHEMA
LIB_SCHEMA: Schema = {
    "api": pl.String,
    "library": pl.String,
    "source": pl.String,
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


def _enum_id(export: ExportFile, table: str, name: str, fallback: int) -> int:
    """An id from an ENUM table by its symbolic name, or ``fallback`` when the table is absent."""
    t = export.table(table)
    if t is None or not t.has("id", "name"):
        return fallback
    row = export.conn.execute(f"SELECT id FROM {quote(t.name)} WHERE name = ?", (name,)).fetchone()
    return int(row[0]) if row else fallback


def _marker_classes(export: ExportFile) -> tuple[int, ...]:
    """ENUM_NSYS_EVENT_CLASS ids of library start/finish markers (from the export when it has the enum)."""
    t = export.table("ENUM_NSYS_EVENT_CLASS")
    if t is None or not t.has("id", "name"):
        return LIBRARY_MARKER_CLASSES
    rows = export.conn.execute(
        f"SELECT id FROM {quote(t.name)} WHERE name LIKE 'TRACE_PROCESS_EVENT_CU%\\_START' ESCAPE '\\' "
        f"OR name LIKE 'TRACE_PROCESS_EVENT_CU%\\_FINISH' ESCAPE '\\'"
    ).fetchall()
    ids = tuple(int(r[0]) for r in rows if type(r[0]) is int)
    return ids or LIBRARY_MARKER_CLASSES


def _capture_name_ids(conn: sqlite3.Connection, strings: str) -> pl.Series:
    """StringIds ids of the stream-capture begin/end API names (cuStreamBeginCapture_v2, ...)."""
    rows = conn.execute(
        f"SELECT id, value FROM {quote(strings)} "
        "WHERE value LIKE '%StreamBeginCapture%' OR value LIKE '%StreamEndCapture%'"
    ).fetchall()
    ids = [i for i, v in rows if type(i) is int and isinstance(v, str) and (is_capture_begin(v) or is_capture_end(v))]
    return pl.Series("name_id", ids, dtype=pl.Int64)


def _memory_call_ids(conn: sqlite3.Connection, strings: str) -> pl.Series:
    """StringIds ids of the calls that give device memory back and of the virtual memory management
    calls (see :attr:`Trace.memory_calls`)."""
    rows = conn.execute(
        f"SELECT id, value FROM {quote(strings)} WHERE value LIKE '%Free%' OR value LIKE '%Destroy%' "
        "OR value LIKE 'cuMem%'"
    ).fetchall()
    ids = [
        i for i, v in rows
        if type(i) is int and isinstance(v, str) and (is_device_free_api(v) or display_name(v) in VMM_ROLES)
    ]
    return pl.Series("name_id", ids, dtype=pl.Int64)


def _require(path: object, table: Table, *columns: str) -> None:
    missing = [c for c in columns if not table.has(c)]
    if missing:
        raise UnusableInput(
            path, f"{table.name} has no {', '.join(missing)} column(s); cannot read it as an nsys export"
        )


def _refuse_repeated_ids(export: ExportFile, strings: Table) -> None:
    """A StringIds id held by several rows names two strings at once: every join by it would count
    a row under each name (a failed call twice, a finding that never happened), and which name nsys
    wrote is unknown. nsys declares ``id INTEGER PRIMARY KEY`` (SQLite's rowid: unique by
    construction), so only a table declared otherwise is searched (one GROUP BY)."""
    info = export.conn.execute(f"SELECT name, type, pk FROM pragma_table_info({quote(strings.name)})").fetchall()
    keys = [(str(name), str(declared).upper()) for name, declared, pk in info if pk]
    if len(keys) == 1 and keys[0][1] == "INTEGER" and sql_name(keys[0][0]) == "id":
        return
    row = export.conn.execute(
        f"SELECT count(*), sum(n) FROM (SELECT count(*) AS n FROM {quote(strings.name)} WHERE id IS NOT NULL "
        "GROUP BY id HAVING count(*) > 1)"
    ).fetchone()
    if row[0]:
        raise UnusableInput(
            export.path,
            f"{strings.name}: {row[0]:,} id(s) held by more than one row ({row[1]:,} rows): each names two "
            "strings at once, so no call's name can be trusted (nsys writes every id once); not a usable export",
        )


# The enums the reads use (nsysaudit.read.damage's evidence tables: rows of no other table are read).
READ_ENUMS = ("ENUM_NSYS_EVENT_TYPE", "ENUM_NSYS_EVENT_CLASS", "ENUM_CUDA_MEM_KIND", "ENUM_CUDA_DEV_MEM_EVENT_OPER",
              "ENUM_CUDA_MEMPOOL_TYPE", "ENUM_CUDA_MEMPOOL_OPER", "ENUM_DIAGNOSTIC_SEVERITY_LEVEL",
              "ENUM_DIAGNOSTIC_SOURCE_TYPE")


def _refuse_conflicting_enums(export: ExportFile) -> None:
    """An enum the reads use (:data:`READ_ENUMS`) that gives one id two names (or labels), or one
    name two ids, says two things about what every row of that kind is (a push/pop range or a domain,
    an allocation or a free): which one nsys meant is unknown, and reading either would be a pick.
    nsys writes each once."""
    for base in READ_ENUMS:
        table = export.table(base)
        if table is None or not table.has("id", "name"):
            continue
        name = table.name
        label = " OR count(DISTINCT label) > 1" if table.has("label") else ""
        q = quote(name)
        by_id = export.conn.execute(
            f"SELECT id FROM {q} GROUP BY id HAVING count(DISTINCT name) > 1{label} LIMIT 1").fetchone()
        by_name = export.conn.execute(
            f"SELECT name FROM {q} GROUP BY name HAVING count(DISTINCT id) > 1 LIMIT 1").fetchone()
        if by_id is None and by_name is None:
            continue
        what = (f"id {by_id[0]!r} is given several names" if by_id is not None
                else f"{by_name[0]!r} is given several ids")
        raise UnusableInput(
            export.path,
            f"{name}: {what}, where nsys writes each once: what the rows of that kind are is unknown, and "
            "reading either would be a guess; not a usable export",
        )


def load(
    export: ExportFile,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    *,
    progress: Progress | None = None,
    scanned: Callable[[str | None], None] | None = None,
    read: Callable[[Mapping[str, str]], None] | None = None,
) -> Trace:
    """Read every frame the analysis needs from ``export``; ``progress`` hears about the scan;
    ``scanned`` hears, once the CUDA API table is read, what the scan's own check found of it
    (:attr:`Trace.cuda_api_checked`), ``read`` what the page reader's check of the GPU tables found
    (:attr:`nsysaudit.read.gpu_work.GpuWork.checked`) once it has read them; either may raise (a
    damaged file refused before the rest is read)."""
    prefetch: Prefetch | None = None
    try:
        prefetch = Prefetch(export)  # the memory events, read on a thread while the other tables are
        trace = _load(export, tuple(library_domains), progress, prefetch, scanned, read)
        # From the size the readers run on threads of their own on: their C buffers, freed, out of RSS
        # before the analysis (as the scan does after its threads).
        if trace.cuda_api_total >= PARALLEL_MIN_ROWS:
            return_freed_memory()
        return trace
    except sqlite3.DatabaseError as exc:
        raise UnusableInput(export.path, f"SQLite failed while reading the export: {exc}") from None
    finally:
        if prefetch is not None:
            prefetch.close()


def _load(
    export: ExportFile, library_domains: tuple[str, ...], progress: Progress | None, prefetch: Prefetch | None = None,
    on_scanned: Callable[[str | None], None] | None = None,
    on_read: Callable[[Mapping[str, str]], None] | None = None,
) -> Trace:
    """The steps in the order they read the export: strings, diagnostics (the capture's bounds), NVTX,
    library calls, memory, the CUDA API scan, names, session and capture settings; then what lies
    outside the capture, and the warnings of what was read."""
    typed: Counter[str] = Counter()  # values of the wrong type read as NULL, per table
    strings = _strings(export)
    _refuse_conflicting_enums(export)
    runtime = export.table("CUPTI_ACTIVITY_KIND_RUNTIME")
    if runtime is not None:
        _require(export.path, runtime, "start", "end", "globalTid", "nameId", "returnValue")
    diagnostics, capture_bounds, diagnostic_warnings = read_diagnostics(export)
    as_written, nvtx_table, domain_warnings = _nvtx_ranges(export, strings, typed)
    nvtx_ranges = nccl.recognize(as_written, nccl.schema_domains(export))  # NCCL's domain, where nsys named none
    library = _library_calls(export, strings, nvtx_ranges, library_domains, typed)
    library_windows = union_windows(closed_library_calls(library.calls, capture_bounds.stop_ns))
    memory = read_memory(export, frame, typed, prefetch)  # read once: the joins' bytes and the ledger
    blocking = prepare_gpu_work(export, strings, frame, typed) if runtime is not None else None
    scanned = (  # the blocking calls' names marked in it
        _scan(export, strings, runtime, library_windows, memory, progress, blocking, on_scanned)
        if runtime is not None else _Scanned()
    )
    scanned, gpu_work = _host_stalls(export, scanned, blocking, runtime, typed, capture_bounds, progress, on_read)
    bounded = within_capture(export, capture_bounds, runtime, scanned.span, memory, nvtx_ranges, nvtx_table)
    scanned, memory = replace(scanned, span=bounded.cuda_api_span), bounded.memory
    thread_names, name_warnings = _thread_names(export, strings, typed)
    processes, process_warnings = _processes(export, typed)
    session_start, session_warnings = _session_start(export, typed)
    capture, capture_warnings = _capture_settings(export, typed)
    devices = read_devices(export, frame, typed, memory, capture)
    nccl_evidence = _nccl(export, runtime, strings, as_written, nvtx_ranges, library.calls, devices, typed)
    last_allocations = recovery.last_successful_allocations(scanned.allocation_calls, scanned.rows)
    read_warnings = [
        *bounded.warnings,
        *domain_warnings,
        *name_warnings,
        *process_warnings,
        *session_warnings,
        *capture_warnings,
        *devices.warnings,
        *_read_warnings(export, typed, memory, runtime, scanned, library.calls, thread_names),
    ]
    return Trace(
        export=export,
        has_cuda_api=runtime is not None,
        cuda_api_table=runtime.name if runtime is not None else None,
        cuda_api_total=scanned.total,
        cuda_api_span=scanned.span,
        cuda_api_rows=scanned.rows,
        scan_engine=scanned.engine,
        nvtx_ranges=nvtx_ranges,
        library_calls=library.calls,
        library_windows=library_windows,
        allocations=memory.allocations,
        thread_names=thread_names,
        processes=processes,
        memory_span=memory.span,
        session_start_utc_ns=session_start,
        capture=capture,
        tables_used={**_tables_used(strings, runtime, nvtx_table, library, memory), **gpu_work.tables},
        warnings=(*export.warnings, *diagnostic_warnings, *read_warnings, *gpu_work.warnings),
        capture_calls=scanned.capture_calls,
        diagnostics=diagnostics,
        capture_bounds=capture_bounds,
        library_markers=library.markers,
        unattributed_allocations=memory.unattributed,
        shared_alloc_ids=scanned.shared_alloc_ids,
        memory=memory,
        memory_calls=scanned.memory_calls,
        alloc_calls=scanned.alloc_calls,
        devices=devices,
        gpu_work=gpu_work,
        nccl=nccl_evidence,
        last_allocations=last_allocations,
        cuda_api_checked=scanned.checked,
    )


def _host_stalls(
    export: ExportFile, scanned: _Scanned, blocking: Prepared | None, runtime: Table | None, typed: Counter[str],
    capture_bounds: Capture, progress: Progress | None, checked: Callable[[Mapping[str, str]], None] | None = None,
) -> tuple[_Scanned, GpuWork]:
    """The host stalls' evidence read from the blocking calls the scan found
    (:func:`nsysaudit.read.gpu_work.read_gpu_work`), and the scan's result without them."""
    if runtime is None or blocking is None:
        return scanned, GpuWork()
    # The candidates handed over, not kept here: read_gpu_work lets go of them once decided (10^6 rows).
    candidates, scanned = scanned.blocking, replace(scanned, blocking=_Scanned().blocking)
    gpu_work = read_gpu_work(export, candidates, blocking, frame, typed, runtime.name, progress=progress,
                             capture=capture_bounds, pageable=scanned.pageable, corr_groups=scanned.corr_groups,
                             checked=checked)
    return scanned, gpu_work


def _tables_used(
    strings: Table, runtime: Table | None, nvtx_table: str | None, library: _LibraryCalls, memory: MemoryEvidence
) -> dict[str, str]:
    """The tables read, by role (``Trace.tables_used``)."""
    return {
        "StringIds": strings.name,
        **({"cuda_api": runtime.name} if runtime is not None else {}),
        **({"nvtx": nvtx_table} if nvtx_table is not None else {}),
        **library.tables,
        **({"memory": memory.table} if memory.table is not None else {}),
        # The pools' own operations (created, trimmed) the ledger reads for a pool's size.
        **({"memory_pools": memory.pool_table} if memory.pool_table is not None else {}),
    }


def _nccl(
    export: ExportFile, runtime: Table | None, strings: Table, as_written: pl.DataFrame, ranges: pl.DataFrame,
    calls: pl.DataFrame, devices: DeviceTables, typed: Counter[str],
) -> nccl.NcclEvidence:
    """What the export says about NCCL (:class:`nsysaudit.read.nccl.NcclEvidence`): its domains, its
    calls, the threads it started for them (read only when there are NCCL calls)."""
    named, by_schemas = nccl.domains_of(as_written, ranges)
    threads, helper_calls = (
        nccl.helper_threads(export, frame, runtime, strings, calls, typed)
        if runtime is not None
        else (pl.DataFrame(schema=nccl.HELPER_THREAD_SCHEMA), pl.DataFrame(schema=nccl.HELPER_CALL_SCHEMA))
    )
    said = [v for launch in devices.launches if (v := launch.variable("NCCL_NVTX_DISABLE")) is not None]
    disabled = said[-1] if said else None
    return nccl.NcclEvidence(
        named=named, by_schemas=by_schemas, calls=calls.filter(pl.col("library") == nccl.NCCL).height,
        helper_threads=threads, helper_calls=helper_calls,
        nvtx_disabled=disabled if disabled not in (None, "", "0") else None,
    )


def _strings(export: ExportFile) -> Table:
    """StringIds, checked: its two columns, and no id held by two rows."""
    strings = export.table("StringIds")
    assert strings is not None  # probe() guarantees it
    _require(export.path, strings, "id", "value")
    _refuse_repeated_ids(export, strings)
    return strings


def _nvtx_ranges(
    export: ExportFile, strings: Table, typed: Counter[str]
) -> tuple[pl.DataFrame, str | None, list[ReportWarning]]:
    """NVTX push/pop and start/end ranges (:data:`NVTX_SCHEMA`) with each one's domain name, the
    table read (None when the export has no usable NVTX_EVENTS), and what its domains left unknown."""
    conn = export.conn
    nvtx = export.table("NVTX_EVENTS")
    pushpop = _enum_id(export, "ENUM_NSYS_EVENT_TYPE", "NvtxPushPopRange", NVTX_PUSHPOP)
    startend = _enum_id(export, "ENUM_NSYS_EVENT_TYPE", "NvtxStartEndRange", NVTX_STARTEND)
    domain_create = _enum_id(export, "ENUM_NSYS_EVENT_TYPE", "NvtxDomainCreate", NVTX_DOMAIN_CREATE)
    domains = pl.DataFrame(schema={"gpid": pl.Int64, "domain_id": pl.Int64, "domain": pl.String})
    if nvtx is None or not nvtx.has("start", "eventType", "globalTid"):
        ranges, used = pl.DataFrame(schema=NVTX_SCHEMA), None
    else:
        used = nvtx.name
        src = nvtx_source(nvtx, strings)
        native_ranges = read_ranges(export, src, (pushpop, startend), typed)
        ranges = (
            native_ranges
            if native_ranges is not None
            else frame(
                conn,
                f"""SELECT n.globalTid, n.start, {src.end}, {src.text}, {src.domain}, n.eventType
                    {src.from_join} WHERE n.eventType IN (?, ?)""",
                NVTX_SCHEMA,
                (pushpop, startend),
                mismatched=typed,
                source=nvtx.name,
            )
        )
        if nvtx.has("domainId"):
            domains = frame(
                conn,
                f"""SELECT n.globalTid, n.domainId, {src.text} {src.from_join} WHERE n.eventType = ?""",
                {"gtid": pl.Int64, "domain_id": pl.Int64, "domain": pl.String},
                (domain_create,),
                mismatched=typed,
                source=nvtx.name,
            ).select(global_pid(pl.col("gtid")).alias("gpid"), "domain_id", "domain")
    # NVTX domain ids are per process: map (globalPid, domainId) -> domain name. A domain created
    # twice under two names is unknown (its ranges are then no recognised library calls: undecided).
    domains, said = one_per_key(domains, ["gpid", "domain_id"], f"{used} NvtxDomainCreate",
                                {"gpid": "globalPid", "domain_id": "domainId", "domain": "text"})
    named = (
        ranges.with_columns(global_pid(pl.col("gtid")).alias("gpid"))
        .join(domains, on=["gpid", "domain_id"], how="left")
        .drop("gpid")
    )
    return named, used, said


@dataclass(frozen=True)
class _LibraryCalls:
    """The library calls (:attr:`Trace.library_calls`), the marker rows left out of them per table,
    and the library tables read (``{library: table}``)."""

    calls: pl.DataFrame
    markers: dict[str, int]
    tables: dict[str, str]


def _library_calls(
    export: ExportFile, strings: Table, nvtx_ranges: pl.DataFrame, library_domains: tuple[str, ...],
    typed: Counter[str],
) -> _LibraryCalls:
    """The NVTX ranges in a library domain and the rows of CUBLAS_EVENTS / CUDNN_EVENTS (without
    their start/finish markers), in one frame ordered by time, each with its ``lib_id``."""
    conn = export.conn
    parts = [
        nvtx_ranges.filter(pl.col("domain").is_in(list(library_domains))).select(
            pl.col("text").alias("api"),
            pl.col("domain").alias("library"),
            (pl.lit("NVTX:") + pl.col("domain")).alias("source"),
            "gtid",
            "start_ns",
            "end_ns",
        )
    ]
    markers: dict[str, int] = {}
    tables: dict[str, str] = {}
    marker_classes = _marker_classes(export)
    for base, library in LIBRARY_TABLES.items():
        table = export.table(base)
        if table is None or not table.has("start", "end", "globalTid", "nameId"):
            continue
        tables[library] = table.name
        marker_filter, marker_params = "", ()  # type: tuple[str, tuple[int, ...]]
        if table.has("eventClass"):
            marks = ", ".join("?" * len(marker_classes))
            (markers[table.name],) = conn.execute(
                f"SELECT count(*) FROM {quote(table.name)} WHERE eventClass IN ({marks})", marker_classes
            ).fetchone()
            marker_filter = f"WHERE e.eventClass IS NULL OR e.eventClass NOT IN ({marks})"
            marker_params = marker_classes
        parts.append(
            frame(
                conn,
                f"""SELECT s.value, ?, ?, e.globalTid, e.start, e."end"
                    FROM {quote(table.name)} AS e LEFT JOIN {quote(strings.name)} AS s ON s.id = e.nameId
                    {marker_filter}""",
                LIB_SCHEMA,
                (library, table.name, *marker_params),
                mismatched=typed,
                source=table.name,
            )
        )
    calls = (
        pl.concat([p.cast(LIB_SCHEMA) for p in parts])  # type: ignore[arg-type]
        .sort(["start_ns", "gtid", "end_ns", "api", "source"], nulls_last=True)
        .with_row_index("lib_id")
        .with_columns(pl.col("lib_id").cast(pl.Int64))
    )
    return _LibraryCalls(calls, markers, tables)


@dataclass(frozen=True)
class _Scanned:
    """What the CUDA API scan gave, its rows named (see :class:`Trace`); empty without a CUDA API table."""

    rows: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA))
    capture_calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA))
    memory_calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CALL_SCHEMA))
    shared_alloc_ids: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ALLOC_ROWS_SCHEMA))
    alloc_calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=ALLOC_CALL_SCHEMA))
    # the successful allocation calls (gtid, start_ns): the recovery from an out-of-memory failure
    allocation_calls: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema={"gtid": pl.Int64, "start_ns": pl.Int64}))
    total: int = 0
    span: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=SPAN_SCHEMA))
    engine: str = "none"
    problems: dict[str, int] = field(default_factory=dict)
    type_mismatch_rows: int = 0
    blocking: pl.DataFrame = field(default_factory=lambda: blocking_candidates(
        pl.DataFrame(schema=CALL_SCHEMA), pl.DataFrame(schema=CALL_SCHEMA), None))
    checked: str | None = None
    # The CUDA API rows of the asynchronous copies of pageable memory (their processes' and
    # correlation ids', any return, rowid order), gathered by the scan; None: read after it.
    pageable: pl.DataFrame | None = None
    # The scan's groups of the table's leaves by correlation id (CudaApiScan.corr_groups), for the
    # launches' search by correlation id; None: that search reads every leaf.
    corr_groups: pl.DataFrame | None = None


def _scan(
    export: ExportFile,
    strings: Table,
    runtime: Table,
    library_windows: pl.DataFrame,
    memory: MemoryEvidence,
    progress: Progress | None,
    blocking: Prepared | None = None,
    on_scanned: Callable[[str | None], None] | None = None,
) -> _Scanned:
    """The CUDA API (runtime and driver) in one streaming pass, the rows it kept given their names;
    ``on_scanned`` hears what the scan's own check found of the table as soon as it has read it."""
    conn = export.conn
    ids = [r[0] for r in conn.execute(f"SELECT id FROM {quote(strings.name)}")]
    string_ids = pl.Series("id", ids, dtype=pl.Int64)
    capture_ids = _capture_name_ids(conn, strings.name)
    memory_call_ids = _memory_call_ids(conn, strings.name)
    blocking_ids = blocking.name_ids["name_id"] if blocking is not None else pl.Series("name_id", [], pl.Int64)
    allocation_ids = recovery.allocation_name_ids(conn, strings.name)
    marked_ids = pl.concat([capture_ids, memory_call_ids, blocking_ids, allocation_ids]).unique().sort()
    scanned = scan_cuda_api(
        conn,
        export.path,
        runtime.name,
        runtime.spelled(*SCAN_COLUMNS),  # START is start to SQLite: the scan finds it by that name
        library_windows,
        string_ids,
        progress=progress,
        marked_name_ids=marked_ids,
        # Every memory event's (process, correlation id): who made it, and whether it is shared
        # (repeats included: the scan takes each key once).
        alloc_keys=memory.events.select("gpid", "correlation_id").filter(
            pl.col("correlation_id").fill_null(0) != 0
        ),
        # The host stalls' asynchronous copies of pageable memory: their rows in the same pass.
        wanted_keys=blocking.pageable if blocking is not None and blocking.pageable.height else None,
    )
    if on_scanned is not None:
        on_scanned(scanned.checked)
    wanted = pl.concat([scanned.selected["name_id"], scanned.marked["name_id"]]).drop_nulls().unique()
    names = _string_values(conn, strings.name, wanted.to_list())
    # The marked rows (2.3M at 20M rows) held once: unnamed until they are named, then named only.
    unnamed, scanned = scanned.marked, replace(scanned, marked=scanned.marked.clear())
    allocation_calls = unnamed.filter(pl.col("name_id").is_in(allocation_ids.implode())).select("gtid", "start_ns")
    marked = unnamed.join(names, on="name_id", how="left").select(list(CALL_SCHEMA))
    del unnamed
    # The one API call behind each allocation event's (process, correlation id), where it is one.
    sole = scanned.alloc_rows.filter(pl.col("rows") == 1)
    rows = scanned.selected.join(names, on="name_id", how="left").select(list(CALL_SCHEMA))
    return _Scanned(
        rows=rows,
        capture_calls=marked.filter(pl.col("name_id").is_in(capture_ids.implode())),
        memory_calls=marked.filter(pl.col("name_id").is_in(memory_call_ids.implode())),
        allocation_calls=allocation_calls,
        blocking=blocking_candidates(marked, rows, blocking),
        shared_alloc_ids=scanned.alloc_rows.filter(pl.col("rows") > 1).join(
            memory.allocations.select("gpid", "correlation_id"), on=["gpid", "correlation_id"], how="semi"
        ),
        alloc_calls=sole.join(
            _string_values(conn, strings.name, sole["name_id"].drop_nulls().unique().to_list()),
            on="name_id",
            how="left",
        ).select("gpid", "correlation_id", "api"),
        total=scanned.total,
        span=scanned.span,
        engine=scanned.engine,
        problems=scanned.problems,
        type_mismatch_rows=scanned.type_mismatch_rows,
        checked=scanned.checked,
        # Where a value of another type was read (as NULL), the copies' rows are read again by
        # correlation id, as without the native engine: that reading counts those among them.
        pageable=scanned.keyed if scanned.type_mismatch_rows == 0 else None,
        corr_groups=scanned.corr_groups if scanned.type_mismatch_rows == 0 else None,
    )


def _thread_names(
    export: ExportFile, strings: Table, typed: Counter[str]
) -> tuple[pl.DataFrame, list[ReportWarning]]:
    """``gtid, thread_name`` from ThreadNames, one row per thread, and a warning for names whose
    string is missing and for threads whose rows name them differently (their name is unknown)."""
    conn = export.conn
    tn = export.table("ThreadNames")
    if tn is None or not tn.has("nameId", "globalTid"):
        return pl.DataFrame(schema={"gtid": pl.Int64, "thread_name": pl.String}), []
    rows = frame(
        conn,
        f"""SELECT t.globalTid, s.value FROM {quote(tn.name)} AS t
            LEFT JOIN {quote(strings.name)} AS s ON s.id = t.nameId ORDER BY t.rowid""",
        {"gtid": pl.Int64, "thread_name": pl.String},
        mismatched=typed,
        source=tn.name,
    )
    names, said = one_per_key(rows.filter(pl.col("gtid").is_not_null()), ["gtid"], tn.name,
                              {"gtid": "globalTid", "thread_name": "name"},
                              code="threads_with_several_names", kind="several_thread_names")
    names = pl.concat([names, rows.filter(pl.col("gtid").is_null())])
    (unnamed,) = conn.execute(
        f"""SELECT count(*) FROM {quote(tn.name)} AS t LEFT JOIN {quote(strings.name)} AS s ON s.id = t.nameId
            WHERE t.nameId IS NOT NULL AND s.id IS NULL"""
    ).fetchone()
    if unnamed:
        said.append(warned(Reason.of("dangling_thread_name", table=tn.name), unnamed))
    return names, said


def _processes(export: ExportFile, typed: Counter[str]) -> tuple[pl.DataFrame, list[ReportWarning]]:
    """``pid, gpid, process_name`` from PROCESSES, one row per process (rows of one globalPid that
    disagree leave the values unknown, warned)."""
    pt = export.table("PROCESSES")
    if pt is None or not pt.has("globalPid", "pid", "name"):
        return pl.DataFrame(schema={"pid": pl.Int64, "gpid": pl.Int64, "process_name": pl.String}), []
    rows = frame(
        export.conn,
        f"SELECT pid, globalPid, name FROM {quote(pt.name)} ORDER BY globalPid",
        {"pid": pl.Int64, "gpid": pl.Int64, "process_name": pl.String},
        mismatched=typed,
        source=pt.name,
    )
    return one_per_key(rows, ["gpid"], pt.name, {"gpid": "globalPid", "process_name": "name"})


def _session_start(export: ExportFile, typed: Counter[str]) -> tuple[int | None, list[ReportWarning]]:
    """The session's start in UTC nanoseconds (TARGET_INFO_SESSION_START_TIME), None when unknown
    (also when its rows disagree, warned)."""
    session = export.table("TARGET_INFO_SESSION_START_TIME")
    if session is None or not session.has("utcEpochNs"):
        return None, []
    rows = export.conn.execute(f"SELECT utcEpochNs FROM {quote(session.name)}").fetchall()
    values: list[int] = []
    for (value,) in rows:
        if type(value) is int and -(1 << 63) <= value < (1 << 63):
            values.append(int(value))
        elif value is not None:
            typed[session.name] += 1
    distinct = sorted(set(values))
    if len(distinct) > 1:
        return None, disagreement(session.name, "the session's start (utcEpochNs)", {"utcEpochNs": distinct})
    return (distinct[0] if distinct else None), []


# META_DATA_CAPTURE names read as one value each (the launched command, its pid and arguments, whether
# memory usage was collected, whether nsys skipped calls): rows of one name that disagree leave it
# unrecorded. CAPTURE_EVENT_TYPE and ENVIRONMENT_VARIABLE are lists (one row per entry).
_SINGLE_SETTING = re.compile(
    r"\A(PROCESS_[0-9]+:(COMMAND|PID|ARGUMENT_[0-9]+)|.*COLLECT_GPU_MEMORY_USAGE|.*CUDA_SKIP_SOME_API_CALLS)\Z"
)


def _capture_settings(export: ExportFile, typed: Counter[str]) -> tuple[dict[str, list[str]], list[ReportWarning]]:
    """META_DATA_CAPTURE's settings: each name's values, in the export's order; a name read as one
    value (:data:`_SINGLE_SETTING`) whose rows disagree is left out, and a warning says so."""
    capture: dict[str, list[str]] = {}
    cap = export.table("META_DATA_CAPTURE")
    if cap is not None and cap.has("name", "value"):
        for key, value in export.conn.execute(f"SELECT name, value FROM {quote(cap.name)} ORDER BY rowid"):
            if isinstance(key, str) and isinstance(value, str):
                capture.setdefault(key, []).append(value)
            else:
                typed[cap.name] += 1
    conflicts = {k: list(dict.fromkeys(vs)) for k, vs in capture.items()
                 if _SINGLE_SETTING.fullmatch(k) and len(set(vs)) > 1}
    if not conflicts or cap is None:
        return capture, []
    return {k: vs for k, vs in capture.items() if k not in conflicts}, disagreement(cap.name, "settings", conflicts)


def _read_warnings(
    export: ExportFile,
    typed: Counter[str],
    memory: MemoryEvidence,
    runtime: Table | None,
    scanned: _Scanned,
    library_calls: pl.DataFrame,
    thread_names: pl.DataFrame,
) -> list[ReportWarning]:
    """What reading found partly unusable: values of the wrong type, allocations of unknown size, the
    scan's integrity counts, broken library calls and names, text that is not UTF-8."""
    out = [
        warned(Reason.of("type_mismatch", table_name=table_name), count)
        for table_name, count in sorted(typed.items())
    ]
    if memory.unsized:
        mem = export.table("CUDA_GPU_MEMORY_USAGE_EVENTS") if memory.table is not None else None
        out.append(
            warned(
                Reason.of("allocation_size_unknown", table=mem.name if mem is not None else 'memory'),
                memory.unsized,
            )
        )
    out += _cuda_api_warnings(runtime.name if runtime is not None else None, scanned.problems,
                              scanned.type_mismatch_rows)
    out += _integrity_warnings(library_calls, memory.allocations)
    if export.text.invalid:  # counted by the connection's text decoder while the tables were read
        out.append(
            warned(Reason.of("invalid_utf8_text"), export.text.invalid)
        )
    return out


def _integrity_warnings(lib: pl.DataFrame, allocations: pl.DataFrame) -> list[ReportWarning]:
    """What is partly broken in the library calls and allocation events (the analysis still runs)."""
    out: list[ReportWarning] = []
    unnamed = lib.filter(pl.col("api").is_null()).height
    if unnamed:
        out.append(warned(Reason.of("dangling_library_name"), unnamed))
    open_ended = lib.filter(pl.col("end_ns").is_null()).height
    if open_ended:
        out.append(
            warned(Reason.of("library_call_without_end"), open_ended)
        )
    reversed_ = lib.filter(pl.col("end_ns") < pl.col("start_ns")).height
    if reversed_:
        out.append(warned(Reason.of("reversed_library_range"), reversed_))
    dup_alloc = allocations.filter(pl.col("events") > 1)
    if dup_alloc.height:
        out.append(
            warned(Reason.of("duplicate_allocation_correlation"), dup_alloc.height)
        )
    return out


# The streaming scan's integrity counts, by problem: the warning's kind (words.cuda_api_problem words it).
CUDA_API_PROBLEMS = {
    "null_start": "null_in_not_null_column",
    "null_end": "null_in_not_null_column",
    "null_return": "null_in_not_null_column",
    "null_name_id": "null_in_not_null_column",
    "null_gtid": "null_global_tid",
    "reversed": "reversed_time_range",
    "dangling_name_id": "dangling_name_id",
}


def _cuda_api_warnings(table: str | None, problems: dict[str, int], mismatched: int) -> list[ReportWarning]:
    """The streaming scan's integrity counts as warnings."""
    columns = {"null_start": "start", "null_end": "end", "null_return": "returnValue", "null_name_id": "nameId"}
    out: list[ReportWarning] = []
    for key, kind in CUDA_API_PROBLEMS.items():
        count = problems.get(key, 0)
        if count:
            out.append(warned(Reason.of("cuda_api_problem", problem=key, table=table, column=columns.get(key)),
                              count, kind=kind))
    if mismatched:
        out.append(
            warned(Reason.of("integer_column_mismatch", table=table), mismatched, kind="type_mismatch")
        )
    return out


def event_records_in(export: ExportFile, table: str | None, regions: pl.DataFrame) -> pl.DataFrame:
    """Successful event-record calls (``CALL_SCHEMA``) on the threads of ``regions``, within their span.

    Read with one query only when a failed stream wait follows a stream-capture region (rare), so
    the streaming scan need not keep every cudaEventRecord of a long run.
    """
    strings = export.table("StringIds")
    if regions.height == 0 or strings is None or table is None:
        return pl.DataFrame(schema=CALL_SCHEMA)
    conn = export.conn
    rows = conn.execute(f"SELECT id, value FROM {quote(strings.name)} WHERE value LIKE '%EventRecord%'").fetchall()
    ids = sorted(int(i) for i, v in rows if type(i) is int and isinstance(v, str) and is_event_record(v))
    if not ids:
        return pl.DataFrame(schema=CALL_SCHEMA)
    threads = sorted(int(g) for g in regions["gtid"].unique().to_list())
    lo, hi = int(regions["begin_start_ns"].min()), int(regions["end_end_ns"].max())  # type: ignore[arg-type]
    try:
        records = frame(
            conn,
            f"""SELECT globalTid, start, "end", correlationId, nameId, NULL, returnValue FROM {quote(table)}
                WHERE nameId IN (SELECT value FROM json_each(?)) AND globalTid IN (SELECT value FROM json_each(?))
                AND start >= ? AND "end" <= ? AND returnValue = 0""",
            CALL_SCHEMA,
            (json.dumps(ids), json.dumps(threads), lo, hi),
        )
    except sqlite3.DatabaseError as exc:
        raise UnusableInput(export.path, f"SQLite failed while reading event records: {exc}") from None
    names = _string_values(conn, strings.name, ids)
    return records.drop("api").join(names, on="name_id", how="left").select(list(CALL_SCHEMA))


def _string_values(conn: sqlite3.Connection, table: str, ids: list[int]) -> pl.DataFrame:
    """``name_id, api`` for the given StringIds ids (ids without a row are absent)."""
    if not ids:
        return pl.DataFrame(schema={"name_id": pl.Int64, "api": pl.String})
    return frame(
        conn,
        f"SELECT id, value FROM {quote(table)} WHERE id IN (SELECT value FROM json_each(?))",
        {"name_id": pl.Int64, "api": pl.String},
        (json.dumps(sorted(int(i) for i in ids)),),
    )
