"""``nsysaudit.audit(paths)``: the first batch form, one row per path given (no folder searched).

Deprecated: :func:`nsysaudit.audit_many` gives the batch's inputs table (more columns, folders
searched, worker processes). ``audit`` stays for one release, as a view of the same rows, those of:

>>> import nsysaudit
>>> paths = ["tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite", "missing.sqlite"]
>>> table = nsysaudit.audit_many(paths, jobs=1)  # its paths absolute
>>> table["verdict"].to_list(), table["error"][1].endswith("/missing.sqlite: no such file")
(['failure_found', None], True)

An input that cannot be analyzed is a row with its one-line ``error`` and a null verdict: it is
reported, never dropped; so is one whose reading failed with an OSError (an I/O error, a file that
vanished). Other errors (a bug, an interrupt) propagate.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence

import polars as pl

from nsysaudit import words
from nsysaudit.analysis.joins import DEFAULT_MAX_PAIRS
from nsysaudit.batch.run import AuditOptions, audit_one
from nsysaudit.core.shapes import Schema
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS

AUDIT_SCHEMA: Schema = {
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


def audit(
    paths: Iterable[str | os.PathLike[str]],
    *,
    nsys_path: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    max_pairs: int | None = DEFAULT_MAX_PAIRS,
) -> pl.DataFrame:
    """Deprecated (use :func:`nsysaudit.audit_many`): analyze every path in this process; one row
    per path, the columns of ``AUDIT_SCHEMA`` (the batch's own rows, :func:`nsysaudit.batch.run.audit_one`).

    ``error`` holds the one-line reason an input was unusable (then every other column but
    ``path`` is null).
    """
    warnings.warn(words.AUDIT_DEPRECATED, DeprecationWarning, stacklevel=2)
    options = AuditOptions(tuple(library_domains), max_pairs, None if nsys_path is None else os.fspath(nsys_path))
    rows = []
    for path in paths:
        row: Mapping[str, object] = audit_one(os.fspath(path), options)["input"]
        if row.get("error") is not None:
            row = {"path": row["path"], "error": row["error"]}
        rows.append({k: row.get(k) for k in AUDIT_SCHEMA})
    return pl.DataFrame(rows, schema=AUDIT_SCHEMA)
