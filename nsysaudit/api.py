"""``analyze(path)``: read an export, analyze it, report it. The CLI and notebooks call this."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace

import polars as pl

from nsysaudit.analysis import analyze_trace
from nsysaudit.analysis.failures import regions_needing_records
from nsysaudit.errors import UnusableInput
from nsysaudit.joins import DEFAULT_MAX_PAIRS
from nsysaudit.progress import Progress
from nsysaudit.read.damage import DamageCheck
from nsysaudit.read.inputs import Engine, InputInfo, check_input, open_input
from nsysaudit.read.source import ExportFile
from nsysaudit.read.telemetry import TelemetryLog, TelemetryOptions, load_telemetry
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS, Trace, event_records_in, load
from nsysaudit.reports.analysis import AnalysisResult, report_analysis


@dataclass(frozen=True)
class Loaded:
    """One input read and ready to analyze: the open read-only export (the caller closes it), what
    the analysis needs from it, and what the report says the input was."""

    export: ExportFile
    trace: Trace
    info: InputInfo
    event_records: pl.DataFrame
    library_domains: tuple[str, ...]

    def analyze(
        self, *, telemetry: TelemetryLog | None = None, max_pairs: int | None = DEFAULT_MAX_PAIRS
    ) -> AnalysisResult:
        analysis = analyze_trace(
            self.trace,
            max_pairs=max_pairs,
            telemetry=telemetry,
            event_records=self.event_records,
            library_domains=self.library_domains,
        )
        return report_analysis(self.info, analysis)


def load_input(
    path: str | os.PathLike[str],
    *,
    nsys_path: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    progress: Progress | None = None,
) -> Loaded:
    """Check, export (a report) and read one input; raises :class:`~nsysaudit.errors.UnusableInput`.

    The returned export stays open (``Loaded.export.close()``); on any error it is closed here.
    """
    given = check_input(path)
    opened = open_input(given, shown_as=os.fspath(path), nsys_path=nsys_path, progress=progress)
    check: DamageCheck | None = None
    try:
        # SQLite's own check of the evidence tables, beside the reading: it alone says whether the
        # file is damaged, whichever engine reads it (nsysaudit.read.damage).
        check = DamageCheck(opened.export)
        try:
            trace = load(opened.export, library_domains, progress=progress)
            # Event records are read (one query) only for capture regions that a failed wait follows.
            records = event_records_in(opened.export, trace.cuda_api_table, regions_needing_records(trace))
        except UnusableInput:
            check.result().raise_if_damaged(opened.export.path)  # a reader's error on a damaged file: SQLite's words
            raise
        damage = check.result()
        damage.raise_if_damaged(opened.export.path)
        trace = replace(trace, warnings=(*trace.warnings, *damage.warnings))
        info = opened.info(trace.tables_used, trace.session_start_utc_ns, engine_of(trace))
    except BaseException:
        if check is not None:
            check.cancel()
        opened.export.close()
        raise
    return Loaded(opened.export, trace, info, records, tuple(library_domains))


def engine_of(trace: Trace) -> Engine:
    """What read the CUDA API table: the engine, its SQLite, and why not the native engine (None: it did)."""
    from nsysaudit.read import native
    from nsysaudit.read.scan import engine_sqlite_version

    engine = trace.scan_engine
    why = native.unavailable()
    if why is None and engine not in ("native", "none"):
        why = "not used (it could not read the CUDA API table; the polars engines did)"
    return Engine(engine, engine_sqlite_version(engine), why)


def analyze(
    path: str | os.PathLike[str],
    *,
    nsys_path: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    telemetry: str | os.PathLike[str] | None = None,
    telemetry_options: TelemetryOptions | None = None,
    max_pairs: int | None = DEFAULT_MAX_PAIRS,
    progress: Progress | None = None,
) -> AnalysisResult:
    """Analyze one Nsight Systems export (``.sqlite``) or report (``.nsys-rep``).

    ``progress`` hears about long steps (the nsys export, the CUDA API scan); see
    :mod:`nsysaudit.progress`.

    ``max_pairs`` bounds the (library call, CUDA API call) pairs formed (None: no limit); hitting
    it is a warning, and makes the verdict inconclusive when it could hide a finding.

    Raises :class:`~nsysaudit.errors.UnusableInput` (exit code 2 in the CLI) when the input cannot
    be analyzed at all. Partly broken input is analyzed and its problems listed in ``warnings``.

    ``telemetry``: a JSON Lines file of the application's own receipts (see
    :mod:`nsysaudit.read.telemetry`); its clocks are aligned with the trace (see
    :mod:`nsysaudit.analysis.alignment`) and every finding and library call is placed among its lines.
    Unusable telemetry raises :class:`~nsysaudit.errors.UnusableInput` before the export is read.

    >>> result = analyze("tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite")
    >>> result.verdict
    'failure_found'
    >>> [(f["kind"], f["correlation_id"], f["thread_name"]) for f in result.to_dict()["findings"]]
    [('nested_alloc_failure', 2433, 'pt_autograd_0')]
    """
    check_input(path)
    log = load_telemetry(telemetry, telemetry_options) if telemetry is not None else None
    loaded = load_input(path, nsys_path=nsys_path, library_domains=library_domains, progress=progress)
    try:
        return loaded.analyze(telemetry=log, max_pairs=max_pairs)
    finally:
        loaded.export.close()
