"""NVTX ranges read by the native integer reader: the same frame the strict frame builder makes from

    SELECT n.globalTid, n.start, n."end", coalesce(n.text, s.value), n.domainId, n.eventType
    FROM NVTX_EVENTS AS n LEFT JOIN StringIds AS s ON s.id = n.textId WHERE n.eventType IN (...)

without a Python object per row. The query keeps its FROM, JOIN and WHERE (so the same rows in
the same order, duplicate StringIds ids included) and selects, instead of the text, the rowid of
the NVTX row where its own ``text`` is set and the rowid of the joined StringIds row. The texts
are then read once per distinct row (a long run's 200k ranges name a few hundred strings) and
counted per range exactly as the frame builder counts them: a value that is not TEXT is a type
mismatch read as NULL, a TEXT value that is not UTF-8 is decoded with replacement characters and
counted as invalid, once for every range that shows it.

:func:`read_ranges` returns None where this cannot be done exactly (the native reader is not
built or fails, or a declared column named ``rowid`` hides the rowid): the caller then uses the
frame builder, which also says what is wrong with a damaged file.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import NamedTuple

import polars as pl

from nsysaudit.core.shapes import Schema
from nsysaudit.read import native
from nsysaudit.read.source import ExportFile, Table, quote

RANGE_SCHEMA: Schema = {
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "text": pl.String,
    "domain_id": pl.Int64,
    "event_type": pl.Int64,
}
_INT_SCHEMA: Schema = {
    "gtid": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "domain_id": pl.Int64,
    "event_type": pl.Int64,
    "_string": pl.Int64,  # rowid of the joined StringIds row (NULL: none)
    "_own": pl.Int64,  # rowid of the NVTX row where its own text is not NULL (NULL: it is)
}




class Source(NamedTuple):
    """The parts of every NVTX query, from the table's columns: the frame builder's read, the
    native one and the domains' read share one FROM and JOIN (``from_join``), so they see the same
    rows in the same order. ``text``: the range's text (its own, else the StringIds value of its
    textId); ``end``, ``domain``: the columns, or NULL where the export has none."""

    nvtx: Table
    strings: Table
    from_join: str
    text: str
    end: str
    domain: str


def source(nvtx: Table, strings: Table) -> Source:
    has_text_id = nvtx.has("textId")
    own = "n.text" if nvtx.has("text") else "NULL"
    return Source(
        nvtx,
        strings,
        f"FROM {quote(nvtx.name)} AS n"
        + (f" LEFT JOIN {quote(strings.name)} AS s ON s.id = n.textId" if has_text_id else ""),
        f"coalesce({own}, s.value)" if has_text_id else own,
        'n."end"' if nvtx.has("end") else "NULL",
        "n.domainId" if nvtx.has("domainId") else "NULL",
    )


def read_ranges(
    export: ExportFile, src: Source, event_types: tuple[int, int], typed: Counter[str]
) -> pl.DataFrame | None:
    """The NVTX push/pop and start/end ranges (:data:`RANGE_SCHEMA`), counting wrong-typed values in
    ``typed[nvtx.name]`` and invalid UTF-8 in ``export.text``; None when the frame builder must read them."""
    nvtx, strings = src.nvtx, src.strings
    if native.load() is None or nvtx.hides_rowid or strings.hides_rowid:
        return None
    columns = [
        "n.globalTid",
        "n.start",
        src.end,
        src.domain,
        "n.eventType",
        "s.rowid" if nvtx.has("textId") else "NULL",
        "CASE WHEN n.text IS NULL THEN NULL ELSE n.rowid END" if nvtx.has("text") else "NULL",
    ]
    kinds = ", ".join(str(int(t)) for t in event_types)
    sql = f"SELECT {', '.join(columns)} {src.from_join} WHERE n.eventType IN ({kinds})"
    try:
        ints, wrong = native.read_ints(export.uri, sql, _INT_SCHEMA)
    except native.NativeScanError:
        return None
    own = _texts(export.conn, nvtx.name, "text", ints["_own"])
    joined = _texts(export.conn, strings.name, "value", ints["_string"])
    has_own = pl.col("_own").is_not_null()

    def pick(column: str, dtype: type[pl.DataType]) -> pl.Expr:
        return (
            pl.when(has_own)
            .then(pl.col("_own").replace_strict(own["rowid"], own[column], default=None, return_dtype=dtype))
            .otherwise(
                pl.col("_string").replace_strict(joined["rowid"], joined[column], default=None, return_dtype=dtype)
            )
        )

    ranges = ints.with_columns(
        pick("text", pl.String).alias("text"),
        pick("mismatch", pl.Boolean).alias("_mismatch"),
        pick("invalid", pl.Boolean).alias("_invalid"),
    )
    mismatch, invalid = ranges.select(pl.col("_mismatch").sum(), pl.col("_invalid").sum()).row(0)
    if wrong or mismatch:
        typed[nvtx.name] += wrong + int(mismatch or 0)
    export.text.invalid += int(invalid or 0)
    return ranges.select(list(RANGE_SCHEMA))


def _texts(conn: sqlite3.Connection, table: str, column: str, rowids: pl.Series) -> pl.DataFrame:
    """``rowid, text, mismatch, invalid`` of the given rows' ``column``, each row read once: ``text``
    as the connection's decoder would give it (NULL for a value that is not TEXT), ``mismatch``
    for a value that is neither TEXT nor NULL, ``invalid`` for TEXT that is not UTF-8. Read as
    bytes (with ``typeof`` to tell TEXT from BLOB), so the decoder's own count is not touched."""
    ids = rowids.drop_nulls().unique().sort().to_list()
    rowid_of: list[int] = []
    text_of: list[str | None] = []
    mismatch_of: list[bool] = []
    invalid_of: list[bool] = []
    if ids:
        factory = conn.text_factory
        conn.text_factory = bytes
        try:
            rows = conn.execute(
                f"SELECT rowid, typeof({quote(column)}), {quote(column)} FROM {quote(table)} "
                "WHERE rowid IN (SELECT value FROM json_each(?))",
                (json.dumps(ids),),
            ).fetchall()
        finally:
            conn.text_factory = factory
        for rowid, kind, raw in rows:
            text, invalid = None, False
            if kind == b"text":
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text, invalid = raw.decode("utf-8", errors="replace"), True
            rowid_of.append(rowid)
            text_of.append(text)
            mismatch_of.append(kind not in (b"text", b"null"))
            invalid_of.append(invalid)
    return pl.DataFrame(
        {"rowid": rowid_of, "text": text_of, "mismatch": mismatch_of, "invalid": invalid_of},
        schema={"rowid": pl.Int64, "text": pl.String, "mismatch": pl.Boolean, "invalid": pl.Boolean},
    )
