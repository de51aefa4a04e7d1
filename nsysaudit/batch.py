"""Batch audits: many exports in, one polars frame out (one row per input), for notebooks and CI.

>>> import nsysaudit
>>> paths = ["tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite", "missing.sqlite"]
>>> nsysaudit.audit(paths).select("verdict", "error").rows()
[('failure_found', None), (None, 'missing.sqlite: no such file')]

An input that cannot be analyzed is a row with its one-line ``error`` and a null verdict: it is
reported, never dropped; so is one whose reading failed with an OSError (an I/O error, a file that
vanished). Other errors (a bug, an interrupt) propagate.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import polars as pl

from nsysaudit.api import analyze
from nsysaudit.errors import NsysAuditError

AUDIT_SCHEMA: dict[str, Any] = {
    "path": pl.String,
    "sha256": pl.String,
    "nsys_version": pl.String,
    "schema_version": pl.String,
    "verdict": pl.String,
    "cuda_api_calls": pl.Int64,
    "nonzero_returns": pl.Int64,
    "library_calls": pl.Int64,
    "censored_library_calls": pl.Int64,
    "nested_alloc_failures": pl.Int64,
    "straddling_alloc_failures": pl.Int64,
    "warnings": pl.Int64,
    "error": pl.String,
}


def audit(paths: Iterable[str | os.PathLike[str]], **options: Any) -> pl.DataFrame:
    """Analyze every path (``options`` as for :func:`nsysaudit.analyze`); one row per input.

    Columns: see ``AUDIT_SCHEMA``. Counts come from each analysis' own frames; ``error`` holds
    the one-line reason an input was unusable (then every other column but ``path`` is null).
    """
    rows: list[dict[str, Any]] = []
    for path in paths:
        try:
            result = analyze(path, **options)
        except NsysAuditError as exc:
            rows.append({"path": os.fspath(path), "error": str(exc)})
            continue
        except OSError as exc:  # the file or its folder failed under us (I/O error, vanished, ...)
            where = exc.filename if exc.filename is not None else os.fspath(path)
            rows.append({"path": os.fspath(path), "error": f"{where}: {exc.strerror or exc}"})
            continue
        kinds = result.frames["findings"]["kind"]
        libs = result.frames["library_calls"]
        rows.append(
            {
                "path": os.fspath(path),
                "sha256": result.input.sha256,
                "nsys_version": result.input.nsys_version,
                "schema_version": result.input.schema_version,
                "verdict": result.verdict,
                "cuda_api_calls": result.cuda_api_calls,
                "nonzero_returns": result.census["nonzero_returns"],
                "library_calls": libs.height,
                "censored_library_calls": libs.filter(pl.col("coverage") == "censored").height,
                "nested_alloc_failures": int((kinds == "nested_alloc_failure").sum()),
                "straddling_alloc_failures": int((kinds == "straddling_alloc_failure").sum()),
                "warnings": len(result.warnings),
                "error": None,
            }
        )
    return pl.DataFrame(rows, schema=AUDIT_SCHEMA)
