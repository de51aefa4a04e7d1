"""Build nsys-schema SQLite exports from a small Python description.

The tables are created by executing, verbatim, the ``CREATE TABLE`` statements of the real
Nsight Systems 2023.4.4 export schema (``tests/fixtures/schema/nsys-2023.4.4-export-schema.sql``),
so column comments, ``NOT NULL`` constraints and primary keys are exactly what nsys writes.
Row shapes follow the real H200 export in ``tests/fixtures/h200-cuda13-nsys2023.4/observe.sqlite``; that file is
NOT needed to build fixtures (the few enum rows used are embedded below).

Determinism: the same :class:`Export` gives byte-identical files (no clocks, no randomness).

* StringIds ids are 1..N in order of first use: every string use by an event (runtime call
  name, library API name, registered NVTX text) is ordered by (event start, generation order:
  calls, then lib_calls, then ranges, each in list order); thread names come last, in
  (vm, pid, tid) order.
* Rows of every event table are written sorted by ``start`` (stable: ties keep spec order).
* NVTX library domains (``LibCall(source="nvtx")``) get one NvtxDomainCreate row per
  (vm, pid, library); domain ids are numbered per process from 1 in order of first use,
  as nsys does (a second process gets its own domain 1). The creating thread is the
  process's main thread (tid == pid, as in the real export) and the row's start is 1 ns
  before the process's earliest event in the spec (clamped at 0).
"""

from __future__ import annotations

import datetime as _dt
import os
import pathlib
import re
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

SCHEMA_PATH = (
    pathlib.Path(__file__).resolve().parent
    / "fixtures"
    / "schema"
    / "nsys-2023.4.4-export-schema.sql"
)

DIAGNOSTIC_SCHEMA_PATH = SCHEMA_PATH.with_name("nsys-2025.3-diagnostic-tables.sql")
DEVICE_SCHEMA_PATH = SCHEMA_PATH.with_name("nsys-2025.3-device-tables.sql")
PAYLOAD_SCHEMA_PATH = SCHEMA_PATH.with_name("nsys-2026.2-nvtx-payload-tables.sql")

VM_DEFAULT = 0

_ID_MASK = 0xFFFFFF


def global_pid(pid: int, vm: int = 0) -> int:
    """Serialized GlobalId of a process: (vm << 48) | (pid << 24)."""
    if not 0 <= pid <= _ID_MASK:
        raise ValueError(f"pid out of range: {pid}")
    if not 0 <= vm <= 0xFFFF:
        raise ValueError(f"vm out of range: {vm}")
    return (vm << 48) | (pid << 24)


def global_tid(pid: int, tid: int, vm: int = 0) -> int:
    """Serialized GlobalId of a thread: (vm << 48) | (pid << 24) | tid."""
    if not 0 <= tid <= _ID_MASK:
        raise ValueError(f"tid out of range: {tid}")
    return global_pid(pid, vm) | tid


# --------------------------------------------------------------------------------------------
# Enum rows copied from the real export (tests/fixtures/h200-cuda13-nsys2023.4/observe.sqlite, nsys 2023.4.4.54)
# --------------------------------------------------------------------------------------------

NVTX_PUSH_POP_RANGE = 59
NVTX_START_END_RANGE = 60
NVTX_DOMAIN_CREATE = 75

EVENT_CLASS_CUDA_RUNTIME = 0
EVENT_CLASS_CUDA_DRIVER = 1
EVENT_CLASS_CUDNN = 28
EVENT_CLASS_CUBLAS = 29

MEM_OPER_ALLOCATION = 0
MEM_OPER_DEALLOCATION = 1
MEM_KIND_DEVICE = 2

ENUM_ROWS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_NSYS_EVENT_TYPE": [
        (59, "NvtxPushPopRange", "NvtxPushPopRange"),
        (60, "NvtxStartEndRange", "NvtxStartEndRange"),
        (75, "NvtxDomainCreate", "NvtxDomainCreate"),
    ],
    "ENUM_NSYS_EVENT_CLASS": [
        (0, "TRACE_PROCESS_EVENT_CUDA_RUNTIME", "CUDA runtime"),
        (1, "TRACE_PROCESS_EVENT_CUDA_DRIVER", "CUDA driver"),
        (28, "TRACE_PROCESS_EVENT_CUDNN", "cuDNN"),
        (29, "TRACE_PROCESS_EVENT_CUBLAS", "cuBLAS"),
        (33, "TRACE_PROCESS_EVENT_CUDNN_START", "cuDNN start"),
        (34, "TRACE_PROCESS_EVENT_CUDNN_FINISH", "cuDNN finish"),
        (35, "TRACE_PROCESS_EVENT_CUBLAS_START", "cuBLAS start"),
        (36, "TRACE_PROCESS_EVENT_CUBLAS_FINISH", "cuBLAS finish"),
    ],
    "ENUM_CUDA_DEV_MEM_EVENT_OPER": [
        (0, "CUDA_DEV_MEM_EVENT_OPR_ALLOCATION", "Allocation"),
        (1, "CUDA_DEV_MEM_EVENT_OPR_DEALLOCATION", "Deallocation"),
    ],
    "ENUM_CUDA_MEM_KIND": [
        (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE", "Pageable"),
        (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED", "Pinned"),
        (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE", "Device"),
        (3, "CUDA_MEMOPR_MEMORY_KIND_ARRAY", "Array"),
        (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED", "Managed"),
        (5, "CUDA_MEMOPR_MEMORY_KIND_DEVICE_STATIC", "Device Static"),
        (6, "CUDA_MEMOPR_MEMORY_KIND_MANAGED_STATIC", "Managed Static"),
        (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN", "Unknown"),
    ],
}

# Written only with pool events (an export of nsys 2023.4 to 2025.3 that has them).
POOL_ENUMS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMPOOL_OPER": [
        (0, "CUDA_MEMPOOL_OPERATION_TYPE_INVALID", "Invalid"),
        (1, "CUDA_MEMPOOL_OPERATION_TYPE_CREATED", "Created"),
        (2, "CUDA_MEMPOOL_OPERATION_TYPE_DESTROYED", "Destroyed"),
        (3, "CUDA_MEMPOOL_OPERATION_TYPE_TRIMMED", "Trimmed"),
    ],
    "ENUM_CUDA_MEMPOOL_TYPE": [
        (0, "CUDA_MEMPOOL_TYPE_INVALID", "Invalid"),
        (1, "CUDA_MEMPOOL_TYPE_LOCAL", "Local"),
        (2, "CUDA_MEMPOOL_TYPE_IMPORTED", "Imported"),
    ],
}

# Library -> table / eventClass for the CUBLAS_EVENTS / CUDNN_EVENTS form.
LIBRARY_TABLES: dict[str, tuple[str, int]] = {
    "cuBLAS": ("CUBLAS_EVENTS", EVENT_CLASS_CUBLAS),
    "cuDNN": ("CUDNN_EVENTS", EVENT_CLASS_CUDNN),
}

# META_DATA_CAPTURE rows of the real (scrubbed) observe export; capture_meta overrides/extends.
DEFAULT_CAPTURE_META: tuple[tuple[str, str], ...] = (
    ("DEVICE_ID", "Local (CLI)"),
    ("CAPTURE_EVENT_TYPE", "CuBLAS"),
    ("CAPTURE_EVENT_TYPE", "NvtxEvents"),
    ("CAPTURE_EVENT_TYPE", "Cuda"),
    ("RATE_HZ", "0"),
    ("START_TRIGGER", "Immediate"),
    ("STOP_TRIGGER", "Delayed"),
    ("DEVICE_TYPE", "Unix"),
    ("PROCESS_0:HOW_TO_ATTACH", "LaunchAnother"),
    ("PROCESS_0:COMMAND", "python3"),
    ("PROCESS_0:COLLECT_NVTX_TRACE", "true"),
    ("PROCESS_0:COLLECT_CUDA_TRACE", "true"),
    ("PROCESS_0:COLLECT_GPU_MEMORY_USAGE", "true"),
    ("INCLUDE_CHILDREN", "true"),
)

_SCHEMA_CKSUM_3_7_2 = "2307844469 139029"

THREAD_PRIORITY = 20  # what the real export records for the traced python threads
ALLOC_BASE_ADDRESS = 0x7FC4_0000_0000
ALLOC_GRANULARITY = 2 << 20


# --------------------------------------------------------------------------------------------
# Spec
# --------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One CUPTI_ACTIVITY_KIND_RUNTIME row (plus an optional allocation memory event)."""

    api: str
    start: int
    end: int
    pid: int = 100
    tid: int = 100
    ret: int = 0
    corr: int | None = None
    bytes: int | None = None
    vm: int = 0
    device: int = 0  # the allocation event's deviceId (TARGET_INFO_GPU.id)


@dataclass
class Gpu:
    """A TARGET_INFO_GPU row with the columns that identify a device (the rest NULL)."""

    device: int
    name: str
    total: int | None
    cu_device: int | None = None
    bus: str | None = None
    uuid: str | None = None
    vm: int = 0


@dataclass
class LibCall:
    """A library API range: NVTX domain form (default) or CUBLAS_EVENTS/CUDNN_EVENTS rows."""

    api: str
    start: int
    end: int | None
    pid: int = 100
    tid: int = 100
    library: str = "cuBLAS"
    source: str = "nvtx"
    vm: int = 0
    # For source="table": the row's eventClass (default: the library's call class; 33-36 are the
    # zero-length "cuDNN/cuBLAS start/finish" marker rows nsys writes, with tid 0).
    event_class: int | None = None
    # For source="nvtx": whether the domain gets its NvtxDomainCreate row (nsys 2026.2 wrote none for
    # NCCL's domain in the nsys-ai mfu export: the domain id is used, its name is nowhere).
    domain_row: bool = True


@dataclass
class Diagnostic:
    """One DIAGNOSTIC_EVENT row: severity 1 info, 2 warning, 3 error; ``pid`` None for session rows."""

    timestamp: int
    text: str
    severity: int = 1
    pid: int | None = None
    source: int = 3  # Analysis
    vm: int = 0


# The globalPid nsys gives session-level messages ("Profiling has started.") in the real exports.
SESSION_GLOBAL_PID = -144115188075855872


@dataclass
class MemoryEvent:
    """A CUDA_GPU_MEMORY_USAGE_EVENTS row not tied to a :class:`Call` (op 0 allocation, 1 deallocation).

    ``corr`` 0 is what nsys writes for memory the driver allocates itself (module memory, memKind 5).
    ``pool_*``: the local memory pool columns, as nsys 2025.3 writes them for a ``cudaMallocAsync``
    allocation (the pool's size and utilized size after it) or ``cudaFreeAsync`` (size, and the
    utilized size before it); ``imported_*``: a pool imported from process ``imported_pool_pid``.
    """

    start: int
    pid: int
    bytes: int | None
    corr: int | None = 0
    mem_kind: int = 5
    op: int = 0
    device: int = 0
    address: int = 0
    vm: int = 0
    pool_address: int | None = None
    pool_threshold: int | None = None
    pool_size: int | None = None
    pool_utilized: int | None = None
    imported_pool_address: int | None = None
    imported_pool_pid: int | None = None


@dataclass
class PoolEvent:
    """A CUDA_GPU_MEMORY_POOL_EVENTS row: ``op`` 1 created, 2 destroyed, 3 trimmed; ``pool_type`` 1
    local, 2 imported; ``size`` / ``utilized`` the pool's sizes after the operation."""

    start: int
    pid: int
    address: int
    op: int
    size: int | None
    utilized: int | None = 0
    threshold: int | None = -1
    corr: int | None = None
    pool_type: int = 1
    device: int = 0
    min_bytes_to_keep: int | None = None
    vm: int = 0


@dataclass
class Range:
    """A plain NVTX push/pop range in the default domain (domainId 0)."""

    text: str
    start: int
    end: int | None
    pid: int = 100
    tid: int = 100
    registered: bool = False
    vm: int = 0


@dataclass
class Kernel:
    """A CUPTI_ACTIVITY_KIND_KERNEL row: ``corr`` is its launch's correlation id (a :class:`Call`'s)."""

    start: int
    end: int
    corr: int | None
    pid: int = 100
    stream: int = 7
    name: str = "kernel"
    device: int = 0
    context: int = 1
    vm: int = 0


@dataclass
class Memcpy:
    """A CUPTI_ACTIVITY_KIND_MEMCPY row: ``copy_kind`` 1 host to device, 2 device to host, 8 device to
    device; ``src_kind``/``dst_kind`` ENUM_CUDA_MEM_KIND ids (0 pageable, 1 pinned, 2 device)."""

    start: int
    end: int
    corr: int | None
    pid: int = 100
    stream: int = 7
    bytes: int = 4096
    copy_kind: int = 1
    src_kind: int | None = 1
    dst_kind: int | None = 2
    device: int = 0
    context: int = 1
    vm: int = 0


@dataclass
class Memset:
    """A CUPTI_ACTIVITY_KIND_MEMSET row (``mem_kind``: an ENUM_CUDA_MEM_KIND id, 2 device)."""

    start: int
    end: int
    corr: int | None
    pid: int = 100
    stream: int = 7
    bytes: int = 4096
    mem_kind: int | None = 2
    device: int = 0
    context: int = 1
    vm: int = 0


@dataclass
class Sync:
    """A CUPTI_ACTIVITY_KIND_SYNCHRONIZATION row of a synchronization call (``corr``): the stream it
    synchronized (0xFFFFFFFF: none, a context or event synchronization), ``sync_type`` as nsys 2026.2
    numbers it (3 stream, 4 context, 1 event)."""

    start: int
    end: int
    corr: int
    pid: int = 100
    stream: int = 7
    sync_type: int = 3
    event: int = 0xFFFFFFFF
    device: int = 0
    context: int = 1
    vm: int = 0


# Written only with copy rows or synchronization rows (nsys's own enum rows, as in its exports).
GPU_ENUMS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_CUDA_MEMCPY_OPER": [
        (0, "CUDA_MEMCPY_KIND_UNKNOWN", "Unknown"),
        (1, "CUDA_MEMCPY_KIND_HTOD", "Host-to-Device"),
        (2, "CUDA_MEMCPY_KIND_DTOH", "Device-to-Host"),
        (8, "CUDA_MEMCPY_KIND_DTOD", "Device-to-Device"),
        (10, "CUDA_MEMCPY_KIND_PTOP", "Peer-to-Peer"),
    ],
    "ENUM_CUPTI_SYNC_TYPE": [
        (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN", "Unknown"),
        (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE", "Event sync"),
        (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT", "Stream wait sync"),
        (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE", "Stream sync"),
        (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE", "Context sync"),
    ],
}


@dataclass
class Export:
    calls: list[Call] = field(default_factory=list)
    lib_calls: list[LibCall] = field(default_factory=list)
    ranges: list[Range] = field(default_factory=list)
    thread_names: dict[tuple[int, int], str] = field(default_factory=dict)
    processes: dict[int, str] = field(default_factory=dict)
    session_start_utc_ns: int | None = 1_796_064_718_689_501_058
    nsys_version: str = "2023.4.4.54"
    schema_version: str = "3.7.2"
    omit_tables: set[str] = field(default_factory=set)
    full_schema: bool = False
    capture_meta: dict[str, str] = field(default_factory=dict)
    # DIAGNOSTIC_EVENT rows (nsys 2024.2+); None: no such table, as in nsys 2023.4 exports.
    diagnostics: list[Diagnostic] | None = None
    # ANALYSIS_DETAILS.duration (the trace's length); None: no row.
    analysis_duration: int | None = None
    memory_events: list[MemoryEvent] = field(default_factory=list)
    pool_events: list[PoolEvent] = field(default_factory=list)
    # TARGET_INFO_GPU rows: (device id, name, total memory in bytes or None), on VM ``vm``.
    gpus: list[tuple[int, str, int | None]] = field(default_factory=list)
    # TARGET_INFO_GPU rows with cuDevice, busLocation and uuid (after ``gpus``' rows).
    gpu_info: list[Gpu] = field(default_factory=list)
    # TARGET_INFO_CUDA_DEVICE rows (pid, gpuId, cudaId), as nsys 2025.3 writes them; None: no such table.
    cuda_devices: list[tuple[int, int, int]] | None = None
    # TARGET_INFO_CUDA_CONTEXT_INFO rows (pid, deviceId), context ids from 1 per process.
    contexts: list[tuple[int, int]] = field(default_factory=list)
    # The launched command's recorded environment (PROCESS_0:ENVIRONMENT_VARIABLE rows, ``NAME="value"``)
    # and arguments (PROCESS_0:ARGUMENT_n), after capture_meta's rows.
    environment: list[str] = field(default_factory=list)
    arguments: list[str] = field(default_factory=list)
    # GPU activity: kernels, copies, memsets and the synchronization rows of synchronization calls.
    kernels: list[Kernel] = field(default_factory=list)
    memcpys: list[Memcpy] = field(default_factory=list)
    memsets: list[Memset] = field(default_factory=list)
    syncs: list[Sync] = field(default_factory=list)
    # NVTX_PAYLOAD_SCHEMA_ENTRIES rows (domainId, schemaId, idx, name), with one NVTX_PAYLOAD_SCHEMAS row
    # per (domainId, schemaId); None: no such tables, as in nsys 2023.4 exports.
    payload_schema_entries: list[tuple[int, int, int, str]] | None = None
    # Escape hatch for broken evidence (tests of hostile input only): SQL scripts executed after
    # the build, each in its own connection (so a script after a ``PRAGMA writable_schema`` edit
    # sees the edited schema). Not validated. See :func:`strip_not_null` for writing NULLs into
    # NOT NULL columns.
    raw_sql: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# DDL
# --------------------------------------------------------------------------------------------

_CREATE_RE = re.compile(r"^CREATE TABLE (\w+) \(\n.*?^\)(?=;$)", re.MULTILINE | re.DOTALL)


@cache
def _ddl() -> tuple[tuple[str, str], ...]:
    text = SCHEMA_PATH.read_text(encoding="utf-8")
    found = tuple((m.group(1), m.group(0)) for m in _CREATE_RE.finditer(text))
    if len(found) != text.count("CREATE TABLE"):
        raise RuntimeError(f"could not parse every CREATE TABLE in {SCHEMA_PATH}")
    return found


def ddl_statements() -> dict[str, str]:
    """Table name -> CREATE statement (verbatim, without the trailing ';'), in file order.

    The statement text is exactly what nsys stores in sqlite_master.sql. The DDL file has no
    indexes or views (neither has the real lazy export), so none are created.
    """
    return dict(_ddl())


@cache
def _device_ddl() -> tuple[tuple[str, str], ...]:
    """TARGET_INFO_CUDA_DEVICE, from a real nsys 2025.3 export (the 2023.4.4 DDL has none)."""
    text = DEVICE_SCHEMA_PATH.read_text(encoding="utf-8")
    return tuple((m.group(1), m.group(0)) for m in _CREATE_RE.finditer(text))


@cache
def _payload_ddl() -> tuple[tuple[str, str], ...]:
    """NVTX_PAYLOAD_SCHEMAS and _ENTRIES, from a real nsys 2026.2 export (the 2023.4.4 DDL has none)."""
    text = PAYLOAD_SCHEMA_PATH.read_text(encoding="utf-8")
    return tuple((m.group(1), m.group(0)) for m in _CREATE_RE.finditer(text))


@cache
def _diagnostic_ddl() -> tuple[tuple[str, str], ...]:
    """DIAGNOSTIC_EVENT and its enums, from a real nsys 2025.3 export (the 2023.4.4 DDL has none)."""
    text = DIAGNOSTIC_SCHEMA_PATH.read_text(encoding="utf-8")
    return tuple((m.group(1), m.group(0)) for m in _CREATE_RE.finditer(text))


DIAGNOSTIC_ENUMS: dict[str, list[tuple[int, str, str]]] = {
    "ENUM_DIAGNOSTIC_SEVERITY_LEVEL": [
        (0, "UnknownLevel", "Unknown"), (1, "Info", "Info"), (2, "Warning", "Warning"), (3, "Error", "Error"),
        (4, "Verbose", "Verbose"),
    ],
    "ENUM_DIAGNOSTIC_SOURCE_TYPE": [
        (0, "UnknownSource", "Unknown source"), (1, "Injection", "Injection"), (2, "Daemon", "Daemon"),
        (3, "Analysis", "Analysis"),
    ],
    "ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE": [
        (0, "UnknownTimestamp", "Unknown timestamp"), (1, "TargetTimestamp", "Target timestamp"),
        (2, "HostTimestamp", "Host timestamp"),
    ],
}


# --------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------

_ALWAYS_LAZY = (
    "StringIds",
    "META_DATA_EXPORT",
    "META_DATA_CAPTURE",
    "PROCESSES",
    "ThreadNames",
    *ENUM_ROWS,
)


def _event_class(api: str) -> int:
    return EVENT_CLASS_CUDA_RUNTIME if api.startswith("cuda") else EVENT_CLASS_CUDA_DRIVER


def _utc_text(ns: int) -> str:
    epoch = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
    moment = epoch + _dt.timedelta(microseconds=ns // 1000)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def _export_meta(spec: Export) -> list[tuple[str, str]]:
    parts = spec.schema_version.split(".")
    rows = [
        ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
        ("EXPORT_PRODUCT_VERSION", spec.nsys_version),
        ("EXPORT_PRODUCT_DATE", ".".join(spec.nsys_version.split(".")[:2])),
        ("EXPORT_SCHEMA_VERSION", spec.schema_version),
    ]
    for suffix, part in zip(("MAJOR", "MINOR", "MICRO"), parts, strict=False):
        rows.append((f"EXPORT_SCHEMA_VERSION_{suffix}", part))
    if spec.schema_version == "3.7.2":
        rows.append(("EXPORT_SCHEMA_VERSION_CKSUM", _SCHEMA_CKSUM_3_7_2))
    rows += [
        ("EXPORT_PLATFORM", "linux-desktop"),
        ("EXPORT_ARCH", "x64"),
        ("EXPORT_PARAM_INPUT_FILE", "fixture.nsys-rep"),
        ("EXPORT_PARAM_OUTUPT_FILE", "fixture.sqlite"),  # sic: nsys spells it OUTUPT
        ("EXPORT_PARAM_OVERWRITE", "true"),
        ("EXPORT_PARAM_APPEND", "false"),
        ("EXPORT_PARAM_LAZY", "false" if spec.full_schema else "true"),
        ("EXPORT_PARAM_TIME_NORMALIZE", "false"),
        ("EXPORT_PARAM_TIME_SHIFT", "0"),
        ("EXPORT_CONFIG_TIME_SHIFT", "0"),
    ]
    return rows


def _capture_meta(spec: Export) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for name, value in DEFAULT_CAPTURE_META:
        if name in spec.capture_meta:
            if all(r[0] != name for r in rows):
                rows.append((name, spec.capture_meta[name]))
        else:
            rows.append((name, value))
    defaults = {name for name, _ in DEFAULT_CAPTURE_META}
    rows += [(k, v) for k, v in spec.capture_meta.items() if k not in defaults]
    rows += [(f"PROCESS_0:ARGUMENT_{i}", arg) for i, arg in enumerate(spec.arguments)]
    rows += [("PROCESS_0:ENVIRONMENT_VARIABLE", env) for env in spec.environment]
    return rows


def _validate(spec: Export) -> None:
    for c in spec.calls:
        if c.end < c.start:
            raise ValueError(f"call ends before it starts: {c}")
        if c.bytes is not None and c.bytes < 0:
            raise ValueError(f"negative bytes: {c}")
    for lc in spec.lib_calls:
        if lc.source not in ("nvtx", "table"):
            raise ValueError(f"LibCall.source must be 'nvtx' or 'table': {lc}")
        if lc.source == "table":
            if lc.end is None:
                raise ValueError(f"LibCall with source='table' needs an end: {lc}")
            if lc.library not in LIBRARY_TABLES:
                raise ValueError(f"no event table for library {lc.library!r}: {lc}")
        if lc.end is not None and lc.end < lc.start:
            raise ValueError(f"lib call ends before it starts: {lc}")
    for r in spec.ranges:
        if r.end is not None and r.end < r.start:
            raise ValueError(f"range ends before it starts: {r}")
    unknown = spec.omit_tables - set(ddl_statements())
    if unknown:
        raise ValueError(f"omit_tables names unknown tables: {sorted(unknown)}")


def _by_start(rows: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=lambda row: row[0])  # stable: ties keep generation order


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def add(self, value: str) -> int:
        if value not in self.ids:
            self.ids[value] = len(self.ids) + 1
        return self.ids[value]


def _rows(spec: Export) -> dict[str, list[tuple[Any, ...]]]:
    strings = _Strings()
    # Intern event strings in order of first use: (start, generation order).
    uses: list[tuple[int, int, str]] = []
    for c in spec.calls:
        uses.append((c.start, len(uses), c.api))
    for lc in spec.lib_calls:
        uses.append((lc.start, len(uses), lc.api))
    for r in spec.ranges:
        if r.registered:
            uses.append((r.start, len(uses), r.text))
    for _, _, value in sorted(uses):
        strings.add(value)

    out: dict[str, list[tuple[Any, ...]]] = {}

    # CUDA runtime/driver calls and their allocation events.
    explicit = [c.corr for c in spec.calls if c.corr is not None]
    next_corr = max(explicit, default=0) + 1
    runtime: list[tuple[Any, ...]] = []
    memory: list[tuple[Any, ...]] = []
    address = ALLOC_BASE_ADDRESS
    for c in spec.calls:
        corr = c.corr
        if corr is None:
            corr, next_corr = next_corr, next_corr + 1
        gtid = global_tid(c.pid, c.tid, c.vm)
        runtime.append(
            (c.start, c.end, _event_class(c.api), gtid, corr, strings.ids[c.api], c.ret, None)
        )
        if c.bytes is not None:
            memory.append(
                (
                    c.start + 1, global_pid(c.pid, c.vm), c.device, 1, address, 0, c.bytes,
                    MEM_KIND_DEVICE, MEM_OPER_ALLOCATION, None, corr,
                    None, None, None, None, None, None,
                )
            )
            granules = max(1, -(-c.bytes // ALLOC_GRANULARITY))
            address += granules * ALLOC_GRANULARITY
    for m in spec.memory_events:
        memory.append(
            (
                m.start, global_pid(m.pid, m.vm), m.device, 1, m.address, 0, m.bytes, m.mem_kind, m.op, None,
                m.corr, m.pool_address, m.pool_threshold, m.pool_size, m.pool_utilized,
                m.imported_pool_address, m.imported_pool_pid,
            )
        )
    if spec.pool_events:
        out["CUDA_GPU_MEMORY_POOL_EVENTS"] = _by_start(
            (p.start, global_pid(p.pid, p.vm), p.device, p.address, p.op, p.pool_type, p.corr, p.min_bytes_to_keep,
             p.threshold, p.size, p.utilized)
            for p in spec.pool_events
        )
        out.update({table: list(rows) for table, rows in POOL_ENUMS.items()})
    out["CUPTI_ACTIVITY_KIND_RUNTIME"] = _by_start(runtime)
    out["CUDA_GPU_MEMORY_USAGE_EVENTS"] = _by_start(memory)

    # NVTX: library domains, library ranges, plain user ranges.
    def nvtx(
        start: int, end: int | None, event_type: int, text: str | None, gtid: int,
        text_id: int | None, domain_id: int,
    ) -> tuple[Any, ...]:
        return (start, end, event_type, None, None, None, text, gtid, None, text_id, domain_id,
                None, None, None, None, None, None, None, None)

    earliest: dict[tuple[int, int], int] = {}
    for item in (*spec.calls, *spec.lib_calls, *spec.ranges):
        key = (item.vm, item.pid)
        earliest[key] = min(earliest.get(key, item.start), item.start)

    domains: dict[tuple[int, int, str], int] = {}
    per_process: dict[tuple[int, int], int] = {}
    nvtx_rows: list[tuple[Any, ...]] = []
    lib_tables: dict[str, list[tuple[Any, ...]]] = {t: [] for t, _ in LIBRARY_TABLES.values()}
    for lc in spec.lib_calls:
        gtid = global_tid(lc.pid, lc.tid, lc.vm)
        name_id = strings.ids[lc.api]
        if lc.source == "table":
            table, event_class = LIBRARY_TABLES[lc.library]
            event_class = lc.event_class if lc.event_class is not None else event_class
            lib_tables[table].append((lc.start, lc.end, event_class, gtid, name_id))
            continue
        key = (lc.vm, lc.pid, lc.library)
        if key not in domains:
            proc = (lc.vm, lc.pid)
            domain_id = per_process.get(proc, 0) + 1
            per_process[proc] = domain_id
            domains[key] = domain_id
            if lc.domain_row:
                nvtx_rows.append(
                    nvtx(max(0, earliest[proc] - 1), None, NVTX_DOMAIN_CREATE, lc.library,
                         global_tid(lc.pid, lc.pid, lc.vm), None, domain_id)
                )
        nvtx_rows.append(
            nvtx(lc.start, lc.end, NVTX_PUSH_POP_RANGE, None, gtid, name_id, domains[key])
        )
    for r in spec.ranges:
        gtid = global_tid(r.pid, r.tid, r.vm)
        if r.registered:
            row = nvtx(r.start, r.end, NVTX_PUSH_POP_RANGE, None, gtid, strings.ids[r.text], 0)
        else:
            row = nvtx(r.start, r.end, NVTX_PUSH_POP_RANGE, r.text, gtid, None, 0)
        nvtx_rows.append(row)
    out["NVTX_EVENTS"] = _by_start(nvtx_rows)
    for table, rows in lib_tables.items():
        out[table] = _by_start(rows)

    # Threads and processes. thread_names keys are (pid, tid); the vm of a named thread is
    # taken from the events that use it (every vm that uses it, or 0 when unused).
    thread_vms: dict[tuple[int, int], set[int]] = {}
    pids: set[tuple[int, int]] = set()
    for item in (*spec.calls, *spec.lib_calls, *spec.ranges):
        thread_vms.setdefault((item.pid, item.tid), set()).add(item.vm)
        pids.add((item.vm, item.pid))
    thread_rows: list[tuple[int, int, int, str]] = []
    for (pid, tid), name in spec.thread_names.items():
        for vm in thread_vms.get((pid, tid), {VM_DEFAULT}):
            thread_rows.append((vm, pid, tid, name))
            pids.add((vm, pid))
    thread_rows.sort()
    for _, _, _, name in thread_rows:
        strings.add(name)
    out["ThreadNames"] = [
        (strings.ids[name], THREAD_PRIORITY, global_tid(pid, tid, vm))
        for vm, pid, tid, name in thread_rows
    ]
    _gpu_rows(spec, strings, out)
    for pid in spec.processes:
        if not any(p == pid for _, p in pids):
            pids.add((VM_DEFAULT, pid))
    out["PROCESSES"] = [
        (global_pid(pid, vm), pid, spec.processes.get(pid, "proc")) for vm, pid in sorted(pids)
    ]

    out["StringIds"] = [(i, value) for value, i in strings.ids.items()]
    out["META_DATA_EXPORT"] = _export_meta(spec)
    out["META_DATA_CAPTURE"] = _capture_meta(spec)
    if spec.session_start_utc_ns is not None:
        text = _utc_text(spec.session_start_utc_ns)
        out["TARGET_INFO_SESSION_START_TIME"] = [(spec.session_start_utc_ns, text, text)]
    for table, enum_rows in ENUM_ROWS.items():
        out[table] = list(enum_rows)
    if spec.diagnostics is not None:
        out["DIAGNOSTIC_EVENT"] = [
            (d.timestamp, 1, d.source, d.severity, d.text,
             SESSION_GLOBAL_PID if d.pid is None else global_pid(d.pid, d.vm))
            for d in spec.diagnostics
        ]
        out.update({table: list(rows) for table, rows in DIAGNOSTIC_ENUMS.items()})
    if spec.gpus or spec.gpu_info:
        out["TARGET_INFO_GPU"] = [
            (VM_DEFAULT << 48, device, name, None, 1, None, total, *([None] * 34)) for device, name, total in spec.gpus
        ] + [
            (g.vm << 48, g.device, g.name, g.bus, 1, None, g.total, None, None, None, None, g.uuid, None, None,
             g.cu_device, *([None] * 26))
            for g in spec.gpu_info
        ]
    if spec.payload_schema_entries is not None:
        out["NVTX_PAYLOAD_SCHEMA_ENTRIES"] = [
            (domain, schema, idx, None, 18 if idx == 0 else 5, name, None, None, None if idx == 0 else 8 * idx)
            for domain, schema, idx, name in spec.payload_schema_entries
        ]
        counts: dict[tuple[int, int], int] = {}
        for domain, schema, _, _ in spec.payload_schema_entries:
            counts[(domain, schema)] = counts.get((domain, schema), 0) + 1
        out["NVTX_PAYLOAD_SCHEMAS"] = [(d, sid, None, 1, None, n, 8 * n, None) for (d, sid), n in counts.items()]
    if spec.cuda_devices is not None:
        out["TARGET_INFO_CUDA_DEVICE"] = [(gpu, cuda, pid) for pid, gpu, cuda in spec.cuda_devices]
    if spec.contexts:
        numbered: dict[int, int] = {}
        rows_ctx = []
        for pid, device in spec.contexts:
            numbered[pid] = numbered.get(pid, 0) + 1
            rows_ctx.append((7, 0, VM_DEFAULT, pid, device, numbered[pid], 0, 0))
        out["TARGET_INFO_CUDA_CONTEXT_INFO"] = rows_ctx
    if spec.analysis_duration is not None:
        out["ANALYSIS_DETAILS"] = [(1 << 48, spec.analysis_duration, 1_000, 1_000 + spec.analysis_duration)]
    return out


def _gpu_rows(spec: Export, strings: _Strings, out: dict[str, list[tuple[Any, ...]]]) -> None:
    """KERNEL, MEMCPY, MEMSET and SYNCHRONIZATION rows (their strings after every other string)."""
    for k in spec.kernels:
        strings.add(k.name)
    if spec.kernels:
        out["CUPTI_ACTIVITY_KIND_KERNEL"] = _by_start(
            (k.start, k.end, k.device, k.context, None, k.stream, k.corr, global_pid(k.pid, k.vm),
             strings.ids[k.name], strings.ids[k.name], None, 0, 0, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, i, 0, None, None)
            for i, k in enumerate(spec.kernels)
        )
    if spec.memcpys:
        out["CUPTI_ACTIVITY_KIND_MEMCPY"] = _by_start(
            (m.start, m.end, m.device, m.context, None, m.stream, m.corr, global_pid(m.pid, m.vm), m.bytes,
             m.copy_kind, None, m.src_kind, m.dst_kind, None, None, None, None, None, None, None)
            for m in spec.memcpys
        )
    if spec.memsets:
        out["CUPTI_ACTIVITY_KIND_MEMSET"] = _by_start(
            (m.start, m.end, m.device, m.context, None, m.stream, m.corr, global_pid(m.pid, m.vm), 0, m.bytes,
             None, m.mem_kind)
            for m in spec.memsets
        )
    if spec.syncs:
        out["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"] = _by_start(
            (y.start, y.end, y.device, y.context, None, y.stream, y.corr, global_pid(y.pid, y.vm), y.sync_type,
             y.event)
            for y in spec.syncs
        )
    if spec.memcpys or spec.syncs:
        out.update({table: list(rows) for table, rows in GPU_ENUMS.items()})


def _tables_to_create(spec: Export, rows: dict[str, Sequence[tuple[Any, ...]]]) -> list[str]:
    statements = ddl_statements()
    if spec.full_schema:
        wanted = set(statements)
    else:
        wanted = {t for t, r in rows.items() if r} | set(_ALWAYS_LAZY)
        if spec.session_start_utc_ns is not None:
            wanted.add("TARGET_INFO_SESSION_START_TIME")
    wanted -= spec.omit_tables
    tables = [t for t in statements if t in wanted]  # DDL file order (alphabetical, like nsys)
    if spec.diagnostics is not None:
        tables += [t for t, _ in _diagnostic_ddl() if t not in spec.omit_tables]
    if spec.cuda_devices is not None:
        tables += [t for t, _ in _device_ddl() if t not in spec.omit_tables]
    if spec.payload_schema_entries is not None:
        tables += [t for t, _ in _payload_ddl() if t not in spec.omit_tables]
    return tables


def build_export(spec: Export, path: str | os.PathLike[str]) -> pathlib.Path:
    """Write ``spec`` as a new nsys-schema SQLite file at ``path`` and return the path.

    Raises FileExistsError if ``path`` exists. Rows destined for a table that is not created
    (``omit_tables``) are dropped, like an export without that trace.
    """
    _validate(spec)
    out = pathlib.Path(path)
    rows = _rows(spec)
    tables = _tables_to_create(spec, rows)
    statements = {**ddl_statements(), **dict(_diagnostic_ddl()), **dict(_device_ddl()), **dict(_payload_ddl())}
    with open(out, "xb"):
        pass  # exclusive create: refuse to overwrite
    try:
        conn = sqlite3.connect(out, isolation_level=None)
        try:
            conn.execute("BEGIN")
            for table in tables:
                conn.execute(statements[table])
            for table in tables:
                table_rows = rows.get(table)
                if not table_rows:
                    continue
                marks = ", ".join("?" * len(table_rows[0]))
                conn.executemany(f"INSERT INTO {table} VALUES ({marks})", table_rows)
            conn.execute("COMMIT")
        finally:
            conn.close()
        for script in spec.raw_sql:
            raw = sqlite3.connect(out, isolation_level=None)
            try:
                raw.executescript(script)
            finally:
                raw.close()
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return out


def strip_not_null(table: str) -> str:
    """A ``raw_sql`` script that drops ``table``'s NOT NULL constraints (its DDL text loses them).

    Real exports declare NOT NULL; a damaged or crafted one can still hold NULLs there. SQLite
    enforces the declared constraints on writes, so a test that needs such rows first edits the
    schema text; readers only look at column names, so nothing else changes.
    """
    return (
        "PRAGMA writable_schema = ON;"
        f"UPDATE sqlite_master SET sql = replace(sql, ' NOT NULL', '') WHERE type = 'table' AND name = '{table}';"
        "PRAGMA writable_schema = OFF;"
        "PRAGMA schema_version = 4242;"
    )
