"""The ``stalls`` key of an analysis document: the host stalls (:mod:`nsysaudit.analysis.stalls`) with
their sentences, worded once for every output, and the comparison of two arms' stalls.

Every number in a sentence is one of the section's own. The words say what the trace shows: the
work that ran on the device while the host was blocked, "behind" it; never what the call waited
for "because" (the trace holds no dependency graph).
"""

# No `from __future__ import annotations` here: typing would compile each TypedDict's string
# annotations into ForwardRefs at import, a small export's start-up (docs/performance.md).
from collections.abc import Callable, Mapping, Sequence
from typing import NotRequired, TypedDict, cast

from nsysaudit import words
from nsysaudit.analysis.alignment import Position
from nsysaudit.analysis.stalls import (
    Attribution,
    CallCopy,
    ProcessStalls,
    RangeStalls,
    StallCall,
    StallRules,
    StallsAnalysis,
    StallStream,
    StallTotals,
)
from nsysaudit.core.codes import display_name

__all__ = ["ArmStalls", "ProcessStallEntry", "RangeStallEntry", "StallCallEntry", "Stalls", "StallsDifference",
           "compare_stalls", "ms", "stalls_section"]

WORK_WORDS = words.STALL_WORK_WORDS
KIND_WORDS = words.STALL_KIND_WORDS


def kind_words(kind: str, n: int) -> str:
    """ "4 asynchronous copies of pageable memory"."""
    return _count(n, KIND_WORDS.get(kind, (kind, kind)))


class StallCallEntry(StallCall):
    """A blocking call (:class:`~nsysaudit.analysis.stalls.StallCall`) in a sentence, and where it falls on
    the application's clock (with telemetry)."""

    display_api: str | None
    statement: str
    telemetry: NotRequired[Position]


class RangeStallEntry(RangeStalls):
    statement: str


class ProcessStallEntry(ProcessStalls):
    statement: str


class Stalls(StallTotals):
    """Every CUDA call that blocked the host (docs/stalls.md): the sums, per kind, process and NVTX
    range, the longest calls with what ran on the device meanwhile, and the sentences the answer shows
    (``statements``: the processes whose stalls are above the rules' share)."""

    processes: list[ProcessStallEntry]
    ranges: list[RangeStallEntry]
    calls: list[StallCallEntry]
    statements: list[str]


def ms(ns: int | None) -> str:
    """A duration as a person reads it: "428.5 ms", "5.6 µs", "1.09 s"."""
    if ns is None:
        return "an unknown time"
    if ns >= 10_000_000_000:
        return f"{ns / 1e9:,.2f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:,.1f} ms"
    return f"{ns / 1e3:,.1f} µs"


def _count(n: int, forms: tuple[str, str]) -> str:
    return f"{n:,} {forms[0] if n == 1 else forms[1]}"


def _thread(c: StallCall) -> str:
    name = c["thread_name"] if c["thread_name"] is not None else "(name unknown)"
    return f"{name} (pid {c['pid']}, tid {c['tid']})"


def _streams(behind: Sequence[StallStream]) -> list[tuple[int, int, str, bool | None]]:
    """Per stream, most time first: (stream, busy ns, "235 copies and 903 kernels", the synchronized stream?)."""
    by_stream: dict[int, list[StallStream]] = {}
    for b in behind:
        by_stream.setdefault(b["stream_id"], []).append(b)
    out = []
    for stream, rows in by_stream.items():
        rows = sorted(rows, key=lambda r: (-r["busy_ns"], r["work"]))
        counts = [_count(r["rows"], WORK_WORDS[r["work"]]) for r in rows]
        what = " and ".join([", ".join(counts[:-1]), counts[-1]] if len(counts) > 1 else counts)
        out.append((stream, sum(r["busy_ns"] for r in rows), what, rows[0]["synchronized_stream"]))
    return sorted(out, key=lambda s: (-s[1], s[0]))


def _relation(c: StallCall, synchronized: bool | None) -> str:
    """What the stream of the work is to the call: the one it synchronized, another one, ..."""
    sync = c["synchronized"]
    if sync["scope"] in ("device", "event"):
        return words.STALL_RELATION[sync["scope"]]
    if synchronized is None:
        return words.STALL_RELATION["unrecorded"]
    if synchronized:
        return words.STALL_RELATION["same"]
    return words.STALL_RELATION["other"].format(stream=sync["stream_id"])


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "?"


def launch_words(a: Attribution) -> str | None:
    """Where the work behind a call was launched: "launched before it inside train_epoch_0 (98%; cuBLAS 97%)"."""
    busy = a["busy_ns"]
    if not a["rows"] or busy <= 0:
        return None
    parts = []
    if a["ranges"]:
        top = a["ranges"][0]
        where = f"inside {top['nvtx_range']}" if top["nvtx_range"] is not None else "outside every NVTX range"
        others = a["ranges_total"] - 1
        if others or a["launched_before_ns"] != busy:
            where += f" ({_share(top['busy_ns'], busy)} of that time)"
        if others:
            where += f" and {others:,} more NVTX range{'s' if others > 1 else ''}"
        parts.append(f"launched before it {where}")
    libraries = [f"{lib['library']} {_share(lib['busy_ns'], busy)}" for lib in a["libraries"][:2]]
    if libraries:
        parts.append("inside library calls: " + ", ".join(libraries))
    if a["launched_after_rows"]:
        parts.append(words.STALL_LAUNCHED_AFTER.format(rows=f"{a['launched_after_rows']:,}",
                                                       share=_share(a["launched_after_ns"], busy)))
    if a["launch_unknown_rows"]:
        parts.append(words.STALL_LAUNCH_UNKNOWN.format(rows=f"{a['launch_unknown_rows']:,}",
                                                       share=_share(a["launch_unknown_ns"], busy)))
    if not a["complete"]:
        parts.append(words.STALL_ROW_LIMIT)
    return "; ".join(parts)


ALL_WORK = ("kernel", "memcpy", "memset")


def call_statement(c: StallCall, read: Sequence[str] = ALL_WORK) -> str:
    """One blocking call in a sentence: what, where, how long, and what ran on the device meanwhile
    (``read``: the kinds of GPU work whose table was read; of the others nothing is said)."""
    api = display_name(c["api"]) if c["api"] is not None else "(name unknown)"
    text = words.STALL_CALL.format(api=api, thread=_thread(c), correlation=c["correlation_id"],
                                   blocked=ms(c["blocked_ns"]))
    copy: CallCopy | None = c["copy"]
    if copy is not None and c["own_ns"]:
        kinds = ", ".join(k for k in (copy["copy_kind"], copy["memory_kinds"]) if k)
        size = f", {copy['bytes']:,} B" if copy["bytes"] is not None else ""
        own = "memset" if c["kind"] == "sync_memset" else "copy"
        text += words.STALL_OWN_WORK.format(own=own, kinds=kinds, size=size, ran=ms(c["own_ns"]))
    streams = _streams(c["behind"] or [])
    if c["behind"] is None:  # shorter than a stall: the work behind it is not summed per stream
        pass
    elif streams:
        stream, busy, what, synchronized = streams[0]
        text += f"; {ms(busy)} behind {what} on stream {stream} ({_relation(c, synchronized)})"
        for other, other_busy, other_what, _ in streams[1:3]:
            text += f"; {ms(other_busy)} behind {other_what} on stream {other}"
        if len(streams) > 3:
            text += words.STALL_MORE_STREAMS.format(more=len(streams) - 3)
        said = launch_words(c["attribution"]) if c["attribution"] is not None else None
        if said:
            text += f"; of that work: {said}"
    else:
        missing = [kind for kind in ALL_WORK if kind not in read]
        seen = " or ".join(WORK_WORDS[kind][0] for kind in read) if missing else "GPU work"
        text += words.STALL_NOTHING_ELSE.format(seen=seen or "GPU work")
        synced = c["synchronized"]["stream_id"]
        if c["synchronized"]["scope"] == "stream" and synced is not None:
            text += f" (its stream: {synced})" if c["copy"] is not None else f" (it synchronized stream {synced})"
        if missing:
            text += words.STALL_NO_TABLE.format(tables=" or ".join(missing))
    if c["idle_ns"]:
        text += words.STALL_IDLE.format(idle=ms(c["idle_ns"]))
    return text


def range_statement(r: RangeStalls) -> str:
    """ "validation_0 (pid 683): 12 blocking calls, 271.0 ms blocked, 268.0 ms of it behind stream 13"."""
    where = r["range"] if r["range"] is not None else "outside every NVTX range"
    calls = _count(r["calls"], ("blocking call", "blocking calls"))
    text = f"{where} (pid {r['pid']}): {calls}, {ms(r['blocked_ns'])} blocked"
    if r["behind"]:
        top = r["behind"][0]
        text += f", {ms(top['busy_ns'])} of it behind stream {top['stream_id']}"
    if r["idle_ns"]:
        text += words.STALL_RANGE_IDLE.format(idle=ms(r["idle_ns"]))
    return text


def process_statement(p: ProcessStalls, longest: StallCall | None, rules: StallRules,
                      read: Sequence[str] = ALL_WORK) -> str:
    """A process's stalls in a sentence, with its longest call."""
    name = f" ({p['name']})" if p["name"] else ""
    at_least = f"{rules['stall_min_ns'] / 1e6:g} ms"
    text = words.STALL_PROCESS.format(pid=p["pid"], name=name, calls=_count(p["stalls"], words.BLOCKING_CALLS),
                                      at_least=at_least, stalled=ms(p["stalled_ns"]))
    if p["share"] is not None and p["span_ns"] is not None:
        text += words.STALL_SHARE.format(share=f"{100 * p['share']:.1f}", span=ms(p["span_ns"]))
    if p["blocking_calls"] > p["stalls"]:
        text += f" ({p['blocking_calls']:,} blocking calls in all, {ms(p['blocked_ns'])})"
    if longest is not None:
        text += f"; the longest: {call_statement(longest, read)}"
    return text


def stalls_section(
    stalls: StallsAnalysis, position: Callable[[int, int, int], Position] | None = None
) -> Stalls:
    """The document's ``stalls`` key: ``stalls`` with each call, range and process in a sentence (and
    each listed call's place among the telemetry lines, where ``position`` places it)."""
    read = [kind for kind in ALL_WORK if kind in stalls["work_rows"]]
    calls: list[StallCallEntry] = []
    for c in stalls["calls"]:
        # The call's keys and two more (telemetry, NotRequired, below): mypy cannot see that through **.
        entry = cast(StallCallEntry, {**c, "display_api": display_name(c["api"]) if c["api"] is not None else None,
                                      "statement": call_statement(c, read)})
        if position is not None:
            entry["telemetry"] = position(c["pid"], c["start_ns"], c["end_ns"])
        calls.append(entry)
    longest: dict[int, StallCall] = {}
    for c in stalls["calls"]:  # listed longest first
        longest.setdefault(c["pid"], c)
    processes: list[ProcessStallEntry] = [
        {**p, "statement": process_statement(p, longest.get(p["pid"]), stalls["rules"], read)}
        for p in stalls["processes"]
    ]
    return {
        **{k: v for k, v in stalls.items() if k not in ("calls", "ranges", "processes")},  # type: ignore[typeddict-item]
        "processes": processes,
        "ranges": [{**r, "statement": range_statement(r)} for r in stalls["ranges"]],
        "calls": calls,
        "statements": [p["statement"] for p in processes if p["above"]],
    }


def glance_words(s: Stalls) -> str:
    """One line of what the stalls section holds."""
    if not s["blocking_calls"]:
        return words.GLANCE_NO_STALLS
    text = words.GLANCE_STALLS.format(calls=_count(s["blocking_calls"], words.BLOCKING_CALLS),
                                      blocked=ms(s["blocked_ns"]))
    if s["stalls"]:
        text += f"; {s['stalls']:,} of at least {s['rules']['stall_min_ns'] / 1e6:g} ms ({ms(s['stalled_ns'])})"
    return text


# --- two arms ----------------------------------------------------------------------------------------


class ArmStalls(TypedDict):
    """One arm's stalls in the comparison: its sums and its top NVTX range."""

    label: str
    blocking_calls: int
    blocked_ns: int
    waited_ns: int
    stalls: int
    stalled_ns: int
    top_range: str | None
    top_range_calls: int
    top_range_blocked_ns: int
    top_stream: int | None
    top_stream_busy_ns: int
    statement: str


class StallsDifference(TypedDict):
    """The arms' stalls side by side (``arms`` in the comparison's order) and the change in a sentence."""

    arms: list[ArmStalls]
    blocked_ns_change: int
    statement: str


def _arm_stalls(label: str, s: Stalls) -> ArmStalls:
    top = next((r for r in s["ranges"] if r["range"] is not None), None)
    streams: dict[int, int] = {}
    for c in s["calls"]:
        for b in c["behind"] or []:
            streams[b["stream_id"]] = streams.get(b["stream_id"], 0) + b["busy_ns"]
    stream = sorted(streams.items(), key=lambda kv: (-kv[1], kv[0]))[0] if streams else None
    calls = _count(s["blocking_calls"], ("blocking call", "blocking calls"))
    text = words.STALLS_OF_ARM.format(label=label, calls=calls, blocked=ms(s["blocked_ns"]))
    if top is not None and top["blocked_ns"]:
        text += (f"; in {top['range']}: {_count(top['calls'], ('call', 'calls'))}, {ms(top['blocked_ns'])}"
                 + (f", {ms(top['behind'][0]['busy_ns'])} of it behind stream {top['behind'][0]['stream_id']}"
                    if top["behind"] else ""))
    elif stream is not None:
        text += words.STALLS_BEHIND_LISTED.format(busy=ms(stream[1]), stream=stream[0])
    return {
        "label": label, "blocking_calls": s["blocking_calls"], "blocked_ns": s["blocked_ns"],
        "waited_ns": s["waited_ns"], "stalls": s["stalls"], "stalled_ns": s["stalled_ns"],
        "top_range": top["range"] if top is not None else None,
        "top_range_calls": top["calls"] if top is not None else 0,
        "top_range_blocked_ns": top["blocked_ns"] if top is not None else 0,
        "top_stream": stream[0] if stream is not None else None,
        "top_stream_busy_ns": stream[1] if stream is not None else 0,
        "statement": text,
    }


def compare_stalls(arms: Mapping[str, Stalls], labels: Mapping[str, str]) -> StallsDifference:
    """The stalls of the arms (in ``arms``' order), each named by its label, and what changed."""
    said = [_arm_stalls(labels.get(name, name), s) for name, s in arms.items()]
    first, second = said[0], said[-1]
    change = second["blocked_ns"] - first["blocked_ns"]
    statement = "; ".join(a["statement"] for a in said)
    if change:
        statement += (f" ({second['label']} blocked {ms(abs(change))} {'less' if change < 0 else 'more'} than "
                      f"{first['label']})")
    else:
        statement += " (the same time blocked)"
    return {"arms": said, "blocked_ns_change": change, "statement": statement}
