"""What a timeline picture shows, as plain data: lanes, bars, ticks, ranges, boundaries, shading.

:func:`timeline` turns one :class:`~nsysaudit.reports.analysis.AnalysisResult` into a
:class:`Timeline`; :func:`aligned_timelines` does it for both arms of a comparison on one shared
window. Nothing here draws (:mod:`nsysaudit.render.pictures` does); every item comes from rows of the
export (the result's frames) or from its JSON document (findings, coverage, telemetry), so each
mark of a picture can be traced back to the numbers of ``report.json``.

The choices the issue leaves open, and what is chosen (each Timeline says it in ``notes``):

- **Focus**: ``finding`` (1-based, in report order) or ``at_ns``; by default the first finding,
  else the first censored library call, else the first library call at or after the boundary,
  else the first library call, else the first failed CUDA call.
- **Origin** (time 0 of the x axis): the last telemetry line named ``boundary`` (default
  ``backward_start``) of the focus's process at or before the focus, else the first such line,
  else the start of the focus's library call, else the focus itself.
- **Window**: ``window_ns`` wide, centred on the focus; by default from the origin to the end of
  the focus's library call (either order), widened by 6% each side.
- **Lanes** ("relevant threads"): the focus's thread, and every thread with a library call, a
  failed CUDA call, an NVTX range or a telemetry line in the window; at most :data:`MAX_LANES`.
- **Zoom**: when the focus lies in a library call, a second view of that call alone, with every
  CUDA call in it drawn to scale.
- **Memory**: when the analysis claims a device-memory ledger (``report.json`` ``memory``), a
  panel of the live device-resident bytes of every traced process on the focus's device (the
  device its process allocated most on; every device's total is in the report) against that
  device's total, over the context window, with the bound on free memory at the focus.
- **Host stalls**: each call that blocked the host at least 1 ms (``stalls``), on its thread's lane
  (those threads are relevant too); below the threads, one lane per GPU stream with the work that
  ran behind the longest waits (``stalls.calls[].attribution``), highlighted. ``--around stall:N``
  focuses on the N-th longest (the default focus never is a stall).
- **Not covered**: after the capture's stop (``coverage.capture.stop_ns``) and before its start,
  on every lane; after a process's last CUDA API record (``coverage.by_source``), on that
  process's lanes, when a censored library call of it gives a reason of the CUDA trace's own
  (the trace ended, nsys warned events were lost, tracing was degraded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

import polars as pl

from nsysaudit import words
from nsysaudit.core.codes import display_name, is_allocation_api, return_name
from nsysaudit.core.defaults import DEFAULT_BOUNDARY as DEFAULT_BOUNDARY
from nsysaudit.core.errors import BadOption
from nsysaudit.core.ids import decode_pid, pid_bits, tid_bits
from nsysaudit.core.paths import basename
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.documents import Device, Memory

MAX_LANES = 10
PAD = 0.06  # of the window's span, each side, when the window is chosen
MIN_PAD_NS = 20_000
# Reasons a library call is censored that speak of the process's CUDA API trace itself: after its
# last record nothing shows the trace went on, on any thread of that process.
CUDA_TRACE_REASONS = frozenset({
    "cuda_api_trace_ends_inside",
    "cuda_api_trace_ended_before_call",
    "nsys_warned_cuda_events_missing",
    "cuda_trace_degraded",
    "no_cuda_api_trace",
    "no_cuda_api_trace_for_process",
})

Outcome = Literal["ok", "allocation", "failed", "nonzero"]
ShadeKind = Literal["capture_stopped", "capture_not_started", "cuda_trace_stopped"]


@dataclass(frozen=True)
class Lane:
    """One thread: ``name`` None when ThreadNames has no row for it (shown as "name unknown")."""

    gtid: int
    pid: int
    tid: int
    name: str | None

    @property
    def main(self) -> bool:
        return self.pid == self.tid


@dataclass(frozen=True)
class Bar:
    """A library call; ``end_ns`` is the recorded end (the capture's stop when ``end_known`` is False)."""

    lane: int
    lib_id: int
    api: str
    start_ns: int
    end_ns: int
    end_known: bool
    coverage: str | None


@dataclass(frozen=True)
class Tick:
    """A CUDA API call. ``outcome``: ok, allocation (successful, ``bytes`` when known), failed, or
    nonzero (a return that is not a failure of the call: a poll's not-ready, an earlier error)."""

    lane: int
    start_ns: int
    end_ns: int
    api: str
    return_code: int
    return_name: str | None
    correlation_id: int | None
    outcome: Outcome
    bytes: int | None = None

    @property
    def label(self) -> str:
        """What the picture writes beside it: the failure, or an allocation's size."""
        if self.outcome in ("failed", "nonzero"):
            name = self.return_name if self.return_name is not None else words.NO_CODE_NAME
            return f"{display_name(self.api)} returned {self.return_code} ({name})"
        if self.outcome == "allocation":
            size = "size unknown" if self.bytes is None else f"{self.bytes:,} B"
            return f"{display_name(self.api)} {size}"
        return display_name(self.api)


@dataclass(frozen=True)
class Range:
    """An NVTX range that is not itself a library call."""

    lane: int
    start_ns: int
    end_ns: int
    text: str


@dataclass(frozen=True)
class Boundary:
    """A telemetry line placed on the trace clock; ``verified``: the alignment is checked."""

    trace_ns: int
    event: str
    line: int
    verified: bool
    pid: int | None = None
    tid: int | None = None


@dataclass(frozen=True)
class Shade:
    """A part of the window the trace does not cover, on ``lanes`` from ``start_ns`` to ``end_ns``."""

    kind: ShadeKind
    lanes: tuple[int, ...]
    start_ns: int
    end_ns: int
    label: str


@dataclass(frozen=True)
class StallBar:
    """A call that blocked the host at least the stall minimum, on its thread's lane."""

    lane: int
    start_ns: int
    end_ns: int
    label: str


@dataclass(frozen=True)
class GpuLane:
    """A GPU stream of a process, with work behind an attributed stall in the view."""

    pid: int
    stream_id: int


@dataclass(frozen=True)
class GpuBar:
    """GPU work (``kernel``, ``memcpy``, ``memset``) behind a stall, on GPU lane ``row``."""

    row: int
    start_ns: int
    end_ns: int
    work: str


@dataclass(frozen=True)
class View:
    """One window on some lanes: what a panel of the picture draws."""

    lo_ns: int
    hi_ns: int
    origin_ns: int
    lanes: tuple[int, ...]
    bars: tuple[Bar, ...]
    ticks: tuple[Tick, ...]
    ranges: tuple[Range, ...]
    boundaries: tuple[Boundary, ...]
    shades: tuple[Shade, ...]
    capture_stop_ns: int | None
    focus_tick: Tick | None
    stalls: tuple[StallBar, ...] = ()
    gpu_lanes: tuple[GpuLane, ...] = ()
    gpu: tuple[GpuBar, ...] = ()


@dataclass(frozen=True)
class WindowMemory:
    """The ledger over the context window on one device: ``steps`` are ``(trace_ns, live bytes)``
    of all traced processes' device-resident memory (the first at the window's start, the value
    then), ``total_bytes`` the device's total (None: unknown), ``free_at_most_bytes`` the bound at
    the focus (None without a total)."""

    device_id: int | None
    device_name: str | None
    total_bytes: int | None
    steps: tuple[tuple[int, int], ...]
    focus_ns: int
    live_at_focus_bytes: int
    free_at_most_bytes: int | None
    holder: str | None = None  # the ledger's sentence at the focus (a finding or library call's start)
    at_words: str = "at the focus"  # where the numbers are read ("at the end of the capture")


@dataclass(frozen=True)
class Timeline:
    """One arm's picture: the context view, the zoom on the focus's library call (if any), and
    the words that say what was chosen."""

    arm: str | None
    input_name: str
    verdict: str
    lanes: tuple[Lane, ...]
    context: View
    zoom: View | None
    origin_label: str
    zoom_label: str | None
    focus_label: str
    focus_position: str | None = None
    notes: tuple[str, ...] = field(default=())
    memory: WindowMemory | None = None
    whole_capture: bool = False  # nothing to focus on: the context is the whole capture


@dataclass(frozen=True)
class _Focus:
    start_ns: int
    end_ns: int
    gtid: int | None
    pid: int | None
    lib_id: int | None
    label: str
    correlation_id: int | None = None
    position: str | None = None  # where the telemetry places it ("55.672 ms after backward_start")
    whole: bool = False  # nothing to focus on: the picture shows the whole capture


def parse_around(text: str) -> tuple[Literal["finding", "time", "stall"], int]:
    """``--around``: ``finding:N`` (the N-th finding, numbered from 1 as every report numbers them:
    ``findings[].number``), ``stall:N`` (the N-th longest host stall, from 1) or a time in trace
    nanoseconds. ``N`` = 0 is parsed, and refused where the count is known (:func:`_focus`: the refusal
    says how many there are).

    >>> parse_around("finding:1"), parse_around("4900049660"), parse_around("stall:2")
    (('finding', 1), ('time', 4900049660), ('stall', 2))
    """
    value = text.strip()
    if value.lower().startswith("stall:"):
        number = value.split(":", 1)[1]
        if number.isdigit():
            return "stall", int(number)
        raise BadOption(f"--around {text!r}: write stall:N with N = 1 for the longest host stall")
    if value.lower().startswith("finding:"):
        number = value.split(":", 1)[1]
        if number.isdigit():
            return "finding", int(number)
        raise BadOption(f"--around {text!r}: write finding:N with N = 1 for the first finding")
    if value.lstrip("-").isdigit():
        ns = int(value)
        if abs(ns) < 1 << 63:
            return "time", ns
    raise BadOption(f"--around {text!r}: give finding:N (N-th finding, from 1), stall:N (N-th longest host stall) "
                    "or a time in trace nanoseconds")


# --- reading the result ------------------------------------------------------------------------


def _usable(frame: pl.DataFrame, *cols: str) -> pl.DataFrame:
    return frame.drop_nulls([c for c in cols if c in frame.columns])


def _fmt(ns: int) -> str:
    return f"{ns:,} ns"


def _stall_focus(result: AnalysisResult, n: int) -> _Focus:
    """The N-th longest host stall (``stalls.calls``, longest first)."""
    stalls = result.head["stalls"]
    calls = [c for c in stalls["calls"] if c["stall"]]
    if not 1 <= n <= len(calls):
        listed = f" ({len(calls)} of them listed, the longest)" if len(calls) < stalls["stalls"] else ""
        numbered = "host stalls are numbered from 1, the longest first; " if n < 1 else ""
        raise BadOption(f"--around stall:{n}: {numbered}the export has {stalls['stalls']} call(s) that blocked the "
                        f"host at least {stalls['rules']['stall_min_ns'] / 1e6:g} ms{listed}")
    c = calls[n - 1]
    api = display_name(c["api"]) if c["api"] is not None else "unknown api"
    return _Focus(c["start_ns"], c["end_ns"], c["global_tid"], c["pid"], None,
                  words.FOCUS_STALL.format(n=n, api=api, ms=f"{(c['end_ns'] - c['start_ns']) / 1e6:,.3f}"),
                  c["correlation_id"])


def _numbered(asked: int, count: int) -> str:
    """Why ``finding:<asked>`` names no finding of ``count``: how findings are numbered, and how many."""
    how = "findings are numbered from 1, as analyze prints them (findings[].number in --json); " if asked < 1 else ""
    which = f" (finding:1 to finding:{count})" if count > 1 else " (finding:1)" if count == 1 else ""
    return f"{how}the export has {count} finding(s){which}"


def _focus(
    result: AnalysisResult, finding: int | None, at_ns: int | None, boundary: str, stall: int | None = None
) -> _Focus:
    findings = result.findings
    libs = _usable(result.frames["library_calls"], "start_ns", "end_ns", "gtid").sort(["start_ns", "lib_id"])
    if stall is not None:
        return _stall_focus(result, stall)
    if at_ns is not None:
        return _Focus(at_ns, at_ns, None, None, None, f"trace time {_fmt(at_ns)} (--around)")
    if finding is not None:
        if not 1 <= finding <= len(findings):
            raise BadOption(f"--around finding:{finding}: {_numbered(finding, len(findings))}")
        chosen = [findings[finding - 1]]
        how = f"finding {finding} (--around)"
    else:
        chosen = [f for f in findings if f["start_ns"] is not None and f["global_tid"] is not None][:1]
        how = "the first finding"
    if chosen:
        f = chosen[0]
        enc = f["enclosing"]
        text = f"{f['kind']}: {display_name(f['api'])} returned {f['return_code']} ({f['return_name']})"
        start = f["start_ns"] if f["start_ns"] is not None else (enc["start_ns"] if enc is not None else None) or 0
        told = f.get("telemetry")
        line_before = told["after"] if told is not None else None
        position = None
        if told is not None and line_before:
            checked = "" if told["verified"] else f" ({words.CLOCK_CHECKED[False]})"
            position = f"{line_before['ms']:.3f} ms after {line_before['event']}{checked}"
        return _Focus(
            start, f["end_ns"] if f["end_ns"] is not None else start, f["global_tid"], f["pid"],
            enc["lib_id"] if enc is not None else None, f"{how}, {text}", f["correlation_id"], position,
        )
    censored = libs.filter(pl.col("coverage") == "censored")
    if censored.height:
        return _lib_focus(censored, words.FOCUS["censored"])
    origin = _boundary_lines(result, boundary, None)
    if origin and libs.height:
        after = libs.filter(pl.col("start_ns") >= origin[0].trace_ns)
        if after.height:
            return _lib_focus(after, words.FOCUS["after"].format(boundary=boundary))
    if libs.height:
        return _lib_focus(libs, "the first library call")
    failed = _usable(result.frames["cuda_api_rows"], "start_ns", "gtid").filter(pl.col("classification") == "failure")
    if failed.height:
        row = failed.sort(["start_ns", "gtid"]).row(0, named=True)
        end = row["end_ns"] if row["end_ns"] is not None else row["start_ns"]
        name = display_name(row["api"]) if row["api"] is not None else "unknown api"
        return _Focus(row["start_ns"], end, row["gtid"], pid_bits(row["gtid"]), None,
                      words.FOCUS["failed"].format(name=name), row["correlation_id"])
    lo, hi = _capture_span(result)
    return _Focus(lo, hi, None, None, None, words.FOCUS["nothing"], whole=True)


def _capture_span(result: AnalysisResult) -> tuple[int, int]:
    """The capture's bounds on the trace clock, else the span of the rows the trace holds, else 0."""
    coverage = result.coverage
    start, stop = coverage["capture"]["start_ns"], coverage["capture"]["stop_ns"]
    if start is not None and stop is not None and stop > start:
        return start, stop
    rows = [(first, last) for s in coverage["by_source"]
            if (first := s["first_ns"]) is not None and (last := s["last_ns"]) is not None]
    if rows:
        return min(a for a, _ in rows), max(b for _, b in rows)
    return 0, 0


def _lib_focus(libs: pl.DataFrame, how: str) -> _Focus:
    """The focus on the first library call of ``libs`` (rows with a start and an end)."""
    start, end, gtid, pid, lib_id, api = libs.select("start_ns", "end_ns", "gtid", "pid", "lib_id", "api").row(0)
    return _Focus(start, end, gtid, pid, lib_id, f"{how}, {api}")


def _boundary_lines(result: AnalysisResult, event: str | None, pid: int | None) -> list[Boundary]:
    """Telemetry lines placed on the trace clock (named ``event`` when given), of process ``pid``
    (lines without a pid apply to every process), in trace order."""
    if result.alignment is None:
        return []
    verified = result.alignment.checked
    lines = pl.concat(
        [result.alignment.log.lines.select("line", "event", "pid", "tid"), result.alignment.placed.select("trace_ns")],
        how="horizontal",
    ).filter(pl.col("trace_ns").is_not_null())
    if event is not None:
        lines = lines.filter(pl.col("event") == event)
    if pid is not None:
        lines = lines.filter(pl.col("pid").is_null() | (pl.col("pid") == pid))
    out = [
        Boundary(trace_ns, str(name), line, verified, line_pid, tid)
        for line, name, line_pid, tid, trace_ns in lines.iter_rows()
    ]
    return sorted(out, key=lambda b: (b.trace_ns, b.line))


def _origin(result: AnalysisResult, focus: _Focus, boundary: str) -> tuple[int, str]:
    lines = _boundary_lines(result, boundary, focus.pid)
    if lines:
        before = [b for b in lines if b.trace_ns <= focus.start_ns]
        b = before[-1] if before else lines[0]
        how = words.CLOCK_CHECKED[b.verified]
        return b.trace_ns, f"{boundary} (telemetry line {b.line}, trace {_fmt(b.trace_ns)}; {how})"
    lib = _lib_row(result, focus.lib_id)
    why = f"no {boundary} in the telemetry" if result.alignment is not None else "no telemetry"
    if lib is not None:
        return lib["start_ns"], f"the start of {lib['api']} (trace {_fmt(lib['start_ns'])}; {why})"
    what = "the capture's start" if focus.whole else "the focus"
    return focus.start_ns, f"{what} (trace {_fmt(focus.start_ns)}; {why})"


class _LibSpan(TypedDict):
    start_ns: int
    end_ns: int
    api: str


def _lib_row(result: AnalysisResult, lib_id: int | None) -> _LibSpan | None:
    """Library call ``lib_id``'s start, end and api, where it has a start and an end."""
    if lib_id is None:
        return None
    rows = _usable(result.frames["library_calls"], "start_ns", "end_ns").filter(pl.col("lib_id") == lib_id)
    if not rows.height:
        return None
    start, end, api = rows.select("start_ns", "end_ns", "api").row(0)
    return {"start_ns": start, "end_ns": end, "api": api}


def _auto_window(result: AnalysisResult, focus: _Focus, origin: int) -> tuple[int, int]:
    if focus.whole:
        pad = max(int((focus.end_ns - focus.start_ns) * PAD), MIN_PAD_NS)
        return focus.start_ns - pad, focus.end_ns + pad
    lo, hi = min(origin, focus.start_ns), max(origin, focus.end_ns)
    lib = _lib_row(result, focus.lib_id)
    if lib is not None:
        lo, hi = min(lo, lib["start_ns"]), max(hi, lib["end_ns"])
    pad = max(int((hi - lo) * PAD), MIN_PAD_NS)
    return lo - pad, hi + pad


def _window(
    result: AnalysisResult, focus: _Focus, origin: int, window_ns: int | None
) -> tuple[int, int]:
    if window_ns is None:
        return _auto_window(result, focus, origin)
    half = max(window_ns // 2, 1)
    return focus.start_ns - half, focus.start_ns + half


# --- building the views ------------------------------------------------------------------------


def _overlapping(frame: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    return frame.filter((pl.col("start_ns") <= hi) & (pl.col("end_ns") >= lo))


def _nvtx(result: AnalysisResult) -> pl.DataFrame:
    """NVTX ranges that are not library calls (those are drawn as bars)."""
    ranges = _usable(result.frames["nvtx_ranges"], "gtid", "start_ns", "end_ns")
    libs = result.frames["library_calls"].select("gtid", "start_ns", pl.col("api").alias("text"))
    return ranges.join(libs, on=["gtid", "start_ns", "text"], how="anti", nulls_equal=True).filter(
        pl.col("end_ns") >= pl.col("start_ns")
    )


def _calls(result: AnalysisResult) -> pl.DataFrame:
    """Every CUDA API row read, with the bytes of successful allocations nested in library calls."""
    rows = _usable(result.frames["cuda_api_rows"], "gtid", "start_ns", "api", "return_code")
    sizes = (
        result.frames["pairs"]
        .filter(pl.col("bytes").is_not_null())
        .select("gtid", "correlation_id", "start_ns", "bytes")
        .unique(["gtid", "correlation_id", "start_ns"], keep="first")
    )
    return (
        rows.with_columns(pl.coalesce("end_ns", "start_ns").alias("end_ns"))
        .join(sizes, on=["gtid", "correlation_id", "start_ns"], how="left")
        .unique(["gtid", "start_ns", "correlation_id", "api", "return_code"], keep="first")
        .sort(["gtid", "start_ns", "correlation_id"], nulls_last=True)
    )


def _outcome(api: str, rc: int, classification: str | None) -> Outcome:
    if rc == 0:
        return "allocation" if is_allocation_api(api) else "ok"
    return "nonzero" if classification not in (None, "failure") else "failed"


def _lanes(
    result: AnalysisResult, focus: _Focus, lo: int, hi: int, calls: pl.DataFrame, nvtx: pl.DataFrame
) -> tuple[list[Lane], list[str]]:
    """The relevant threads of the window, in order: by process, its main thread first."""
    libs = _overlapping(_usable(result.frames["library_calls"], "gtid", "start_ns", "end_ns"), lo, hi)
    failed = calls.filter((pl.col("classification") == "failure") & pl.col("start_ns").is_between(lo, hi))
    ranges = _overlapping(nvtx, lo, hi)
    names = {g: n for g, n in result.frames["thread_names"].drop_nulls("gtid").iter_rows()}
    wanted: dict[int, int] = {}  # gtid -> priority (lower first when lanes must be left out)
    if focus.gtid is not None:
        wanted[focus.gtid] = 0
    for priority, frame in ((1, libs), (2, failed), (3, ranges), (3, _overlapping(_stalls(result), lo, hi))):
        for g in frame["gtid"].unique().sort().to_list():
            wanted.setdefault(g, priority)
    known = sorted({*names, *wanted})
    for b in _boundary_lines(result, None, None):
        if lo <= b.trace_ns <= hi:  # the thread that wrote the line, when the trace knows it
            for g in known:
                if pid_bits(g) == b.pid and tid_bits(g) == b.tid:
                    wanted.setdefault(g, 4)
    chosen = sorted(
        wanted, key=lambda g: (wanted[g], pid_bits(g), tid_bits(g) != pid_bits(g), tid_bits(g), g)
    )[:MAX_LANES]
    notes = []
    if len(wanted) > MAX_LANES:
        notes.append(words.LANES_NOT_SHOWN.format(more=len(wanted) - MAX_LANES))
    lanes = [Lane(g, pid_bits(g), tid_bits(g), names.get(g)) for g in chosen]
    lanes.sort(key=lambda lane: (lane.pid, not lane.main, lane.tid, lane.gtid))
    return lanes, notes


def _view(
    result: AnalysisResult,
    lanes: Sequence[Lane],
    shown: Sequence[int],
    lo: int,
    hi: int,
    origin: int,
    calls: pl.DataFrame,
    nvtx: pl.DataFrame,
    focus: _Focus,
) -> View:
    index = {lane.gtid: i for i, lane in enumerate(lanes)}
    gtids = [lanes[i].gtid for i in shown]
    libs = _overlapping(
        _usable(result.frames["library_calls"], "gtid", "start_ns", "end_ns").filter(pl.col("gtid").is_in(gtids)),
        lo, hi,
    ).sort(["gtid", "start_ns", "lib_id"])
    bars = tuple(
        Bar(index[r["gtid"]], r["lib_id"], str(r["api"]), r["start_ns"], max(r["end_ns"], r["start_ns"]),
            r.get("end_known") is not False, r["coverage"])
        for r in libs.iter_rows(named=True)
    )
    in_view = calls.filter(pl.col("gtid").is_in(gtids) & (pl.col("start_ns") <= hi) & (pl.col("end_ns") >= lo))
    ticks = []
    focus_tick = None
    for r in in_view.iter_rows(named=True):
        api, rc = str(r["api"]), int(r["return_code"])
        tick = Tick(
            index[r["gtid"]], r["start_ns"], max(r["end_ns"], r["start_ns"]), api, rc,
            return_name(api, rc), r["correlation_id"], _outcome(api, rc, r["classification"]), r["bytes"],
        )
        ticks.append(tick)
        if r["gtid"] == focus.gtid and r["start_ns"] == focus.start_ns and (
            focus.correlation_id is None or r["correlation_id"] == focus.correlation_id
        ):
            focus_tick = tick
    ranges = tuple(
        Range(index[r["gtid"]], r["start_ns"], r["end_ns"], str(r["text"]))
        for r in _overlapping(nvtx.filter(pl.col("gtid").is_in(gtids)), lo, hi)
        .sort(["gtid", "start_ns", "end_ns"]).iter_rows(named=True)
    )
    pids = {lanes[i].pid for i in shown}
    boundaries = tuple(
        b for b in _boundary_lines(result, None, None) if lo <= b.trace_ns <= hi and b.pid in (None, *pids)
    )
    stop = result.coverage["capture"]["stop_ns"]
    stalls = tuple(
        StallBar(index[g], s, e, f"blocked {(e - s) / 1e6:,.3f} ms ({display_name(api) if api else 'unknown api'})")
        for g, s, e, api in _overlapping(_stalls(result).filter(pl.col("gtid").is_in(gtids)), lo, hi)
        .select("gtid", "start_ns", "end_ns", "api").iter_rows()
    )
    gpu_lanes, gpu = _gpu(result, {lanes[i].pid for i in shown}, lo, hi)
    return View(
        lo, hi, origin, tuple(shown), bars, tuple(ticks), ranges, boundaries,
        _shades(result, lanes, shown, lo, hi), stop if stop is not None and lo <= stop <= hi else None, focus_tick,
        stalls, gpu_lanes, gpu,
    )


MAX_GPU_LANES = 4
GPU_BARS = 1500  # per lane: rows closer than the window / GPU_BARS are drawn as one bar


def _stalls(result: AnalysisResult) -> pl.DataFrame:
    """``gtid, start_ns, end_ns, api`` of the calls that blocked the host at least the stall minimum."""
    calls = result.frames.get("stall_calls")
    least = result.head["stalls"]["rules"]["stall_min_ns"]
    if calls is None or not calls.height:
        return pl.DataFrame(schema={"gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "api": pl.String})
    return (
        calls.filter(pl.col("end_ns") - pl.col("start_ns") >= least)
        .select("gtid", "start_ns", "end_ns", pl.col("api").cast(pl.String))
        .sort("start_ns", "gtid", "end_ns", "api", nulls_last=True, maintain_order=True)
    )


def _gpu(result: AnalysisResult, pids: set[int], lo: int, hi: int) -> tuple[tuple[GpuLane, ...], tuple[GpuBar, ...]]:
    """The GPU streams with work behind an attributed stall in the window (of the processes shown),
    at most :data:`MAX_GPU_LANES`, the most busy first, their rows merged at about a pixel."""
    rows = result.frames.get("stall_work")
    if rows is None or not rows.height or not pids:
        return (), ()
    calls = result.frames["stall_calls"].select("call_id", "gtid")
    work = (
        rows.join(calls, on="call_id").with_columns(decode_pid(pl.col("gtid")).alias("pid"))
        .filter(pl.col("pid").is_in(list(pids)) & (pl.col("start_ns") <= hi) & (pl.col("end_ns") >= lo))
        .unique(["pid", "stream_id", "work", "start_ns", "end_ns"])
    )
    if not work.height:
        return (), ()
    busiest = (
        work.group_by("pid", "stream_id").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy"))
        .sort("busy", "pid", "stream_id", descending=[True, False, False]).head(MAX_GPU_LANES)
        .sort("pid", "stream_id")
    )
    lanes = tuple(GpuLane(p, s) for p, s in busiest.select("pid", "stream_id").iter_rows())
    step = max((hi - lo) // GPU_BARS, 1)
    keys = ["pid", "stream_id", "work"]
    # Per lane and kind, rows that start within a step of the reach of those before them are one bar.
    merged = (
        work.join(busiest.select("pid", "stream_id").with_row_index("row"), on=["pid", "stream_id"])
        .sort(*keys, "start_ns")
        .with_columns(pl.col("end_ns").cum_max().over(keys).shift(1).over(keys).alias("_reach"))
        .with_columns((pl.col("_reach").is_null() | (pl.col("start_ns") > pl.col("_reach") + step)).cum_sum()
                      .alias("_bar"))
        .group_by("row", "work", "_bar").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort("row", "work", "start_ns")
    )
    return lanes, tuple(GpuBar(int(r), s, e, w) for r, w, s, e in merged.select("row", "work", "start_ns", "end_ns")
                        .iter_rows())


def _shades(result: AnalysisResult, lanes: Sequence[Lane], shown: Sequence[int], lo: int, hi: int) -> tuple[Shade, ...]:
    coverage = result.coverage
    out: list[Shade] = []
    every = tuple(shown)
    start, stop = coverage["capture"]["start_ns"], coverage["capture"]["stop_ns"]
    if start is not None and start > lo and every:
        out.append(Shade("capture_not_started", every, lo, min(start, hi), words.NOT_COVERED["not_started"]))
    sources = coverage["by_source"]
    last_record = {s["pid"]: s["last_ns"] for s in sources if s["source"] == "cuda_api" and s["pid"] is not None}
    stopped: dict[int, int | None] = {}
    for c in coverage["censored"]:
        reasons = set(c["reasons"] or [c["reason"]])
        if reasons & CUDA_TRACE_REASONS and c["pid"] is not None:
            stopped[c["pid"]] = last_record.get(c["pid"], c["cuda_api_last_ns"])
    for pid in sorted(stopped):
        mine = tuple(i for i in shown if lanes[i].pid == pid)
        last = stopped[pid]
        begin = lo if last is None else max(last, lo)
        if mine and begin < hi:
            where = "no CUDA API record" if last is None else f"last record {_fmt(last)}"
            out.append(Shade("cuda_trace_stopped", mine, begin, hi,
                             words.NOT_COVERED["trace_stops"].format(pid=pid, where=where)))
    if stop is not None and stop < hi and every:
        out.append(Shade("capture_stopped", every, max(stop, lo), hi, "not covered: capture stopped"))
    return tuple(out)


def _build(
    result: AnalysisResult,
    arm: str | None,
    focus: _Focus,
    origin: tuple[int, str],
    window: tuple[int, int],
    zoom_window: tuple[int, int] | None,
    notes: list[str],
) -> Timeline:
    calls, nvtx = _calls(result), _nvtx(result)
    lo, hi = window
    lanes, lane_notes = _lanes(result, focus, lo, hi, calls, nvtx)
    context = _view(result, lanes, range(len(lanes)), lo, hi, origin[0], calls, nvtx, focus)
    zoom = zoom_label = None
    lib = _lib_row(result, focus.lib_id)
    focus_lane = next((i for i, lane in enumerate(lanes) if lane.gtid == focus.gtid), None)
    if lib is not None and focus_lane is not None and zoom_window is not None:
        zlo, zhi = zoom_window
        zoom = _view(result, lanes, [focus_lane], zlo, zhi, lib["start_ns"], calls, nvtx, focus)
        zoom_label = f"the start of {lib['api']} (trace {_fmt(lib['start_ns'])})"
    memory, memory_notes = _memory(result, focus, lo, hi)
    return Timeline(
        arm=arm,
        input_name=basename(result.input.path),
        verdict=result.verdict,
        lanes=tuple(lanes),
        context=context,
        zoom=zoom,
        origin_label=origin[1],
        zoom_label=zoom_label,
        focus_label=focus.label,
        focus_position=focus.position,
        notes=tuple(notes + lane_notes + memory_notes),
        memory=memory,
        whole_capture=focus.whole,
    )


def _memory(result: AnalysisResult, focus: _Focus, lo: int, hi: int) -> tuple[WindowMemory | None, list[str]]:
    """The ledger panel's data (see the module docstring), or None when no ledger is claimed."""
    doc: Memory = result.head["memory"]
    series = result.frames.get("memory_series")
    if not doc["ledger"] or series is None or series.height == 0:
        return None, []
    mine = series.filter(pl.col("pid") == focus.pid) if focus.pid is not None else series.clear()
    pick = mine if mine.height else series
    top = pick.group_by("vm", "device_id").agg(pl.col("delta").filter(pl.col("delta") > 0).sum().alias("b"))
    vm, device, _ = top.sort(["b", "vm", "device_id"], descending=[True, False, False]).row(0)
    on = series.filter((pl.col("vm") == vm) & (pl.col("device_id") == device)).select(
        "start_ns", "device_resident_live"
    )
    before = on.filter(pl.col("start_ns") < lo)
    start_value = int(before["device_resident_live"][-1]) if before.height else 0
    inside = on.filter((pl.col("start_ns") >= lo) & (pl.col("start_ns") <= hi))
    steps = ((lo, start_value), *((int(t), int(v)) for t, v in inside.iter_rows()))
    read_at = focus.end_ns if focus.whole else focus.start_ns  # with nothing to focus on: the capture's end
    at = on.filter(pl.col("start_ns") <= read_at)
    live = int(at["device_resident_live"][-1]) if at.height else 0
    info: Device | None = next(
        (d for d in doc.get("devices", []) if d["vm"] == vm and d["device_id"] == device), None
    )
    total = info["total_bytes"] if info is not None else None
    point = next((p for p in doc["at"] if p["t_ns"] == focus.start_ns and p["pid"] == focus.pid
                  and p["point"] != "telemetry"), None)
    memory = WindowMemory(device, info["name"] if info is not None else None, total, steps, read_at, live,
                    None if total is None else total - live, point["holder"] if point else None,
                    words.READ_AT[focus.whole])
    why = words.MEMORY_DEVICE_CHOSEN[bool(mine.height)]
    notes = [words.MEMORY_PICTURE_NOTE.format(device=device, why=why)]
    if memory.holder:
        notes.append(f"held at the focus: {memory.holder}")
    return memory, notes


def _zoom_window(result: AnalysisResult, focus: _Focus) -> tuple[int, int] | None:
    lib = _lib_row(result, focus.lib_id)
    if lib is None:
        return None
    pad = max(int((lib["end_ns"] - lib["start_ns"]) * PAD), 1_000)
    return lib["start_ns"] - pad, max(lib["end_ns"], lib["start_ns"]) + pad


def timeline(
    result: AnalysisResult,
    *,
    arm: str | None = None,
    finding: int | None = None,
    at_ns: int | None = None,
    window_ns: int | None = None,
    boundary: str = DEFAULT_BOUNDARY,
    stall: int | None = None,
) -> Timeline:
    """The timeline of one analyzed export around a finding, a time, a host stall, or the default focus.

    >>> import nsysaudit
    >>> torch = "tests/fixtures/h200-cuda13-nsys2025.3/torch/"
    >>> t = timeline(nsysaudit.analyze(torch + "observe.sqlite", telemetry=torch + "observe.telemetry.jsonl"))
    >>> [lane.name for lane in t.lanes], t.origin_label.split(" (")[0]
    (['python3', 'pt_autograd_0'], 'backward_start')
    >>> t.memory.free_at_most_bytes
    697798798
    """
    if sum(x is not None for x in (finding, at_ns, stall)) > 1:
        raise BadOption("--around takes one finding, one stall or one time, not several")
    if window_ns is not None and window_ns <= 0:
        raise BadOption("--window must be more than 0 ms")
    focus = _focus(result, finding, at_ns, boundary, stall)
    origin = _origin(result, focus, boundary)
    window = _window(result, focus, origin[0], window_ns)
    notes = _notes(focus, origin[1], window, window_ns)
    return _build(result, arm, focus, origin, window, _zoom_window(result, focus), notes)


def aligned_timelines(
    observe: AnalysisResult, release: AnalysisResult, *, boundary: str = DEFAULT_BOUNDARY
) -> tuple[Timeline, Timeline]:
    """Both arms of a comparison on one window relative to each arm's origin (``boundary``, else
    the start of the focus's library call), so that stacked they line up at 0."""
    arms = (("observe", observe), ("release", release))
    focus = {name: _focus(r, None, None, boundary) for name, r in arms}
    origin = {name: _origin(r, focus[name], boundary) for name, r in arms}
    rel = [tuple(x - origin[name][0] for x in _auto_window(r, focus[name], origin[name][0])) for name, r in arms]
    lo, hi = min(w[0] for w in rel), max(w[1] for w in rel)
    zooms = {name: _zoom_window(r, focus[name]) for name, r in arms}
    starts = {name: _lib_row(r, focus[name].lib_id) for name, r in arms}
    zrel = [
        (z[0] - s["start_ns"], z[1] - s["start_ns"])
        for name in ("observe", "release")
        if (z := zooms[name]) is not None and (s := starts[name]) is not None
    ]
    out = []
    for name, r in arms:
        o = origin[name][0]
        s = starts[name]
        zoom = None
        if zrel and s is not None:
            zoom = (s["start_ns"] + min(z[0] for z in zrel), s["start_ns"] + max(z[1] for z in zrel))
        notes = _notes(focus[name], origin[name][1], (o + lo, o + hi), None)
        notes.append(words.SHARED_WINDOW)
        out.append(_build(r, name, focus[name], origin[name], (o + lo, o + hi), zoom, notes))
    return out[0], out[1]


def _notes(focus: _Focus, origin: str, window: tuple[int, int], window_ns: int | None) -> list[str]:
    width = window[1] - window[0]
    to = words.FOCUS_END[focus.lib_id is not None]
    if window_ns is not None:
        how = words.WINDOW_GIVEN.format(ms=f"{window_ns / 1e6:g}")
    elif focus.whole:
        how = words.WINDOW_WHOLE.format(ms=f"{width / 1e6:.3f}", pad=f"{PAD:.0%}")
    else:
        how = words.WINDOW_TO.format(ms=f"{width / 1e6:.3f}", to=to, pad=f"{PAD:.0%}")
    return [
        f"focus: {focus.label}",
        f"0 ms = {origin}",
        f"window: {_fmt(window[0])} to {_fmt(window[1])} ({how})",
        words.LANES_NOTE[focus.whole or focus.gtid is None],
    ]



def notes_of(timelines: Sequence[Timeline]) -> list[str]:
    """What the picture of ``timelines`` chose, in words: each timeline's notes prefixed by its
    arm, a note all arms share once."""
    common = set.intersection(*(set(t.notes) for t in timelines)) if len(timelines) > 1 else set()
    out = [note for note in timelines[0].notes if note in common] if common else []
    for t in timelines:
        who = f"{t.arm}: " if t.arm else ""
        out += [who + note for note in t.notes if note not in common]
    return out
