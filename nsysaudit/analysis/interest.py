"""Which library calls are "of interest": the ones a report lists and reads the memory ledger at.

Every library call when there are at most :data:`FEW_LIBRARY_CALLS`; otherwise each one that runs on
a thread other than its process's main thread, is censored, has a failed nested call, encloses a
finding, or initializes an NCCL communicator (on the main thread: NCCL's allocations are inside it,
on a thread NCCL starts). At most :data:`MAX_LISTED` of them, the most telling first (enclosing a finding, with a
failed nested call, censored, handle creation), then by time. The rule applied is said in words
(``selection``), since a report that selects must say how.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import polars as pl

from nsysaudit import words
from nsysaudit.read.nccl import COMMUNICATOR_CALLS, NCCL

FEW_LIBRARY_CALLS = 10
MAX_LISTED = 200


@dataclass(frozen=True)
class Interest:
    """The library calls of interest (``frame``: the rows chosen, in ``lib_id`` order), how many
    there are in all, and the rule in words."""

    frame: pl.DataFrame
    total: int
    selection: str


def of_interest(libs: pl.DataFrame, failed_ids: Iterable[int], enclosing_ids: Iterable[int]) -> Interest:
    """The library calls of interest among ``libs`` (columns ``lib_id, pid, tid, coverage, api``):
    ``failed_ids`` are those with a failed nested call, ``enclosing_ids`` those enclosing a finding."""
    total = libs.height
    failed = pl.col("lib_id").is_in(sorted(set(failed_ids)))
    encloses = pl.col("lib_id").is_in(sorted(set(enclosing_ids)))
    if total <= FEW_LIBRARY_CALLS:
        return Interest(libs.sort("lib_id"), total, words.all_library_calls(total, FEW_LIBRARY_CALLS))
    # An NCCL communicator's initialization (on the main thread, where NCCL's allocations are) too.
    communicator = pl.col("api").fill_null("").str.contains(COMMUNICATOR_CALLS.pattern)
    with_nccl = "library" in libs.columns and libs.filter(communicator & (pl.col("library") == NCCL)).height > 0
    if not with_nccl:
        communicator = pl.lit(False)
    chosen = libs.filter(
        (pl.col("tid") != pl.col("pid")) | (pl.col("coverage") == "censored") | failed | encloses
        | (communicator & (pl.col("library") == NCCL))
    )
    chosen_count: int | None = None  # how many match, where more than MAX_LISTED
    if chosen.height > MAX_LISTED:
        # Readable and bounded: the most telling first, then by time; the rest are counted, and all
        # are in `analyze --json`.
        api = pl.col("api").fill_null("")
        handle = (api.str.starts_with("cublasCreate") | api.str.contains(r"^(cublasLtCreate|cudnnCreate)")
                  | api.str.contains(COMMUNICATOR_CALLS.pattern))
        kept = (
            chosen.with_columns(
                (~encloses).alias("_r0"),
                (~failed).alias("_r1"),
                (pl.col("coverage") != "censored").alias("_r2"),
                (~handle).alias("_r3"),
            )
            .sort(["_r0", "_r1", "_r2", "_r3", "lib_id"])
            .head(MAX_LISTED)["lib_id"]
        )
        chosen_count = chosen.height
        chosen = chosen.filter(pl.col("lib_id").is_in(kept.implode()))
    selection = words.library_calls_of_interest(total, FEW_LIBRARY_CALLS, with_nccl, chosen_count, MAX_LISTED)
    return Interest(chosen.sort("lib_id"), total, selection)
