"""What the commands do unless told otherwise: the defaults their help shows. Here, apart from the
modules that use them (which re-export them), so that the command line starts without importing
polars (tests/test_cli_startup.py)."""

from __future__ import annotations

DEFAULT_LIBRARY_DOMAINS = ("cuBLAS", "cuDNN", "NCCL")  # NVTX domains whose ranges are library calls (read/trace.py)
DEFAULT_MAX_PAIRS = 1_000_000  # library-call/CUDA-call pairs formed at most (analysis/joins.py)
DEFAULT_BOUNDARY = "backward_start"  # the telemetry event a timeline is drawn around (reports/timeline.py)
