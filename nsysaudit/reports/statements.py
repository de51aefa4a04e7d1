"""The sentences a comparison says about its facts, in words a reviewer can quote.

Each function takes entries of the comparison document (:mod:`nsysaudit.reports.compare`) and
returns a sentence; the sentences are part of the document (``statements``, ``statement``). The words
are :mod:`nsysaudit.words`' (its first section): here the values are picked from the documents (the
tables of words, ``role_words`` and ``censored_reasons_words`` are its, named here as before); the
sentence-makers of the ledger's holders, the changes between moments and arms and the allocator's
statement still word their sentences here (tests/test_words.py counts them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from nsysaudit.analysis.allocator import AllocatorPoint, Stack
from nsysaudit.analysis.ledger import CoveredPoint, LedgerPoint
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
from nsysaudit.words import CALL_WORDS as CALL_WORDS
from nsysaudit.words import CENSORED_WORDS as CENSORED_WORDS
from nsysaudit.words import (
    CHANGE_VERBS,
    HELD_WORDS,
    DeviceHeld,
    HeldBy,
    allocator_figures,
    allocator_state,
    arms_held,
    bound_assumes_no_free,
    censored_call,
    free_calls_without_event,
    freed_never_allocated,
    held_at,
    held_change,
    library_call_allocations,
    moment,
    telemetry_position,
    telemetry_span,
    virtual_memory,
)
from nsysaudit.words import CLASSIFICATION_WORDS as CLASSIFICATION_WORDS
from nsysaudit.words import MECHANISM_WORDS as MECHANISM_WORDS
from nsysaudit.words import censored_reasons_words as censored_reasons_words
from nsysaudit.words import role_words as role_words


def allocation_statement(arm: str, lc: ArmLibraryCall) -> str:
    """What one library call allocated in one arm, in words a reviewer can quote."""
    a = lc["allocations"]
    failed = [(c["api"], c["return_code"], c["return_name"], c["bytes"])
              for c in lc["allocation_calls"] if c["return_code"] != 0]
    return library_call_allocations(
        arm, lc["api"], lc["thread_role"], lc["pid"], lc["tid"], lc["thread_name"], failed,
        a["succeeded_before_first_failure"], a["succeeded"], a["bytes_each"],
        None if lc["coverage"] != "censored" else (lc["censored_reason"], censored_words(lc)),
    )


def censored_words(lc: ArmLibraryCall) -> str:
    """Why a library call of interest is censored, in words, with its numbers."""
    return censored_call(lc["censored_reason"], lc["cuda_api_last_ns"], lc["end_ns"])


def virtual_memory_words(vmm: VirtualMemory | None) -> str | None:
    """What the virtual memory calls did, in a sentence (None when there were none)."""
    if vmm is None or not (vmm["mapped_events"] or vmm["handles_created"] or vmm["address_reservations"]):
        return None
    return virtual_memory(vmm["mapped_events"], vmm["unmapped_events"], vmm["handles_created"],
                          vmm["handles_released"], vmm["address_reservations"])


def free_calls_without_event_words(gaps: FreeCallsWithoutEvent | None) -> str | None:
    """The successful free calls with no deallocation event of their own, and what the bounds assume
    of them (None when there are none). API names are trace text: escape where shown."""
    if gaps is None or not gaps["count"]:
        return None
    return free_calls_without_event(gaps["count"], gaps["by_api"], gaps["example_correlation_ids"])


def freed_never_allocated_words(unseen: FreedNeverAllocated | None) -> str | None:
    """Deallocations of memory the trace never saw allocated (None when there are none)."""
    if unseen is None or not unseen["events"]:
        return None
    return freed_never_allocated(unseen["events"], unseen["bytes"])


def position_statement(arm: str, lc: ArmLibraryCall) -> str | None:
    """Where a library call falls among its arm's telemetry lines, and the snapshot then in force."""
    pos = lc["telemetry"]
    if pos is None:
        return None
    after, before, in_force = pos["after"], pos["before"], pos["in_force"]
    return telemetry_span(
        arm, lc["api"],
        None if not after else (after["ms"], after["event"], after["line"]),
        None if not before else (before["ms"], before["event"], before["line"]),
        None if not in_force else (in_force["event"], in_force["line"], in_force.get("values") or {}),
        pos["verified"],
    )


def when(pos: Position | None) -> str:
    """ ", 55.672 ms after backward_start (telemetry line 5)": a call's place on the application's clock."""
    after = pos["after"] if pos is not None else None
    if pos is None or after is None:
        return ""
    return telemetry_position(after["ms"], after["event"], after["line"], pos["verified"])


def moment_words(point: LedgerPoint) -> str:
    """A ledger point's moment in words: "the failure", "cublasCreate_v2's start", "telemetry line 4 (handoff)"."""
    return moment(point["point"], point["label"], point.get("line"))


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
        out += " " + bound_assumes_no_free(gaps, list(gap_examples))
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
    return allocator_figures(in_force["line"], in_force["event"], reserved, allocated)


def held_words(
    point: LedgerPoint, names: Mapping[int | None, str | None], named: Iterable[TargetDevice] | None = None
) -> str:
    """The first sentence of :func:`holder_statement`: held, by whom and how, and the bound; each
    device named as the export names it when ``named`` (the document's ``devices``) is given."""
    known = None if named is None else {(d["vm"], d["device_id"]): d for d in named}
    devices = point["devices"]
    role = {"finding": "the failing process", "library_call": "the calling process",
            "censored_library_call": "the calling process"}.get(point["point"])

    def who(p: PointProcess, several: bool) -> tuple[int | None, str | None, str | None]:
        mine = several and role is not None and p["pid"] == point["pid"]
        return p["pid"], names.get(p["global_pid"]), role if mine else None

    held: list[DeviceHeld] = []
    for d in devices:
        procs = [p for p in d["processes"] if p["resident_bytes"] or p["imported_pool_bytes"]]
        several = len(procs) > 1
        prefix = f"device {d['device_id']}" if len(devices) > 1 else None
        if known is not None:
            prefix = device_words(known.get((d["vm"], d["device_id"])), d["device_id"])
        held.append(DeviceHeld(
            prefix, d["device_resident_live_bytes"], d["total_bytes"],
            [(who(p, several), _mechanisms(p)) for p in procs],
            d.get("bound_unknown"), d["free_at_most_bytes"], d["managed_live_bytes"], d["process_has_events"],
        ))
    return held_at(moment_words(point), held, point["pid"], point.get("unknown"))


def _mechanisms(p: PointProcess) -> HeldBy:
    """What one process holds on a device, by mechanism (the ledger's figures)."""
    m = p["by_mechanism"]
    return HeldBy(m["pool_reserved"], m["pool_utilized"], m["mapped"], m["segments"], m["static"],
                  p["imported_pool_bytes"])


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
    changes = []
    for key in sorted(set(was) | set(now), key=lambda k: (str(k[0]), k[1])):
        old, new = was.get(key), now.get(key)
        by = {m: (new["by_mechanism"][m] if new else 0) - (old["by_mechanism"][m] if old else 0) for m in CHANGE_VERBS}
        proc = new or old
        changes.append((proc["pid"] if proc else None, by))
    held = [sum(d["device_resident_live_bytes"] for d in ds) for ds in (before_devices, after_devices)]
    return held_change(arm, before, after, changes, held[0], held[1])


def arms_memory_statement(moment: str, observe: Iterable[PointDevice], release: Iterable[PointDevice]) -> str:
    """How the two arms' device memory differed at the same moment: held in all, by mechanism, and
    the bound on free memory."""
    arms = {"observe": list(observe), "release": list(release)}
    held = {n: sum(d["device_resident_live_bytes"] for d in ds) for n, ds in arms.items()}
    free = {n: [d["free_at_most_bytes"] for d in ds] for n, ds in arms.items()}
    by = {m: (sum(d["by_mechanism"][m] for d in arms["observe"]), sum(d["by_mechanism"][m] for d in arms["release"]))
          for m, _ in HELD_WORDS}
    return arms_held(moment, held["observe"], held["release"], by, free["observe"], free["release"])


def allocator_statement(point: AllocatorPoint, stacks: Mapping[tuple[int, int], Stack]) -> str:
    """The allocator at one moment, in one sentence per device (``allocator.at[].statement``): what it
    reserved, how much of that was inactive and in how many ranges, who last used the most of it, and
    what the trace shows outside its segments. ``stacks``: the section's stacks by (snapshot, stack)."""
    moment = moment_words(cast(LedgerPoint, point))
    said = []
    for s in point["states"]:
        holders = s["inactive_holders"]
        top = holders[0] if holders else None
        stack = stacks.get((s["snapshot"], top["stack"])) if top is not None and top["stack"] is not None else None
        freed_ms = None
        if top is not None and top["last_freed_ns"] is not None and point["t_ns"] is not None:
            freed_ms = (point["t_ns"] - top["last_freed_ns"]) / 1e6
        said.append(allocator_state(moment, point["pid"], s, top, stack, freed_ms))
    return " ".join(said)
