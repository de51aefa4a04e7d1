"""After an out-of-memory failure: did its process go on allocating? One query, read only when needed.

The streaming scan keeps the failed CUDA API calls and the calls inside library calls; a successful
``cudaMalloc`` elsewhere is not kept. Whether a process recovered from an out-of-memory failure that
no library call encloses (``nsysaudit.analysis.recovery``) needs the last successful allocation call
of each such process: :func:`last_successful_allocations` reads it, one query over the CUDA API
table, only for an export with such a failure.
"""

from __future__ import annotations

import json
from collections import Counter

import polars as pl

from nsysaudit.core.codes import is_allocation_api, is_allocation_failure, is_out_of_memory
from nsysaudit.core.ids import global_pid, gpid_sql
from nsysaudit.core.shapes import Schema
from nsysaudit.read.nccl import FrameBuilder
from nsysaudit.read.source import ExportFile, Table, quote

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


def last_successful_allocations(
    export: ExportFile, frame: FrameBuilder, runtime: Table, strings: Table, failed: pl.DataFrame, typed: Counter[str]
) -> pl.DataFrame:
    """Per process with an out-of-memory allocation failure among ``failed`` (CUDA API rows), the
    start of its last successful allocation call after the first such failure and how many it made
    after it (:data:`LAST_ALLOCATION_SCHEMA`; a process that made none has no row). Empty, and nothing
    read, when ``failed`` holds no such failure."""
    oom = out_of_memory_allocations(failed.filter(pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null()))
    if oom.height == 0:
        return pl.DataFrame(schema=LAST_ALLOCATION_SCHEMA)
    gpids = sorted(int(g) for g in oom.select(global_pid(pl.col("gtid")))["gtid"].unique())
    rows = export.conn.execute(f"SELECT id, value FROM {quote(strings.name)} WHERE value LIKE 'cu%'").fetchall()
    ids = sorted(int(i) for i, v in rows if type(i) is int and isinstance(v, str) and is_allocation_api(v))
    if not ids:
        return pl.DataFrame(schema=LAST_ALLOCATION_SCHEMA)
    found = frame(
        export.conn,
        f"""SELECT {gpid_sql("globalTid")} AS gpid, max(start), count(*) FROM {quote(runtime.name)}
            WHERE returnValue = 0 AND nameId IN (SELECT value FROM json_each(?)) AND globalTid IS NOT NULL
            AND start > ? GROUP BY gpid""",
        LAST_ALLOCATION_SCHEMA,
        (json.dumps(ids), int(oom["start_ns"].min())),  # type: ignore[arg-type]
        mismatched=typed,
        source=runtime.name,
    )
    return found.filter(pl.col("gpid").is_in(gpids)).sort("gpid")
