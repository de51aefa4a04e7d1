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

import bisect
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl

from nsysaudit.core.ids import decode_pid, decode_tid
from nsysaudit.read.telemetry import (
    ClockKind,
    Edge,
    TelemetryEvent,
    TelemetryLog,
    default_edge,
    default_range_name,
)

Method = Literal["utc", "anchors"]
AnchorRule = Literal["default", "configured"]


def ms(ns: int) -> float:
    """Nanoseconds as milliseconds rounded to 3 decimals (microsecond resolution)."""
    return round(ns / 1_000_000, 3)


@dataclass(frozen=True)
class AnchorPair:
    """One telemetry line paired with one NVTX range edge.

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

    def to_dict(self) -> dict[str, Any]:
        return {
            "line": self.line,
            "event": self.event,
            "nvtx": self.nvtx,
            "edge": self.edge,
            "domain": self.domain,
            "pid": self.pid,
            "tid": self.tid,
            "telemetry_tid": self.telemetry_tid,
            "same_thread": self.same_thread,
            "rule": self.rule,
            "clock_ns": self.clock_ns,
            "edge_ns": self.edge_ns,
            "offset_ns": self.offset_ns,
            "residual_ns": self.residual_ns,
            "utc_residual_ns": self.utc_residual_ns,
        }


@dataclass(frozen=True)
class UtcMethod:
    computed: bool
    clock_field: str | None
    session_start_utc_ns: int | None
    offset_ns: int | None
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "computed": self.computed,
            "clock_field": self.clock_field,
            "session_start_utc_ns": self.session_start_utc_ns,
            "offset_ns": self.offset_ns,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class AnchorMethod:
    computed: bool
    rule: AnchorRule
    clock: ClockKind | None
    clock_field: str | None
    offset_ns: int | None
    pairs: tuple[AnchorPair, ...]
    skipped: tuple[dict[str, Any], ...]
    events_without_anchor: tuple[dict[str, Any], ...]
    reason: str | None

    @property
    def max_abs_residual_ns(self) -> int | None:
        return max((abs(p.residual_ns) for p in self.pairs), default=None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "computed": self.computed,
            "rule": self.rule,
            "clock": self.clock,
            "clock_field": self.clock_field,
            "offset_ns": self.offset_ns,
            "pairs": [p.to_dict() for p in self.pairs],
            "max_abs_residual_ns": self.max_abs_residual_ns,
            "skipped": list(self.skipped),
            "events_without_anchor": list(self.events_without_anchor),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Check:
    """One alignment check. ``passed`` is None when it could not be run."""

    name: str
    passed: bool | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.name, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Placement:
    """Where a telemetry line lands on the trace clock (``trace_ns`` None: it cannot be placed)."""

    trace_ns: int | None
    via: Method | None


# A placed telemetry line: (trace_ns, line number, the line, its placement).
Bound = tuple[int, int, TelemetryEvent, Placement]
# A process's boundaries, their times, and per index the last one carrying values (-1: none yet).
Boundaries = tuple[list[Bound], list[int], list[int]]


def boundaries_of(log: TelemetryLog, placements: Sequence[Placement], pid: int | None) -> Boundaries:
    """The placed lines that bound process ``pid``: lines without a pid apply to every process,
    lines with one only to that process."""
    return boundaries_by_pid(log, placements, [pid])[pid]


def boundaries_by_pid(
    log: TelemetryLog, placements: Sequence[Placement], pids: Iterable[int | None]
) -> dict[int | None, Boundaries]:
    """:func:`boundaries_of` each of ``pids``: the lines sorted, and asked whether they carry
    values, once for all of them (10^6 lines are sorted once, not once per process)."""
    placed = sorted(
        ((p.trace_ns, e.line, e, p) for e, p in zip(log.events, placements, strict=True) if p.trace_ns is not None),
        key=lambda x: (x[0], x[1]),
    )
    carries = [bool(b[2].measured) for b in placed]
    out: dict[int | None, Boundaries] = {}
    for pid in pids:
        bounds: list[Bound] = []
        last_with_values: list[int] = []
        last = -1
        for b, has_values in zip(placed, carries, strict=True):
            if b[2].pid is None or b[2].pid == pid:
                if has_values:
                    last = len(bounds)
                bounds.append(b)
                last_with_values.append(last)
        out[pid] = (bounds, [b[0] for b in bounds], last_with_values)
    return out


@dataclass(frozen=True)
class Alignment:
    """Both mappings, their checks, and each telemetry line's place on the trace clock."""

    log: TelemetryLog
    method: Method | None
    tolerance_ns: int
    utc: UtcMethod
    anchors: AnchorMethod
    agreement: dict[str, Any] | None
    checks: tuple[Check, ...]
    placements: tuple[Placement, ...]
    notes: tuple[str, ...] = field(default=())
    # Per traced process (and None: lines without a pid), its boundaries sorted by time; made once
    # by align(), so placing many calls stays O(log n) each.
    boundaries: Mapping[int | None, Boundaries] = field(default_factory=dict)

    @property
    def checked(self) -> bool:
        return all(c.passed is True for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        """Why the alignment is not checked (empty when it is)."""
        return [c.detail for c in self.checks if c.passed is not True]

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

    def to_dict(self) -> dict[str, Any]:
        """The top-level ``alignment`` object of the JSON report."""
        return {
            "method": self.method,
            "clock_field": self.clock_field,
            "offset_ns": self.offset_ns,
            "residuals_ns": self.residuals_ns,
            "checked": self.checked,
            "tolerance_ns": self.tolerance_ns,
            "reasons": self.reasons,
            "checks": [c.to_dict() for c in self.checks],
            "utc": self.utc.to_dict(),
            "anchors": self.anchors.to_dict(),
            "agreement": self.agreement,
            "notes": list(self.notes),
        }

    def telemetry_summary(self) -> dict[str, Any]:
        """The top-level ``telemetry`` object: the file, its warnings, every line's placement."""
        log, opts = self.log, self.log.options
        clock_fields = opts.clock_fields
        skip = {opts.event_key, "pid", "tid", *clock_fields.values()}
        timeline = []
        for e, p in zip(log.events, self.placements, strict=True):
            timeline.append(
                {
                    "line": e.line,
                    "event": e.event,
                    "pid": e.pid,
                    "tid": e.tid,
                    "clocks": {clock_fields[k]: v for k, v in e.clocks.items()},
                    "trace_ns": p.trace_ns,
                    "via": p.via,
                    "values": dict(e.measured),
                    "fields": {k: v for k, v in e.fields.items() if k not in skip},
                }
            )
        return {
            "path": log.path,
            "sha256": log.sha256,
            "events": len(log.events),
            "bad_lines": len(log.bad_lines),
            "warnings": [b.to_dict() for b in log.bad_lines],
            "lenient": opts.lenient,
            "event_key": opts.event_key,
            "clock_fields": dict(opts.clock_fields),
            "pids": log.pids,
            "timeline": timeline,
        }

    # --- positions ---------------------------------------------------------------------------
    def _boundaries(self, pid: int | None) -> Boundaries:
        """The boundaries of process ``pid`` (made by :func:`align` for every traced process)."""
        found = self.boundaries.get(pid)
        return found if found is not None else boundaries_of(self.log, self.placements, pid)

    def position(self, pid: int | None, start_ns: int | None, end_ns: int | None) -> dict[str, Any]:
        """Where ``[start_ns, end_ns]`` of process ``pid`` falls among the telemetry boundaries.

        ``after``: the nearest line at or before the start (``ms`` = start - line);
        ``before``: the nearest line at or after the end (``ms`` = line - end);
        ``during``: lines strictly inside; ``in_force``: the last line at or before the start that
        carries values (a snapshot such as ``handoff``), with those values.
        """
        out: dict[str, Any] = {
            "after": None,
            "before": None,
            "during": [],
            "in_force": None,
            "method": self.method,
            "verified": self.checked,
        }
        if start_ns is None:
            return out
        bounds, times, last_with_values = self._boundaries(pid)

        def point(b: Bound, delta: int) -> dict[str, Any]:
            return {"event": b[2].event, "line": b[1], "ms": ms(delta), "ns": delta, "via": b[3].via}

        i = bisect.bisect_right(times, start_ns)
        if i:
            out["after"] = point(bounds[i - 1], start_ns - bounds[i - 1][0])
        if i and last_with_values[i - 1] >= 0:
            b = bounds[last_with_values[i - 1]]
            out["in_force"] = {**point(b, start_ns - b[0]), "values": dict(b[2].measured)}
        if end_ns is not None:
            j = bisect.bisect_left(times, end_ns)
            if j < len(bounds):
                out["before"] = point(bounds[j], bounds[j][0] - end_ns)
            out["during"] = [
                {"event": b[2].event, "line": b[1], "ms_after_start": ms(b[0] - start_ns)}
                for b in bounds[i:j]
                if start_ns < b[0] < end_ns
            ]
        return out


# --- computing the alignment ---------------------------------------------------------------------


def _ranges(nvtx_ranges: pl.DataFrame) -> list[dict[str, Any]]:
    cols = [c for c in ("gtid", "start_ns", "end_ns", "text", "domain") if c in nvtx_ranges.columns]
    frame = nvtx_ranges.select(cols).filter(pl.col("gtid").is_not_null() & pl.col("text").is_not_null())
    if "domain" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.String).alias("domain"))
    return frame.with_columns(
        decode_pid(pl.col("gtid")).alias("pid"), decode_tid(pl.col("gtid")).alias("tid")
    ).to_dicts()


def _utc(log: TelemetryLog, session_start_utc_ns: int | None) -> UtcMethod:
    field_name = log.options.clock_fields.get("realtime")
    if field_name is None:
        return UtcMethod(
            False,
            None,
            session_start_utc_ns,
            None,
            "UTC not computed: the realtime clock is not read (--telemetry-clock leaves it out)",
        )
    if not log.has_clock("realtime"):
        return UtcMethod(
            False,
            field_name,
            session_start_utc_ns,
            None,
            f"UTC not computed: no telemetry line has a {field_name!r} stamp",
        )
    if session_start_utc_ns is None:
        return UtcMethod(
            False,
            field_name,
            None,
            None,
            "UTC not computed: the export has no TARGET_INFO_SESSION_START_TIME.utcEpochNs (session start in UTC)",
        )
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
        for e in log.events:
            wanted.setdefault(e.event, [(default_range_name(e.event), default_edge(e.event))])
    return wanted


def _anchors(
    log: TelemetryLog, ranges: list[dict[str, Any]], trace_pids: set[int], utc_offset_ns: int | None
) -> tuple[AnchorMethod, list[str]]:
    opts = log.options
    rule: AnchorRule = "configured" if opts.anchors else "default"
    notes: list[str] = []
    clock = _anchor_clock(log)
    if clock is None:
        return AnchorMethod(
            False, rule, None, None, None, (), (), (), "anchors not computed: no clock stamp to pair"
        ), notes
    field_name = opts.clock_fields[clock]
    if clock == "realtime":
        notes.append(f"anchors use the realtime clock ({field_name!r}): no monotonic stamp is read")
    by_name: dict[str, list[dict[str, Any]]] = {}
    for r in ranges:
        by_name.setdefault(r["text"], []).append(r)
    wanted = _wanted(log)
    if any(e.pid is None for e in log.events):
        notes.append("some telemetry lines have no pid: their anchors are matched by name in any traced process")
    other = sorted({e.pid for e in log.events if e.pid is not None} - trace_pids)
    if other:
        notes.append(
            f"telemetry pid(s) {', '.join(map(str, other))} are not processes of this trace "
            f"(trace pid(s): {', '.join(map(str, sorted(trace_pids))) or 'none'}): their lines anchor nothing"
        )

    # Group lines by (name, pid, tid) so repeated events pair with repeated ranges in order.
    groups: dict[tuple[str, int | None, int | None], list[TelemetryEvent]] = {}
    for e in log.events:
        if e.event in wanted:
            groups.setdefault((e.event, e.pid, e.tid), []).append(e)
    pairs: list[dict[str, Any]] = []  # AnchorPair fields, residuals added once the offset is known
    skipped: list[dict[str, Any]] = []
    anchored: set[int] = set()
    for (name, pid, tid), events in groups.items():
        for nvtx, edge in wanted[name]:
            lines = [e.line for e in events]

            def skip(
                reason: str, lines: list[int] = lines, name: str = name, nvtx: str = nvtx, edge: Edge = edge
            ) -> None:
                skipped.append({"event": name, "lines": lines, "nvtx": nvtx, "edge": edge, "reason": reason})

            candidates = [r for r in by_name.get(nvtx, []) if pid is None or r["pid"] == pid]
            if not by_name.get(nvtx):
                if rule == "configured":
                    skip(f"no NVTX range named {nvtx!r} in the trace")
                continue  # default rule: a line without a same-named range is simply not an anchor
            if not candidates:
                skip(
                    f"NVTX range {nvtx!r} exists only in other process(es) "
                    f"(pid {', '.join(str(p) for p in sorted({r['pid'] for r in by_name[nvtx]}))}), "
                    f"not in the line's pid {pid}"
                )
                continue
            same_thread: bool | None = None
            if tid is not None:
                on_thread = [r for r in candidates if r["tid"] == tid]
                if on_thread:
                    candidates, same_thread = on_thread, True
                elif rule == "default":
                    tids = ", ".join(str(t) for t in sorted({r["tid"] for r in candidates}))
                    skip(
                        f"NVTX range {nvtx!r} is on other thread(s) of pid {pid} (tid {tids}), not on the "
                        f"line's tid {tid}: not the same moment (configure it with --anchor to use it)"
                    )
                    continue
                else:
                    same_thread = False
            candidates = [r for r in candidates if r[f"{edge}_ns"] is not None]
            stamped = [e for e in events if clock in e.clocks]
            if len(stamped) < len(events):
                skip(
                    f"{len(events) - len(stamped)} line(s) have no {field_name!r} stamp",
                    [e.line for e in events if clock not in e.clocks],
                )
            if not stamped:
                continue
            if len(stamped) != len(candidates):
                skip(
                    f"{len(stamped)} telemetry line(s) but {len(candidates)} NVTX range(s) {nvtx!r} with a "
                    f"{edge} on that thread/process: pairing is ambiguous",
                    [e.line for e in stamped],
                )
                continue
            stamped.sort(key=lambda e: (e.clocks[clock], e.line))
            candidates.sort(key=lambda r: (r[f"{edge}_ns"], r["tid"]))
            for e, r in zip(stamped, candidates, strict=True):
                anchored.add(e.line)
                pairs.append(
                    {
                        "line": e.line,
                        "event": name,
                        "nvtx": nvtx,
                        "edge": edge,
                        "domain": r["domain"],
                        "pid": r["pid"],
                        "tid": r["tid"],
                        "telemetry_tid": e.tid,
                        "same_thread": same_thread,
                        "rule": rule,
                        "clock_ns": e.clocks[clock],
                        "edge_ns": r[f"{edge}_ns"],
                        "realtime_ns": e.clocks.get("realtime"),
                    }
                )
    without = tuple({"line": e.line, "event": e.event} for e in log.events if e.line not in anchored)
    pairs.sort(key=lambda p: (p["edge_ns"], p["line"]))
    if not pairs:
        if other and all(e.pid is not None for e in log.events) and not set(log.pids) & trace_pids:
            reason = (
                f"anchors not computed: no telemetry line comes from a process of this trace "
                f"(telemetry pid(s) {', '.join(map(str, log.pids))}; trace pid(s) "
                f"{', '.join(map(str, sorted(trace_pids))) or 'none'})"
            )
        elif skipped:
            reason = f"anchors not computed: no usable pair ({len(skipped)} candidate(s) skipped, see 'skipped')"
        elif rule == "default":
            reason = (
                "anchors not computed: no telemetry event names an NVTX range of the trace "
                "(default rule: X_start/X_begin -> start of range X, X_end -> end of X, X -> end of X; "
                "use --anchor EVENT=NVTX_NAME[:start|end])"
            )
        else:
            reason = "anchors not computed: no configured anchor matched"
        return AnchorMethod(False, rule, clock, field_name, None, (), tuple(skipped), without, reason), notes
    offset = round(statistics.median(p["edge_ns"] - p["clock_ns"] for p in pairs))
    done = tuple(
        AnchorPair(
            **p,
            residual_ns=p["clock_ns"] + offset - p["edge_ns"],
            utc_residual_ns=(
                None
                if utc_offset_ns is None or p["realtime_ns"] is None
                else p["realtime_ns"] + utc_offset_ns - p["edge_ns"]
            ),
        )
        for p in pairs
    )
    return AnchorMethod(True, rule, clock, field_name, offset, done, tuple(skipped), without, None), notes


def _fmt_ms(ns: int) -> str:
    return f"{ns / 1_000_000:.3f} ms"


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
    pids = set(trace_pids) | {r["pid"] for r in ranges}
    utc = _utc(log, session_start_utc_ns)
    anchors, notes = _anchors(log, ranges, pids, utc.offset_ns if utc.computed else None)

    checks = [
        Check(
            "utc_computed",
            utc.computed,
            utc.reason
            or f"UTC mapping: trace_ns = {utc.clock_field} - "
            f"{utc.session_start_utc_ns} (TARGET_INFO_SESSION_START_TIME.utcEpochNs)",
        ),
        Check(
            "anchors_computed",
            anchors.computed,
            anchors.reason
            or f"anchor mapping: trace_ns = "
            f"{anchors.clock_field} + ({anchors.offset_ns}), median over {len(anchors.pairs)} pair(s)",
        ),
    ]
    agreement = _agreement(log, utc, anchors)
    if agreement is None:
        why = "only one method computed" if utc.computed != anchors.computed else "neither method computed"
        if utc.computed and anchors.computed:
            why = "no telemetry line has both clocks"
        checks.append(Check("methods_agree", None, f"the two mappings cannot be compared: {why}"))
    else:
        worst = agreement["max_abs_diff_ns"]
        ok = worst <= tol
        checks.append(
            Check(
                "methods_agree",
                ok,
                f"UTC and anchor mappings {'agree' if ok else 'disagree'}: they differ by up to {_fmt_ms(worst)} "
                f"over {agreement['events']} line(s) (worst: {agreement['worst_event']!r}, line "
                f"{agreement['worst_line']}; tolerance {_fmt_ms(tol)})",
            )
        )
    worst_pair = max(anchors.pairs, key=lambda p: abs(p.residual_ns), default=None)
    if worst_pair is None:
        checks.append(Check("anchor_residuals", None, "no anchor pair, so no residual to check"))
    else:
        ok = abs(worst_pair.residual_ns) <= tol
        checks.append(
            Check(
                "anchor_residuals",
                ok,
                f"anchor residuals {'within' if ok else 'exceed'} tolerance: largest {_fmt_ms(worst_pair.residual_ns)} "
                f"({worst_pair.event!r} line {worst_pair.line} vs NVTX {worst_pair.nvtx!r} {worst_pair.edge}; "
                f"tolerance {_fmt_ms(tol)})",
            )
        )
    method: Method | None = "utc" if utc.computed else "anchors" if anchors.computed else None
    if method is None:
        notes.append("no mapping computed: telemetry lines cannot be placed on the trace clock")
    placements = tuple(_place(e, method, utc, anchors) for e in log.events)
    return Alignment(
        log=log,
        method=method,
        tolerance_ns=tol,
        utc=utc,
        anchors=anchors,
        agreement=agreement,
        checks=tuple(checks),
        placements=placements,
        notes=tuple(notes),
        boundaries=boundaries_by_pid(log, placements, (None, *sorted(pids))),
    )


def _utc_ns(e: TelemetryEvent, utc: UtcMethod) -> int | None:
    if not utc.computed or utc.offset_ns is None or "realtime" not in e.clocks:
        return None
    return e.clocks["realtime"] + utc.offset_ns


def _anchor_ns(e: TelemetryEvent, anchors: AnchorMethod) -> int | None:
    if not anchors.computed or anchors.offset_ns is None or anchors.clock is None or anchors.clock not in e.clocks:
        return None
    return e.clocks[anchors.clock] + anchors.offset_ns


def _agreement(log: TelemetryLog, utc: UtcMethod, anchors: AnchorMethod) -> dict[str, Any] | None:
    diffs: list[tuple[int, TelemetryEvent]] = []
    for e in log.events:
        u, a = _utc_ns(e, utc), _anchor_ns(e, anchors)
        if u is not None and a is not None:
            diffs.append((u - a, e))
    if not diffs:
        return None
    worst_diff, worst = max(diffs, key=lambda d: (abs(d[0]), -d[1].line))
    return {
        "events": len(diffs),
        "max_abs_diff_ns": abs(worst_diff),
        "worst_event": worst.event,
        "worst_line": worst.line,
        "diffs_ns": [{"line": e.line, "event": e.event, "utc_minus_anchor_ns": d} for d, e in diffs],
    }


def _place(e: TelemetryEvent, method: Method | None, utc: UtcMethod, anchors: AnchorMethod) -> Placement:
    order: Sequence[Method] = ("utc", "anchors") if method == "utc" else ("anchors", "utc")
    for m in order:
        t = _utc_ns(e, utc) if m == "utc" else _anchor_ns(e, anchors)
        if t is not None:
            return Placement(t, m)
    return Placement(None, None)
