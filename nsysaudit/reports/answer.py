"""The answer: what a person reads first, worded once for every output.

``answer(...)`` takes the keys of an analysis document (``analyze --json``) and returns its ``answer``
key: the verdict, one sentence that says it, each finding in words (what failed, inside which call,
on which thread, when on the application's clock, who held the memory then), and what limits or
qualifies the verdict. The terminal, report.md, report.html and ``make demo`` show these sentences
first; the details follow. Every number in them is one of the document's own.
"""

from __future__ import annotations

from collections.abc import Sequence

from nsysaudit import words
from nsysaudit.reports import nccl
from nsysaudit.reports.documents import (
    Answer,
    AnswerCensored,
    AnswerFinding,
    Censored,
    Finding,
    LibraryFailure,
    Memory,
    Position,
    Process,
    TargetDevice,
    Verdict,
)
from nsysaudit.reports.ranks import placement_words
from nsysaudit.reports.statements import CENSORED_WORDS, allocator_words, held_words

MAX_CENSORED = 5

def _thread(f: Finding | Censored) -> str:
    name = f.get("thread_name")
    return f"thread {name if name is not None else '(name unknown)'} (pid {f['pid']}, tid {f['tid']})"


def when_words(position: Position | None) -> str | None:
    """ "55.672 ms after backward_start (telemetry line 5)": a moment on the application's clock, or
    None without telemetry (``verified`` false adds that the alignment is not checked)."""
    after = position["after"] if position is not None else None
    if position is None or after is None:
        return None
    checked = "" if position["verified"] else f", {words.CLOCK_CHECKED[False]}"
    return f"{after['ms']:.3f} ms after {after['event']} (telemetry line {after['line']}{checked})"


def finding_words(f: Finding) -> str:
    """One finding in a sentence: the call, its return, where and on which thread, and what it follows."""
    api = f.get("display_api") or f["api"]
    failed = f"{api} returned {f['return_code']} ({f['return_name'] or 'unknown code'})"
    enc = f.get("enclosing")
    if enc is not None:
        text = f"{failed} inside {nccl.call_words(enc)}, on {_thread(f)}, correlation {f['correlation_id']}"
        helper = enc.get("helper_thread")
        if helper is not None:  # an NCCL call's own thread (analysis/nccl)
            text += f"; {nccl.helper_words(helper)};"
        before = enc.get("allocations_before")
        if before is not None and before["count"]:
            each = " + ".join("unknown" if b is None else f"{b:,}" for b in before["bytes_each"])
            text += words.allocations_before(helper is None, before["count"], each)
        elif before is not None:
            text += words.first_allocation(helper is None)
        mapped = nccl.mapped_words(enc)
        if mapped is not None:
            text += f" and {mapped}"
        return text
    cap = f.get("stream_capture")
    text = f"{failed} on {_thread(f)}, correlation {f['correlation_id']}"
    if cap is not None:
        gap = cap["ns_from_capture_end"]
        since = "an unknown time" if gap is None else f"{gap / 1e6:.3f} ms"
        text += words.after_stream_capture(since, cap["event_records_count"], cap["begin"]["api"], cap["end"]["api"])
    return text


def _short(f: Finding) -> str:
    """A finding in a few words, for the one sentence that says the verdict."""
    api = f.get("display_api") or f["api"]
    text = f"{api} returned {f['return_code']} ({f['return_name'] or 'unknown code'})"
    thread = f.get("thread_name") or f"tid {f['tid']} (name unknown)"
    enc = f.get("enclosing")
    if enc is not None:
        return f"{text} inside {nccl.call_words(enc)} on {thread}"
    if f.get("stream_capture") is not None:
        return words.short_after_stream_capture(text, thread)
    return f"{text} on {thread}"


def answer(
    findings: Sequence[Finding],
    verdict: Verdict,
    reasons: Sequence[str],
    processes: Sequence[Process],
    memory: Memory,
    censored_calls: Sequence[Censored],
    censored_total: int,
    *,
    devices: Sequence[TargetDevice] = (),
    names_devices: bool = False,
    stalls: Sequence[str] = (),
    library_failures: Sequence[LibraryFailure] = (),
) -> Answer:
    """The ``answer`` key of an analysis document (see the module docstring) from its other keys;
    ``censored_calls``: the first :data:`MAX_CENSORED` entries of ``coverage.censored``, of
    ``censored_total``; ``devices`` (the document's ``devices``) and ``names_devices`` (``ranks.shown``): where
    the export has several devices or a stated rank, the findings say where they ran and the holder
    sentences name each device; ``library_failures`` (``telemetry.library_failures``): NCCL's error
    lines tied to a finding are said with it (``reported``); ``stalls``: the host stalls' sentences (the
    ``stalls`` key's ``statements``)."""
    names = {p["global_pid"]: p["name"] for p in processes}
    reports = nccl.reported(library_failures, findings)
    named = devices if names_devices and len(devices) > 1 else None
    points = {p["finding"]: p for p in memory["at"] if p["point"] == "finding" and "finding" in p}
    said: list[AnswerFinding] = []
    for i, f in enumerate(findings):
        point = points.get(i)
        position = f.get("telemetry")
        held = None
        if point is not None and point.get("devices"):
            held = held_words(point, names, named)
            # The allocator's own figures: the line in force, or an earlier one where that has none.
            in_force = position.get("allocator", position["in_force"]) if position is not None else None
            allocator = allocator_words(in_force)
            if allocator:
                held += f" {allocator}"
        placed = placement_words(f, devices, names_devices)  # "rank 1, device 1 (...)": where devices or ranks tell
        entry: AnswerFinding = {
            "finding": i,
            "finding_number": f["number"],
            "kind": f["kind"],
            "what": finding_words(f) + (f"; {placed}" if placed else ""),
            "when": when_words(position),
            "held": held,
        }
        if i in reports:
            entry["reported"] = reports[i]
        said.append(entry)
    censored: list[AnswerCensored] = []
    at_call = {p["lib_id"]: p for p in memory["at"]
               if p["point"] == "censored_library_call" and "lib_id" in p}
    for c in censored_calls[:MAX_CENSORED]:
        why = c.get("reasons") or [c["reason"]]
        point = at_call.get(c["lib_id"])
        censored.append({
            "lib_id": c["lib_id"],
            "what": f"{c['api']} on {_thread(c)}: " + "; ".join(CENSORED_WORDS.get(r, r) for r in why),
            "held": held_words(point, names, named) if point is not None and point.get("devices") else None,
        })
    if findings:
        first = said[0]
        summary = _short(findings[0])
        placed = placement_words(findings[0], devices, names_devices)
        if placed:
            summary += f", {placed}"
        if first["when"]:
            summary += f", {first['when']}"
        if len(findings) > 1:
            summary += f" ({len(findings) - 1} more finding(s) below)"
        limits = list(reasons[1:])
    else:
        summary = reasons[0] if reasons else f"verdict {verdict}"
        limits = list(reasons[1:])
    return {"verdict": verdict, "summary": summary, "findings": said, "censored": censored,
            "censored_total": censored_total, "limits": limits, "stalls": list(stalls)}
