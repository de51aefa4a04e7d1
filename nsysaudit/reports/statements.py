"""The sentences a comparison says about its facts, in words a reviewer can quote.

Each function takes entries of the comparison document (:mod:`nsysaudit.reports.compare`) and
returns a sentence; the sentences are part of the document (``statements``, ``statement``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from nsysaudit.text import byte_size


def _fmt_bytes(values: Iterable[int | None]) -> str:
    vals = list(values)
    shown = " + ".join("unknown" if v is None else f"{v:,}" for v in vals)
    known = [v for v in vals if v is not None]
    if len(vals) > 1:
        total = f"{sum(known):,}" + (" known" if len(known) < len(vals) else "")
        return f"{shown} = {total} bytes"
    return f"{shown} bytes"


def role_words(role: str) -> str:
    return "main thread" if role == "main" else "non-main thread"


def _thread(lc: Mapping[str, Any]) -> str:
    name = "name unknown" if lc["thread_name"] is None else f"thread name {lc['thread_name']}"
    return f"{role_words(lc['thread_role'])}, pid {lc['pid']} tid {lc['tid']}, {name}"


def allocation_statement(arm: str, lc: Mapping[str, Any]) -> str:
    """What one library call allocated in one arm, in words a reviewer can quote."""
    a = lc["allocations"]
    head = f"{arm}: {lc['api']} ({_thread(lc)})"
    parts: list[str] = []
    failed = [c for c in lc["allocation_calls"] if c["return_code"] != 0]
    if failed:
        for c in failed:
            name = c["return_name"] or "unknown code"
            parts.append(
                f"{c['api']} returned {c['return_code']} ({name}), requested bytes "
                f"{'unknown' if c['bytes'] is None else format(c['bytes'], ',')}, "
                f"after {a['succeeded_before_first_failure']} successful nested allocation(s)"
            )
        if a["succeeded"]:
            parts.append(f"{a['succeeded']} successful nested allocation(s) in all: {_fmt_bytes(a['bytes_each'])}")
        else:
            parts.append("no successful nested allocation")
    elif a["succeeded"]:
        parts.append(f"{a['succeeded']} successful nested allocation(s) ({_fmt_bytes(a['bytes_each'])}), none failed")
    else:
        parts.append("no nested allocation call in the trace")
    if lc["coverage"] == "censored":
        parts.append(f"censored ({lc['censored_reason']}): {censored_words(lc)}")
    else:
        parts.append("coverage complete")
    return head + ": " + "; ".join(parts)


def censored_words(lc: Mapping[str, Any]) -> str:
    """Why a library call of interest is censored, in words, with its numbers."""
    reason = lc["censored_reason"]
    last, end = lc.get("cuda_api_last_ns"), lc.get("end_ns")
    if reason == "capture_ended_inside":
        return (
            "the capture ended while it ran (its recorded end is the capture's stop), so what happened in it "
            "after that moment is not in the trace"
        )
    if reason in ("nsys_warned_cuda_events_missing", "cuda_trace_degraded"):
        return "nsys warned that CUDA events may be missing, and no CUDA API record after it shows the trace went on"
    if reason == "cuda_api_trace_ends_inside":
        where = "" if last is None or end is None else f" {end - last:,} ns before the call ends"
        return f"the CUDA API trace stops{where}, so allocations after that moment are not in the trace"
    return f"the trace does not cover it ({reason})"


def _values(values: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in values.items())


def position_statement(arm: str, lc: Mapping[str, Any]) -> str | None:
    """Where a library call falls among its arm's telemetry lines, and the snapshot then in force."""
    pos = lc.get("telemetry")
    if not isinstance(pos, Mapping):
        return None
    parts = []
    after, before, in_force = pos.get("after"), pos.get("before"), pos.get("in_force")
    if after:
        parts.append(f"starts {after['ms']:.3f} ms after {after['event']} (telemetry line {after['line']})")
    if before:
        parts.append(f"ends {before['ms']:.3f} ms before {before['event']} (telemetry line {before['line']})")
    if not parts:
        parts.append("no telemetry line before or after it")
    text = f"{arm}: {lc['api']} " + " and ".join(parts)
    if in_force:
        text += f"; last telemetry snapshot before it: {in_force['event']} (line {in_force['line']}): "
        text += _values(in_force.get("values") or {})
    text += "; alignment checked" if pos.get("verified") else "; alignment NOT checked, positions unverified"
    return text


def when(pos: Any) -> str:
    """ ", 55.672 ms after backward_start (telemetry line 5)": a call's place on the application's clock."""
    if not isinstance(pos, Mapping) or not pos.get("after"):
        return ""
    after = pos["after"]
    checked = "" if pos.get("verified") else ", alignment NOT checked"
    return f", {after['ms']:.3f} ms after {after['event']} (telemetry line {after['line']}{checked})"


def gigabytes(n: int | None) -> str:
    """Bytes as exact digits and a binary unit, as the terminal shows them: ``16,777,216 B (16.0 MiB)``."""
    return "unknown" if n is None else byte_size(n)


def memory_statement(arm: str, moment: str, devices: Iterable[Mapping[str, Any]]) -> str:
    """What the device-memory ledger says at one moment of one arm: live, released before, free at most."""
    parts = []
    devices = list(devices)
    for d in devices:
        released = f" after {gigabytes(d['freed_before_bytes'])} released" if d["freed_before_bytes"] else ""
        total = f" of {gigabytes(d['total_bytes'])}" if d["total_bytes"] is not None else " (device total unknown)"
        free = (
            f", at most {gigabytes(d['free_at_most_bytes'])} free"
            if d["free_at_most_bytes"] is not None
            else ", free memory unknown"
        )
        parts.append(
            f"device {d['device_id']}: live {gigabytes(d['device_resident_live_bytes'])}{total}{released}{free}"
        )
    not_counted = " (traced device memory; contexts and untraced memory not counted)"
    if devices and not any(d.get("process_has_events", True) for d in devices):
        not_counted += "; the process has no memory event, so its device is unknown and every traced device is shown"
    return f"{arm}: at {moment}, " + "; ".join(parts) + not_counted
