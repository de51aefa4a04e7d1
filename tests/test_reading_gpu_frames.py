"""The notebook's GPU frames (issue 37, item 5): ``kernels()``, ``memcpy()``, ``memset()``,
``synchronization()`` of ``nsysaudit.open``, each row pinned against plain SQL on the real captures."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from builder import Call, Export, Kernel
from conftest import H200, H200_2025, PUBLIC, sql

import nsysaudit
from nsysaudit import session

SERIALIZED = H200_2025 / "sync" / "serialized.sqlite"  # 1,707 kernels, 48 copies, 816 memsets, 48 synchronizations
MFU = PUBLIC / "nsys-ai_mfu_2gpu_after_2026.2.sqlite"  # synchronizations with CUPTI's invalid stream and event
PID = "((g.globalPid >> 24) & 16777215)"  # nsys's serialized globalPid
COMMON = f'{PID}, g.globalPid, g.deviceId, g.contextId, g.streamId, g.correlationId, g.start, g."end"'
LABEL = "(SELECT label FROM {enum} WHERE id = g.{column})"


def collected(path: Path) -> dict[str, pl.DataFrame]:
    with nsysaudit.open(path) as t:
        return {"kernel": t.kernels().collect(), "memcpy": t.memcpy().collect(), "memset": t.memset().collect(),
                "synchronization": t.synchronization().collect()}


def without_duration(frame: pl.DataFrame) -> list[tuple[object, ...]]:
    assert (frame["duration_ns"] == frame["end_ns"] - frame["start_ns"]).all()
    return frame.drop("duration_ns").rows()


def test_each_gpu_frame_is_every_row_of_its_table_as_sql_reads_it() -> None:
    frames = collected(SERIALIZED)
    assert {k: f.height for k, f in frames.items()} == {"kernel": 1707, "memcpy": 48, "memset": 816,
                                                        "synchronization": 48}
    assert {k: f.schema for k, f in frames.items()} == {k: pl.Schema(s) for k, s in session.GPU_SCHEMAS.items()}
    kernels = sql(SERIALIZED, f"""
        SELECT {COMMON}, n.value, d.value, gridX, gridY, gridZ, blockX, blockY, blockZ
        FROM CUPTI_ACTIVITY_KIND_KERNEL g LEFT JOIN StringIds n ON n.id = g.shortName
        LEFT JOIN StringIds d ON d.id = g.demangledName ORDER BY g.rowid""")
    assert without_duration(frames["kernel"]) == kernels
    copy, mem = "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND"
    copies = sql(SERIALIZED, f"""
        SELECT {COMMON}, bytes, {LABEL.format(enum=copy, column="copyKind")},
               {LABEL.format(enum=mem, column="srcKind")}, {LABEL.format(enum=mem, column="dstKind")}
        FROM CUPTI_ACTIVITY_KIND_MEMCPY g ORDER BY g.rowid""")
    assert without_duration(frames["memcpy"]) == copies
    sets = sql(SERIALIZED, f"""
        SELECT {COMMON}, bytes, value, {LABEL.format(enum=mem, column="memKind")}
        FROM CUPTI_ACTIVITY_KIND_MEMSET g ORDER BY g.rowid""")
    assert without_duration(frames["memset"]) == sets
    syncs = sql(SERIALIZED, f"""
        SELECT {COMMON}, syncType, nullif(eventId, 4294967295) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION g
        ORDER BY g.rowid""")
    assert without_duration(frames["synchronization"]) == syncs
    # What the rows say, in words: the workload's device-to-host readbacks, one process, names decoded.
    assert set(frames["memcpy"]["copy_kind"]) == {"Device-to-Host"}
    assert set(frames["memcpy"]["dst_kind"]) == {"Pageable", "Pinned"}
    assert frames["kernel"]["name"].null_count() == 0 and set(frames["kernel"]["pid"]) == {755}


def test_a_synchronization_without_a_stream_or_an_event_has_null_there() -> None:
    sync = collected(MFU)["synchronization"]
    invalid = sql(MFU, """SELECT sum(streamId = 4294967295), sum(eventId = 4294967295), count(*)
                               FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION""")
    assert invalid == [(124, 30, 334)]
    assert (sync["stream_id"].null_count(), sync["event_id"].null_count(), sync.height) == invalid[0]
    assert not (sync["stream_id"] == 4294967295).any()


def test_an_export_without_gpu_tables_gives_empty_frames_and_says_so() -> None:
    old = H200 / "observe.sqlite"  # nsys 2023.4, traced without kernels, copies or synchronizations
    assert sql(old, "SELECT count(*) FROM sqlite_master WHERE name IN ('CUPTI_ACTIVITY_KIND_KERNEL', "
                         "'CUPTI_ACTIVITY_KIND_MEMCPY', 'CUPTI_ACTIVITY_KIND_MEMSET', "
                         "'CUPTI_ACTIVITY_KIND_SYNCHRONIZATION')") == [(0,)]
    frames = collected(old)
    assert {k: (f.height, f.schema) for k, f in frames.items()} == {
        k: (0, pl.Schema(s)) for k, s in session.GPU_SCHEMAS.items()}
    with nsysaudit.open(old) as t:
        assert t.gpu_tables == dict.fromkeys(("kernel", "memcpy", "memset", "synchronization"))
        assert "no GPU table (kernels(), memcpy(), memset(), synchronization() are empty)" in repr(t)
    with nsysaudit.open(SERIALIZED) as t:
        assert t.gpu_tables["kernel"] == "CUPTI_ACTIVITY_KIND_KERNEL"
        assert "GPU tables: kernel, memcpy, memset, synchronization)" in repr(t)


def test_a_missing_table_is_named_beside_the_present_ones(make_export) -> None:
    """An export with kernels only: the kernels read, the three others empty and named."""
    path = make_export(Export(calls=[Call("cudaLaunchKernel_v7000", 1_000, 2_000, 100, 100, corr=5)],
                              kernels=[Kernel(3_000, 9_000, 5, name="gemm")]))
    with nsysaudit.open(path) as t:
        assert t.kernels().select("pid", "correlation_id", "name", "duration_ns").collect().rows() == [
            (100, 5, "gemm", 6_000)]
        assert t.memcpy().collect().height == t.synchronization().collect().height == 0
        assert "; no CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION " \
               "(those frames are empty))" in repr(t)


def test_gpu_frames_are_lazy_and_filter_as_polars_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session, "BATCH_ROWS", 500)
    with nsysaudit.open(SERIALIZED) as t:
        statements: list[str] = []
        t._export.conn.set_trace_callback(statements.append)
        lazy = t.kernels().filter(pl.col("stream_id") == 13).select("name", "start_ns")
        assert statements == []  # building the query reads nothing
        on_13 = lazy.collect()
        assert len(statements) == 4  # 1,707 rows in batches of 500
        expected = sql(SERIALIZED, """SELECT n.value, g.start FROM CUPTI_ACTIVITY_KIND_KERNEL g
                                           JOIN StringIds n ON n.id = g.shortName WHERE g.streamId = 13
                                           ORDER BY g.rowid""")
        assert on_13.rows() == expected and on_13.height > 0
    with pytest.raises(nsysaudit.BadOption, match="this session was closed"):
        t.memcpy()
