"""Findings: one row per failed call a library call or a stream capture explains.

Frames in, frames out. ``nested_findings`` turns the failed calls among the (library call, CUDA call)
pairs into findings with their innermost enclosing call; ``wait_findings`` the failed waits on
captured events (see :mod:`nsysaudit.analysis.failures`). Both have :data:`FINDING_SCHEMA`.
"""

from __future__ import annotations

from typing import Literal, get_args

import polars as pl

from nsysaudit.analysis import failures, joins
from nsysaudit.analysis.integrity import damaged_times
from nsysaudit.core.codes import is_allocation_api, is_out_of_memory
from nsysaudit.core.shapes import Schema
from nsysaudit.read.trace import Trace

# What a finding is (docs/evidence.md): a failed allocation or other call wholly inside a library call
# on its thread, an allocation failing across a library call's edge, a failed wait on an event recorded
# inside a stream capture.
FindingKind = Literal[
    "nested_alloc_failure",
    "nested_call_failure",
    "captured_event_wait_failure",
    "straddling_alloc_failure",
]
FINDING_KINDS: tuple[FindingKind, ...] = get_args(FindingKind)

_CHAIN = pl.List(pl.Struct({"lib_id": pl.Int64, "api": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64}))


_CALL_STRUCT = pl.Struct(
    {"api": pl.String, "start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64}
)


STREAM_CAPTURE = pl.Struct(
    {
        "gtid": pl.Int64,
        "begin": _CALL_STRUCT,
        "end": _CALL_STRUCT,
        "event_records": pl.List(_CALL_STRUCT),
        "regions_with_records_before": pl.Int64,
        "ns_from_capture_end": pl.Int64,
    }
)


FINDING_SCHEMA: Schema = {
    "kind": pl.String,
    "api": pl.String,
    "return_code": pl.Int64,
    "correlation_id": pl.Int64,
    "gtid": pl.Int64,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "thread_name": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "bytes": pl.Int64,
    "out_of_memory": pl.Boolean,
    "lib_id": pl.Int64,
    "lib_api": pl.String,
    "lib_library": pl.String,
    "lib_source": pl.String,
    "lib_start_ns": pl.Int64,
    "lib_end_ns": pl.Int64,
    "lib_end_known": pl.Boolean,
    "lib_coverage": pl.String,
    "lib_gtid": pl.Int64,  # the enclosing call's thread: another than ``gtid`` for an NCCL helper thread's call
    "enclosing_chain": _CHAIN,
    "allocated_before": pl.List(pl.Int64),
    # The bytes of the mappings (cuMemSetAccess: nsys writes a mapped piece's allocation event there,
    # not at its cuMemCreate) nested in the enclosing call before the failed call.
    "mapped_before": pl.List(pl.Int64),
    "stream_capture": STREAM_CAPTURE,
}


def nested_findings(pairs: pl.DataFrame, libs: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """One row per failed call nested in (or, for allocations, straddling) a library call.

    A call nested in several library calls (cublasLtCreate inside cublasCreate_v2) is one finding;
    ``enclosing_chain`` lists every enclosing call, innermost first. Kinds: see
    :func:`nsysaudit.analysis.failures.nested_failures`.
    """
    failed = failures.nested_failures(pairs)
    if failed.height == 0:
        return pl.DataFrame(schema=FINDING_SCHEMA)
    lib_cols = libs.select(
        "lib_id",
        pl.col("api").alias("lib_api"),
        pl.col("library").alias("lib_library"),
        pl.col("source").alias("lib_source"),
        pl.col("start_ns").alias("lib_start_ns"),
        pl.col("end_ns").alias("lib_end_ns"),
        pl.col("end_known").alias("lib_end_known"),
        pl.col("coverage").alias("lib_coverage"),
        pl.col("gtid").alias("lib_gtid"),
    )
    # Int128: a range spanning the whole int64 range must sort as the longest, not wrap negative.
    enriched = failed.join(lib_cols, on="lib_id", how="left").with_columns(
        (pl.col("lib_end_ns").cast(pl.Int128) - pl.col("lib_start_ns").cast(pl.Int128)).alias("lib_duration")
    )
    # Nested relations first, then innermost (shortest) enclosing call first.
    enriched = enriched.with_columns((pl.col("relation") != "nested").alias("not_nested")).sort(
        ["gtid", "start_ns", "correlation_id", "not_nested", "lib_duration", "lib_id"], nulls_last=True
    )
    key = ["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"]
    chain = enriched.group_by(key, maintain_order=True).agg(
        pl.struct(
            pl.col("lib_id"),
            pl.col("lib_api").alias("api"),
            pl.col("lib_start_ns").alias("start_ns"),
            pl.col("lib_end_ns").alias("end_ns"),
        )
        .filter(pl.col("relation") == "nested")
        .alias("enclosing_chain")
    )
    first = enriched.group_by(key, maintain_order=True).first()
    out = joins.with_ids(first.join(chain, on=key, how="left", nulls_equal=True), names)
    out = out.with_columns(pl.lit(None, dtype=STREAM_CAPTURE).alias("stream_capture"))
    return allocated_before(out, pairs).select(list(FINDING_SCHEMA)).sort(
        ["start_ns", "gtid", "correlation_id"], nulls_last=True
    )


def allocated_before(findings: pl.DataFrame, pairs: pl.DataFrame) -> pl.DataFrame:
    """Add ``allocated_before``: the bytes of each successful allocation nested in the finding's
    enclosing call that started before the failed call (null where the size is unknown), and
    ``mapped_before``: those of each mapping (a successful call with an allocation event that is not an
    allocation call: ``cuMemSetAccess``, where nsys writes a mapped piece's event)."""
    succeeded = pairs.filter((pl.col("relation") == "nested") & (pl.col("return_code") == 0))
    # Each distinct name judged once in Python, then matched in polars (map_elements called back into
    # Python for every row, and its first call inspects the function's bytecode: ~4 ms).
    names = [api for api in succeeded.get_column("api").drop_nulls().unique().to_list() if is_allocation_api(api)]
    allocation = pl.col("api").is_in(names).fill_null(False)
    keyed = findings.with_row_index("_f")

    def before(calls: pl.DataFrame, name: str) -> pl.DataFrame:
        return (
            keyed.select("_f", "lib_id", "start_ns")
            .join(calls.select("lib_id", pl.col("start_ns").alias("a_start"), pl.col("correlation_id").alias("a_corr"),
                               "bytes"), on="lib_id", how="inner")
            .filter(pl.col("a_start") < pl.col("start_ns"))
            .sort("_f", "a_start", "a_corr")
            .group_by("_f", maintain_order=True)
            .agg(pl.col("bytes").alias(name))
        )

    # A mapping is a successful call other than an allocation call that has an allocation event.
    mapped = succeeded.filter(~allocation & pl.col("bytes").is_not_null())
    empty = pl.lit([], dtype=pl.List(pl.Int64))
    return (
        keyed.join(before(succeeded.filter(allocation), "allocated_before"), on="_f", how="left")
        .join(before(mapped, "mapped_before"), on="_f", how="left")
        .with_columns(pl.col("allocated_before").fill_null(empty), pl.col("mapped_before").fill_null(empty))
        .drop("_f")
    )


def wait_findings(
    trace: Trace, cuda_api_rows: pl.DataFrame, event_records: pl.DataFrame | None, names: pl.DataFrame
) -> pl.DataFrame:
    """``captured_event_wait_failure`` findings (see :func:`nsysaudit.analysis.failures.captured_event_waits`)."""
    # Calls whose times cannot be true make no capture region and no finding (integrity says what
    # that leaves undecided).
    sound = ~damaged_times(trace.capture_bounds)
    regions = failures.capture_regions(trace.capture_calls.filter(sound))
    records = failures.records_in_regions(
        event_records if event_records is not None else pl.DataFrame(schema=cuda_api_rows.schema), regions
    )
    found = failures.captured_event_waits(failures.failed_waits(cuda_api_rows.filter(sound)), regions, records)
    if not found:
        return pl.DataFrame(schema=FINDING_SCHEMA)

    rows: list[dict[str, object]] = [  # FINDING_SCHEMA's columns but pid, tid, thread_name
        {
            "kind": "captured_event_wait_failure",
            "api": f.api,
            "return_code": f.return_code,
            "correlation_id": f.correlation_id,
            "gtid": f.gtid,
            "start_ns": f.start_ns,
            "end_ns": f.end_ns,
            "out_of_memory": is_out_of_memory(f.api, f.return_code),
            "enclosing_chain": [],
            "allocated_before": [],
            "mapped_before": [],
            "stream_capture": {
                "gtid": f.region_gtid,
                "begin": f.begin,
                "end": f.end,
                "event_records": f.records,
                "regions_with_records_before": f.regions_before,
                "ns_from_capture_end": f.start_ns - f.region_end_ns,
            },
        }
        for f in found
    ]
    named_later = ("pid", "tid", "thread_name")
    frame = pl.DataFrame(rows, schema={k: v for k, v in FINDING_SCHEMA.items() if k not in named_later})
    return joins.with_ids(frame, names).select(list(FINDING_SCHEMA))
