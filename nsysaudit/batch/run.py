"""Batch audits: many exports in, two tables out (one row per input, one per finding).

:func:`run_batch` (the ``nsysaudit batch`` command) and :func:`audit_many` (its notebook form)
find the inputs (:func:`find_inputs`), run :func:`audit_one` on each, on one of the engines of
:mod:`nsysaudit.batch.workers`, and gather the rows:

- ``local``: ``jobs`` worker processes on this machine (``jobs=1`` runs in this process);
- ``dask``: the same work on ``dask.distributed`` (a ``LocalCluster`` of ``jobs`` processes, or the
  scheduler at ``scheduler``); workers read the files at the paths given, so those must be the
  paths where the workers see them.

Every worker sends back only rows (plain dicts), never an :class:`~nsysaudit.AnalysisResult`, so
the driver's memory grows with the number of rows, not with the exports. An input that cannot be
analyzed (:class:`~nsysaudit.core.errors.NsysAuditError`, or an ``OSError`` while reading it) is a row
with its one-line ``error``; it never stops the batch. Any other exception is a bug: it stops the
batch, and what was finished is kept (below).

With an output (``out``, :class:`~nsysaudit.batch.output.BatchOutput`), each finished input is
written at once as a part file keyed by its SHA-256, so an interrupted batch keeps what it
finished; a rerun into the same output hashes each input and does not analyze again an input whose
SHA-256 has a part (its row says ``status = "resumed"``). Inputs whose analysis failed are not kept
as parts: a rerun tries them again. The combined tables are written last, atomically. The parts are
the batch's own working files and a rerun trusts them: delete the output to start over.

>>> import nsysaudit
>>> table = nsysaudit.audit_many(["tests/fixtures/h200-cuda13-nsys2025.3/torch"], jobs=1)
>>> table.select("path", "verdict", "findings").sort("path").rows()  # doctest: +NORMALIZE_WHITESPACE
[('tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite', 'failure_found', 1),
 ('tests/fixtures/h200-cuda13-nsys2025.3/torch/release.sqlite', 'no_failure', 0)]
"""

from __future__ import annotations

import functools
import html
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NotRequired, TypedDict

import polars as pl

from nsysaudit import words
from nsysaudit.analysis.joins import DEFAULT_MAX_PAIRS
from nsysaudit.analysis.stalls import RangeStalls
from nsysaudit.batch import ranks as by_rank
from nsysaudit.batch.output import (
    FINDING_ROW_SCHEMA as FINDING_ROW_SCHEMA,
)
from nsysaudit.batch.output import (
    INPUT_SCHEMA,
    BatchOptions,
    BatchOutput,
    FindingRow,
    InputRow,
    Prepared,
    findings_frame,
    table,
)
from nsysaudit.batch.workers import (
    ENGINES,
    Engine,
    default_jobs,
    run_dask,
    run_local,
)
from nsysaudit.batch.workers import (
    WORKER_DIED as WORKER_DIED,
)
from nsysaudit.core.digests import sha256_file
from nsysaudit.core.errors import BadOption, BatchOutputNotWritable, NsysAuditError, UnusableInput
from nsysaudit.core.progress import Progress
from nsysaudit.core.text import escape
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.documents import AllocatorSection, AllocatorState, CensoredReason, Finding, MemoryPoint
from nsysaudit.session import analyze

INPUT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
SNAPSHOT_SUFFIX = ".pickle"
SNAPSHOT_JOINERS = ("-", ".", "_")
SCHEDULER_TIMEOUT = "10s"  # how long to try reaching a --scheduler address
KIND_COLUMNS = {
    "nested_alloc_failure": "nested_alloc_failures",
    "straddling_alloc_failure": "straddling_alloc_failures",
    "nested_call_failure": "nested_call_failures",
    "captured_event_wait_failure": "captured_event_wait_failures",
}


# --- inputs ------------------------------------------------------------------------------------------


def find_inputs(paths: Iterable[str | os.PathLike[str]]) -> list[str]:
    """Files as given; folders searched recursively (symlinked folders not followed) for
    ``*.sqlite``, ``*.nsys-rep`` and ``*.qdrep`` (any case), in sorted order. A path that does not
    exist, and a folder that holds no such file, are kept as given: each becomes an unusable input
    (a row with its error), never silently nothing. Repeated paths are listed once."""
    found: dict[str, None] = {}
    for given in paths:
        path = os.fspath(given)
        if not os.path.isdir(path):
            found[path] = None
            continue
        matches = []
        for root, dirs, files in os.walk(path):
            dirs.sort()
            matches += [os.path.join(root, f) for f in files if f.lower().endswith(INPUT_SUFFIXES)]
        found.update(dict.fromkeys(sorted(matches) or [path]))
    return list(found)


def snapshots_beside(path: str | os.PathLike[str]) -> list[str]:
    """The PyTorch memory snapshots that go with an input, by name (docs/batch.md): the files beside it
    named like it with ``.pickle`` in place of its suffix, or its name, then ``-``, ``.`` or ``_`` and
    anything, then ``.pickle`` (``observe.sqlite``: ``observe.pickle``, ``observe-end.pickle``,
    ``observe.rank0.pickle``). A snapshot named for two inputs of the folder goes with the one whose
    name is longer (``observe-2-end.pickle`` with ``observe-2.sqlite``, not ``observe.sqlite``).
    Sorted by name.

    >>> snapshots_beside("tests/fixtures/h200-cuda13-nsys2025.3/snap/observe.sqlite")  # doctest: +NORMALIZE_WHITESPACE
    ['tests/fixtures/h200-cuda13-nsys2025.3/snap/observe-end.pickle',
     'tests/fixtures/h200-cuda13-nsys2025.3/snap/observe-handoff.pickle']
    """
    given = os.fspath(path)
    folder, name = os.path.split(given)
    stem = _stem(name)
    try:
        names = sorted(os.listdir(folder or "."))
    except OSError:
        return []
    stems = {_stem(n) for n in names if n.lower().endswith(INPUT_SUFFIXES)} | {stem}
    out = []
    for n in names:
        if not n.endswith(SNAPSHOT_SUFFIX) or not os.path.isfile(os.path.join(folder, n)):
            continue
        owners = [s for s in stems if _names(n[: -len(SNAPSHOT_SUFFIX)], s)]
        if owners and max(map(len, owners)) == len(stem) and stem in owners:
            out.append(os.path.join(folder, n))
    return out


def _stem(name: str) -> str:
    lower = name.lower()
    return next((name[: -len(sfx)] for sfx in INPUT_SUFFIXES if lower.endswith(sfx)), name)


def _names(snapshot: str, stem: str) -> bool:
    return snapshot == stem or any(snapshot.startswith(stem + j) for j in SNAPSHOT_JOINERS)


# --- one input: what a worker runs -----------------------------------------------------------------


@dataclass(frozen=True)
class AuditOptions:
    """The analysis options of a batch (as for :func:`nsysaudit.analyze`); part files are only
    reused by a batch with the same options."""

    library_domains: tuple[str, ...] = DEFAULT_LIBRARY_DOMAINS
    max_pairs: int | None = DEFAULT_MAX_PAIRS
    nsys_path: str | None = None
    snapshots: bool = False  # read the memory snapshots beside each input (snapshots_beside)

    def recorded(self) -> BatchOptions:
        """What changes the rows (``nsys_path`` does not: the nsys version is in each row's export)."""
        out: BatchOptions = {"library_domains": list(self.library_domains), "max_pairs": self.max_pairs}
        if self.snapshots:
            out["snapshots"] = True
        return out


class AuditRows(TypedDict):
    """What the analysis of one input gives a batch: its input row and its finding rows; for ``check``'s
    stall budgets, the NVTX ranges holding blocking calls (the document's ``stalls.ranges``, listed
    longest stalls first, and how many there are)."""

    input: InputRow
    findings: list[FindingRow]
    stall_ranges: NotRequired[list[RangeStalls]]
    stall_ranges_total: NotRequired[int]


class AuditOutcome(AuditRows):
    """:func:`audit_one`'s answer: the rows, and ``seconds``, how long the work took."""

    seconds: float


def audit_one(
    path: str, options: AuditOptions, done: frozenset[str] = frozenset(), *, telemetry: str | None = None
) -> AuditOutcome:
    """Analyze one input; return ``{"input": row, "findings": [rows], "seconds": s}`` (plain,
    picklable values; ``seconds``: how long the work took).

    ``done``: SHA-256s that already have part files: such an input is hashed, not analyzed
    (``status = "resumed"``, the rest of its row is read from its part by the driver).
    ``telemetry``: the application's telemetry for this input (``nsysaudit check`` gives one per
    expectation).
    """
    started = time.perf_counter()
    outcome = _audit(path, options, done, telemetry)
    return {**outcome, "seconds": round(time.perf_counter() - started, 6)}


def _audit(path: str, options: AuditOptions, done: frozenset[str], telemetry: str | None) -> AuditRows:
    try:
        if os.path.isdir(path):  # find_inputs keeps a folder only when it holds no export
            raise UnusableInput(path, "folder holds no *.sqlite, *.nsys-rep or *.qdrep file")
        expected = None
        if done:
            expected = _digest(path)
            if expected in done:
                return {"input": {"path": path, "sha256": expected, "status": "resumed"}, "findings": []}
        snapshots = snapshots_beside(path) if options.snapshots else []
        result = analyze(path, library_domains=options.library_domains, max_pairs=options.max_pairs,
                         nsys_path=options.nsys_path, telemetry=telemetry, snapshots=snapshots)
        if expected is not None and result.input.sha256 != expected:
            raise UnusableInput(path, f"the file changed while it was read (SHA-256 {expected} then "
                                f"{result.input.sha256})")
    except NsysAuditError as exc:
        return _failed(path, str(exc))
    except OSError as exc:  # the file or its folder failed under us (I/O error, vanished, ...)
        where = exc.filename if exc.filename is not None else path
        return _failed(path, f"{where}: {exc.strerror or exc}")
    sha = result.input.sha256
    row = _input_row(path, result, len(snapshots) if options.snapshots else None)
    stalls = result.head["stalls"]
    at = _allocator_at_findings(result.head.get("allocator"))
    ledger = {p["finding"]: p for p in result.head["memory"]["at"] if p["point"] == "finding" and "finding" in p}
    ranges: list[RangeStalls] = list(stalls["ranges"])
    return {"input": row, "findings": [finding_row(sha, i, f, at.get(i), ledger.get(i), path=path)
                                       for i, f in enumerate(result.findings)],
            "stall_ranges": ranges, "stall_ranges_total": stalls["ranges_total"]}


def _input_row(path: str, result: AnalysisResult, snapshots: int | None) -> InputRow:
    """The inputs table's row of an analyzed input (``snapshots``: how many were joined; None where
    the batch joins none)."""
    sha = result.input.sha256
    census = result.census
    findings = result.findings
    censored = result.censored_table
    kinds = [f["kind"] for f in findings]
    ranks = by_rank.input_columns(result.head)
    reasons: list[CensoredReason] = sorted(censored["reasons"].explode().drop_nulls().unique().to_list())
    libraries = sorted({lib for f in findings if f["enclosing"] is not None
                        and (lib := f["enclosing"]["library"]) is not None})
    stalls = result.head["stalls"]
    row: InputRow = {
        "path": path,
        "sha256": sha,
        "kind": result.input.kind,
        "size_bytes": result.input.size_bytes,
        "nsys_version": result.input.nsys_version,  # a report's: the release that captured it
        "schema_version": result.input.schema_version,
        "exported_with": result.input.export_nsys_version,  # a report's export: the release that exported it
        "verdict": result.verdict,
        "cuda_api_calls": census["cuda_api_calls"],
        "nonzero_returns": census["nonzero_returns"],
        "failed_calls": census["failed_calls"],
        "library_calls": result.frames["library_calls"].height,
        "censored_library_calls": censored.height,
        "censored_reasons": ", ".join(reasons) or None,
        "findings": len(findings),
        "warnings": len(result.warnings),
        "error": None,
        "status": "analyzed",
        # KIND_COLUMNS, in its order
        "nested_alloc_failures": kinds.count("nested_alloc_failure"),
        "straddling_alloc_failures": kinds.count("straddling_alloc_failure"),
        "nested_call_failures": kinds.count("nested_call_failure"),
        "captured_event_wait_failures": kinds.count("captured_event_wait_failure"),
        # The libraries whose calls enclose the findings (cuBLAS, NCCL ...): null where none does.
        "library": ", ".join(libraries) or None,
        # RankColumns, in its order
        "devices": ranks["devices"],
        "devices_used": ranks["devices_used"],
        "rank": ranks["rank"],
        "rank_source": ranks["rank_source"],
        "ranks": ranks["ranks"],
        "failing_ranks": ranks["failing_ranks"],
        "failing_rank_unknown": ranks["failing_rank_unknown"],
        "failing_devices": ranks["failing_devices"],
        # the host stalls' totals
        "blocking_calls": stalls["blocking_calls"],
        "blocked_ns": stalls["blocked_ns"],
        "stalls": stalls["stalls"],
        "stalled_ns": stalls["stalled_ns"],
        "snapshots": snapshots,
        # the joined columns as lists ([] where the string is null)
        "censored_reasons_list": reasons,
        "library_list": libraries,
        "devices_used_list": ranks["devices_used_list"],
        "ranks_list": ranks["ranks_list"],
        "failing_ranks_list": ranks["failing_ranks_list"],
        "failing_devices_list": ranks["failing_devices_list"],
    }
    return row


def _allocator_at_findings(section: AllocatorSection | None) -> dict[int, AllocatorState]:
    """The allocator at each finding (its first device), by the finding's index."""
    if section is None:
        return {}
    return {p["finding"]: p["states"][0] for p in section["at"] if p["point"] == "finding" and "finding" in p
            and p["states"]}


def finding_row(
    sha256: str,
    index: int,
    finding: Finding,
    allocator: AllocatorState | None = None,
    ledger: MemoryPoint | None = None,
    *,
    path: str = "",
) -> FindingRow:
    """One ``findings[]`` entry of the JSON contract as a flat row (the input's SHA-256 first), with
    the allocator at it (``allocator``: its ``allocator.at[]`` state, when snapshots were read), the
    input's ``path`` (the batch sets the one its inputs table has) and the ledger's figures at it
    (``ledger``: its ``memory.at[]`` point; :func:`holder_columns`)."""
    enclosing = finding["enclosing"]
    before = enclosing["allocations_before"] if enclosing is not None else None
    capture = finding["stream_capture"]
    return {
        "input_sha256": sha256,
        "finding": index,
        "finding_number": finding["number"],
        # the finding's own keys, in FINDING_ROW_SCHEMA's order
        "kind": finding["kind"],
        "api": finding["api"],
        "display_api": finding["display_api"],
        "return_code": finding["return_code"],
        "return_name": finding["return_name"],
        "correlation_id": finding["correlation_id"],
        "pid": finding["pid"],
        "tid": finding["tid"],
        "global_tid": finding["global_tid"],
        "thread_name": finding["thread_name"],
        "start_ns": finding["start_ns"],
        "end_ns": finding["end_ns"],
        "requested_bytes": finding["requested_bytes"],
        "out_of_memory": finding["out_of_memory"],
        "rank": finding["rank"],
        "rank_source": finding["rank_source"],
        "device_id": finding["device_id"],
        "enclosing_api": enclosing["api"] if enclosing is not None else None,
        "enclosing_library": enclosing["library"] if enclosing is not None else None,
        "enclosing_source": enclosing["source"] if enclosing is not None else None,
        "enclosing_start_ns": enclosing["start_ns"] if enclosing is not None else None,
        "enclosing_end_ns": enclosing["end_ns"] if enclosing is not None else None,
        "enclosing_recorded_end_ns": enclosing["recorded_end_ns"] if enclosing is not None else None,
        "enclosing_coverage": enclosing["coverage"] if enclosing is not None else None,
        "allocations_before": before["count"] if before is not None else None,
        "allocations_before_bytes": before["bytes"] if before is not None else None,
        "stream_capture_event_records": capture["event_records_count"] if capture is not None else None,
        "ns_from_capture_end": capture["ns_from_capture_end"] if capture is not None else None,
        "allocator_reserved_bytes": allocator["reserved_bytes"] if allocator is not None else None,
        "allocator_inactive_bytes": allocator["inactive_bytes"] if allocator is not None else None,
        "path": path,
        **holder_columns(ledger, finding["device_id"]),
    }


class HolderColumns(TypedDict):
    """The ledger at a finding as numbers (output.HOLDER_COLUMNS, then ``held_covered``): its holder
    sentence (``memory.at[].holder``) is the analysis document's."""

    held_bytes: int | None
    process_held_bytes: int | None
    free_at_most_bytes: int | None
    device_total_bytes: int | None
    holder_pid: int | None
    holder_bytes: int | None
    holders: int | None
    held_covered: bool | None


def holder_columns(point: MemoryPoint | None, device_id: int | None) -> HolderColumns:
    """The figures of the ledger's point at a finding, on the finding's device: the point's one device,
    else the one that is ``device_id`` (the finding's); null where there is no point (no ledger) or
    the device is not one of its (a process without memory events, several devices traced).

    ``held_bytes``: what every traced process held on the device (device-resident); ``process_held_bytes``:
    the failing process's own live bytes there; ``free_at_most_bytes``: the bound on free memory (null
    where the ledger claims none); ``device_total_bytes``; ``holder_pid`` and ``holder_bytes``: the
    process that held the most, and how much (null when none held any); ``holders``: how many traced
    processes held device memory; ``held_covered``: whether the trace covers the moment."""
    none: HolderColumns = {"held_bytes": None, "process_held_bytes": None, "free_at_most_bytes": None,
                           "device_total_bytes": None, "holder_pid": None, "holder_bytes": None, "holders": None,
                           "held_covered": None}
    if point is None:
        return none
    devices = point["devices"]
    chosen = devices if len(devices) == 1 else [d for d in devices if device_id is not None
                                                 and d["device_id"] == device_id]
    if len(chosen) != 1:
        return {**none, "held_covered": point["covered"]}
    (d,) = chosen
    holding = [p for p in d["processes"] if p["resident_bytes"] or p["imported_pool_bytes"]]
    top = min((p for p in holding if p["resident_bytes"]), key=lambda p: (-p["resident_bytes"], p["global_pid"]),
              default=None)
    return {
        "held_bytes": d["device_resident_live_bytes"],
        "process_held_bytes": d["process_live_bytes"],
        "free_at_most_bytes": d["free_at_most_bytes"],
        "device_total_bytes": d["total_bytes"],
        "holder_pid": top["pid"] if top is not None else None,
        "holder_bytes": top["resident_bytes"] if top is not None else None,
        "holders": len(holding),
        "held_covered": point["covered"],
    }


def _digest(path: str) -> str:
    """SHA-256 of a regular file (never opens a FIFO or a device: that could block forever)."""
    if not os.path.exists(path):
        raise UnusableInput(path, "no such file")
    if not os.path.isfile(path):
        raise UnusableInput(path, "not a regular file")
    return sha256_file(path)


def _failed(path: str, error: str) -> AuditRows:
    """The one outcome of an input that could not be analyzed: its row holds the path, the one-line
    ``error`` and, when the file can be read, its SHA-256 (every other column null)."""
    try:  # the digest of a file that could not be analyzed still identifies it
        sha: str | None = sha256_file(path) if os.path.isfile(path) else None
    except OSError:
        sha = None
    return {"input": {"path": path, "sha256": sha, "error": error, "status": "error"}, "findings": []}


# --- the batch -------------------------------------------------------------------------------------


@dataclass
class BatchResult:
    """A batch's two tables and where they were written (``written`` empty without an output).

    ``inputs``: one row per input in the order given (:data:`INPUT_SCHEMA`); ``findings``: one row
    per finding of each analyzed input (:data:`FINDING_ROW_SCHEMA`), joined to ``inputs`` by
    ``input_sha256`` = ``sha256``.
    """

    inputs: pl.DataFrame
    findings: pl.DataFrame
    written: list[Path] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        status = self.inputs["status"].value_counts()
        verdicts = self.inputs["verdict"].drop_nulls().value_counts()
        out = {s: int(n) for s, n in status.iter_rows()} | {v: int(n) for v, n in verdicts.iter_rows()}
        # Findings of every input, an input given twice counted twice (the findings table holds each
        # distinct export's once, by SHA-256).
        per_input = int(self.inputs["findings"].fill_null(0).sum())
        return {"inputs": self.inputs.height, "findings": per_input, **out}

    def unusable(self) -> pl.DataFrame:
        """The rows of the inputs that could not be analyzed (``status = "error"``), in the order given."""
        return self.inputs.filter(pl.col("status") == "error")

    def summary_lines(self) -> list[str]:
        """What the CLI prints (and ``repr`` shows): counts, verdicts, files written."""
        c = self.counts()
        lines = [
            words.batch_counts(c["inputs"], c.get("analyzed", 0), c.get("resumed", 0), c.get("error", 0),
                               c["findings"]),
            "verdicts: " + ", ".join(f"{v} {c.get(v, 0)}" for v in ("failure_found", "inconclusive", "no_failure")),
        ]
        ranks = by_rank.summary_line(self.inputs)  # only where an input has several devices or a stated rank
        if ranks is not None:
            lines.append(ranks)
        lines += [f"wrote {p}" for p in self.written]
        return lines

    def __repr__(self) -> str:
        return "BatchResult(" + "; ".join(map(escape, self.summary_lines())) + ")"

    def _repr_html_(self) -> str:
        items = "".join(f"<li>{html.escape(escape(line))}</li>" for line in self.summary_lines())
        return f"<b>nsysaudit batch</b><ul>{items}</ul>"


def run_batch(
    paths: Iterable[str | os.PathLike[str]],
    *,
    out: str | os.PathLike[str] | None = None,
    jobs: int | None = None,
    engine: Engine = "local",
    scheduler: str | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    max_pairs: int | None = DEFAULT_MAX_PAIRS,
    nsys_path: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
    on_row: Callable[[InputRow], None] | None = None,
    snapshots: bool = False,
) -> BatchResult:
    """Audit every input (folders searched, see :func:`find_inputs`) and return both tables.

    ``out``: where to write them (see :class:`BatchOutput`), part by part as inputs finish;
    ``None`` writes nothing. ``jobs``: worker processes (default: the cores). ``engine``: ``local``
    or ``dask`` (``scheduler``: a dask scheduler address; default a LocalCluster of ``jobs``
    workers). ``progress`` hears one step per input; ``on_row`` gets each input row as it is done.
    ``snapshots``: join the PyTorch memory snapshots beside each input (:func:`snapshots_beside`).

    Raises :class:`BadOption` for options that cannot be used, :class:`BatchOutputNotWritable`
    when ``out`` cannot be written, :class:`EngineUnavailable` when the engine cannot run.
    """
    _check_engine(engine, scheduler, jobs)
    options = AuditOptions(tuple(library_domains), max_pairs, None if nsys_path is None else os.fspath(nsys_path),
                           snapshots)
    given = [os.fspath(p) for p in paths]
    inputs = find_inputs(given)
    output = BatchOutput.at(out) if out is not None else None
    if output is not None:
        output.refuse_evidence([*inputs, *given])
    prepared = output.prepare(options.recorded(), given) if output is not None else Prepared()
    # The engines get absolute paths (a dask worker, or a worker started in another folder, resolves a
    # relative one against its own); the tables keep the paths as given.
    absolute = {p: os.path.abspath(p) for p in inputs}
    work = list(dict.fromkeys(absolute.values()))
    try:
        outcomes = _outcomes(engine, work, jobs or default_jobs(), scheduler, options, prepared.done)
        given_as = {a: p for p, a in reversed(absolute.items())}  # each file under the first name it was given
        collected = _collect(outcomes, len(inputs), given_as, engine, output, prepared, progress, on_row)
        inputs_table = table([{**collected.rows[absolute[p]], "path": p} for p in inputs], INPUT_SCHEMA)
        findings = collected.findings
        found = (pl.concat([findings[s] for s in sorted(findings)]) if findings
                 else pl.DataFrame(schema=FINDING_ROW_SCHEMA))
        found = _with_paths(found, inputs_table)
        if output is not None:
            output.still_ours(prepared.batch)
        written = output.write_tables(inputs_table, found) if output is not None else []
    except BatchOutputNotWritable as exc:
        # A full disk after some parts: they are kept (a rerun resumes them), and the line says so.
        if output is not None and not exc.kept and any(output.parts.glob("*.input.parquet")):
            raise BatchOutputNotWritable(exc.path, exc.problem, kept=True) from None
        raise
    return BatchResult(inputs_table, found, written)


def _with_paths(findings: pl.DataFrame, inputs: pl.DataFrame) -> pl.DataFrame:
    """The findings with their input's ``path`` as the inputs table has it: the first row of the
    SHA-256 that was analyzed or resumed (an export given under two paths has its findings once)."""
    rows = inputs.filter(pl.col("status") != "error", pl.col("sha256").is_not_null())
    first = rows.unique("sha256", keep="first", maintain_order=True)
    paths = dict(zip(first["sha256"].to_list(), first["path"].to_list(), strict=True))
    return findings.with_columns(
        path=pl.col("input_sha256").replace_strict(paths, default=None, return_dtype=pl.String)
    )


def _check_engine(engine: Engine, scheduler: str | None, jobs: int | None) -> None:
    if engine not in ENGINES:
        raise BadOption(f"unknown engine {engine!r} (choose one of {', '.join(ENGINES)})")
    if scheduler is not None and engine != "dask":
        raise BadOption("a scheduler address needs engine 'dask'")
    if jobs is not None and jobs < 1:
        raise BadOption(f"jobs must be at least 1, not {jobs}")


def _outcomes(
    engine: Engine, paths: list[str], jobs: int, scheduler: str | None, options: AuditOptions, done: frozenset[str]
) -> Iterator[AuditOutcome]:
    """:func:`audit_one` of every path on ``engine``, as each finishes."""
    task = functools.partial(audit_one, options=options)  # audit_one looked up now: a test may replace it
    shared = {"done": done} if done else {}
    if engine == "dask":
        return run_dask(task, paths, jobs, scheduler, timeout=SCHEDULER_TIMEOUT, shared=shared)
    return run_local(task, paths, jobs, shared)


@dataclass(frozen=True)
class _Collected:
    """The input rows by absolute path, and the findings frames by SHA-256."""

    rows: dict[str, InputRow]
    findings: dict[str, pl.DataFrame]


def _collect(
    outcomes: Iterator[AuditOutcome],
    count: int,
    given_as: dict[str, str],
    engine: Engine,
    output: BatchOutput | None,
    prepared: Prepared,
    progress: Progress | None,
    on_row: Callable[[InputRow], None] | None,
) -> _Collected:
    """Take each outcome as it finishes: its row (read from its part when resumed), its part written
    (when analyzed, with an output); ``on_row`` and ``progress`` hear of it."""
    rows: dict[str, InputRow] = {}
    findings: dict[str, pl.DataFrame] = {}
    created = prepared.created
    if progress is not None:
        progress.start(f"auditing {count} input(s)", count)
    try:
        for outcome in outcomes:
            created = ()  # the engine runs: what was made for it is the batch's now
            where = outcome["input"]["path"]
            row = _as_given(outcome["input"], given_as.get(where, where), engine)
            sha = row["sha256"]  # None only in the row of an input that could not be read: no part, no findings
            if sha is not None and row["status"] == "resumed" and output is not None:
                stored, findings[sha] = output.load_part(sha, prepared.batch)
                row = {**stored, "path": row["path"], "status": "resumed"}
            elif sha is not None and row["status"] == "analyzed":
                if output is not None:
                    output.save_part(row, outcome["findings"], prepared.batch)
                findings[sha] = findings_frame(outcome["findings"])
            rows[where] = row
            if on_row is not None:
                on_row(row)
            if progress is not None:
                progress.advance(1)
    except BaseException:
        if output is not None:
            output.abandon(created)  # the engine could not start: leave no empty output behind
        raise
    finally:
        if progress is not None:
            progress.finish()
    return _Collected(rows, findings)


def _as_given(row: InputRow, path: str, engine: Engine) -> InputRow:
    """A worker's row with the path as given; a dask worker's "no such file" for a file this machine
    has says why (the workers do not see the paths given)."""
    if engine == "dask" and (row.get("error") or "").endswith("no such file") and os.path.exists(path):
        unseen = UnusableInput(path, "no such file where the dask worker ran, though this machine has it: give "
                               "paths the workers see (a shared file system)")
        return {**row, "path": path, "error": str(unseen)}
    return {**row, "path": path}


def audit_many(
    paths: Iterable[str | os.PathLike[str]],
    *,
    jobs: int | None = None,
    engine: Engine = "local",
    scheduler: str | None = None,
    out: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    max_pairs: int | None = DEFAULT_MAX_PAIRS,
    nsys_path: str | os.PathLike[str] | None = None,
    snapshots: bool = False,
) -> pl.DataFrame:
    """:func:`run_batch`'s inputs table: one row per input (:data:`INPUT_SCHEMA`).

    ``run_batch(...).findings`` has the findings; with ``out`` both are written.
    """
    return run_batch(
        paths,
        out=out,
        jobs=jobs,
        engine=engine,
        scheduler=scheduler,
        library_domains=library_domains,
        max_pairs=max_pairs,
        nsys_path=nsys_path,
        snapshots=snapshots,
    ).inputs
