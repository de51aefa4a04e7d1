"""The documents' types: what ``analyze --json`` prints, what a sealed ``report.json`` holds, and the
comparison ``compare`` seals: a catalogue. The JSON contract (docs/json.md) is generated from these types
(``python -m nsysaudit.render.contract docs/json.md`` writes it), a document is checked against them by
:mod:`nsysaudit.reports.conformance` (which also makes their JSON Schemas), and tests/test_documents.py
fails when the types, the generated contract and the documents the tool writes drift apart.

The vocabularies are ``Literal`` types defined where their values are made (the verdict in
:mod:`nsysaudit.analysis.verdict`, censoring reasons in :mod:`nsysaudit.analysis.coverage`, finding
kinds in :mod:`nsysaudit.analysis.findings`, memory mechanisms in :mod:`nsysaudit.analysis.ledger`)
and named here. A key marked ``NotRequired`` is present only when its evidence is (``alignment`` and
``telemetry`` with a telemetry file, ``finding`` on a memory point taken at a finding, ...); every
other key is always present, ``null`` where the value is unknown.

Open-ended maps stay maps: the application's own telemetry values (``dict[str, int | float]``), the memory
kinds nsys names (``dict[str, str]``), bytes by kind (``dict[str, int]``).
"""

# No `from __future__ import annotations` here: typing would compile each TypedDict's string
# annotations into ForwardRefs at import, a small export's start-up (docs/performance.md).
import typing
from typing import (
    Literal,
    NotRequired,
    TypedDict,
)

from nsysaudit.analysis.alignment import (
    Agreement,
    AgreementDiff,
    AlignmentCheck,
    AlignmentSection,
    AnchorPair,
    Anchors,
    During,
    EventLine,
    Moment,
    Position,
    SkippedAnchor,
    TelemetryRead,
    TelemetrySummary,
    TimelineLine,
    UtcAlignment,
)
from nsysaudit.analysis.allocator import (
    AllocatorNote,
    AllocatorPoint,
    AllocatorSection,
    AllocatorState,
    AtSnapshot,
    ByAction,
    ClockCheck,
    Frame,
    InactiveHolder,
    LargestInactive,
    OomEntry,
    OutsideAllocator,
    OutsideApi,
    SegmentFrees,
    SizeClass,
    SnapshotClock,
    SnapshotHistory,
    SnapshotProcess,
    SnapshotSection,
    Stack,
)
from nsysaudit.analysis.coverage import CensoredReason, CoverageState, SourceCoverage
from nsysaudit.analysis.devices import DeviceEvidence, LaunchedCommand, Process, RankClaim, TargetDevice
from nsysaudit.analysis.findings import FindingKind
from nsysaudit.analysis.ledger import (
    ByMechanism,
    CallAllocations,
    Device,
    DeviceProcess,
    FreeCallsWithoutEvent,
    FreedNeverAllocated,
    Mechanism,
    MechanismCounts,
    Memory,
    MemoryPoint,
    PointDevice,
    PointKind,
    PointProcess,
    Pool,
    TelemetryPoints,
    VirtualMemory,
)
from nsysaudit.analysis.nccl import FailedCall, HelperThread
from nsysaudit.analysis.run import Limits
from nsysaudit.analysis.stalls import (
    Attribution,
    CallCopy,
    KernelName,
    KindStalls,
    LaunchGroup,
    LaunchThread,
    RangeStreamTime,
    StallRules,
    StallStream,
    Synchronized,
)
from nsysaudit.analysis.verdict import LibraryFailure, LibraryFailureAfter, LibrarySource, Verdict
from nsysaudit.core.codes import ReturnClass as Classification
from nsysaudit.core.errors import ReportWarning
from nsysaudit.read.diagnostics import CaptureBounds
from nsysaudit.read.inputs import Input, InputKind
from nsysaudit.read.telemetry import TelemetryBadLine
from nsysaudit.reports.stalls import (
    ArmStalls,
    ProcessStallEntry,
    RangeStallEntry,
    StallCallEntry,
    Stalls,
    StallsDifference,
)

__all__ = [
    "Agreement",
    "AgreementDiff",
    "AlignmentCheck",
    "AlignmentSection",
    "AllocatorNote",
    "AllocatorPoint",
    "AllocatorSection",
    "AllocatorState",
    "AnalysisDocument",
    "AnchorPair",
    "Anchors",
    "ArmStalls",
    "AtSnapshot",
    "Attribution",
    "ByAction",
    "ByMechanism",
    "CallAllocations",
    "CallCopy",
    "CaptureBounds",
    "CensoredReason",
    "Classification",
    "ClockCheck",
    "ComparisonDocument",
    "Coverage",
    "CoverageState",
    "Device",
    "DeviceEvidence",
    "DeviceProcess",
    "During",
    "EventLine",
    "FailedCall",
    "FindingKind",
    "Frame",
    "FreeCallsWithoutEvent",
    "FreedNeverAllocated",
    "HelperThread",
    "InactiveHolder",
    "Input",
    "InputKind",
    "KernelName",
    "KindStalls",
    "LargestInactive",
    "LaunchGroup",
    "LaunchThread",
    "LaunchedCommand",
    "LibraryFailure",
    "LibraryFailureAfter",
    "LibrarySource",
    "Limits",
    "Mechanism",
    "MechanismCounts",
    "Memory",
    "MemoryPoint",
    "Moment",
    "OomEntry",
    "OutsideAllocator",
    "OutsideApi",
    "PointDevice",
    "PointKind",
    "PointProcess",
    "Pool",
    "Position",
    "Process",
    "ProcessStallEntry",
    "RangeStallEntry",
    "RangeStreamTime",
    "RankClaim",
    "SealedAnalysisDocument",
    "SegmentFrees",
    "SizeClass",
    "SkippedAnchor",
    "SnapshotClock",
    "SnapshotHistory",
    "SnapshotProcess",
    "SnapshotSection",
    "SourceCoverage",
    "Stack",
    "StallCallEntry",
    "StallRules",
    "StallStream",
    "Stalls",
    "StallsDifference",
    "Synchronized",
    "TargetDevice",
    "TelemetryBadLine",
    "TelemetryPoints",
    "TelemetryRead",
    "TelemetrySummary",
    "TimelineLine",
    "UtcAlignment",
    "Verdict",
    "VirtualMemory",
]

ThreadRole = Literal["main", "other"]
Arm = Literal["observe", "release"]


# --- the parts ------------------------------------------------------------------------------------
class Tool(TypedDict):
    name: str
    version: str


# The contract's version, in every document's ``schema`` key: keys are added within a version (never
# renamed or removed, a type never narrowed); it goes up only if the contract itself breaks.
SchemaVersion = Literal[1]
SCHEMA_VERSION: SchemaVersion = 1


class AnalysisSchemaName(TypedDict):
    """The JSON Schema that validates the document: ``nsysaudit schema analysis`` prints it."""

    kind: Literal["analysis"]
    version: SchemaVersion


class SealedAnalysisSchemaName(TypedDict):
    """The JSON Schema that validates the document: ``nsysaudit schema sealed-analysis`` prints it."""

    kind: Literal["sealed-analysis"]
    version: SchemaVersion


class ComparisonSchemaName(TypedDict):
    """The JSON Schema that validates the document: ``nsysaudit schema comparison`` prints it."""

    kind: Literal["comparison"]
    version: SchemaVersion


class CensusRow(TypedDict):
    api: str | None
    display_api: str | None
    return_name: str | None
    return_code: int
    count: int
    classification: Classification | None


class Census(TypedDict):
    cuda_api_calls: int
    nonzero_returns: int
    by_return: list[CensusRow]
    failed_calls: int


class AllocationsBefore(TypedDict):
    count: int
    bytes_each: list[int | None]
    bytes: int | None


class Enclosing(TypedDict):
    lib_id: int
    api: str
    library: str | None
    source: str
    start_ns: int | None
    end_ns: int | None
    recorded_end_ns: int | None
    end_known: bool
    coverage: CoverageState
    allocations_before: AllocationsBefore | None
    # Where the failed call ran on a thread NCCL started for the call (analysis/nccl): that thread.
    helper_thread: NotRequired[HelperThread]
    # The mappings (cuMemSetAccess's allocation events) nested in the call before the failed call.
    mapped_before: NotRequired[AllocationsBefore]


class ChainLink(TypedDict):
    lib_id: int
    api: str
    start_ns: int | None
    end_ns: int | None


class ApiCall(TypedDict):
    api: str | None
    correlation_id: int | None
    start_ns: int | None
    end_ns: int | None


class StreamCapture(TypedDict):
    begin: ApiCall
    end: ApiCall
    event_records: list[ApiCall]
    event_records_count: int
    ns_from_capture_end: int | None
    regions_with_records_before: int
    pid: int | None
    tid: int | None
    global_tid: int | None
    thread_name: str | None


class Finding(TypedDict):
    number: int
    kind: FindingKind
    api: str | None
    display_api: str | None
    return_name: str | None
    return_code: int | None
    correlation_id: int | None
    pid: int | None
    tid: int | None
    global_tid: int | None
    thread_name: str | None
    start_ns: int | None
    end_ns: int | None
    requested_bytes: int | None
    out_of_memory: bool
    enclosing: Enclosing | None
    enclosing_chain: list[ChainLink]
    stream_capture: StreamCapture | None
    telemetry: NotRequired[Position]
    rank: int | None
    rank_source: str | None
    device_id: int | None
    devices: list[int | None]


class FailedCalls(TypedDict):
    """Failures no finding explains, grouped by call, return, thread and NVTX range."""

    api: str | None
    display_api: str | None
    return_name: str | None
    return_code: int | None
    allocation: bool
    out_of_memory: bool
    pid: int | None
    tid: int | None
    global_tid: int | None
    thread_name: str | None
    nvtx_range: str | None
    nvtx_domain: str | None
    straddles_library_call: bool
    library_call_unexamined: bool
    count: int
    first_ns: int | None
    last_ns: int | None
    example_correlation_ids: list[int]




class Censored(TypedDict):
    """A library call the trace does not cover, and why (``reasons``, most telling first)."""

    lib_id: int
    api: str
    pid: int | None
    tid: int | None
    thread_name: str | None
    start_ns: int | None
    end_ns: int | None
    recorded_end_ns: int | None
    end_known: bool
    reason: CensoredReason
    reasons: list[CensoredReason]
    cuda_api_first_ns: int | None
    cuda_api_last_ns: int | None


class NsysDiagnostic(TypedDict):
    timestamp_ns: int | None
    severity: str
    source: str | None
    text: str
    category: str
    library: str | None
    global_pid: int | None
    pid: int | None


class Coverage(TypedDict):
    cuda_api_trace: bool
    by_source: list[SourceCoverage]
    censored: list[Censored]
    capture: CaptureBounds
    nsys_diagnostics: list[NsysDiagnostic]
    library_sources: list[LibrarySource]


class FailingRank(TypedDict):
    finding: int
    finding_number: int
    pid: int | None
    global_pid: int | None
    rank: int | None
    rank_source: str | None
    device_id: int | None
    devices: list[int | None]


class Ranks(TypedDict):
    """The ranks the evidence states, and the failing ones; ``shown``: whether reports for people name
    devices and ranks (several devices, or a stated rank)."""

    rule: str
    processes: int
    processes_with_rank: int
    ranks: list[int]
    failing: list[FailingRank]
    failing_ranks: list[int]
    failing_rank_unknown: int
    statement: str | None
    shown: bool


class Child(TypedDict):
    api: str | None
    display_api: str | None
    return_code: int | None
    return_name: str | None
    correlation_id: int | None
    start_ns: int | None
    end_ns: int | None
    bytes: int | None


class LibraryCallIdentity(TypedDict):
    """Which library call (its id, API, library and NVTX source) and the thread it ran on: the keys a
    library call's record starts with, defined once (:class:`LibraryCall` of the analysis,
    :class:`ArmLibraryCall` of a comparison's arm)."""

    lib_id: int
    api: str
    display_api: str | None
    library: str | None
    source: str
    pid: int | None
    tid: int | None
    global_tid: int | None
    thread_name: str | None


class LibraryCall(LibraryCallIdentity):
    start_ns: int | None
    end_ns: int | None
    recorded_end_ns: int | None
    end_known: bool
    duration_ns: int | None
    coverage: CoverageState
    censored_reason: CensoredReason | None
    censored_reasons: list[CensoredReason] | None
    coverage_evidence: str | None
    cuda_api_first_ns: int | None
    cuda_api_last_ns: int | None
    children: list[Child]
    straddling: list[Child]
    allocated_bytes: int | None
    allocated_bytes_traced: int
    allocations_size_unknown: int
    failed_children: int
    children_complete: bool
    telemetry: NotRequired[Position]


class AnswerFinding(TypedDict):
    finding: int
    finding_number: int
    kind: FindingKind
    what: str
    when: str | None
    held: str | None
    # What the application's telemetry recorded of the library's error (NCCL's), tied to this finding.
    reported: NotRequired[str]


class AnswerCensored(TypedDict):
    lib_id: int
    what: str
    held: str | None


class Answer(TypedDict):
    """What a person reads first: the verdict in a sentence, each finding in words, what limits it."""

    verdict: Verdict
    summary: str
    findings: list[AnswerFinding]
    censored: list[AnswerCensored]
    censored_total: int
    limits: list[str]
    stalls: list[str]  # the processes whose host stalls are above the share stalls.rules says (docs/stalls.md)


class TelemetrySection(TelemetrySummary):
    library_failures: list[LibraryFailure]


# --- the analysis document ---------------------------------------------------------------------------
class AnalysisKeys(TypedDict):
    """The keys every form of one input's analysis has: ``analyze --json`` adds ``tool``, the sealed
    ``report.json`` adds ``format``, ``kind``, ``inputs`` and ``options``."""

    input: Input
    census: Census
    findings: list[Finding]
    failed_calls: list[FailedCalls]
    coverage: Coverage
    processes: list[Process]
    verdict: Verdict
    verdict_reasons: list[str]
    warnings: list[ReportWarning]
    limits: Limits
    memory: Memory
    answer: Answer
    library_calls: list[LibraryCall]
    alignment: NotRequired[AlignmentSection]
    telemetry: NotRequired[TelemetrySection]
    devices: list[TargetDevice]
    launches: list[LaunchedCommand]
    ranks: Ranks
    stalls: Stalls
    allocator: NotRequired[AllocatorSection]


class AnalysisDocument(AnalysisKeys):
    """``nsysaudit analyze --json``: one input's analysis (:class:`AnalysisKeys`), the tool that made it and
    the schema that validates it."""

    tool: Tool
    schema: AnalysisSchemaName


class FileRecord(TypedDict):
    """A file as a report names it: its basename, SHA-256 and size, never a full path. The one definition
    of these keys: a sealed input, an arm's input and an arm's telemetry file derive from it."""

    name: str
    sha256: str
    size_bytes: int


class _InputRole(TypedDict):
    # A sealed input's role, its first key (docs/json.md's order): a base of its own, so that
    # SealedInput derives from FileRecord without moving it.
    role: str


class SealedInput(_InputRole, FileRecord):
    kind: str


class SealedTelemetryOptions(TypedDict):
    """How the telemetry was read and aligned (``clock``: ``[kind, field]`` pairs; ``anchors`` as
    ``--anchor`` spells them)."""

    event_key: str
    clock: list[list[str]]
    lenient: bool
    anchors: list[str]
    tolerance_ns: int


class SealedOptions(TypedDict):
    """The options a sealed report was made with, the ones that change the analysis (``telemetry``:
    null without telemetry)."""

    library_domains: list[str]
    max_pairs: int
    telemetry: SealedTelemetryOptions | None
    labels: NotRequired[list[str]]  # compare --labels: the arms' names in the sentences (observe, release otherwise)
    snapshots: NotRequired["SealedSnapshotOptions"]


class SealedSnapshotOptions(TypedDict):
    """How the memory snapshots were joined (``tolerance_ns``: how far their clock may disagree with
    the trace's, ``--clock-tolerance``)."""

    tolerance_ns: int


class SealedAnalysisDocument(AnalysisKeys):
    """A sealed analysis' ``report.json``: the analysis (:class:`AnalysisKeys`) with paths as basenames and
    without what depends on the machine or the install (``tool``, ``input.export``, ``input.engine``,
    the SQLite version: in ``metadata.json``), plus ``format``, ``kind``, ``inputs``, (in
    ``report.json``, the options it was made with) ``options`` and the ``schema`` that validates it."""

    format: str
    kind: Literal["analysis"]
    inputs: list[SealedInput]
    options: NotRequired[SealedOptions]
    schema: SealedAnalysisSchemaName


class ArmInput(FileRecord):
    kind: InputKind
    nsys_version: str | None
    schema_version: str | None


class TelemetryFileRecord(FileRecord):
    pass  # the arm's telemetry file (``telemetry_input``): a FileRecord under the contract's name for it


class ArmCensus(TypedDict):
    cuda_api_calls: int
    nonzero_returns: int
    by_return: list[CensusRow]


class MatchKey(TypedDict):
    """How a library call is paired across the arms: the ``ordinal``-th call of ``api`` (in time order) on
    the main thread or on another (pids and tids differ between runs)."""

    api: str
    thread_role: ThreadRole
    ordinal: int


class NestedAllocations(TypedDict):
    """A library call's nested allocation calls: how many succeeded and failed, and the bytes of those
    that succeeded (``bytes_each``: ``null`` where a size is unknown)."""

    calls: int
    succeeded: int
    failed: int
    succeeded_before_first_failure: int | None
    bytes: int
    bytes_unknown: int
    bytes_each: list[int | None]


class NestedByApi(TypedDict):
    """Nested calls counted per (api, return code); ``bytes``: only allocation calls have them (``null``
    where unknown)."""

    api: str | None
    display_api: str | None
    return_name: str | None
    return_code: int | None
    count: int
    allocation: bool
    bytes: int | None


class ArmLibraryCall(LibraryCallIdentity):
    """A library call of interest in one arm: its nested calls summarized (``nested_by_api``; every
    allocation and failed one listed), the ledger at its start, and its ``match_key`` across the arms."""

    thread_role: ThreadRole
    start_ns: int | None
    end_ns: int | None
    duration_ns: int | None
    coverage: CoverageState
    censored_reason: CensoredReason | None
    cuda_api_last_ns: int | None
    nested_calls: int
    nested_failed: int
    allocations: NestedAllocations
    allocation_calls: list[Child]
    failed_calls: list[Child]
    nested_by_api: list[NestedByApi]
    straddling: list[Child]
    telemetry: Position | None
    memory_at_start: list[PointDevice]
    holder_at_start: str | None
    match_key: MatchKey


class ArmTelemetry(TelemetryRead):
    """The arm's telemetry file summarized (``telemetry`` of the analysis without its path and per-line
    timeline), named by its basename."""

    library_failures: list[LibraryFailure]
    name: str


class Handoff(TypedDict):
    """The telemetry ``handoff`` snapshot of an arm (``chosen_by`` says which line, of ``handoff_lines``),
    its ``allocated``, ``reserved`` and ``physical_free`` values shown side by side (``null`` where the
    line has none)."""

    line: int
    trace_ns: int | None
    via: str | None
    chosen_by: str
    handoff_lines: int
    allocated: int | float | None
    reserved: int | float | None
    physical_free: int | float | None
    values: dict[str, int | float]


class ComparisonArm(TypedDict):
    """One arm of a comparison: its analysis' keys, with the library calls of interest summarized
    (``library_calls``: at most ten, chosen as ``library_calls_selection`` says)."""

    input: ArmInput
    telemetry_input: TelemetryFileRecord | None
    verdict: Verdict
    verdict_reasons: list[str]
    census: ArmCensus
    findings: list[Finding]
    failed_calls: list[FailedCalls]
    library_calls_total: int
    library_calls_listed: int
    library_calls_selection: str
    library_calls: list[ArmLibraryCall]
    coverage: Coverage
    telemetry: ArmTelemetry | None
    handoff: Handoff | None
    alignment: AlignmentSection | None
    warnings: list[ReportWarning]
    memory: Memory
    answer: Answer
    devices: list[TargetDevice]
    processes: list[Process]
    launches: list[LaunchedCommand]
    ranks: Ranks
    stalls: Stalls
    allocator: NotRequired[AllocatorSection]


class FailurePresence(TypedDict):
    """Nested allocation failures in each arm (counts), where present and absent, in a sentence."""

    observe: int
    release: int
    present_in: list[Arm]
    absent_in: list[Arm]
    statement: str


class KindCounts(TypedDict):
    kind: FindingKind
    observe: int
    release: int


class PairedSide(TypedDict):
    """One arm's side of a pair of library calls: where it ran, what its nested allocations did, and
    the ledger at its start."""

    lib_id: int
    pid: int | None
    tid: int | None
    thread_name: str | None
    start_ns: int | None
    end_ns: int | None
    coverage: CoverageState
    censored_reason: CensoredReason | None
    nested_allocations_succeeded: int
    nested_allocations_failed: int
    succeeded_before_first_failure: int | None
    allocated_bytes: int
    allocated_bytes_each: list[int | None]
    bytes_unknown: int
    failed_allocations: list[Child]
    telemetry: Position | None
    memory_at_start: list[PointDevice]
    holder_at_start: str | None


class PairedCall(TypedDict):
    """The library calls of the two arms with the same ``match_key`` (``null`` on the side that has
    none), and what they say side by side (``statements``)."""

    match_key: MatchKey
    observe: PairedSide | None
    release: PairedSide | None
    nested_calls_same: bool | None
    statements: list[str]


class FailingCode(TypedDict):
    """How many calls returned this (api, return code) in each arm."""

    api: str | None
    display_api: str | None
    return_name: str | None
    return_code: int | None
    observe: int
    release: int


class FailingByCode(TypedDict):
    only_in_observe: list[FailingCode]
    only_in_release: list[FailingCode]
    in_both: list[FailingCode]


class FailingCalls(TypedDict):
    """The failing (api, return code)s of the whole export (``census``) and nested in the library calls
    of interest (``nested``), by the arms they fail in."""

    census: FailingByCode
    nested: FailingByCode


class SameValue(TypedDict):
    """One value of each arm's input, and whether they are the same (``null`` where one is unknown)."""

    observe: str | None
    release: str | None
    same: bool | None


class CaptureDifference(TypedDict):
    """A META_DATA_CAPTURE key (or ``KEY:NAME``, an environment variable) whose values differ: each
    arm's values, ``null`` where the arm does not record it."""

    key: str
    observe: list[str] | None
    release: list[str] | None


class ExpectedCaptureDifference(CaptureDifference):
    """A difference the comparison expects (``why``: e.g. the rank's own identity)."""

    why: str


class CaptureComparison(TypedDict):
    """The arms' META_DATA_CAPTURE settings compared key by key (an environment variable by variable)."""

    keys_compared: int
    same: int
    differs: list[CaptureDifference]
    differs_as_expected: list[ExpectedCaptureDifference]


class Sources(TypedDict):
    """Whether the arms were exported and captured alike."""

    nsys_version: SameValue
    schema_version: SameValue
    kind: SameValue
    capture: CaptureComparison


class HandoffChange(TypedDict):
    observe: int | float | None
    release: int | float | None
    release_minus_observe: int | None


class ArmLedger(TypedDict):
    """Whether an arm's ledger is claimed, and its value at the arm's telemetry handoff."""

    ledger: bool
    why_no_ledger: str | None
    at_handoff: MemoryPoint | None


class MemoryDifferences(TypedDict):
    """Both arms' device-memory ledgers side by side, in sentences."""

    statements: list[str]
    observe: ArmLedger
    release: ArmLedger


class ArmRank(TypedDict):
    """What one arm of a comparison states about its rank: the ranks its processes state, the one
    rank (where exactly one is stated) with its source, pid, devices and world size, and its
    failing ranks."""

    ranks: list[int]
    rank: int | None
    rank_source: str | None
    pid: int | None
    devices: list[int | None]
    world_size: int | None
    failing_ranks: list[int]


class RankDifferences(TypedDict):
    """The comparison's ``differences.ranks`` (made by :func:`nsysaudit.reports.ranks.rank_differences`)."""

    observe: ArmRank
    release: ArmRank
    two_ranks: bool
    same_job: bool | None
    same_job_evidence: str | None
    statements: list[str]


class AllocatorChange(TypedDict):
    """The allocator of both arms at one moment (each arm's first device; ``null``: no snapshot of
    that arm's process reaches it) and the release arm's figures less the observe arm's."""

    observe: AllocatorState | None
    release: AllocatorState | None
    reserved_release_minus_observe: int | None
    requested_release_minus_observe: int | None
    inactive_release_minus_observe: int | None


class AllocatorPair(AllocatorChange):
    """The allocator at the start of a pair of library calls (``match_key`` as in ``differences.library_calls``)."""

    match_key: MatchKey


class SegmentsReleased(TypedDict):
    """The segments an arm's allocator gave back to CUDA in its history (``segment_free``/``segment_unmap``:
    ``torch.cuda.empty_cache()``, or freeing to allocate again), by the stack that gave them back
    (stacks of that arm's ``allocator.stacks``)."""

    snapshot: int
    segments: int
    bytes: int
    by_stack: list[SegmentFrees]


class ArmAllocator(TypedDict):
    """One arm's snapshots in a comparison: how many, whether every one's clock is checked, what its
    allocator gave back to CUDA (from the snapshot whose history ends last)."""

    snapshots: int
    checked: bool
    segments_released: SegmentsReleased | None


class AllocatorDifferences(TypedDict):
    """What the release did to the allocator's blocks: each arm's segments given back to CUDA, and the
    allocator side by side at the telemetry handoff and at the start of each pair of library calls
    (``null`` on an arm without snapshots)."""

    observe: ArmAllocator | None
    release: ArmAllocator | None
    at_handoff: AllocatorChange
    library_calls: list[AllocatorPair]


class Differences(TypedDict):
    """What differs between the arms. ``handoff``: each handoff field in both arms (``null`` when neither
    arm's telemetry has a handoff line); ``ranks``: made by nsysaudit.reports.ranks.rank_differences;
    ``allocator``: with memory snapshots only."""

    nested_alloc_failure: FailurePresence
    findings_by_kind: list[KindCounts]
    library_calls: list[PairedCall]
    failing_calls: FailingCalls
    sources: Sources
    handoff: dict[str, HandoffChange] | None
    memory: MemoryDifferences
    ranks: RankDifferences
    stalls: StallsDifference
    allocator: NotRequired[AllocatorDifferences]


class NotEstablished(TypedDict):
    """What the comparison cannot establish, and why."""

    code: str
    api: str | None
    arms: list[Arm]
    statement: str


class ComparisonAnswer(TypedDict):
    """``ranks``: where the arms are two ranks (docs/multigpu.md), which rank each is and what differs
    between them at the same library call (empty otherwise)."""

    summary: str
    arms: dict[str, Answer]
    ranks: list[str]
    memory: list[str]
    not_established: list[str]
    stalls: str  # the host stalls of the arms, by their labels, and what changed


class ComparisonDocument(TypedDict):
    """``compare``'s sealed ``report.json``: both arms' analyses (``arms``, each a selection of the
    analysis document's keys) and what differs between them; ``options`` in ``report.json``; the
    ``schema`` that validates it."""

    format: str
    kind: Literal["comparison"]
    inputs: list[SealedInput]
    options: NotRequired[SealedOptions]
    arms: dict[str, ComparisonArm]
    labels: dict[str, str]  # what the sentences call each arm (compare --labels; observe, release otherwise)
    differences: Differences
    not_established: list[NotEstablished]
    summary: list[str]
    answer: ComparisonAnswer
    schema: ComparisonSchemaName


def vocabularies() -> dict[str, tuple[str, ...]]:
    """Each vocabulary's values, by its name."""
    named = {"Verdict": Verdict, "FindingKind": FindingKind, "CensoredReason": CensoredReason,
             "Classification": Classification, "Mechanism": Mechanism, "CoverageState": CoverageState,
             "PointKind": PointKind}
    return {name: typing.get_args(t) for name, t in named.items()}
