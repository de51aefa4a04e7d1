"""NCCL's own records in an export: its NVTX ranges, and the threads it starts for a call.

**Its calls.** NCCL marks its API calls with NVTX push/pop ranges in a domain of its own named
``NCCL`` (NCCL's ``src/include/nvtx.h``: ``struct nccl_domain``; each range is named by the API
function, ``__func__``: ``ncclAllReduce``, ``ncclGroupEnd``, ``ncclCommInitRankConfig``, ...). nsys
names a domain through its ``NvtxDomainCreate`` row. Where an export has no such row for NCCL's
domain (the nsys 2026.2 export of nsys-ai's ``mfu_2gpu_after``), the domain is NCCL's when NCCL's
own payload schemas are registered in it (``NVTX_PAYLOAD_SCHEMA_ENTRIES``: an entry named ``NCCL
communicator ID``, which every NCCL schema starts with) and the range is named like an NCCL API
function (``nccl`` and a capital letter). :func:`recognize` names such ranges' domain ``NCCL``;
nothing else is renamed, and a range of that domain with another name keeps an unknown domain.

**Its threads.** NCCL does a communicator's initialization on a thread it starts for the call:
``ncclCommInitRankConfig`` enqueues ``ncclCommInitRankFunc`` as an async job and its
``ncclGroupEndInternal`` starts one thread per job (``pthread_create(..., ncclAsyncJobMain, ...)``)
and joins it before the call returns (``src/group.cc``). NCCL's device allocations during
initialization (``ncclCudaCallocAsync``: ``cuMemCreate``/``cuMemMap``/``cuMemSetAccess``, or
``cudaMalloc`` without cuMem) are made there, not on the calling thread. The trace does not record
who started a thread; what it records is each thread's CUDA API calls. :func:`helper_threads` reads,
for every thread of a process with NCCL calls, the first and last of its CUDA API records, and
calls a thread an NCCL call's *helper thread* when every one of its CUDA API records lies inside
that call (on another thread of the same process); its calls are then read (one query) to be
nested in that call. A thread of the application that made CUDA calls only while an NCCL call ran
would be taken for NCCL's: the findings say "on a thread whose every CUDA API call lies inside it".
Both queries run only for an export with NCCL calls.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import polars as pl

from nsysaudit.core.ids import global_pid, thread_ids_of
from nsysaudit.core.shapes import Schema
from nsysaudit.read.scan import CALL_SCHEMA
from nsysaudit.read.source import ExportFile, Table, quote

NCCL = "NCCL"
# What every NCCL payload schema holds first (NVTX_PAYLOAD_SCHEMA_ENTRIES.name, NCCL's nvtx_payload_schemas.h).
COMMUNICATOR_ENTRY = "NCCL communicator ID"
# NCCL's API functions, as NCCL names its ranges (__func__): ncclAllReduce, ncclCommInitRankConfig, ...
API_NAME = re.compile(r"^nccl[A-Z][A-Za-z0-9]*$")
# The calls that make a communicator (NCCL runs their work on a thread of its own).
COMMUNICATOR_CALLS = re.compile(r"^ncclComm(InitRank(Config|Scalable)?|InitAll|Split|Shrink|Grow)$")

HELPER_THREAD_SCHEMA: Schema = {
    "gtid": pl.Int64,  # the helper thread
    "lib_id": pl.Int64,  # the NCCL call it lies in (the innermost, where several do)
    "first_ns": pl.Int64,  # its first CUDA API record's start
    "last_ns": pl.Int64,  # its last CUDA API record's end
    "rows": pl.Int64,  # its CUDA API records
}
# A helper thread's CUDA API rows, with the NCCL call they lie in.
HELPER_CALL_SCHEMA: Schema = {**CALL_SCHEMA, "lib_id": pl.Int64}
MAX_PROCESS_RANGES = 500  # SQLite allows 32,766 parameters a statement
_SPAN_SCHEMA: Schema = {"gtid": pl.Int64, "first_ns": pl.Int64, "last_ns": pl.Int64, "rows": pl.Int64}
_ROW_SCHEMA: Schema = {
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "correlation_id": pl.Int64,
    "name_id": pl.Int64,
    "return_code": pl.Int64,
}


class FrameBuilder(Protocol):
    """The strict frame builder of :mod:`nsysaudit.read.trace` (its ``frame``), with query parameters."""

    def __call__(
        self, conn: sqlite3.Connection, sql: str, schema: Schema, params: Sequence[int | str] = (), *,
        mismatched: Counter[str] | None = None, source: str = "",
    ) -> pl.DataFrame: ...


def is_api_name(text: str | None) -> bool:
    """Whether ``text`` is named like an NCCL API function (``ncclAllReduce``; not ``nccl:all_reduce``)."""
    return text is not None and API_NAME.match(text) is not None


def is_communicator_call(api: str | None) -> bool:
    """Whether ``api`` makes a communicator (``ncclCommInitRank*``, ``ncclCommInitAll``, ``ncclCommSplit`` ...)."""
    return api is not None and COMMUNICATOR_CALLS.match(api) is not None


def schema_domains(export: ExportFile) -> list[int]:
    """The NVTX domain ids in which NCCL's payload schemas are registered (an entry named
    :data:`COMMUNICATOR_ENTRY`); none where the export has no payload schema table."""
    entries = export.table("NVTX_PAYLOAD_SCHEMA_ENTRIES")
    if entries is None or not entries.has("domainId", "name"):
        return []
    rows = export.conn.execute(
        f"SELECT DISTINCT domainId FROM {quote(entries.name)} WHERE name = ?", (COMMUNICATOR_ENTRY,)
    ).fetchall()
    return sorted(int(d) for (d,) in rows if type(d) is int)


def recognize(ranges: pl.DataFrame, domains: list[int]) -> pl.DataFrame:
    """``ranges`` (NVTX ranges with ``domain_id`` and ``domain``, the name nsys wrote) with ``domain``
    ``NCCL`` where nsys wrote no name, the domain is one of ``domains`` (:func:`schema_domains`) and
    the range is named like an NCCL API function."""
    if not domains or ranges.height == 0:
        return ranges
    nameless = pl.col("domain").is_null() & pl.col("domain_id").is_in(domains) & (pl.col("domain_id") != 0)
    named = pl.col("text").str.contains(API_NAME.pattern).fill_null(False)
    nccl = pl.when(nameless & named).then(pl.lit(NCCL)).otherwise(pl.col("domain"))
    return ranges.with_columns(nccl.alias("domain"))


@dataclass(frozen=True)
class NcclEvidence:
    """What the export says about NCCL (see the module docstring).

    ``named``: processes (global pid) with an NVTX domain named ``NCCL``; ``by_schemas``: (global pid,
    domain id) of NCCL domains recognised by their payload schemas and API names; ``calls``: NCCL
    ranges; ``helper_threads`` (:data:`HELPER_THREAD_SCHEMA`) and ``helper_calls`` (their CUDA API
    rows, ``CALL_SCHEMA`` with ``lib_id``); ``nvtx_disabled``: the launched command's environment
    sets ``NCCL_NVTX_DISABLE`` to a value other than 0 (NCCL then writes no range).
    """

    named: tuple[int, ...] = ()
    by_schemas: tuple[tuple[int, int], ...] = ()
    calls: int = 0
    helper_threads: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=HELPER_THREAD_SCHEMA))
    helper_calls: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=HELPER_CALL_SCHEMA))
    nvtx_disabled: str | None = None

    @property
    def seen(self) -> bool:
        """Whether the export shows NCCL at all (its domain, its ranges, or its NVTX switched off)."""
        return bool(self.named or self.by_schemas or self.calls or self.nvtx_disabled is not None)


def domains_of(ranges: pl.DataFrame, recognized: pl.DataFrame) -> tuple[tuple[int, ...], tuple[tuple[int, int], ...]]:
    """``(named, by_schemas)`` of :class:`NcclEvidence` from the ranges as nsys named them (``ranges``)
    and after :func:`recognize` (``recognized``)."""
    gpid = global_pid(pl.col("gtid")).alias("gpid")
    named = ranges.filter(pl.col("domain") == NCCL).select(gpid).drop_nulls().unique().sort("gpid")
    was = ranges.select(pl.col("domain").is_null().alias("_was_null"))
    schemas = (
        pl.concat([recognized, was], how="horizontal")
        .filter(pl.col("_was_null") & (pl.col("domain") == NCCL))
        .select(gpid, "domain_id")
        .drop_nulls()
        .unique()
        .sort("gpid", "domain_id")
    )
    return tuple(int(g) for g in named["gpid"]), tuple((int(g), int(d)) for g, d in schemas.iter_rows())


def helper_threads(
    export: ExportFile, frame: FrameBuilder, runtime: Table, strings: Table, calls: pl.DataFrame, typed: Counter[str]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The helper threads of the NCCL calls among ``calls`` (library calls: ``lib_id, library, gtid,
    start_ns, end_ns``) and their CUDA API rows (``gtid, start_ns, end_ns, correlation_id, name_id,
    api, return_code, lib_id``). Two queries over the CUDA API table, only when there are NCCL calls:
    each thread's first and last record (threads of the NCCL calls' processes), then every row of
    the helper threads."""
    nccl = calls.filter(
        (pl.col("library") == NCCL) & pl.col("gtid").is_not_null() & pl.col("start_ns").is_not_null()
        & pl.col("end_ns").is_not_null() & (pl.col("end_ns") >= pl.col("start_ns"))
    ).with_columns(global_pid(pl.col("gtid")).alias("gpid"))
    empty = pl.DataFrame(schema=HELPER_THREAD_SCHEMA), pl.DataFrame(schema=HELPER_CALL_SCHEMA)
    if nccl.height == 0:
        return empty
    gpids = sorted(int(g) for g in nccl["gpid"].unique())
    # Each process's threads are one range of globalTid: a plain comparison per row, no JSON; past
    # MAX_PROCESS_RANGES processes every thread is read and the processes are picked below.
    few = len(gpids) <= MAX_PROCESS_RANGES
    within = " OR ".join("(r.globalTid >= ? AND r.globalTid < ?)" for _ in gpids) if few else "1"
    spans = frame(
        export.conn,
        f"""SELECT r.globalTid, min(r.start), max(r."end"), count(*) FROM {quote(runtime.name)} AS r
            WHERE {within} GROUP BY r.globalTid""",
        _SPAN_SCHEMA, [bound for g in gpids for bound in thread_ids_of(g)] if few else [],
        mismatched=typed, source=runtime.name,
    )
    spans = spans.filter(
        pl.col("gtid").is_not_null() & pl.col("first_ns").is_not_null() & pl.col("last_ns").is_not_null()
    )
    inside = (
        spans.with_columns(global_pid(pl.col("gtid")).alias("gpid"))
        .join(nccl.select("lib_id", pl.col("gtid").alias("caller"), "gpid", "start_ns", "end_ns"), on="gpid")
        .filter((pl.col("gtid") != pl.col("caller")) & (pl.col("first_ns") >= pl.col("start_ns"))
                & (pl.col("last_ns") <= pl.col("end_ns")))
        # The innermost NCCL call holding the thread (NCCL calls on one thread nest).
        .sort("gtid", pl.col("end_ns") - pl.col("start_ns"), "lib_id")
        .group_by("gtid", maintain_order=True)
        .first()
    )
    threads = inside.select(list(HELPER_THREAD_SCHEMA)).sort("lib_id", "gtid")
    if threads.height == 0:
        return empty
    rows = frame(
        export.conn,
        f"""SELECT globalTid, start, "end", correlationId, nameId, returnValue FROM {quote(runtime.name)}
            WHERE globalTid IN (SELECT value FROM json_each(?))""",
        _ROW_SCHEMA, (json.dumps(threads["gtid"].to_list()),), mismatched=typed, source=runtime.name,
    )
    ids = sorted(int(i) for i in rows["name_id"].drop_nulls().unique())
    names = frame(
        export.conn, f"SELECT id, value FROM {quote(strings.name)} WHERE id IN (SELECT value FROM json_each(?))",
        {"name_id": pl.Int64, "api": pl.String}, (json.dumps(ids),), mismatched=typed, source=strings.name,
    )
    helper_calls = (
        rows.join(names, on="name_id", how="left")
        .join(threads.select("gtid", "lib_id"), on="gtid")
        .select(list(HELPER_CALL_SCHEMA))
        .sort("lib_id", "start_ns", "correlation_id", nulls_last=True)
    )
    return threads, helper_calls

