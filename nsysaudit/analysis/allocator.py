"""The allocator's own view: a PyTorch memory snapshot of the same run joined to the trace.

The trace says who held the device (the ledger, :mod:`nsysaudit.analysis.ledger`); a snapshot
(:mod:`nsysaudit.read.snapshot`) says what inside PyTorch's caching allocator held it: segments,
blocks, and the history of allocations and frees with their Python stacks. Each sees what the
other cannot: the snapshot nothing of cuBLAS's or NCCL's own ``cudaMalloc`` nor of other processes,
the trace nothing of blocks. The join, by evidence only (docs/ledger.md, "The allocator's own view"):

- **Which process.** The snapshot's segments are joined to the trace's memory events by address:
  each ``segment_alloc`` (``segment_map`` under expandable segments) to the allocation event at its
  address, each ``segment_free``/``segment_unmap`` to the deallocation there (the nearest in time
  when an address was used twice), and each segment the snapshot holds to the allocation at its
  address. The process (and device) of those events is the snapshot's. A snapshot none of whose
  segments the trace's memory events name, or whose segment events sit at the trace's addresses but
  not at its times (a second run of the same program reuses addresses), is of another run: refused.
- **Which clock.** ``time_us`` is the realtime clock in microseconds (CLOCK_REALTIME, as the
  telemetry's ``realtime_ns``): ``trace_ns = time_us * 1000 - utcEpochNs`` (the export's session
  start, the telemetry's UTC mapping). It is checked against the trace: every matched segment event's
  residual (trace event - mapped entry) within the tolerance. Without the session start, the offset
  is the median over the matched segment events (``segment_events``); without either, the history
  cannot be placed and the join is by address only.
- **At each moment** the ledger is read at: the allocator's state replayed back from the snapshot's
  own sums through the history after the moment (exact, in the bytes each entry records: requested
  bytes), the inactive ranges and their largest per segment size class (allocations rounded up to
  512 B, as the allocator rounds them: an upper bound), who last used the inactive memory (the
  allocation stack), and what the trace holds for that process on that device outside the
  allocator's segments (cuBLAS's direct ``cudaMalloc``).

Columnar: the history is joined, paired and replayed with polars; only the moments are looped over.
"""

# No `from __future__ import annotations` here: typing would compile each TypedDict's string
# annotations into ForwardRefs at import, a small export's start-up (docs/performance.md).
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NotRequired, TypedDict

import polars as pl

from nsysaudit.analysis.ledger import PointKind, Wanted
from nsysaudit.core.errors import ReportWarning, UnusableInput
from nsysaudit.core.ids import pid_of
from nsysaudit.core.reasons import Reason
from nsysaudit.read.diagnostics import Capture
from nsysaudit.read.memory import MemoryEvidence
from nsysaudit.read.snapshot import Snapshot
from nsysaudit.words import ALLOCATOR_RULE, warned

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
ROUND = 512  # the caching allocator rounds every request up to a multiple of 512 B (kMinBlockSize)
SMALL_SEGMENT = 2 << 20  # the small pool's segments are 2 MiB (kSmallBuffer); no large segment is
TOP_HOLDERS = 5
SEGMENT_ACTIONS = ("segment_alloc", "segment_free", "segment_map", "segment_unmap")
MAPS, UNMAPS = ("segment_alloc", "segment_map"), ("segment_free", "segment_unmap")
OOM_EXAMPLES = 5

History = Literal["within", "before", "after", "not_placed"]
ClockMethod = Literal["utc", "segment_events"]
Backend = Literal["native", "cudaMallocAsync"]


# --- the document's parts made here (named in nsysaudit.reports.documents, the JSON contract) -----
class AllocatorNote(TypedDict):
    """A fact about a snapshot or its join, as a code and its values (the words are made from them)."""

    code: str
    values: dict[str, int | str | bool | None]


class Frame(TypedDict):
    filename: str
    line: int | None
    name: str


class Stack(TypedDict):
    """A Python stack the snapshot recorded (``frames`` innermost first, at most 64; ``frames_total``
    all of them), named by ``stack`` in the points and sections of one snapshot."""

    snapshot: int
    stack: int
    frames: list[Frame]
    frames_total: int


class ByAction(TypedDict):
    action: str
    entries: int
    bytes: int


class OomEntry(TypedDict):
    t_ns: int | None
    time_us: int | None
    requested_bytes: int | None
    device_free_bytes: int | None
    stack: int | None


class SnapshotHistory(TypedDict):
    """The allocator's history the snapshot holds (``device_traces``)."""

    entries: int
    by_action: list[ByAction]
    first_time_us: int | None
    last_time_us: int | None
    first_ns: int | None
    last_ns: int | None
    reserved_before_bytes: int | None
    ooms: int
    oom_examples: list[OomEntry]


class SizeClass(TypedDict):
    segments: int
    bytes: int


class AtSnapshot(TypedDict):
    """The snapshot's own sums over its segments and blocks (what PyTorch's memory_stats would say)."""

    segments: int
    reserved_bytes: int
    allocated_bytes: int
    active_bytes: int
    inactive_bytes: int
    requested_bytes: int
    awaiting_free_requested_bytes: int
    blocks: dict[str, int]
    by_segment_type: dict[str, SizeClass]
    expandable_segments: int


class SnapshotProcess(TypedDict):
    """Which traced process the snapshot is of, and the evidence."""

    pid: int | None
    global_pid: int | None
    device_ids: list[int | None]
    rule: str
    segment_events: int
    segment_events_matched: int
    segment_events_matched_in_time: int
    segments: int
    segments_matched: int
    segment_events_unmatched_in_capture: int


class ClockCheck(TypedDict):
    name: str
    passed: bool | None
    values: dict[str, int | str | bool | None]


class SnapshotClock(TypedDict):
    """How the snapshot's ``time_us`` was put on the trace clock, and its checks."""

    relation: str
    method: ClockMethod | None
    offset_ns: int | None
    tolerance_ns: int
    checked: bool
    checks: list[ClockCheck]
    residuals: int
    median_residual_ns: int | None
    max_abs_residual_ns: int | None
    telemetry_alignment_checked: bool | None


class OutsideApi(TypedDict):
    api: str | None
    allocations: int
    bytes: int


class OutsideAllocator(TypedDict):
    """Device memory the trace shows for the snapshot's process and device outside the allocator's
    segments (the allocations no segment of the snapshot is at: cuBLAS's, NCCL's own ``cudaMalloc``)."""

    allocations: int
    bytes: int
    by_api: list[OutsideApi]


class SnapshotSection(TypedDict):
    """One snapshot, joined (``allocator.snapshots[]``)."""

    index: int
    path: str
    sha256: str
    size_bytes: int
    keys: list[str]
    backend: Backend | None
    alloc_conf: str | None
    expandable_segments: bool | None
    settings: dict[str, str | int | float | bool | None]
    devices: int
    history: SnapshotHistory
    at_snapshot: AtSnapshot
    process: SnapshotProcess
    clock: SnapshotClock
    outside_allocator: OutsideAllocator
    segment_frees: list["SegmentFrees"]
    notes: list[AllocatorNote]


class SegmentFrees(TypedDict):
    """Segments the allocator gave back to CUDA (``segment_free``/``segment_unmap``), by the stack
    that gave them back."""

    stack: int | None
    segments: int
    bytes: int
    first_ns: int | None
    last_ns: int | None


class InactiveHolder(TypedDict):
    """Inactive memory by the stack of the allocation that last used it (``stack`` null: no
    allocation of the history did)."""

    stack: int | None
    bytes: int
    ranges: int
    allocations: int
    last_freed_ns: int | None
    freed_stack: int | None


class LargestInactive(TypedDict):
    small: int | None
    large: int | None


class AllocatorState(TypedDict):
    """The allocator at one moment (``history`` ``within`` its history; ``after``: as of its last
    entry, the moment being later; ``before``/``not_placed``: unknown, figures null)."""

    snapshot: int
    device_index: int
    device_id: int | None
    history: History
    as_of_ns: int | None
    ns_after_history: int | None
    verified: bool
    reserved_bytes: int | None
    requested_bytes: int | None
    awaiting_free_bytes: int | None
    inactive_bytes: int | None
    segments: int | None
    inactive_ranges: int | None
    inactive_ranges_bytes: int | None
    largest_inactive_bytes: LargestInactive
    inactive_holders: list[InactiveHolder]
    inactive_holder_stacks: int
    unattributed_inactive_bytes: int | None
    outside_allocator: OutsideAllocator


class AllocatorPoint(TypedDict):
    """The allocator at one of the moments the ledger is read at (``allocator.at[]``)."""

    point: PointKind
    label: str
    t_ns: int | None
    pid: int | None
    global_pid: int | None
    states: list[AllocatorState]
    finding: NotRequired[int]
    finding_number: NotRequired[int]
    lib_id: NotRequired[int]
    line: NotRequired[int]
    statement: NotRequired[str]


class AllocatorSection(TypedDict):
    """The allocator's own view (``allocator``): each snapshot joined, each moment, the stacks."""

    snapshots: list[SnapshotSection]
    at: list[AllocatorPoint]
    stacks: list[Stack]
    rule: str


RULE = ALLOCATOR_RULE


# --- the join --------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class _Device:
    """One device of a snapshot, prepared: its history on the trace clock and what it replays."""

    index: int
    device_id: int | None
    entries: pl.DataFrame  # seq, action, addr, size, t_ns, reach_ns (running max), stack, deltas, running sums
    dump: dict[str, int]  # reserved, requested, awaiting at the snapshot
    totals: dict[str, int]  # the history's summed deltas
    allocs: pl.DataFrame  # addr, size, t_from, t_requested, t_to, stack, freed_stack
    pieces: pl.DataFrame  # addr, end, t_from, t_to, region, segment_type
    first_ns: int | None
    last_ns: int | None


@dataclass(frozen=True, eq=False)
class Joined:
    """One snapshot joined to the trace."""

    index: int
    snapshot: Snapshot
    section: SnapshotSection
    global_pid: int | None
    verified: bool
    devices: tuple[_Device, ...]
    outside: pl.DataFrame  # the trace's allocations of the process outside the allocator: start, end, bytes, api


@dataclass(frozen=True)
class AllocatorView:
    """Every snapshot joined, and the allocator at each moment (:func:`allocator_view`)."""

    joined: tuple[Joined, ...]
    points: tuple[AllocatorPoint, ...]
    stacks: tuple[Stack, ...]
    warnings: tuple[ReportWarning, ...] = field(default=())

    def section(self) -> AllocatorSection:
        return {"snapshots": [j.section for j in self.joined], "at": list(self.points), "stacks": list(self.stacks),
                "rule": RULE}


def allocator_view(
    snapshots: Sequence[Snapshot],
    memory: MemoryEvidence | None,
    alloc_calls: pl.DataFrame,
    *,
    session_start_utc_ns: int | None,
    capture: Capture,
    traced_gpids: Sequence[int],
    tolerance_ns: int,
    telemetry_checked: bool | None,
    wanted: Iterable[Wanted],
) -> AllocatorView:
    """Join each snapshot to the trace and read the allocator at each ``wanted`` moment (``(point,
    label, t_ns, gpid, key, value)``, as the ledger is read). Raises
    :class:`~nsysaudit.core.errors.UnusableInput` for a snapshot of another run, or one nothing ties
    to this trace."""
    events = _trace_events(memory, alloc_calls)
    joined = tuple(
        _join(i, snap, events, session_start_utc_ns, capture, traced_gpids, tolerance_ns, telemetry_checked)
        for i, snap in enumerate(snapshots)
    )
    points = [_point(joined, w) for w in wanted]
    points = [p for p in points if p["states"]]
    used = {(s["snapshot"], k) for p in points for s in p["states"] for k in _stacks_of(s)}
    used |= {(j.index, f["stack"]) for j in joined for f in j.section["segment_frees"] if f["stack"] is not None}
    used |= {(j.index, o["stack"]) for j in joined for o in j.section["history"]["oom_examples"]
             if o["stack"] is not None}
    stacks = tuple(_stack(joined[i].snapshot, i, s) for i, s in sorted(used))
    said = [w for j in joined for w in _warnings(j)]
    return AllocatorView(joined, tuple(points), stacks, tuple(said))


def _stacks_of(state: AllocatorState) -> list[int]:
    out = [h["stack"] for h in state["inactive_holders"] if h["stack"] is not None]
    return out + [h["freed_stack"] for h in state["inactive_holders"] if h["freed_stack"] is not None]


def _stack(snapshot: Snapshot, index: int, stack: int) -> Stack:
    rows = snapshot.frames.filter(pl.col("stack") == stack).sort("depth")
    frames: list[Frame] = [{"filename": f, "line": None if line < 0 else line, "name": n}
                           for f, line, n in rows.select("filename", "line", "name").iter_rows()]
    total = snapshot.stack_frames[stack] if 0 <= stack < len(snapshot.stack_frames) else len(frames)
    return {"snapshot": index, "stack": stack, "frames": frames, "frames_total": total}


def _warnings(j: Joined) -> list[ReportWarning]:
    out = []
    for note in j.section["notes"]:
        if note["code"] == "replay_below_zero":
            out.append(warned(
                Reason.of("snapshot_replay_below_zero", path=j.snapshot.path, quantity=note["values"]["quantity"],
                          bytes=note["values"]["bytes"]),
                1,
            ))
        if note["code"] == "segment_events_unmatched":
            out.append(warned(
                Reason.of("snapshot_segment_events_unmatched", path=j.snapshot.path),
                int(note["values"]["count"] or 0),
            ))
    return out


# --- the trace's side ----------------------------------------------------------------------------
_DEVICE_KINDS = ("Device", "Array")


def _trace_events(memory: MemoryEvidence | None, alloc_calls: pl.DataFrame) -> pl.DataFrame:
    """The trace's device-memory events with an address: ``_row, start_ns, gpid, device_id, address,
    bytes, operation, correlation_id, pool, api`` (``pool``: a CUDA memory pool's)."""
    schema = {"_row": pl.Int64, "start_ns": pl.Int64, "gpid": pl.Int64, "device_id": pl.Int64, "address": pl.Int64,
              "bytes": pl.Int64, "operation": pl.Int64, "correlation_id": pl.Int64, "pool": pl.Boolean,
              "api": pl.String}
    if memory is None or not memory.events.height:
        return pl.DataFrame(schema=schema)
    kinds = [k for k, name in memory.kinds.items() if name in _DEVICE_KINDS]
    events = memory.events.with_row_index("_row").filter(
        pl.col("mem_kind").is_in(kinds) & pl.col("address").is_not_null() & pl.col("operation").is_in([0, 1])
        & pl.col("correlation_id").fill_null(0).ne(0)
    )
    return events.join(alloc_calls.unique(["gpid", "correlation_id"]), on=["gpid", "correlation_id"], how="left",
                       maintain_order="left").select(
        pl.col("_row").cast(pl.Int64), "start_ns", "gpid", "device_id", "address", "bytes", "operation",
        "correlation_id", pl.col("pool_address").is_not_null().alias("pool"), "api",
    ).cast(schema)  # type: ignore[arg-type]  # polars' stubs want its own mapping type


# --- one snapshot: which process, which clock ----------------------------------------------------
def _raw(snapshot: Snapshot) -> pl.DataFrame:
    """The history in recording order with ``t_raw``, ``time_us`` in ns (null where that leaves 64 bits)."""
    t = pl.col("time_us").cast(pl.Int128) * 1000
    return snapshot.entries.sort("device", "seq").with_columns(
        pl.when(t.is_between(INT64_MIN, INT64_MAX)).then(t).otherwise(None).cast(pl.Int64).alias("t_raw"))


def _candidates(raw: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Each segment event of the history with every trace event of its kind (an allocation for
    ``segment_alloc``/``segment_map``) inside its range (``at_start``: at its address):
    ``residual_raw`` = the trace event's start less ``t_raw`` (the offset of the two clocks, plus the
    latency between the call and the record; under expandable segments a range is many pages)."""
    actions = raw.filter(pl.col("action").is_in(SEGMENT_ACTIONS) & pl.col("addr").is_not_null()).select(
        "device", "seq", "action", "addr", "size", "t_raw", "stack",
        pl.when(pl.col("action").is_in(MAPS)).then(0).otherwise(1).alias("operation"))
    found = actions.join_where(
        events.rename({"operation": "_op"}),
        pl.col("address") >= pl.col("addr"),
        pl.col("address") < pl.col("addr") + pl.max_horizontal(pl.col("size").fill_null(0), pl.lit(1)),
    ).filter(pl.col("_op") == pl.col("operation")).drop("_op")
    return found.with_columns((pl.col("start_ns") - pl.col("t_raw")).alias("residual_raw"),
                              (pl.col("address") == pl.col("addr")).alias("at_start"))


def _offset(candidates: pl.DataFrame, utc: int | None) -> tuple[ClockMethod | None, int | None]:
    """``trace_ns = t_raw + offset``: the UTC mapping (the export's session start), else the median
    residual of the segment events with one trace event at their address (a reused address is ambiguous)."""
    if utc is not None:
        return "utc", -utc
    starts = candidates.filter(pl.col("at_start"))
    single = starts.filter(pl.col("residual_raw").is_not_null() & (pl.len().over("device", "seq") == 1))
    if not single.height:
        return None, None
    return "segment_events", _median(single["residual_raw"])


def _median(values: pl.Series) -> int:
    """The median of integers, exactly (a float holds 1.8e18 ns to 256 ns only): the lower middle one's
    mean with the upper's, rounded down."""
    ordered = values.sort()
    n = ordered.len()
    return (int(ordered[(n - 1) // 2]) + int(ordered[n // 2])) // 2


class _Evidence(TypedDict):
    global_pid: int
    rule: str


def _process(
    snapshot: Snapshot, candidates: pl.DataFrame, dump: pl.DataFrame, offset: int | None, tolerance_ns: int,
    capture: Capture, traced_gpids: Sequence[int], events: pl.DataFrame, raw: pl.DataFrame,
) -> _Evidence:
    """The traced process the snapshot is of, from its segments' addresses and times; a snapshot of
    another run, or one nothing ties to a traced process, is refused (one line, exit 2)."""
    path = snapshot.path
    in_time = candidates.filter(
        (pl.col("residual_raw") - (offset or 0)).abs() <= tolerance_ns) if offset is not None else candidates.clear()
    if in_time.height:
        scores = in_time.group_by("gpid").agg(pl.struct("device", "seq").n_unique().alias("n")).sort("n", "gpid",
                                                                                                      descending=True)
        rule = "segment_events"
    elif candidates.height and offset is not None and raw["t_raw"].null_count() < raw.height:
        nearest = _int(((candidates["residual_raw"] - offset).abs()).min()) or 0
        raise UnusableInput(path, (
            f"not a snapshot of this run: its segment events are at addresses the trace's memory events name, but "
            f"not at their times (the nearest {nearest / 1e9:,.3f} s away on the trace clock, tolerance "
            f"{tolerance_ns / 1e6:g} ms): a run that reused the same addresses"))
    else:
        counted = pl.concat([candidates.select("gpid", pl.struct("device", "seq").alias("_k")).unique(),
                             dump.select("gpid", pl.struct(pl.col("device"), pl.col("segment").alias("seq"))
                                         .alias("_k"))], how="vertical_relaxed")
        scores = counted.group_by("gpid").agg(pl.len().alias("n")).sort("n", "gpid", descending=True)
        rule = "segment_addresses"
    if scores.height:
        if scores.height > 1 and scores["n"][0] == scores["n"][1]:
            pids = ", ".join(str(pid_of(int(g))) for g in scores.filter(pl.col("n") == scores["n"][0])["gpid"])
            raise UnusableInput(path, (f"which process it is of is not established: as many of its segments are at "
                                       f"addresses of the memory events of pids {pids}"))
        return {"global_pid": int(scores["gpid"][0]), "rule": rule}
    return _unmatched(snapshot, events, offset, capture, traced_gpids, raw)


def _unmatched(
    snapshot: Snapshot, events: pl.DataFrame, offset: int | None, capture: Capture, traced_gpids: Sequence[int],
    raw: pl.DataFrame,
) -> _Evidence:
    """No segment of the snapshot is at an address of the trace's memory events: refused, unless the
    trace has no memory events and one traced process, and the history lies inside the capture."""
    path = snapshot.path
    settings = snapshot.settings
    if "cudaMallocAsync" in str(settings.get("PYTORCH_CUDA_ALLOC_CONF") or "") and not (
            snapshot.segments.height or snapshot.entries.height):
        raise UnusableInput(path, (
            "a snapshot of PyTorch's cudaMallocAsync backend holds no segments, blocks or history (PyTorch does not "
            "track them there: 'cudaMallocAsync does not yet support recordHistory'): nothing to join to the trace"))
    segments, actions = snapshot.segments.height, raw.filter(pl.col("action").is_in(SEGMENT_ACTIONS)).height
    window = _window(raw, offset)
    where = ""
    if window is not None and capture.start_ns is not None and capture.stop_ns is not None:
        first, last = window
        if last < capture.start_ns:
            where = f"; its history ends {(capture.start_ns - last) / 1e9:,.3f} s before the capture began"
        elif first > capture.stop_ns:
            where = f"; its history begins {(first - capture.stop_ns) / 1e9:,.3f} s after the capture stopped"
        else:
            where = "; its history overlaps the capture"
    if events.height:
        raise UnusableInput(path, (
            f"not a snapshot of this run: none of its {segments:,} segment(s) and {actions:,} segment event(s) is at "
            f"an address the trace's {events.height:,} device-memory events name{where}"))
    inside = (window is not None and capture.start_ns is not None and capture.stop_ns is not None
              and window[0] <= capture.stop_ns and window[1] >= capture.start_ns)
    if inside and len(traced_gpids) == 1:
        return {"global_pid": int(traced_gpids[0]), "rule": "only_traced_process"}
    raise UnusableInput(path, (
        "cannot be tied to this trace: the export has no device-memory events (--cuda-memory-usage=true) to match "
        f"its segments' addresses{where or ' and its history cannot be placed on the trace clock'}"
        + ("" if len(traced_gpids) == 1 else f", and it has {len(traced_gpids)} traced processes")))


def _window(raw: pl.DataFrame, offset: int | None) -> tuple[int, int] | None:
    if offset is None or raw["t_raw"].null_count() == raw.height:
        return None
    return _known(raw["t_raw"].min()) + offset, _known(raw["t_raw"].max()) + offset


def _matched(candidates: pl.DataFrame, gpid: int, offset: int | None, events: pl.DataFrame) -> pl.DataFrame:
    """Each segment event of the history with the trace's events it is, in the snapshot's process: the
    event at its address nearest in time, and with it the rest of the range (under expandable segments
    nsys writes one event per mapped page: a map's are its ``cuMemSetAccess``'s, by correlation id; an
    unmap's the first deallocation of each page from then on). ``trace_first_ns``/``trace_last_ns``
    bound them, ``trace_bytes`` sums them, ``_rows`` names them, and ``residual_ns`` is how far the
    entry on the trace clock lies outside ``[trace_first_ns, trace_last_ns]`` (0 inside; negative:
    after it, as an entry recorded when its call returned is)."""
    mine = candidates.filter((pl.col("gpid") == gpid) & pl.col("at_start")).with_columns(
        (pl.col("residual_raw") - (offset or 0)).abs().alias("_far") if offset is not None
        else pl.lit(None, dtype=pl.Int64).alias("_far"))
    nearest = mine.sort("device", "seq", "_far", "start_ns", nulls_last=True).unique(
        ["device", "seq"], keep="first", maintain_order=True)
    page = events.filter(pl.col("gpid") == gpid).select(
        pl.col("address").alias("_a"), pl.col("start_ns").alias("_s"), pl.col("bytes").alias("_b"),
        pl.col("correlation_id").alias("_c"), pl.col("operation").alias("_op"), pl.col("_row").alias("_r"))
    ranged = nearest.select("device", "seq", "addr", "size", "operation", pl.col("start_ns").alias("_s0"),
                            pl.col("correlation_id").alias("_c0")).join_where(
        page, pl.col("_a") >= pl.col("addr"), pl.col("_a") < pl.col("addr") + pl.col("size").fill_null(0),
    ).filter((pl.col("_op") == pl.col("operation")) & (pl.col("_s") >= pl.col("_s0")))
    maps = ranged.filter((pl.col("operation") == 0) & (pl.col("_c") == pl.col("_c0")))
    unmaps = ranged.filter(pl.col("operation") == 1).sort("_s").unique(["device", "seq", "_a"], keep="first")
    sized = pl.concat([maps, unmaps]).group_by("device", "seq").agg(
        pl.col("_b").sum().alias("trace_bytes"), pl.col("_r").alias("_rows"),
        pl.col("_s").min().alias("trace_first_ns"), pl.col("_s").max().alias("trace_last_ns"))
    out = nearest.join(sized, on=["device", "seq"], how="left")
    if offset is None:
        return out.with_columns(pl.lit(None, dtype=pl.Int64).alias("residual_ns"))
    t = pl.col("t_raw") + offset
    return out.with_columns(
        pl.when(t < pl.col("trace_first_ns")).then(pl.col("trace_first_ns") - t)
        .when(t > pl.col("trace_last_ns")).then(pl.col("trace_last_ns") - t)
        .when(pl.col("trace_first_ns").is_not_null()).then(0).alias("residual_ns"))


def _dump_matches(snapshot: Snapshot, events: pl.DataFrame) -> pl.DataFrame:
    """Each segment of the snapshot with the trace's allocation events at its address (one row per
    process: the latest there): ``segment, device, gpid, device_id, _row``."""
    allocations = events.filter(pl.col("operation") == 0)
    return snapshot.segments.select("segment", "device", "address").join(
        allocations.select("address", "gpid", "device_id", "start_ns", "_row"), on="address", how="inner",
    ).sort("segment", "gpid", "start_ns").unique(["segment", "gpid"], keep="last", maintain_order=True)


def _clock(
    raw: pl.DataFrame, matched: pl.DataFrame, method: ClockMethod | None, offset: int | None, utc: int | None,
    tolerance_ns: int, telemetry_checked: bool | None,
) -> SnapshotClock:
    """The mapping of ``time_us`` to the trace clock and its checks: UTC computed, the history has
    times, every matched segment event within the tolerance, the telemetry's alignment (when given)."""
    timed = raw.height > 0 and raw["t_raw"].null_count() < raw.height
    residuals = matched.filter(pl.col("_row").is_not_null() & pl.col("residual_ns").is_not_null())["residual_ns"]
    worst = _int(residuals.abs().max()) if residuals.len() else None
    median = _median(residuals) if residuals.len() else None
    agree = None if worst is None else worst <= tolerance_ns
    checks: list[ClockCheck] = [
        {"name": "utc_computed", "passed": utc is not None, "values": {"session_start_utc_ns": utc}},
        {"name": "history_has_time", "passed": timed if raw.height else None, "values": {"entries": raw.height}},
        {"name": "segment_events_agree", "passed": agree,
         "values": {"matched": residuals.len(), "max_abs_residual_ns": worst, "tolerance_ns": tolerance_ns}},
        {"name": "telemetry_alignment_checked", "passed": telemetry_checked,
         "values": {"telemetry": telemetry_checked is not None}},
    ]
    return {
        "relation": "realtime_us",
        "method": method if timed else None,
        "offset_ns": offset if timed else None,
        "tolerance_ns": tolerance_ns,
        "checked": bool(timed and method is not None and agree is True and telemetry_checked is not False),
        "checks": checks,
        "residuals": residuals.len(),
        "median_residual_ns": median,
        "max_abs_residual_ns": worst,
        "telemetry_alignment_checked": telemetry_checked,
    }


# --- one device of a snapshot: the replay, the allocations, the segments over time ---------------
def _rounded(size: pl.Expr) -> pl.Expr:
    """A request's extent in its segment: rounded up to 512 B, at least 512 B (what the allocator
    gives at the least: a block that kept a remainder too is larger)."""
    return pl.max_horizontal(pl.lit(ROUND), (size.fill_null(0) + ROUND - 1) // ROUND * ROUND)


_DELTAS = {
    "reserved": (pl.col("action").is_in(MAPS), pl.col("action").is_in(UNMAPS)),
    "requested": (pl.col("action") == "alloc", pl.col("action") == "free_requested"),
    "active": (pl.col("action") == "alloc", pl.col("action") == "free_completed"),
}


def _replayed(entries: pl.DataFrame) -> pl.DataFrame:
    """The history of one device with each quantity's change (``d_reserved``, ``d_requested``,
    ``d_active``: + the entry's size where it adds, - where it removes) and its running sum (``r_*``)."""
    size = pl.col("size").fill_null(0)
    out = entries.with_columns(
        *(pl.when(up).then(size).when(down).then(-size).otherwise(0).alias(f"d_{k}")
          for k, (up, down) in _DELTAS.items()))
    return out.with_columns(*(pl.col(f"d_{k}").cum_sum().alias(f"r_{k}") for k in _DELTAS))


def _dump(snapshot: Snapshot, device: int) -> dict[str, int]:
    """The snapshot's own sums on one device: reserved (its segments), requested (its active blocks'
    requested sizes) and awaiting (the requested sizes of blocks freed but awaiting their stream)."""
    segs = snapshot.segments.filter(pl.col("device").fill_null(0) == device)
    blocks = snapshot.blocks.join(segs.select("segment"), on="segment", how="semi")
    asked = pl.coalesce("requested_size", "size")
    return {
        "reserved": int(segs["total_size"].sum()),
        "requested": int(blocks.filter(pl.col("state") == "active_allocated").select(asked.sum()).item() or 0),
        "awaiting": int(blocks.filter(pl.col("state") == "active_awaiting_free").select(asked.sum()).item() or 0),
    }


def _pairs(starts: pl.DataFrame, ends: pl.DataFrame, key: str, suffix: str) -> pl.DataFrame:
    """Each row of ``starts`` with the first row of ``ends`` after it at the same ``key`` (``seq`` order):
    ``{suffix}_seq``, ``{suffix}_ns``, ``{suffix}_stack``."""
    right = ends.select(pl.col(key), pl.col("seq").alias(f"{suffix}_seq"), pl.col("t_ns").alias(f"{suffix}_ns"),
                        pl.col("stack").alias(f"{suffix}_stack"), pl.col("seq").alias("_on"))
    return starts.sort("seq").join_asof(right.sort("_on"), left_on="seq", right_on="_on", by=key,
                                        strategy="forward", allow_exact_matches=False,
                                        check_sortedness=False).drop("_on")


def _allocations(entries: pl.DataFrame, snapshot: Snapshot, device: int) -> pl.DataFrame:
    """Every allocation the history shows on one device, and those alive before it: ``addr, size,
    t_from, t_requested, t_to`` (INT64_MIN: before the history; INT64_MAX: alive at the snapshot),
    ``stack`` (the allocation's), ``freed_stack`` (the free's)."""
    cols = ["seq", "addr", "size", "t_ns", "stack"]
    allocs = entries.filter(pl.col("action") == "alloc").select(cols)
    requested = entries.filter(pl.col("action") == "free_requested").select(cols)
    completed = entries.filter(pl.col("action") == "free_completed").select(cols)
    paired = _pairs(_pairs(allocs, requested, "addr", "fr"), completed, "addr", "fc")
    # a free after a later allocation at the same address is that allocation's
    nxt = pl.col("seq").shift(-1).over("addr", order_by="seq")
    paired = paired.with_columns(
        pl.when(pl.col("fc_seq") < nxt.fill_null(INT64_MAX)).then(pl.col("fc_ns")).otherwise(None).alias("fc_ns"),
        pl.when(pl.col("fc_seq") < nxt.fill_null(INT64_MAX)).then(pl.col("fc_seq")).otherwise(None).alias("fc_seq"),
    )
    known = paired.select(
        "addr", "size", pl.col("t_ns").alias("t_from"), pl.col("fr_ns").alias("t_requested"),
        pl.col("fc_ns").fill_null(INT64_MAX).alias("t_to"), "stack", pl.col("fr_stack").alias("freed_stack"))
    # frees of allocations made before the history
    freed = set(paired["fc_seq"].drop_nulls().to_list())
    orphans = completed.filter(~pl.col("seq").is_in(list(freed)))
    before = orphans.join_asof(
        requested.select("addr", pl.col("seq").alias("_s"), pl.col("stack").alias("freed_stack"), pl.col("t_ns")
                         .alias("t_requested")).sort("_s"),
        left_on="seq", right_on="_s", by="addr", strategy="backward", check_sortedness=False).select(
        "addr", "size", pl.lit(INT64_MIN).alias("t_from"), "t_requested", pl.col("t_ns").alias("t_to"),
        pl.lit(None, dtype=pl.Int64).alias("stack"), "freed_stack")
    # blocks alive at the snapshot whose allocation the history does not show
    open_addrs = known.filter(pl.col("t_to") == INT64_MAX)["addr"]
    segs = snapshot.segments.filter(pl.col("device").fill_null(0) == device).select("segment")
    alive = snapshot.blocks.join(segs, on="segment", how="semi").filter(
        pl.col("state").is_in(["active_allocated", "active_awaiting_free"]) & pl.col("address").is_not_null()
        & ~pl.col("address").is_in(open_addrs.implode())).select(
        pl.col("address").alias("addr"), pl.coalesce("requested_size", "size").alias("size"),
        pl.lit(INT64_MIN).alias("t_from"), pl.lit(None, dtype=pl.Int64).alias("t_requested"),
        pl.lit(INT64_MAX).alias("t_to"), pl.when(pl.col("stack") >= 0).then(pl.col("stack")).alias("stack"),
        pl.lit(None, dtype=pl.Int64).alias("freed_stack"))
    return pl.concat([known, before, alive], how="vertical_relaxed").with_columns(
        (pl.col("addr") + _rounded(pl.col("size"))).alias("end"))


def _gaps(regions: pl.DataFrame, occupied: pl.DataFrame) -> pl.DataFrame:
    """The parts of ``regions`` (``region, start, end, segment_type``; not overlapping) that no
    ``occupied`` range (``start, end``) covers: ``region, start, end, segment_type, bytes``."""
    regions = regions.sort("start")
    inside = occupied.select("start", "end").sort("start").join_asof(
        regions.select("region", pl.col("start").alias("_rs"), pl.col("end").alias("_re")),
        left_on="start", right_on="_rs", strategy="backward",
    ).filter(pl.col("region").is_not_null() & (pl.col("start") < pl.col("_re"))).with_columns(
        pl.min_horizontal("end", "_re").alias("end"))
    reach = pl.col("end").cum_max().shift(1).over("region", order_by="start")
    before = inside.with_columns(pl.max_horizontal(reach.fill_null(pl.col("_rs")), pl.col("_rs")).alias("_from"))
    holes = before.filter(pl.col("start") > pl.col("_from")).select("region", pl.col("_from").alias("start"),
                                                                     pl.col("start").alias("end"))
    last = inside.group_by("region").agg(pl.col("end").max().alias("_last"))
    tails = regions.join(last, on="region", how="left").select(
        "region", pl.max_horizontal(pl.col("_last").fill_null(pl.col("start")), pl.col("start")).alias("start"),
        "end").filter(pl.col("end") > pl.col("start"))
    types = regions.select("region", "segment_type")
    return pl.concat([holes, tails]).join(types, on="region", how="left").with_columns(
        (pl.col("end") - pl.col("start")).alias("bytes")).sort("start")


def _pieces(entries: pl.DataFrame, snapshot: Snapshot, device: int) -> pl.DataFrame:
    """The allocator's segments on one device over time (under expandable segments each mapped range):
    ``addr, end, t_from, t_to`` (INT64_MIN/INT64_MAX: before the history, alive at the snapshot),
    ``region`` (the pieces a block may span: one segment, or one expandable segment's ranges) and
    ``segment_type`` (the snapshot's, else a 2 MiB segment is the small pool's)."""
    cols = ["seq", "addr", "size", "t_ns", "stack"]
    maps = entries.filter(pl.col("action").is_in(MAPS)).select(cols)
    unmaps = entries.filter(pl.col("action").is_in(UNMAPS)).select(cols)
    paired = _pairs(maps, unmaps, "addr", "u")
    nxt = pl.col("seq").shift(-1).over("addr", order_by="seq")
    mine = pl.col("u_seq") < nxt.fill_null(INT64_MAX)
    paired = paired.with_columns(pl.when(mine).then(pl.col("u_seq")).alias("u_seq"),
                                 pl.when(mine).then(pl.col("u_ns")).alias("u_ns"))
    known = paired.select("addr", (pl.col("addr") + pl.col("size").fill_null(0)).alias("end"),
                          pl.col("t_ns").alias("t_from"), pl.col("u_ns").fill_null(INT64_MAX).alias("t_to"))
    unpaired = unmaps.filter(~pl.col("seq").is_in(paired["u_seq"].drop_nulls().implode())).select(
        "addr", (pl.col("addr") + pl.col("size").fill_null(0)).alias("end"), pl.lit(INT64_MIN).alias("t_from"),
        pl.col("t_ns").alias("t_to"))
    segs = snapshot.segments.filter(pl.col("device").fill_null(0) == device).select(
        "segment", pl.col("address").alias("start"), (pl.col("address") + pl.col("total_size")).alias("end"),
        "segment_type", pl.col("is_expandable").fill_null(False).alias("expandable"))
    open_now = known.filter(pl.col("t_to") == INT64_MAX).select(pl.col("addr").alias("start"), "end")
    # what the snapshot holds that no mapping of the history made: held since before it
    earlier = _gaps(segs.select(pl.col("segment").alias("region"), "start", "end", "segment_type"), open_now).select(
        pl.col("start").alias("addr"), "end", pl.lit(INT64_MIN).alias("t_from"), pl.lit(INT64_MAX).alias("t_to"))
    pieces = pl.concat([known, unpaired, earlier], how="vertical_relaxed").sort("addr")
    owner = pieces.join_asof(segs.sort("start"), left_on="addr", right_on="start", strategy="backward").with_columns(
        ((pl.col("addr") < pl.col("end_right")) & pl.col("segment").is_not_null()).fill_null(False).alias("_in"))
    by_size = pl.when(pl.col("end") - pl.col("addr") == SMALL_SEGMENT).then(pl.lit("small")).otherwise(pl.lit("large"))
    return owner.select(
        "addr", "end", "t_from", "t_to",
        pl.when(pl.col("_in") & pl.col("expandable")).then(pl.format("e{}", pl.col("segment")))
        .otherwise(pl.format("s{}:{}", pl.col("addr"), pl.col("t_from"))).alias("region"),
        pl.when(pl.col("_in")).then(pl.col("segment_type")).otherwise(by_size).alias("segment_type"),
    )


def _device(snapshot: Snapshot, placed: pl.DataFrame, device: int, device_id: int | None) -> _Device:
    entries = _replayed(placed.filter(pl.col("device") == device))
    timed = entries.filter(pl.col("t_ns").is_not_null())
    totals = {k: int(entries[f"r_{k}"][-1]) if entries.height else 0 for k in _DELTAS}
    return _Device(
        index=device,
        device_id=device_id,
        entries=entries,
        dump=_dump(snapshot, device),
        totals=totals,
        allocs=_allocations(entries, snapshot, device),
        pieces=_pieces(entries, snapshot, device),
        first_ns=_int(timed["t_ns"].min()),
        last_ns=_int(timed["reach_ns"].max()),
    )


# --- the allocator at a moment ---------------------------------------------------------------------
def _regions_at(pieces: pl.DataFrame, t: int) -> pl.DataFrame:
    """The segments alive at ``t``, adjacent ranges of one expandable segment merged: ``region,
    start, end, segment_type``."""
    live = pieces.filter((pl.col("t_from") <= t) & (pl.col("t_to") > t)).sort("region", "addr")
    if not live.height:
        return pl.DataFrame(schema={"region": pl.Int64, "start": pl.Int64, "end": pl.Int64,
                                    "segment_type": pl.String})
    new = (pl.col("region") != pl.col("region").shift(1)) | (pl.col("addr") != pl.col("end").shift(1))
    return live.with_columns(new.fill_null(True).cum_sum().cast(pl.Int64).alias("_r")).group_by("_r").agg(
        pl.col("addr").min().alias("start"), pl.col("end").max().alias("end"),
        pl.col("segment_type").first()).select(pl.col("_r").alias("region"), "start", "end", "segment_type")


def _holders(gaps: pl.DataFrame, allocs: pl.DataFrame, t: int) -> tuple[list[InactiveHolder], int, int]:
    """Who last used the inactive memory at ``t``: each inactive byte to the latest allocation made at
    or before ``t`` (and freed by then) that covered it, summed by that allocation's stack; the top
    :data:`TOP_HOLDERS`, how many stacks in all, and the bytes no allocation of the history covered."""
    freed = allocs.filter((pl.col("t_from") <= t) & (pl.col("t_to") <= t)).sort("t_from").unique(
        ["addr", "end"], keep="last")
    if not gaps.height or not freed.height:
        return [], 0, int(gaps["bytes"].sum()) if gaps.height else 0
    g = gaps.with_row_index("_g").select(pl.col("_g").cast(pl.Int64), pl.col("start").alias("_gs"),
                                          pl.col("end").alias("_ge"))
    over = freed.join_where(g, pl.col("addr") < pl.col("_ge"), pl.col("end") > pl.col("_gs")).with_columns(
        pl.max_horizontal("addr", "_gs").alias("_s"), pl.min_horizontal("end", "_ge").alias("_e"))
    if not over.height:
        return [], 0, int(gaps["bytes"].sum())
    cuts = pl.concat([over["_s"], over["_e"]]).unique().sort()
    spans = pl.DataFrame({"_i": pl.int_range(0, cuts.len() - 1, eager=True), "_lo": cuts.head(-1),
                          "_hi": cuts.tail(-1)})
    pieces = (over.with_columns(cuts.search_sorted(over["_s"]).alias("_i0"),
                                cuts.search_sorted(over["_e"]).alias("_i1"))
              .with_columns(pl.int_ranges("_i0", "_i1").alias("_i")).explode("_i")
              .sort("t_from", descending=True).unique("_i", keep="first")
              .join(spans, on="_i", how="left").with_columns((pl.col("_hi") - pl.col("_lo")).alias("_bytes")))
    groups = pieces.group_by("stack").agg(
        pl.col("_bytes").sum().alias("bytes"), pl.col("_g").n_unique().alias("ranges"),
        pl.struct("addr", "t_from").n_unique().alias("allocations"), pl.col("t_to").max().alias("last_freed_ns"),
        pl.col("freed_stack").sort_by("t_to").last().alias("freed_stack"),
    ).sort("bytes", "stack", descending=[True, False], nulls_last=True)
    attributed = int(groups["bytes"].sum())
    top: list[InactiveHolder] = [
        {"stack": stack, "bytes": int(b), "ranges": int(r), "allocations": int(a),
         "last_freed_ns": None if last in (INT64_MIN, INT64_MAX) else last, "freed_stack": fs}
        for stack, b, r, a, last, fs in groups.head(TOP_HOLDERS).select(
            "stack", "bytes", "ranges", "allocations", "last_freed_ns", "freed_stack").iter_rows()
    ]
    return top, groups.height, int(gaps["bytes"].sum()) - attributed


def _outside_at(outside: pl.DataFrame, device_id: int | None, t: int) -> OutsideAllocator:
    live = outside.filter(pl.col("device_id").eq_missing(device_id) & (pl.col("start_ns") <= t)
                          & (pl.col("end_ns") > t))
    return _outside_summary(live)


def _outside_summary(rows: pl.DataFrame) -> OutsideAllocator:
    by_api = rows.group_by("api").agg(pl.len().alias("n"), pl.col("bytes").sum().alias("b")).sort(
        "b", "api", descending=[True, False], nulls_last=True)
    return {"allocations": rows.height, "bytes": int(rows["bytes"].sum()) if rows.height else 0,
            "by_api": [{"api": api, "allocations": int(n), "bytes": int(b)} for api, n, b in by_api.iter_rows()]}


def _unknown_state(j: Joined, dev: _Device, history: History) -> AllocatorState:
    return {
        "snapshot": j.index, "device_index": dev.index, "device_id": dev.device_id, "history": history,
        "as_of_ns": None, "ns_after_history": None, "verified": j.verified, "reserved_bytes": None,
        "requested_bytes": None, "awaiting_free_bytes": None, "inactive_bytes": None, "segments": None,
        "inactive_ranges": None, "inactive_ranges_bytes": None,
        "largest_inactive_bytes": {"small": None, "large": None},
        "inactive_holders": [], "inactive_holder_stacks": 0, "unattributed_inactive_bytes": None,
        "outside_allocator": {"allocations": 0, "bytes": 0, "by_api": []},
    }


def _state(j: Joined, dev: _Device, t: int) -> AllocatorState:
    """The allocator of ``dev`` at ``t`` (the trace clock): its sums replayed back from the snapshot's,
    its inactive ranges and who last used them, and what the trace holds outside it then."""
    if dev.first_ns is None or dev.last_ns is None:
        state = _unknown_state(j, dev, "not_placed")
        state["outside_allocator"] = _outside_at(j.outside, dev.device_id, t)
        return state
    if t < dev.first_ns:
        state = _unknown_state(j, dev, "before")
        state["outside_allocator"] = _outside_at(j.outside, dev.device_id, t)
        return state
    history: History = "within" if t <= dev.last_ns else "after"
    cut = int(dev.entries["reach_ns"].fill_null(INT64_MIN).search_sorted(t, side="right"))  # entries at or before t
    seen = {k: int(dev.entries[f"r_{k}"][cut - 1]) if cut else 0 for k in _DELTAS}
    reserved = dev.dump["reserved"] - (dev.totals["reserved"] - seen["reserved"])
    requested = dev.dump["requested"] - (dev.totals["requested"] - seen["requested"])
    active = dev.dump["requested"] + dev.dump["awaiting"] - (dev.totals["active"] - seen["active"])
    at = t if history == "within" else dev.last_ns
    regions = _regions_at(dev.pieces, at)
    live = dev.allocs.filter((pl.col("t_from") <= at) & (pl.col("t_to") > at)).select(
        pl.col("addr").alias("start"), "end")
    gaps = _gaps(regions, live) if regions.height else pl.DataFrame(
        schema={"region": pl.Int64, "start": pl.Int64, "end": pl.Int64, "segment_type": pl.String, "bytes": pl.Int64})
    largest = {kind: gaps.filter(pl.col("segment_type") == kind)["bytes"].max() for kind in ("small", "large")}
    holders, stacks, unattributed = _holders(gaps, dev.allocs, at)
    return {
        "snapshot": j.index, "device_index": dev.index, "device_id": dev.device_id, "history": history,
        "as_of_ns": at, "ns_after_history": t - dev.last_ns if history == "after" else None, "verified": j.verified,
        "reserved_bytes": reserved, "requested_bytes": requested, "awaiting_free_bytes": active - requested,
        "inactive_bytes": reserved - active, "segments": regions.height, "inactive_ranges": gaps.height,
        "inactive_ranges_bytes": int(gaps["bytes"].sum()) if gaps.height else 0,
        "largest_inactive_bytes": {"small": _int(largest["small"]), "large": _int(largest["large"])},
        "inactive_holders": holders, "inactive_holder_stacks": stacks, "unattributed_inactive_bytes": unattributed,
        "outside_allocator": _outside_at(j.outside, dev.device_id, t),
    }


def _int(value: object) -> int | None:
    """A polars scalar of an integer column (its ``min()``, ``max()``, ``item()``): the int, or None."""
    return value if isinstance(value, int) else None


def _known(value: object) -> int:
    """:func:`_int` of a column known to hold a value."""
    found = _int(value)
    if found is None:
        raise ValueError(f"expected an integer, found {value!r}")
    return found


def _point(joined: Sequence[Joined], wanted: Wanted) -> AllocatorPoint:
    """The allocator at one moment of process ``gpid``: for each of its snapshot's devices, from the
    snapshot whose history holds the moment (else the one whose history ends last before it)."""
    point, label, t, gpid, key, value = wanted
    out: AllocatorPoint = {"point": point, "label": label, "t_ns": t, "pid": pid_of(gpid), "global_pid": gpid,
                           "states": []}
    out[key] = value
    if key == "finding":
        out["finding_number"] = value + 1
    mine = [j for j in joined if j.global_pid is not None and j.global_pid == gpid]
    if t is None or not mine:
        return out
    chosen = _choose(mine, t)
    out["states"] = [_state(chosen, dev, t) for dev in chosen.devices]
    return out


def _choose(mine: Sequence[Joined], t: int) -> Joined:
    def window(j: Joined) -> tuple[int, int] | None:
        firsts = [d.first_ns for d in j.devices if d.first_ns is not None]
        lasts = [d.last_ns for d in j.devices if d.last_ns is not None]
        return (min(firsts), max(lasts)) if firsts and lasts else None

    holding = [j for j in mine if (w := window(j)) is not None and w[0] <= t <= w[1]]
    if holding:
        return min(holding, key=lambda j: (window(j) or (0, 0))[1])
    ended = [j for j in mine if (w := window(j)) is not None and w[1] < t]
    if ended:
        return max(ended, key=lambda j: (window(j) or (0, 0))[1])
    return mine[0]


# --- what the trace holds outside the allocator -----------------------------------------------------
def _outside(events: pl.DataFrame, gpid: int, devices: Sequence[_Device], matched_rows: pl.Series,
             tolerance_ns: int) -> pl.DataFrame:
    """The trace's allocations of the process that no segment of the snapshot is (by address while
    the segment was alive, or by being a segment event's own): ``device_id, start_ns, end_ns (its
    deallocation's, INT64_MAX: none), bytes, api``."""
    mine = events.filter(pl.col("gpid") == gpid)
    allocs = mine.filter(pl.col("operation") == 0)
    pieces = pl.concat([d.pieces.with_columns(pl.lit(d.device_id, dtype=pl.Int64).alias("_dev")) for d in devices]
                       ) if devices else pl.DataFrame(schema={"addr": pl.Int64, "end": pl.Int64, "t_from": pl.Int64,
                                                              "t_to": pl.Int64, "_dev": pl.Int64})
    inside = allocs.join_where(
        pieces.select("addr", "end", "t_from", "t_to", "_dev"),
        pl.col("address") >= pl.col("addr"), pl.col("address") < pl.col("end"),
    ).filter(pl.col("device_id").eq_missing(pl.col("_dev"))
             & (pl.col("start_ns") >= pl.col("t_from").cast(pl.Int128) - tolerance_ns)
             & (pl.col("start_ns") <= pl.col("t_to").cast(pl.Int128) + tolerance_ns))["_row"]
    rest = allocs.filter(~pl.col("_row").is_in(inside.implode()) & ~pl.col("_row").is_in(matched_rows.implode()))
    frees = mine.filter(pl.col("operation") == 1).select("device_id", "address", pl.col("start_ns").alias("end_ns"),
                                                         pl.col("start_ns").alias("_on")).sort("_on")
    return rest.sort("start_ns").join_asof(frees, left_on="start_ns", right_on="_on", by=["device_id", "address"],
                                           strategy="forward", allow_exact_matches=False,
                                           check_sortedness=False).select(
        "device_id", "start_ns", pl.col("end_ns").fill_null(INT64_MAX), "bytes", "api")


# --- the section -----------------------------------------------------------------------------------
def _history(raw: pl.DataFrame, offset: int | None, devices: Sequence[_Device]) -> SnapshotHistory:
    by = raw.group_by("action").agg(pl.len().alias("n"), pl.col("size").fill_null(0).sum().alias("b")).sort("action")
    oom = raw.filter(pl.col("action") == "oom")
    examples: list[OomEntry] = [
        {"t_ns": None if tr is None or offset is None else tr + offset, "time_us": tu, "requested_bytes": size,
         "device_free_bytes": free, "stack": None if st is None or st < 0 else st}
        for tr, tu, size, free, st in oom.head(OOM_EXAMPLES).select("t_raw", "time_us", "size", "device_free", "stack")
        .iter_rows()
    ]
    timed = raw.filter(pl.col("time_us").is_not_null())
    first_us = _int(timed["time_us"].min())
    last_us = _int(timed["time_us"].max())
    return {
        "entries": raw.height,
        "by_action": [{"action": a, "entries": int(n), "bytes": int(b)} for a, n, b in by.iter_rows()],
        "first_time_us": first_us,
        "last_time_us": last_us,
        "first_ns": min((d.first_ns for d in devices if d.first_ns is not None), default=None),
        "last_ns": max((d.last_ns for d in devices if d.last_ns is not None), default=None),
        "reserved_before_bytes": sum(d.dump["reserved"] - d.totals["reserved"] for d in devices) if raw.height
        else None,
        "ooms": oom.height,
        "oom_examples": examples,
    }


def _at_snapshot(snapshot: Snapshot) -> AtSnapshot:
    blocks, segs = snapshot.blocks, snapshot.segments
    state = pl.col("state")
    asked = pl.coalesce("requested_size", "size")

    def total(expr: pl.Expr) -> int:
        return int(blocks.select(expr).item() or 0) if blocks.height else 0

    by_type = segs.group_by("segment_type").agg(pl.len().alias("n"), pl.col("total_size").sum().alias("b"))
    return {
        "segments": segs.height,
        "reserved_bytes": int(segs["total_size"].sum()) if segs.height else 0,
        "allocated_bytes": total(pl.col("size").filter(state == "active_allocated").sum()),
        "active_bytes": total(pl.col("size").filter(state.is_in(["active_allocated", "active_awaiting_free"])).sum()),
        "inactive_bytes": total(pl.col("size").filter(state == "inactive").sum()),
        "requested_bytes": total(asked.filter(state == "active_allocated").sum()),
        "awaiting_free_requested_bytes": total(asked.filter(state == "active_awaiting_free").sum()),
        "blocks": {s: int(n) for s, n in blocks.group_by("state").len().sort("state").iter_rows()},
        "by_segment_type": {str(t): {"segments": int(n), "bytes": int(b)} for t, n, b in by_type.sort(
            "segment_type", nulls_last=True).iter_rows()},
        "expandable_segments": int(segs["is_expandable"].fill_null(False).sum()) if segs.height else 0,
    }


def _segment_frees(raw: pl.DataFrame, offset: int | None) -> list[SegmentFrees]:
    frees = raw.filter(pl.col("action").is_in(UNMAPS)).with_columns(
        (pl.col("t_raw") + offset).alias("_t") if offset is not None else pl.lit(None, dtype=pl.Int64).alias("_t"),
        pl.when(pl.col("stack") >= 0).then(pl.col("stack")).alias("_stack"))
    groups = frees.group_by("_stack").agg(pl.len().alias("n"), pl.col("size").fill_null(0).sum().alias("b"),
                                          pl.col("_t").min().alias("f"), pl.col("_t").max().alias("l")).sort(
        "b", "_stack", descending=[True, False], nulls_last=True)
    return [{"stack": s, "segments": int(n), "bytes": int(b), "first_ns": f, "last_ns": last}
            for s, n, b, f, last in groups.iter_rows()]


def _backend(settings: Mapping[str, object]) -> Backend | None:
    conf = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    if not isinstance(conf, str):
        return None
    return "cudaMallocAsync" if "backend:cudaMallocAsync" in conf.replace(" ", "") else "native"


def _notes(snapshot: Snapshot, history: SnapshotHistory, devices: Sequence[_Device], events: pl.DataFrame,
           gpid: int, unmatched: int) -> list[AllocatorNote]:
    notes: list[AllocatorNote] = []
    expandable = int(snapshot.segments["is_expandable"].fill_null(False).sum()) if snapshot.segments.height else 0
    maps = sum(b["entries"] for b in history["by_action"] if b["action"] in ("segment_map", "segment_unmap"))
    if expandable or maps:
        notes.append({"code": "expandable_segments", "values": {"segments": expandable, "map_entries": maps}})
    if _backend(snapshot.settings) == "cudaMallocAsync":
        notes.append({"code": "cuda_malloc_async_backend", "values": {"segments": snapshot.segments.height,
                                                                      "entries": snapshot.entries.height}})
    pools = events.filter((pl.col("gpid") == gpid) & pl.col("pool") & (pl.col("operation") == 0))
    if pools.height:
        notes.append({"code": "trace_shows_memory_pool", "values": {"allocations": pools.height,
                                                                    "bytes": int(pools["bytes"].sum())}})
    if not snapshot.entries.height:
        notes.append({"code": "no_history", "values": {"segments": snapshot.segments.height}})
    elif history["reserved_before_bytes"]:
        notes.append({"code": "history_starts_with_segments",
                      "values": {"reserved_before_bytes": history["reserved_before_bytes"]}})
    for d in devices:
        for k in _DELTAS:
            before = (d.dump["requested"] + d.dump["awaiting"] if k == "active" else d.dump[k]) - d.totals[k]
            if before < 0:
                notes.append({"code": "replay_below_zero", "values": {"device_index": d.index, "quantity": k,
                                                                       "bytes": before}})
    if unmatched:
        notes.append({"code": "segment_events_unmatched", "values": {"count": unmatched}})
    return notes


def _join(
    index: int, snapshot: Snapshot, events: pl.DataFrame, utc: int | None, capture: Capture,
    traced_gpids: Sequence[int], tolerance_ns: int, telemetry_checked: bool | None,
) -> Joined:
    """One snapshot joined to the trace (see the module's docstring)."""
    raw = _raw(snapshot)
    candidates = _candidates(raw, events)
    dump = _dump_matches(snapshot, events)
    method, offset = _offset(candidates, utc)
    evidence = _process(snapshot, candidates, dump, offset, tolerance_ns, capture, traced_gpids, events, raw)
    gpid = evidence["global_pid"]
    matched = _matched(candidates, gpid, offset, events)
    clock = _clock(raw, matched, method, offset, utc, tolerance_ns, telemetry_checked)
    used = clock["offset_ns"]
    placed = raw.with_columns(
        (pl.col("t_raw") + used).alias("t_ns") if used is not None else pl.lit(None, dtype=pl.Int64).alias("t_ns")
    ).with_columns(pl.col("t_ns").cum_max().over("device").forward_fill().over("device").alias("reach_ns"))
    mine_dump = dump.filter(pl.col("gpid") == gpid)
    ids = pl.concat([matched.filter(pl.col("_row").is_not_null()).select("device", "device_id"),
                     mine_dump.select("device", "device_id")], how="vertical_relaxed")
    device_ids = {int(d): i for d, i in ids.group_by("device", "device_id").len().sort(
        "len", descending=True).unique("device", keep="first").select("device", "device_id").iter_rows()
        if d is not None}
    indices = sorted({int(d) for d in raw["device"].unique().to_list()}
                     | {int(d) for d in snapshot.segments["device"].fill_null(0).unique().to_list()})
    devices = tuple(_device(snapshot, placed, d, device_ids.get(d)) for d in indices)
    rows = pl.concat([matched["_row"].drop_nulls(), matched["_rows"].explode().drop_nulls().cast(pl.Int64),
                      mine_dump["_row"].cast(pl.Int64)])
    outside = _outside(events, gpid, devices, rows, tolerance_ns)
    in_time = (pl.col("_row").is_not_null() & (pl.col("residual_ns").abs() <= tolerance_ns)) if used is not None \
        else pl.col("_row").is_not_null()
    t = pl.col("t_raw") + (used or 0)
    inside = (t >= capture.start_ns) & (t <= capture.stop_ns) if (
        used is not None and capture.start_ns is not None and capture.stop_ns is not None) else pl.lit(False)
    unmatched = matched.filter(inside & ~in_time.fill_null(False)).height
    history = _history(raw, used, devices)
    section: SnapshotSection = {
        "index": index,
        "path": snapshot.path,
        "sha256": snapshot.sha256,
        "size_bytes": snapshot.size_bytes,
        "keys": list(snapshot.keys),
        "backend": _backend(snapshot.settings),
        "alloc_conf": conf if isinstance(conf := snapshot.settings.get("PYTORCH_CUDA_ALLOC_CONF"), str) else None,
        "expandable_segments": flag if isinstance(flag := snapshot.settings.get("expandable_segments"), bool)
        else None,
        "settings": dict(snapshot.settings),
        "devices": snapshot.devices,
        "history": history,
        "at_snapshot": _at_snapshot(snapshot),
        "process": {
            "pid": pid_of(gpid),
            "global_pid": gpid,
            "device_ids": [d.device_id for d in devices],
            "rule": evidence["rule"],
            "segment_events": matched.height,
            "segment_events_matched": matched.filter(pl.col("_row").is_not_null()).height,
            "segment_events_matched_in_time": matched.filter(in_time.fill_null(False)).height
            if used is not None else 0,
            "segments": snapshot.segments.height,
            "segments_matched": mine_dump.height,
            "segment_events_unmatched_in_capture": unmatched,
        },
        "clock": clock,
        "outside_allocator": _outside_summary(outside),
        "segment_frees": _segment_frees(raw, used),
        "notes": _notes(snapshot, history, devices, events, gpid, unmatched),
    }
    return Joined(index, snapshot, section, gpid, clock["checked"], devices, outside)
