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

The public API is what ``__all__`` lists: the entry points, their results and options, and every
error class nsysaudit raises on purpose. Everything else is internal and may move.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsysaudit._version import __version__
from nsysaudit.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from nsysaudit.batch.audit import audit
    from nsysaudit.batch.check import CheckReport, Expectations, check_exports
    from nsysaudit.batch.run import BatchResult, audit_many, run_batch
    from nsysaudit.core.defaults import DEFAULT_LIBRARY_DOMAINS, DEFAULT_MAX_PAIRS
    from nsysaudit.core.errors import (
        BadOption,
        BatchOutputNotWritable,
        CheckFailed,
        EngineUnavailable,
        ExpectationsUnusable,
        ExportFailed,
        Interrupted,
        NsysAuditError,
        NsysNotFound,
        OutputExists,
        OutputFailed,
        OutputNotWritable,
        PictureNotWritable,
        Terminated,
        UnusableInput,
    )
    from nsysaudit.core.progress import Progress
    from nsysaudit.read.cache import list_cache, prune_cache
    from nsysaudit.read.snapshot import Snapshot, load_snapshot
    from nsysaudit.read.telemetry import DEFAULT_CLOCKS, TelemetryOptions
    from nsysaudit.reports.analysis import AnalysisResult
    from nsysaudit.reports.compare import Comparison, compare_results
    from nsysaudit.schemas import SCHEMA_KINDS, schema, schema_text
    from nsysaudit.seal import Sealed, Verification, seal_analysis, seal_compare
    from nsysaudit.seal.verify import verify
    from nsysaudit.session import Session, analyze, open

ERRORS = (
    "BadOption", "BatchOutputNotWritable", "CheckFailed", "EngineUnavailable", "ExpectationsUnusable",
    "ExportFailed", "Interrupted", "NsysAuditError", "NsysNotFound", "OutputExists", "OutputFailed",
    "OutputNotWritable", "PictureNotWritable", "Terminated", "UnusableInput",
)
# Where each public name lives. Imported on first use (PEP 562), so that ``nsysaudit --version`` or
# the analysis of a small export does not pay for the seal, batch, dask or rich code it never runs.
_HOMES = {
    **dict.fromkeys(("analyze", "open", "Session"), "nsysaudit.session"),
    "audit": "nsysaudit.batch.audit",
    **dict.fromkeys(("CheckReport", "Expectations", "check_exports"), "nsysaudit.batch.check"),
    **dict.fromkeys(ERRORS, "nsysaudit.core.errors"),
    **dict.fromkeys(("BatchResult", "audit_many", "run_batch"), "nsysaudit.batch.run"),
    **dict.fromkeys(("DEFAULT_LIBRARY_DOMAINS", "DEFAULT_MAX_PAIRS"), "nsysaudit.core.defaults"),
    "Progress": "nsysaudit.core.progress",
    **dict.fromkeys(("DEFAULT_CLOCKS", "TelemetryOptions"), "nsysaudit.read.telemetry"),
    **dict.fromkeys(("list_cache", "prune_cache"), "nsysaudit.read.cache"),
    **dict.fromkeys(("Snapshot", "load_snapshot"), "nsysaudit.read.snapshot"),
    "AnalysisResult": "nsysaudit.reports.analysis",
    **dict.fromkeys(("Comparison", "compare_results"), "nsysaudit.reports.compare"),
    **dict.fromkeys(("SCHEMA_KINDS", "schema", "schema_text"), "nsysaudit.schemas"),
    **dict.fromkeys(("Sealed", "Verification", "seal_analysis", "seal_compare", "verify"), "nsysaudit.seal"),
}


__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())

__all__ = [
    "DEFAULT_CLOCKS",
    "DEFAULT_LIBRARY_DOMAINS",
    "DEFAULT_MAX_PAIRS",
    "SCHEMA_KINDS",
    "AnalysisResult",
    "BadOption",
    "BatchOutputNotWritable",
    "BatchResult",
    "CheckFailed",
    "CheckReport",
    "Comparison",
    "EngineUnavailable",
    "Expectations",
    "ExpectationsUnusable",
    "ExportFailed",
    "Interrupted",
    "NsysAuditError",
    "NsysNotFound",
    "OutputExists",
    "OutputFailed",
    "OutputNotWritable",
    "PictureNotWritable",
    "Progress",
    "Sealed",
    "Session",
    "Snapshot",
    "TelemetryOptions",
    "Terminated",
    "UnusableInput",
    "Verification",
    "__version__",
    "analyze",
    "audit",
    "audit_many",
    "check_exports",
    "compare_results",
    "list_cache",
    "load_snapshot",
    "open",
    "prune_cache",
    "run_batch",
    "schema",
    "schema_text",
    "seal_analysis",
    "seal_compare",
    "verify",
]
