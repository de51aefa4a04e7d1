"""Devices and ranks in the documents: the keys an analysis document gains, and their words.

:func:`document_keys` gives an analysis document its ``devices``, ``launches`` and ``ranks`` keys,
the device and rank keys of each ``processes[]`` entry and of each finding
(:mod:`nsysaudit.analysis.devices` decides them). The words are said only where they tell
something: an export of several devices, or one where a process's rank is known
(:func:`shown`); a single-device export without ranks reads as it always did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, cast

from nsysaudit.analysis.devices import RANK_RULE, DeviceTruth
from nsysaudit.core.ids import gpid_of
from nsysaudit.core.text import byte_size, size_word
from nsysaudit.reports.documents import FailingRank, Finding, LaunchedCommand, Process, Ranks, TargetDevice


def _placed(truth: DeviceTruth, finding: Finding) -> None:
    """Give a finding its rank and device: its process's (in place). ``device_id`` is the process's one
    device (null when it used several or none: a failed call has no memory event to say which)."""
    p = truth.of(gpid_of(finding.get("global_tid")))
    devices = list(p["devices"])
    finding["rank"] = p["rank"]
    finding["rank_source"] = p["rank_source"]
    finding["device_id"] = devices[0] if len(devices) == 1 else None
    finding["devices"] = devices


def ranks_key(truth: DeviceTruth, processes: Sequence[Process], findings: Sequence[Finding]) -> Ranks:
    """The document's ``ranks``: which ranks the export states, and the failing ones."""
    known = sorted({p["rank"] for p in processes if p["rank"] is not None})
    failing: list[FailingRank] = [
        {"finding": i, "pid": f["pid"], "global_pid": gpid_of(f["global_tid"]), "rank": f["rank"],
         "rank_source": f["rank_source"], "device_id": f["device_id"], "devices": f["devices"]}
        for i, f in enumerate(findings)
    ]
    return {
        "rule": RANK_RULE,
        "processes": len(processes),
        "processes_with_rank": sum(1 for p in processes if p["rank"] is not None),
        "ranks": known,
        "failing": failing,
        "failing_ranks": sorted({f["rank"] for f in failing if f["rank"] is not None}),
        "failing_rank_unknown": sum(1 for f in failing if f["rank"] is None),
        "statement": failing_statement(failing, {p["global_pid"]: p for p in processes}),
        "shown": truth.shown,
    }


class DocumentKeys(TypedDict):
    processes: list[Process]
    devices: list[TargetDevice]
    launches: list[LaunchedCommand]
    ranks: Ranks


def document_keys(truth: DeviceTruth, processes: Sequence[Mapping[str, Any]], findings: list[Finding]) -> DocumentKeys:
    """``processes`` with their device and rank keys, ``findings`` given theirs (in place), and the
    document's ``devices``, ``launches`` and ``ranks``."""
    procs = [cast(Process, {**dict(p), **truth.of(p.get("global_pid"))}) for p in processes]
    for f in findings:
        _placed(truth, f)
    return {
        "processes": procs,
        "devices": cast(list[TargetDevice], truth.devices),
        "launches": cast(list[LaunchedCommand], truth.launches),
        "ranks": ranks_key(truth, procs, findings),
    }


def device_words(device: Mapping[str, Any] | None, device_id: Any) -> str:
    """ "device 1 (NVIDIA H200, 0000:00:07.0)": a device as the export names it."""
    if device is None:
        return f"device {device_id}"
    said = ", ".join(str(x) for x in (device.get("name"), device.get("bus_location")) if x)
    return f"device {device_id}" + (f" ({said})" if said else "")


def placement_words(f: Mapping[str, Any], devices: Sequence[Mapping[str, Any]], shown: bool) -> str | None:
    """Where a finding ran, in words, when the document shows devices and ranks (``shown``, its
    ``ranks.shown``): "rank 1, device 1 (NVIDIA H200, 0000:00:07.0)"; None otherwise. ``devices``: the
    document's ``devices``."""
    if not shown or "rank" not in f:
        return None
    rank = "rank unknown" if f["rank"] is None else f"rank {f['rank']}"
    if f["device_id"] is not None:
        d = next((d for d in devices if d["device_id"] == f["device_id"]), None)
        where = device_words(d, f["device_id"])
    elif f["devices"]:
        where = "devices " + ", ".join(str(i) for i in f["devices"]) + " (which one the failed call used is unknown)"
    else:
        where = "device unknown (the process has no memory event and no CUDA context in the export)"
    return f"{rank}, {where}"


def shown(doc: Mapping[str, Any]) -> bool:
    """Whether reports for people name devices and ranks (the document's ``ranks.shown``)."""
    ranks = doc.get("ranks")
    return bool(isinstance(ranks, Mapping) and ranks.get("shown"))


def failing_statement(failing: Sequence[FailingRank], processes: Mapping[int, Process]) -> str | None:
    """ "rank 1 failed (pid 851, device 1)": which rank(s) the findings are in; None without findings."""
    if not failing:
        return None
    parts = []
    seen: set[Any] = set()
    for f in failing:
        key = (f["global_pid"], f["rank"])
        if key in seen:
            continue
        seen.add(key)
        where = "" if f["device_id"] is None else f", device {f['device_id']}"
        if f["rank"] is not None:
            parts.append(f"rank {f['rank']} (pid {f['pid']}{where}; {f['rank_source']})")
        else:
            known = processes.get(f["global_pid"]) if f["global_pid"] is not None else None
            why = (known["rank_unknown"] if known is not None else None) or "no row states it"
            parts.append(f"pid {f['pid']}{where}, rank unknown: {why}")
    return "failing: " + "; ".join(parts)


def device_lines(doc: Mapping[str, Any]) -> list[str]:
    """One line per device (identity, total, who used it, with ranks) and per launched command's
    rank claims, for the terminal's and report.md's details; empty when :func:`shown` is false."""
    if not shown(doc):
        return []
    procs = {p["global_pid"]: p for p in doc.get("processes", [])}
    lines = []
    for d in doc.get("devices", []):
        total = "total unknown" if d["total_bytes"] is None else byte_size(d["total_bytes"])
        cuda = "" if d["cuda_device"] is None else f", nsys's CUDA device {d['cuda_device']}"
        users = []
        for g in d["global_pids"]:
            p = procs.get(g) or {}
            rank = "rank unknown" if p.get("rank") is None else f"rank {p['rank']}"
            ordinal = next((e["cuda_device"] for e in p.get("device_evidence", [])
                            if e["device_id"] == d["device_id"] and e["cuda_device"] is not None), None)
            seen_as = "" if ordinal is None else f", its cuda:{ordinal}"
            users.append(f"pid {p.get('pid')} ({rank}{seen_as})")
        used = "; used by " + ", ".join(users) if users else "; no traced process used it"
        peak = d.get("peak_device_resident_live_bytes")
        held = "" if peak is None else f"; peak held {size_word(peak)}"
        lines.append(f"{device_words(d, d['device_id'])}: {total}{cuda}{used}{held}")
    ranks = doc.get("ranks") or {}
    if ranks.get("statement"):
        lines.append(str(ranks["statement"]))
    return lines
