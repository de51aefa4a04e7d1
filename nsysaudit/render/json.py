"""JSON bytes of documents: canonical (sorted keys, UTF-8, no NaN), compact or indented.

One rule for every JSON nsysaudit writes (:mod:`nsysaudit.render.canonical`): what ``--json`` prints
is compact, one document and one final newline (:func:`compact`, :func:`write_analysis`); the files
of a sealed folder are indented (:func:`indented`). The analysis document's
library calls (10^5+ on a large export) are written by polars straight from their frame, between
the canonical bytes of the rest of the document: never turned into Python objects, several times
faster, a fraction of the memory. tests/test_canonical.py checks the bytes equal
``canonical.dumps(result.to_dict())``.
"""

from __future__ import annotations

import io
import secrets
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import BinaryIO

import polars as pl

from nsysaudit.render import canonical
from nsysaudit.reports.alignment_section import LineList
from nsysaudit.reports.analysis import AnalysisResult


def compact(doc: object) -> bytes:
    """Canonical JSON bytes, compact, one final newline: what every command's ``--json`` prints."""
    return canonical.dumps(doc) + b"\n"


def indented(doc: object) -> bytes:
    """Canonical JSON bytes, 2-space indented, one final newline (the sealed folders' files)."""
    return canonical.dumps(doc, indent=True) + b"\n"


def analysis_json(result: AnalysisResult) -> bytes:
    """``canonical.dumps(result.to_dict())``, byte for byte (see :func:`write_analysis`)."""
    buffer = io.BytesIO()
    write_analysis(result, buffer)
    return buffer.getvalue()


def write_analysis(result: AnalysisResult, stream: BinaryIO) -> None:
    """Write ``canonical.dumps(result.to_dict())`` to ``stream``, byte for byte, without building it:
    the rest of the document is canonical bytes, ``coverage.censored`` and ``library_calls`` are
    written by polars from their frames, each where a placeholder stood. With telemetry, the
    library calls are Python objects (their telemetry positions are computed in Python) and the
    per-line telemetry lists are written from their frames (:func:`_write_with_lists`)."""
    if result.alignment is not None:
        _write_with_lists(result, stream)
        return
    nonce = secrets.token_hex(16)
    tables = {"censored": result.censored_table, "library_calls": result.library_calls_table}
    holders = {key: f"nsysaudit-{key}-{nonce}" for key in tables}
    text = canonical.dumps({
        **result.head,
        "coverage": {**result.head["coverage"], "censored": holders["censored"]},
        "library_calls": holders["library_calls"],
    })
    markers = {key: b'"' + key.encode() + b'":"' + holder.encode() + b'"' for key, holder in holders.items()}
    if any(text.count(marker) != 1 for marker in markers.values()):  # cannot happen (the nonce is fresh)
        stream.write(canonical.dumps(result.to_dict()))
        return
    for key in sorted(markers, key=lambda k: text.index(markers[k])):
        head, text = text.split(markers[key])
        stream.write(head + b'"' + key.encode() + b'":')
        _write_rows(stream, tables[key])
    stream.write(text)


LINE_SLICE_ROWS = 65_536


def _write_with_lists(result: AnalysisResult, stream: BinaryIO) -> None:
    """The document of an analysis with telemetry: each :class:`~nsysaudit.reports.alignment_section.LineList`
    of its head (10^6 entries for 10^6 telemetry lines) written from its frame where a placeholder
    stood, the rest canonical bytes."""
    nonce = secrets.token_hex(16)
    lists: dict[bytes, LineList] = {}

    def hold(doc: Mapping[str, object]) -> dict[str, object]:
        out = dict(doc)
        for key, value in doc.items():
            if isinstance(value, LineList):
                holder = f"nsysaudit-list-{len(lists)}-{nonce}"
                lists[canonical.dumps(holder)] = value
                out[key] = holder
            elif isinstance(value, Mapping):
                out[key] = hold(value)
        return out

    doc = {
        **hold(result.head),
        "coverage": result.coverage,
        "library_calls": result.library_call_dicts(result.library_calls_table),
    }
    text = canonical.dumps(doc)
    if any(text.count(marker) != 1 for marker in lists):  # cannot happen (the nonce is fresh)
        stream.write(canonical.dumps(result.to_dict()))
        return
    for marker in sorted(lists, key=text.index):
        head, text = text.split(marker)
        stream.write(head + b"[")
        for i, part in enumerate(lists[marker].json(LINE_SLICE_ROWS)):
            if i:
                stream.write(b",")
            stream.write(part)
        stream.write(b"]")
    stream.write(text)


def _write_rows(stream: BinaryIO, frame: pl.DataFrame) -> None:
    """``frame``'s rows as a JSON array of objects, keys sorted (:func:`_key_sorted`, slice by slice)."""
    stream.write(b"[")
    # In slices: polars builds the whole text of what it writes (200k library calls are 200 MB),
    # so only a few slices' text are alive at a time; polars serializes them on two threads (it
    # releases the GIL), written in order. Rows are written alike whatever the slice.
    offsets = range(0, frame.height, JSON_SLICE_ROWS)
    if len(offsets) <= 1:
        slices: Iterator[memoryview] = (_slice_json(frame, o) for o in offsets)
    else:
        slices = _ahead(lambda o: _slice_json(frame, o), offsets)
    for i, part in enumerate(slices):
        if i:
            stream.write(b",")
        stream.write(part)
    stream.write(b"]")


# 4,096 rows: at 200k library calls the slices in flight hold +29 MiB of peak RSS where 16,384 held
# +123-143, for the same CPU (0.65 s; benchmarks/RESULTS.md, issue 33 round 3).
JSON_SLICE_ROWS = 4_096
JSON_THREADS = 2


def _slice_json(frame: pl.DataFrame, offset: int) -> memoryview:
    """The slice's rows as JSON objects, without the array's brackets: polars writes them into a
    buffer that is then only viewed (its text as a str, then bytes, then sliced cost three copies of
    every slice, 0.6 GB of copying for 200 MB of JSON). Its keys sorted slice by slice: the list
    columns' fields reordered for the whole frame were a copy of them (100 MB at 200k library calls)."""
    buffer = io.BytesIO()
    _key_sorted(frame.slice(offset, JSON_SLICE_ROWS)).write_json(buffer)
    return buffer.getbuffer()[1:-1]


def _ahead(work: Callable[[int], memoryview], items: Sequence[int]) -> Iterator[memoryview]:
    """``work`` of each item, in order, computed at most ``JSON_THREADS`` items ahead."""
    with ThreadPoolExecutor(max_workers=JSON_THREADS) as pool:
        pending: deque[Future[memoryview]] = deque()
        for item in items:
            pending.append(pool.submit(work, item))
            if len(pending) > JSON_THREADS:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


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
