"""The document's ``alignment`` and ``telemetry`` objects, shaped from an
:class:`~nsysaudit.analysis.alignment.Alignment`: the analysis returns facts, the documents decide
their JSON shape here (issue 35).

Their per-line lists (one entry per telemetry line: 10^6 for a file of 10^6 lines) can stay the rows of
a frame until they are written (:class:`LineList`, ``lazy=True``), so that a large telemetry file is
written without building its entries (:mod:`nsysaudit.render.json`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import orjson
import polars as pl

from nsysaudit.analysis.alignment import (
    Agreement,
    AgreementDiff,
    Alignment,
    AlignmentCheck,
    AlignmentSection,
    AnchorMatch,
    AnchorMethod,
    AnchorPair,
    Anchors,
    Check,
    EventLine,
    TelemetrySummary,
    TimelineLine,
    UtcAlignment,
    UtcMethod,
)
from nsysaudit.read.telemetry import BadLine, TelemetryBadLine
from nsysaudit.words import say


def anchor_pair(p: AnchorMatch) -> AnchorPair:
    """An ``alignment.anchors.pairs`` entry."""
    return {
        "line": p.line,
        "event": p.event,
        "nvtx": p.nvtx,
        "edge": p.edge,
        "domain": p.domain,
        "pid": p.pid,
        "tid": p.tid,
        "telemetry_tid": p.telemetry_tid,
        "same_thread": p.same_thread,
        "rule": p.rule,
        "clock_ns": p.clock_ns,
        "edge_ns": p.edge_ns,
        "offset_ns": p.offset_ns,
        "residual_ns": p.residual_ns,
        "utc_residual_ns": p.utc_residual_ns,
    }


def utc_section(utc: UtcMethod) -> UtcAlignment:
    """The ``alignment.utc`` object."""
    return {
        "computed": utc.computed,
        "clock_field": utc.clock_field,
        "session_start_utc_ns": utc.session_start_utc_ns,
        "offset_ns": utc.offset_ns,
        "reason": None if utc.reason is None else say(utc.reason),
    }


def events_without_anchor(anchors: AnchorMethod) -> LineList:
    """``events_without_anchor``: ``{"line", "event"}`` of each line that is not an anchor."""
    return LineList(
        anchors.without_anchor,
        lambda frame: pl.concat_str(
            [pl.lit('{"event":'), _event_json(frame), pl.lit(',"line":'), _int_json("line"), pl.lit("}")]
        ),
        event_lines,
    )


def anchors_section(anchors: AnchorMethod, events_without_anchor: list[EventLine]) -> Anchors:
    """The ``alignment.anchors`` object with the given ``events_without_anchor``."""
    return {
        "computed": anchors.computed,
        "rule": anchors.rule,
        "clock": anchors.clock,
        "clock_field": anchors.clock_field,
        "offset_ns": anchors.offset_ns,
        "pairs": [anchor_pair(p) for p in anchors.pairs],
        "max_abs_residual_ns": anchors.max_abs_residual_ns,
        "skipped": list(anchors.skipped),
        "events_without_anchor": events_without_anchor,
        "reason": None if anchors.reason is None else say(anchors.reason),
    }


def check_entry(check: Check) -> AlignmentCheck:
    """An ``alignment.checks`` entry."""
    return {"check": check.name, "passed": check.passed, "detail": say(check.detail)}


@overload
def alignment_section(alignment: Alignment, *, lazy: Literal[False] = False) -> AlignmentSection: ...


@overload
def alignment_section(alignment: Alignment, *, lazy: Literal[True]) -> dict[str, object]: ...


def alignment_section(alignment: Alignment, *, lazy: bool = False) -> AlignmentSection | dict[str, object]:
    """The top-level ``alignment`` object of the JSON report; ``lazy``: its per-line lists
    (``agreement.diffs_ns``, ``anchors.events_without_anchor``) left :class:`LineList` (an
    object of that shape, not yet an :class:`AlignmentSection`)."""
    if not lazy:
        diffs = agreement_diffs(alignment.diffs) if alignment.diffs is not None else []
        return _section(alignment, diffs, event_lines(alignment.anchors.without_anchor))
    section = _section(alignment, [], [])
    out: dict[str, object] = {**section}
    out["anchors"] = {**section["anchors"], "events_without_anchor": events_without_anchor(alignment.anchors)}
    agreement = section["agreement"]
    if agreement is not None and alignment.diffs is not None:
        diffs_list = LineList(
            alignment.diffs,
            lambda frame: pl.concat_str([
                pl.lit('{"event":'), _event_json(frame), pl.lit(',"line":'), _int_json("line"),
                pl.lit(',"utc_minus_anchor_ns":'), _int_json("utc_minus_anchor_ns"), pl.lit("}"),
            ]),
            agreement_diffs,
        )
        out["agreement"] = {**agreement, "diffs_ns": diffs_list}
    return out


def _section(
    alignment: Alignment, diffs_ns: list[AgreementDiff], without_anchor: list[EventLine]
) -> AlignmentSection:
    """The ``alignment`` object with the given per-line lists."""
    agreement: Agreement | None = None
    if alignment.agreement is not None:
        agreement = {**alignment.agreement, "diffs_ns": diffs_ns}
    return {
        "method": alignment.method,
        "clock_field": alignment.clock_field,
        "offset_ns": alignment.offset_ns,
        "residuals_ns": alignment.residuals_ns,
        "checked": alignment.checked,
        "tolerance_ns": alignment.tolerance_ns,
        "reasons": alignment.reasons,
        "checks": [check_entry(c) for c in alignment.checks],
        "utc": utc_section(alignment.utc),
        "anchors": anchors_section(alignment.anchors, without_anchor),
        "agreement": agreement,
        "notes": [say(n) for n in alignment.notes],
    }


@overload
def telemetry_summary(alignment: Alignment, *, lazy: Literal[False] = False) -> TelemetrySummary: ...


@overload
def telemetry_summary(alignment: Alignment, *, lazy: Literal[True]) -> dict[str, object]: ...


def telemetry_summary(alignment: Alignment, *, lazy: bool = False) -> TelemetrySummary | dict[str, object]:
    """The top-level ``telemetry`` object but its ``library_failures``: the file, its warnings,
    every line's placement (``timeline``; ``lazy``: left a :class:`LineList`, in an object of
    that shape, not yet a :class:`TelemetrySummary`)."""
    log, opts = alignment.log, alignment.log.options
    lines = timeline(alignment)
    summary: TelemetrySummary = {
        "path": log.path,
        "sha256": log.sha256,
        "events": log.lines.height,
        "bad_lines": len(log.bad_lines),
        "warnings": [bad_line_entry(b) for b in log.bad_lines],
        "lenient": opts.lenient,
        "event_key": opts.event_key,
        "clock_fields": {kind: name for kind, name in opts.clock_fields.items()},
        "pids": log.pids,
        "timeline": [] if lazy else _timeline_dicts(alignment, lines.frame),
    }
    return {**summary, "timeline": lines} if lazy else summary


def bad_line_entry(bad: BadLine) -> TelemetryBadLine:
    """A ``telemetry.warnings`` entry: a line ``--lenient`` skipped, and why."""
    return {"line": bad.line, "problem": bad.problem}


def timeline(alignment: Alignment) -> LineList:
    """``telemetry.timeline``: each line with its clocks, place, values and fields."""
    return LineList(pl.concat([alignment.log.lines, alignment.placed], how="horizontal"),
                    lambda frame: _timeline_entry(alignment, frame), lambda frame: _timeline_dicts(alignment, frame))


def _timeline_dicts(alignment: Alignment, frame: pl.DataFrame) -> list[TimelineLine]:
    log = alignment.log
    clocks = log.options.clock
    out: list[TimelineLine] = []
    for row in frame.iter_rows(named=True):
        out.append(
            {
                "line": int(row["line"]),
                "event": str(row["event"]),
                "pid": row["pid"],
                "tid": row["tid"],
                "clocks": {name: row[kind] for kind, name in clocks if row[kind] is not None},
                "trace_ns": row["trace_ns"],
                "via": row["via"],
                "values": log.values_of(row["values"], row["order"]),
                "fields": log.fields_of(row["fields"], row["order"], row["written"]),
            }
        )
    return out


def _timeline_entry(alignment: Alignment, frame: pl.DataFrame) -> pl.Expr:
    # The clocks object: a stamp per clock read, keys sorted (a field read for both kinds is
    # one key holding one value, as a dict keeps it).
    names = {name: kind for kind, name in alignment.log.options.clock}
    stamps = [
        pl.when(pl.col(kind).is_not_null()).then(
            pl.concat_str([pl.lit(orjson.dumps(name).decode() + ":"), pl.col(kind).cast(pl.String)])
        )
        for name, kind in sorted(names.items())
    ]
    via = pl.when(pl.col("via").is_null()).then(pl.lit("null")).otherwise(
        pl.concat_str([pl.lit('"'), pl.col("via"), pl.lit('"')])
    )
    return pl.concat_str([
        pl.lit('{"clocks":{'), pl.concat_str(stamps, separator=",", ignore_nulls=True).fill_null(""),
        pl.lit('},"event":'), _event_json(frame),
        pl.lit(',"fields":'), pl.col("fields"),
        pl.lit(',"line":'), _int_json("line"),
        pl.lit(',"pid":'), _int_json("pid"),
        pl.lit(',"tid":'), _int_json("tid"),
        pl.lit(',"trace_ns":'), _int_json("trace_ns"),
        pl.lit(',"values":'), pl.col("values"),
        pl.lit(',"via":'), via,
        pl.lit("}"),
    ])


@dataclass(frozen=True, eq=False)
class LineList:
    """A per-line list of the document (one entry per telemetry line: 10^6 for a file of 10^6
    lines), kept as the rows of ``frame`` until it is written.

    :meth:`dicts` gives the entries as Python objects (``make(frame)``: what :func:`alignment_section`
    holds, :class:`EventLine`, :class:`AgreementDiff` or :class:`TimelineLine` entries); :meth:`json`
    their canonical JSON text, a slice at a time (``entry(frame)``: the text of one entry, an
    expression over the frame's columns), byte for byte what ``canonical.dumps`` writes for
    :meth:`dicts`, without making them."""

    frame: pl.DataFrame
    entry: Callable[[pl.DataFrame], pl.Expr]
    make: Callable[[pl.DataFrame], Sequence[Mapping[str, object]]]

    def __len__(self) -> int:
        return self.frame.height

    def dicts(self) -> Sequence[Mapping[str, object]]:
        """The entries as Python objects (``make(frame)``)."""
        return self.make(self.frame)

    def json(self, rows: int) -> Iterator[bytes]:
        """The entries' canonical JSON text, ``rows`` entries at a time, joined by commas (no
        brackets; a comma between two pieces is the caller's)."""
        entry = self.entry(self.frame)
        for offset in range(0, self.frame.height, rows):
            text = self.frame.slice(offset, rows).select(entry.str.join(",")).item()
            yield str(text).encode()


def _int_json(column: str) -> pl.Expr:
    """An integer column as JSON: its digits, ``null`` for a null."""
    return pl.col(column).cast(pl.String).fill_null("null")


def event_lines(frame: pl.DataFrame) -> list[EventLine]:
    """``{"event", "line"}`` of each row of ``frame`` (``line, event`` columns)."""
    return [{"event": str(event), "line": int(line)} for line, event in frame.select("line", "event").iter_rows()]


def agreement_diffs(frame: pl.DataFrame) -> list[AgreementDiff]:
    """``{"event", "line", "utc_minus_anchor_ns"}`` of each row of ``frame`` (columns of those names)."""
    rows = frame.select("line", "event", "utc_minus_anchor_ns").iter_rows()
    return [{"event": str(event), "line": int(line), "utc_minus_anchor_ns": int(diff)} for line, event, diff in rows]


def _event_json(frame: pl.DataFrame) -> pl.Expr:
    """The ``event`` column as JSON strings, as orjson writes them (each name written once)."""
    names = frame["event"].unique()
    texts = [orjson.dumps(name).decode() for name in names.to_list()]
    return pl.col("event").replace_strict(names, texts, return_dtype=pl.String)
