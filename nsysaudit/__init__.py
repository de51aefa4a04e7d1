"""nsysaudit: forensics on NVIDIA Nsight Systems traces.

Finds CUDA calls that failed inside library calls (cuBLAS, cuDNN) and failed waits on events
recorded inside a stream capture, says where the evidence stops (censored coverage, from nsys's
own diagnostics), places them on the application's own clock, and seals what it reports.

>>> import nsysaudit
>>> result = nsysaudit.analyze("tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite")
>>> result.verdict, result.census["nonzero_returns"]
('failure_found', 28)
>>> result  # doctest: +ELLIPSIS
<AnalysisResult '...torch/observe.sqlite': failure_found; 1 nested_alloc_failure; 2 library call(s), ...>

The public API is what ``__all__`` lists; everything else is internal and may move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsysaudit._lazy import lazy_attributes
from nsysaudit._version import __version__

if TYPE_CHECKING:
    from nsysaudit.api import analyze
    from nsysaudit.batch import audit
    from nsysaudit.check import CheckReport, Expectations, check_exports
    from nsysaudit.errors import (
        BadOption,
        CheckFailed,
        ExportFailed,
        NsysAuditError,
        NsysNotFound,
        OutputExists,
        UnusableInput,
    )
    from nsysaudit.fleet import BatchResult, audit_many, run_batch
    from nsysaudit.joins import DEFAULT_MAX_PAIRS
    from nsysaudit.progress import Progress
    from nsysaudit.read.telemetry import DEFAULT_CLOCKS, TelemetryOptions, parse_anchor, parse_clock
    from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS
    from nsysaudit.reports.analysis import AnalysisResult
    from nsysaudit.reports.compare import Comparison, compare_results
    from nsysaudit.seal import Sealed, Verification, seal_analysis, seal_compare
    from nsysaudit.seal.verify import verify
    from nsysaudit.session import Session, open

# Where each public name lives. Imported on first use (PEP 562), so that ``nsysaudit --version`` or
# the analysis of a small export does not pay for the seal, batch, dask or rich code it never runs.
_HOMES = {
    "analyze": "nsysaudit.api",
    "audit": "nsysaudit.batch",
    **dict.fromkeys(("CheckReport", "Expectations", "check_exports"), "nsysaudit.check"),
    **dict.fromkeys(
        ("BadOption", "CheckFailed", "ExportFailed", "NsysAuditError", "NsysNotFound", "OutputExists",
         "UnusableInput"),
        "nsysaudit.errors",
    ),
    **dict.fromkeys(("BatchResult", "audit_many", "run_batch"), "nsysaudit.fleet"),
    "DEFAULT_MAX_PAIRS": "nsysaudit.joins",
    "Progress": "nsysaudit.progress",
    **dict.fromkeys(("DEFAULT_CLOCKS", "TelemetryOptions", "parse_anchor", "parse_clock"), "nsysaudit.read.telemetry"),
    "DEFAULT_LIBRARY_DOMAINS": "nsysaudit.read.trace",
    "AnalysisResult": "nsysaudit.reports.analysis",
    **dict.fromkeys(("Comparison", "compare_results"), "nsysaudit.reports.compare"),
    **dict.fromkeys(("Sealed", "Verification", "seal_analysis", "seal_compare", "verify"), "nsysaudit.seal"),
    **dict.fromkeys(("Session", "open"), "nsysaudit.session"),
}


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())

__all__ = [
    "DEFAULT_CLOCKS",
    "DEFAULT_LIBRARY_DOMAINS",
    "DEFAULT_MAX_PAIRS",
    "AnalysisResult",
    "BadOption",
    "BatchResult",
    "CheckFailed",
    "CheckReport",
    "Comparison",
    "Expectations",
    "ExportFailed",
    "NsysAuditError",
    "NsysNotFound",
    "OutputExists",
    "Progress",
    "Sealed",
    "Session",
    "TelemetryOptions",
    "UnusableInput",
    "Verification",
    "__version__",
    "analyze",
    "audit",
    "audit_many",
    "check_exports",
    "compare_results",
    "open",
    "parse_anchor",
    "parse_clock",
    "run_batch",
    "seal_analysis",
    "seal_compare",
    "verify",
]
