"""After an out-of-memory failure: did its process go on allocating? Read from the rows the scan marks.

The streaming scan keeps the failed CUDA API calls and the calls inside library calls; a successful
``cudaMalloc`` elsewhere is only marked: the scan keeps the successful rows of an allocation call's
name (:func:`allocation_name_ids`) as it keeps the stream-capture and free calls. Whether a process
recovered from an out-of-memory failure that no library call encloses (``nsysaudit.analysis.recovery``)
needs the last successful allocation call of each such process: :func:`last_successful_allocations`
finds it among those rows (it was one more query over the whole CUDA API table, 1-2 s at 20M rows).
"""

from __future__ import annotations

import sqlite3

import polars as pl

from nsysaudit.core.codes import is_allocation_api, is_allocation_failure, is_out_of_memory
from nsysaudit.core.ids import global_pid
from nsysaudit.core.shapes import Schema
from nsysaudit.read.source import quote

LAST_ALLOCATION_SCHEMA: Schema = {"gpid": pl.Int64, "last_ok_ns": pl.Int64, "calls": pl.Int64}


def out_of_memory_allocations(rows: pl.DataFrame) -> pl.DataFrame:
    """The rows of ``rows`` (CUDA API rows: ``api``, ``return_code``, ``gtid``, ``start_ns``) that are
    allocation failures meaning out of memory (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY)."""
    keys = rows.select("api", "return_code").unique().drop_nulls()
    wanted = [(a, rc) for a, rc in keys.iter_rows() if is_allocation_failure(a, rc) and is_out_of_memory(a, rc)]
    if not wanted:
        return rows.clear()
    table = pl.DataFrame(wanted, schema={"api": pl.String, "return_code": pl.Int64}, orient="row")
    return rows.join(table, on=["api", "return_code"], how="semi")


def allocation_name_ids(conn: sqlite3.Connection, strings: str) -> pl.Series:
    """StringIds ids of the allocation calls (:func:`nsysaudit.core.codes.is_allocation_api`): the scan
    marks their successful rows (:func:`last_successful_allocations` reads them from there)."""
    rows = conn.execute(f"SELECT id, value FROM {quote(strings)} WHERE value LIKE 'cu%'").fetchall()
    ids = sorted(int(i) for i, v in rows if type(i) is int and isinstance(v, str) and is_allocation_api(v))
    return pl.Series("name_id", ids, dtype=pl.Int64)


def last_successful_allocations(allocations: pl.DataFrame, failed: pl.DataFrame) -> pl.DataFrame:
    """Per process with an out-of-memory allocation failure among ``failed`` (CUDA API rows), the
    start of its last successful allocation call after the first such failure and how many it made
    after it (:data:`LAST_ALLOCATION_SCHEMA`; a process that made none has no row). ``allocations``:
    the successful CUDA API rows of an allocation call's name (``gtid``, ``start_ns``), which the scan
    keeps as it reads every row (no pass of its own over the table). Empty when ``failed`` holds no
    such failure."""
    oom = out_of_memory_allocations(failed.filter(pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null()))
    if oom.height == 0:
        return pl.DataFrame(schema=LAST_ALLOCATION_SCHEMA)
    gpids = oom.select(global_pid(pl.col("gtid")).alias("gpid"))["gpid"].unique()
    first = int(oom["start_ns"].min())  # type: ignore[arg-type]
    return (
        allocations.filter(pl.col("gtid").is_not_null() & (pl.col("start_ns") > first))
        .group_by(global_pid(pl.col("gtid")).alias("gpid"))
        .agg(pl.col("start_ns").max().alias("last_ok_ns"), pl.len().cast(pl.Int64).alias("calls"))
        .filter(pl.col("gpid").is_in(gpids.implode()))
        .select(list(LAST_ALLOCATION_SCHEMA))
        .cast(LAST_ALLOCATION_SCHEMA)  # type: ignore[arg-type]
        .sort("gpid")
    )
