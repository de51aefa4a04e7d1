"""The sentences a comparison says about its facts, in words a reviewer can quote.

Each function takes entries of the comparison document (:mod:`nsysaudit.reports.compare`) and
returns a sentence; the sentences are part of the document (``statements``, ``statement``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, cast

from nsysaudit import words
from nsysaudit.analysis.allocator import AllocatorPoint, Frame, Stack
from nsysaudit.analysis.ledger import CoveredPoint, LedgerPoint
from nsysaudit.core.codes import display_name
from nsysaudit.core.text import byte_size, size_word
from nsysaudit.reports.documents import (
    ArmLibraryCall,
    FreeCallsWithoutEvent,
    FreedNeverAllocated,
    Moment,
    PointDevice,
    PointProcess,
    Position,
    TargetDevice,
    VirtualMemory,
)
from nsysaudit.reports.ranks import device_words


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


def _thread(lc: ArmLibraryCall) -> str:
    name = "name unknown" if lc["thread_name"] is None else f"thread name {lc['thread_name']}"
    return f"{role_words(lc['thread_role'])}, pid {lc['pid']} tid {lc['tid']}, {name}"


def allocation_statement(arm: str, lc: ArmLibraryCall) -> str:
    """What one library call allocated in one arm, in words a reviewer can quote."""
    a = lc["allocations"]
    head = f"{arm}: {lc['api']} ({_thread(lc)})"
    parts: list[str] = []
    failed = [c for c in lc["allocation_calls"] if c["return_code"] != 0]
    if failed:
        for c in failed:
            name = c["return_name"] or "unknown code"
            parts.append(
                f"{display_name(c['api'])} returned {c['return_code']} ({name}), requested bytes "
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


def censored_words(lc: ArmLibraryCall) -> str:
    """Why a library call of interest is censored, in words, with its numbers."""
    reason = lc["censored_reason"]
    last, end = lc["cuda_api_last_ns"], lc["end_ns"]
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


# Why a library call is censored, in words (the reasons of nsysaudit.analysis.coverage); worded once.
CENSORED_WORDS = {
    "capture_ended_inside": "the capture ended inside it: its true end and duration are unknown",
    "capture_began_inside": "it began before the capture started",
    "cuda_trace_degraded": "nsys warned that CUDA tracing was degraded",
    "nsys_warned_cuda_events_missing": "nsys warned that not all CUDA events might have been collected",
    "cuda_api_trace_ended_before_call": "the process's CUDA API trace ended before it began",
    "cuda_api_trace_ends_inside": "the process's CUDA API trace ends inside it, and no nsys diagnostics confirm "
    "the capture went on without losing events",
    "no_cuda_api_trace": "the export has no CUDA API trace",
    "no_cuda_api_trace_for_process": "its process has no CUDA API records",
    "library_call_has_no_end": "the range has no end",
    "library_call_has_no_start": "the range has no start",
    "library_call_reversed": "the range ends before it starts",
    "library_call_has_no_thread": "the range has no thread",
    "library_call_outside_capture": "the range ends after the capture stopped, which nsys never records: its times "
    "are damaged",
}


# What a non-zero return says about its call (nsysaudit.core.codes.return_class), in words.
CLASSIFICATION_WORDS = {
    "failure": "failure",
    "reports_earlier_error": "reports an earlier error",
    "not_ready_poll": "not ready (a poll)",
}

# How memory is held (nsysaudit.analysis.ledger.MECHANISMS), in words.
MECHANISM_WORDS = {
    "segments": "plain allocations (cudaMalloc, cuMemAlloc)",
    "mapped": "mapped (virtual memory: cuMemSetAccess to cuMemUnmap)",
    "pool": "CUDA memory pool allocations (cudaMallocAsync)",
    "imported_pool": "allocations from an imported pool",
    "static": "driver module memory (correlation id 0)",
    "managed": "managed memory",
    "host": "host or unknown kinds",
}

# Allocations no single named API call made (``memory.devices[].processes[].allocations_by_call[].call``).
CALL_WORDS = {"driver": "driver-allocated (correlation id 0)", "no_single_call": "no single API call"}


def virtual_memory_words(vmm: VirtualMemory | None) -> str | None:
    """What the virtual memory calls did, in a sentence (None when there were none)."""
    if vmm is None or not (vmm["mapped_events"] or vmm["handles_created"] or vmm["address_reservations"]):
        return None
    return (f"virtual memory: {vmm['mapped_events']:,} mapping(s), {vmm['unmapped_events']:,} unmapping(s); "
            f"{vmm['handles_created']:,} handle(s) created, {vmm['handles_released']:,} released; "
            f"{vmm['address_reservations']:,} address range(s) reserved (not memory; sizes not in the trace)")


def free_calls_without_event_words(gaps: FreeCallsWithoutEvent | None) -> str | None:
    """The successful free calls with no deallocation event of their own, and what the bounds assume
    of them (None when there are none). API names are trace text: escape where shown."""
    if gaps is None or not gaps["count"]:
        return None
    return (f"{gaps['count']:,} successful free call(s) without a deallocation event ("
            + ", ".join(f"{n:,} x {display_name(api)}" for api, n in gaps["by_api"].items())
            + "; e.g. correlation " + ", ".join(str(c) for c in gaps["example_correlation_ids"])
            + "): cudaFree(NULL) frees nothing; the bounds after them assume none freed memory")


def freed_never_allocated_words(unseen: FreedNeverAllocated | None) -> str | None:
    """Deallocations of memory the trace never saw allocated (None when there are none)."""
    if unseen is None or not unseen["events"]:
        return None
    return (f"{unseen['events']:,} deallocation(s) ({unseen['bytes']:,} B) of memory allocated before the "
            "capture began: live bytes are a lower bound")


def censored_reasons_words(reasons: Sequence[str]) -> str:
    """Why a library call is censored: each reason in words, most telling first."""
    return "; ".join(CENSORED_WORDS.get(r, r) for r in reasons)


def _values(values: Mapping[str, int | float]) -> str:
    return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in values.items())


def position_statement(arm: str, lc: ArmLibraryCall) -> str | None:
    """Where a library call falls among its arm's telemetry lines, and the snapshot then in force."""
    pos = lc["telemetry"]
    if pos is None:
        return None
    parts = []
    after, before, in_force = pos["after"], pos["before"], pos["in_force"]
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
    text += f"; {words.CLOCK_CHECKED[pos['verified']]}"
    return text


def when(pos: Position | None) -> str:
    """ ", 55.672 ms after backward_start (telemetry line 5)": a call's place on the application's clock."""
    after = pos["after"] if pos is not None else None
    if pos is None or after is None:
        return ""
    checked = "" if pos["verified"] else f", {words.CLOCK_CHECKED[False]}"
    return f", {after['ms']:.3f} ms after {after['event']} (telemetry line {after['line']}{checked})"


def moment_words(point: LedgerPoint) -> str:
    """A ledger point's moment in words: "the failure", "cublasCreate_v2's start", "telemetry line 4 (handoff)"."""
    kind, label = point["point"], point["label"]
    if kind == "finding":
        return "the failure"
    if kind == "library_call":
        return f"{label}'s start"
    if kind == "censored_library_call":
        return f"{label}'s start (a censored call)"
    if kind == "telemetry":
        return f"telemetry line {point.get('line')} ({label})"
    return f"{kind} {label}"


def _held(p: PointProcess, *, pool_first: bool) -> list[str]:
    """What one process holds on a device, by mechanism, most first."""
    m = p["by_mechanism"]
    parts = []
    if m["pool_reserved"]:
        # More in use than the pool holds cannot be: the events contradict themselves (warned).
        use = (f"{size_word(m['pool_utilized'])} of it in use" if m["pool_utilized"] <= m["pool_reserved"] else
               f"its use unknown: the events say {size_word(m['pool_utilized'])}, more than the pool")
        parts.append(f"{size_word(m['pool_reserved'])} in its CUDA memory pool ({use})")
    if m["mapped"]:
        parts.append(f"{size_word(m['mapped'])} mapped (virtual memory: cuMemMap, cuMemSetAccess)")
    if m["segments"]:
        outside = " outside it" if m["pool_reserved"] and pool_first else ""
        parts.append(f"{size_word(m['segments'])} allocated{outside} (cudaMalloc, cuMemAlloc)")
    if m["static"]:
        parts.append(f"{size_word(m['static'])} of the driver's module memory")
    if p["imported_pool_bytes"]:
        parts.append(f"{size_word(p['imported_pool_bytes'])} from a pool imported from another process (counted there)")
    return parts or ["nothing on the device"]


def holder_statement(
    point: CoveredPoint,
    names: Mapping[int | None, str | None],
    *,
    gap_examples: Iterable[int] = (),
    in_force: Moment | None = None,
    devices: Iterable[TargetDevice] | None = None,
) -> str:
    """Who held the device at one ledger point, in one sentence: how much of the device's total was
    held, by which traced process and mechanism, the bound on free memory and what it assumes; the
    allocator's own reserved-but-unused figure when the telemetry line in force carries one.

    ``names``: process names by global pid (trace text: escaped where shown); ``devices``: the
    document's ``devices``, given when the export has several: each device is then named."""
    out = held_words(point, names, devices)
    gaps = point.get("free_calls_without_event_before") or 0
    if gaps:
        ids = ", ".join(str(i) for i in gap_examples)
        out += (f" The bound assumes that the {gaps} earlier free call(s) without a deallocation event"
                f"{f' (correlation {ids})' if ids else ''} freed nothing, as cudaFree(NULL) does.")
    allocator = allocator_words(in_force)
    return out + (f" {allocator}" if allocator else "")


def allocator_words(in_force: Moment | None) -> str | None:
    """What the allocator itself said in the telemetry line in force, when it carries PyTorch's
    ``reserved`` and ``allocated``: "Telemetry line 4 (handoff), the allocator's own figures: reserved
    but unused 138.5 GiB (reserved ... B, allocated ... B)." None otherwise."""
    if in_force is None:
        return None
    values = in_force.get("values") or {}
    reserved, allocated = values.get("reserved"), values.get("allocated")
    if type(reserved) is not int or type(allocated) is not int:
        return None
    return (f"Telemetry line {in_force['line']} ({in_force['event']}), the allocator's own figures: reserved but "
            f"unused {size_word(reserved - allocated)} (reserved {reserved:,} B, allocated {allocated:,} B).")


def held_words(
    point: LedgerPoint, names: Mapping[int | None, str | None], named: Iterable[TargetDevice] | None = None
) -> str:
    """The first sentence of :func:`holder_statement`: held, by whom and how, and the bound; each
    device named as the export names it when ``named`` (the document's ``devices``) is given."""
    moment = moment_words(point)
    known = None if named is None else {(d["vm"], d["device_id"]): d for d in named}
    sentences = []
    devices = point["devices"]
    role = {"finding": "the failing process", "library_call": "the calling process",
            "censored_library_call": "the calling process"}.get(point["point"])

    def who(p: PointProcess, several: bool) -> str:
        name = names.get(p["global_pid"])
        mine = several and role is not None and p["pid"] == point["pid"]
        extra = ", ".join(x for x in (name, role if mine else None) if x)
        return f"pid {p['pid']}" + (f" ({extra})" if extra else "")

    for d in devices:
        total = d["total_bytes"]
        held = d["device_resident_live_bytes"]
        procs = [p for p in d["processes"] if p["resident_bytes"] or p["imported_pool_bytes"]]
        of_total = f" of {size_word(total)}" if total is not None else ""
        prefix = f"device {d['device_id']}: " if len(devices) > 1 else ""
        if known is not None:
            prefix = f"{device_words(known.get((d['vm'], d['device_id'])), d['device_id'])}: "

        head = f"{prefix}{size_word(held)}{of_total} held at {moment}"
        if not procs:
            text = f"{head}: no traced process held device memory then"
        elif len(procs) == 1:
            text = f"{head}, all by {who(procs[0], False)}: " + ", ".join(_held(procs[0], pool_first=True))
        else:
            text = f"{head} by {len(procs)} traced processes: " + "; ".join(
                f"{who(p, True)}: " + ", ".join(_held(p, pool_first=True)) for p in procs
            )
        if d.get("bound_unknown"):
            text += f"; {d['bound_unknown']}"
        elif d["free_at_most_bytes"] is not None:
            text += f"; at most {byte_size(d['free_at_most_bytes'])} free"
        else:
            text += "; the device's total is unknown, so free memory is unknown"
        managed = d["managed_live_bytes"]
        if managed:
            text += f" (managed memory, {size_word(managed)}, may reside on the host: not counted)"
        if not d["process_has_events"]:
            text += (f"; pid {point['pid']} has no memory event, so the trace does not say which device it used: "
                     "every traced device is shown")
        sentences.append(text)
    if not sentences:
        return f"At {moment} the ledger cannot be read: {point.get('unknown', 'no device is known')}."
    return "; ".join(sentences) + "."


# The mechanisms a change between two moments, or between the arms, is told by.
Held = Literal["pool_reserved", "segments", "mapped"]
_VERBS: dict[Held, tuple[str, str]] = {
    "pool_reserved": ("grew its CUDA memory pool by", "trimmed its CUDA memory pool by"),
    "segments": ("allocated", "freed"),
    "mapped": ("mapped", "unmapped"),
}
_HELD_WORDS: tuple[tuple[Held, str], ...] = (
    ("pool_reserved", "CUDA memory pools"), ("segments", "plain allocations"), ("mapped", "mapped memory"),
)


def _by_pid(devices: Iterable[PointDevice]) -> dict[tuple[int | None, int], PointProcess]:
    return {(d["device_id"], p["global_pid"]): p for d in devices for p in d["processes"]}


def change_statement(
    arm: str, before: str, before_devices: Iterable[PointDevice], after: str, after_devices: Iterable[PointDevice],
) -> str:
    """What the traced processes of one arm took or gave back between two ledger points, by mechanism:
    "release: between telemetry line 4 (handoff) and cublasCreate_v2's start, pid 845 trimmed its CUDA
    memory pool by 138.3 GiB; held 139.1 GiB then, 768.3 MiB after"."""
    before_devices, after_devices = list(before_devices), list(after_devices)
    was, now = _by_pid(before_devices), _by_pid(after_devices)
    said = []
    for key in sorted(set(was) | set(now), key=lambda k: (str(k[0]), k[1])):
        old, new = was.get(key), now.get(key)
        verbs = []
        for mechanism, (up, down) in _VERBS.items():
            change = (new["by_mechanism"][mechanism] if new else 0) - (old["by_mechanism"][mechanism] if old else 0)
            if change:
                verbs.append(f"{up if change > 0 else down} {size_word(abs(change))}")
        if verbs:
            proc = new or old
            said.append(f"pid {proc['pid'] if proc else None} " + ", ".join(verbs))
    held = [sum(d["device_resident_live_bytes"] for d in ds) for ds in (before_devices, after_devices)]
    tail = f"{size_word(held[0])} held before, {size_word(held[1])} after"
    what = "; ".join(said) if said else "no traced process took or gave back device memory"
    return f"{arm}: between {before} and {after}, {what}; {tail}"


def arms_memory_statement(moment: str, observe: Iterable[PointDevice], release: Iterable[PointDevice]) -> str:
    """How the two arms' device memory differed at the same moment: held in all, by mechanism, and
    the bound on free memory."""
    arms = {"observe": list(observe), "release": list(release)}
    held = {n: sum(d["device_resident_live_bytes"] for d in ds) for n, ds in arms.items()}
    free = {n: [d["free_at_most_bytes"] for d in ds] for n, ds in arms.items()}
    diff = held["release"] - held["observe"]
    head = (
        f"At {moment} the release arm held {size_word(abs(diff))} {'less' if diff < 0 else 'more'} device memory "
        f"than the observe arm ({size_word(held['release'])} against {size_word(held['observe'])})"
        if diff
        else f"At {moment} both arms held the same device memory ({size_word(held['observe'])})"
    )
    parts = []
    for mechanism, label in _HELD_WORDS:
        o, r = (sum(d["by_mechanism"][mechanism] for d in arms[n]) for n in ("observe", "release"))
        if o != r:
            parts.append(f"{label} {size_word(abs(r - o))} {'smaller' if r < o else 'larger'}")
    if parts:
        head += ": " + ", ".join(parts)
    known = {n: [v for v in vs if v is not None] for n, vs in free.items()}
    if all(len(known[n]) == len(free[n]) > 0 for n in free):
        head += (f"; at most {byte_size(sum(known['release']))} free in release against "
                 f"{byte_size(sum(known['observe']))} in observe")
    return head


def _site(stack: Stack | None) -> str:
    """Where a stack allocated, in words: its outermost frame (the script's line), and its innermost
    when that is another ("in convert (module.py:1370) from snap_workload.py:18")."""
    if stack is None:
        return "before the snapshot's history"
    frames = stack["frames"]
    if not frames:
        return "with no Python frame recorded"

    def at(f: Frame) -> str:
        return f"{f['filename']}:{f['line']}" if f["line"] is not None else f["filename"]

    outer, inner = frames[-1], frames[0]
    if stack["frames_total"] > len(frames) or inner is not outer:
        return f"in {inner['name']} ({at(inner)}) from {at(outer)}"
    return f"at {at(outer)} ({outer['name']})"


def allocator_statement(point: AllocatorPoint, stacks: Mapping[tuple[int, int], Stack]) -> str:
    """The allocator at one moment, in one sentence per device (``allocator.at[].statement``): what it
    reserved, how much of that was inactive and in how many ranges, who last used the most of it, and
    what the trace shows outside its segments. ``stacks``: the section's stacks by (snapshot, stack)."""
    moment = moment_words(cast(LedgerPoint, point))
    said = []
    for s in point["states"]:
        pid = point["pid"]
        who = f"pid {pid}'s caching allocator" if pid is not None else "the caching allocator"
        if s["history"] in ("before", "not_placed"):
            why = ("its history begins after it" if s["history"] == "before"
                   else "its history cannot be placed on the trace clock")
            said.append(f"At {moment}, {who} is not known from snapshot {s['snapshot']}: {why}.")
            continue
        reserved, inactive = s["reserved_bytes"] or 0, s["inactive_bytes"] or 0
        when_words = f"At {moment}" if s["history"] == "within" else (
            f"At its history's last entry, {(s['ns_after_history'] or 0) / 1e6:,.3f} ms before {moment}")
        out = (f"{when_words}, {who} (snapshot {s['snapshot']}) held {size_word(reserved)} reserved "
               f"({reserved:,} B): {size_word(inactive)} of it inactive (reserved, requested by no live "
               f"allocation) in {s['inactive_ranges']} range(s)")
        sizes = s["largest_inactive_bytes"]
        largest = [f"{size_word(v)} ({k})" for k, v in (("large", sizes["large"]), ("small", sizes["small"])) if v]
        if largest:
            out += f", the largest {' and '.join(largest)}"
        holders = s["inactive_holders"]
        if holders:
            top = holders[0]
            stack = stacks.get((s["snapshot"], top["stack"])) if top["stack"] is not None else None
            freed = ""
            if top["last_freed_ns"] is not None and point["t_ns"] is not None:
                freed = f", freed {(point['t_ns'] - top['last_freed_ns']) / 1e6:,.3f} ms before"
            out += (f"; {size_word(top['bytes'])} of it in {top['ranges']} range(s) last used by {top['allocations']} "
                    f"allocation(s) made {_site(stack)}{freed}")
        outside = s["outside_allocator"]
        if outside["bytes"]:
            apis = ", ".join(f"{display_name(a['api']) if a['api'] else 'an unknown call'}: {a['allocations']}"
                             for a in outside["by_api"])
            out += f"; outside its segments the trace shows {size_word(outside['bytes'])} ({apis})"
        out += "." if s["verified"] else " (the snapshot's clock is not checked against the trace)."
        said.append(out)
    return " ".join(said)
