"""The device-memory ledger: who held the device's memory, and how little could have been free, at each moment.

From CUDA_GPU_MEMORY_USAGE_EVENTS (and CUDA_GPU_MEMORY_POOL_EVENTS) the ledger keeps, per device and
per process, the bytes held on the trace clock, by the **mechanism** that holds them:

- ``segments``: plain allocations (``cudaMalloc*``, ``cuMemAlloc*``, PyTorch's default caching
  allocator), live from their allocation event to the deallocation event of ``cudaFree*`` /
  ``cuMemFree*`` at the same (process, device, address).
- ``mapped``: virtual memory management (PyTorch's expandable segments): physical memory is live
  from the moment it is mapped and made accessible (nsys writes the allocation event at
  ``cuMemSetAccess``) until ``cuMemUnmap`` (the deallocation event). ``cuMemCreate`` and
  ``cuMemRelease`` make and drop handles and have no memory event: releasing a handle frees nothing
  while the memory is mapped. Address ranges reserved with ``cuMemAddressReserve`` are not memory.
- ``pool``: CUDA memory pools (``cudaMallocAsync``, PyTorch's ``backend:cudaMallocAsync``): what a
  pool holds on the device is its size, from the pool columns of each event and from the pool's own
  events (created, trimmed, destroyed); its allocations and frees only change how much of it is in
  use (``pool_utilized``). A free into a pool gives nothing back to the device; a trim does.
  Memory of a pool imported from another process counts once, in its owner (``imported_pool``).
- ``static``: memory the driver allocates itself (module memory, correlation id 0).
- ``managed`` (may reside on the host: shown, never subtracted) and ``host`` (pinned or pageable
  host memory, and kinds nsys does not name) are not device-resident.

A deallocation frees the oldest live allocation at its (process, device, address), and subtracts
that allocation's bytes; one with no live allocation there freed memory allocated before the capture
began: it is counted (``freed_never_allocated``) and left out. So the traced live bytes are a LOWER
bound on what was really held, never below zero, and ``total - held`` an UPPER bound on what could
have been free, never above the device's total.

What the bound does not count: CUDA contexts and the driver's own reservations (no memory event),
processes the capture did not trace, memory allocated before the capture began and never freed in
it, managed memory. And it holds only if every successful free the trace shows freed nothing it does
not record: a free call with no deallocation event of its own correlation id (``cudaFree(NULL)``,
which PyTorch and cuBLAS call to initialize a context and which frees nothing, is the usual one) is
counted (``free_calls_without_event``) and named at each moment it precedes.

Completeness is stated, never assumed: no ledger is claimed (``claimed`` False, ``why_not``) only
where the evidence is missing: no usage table, collection off (META_DATA_CAPTURE
``COLLECT_GPU_MEMORY_USAGE``), events without a usable size, or pool allocations without the pool's
size. An export without any deallocation event is evidence that nothing was freed, not a gap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, NotRequired, TypedDict, get_args, overload

import polars as pl

from nsysaudit.analysis.coverage import CensoredReason
from nsysaudit.analysis.joins import join_column
from nsysaudit.core.codes import is_device_free_api, is_pool_api, vmm_role
from nsysaudit.core.errors import ReportWarning, warning
from nsysaudit.core.ids import decode_pid, decode_vm, global_pid, pid_of
from nsysaudit.core.order import sort_stable
from nsysaudit.core.reasons import Reason
from nsysaudit.core.shapes import Schema
from nsysaudit.read.memory import POOL_CREATED, POOL_DESTROYED, POOL_EVENT_SCHEMA, POOL_TRIMMED, MemoryEvidence
from nsysaudit.words import ADDRESS_LIVE_TWICE_FORMAT, NOT_COUNTED, say, warned

DEVICE_RESIDENT = frozenset({"Device", "Array", "Device Static"})
MANAGED = frozenset({"Managed", "Managed Static"})
# The mechanisms a device-resident byte is held by, in the order they are shown; ``pool_utilized``
# is the part of ``pool_reserved`` in use, not more memory.
HELD = ("segments", "mapped", "pool_reserved", "static")
HeldBy = Literal["segments", "mapped", "pool_reserved", "pool_utilized", "static"]
BY_MECHANISM: tuple[HeldBy, ...] = get_args(HeldBy)
# How memory is held (docs/ledger.md): plain allocations, VMM maps, pool allocations, allocations from
# an imported pool, driver module memory, managed memory, host or unknown kinds.
Mechanism = Literal["segments", "mapped", "pool", "imported_pool", "static", "managed", "host"]
MECHANISMS: tuple[Mechanism, ...] = get_args(Mechanism)
# Sizes past this are damage (no device holds 4 EiB): their sums are not formed in 64 bits.
SIZE_LIMIT = 1 << 62
SERIES_SCHEMA: Schema = {
    "start_ns": pl.Int64,
    "vm": pl.Int64,
    "device_id": pl.Int64,
    "gpid": pl.Int64,
    "pid": pl.Int64,
    "kind": pl.String,
    "operation": pl.String,
    "bytes": pl.Int64,
    "delta": pl.Int64,
    "correlation_id": pl.Int64,
    "api": pl.String,
    "process_live": pl.Int64,
    "device_resident_live": pl.Int64,
    "mechanism": pl.String,
    "resident_delta": pl.Int64,
    "utilized_delta": pl.Int64,
    "pool_address": pl.Int64,
    "pool_size": pl.Int64,
}
GAP_SCHEMA: Schema = {"gpid": pl.Int64, "start_ns": pl.Int64, "correlation_id": pl.Int64, "api": pl.String}
EXAMPLES = 5
GAP_EXAMPLES_AT = 3


# --- what the ledger says, as the documents hold it (named in nsysaudit.reports.documents) ---------

# The moments the ledger is read at (:func:`points`).
PointKind = Literal["finding", "library_call", "censored_library_call", "telemetry"]


class ByMechanism(TypedDict):
    segments: int
    mapped: int
    pool_reserved: int
    pool_utilized: int
    static: int


class MechanismCounts(TypedDict):
    allocation_events: int
    allocated_bytes: int
    deallocation_events: int


class CallAllocations(TypedDict):
    call: str
    api: str | None
    kind: str
    events: int
    bytes: int


class DeviceProcess(TypedDict):
    """One process's memory on one device over the whole trace."""

    pid: int | None
    global_pid: int | None
    allocated_bytes: int
    driver_allocated_bytes: int
    freed_bytes: int
    live_bytes_at_end: int
    live_bytes_by_kind_at_end: dict[str, int]
    held_by_mechanism_at_end: ByMechanism
    allocations_by_call: list[CallAllocations]


class Device(TypedDict):
    """A device the export names, what was allocated on it, and (when the ledger is claimed,
    ``memory.ledger``) what was freed and live, its peak and each process's share."""

    device_id: int | None
    vm: int | None
    name: str | None
    total_bytes: int | None
    allocation_events: int
    allocated_bytes: int
    allocated_bytes_by_kind: dict[str, int]
    freed_bytes: NotRequired[int]
    live_bytes_at_end: NotRequired[int]
    live_bytes_by_kind_at_end: NotRequired[dict[str, int]]
    device_resident_live_bytes_at_end: NotRequired[int]
    held_by_mechanism_at_end: NotRequired[ByMechanism]
    peak_device_resident_live_bytes: NotRequired[int]
    peak_at_ns: NotRequired[int | None]
    processes: NotRequired[list[DeviceProcess]]


class PointProcess(TypedDict):
    pid: int | None
    global_pid: int
    resident_bytes: int
    managed_bytes: int
    imported_pool_bytes: int
    by_mechanism: ByMechanism


class PointDevice(TypedDict):
    """A device at a moment: what was live, and the bound on what could have been free."""

    device_id: int | None
    vm: int | None
    total_bytes: int | None
    process_has_events: bool
    process_live_bytes: int
    device_resident_live_bytes: int
    managed_live_bytes: int
    freed_before_bytes: int
    free_at_most_bytes: int | None
    live_bytes_by_kind: dict[str, int]
    by_mechanism: ByMechanism
    processes: list[PointProcess]
    bound_unknown: NotRequired[str]


# A moment's own key (``finding``: the finding's index, ``lib_id``: the library call's, ``line``: the
# telemetry line's number) and its value; a finding's moment also carries ``finding_number``, the
# finding's number from 1 as every report for people numbers it (``findings[].number``).
PointKeyName = Literal["finding", "lib_id", "line"]


class LedgerPoint(TypedDict):
    """The ledger at one moment, as :func:`points` reads it (the analysis adds ``covered``)."""

    point: PointKind
    label: str
    t_ns: int | None
    pid: int | None
    global_pid: int | None
    devices: list[PointDevice]
    free_calls_without_event_before: NotRequired[int]
    free_calls_without_event_examples: NotRequired[list[int]]
    unknown: NotRequired[str]
    finding: NotRequired[int]
    finding_number: NotRequired[int]
    lib_id: NotRequired[int]
    line: NotRequired[int]
    censored_reasons: NotRequired[list[CensoredReason]]  # the analysis sets them where it is not covered


class CoveredPoint(LedgerPoint):
    """A ledger point and whether the trace covers its moment (:mod:`nsysaudit.analysis.run` decides;
    the report adds ``holder``)."""

    covered: bool


class MemoryPoint(CoveredPoint):
    """The ledger at one moment (a finding, a library call, a censored call, a telemetry line, the end)."""

    holder: str


class FreeCallsWithoutEvent(TypedDict):
    count: int
    by_api: dict[str, int]
    example_correlation_ids: list[int]
    note: str


class FreedNeverAllocated(TypedDict):
    events: int
    bytes: int


class Pool(TypedDict):
    address: int | None
    pid: int | None
    global_pid: int | None
    device_id: int | None
    created: bool
    destroyed: bool
    allocation_events: int
    deallocation_events: int
    trims: int
    peak_size_bytes: int
    size_at_end_bytes: int
    utilized_at_end_bytes: int


class VirtualMemory(TypedDict):
    address_reservations: int
    address_frees: int
    handles_created: int
    handles_released: int
    mapped_events: int
    unmapped_events: int
    note: str


class TelemetryPoints(TypedDict):
    lines: int
    read_at: int
    rule: str


class Memory(TypedDict):
    """The memory ledger (docs/ledger.md): per device and process, and at each moment (``at``)."""

    ledger: bool
    why_no_ledger: str | None
    at: list[MemoryPoint]
    collected: NotRequired[bool | None]
    events: NotRequired[int]
    allocation_events: NotRequired[int]
    deallocation_events: NotRequired[int]
    kinds: NotRequired[dict[str, str]]
    mechanisms: NotRequired[dict[Mechanism, MechanismCounts]]
    devices: NotRequired[list[Device]]
    pools: NotRequired[list[Pool]]
    virtual_memory: NotRequired[VirtualMemory]
    free_calls_without_event: NotRequired[FreeCallsWithoutEvent]
    freed_never_allocated: NotRequired[FreedNeverAllocated]
    not_counted: NotRequired[list[str]]
    telemetry_points: NotRequired[TelemetryPoints]


@dataclass(frozen=True)
class Ledger:
    """Bytes held over time by process and mechanism, or why none is claimed.

    ``series``: one row per counted event in time order (:data:`SERIES_SCHEMA`): ``delta`` (the change
    in bytes the process holds: + an allocation, - a matched deallocation, a pool's size change),
    ``resident_delta`` (the device-resident part of it), ``utilized_delta`` (a pool's change in use),
    ``mechanism``, ``process_live`` (the process's held bytes on that device, every kind) and
    ``device_resident_live`` (all processes' device-resident bytes on that device) just after it.
    Pool operations (created, trimmed, destroyed) are rows too, with ``bytes`` null. Empty when
    ``claimed`` is False. ``gaps``: the successful free calls with no deallocation event of their own
    correlation id (:data:`GAP_SCHEMA`), in time order. ``summary``: the document's ``memory`` key as
    the ledger gives it, per device and process (``ledger`` and ``why_no_ledger`` are ``claimed`` and
    ``why_not``); its points (``at``) are read with :func:`points`, and empty here.
    """

    claimed: bool
    why_not: str | None
    collected: bool | None
    series: pl.DataFrame
    devices: pl.DataFrame
    summary: Memory
    gaps: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=GAP_SCHEMA))
    warnings: tuple[ReportWarning, ...] = ()
    # Each process's last CUDA API record (global pid -> ns): named where the traced bytes exceed the
    # device's total (a process's memory goes back at its exit without deallocation events).
    api_ends: Mapping[int, int] = field(default_factory=dict)
    # Spans over which allocation events lie at an address already live (:func:`_double_allocations`):
    # the bound on free memory of their device is unknown there.
    conflicts: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=CONFLICT_SCHEMA))

    def at(self, t_ns: int, gpid: int | None) -> list[PointDevice]:
        """Per device the process ``gpid`` used, just after ``t_ns``: its held bytes, every traced
        process's device-resident bytes by mechanism, their total, the device's total and the upper
        bound on free memory (see :meth:`at_many`)."""
        return self.at_many([(t_ns, gpid)])[0]

    def at_many(self, moments: Sequence[tuple[int, int | None]]) -> list[list[PointDevice]]:
        """:meth:`at` for each ``(t_ns, gpid)``, read off running sums by binary search, all moments
        of a device at once.

        A process with no memory event of its own does not say which device it used: then every
        traced device is given, each with ``process_has_events`` false."""
        if not self.claimed:
            return [[] for _ in moments]
        reader = self._reader
        wanted: dict[tuple[int, int], set[int]] = {}
        plans: list[list[tuple[int | None, int | None, bool]]] = []
        for t, gpid in moments:
            if gpid is None:
                plans.append([])
                continue
            pairs = reader.pairs(gpid)
            own = bool(pairs)
            plan = [(vm, device, own) for vm, device in (pairs if own else reader.pairs(None))]
            plans.append(plan)
            for vm, device, _ in plan:
                if vm is not None and device is not None:
                    wanted.setdefault((vm, device), set()).add(t)
        values = {key: reader.device(*key).read(sorted(ts)) for key, ts in wanted.items()}
        out = []
        for (t, gpid), plan in zip(moments, plans, strict=True):
            entries = []
            for vm, device, own in plan:
                # An unknown vm or device is never read (no moment of it is wanted): nothing there is counted.
                read = values.get((vm, device)) if vm is not None and device is not None else None
                state = read[t] if read is not None else _State()
                entries.append(self._entry(vm, device, own, gpid, state, t))
            out.append(entries)
        return out

    def _entry(
        self, vm: int | None, device: int | None, own: bool, gpid: int | None, state: _State, t_ns: int
    ) -> PointDevice:
        total = self._total(vm, device)
        resident = state.resident
        processes: list[PointProcess] = [
            {
                "pid": pid_of(g),
                "global_pid": g,
                "resident_bytes": sum(mech.get(m, 0) for m in HELD),
                "by_mechanism": _by_mechanism(mech),
                "managed_bytes": mech.get("managed", 0),
                "imported_pool_bytes": mech.get("imported_pool", 0),
            }
            for g, mech in state.by_process.items()
        ]
        processes.sort(key=lambda p: (-p["resident_bytes"], p["global_pid"]))
        entry: PointDevice = {
            "vm": vm,
            "device_id": device,
            "process_has_events": own,
            "process_live_bytes": state.process_live.get(gpid, 0),
            "device_resident_live_bytes": resident,
            "managed_live_bytes": sum(v for k, v in state.by_kind.items() if k in MANAGED),
            "live_bytes_by_kind": dict(state.by_kind),
            "total_bytes": total,
            "free_at_most_bytes": None if total is None or resident > total else total - resident,
            "freed_before_bytes": state.freed,
            "by_mechanism": _by_mechanism_summed([p["by_mechanism"] for p in processes]),
            "processes": [p for p in processes if p["resident_bytes"] or p["managed_bytes"]
                          or p["imported_pool_bytes"] or p["global_pid"] == gpid],
        }
        overlap = self._conflict(vm, device, t_ns)
        if overlap is not None:
            entry["free_at_most_bytes"] = None
            entry["bound_unknown"] = say(Reason.of("bound_unknown_conflict", why=overlap))
        elif total is None and _total_disagrees(self.devices, vm, device):
            entry["bound_unknown"] = say(Reason.of("bound_unknown_total_disagrees"))
        if overlap is None and total is not None and resident > total:
            ended = self._ended(entry["processes"], gpid, t_ns)
            entry["bound_unknown"] = say(Reason.of("bound_unknown_exceeded", resident=resident, total=total,
                                                   ended=ended))
        return entry

    def _total(self, vm: int | None, device: int | None) -> int | None:
        """:func:`_total` of the device, looked up once per device (not once per moment)."""
        if (vm, device) not in self._totals:
            self._totals[(vm, device)] = _total(self.devices, vm, device)
        return self._totals[(vm, device)]

    @cached_property
    def _totals(self) -> dict[tuple[int | None, int | None], int | None]:
        return {}

    def _conflict(self, vm: int | None, device: int | None, t_ns: int) -> str | None:
        """Why the evidence contradicts itself on the device at ``t_ns`` (an allocation at an address
        already live, a pool with more in use than its size), or None."""
        if not self.conflicts.height or vm is None or device is None:
            return None
        at = self.conflicts.filter(
            (pl.col("vm") == vm) & (pl.col("device_id") == device)
            & (pl.col("from_ns").is_null() | (pl.col("from_ns") <= t_ns))
            & (pl.col("to_ns").is_null() | (pl.col("to_ns") > t_ns))
        )
        return str(at["why"][0]) if at.height else None

    def _ended(self, processes: Sequence[PointProcess], gpid: int | None, t_ns: int) -> list[tuple[int | None, int]]:
        """Why held bytes can exceed the device: the other processes holding memory whose CUDA API trace
        ended before ``t_ns`` (an exited process's memory is returned without deallocation events), with
        their last CUDA API record; none: damage."""
        return [(p["pid"], self.api_ends[p["global_pid"]]) for p in processes
                if p["global_pid"] != gpid and p["resident_bytes"] and self.api_ends.get(p["global_pid"], t_ns) < t_ns]

    def free_calls_without_event_before(self, t_ns: int) -> tuple[int, list[int]]:
        """How many successful free calls without a deallocation event of their own began at or
        before ``t_ns``, and the correlation ids of the first few."""
        # The gaps are in (start, correlation id) order, starts unknown last: those at or before
        # ``t_ns`` are the first rows, found by binary search (a filter of every gap per moment was
        # 0.05 s of CPU for 205 moments at 324k gaps).
        starts = self._gap_starts
        before = int(starts.search_sorted(t_ns, side="right")) if starts.len() else 0
        return before, self.gaps.head(min(before, GAP_EXAMPLES_AT))["correlation_id"].to_list()

    @cached_property
    def _gap_starts(self) -> pl.Series:
        starts = self.gaps["start_ns"]
        return starts.head(starts.len() - starts.null_count())

    @cached_property
    def _reader(self) -> _SeriesReader:
        return _SeriesReader(self.series)


@dataclass
class _State:
    """A device's running values at one moment (see :meth:`_Curve.read`)."""

    resident: int = 0
    freed: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    by_process: dict[int, dict[str, int]] = field(default_factory=dict)
    process_live: dict[int | None, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Curve:
    """One device's events with a start, grouped by (process, mechanism, kind): per group the
    events' times (ascending) and the running sums after each."""

    groups: tuple[tuple[int, str, str | None], ...]
    start: tuple[pl.Series, ...]
    sums: tuple[pl.DataFrame, ...]

    def read(self, times: list[int]) -> dict[int, _State]:
        """The device's state just after each of ``times`` (events at that very time included)."""
        at = pl.Series("t", times, dtype=pl.Int64)
        states = {t: _State() for t in times}
        for (gpid, mechanism, kind), start, sums in zip(self.groups, self.start, self.sums, strict=True):
            n = start.search_sorted(at, side="right").cast(pl.Int64)
            picked = sums.select(pl.all().gather((n - 1).clip(lower_bound=0)))
            for t, seen, (delta, resident, utilized, freed) in zip(times, n.to_list(), picked.iter_rows(), strict=True):
                if not seen:  # no event of the group yet
                    continue
                s = states[t]
                s.resident += resident
                s.freed += freed
                if delta:
                    s.by_kind[str(kind)] = s.by_kind.get(str(kind), 0) + delta
                s.process_live[gpid] = s.process_live.get(gpid, 0) + delta
                mech = s.by_process.setdefault(gpid, {})
                held = "pool_reserved" if mechanism == "pool" else mechanism
                mech[held] = mech.get(held, 0) + (
                    resident if held in HELD else utilized if held == "imported_pool" else delta
                )
                if mechanism == "pool":
                    mech["pool_utilized"] = mech.get("pool_utilized", 0) + utilized
        for s in states.values():  # a free of an allocation not yet counted never makes held bytes negative
            s.resident = max(s.resident, 0)
            s.by_kind = {k: v for k, v in sorted(s.by_kind.items()) if v > 0}
            s.process_live = {g: max(v, 0) for g, v in s.process_live.items()}
            s.by_process = {g: {m: max(v, 0) for m, v in mech.items()} for g, mech in s.by_process.items()}
        return states


class _SeriesReader:
    """Reads the ledger's series at moments by binary search over per-group running sums (built once
    per device): the same numbers as summing the device's events with ``start_ns <= t``, held bytes
    never below zero (of the events without a start, the deallocations count at every moment and the
    allocations at none; the series' running columns count them all first)."""

    def __init__(self, series: pl.DataFrame) -> None:
        self.series = series
        self._pairs: dict[int | None, list[tuple[int | None, int | None]]] = {}
        self._devices: dict[tuple[int, int], _Curve] = {}

    def pairs(self, gpid: int | None) -> list[tuple[int | None, int | None]]:
        """The (vm, device) pairs of the process's events (every process's when None), sorted."""
        if gpid not in self._pairs:
            rows = self.series if gpid is None else self.series.filter(pl.col("gpid") == gpid)
            self._pairs[gpid] = [(vm, device) for vm, device in
                                 rows.select("vm", "device_id").unique().sort("vm", "device_id").iter_rows()]
        return self._pairs[gpid]

    def device(self, vm: int, device: int) -> _Curve:
        key = (vm, device)
        if key not in self._devices:
            # An event without a start (a damaged row) is counted so that the bound stays an upper
            # bound: a deallocation as if before every moment, an allocation at none.
            # Only the columns read here are filtered (the series has 20: 4x the copying per device).
            rows = self.series.select(*_CURVE_COLUMNS).filter(
                (pl.col("vm") == vm) & (pl.col("device_id") == device)
                & (pl.col("start_ns").is_not_null() | (pl.col("delta") < 0))
            ).with_columns(pl.col("start_ns").fill_null(-(1 << 63))).sort("start_ns", maintain_order=True)
            delta = pl.col("delta")
            parts = rows.partition_by("gpid", "mechanism", "kind", maintain_order=True, as_dict=True)
            groups: list[tuple[int, str, str | None]] = []
            starts, sums = [], []
            for (gpid, mechanism, kind), part in sorted(parts.items(), key=lambda kv: _order_key(kv[0])):
                groups.append((gpid, mechanism, kind))
                starts.append(part["start_ns"])
                sums.append(part.select(
                    delta.cum_sum().alias("delta"),
                    pl.col("resident_delta").cum_sum().alias("resident"),
                    pl.col("utilized_delta").cum_sum().alias("utilized"),
                    pl.when(delta < 0).then(-delta).otherwise(0).cum_sum().alias("freed"),
                ))
            self._devices[key] = _Curve(tuple(groups), tuple(starts), tuple(sums))
        return self._devices[key]


_CURVE_COLUMNS = ("vm", "device_id", "gpid", "mechanism", "kind", "start_ns", "delta", "resident_delta",
                  "utilized_delta")


def _order_key(key: Sequence[int | str | None]) -> tuple[tuple[bool, int | str], ...]:
    """A key of values that may be unknown, sortable: the unknown (None) first, then by value."""
    return tuple((v is not None, v if v is not None else 0) for v in key)


def _by_call(rows: pl.DataFrame) -> pl.DataFrame:
    """Allocation events by process and by the CUDA API call behind them, joined by (process,
    correlation id): ``matched`` (one call), ``driver`` (correlation id 0 or NULL: memory the driver
    allocated itself, such as module memory) or ``no_single_call`` (a correlation id that no call or
    several calls of the process carry). Columns ``gpid, call, api, kind, events, bytes``."""
    # Grouped by a code that sorts as the names do (driver < matched < no_single_call), named after.
    allocs = rows.filter((pl.col("operation") == "allocation") & pl.col("bytes").is_not_null()).with_columns(
        pl.when(pl.col("correlation_id").fill_null(0) == 0)
        .then(0)
        .when(pl.col("api").is_null())
        .then(2)
        .otherwise(1)
        .alias("call")
    )
    return (
        allocs.group_by("gpid", "call", "api", "kind")
        .agg(pl.len().alias("events"), pl.col("bytes").cast(pl.Int128).sum().alias("bytes"))
        .sort("gpid", "call", "api", "kind", nulls_last=True)
        .with_columns(pl.col("call").replace_strict(CALL_NAMES, return_dtype=pl.String))
    )


CALL_NAMES = {0: "driver", 1: "matched", 2: "no_single_call"}


def _total(devices: pl.DataFrame, vm: int | None, device: int | None) -> int | None:
    if vm is None or device is None or not devices.height:  # an unknown device has no known total
        return None
    row = devices.filter((pl.col("vm") == vm) & (pl.col("device_id") == device))
    return int(row["total_bytes"][0]) if row.height and row["total_bytes"][0] is not None else None


def _total_disagrees(devices: pl.DataFrame, vm: int | None, device: int | None) -> bool:
    """Whether the device's TARGET_INFO_GPU rows disagree about its total (its total is then unknown)."""
    if vm is None or device is None or "total_disagrees" not in devices.columns:
        return False
    row = devices.filter((pl.col("vm") == vm) & (pl.col("device_id") == device))
    return bool(row.height and row["total_disagrees"][0])


def collection_on(capture: Mapping[str, list[str]]) -> bool | None:
    """Whether the capture settings say memory-usage collection was on (None: they do not say)."""
    values = [v for k, vs in capture.items() if k.endswith("COLLECT_GPU_MEMORY_USAGE") for v in vs]
    if not values:
        return None
    return any(v.lower() == "true" for v in values)


@overload
def exact_sum(values: pl.Series) -> int: ...
@overload
def exact_sum(values: pl.Expr) -> pl.Expr: ...
def exact_sum(values: pl.Series | pl.Expr) -> int | pl.Expr:
    """A sum that cannot wrap around: in 128 bits (a polars Int64 sum wraps silently past 2^63). Of a
    series, the sum itself (0 for none); of an expression, the expression."""
    if isinstance(values, pl.Expr):
        return values.cast(pl.Int128).sum()
    return int(values.cast(pl.Int128).sum() or 0)


# --- classification ------------------------------------------------------------------------------


CALL_SCHEMA: Schema = {"gpid": pl.Int64, "correlation_id": pl.Int64, "api": pl.String}


def _apis_where(apis: pl.Series, keep: Callable[[str], bool]) -> pl.Expr:
    """Whether a row's ``api`` is one of the names in ``apis`` for which ``keep`` holds (each
    distinct name asked once, not each row)."""
    names = [a for a in apis.drop_nulls().unique().to_list() if keep(a)]
    return pl.col("api").is_in(names).fill_null(False)


def _mechanism() -> pl.Expr:
    """The mechanism of each usage event (see the module docstring): by its kind, then whether the
    driver made it, then its pool columns, then the call behind it (the ``_vmm`` flag)."""
    kind = pl.col("kind")
    vmm = pl.col("_vmm")
    return (
        pl.when(kind.is_in(list(MANAGED)))
        .then(pl.lit("managed"))
        .when(kind.is_null() | ~kind.is_in(list(DEVICE_RESIDENT)))
        .then(pl.lit("host"))
        .when(pl.col("correlation_id").fill_null(0) == 0)
        .then(pl.lit("static"))
        .when(pl.col("imported_pool_address").is_not_null())
        .then(pl.lit("imported_pool"))
        .when(pl.col("pool_address").is_not_null())
        .then(pl.lit("pool"))
        .when(vmm)
        .then(pl.lit("mapped"))
        .otherwise(pl.lit("segments"))
    )


def _refusal(events: pl.DataFrame, memory: MemoryEvidence) -> tuple[str | None, ReportWarning | None]:
    """Why no ledger can be summed from these events (None: it can), and the warning damage gives:
    sizes past any device, or pool allocations without the pool's size. (Events of unknown size are
    refused once matched: only the counted ones matter.)"""
    too_big = events.filter(pl.col("bytes") >= SIZE_LIMIT).height
    sizes = pl.concat([events["pool_size"], memory.pool_events["pool_size"]]).drop_nulls()
    too_big += int((sizes >= SIZE_LIMIT).sum()) + int((sizes < 0).sum())
    total = exact_sum(events["bytes"])
    if too_big or total >= SIZE_LIMIT:
        why = say(Reason.of("memory_size_overflow", total=total))
        return why, warning("memory_size_overflow", too_big or 1, f"{memory.table}: {why}")
    pooled = events.filter(
        pl.col("_pool_api") & pl.col("pool_address").is_null() & pl.col("imported_pool_address").is_null()
    ).height
    if pooled:
        return say(Reason.of("pool_events_without_pool", events=pooled)), None
    return None, None


# --- the build -----------------------------------------------------------------------------------


def build_ledger(
    memory: MemoryEvidence | None,
    capture: Mapping[str, list[str]],
    calls: pl.DataFrame | None = None,
    memory_calls: pl.DataFrame | None = None,
) -> Ledger:
    """The ledger of ``memory`` (see the module docstring).

    ``calls``: ``gpid, correlation_id, api`` of the one CUDA API call behind an event's (process,
    correlation id); an event without one (correlation id 0: memory the driver allocates itself,
    or a correlation shared by several rows) has ``api`` null. ``memory_calls``: the successful free
    and virtual memory management calls (``gtid, start_ns, correlation_id, api``, as
    :attr:`nsysaudit.read.trace.Trace.memory_calls`).
    """
    collected = collection_on(capture)
    empty = pl.DataFrame(schema=SERIES_SCHEMA)
    devices = memory.devices if memory is not None else pl.DataFrame()
    absent = _absent(memory, collected)
    if memory is None or absent is not None:
        return Ledger(False, absent, collected, empty, devices, _summary(memory, collected, empty, 0, 0, absent))
    calls = calls if calls is not None else pl.DataFrame(schema=CALL_SCHEMA)
    events, said = _events(memory, calls)
    gaps = _gaps(memory.events, memory_calls)
    extra = _vmm_and_gaps(events, memory_calls, gaps)

    def refused(why: str) -> Ledger:
        summary = _with(_summary(memory, collected, empty, 0, 0, why), extra)
        return Ledger(False, why, collected, empty, devices, summary, gaps, tuple(said))

    refusal, damage = _refusal(events, memory)
    if damage is not None:
        said.append(damage)
    if refusal is not None:
        return refused(refusal)
    plain, unmatched, unmatched_bytes, mismatched, conflicts = _matched(
        events.filter(pl.col("mechanism") != "pool").select(_MATCH_COLUMNS)
    )
    if conflicts.height:
        said.append(_double_allocation_warning(memory, conflicts))
    sizes_unknown = plain.filter(pl.col("delta").is_null()).height
    if sizes_unknown:
        return refused(say(Reason.of("memory_events_without_size", events=sizes_unknown)))
    if mismatched:
        said.append(warned(Reason.of("deallocation_size_differs"), mismatched))
    in_pools = events.filter(pl.col("mechanism") == "pool")
    pooled = (_pool_rows(in_pools, memory.pool_events) if in_pools.height or memory.pool_events.height
              else pl.DataFrame(schema={**{c: plain.schema[c] for c in _ROW_COLUMNS}, "_pool_known": pl.Boolean}))
    unsized_pools = pooled.filter(pl.col("_pool_known").not_()).select("gpid", "pool_address").unique().height
    if unsized_pools:
        return refused(say(Reason.of("pools_without_size", pools=unsized_pools)))
    parts = [plain, pooled.drop("_pool_known")]
    del events, plain, pooled
    series = _series(parts, calls)
    summary = _with(_summary(memory, collected, series, unmatched, unmatched_bytes, None), extra)
    summary["pools"] = _pools(series)
    overfull = _overfull_pools(series)
    if overfull.height:
        said.append(warned(
            Reason.of("memory_pool_overfull", table=memory.table, why=overfull['why'][0]),
            overfull.height, kind="conflicting_rows",
        ))
    conflicts = pl.concat([conflicts, overfull]) if overfull.height else conflicts
    return Ledger(True, None, collected, series, devices, summary, gaps, tuple(said), conflicts=conflicts)


def _double_allocation_warning(memory: MemoryEvidence, conflicts: pl.DataFrame) -> ReportWarning:
    shown = "; ".join(
        f"pid {pid_of(g)} device {d} address {a:#x} (correlation {', '.join(map(str, c))})"
        for g, d, a, c in conflicts.head(EXAMPLES).select("gpid", "device_id", "address", "correlation_ids").iter_rows()
    )
    return warned(
        Reason.of("memory_address_live_twice", table=memory.table, shown=shown),
        int(conflicts["events"].sum()), kind="conflicting_rows",
    )


def _absent(memory: MemoryEvidence | None, collected: bool | None) -> str | None:
    """Why the export holds no memory evidence to build a ledger from (None: it holds some)."""
    if memory is None or memory.table is None:
        return say(Reason.of("memory_collection_off" if collected is False else "no_memory_table"))
    if memory.events.height == 0 and collected is not True:
        # nsys 2022.x writes the table empty when memory-usage collection is off, and such an export
        # has no capture settings to say so: an empty table is then no evidence that nothing was held.
        return say(Reason.of("memory_table_empty", table=memory.table))
    return None


def _events(memory: MemoryEvidence, calls: pl.DataFrame) -> tuple[pl.DataFrame, list[ReportWarning]]:
    """Every memory event in order (``_order``) with its kind's name, VM, mechanism and ``_pool_api``;
    a negative size made unknown (and a warning saying so)."""
    # The call behind an event matters to its mechanism only where it is a virtual memory or a pool
    # call: those keys (few) are joined as flags; every event's call name joins the series, last.
    flagged = calls.with_columns(
        _apis_where(calls["api"], lambda a: vmm_role(a) in ("map", "unmap")).alias("_vmm"),
        _apis_where(calls["api"], is_pool_api).alias("_pool_api"),
    ).filter(pl.col("_vmm") | pl.col("_pool_api")).select("gpid", "correlation_id", "_vmm", "_pool_api")
    events = (
        memory.events.with_row_index("_order")
        .with_columns(
            pl.col("mem_kind").replace_strict(memory.kinds, default=None, return_dtype=pl.String).alias("kind"),
            decode_vm(pl.col("gpid")).alias("vm"),
        )
        .join(flagged, on=["gpid", "correlation_id"], how="left", maintain_order="left")
        .with_columns(pl.col("_vmm").fill_null(False), pl.col("_pool_api").fill_null(False))
    )
    events = events.with_columns(_mechanism().alias("mechanism")).drop("_vmm")
    negative = events.filter(pl.col("bytes") < 0).height
    if not negative:
        return events, []
    # a damaged size is an unknown one, never a negative amount of memory
    said = warned(Reason.of("memory_negative_size", table=memory.table), negative)
    known = pl.when(pl.col("bytes") < 0).then(None).otherwise(pl.col("bytes")).alias("bytes")
    return events.with_columns(known), [said]


def _matched(events: pl.DataFrame) -> tuple[pl.DataFrame, int, int, int, pl.DataFrame]:
    """The allocations and the deallocations that free one of them, as series rows (without the
    running columns), the unmatched deallocations (count, bytes), size mismatches and the spans of
    allocations at an address already live (:func:`_double_allocations`).

    A deallocation frees the oldest allocation still live at its (process, device, address): it is
    matched when the key's live count just before it is above zero, the count clamped at zero (a
    free of memory allocated before the capture began makes nothing live negative). The live count
    of a key before each event is its running sum (+1 allocation, -1 free) less the running minimum
    of that sum, 0 included; the j-th matched free of a key frees its j-th allocation."""
    group = ["address", "gpid", "device_id"]
    alloc = pl.col("operation") == 0
    free = (pl.col("operation") == 1) & pl.col("address").is_not_null()
    new_key = pl.int_range(pl.len()) == 0
    for c in group:
        new_key = new_key | pl.col(c).ne_missing(pl.col(c).shift(1))
    first = pl.col("_first")

    def before_in_key(flag: pl.Expr) -> pl.Expr:
        """A running sum of ``flag`` before each event, within its key: one global running sum less
        its value where the key begins (a window per key costs ~1 s per million events with as many
        keys)."""
        one = flag.cast(pl.Int64).fill_null(0)  # an event of unknown operation counts as neither
        within = one.cum_sum() - one
        return within - pl.when(first).then(within).forward_fill()

    # The running minimum per key from one global running minimum: each key's sums moved below every
    # earlier key's (a sum before an event lies in [-n, n]; key k is moved down by 2n k).
    n = events.height + 1
    moved = pl.col("_before") - pl.col("_key") * (2 * n)
    # Eager: polars' lazy plan of these steps took 1.5x their CPU and 100 MB more (polars 2.1).
    keyed = (
        sort_stable(events, [*group, "_order"])
        .with_columns(new_key.alias("_first"), new_key.cast(pl.Int64).cum_sum().alias("_key"))
        .with_columns(
            before_in_key(pl.when(alloc).then(1).when(free).then(-1).otherwise(0)).alias("_before"),
            before_in_key(alloc).alias("_alloc_j"),
        )
        .with_columns(
            (pl.col("_before") - pl.min_horizontal(pl.lit(0), moved.cum_min() + pl.col("_key") * (2 * n)))
            .alias("_live")
        )
        .with_columns((free & (pl.col("_live") > 0)).fill_null(False).alias("_matched"))
        .with_columns(before_in_key(pl.col("_matched")).alias("_free_j"))
    )
    conflicts = _double_allocations(keyed, alloc)
    # Only the columns the series rows carry leave ``keyed`` (its running columns are 20 in all:
    # 1.5x the 755k events' frame at 20M rows, held beside the joins otherwise), and it goes first.
    kept = ("_order", "start_ns", "vm", "device_id", "gpid", "kind", "bytes", "correlation_id", "mechanism")
    allocs = keyed.filter(alloc).select(*kept, "_key", "_alloc_j")
    frees = keyed.filter(pl.col("_matched")).select(*kept, "_key", "_free_j")
    unmatched_bytes = keyed.filter((pl.col("operation") == 1) & ~pl.col("_matched"))["bytes"]
    del keyed
    frees = frees.join(
        allocs.select("_key", pl.col("_alloc_j").alias("_free_j"), pl.col("bytes").alias("_allocated")),
        on=["_key", "_free_j"], how="left",
    )
    mismatched = frees.filter(pl.col("bytes").ne_missing(pl.col("_allocated"))).height
    rows = pl.concat(
        [
            allocs.select(*kept, pl.col("bytes").alias("delta"), pl.lit("allocation").alias("operation_name")),
            frees.select(*kept, (-pl.col("_allocated")).alias("delta"),
                         pl.lit("deallocation").alias("operation_name")),
        ],
        how="diagonal_relaxed",
    )
    del allocs, frees
    resident = pl.col("mechanism").is_in(["segments", "mapped", "static"])
    imported = pl.col("mechanism") == "imported_pool"
    rows = rows.with_columns(
        pl.when(imported).then(0).otherwise(pl.col("delta")).alias("delta"),
        pl.when(resident).then(pl.col("delta")).otherwise(0).alias("resident_delta"),
        pl.when(imported).then(pl.col("delta")).otherwise(0).alias("utilized_delta"),
        pl.lit(None, dtype=pl.Int64).alias("pool_address"),
        pl.lit(None, dtype=pl.Int64).alias("pool_size"),
    ).select(_ROW_COLUMNS)
    return rows, unmatched_bytes.len(), exact_sum(unmatched_bytes), mismatched, conflicts


CONFLICT_SCHEMA: Schema = {"vm": pl.Int64, "device_id": pl.Int64, "gpid": pl.Int64, "address": pl.Int64,
                           "from_ns": pl.Int64, "to_ns": pl.Int64, "events": pl.Int64,
                           "correlation_ids": pl.List(pl.Int64), "why": pl.String}


def _double_allocations(keyed: pl.DataFrame, alloc: pl.Expr) -> pl.DataFrame:
    """Where an allocation event lies at an address already live in its process and device (device
    memory: segments, mapped, static), the span the key's live allocations overlap in
    (:data:`CONFLICT_SCHEMA`: from the first of them to the free that leaves none live, ``to_ns``
    null when none does). nsys writes one allocation per live address: either one of the events is
    damaged or a free is missing, so what was held there is unknown, and so is the bound on free
    memory over that span (:meth:`Ledger.at_many`), never the sum of both."""
    resident = pl.col("mechanism").is_in(["segments", "mapped", "static"])
    # Address 0 (or none) names no memory: such events are not keyed by it.
    double = alloc & (pl.col("address").fill_null(0) != 0) & resident & (pl.col("_live") >= 1)
    if not keyed.filter(double).height:
        return pl.DataFrame(schema=CONFLICT_SCHEMA)
    after = pl.col("_live") + alloc.cast(pl.Int64) - pl.col("_matched").cast(pl.Int64)
    runs = keyed.with_columns(
        (alloc & (pl.col("_live") == 0)).cast(pl.Int64).cum_sum().alias("_run"),
        after.alias("_after"),
        double.alias("_double"),
    )
    return (
        runs.group_by("_key", "_run", maintain_order=True)
        .agg(
            pl.col("_double").any().alias("_conflict"),
            pl.col("vm").first(), pl.col("device_id").first(), pl.col("gpid").first(), pl.col("address").first(),
            pl.col("start_ns").min().alias("from_ns"),
            pl.when(pl.col("_after").last() == 0).then(pl.col("start_ns").last()).otherwise(None).alias("to_ns"),
            pl.col("_double").sum().cast(pl.Int64).alias("events"),
            pl.col("correlation_id").filter(alloc).head(EXAMPLES).alias("correlation_ids"),
        )
        .filter(pl.col("_conflict"))
        .with_columns(
            pl.format(ADDRESS_LIVE_TWICE_FORMAT,
                      decode_pid(pl.col("gpid")), pl.col("address").map_elements(_hex, return_dtype=pl.String),
                      pl.col("correlation_ids").cast(pl.List(pl.String)).list.join(", ")).alias("why")
        )
        .select(list(CONFLICT_SCHEMA))
        .cast(CONFLICT_SCHEMA)  # type: ignore[arg-type]
    )


def _overfull_pools(series: pl.DataFrame) -> pl.DataFrame:
    """The spans over which a CUDA memory pool's utilized size exceeds its size (:data:`CONFLICT_SCHEMA`):
    the part of a pool in use cannot exceed the pool, so one of the two figures is damaged; its use is
    unknown there, and so is what the pool held on the device (the bound on free memory)."""
    pool = ["gpid", "vm", "device_id", "pool_address"]
    rows = series.filter(pl.col("mechanism") == "pool")
    if not rows.height:
        return pl.DataFrame(schema=CONFLICT_SCHEMA)
    marked = rows.select(
        *pool, "start_ns", "correlation_id",
        (pl.col("utilized_delta").cum_sum().over(pool) > pl.col("delta").cum_sum().over(pool)).alias("_over"),
        pl.col("utilized_delta").cum_sum().over(pool).alias("_utilized"),
        pl.col("delta").cum_sum().over(pool).alias("_size"),
        pl.col("start_ns").shift(-1).over(pool).alias("_next"),
    ).filter(pl.col("_over"))
    if not marked.height:
        return pl.DataFrame(schema=CONFLICT_SCHEMA)
    return marked.select(
        "vm", "device_id", "gpid", pl.col("pool_address").alias("address"),
        pl.col("start_ns").alias("from_ns"), pl.col("_next").alias("to_ns"), pl.lit(1, dtype=pl.Int64).alias("events"),
        pl.concat_list(pl.col("correlation_id")).alias("correlation_ids"),
        pl.struct("gpid", "pool_address", "_utilized", "_size").map_elements(
            lambda r: say(Reason.of("pool_over_its_size", pid=pid_of(r["gpid"]), address=_hex(r["pool_address"]),
                                    utilized=r["_utilized"], size=r["_size"])),
            return_dtype=pl.String).alias("why"),
    ).cast(CONFLICT_SCHEMA)  # type: ignore[arg-type]


def _hex(address: int | None) -> str:
    return "an unknown address" if address is None else f"{address:#x}"


# What the matching reads, and the series' rows before their running columns and call names.
_MATCH_COLUMNS = ("_order", "start_ns", "vm", "device_id", "gpid", "address", "kind", "bytes", "operation",
                  "correlation_id", "mechanism")
_ROW_COLUMNS = ("_order", "start_ns", "vm", "device_id", "gpid", "kind", "operation_name", "bytes", "delta",
                "correlation_id", "mechanism", "resident_delta", "utilized_delta", "pool_address", "pool_size")


def _pool_rows(events: pl.DataFrame, pool_events: pl.DataFrame) -> pl.DataFrame:
    """Series rows of the pools: each usage event of a pool (its bytes move within the pool) and each
    pool operation, with ``delta`` the change of the pool's size there and ``utilized_delta`` the
    change of its utilized size.

    What the real exports show (nsys 2025.3, ``async/``): an allocation event carries the pool's size
    and utilized size after it; a deallocation event (``cudaFreeAsync``) the size and the utilized
    size before it, so it is less the freed bytes after; a pool event (created, trimmed) the sizes
    after it. A destroyed pool holds nothing."""
    usage = events.select(
        "_order", "start_ns", "vm", "device_id", "gpid", "kind",
        pl.when(pl.col("operation") == 0).then(pl.lit("allocation")).when(pl.col("operation") == 1)
        .then(pl.lit("deallocation")).otherwise(None).alias("operation_name"),
        "bytes", "correlation_id", "mechanism", "pool_address", "pool_size",
        pl.when(pl.col("operation") == 1).then(pl.col("pool_utilized") - pl.col("bytes"))
        .otherwise(pl.col("pool_utilized")).alias("_utilized"),
        pl.lit(0, dtype=pl.Int64).alias("_source"),
    )
    names = {POOL_CREATED: "pool_created", POOL_TRIMMED: "pool_trimmed", POOL_DESTROYED: "pool_destroyed"}
    destroyed = pl.col("operation") == POOL_DESTROYED
    ops = pool_events.cast(POOL_EVENT_SCHEMA).with_row_index("_order").select(  # type: ignore[arg-type]
        pl.col("_order").cast(pl.Int64), "start_ns", decode_vm(pl.col("gpid")).alias("vm"), "device_id", "gpid",
        pl.lit("Device").alias("kind"),
        pl.col("operation").replace_strict(names, default="pool_event", return_dtype=pl.String)
        .alias("operation_name"),
        pl.lit(None, dtype=pl.Int64).alias("bytes"), "correlation_id", pl.lit("pool").alias("mechanism"),
        pl.col("address").alias("pool_address"),
        pl.when(destroyed).then(0).otherwise(pl.col("pool_size")).alias("pool_size"),
        pl.when(destroyed).then(0).otherwise(pl.col("pool_utilized")).alias("_utilized"),
        pl.lit(1, dtype=pl.Int64).alias("_source"),
    ).filter(pl.col("operation_name") != "pool_event")
    rows = pl.concat([usage.with_columns(pl.col("_order").cast(pl.Int64)), ops], how="vertical_relaxed")
    pool = ["gpid", "device_id", "pool_address"]
    rows = rows.sort([*pool, "start_ns", "_source", "_order"], nulls_last=False).with_columns(
        pl.col("pool_size").forward_fill().over(pool).alias("_size"),
        pl.col("_utilized").forward_fill().over(pool).alias("_util"),
    )
    return rows.with_columns(
        (pl.col("_size").fill_null(0) - pl.col("_size").shift(1).over(pool).fill_null(0)).alias("delta"),
        (pl.col("_util").fill_null(0) - pl.col("_util").shift(1).over(pool).fill_null(0)).alias("utilized_delta"),
        pl.col("_size").is_not_null().any().over(pool).alias("_pool_known"),
    ).with_columns(
        pl.col("delta").alias("resident_delta"),
        pl.col("_size").alias("pool_size"),
        # After the usage events: a pool operation at the same moment sorts after them.
        (pl.col("_order") + pl.col("_source") * (1 << 40)).alias("_order"),
    ).select(*_ROW_COLUMNS, "_pool_known")


def _series(parts: list[pl.DataFrame], calls: pl.DataFrame) -> pl.DataFrame:
    """The series: the rows of ``parts`` (emptied here: the rows in event order are let go of once
    sorted) in time order (start, event order; pool operations after the usage events
    of the same moment) with the running columns and each row's call name (joined by its keys alone,
    :func:`nsysaudit.analysis.joins.join_column`). Eager: polars' lazy plan of the same steps took
    2.5x their CPU (0.57 against 0.24 s at 755k events, polars 2.1)."""
    rows = pl.concat(parts, how="diagonal_relaxed")
    parts.clear()
    ordered = sort_stable(rows, ["start_ns", "_order"])
    del rows
    ordered = ordered.with_columns(
        pl.col("delta").cum_sum().over("gpid", "vm", "device_id").alias("process_live"),
        pl.col("resident_delta").cum_sum().over("vm", "device_id").alias("device_resident_live"),
        decode_pid(pl.col("gpid")).alias("pid"),
        pl.col("operation_name").alias("operation"),
    )
    ordered = join_column(ordered, calls, ["gpid", "correlation_id"], "api")
    return ordered.select(list(SERIES_SCHEMA)).cast(SERIES_SCHEMA)  # type: ignore[arg-type]  # polars' stubs


def _gaps(events: pl.DataFrame, memory_calls: pl.DataFrame | None) -> pl.DataFrame:
    """The successful free calls without a deallocation event of their own (process, correlation id)."""
    if memory_calls is None or not memory_calls.height:
        return pl.DataFrame(schema=GAP_SCHEMA)
    frees = memory_calls.filter(_apis_where(memory_calls["api"], is_device_free_api)).select(
        global_pid(pl.col("gtid")).alias("gpid"), "start_ns", "correlation_id", "api"
    )
    freed = events.filter(pl.col("operation") == 1).select("gpid", "correlation_id").unique()
    gaps = frees.join(freed, on=["gpid", "correlation_id"], how="anti")
    return sort_stable(gaps, ["start_ns", "correlation_id"], nulls_last=True).cast(GAP_SCHEMA)  # type: ignore[arg-type]


class _Extra(TypedDict):
    """The summary's keys made once its events are classified (:func:`_vmm_and_gaps`)."""

    mechanisms: dict[Mechanism, MechanismCounts]
    virtual_memory: VirtualMemory
    free_calls_without_event: FreeCallsWithoutEvent


def _with(summary: Memory, extra: _Extra) -> Memory:
    """``summary`` with the keys of ``extra``."""
    summary["mechanisms"] = extra["mechanisms"]
    summary["virtual_memory"] = extra["virtual_memory"]
    summary["free_calls_without_event"] = extra["free_calls_without_event"]
    return summary


def _vmm_and_gaps(events: pl.DataFrame, memory_calls: pl.DataFrame | None, gaps: pl.DataFrame) -> _Extra:
    """The summary's ``virtual_memory``, ``free_calls_without_event`` and ``mechanisms`` keys."""
    roles: dict[str, int] = {}
    if memory_calls is not None:
        for api, n in memory_calls.group_by("api").len().iter_rows():
            role = vmm_role(api)
            if role is not None:
                roles[role] = roles.get(role, 0) + int(n)
    mapped = events.filter(pl.col("mechanism") == "mapped")
    by_api: dict[str, int] = {}
    for api, n in gaps.group_by("api").len().sort("api").iter_rows():
        by_api[str(api)] = int(n)
    examples = gaps.head(EXAMPLES)["correlation_id"].to_list()
    mechanisms: dict[str, MechanismCounts] = {}
    for mechanism, op, n, b in (
        events.group_by("mechanism", "operation").agg(pl.len(), exact_sum(pl.col("bytes")))
        .sort("mechanism", "operation", nulls_last=True).iter_rows()
    ):
        entry = mechanisms.setdefault(mechanism, {"allocation_events": 0, "deallocation_events": 0,
                                                  "allocated_bytes": 0})
        if op == 0:
            entry["allocation_events"], entry["allocated_bytes"] = int(n), int(b or 0)
        elif op == 1:
            entry["deallocation_events"] = int(n)
    return {
        "mechanisms": {m: mechanisms[m] for m in MECHANISMS if m in mechanisms},
        "virtual_memory": {
            "mapped_events": int((mapped["operation"] == 0).sum()),
            "unmapped_events": int((mapped["operation"] == 1).sum()),
            "handles_created": roles.get("create", 0),
            "handles_released": roles.get("release", 0),
            "address_reservations": roles.get("reserve", 0),
            "address_frees": roles.get("address_free", 0),
            "note": say(Reason.of("virtual_memory_note")),
        },
        "free_calls_without_event": {
            "count": gaps.height,
            "by_api": by_api,
            "example_correlation_ids": examples,
            "note": say(Reason.of("free_calls_without_event_note")),
        },
    }


def _pools(series: pl.DataFrame) -> list[Pool]:
    """Per CUDA memory pool (process, device, address): its size and use at the end and at its largest."""
    rows = series.filter(pl.col("mechanism") == "pool")
    if not rows.height:
        return []
    out: list[Pool] = []
    pool = ["gpid", "device_id", "pool_address"]
    for (gpid, device, address), part in rows.partition_by(pool, maintain_order=True, as_dict=True).items():
        utilized = part["utilized_delta"].cum_sum()
        size = part["delta"].cum_sum()
        ops = part["operation"]
        out.append({
            "pid": pid_of(gpid),
            "global_pid": gpid,
            "device_id": device,
            "address": address,
            "size_at_end_bytes": int(size[-1]),
            "utilized_at_end_bytes": int(utilized[-1]),
            "peak_size_bytes": int(size.max()),  # type: ignore[arg-type]
            "allocation_events": int((ops == "allocation").sum()),
            "deallocation_events": int((ops == "deallocation").sum()),
            "trims": int((ops == "pool_trimmed").sum()),
            "created": bool((ops == "pool_created").any()),
            "destroyed": bool((ops == "pool_destroyed").any()),
        })
    return sorted(out, key=lambda p: _order_key((p["global_pid"], p["device_id"], p["address"])))


def _summary(
    memory: MemoryEvidence | None, collected: bool | None, series: pl.DataFrame, unmatched: int, unmatched_bytes: int,
    why_not: str | None,
) -> Memory:
    """The ledger's summary per device and process (the JSON ``memory`` key, without its points);
    ``why_not``: why no ledger is claimed (None: it is).

    A device is a (vm, device id) pair; either may be unknown (NULL globalPid or deviceId): such
    events are summed under the unknown pair, never dropped. Per process, one group-by over the
    device's rows (not one filter per process). Sums are exact (128 bits): damaged sizes cannot wrap."""
    events = memory.events if memory is not None else pl.DataFrame(schema={"operation": pl.Int64})
    operation = events["operation"]
    kinds = memory.kinds if memory is not None else {}
    out: Memory = {
        "ledger": why_not is None,
        "why_no_ledger": why_not,
        "at": [],
        "collected": collected,
        "events": events.height,
        "allocation_events": int((operation == 0).sum()),
        "deallocation_events": int((operation == 1).sum()),
        "freed_never_allocated": {"events": unmatched, "bytes": unmatched_bytes},
        "not_counted": list(NOT_COUNTED),  # what the ledger leaves out, in words (nsysaudit.words)
        "devices": _devices(memory, series),
        "kinds": {str(k): v for k, v in sorted(kinds.items())},
    }
    return out


def _devices(memory: MemoryEvidence | None, series: pl.DataFrame) -> list[Device]:
    """The summary's ``devices``: each device the export names or an allocation event is on, in
    (vm, device id) order, unknown first."""
    if memory is None:
        return []
    kinds = memory.kinds
    allocs = memory.events.filter(pl.col("operation") == 0).select(  # what a device's entry reads of them
        decode_vm(pl.col("gpid")).alias("_vm"), "device_id", "bytes", "mem_kind"
    )
    device_rows = memory.devices.to_dicts()
    used: set[tuple[int | None, int | None]] = set()
    if allocs.height:
        used = {(vm, device) for vm, device in allocs.select("_vm", "device_id").unique().iter_rows()}
    known: set[tuple[int | None, int | None]] = {(r["vm"], r["device_id"]) for r in device_rows}

    def on_device(vm: int | None, device: int | None, vm_column: str) -> pl.Expr:
        return pl.col(vm_column).eq_missing(vm) & pl.col("device_id").eq_missing(device)

    out: list[Device] = []
    for vm, device in sorted(known | used, key=_order_key):
        info = next((r for r in device_rows if r["vm"] == vm and r["device_id"] == device), None)
        on = allocs.filter(on_device(vm, device, "_vm"))
        entry: Device = {
            "vm": vm,
            "device_id": device,
            "name": info["name"] if info else None,
            "total_bytes": info["total_bytes"] if info else None,
            "allocated_bytes": exact_sum(on["bytes"]) if on.height else 0,
            "allocation_events": on.height,
            "allocated_bytes_by_kind": {
                kinds.get(k, str(k)) if k is not None else "unknown": int(v or 0)
                for k, v in on.group_by("mem_kind").agg(exact_sum(pl.col("bytes"))).sort("mem_kind").iter_rows()
            }
            if on.height
            else {},
        }
        mine = _rows_on(series.select(SUMMARY_COLUMNS), on_device(vm, device, "vm"))
        if mine.height:
            _held_on(entry, mine)
        out.append(entry)
    return out


def _rows_on(rows: pl.DataFrame, on: pl.Expr) -> pl.DataFrame:
    """``rows.filter(on)``; ``rows`` themselves where every row is on it (one device: no copy of
    the series, 100 MB at 20M rows)."""
    mask = rows.select(on.fill_null(False)).to_series()
    return rows if mask.all() else rows.filter(mask)


def _held_on(entry: Device, mine: pl.DataFrame) -> None:
    """Give a device's summary entry (in place) what the ledger's rows on it say was freed and
    held: at the end, at its peak, and per process."""
    delta = pl.col("delta")
    peak = int(mine["device_resident_live"].max())  # type: ignore[arg-type]
    # The first moment at the peak; unknown when an event without a start reached it.
    at_peak = mine.filter(pl.col("device_resident_live") == peak)["start_ns"]
    first = at_peak.min()
    entry["freed_bytes"] = int(-mine.filter(delta < 0)["delta"].sum())
    entry["live_bytes_at_end"] = int(mine["delta"].sum())
    entry["device_resident_live_bytes_at_end"] = int(mine["device_resident_live"][-1])
    entry["peak_device_resident_live_bytes"] = peak
    entry["peak_at_ns"] = first if isinstance(first, int) and not at_peak.null_count() else None
    entry["live_bytes_by_kind_at_end"] = _live_by_kind(mine)
    entry["held_by_mechanism_at_end"] = _held_by_mechanism(mine)
    entry["processes"] = _processes(mine)


SUMMARY_COLUMNS = ("vm", "device_id", "gpid", "start_ns", "kind", "operation", "bytes", "delta", "correlation_id",
                   "api", "device_resident_live", "mechanism", "resident_delta", "utilized_delta")


def _live_by_kind(rows: pl.DataFrame) -> dict[str, int]:
    sums = rows.group_by("kind").agg(pl.col("delta").sum()).sort("kind")
    return {str(k): int(v) for k, v in sums.iter_rows() if v}


def _by_mechanism(mech: Mapping[str, int]) -> ByMechanism:
    """A process's bytes by mechanism (:data:`BY_MECHANISM`; 0 where it holds none)."""
    return {
        "segments": mech.get("segments", 0),
        "mapped": mech.get("mapped", 0),
        "pool_reserved": mech.get("pool_reserved", 0),
        "pool_utilized": mech.get("pool_utilized", 0),
        "static": mech.get("static", 0),
    }


def _by_mechanism_summed(parts: Iterable[ByMechanism]) -> ByMechanism:
    """The sum of several processes' bytes by mechanism."""
    total = _by_mechanism({})
    for part in parts:
        for m in BY_MECHANISM:
            total[m] += part[m]
    return total


def _held_by_mechanism(rows: pl.DataFrame) -> ByMechanism:
    """Device-resident bytes held at the end by mechanism (:data:`BY_MECHANISM`)."""
    sums = dict(rows.group_by("mechanism").agg(pl.col("resident_delta").sum()).iter_rows())
    utilized = int(rows.filter(pl.col("mechanism") == "pool")["utilized_delta"].sum())
    return {
        "segments": int(sums.get("segments", 0)),
        "mapped": int(sums.get("mapped", 0)),
        "pool_reserved": int(sums.get("pool", 0)),
        "pool_utilized": utilized,
        "static": int(sums.get("static", 0)),
    }


def _held_by_process(rows: pl.DataFrame) -> dict[int | None, ByMechanism]:
    """:func:`_held_by_mechanism` of each process's rows, by one group-by (not a copy of the rows
    per process)."""
    sums = (
        rows.group_by("gpid", "mechanism")
        .agg(pl.col("resident_delta").sum(), pl.col("utilized_delta").filter(pl.col("mechanism") == "pool").sum())
        .iter_rows()
    )
    held: dict[int | None, dict[str, int]] = {}
    for gpid, mechanism, resident, utilized in sums:
        mine = held.setdefault(gpid, {})
        mine[str(mechanism)] = int(resident)
        mine["_utilized"] = mine.get("_utilized", 0) + int(utilized)
    return {g: {"segments": m.get("segments", 0), "mapped": m.get("mapped", 0), "pool_reserved": m.get("pool", 0),
                "pool_utilized": m["_utilized"], "static": m.get("static", 0)} for g, m in held.items()}


def _processes(rows: pl.DataFrame) -> list[DeviceProcess]:
    """Per process of one device's series rows (by globalPid): what it allocated, freed, still
    held at the end (in all, by kind and by mechanism) and by which calls it allocated."""
    delta = pl.col("delta")
    size = pl.col("bytes")
    is_alloc = pl.col("operation") == "allocation"
    totals = (
        rows.group_by("gpid")
        .agg(
            size.filter(is_alloc).sum().alias("allocated"),
            (-delta.filter(delta < 0).sum()).alias("freed"),
            delta.sum().alias("live"),
            size.filter(is_alloc & (pl.col("correlation_id").fill_null(0) == 0)).sum().alias("driver"),
        )
        .sort("gpid")
    )
    by_kind: dict[int | None, dict[str, int]] = {}
    for gpid, kind, live in rows.group_by("gpid", "kind").agg(delta.sum()).sort("gpid", "kind").iter_rows():
        if live:
            by_kind.setdefault(gpid, {})[str(kind)] = int(live)
    by_call: dict[int | None, list[CallAllocations]] = {}
    for gpid, c, api, kind, n, b in _by_call(rows).iter_rows():
        by_call.setdefault(gpid, []).append({"call": c, "api": api, "kind": kind, "events": int(n), "bytes": int(b)})
    held = _held_by_process(rows)
    return [
        {
            "pid": pid_of(gpid),
            "global_pid": gpid,
            "allocated_bytes": int(allocated or 0),
            "freed_bytes": int(freed or 0),
            "live_bytes_at_end": int(live),
            "driver_allocated_bytes": int(driver or 0),
            "live_bytes_by_kind_at_end": by_kind.get(gpid, {}),
            "held_by_mechanism_at_end": held[gpid],  # the same rows, by the same key: every process is there
            "allocations_by_call": by_call.get(gpid, []),
        }
        for gpid, allocated, freed, live, driver in totals.iter_rows()
    ]


Wanted = tuple[PointKind, str, int | None, int | None, PointKeyName, int]


def points(ledger: Ledger, wanted: Iterable[Wanted]) -> list[LedgerPoint]:
    """The ledger at each wanted moment: ``(point, label, t_ns, gpid, key, value)`` (a finding, a
    library call of interest, a censored library call, a telemetry boundary; ``key``: the moment's own
    key, ``finding``, ``lib_id`` or ``line``, with its ``value``). Empty when no ledger is claimed.

    Each entry is a :class:`MemoryPoint` but for ``covered`` and ``holder`` (the analysis and the
    report add them)."""
    if not ledger.claimed:
        return []
    wanted = list(wanted)
    readable = [(t, g) for _, _, t, g, _, _ in wanted if t is not None and g is not None]
    read = iter(ledger.at_many(readable))
    out = []
    for point, label, t_ns, gpid, key, value in wanted:
        entry: LedgerPoint = {"point": point, "label": label, "t_ns": t_ns, "pid": pid_of(gpid),
                              "global_pid": gpid, "devices": []}
        entry[key] = value
        if key == "finding":
            entry["finding_number"] = value + 1
        if t_ns is None or gpid is None:
            # Kept, not dropped: the reader sees the moment and why the ledger cannot be read at it.
            entry["unknown"] = say(Reason.of("moment_unknown", start_known=t_ns is not None))
        else:
            entry["devices"] = next(read)
            gaps, examples = ledger.free_calls_without_event_before(t_ns)
            entry["free_calls_without_event_before"] = gaps
            entry["free_calls_without_event_examples"] = examples
        out.append(entry)
    return out
