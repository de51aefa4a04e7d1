"""The NVTX ranges read by the native integer reader (nsysaudit/read/nvtx.py) equal what the strict
frame builder reads, on clean and on damaged exports: the same rows in the same order, the same
texts, the same type-mismatch and invalid-UTF-8 counts (per range, as the frame builder counts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, Export, LibCall, Range, strip_not_null
from conftest import H200, engine_free, needs_native

import nsysaudit
from nsysaudit.read.source import probe
from nsysaudit.read.trace import load


def nvtx_export() -> Export:
    """Library calls (textId, per-process domains), registered and inline user ranges on two processes."""
    spec = Export(
        calls=[Call("cudaMalloc_v3020", 1_000 + 100 * i, 1_050 + 100 * i, ret=2 if i == 3 else 0) for i in range(8)],
        lib_calls=[
            LibCall("cublasCreate_v2", 1_000, 1_500),
            LibCall("cublasSgemm_v2", 2_000, 2_100, pid=200, tid=201),
            LibCall("cudnnCreate", 2_500, 2_600, library="cuDNN"),
        ],
        ranges=[
            Range("backward_start", 900, 3_000, registered=True),
            Range("backward_start", 950, 2_900, registered=True, pid=200, tid=200),
            Range("inline text", 960, 990),
            Range("registered too", 970, None, registered=True),
            Range("plain", 980, 985, pid=200, tid=201),
        ],
    )
    return spec


# Damage of every kind the text read counts: invalid UTF-8 in a StringIds value several ranges
# show and in an inline text, a StringIds value that is a BLOB, a BLOB inline text, a dangling
# textId, wrong-typed integer columns, a StringIds without its primary key (a StringIds id held by
# two rows is refused before any range is read: tests/test_hostile_analysis.py).
DAMAGE = [
    strip_not_null("NVTX_EVENTS"),
    "UPDATE StringIds SET value = CAST(x'6261636bff77617264' AS TEXT) WHERE value = 'backward_start'",
    "UPDATE NVTX_EVENTS SET text = CAST(x'696e6cff' AS TEXT) WHERE text = 'inline text'",
    "UPDATE StringIds SET value = x'0102' WHERE value = 'registered too'",
    "UPDATE NVTX_EVENTS SET text = x'00ff' WHERE text = 'plain'",
    "INSERT INTO NVTX_EVENTS (start, \"end\", eventType, globalTid, textId, domainId) "
    "VALUES (995, 996, 59, 100 * 16777216 + 100, 987654, 0)",
    "INSERT INTO NVTX_EVENTS (start, \"end\", eventType, globalTid, textId, domainId) "
    "VALUES (996.5, 'x', 59, 'tid', NULL, 0)",
    "INSERT INTO NVTX_EVENTS (start, \"end\", eventType, globalTid, text, textId, domainId) "
    "VALUES (997, 998, 60, 100 * 16777216 + 100, 'both', (SELECT id FROM StringIds WHERE typeof(value) = 'blob'), 0)",
    # StringIds without its primary key (its rowid is not its id).
    "CREATE TABLE StringIds_copy (id INTEGER, value TEXT);"
    "INSERT INTO StringIds_copy SELECT id, value FROM StringIds ORDER BY id DESC;"
    "DROP TABLE StringIds; ALTER TABLE StringIds_copy RENAME TO StringIds;",
]


def spy_on_native_read(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each NVTX read was answered by the native reader (True) or left to the frame builder."""
    from nsysaudit.read import nvtx

    answered: list[bool] = []
    real = nvtx.read_ranges

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        answered.append(result is not None)
        return result

    monkeypatch.setattr("nsysaudit.read.trace.read_ranges", spy)
    return answered


def read_both(
    path: Path, monkeypatch: pytest.MonkeyPatch, *, native_used: bool = True
) -> dict[str, tuple[pl.DataFrame, int, list[object]]]:
    """The NVTX frame, invalid-UTF-8 count and warnings read natively and by the frame builder;
    ``native_used``: whether the native read must have answered (else it must have declined)."""
    answered = spy_on_native_read(monkeypatch)
    out = {}
    for engine in ("native", "frame"):
        monkeypatch.setenv("NSYSAUDIT_NATIVE", "1" if engine == "native" else "0")
        export = probe(path)
        try:
            trace = load(export)
            out[engine] = (trace.nvtx_ranges, export.text.invalid, sorted(map(json.dumps, trace.warnings)))
        finally:
            export.close()
    assert answered == [native_used, False]
    return out


@needs_native
@pytest.mark.parametrize("damaged", [False, True])
def test_native_nvtx_read_equals_the_frame_builder(make_export, monkeypatch, damaged: bool) -> None:
    spec = nvtx_export()
    if damaged:
        spec.raw_sql = DAMAGE
    got = read_both(make_export(spec), monkeypatch)
    (fast, fast_invalid, fast_warnings), (slow, slow_invalid, slow_warnings) = got["native"], got["frame"]
    assert fast.equals(slow), (fast, slow)
    assert fast_invalid == slow_invalid
    assert fast_warnings == slow_warnings
    assert fast.height >= 8
    if damaged:  # the comparison is not vacuous: every kind of damage is there and counted
        texts = fast["text"].to_list()
        assert texts.count("back\ufffdward") == 2 and "inl\ufffd" in texts and "both" in texts
        assert fast_invalid == 3  # two ranges show the broken StringIds value, one the inline text
        warnings = [json.loads(w) for w in fast_warnings]
        mismatch = [w for w in warnings if w["kind"] == "type_mismatch" and "NVTX_EVENTS" in w["message"]]
        # the BLOB StringIds value, the BLOB text, the REAL start, the TEXT end and globalTid
        assert mismatch and mismatch[0]["count"] == 5


@needs_native
def test_native_nvtx_read_is_used_and_the_analysis_is_byte_identical(monkeypatch) -> None:
    from nsysaudit.render import analysis_json

    calls = spy_on_native_read(monkeypatch)
    outs = {}
    for engine in ("native", "frame"):
        monkeypatch.setenv("NSYSAUDIT_NATIVE", "1" if engine == "native" else "0")
        outs[engine] = engine_free(analysis_json(nsysaudit.analyze(H200 / "observe.sqlite")))[0]
    assert calls == [True, False]
    assert outs["native"] == outs["frame"]


@needs_native
def test_a_declared_rowid_column_makes_the_frame_builder_read(make_export, monkeypatch) -> None:
    spec = nvtx_export()
    spec.raw_sql = ["ALTER TABLE NVTX_EVENTS ADD COLUMN rowid INTEGER"]
    got = read_both(make_export(spec), monkeypatch, native_used=False)
    assert got["native"][0].equals(got["frame"][0])
