"""The host stalls (the documents' ``stalls`` key, :mod:`nsysaudit.reports.stalls`) in the terminal and in
Markdown: the sentences the document carries, formatted; nothing is worded here but headings."""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsysaudit.reports.stalls import Stalls, StallsDifference, glance_words, kind_words, ms

if TYPE_CHECKING:
    from rich.console import RenderableType

SHOWN_RANGES = 5
SHOWN_CALLS = 5


def _head(s: Stalls) -> list[str]:
    """The sums, in lines (the heading's own line first)."""
    lines = [glance_words(s).removeprefix("host stalls: ")]
    if not s["blocking_calls"]:
        return lines
    kinds = ", ".join(f"{kind_words(k['kind'], k['calls'])} ({ms(k['blocked_ns'])})" for k in s["by_kind"])
    lines.append(f"by kind: {kinds}")
    idle = (f"; of the stalls' time, {ms(s['idle_ns'])} with no GPU work of their processes" if s["idle_ns"]
            else "" if s["idle_ns"] is not None or not s["stalls"]
            else "; how much of the stalls' time no GPU work covered is unknown (see warnings)")
    own = f" (their own copies and memsets ran {ms(s['own_ns'])} more)" if s["own_ns"] else ""
    lines.append(f"waited {ms(s['waited_ns'])}{own}{idle}")
    rows = ", ".join(f"{n:,} {kind}" for kind, n in s["work_rows"].items())
    if rows:
        lines.append(f"GPU rows read: {rows}; synchronization rows joined to the calls described (the stalls, "
                     f"the longest): {s['synchronization_rows']:,}")
    return lines


def terminal_parts(s: Stalls) -> list[RenderableType]:
    """The ``--details`` section."""
    from rich.text import Text

    from nsysaudit.render.terminal import hanging, literal

    first, *rest = _head(s)
    parts: list[RenderableType] = [Text("\nHost stalls: ", style="bold").append_text(literal(first, 2000))]
    parts += [hanging("", literal(line, 2000), indent=2) for line in rest]
    if not s["blocking_calls"]:
        return parts
    for p in s["processes"]:
        parts.append(hanging("- ", literal(p["statement"], 4000), indent=2))
    if s["ranges"]:
        shown = s["ranges"][:SHOWN_RANGES]
        parts.append(Text(f"  per NVTX range ({len(shown)} of {s['ranges_total']:,} shown, the longest stalls first; "
                          "a call counts in every range that holds it):", style="bold"))
        parts += [hanging("- ", literal(r["statement"], 4000), indent=2) for r in shown]
    shown_calls = s["calls"][:SHOWN_CALLS]
    parts.append(Text(f"  the calls that blocked longest ({len(shown_calls)} of {s['calls_total']:,} shown; "
                      f"--json lists {len(s['calls'])}):", style="bold"))
    for n, c in enumerate(shown_calls, 1):
        body = literal(c["statement"], 4000)
        body.append(f" [{c['start_ns']:,} .. {c['end_ns']:,} ns]", style="dim")
        parts.append(hanging(f"{n}. ", body, indent=2))
    return parts


def markdown_lines(s: Stalls, title: str = "## Host stalls") -> list[str]:
    """The section of ``report.md``."""
    from nsysaudit.render.markdown import md

    first, *rest = _head(s)
    out = [title, "", md(first[0].upper() + first[1:], 10_000) + ".", ""]
    out += [f"- {md(line, 10_000)}" for line in rest]
    if not s["blocking_calls"]:
        return [*out, ""]
    out += [f"- {md(p['statement'], 10_000)}" for p in s["processes"]]
    if s["ranges"]:
        shown = s["ranges"][:SHOWN_RANGES]
        out += ["", f"Per NVTX range ({len(shown)} of {s['ranges_total']:,}, the longest stalls first; a call counts "
                "in every range that holds it):", ""]
        out += [f"- {md(r['statement'], 10_000)}" for r in shown]
    shown_calls = s["calls"][:SHOWN_CALLS]
    out += ["", f"The calls that blocked longest ({len(shown_calls)} of {s['calls_total']:,}):", ""]
    out += [f"- {md(c['statement'], 10_000)} (trace ns {c['start_ns']:,} .. {c['end_ns']:,})" for c in shown_calls]
    return [*out, ""]


def difference_lines(d: StallsDifference) -> list[str]:
    from nsysaudit.render.markdown import md

    return ["## Host stalls", "", md(d["statement"], 10_000), ""]
