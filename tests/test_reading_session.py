"""The notebook API: ``nsysaudit.open(path)`` loads once and serves every row as LazyFrames."""

from __future__ import annotations

import doctest
import shutil
import sqlite3
from pathlib import Path

import polars as pl
import pytest
from builder import Call, Export, LibCall
from conftest import FIXTURES, H200_2025, REPO, sweep
from scenarios import PID, WORKER, observe_nested_failure

import nsysaudit
from nsysaudit import session
from nsysaudit.batch import check
from nsysaudit.batch import run as fleet
from nsysaudit.core.errors import BadOption, UnusableInput
from nsysaudit.render import analysis_json

OBSERVE = H200_2025 / "torch" / "observe.sqlite"
REAL = sorted(FIXTURES.rglob("*.sqlite"))


def sql_rows(path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_cuda_api_has_every_runtime_row_with_names() -> None:
    with nsysaudit.open(OBSERVE) as t:
        calls = t.cuda_api().collect()
        result = t.analyze()
    assert calls.columns == list(session.CUDA_API_SCHEMA)
    assert calls.height == result.census["cuda_api_calls"] == 1229  # all rows, not only those the analysis keeps
    assert calls.height > result.frames["cuda_api_rows"].height
    expected = sql_rows(
        OBSERVE,
        """SELECT s.value, r.returnValue, r.correlationId, r.start, r."end" FROM CUPTI_ACTIVITY_KIND_RUNTIME r
           LEFT JOIN StringIds s ON s.id = r.nameId ORDER BY r.rowid""",
    )
    assert calls.select("api", "return_code", "correlation_id", "start_ns", "end_ns").rows() == expected
    assert calls.filter(pl.col("return_code") != 0).height == result.census["nonzero_returns"]
    failure = calls.filter(pl.col("correlation_id") == 2433).row(0, named=True)
    assert (failure["pid"], failure["tid"], failure["thread_name"]) == (683, 720, "pt_autograd_0")
    assert (failure["api"], failure["return_code"], failure["return_name"]) == (
        "cudaMalloc_v3020", 2, "cudaErrorMemoryAllocation"
    )
    assert failure["duration_ns"] == failure["end_ns"] - failure["start_ns"]


def test_frames_are_lazy_and_read_only_what_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "BATCH_ROWS", 100)
    with nsysaudit.open(OBSERVE) as t:
        statements: list[str] = []
        t._export.conn.set_trace_callback(statements.append)
        lazy = t.cuda_api().filter(pl.col("thread_name") == "pt_autograd_0").select("api", "start_ns")
        assert statements == []  # building the query reads nothing
        head = t.cuda_api().head(5).collect()
        assert head.height == 5 and len(statements) == 1  # one batch of 100 rows, not 13
        statements.clear()
        worker = lazy.collect()
        assert len(statements) == 13  # 1229 rows in batches of 100
        assert worker.columns == ["api", "start_ns"] and "cublasCreate_v2" not in worker["api"].to_list()
        assert worker.height == t.cuda_api().filter(pl.col("tid") == 720).collect().height


@pytest.mark.parametrize("path", sweep(REAL, keep=OBSERVE), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_analyze_reuses_what_was_loaded_and_equals_analyze(path: Path) -> None:
    with nsysaudit.open(path) as t:
        statements: list[str] = []
        t._export.conn.set_trace_callback(statements.append)
        first, second = t.analyze(), t.analyze()
        assert statements == []  # the export is not read again
    expected = analysis_json(nsysaudit.analyze(path))
    assert analysis_json(first) == expected and analysis_json(second) == expected


def test_analyze_with_telemetry_equals_analyze() -> None:
    capi = H200_2025 / "capi" / "observe.sqlite"
    telemetry = capi.with_suffix(".telemetry.jsonl")
    with nsysaudit.open(capi) as t:
        result = t.analyze(telemetry=telemetry)
    assert result.verdict == "inconclusive"
    assert analysis_json(result) == analysis_json(nsysaudit.analyze(capi, telemetry=telemetry))


def test_library_calls_memory_nvtx_threads() -> None:
    with nsysaudit.open(OBSERVE) as t:
        libs = t.library_calls().collect()
        memory = t.memory_events().collect()
        nvtx = t.nvtx().collect()
        threads = t.threads().collect()
    assert libs.select("api", "library", "thread_name").rows() == [
        ("cublasCreate_v2", "cuBLAS", "python3"),
        ("cublasCreate_v2", "cuBLAS", "pt_autograd_0"),
    ]
    assert memory.height == sql_rows(OBSERVE, "SELECT count(*) FROM CUDA_GPU_MEMORY_USAGE_EVENTS")[0][0] == 490
    allocated = memory.filter(pl.col("operation") == "Allocation")["bytes"].sum()
    assert allocated == sql_rows(
        OBSERVE, "SELECT sum(bytes) FROM CUDA_GPU_MEMORY_USAGE_EVENTS WHERE memoryOperationType = 0"
    )[0][0]
    assert memory.group_by("memory_kind").len().sort("memory_kind").rows() == [("Device", 33), ("Device Static", 457)]
    assert nvtx.select("thread_name", "domain", "text").rows() == [
        ("python3", None, "prepass"),
        ("python3", "cuBLAS", "cublasCreate_v2"),
        ("python3", None, "admission"),
        ("python3", None, "backward"),
        ("pt_autograd_0", "cuBLAS", "cublasCreate_v2"),
    ]
    assert threads.height == 25 and threads.filter(pl.col("tid") == 720)["thread_name"].to_list() == ["pt_autograd_0"]
    assert set(threads["process_name"].to_list()) == {"python3"}


def test_unknown_names_are_null_never_guessed(make_export) -> None:
    spec = Export(
        calls=[Call("cudaMalloc_v3020", 10_000, 10_500, PID, WORKER, corr=20, bytes=4 << 20)],
        lib_calls=[LibCall("cublasCreate_v2", 9_000, 13_000, PID, WORKER)],
        thread_names={},
        processes={},
    )
    with nsysaudit.open(make_export(spec)) as t:
        row = t.cuda_api().collect().row(0, named=True)
    assert (row["pid"], row["tid"], row["thread_name"], row["api"]) == (PID, WORKER, None, "cudaMalloc_v3020")


def test_session_owns_its_connection_and_shows_a_summary(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    copy = evidence / "observe.sqlite"
    shutil.copyfile(OBSERVE, copy)
    t = nsysaudit.open(copy)
    text = repr(t)
    assert text.startswith(f"Session({copy} (sqlite, nsys 2025.3.2.0, schema 3.20.3); sha256 ")
    assert "1,229 CUDA API calls, 2 library calls" in text and "\n" not in text
    assert "<b>nsysaudit session</b>" in t._repr_html_()
    t.cuda_api().collect()
    t.close()
    t.close()  # twice is fine
    assert repr(t).endswith("(closed))")
    with pytest.raises(BadOption, match="this session was closed"):
        t.cuda_api().collect()
    assert t.analyze().verdict == "failure_found"  # what was loaded stays usable
    assert [p.name for p in evidence.iterdir()] == ["observe.sqlite"]
    assert copy.read_bytes() == OBSERVE.read_bytes()


def test_database_explores_the_schema_read_only(tmp_path: Path) -> None:
    copy = tmp_path / "observe.sqlite"
    shutil.copyfile(OBSERVE, copy)
    with nsysaudit.open(copy) as t:
        db = t.database
        assert "CUPTI_ACTIVITY_KIND_RUNTIME" in db.table_names()
        assert db["CUPTI_ACTIVITY_KIND_RUNTIME"].count == 1229
        assert "globalTid" in {c.name for c in db["CUPTI_ACTIVITY_KIND_RUNTIME"].columns}
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db["StringIds"].insert({"id": 10**9, "value": "x"})
    with pytest.raises(BadOption, match="this session was closed"):
        _ = t.database
    assert copy.read_bytes() == OBSERVE.read_bytes()


def test_unusable_input_is_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    cases = ((empty, "empty file"), (tmp_path / "none.sqlite", "no such file"), (tmp_path, "not a regular"))
    for path, problem in cases:
        with pytest.raises(UnusableInput) as caught:
            nsysaudit.open(path)
        assert str(caught.value).startswith(f"{path}: ") and problem in str(caught.value)
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize("module", [session, fleet, check], ids=lambda m: m.__name__)
def test_doctests(module: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the examples name the bundled fixtures from the repository root
    failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert tried > 0 and failed == 0


def test_builder_failure_through_open(make_export) -> None:
    with nsysaudit.open(make_export(observe_nested_failure())) as t:
        failed = t.cuda_api().filter(pl.col("return_code") != 0).collect()
        assert failed.select("api", "thread_name", "correlation_id").rows() == [
            ("cudaMalloc_v3020", "bwd_worker_0", 22)
        ]
        assert t.analyze().findings[0]["correlation_id"] == 22
