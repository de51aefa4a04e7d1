"""Fleet batch audits: many exports in, two tables out (one row per input, one per finding).

:func:`run_batch` (the ``nsysaudit batch`` command) and :func:`audit_many` (its notebook form)
analyze every input with :func:`nsysaudit.analyze` on one of two engines:

- ``local``: ``jobs`` worker processes on this machine (``jobs=1`` runs in this process);
- ``dask``: the same work on ``dask.distributed`` (a ``LocalCluster`` of ``jobs`` processes, or the
  scheduler at ``scheduler``); workers read the files at the paths given, so those must be the
  paths where the workers see them.

Every worker sends back only rows (plain dicts), never an :class:`~nsysaudit.AnalysisResult`, so
the driver's memory grows with the number of rows, not with the exports. An input that cannot be
analyzed (:class:`~nsysaudit.core.errors.NsysAuditError`, or an ``OSError`` while reading it) is a row
with its one-line ``error``; it never stops the batch. Any other exception is a bug: it stops the
batch, and what was finished is kept (below).

With an output (``out``), each finished input is written at once as a part file keyed by its
SHA-256 (``parts/<sha256>.input.parquet`` after ``parts/<sha256>.findings.parquet``, each written to
a temporary name and renamed), so an interrupted batch keeps what it finished; a rerun into the
same output hashes each input and does not analyze again an input whose SHA-256 has a part (its
row says ``status = "resumed"``). Inputs whose analysis failed are not kept as parts: a rerun tries
them again. The combined tables are written last, atomically. The parts are the batch's own
working files and a rerun trusts them: delete the output to start over.

>>> import nsysaudit
>>> table = nsysaudit.audit_many(["tests/fixtures/h200-cuda13-nsys2025.3/torch"], jobs=1)
>>> table.select("path", "verdict", "findings").sort("path").rows()  # doctest: +NORMALIZE_WHITESPACE
[('tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite', 'failure_found', 1),
 ('tests/fixtures/h200-cuda13-nsys2025.3/torch/release.sqlite', 'no_failure', 0)]
"""

from __future__ import annotations

import contextlib
import html
import importlib
import json
import logging
import multiprocessing
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import polars as pl

from nsysaudit.analysis.joins import DEFAULT_MAX_PAIRS
from nsysaudit.batch import ranks as by_rank
from nsysaudit.core.digests import sha256_file
from nsysaudit.core.errors import (
    BadOption,
    BatchOutputNotWritable,
    EngineUnavailable,
    NsysAuditError,
    Terminated,
    UnusableInput,
    signal_raises,
)
from nsysaudit.core.paths import storable
from nsysaudit.core.progress import Progress
from nsysaudit.core.text import escape
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS
from nsysaudit.session import analyze

Engine = Literal["local", "dask"]
ENGINES: tuple[Engine, ...] = ("local", "dask")
INPUT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")
BATCH_FORMAT = 1
SCHEDULER_TIMEOUT = "10s"  # how long to try reaching a --scheduler address
WORKER_DIED = (
    "a worker process died (killed, or out of memory) while analyzing an input; the inputs finished "
    "are kept in the output's parts: run the batch again to resume"
)

INPUT_SCHEMA: dict[str, Any] = {
    "path": pl.String,
    "sha256": pl.String,
    "kind": pl.String,
    "size_bytes": pl.Int64,
    "nsys_version": pl.String,
    "schema_version": pl.String,
    "exported_with": pl.String,
    "verdict": pl.String,
    "cuda_api_calls": pl.Int64,
    "nonzero_returns": pl.Int64,
    "failed_calls": pl.Int64,
    "library_calls": pl.Int64,
    "censored_library_calls": pl.Int64,
    "censored_reasons": pl.String,
    "findings": pl.Int64,
    "nested_alloc_failures": pl.Int64,
    "straddling_alloc_failures": pl.Int64,
    "nested_call_failures": pl.Int64,
    "captured_event_wait_failures": pl.Int64,
    "warnings": pl.Int64,
    "error": pl.String,
    "status": pl.String,
    **by_rank.INPUT_COLUMNS,  # devices and ranks (nsysaudit/batch/ranks.py)
}
FINDING_SCHEMA: dict[str, Any] = {
    "input_sha256": pl.String,
    "finding": pl.Int64,
    "kind": pl.String,
    "api": pl.String,
    "display_api": pl.String,
    "return_code": pl.Int64,
    "return_name": pl.String,
    "correlation_id": pl.Int64,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "global_tid": pl.Int64,
    "thread_name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "requested_bytes": pl.Int64,
    "out_of_memory": pl.Boolean,
    "enclosing_api": pl.String,
    "enclosing_library": pl.String,
    "enclosing_source": pl.String,
    "enclosing_start_ns": pl.Int64,
    "enclosing_end_ns": pl.Int64,
    "enclosing_recorded_end_ns": pl.Int64,
    "enclosing_coverage": pl.String,
    "allocations_before": pl.Int64,
    "allocations_before_bytes": pl.Int64,
    "stream_capture_event_records": pl.Int64,
    "ns_from_capture_end": pl.Int64,
    **by_rank.FINDING_COLUMNS,  # the finding's rank and device
}
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


# --- one input: what a worker runs -----------------------------------------------------------------


@dataclass(frozen=True)
class AuditOptions:
    """The analysis options of a batch (as for :func:`nsysaudit.analyze`); part files are only
    reused by a batch with the same options."""

    library_domains: tuple[str, ...] = DEFAULT_LIBRARY_DOMAINS
    max_pairs: int | None = DEFAULT_MAX_PAIRS
    nsys_path: str | None = None

    def recorded(self) -> dict[str, Any]:
        """What changes the rows (``nsys_path`` does not: the nsys version is in each row's export)."""
        return {"library_domains": list(self.library_domains), "max_pairs": self.max_pairs}


def audit_one(
    path: str, options: AuditOptions, done: frozenset[str] = frozenset(), *, telemetry: str | None = None
) -> dict[str, Any]:
    """Analyze one input; return ``{"input": row, "findings": [rows], "seconds": s}`` (plain,
    picklable values; ``seconds``: how long the work took).

    ``done``: SHA-256s that already have part files: such an input is hashed, not analyzed
    (``status = "resumed"``, the rest of its row is read from its part by the driver).
    ``telemetry``: the application's telemetry for this input (``nsysaudit check`` gives one per
    expectation).
    """
    started = time.perf_counter()
    outcome = _audit(path, options, done, telemetry)
    outcome["seconds"] = round(time.perf_counter() - started, 6)
    return outcome


def _audit(path: str, options: AuditOptions, done: frozenset[str], telemetry: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"path": path}
    if os.path.isdir(path):  # find_inputs keeps a folder only when it holds no export
        return _failed(row, path, f"{path}: folder holds no *.sqlite, *.nsys-rep or *.qdrep file")
    try:
        expected = None
        if done:
            expected = _digest(path)
            if expected in done:
                return {"input": {**row, "sha256": expected, "status": "resumed"}, "findings": []}
        result = analyze(path, library_domains=options.library_domains, max_pairs=options.max_pairs,
                         nsys_path=options.nsys_path, telemetry=telemetry)
    except NsysAuditError as exc:
        return _failed(row, path, str(exc))
    except OSError as exc:  # the file or its folder failed under us (I/O error, vanished, ...)
        where = exc.filename if exc.filename is not None else path
        return _failed(row, path, f"{where}: {exc.strerror or exc}")
    sha = result.input.sha256
    if expected is not None and sha != expected:
        return _failed(row, path, f"{path}: the file changed while it was read (SHA-256 {expected} then {sha})")
    census = result.census
    findings = result.findings
    censored = result.censored_table
    kinds = [f["kind"] for f in findings]
    row.update(
        sha256=sha,
        kind=result.input.kind,
        size_bytes=result.input.size_bytes,
        nsys_version=result.input.nsys_version,  # a report's: the release that captured it
        schema_version=result.input.schema_version,
        exported_with=result.input.export_nsys_version,  # a report's export: the release that exported it
        verdict=result.verdict,
        cuda_api_calls=census["cuda_api_calls"],
        nonzero_returns=census["nonzero_returns"],
        failed_calls=census["failed_calls"],
        library_calls=result.frames["library_calls"].height,
        censored_library_calls=censored.height,
        censored_reasons=", ".join(sorted(censored["reasons"].explode().drop_nulls().unique().to_list())) or None,
        findings=len(findings),
        warnings=len(result.warnings),
        error=None,
        status="analyzed",
        **{column: kinds.count(kind) for kind, column in KIND_COLUMNS.items()},
        **by_rank.input_columns(result.head),
    )
    return {"input": row, "findings": [finding_row(sha, i, f) for i, f in enumerate(findings)]}


def finding_row(sha256: str, index: int, finding: dict[str, Any]) -> dict[str, Any]:
    """One ``findings[]`` entry of the JSON contract as a flat row (the input's SHA-256 first)."""
    enclosing = finding.get("enclosing") or {}
    before = enclosing.get("allocations_before") or {}
    capture = finding.get("stream_capture") or {}
    return {
        "input_sha256": sha256,
        "finding": index,
        **{k: finding[k] for k in FINDING_SCHEMA if k in finding},
        "enclosing_api": enclosing.get("api"),
        "enclosing_library": enclosing.get("library"),
        "enclosing_source": enclosing.get("source"),
        "enclosing_start_ns": enclosing.get("start_ns"),
        "enclosing_end_ns": enclosing.get("end_ns"),
        "enclosing_recorded_end_ns": enclosing.get("recorded_end_ns"),
        "enclosing_coverage": enclosing.get("coverage"),
        "allocations_before": before.get("count"),
        "allocations_before_bytes": before.get("bytes"),
        "stream_capture_event_records": capture.get("event_records_count"),
        "ns_from_capture_end": capture.get("ns_from_capture_end"),
    }


def _digest(path: str) -> str:
    """SHA-256 of a regular file (never opens a FIFO or a device: that could block forever)."""
    if not os.path.exists(path):
        raise UnusableInput(path, "no such file")
    if not os.path.isfile(path):
        raise UnusableInput(path, "not a regular file")
    return sha256_file(path)


def _failed(row: dict[str, Any], path: str, error: str) -> dict[str, Any]:
    try:  # the digest of a file that could not be analyzed still identifies it
        sha: str | None = sha256_file(path) if os.path.isfile(path) else None
    except OSError:
        sha = None
    return {"input": {**row, "sha256": sha, "error": error, "status": "error"}, "findings": []}


# --- engines -------------------------------------------------------------------------------------------


def default_jobs() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _worker_env(jobs: int) -> dict[str, str]:
    """Environment for worker processes: polars threads shared out among the workers (every
    worker's polars would otherwise start one thread per core); the caller's own
    POLARS_MAX_THREADS is kept."""
    return {} if "POLARS_MAX_THREADS" in os.environ else {"POLARS_MAX_THREADS": str(max(1, default_jobs() // jobs))}


@contextlib.contextmanager
def _worker_environment(jobs: int) -> Iterator[None]:
    """:func:`_worker_env` set in ``os.environ`` only while local workers start (they inherit it)."""
    env = _worker_env(jobs)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that made it ends


def _worker_start(parent: int) -> None:
    """Each local worker's first step: on Linux, ask for SIGTERM when the driver ends (even by
    SIGKILL), so that no worker outlives it holding its stdout; a driver already gone ends it now."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


@contextlib.contextmanager
def _main_not_imported() -> Iterator[None]:
    """While local workers start: ``__main__`` hides where it came from, so that the spawned workers
    do not import the caller's script again (they run nsysaudit's own functions only). A script that
    calls :func:`audit_many` without an ``if __name__ == "__main__":`` guard, or a program read from
    stdin, would otherwise start its own batch in every worker, and those die."""
    main = sys.modules.get("__main__")
    names = ("__file__", "__spec__")
    saved: dict[str, Any] = {k: main.__dict__[k] for k in names if main is not None and k in main.__dict__}
    if main is not None:
        main.__dict__.pop("__file__", None)
        main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes now (their current inputs are abandoned)."""
    stop = getattr(pool, "terminate_workers", None)  # Python 3.14
    if stop is not None:
        stop()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.terminate()


def _local(paths: Sequence[str], jobs: int, options: AuditOptions, done: frozenset[str]) -> Iterator[dict[str, Any]]:
    if jobs == 1 or len(paths) <= 1:
        for path in paths:
            yield audit_one(path, options, done)
        return
    workers = min(jobs, len(paths))
    # SIGTERM raises Terminated while the workers run (instead of ending the driver at once, leaving
    # its workers and the resource tracker alive, holding stdout): the workers are stopped on the way out.
    with _worker_environment(workers), signal_raises(signal.SIGTERM, Terminated), _main_not_imported():
        # spawn, not fork: polars' thread pool is not fork-safe.
        pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_start,
            initargs=(os.getpid(),),
        )
        stopping = True  # until every input is done: an exception (Terminated too) stops the workers
        try:
            pending: set[Future[dict[str, Any]]] = set()
            queue = iter(paths)
            for path in queue:  # keep a few tasks per worker queued, not all: the driver stays small
                pending.add(pool.submit(audit_one, path, options, done))
                if len(pending) >= 2 * workers:
                    break
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:
                        raise EngineUnavailable(WORKER_DIED) from None
                    yield outcome
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending.add(pool.submit(audit_one, nxt, options, done))
            stopping = False
        finally:
            if stopping:
                _stop_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)


def _dask(
    paths: Sequence[str], jobs: int, scheduler: str | None, options: AuditOptions, done: frozenset[str]
) -> Iterator[dict[str, Any]]:
    try:  # an optional extra, imported only here; untyped, hence Any
        distributed: Any = importlib.import_module("distributed")
    except ImportError:
        raise EngineUnavailable(
            "the dask engine needs dask.distributed: pip install 'nsysaudit[fleet]'"
        ) from None
    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            try:
                client = stack.enter_context(distributed.Client(scheduler, timeout=SCHEDULER_TIMEOUT))
            except (OSError, TimeoutError, ValueError) as exc:
                raise EngineUnavailable(f"dask scheduler {scheduler}: cannot connect ({exc})") from None
        else:
            cluster = stack.enter_context(
                distributed.LocalCluster(
                    n_workers=jobs,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                    env=_worker_env(jobs),  # the nannies set it before their worker starts
                )
            )
            client = stack.enter_context(distributed.Client(cluster))
        # one copy of the done set per worker, not one per task (scatter splits a bare collection)
        shared = client.scatter([done], broadcast=True)[0] if done else done
        futures = client.map(audit_one, list(paths), options=options, done=shared, pure=False)
        for future in distributed.as_completed(futures):
            try:
                outcome = future.result()
            except distributed.KilledWorker:
                raise EngineUnavailable(WORKER_DIED) from None
            yield outcome
            future.release()


# --- output ---------------------------------------------------------------------------------------------


@dataclass
class BatchOutput:
    """Where a batch writes: the inputs table, the findings table, and the part files.

    ``out`` ending in ``.parquet`` or ``.csv`` names the inputs table (``runs.parquet``); the
    findings go beside it (``runs.findings.parquet``), the parts into ``runs.parts/``. Any other
    ``out`` is a folder: ``inputs.parquet``, ``findings.parquet``, ``parts/``.
    """

    inputs: Path
    findings: Path
    parts: Path
    format: Literal["parquet", "csv"]
    # out names a folder the batch owns (not FILE.parquet / FILE.csv in a folder of the user's)
    folder_form: bool = False
    _created: list[Path] = field(default_factory=list, compare=False, repr=False)

    @classmethod
    def at(cls, out: str | os.PathLike[str]) -> BatchOutput:
        path = Path(out)
        suffix = path.suffix.lower()
        if suffix in (".parquet", ".csv"):
            stem = path.name[: -len(suffix)]
            return cls(path, path.with_name(f"{stem}.findings{suffix}"), path.with_name(f"{stem}.parts"),
                       "parquet" if suffix == ".parquet" else "csv")
        return cls(path / "inputs.parquet", path / "findings.parquet", path / "parts", "parquet", folder_form=True)

    @property
    def record(self) -> Path:
        return self.parts / "batch.json"

    def refuse_evidence(self, inputs: Sequence[str]) -> None:
        """Refuse an output that would be written beside the evidence (nothing is written yet).

        ``inputs``: the paths given and the inputs found in them. A folder ``out`` that is, or holds
        at any depth, one of them (``batch ev --out ev``, ``--out .`` in the inputs' folder); a
        ``FILE.parquet`` / ``FILE.csv`` in the folder of an input file (the tables, their parts
        folder and temporary files would lie beside it). Paths are compared resolved.
        """
        given = [(p, os.path.realpath(p)) for p in dict.fromkeys(inputs) if os.path.lexists(p)]
        if self.folder_form:
            root = os.path.realpath(self.inputs.parent)
            held = next((p for p, real in given if _within(real, root)), None)
            if held is not None:
                raise BatchOutputNotWritable(
                    self.inputs.parent, f"it holds the input {held}: a batch never writes beside its evidence"
                )
            return
        folder = os.path.realpath(self.inputs.parent)
        beside = next((p for p, real in given if not os.path.isdir(real) and os.path.dirname(real) == folder), None)
        if beside is not None:
            raise BatchOutputNotWritable(
                self.inputs, f"its folder holds the input {beside}: a batch never writes beside its evidence"
            )

    def _refuse_foreign(self) -> None:
        """Refuse an output folder (or parts folder) that holds anything a batch does not write."""
        checks = [(self.parts, _PART_NAME)]
        if self.folder_form:
            checks.insert(0, (self.inputs.parent, _TABLE_NAME))
        for folder, allowed in checks:
            if not folder.is_dir() or folder.is_symlink():
                continue
            foreign = sorted(e.name for e in os.scandir(folder) if not allowed.fullmatch(e.name))
            if foreign:
                shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
                raise BatchOutputNotWritable(
                    folder,
                    f"holds files or folders no nsysaudit batch wrote ({shown}): choose an empty or new --out",
                )

    def prepare(self, options: AuditOptions) -> frozenset[str]:
        """Create the parts folder (or check it belongs to a batch with the same options); return
        the SHA-256s already done. Refuses to write over files another program made, and into a
        folder holding anything a batch does not write.
        :meth:`abandon` removes what this call created, when the batch stops before any part."""
        wanted = {"format": BATCH_FORMAT, "options": options.recorded()}
        try:
            self._refuse_foreign()
            if self.record.is_file():
                try:
                    recorded = json.loads(self.record.read_text(encoding="utf-8"))
                except (ValueError, UnicodeDecodeError, RecursionError):
                    raise BatchOutputNotWritable(self.record, "not a batch record (unreadable JSON)") from None
                if recorded != wanted:
                    raise BadOption(
                        f"{self.parts}: its parts were made with other options ({json.dumps(recorded)}), not "
                        f"{json.dumps(wanted)}; choose another --out or delete it (nothing was written)"
                    )
                return frozenset(
                    p.name[: -len(".input.parquet")] for p in self.parts.glob("*.input.parquet")
                )
            for existing in (self.inputs, self.findings, self.parts):
                if existing.exists() or existing.is_symlink():
                    raise BatchOutputNotWritable(
                        existing, "exists and is not part of an nsysaudit batch output (no parts/batch.json)"
                    )
            missing = [p for p in (self.parts, *self.parts.parents) if not p.exists()]
            self.parts.mkdir(parents=True)
            self._created.extend(missing)
            _write_atomic(self.record, json.dumps(wanted, sort_keys=True).encode())
        except OSError as exc:
            self.abandon()
            where = exc.filename if exc.filename is not None else self.parts
            raise BatchOutputNotWritable(where, exc.strerror or str(exc)) from None
        return frozenset()

    def abandon(self) -> None:
        """Remove the folders :meth:`prepare` created (and its record), if nothing else is in them."""
        if self._created:
            self.record.unlink(missing_ok=True)
        for folder in self._created:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()
        self._created.clear()

    def save_part(self, outcome: dict[str, Any]) -> None:
        """Findings part, then the input part (the mark that the input is done), each atomically."""
        row = outcome["input"]
        sha = row["sha256"]
        _write_frame(_frame(outcome["findings"], FINDING_SCHEMA), self.parts / f"{sha}.findings.parquet", "parquet")
        stored = {k: v for k, v in row.items() if k not in ("path", "status")}
        _write_frame(_frame([stored], INPUT_SCHEMA), self.parts / f"{sha}.input.parquet", "parquet")

    def load_part(self, sha: str) -> tuple[dict[str, Any], pl.DataFrame]:
        """The input row (without path and status) and findings of a finished part.

        The parts are trusted, but held to what :meth:`save_part` writes: one input row of
        :data:`INPUT_SCHEMA` carrying ``sha`` and findings of :data:`FINDING_SCHEMA` carrying it
        (a part of another schema would be a row of nulls, resumed as if analyzed)."""
        inputs, found = self.parts / f"{sha}.input.parquet", self.parts / f"{sha}.findings.parquet"
        try:
            part = pl.read_parquet(inputs)
            findings = pl.read_parquet(found)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise BatchOutputNotWritable(
                self.parts / sha, f"a part of the earlier batch cannot be read ({exc})"
            ) from None
        for path, frame, schema in ((inputs, part, INPUT_SCHEMA), (found, findings, FINDING_SCHEMA)):
            if dict(frame.schema) != schema:
                raise BatchOutputNotWritable(
                    path, f"not a part this nsysaudit writes (its columns are not {path.name.split('.')[1]} "
                    "rows of this version); delete --out to start over"
                )
        shas = findings["input_sha256"].unique().to_list()
        if part.height != 1 or part["sha256"][0] != sha or shas not in ([], [sha]):
            raise BatchOutputNotWritable(
                self.parts / sha, "a part whose rows are not those of the input its name gives (SHA-256); delete "
                "--out to start over"
            )
        return part.row(0, named=True), findings

    def write_tables(self, inputs: pl.DataFrame, findings: pl.DataFrame) -> None:
        _write_frame(findings, self.findings, self.format)
        _write_frame(inputs, self.inputs, self.format)


# What a batch writes into its folder and its parts folder (and the temporary names it writes them
# under, left behind by a kill): nothing else may be there.
_TMP = r"\.{}\.[0-9a-f]{{12}}\.tmp"
_TABLE_NAME = re.compile("|".join(["inputs\\.parquet", "findings\\.parquet", "parts",
                                   _TMP.format("(inputs|findings)\\.parquet")]))
_PART_NAME = re.compile("|".join(["batch\\.json", "[0-9a-f]{64}\\.(input|findings)\\.parquet",
                                  _TMP.format("(batch\\.json|[0-9a-f]{64}\\.(input|findings)\\.parquet)")]))


def _within(path: str, folder: str) -> bool:
    """Whether resolved ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def findings_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """One input's finding rows (``audit_one``'s ``findings``) as a frame of :data:`FINDING_SCHEMA`."""
    return _frame(rows, FINDING_SCHEMA)


def _frame(rows: list[dict[str, Any]], schema: dict[str, Any]) -> pl.DataFrame:
    # A path found in a folder, and the error that names it, may hold bytes that are not UTF-8.
    full = [{k: storable(v) if isinstance(v := r.get(k), str) else v for k in schema} for r in rows]
    return pl.DataFrame(full, schema=schema, orient="row") if full else pl.DataFrame(schema=schema)


def _temporary(target: Path) -> Path:
    return target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")


def _write_atomic(target: Path, data: bytes) -> None:
    tmp = _temporary(target)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _write_frame(frame: pl.DataFrame, target: Path, fmt: str) -> None:
    """Write ``frame`` to a temporary name beside ``target``, then rename it: never half a file."""
    tmp = _temporary(target)
    try:
        try:
            if fmt == "csv":
                frame.write_csv(tmp)
            else:
                frame.write_parquet(tmp)
        except pl.exceptions.PolarsError as exc:  # polars wraps the OSError of a full disk
            raise BatchOutputNotWritable(target, str(exc)) from None
        os.replace(tmp, target)
    except OSError as exc:
        raise BatchOutputNotWritable(target, exc.strerror or str(exc)) from None
    finally:
        tmp.unlink(missing_ok=True)


# --- the batch -------------------------------------------------------------------------------------


@dataclass
class BatchResult:
    """A batch's two tables and where they were written (``written`` empty without an output).

    ``inputs``: one row per input in the order given (:data:`INPUT_SCHEMA`); ``findings``: one row
    per finding of each analyzed input (:data:`FINDING_SCHEMA`), joined to ``inputs`` by
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

    def summary_lines(self) -> list[str]:
        """What the CLI prints (and ``repr`` shows): counts, verdicts, files written."""
        c = self.counts()
        lines = [
            f"{c['inputs']} input(s): {c.get('analyzed', 0)} analyzed, {c.get('resumed', 0)} resumed, "
            f"{c.get('error', 0)} unusable; {c['findings']} finding(s)",
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
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> BatchResult:
    """Audit every input (folders searched, see :func:`find_inputs`) and return both tables.

    ``out``: where to write them (see :class:`BatchOutput`), part by part as inputs finish;
    ``None`` writes nothing. ``jobs``: worker processes (default: the cores). ``engine``: ``local``
    or ``dask`` (``scheduler``: a dask scheduler address; default a LocalCluster of ``jobs``
    workers). ``progress`` hears one step per input; ``on_row`` gets each input row as it is done.

    Raises :class:`BadOption` for options that cannot be used, :class:`BatchOutputNotWritable`
    when ``out`` cannot be written, :class:`EngineUnavailable` when the engine cannot run.
    """
    if engine not in ENGINES:
        raise BadOption(f"unknown engine {engine!r} (choose one of {', '.join(ENGINES)})")
    if scheduler is not None and engine != "dask":
        raise BadOption("a scheduler address needs engine 'dask'")
    if jobs is not None and jobs < 1:
        raise BadOption(f"jobs must be at least 1, not {jobs}")
    options = AuditOptions(tuple(library_domains), max_pairs, None if nsys_path is None else os.fspath(nsys_path))
    given = [os.fspath(p) for p in paths]
    inputs = find_inputs(given)
    output = BatchOutput.at(out) if out is not None else None
    if output is not None:
        output.refuse_evidence([*inputs, *given])
    done = output.prepare(options) if output is not None else frozenset()
    workers = jobs or default_jobs()
    # The engines get absolute paths (a dask worker, or a worker started in another folder, resolves a
    # relative one against its own); the tables keep the paths as given.
    absolute = {os.path.abspath(p): p for p in inputs}
    work = list(absolute)
    outcomes = _dask(work, workers, scheduler, options, done) if engine == "dask" else _local(
        work, workers, options, done
    )
    rows: dict[str, dict[str, Any]] = {}
    findings: dict[str, pl.DataFrame] = {}
    if progress is not None:
        progress.start(f"auditing {len(inputs)} input(s)", len(inputs))
    try:
        for outcome in outcomes:
            if output is not None and not rows:
                output._created.clear()  # the engine runs: what was made for it is the batch's now
            row = outcome["input"]
            row["path"] = absolute.get(row["path"], row["path"])
            if engine == "dask" and (row.get("error") or "").endswith("no such file") and os.path.exists(row["path"]):
                row["error"] = (f"{row['path']}: no such file where the dask worker ran, though this machine has it: "
                                "give paths the workers see (a shared file system)")
            sha = row.get("sha256")
            if row["status"] == "resumed" and output is not None:
                stored, found = output.load_part(sha)
                row = {**stored, "path": row["path"], "status": "resumed"}
                findings[sha] = found
            elif row["status"] == "analyzed":
                if output is not None:
                    output.save_part(outcome)
                findings[sha] = _frame(outcome["findings"], FINDING_SCHEMA)
            rows[row["path"]] = row
            if on_row is not None:
                on_row(row)
            if progress is not None:
                progress.advance(1)
    except BaseException:
        if output is not None:
            output.abandon()  # the engine could not start: leave no empty output behind
        raise
    finally:
        if progress is not None:
            progress.finish()
    result = BatchResult(
        inputs=_frame([rows[p] for p in inputs], INPUT_SCHEMA),
        findings=pl.concat([findings[s] for s in sorted(findings)])
        if findings
        else pl.DataFrame(schema=FINDING_SCHEMA),
    )
    if output is not None:
        output.write_tables(result.inputs, result.findings)
        result.written = [output.inputs, output.findings]
    return result


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
    ).inputs
