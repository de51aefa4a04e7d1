"""The comparison of an observe arm and a release arm: report data only, never printed here.

``compare_results(observe, release)`` takes two :class:`AnalysisResult` objects and returns a
:class:`Comparison` whose ``to_dict()`` is the ``report.json`` document of ``nsysaudit compare``
(see :mod:`nsysaudit.seal` for how it is written and sealed). The document holds, per arm, the
verdict, census, findings, the library calls of interest with their nested calls, coverage, and
the telemetry snapshot at the handoff with the clock alignment when telemetry was given; then the
differences between the arms, and an explicit list of what the comparison does NOT establish.

Everything in the document comes from the two results: nothing is guessed. An unknown value
(a failed allocation's requested size, a thread without a name) stays ``None``.

Which library calls are "of interest" (the issue leaves it open): every library call when an arm
has at most :data:`FEW_LIBRARY_CALLS` of them; otherwise each one that runs on a thread other than
its process's main thread, is censored, has a failed nested call, encloses a finding, or initializes an
NCCL communicator (:mod:`nsysaudit.analysis.interest`). The rule applied is written into the document
(``library_calls_selection``).
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import polars as pl

from nsysaudit import words
from nsysaudit.analysis.findings import FINDING_KINDS
from nsysaudit.analysis.interest import of_interest
from nsysaudit.core.codes import display_name, is_allocation_api, names
from nsysaudit.core.paths import basename, scrub_paths
from nsysaudit.reports import nccl
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.documents import (
    SCHEMA_VERSION,
    AllocatorChange,
    AllocatorDifferences,
    AllocatorPair,
    AllocatorPoint,
    AllocatorState,
    AnalysisDocument,
    Arm,
    ArmAllocator,
    ArmInput,
    ArmLedger,
    ArmLibraryCall,
    ArmTelemetry,
    CaptureDifference,
    Child,
    ComparisonAnswer,
    ComparisonArm,
    ComparisonDocument,
    Differences,
    ExpectedCaptureDifference,
    FailingByCode,
    FailingCode,
    FailurePresence,
    Handoff,
    HandoffChange,
    KindCounts,
    LibraryCall,
    MatchKey,
    MemoryDifferences,
    MemoryPoint,
    NestedByApi,
    NotEstablished,
    PairedCall,
    PairedSide,
    SameValue,
    SealedInput,
    SegmentsReleased,
    Sources,
    TelemetryFileRecord,
    ThreadRole,
)
from nsysaudit.reports.ranks import environment_differences, rank_differences
from nsysaudit.reports.stalls import compare_stalls
from nsysaudit.reports.statements import (
    allocation_statement,
    arms_memory_statement,
    change_statement,
    moment_words,
    position_statement,
    role_words,
    when,
)

ARMS: tuple[Arm, Arm] = ("observe", "release")
# /1 had no ``schema`` key (verify --inputs names a folder sealed with it: seal.verify.OLDER_REPORTS).
REPORT_FORMAT = "nsysaudit.compare/2"

# META_DATA_CAPTURE keys that differ between any two runs by construction. They are reported
# under ``differs_as_expected`` (with the reason), never silently dropped.
_EXPECTED_CAPTURE_KEYS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\APROFILING_SESSION_(UUID|ID)\Z"), words.EXPECTED_CAPTURE_KEY["session"]),
    (re.compile(r"\ARUN_DURATION_MS\Z"), words.EXPECTED_CAPTURE_KEY["duration"]),
    (re.compile(r"\A(APPLICATION_PID|PROCESS_[0-9]+:PID)\Z"), words.EXPECTED_CAPTURE_KEY["pid"]),
    (re.compile(r"\APROCESS_[0-9]+:ARGUMENT_[0-9]+\Z"), words.EXPECTED_CAPTURE_KEY["arguments"]),
)
_ENVIRONMENT = re.compile(r"\APROCESS_[0-9]+:ENVIRONMENT_VARIABLE\Z")
# Snapshot fields of the telemetry ``handoff`` event that the comparison shows side by side.
HANDOFF_FIELDS = ("allocated", "reserved", "physical_free")


@dataclass(frozen=True)
class Comparison:
    """An observe arm and a release arm, analyzed, and their comparison document, built once by
    :func:`compare_results`; ``to_dict()`` is that document (``report.json`` of ``compare``)."""

    observe: AnalysisResult
    release: AnalysisResult
    telemetry_files: Mapping[str, TelemetryFileRecord | None]
    document: ComparisonDocument

    def arm(self, name: Arm) -> AnalysisResult:
        return self.observe if name == "observe" else self.release

    def to_dict(self) -> ComparisonDocument:
        return self.document.copy()

    def __repr__(self) -> str:
        arms = self.document["arms"]
        return (
            f"<Comparison observe {arms['observe']['verdict']}, release {arms['release']['verdict']}: "
            f"{self.document['differences']['nested_alloc_failure']['statement']}>"
        )


def _document(
    observe: AnalysisResult, release: AnalysisResult, files: Mapping[str, TelemetryFileRecord | None],
    labels: Mapping[str, str],
) -> ComparisonDocument:
    results = {"observe": observe, "release": release}
    arms: dict[str, ComparisonArm] = {name: _arm(results[name], files.get(name)) for name in ARMS}
    differences = _differences(arms, results, labels)
    not_established = _not_established(arms, differences)
    return {
        "format": REPORT_FORMAT,
        "kind": "comparison",
        "inputs": _inputs(arms),
        "arms": arms,
        "labels": {n: labels[n] for n in ARMS},
        "differences": differences,
        "not_established": not_established,
        "summary": _summary(arms, differences, not_established),
        "answer": _answer(arms, differences, not_established),
        "schema": {"kind": "comparison", "version": SCHEMA_VERSION},
    }


def _answer(
    arms: Mapping[str, ComparisonArm], differences: Differences, not_established: list[NotEstablished]
) -> ComparisonAnswer:
    """What a person reads first: each arm's answer, whether the failure is in one arm only, and
    what the memory did differently at the call that failed (the first pair of library calls off
    the main thread), with what the comparison cannot establish."""
    memory: list[str] = []
    # The pair whose call failed in an arm comes first (an NCCL call fails on the main thread).
    pairs = sorted(differences["library_calls"], key=lambda p: not any(
        side is not None and side["nested_allocations_failed"] for side in (p["observe"], p["release"])))
    for pair in pairs:
        said = [s for s in pair["statements"] if s.startswith("At ") or ": between " in s or nccl.ALLOCATED in s]
        if said:
            memory = said
            break
    return {
        "summary": differences["nested_alloc_failure"]["statement"],
        "arms": {n: arms[n]["answer"] for n in ARMS},
        "ranks": differences["ranks"]["statements"],
        "memory": memory,
        "not_established": [x["statement"] for x in not_established if x["code"] == "censored_library_call"],
        "stalls": differences["stalls"]["statement"],
    }


def compare_results(
    observe: AnalysisResult,
    release: AnalysisResult,
    *,
    telemetry_files: Mapping[str, TelemetryFileRecord | None] | None = None,
    labels: tuple[str, str] | None = None,
) -> Comparison:
    """Compare two analyzed arms.

    ``telemetry_files`` names the telemetry each arm was given; by default it is read from each
    result's alignment (the digest and size of the bytes the analysis read). ``labels``: what the
    sentences call the observe and the release arm (``compare --labels``; by default observe, release).

    >>> import nsysaudit
    >>> torch = "tests/fixtures/h200-cuda13-nsys2025.3/torch/"
    >>> cmp = compare_results(nsysaudit.analyze(torch + "observe.sqlite"), nsysaudit.analyze(torch + "release.sqlite"))
    >>> [cmp.to_dict()["arms"][arm]["verdict"] for arm in ("observe", "release")]
    ['failure_found', 'no_failure']
    """
    files: dict[str, TelemetryFileRecord | None] = {}
    for name, result in (("observe", observe), ("release", release)):
        if telemetry_files is not None and name in telemetry_files:
            files[name] = telemetry_files[name]
        elif result.alignment is not None:
            log = result.alignment.log
            files[name] = {"name": basename(log.path), "sha256": log.sha256, "size_bytes": log.size_bytes}
        else:
            files[name] = None
    named: dict[str, str] = dict(zip(ARMS, labels if labels is not None else ARMS, strict=True))
    return Comparison(observe, release, files, _document(observe, release, files, named))


# --- per arm -------------------------------------------------------------------------------------


def input_record(result: AnalysisResult) -> ArmInput:
    """The arm's input as a sealed report names it: basename, digest, size, versions."""
    info = result.input
    return {
        "name": basename(info.path),
        "sha256": info.sha256,
        "size_bytes": info.size_bytes,
        "kind": info.kind,
        "nsys_version": info.nsys_version,
        "schema_version": info.schema_version,
    }


def _arm(result: AnalysisResult, telemetry_file: TelemetryFileRecord | None) -> ComparisonArm:
    # Library calls are selected on their frame, and only the chosen ones become Python objects:
    # a large export has 10^5+ of them.
    frame = result.library_calls_frame()
    enclosing_ids = [int(i) for i in result.frames["findings"]["lib_id"].drop_nulls().to_list()]
    failed_ids = frame.filter(pl.col("failed_children") > 0)["lib_id"].to_list()
    interest_of = of_interest(frame, failed_ids, enclosing_ids)
    chosen, total, selection = interest_of.frame, interest_of.total, interest_of.selection
    chosen_dicts = result.library_call_dicts(chosen.sort("lib_id"))
    d: AnalysisDocument = scrub_paths(result.document(chosen_dicts), result_paths(result))  # the same shape
    chosen_list = d["library_calls"]
    census = d["census"]
    # The device-memory ledger at each call's start, as the analysis read it (empty when no ledger is claimed).
    at_start = {
        p["lib_id"]: p
        for p in d["memory"]["at"]
        if p["point"] in ("library_call", "censored_library_call") and "lib_id" in p
    }
    interest = _keyed(chosen_list, at_start)
    arm: ComparisonArm = {
        "input": input_record(result),
        "telemetry_input": telemetry_file.copy() if telemetry_file else None,  # the document's own, not shared
        "verdict": d["verdict"],
        "verdict_reasons": d["verdict_reasons"],
        "census": {
            "cuda_api_calls": census["cuda_api_calls"],
            "nonzero_returns": census["nonzero_returns"],
            "by_return": census["by_return"],
        },
        "findings": d["findings"],
        "failed_calls": d["failed_calls"],
        "library_calls_total": total,
        "library_calls_listed": len(chosen_list),
        "library_calls_selection": selection,
        "library_calls": interest,
        "coverage": d["coverage"],
        "telemetry": _telemetry(d, telemetry_file),
        "handoff": _handoff(d, interest),
        "alignment": d.get("alignment"),
        "warnings": d["warnings"],
        "memory": d["memory"],
        "answer": d["answer"],
        "devices": d["devices"],
        "processes": d["processes"],
        "launches": d["launches"],
        "ranks": d["ranks"],
        "stalls": d["stalls"],
    }
    if "allocator" in d:  # with memory snapshots only
        arm["allocator"] = d["allocator"]
    return arm


def _call(c: Child) -> Child:
    return {
        "api": c["api"],
        "display_api": c["display_api"],
        "return_code": c["return_code"],
        "return_name": c["return_name"],
        "correlation_id": c["correlation_id"],
        "start_ns": c["start_ns"],
        "end_ns": c["end_ns"],
        "bytes": c["bytes"],
    }


def _library_call(lc: LibraryCall, match_key: MatchKey, at_start: MemoryPoint | None) -> ArmLibraryCall:
    """One library call of interest, with its nested calls summarized and the telling ones listed,
    and the ledger at its start (``at_start``: none when no ledger is claimed).

    Every nested allocation call and every failed nested call is listed one by one (return code,
    bytes); the other nested calls (often hundreds of ``cuGetProcAddress``) are counted per
    (api, return code) in ``nested_by_api``.
    """
    children = lc["children"]
    allocs = [c for c in children if c["api"] is not None and is_allocation_api(c["api"])]
    ok = [c for c in allocs if c["return_code"] == 0]
    failed_allocs = [c for c in allocs if c["return_code"] != 0]
    known = [c["bytes"] for c in ok if c["bytes"] is not None]
    # A nested call lies inside its library call: it has a start (analysis.joins).
    first_failure = min((c["start_ns"] for c in failed_allocs if c["start_ns"] is not None), default=None)
    by_api: Counter[tuple[str | None, int | None]] = Counter()
    bytes_by_api: dict[tuple[str | None, int | None], int] = {}
    for c in children:
        key = (c["api"], c["return_code"])
        by_api[key] += 1
        if c["bytes"] is not None:
            bytes_by_api[key] = bytes_by_api.get(key, 0) + c["bytes"]
    return {
        "lib_id": lc["lib_id"],
        "api": lc["api"],
        "display_api": lc["display_api"],
        "library": lc["library"],
        "source": lc["source"],
        "pid": lc["pid"],
        "tid": lc["tid"],
        "global_tid": lc["global_tid"],
        "thread_name": lc["thread_name"],
        "thread_role": match_key["thread_role"],
        "start_ns": lc["start_ns"],
        "end_ns": lc["end_ns"],
        "duration_ns": lc["duration_ns"],
        "coverage": lc["coverage"],
        "censored_reason": lc["censored_reason"],
        "cuda_api_last_ns": lc["cuda_api_last_ns"],
        "nested_calls": len(children),
        "nested_failed": sum(1 for c in children if c["return_code"] != 0),
        "allocations": {
            "calls": len(allocs),
            "succeeded": len(ok),
            "failed": len(failed_allocs),
            "succeeded_before_first_failure": (
                None if first_failure is None
                else sum(1 for c in ok if c["start_ns"] is not None and c["start_ns"] < first_failure)
            ),
            "bytes": sum(known) if known else 0,
            "bytes_unknown": len(ok) - len(known),
            "bytes_each": [c["bytes"] for c in ok],
        },
        "allocation_calls": [_call(c) for c in allocs],
        "failed_calls": [_call(c) for c in children if c["return_code"] != 0],
        "nested_by_api": [_nested(api, rc, n, bytes_by_api.get((api, rc)))
                          for (api, rc), n in sorted(by_api.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0))],
        "straddling": [_call(c) for c in lc["straddling"]],
        "telemetry": lc.get("telemetry"),
        "memory_at_start": at_start["devices"] if at_start is not None else [],
        "holder_at_start": at_start["holder"] if at_start is not None else None,
        "match_key": match_key,
    }


def _nested(api: str | None, rc: int | None, count: int, nbytes: int | None) -> NestedByApi:
    return {
        "api": api,
        **names(api, rc),
        "return_code": rc,
        "count": count,
        # Only allocation calls have bytes; for them None means unknown (no memory event).
        "allocation": api is not None and is_allocation_api(api),
        "bytes": nbytes,
    }


def _keyed(calls: Iterable[LibraryCall], at_start: Mapping[int, MemoryPoint]) -> list[ArmLibraryCall]:
    """The library calls of interest (:func:`_library_call`), each with a ``match_key`` (api, thread
    role, ordinal) to pair it across arms, and the ledger at its start (``at_start``, by ``lib_id``).

    PIDs and TIDs differ between runs, so calls are paired by what they are: the n-th call of
    the same API on the main thread, or on another thread, in time order.
    """
    seen: Counter[tuple[str, ThreadRole]] = Counter()
    out = []
    # A damaged range may have no start: it sorts last, never compared with None.
    for lc in sorted(calls, key=lambda c: (c["start_ns"] is None, c["start_ns"] or 0, c["lib_id"])):
        role: ThreadRole = "main" if lc["tid"] == lc["pid"] else "other"
        seen[(lc["api"], role)] += 1
        key: MatchKey = {"api": lc["api"], "thread_role": role, "ordinal": seen[(lc["api"], role)]}
        out.append(_library_call(lc, key, at_start.get(lc["lib_id"])))
    return out


def _handoff(d: AnalysisDocument, libs: list[ArmLibraryCall]) -> Handoff | None:
    """The telemetry ``handoff`` snapshot (allocated / reserved / physical_free), if telemetry was given.

    Read from the analysis result's ``telemetry`` timeline (the clock alignment, issue 3). With
    several ``handoff`` lines, the last one placed at or before the start of the first library
    call of interest; when none is placed so, the last one in the file. ``None`` when the arm has
    no telemetry or its telemetry has no ``handoff`` line.
    """
    telemetry = d.get("telemetry")
    if telemetry is None:
        return None
    handoffs = [e for e in telemetry["timeline"] if e["event"] == "handoff"]
    if not handoffs:
        return None
    first_start = min((lc["start_ns"] for lc in libs if lc["start_ns"] is not None), default=None)
    placed = [
        e for e in handoffs if e["trace_ns"] is not None and first_start is not None and e["trace_ns"] <= first_start
    ]
    chosen = placed[-1] if placed else handoffs[-1]
    rule = words.HANDOFF_RULE[bool(placed)]
    values = chosen["values"]
    return {
        "line": chosen["line"],
        "trace_ns": chosen["trace_ns"],
        "via": chosen["via"],
        "chosen_by": rule,
        "handoff_lines": len(handoffs),
        # HANDOFF_FIELDS
        "allocated": values.get("allocated"),
        "reserved": values.get("reserved"),
        "physical_free": values.get("physical_free"),
        "values": values,
    }


def _telemetry(d: AnalysisDocument, file: TelemetryFileRecord | None) -> ArmTelemetry | None:
    """The telemetry file's summary (without the per-line timeline; see ``handoff`` and positions)."""
    telemetry = d.get("telemetry")
    if telemetry is None:
        return None
    return {
        "sha256": telemetry["sha256"],
        "event_key": telemetry["event_key"],
        "events": telemetry["events"],
        "bad_lines": telemetry["bad_lines"],
        "lenient": telemetry["lenient"],
        "pids": telemetry["pids"],
        "clock_fields": telemetry["clock_fields"],
        "warnings": telemetry["warnings"],
        "library_failures": telemetry["library_failures"],
        "name": file["name"] if file else basename(telemetry["path"]),
    }


def result_paths(result: AnalysisResult) -> dict[str, str]:
    """The paths an analysis result may mention (input, telemetry, snapshots), longest first, to their basenames."""
    given = [result.input.path]
    if result.alignment is not None:
        given.append(result.alignment.log.path)
    if result.analysis.allocator is not None:
        given += [j.snapshot.path for j in result.analysis.allocator.joined]
    out: dict[str, str] = {}
    for p in given:
        for form in (p, os.path.abspath(p)):
            out[form] = basename(p)
    return dict(sorted(out.items(), key=lambda kv: -len(kv[0])))


def _inputs(arms: Mapping[str, ComparisonArm]) -> list[SealedInput]:
    out: list[SealedInput] = []
    for name in ARMS:
        given = arms[name]["input"]
        out.append({"role": name, "name": given["name"], "sha256": given["sha256"],
                    "size_bytes": given["size_bytes"], "kind": given["kind"]})
        tel = arms[name]["telemetry_input"]
        if tel:
            out.append({"role": f"{name}_telemetry", "name": tel["name"], "sha256": tel["sha256"],
                        "size_bytes": tel["size_bytes"], "kind": "telemetry"})
    for name in ARMS:  # memory snapshots: after the arms and their telemetry, as the sealed recipe orders them
        section = arms[name].get("allocator")
        for i, snap in enumerate(section["snapshots"] if section is not None else [], start=1):
            out.append({"role": f"{name}_snapshot_{i}", "name": basename(snap["path"]), "sha256": snap["sha256"],
                        "size_bytes": snap["size_bytes"], "kind": "snapshot"})
    return out


# --- differences ---------------------------------------------------------------------------------


def _differences(
    arms: Mapping[str, ComparisonArm], results: Mapping[str, AnalysisResult], labels: Mapping[str, str]
) -> Differences:
    pairs = _paired_calls(arms)
    out: Differences = {
        "nested_alloc_failure": _failure_presence(arms),
        "findings_by_kind": _findings_by_kind(arms),
        "library_calls": pairs,
        "failing_calls": {
            "census": _failing_by_code(
                {
                    n: [
                        (r["api"], r["return_code"], r["count"]) for r in arms[n]["census"]["by_return"]
                    ]
                    for n in ARMS
                }
            ),
            "nested": _failing_by_code(
                {
                    n: [
                        (c["api"], c["return_code"], 1)
                        for lc in arms[n]["library_calls"]
                        for c in lc["failed_calls"]
                    ]
                    for n in ARMS
                }
            ),
        },
        "sources": _sources(arms, results),
        "handoff": _handoff_diff(arms),
        "memory": _memory_diff(arms),
        "ranks": rank_differences(arms, pairs),  # two ranks of one job as arms
        "stalls": compare_stalls({n: arms[n]["stalls"] for n in ARMS}, labels),
    }
    if any("allocator" in arms[n] for n in ARMS):
        out["allocator"] = _allocator_diff(arms, pairs)
    return out


def _allocator_diff(arms: Mapping[str, ComparisonArm], pairs: list[PairedCall]) -> AllocatorDifferences:
    """What the release did to the allocator's blocks (docs/ledger.md): each arm's segments given
    back to CUDA, and the allocator of both arms at the handoff and at each pair of library calls."""
    def state(n: Arm, keep: Callable[[AllocatorPoint], bool]) -> AllocatorState | None:
        section = arms[n].get("allocator")
        found = [p for p in section["at"] if keep(p) and p["states"]] if section is not None else []
        return found[-1]["states"][0] if found else None

    def handoff(p: AllocatorPoint) -> bool:
        return p["point"] == "telemetry" and p["label"] == "handoff"

    def call(lib_id: int | None) -> Callable[[AllocatorPoint], bool]:
        return lambda p: p["point"] in ("library_call", "censored_library_call") and p.get("lib_id") == lib_id

    at_pairs: list[AllocatorPair] = []
    for pair in pairs:
        sides = {n: state(n, call(side["lib_id"])) if (side := pair[n]) is not None else None for n in ARMS}
        at_pairs.append({"match_key": pair["match_key"], **_change(sides["observe"], sides["release"])})
    return {
        "observe": _arm_allocator(arms["observe"]),
        "release": _arm_allocator(arms["release"]),
        "at_handoff": _change(state("observe", handoff), state("release", handoff)),
        "library_calls": at_pairs,
    }


def _change(o: AllocatorState | None, r: AllocatorState | None) -> AllocatorChange:
    def minus(a: int | None, b: int | None) -> int | None:
        return b - a if a is not None and b is not None else None

    if o is None or r is None:
        return {"observe": o, "release": r, "reserved_release_minus_observe": None,
                "requested_release_minus_observe": None, "inactive_release_minus_observe": None}
    return {"observe": o, "release": r,
            "reserved_release_minus_observe": minus(o["reserved_bytes"], r["reserved_bytes"]),
            "requested_release_minus_observe": minus(o["requested_bytes"], r["requested_bytes"]),
            "inactive_release_minus_observe": minus(o["inactive_bytes"], r["inactive_bytes"])}


def _arm_allocator(arm: ComparisonArm) -> ArmAllocator | None:
    section = arm.get("allocator")
    if section is None:
        return None
    snapshots = section["snapshots"]
    last = max(snapshots, key=lambda s: (s["history"]["last_ns"] or -1, s["history"]["entries"]), default=None)
    released: SegmentsReleased | None = None
    if last is not None:
        frees = last["segment_frees"]
        released = {"snapshot": last["index"], "segments": sum(f["segments"] for f in frees),
                    "bytes": sum(f["bytes"] for f in frees), "by_stack": frees}
    return {"snapshots": len(snapshots), "checked": all(s["clock"]["checked"] for s in snapshots),
            "segments_released": released}


def _findings_by_kind(arms: Mapping[str, ComparisonArm]) -> list[KindCounts]:
    """Per finding kind present in either arm: how many in each."""
    out: list[KindCounts] = []
    for kind in FINDING_KINDS:
        o, r = (sum(1 for f in arms[n]["findings"] if f["kind"] == kind) for n in ARMS)
        if o or r:
            out.append({"kind": kind, "observe": o, "release": r})
    return out


def _failure_presence(arms: Mapping[str, ComparisonArm]) -> FailurePresence:
    counts = {n: sum(1 for f in arms[n]["findings"] if f["kind"] == "nested_alloc_failure") for n in ARMS}
    present = [n for n in ARMS if counts[n]]
    absent = [n for n in ARMS if not counts[n]]
    if present and absent:
        fs = [f for f in arms[present[0]]["findings"] if f["kind"] == "nested_alloc_failure"]
        what = "; ".join(
            f"{f['display_api'] or display_name(f['api'])} returned {f['return_code']} "
            f"({f['return_name'] or 'unknown code'}) inside "
            f"{nccl.call_words(f['enclosing'])}" + when(f.get("telemetry"))
            for f in fs
            if f["enclosing"] is not None  # a nested failure is inside its library call
        )
        censored = arms[absent[0]]["coverage"]["censored"]
        statement = words.nested_failure_in_one_arm(present[0], counts[present[0]], what, absent[0], len(censored))
    elif present:
        statement = words.NESTED_FAILURE_IN_BOTH
    else:
        statement = words.nested_failure_in_neither(any(arms[n]["coverage"]["censored"] for n in ARMS))
    return {"observe": counts["observe"], "release": counts["release"], "present_in": present, "absent_in": absent,
            "statement": statement}


def _paired_calls(arms: Mapping[str, ComparisonArm]) -> list[PairedCall]:
    def key(lc: ArmLibraryCall) -> tuple[str, ThreadRole, int]:
        mk = lc["match_key"]
        return (str(mk["api"]), mk["thread_role"], mk["ordinal"])

    by_arm = {n: {key(lc): lc for lc in arms[n]["library_calls"]} for n in ARMS}
    keys = sorted(set(by_arm["observe"]) | set(by_arm["release"]), key=lambda k: (k[1] != "other", k))
    out: list[PairedCall] = []
    for k in keys:
        sides: dict[Arm, PairedSide | None] = {}
        statements = []
        for n in ARMS:
            lc = by_arm[n].get(k)
            if lc is None:
                sides[n] = None
                statements.append(f"{n}: no matching {k[0]} call ({role_words(k[1])}, call #{k[2]})")
                continue
            sides[n] = _side(lc)
            statements += _side_statements(n, lc, arms[n])
        observe, release = sides["observe"], sides["release"]
        same: bool | None = None
        if observe is not None and release is not None:
            if observe["memory_at_start"] and release["memory_at_start"]:
                statements.append(arms_memory_statement(f"{k[0]}'s start", observe["memory_at_start"],
                                                        release["memory_at_start"]))
            same = by_arm["observe"][k]["nested_by_api"] == by_arm["release"][k]["nested_by_api"]
            calls = by_arm["observe"][k]["nested_calls"]
            statements.append(words.nested_calls_compared(same, calls))
        out.append({"match_key": {"api": k[0], "thread_role": k[1], "ordinal": k[2]}, "observe": observe,
                    "release": release, "nested_calls_same": same, "statements": statements})
    return out


def _side(lc: ArmLibraryCall) -> PairedSide:
    """One arm's library call as a pair shows it."""
    a = lc["allocations"]
    return {
        "lib_id": lc["lib_id"],
        "pid": lc["pid"],
        "tid": lc["tid"],
        "thread_name": lc["thread_name"],
        "start_ns": lc["start_ns"],
        "end_ns": lc["end_ns"],
        "coverage": lc["coverage"],
        "censored_reason": lc["censored_reason"],
        "nested_allocations_succeeded": a["succeeded"],
        "nested_allocations_failed": a["failed"],
        "succeeded_before_first_failure": a["succeeded_before_first_failure"],
        "allocated_bytes": a["bytes"],
        "allocated_bytes_each": a["bytes_each"],
        "bytes_unknown": a["bytes_unknown"],
        "failed_allocations": [c for c in lc["allocation_calls"] if c["return_code"] != 0],
        "telemetry": lc["telemetry"],
        "memory_at_start": lc["memory_at_start"],
        "holder_at_start": lc["holder_at_start"],
    }


def _side_statements(n: str, lc: ArmLibraryCall, arm: ComparisonArm) -> list[str]:
    """What one arm's call of a pair allocated, who held the device at its start (and what changed
    since the handoff), and where it falls among the telemetry lines."""
    statements = [allocation_statement(n, lc)]
    allocated = nccl.allocations_words(n, lc)  # an NCCL call's allocations, in bytes its memory events give
    if allocated is not None:
        statements.append(allocated)
    if lc["holder_at_start"]:
        statements.append(f"{n}: {lc['holder_at_start']}")
        handoff = _handoff_point(arm)
        if handoff is not None and handoff["t_ns"] is not None and handoff["t_ns"] <= (lc["start_ns"] or 0):
            statements.append(change_statement(n, moment_words(handoff), handoff["devices"],
                                               f"{lc['api']}'s start", lc["memory_at_start"]))
    where = position_statement(n, lc)
    if where is not None:
        statements.append(where)
    return statements


def _failing_by_code(rows: Mapping[str, list[tuple[str | None, int | None, int]]]) -> FailingByCode:
    """Per (api, return code): how many calls failed so in each arm, split by where they failed."""
    counts: dict[str, Counter[tuple[str | None, int | None]]] = {n: Counter() for n in ARMS}
    for n in ARMS:
        for api, rc, count in rows[n]:
            counts[n][(api, rc)] += count

    def entries(keys: Iterable[tuple[str | None, int | None]]) -> list[FailingCode]:
        return [
            {
                "api": api,
                **names(api, rc),
                "return_code": rc,
                "observe": counts["observe"][(api, rc)],
                "release": counts["release"][(api, rc)],
            }
            for api, rc in sorted(keys, key=lambda k: (str(k[0]), k[1]))
        ]

    o, r = set(counts["observe"]), set(counts["release"])
    return {"only_in_observe": entries(o - r), "only_in_release": entries(r - o), "in_both": entries(o & r)}


def _expected_reason(key: str) -> str | None:
    for pattern, why in _EXPECTED_CAPTURE_KEYS:
        if pattern.match(key):
            return why
    return None


def _same(o: str | None, r: str | None) -> SameValue:
    return {"observe": o, "release": r, "same": o == r if o is not None and r is not None else None}


def _sources(arms: Mapping[str, ComparisonArm], results: Mapping[str, AnalysisResult]) -> Sources:
    inputs = [arms[n]["input"] for n in ARMS]
    cap = {n: results[n].capture for n in ARMS}
    keys = sorted(set(cap["observe"]) | set(cap["release"]))
    differs: list[CaptureDifference] = []
    expected: list[ExpectedCaptureDifference] = []
    same = 0
    for k in keys:
        seen_o, seen_r = cap["observe"].get(k), cap["release"].get(k)
        if seen_o == seen_r:
            same += 1
            continue
        if _ENVIRONMENT.match(k):  # compared variable by variable: a rank's own identity differs as expected
            more, as_expected = environment_differences(k, seen_o, seen_r)
            differs += more
            expected += as_expected
            continue
        row: CaptureDifference = {"key": k, "observe": seen_o, "release": seen_r}
        why = _expected_reason(k)
        if why is None:
            differs.append(row)
        else:
            expected.append({**row, "why": why})
    return {
        "nsys_version": _same(*(i["nsys_version"] for i in inputs)),
        "schema_version": _same(*(i["schema_version"] for i in inputs)),
        "kind": _same(*(i["kind"] for i in inputs)),
        "capture": {
            "keys_compared": len(keys),
            "same": same,
            "differs": differs,
            "differs_as_expected": expected,
        },
    }


def _memory_diff(arms: Mapping[str, ComparisonArm]) -> MemoryDifferences:
    """Both arms' device-memory ledgers side by side: whether each claims one, and its value at the
    telemetry handoff (the last handoff line placed on the trace clock)."""
    statements: list[str] = []
    entries: dict[str, ArmLedger] = {}
    for n in ARMS:
        memory = arms[n]["memory"]
        entry: ArmLedger = {
            "ledger": memory["ledger"],
            "why_no_ledger": memory["why_no_ledger"],
            "at_handoff": _handoff_point(arms[n]),
        }
        entries[n] = entry
        if not memory["ledger"]:
            statements.append(f"{n}: no device-memory ledger: {memory['why_no_ledger']}")
        elif entry["at_handoff"] is not None:
            statements.append(f"{n}: {entry['at_handoff']['holder']}")
    o, r = entries["observe"]["at_handoff"], entries["release"]["at_handoff"]
    if o is not None and r is not None:
        statements.append(arms_memory_statement("the handoff", o["devices"], r["devices"]))
    return {"statements": statements, "observe": entries["observe"], "release": entries["release"]}


def _handoff_point(arm: ComparisonArm) -> MemoryPoint | None:
    """The ledger at the arm's telemetry handoff (the last handoff line placed on the trace clock)."""
    at = [p for p in arm["memory"]["at"] if p["point"] == "telemetry" and p["label"] == "handoff"
          and p["t_ns"] is not None and p["devices"]]
    return at[-1] if at else None


def _handoff_diff(arms: Mapping[str, ComparisonArm]) -> dict[str, HandoffChange] | None:
    snaps = {n: arms[n]["handoff"] for n in ARMS}
    if not any(snaps.values()):
        return None
    out: dict[str, HandoffChange] = {}
    for f in HANDOFF_FIELDS:
        o, r = ((snap["values"].get(f) if snap else None) for snap in (snaps["observe"], snaps["release"]))
        out[f] = {"observe": o, "release": r,
                  "release_minus_observe": (r - o) if isinstance(o, int) and isinstance(r, int) else None}
    return out


# --- what the comparison does not establish ------------------------------------------------------


def _said(code: str, arms: Iterable[Arm], call_api: str | None = None, *, words_key: str | None = None,
          **values: object) -> NotEstablished:
    """One thing the comparison does not establish: its code, arms and api, and its statement worded
    from :data:`nsysaudit.words.NOT_ESTABLISHED` (by ``words_key``, else the code) with ``values``."""
    return {"code": code, "arms": list(arms), "api": call_api,
            "statement": words.NOT_ESTABLISHED[words_key or code].format(**values)}


def _not_established(arms: Mapping[str, ComparisonArm], differences: Differences) -> list[NotEstablished]:
    """What the comparison does not establish, in order: censored calls, the arms' sources and options,
    their telemetry, their memory snapshots, and always that each arm is one run."""
    return [*_censored_calls(arms, differences), *_sources_differ(differences["sources"]), *_telemetry_unknowns(arms),
            *_snapshots(arms), _said("single_run_per_arm", ARMS)]


def _censored_calls(arms: Mapping[str, ComparisonArm], differences: Differences) -> list[NotEstablished]:
    """Censored library calls (and exports without a CUDA API trace): absence of a failure there is not evidence."""
    out: list[NotEstablished] = []
    for pair in differences["library_calls"]:
        mk = pair["match_key"]
        sides = {n: side for n in ARMS if (side := pair[n]) is not None}
        censored = [n for n in ARMS if n in sides and sides[n]["coverage"] == "censored"]
        undetermined = [n for n in censored if not sides[n]["nested_allocations_failed"]]
        if undetermined:
            where = " and ".join(undetermined)
            out.append(_said(
                "censored_library_call", undetermined, mk["api"], api=mk["api"], role=role_words(mk["thread_role"]),
                ordinal=mk["ordinal"], where=where,
                arms_word="in either arm" if len(undetermined) == 2 else f"in the {where} arm",
                reasons="; ".join(f"{n}: {sides[n]['censored_reason']}" for n in undetermined)))
    for n in ARMS:
        # Censored calls outside the library calls of interest are still censored.
        shown = {lc["lib_id"] for lc in arms[n]["library_calls"]}
        hidden = [c for c in arms[n]["coverage"]["censored"] if c["lib_id"] not in shown]
        if hidden:
            out.append(_said("censored_library_call", [n], words_key="censored_library_call_further",
                             count=len(hidden), arm=n))
        if not arms[n]["coverage"]["cuda_api_trace"]:
            out.append(_said("no_cuda_api_trace", [n], arm=n))
    return out


def _sources_differ(src: Sources) -> list[NotEstablished]:
    """The arms exported by different tools or captured with different options."""
    out: list[NotEstablished] = []
    for field_name, v, label in (("nsys_version", src["nsys_version"], "nsys version"),
                                 ("schema_version", src["schema_version"], "export schema version")):
        if v["same"] is not True:
            out.append(_said(f"different_{field_name}", ARMS, words_key="different_version", label=label,
                             observe=v["observe"], release=v["release"]))
    if src["capture"]["differs"]:
        out.append(_said("different_capture_options", ARMS,
                         keys=", ".join(d["key"] for d in src["capture"]["differs"])))
    return out


def _telemetry_unknowns(arms: Mapping[str, ComparisonArm]) -> list[NotEstablished]:
    """Telemetry missing, its clock not checked, or without a handoff snapshot."""
    out: list[NotEstablished] = []
    for n in ARMS:
        arm = arms[n]
        if arm["telemetry_input"] is None:
            out.append(_said("no_telemetry", [n], arm=n))
            continue
        alignment = arm["alignment"]
        if alignment is None or alignment["checked"] is not True:
            out.append(_said("alignment_not_checked", [n], arm=n))
        if arm["handoff"] is None:
            out.append(_said("no_handoff_snapshot", [n], arm=n))
    return out


def _snapshots(arms: Mapping[str, ComparisonArm]) -> list[NotEstablished]:
    """Memory snapshots in one arm only, or a snapshot's clock not checked."""
    out: list[NotEstablished] = []
    with_snapshots = [n for n in ARMS if "allocator" in arms[n]]
    if len(with_snapshots) == 1:
        without = next(n for n in ARMS if n not in with_snapshots)
        out.append(_said("allocator_view_in_one_arm", [without], arm=without))
    for n in with_snapshots:
        if not all(s["clock"]["checked"] for s in arms[n]["allocator"]["snapshots"]):
            out.append(_said("snapshot_clock_not_checked", [n], arm=n))
    return out


def _summary(
    arms: Mapping[str, ComparisonArm], differences: Differences, not_established: list[NotEstablished]
) -> list[str]:
    lines = [f"{n}: verdict {arms[n]['verdict']}" for n in ARMS]
    lines.append(differences["nested_alloc_failure"]["statement"])
    lines.extend(differences["ranks"]["statements"])
    for row in differences["findings_by_kind"]:
        if row["kind"] != "nested_alloc_failure":
            lines.append(f"{row['kind']} findings: observe {row['observe']}, release {row['release']}")
    for pair in differences["library_calls"]:
        lines.extend(pair["statements"])
    lines.extend(differences["memory"]["statements"])
    lines.extend(x["statement"] for x in not_established if x["code"] == "censored_library_call")
    lines.append(differences["stalls"]["statement"])
    return lines
