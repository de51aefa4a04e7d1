"""The single-arm analysis result: typed, with its polars frames and the JSON contract.

``AnalysisResult.to_dict()`` is the contract CI jobs and notebooks rely on. Keys are only ever
added, never renamed (see README "JSON contract").
"""

from __future__ import annotations

import io
import secrets
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Literal, cast

import polars as pl

from nsysaudit import canonical
from nsysaudit.analysis.alignment import Alignment
from nsysaudit.codes import display_name, is_allocation_api, is_out_of_memory, return_name
from nsysaudit.read.diagnostics import NO_CAPTURE, WARNING_SEVERITIES, Capture

Verdict = Literal["failure_found", "inconclusive", "no_failure"]
InputKind = Literal["sqlite", "nsys-rep"]


@dataclass(frozen=True)
class InputInfo:
    """What was analyzed: the file the user named and, for reports, the export made from it."""

    path: str
    sha256: str
    kind: InputKind
    size_bytes: int
    nsys_version: str | None
    schema_version: str | None
    tables: dict[str, str]
    session_start_utc_ns: int | None
    export_sha256: str | None = None
    export_cache_hit: bool | None = None
    exported_with: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "sha256": self.sha256,
            "kind": self.kind,
            "size_bytes": self.size_bytes,
            "nsys_version": self.nsys_version,
            "schema_version": self.schema_version,
            "tables": dict(sorted(self.tables.items())),
            "session_start_utc_ns": self.session_start_utc_ns,
        }
        if self.kind == "nsys-rep":
            out["export"] = {
                "sha256": self.export_sha256,
                "cache_hit": self.export_cache_hit,
                "exported_with": self.exported_with,
            }
        return out


INT64_MAX = (1 << 63) - 1


def duration_ns(start: str = "start_ns", end: str = "end_ns") -> pl.Expr:
    """``end - start`` computed without wrapping: null when it does not fit in 64 bits (a call
    spanning the whole int64 range), never a wrapped negative number."""
    wide = pl.col(end).cast(pl.Int128) - pl.col(start).cast(pl.Int128)
    return pl.when(wide <= INT64_MAX).then(wide).otherwise(None).cast(pl.Int64)


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts()


def _name_columns(keys: pl.DataFrame) -> pl.DataFrame:
    """``api, return_code, display_api, return_name, allocation`` for each distinct (api, return_code)."""
    rows = [
        (
            api,
            rc,
            display_name(api) if api is not None else None,
            return_name(api, rc) if api is not None and rc is not None else None,
            api is not None and is_allocation_api(api),
        )
        for api, rc in keys.select("api", "return_code").iter_rows()
    ]
    return pl.DataFrame(
        rows,
        schema={
            "api": pl.String,
            "return_code": pl.Int64,
            "display_api": pl.String,
            "return_name": pl.String,
            "allocation": pl.Boolean,
        },
        orient="row",
    )


@dataclass
class AnalysisResult:
    """One export's analysis. Frames (timestamps in the export's nanoseconds):

    - ``census``: ``api, return_code, count`` for every (api, non-zero return code) pair.
    - ``library_calls``: one row per library call with ``lib_id, api, library, source, gtid, pid,
      tid, thread_name, start_ns, end_ns, coverage, censored_reason, api_first_ns, api_last_ns``.
    - ``pairs``: ``lib_id, gtid, start_ns, end_ns, correlation_id, api, return_code, relation,
      bytes``: CUDA API calls nested in (or straddling) each library call.
    - ``findings``: failed allocation calls, one row per call, ``kind`` and the innermost
      enclosing library call's ``lib_id``.
    - ``api_span``, ``nvtx_ranges``: coverage material; ``api_rows``: the CUDA API rows read
      (non-zero returns and calls overlapping library calls).
    """

    input: InputInfo
    frames: dict[str, pl.DataFrame]
    cuda_api_calls: int
    cuda_api_trace: bool
    verdict: Verdict
    verdict_reasons: list[str]
    coverage_sources: list[dict[str, Any]]
    processes: list[dict[str, Any]]
    capture: dict[str, list[str]]
    warnings: list[dict[str, Any]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Set when telemetry was given (analyze(..., telemetry=...)): adds ``alignment``, ``telemetry``
    # and ``findings[].telemetry`` / ``library_calls[].telemetry`` to the JSON.
    alignment: Alignment | None = None
    capture_bounds: Capture = NO_CAPTURE
    library_sources: list[dict[str, Any]] = field(default_factory=list)
    telemetry_library_failures: list[dict[str, Any]] = field(default_factory=list)

    # --- derived views ---------------------------------------------------------------------------
    @property
    def census(self) -> dict[str, Any]:
        nonzero = self.frames["census"].filter(pl.col("return_code") != 0)
        return {
            "cuda_api_calls": self.cuda_api_calls,
            "nonzero_returns": int(nonzero["count"].sum()) if nonzero.height else 0,
            "by_return": [
                {
                    "api": r["api"],
                    "display_api": display_name(r["api"]) if r["api"] is not None else None,
                    "return_code": r["return_code"],
                    "return_name": return_name(r["api"], r["return_code"]) if r["api"] is not None else None,
                    "count": r["count"],
                    # failure | reports_earlier_error (cudaGetLastError) | not_ready_poll (a query's 600)
                    "classification": r.get("classification"),
                }
                for r in _rows(nonzero.sort(["api", "return_code"], nulls_last=True))
            ],
            "failed_calls": int(nonzero.filter(pl.col("classification") == "failure")["count"].sum())
            if "classification" in nonzero.columns
            else None,
        }

    @property
    def library_calls(self) -> list[dict[str, Any]]:
        return self.library_call_dicts(self.library_calls_frame())

    def library_call_dicts(self, frame: pl.DataFrame) -> list[dict[str, Any]]:
        """Rows of :meth:`library_calls_frame` (or a subset of it) as ``library_calls`` entries."""
        out = frame.to_dicts()
        if self.alignment is not None:
            for row in out:
                row["telemetry"] = self.alignment.position(row["pid"], row["start_ns"], row["end_ns"])
        return out

    def document(self, library_calls: list[dict[str, Any]]) -> dict[str, Any]:
        """``to_dict()`` with the given ``library_calls`` (a subset, for reports that select)."""
        return self._document(library_calls)

    def library_calls_frame(self) -> pl.DataFrame:
        """``library_calls`` as one polars frame (children and straddling as lists of structs).

        Built column-wise and converted once: large exports have 10^5+ library calls.
        """
        pairs = self.frames["pairs"]
        names = _name_columns(pairs.select("api", "return_code").unique())
        call = pl.struct(
            "api", "display_api", "return_code", "return_name", "correlation_id", "start_ns", "end_ns", "bytes"
        )  # children keep their documented fields; ``allocation`` only drives the size bookkeeping
        named = pairs.join(names, on=["api", "return_code"], how="left", nulls_equal=True).sort(
            ["lib_id", "start_ns", "correlation_id"], nulls_last=True
        )
        nested = (
            named.filter(pl.col("relation") == "nested")
            .group_by("lib_id", maintain_order=True)
            .agg(
                call.alias("children"),
                pl.col("bytes").sum().alias("allocated_bytes_traced"),
                (pl.col("allocation") & (pl.col("return_code") == 0) & pl.col("bytes").is_null())
                .sum()
                .cast(pl.Int64)
                .alias("allocations_size_unknown"),
                (pl.col("return_code") != 0).sum().cast(pl.Int64).alias("failed_children"),
            )
        )
        straddling = (
            named.filter(pl.col("relation") == "straddling")
            .group_by("lib_id", maintain_order=True)
            .agg(call.alias("straddling"))
        )
        libs = self.frames["library_calls"]
        if "children_complete" not in libs.columns:
            libs = libs.with_columns(pl.lit(True).alias("children_complete"))
        if "end_known" not in libs.columns:  # frames built before coverage knew the capture's stop
            libs = libs.with_columns(pl.col("end_ns").is_not_null().alias("end_known"))
        for name, dtype in (("censored_reasons", pl.List(pl.String)), ("coverage_evidence", pl.String)):
            if name not in libs.columns:
                libs = libs.with_columns(pl.lit(None, dtype=dtype).alias(name))
        lib_names = _name_columns(
            libs.select("api").unique().with_columns(pl.lit(0, dtype=pl.Int64).alias("return_code"))
        )
        table = (
            libs.join(lib_names.select("api", "display_api"), on="api", how="left", nulls_equal=True)
            .join(nested, on="lib_id", how="left")
            .join(straddling, on="lib_id", how="left")
            .sort("lib_id")
            .select(
                "lib_id",
                "api",
                "display_api",
                "library",
                "source",
                "pid",
                "tid",
                pl.col("gtid").alias("global_tid"),
                "thread_name",
                "start_ns",
                # The recorded end of a range open when the capture stopped is the stop: unknown.
                pl.when(pl.col("end_known")).then(pl.col("end_ns")).otherwise(None).alias("end_ns"),
                pl.col("end_ns").alias("recorded_end_ns"),
                "end_known",
                pl.when(pl.col("end_known")).then(duration_ns()).otherwise(None).alias("duration_ns"),
                "coverage",
                "censored_reason",
                "censored_reasons",
                "coverage_evidence",
                pl.col("api_first_ns").alias("cuda_api_first_ns"),
                pl.col("api_last_ns").alias("cuda_api_last_ns"),
                "children",
                "straddling",
                # Unknown (null), never a partial sum, when a pair limit (--max-pairs) left successful
                # children unlisted, a successful nested allocation's size is unknown (no memory
                # event, NULL bytes, a shared correlation id), or the trace does not cover the call.
                pl.when(
                    pl.col("children_complete")
                    & (pl.col("allocations_size_unknown").fill_null(0) == 0)
                    & (pl.col("coverage") == "complete")
                )
                .then(pl.col("allocated_bytes_traced").fill_null(0))
                .otherwise(None)
                .alias("allocated_bytes"),
                pl.col("allocated_bytes_traced").fill_null(0),
                pl.col("allocations_size_unknown").fill_null(0),
                pl.col("failed_children").fill_null(0),
                "children_complete",
            )
        )
        empty = pl.lit([], dtype=table.schema["children"])
        return table.with_columns(
            pl.col("children").fill_null(empty),
            pl.col("straddling").fill_null(pl.lit([], dtype=table.schema["straddling"])),
        )

    @property
    def findings(self) -> list[dict[str, Any]]:
        names = {r["gtid"]: r["thread_name"] for r in self.frames["thread_names"].to_dicts()}
        complete = bool(self.frames["library_calls"]["children_complete"].all()) if (
            "children_complete" in self.frames["library_calls"].columns
        ) else True
        out = []
        for r in _rows(self.frames["findings"]):
            api = r["api"]
            finding: dict[str, Any] = {
                "kind": r["kind"],
                "api": api,
                "display_api": display_name(api),
                "return_code": r["return_code"],
                "return_name": return_name(api, r["return_code"]),
                "correlation_id": r["correlation_id"],
                "pid": r["pid"],
                "tid": r["tid"],
                "global_tid": r["gtid"],
                "thread_name": r["thread_name"],
                "start_ns": r["start_ns"],
                "end_ns": r["end_ns"],
                # A failed allocation has no CUDA_GPU_MEMORY_USAGE_EVENTS row: its size is unknown.
                # Other calls request no memory (null).
                "requested_bytes": r["bytes"] if is_allocation_api(api) else None,
                "out_of_memory": bool(r.get("out_of_memory")),
                "enclosing": None,
                "enclosing_chain": r["enclosing_chain"] or [],
                "stream_capture": None,
            }
            if r["lib_id"] is not None:
                end_known = r.get("lib_end_known") is not False
                finding["enclosing"] = {
                    "lib_id": r["lib_id"],
                    "api": r["lib_api"],
                    "library": r["lib_library"],
                    "source": r["lib_source"],
                    "start_ns": r["lib_start_ns"],
                    "end_ns": r["lib_end_ns"] if end_known else None,
                    "recorded_end_ns": r["lib_end_ns"],
                    "end_known": end_known,
                    "coverage": r["lib_coverage"],
                }
                # The successful allocations nested in it before the failed call ("after 1,024 +
                # 131,072 B"); unknown when a pair limit left successful calls unlisted.
                each = list(r.get("allocated_before") or [])
                finding["enclosing"]["allocations_before"] = (
                    {
                        "count": len(each),
                        "bytes_each": each,
                        "bytes": sum(each) if all(b is not None for b in each) else None,
                    }
                    if complete
                    else None
                )
            capture = r.get("stream_capture")
            if capture is not None:
                g = capture["gtid"]
                finding["stream_capture"] = {
                    **capture,
                    "pid": (g >> 24) & 0xFFFFFF if g is not None else None,
                    "tid": g & 0xFFFFFF if g is not None else None,
                    "global_tid": g,
                    "thread_name": names.get(g),
                    "event_records_count": len(capture["event_records"]),
                }
                del finding["stream_capture"]["gtid"]
            if self.alignment is not None:
                finding["telemetry"] = self.alignment.position(r["pid"], r["start_ns"], r["end_ns"])
            out.append(finding)
        return out

    @property
    def failed_calls(self) -> list[dict[str, Any]]:
        """Failures no finding explains, grouped (see :func:`nsysaudit.analysis.failures.failed_calls`)."""
        out = []
        for r in _rows(self.frames.get("failed_calls", pl.DataFrame())):
            api, rc = r["api"], r["return_code"]
            out.append(
                {
                    "api": api,
                    "display_api": display_name(api) if api is not None else None,
                    "return_code": rc,
                    "return_name": return_name(api, rc) if api is not None and rc is not None else None,
                    "allocation": api is not None and is_allocation_api(api),
                    "out_of_memory": api is not None and is_out_of_memory(api, rc),
                    "pid": r["pid"],
                    "tid": r["tid"],
                    "global_tid": r["gtid"],
                    "thread_name": r["thread_name"],
                    "nvtx_range": r["nvtx_range"],
                    "nvtx_domain": r["nvtx_domain"],
                    "straddles_library_call": r["straddles_library_call"],
                    "library_call_unexamined": r["library_call_unexamined"],
                    "count": r["count"],
                    "first_ns": r["first_ns"],
                    "last_ns": r["last_ns"],
                    "example_correlation_ids": r["example_correlation_ids"],
                }
            )
        return out

    @property
    def coverage(self) -> dict[str, Any]:
        """Where the evidence stops: the capture's bounds, nsys's own warnings, censored library calls."""
        censored = []
        for c in _rows(self.frames["library_calls"].filter(pl.col("coverage") == "censored").sort("lib_id")):
            end_known = c.get("end_known") is not False
            censored.append(
                {
                    "lib_id": c["lib_id"],
                    "api": c["api"],
                    "pid": c["pid"],
                    "tid": c["tid"],
                    "thread_name": c["thread_name"],
                    "start_ns": c["start_ns"],
                    "end_ns": c["end_ns"] if end_known else None,
                    "recorded_end_ns": c["end_ns"],
                    "end_known": end_known,
                    "reason": c["censored_reason"],
                    "reasons": c.get("censored_reasons") or [c["censored_reason"]],
                    "cuda_api_first_ns": c["api_first_ns"],
                    "cuda_api_last_ns": c["api_last_ns"],
                }
            )
        diagnostics = self.frames.get("diagnostics")
        said = []
        if diagnostics is not None:
            for d in diagnostics.filter(pl.col("severity").is_in(list(WARNING_SEVERITIES))).to_dicts():
                gpid = d["gpid"]
                said.append(
                    {
                        "timestamp_ns": d["timestamp_ns"],
                        "severity": d["severity"],
                        "source": d["source"],
                        "text": d["text"],
                        "category": d["category"],
                        "library": d["library"],
                        "global_pid": gpid,
                        "pid": (gpid >> 24) & 0xFFFFFF if gpid is not None and gpid >= 0 else None,
                    }
                )
        return {
            "cuda_api_trace": self.cuda_api_trace,
            "by_source": self.coverage_sources,
            "censored": censored,
            "capture": self.capture_bounds.to_dict(),
            "nsys_diagnostics": said,
            "library_sources": self.library_sources,
        }

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``nsysaudit analyze --json`` prints."""
        return self._document(self.library_calls)

    def _document(self, library_calls: Any) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tool": {"name": "nsysaudit", "version": _version()},
            "input": self.input.to_dict(),
            "census": self.census,
            "library_calls": library_calls,
            "findings": self.findings,
            "failed_calls": self.failed_calls,
            "coverage": self.coverage,
            "processes": self.processes,
            "verdict": self.verdict,
            "verdict_reasons": self.verdict_reasons,
            "warnings": self.warnings,
        }
        if self.alignment is not None:
            out["alignment"] = self.alignment.to_dict()
            out["telemetry"] = {
                **self.alignment.telemetry_summary(),
                "library_failures": self.telemetry_library_failures,
            }
        out.update(self.extra)
        return out

    def to_json(self) -> bytes:
        """``canonical.dumps(self.to_dict())``, byte for byte, built faster (see :meth:`write_json`)."""
        buffer = io.BytesIO()
        self.write_json(buffer)
        return buffer.getvalue()

    def write_json(self, stream: BinaryIO) -> None:
        """Write ``canonical.dumps(self.to_dict())`` to ``stream``, byte for byte, without building it.

        Without telemetry, the library calls (the bulk of a large export's document) are
        serialized by polars straight from their frame into ``stream``, never turned into Python
        objects, between the canonical bytes of the rest of the document: several times faster
        and a fraction of the memory on 10^5+ library calls. tests/test_canonical.py checks that
        the bytes are the same.
        """
        if self.alignment is not None:  # per-call telemetry positions are computed in Python
            stream.write(canonical.dumps(self.to_dict()))
            return
        placeholder = "nsysaudit-library-calls-" + secrets.token_hex(16)
        text = canonical.dumps(self._document(placeholder))
        marker = b'"library_calls":"' + placeholder.encode() + b'"'
        if text.count(marker) != 1:  # cannot happen (the nonce is fresh); never splice blindly
            stream.write(canonical.dumps(self.to_dict()))
            return
        head, tail = text.split(marker)
        stream.write(head + b'"library_calls":')
        frame = _key_sorted(self.library_calls_frame())
        if frame.height:
            frame.write_json(cast(io.IOBase, stream))  # polars writes into any binary stream
        else:
            stream.write(b"[]")
        stream.write(tail)


def _key_sorted(frame: pl.DataFrame) -> pl.DataFrame:
    """Columns, and the fields of list-of-struct columns, in sorted order (canonical JSON keys)."""
    exprs: list[pl.Expr] = []
    for name in sorted(frame.columns):
        dtype = frame.schema[name]
        if isinstance(dtype, pl.List) and isinstance(dtype.inner, pl.Struct):
            fields = sorted(f.name for f in dtype.inner.fields)
            exprs.append(pl.col(name).list.eval(pl.struct([pl.element().struct.field(f) for f in fields])))
        else:
            exprs.append(pl.col(name))
    return frame.select(exprs)


def _version() -> str:
    from nsysaudit import __version__

    return __version__
