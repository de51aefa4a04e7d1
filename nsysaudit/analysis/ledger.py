"""The device-memory ledger: how much memory was live, and how little could have been free, at each moment.

From CUDA_GPU_MEMORY_USAGE_EVENTS (an allocation event +bytes, a deallocation -bytes) the ledger
keeps live bytes per device and per process over time, split by memory kind, on the trace clock.
A deallocation is matched to the allocation at the same (process, device, address) that is still
live; one with no such allocation freed memory allocated before the capture began: it is counted
(``freed_never_allocated``) and left out, so the traced live bytes are a LOWER bound on what was
really live, and ``total - live`` an UPPER bound on what could have been free.

What the bound does not count: CUDA contexts and the driver's own reservations (no memory event),
processes the capture did not trace, memory allocated before the capture began and never freed
in it, managed memory (it may live on the host: shown, not subtracted). Device-resident kinds, the
ones subtracted: Device, Array, Device Static.

Completeness is stated, never assumed: whether memory-usage collection was on
(META_DATA_CAPTURE ``COLLECT_GPU_MEMORY_USAGE``), whether any deallocation appears at all (without
one the trace cannot show whether memory was freed: then no ledger is claimed, only allocation
totals), devices with no total.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import polars as pl

from nsysaudit.ids import decode_pid, pid_of
from nsysaudit.read.memory import MemoryEvidence

DEVICE_RESIDENT = frozenset({"Device", "Array", "Device Static"})
MANAGED = frozenset({"Managed", "Managed Static"})
NOT_COUNTED = (
    "CUDA contexts and the driver's own reservations (they have no memory event)",
    "processes the capture did not trace",
    "memory allocated before the capture began and not freed during it",
    "managed memory, which may reside on the host (shown, not subtracted)",
)
SERIES_SCHEMA: dict[str, Any] = {
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
}


@dataclass(frozen=True)
class Ledger:
    """Live traced bytes over time, or why none is claimed.

    ``series``: one row per counted event in time order (:data:`SERIES_SCHEMA`): ``delta`` (+ for an
    allocation, - for a matched deallocation), ``process_live`` (the process's live bytes on that
    device, every kind) and ``device_resident_live`` (all processes' device-resident live bytes on
    that device) just after it. Empty when ``claimed`` is False.
    """

    claimed: bool
    why_not: str | None
    collected: bool | None
    series: pl.DataFrame
    devices: pl.DataFrame
    summary: dict[str, Any]

    def at(self, t_ns: int, gpid: int | None) -> list[dict[str, Any]]:
        """Per device the process ``gpid`` used: its live bytes, all traced processes' device-resident
        live bytes, the device's total and the upper bound on free memory, just after ``t_ns``.

        A process with no memory event of its own does not say which device it used: then every
        traced device is given, each with ``process_has_events`` false."""
        if not self.claimed or gpid is None:
            return []
        reader = self._reader
        pairs = reader.pairs(gpid)
        own_events = bool(pairs)
        out = []
        for vm, device in pairs if own_events else reader.pairs(None):
            # The events of the device up to t_ns (none when its vm or id is unknown).
            curve = reader.device(vm, device) if vm is not None and device is not None else None
            n = curve.events_upto(t_ns) if curve is not None else 0
            if curve is not None and n:
                row = curve.values.row(n - 1)
                resident, freed = int(row[0]), int(row[1])
                by_kind = {str(k): int(v) for k, v in zip(curve.kinds, row[2:], strict=True) if v}
                own = reader.process(vm, device, gpid)
                m = own.events_upto(t_ns)
                process_live = int(own.values.row(m - 1)[0]) if m else 0
            else:
                resident, freed, by_kind, process_live = 0, 0, {}, 0
            total = _total(self.devices, vm, device)
            out.append(
                {
                    "vm": vm,
                    "device_id": device,
                    "process_has_events": own_events,
                    "process_live_bytes": process_live,
                    "device_resident_live_bytes": resident,
                    "managed_live_bytes": sum(v for k, v in by_kind.items() if k in MANAGED),
                    "live_bytes_by_kind": by_kind,
                    "total_bytes": total,
                    "free_at_most_bytes": None if total is None else total - resident,
                    "freed_before_bytes": freed,
                }
            )
        return out

    @cached_property
    def _reader(self) -> _SeriesReader:
        return _SeriesReader(self.series)


@dataclass(frozen=True)
class _Curve:
    """Values after each event, for events in time order (``start``: their times, ascending)."""

    start: pl.Series
    values: pl.DataFrame
    kinds: tuple[str | None, ...] = ()

    def events_upto(self, t_ns: int) -> int:
        """How many of the events happened at or before ``t_ns``."""
        return int(self.start.search_sorted(t_ns, side="right")) if self.start.len() else 0


class _SeriesReader:
    """Reads the ledger's series at a moment by binary search over per-device running sums (built
    once per device and process), instead of filtering the whole series at each moment: the same
    numbers as summing the device's events with ``start_ns <= t`` (events without a start never
    count there; they do in the running live columns, as in the series)."""

    def __init__(self, series: pl.DataFrame) -> None:
        self.series = series
        self._pairs: dict[int | None, list[tuple[Any, Any]]] = {}
        self._devices: dict[tuple[int, int], _Curve] = {}
        self._processes: dict[tuple[int, int, int], _Curve] = {}

    def pairs(self, gpid: int | None) -> list[tuple[Any, Any]]:
        """The (vm, device) pairs of the process's events (every process's when None), sorted."""
        if gpid not in self._pairs:
            rows = self.series if gpid is None else self.series.filter(pl.col("gpid") == gpid)
            self._pairs[gpid] = rows.select("vm", "device_id").unique().sort("vm", "device_id").rows()
        return self._pairs[gpid]

    def _timed(self, vm: int, device: int) -> pl.DataFrame:
        return self.series.filter(
            (pl.col("vm") == vm) & (pl.col("device_id") == device) & pl.col("start_ns").is_not_null()
        )

    def device(self, vm: int, device: int) -> _Curve:
        """Device-resident live bytes, bytes freed so far, and live bytes of each kind (kinds sorted
        as ``_live_by_kind`` sorts them)."""
        key = (vm, device)
        if key not in self._devices:
            rows = self._timed(vm, device)
            kinds = tuple(rows["kind"].unique().sort().to_list())
            delta = pl.col("delta")
            values = rows.select(
                "device_resident_live",
                pl.when(delta < 0).then(-delta).otherwise(0).cum_sum().alias("_freed"),
                *(
                    pl.when(pl.col("kind").eq_missing(k)).then(delta).otherwise(0).cum_sum().alias(f"_kind{i}")
                    for i, k in enumerate(kinds)
                ),
            )
            self._devices[key] = _Curve(rows["start_ns"], values, kinds)
        return self._devices[key]

    def process(self, vm: int, device: int, gpid: int) -> _Curve:
        """The process's live bytes on the device."""
        key = (vm, device, gpid)
        if key not in self._processes:
            rows = self._timed(vm, device).filter(pl.col("gpid") == gpid)
            self._processes[key] = _Curve(rows["start_ns"], rows.select("process_live"))
        return self._processes[key]


def _by_call(rows: pl.DataFrame) -> pl.DataFrame:
    """Allocation events by process and by the CUDA API call behind them, joined by (process,
    correlation id): ``matched`` (one call), ``driver`` (correlation id 0 or NULL: memory the driver
    allocated itself, such as module memory) or ``no_single_call`` (a correlation id that no call or
    several calls of the process carry). Columns ``gpid, call, api, kind, events, bytes``."""
    # Grouped by a code that sorts as the names do (driver < matched < no_single_call), named after.
    allocs = rows.filter(pl.col("delta") > 0).with_columns(
        pl.when(pl.col("correlation_id").fill_null(0) == 0)
        .then(0)
        .when(pl.col("api").is_null())
        .then(2)
        .otherwise(1)
        .alias("call")
    )
    return (
        allocs.group_by("gpid", "call", "api", "kind")
        .agg(pl.len().alias("events"), pl.col("delta").sum().alias("bytes"))
        .sort("gpid", "call", "api", "kind", nulls_last=True)
        .with_columns(pl.col("call").replace_strict(CALL_NAMES, return_dtype=pl.String))
    )


CALL_NAMES = {0: "driver", 1: "matched", 2: "no_single_call"}


def _live_by_kind(rows: pl.DataFrame) -> dict[str, int]:
    sums = rows.group_by("kind").agg(pl.col("delta").sum()).sort("kind")
    return {str(k): int(v) for k, v in sums.iter_rows() if v}


def _total(devices: pl.DataFrame, vm: int | None, device: int | None) -> int | None:
    if vm is None or device is None:  # an unknown device has no known total
        return None
    row = devices.filter((pl.col("vm") == vm) & (pl.col("device_id") == device))
    return int(row["total_bytes"][0]) if row.height and row["total_bytes"][0] is not None else None


def collection_on(capture: Mapping[str, list[str]]) -> bool | None:
    """Whether the capture settings say memory-usage collection was on (None: they do not say)."""
    values = [v for k, vs in capture.items() if k.endswith("COLLECT_GPU_MEMORY_USAGE") for v in vs]
    if not values:
        return None
    return any(v.lower() == "true" for v in values)


def build_ledger(
    memory: MemoryEvidence | None, capture: Mapping[str, list[str]], calls: pl.DataFrame | None = None
) -> Ledger:
    """The ledger of ``memory`` (see the module docstring).

    ``calls``: ``gpid, correlation_id, api`` of the one CUDA API call behind an event's (process,
    correlation id); an event without one (correlation id 0: memory the driver allocates itself,
    or a correlation shared by several rows) has ``api`` null.
    """
    collected = collection_on(capture)
    empty = pl.DataFrame(schema=SERIES_SCHEMA)
    devices = memory.devices if memory is not None else pl.DataFrame()
    if memory is None or memory.table is None:
        why = "the export has no CUDA_GPU_MEMORY_USAGE_EVENTS table"
        if collected is False:
            why = "memory-usage collection was off (--cuda-memory-usage=true turns it on)"
        return Ledger(False, why, collected, empty, devices, _summary(memory, collected, empty, 0, 0))
    events = memory.events.with_columns(
        pl.col("mem_kind").replace_strict(memory.kinds, default=None, return_dtype=pl.String).alias("kind"),
        (pl.col("gpid") // (1 << 48)).alias("vm"),
    )
    deallocations = events.filter(pl.col("operation") == 1).height
    if deallocations == 0:
        why = (
            "the export holds allocation events only (no deallocation event): the trace cannot show whether "
            "memory was freed, so live bytes and a free-memory bound are not claimed, only allocation totals"
        )
        return Ledger(False, why, collected, empty, devices, _summary(memory, collected, empty, 0, 0))
    # A deallocation frees the live allocation at its (process, device, address): one with none
    # before it freed memory allocated before the capture began, and is left out of the ledger.
    # Lazy, so that polars frees each intermediate column as soon as the plan no longer needs it
    # (at 755k events, the eager chain held ~300 MB of intermediates at once).
    keyed = events.lazy().with_row_index("_order").with_columns(
        (pl.col("operation") == 0).cast(pl.Int64).alias("_is_alloc"),
        (pl.col("operation") == 1).cast(pl.Int64).alias("_is_free"),
    )
    # Counts before each event at its (process, device, address), in time order: the events sorted
    # by key then time, a running count less its value where the key begins (a window
    # ``cum_sum().over(key)`` does the same but costs ~1 s per million events with as many keys).
    # The address leads the sort key: it has the fewest ties, which makes the sort fastest.
    group = ["address", "gpid", "device_id"]
    new_key = pl.int_range(pl.len()) == 0
    for c in group:
        new_key = new_key | pl.col(c).ne_missing(pl.col(c).shift(1))

    def before_in_key(flag: str) -> pl.Expr:
        one = pl.col(flag).fill_null(0)  # an event of unknown operation counts as neither
        before = one.cum_sum() - one
        return before - pl.when(new_key).then(before).forward_fill()

    is_free = pl.col("_is_free") == 1
    matched = is_free & pl.col("address").is_not_null() & (
        before_in_key("_is_alloc") > before_in_key("_is_free")
    )
    keyed_frame = (
        keyed.sort([*group, "_order"])
        .with_columns(matched.alias("_matched"))
        .select("_order", "start_ns", "vm", "device_id", "gpid", "kind", "bytes", "correlation_id",
                "_is_alloc", "_is_free", "_matched")
        .collect()
    )
    unmatched_frees = keyed_frame.select(
        (is_free & ~pl.col("_matched")).sum().alias("events"),
        pl.when(is_free & ~pl.col("_matched")).then(pl.col("bytes")).otherwise(0).sum().alias("bytes"),
    ).row(0)
    resident = pl.col("kind").is_in(list(DEVICE_RESIDENT))
    # Time order: (start, event order). The events come sorted by start (NULL first) from the read,
    # and then the event order alone is that order, a cheaper sort; checked, not assumed.
    in_time = ["_order"] if memory.events["start_ns"].is_sorted() else ["start_ns", "_order"]
    series = (
        keyed_frame.lazy()
        .filter((pl.col("_is_alloc") == 1) | pl.col("_matched"))
        .sort(in_time)
        .with_columns(
            pl.when(pl.col("_is_alloc") == 1).then(pl.col("bytes")).otherwise(-pl.col("bytes")).alias("delta"),
            pl.when(pl.col("_is_alloc") == 1)
            .then(pl.lit("allocation"))
            .otherwise(pl.lit("deallocation"))
            .alias("operation_name"),
        )
        .with_columns(
            pl.col("delta").cum_sum().over("gpid", "vm", "device_id").alias("process_live"),
            pl.when(resident).then(pl.col("delta")).otherwise(0).cum_sum().over("vm", "device_id").alias(
                "device_resident_live"
            ),
            decode_pid(pl.col("gpid")).alias("pid"),
        )
        .join(
            (calls if calls is not None else pl.DataFrame(schema={"gpid": pl.Int64, "correlation_id": pl.Int64,
                                                                   "api": pl.String})).lazy(),
            on=["gpid", "correlation_id"],
            how="left",
            maintain_order="left",
        )
        .select(
            "start_ns", "vm", "device_id", "gpid", "pid", "kind", pl.col("operation_name").alias("operation"),
            "bytes", "delta", "correlation_id", "api", "process_live", "device_resident_live",
        )
        .collect()
    )
    del keyed_frame
    sizes_unknown = series.filter(pl.col("delta").is_null()).height
    if sizes_unknown:
        why = f"{sizes_unknown} memory event(s) have no size: live bytes cannot be summed"
        return Ledger(False, why, collected, empty, devices, _summary(memory, collected, empty, 0, 0))
    summary = _summary(memory, collected, series, int(unmatched_frees[0] or 0), int(unmatched_frees[1] or 0))
    return Ledger(True, None, collected, series, devices, summary)


def _summary(
    memory: MemoryEvidence | None, collected: bool | None, series: pl.DataFrame, unmatched: int, unmatched_bytes: int
) -> dict[str, Any]:
    """The ledger's summary per device and process (the JSON ``memory`` key, without its points).

    A device is a (vm, device id) pair; either may be unknown (NULL globalPid or deviceId): such
    events are summed under the unknown pair, never dropped. Per process, one group-by over the
    device's rows (not one filter per process)."""
    events = memory.events if memory is not None else pl.DataFrame(schema={"operation": pl.Int64})
    operation = events["operation"]
    out: dict[str, Any] = {
        "collected": collected,
        "events": events.height,
        "allocation_events": int((operation == 0).sum()),
        "deallocation_events": int((operation == 1).sum()),
        "freed_never_allocated": {"events": unmatched, "bytes": unmatched_bytes},
        "not_counted": list(NOT_COUNTED),
        "devices": [],
    }
    kinds = memory.kinds if memory is not None else {}
    allocs = (
        events.filter(pl.col("operation") == 0).with_columns((pl.col("gpid") // (1 << 48)).alias("_vm"))
        if memory is not None
        else None
    )
    device_rows = memory.devices.to_dicts() if memory is not None else []
    used: set[tuple[Any, Any]] = set()
    if allocs is not None and allocs.height:
        used = set(allocs.select("_vm", "device_id").unique().iter_rows())
    known = {(r["vm"], r["device_id"]) for r in device_rows}

    def order(key: tuple[Any, Any]) -> tuple[bool, int, bool, int]:  # unknown first, then by id
        vm, device = key
        return (vm is not None, vm or 0, device is not None, device or 0)

    def on_device(vm: Any, device: Any, vm_column: str) -> pl.Expr:
        return pl.col(vm_column).eq_missing(vm) & pl.col("device_id").eq_missing(device)

    for vm, device in sorted(known | used, key=order):
        info = next((r for r in device_rows if r["vm"] == vm and r["device_id"] == device), None)
        on = allocs.filter(on_device(vm, device, "_vm")) if allocs is not None else pl.DataFrame()
        entry: dict[str, Any] = {
            "vm": vm,
            "device_id": device,
            "name": info["name"] if info else None,
            "total_bytes": info["total_bytes"] if info else None,
            "allocated_bytes": int(on["bytes"].sum() or 0) if on.height else 0,
            "allocation_events": on.height,
            "allocated_bytes_by_kind": {
                kinds.get(k, str(k)) if k is not None else "unknown": int(v or 0)
                for k, v in on.group_by("mem_kind").agg(pl.col("bytes").sum()).sort("mem_kind").iter_rows()
            }
            if on.height
            else {},
        }
        mine = series.select(SUMMARY_COLUMNS).filter(on_device(vm, device, "vm"))
        if mine.height:
            delta = pl.col("delta")
            peak = int(mine["device_resident_live"].max())  # type: ignore[arg-type]
            # The first moment at the peak; unknown when an event without a start reached it.
            at_peak = mine.filter(pl.col("device_resident_live") == peak)["start_ns"]
            entry.update(
                {
                    "freed_bytes": int(-mine.filter(delta < 0)["delta"].sum()),
                    "live_bytes_at_end": int(mine["delta"].sum()),
                    "device_resident_live_bytes_at_end": int(mine["device_resident_live"][-1]),
                    "peak_device_resident_live_bytes": peak,
                    "peak_at_ns": None if at_peak.null_count() else at_peak.min(),
                    "live_bytes_by_kind_at_end": _live_by_kind(mine),
                    "processes": _processes(mine),
                }
            )
        out["devices"].append(entry)
    out["kinds"] = {str(k): v for k, v in sorted(kinds.items())}
    return out


SUMMARY_COLUMNS = ("vm", "device_id", "gpid", "start_ns", "kind", "delta", "correlation_id", "api",
                   "device_resident_live")


def _processes(rows: pl.DataFrame) -> list[dict[str, Any]]:
    """Per process of one device's series rows (by globalPid): what it allocated, freed, still
    held at the end (in all and by kind) and by which calls it allocated."""
    delta = pl.col("delta")
    totals = (
        rows.group_by("gpid")
        .agg(
            delta.filter(delta > 0).sum().alias("allocated"),
            (-delta.filter(delta < 0).sum()).alias("freed"),
            delta.sum().alias("live"),
            delta.filter((delta > 0) & (pl.col("correlation_id").fill_null(0) == 0)).sum().alias("driver"),
        )
        .sort("gpid")
    )
    by_kind: dict[Any, dict[str, int]] = {}
    for gpid, kind, live in rows.group_by("gpid", "kind").agg(delta.sum()).sort("gpid", "kind").iter_rows():
        if live:
            by_kind.setdefault(gpid, {})[str(kind)] = int(live)
    by_call: dict[Any, list[dict[str, Any]]] = {}
    for gpid, c, api, kind, n, b in _by_call(rows).iter_rows():
        by_call.setdefault(gpid, []).append({"call": c, "api": api, "kind": kind, "events": int(n), "bytes": int(b)})
    return [
        {
            "pid": pid_of(gpid),
            "global_pid": gpid,
            "allocated_bytes": int(allocated),
            "freed_bytes": int(freed),
            "live_bytes_at_end": int(live),
            "driver_allocated_bytes": int(driver),
            "live_bytes_by_kind_at_end": by_kind.get(gpid, {}),
            "allocations_by_call": by_call.get(gpid, []),
        }
        for gpid, allocated, freed, live, driver in totals.iter_rows()
    ]


def points(
    ledger: Ledger, wanted: Iterable[tuple[str, str, int | None, int | None, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The ledger at each wanted moment: ``(point, label, t_ns, gpid, extra)`` (a finding, a censored
    library call, a telemetry boundary). Empty when no ledger is claimed."""
    if not ledger.claimed:
        return []
    out = []
    for point, label, t_ns, gpid, extra in wanted:
        entry: dict[str, Any] = {"point": point, "label": label, "t_ns": t_ns, "pid": pid_of(gpid), **extra}
        if t_ns is None or gpid is None:
            # Kept, not dropped: the reader sees the moment and why the ledger cannot be read there.
            missing = "start time" if t_ns is None else "process (globalTid)"
            entry.update(devices=[], unknown=f"the call's {missing} is unknown, so the ledger cannot be read at it")
        else:
            entry["devices"] = ledger.at(t_ns, gpid)
        out.append(entry)
    return out
