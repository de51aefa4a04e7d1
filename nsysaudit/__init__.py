"""nsysaudit: forensics on NVIDIA Nsight Systems exports.

Finds CUDA allocation failures nested inside library calls (cuBLAS, cuDNN), says where the
evidence stops (censored coverage), and seals what it reports.

>>> import nsysaudit
>>> result = nsysaudit.analyze("tests/fixtures/h200-cuda13-nsys2023.4/observe.sqlite")  # doctest: +SKIP
>>> result.verdict, result.census["nonzero_returns"]  # doctest: +SKIP
('inconclusive', 13)
"""

from __future__ import annotations

__version__ = "0.1.0"

from nsysaudit.analysis import analyze
from nsysaudit.batch import audit
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
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.compare import Comparison, compare_results
from nsysaudit.seal import Sealed, Verification, seal_analysis, seal_compare, verify
from nsysaudit.session import Session, open
from nsysaudit.telemetry import TelemetryOptions

__all__ = [
    "AnalysisResult",
    "BadOption",
    "BatchResult",
    "CheckFailed",
    "Comparison",
    "ExportFailed",
    "NsysAuditError",
    "NsysNotFound",
    "OutputExists",
    "Sealed",
    "Session",
    "TelemetryOptions",
    "UnusableInput",
    "Verification",
    "__version__",
    "analyze",
    "audit",
    "audit_many",
    "compare_results",
    "open",
    "run_batch",
    "seal_analysis",
    "seal_compare",
    "verify",
]
