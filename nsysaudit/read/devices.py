"""Which GPU each traced process used, and what nsys recorded about the command it launched.

What the export says, table by table (column comments of the nsys schema, and what the real
exports in ``tests/fixtures`` hold):

- ``TARGET_INFO_GPU``: one row per GPU of the target: ``id`` ("Device ID."), ``cuDevice`` ("CUDA
  device ID.", the CUDA ordinal as nsys enumerated the devices), ``name``, ``busLocation``, ``uuid``,
  ``totalMemory``. ``id`` and ``cuDevice`` need not agree: pipit's 4x A100 export (nsys 2024.5) has
  id 0 = cuDevice 3 and id 3 = cuDevice 0.
- ``CUDA_GPU_MEMORY_USAGE_EVENTS.deviceId`` and ``TARGET_INFO_CUDA_CONTEXT_INFO.deviceId`` ("Device
  ID.") are ``TARGET_INFO_GPU.id``: the same comment as that column, and nsys's own ``cuda_gpu_trace``
  stats report joins the activity tables' ``deviceId`` to ``TARGET_INFO_GPU.id``, never to ``cuDevice``.
- ``TARGET_INFO_CUDA_DEVICE`` (nsys 2025.x; not in the 2023.4 schema): per process (``pid``), which
  GPU (``gpuId`` = ``TARGET_INFO_GPU.id``) is which CUDA device of that process (``cudaId``: the
  ordinal the process itself sees, after its ``CUDA_VISIBLE_DEVICES``; ``cuda:N`` in PyTorch).
- ``TARGET_INFO_CUDA_CONTEXT_INFO``: each CUDA context a process created (``processId``) and its device.
- ``META_DATA_CAPTURE``: ``PROCESS_<n>:COMMAND``, ``PROCESS_<n>:ARGUMENT_<k>`` and (where nsys recorded
  it and it was not scrubbed) ``PROCESS_<n>:ENVIRONMENT_VARIABLE`` (``NAME="value"``, one row each) of
  the command nsys **launched**, and ``PROCESS_<n>:PID`` (0 in every real export here: not recorded).
  The processes that command started are traced too (``INCLUDE_CHILDREN``), but nsys records no
  environment and no command line of theirs: ``PROCESSES`` has only ``globalPid, pid, name``.
  ``TARGET_INFO_SYSTEM_ENV`` holds the target's properties (CPU, driver, ``GpuInfo``), not a process's
  environment.

Nothing here decides a rank: :mod:`nsysaudit.analysis.devices` does, from these values.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import polars as pl

from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.ids import vm_sql
from nsysaudit.core.shapes import Schema
from nsysaudit.read.memory import FrameBuilder, MemoryEvidence
from nsysaudit.read.source import ExportFile, Table, quote
from nsysaudit.read.unique import disagreement, one_per_key

GPU_SCHEMA: Schema = {
    "vm": pl.Int64,
    "device_id": pl.Int64,
    "cuda_device": pl.Int64,
    "name": pl.String,
    "bus_location": pl.String,
    "uuid": pl.String,
    "total_bytes": pl.Int64,
}
CUDA_DEVICE_SCHEMA: Schema = {"pid": pl.Int64, "device_id": pl.Int64, "cuda_device": pl.Int64}
CONTEXT_SCHEMA: Schema = {"vm": pl.Int64, "pid": pl.Int64, "device_id": pl.Int64, "context_id": pl.Int64}
MEMORY_USE_SCHEMA: Schema = {"gpid": pl.Int64, "device_id": pl.Int64, "events": pl.Int64}

_PROCESS_KEY = re.compile(r"\APROCESS_([0-9]+):(COMMAND|PID|ENVIRONMENT_VARIABLE|ARGUMENT_([0-9]+))\Z")


@dataclass(frozen=True)
class Launch:
    """A command nsys launched (``PROCESS_<index>`` of META_DATA_CAPTURE), as recorded.

    ``environment``: its ``ENVIRONMENT_VARIABLE`` rows as (name, value), the value's enclosing double
    quotes removed, in row order (empty when nsys recorded none, or they were scrubbed:
    ``environment_rows`` 0). ``pid``: ``PROCESS_<index>:PID`` when it names a process (not 0)."""

    index: int
    command: str | None
    arguments: tuple[str, ...]
    environment: tuple[tuple[str, str], ...]
    environment_rows: int
    pid: int | None

    def values(self, name: str) -> tuple[str, ...]:
        """The distinct values the rows naming environment variable ``name`` give it, in row order."""
        return tuple(dict.fromkeys(value for key, value in self.environment if key == name))

    def variable(self, name: str) -> str | None:
        """The value of environment variable ``name``, or None: none recorded, or rows that disagree
        (``RANK="1"`` and ``RANK="0"``: unknown, never the last row's)."""
        found = self.values(name)
        return found[0] if len(found) == 1 else None

    def conflicts(self) -> dict[str, list[str]]:
        """The environment variables whose rows disagree, with their values."""
        names = dict.fromkeys(key for key, _ in self.environment)
        return {n: list(vs) for n in names if len(vs := self.values(n)) > 1}


@dataclass(frozen=True)
class DeviceTables:
    """What the export says about devices and the launched command (see the module docstring).

    - ``gpus``: TARGET_INFO_GPU (:data:`GPU_SCHEMA`), one row per device, sorted by (vm, device_id).
    - ``cuda_devices``: TARGET_INFO_CUDA_DEVICE (:data:`CUDA_DEVICE_SCHEMA`): ``device_id`` is its
      ``gpuId``, ``cuda_device`` its ``cudaId`` (the process's own ordinal).
    - ``contexts``: TARGET_INFO_CUDA_CONTEXT_INFO (:data:`CONTEXT_SCHEMA`).
    - ``memory_use``: memory events per (globalPid, deviceId) (:data:`MEMORY_USE_SCHEMA`).
    - ``launches``: the commands nsys launched, from META_DATA_CAPTURE.
    - ``tables``: the tables each frame was read from (absent: the export has no such table).
    - ``warnings``: rows of one key that disagree (two totals for a device, two values of a launched
      command's variable): those values are unknown.
    """

    gpus: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=GPU_SCHEMA))
    cuda_devices: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CUDA_DEVICE_SCHEMA))
    contexts: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CONTEXT_SCHEMA))
    memory_use: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=MEMORY_USE_SCHEMA))
    launches: tuple[Launch, ...] = ()
    tables: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[ReportWarning, ...] = ()


def environment_entry(row: str) -> tuple[str, str]:
    """One ``ENVIRONMENT_VARIABLE`` row as (name, value): ``RANK="1"`` -> ("RANK", "1"). A value nsys
    did not quote is kept as written.

    >>> environment_entry('CUDA_VISIBLE_DEVICES="0,1,2,3"')
    ('CUDA_VISIBLE_DEVICES', '0,1,2,3')
    """
    name, _, value = row.partition("=")
    if len(value) >= 2 and value.startswith('"') and value.endswith('"'):
        value = value[1:-1]
    return name, value


@dataclass
class _Recorded:
    """What META_DATA_CAPTURE records of one ``PROCESS_<index>``, as its rows are read."""

    command: str | None = None
    pid: int | None = None
    args: dict[int, str] = field(default_factory=dict)
    env: list[tuple[str, str]] = field(default_factory=list)


def launches(capture: Mapping[str, list[str]]) -> tuple[Launch, ...]:
    """The commands nsys launched, from META_DATA_CAPTURE (``capture``: key -> values, in row order)."""
    found: dict[int, _Recorded] = {}
    for key, values in capture.items():
        m = _PROCESS_KEY.match(key)
        if m is None or not values:
            continue
        entry = found.setdefault(int(m.group(1)), _Recorded())
        what = m.group(2)
        if what == "COMMAND":
            entry.command = values[-1]
        elif what == "PID":
            value = values[-1].strip()
            entry.pid = int(value) if value.isascii() and value.isdigit() and int(value) > 0 else None
        elif what == "ENVIRONMENT_VARIABLE":
            entry.env += [environment_entry(v) for v in values]
        else:
            entry.args[int(m.group(3))] = values[-1]
    return tuple(
        Launch(
            index=index,
            command=e.command,
            arguments=tuple(e.args[k] for k in sorted(e.args)),
            environment=tuple(e.env),
            environment_rows=len(e.env),
            pid=e.pid,
        )
        for index, e in sorted(found.items())
    )


def read_devices(
    export: ExportFile, frame: FrameBuilder, typed: Counter[str], memory: MemoryEvidence | None,
    capture: Mapping[str, list[str]],
) -> DeviceTables:
    """Read :class:`DeviceTables` from ``export``. ``frame`` is the strict frame builder of
    :mod:`nsysaudit.read.trace` (wrong-typed values become NULL, counted in ``typed``)."""
    conn = export.conn
    tables: dict[str, str] = {}
    out: dict[str, pl.DataFrame] = {}
    warnings: list[ReportWarning] = []

    def col(t: Table, name: str) -> str:
        return quote(name) if t.has(name) else "NULL"

    gpu = export.table("TARGET_INFO_GPU")
    if gpu is not None and gpu.has("id"):
        vm = vm_sql(quote("vmId")) if gpu.has("vmId") else "0"  # vmId: a serialized GlobalId
        sql = (f"SELECT {vm}, id, {col(gpu, 'cuDevice')}, {col(gpu, 'name')}, {col(gpu, 'busLocation')}, "
               f"{col(gpu, 'uuid')}, {col(gpu, 'totalMemory')} FROM {quote(gpu.name)} ORDER BY 1, 2")
        out["gpus"], said = one_per_key(
            frame(conn, sql, GPU_SCHEMA, mismatched=typed, source=gpu.name), ["vm", "device_id"], gpu.name,
            {"vm": "vm", "device_id": "id", "cuda_device": "cuDevice", "bus_location": "busLocation",
             "total_bytes": "totalMemory"})
        warnings += said
        tables["gpus"] = gpu.name
    cuda = export.table("TARGET_INFO_CUDA_DEVICE")
    if cuda is not None and cuda.has("gpuId", "cudaId", "pid"):
        sql = f"SELECT pid, gpuId, cudaId FROM {quote(cuda.name)} ORDER BY 1, 2, 3"
        out["cuda_devices"], said = one_per_key(
            frame(conn, sql, CUDA_DEVICE_SCHEMA, mismatched=typed, source=cuda.name), ["pid", "device_id"],
            cuda.name, {"device_id": "gpuId", "cuda_device": "cudaId"})
        warnings += said
        tables["cuda_devices"] = cuda.name
    ctx = export.table("TARGET_INFO_CUDA_CONTEXT_INFO")
    if ctx is not None and ctx.has("processId", "deviceId"):
        sql = (f"SELECT {col(ctx, 'vmId')}, processId, deviceId, {col(ctx, 'contextId')} FROM {quote(ctx.name)} "
               "ORDER BY 2, 3, 4")
        out["contexts"] = frame(conn, sql, CONTEXT_SCHEMA, mismatched=typed, source=ctx.name)
        tables["contexts"] = ctx.name
    if memory is not None and memory.table is not None:
        out["memory_use"] = (
            memory.events.group_by("gpid", "device_id").agg(pl.len().cast(pl.Int64).alias("events"))
            .sort("gpid", "device_id", nulls_last=True).cast(MEMORY_USE_SCHEMA)  # type: ignore[arg-type]
        )
        tables["memory_use"] = memory.table
    launched = launches(capture)
    cap = export.table("META_DATA_CAPTURE")
    for launch in launched:
        warnings += disagreement(
            f"{cap.name if cap is not None else 'META_DATA_CAPTURE'} PROCESS_{launch.index}:ENVIRONMENT_VARIABLE",
            "variables", launch.conflicts())
    return DeviceTables(**out, launches=launched, tables=tables, warnings=tuple(warnings))
