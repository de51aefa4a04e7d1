"""``analyze(path)``: read an export, analyze it, report it. The CLI and notebooks call this."""

from __future__ import annotations

import os
from collections.abc import Sequence

from nsysaudit.analysis import analyze_trace
from nsysaudit.analysis.failures import regions_needing_records
from nsysaudit.joins import DEFAULT_MAX_PAIRS
from nsysaudit.progress import Progress
from nsysaudit.read.inputs import check_input, open_input
from nsysaudit.read.telemetry import TelemetryOptions, load_telemetry
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS, event_records_in, load
from nsysaudit.reports.analysis import AnalysisResult, report_analysis


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
    given = check_input(path)
    log = load_telemetry(telemetry, telemetry_options) if telemetry is not None else None
    opened = open_input(given, shown_as=os.fspath(path), nsys_path=nsys_path, progress=progress)
    try:
        trace = load(opened.export, library_domains, progress=progress)
        # Event records are read (one query) only for capture regions that a failed wait follows.
        records = event_records_in(opened.export, trace.cuda_api_table, regions_needing_records(trace))
        info = opened.info(trace.tables_used, trace.session_start_utc_ns)
        analysis = analyze_trace(
            trace, max_pairs=max_pairs, telemetry=log, event_records=records, library_domains=library_domains
        )
        return report_analysis(info, analysis)
    finally:
        opened.export.close()
