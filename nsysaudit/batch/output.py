"""What a batch writes: its two tables (their schemas and formats), the part file of each finished
input, and the resumption of an earlier batch from those parts.

The parts are ``parts/<sha256>.findings.parquet`` then ``parts/<sha256>.input.parquet`` (the mark
that the input is done), each written to a temporary name and renamed, beside ``parts/batch.json``
(the options they were made with); the combined tables are written last, the same way. Nothing
else may be in a batch's folders: a batch refuses to write where another program did.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NotRequired, TypedDict, cast

import polars as pl

from nsysaudit.analysis.findings import FindingKind
from nsysaudit.analysis.verdict import Verdict
from nsysaudit.batch import ranks as by_rank
from nsysaudit.core.errors import BadOption, BatchOutputNotWritable
from nsysaudit.core.files import write_atomic, write_with
from nsysaudit.core.paths import storable
from nsysaudit.core.shapes import Schema
from nsysaudit.reports.documents import CoverageState, InputKind

BATCH_FORMAT = 1

INPUT_SCHEMA: Schema = {
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
    # The host stalls (the document's stalls key): every blocking call, and those of the stall minimum.
    "blocking_calls": pl.Int64,
    "blocked_ns": pl.Int64,
    "stalls": pl.Int64,
    "stalled_ns": pl.Int64,
}
FINDING_SCHEMA: Schema = {
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


class InputRow(StoredInput):
    """One row of the inputs table (:data:`INPUT_SCHEMA`; a key a row lacks is null there).

    ``status`` says which keys it has: ``analyzed``, every key (``error`` None); ``error``, the
    ``path``, the one-line ``error`` and the ``sha256`` when the file could be read; ``resumed``,
    the ``path`` and ``sha256`` as a worker sends it, every key once the driver read its part."""

    path: str
    status: InputStatus


class FindingRow(TypedDict):
    """One row of the findings table (:data:`FINDING_SCHEMA`): a ``findings[]`` entry of the JSON
    contract made flat, after the SHA-256 of its input and its index there."""

    input_sha256: str
    finding: int
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
    rank: int | None  # by_rank.FINDING_COLUMNS
    rank_source: str | None
    device_id: int | None


class BatchOptions(TypedDict):
    """The options that change a batch's rows, as ``parts/batch.json`` records them."""

    library_domains: list[str]
    max_pairs: int | None


def table(rows: Sequence[Mapping[str, object]], schema: Schema) -> pl.DataFrame:
    """Rows as a frame of ``schema`` (a key a row lacks is null)."""
    # A path found in a folder, and the error that names it, may hold bytes that are not UTF-8.
    full = [{k: storable(v) if isinstance(v := r.get(k), str) else v for k in schema} for r in rows]
    return pl.DataFrame(full, schema=schema, orient="row") if full else pl.DataFrame(schema=schema)


def findings_frame(rows: Sequence[FindingRow]) -> pl.DataFrame:
    """One input's finding rows (``audit_one``'s ``findings``) as a frame of :data:`FINDING_SCHEMA`."""
    return table(rows, FINDING_SCHEMA)


@dataclass(frozen=True)
class Prepared:
    """What :meth:`BatchOutput.prepare` found and made: the SHA-256s that already have parts, and
    the folders it created (innermost first), which :meth:`BatchOutput.abandon` removes."""

    done: frozenset[str] = frozenset()
    created: tuple[Path, ...] = ()


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

    def prepare(self, options: BatchOptions) -> Prepared:
        """Create the parts folder (or check it belongs to a batch with the same ``options``, what
        changes the rows); return the SHA-256s already done and the folders created. Refuses to
        write over files another program made, and into a folder holding anything a batch does not
        write. :meth:`abandon` removes what this call created, when the batch stops before any part."""
        wanted = {"format": BATCH_FORMAT, "options": options}
        created: tuple[Path, ...] = ()
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
                return Prepared(frozenset(
                    p.name[: -len(".input.parquet")] for p in self.parts.glob("*.input.parquet")
                ))
            for existing in (self.inputs, self.findings, self.parts):
                if existing.exists() or existing.is_symlink():
                    raise BatchOutputNotWritable(
                        existing, "exists and is not part of an nsysaudit batch output (no parts/batch.json)"
                    )
            missing = tuple(p for p in (self.parts, *self.parts.parents) if not p.exists())
            self.parts.mkdir(parents=True)
            created = missing
            write_atomic(self.record, json.dumps(wanted, sort_keys=True).encode())
        except OSError as exc:
            self.abandon(created)
            where = exc.filename if exc.filename is not None else self.parts
            raise BatchOutputNotWritable(where, exc.strerror or str(exc)) from None
        return Prepared(frozenset(), created)

    def abandon(self, created: Sequence[Path]) -> None:
        """Remove the folders :meth:`prepare` ``created`` (and its record), if nothing else is in them."""
        if created:
            self.record.unlink(missing_ok=True)
        for folder in created:  # innermost first
            with contextlib.suppress(OSError):
                folder.rmdir()

    def save_part(self, row: InputRow, findings: Sequence[FindingRow]) -> None:
        """Findings part, then the input part (the mark that the input is done), each atomically."""
        sha = row["sha256"]
        _write_frame(findings_frame(findings), self.parts / f"{sha}.findings.parquet", "parquet")
        stored = {k: v for k, v in row.items() if k not in ("path", "status")}
        _write_frame(table([stored], INPUT_SCHEMA), self.parts / f"{sha}.input.parquet", "parquet")

    def load_part(self, sha: str) -> tuple[StoredInput, pl.DataFrame]:
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
        # A parse boundary, checked: the part has INPUT_SCHEMA's columns (above) and save_part wrote it
        # from an analyzed InputRow (less path and status), so its row holds a StoredInput's values.
        return cast(StoredInput, part.row(0, named=True)), findings

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


def _within(path: str, folder: str) -> bool:
    """Whether resolved ``path`` is ``folder`` or lies under it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _write_frame(frame: pl.DataFrame, target: Path, fmt: str) -> None:
    """Write ``frame`` atomically (:func:`~nsysaudit.core.files.write_with`): never half a file."""
    try:
        write_with(target, frame.write_csv if fmt == "csv" else frame.write_parquet)
    except pl.exceptions.PolarsError as exc:  # polars wraps the OSError of a full disk
        raise BatchOutputNotWritable(target, str(exc)) from None
    except OSError as exc:
        raise BatchOutputNotWritable(target, exc.strerror or str(exc)) from None
