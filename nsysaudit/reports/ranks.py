"""Devices and ranks in the documents: the keys an analysis document gains, and their words.

:func:`document_keys` gives an analysis document its ``devices``, ``launches`` and ``ranks`` keys and
the device and rank keys of each ``processes[]`` entry, :func:`placement` those of each finding
(:mod:`nsysaudit.analysis.devices` decides them). The words are said only where they tell
something: an export of several devices, or one where a process's rank is known
(:func:`names_devices`); a single-device export without ranks reads as it always did.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from nsysaudit import words
from nsysaudit.analysis.devices import LOCAL_RANK_VARIABLES, RANK_VARIABLES, DeviceTruth, TracedProcess
from nsysaudit.core.codes import display_name
from nsysaudit.core.ids import gpid_of
from nsysaudit.core.text import byte_size, size_word
from nsysaudit.read.devices import environment_entry
from nsysaudit.reports.documents import (
    AnalysisKeys,
    ArmRank,
    CaptureDifference,
    ComparisonArm,
    ExpectedCaptureDifference,
    FailingRank,
    Finding,
    LaunchedCommand,
    PairedCall,
    PointDevice,
    Process,
    RankDifferences,
    Ranks,
    TargetDevice,
)
from nsysaudit.words import RANK_RULE


class FindingPlacement(TypedDict):
    """A finding's rank and device: its process's."""

    rank: int | None
    rank_source: str | None
    device_id: int | None
    devices: list[int | None]


def placement(truth: DeviceTruth, global_tid: int | None) -> FindingPlacement:
    """The rank and device of a finding on thread ``global_tid``: its process's. ``device_id`` is the
    process's one device (null when it used several or none: a failed call has no memory event to
    say which)."""
    p = truth.of(gpid_of(global_tid))
    devices = list(p["devices"])
    return {"rank": p["rank"], "rank_source": p["rank_source"],
            "device_id": devices[0] if len(devices) == 1 else None, "devices": devices}


def ranks_key(truth: DeviceTruth, processes: Sequence[Process], findings: Sequence[Finding]) -> Ranks:
    """The document's ``ranks``: which ranks the export states, and the failing ones."""
    known = sorted({p["rank"] for p in processes if p["rank"] is not None})
    failing: list[FailingRank] = [
        {"finding": i, "finding_number": f["number"], "pid": f["pid"], "global_pid": gpid_of(f["global_tid"]),
         "rank": f["rank"], "rank_source": f["rank_source"], "device_id": f["device_id"], "devices": f["devices"]}
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
        "shown": truth.names_devices,
    }


class DocumentKeys(TypedDict):
    processes: list[Process]
    devices: list[TargetDevice]
    launches: list[LaunchedCommand]
    ranks: Ranks


def document_keys(
    truth: DeviceTruth, processes: Sequence[TracedProcess], findings: Sequence[Finding]
) -> DocumentKeys:
    """``processes`` (the analysis' entries: ``pid, global_pid, name``) with their device and rank
    keys, and the document's ``devices``, ``launches`` and ``ranks`` (``findings``: placed by
    :func:`placement`)."""
    procs: list[Process] = [
        {"pid": p["pid"], "global_pid": p["global_pid"], "name": p["name"], **truth.of(p["global_pid"])}
        for p in processes
    ]
    return {
        "processes": procs,
        "devices": list(truth.devices),
        "launches": list(truth.launches),
        "ranks": ranks_key(truth, procs, findings),
    }


def device_words(device: TargetDevice | None, device_id: int | None) -> str:
    """ "device 1 (NVIDIA H200, 0000:00:07.0)": a device as the export names it."""
    if device is None:
        return f"device {device_id}"
    said = ", ".join(x for x in (device["name"], device["bus_location"]) if x)
    return f"device {device_id}" + (f" ({said})" if said else "")


def placement_words(f: Finding, devices: Sequence[TargetDevice], names_devices: bool) -> str | None:
    """Where a finding ran, in words, when the document shows devices and ranks (``names_devices``, its
    ``ranks.shown``): "rank 1, device 1 (NVIDIA H200, 0000:00:07.0)"; None otherwise. ``devices``: the
    document's ``devices``."""
    if not names_devices:
        return None
    rank = "rank unknown" if f["rank"] is None else f"rank {f['rank']}"
    if f["device_id"] is not None:
        d = next((d for d in devices if d["device_id"] == f["device_id"]), None)
        where = device_words(d, f["device_id"])
    elif f["devices"]:
        where = words.DEVICES_WHICH_UNKNOWN.format(devices=", ".join(str(i) for i in f["devices"]))
    else:
        where = words.DEVICE_UNKNOWN_NO_EVIDENCE
    return f"{rank}, {where}"


def names_devices(doc: AnalysisKeys) -> bool:
    """Whether reports for people name devices and ranks (the document's ``ranks.shown``)."""
    return doc["ranks"]["shown"]


def failing_statement(failing: Sequence[FailingRank], processes: Mapping[int | None, Process]) -> str | None:
    """ "rank 1 failed (pid 851, device 1)": which rank(s) the findings are in; None without findings."""
    if not failing:
        return None
    parts = []
    seen: set[tuple[int | None, int | None]] = set()
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


def device_lines(doc: AnalysisKeys) -> list[str]:
    """One line per device (identity, total, who used it, with ranks) and per launched command's
    rank claims, for the terminal's and report.md's details; empty when :func:`names_devices` is false."""
    if not names_devices(doc):
        return []
    procs = {p["global_pid"]: p for p in doc["processes"]}
    lines = []
    for d in doc["devices"]:
        total = "total unknown" if d["total_bytes"] is None else byte_size(d["total_bytes"])
        cuda = "" if d["cuda_device"] is None else f", nsys's CUDA device {d['cuda_device']}"
        users = []
        for g in d["global_pids"]:
            p = procs.get(g)
            if p is None:  # not a process of the document (it lists every one that used a device)
                users.append("pid None (rank unknown)")
                continue
            rank = "rank unknown" if p["rank"] is None else f"rank {p['rank']}"
            ordinal = next((e["cuda_device"] for e in p["device_evidence"]
                            if e["device_id"] == d["device_id"] and e["cuda_device"] is not None), None)
            seen_as = "" if ordinal is None else f", its cuda:{ordinal}"
            users.append(f"pid {p['pid']} ({rank}{seen_as})")
        used = "; used by " + ", ".join(users) if users else words.DEVICE_UNUSED
        peak = d["peak_device_resident_live_bytes"]
        held = "" if peak is None else f"; peak held {size_word(peak)}"
        lines.append(f"{device_words(d, d['device_id'])}: {total}{cuda}{used}{held}")
    statement = doc["ranks"]["statement"]
    if statement:
        lines.append(statement)
    return lines


# --- two ranks of one job as the arms of a comparison ------------------------------------------------

ARMS = ("observe", "release")




# A launched command as recorded: its command and arguments.
Command = tuple[str | None, list[str]]


def _arm_rank(arm: ComparisonArm) -> tuple[ArmRank, list[Command]]:
    """What one arm's document states about its rank and device, and its launched commands."""
    processes = [p for p in arm["processes"] if p["rank"] is not None]
    stated = sorted({p["rank"] for p in processes if p["rank"] is not None})
    one = processes[0] if len(stated) == 1 else None
    used = {d for p in processes for d in p["devices"]}
    # in the order a process's own devices are listed: by id, an unknown one (None) last
    devices = sorted(used, key=lambda d: (d is None, d or 0)) if one else []
    said: ArmRank = {
        "ranks": stated,
        "rank": stated[0] if len(stated) == 1 else None,
        "rank_source": one["rank_source"] if one is not None and len(processes) == 1 else None,
        "pid": one["pid"] if one is not None and len(processes) == 1 else None,
        "devices": devices,
        "world_size": one["world_size"] if one is not None else None,
        "failing_ranks": list(arm["ranks"]["failing_ranks"]),
    }
    return said, [(launch["command"], launch["arguments"]) for launch in arm["launches"]]


def _holder(devices: Sequence[PointDevice], named: Mapping[int | None, TargetDevice]) -> str:
    parts = []
    for d in devices:
        procs = sorted(d["processes"], key=lambda p: -p["resident_bytes"])
        top = (f"most by pid {procs[0]['pid']} ({size_word(procs[0]['resident_bytes'])})" if procs
               else "by no traced process")
        total = "" if d["total_bytes"] is None else f" of {size_word(d['total_bytes'])}"
        free = d["free_at_most_bytes"]
        bound = "free memory unknown" if free is None else f"at most {byte_size(free)} free"
        parts.append(f"{device_words(named.get(d['device_id']), d['device_id'])} held "
                     f"{size_word(d['device_resident_live_bytes'])}{total}, {top}; {bound}")
    return "; ".join(parts) or "no ledger at it"


def rank_differences(arms: Mapping[str, ComparisonArm], pairs: Sequence[PairedCall]) -> RankDifferences:
    """The comparison's ``differences.ranks``: which rank each arm is, whether they are two ranks of
    one job, and what differs between them at the paired library calls: who held each rank's device
    (the holder), how much could have been free (the headroom), and the nested calls (the library
    calls). ``statements`` is empty unless each arm states one rank and the ranks differ. ``pairs``:
    the comparison's ``differences.library_calls`` (maps, as :mod:`nsysaudit.reports.compare` pairs
    them)."""
    each, commands = {}, {}
    for n in ARMS:
        each[n], commands[n] = _arm_rank(arms[n])
    o, r = each["observe"], each["release"]
    two = o["rank"] is not None and r["rank"] is not None and o["rank"] != r["rank"]
    same_job: bool | None = None
    why = words.SAME_JOB_WHY["no_two_ranks"]
    if two:
        sizes = {o["world_size"], r["world_size"]}
        if None not in sizes and len(sizes) > 1:
            same_job, why = False, words.SAME_JOB_WHY["world_sizes"].format(observe=o["world_size"],
                                                                            release=r["world_size"])
        elif commands["observe"] and commands["observe"] == commands["release"]:
            same_job = True
            why = words.SAME_JOB_WHY["same_command"] + (
                f", world size {o['world_size']}" if o["world_size"] is not None and None not in sizes else "")
        else:
            why = words.SAME_JOB_WHY["commands"]
    return {
        "observe": o,
        "release": r,
        "two_ranks": two,
        "same_job": same_job,
        "same_job_evidence": why if two else None,
        "statements": _rank_statements(arms, each, same_job, why, pairs) if two else [],
    }


def _rank_statements(
    arms: Mapping[str, ComparisonArm], each: Mapping[str, ArmRank], same_job: bool | None, why: str,
    pairs: Sequence[PairedCall],
) -> list[str]:
    """:func:`rank_differences`' statements, where the arms are two ranks."""
    named = {n: {d["device_id"]: d for d in arms[n]["devices"]} for n in ARMS}

    def who(n: str) -> str:
        e = each[n]
        on = ", ".join(device_words(named[n].get(i), i) for i in e["devices"]) or "device unknown"
        return f"rank {e['rank']} ({n}{'' if e['pid'] is None else ', pid ' + str(e['pid'])}, on {on})"

    failing = [n for n in ARMS if each[n]["failing_ranks"]]
    head = words.TWO_RANKS.format(observe=who("observe"), release=who("release"))
    if same_job is True:
        head += f", of one job ({why})"
    elif same_job is False:
        head += f", not of one job: {why}"
    if len(failing) == 1:
        healthy = ARMS[1 - ARMS.index(failing[0])]
        head += words.FAILING_AGAINST_HEALTHY.format(failing=each[failing[0]]["rank"], healthy=each[healthy]["rank"])
    statements = [head]
    for pair in pairs:
        observe, release = pair["observe"], pair["release"]
        if observe is None or release is None:
            continue
        mk = pair["match_key"]
        call = words.RANK_CALL[mk["thread_role"] == "other"].format(api=mk["api"], ordinal=mk["ordinal"])
        for n, p in (("observe", observe), ("release", release)):
            failed = p["failed_allocations"]
            calls = (f"{p['nested_allocations_succeeded']} nested allocation(s) succeeded"
                     + (f", then {display_name(failed[0]['api'])} returned {failed[0]['return_code']}"
                        f" ({failed[0]['return_name'] or 'unknown code'})" if failed else ", none failed"))
            statements.append(words.RANK_AT_CALL.format(call=call, rank=each[n]["rank"], calls=calls,
                                                        holder=_holder(p["memory_at_start"], named[n])))
    return statements


# Environment variables that name a rank's own identity: two ranks of one job differ in them by construction.
# torchrun also sets ROLE_RANK (the rank among workers of its role) and GROUP_RANK (its agent's, the
# node's): in the real per-rank captures (h200-cuda13-nsys2025.3/ranks/) ROLE_RANK differs with RANK.
IDENTITY_VARIABLES = (*RANK_VARIABLES, *LOCAL_RANK_VARIABLES, "ROLE_RANK", "GROUP_RANK", "CUDA_VISIBLE_DEVICES")
IDENTITY_WHY = words.IDENTITY_WHY


def environment_differences(
    key: str, observe: Sequence[str] | None, release: Sequence[str] | None
) -> tuple[list[CaptureDifference], list[ExpectedCaptureDifference]]:
    """A launched command's recorded environment (``PROCESS_n:ENVIRONMENT_VARIABLE`` rows) compared
    variable by variable: (differs, differs as expected), each row ``key`` (``KEY:NAME``),
    ``observe``, ``release`` (the values, or None where the variable is not recorded)."""
    sides = [dict(environment_entry(v) for v in values or []) for values in (observe, release)]
    differs: list[CaptureDifference] = []
    expected: list[ExpectedCaptureDifference] = []
    for name in sorted(set(sides[0]) | set(sides[1])):
        o, r = sides[0].get(name), sides[1].get(name)
        if o == r:
            continue
        row: CaptureDifference = {"key": f"{key}:{name}", "observe": None if o is None else [o],
                           "release": None if r is None else [r]}
        if name in IDENTITY_VARIABLES:
            expected.append({**row, "why": IDENTITY_WHY})
        else:
            differs.append(row)
    return differs, expected
