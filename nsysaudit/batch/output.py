"""What a batch writes: its two tables (their schemas and formats), the part file of each finished
input, and the resumption of an earlier batch from those parts.

The parts are ``parts/<sha256>.findings.parquet`` then ``parts/<sha256>.input.parquet`` (the mark
that the input is done), each written to a temporary name and renamed, beside ``parts/batch.json``
(the batch: the options and the PATHs given, which the parts were made for); the combined tables are
written last, the same way. Nothing else may be in a batch's folders: a batch refuses to write where
another program did.

Each part carries, in its Parquet metadata, the batch it belongs to (the SHA-256 of ``batch.json``)
and the digests of its rows (the input part: of its row and of the findings part's bytes): a rerun
resumes only a part its own batch wrote, unchanged; a batch of other PATHs or options into the same
``--out`` is refused before it writes (and, when two run at once, the one whose record was replaced
writes no tables): their tables would replace each other's.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, cast, get_args, get_origin, get_type_hints

import polars as pl

from nsysaudit.analysis.findings import FindingKind
from nsysaudit.analysis.verdict import Verdict
from nsysaudit.core.errors import BadOption, BatchOutputNotWritable
from nsysaudit.core.files import write_atomic, write_with
from nsysaudit.core.limits import read_at_most
from nsysaudit.core.paths import storable
from nsysaudit.core.shapes import Schema
from nsysaudit.reports.documents import CensoredReason, CoverageState, InputKind

# 2: the PATHs given in batch.json, the batch and the digests in each part's metadata; 3: the list columns,
# the findings' path and holder figures (a part of format 2 has other columns: refused, never misread);
# 4: the findings' finding_number (numbered from 1, as the reports number them).
BATCH_FORMAT = 4
PART_BATCH, PART_ROW, PART_FINDINGS = "nsysaudit.batch", "nsysaudit.row_sha256", "nsysaudit.findings_sha256"

# The ledger's figures at a finding (batch/run.py's holder_columns), each an integer column.
HOLDER_COLUMNS = ("held_bytes", "process_held_bytes", "free_at_most_bytes", "device_total_bytes", "holder_pid",
                  "holder_bytes", "holders")

InputStatus = Literal["analyzed", "resumed", "error"]


class StoredInput(TypedDict):
    """What a part file keeps of an input row (:class:`InputRow` without ``path`` and ``status``)."""

    sha256: str | None
    kind: NotRequired[InputKind]
    size_bytes: NotRequired[int]
    nsys_version: NotRequired[str | None]
    schema_version: NotRequired[str | None]
    exported_with: NotRequired[str | None]
    verdict: NotRequired[Verdict]
    cuda_api_calls: NotRequired[int]
    nonzero_returns: NotRequired[int]
    failed_calls: NotRequired[int]
    library_calls: NotRequired[int]
    censored_library_calls: NotRequired[int]
    censored_reasons: NotRequired[str | None]
    findings: NotRequired[int]
    nested_alloc_failures: NotRequired[int]
    straddling_alloc_failures: NotRequired[int]
    nested_call_failures: NotRequired[int]
    captured_event_wait_failures: NotRequired[int]
    library: NotRequired[str | None]
    warnings: NotRequired[int]
    error: NotRequired[str | None]
    devices: NotRequired[int]
    devices_used: NotRequired[str | None]
    rank: NotRequired[int | None]
    rank_source: NotRequired[str | None]
    ranks: NotRequired[str | None]
    failing_ranks: NotRequired[str | None]
    failing_rank_unknown: NotRequired[int]
    failing_devices: NotRequired[str | None]
    blocking_calls: NotRequired[int]
    blocked_ns: NotRequired[int]
    stalls: NotRequired[int]
    stalled_ns: NotRequired[int]
    snapshots: NotRequired[int | None]
    censored_reasons_list: NotRequired[list[CensoredReason] | None]
    library_list: NotRequired[list[str] | None]
    devices_used_list: NotRequired[list[str] | None]
    ranks_list: NotRequired[list[int] | None]
    failing_ranks_list: NotRequired[list[int] | None]
    failing_devices_list: NotRequired[list[int] | None]


class InputRow(StoredInput):
    """One row of the inputs table (:data:`INPUT_SCHEMA`; a key a row lacks is null there).

    ``status`` says which keys it has: ``analyzed``, every key (``error`` None); ``error``, the
    ``path``, the one-line ``error`` and the ``sha256`` when the file could be read; ``resumed``,
    the ``path`` and ``sha256`` as a worker sends it, every key once the driver read its part."""

    path: str
    status: InputStatus


class FindingRow(TypedDict):
    """One row of the findings table (:data:`FINDING_ROW_SCHEMA`): a ``findings[]`` entry of the JSON
    contract made flat, after the SHA-256 of its input, its index there
    (``finding``, from 0) and its number (``finding_number``, from 1, as the reports number it)."""

    input_sha256: str
    finding: int
    finding_number: int
    kind: FindingKind
    api: str | None
    display_api: str | None
    return_code: int | None
    return_name: str | None
    correlation_id: int | None
    pid: int | None
    tid: int | None
    global_tid: int | None
    thread_name: str | None
    start_ns: int | None
    end_ns: int | None
    requested_bytes: int | None
    out_of_memory: bool
    enclosing_api: str | None
    enclosing_library: str | None
    enclosing_source: str | None
    enclosing_start_ns: int | None
    enclosing_end_ns: int | None
    enclosing_recorded_end_ns: int | None
    enclosing_coverage: CoverageState | None
    allocations_before: int | None
    allocations_before_bytes: int | None
    stream_capture_event_records: int | None
    ns_from_capture_end: int | None
    rank: int | None  # the finding's rank and device (nsysaudit/batch/ranks.py)
    rank_source: str | None
    device_id: int | None
    # the allocator at the finding (batch --snapshots: allocator.at[] of the finding, its first device)
    allocator_reserved_bytes: int | None
    allocator_inactive_bytes: int | None
    # The input's path as the inputs table has it (the first row of its SHA-256): the driver's, not a part's.
    path: str
    # The device-memory ledger at the finding (memory.at[] of the finding, its device): numbers only.
    held_bytes: int | None  # HOLDER_COLUMNS, then held_covered
    process_held_bytes: int | None
    free_at_most_bytes: int | None
    device_total_bytes: int | None
    holder_pid: int | None
    holder_bytes: int | None
    holders: int | None
    held_covered: bool | None


def polars_schema(row: type) -> Schema:
    """The table's columns of a row type: each key of the TypedDict ``row``, in its order, typed by its
    annotation (``int``: Int64, ``str`` or a ``Literal`` of strings: String, ``bool``: Boolean, ``float``:
    Float64, ``list[X]``: a List of X; ``| None`` makes no difference: every column may hold nulls)."""
    return {name: _dtype(hint) for name, hint in get_type_hints(row).items()}


def _dtype(hint: object) -> pl.DataType:
    args = [a for a in get_args(hint) if a is not type(None)]
    origin = get_origin(hint)
    if origin is Literal:
        return pl.String()
    if origin is list:
        return pl.List(_dtype(args[0]))
    if origin is not None:  # an optional (X | None) or NotRequired[X]
        return _dtype(args[0])
    dtypes: dict[object, pl.DataType] = {int: pl.Int64(), str: pl.String(), bool: pl.Boolean(), float: pl.Float64()}
    return dtypes[hint]


# The findings table's columns, as FindingRow types them.
FINDING_ROW_SCHEMA: Schema = polars_schema(FindingRow)
# A findings part keeps what the export gives: the path is the batch's (the same export under another).
PART_FINDING_ROW_SCHEMA: Schema = {k: v for k, v in FINDING_ROW_SCHEMA.items() if k != "path"}


def _inputs_table_order(row: Schema) -> Schema:
    """The inputs table's columns of :class:`InputRow`'s: the path first and the status after the error,
    as the table has always had them (the row type lists them last, as the JSON Schema does); the rest
    in the row type's order (the devices and ranks after the error, then the stall totals, the
    snapshots, and the joined columns as lists, the ranks' last)."""
    out: Schema = {"path": row["path"]}
    for name, dtype in row.items():
        if name not in ("path", "status"):
            out[name] = dtype
        if name == "error":
            out["status"] = row["status"]
    return out


# The inputs table's columns, as InputRow types them (each a column; a key a row lacks is null).
INPUT_SCHEMA: Schema = _inputs_table_order(polars_schema(InputRow))


class BatchOptions(TypedDict):
    """The options that change a batch's rows, as ``parts/batch.json`` records them (``snapshots``:
    only when ``--snapshots`` read the memory snapshots beside each input)."""

    library_domains: list[str]
    max_pairs: int | None
    snapshots: NotRequired[bool]


class BatchRecord(TypedDict):
    """``parts/batch.json``: what the parts were made for (the options, the PATHs given, absolute)."""

    format: int
    options: BatchOptions
    inputs: list[str]


def batch_record(options: BatchOptions, given: Sequence[str]) -> BatchRecord:
    """The record of a batch of the PATHs ``given`` (absolute, each once, sorted) with ``options``."""
    return {"format": BATCH_FORMAT, "options": options, "inputs": sorted({os.path.abspath(p) for p in given})}


def _record_bytes(record: BatchRecord | object) -> bytes:
    return json.dumps(record, sort_keys=True).encode()


def _row_digest(row: Mapping[str, object]) -> str:
    """The SHA-256 of a stored input row (its values as JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(dict(row), sort_keys=True, default=str).encode()).hexdigest()


def table(rows: Sequence[Mapping[str, object]], schema: Schema) -> pl.DataFrame:
    """Rows as a frame of ``schema`` (a key a row lacks is null)."""
    full = [{k: _storable(r.get(k)) for k in schema} for r in rows]
    return pl.DataFrame(full, schema=schema, orient="row") if full else pl.DataFrame(schema=schema)


def _storable(value: object) -> object:
    # A path found in a folder, the error that names it, a device's name may hold bytes that are not UTF-8.
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, list):
        return [storable(v) if isinstance(v, str) else v for v in value]
    return value


def findings_frame(rows: Sequence[FindingRow]) -> pl.DataFrame:
    """One input's finding rows (``audit_one``'s ``findings``) as a frame of :data:`FINDING_ROW_SCHEMA`."""
    return table(rows, FINDING_ROW_SCHEMA)


@dataclass(frozen=True)
class Prepared:
    """What :meth:`BatchOutput.prepare` found and made: the SHA-256s that already have parts, and
    the folders it created (innermost first), which :meth:`BatchOutput.abandon` removes."""

    done: frozenset[str] = frozenset()
    created: tuple[Path, ...] = ()
    batch: str = ""  # the SHA-256 of the batch's record (parts/batch.json): what its parts carry


@dataclass(frozen=True)
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
        """Refuse an output that would be written beside or inside the evidence (nothing is written yet).

        ``inputs``: the paths given and the inputs found in them. A folder ``out`` that is, or holds
        at any depth, one of them (``batch ev --out ev``, ``--out .`` in the inputs' folder); any
        output (a folder, or ``FILE.parquet`` / ``FILE.csv``: the tables, their parts folder and
        temporary files) that lies in the folder of an input file or inside a folder given as a PATH,
        at any depth (``batch ev --out ev/sub`` as ``--out ev/audit.csv``). Paths are compared resolved.
        The line names a place to write instead (:meth:`instead`).
        """
        given = [(p, os.path.realpath(p)) for p in dict.fromkeys(inputs) if os.path.lexists(p)]
        where = os.path.realpath(self.inputs.parent)  # the folder the batch writes into
        if self.folder_form:
            held = next((p for p, real in given if _within(real, where)), None)
            if held is not None:
                raise BatchOutputNotWritable(self.inputs.parent, f"it holds the input {held}{self._never(given)}")
        named = self.inputs.parent if self.folder_form else self.inputs
        for p, real in given:
            folder = os.path.isdir(real)
            evidence = real if folder else os.path.dirname(real)
            if not _within(where, evidence):
                continue
            what = (f"it lies inside {p}, a folder given as input" if folder
                    else f"its folder holds the input {p}" if where == evidence
                    else f"it lies inside {evidence}, the folder of the input {p}")
            raise BatchOutputNotWritable(named, f"{what}{self._never(given)}")

    def _never(self, given: Sequence[tuple[str, str]]) -> str:
        instead = self.instead(given)
        said = ": a batch never writes beside its evidence"
        return said + (f"; write it elsewhere, e.g. --out {shlex.quote(instead)}" if instead is not None else "")

    def instead(self, given: Sequence[tuple[str, str]]) -> str | None:
        """Where this output could go instead, outside every input's folder and folder given (``given``:
        each path given or found, and its resolved path): beside the outermost evidence folder it lies in,
        that folder's name with ``-audit`` (``batch run/*.sqlite --out run/b.csv``: ``run-audit/b.csv``), or
        ``audit`` inside a folder that holds the inputs deeper down (``--out .`` above them). Relative
        to this folder when ``--out`` was; None at the file system's root."""
        where = os.path.realpath(self.inputs.parent)
        for _ in range(16):  # each step leaves the folder at fault: out of one evidence folder, or one deeper
            fault = _fault(where, given, self.folder_form)
            if fault is None:
                shown = where if self.folder_form else os.path.join(where, self.inputs.name)
                return shown if self.inputs.is_absolute() else os.path.relpath(shown, os.path.realpath(os.curdir))
            folder, holds = fault
            if holds:
                where = os.path.join(folder, "audit")
            elif os.path.dirname(folder) == folder:
                return None
            else:
                where = os.path.join(os.path.dirname(folder), os.path.basename(folder) + "-audit")
        return None

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

    def prepare(self, options: BatchOptions, given: Sequence[str] = ()) -> Prepared:
        """Create the parts folder (or check it belongs to this batch: the same ``options``, what
        changes the rows, and the same PATHs ``given``, whose tables it writes); return the SHA-256s
        already done and the folders created. Refuses to write over files another program made, and
        into a folder holding anything a batch does not write. :meth:`abandon` removes what this call
        created, when the batch stops before any part."""
        wanted = batch_record(options, given)
        batch = hashlib.sha256(_record_bytes(wanted)).hexdigest()
        created: tuple[Path, ...] = ()
        try:
            self._refuse_foreign()
            if self.record.is_file():
                recorded = self._recorded()
                older = recorded.get("format") if isinstance(recorded, dict) else None
                if type(older) is int and older != BATCH_FORMAT:
                    raise BadOption(
                        f"{self.parts}: its parts were written by another version of nsysaudit (batch format "
                        f"{older}; this one writes {BATCH_FORMAT}, with other columns), so they cannot be resumed: "
                        "delete --out to start over, or choose another (nothing was written)"
                    )
                if recorded != wanted:
                    raise BadOption(
                        f"{self.parts}: its parts were made for another batch ({_differs(recorded, wanted)}); a "
                        "batch writes the tables of its own inputs, so the two would replace each other's: choose "
                        "another --out or delete it (nothing was written)"
                    )
                return Prepared(frozenset(
                    p.name[: -len(".input.parquet")] for p in self.parts.glob("*.input.parquet")
                ), batch=batch)
            for existing in (self.inputs, self.findings, self.parts):
                if existing.exists() or existing.is_symlink():
                    raise BatchOutputNotWritable(
                        existing, "exists and is not part of an nsysaudit batch output (no parts/batch.json)"
                    )
            missing = tuple(p for p in (self.parts, *self.parts.parents) if not p.exists())
            self.parts.mkdir(parents=True)
            created = missing
            write_atomic(self.record, _record_bytes(wanted))
        except OSError as exc:
            self.abandon(created)
            where = exc.filename if exc.filename is not None else self.parts
            raise BatchOutputNotWritable(where, exc.strerror or str(exc)) from None
        return Prepared(frozenset(), created, batch)

    def _recorded(self) -> object:
        try:
            return json.loads(read_at_most(self.record).decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise BatchOutputNotWritable(self.record, "not a batch record (unreadable JSON)") from None
        except OSError as exc:
            raise BatchOutputNotWritable(self.record, exc.strerror or str(exc)) from None

    def still_ours(self, batch: str) -> None:
        """Before the tables: refuse when another batch's record replaced this one's meanwhile (two
        batches of other PATHs run into one ``--out`` at once): its tables would replace ours."""
        try:
            now = hashlib.sha256(self.record.read_bytes()).hexdigest()
        except OSError as exc:
            raise BatchOutputNotWritable(self.record, exc.strerror or str(exc), kept=True) from None
        if now != batch:
            raise BatchOutputNotWritable(
                self.record, "another batch (other inputs or options) took this --out over while this one ran: "
                "the tables of the two would replace each other's", kept=True,
            )

    def abandon(self, created: Sequence[Path]) -> None:
        """Remove the folders :meth:`prepare` ``created`` (and its record), if nothing else is in them."""
        if created:
            self.record.unlink(missing_ok=True)
        for folder in created:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()

    def save_part(self, row: InputRow, findings: Sequence[FindingRow], batch: str) -> None:
        """Findings part, then the input part (the mark that the input is done), each atomically, each
        carrying ``batch`` (its record's SHA-256) and the input part the digests of its row and of the
        findings part's bytes."""
        sha = row["sha256"]
        found = _parquet(findings_frame(findings).drop("path"), {PART_BATCH: batch})
        _write_bytes(found, self.parts / f"{sha}.findings.parquet")
        stored = table([{k: v for k, v in row.items() if k not in ("path", "status")}], INPUT_SCHEMA)
        digests = {PART_BATCH: batch, PART_ROW: _row_digest(stored.row(0, named=True)),
                   PART_FINDINGS: hashlib.sha256(found).hexdigest()}
        _write_bytes(_parquet(stored, digests), self.parts / f"{sha}.input.parquet")

    def load_part(self, sha: str, batch: str) -> tuple[StoredInput, pl.DataFrame]:
        """The input row (without path and status) and findings of a finished part (their ``path``
        null: the batch's, not the part's).

        The parts are held to what :meth:`save_part` writes: one input row of :data:`INPUT_SCHEMA`
        carrying ``sha`` and findings of :data:`PART_FINDING_ROW_SCHEMA` carrying it (a part of another schema
        would be a row of nulls, resumed as if analyzed), written by this batch (``batch``) and
        unchanged since (its digests): a part rewritten, or written by another batch, is refused."""
        inputs, found = self.parts / f"{sha}.input.parquet", self.parts / f"{sha}.findings.parquet"
        try:
            part = pl.read_parquet(inputs)
            findings_bytes = found.read_bytes()
            findings = pl.read_parquet(io.BytesIO(findings_bytes))
            meta = pl.read_parquet_metadata(inputs)
        except (OSError, pl.exceptions.PolarsError) as exc:
            raise BatchOutputNotWritable(
                self.parts / sha, f"a part of the earlier batch cannot be read ({exc})", kept=True
            ) from None
        for path, frame, schema in ((inputs, part, INPUT_SCHEMA), (found, findings, PART_FINDING_ROW_SCHEMA)):
            if dict(frame.schema) != schema:
                raise BatchOutputNotWritable(
                    path, f"not a part this nsysaudit writes (its columns are not {path.name.split('.')[1]} "
                    "rows of this version); delete --out to start over", kept=True,
                )
        shas = findings["input_sha256"].unique().to_list()
        if part.height != 1 or part["sha256"][0] != sha or shas not in ([], [sha]):
            raise BatchOutputNotWritable(
                self.parts / sha, "a part whose rows are not those of the input its name gives (SHA-256); delete "
                "--out to start over", kept=True,
            )
        if meta.get(PART_BATCH) != batch:
            raise BatchOutputNotWritable(
                inputs, "a part this batch did not write (another batch's, or one without its record): not resumed; "
                "delete --out to start over", kept=True,
            )
        if (meta.get(PART_ROW) != _row_digest(part.row(0, named=True))
                or meta.get(PART_FINDINGS) != hashlib.sha256(findings_bytes).hexdigest()):
            raise BatchOutputNotWritable(
                self.parts / sha, "a part changed since this batch wrote it (its rows are not the digests it carries): "
                "not resumed; delete --out to start over", kept=True,
            )
        # A parse boundary, checked: the part has INPUT_SCHEMA's columns (above) and save_part wrote it
        # from an analyzed InputRow (less path and status), so its row holds a StoredInput's values.
        return cast(StoredInput, part.row(0, named=True)), findings.with_columns(path=None).select(
            pl.col(c).cast(t) for c, t in FINDING_ROW_SCHEMA.items())

    def write_tables(self, inputs: pl.DataFrame, findings: pl.DataFrame) -> list[Path]:
        """Write both tables (the findings first), each atomically; return where, the inputs first."""
        _write_frame(findings, self.findings, self.format)
        _write_frame(inputs, self.inputs, self.format)
        return [self.inputs, self.findings]


# What a batch writes into its folder and its parts folder (and the temporary names it writes them
# under, left behind by a kill): nothing else may be there.
_TMP = r"\.{}\.[0-9a-f]{{12}}\.tmp"
_TABLE_NAME = re.compile("|".join(["inputs\\.parquet", "findings\\.parquet", "parts",
                                   _TMP.format("(inputs|findings)\\.parquet")]))
_PART_NAME = re.compile("|".join(["batch\\.json", "[0-9a-f]{64}\\.(input|findings)\\.parquet",
                                  _TMP.format("(batch\\.json|[0-9a-f]{64}\\.(input|findings)\\.parquet)")]))


def _fault(where: str, given: Sequence[tuple[str, str]], folder_form: bool) -> tuple[str, bool] | None:
    """Why a batch may not write into the resolved folder ``where``: the outermost evidence folder (an
    input's folder, or a folder given) it lies in, and False; else, a folder ``--out`` that holds an
    input deeper down, ``where`` itself and True; else None (``given``: as :meth:`BatchOutput.instead`)."""
    evidence = [real if os.path.isdir(real) else os.path.dirname(real) for _, real in given]
    inside = [e for e in evidence if _within(where, e)]
    if inside:
        return min(inside, key=len), False
    if folder_form and any(_within(real, where) for _, real in given):
        return where, True
    return None


def _within(path: str, folder: str) -> bool:
    """Whether resolved ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _differs(recorded: object, wanted: BatchRecord) -> str:
    """What differs between a batch's record and another batch's, in words."""
    if not isinstance(recorded, dict) or recorded.get("format") != wanted["format"]:
        return f"a record of another format: {json.dumps(recorded)[:200]}"
    said = []
    if recorded.get("options") != wanted["options"]:
        said.append(f"other options, {json.dumps(recorded.get('options'))}, not {json.dumps(wanted['options'])}")
    if recorded.get("inputs") != wanted["inputs"]:
        theirs = recorded.get("inputs")
        shown = "?"
        if isinstance(theirs, list):
            shown = ", ".join(map(str, theirs[:3])) + (" ..." if len(theirs) > 3 else "")
        said.append(f"other PATHs ({shown})")
    return "; ".join(said) or "another record"


def _parquet(frame: pl.DataFrame, metadata: dict[str, str]) -> bytes:
    """``frame`` as Parquet bytes with ``metadata`` (key-value pairs of the file)."""
    buffer = io.BytesIO()
    try:
        frame.write_parquet(buffer, metadata=metadata)
    except pl.exceptions.PolarsError as exc:
        raise BatchOutputNotWritable("parquet", str(exc)) from None
    return buffer.getvalue()


def _write_bytes(data: bytes, target: Path) -> None:
    try:
        write_atomic(target, data)
    except OSError as exc:
        raise BatchOutputNotWritable(target, exc.strerror or str(exc)) from None


def csv_ready(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` as a CSV file holds it: each list column's cells as JSON arrays (``["a", "b"]``,
    ``[0, 1]``, ``[]``; empty for null), which CSV has no other way to hold unambiguously (a device's
    name holds commas)."""
    lists = [c for c, t in frame.schema.items() if isinstance(t, pl.List)]
    return frame.with_columns(
        pl.Series(c, [None if v is None else json.dumps(v, ensure_ascii=False) for v in frame[c].to_list()],
                  dtype=pl.String)
        for c in lists
    )


def _write_frame(frame: pl.DataFrame, target: Path, fmt: str) -> None:
    """Write ``frame`` atomically (:func:`~nsysaudit.core.files.write_with`): never half a file."""
    try:
        write_with(target, csv_ready(frame).write_csv if fmt == "csv" else frame.write_parquet)
    except pl.exceptions.PolarsError as exc:  # polars wraps the OSError of a full disk
        raise BatchOutputNotWritable(target, str(exc)) from None
    except OSError as exc:
        raise BatchOutputNotWritable(target, exc.strerror or str(exc)) from None
