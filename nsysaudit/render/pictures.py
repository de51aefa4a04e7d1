"""Timeline pictures: :class:`~nsysaudit.reports.timeline.Timeline` objects in, SVG or PNG bytes out.

The only module that imports matplotlib. It draws with the object-oriented API (``Figure``, no
``pyplot``: no global figure state, no GUI backend; PNG through Agg, SVG through matplotlib's own
SVG writer), inside ``rc_context`` with matplotlib's defaults and a fixed :data:`STYLE`, so a
user's ``matplotlibrc`` changes nothing. The bytes are the same on every run: no date in the SVG
metadata, a fixed ``svg.hashsalt`` for its ids, text kept as text (``svg.fonttype = none``) and
laid out with the DejaVu Sans file matplotlib ships (never a system font), no PNG ``Software``
tag. Trace text is drawn escaped (:func:`nsysaudit.core.text.escape`) with math parsing off, so a
``$`` or a control character in a thread name is shown as written.

A figure is a stack of panels, each a function ``(ax, timeline, view) -> None`` over the same
axes geometry (fixed inches: same left edge and width whatever the labels), so panels stacked in
one figure, or figures stacked in one page (``report.html``), share their x positions. Panels:
the context view of each timeline given, then the zoom on each one's focus library call. One more
panel (the memory ledger of issue 13) is one more entry in :func:`_panels` and one more drawing
function.
"""

from __future__ import annotations

import io
import logging
import os
import textwrap
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from nsysaudit import words
from nsysaudit.core.errors import BadOption, PictureNotWritable
from nsysaudit.core.files import write_atomic
from nsysaudit.core.text import escape, size_word
from nsysaudit.reports.timeline import Timeline, View, notes_of


def _quietly_import_matplotlib() -> None:
    """Import matplotlib without its import-time notices ("building the font cache", "created a
    temporary cache directory"), which its logger would print on stderr: an error of nsysaudit is
    one line. The logger's level is put back afterwards."""
    logger = logging.getLogger("matplotlib")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import matplotlib.font_manager  # noqa: F401  (loads or builds the font list)
    finally:
        logger.setLevel(level)


_quietly_import_matplotlib()

import matplotlib  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch, Rectangle  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # the rc keys as a Literal: only the checker needs it

Format = Literal["svg", "png"]
FORMATS: tuple[Format, ...] = ("svg", "png")

STYLE: dict[RcKeyType, str | bool | float] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "nsysaudit",
    "text.parse_math": False,
    "text.usetex": False,
    "axes.linewidth": 0.6,
    "hatch.linewidth": 0.6,
    "path.simplify": False,
    "figure.dpi": 100,
}
FONT_FILE = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
PNG_DPI = 110

COLOURS = {
    "library": "#4c72b0",
    "library_censored": "#8fa8d0",
    "nvtx": "#cbb8e8",
    "ok": "#8c8c8c",
    "allocation": "#2ca02c",
    "failed": "#d62728",
    "nonzero": "#ff9f1c",
    "boundary": "#555555",
    "capture": "#000000",
    "shade": "#9e9e9e",
    "text": "#222222",
    "note": "#555555",
    "stall": "#e8743b",  # the host blocked in a CUDA call (docs/stalls.md)
    "behind": "#2a9d8f",  # GPU work that ran behind a stall
}
OUTCOME_ORDER = ("ok", "allocation", "nonzero", "failed")  # drawn in this order: failures on top

# Geometry, in inches: every panel has the same left edge and width.
WIDTH = 12.0
LEFT = 2.1
RIGHT = 0.35
LANE = 0.62
TITLE = 0.32
LABEL_ROW = 0.17
AXIS = 0.5
GAP = 0.12
LEGEND = 0.45
NOTE_LINE = 0.15
NOTE_WIDTH = 200  # characters of a note line at 6.5 pt across the picture
MAX_TEXT = 60


def _font(size: float = 7.5, weight: str = "normal") -> FontProperties:
    return FontProperties(fname=FONT_FILE, size=size, weight=weight)


def clipped(text: object, limit: int = MAX_TEXT) -> str:
    """Trace text as a picture shows it: escaped, one line, shortened with its length."""
    s = escape(str(text))
    return s if len(s) <= limit else f"{s[: limit - 1]}… ({len(s)} chars)"


@dataclass(frozen=True)
class _Scale:
    """Trace nanoseconds to the panel's x unit, relative to the view's origin."""

    origin_ns: int
    unit_ns: int
    unit: str

    def x(self, ns: int) -> float:
        return (ns - self.origin_ns) / self.unit_ns


def _scale(view: View) -> _Scale:
    span = view.hi_ns - view.lo_ns
    if span < 2_000_000:
        return _Scale(view.origin_ns, 1_000, "µs")
    return _Scale(view.origin_ns, 1_000_000, "ms")


class _Rows:
    """Greedy placement of labels in rows so that none overlaps another (widths estimated)."""

    def __init__(self, chars_per_unit: float, rows: int) -> None:
        self.chars_per_unit = chars_per_unit
        self.ends: list[float] = [float("-inf")] * rows

    def place(self, x: float, text: str, ha: str = "left") -> int | None:
        width = (len(text) + 1) / self.chars_per_unit
        left = x - width if ha == "right" else x
        for row, end in enumerate(self.ends):
            if left >= end:
                self.ends[row] = left + width
                return row
        return None


def _chars_per_unit(view: View, scale: _Scale, size: float) -> float:
    """Characters of ``size`` pt text per x unit: the axes are WIDTH - LEFT - RIGHT inches wide."""
    inches = WIDTH - LEFT - RIGHT
    units = (view.hi_ns - view.lo_ns) / scale.unit_ns or 1.0
    char_inches = size * 0.6 / 72
    return (inches / char_inches) / units


# --- panels ------------------------------------------------------------------------------------


Panel = Callable[[Axes, Timeline, View], None]


@dataclass(frozen=True)
class _PanelSpec:
    draw: Panel
    timeline: Timeline
    view: View
    title: str
    label_rows: int
    lanes_tall: int | None = None  # the panel's height in lanes when it is not one lane per thread


def _label_rows(view: View, scale: _Scale) -> int:
    """Rows the labels above a view need (at least one)."""
    rows = _Rows(_chars_per_unit(view, scale, 7.0), 6)
    used = 1
    for x, text, ha, _ in _top_labels(view, scale):
        row = rows.place(x, text, ha)
        used = max(used, (row if row is not None else 5) + 1)
    return used


def _top_labels(view: View, scale: _Scale) -> list[tuple[float, str, str, str]]:
    """``(x, text, alignment, colour)`` of what is labelled above the lanes: telemetry lines, the
    capture's stop and each part not covered (its label ends where the region begins when it
    begins in the right half, so that it stays inside the picture)."""
    lo, hi = scale.x(view.lo_ns), scale.x(view.hi_ns)

    def line(x: float) -> str:  # a line's label reads to its right, unless that leaves the picture
        return "right" if x > lo + 0.9 * (hi - lo) else "left"

    out = [
        (x, clipped(b.event) + ("" if b.verified else " (unverified)"), line(x), COLOURS["boundary"])
        for b in view.boundaries
        for x in [scale.x(b.trace_ns)]
    ]
    if view.capture_stop_ns is not None:
        x = scale.x(view.capture_stop_ns)
        out.append((x, "capture stopped", line(x), COLOURS["capture"]))
    for shade in view.shades:
        x = scale.x(shade.start_ns)
        right = x > (lo + hi) / 2
        out.append((x, shade.label + (" →" if right else ""), "right" if right else "left", "#444444"))
    return sorted(out, key=lambda item: (item[0], item[1]))


def _panels(timelines: Sequence[Timeline]) -> list[_PanelSpec]:
    specs = []
    for t in timelines:
        title = f"{t.arm} arm · " if t.arm else ""
        title += f"{clipped(t.input_name)} · verdict {t.verdict}"
        if t.whole_capture:
            title += words.PICTURE_WHOLE_CAPTURE
        specs.append(_PanelSpec(_draw_view, t, t.context, title, _label_rows(t.context, _scale(t.context))))
    for t in timelines:
        if t.zoom is not None:
            lane = t.lanes[t.zoom.lanes[0]]
            title = f"{t.arm} arm · " if t.arm else ""
            title += words.PICTURE_ZOOM_TITLE.format(thread=_lane_name(lane.name))
            specs.append(_PanelSpec(_draw_view, t, t.zoom, title, _label_rows(t.zoom, _scale(t.zoom))))
    for t in timelines:
        if t.memory is not None:
            title = f"{t.arm} arm · " if t.arm else ""
            name = f" {clipped(t.memory.device_name, 40)}" if t.memory.device_name else ""
            title += words.PICTURE_MEMORY_TITLE.format(device=t.memory.device_id, name=name)
            specs.append(_PanelSpec(_draw_memory, t, t.context, title, 1, lanes_tall=3))
    return specs


def _gib(n: int) -> float:
    return n / (1 << 30)


MEMORY_FLOOR = 1 << 20  # the memory panel's log axis starts at 1 MiB free: less is drawn there


def _draw_memory(ax: Axes, t: Timeline, view: View) -> None:
    """The ledger on the context window's x axis: where the device's total is known, the bound on
    free memory (the device's total less every traced process's device-resident bytes) as a step
    line on a log axis, so that 0.7 GB free of 150 GB stands out as far from zero as 70 GB does,
    and the bytes held (a thin line near the top); without a total, the bytes held on a linear
    axis. At the focus, the exact numbers. SVG ids ``<arm>-memory-<what>``."""
    memory = t.memory
    assert memory is not None
    scale = _scale(view)
    ids = f"{t.arm or 'arm'}-memory"
    lo, hi = scale.x(view.lo_ns), scale.x(view.hi_ns)
    ax.set_xlim(lo, hi)
    xs = [scale.x(ns) for ns, _ in memory.steps] + [hi]
    live = [v for _, v in memory.steps]
    live.append(live[-1])
    x = scale.x(memory.focus_ns)
    if memory.total_bytes is not None:
        total = memory.total_bytes
        free = [max(total - v, MEMORY_FLOOR) for v in live]
        ax.set_yscale("log")
        ax.set_ylim(MEMORY_FLOOR * 0.7, total * 12)  # room above the total for its label
        ax.step(xs, free, where="post", color=COLOURS["failed"], lw=1.3, gid=f"{ids}-free")
        ax.fill_between(xs, free, MEMORY_FLOOR * 0.7, step="post", color=COLOURS["failed"], alpha=0.12, lw=0)
        ax.step(xs, [max(v, MEMORY_FLOOR) for v in live], where="post", color=COLOURS["library"], lw=0.8,
                alpha=0.7, gid=f"{ids}-live")
        ax.axhline(total, color=COLOURS["capture"], lw=0.9, ls="--", gid=f"{ids}-total")
        _label(ax, lo, total * 3, words.PICTURE_MEMORY_TOTAL.format(total=f"{total:,}", gib=f"{_gib(total):.1f}"),
               COLOURS["text"], size=6.5)
        levels = [b for b in (1 << 20, 10 << 20, 100 << 20, 1 << 30, 10 << 30, 100 << 30, 1 << 40) if b <= total * 1.6]
        ax.set_yticks(levels, labels=[size_word(b) for b in levels], fontproperties=_font(7))
        ax.minorticks_off()
        ax.set_ylabel("free at most", fontproperties=_font(7), color=COLOURS["note"])
        at = max(min(memory.free_at_most_bytes or MEMORY_FLOOR, total), MEMORY_FLOOR)
        bound_y = at / 5 if at > total / 20 else at * 1.8  # beside the free line, inside the axes
    else:
        ys = [_gib(v) for v in live]
        top = max([*ys, 1e-9]) * 1.12
        ax.set_ylim(0, top)
        ax.step(xs, ys, where="post", color=COLOURS["library"], lw=1.2, gid=f"{ids}-live")
        ax.fill_between(xs, ys, step="post", color=COLOURS["library"], alpha=0.15, lw=0)
        yticks = [v for v in MaxNLocator(nbins=4).tick_values(0, top) if 0 <= v <= top]
        ax.set_yticks(yticks, labels=[_number(v) for v in yticks], fontproperties=_font(7))
        ax.set_ylabel(words.PICTURE_LIVE_AXIS, fontproperties=_font(7), color=COLOURS["note"])
        bound_y = top * 0.45
    if lo <= x <= hi:
        ax.axvline(x, color=COLOURS["failed"], lw=0.8, ls=":", gid=f"{ids}-focus")
        said = f"{memory.at_words}: live {memory.live_at_focus_bytes:,} B"
        if memory.free_at_most_bytes is not None:
            said += f", at most {memory.free_at_most_bytes:,} B free"
        right = x > (lo + hi) / 2
        _label(ax, x, bound_y, ("" if right else " ") + said + (" " if right else ""), COLOURS["failed"],
               size=6.5, ha="right" if right else "left", weight="bold", gid=f"{ids}-bound")
    ticks = MaxNLocator(nbins=10).tick_values(lo, hi)
    ticks = [v for v in ticks if lo <= v <= hi]
    ax.set_xticks(ticks, labels=[_number(v) for v in ticks], fontproperties=_font(7))
    ax.set_xlabel(clipped(f"{scale.unit} from {t.origin_label}", 200), fontproperties=_font(7.5),
                  color=COLOURS["note"], labelpad=2)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)


def _lane_name(name: str | None) -> str:
    return "name unknown" if name is None else clipped(name, 40)


def _draw_view(ax: Axes, t: Timeline, view: View) -> None:
    """One view: lanes, not-covered parts, NVTX ranges, library calls, CUDA calls, telemetry lines.

    Elements a test or a reader may look for carry SVG ids ``<arm>-<context|zoom>-<what>``
    (``observe-context-not-covered-0``), unique in a page that holds several pictures."""
    scale = _scale(view)
    ids = f"{t.arm or 'arm'}-{'zoom' if view is t.zoom else 'context'}"
    rows_of = {lane: k for k, lane in enumerate(view.lanes)}
    n = len(view.lanes) + len(view.gpu_lanes)
    ax.set_xlim(scale.x(view.lo_ns), scale.x(view.hi_ns))
    ax.set_ylim(max(n, 1) - 0.5, -0.5)
    ax.set_yticks([])
    ticks = MaxNLocator(nbins=10).tick_values(scale.x(view.lo_ns), scale.x(view.hi_ns))
    ticks = [v for v in ticks if scale.x(view.lo_ns) <= v <= scale.x(view.hi_ns)]
    ax.set_xticks(ticks, labels=[_number(v) for v in ticks], fontproperties=_font(7))
    origin = t.origin_label if view is t.context else (t.zoom_label or "")
    ax.set_xlabel(clipped(f"{scale.unit} from {origin}", 200), fontproperties=_font(7.5), color=COLOURS["note"],
                  labelpad=2)
    for spine in ("top", "right"):
        ax.spines[spine].set_visible(False)
    if not view.lanes:
        ax.text(0.5, 0.5, words.PICTURE_EMPTY_WINDOW, transform=ax.transAxes, ha="center",
                va="center", fontproperties=_font(8), color=COLOURS["note"], parse_math=False)
    for k, lane_index in enumerate(view.lanes):
        lane = t.lanes[lane_index]
        if k % 2:
            ax.axhspan(k - 0.5, k + 0.5, color="#f4f4f4", zorder=0, lw=0)
        trans = ax.get_yaxis_transform()
        ax.text(-0.008, k - 0.02, _lane_name(lane.name), transform=trans, ha="right", va="bottom",
                fontproperties=_font(8, "bold"), color=COLOURS["text"], parse_math=False, gid=f"{ids}-lane-{k}")
        ax.text(-0.008, k + 0.02, f"pid {lane.pid} · tid {lane.tid}" + (" · main" if lane.main else ""),
                transform=trans, ha="right", va="top", fontproperties=_font(7), color=COLOURS["note"],
                parse_math=False)
    rows = {k: _Rows(_chars_per_unit(view, scale, 6.5), 3) for k in range(n)}
    _draw_shades(ax, view, scale, rows_of, ids)
    _draw_ranges(ax, view, scale, rows_of)
    _draw_stalls(ax, view, scale, rows_of, rows, ids)
    _draw_bars(ax, view, scale, rows_of, rows, ids)
    _draw_ticks(ax, view, scale, rows_of, rows, ids, t.focus_position if view is t.context else None, view is t.zoom)
    _draw_lines(ax, view, scale, ids)


def _draw_stalls(
    ax: Axes, view: View, scale: _Scale, rows_of: dict[int, int], rows: dict[int, _Rows], ids: str
) -> None:
    """The host stalls on their threads' lanes, and below the threads the GPU streams' work behind them."""
    span = scale.x(view.hi_ns) - scale.x(view.lo_ns)
    for i, s in enumerate(view.stalls):
        k = rows_of[s.lane]
        x0, x1 = scale.x(s.start_ns), scale.x(s.end_ns)
        ax.add_patch(Rectangle((x0, k - 0.26), max(x1 - x0, span / 800), 0.34, facecolor=COLOURS["stall"], alpha=0.3,
                               edgecolor=COLOURS["stall"], lw=0.8, zorder=2, gid=f"{ids}-stall-{i}"))
        _place(ax, rows[k], k, max(x0, scale.x(view.lo_ns)), s.label, COLOURS["stall"], view, scale)
    first = len(view.lanes)
    trans = ax.get_yaxis_transform()
    for j, lane in enumerate(view.gpu_lanes):
        k = first + j
        ax.axhspan(k - 0.5, k + 0.5, color="#eef6f5", zorder=0, lw=0)
        ax.text(-0.008, k - 0.02, f"GPU · stream {lane.stream_id}", transform=trans, ha="right", va="bottom",
                fontproperties=_font(8, "bold"), color=COLOURS["text"], parse_math=False, gid=f"{ids}-gpu-lane-{j}")
        ax.text(-0.008, k + 0.02, f"pid {lane.pid} · work behind stalls", transform=trans, ha="right", va="top",
                fontproperties=_font(7), color=COLOURS["note"], parse_math=False)
    for work, height in (("kernel", 0.3), ("memcpy", 0.18), ("memset", 0.12)):
        by_row: dict[int, list[tuple[float, float]]] = {}
        for b in (b for b in view.gpu if b.work == work):
            x0, x1 = scale.x(b.start_ns), scale.x(b.end_ns)
            by_row.setdefault(first + b.row, []).append((x0, max(x1 - x0, span / 1500)))
        for k, spans in sorted(by_row.items()):
            ax.broken_barh(spans, (k - height / 2, height), facecolors=COLOURS["behind"],
                           edgecolors="#1d6f65" if work == "kernel" else "none", lw=0.3, zorder=3,
                           gid=f"{ids}-gpu-{work}-{k - first}")


def _number(v: float) -> str:
    text = f"{v:,.6g}"
    return "0" if text in ("-0", "0") else text


def _label(ax: Axes, x: float, y: float, text: str, colour: str, size: float = 6.5, ha: str = "left",
           weight: str = "normal", gid: str | None = None) -> None:
    ax.text(x, y, clipped(text, 200), ha=ha, va="center", fontproperties=_font(size, weight), color=colour,
            clip_on=True, parse_math=False, gid=gid, zorder=6)


def _draw_shades(ax: Axes, view: View, scale: _Scale, rows_of: dict[int, int], ids: str) -> None:
    for i, shade in enumerate(view.shades):
        ks = sorted(rows_of[lane] for lane in shade.lanes if lane in rows_of)
        if not ks:
            continue
        x0, x1 = scale.x(shade.start_ns), scale.x(shade.end_ns)
        top, bottom = ks[0] - 0.5, ks[-1] + 0.5
        ax.add_patch(Rectangle((x0, top), x1 - x0, bottom - top, facecolor=COLOURS["shade"], alpha=0.35,
                               hatch="///", edgecolor="#6d6d6d", lw=0.0, zorder=1, gid=f"{ids}-not-covered-{i}"))


def _draw_ranges(ax: Axes, view: View, scale: _Scale, rows_of: dict[int, int]) -> None:
    per_unit = _chars_per_unit(view, scale, 6.5)
    for r in view.ranges:
        k = rows_of[r.lane]
        x0 = max(scale.x(r.start_ns), scale.x(view.lo_ns))
        x1 = min(scale.x(r.end_ns), scale.x(view.hi_ns))
        ax.add_patch(Rectangle((x0, k - 0.44), max(x1 - x0, 0), 0.15, facecolor=COLOURS["nvtx"], lw=0, zorder=2))
        room = int((x1 - x0) * per_unit) - 1  # the label stays inside its range
        text = f"NVTX {clipped(r.text, 40)}"
        if room >= 6:
            _label(ax, x0, k - 0.365, text if len(text) <= room else text[: room - 1] + "…", "#4b3a6b")


def _draw_bars(
    ax: Axes, view: View, scale: _Scale, rows_of: dict[int, int], rows: dict[int, _Rows], ids: str
) -> None:
    span = scale.x(view.hi_ns) - scale.x(view.lo_ns)
    for b in view.bars:
        k = rows_of[b.lane]
        x0, x1 = scale.x(b.start_ns), scale.x(b.end_ns)
        width = max(x1 - x0, span / 800)
        colour = COLOURS["library"] if b.coverage == "complete" else COLOURS["library_censored"]
        ax.add_patch(Rectangle((x0, k - 0.22), width, 0.26, facecolor=colour, edgecolor=COLOURS["library"],
                               lw=0.6, zorder=3, gid=f"{ids}-library-call-{b.lib_id}"))
        said = clipped(b.api, 40) + ("" if b.coverage == "complete" else f" · {b.coverage or 'coverage unknown'}")
        if not b.end_known:
            said += words.PICTURE_END_UNKNOWN
            ax.plot([x1], [k - 0.09], marker=">", color=COLOURS["library"], markersize=5, zorder=4)
        _place(ax, rows[k], k, max(x0, scale.x(view.lo_ns)), said, COLOURS["library"], view, scale)


def _draw_ticks(
    ax: Axes, view: View, scale: _Scale, rows_of: dict[int, int], rows: dict[int, _Rows], ids: str,
    position: str | None, zoom: bool,
) -> None:
    """The CUDA calls: runs of bars per outcome and lane, a ▼ over each failure, labels for the
    focus, the first failure of each (lane, api, code) and, in a zoom, each allocation's size."""
    span = scale.x(view.hi_ns) - scale.x(view.lo_ns)
    min_width = span / 1500  # about one pixel: calls closer than that are drawn as one run
    ticks = sorted(view.ticks, key=lambda t: (t.start_ns, t.end_ns, t.lane))
    for outcome in OUTCOME_ORDER:
        by_lane: dict[int, list[tuple[float, float]]] = {}
        for tick in (t for t in ticks if t.outcome == outcome):
            x0, x1 = scale.x(tick.start_ns), scale.x(tick.end_ns)
            runs = by_lane.setdefault(rows_of[tick.lane], [])
            if runs and x0 <= runs[-1][1] + min_width:
                runs[-1] = (runs[-1][0], max(runs[-1][1], x1, runs[-1][0] + min_width))
            else:
                runs.append((x0, max(x1, x0 + min_width)))
        for k, runs in sorted(by_lane.items()):
            ax.broken_barh([(a, b - a) for a, b in runs], (k - 0.2, 0.22), facecolors=COLOURS[outcome], lw=0,
                           zorder=4, gid=f"{ids}-cuda-calls-{outcome}-{k}")
        if outcome in ("failed", "nonzero"):
            marked = [t for t in ticks if t.outcome == outcome]
            if marked:
                ax.plot([scale.x(t.start_ns) for t in marked], [rows_of[t.lane] - 0.27 for t in marked], ls="none",
                        marker="v", color=COLOURS[outcome], markersize=5, zorder=5, gid=f"{ids}-{outcome}-markers")
    counts: Counter[tuple[int, str, int]] = Counter()
    for t in ticks:
        if t.outcome in ("failed", "nonzero"):
            counts[(t.lane, t.api, t.return_code)] += 1
    labelled: set[tuple[int, str, int]] = set()
    for tick in sorted(ticks, key=lambda t: t is not view.focus_tick):  # the focus gets the first row
        k, x = rows_of[tick.lane], scale.x(tick.start_ns)
        key = (tick.lane, tick.api, tick.return_code)
        if tick is view.focus_tick:
            text = f"finding: {tick.label}"
            if tick.correlation_id is not None:
                text += f", correlation {tick.correlation_id}"
            if position is not None:
                text += f", {clipped(position, 120)}"
        elif tick.outcome in ("failed", "nonzero") and key not in labelled:
            text = tick.label + (f", {counts[key]} in view" if counts[key] > 1 else "")
        elif tick.outcome == "allocation" and zoom:
            text = tick.label
        else:
            continue
        labelled.add(key)
        _place(ax, rows[k], k, x, text, COLOURS[tick.outcome], view, scale)


def _place(ax: Axes, rows: _Rows, k: int, x: float, text: str, colour: str, view: View, scale: _Scale) -> None:
    """A label below lane ``k`` in the first free row; right-aligned at ``x`` in the right half."""
    x = min(max(x, scale.x(view.lo_ns)), scale.x(view.hi_ns))  # a call that began before the window
    right = x > (scale.x(view.lo_ns) + scale.x(view.hi_ns)) / 2
    text = clipped(text, 200)
    row = rows.place(x, text, "right" if right else "left")
    if row is not None:
        _label(ax, x, k + 0.14 + 0.13 * row, text, colour, ha="right" if right else "left", weight="bold")


def _draw_lines(ax: Axes, view: View, scale: _Scale, ids: str) -> None:
    for b in view.boundaries:
        ax.axvline(scale.x(b.trace_ns), color=COLOURS["boundary"], lw=0.8, ls="--" if b.verified else ":",
                   zorder=5)
    if view.capture_stop_ns is not None:
        ax.axvline(scale.x(view.capture_stop_ns), color=COLOURS["capture"], lw=1.3, zorder=5, gid=f"{ids}-capture-stop")
    rows = _Rows(_chars_per_unit(view, scale, 7.0), 6)
    for x, text, ha, colour in _top_labels(view, scale):
        row = rows.place(x, text, ha)
        if row is None:
            continue
        ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"),
                    xytext=(-1 if ha == "right" else 1, 3 + row * 12), textcoords="offset points", ha=ha,
                    va="bottom", fontproperties=_font(7), color=colour, annotation_clip=False, parse_math=False)


def _legend(fig: Figure, bottom: float, height: float) -> None:
    handles = [
        Patch(facecolor=COLOURS["library"], label="library call (cuBLAS/cuDNN/NCCL)"),
        Patch(facecolor=COLOURS["nvtx"], label="NVTX range"),
        Patch(facecolor=COLOURS["ok"], label="CUDA call, returned 0"),
        Patch(facecolor=COLOURS["allocation"], label="allocation, returned 0"),
        Patch(facecolor=COLOURS["failed"], label="failed CUDA call"),
        Patch(facecolor=COLOURS["nonzero"], label="non-zero, not a failure"),
        Line2D([], [], color=COLOURS["boundary"], ls="--", lw=0.8, label="telemetry line"),
        Line2D([], [], color=COLOURS["capture"], lw=1.3, label="capture stopped"),
        Patch(facecolor=COLOURS["shade"], alpha=0.35, hatch="///", edgecolor="#6d6d6d", label="not covered"),
        Patch(facecolor=COLOURS["stall"], alpha=0.3, edgecolor=COLOURS["stall"], label="host blocked (stall)"),
        Patch(facecolor=COLOURS["behind"], label="GPU work behind it"),
    ]
    fig.legend(handles=handles, loc="center", ncols=6, prop=_font(7), frameon=False,
               bbox_to_anchor=(0.5, (bottom + height / 2) / fig.get_figheight()), handlelength=1.6,
               columnspacing=1.2)


# --- the figure --------------------------------------------------------------------------------


def _lanes_tall(spec: _PanelSpec) -> int:
    return spec.lanes_tall if spec.lanes_tall is not None else max(len(spec.view.lanes) + len(spec.view.gpu_lanes), 1)


def _panel_height(spec: _PanelSpec) -> float:
    return TITLE + spec.label_rows * LABEL_ROW + _lanes_tall(spec) * LANE + AXIS


def figure(timelines: Sequence[Timeline]) -> Figure:
    """The figure of one or more arms' timelines (build inside :func:`style`)."""
    specs = _panels(timelines)
    # A long note (the ledger's sentence) wraps onto lines of its own rather than being cut.
    notes = [line for note in notes_of(timelines)
             for line in textwrap.wrap(clipped(note, 2000), NOTE_WIDTH, subsequent_indent="    ")]
    heights = [_panel_height(s) for s in specs]
    total = sum(heights) + GAP * len(specs) + LEGEND + NOTE_LINE * len(notes) + 0.15
    fig = Figure(figsize=(WIDTH, total))
    top = total
    for spec, height in zip(specs, heights, strict=True):
        top -= GAP
        axes_top = top - TITLE - spec.label_rows * LABEL_ROW
        axes_height = _lanes_tall(spec) * LANE
        ax = fig.add_axes((LEFT / WIDTH, (axes_top - axes_height) / total, (WIDTH - LEFT - RIGHT) / WIDTH,
                           axes_height / total))
        fig.text(0.01, (top - TITLE / 2) / total, clipped(spec.title, 200), fontproperties=_font(9, "bold"),
                 color=COLOURS["text"], va="center", parse_math=False)
        spec.draw(ax, spec.timeline, spec.view)
        top -= height
    _legend(fig, top - LEGEND, LEGEND)
    top -= LEGEND
    for line in notes:
        top -= NOTE_LINE
        fig.text(0.01, top / total, line, fontproperties=_font(6.5), color=COLOURS["note"], parse_math=False)
    return fig


@contextmanager
def style(salt: str = "nsysaudit") -> Iterator[None]:
    """matplotlib's defaults plus :data:`STYLE`, whatever the user's matplotlibrc says."""
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update({**STYLE, "svg.hashsalt": salt})
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Glyph .* missing from font")
            yield


def render(
    timelines: Sequence[Timeline], formats: Sequence[Format] = FORMATS, *, salt: str = "nsysaudit"
) -> dict[Format, bytes]:
    """The picture of ``timelines`` (one arm, or the arms of a comparison stacked), one figure
    saved in each of ``formats``."""
    out: dict[Format, bytes] = {}
    with style(salt):
        fig = figure(timelines)
        for fmt in formats:
            buffer = io.BytesIO()
            if fmt == "svg":
                fig.savefig(buffer, format="svg", metadata={"Date": None})
            else:
                fig.savefig(buffer, format="png", dpi=PNG_DPI, metadata={"Software": None})
            out[fmt] = buffer.getvalue()
    return out


def picture_version() -> str:
    """The matplotlib version the pictures' bytes depend on (recorded in a sealed folder's metadata.json)."""
    return str(matplotlib.__version__)


# --- writing a picture file ----------------------------------------------------------------------


def picture_format(out: str | os.PathLike[str]) -> Format:
    """The format an output file name asks for (``.svg`` or ``.png``); anything else is refused."""
    suffix = Path(out).suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise BadOption(f"--out {os.fspath(out)!r}: name a .svg or .png file")
    return "svg" if suffix == "svg" else "png"


def _is_picture(path: Path) -> bool:
    with path.open("rb") as handle:
        head = handle.read(512)
    return head.startswith(b"\x89PNG\r\n\x1a\n") or (head.lstrip().startswith(b"<?xml") and b"<svg" in head) or (
        head.lstrip().startswith(b"<svg")
    )


def check_picture_out(out: str | os.PathLike[str]) -> Path:
    """Refuse an output file that cannot be written: checked before the (possibly long) analysis."""
    target = Path(os.path.abspath(os.fspath(out)))
    picture_format(target)
    parent = target.parent
    try:
        if not parent.is_dir():
            raise PictureNotWritable(target, f"{parent} is not a folder" if parent.exists() else f"no folder {parent}")
        if target.is_dir():
            raise PictureNotWritable(target, "it is a folder")
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise PictureNotWritable(target, "it is not a regular file")
        if target.exists() and not _is_picture(target):
            # Only a picture is replaced: a file named .svg or .png by mistake may be evidence.
            raise PictureNotWritable(target, "it exists and is not an SVG or PNG picture, so it is not replaced")
    except OSError as exc:
        raise PictureNotWritable(target, exc.strerror or str(exc)) from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PictureNotWritable(target, f"{parent} is not writable")
    return target


def save(timelines: Sequence[Timeline], out: str | os.PathLike[str]) -> int:
    """Render ``timelines`` in the format ``out`` names and write it atomically (a temporary file
    beside it, then a rename: a reader never sees half a picture); returns the bytes written."""
    target = check_picture_out(out)
    fmt = picture_format(target)
    data = render(timelines, (fmt,))[fmt]
    try:
        write_atomic(target, data)
    except OSError as exc:
        raise PictureNotWritable(target, exc.strerror or str(exc)) from None
    return len(data)
