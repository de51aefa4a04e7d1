"""Clock alignment: map telemetry time to trace time two independent ways, and check them.

Pure functions over a parsed :class:`~nsysaudit.read.telemetry.TelemetryLog` and the trace's NVTX
ranges (the ``nvtx_ranges`` frame: ``gtid, start_ns, end_ns, text, domain_id, event_type,
domain``). No printing, no CLI.

- **UTC.** Trace timestamps are nanoseconds since the session start, whose UTC time the export
  records (``TARGET_INFO_SESSION_START_TIME.utcEpochNs``): ``trace_ns = realtime_ns - utcEpochNs``.
- **Anchors.** Pairs of a telemetry line and an NVTX range edge that mark the same moment. The
  offset (anchor clock -> trace) is the median of the pairs' offsets; each pair's residual
  (its line mapped with that offset, minus its edge) is reported. The anchor clock is
  ``monotonic`` when the telemetry has it (it never jumps), else ``realtime``.

The alignment is *checked* when both are computed, they place every line that has both clocks
within ``tolerance_ns`` of each other, and every anchor residual is within ``tolerance_ns``.
Otherwise the report names the check that failed and by how much, and positions are unverified.

Positions use the UTC mapping when it is computed (one number read from the export, so anyone
can re-derive them by hand), the anchor mapping for lines without a UTC stamp or when UTC is not
available. Telemetry pid/tid choose which lines and ranges may pair and which boundaries apply to
a process; they never relabel trace events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal, NamedTuple, NotRequired, TypedDict

import polars as pl

from nsysaudit.core.ids import decode_pid, decode_tid
from nsysaudit.core.reasons import Reason
from nsysaudit.read.telemetry import (
    INT64_MAX,
    INT64_MIN,
    ClockKind,
    Edge,
    TelemetryBadLine,
    TelemetryLog,
    default_edge,
    default_range_name,
)
from nsysaudit.words import say

if TYPE_CHECKING:  # numpy is imported where telemetry is placed: an analysis without it never loads numpy
    import numpy as np
    from numpy.typing import NDArray

Method = Literal["utc", "anchors"]
AnchorRule = Literal["default", "configured"]


# --- the document's parts made here (named in nsysaudit.reports.documents, the JSON contract) -----
class Moment(TypedDict):
    """A telemetry line at or around a moment of the trace, on the application's clock."""

    event: str
    line: int
    ns: int
    ms: float
    via: str
    values: NotRequired[dict[str, int | float]]


class During(TypedDict):
    """A telemetry line strictly inside a call."""

    event: str
    line: int
    ms_after_start: float


class Position(TypedDict):
    """Where a call or moment falls among the application's telemetry lines."""

    method: str | None
    verified: bool
    before: Moment | None
    after: Moment | None
    during: list[During]
    in_force: Moment | None
    # The last line at or before the start that carries the allocator's own figures (``reserved`` and
    # ``allocated``), where the line in force carries other values, none about memory (``dp_reduce_start``
    # with its message ``bytes`` after a ``handoff``); absent when a later line says memory changed.
    allocator: NotRequired[Moment]


class AgreementDiff(TypedDict):
    event: str
    line: int
    utc_minus_anchor_ns: int


class Agreement(TypedDict):
    events: int
    max_abs_diff_ns: int | None
    worst_event: str | None
    worst_line: int | None
    diffs_ns: list[AgreementDiff]


class AgreementSummary(TypedDict):
    """:class:`Agreement` without its per-line list (what :attr:`Alignment.agreement` holds): how many
    lines both mappings place, the largest difference and the first line that has it."""

    events: int
    max_abs_diff_ns: int
    worst_event: str
    worst_line: int


class AnchorPair(TypedDict):
    event: str
    line: int
    nvtx: str
    domain: str | None
    edge: str
    edge_ns: int
    clock_ns: int
    offset_ns: int
    residual_ns: int
    utc_residual_ns: int | None
    pid: int | None
    tid: int | None
    telemetry_tid: int | None
    same_thread: bool | None
    rule: str


class EventLine(TypedDict):
    event: str
    line: int


class SkippedAnchor(TypedDict):
    event: str
    nvtx: str
    edge: str
    lines: list[int]
    reason: str


class Anchors(TypedDict):
    clock: str | None
    clock_field: str | None
    computed: bool
    offset_ns: int | None
    max_abs_residual_ns: int | None
    reason: str | None
    rule: str
    pairs: list[AnchorPair]
    skipped: list[SkippedAnchor]
    events_without_anchor: list[EventLine]


class UtcAlignment(TypedDict):
    clock_field: str | None
    computed: bool
    offset_ns: int | None
    session_start_utc_ns: int | None
    reason: str | None


class AlignmentCheck(TypedDict):
    check: str
    passed: bool | None
    detail: str


class AlignmentSection(TypedDict):
    """How the application's clock was put on the trace's (docs/alignment.md), and its checks."""

    method: str | None
    clock_field: str | None
    offset_ns: int | None
    tolerance_ns: int
    checked: bool
    reasons: list[str]
    notes: list[str]
    checks: list[AlignmentCheck]
    residuals_ns: list[int | None]
    utc: UtcAlignment
    anchors: Anchors
    agreement: Agreement | None


class TimelineLine(TypedDict):
    """One telemetry line placed on the trace's clock."""

    line: int
    event: str
    pid: int | None
    tid: int | None
    trace_ns: int | None
    via: str | None
    clocks: dict[str, int]
    fields: Mapping[str, object]  # the line's own fields, as written: any JSON values
    values: dict[str, int | float]


class TelemetryRead(TypedDict):
    """A telemetry file as it was read: its digest, how it was read (``event_key``, ``lenient``, the
    clock fields), its lines and the bad ones, and the pids it names. The one definition of these keys:
    the analysis' ``telemetry`` object (:class:`TelemetrySummary`) and a comparison arm's
    (:class:`~nsysaudit.reports.documents.ArmTelemetry`) derive from it, in its order."""

    sha256: str
    event_key: str
    events: int
    bad_lines: int
    lenient: bool
    pids: list[int]
    clock_fields: dict[str, str]
    warnings: list[TelemetryBadLine]


class _TelemetryPath(TypedDict):
    # The file's path, the telemetry object's first key (docs/json.md's order): a base of its own, so
    # that TelemetrySummary derives from TelemetryRead without moving it.
    path: str


class TelemetrySummary(_TelemetryPath, TelemetryRead):
    """The ``telemetry`` object but its ``library_failures`` (:mod:`nsysaudit.analysis.verdict` finds those)."""

    timeline: list[TimelineLine]


def ms(ns: int) -> float:
    """Nanoseconds as milliseconds rounded to 3 decimals (microsecond resolution)."""
    return round(ns / 1_000_000, 3)


@dataclass(frozen=True)
class AnchorMatch:
    """One telemetry line paired with one NVTX range edge (an ``alignment.anchors.pairs`` entry).

    ``residual_ns``: the line mapped with the anchor offset, minus the edge (positive: the line
    lands after the edge). ``utc_residual_ns``: the same with the UTC mapping (null without a
    UTC stamp or without the UTC method).
    """

    line: int
    event: str
    nvtx: str
    edge: Edge
    domain: str | None
    pid: int
    tid: int
    telemetry_tid: int | None
    same_thread: bool | None
    rule: AnchorRule
    clock_ns: int
    edge_ns: int
    realtime_ns: int | None
    residual_ns: int = 0
    utc_residual_ns: int | None = None

    @property
    def offset_ns(self) -> int:
        return self.edge_ns - self.clock_ns



@dataclass(frozen=True)
class UtcMethod:
    computed: bool
    clock_field: str | None
    session_start_utc_ns: int | None
    offset_ns: int | None
    reason: Reason | None  # why it is not computed


@dataclass(frozen=True, eq=False)
class AnchorMethod:
    computed: bool
    rule: AnchorRule
    clock: ClockKind | None
    clock_field: str | None
    offset_ns: int | None
    pairs: tuple[AnchorMatch, ...]
    skipped: tuple[SkippedAnchor, ...]
    # ``line, event`` of every telemetry line that is not an anchor, in file order.
    without_anchor: pl.DataFrame
    reason: Reason | None  # why it is not computed

    @property
    def max_abs_residual_ns(self) -> int | None:
        return max((abs(p.residual_ns) for p in self.pairs), default=None)



@dataclass(frozen=True)
class Check:
    """One alignment check. ``passed`` is None when it could not be run."""

    name: str
    passed: bool | None
    detail: Reason  # what it found, or why it could not run


@dataclass(frozen=True)
class Bounds:
    """The placed telemetry lines that bound one process, in (trace_ns, line) order: their
    ``times``, their ``rows`` in the log, and per index the index of the last one at or before it
    that carries values (-1: none yet). numpy arrays searched by ``np.searchsorted``: ``times``
    int64, or Python ints (dtype object) where a line was placed outside the 64-bit range."""

    times: NDArray[np.int64] | NDArray[np.object_]
    rows: NDArray[np.int64]
    last_with_values: NDArray[np.int64]


def boundaries_by_pid(log: TelemetryLog, placed: pl.DataFrame, pids: Iterable[int | None]) -> dict[int | None, Bounds]:
    """The placed lines that bound each of ``pids``: lines without a pid apply to every process,
    lines with one only to that process (``None``: only the lines without a pid). The lines are
    sorted once for all of them (10^6 lines are sorted once, not once per process)."""
    import numpy as np

    frame = (
        pl.DataFrame(
            {"trace_ns": placed["trace_ns"], "pid": log.lines["pid"], "has_values": log.lines["values"] != "{}"}
        )
        .with_row_index("row")
        .filter(pl.col("trace_ns").is_not_null())
        .sort("trace_ns", maintain_order=True)  # ties in file order, which is the order of line numbers
    )
    if frame.schema["trace_ns"] == pl.Int64:
        times = frame["trace_ns"].to_numpy()
    else:
        times = np.array(frame["trace_ns"].to_list(), dtype=object)
    rows = frame["row"].cast(pl.Int64).to_numpy()
    has_values = frame["has_values"].to_numpy()
    no_pid = frame["pid"].is_null().to_numpy()
    pid = frame["pid"].fill_null(0).to_numpy()
    out: dict[int | None, Bounds] = {}
    for p in pids:
        keep = np.flatnonzero(no_pid if p is None else no_pid | (pid == p))
        last = np.where(has_values[keep], np.arange(keep.size, dtype=np.int64), -1)
        out[p] = Bounds(times[keep], rows[keep], np.maximum.accumulate(last) if last.size else last)
    return out


@dataclass(frozen=True, eq=False)
class Alignment:
    """Both mappings, their checks, and each telemetry line's place on the trace clock.

    ``placed``: one row per line of the log, in its order: ``trace_ns`` (null: it cannot be
    placed; Int64, or Int128 where a mapping puts a line outside the 64-bit range) and ``via``
    (the method that placed it). ``diffs``: ``line, event, utc_minus_anchor_ns`` (Int128) of each
    line both mappings place, ``agreement`` their summary (both None: no line has both).
    """

    log: TelemetryLog
    method: Method | None
    tolerance_ns: int
    utc: UtcMethod
    anchors: AnchorMethod
    agreement: AgreementSummary | None
    checks: tuple[Check, ...]
    placed: pl.DataFrame
    diffs: pl.DataFrame | None = None
    notes: tuple[Reason, ...] = field(default=())
    # Per traced process (and None: lines without a pid), its boundaries sorted by time; made once
    # by align(), so placing many calls stays O(log n) each.
    boundaries: Mapping[int | None, Bounds] = field(default_factory=dict)

    @property
    def checked(self) -> bool:
        return all(c.passed is True for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        """Why the alignment is not checked (empty when it is)."""
        return [say(c.detail) for c in self.checks if c.passed is not True]

    @property
    def offset_ns(self) -> int | None:
        if self.method == "utc":
            return self.utc.offset_ns
        if self.method == "anchors":
            return self.anchors.offset_ns
        return None

    @property
    def clock_field(self) -> str | None:
        if self.method == "utc":
            return self.utc.clock_field
        if self.method == "anchors":
            return self.anchors.clock_field
        return None

    @property
    def residuals_ns(self) -> list[int | None]:
        """Residuals at the anchor pairs of the mapping used for positions (pair order)."""
        if self.method == "utc":
            return [p.utc_residual_ns for p in self.anchors.pairs]
        return [p.residual_ns for p in self.anchors.pairs]

    # --- the lines, for the analysis -----------------------------------------------------------
    def lines_of(self, rows: Sequence[int] | None = None) -> pl.DataFrame:
        """``line, event, pid, trace_ns`` of the log's lines (those at ``rows``), in file order."""
        frame = pl.concat([self.log.lines.select("line", "event", "pid"), self.placed.select("trace_ns")],
                          how="horizontal")
        return frame if rows is None else frame[list(rows)]

    # --- positions ---------------------------------------------------------------------------
    def _allocator_line(self, bounds: Bounds, k: int, start_ns: int) -> Moment | None:
        """The last line with values before boundary ``k`` that carries the allocator's figures
        (:func:`_allocator_figures`), looking back over at most :data:`ALLOCATOR_LOOKBACK` such lines;
        None where a line between says memory changed (:func:`_memory_state`: figures now stale)."""
        lines = self.log.lines
        for _ in range(ALLOCATOR_LOOKBACK):
            k = int(bounds.last_with_values[k - 1]) if k > 0 else -1
            if k < 0:
                return None
            row = int(bounds.rows[k])
            values = self.log.values_of(str(lines["values"][row]), int(lines["order"][row]))
            if _allocator_figures(values):
                found = self._point(bounds, k, start_ns - int(bounds.times[k]))
                found["values"] = values
                return found
            if _memory_state(values):
                return None
        return None

    def _boundaries(self, pid: int | None) -> Bounds:
        """The boundaries of process ``pid`` (made by :func:`align` for every traced process)."""
        found = self.boundaries.get(pid)
        return found if found is not None else boundaries_by_pid(self.log, self.placed, [pid])[pid]

    def _point(self, bounds: Bounds, index: int, delta: int) -> Moment:
        # A boundary is a placed line: its via is the method that placed it.
        row = int(bounds.rows[index])
        return {"event": str(self.log.lines["event"][row]), "line": int(self.log.lines["line"][row]),
                "ms": ms(delta), "ns": delta, "via": str(self.placed["via"][row])}

    def position(self, pid: int | None, start_ns: int | None, end_ns: int | None) -> Position:
        """Where ``[start_ns, end_ns]`` of process ``pid`` falls among the telemetry boundaries.

        ``after``: the nearest line at or before the start (``ms`` = start - line);
        ``before``: the nearest line at or after the end (``ms`` = line - end);
        ``during``: lines strictly inside; ``in_force``: the last line at or before the start that
        carries values (a snapshot such as ``handoff``), with those values.
        """
        out: Position = {
            "after": None,
            "before": None,
            "during": [],
            "in_force": None,
            "method": self.method,
            "verified": self.checked,
        }
        if start_ns is None:
            return out
        import numpy as np

        bounds = self._boundaries(pid)
        times = bounds.times
        i = int(np.searchsorted(times, start_ns, side="right"))
        if i:
            out["after"] = self._point(bounds, i - 1, start_ns - int(times[i - 1]))
        if i and bounds.last_with_values[i - 1] >= 0:
            k = int(bounds.last_with_values[i - 1])
            row = int(bounds.rows[k])
            in_force = self._point(bounds, k, start_ns - int(times[k]))
            lines = self.log.lines
            in_force["values"] = self.log.values_of(str(lines["values"][row]), int(lines["order"][row]))
            out["in_force"] = in_force
            if not _memory_state(in_force["values"]):
                allocator = self._allocator_line(bounds, k, start_ns)
                if allocator is not None:
                    out["allocator"] = allocator
        if end_ns is not None:
            j = int(np.searchsorted(times, end_ns, side="left"))
            if j < times.size:
                out["before"] = self._point(bounds, j, int(times[j]) - end_ns)
            if j > i:
                inside = i + np.flatnonzero((times[i:j] > start_ns) & (times[i:j] < end_ns))
                rows = pl.Series(bounds.rows[inside], dtype=pl.Int64)
                events = self.log.lines["event"].gather(rows).to_list()
                numbers = self.log.lines["line"].gather(rows).to_list()
                out["during"] = [
                    {"event": str(e), "line": int(n), "ms_after_start": ms(int(t) - start_ns)}
                    for e, n, t in zip(events, numbers, times[inside].tolist(), strict=True)
                ]
        return out


ALLOCATOR_LOOKBACK = 64


def _allocator_figures(values: Mapping[str, int | float]) -> bool:
    """Whether a line's values hold PyTorch's allocator statistics, ``reserved`` and ``allocated``."""
    return type(values.get("reserved")) is int and type(values.get("allocated")) is int


# Values that say the device memory's state (PyTorch's allocator statistics, what empty_cache() gave back,
# cudaMemGetInfo's free): a line carrying one makes an earlier line's allocator figures stale.
MEMORY_STATE_KEYS = frozenset({"reserved", "allocated", "released", "physical_free"})


def _memory_state(values: Mapping[str, int | float]) -> bool:
    return any(key in MEMORY_STATE_KEYS for key in values)


# --- computing the alignment ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Range:
    """An NVTX range an anchor may pair with: its name, domain, thread and edges."""

    text: str
    domain: str | None
    pid: int
    tid: int
    start_ns: int | None
    end_ns: int | None

    def at(self, edge: Edge) -> int | None:
        return self.start_ns if edge == "start" else self.end_ns


def _ranges(nvtx_ranges: pl.DataFrame) -> list[_Range]:
    cols = [c for c in ("gtid", "start_ns", "end_ns", "text", "domain") if c in nvtx_ranges.columns]
    frame = nvtx_ranges.select(cols).filter(pl.col("gtid").is_not_null() & pl.col("text").is_not_null())
    if "domain" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("domain"))
    rows = frame.select(
        "text", "domain", decode_pid(pl.col("gtid")).alias("pid"), decode_tid(pl.col("gtid")).alias("tid"),
        "start_ns", "end_ns",
    ).iter_rows()
    # text, pid and tid are not null (the filter above); the edges and the domain may be.
    return [_Range(str(text), domain, int(pid), int(tid), start, end) for text, domain, pid, tid, start, end in rows]


def _utc(log: TelemetryLog, session_start_utc_ns: int | None) -> UtcMethod:
    field_name = log.options.clock_fields.get("realtime")
    if field_name is None:
        return UtcMethod(False, None, session_start_utc_ns, None, Reason.of("utc_clock_not_read"))
    if not log.has_clock("realtime"):
        return UtcMethod(False, field_name, session_start_utc_ns, None,
                         Reason.of("utc_no_stamp", field_name=field_name))
    if session_start_utc_ns is None:
        return UtcMethod(False, field_name, None, None, Reason.of("utc_no_session_start"))
    return UtcMethod(True, field_name, session_start_utc_ns, -session_start_utc_ns, None)


def _anchor_clock(log: TelemetryLog) -> ClockKind | None:
    fields = log.options.clock_fields
    kinds: tuple[ClockKind, ...] = ("monotonic", "realtime")
    for kind in kinds:
        if kind in fields and log.has_clock(kind):
            return kind
    return None


def _wanted(log: TelemetryLog) -> dict[str, list[tuple[str, Edge]]]:
    """Per telemetry event name, the (range name, edge) pairs it may anchor to."""
    wanted: dict[str, list[tuple[str, Edge]]] = {}
    if log.options.anchors:
        for a in log.options.anchors:
            wanted.setdefault(a.event, []).append((a.nvtx, a.edge))
    else:
        for name in log.lines["event"].unique(maintain_order=True).to_list():
            wanted[name] = [(default_range_name(name), default_edge(name))]
    return wanted


def _anchors(
    log: TelemetryLog, ranges: list[_Range], trace_pids: set[int], utc_offset_ns: int | None
) -> tuple[AnchorMethod, list[Reason]]:
    """The anchor mapping: each telemetry line paired with the NVTX range edge it names, the median
    offset of the pairs, the candidates skipped and why; and the notes on what was not paired."""
    rule: AnchorRule = "configured" if log.options.anchors else "default"
    clock = _anchor_clock(log)
    if clock is None:
        return AnchorMethod(
            False, rule, None, None, None, (), (), log.lines.select("line", "event").clear(),
            Reason.of("anchors_no_clock"),
        ), []
    field_name = log.options.clock_fields[clock]
    notes = _anchor_notes(log, clock, field_name, trace_pids)
    by_name: dict[str, list[_Range]] = {}
    for r in ranges:
        by_name.setdefault(r.text, []).append(r)
    wanted = _wanted(log)
    # Group lines by (name, pid, tid) so repeated events pair with repeated ranges in order. Only
    # names that can anchor or be skipped: under the default rule, a line whose range is not in the
    # trace is simply not an anchor.
    names = [n for n, targets in wanted.items() if rule == "configured" or any(by_name.get(t) for t, _ in targets)]
    groups = (
        log.lines.filter(pl.col("event").is_in(names))
        .group_by(["event", "pid", "tid"], maintain_order=True)
        .agg(pl.col("line"), pl.col(clock).alias("stamp"), pl.col("realtime"))
    )
    pairs: list[AnchorMatch] = []  # residuals added once the offset is known
    skipped: list[SkippedAnchor] = []
    # Per group: the event, pid, tid, and its lines' numbers, anchor clock stamps and realtime stamps.
    for group in groups.iter_rows():
        for nvtx, edge in wanted[group[0]]:
            _pair_group(_Group(*group), nvtx, edge, by_name, rule, field_name, pairs, skipped)
    anchored = {p.line for p in pairs}
    without = log.lines.select("line", "event").filter(~pl.col("line").is_in(sorted(anchored)))
    pairs.sort(key=lambda p: (p.edge_ns, p.line))
    if not pairs:
        reason = _no_anchor_reason(log, rule, trace_pids, skipped)
        return AnchorMethod(False, rule, clock, field_name, None, (), tuple(skipped), without, reason), notes
    import statistics  # telemetry's alone: an analysis without it never loads it

    offset = round(statistics.median(p.edge_ns - p.clock_ns for p in pairs))
    done = tuple(
        replace(
            p,
            residual_ns=p.clock_ns + offset - p.edge_ns,
            utc_residual_ns=(
                None if utc_offset_ns is None or p.realtime_ns is None else p.realtime_ns + utc_offset_ns - p.edge_ns
            ),
        )
        for p in pairs
    )
    return AnchorMethod(True, rule, clock, field_name, offset, done, tuple(skipped), without, None), notes


def _anchor_notes(log: TelemetryLog, clock: ClockKind, field_name: str, trace_pids: set[int]) -> list[Reason]:
    """What the anchors' reader says of the lines before pairing them: the clock it pairs on, lines
    without a pid, pids that are no process of the trace."""
    notes: list[Reason] = []
    if clock == "realtime":
        notes.append(Reason.of("anchors_on_realtime", field_name=field_name))
    if log.lines["pid"].null_count():
        notes.append(Reason.of("telemetry_without_pid"))
    other = sorted(set(log.pids) - trace_pids)
    if other:
        notes.append(Reason.of("telemetry_pids_not_traced", pids=other, trace_pids=sorted(trace_pids)))
    return notes


class _Group(NamedTuple):
    """The telemetry lines of one event, pid and tid: their numbers, anchor clock stamps and
    realtime stamps, in file order."""

    event: str
    pid: int | None
    tid: int | None
    lines: list[int]
    stamps: list[int | None]
    reals: list[int | None]


def _pair_group(
    g: _Group, nvtx: str, edge: Edge, by_name: Mapping[str, list[_Range]], rule: AnchorRule, field_name: str,
    pairs: list[AnchorMatch], skipped: list[SkippedAnchor],
) -> None:
    """Pair one group's lines with the ``edge`` of the NVTX ranges named ``nvtx`` on its thread (or
    process), in order; add the pairs to ``pairs``, or say in ``skipped`` why none is made."""

    def skip(reason: Reason, lines: list[int] = g.lines) -> None:
        skipped.append({"event": g.event, "lines": lines, "nvtx": nvtx, "edge": edge, "reason": say(reason)})

    candidates = [r for r in by_name.get(nvtx, []) if g.pid is None or r.pid == g.pid]
    if not by_name.get(nvtx):
        if rule == "configured":
            skip(Reason.of("anchor_range_missing", nvtx=nvtx))
        return  # default rule: a line without a same-named range is simply not an anchor
    if not candidates:
        skip(Reason.of("anchor_range_in_other_process", nvtx=nvtx, pids=sorted({r.pid for r in by_name[nvtx]}),
                       pid=g.pid))
        return
    same_thread: bool | None = None
    if g.tid is not None:
        on_thread = [r for r in candidates if r.tid == g.tid]
        if on_thread:
            candidates, same_thread = on_thread, True
        elif rule == "default":
            skip(Reason.of("anchor_range_on_other_thread", nvtx=nvtx, pid=g.pid,
                           tids=sorted({r.tid for r in candidates}), tid=g.tid))
            return
        else:
            same_thread = False
    # (range, its edge) of the candidates with that edge
    edged = [(r, at) for r in candidates if (at := r.at(edge)) is not None]
    # (clock stamp, line, realtime stamp) of the group's lines with a stamp of the anchor clock
    stamped = [(t, n, real) for t, n, real in zip(g.stamps, g.lines, g.reals, strict=True) if t is not None]
    if len(stamped) < len(g.lines):
        skip(Reason.of("anchor_lines_without_stamp", lines=len(g.lines) - len(stamped), field_name=field_name),
             [n for t, n in zip(g.stamps, g.lines, strict=True) if t is None])
    if not stamped:
        return
    if len(stamped) != len(edged):
        skip(Reason.of("anchor_pairing_ambiguous", lines=len(stamped), ranges=len(edged), nvtx=nvtx, edge=edge),
             [n for _, n, _ in stamped])
        return
    stamped.sort(key=lambda e: (e[0], e[1]))
    edged.sort(key=lambda e: (e[1], e[0].tid))
    for (stamp, number, real), (r, at) in zip(stamped, edged, strict=True):
        pairs.append(AnchorMatch(
            line=number, event=g.event, nvtx=nvtx, edge=edge, domain=r.domain, pid=r.pid, tid=r.tid,
            telemetry_tid=g.tid, same_thread=same_thread, rule=rule, clock_ns=stamp, edge_ns=at,
            realtime_ns=real,
        ))


def _no_anchor_reason(
    log: TelemetryLog, rule: AnchorRule, trace_pids: set[int], skipped: list[SkippedAnchor]
) -> Reason:
    """Why no line was paired with a range."""
    other = set(log.pids) - trace_pids
    if other and not log.lines["pid"].null_count() and not set(log.pids) & trace_pids:
        return Reason.of("anchors_no_traced_process", pids=log.pids, trace_pids=sorted(trace_pids))
    if skipped:
        return Reason.of("anchors_all_skipped", skipped=len(skipped))
    if rule == "default":
        return Reason.of("anchors_no_range_named")
    return Reason.of("anchors_none_matched")


def align(
    log: TelemetryLog,
    nvtx_ranges: pl.DataFrame,
    session_start_utc_ns: int | None,
    *,
    trace_pids: Iterable[int] = (),
) -> Alignment:
    """Compute both mappings of ``log`` onto the trace clock, check them, place every line.

    ``trace_pids``: the trace's processes (to say when telemetry comes from another process);
    the pids of the NVTX ranges are always included.
    """
    tol = log.options.tolerance_ns
    ranges = _ranges(nvtx_ranges)
    pids = set(trace_pids) | {r.pid for r in ranges}
    utc = _utc(log, session_start_utc_ns)
    anchors, notes = _anchors(log, ranges, pids, utc.offset_ns if utc.computed else None)
    method: Method | None = "utc" if utc.computed else "anchors" if anchors.computed else None
    placed, diffs, agreement, unplaced = _placements(log, method, utc, anchors)
    if unplaced:
        notes.append(Reason.of("telemetry_placed_outside_clock", lines=unplaced))
    if method is None:
        notes.append(Reason.of("no_mapping"))
    return Alignment(
        log=log,
        method=method,
        tolerance_ns=tol,
        utc=utc,
        anchors=anchors,
        agreement=agreement,
        checks=_checks(utc, anchors, agreement, tol),
        placed=placed,
        diffs=diffs,
        notes=tuple(notes),
        boundaries=boundaries_by_pid(log, placed, (None, *sorted(pids))),
    )


def _checks(
    utc: UtcMethod, anchors: AnchorMethod, agreement: AgreementSummary | None, tol: int
) -> tuple[Check, ...]:
    """The four checks of an alignment: each mapping computed, the two agree, the anchors' residuals
    within the tolerance ``tol``."""
    checks = [
        Check("utc_computed", utc.computed, utc.reason or Reason.of(
            "utc_mapping", clock_field=utc.clock_field, session_start_utc_ns=utc.session_start_utc_ns)),
        Check("anchors_computed", anchors.computed, anchors.reason or Reason.of(
            "anchor_mapping", clock_field=anchors.clock_field, offset_ns=anchors.offset_ns, pairs=len(anchors.pairs))),
    ]
    if agreement is None:
        checks.append(Check("methods_agree", None, Reason.of("mappings_not_compared", utc=utc.computed,
                                                             anchors=anchors.computed)))
    else:
        ok = agreement["max_abs_diff_ns"] <= tol
        checks.append(Check("methods_agree", ok, Reason.of("mappings_compared", agree=ok, tolerance_ns=tol,
                                                           **agreement)))
    worst = max(anchors.pairs, key=lambda p: abs(p.residual_ns), default=None)
    if worst is None:
        checks.append(Check("anchor_residuals", None, Reason.of("no_anchor_pair")))
    else:
        ok = abs(worst.residual_ns) <= tol
        checks.append(Check("anchor_residuals", ok, Reason.of(
            "anchor_residuals", within=ok, residual_ns=worst.residual_ns, event=worst.event, line=worst.line,
            nvtx=worst.nvtx, edge=worst.edge, tolerance_ns=tol)))
    return tuple(checks)


def _placements(
    log: TelemetryLog, method: Method | None, utc: UtcMethod, anchors: AnchorMethod
) -> tuple[pl.DataFrame, pl.DataFrame | None, AgreementSummary | None, int]:
    """Each line's place on the trace clock (``trace_ns, via``, in the log's order), the lines both
    mappings place with their difference (``line, event, utc_minus_anchor_ns``) and its summary
    (both None: no line has both), and how many lines the mapping put outside the 64-bit trace
    clock (not placed: null).

    Positions use the ``method``'s mapping, the other one for a line without its stamp. The
    arithmetic is exact, in 128 bits (a 64-bit stamp plus an offset can leave the 64-bit range):
    A position outside the 64-bit range is no moment of the trace: that line is not placed.
    """
    mapped: dict[Method, pl.Expr] = {}
    if utc.computed and utc.offset_ns is not None:
        mapped["utc"] = pl.col("realtime").cast(pl.Int128) + pl.lit(utc.offset_ns, dtype=pl.Int128)
    if anchors.computed and anchors.offset_ns is not None and anchors.clock is not None:
        mapped["anchors"] = pl.col(anchors.clock).cast(pl.Int128) + pl.lit(anchors.offset_ns, dtype=pl.Int128)
    frame = log.lines.select(
        "line", "event", *(mapped.get(m, pl.lit(None, dtype=pl.Int128)).alias(m) for m in ("utc", "anchors"))
    )
    first, second = ("utc", "anchors") if method == "utc" else ("anchors", "utc")
    placed = frame.select(
        pl.coalesce(first, second).alias("trace_ns"),
        pl.when(pl.col(first).is_not_null()).then(pl.lit(first))
        .when(pl.col(second).is_not_null()).then(pl.lit(second))
        .otherwise(pl.lit(None, dtype=pl.String)).alias("via"),
    )
    # The trace's clock is 64-bit: a line its mapping puts outside it (a damaged stamp) is not placed.
    outside = pl.col("trace_ns").is_not_null() & ~pl.col("trace_ns").is_between(INT64_MIN, INT64_MAX)
    unplaced = int(placed.select(outside.sum()).item())
    placed = placed.with_columns(
        pl.when(outside).then(None).otherwise(pl.col("trace_ns")).cast(pl.Int64).alias("trace_ns"),
        pl.when(outside).then(None).otherwise(pl.col("via")).alias("via"),
    )
    diffs = frame.filter(pl.col("utc").is_not_null() & pl.col("anchors").is_not_null()).select(
        "line", "event", (pl.col("utc") - pl.col("anchors")).alias("utc_minus_anchor_ns")
    )
    if not diffs.height:
        return placed, None, None, unplaced
    size = pl.col("utc_minus_anchor_ns").abs()
    line, event, diff = diffs.filter(size == size.max()).row(0)  # the first of the largest: the least line
    agreement: AgreementSummary = {"events": diffs.height, "max_abs_diff_ns": abs(int(diff)), "worst_event": str(event),
                                   "worst_line": int(line)}
    return placed, diffs, agreement, unplaced
