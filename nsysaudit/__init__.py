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

The names are listed once, as the imports below, each from the module that defines it; the
package imports a name on first use (PEP 562, :func:`nsysaudit.core.lazy.declared_homes` reads the
list), so that ``nsysaudit --version`` or the analysis of a small export does not pay for the seal,
batch, dask or rich code it never runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nsysaudit._version import __version__ as __version__
from nsysaudit.core.lazy import declared_homes, lazy_attributes

# The public names, each with the module that defines it: the one list (``name as name``: exported).
if TYPE_CHECKING:
    from nsysaudit.batch.audit import audit as audit
    from nsysaudit.batch.check import CheckReport as CheckReport
    from nsysaudit.batch.check import Expectations as Expectations
    from nsysaudit.batch.check import check_exports as check_exports
    from nsysaudit.batch.run import BatchResult as BatchResult
    from nsysaudit.batch.run import audit_many as audit_many
    from nsysaudit.batch.run import run_batch as run_batch
    from nsysaudit.core.defaults import DEFAULT_LIBRARY_DOMAINS as DEFAULT_LIBRARY_DOMAINS
    from nsysaudit.core.defaults import DEFAULT_MAX_PAIRS as DEFAULT_MAX_PAIRS
    from nsysaudit.core.errors import BadOption as BadOption
    from nsysaudit.core.errors import BatchOutputNotWritable as BatchOutputNotWritable
    from nsysaudit.core.errors import CheckFailed as CheckFailed
    from nsysaudit.core.errors import EngineUnavailable as EngineUnavailable
    from nsysaudit.core.errors import ExpectationsUnusable as ExpectationsUnusable
    from nsysaudit.core.errors import ExportFailed as ExportFailed
    from nsysaudit.core.errors import Interrupted as Interrupted
    from nsysaudit.core.errors import NsysAuditError as NsysAuditError
    from nsysaudit.core.errors import NsysNotFound as NsysNotFound
    from nsysaudit.core.errors import OutputExists as OutputExists
    from nsysaudit.core.errors import OutputFailed as OutputFailed
    from nsysaudit.core.errors import OutputNotWritable as OutputNotWritable
    from nsysaudit.core.errors import PictureNotWritable as PictureNotWritable
    from nsysaudit.core.errors import Terminated as Terminated
    from nsysaudit.core.errors import UnusableInput as UnusableInput
    from nsysaudit.core.progress import Progress as Progress
    from nsysaudit.read.cache import list_cache as list_cache
    from nsysaudit.read.cache import prune_cache as prune_cache
    from nsysaudit.read.snapshot import Snapshot as Snapshot
    from nsysaudit.read.snapshot import load_snapshot as load_snapshot
    from nsysaudit.read.telemetry import DEFAULT_CLOCKS as DEFAULT_CLOCKS
    from nsysaudit.read.telemetry import TelemetryOptions as TelemetryOptions
    from nsysaudit.reports.analysis import AnalysisResult as AnalysisResult
    from nsysaudit.reports.compare import Comparison as Comparison
    from nsysaudit.reports.compare import compare_results as compare_results
    from nsysaudit.schemas import SCHEMA_KINDS as SCHEMA_KINDS
    from nsysaudit.schemas import schema as schema
    from nsysaudit.schemas import schema_text as schema_text
    from nsysaudit.seal.folder import Sealed as Sealed
    from nsysaudit.seal.folder import seal_analysis as seal_analysis
    from nsysaudit.seal.folder import seal_compare as seal_compare
    from nsysaudit.seal.verify import Verification as Verification
    from nsysaudit.seal.verify import verify as verify
    from nsysaudit.session import Session as Session
    from nsysaudit.session import analyze as analyze
    from nsysaudit.session import open as open

_HOMES = declared_homes(__file__)
__all__ = sorted(_HOMES)
__getattr__, __dir__ = lazy_attributes(__name__, _HOMES, globals())
