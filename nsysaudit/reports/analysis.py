"""The single-arm analysis result: typed, with its polars frames and the JSON contract.

``AnalysisResult.to_dict()`` is the contract CI jobs and notebooks rely on. Keys are only ever
added, never renamed (see README "JSON contract").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import polars as pl

from nsysaudit.alignment import Alignment
from nsysaudit.codes import display_name, return_name

Verdict = Literal["failure_found", "inconclusive", "no_failure"]
InputKind = Literal["sqlite", "nsys-rep"]

# Capture settings (META_DATA_CAPTURE CAPTURE_EVENT_TYPE values) that show library API tracing.
LIBRARY_CAPTURE_TYPES = frozenset({"CuBLAS", "CuDNN", "cuBLAS", "cuDNN"})


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


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts()


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
                }
                for r in _rows(nonzero.sort(["api", "return_code"], nulls_last=True))
            ],
        }

    def _call(self, r: dict[str, Any]) -> dict[str, Any]:
        api = r["api"]
        return {
            "api": api,
            "display_api": display_name(api) if api is not None else None,
            "return_code": r["return_code"],
            "return_name": return_name(api, r["return_code"]) if api is not None else None,
            "correlation_id": r["correlation_id"],
            "start_ns": r["start_ns"],
            "end_ns": r["end_ns"],
            "bytes": r["bytes"],
        }

    @property
    def library_calls(self) -> list[dict[str, Any]]:
        pairs = self.frames["pairs"]
        by_lib: dict[int, dict[str, list[dict[str, Any]]]] = {}
        for r in _rows(pairs):
            slot = by_lib.setdefault(r["lib_id"], {"nested": [], "straddling": []})
            slot[r["relation"]].append(self._call(r))
        out = []
        for r in _rows(self.frames["library_calls"]):
            slot = by_lib.get(r["lib_id"], {"nested": [], "straddling": []})
            children = slot["nested"]
            known = [c["bytes"] for c in children if c["bytes"] is not None]
            out.append(
                {
                    "lib_id": r["lib_id"],
                    "api": r["api"],
                    "display_api": display_name(r["api"]) if r["api"] is not None else None,
                    "library": r["library"],
                    "source": r["source"],
                    "pid": r["pid"],
                    "tid": r["tid"],
                    "global_tid": r["gtid"],
                    "thread_name": r["thread_name"],
                    "start_ns": r["start_ns"],
                    "end_ns": r["end_ns"],
                    "duration_ns": (r["end_ns"] - r["start_ns"]) if r["end_ns"] is not None else None,
                    "coverage": r["coverage"],
                    "censored_reason": r["censored_reason"],
                    "cuda_api_first_ns": r["api_first_ns"],
                    "cuda_api_last_ns": r["api_last_ns"],
                    "children": children,
                    "straddling": slot["straddling"],
                    "allocated_bytes": sum(known) if known else 0,
                    "failed_children": sum(1 for c in children if c["return_code"] != 0),
                }
            )
            if self.alignment is not None:
                out[-1]["telemetry"] = self.alignment.position(r["pid"], r["start_ns"], r["end_ns"])
        return out

    @property
    def findings(self) -> list[dict[str, Any]]:
        out = []
        for r in _rows(self.frames["findings"]):
            api = r["api"]
            out.append(
                {
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
                    "requested_bytes": r["bytes"],
                    "enclosing": {
                        "lib_id": r["lib_id"],
                        "api": r["lib_api"],
                        "library": r["lib_library"],
                        "source": r["lib_source"],
                        "start_ns": r["lib_start_ns"],
                        "end_ns": r["lib_end_ns"],
                        "coverage": r["lib_coverage"],
                    },
                    "enclosing_chain": r["enclosing_chain"],
                }
            )
            if self.alignment is not None:
                out[-1]["telemetry"] = self.alignment.position(r["pid"], r["start_ns"], r["end_ns"])
        return out

    @property
    def coverage(self) -> dict[str, Any]:
        censored = [
            {
                "lib_id": c["lib_id"],
                "api": c["api"],
                "pid": c["pid"],
                "tid": c["tid"],
                "thread_name": c["thread_name"],
                "start_ns": c["start_ns"],
                "end_ns": c["end_ns"],
                "reason": c["censored_reason"],
                "cuda_api_first_ns": c["cuda_api_first_ns"],
                "cuda_api_last_ns": c["cuda_api_last_ns"],
            }
            for c in self.library_calls
            if c["coverage"] == "censored"
        ]
        return {"cuda_api_trace": self.cuda_api_trace, "by_source": self.coverage_sources, "censored": censored}

    def to_dict(self) -> dict[str, Any]:
        """The JSON document ``nsysaudit analyze --json`` prints."""
        out: dict[str, Any] = {
            "tool": {"name": "nsysaudit", "version": _version()},
            "input": self.input.to_dict(),
            "census": self.census,
            "library_calls": self.library_calls,
            "findings": self.findings,
            "coverage": self.coverage,
            "processes": self.processes,
            "verdict": self.verdict,
            "verdict_reasons": self.verdict_reasons,
            "warnings": self.warnings,
        }
        if self.alignment is not None:
            out["alignment"] = self.alignment.to_dict()
            out["telemetry"] = self.alignment.telemetry_summary()
        out.update(self.extra)
        return out


def _version() -> str:
    from nsysaudit import __version__

    return __version__
