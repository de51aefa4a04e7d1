"""Resource bounds: explicit limits, reported when hit. A pair limit keeps every failure examined
(or says what it left unexamined, and the verdict is then inconclusive); the joins it bounds hold
to a brute-force overlap test. Growth with size is measured by ``benchmarks/hostile_growth.py``,
never timed here."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import polars as pl
import pytest
from builder import Call, Export, LibCall
from conftest import run, warning_counts
from polars.testing import assert_frame_equal
from scenarios import MAIN, PID, WORKER, MiB

from nsysaudit.analysis.joins import PAIR_ORDER, PairsWay, closed_libs, count_pairs, held_by, nest

# --- the pair limit ------------------------------------------------------------------------------


def nested_ranges(k: int, m: int, *, failed_at: int | None) -> Export:
    """k cublasCreate_v2 ranges nested in each other on one thread, all holding the same m calls
    (k*m overlapping pairs); call ``failed_at`` (if any) is a failed cudaMalloc."""
    calls = [
        Call("cudaMalloc_v3020", 1_000 + 100 * i, 1_050 + 100 * i, PID, WORKER, corr=i + 1,
             ret=2 if i == failed_at else 0, bytes=None if i == failed_at else MiB)
        for i in range(m)
    ]
    calls.append(Call("cudaFree_v3020", 10_000_000, 10_000_100, PID, MAIN, corr=m + 1))
    libs = [LibCall("cublasCreate_v2", 500 - i, 1_000 + 100 * m + i, PID, WORKER) for i in range(k)]
    return Export(calls=calls, lib_calls=libs)


def sequential_ranges(n: int, *, failed_in: int) -> Export:
    """n cublasCreate_v2 ranges one after another, each holding a failing cudaEventQuery (600, not
    an allocation); range ``failed_in`` also holds a failed cudaMalloc."""
    calls, libs = [], []
    for i in range(n):
        base = 10_000 * (i + 1)
        libs.append(LibCall("cublasCreate_v2", base, base + 5_000, PID, WORKER))
        calls.append(Call("cudaEventQuery_v3020", base + 100, base + 200, PID, WORKER, ret=600, corr=2 * i + 1))
        if i == failed_in:
            calls.append(Call("cudaMalloc_v3020", base + 300, base + 400, PID, WORKER, ret=2, corr=2 * i + 2))
    calls.append(Call("cudaFree_v3020", 10_000 * (n + 2), 10_000 * (n + 2) + 100, PID, MAIN, corr=10 * n))
    return Export(calls=calls, lib_calls=libs)


def test_pair_limit_keeps_findings_and_says_what_it_left_out(capsys, make_export) -> None:
    path = make_export(nested_ranges(20, 50, failed_at=25))
    code, out, err = run(capsys, "analyze", "--json", "--max-pairs", "100", str(path))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["limits"] == {"max_pairs": 100, "pairs": 20 * 50, "pairs_listed": 20}
    assert warning_counts(doc)["pair_limit"] == 1000
    # Every failure is still examined: the verdict stands, with the innermost enclosing call.
    assert doc["verdict"] == "failure_found"
    [finding] = doc["findings"]
    assert finding["correlation_id"] == 26 and len(finding["enclosing_chain"]) == 20
    for lc in doc["library_calls"]:
        assert [c["correlation_id"] for c in lc["children"]] == [26]  # only the failed call listed
        assert lc["children_complete"] is False and lc["allocated_bytes"] is None  # unknown, not 0
    # Without the limit every pair is listed.
    code, out, _ = run(capsys, "analyze", "--json", "--max-pairs", "0", str(path))
    doc = json.loads(out)
    assert doc["limits"]["pairs_listed"] == 1000 and "pair_limit" not in warning_counts(doc)
    assert all(lc["children_complete"] and lc["allocated_bytes"] == 49 * MiB for lc in doc["library_calls"])


def test_pair_limit_that_leaves_failures_unexamined_makes_the_verdict_inconclusive(capsys, make_export) -> None:
    path = make_export(sequential_ranges(10, failed_in=8))
    code, out, err = run(capsys, "analyze", "--json", "--max-pairs", "5", str(path))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["findings"] == []
    assert doc["verdict"] == "inconclusive"
    assert "not examined" in doc["verdict_reasons"][0]
    assert "past the limit" in next(w["message"] for w in doc["warnings"] if w["kind"] == "pair_limit")
    # The same limit with the failed allocation in an examined range finds it.
    path = make_export(sequential_ranges(10, failed_in=1))
    code, out, _ = run(capsys, "analyze", "--json", "--max-pairs", "5", str(path))
    doc = json.loads(out)
    assert doc["verdict"] == "failure_found" and [f["correlation_id"] for f in doc["findings"]] == [4]


def test_pair_limit_without_failures_keeps_no_failure(capsys, make_export) -> None:
    path = make_export(nested_ranges(5, 10, failed_at=None))
    code, out, err = run(capsys, "analyze", "--json", "--max-pairs", "10", str(path))
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "no_failure"  # nothing failed, so nothing could hide
    assert warning_counts(doc)["pair_limit"] == 50


def test_pair_limit_is_shown_in_the_terminal_and_refused_with_out(capsys, make_export, tmp_path: Path) -> None:
    path = make_export(nested_ranges(5, 10, failed_at=3))
    code, out, _ = run(capsys, "analyze", "--max-pairs", "10", str(path))
    assert code == 0 and "Warnings:\n  - pair_limit (50): " in out
    code, _, err = run(capsys, "analyze", "--max-pairs", "10", "--out", str(tmp_path / "sealed"), str(path))
    assert code == 2 and "--max-pairs" in err and err.count("\n") == 1
    code, _, err = run(capsys, "analyze", "--max-pairs", "-1", str(path))
    assert code == 2 and "Traceback" not in err


# --- the joins against brute force ---------------------------------------------------------------


@pytest.mark.parametrize("way", ["as-of", "pairs"])
def test_pair_counts_without_forming_pairs_match_the_join(way: PairsWay) -> None:
    """count_pairs, both ways (as-of joins that form no pair; one query over the pairs), against the
    pairs nest forms."""
    rng = random.Random(11)
    for _ in range(100):
        libs = []
        for i in range(rng.randint(0, 10)):
            start = rng.randint(0, 100)
            libs.append((i, rng.choice([1, 2]), start, start + rng.randint(0, 60)))
        calls = []
        for j in range(rng.randint(0, 40)):
            start = rng.randint(0, 170)
            calls.append((rng.choice([1, 2]), start, start + rng.randint(0, 25), j, "cudaMalloc_v3020", 0))
        lib_frame = pl.DataFrame(libs, schema=["lib_id", "gtid", "start_ns", "end_ns"], orient="row")
        call_frame = pl.DataFrame(
            calls, schema=["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"], orient="row"
        )
        closed = closed_libs(lib_frame.cast(pl.Int64))
        pairs = nest(closed, call_frame)
        counts = count_pairs(closed, call_frame, way=way)
        per_lib = dict(pairs.group_by("lib_id").len().iter_rows())
        assert {lib: n for lib, n in counts.iter_rows() if n} == per_lib


@pytest.mark.parametrize("sequential", [True, False])
def test_nest_equals_a_brute_force_overlap_test(sequential: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways nest pairs calls: threads whose calls run one after another (binary searches) and
    threads where a call encloses another (the inequality join) give every overlap, nothing else, and
    every pair tested in one query gives the same frame."""
    import nsysaudit.analysis.joins as joins_module

    ways: Counter[bool] = Counter()  # True: threads answered in sequence; False: by the inequality join

    def counted(way: bool, real: Any) -> Any:
        def spy(calls: pl.DataFrame, libs: pl.DataFrame) -> Any:
            ways[way] += calls["gtid"].n_unique() if libs.height else 0
            return real(calls, libs)

        return spy

    monkeypatch.setattr(joins_module, "_overlapping_in_sequence", counted(True, joins_module._overlapping_in_sequence))
    monkeypatch.setattr(joins_module, "_overlapping_by_join", counted(False, joins_module._overlapping_by_join))
    rng = random.Random(5 if sequential else 6)
    for _ in range(60):
        libs = []
        for i in range(rng.randint(0, 12)):
            start = rng.randint(0, 200)
            libs.append((i, rng.choice([1, 2]), start, start + rng.randint(0, 60)))
        calls = []
        for thread in (1, 2):
            t = rng.randint(0, 10)
            for _ in range(rng.randint(0, 30)):
                if sequential:  # back to back, some of zero length, some touching the next
                    start, t = t, t + rng.randint(0, 12)
                    end = t
                    t += rng.randint(0, 3)
                else:
                    start = rng.randint(0, 260)
                    end = start + rng.randint(0, 40)
                calls.append((thread, start, end, len(calls), "cudaMalloc_v3020", 0))
        lib_frame = pl.DataFrame(libs, schema=["lib_id", "gtid", "start_ns", "end_ns"], orient="row")
        call_frame = pl.DataFrame(
            calls, schema=["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"], orient="row"
        ).cast({"gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64})
        closed = closed_libs(lib_frame.cast(pl.Int64))
        pairs = nest(closed, call_frame, way="joins")
        assert_frame_equal(nest(closed, call_frame, way="pairs"), pairs)  # the same rows in the same order
        expected = {
            (lib, corr, "nested" if ls <= s and e <= le else "straddling")
            for lib, lg, ls, le in libs
            for cg, s, e, corr, _, _ in calls
            if lg == cg and s <= le and e >= ls
        }
        got = set(pairs.select("lib_id", "correlation_id", "relation").iter_rows())
        assert got == expected and pairs.height == len(expected)
        assert pairs.equals(pairs.sort(PAIR_ORDER, nulls_last=True))
    assert ways[True] > 10 and (ways[False] == 0 if sequential else ways[False] > 10)  # each way was taken


def test_nest_and_counts_over_many_threads_and_the_int64_edges_equal_brute_force() -> None:
    """All threads are answered at once (as for 100k threads): ties, zero-length calls and
    library calls at the ends of the int64 range give every overlap of its own thread, nothing else;
    count_pairs gives the same frame both ways (a 0 for each library call of a thread with calls)."""
    rng = random.Random(24)
    lo, hi = -(1 << 63), (1 << 63) - 1
    for _ in range(80):
        threads = rng.randint(1, 40)
        points = [lo, lo + 1, -5, 0, 3, 7, 11, hi - 1, hi]
        libs = []
        for i in range(rng.randint(0, 30)):
            a, b = sorted(rng.choice([*points, rng.randint(-20, 20)]) for _ in range(2))
            libs.append((i, rng.randint(1, threads), a, b))
        calls = []
        for thread in range(1, threads + 1):
            t = rng.randint(-20, 0)
            for _ in range(rng.randint(0, 6)):
                start, t = t, t + rng.randint(0, 4)
                calls.append((thread, start, t, len(calls), "cudaMalloc_v3020", 0))
        if calls and rng.random() < 0.3:  # a call enclosing the next on one thread: the join's way
            g, s0, e0, *_ = calls[0]
            calls.append((g, s0, e0 + 10, len(calls), "cudaMalloc_v3020", 0))
        if calls and rng.random() < 0.3:  # a row repeated with another end and return: ties in the order
            g, s0, e0, corr, *_ = rng.choice(calls)
            calls.append((g, s0, e0 + rng.randint(0, 2), corr, "cudaMalloc_v3020", 2))
        lib_frame = pl.DataFrame(libs, schema=["lib_id", "gtid", "start_ns", "end_ns"], orient="row").cast(pl.Int64)
        call_frame = pl.DataFrame(
            calls, schema=["gtid", "start_ns", "end_ns", "correlation_id", "api", "return_code"], orient="row"
        ).cast({"gtid": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "correlation_id": pl.Int64})
        closed = closed_libs(lib_frame)
        pairs = nest(closed, call_frame, way="joins")
        assert_frame_equal(nest(closed, call_frame, way="pairs"), pairs)  # the same rows in the same order
        expected = [
            (lib, corr, "nested" if ls <= s and e <= le else "straddling")
            for lib, lg, ls, le in libs
            for cg, s, e, corr, _, _ in calls
            if lg == cg and s <= le and e >= ls
        ]
        assert sorted(pairs.select("lib_id", "correlation_id", "relation").iter_rows()) == sorted(expected)
        per_lib = Counter(lib for lib, _, _ in expected)
        counted = count_pairs(closed, call_frame, way="as-of")
        assert {lib: n for lib, n in counted.iter_rows() if n} == per_lib
        assert_frame_equal(count_pairs(closed, call_frame, way="pairs"), counted)
        threads_with_calls = {g for g, *_ in calls}
        assert counted["lib_id"].to_list() == sorted(lib for lib, g, *_ in libs if g in threads_with_calls)


# --- resource limits fail cleanly: inputs sized before they are read, pools sized to the limit ---------

import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

from conftest import OBSERVE, TORCH, assert_one_line_error  # noqa: E402

GiB = 1 << 30


def limited(limit: int, *args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``nsysaudit ARGS`` in a process whose address space is limited to ``limit`` bytes (ulimit -v)."""

    def under_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "nsysaudit", *map(str, args)], capture_output=True, text=True, timeout=300,
        preexec_fn=under_limit, env={**os.environ, **(env or {})}, check=False,
    )


def sparse(path: Path, size: int, head: bytes = b"") -> Path:
    """A file of ``size`` bytes that takes no disk space (a hole after ``head``)."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def test_a_3_gb_expectations_file_is_one_line_not_a_memory_error(capsys, tmp_path: Path) -> None:
    """It was read whole: a MemoryError traceback, exit 1 (which means "a check failed")."""
    big = sparse(tmp_path / "expect.toml", 3 * GiB, b"[[expect]]\n")
    code, _, err = run(capsys, "check", OBSERVE, "--expect", big)
    assert_one_line_error(code, err, big, "3,221,225,472 bytes, larger than any expectations file (16 MiB at most)")


def test_records_larger_than_any_record_are_not_read_whole(capsys, tmp_path: Path) -> None:
    """A metadata.json of 3 GB under verify is a failed check; a telemetry line without end is one line."""
    sealed = tmp_path / "sealed"
    code, _, err = run(capsys, "analyze", TORCH / "observe.sqlite", "--out", sealed)
    assert code == 0, err
    sparse(sealed / "metadata.json", 3 * GiB, b"{")
    code, _, err = run(capsys, "verify", sealed)
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err
    endless = sparse(tmp_path / "t.jsonl", 200 << 20, b'{"event": "x", "pid": 1, "ts": 1, "junk": "')
    code, _, err = run(capsys, "analyze", TORCH / "observe.sqlite", "--telemetry", endless)
    assert_one_line_error(code, err, endless, "a line longer than 64 MiB: not a telemetry file")


def test_a_memory_error_is_one_line_and_exit_2(capsys, monkeypatch) -> None:
    def exhausted(*args: object, **kwargs: object) -> None:
        raise MemoryError

    monkeypatch.setattr("nsysaudit.session.analyze_trace", exhausted)
    code, out, err = run(capsys, "analyze", "--json", OBSERVE)
    assert (code, out) == (2, "") and err.startswith("nsysaudit: error: out of memory") and err.count("\n") == 1


@pytest.mark.pure_skip
@pytest.mark.parametrize("native", ["1", "0"])
def test_under_an_address_space_limit_the_engines_answer_or_refuse_in_one_line(native: str) -> None:
    """At 1 GiB the analysis runs (the allocators and pools asked for less: the pure engines ended in
    SIGSEGV, an abort or "cannot allocate memory for thread-local data"); below what an export needs
    it is refused before it is read, one line, exit 2."""
    env = {"NSYSAUDIT_NATIVE": native}
    done = limited(GiB, "analyze", "--json", TORCH / "observe.sqlite", env=env)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout)["verdict"] == "failure_found"
    refused = limited(300 << 20, "analyze", "--json", TORCH / "observe.sqlite", env=env)
    assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
    assert "more than the limit this process runs under (300 MiB: ulimit -v)" in refused.stderr


@pytest.mark.slow
@pytest.mark.pure_skip
@pytest.mark.parametrize("native", ["1", "0"])
def test_a_4m_row_export_under_1_gib_gives_the_unlimited_answer(tmp_path: Path, native: str) -> None:
    """The pure engines under ulimit -v 1-1.5 GB on a 4M-row export crashed (the native one passed)."""
    export = tmp_path / "big.sqlite"
    made = subprocess.run([sys.executable, str(Path(__file__).parents[1] / "benchmarks" / "make_export.py"),
                           str(export), "--rows", "4000000"], capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    env = {"NSYSAUDIT_NATIVE": native}
    free = subprocess.run([sys.executable, "-m", "nsysaudit", "analyze", "--json", str(export)], capture_output=True,
                          text=True, env={**os.environ, **env}, check=False, timeout=300)
    for limit in (GiB, 3 * GiB // 2):
        done = limited(limit, "analyze", "--json", export, env=env)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr[-2000:]
        assert done.stdout == free.stdout


def test_a_stream_that_ends_under_a_command_is_no_false_aborted(capsys, monkeypatch) -> None:
    """click answers an EOFError as Ctrl-C: an empty line and "aborted", exit 130."""
    def ended(*args: object, **kwargs: object) -> None:
        raise EOFError("Ran out of input")

    monkeypatch.setattr("nsysaudit.session.analyze_trace", ended)
    code, out, err = run(capsys, "analyze", "--json", OBSERVE)
    assert (code, out) == (2, "") and err.count("\n") == 1 and "aborted" not in err
    assert err.startswith("nsysaudit: error: a stream ended unexpectedly (EOFError: Ran out of input")


@pytest.mark.parametrize("way", ["pairs", "per-thread"])
def test_the_ranges_holding_each_row_equal_brute_force(way: Literal["pairs", "per-thread"]) -> None:
    """held_by, both ways (one query over the pairs; an inequality join per thread), against the
    pairs in Python: every range of the row's thread that starts at or before it and ends at or after
    it, zero-length rows and ranges, ties and threads without ranges included."""
    rng = random.Random(7)
    for _ in range(60):
        points = [(i, rng.randint(1, 4), s, s + rng.choice([0, 0, 1, rng.randint(0, 30)]))
                  for i, s in enumerate(rng.randint(0, 100) for _ in range(rng.randint(0, 25)))]
        ranges = [(j, rng.randint(1, 3), a, a + rng.choice([0, rng.randint(0, 80)]), f"r{j}")
                  for j, a in enumerate(rng.randint(0, 100) for _ in range(rng.randint(0, 15)))]
        got = held_by(
            pl.DataFrame(points, schema={c: pl.Int64 for c in ("_row", "gtid", "start_ns", "end_ns")}, orient="row"),
            pl.DataFrame(ranges, schema={**{c: pl.Int64 for c in ("range_id", "gtid", "r_start", "r_end")},
                                         "text": pl.String}, orient="row"),
            "start_ns", "end_ns", way=way,
        )
        assert got.columns == ["_row", "start_ns", "end_ns", "range_id", "r_start", "r_end", "text"]
        want = sorted((i, s, e, j, a, b, t) for i, g, s, e in points for j, rg, a, b, t in ranges
                      if g == rg and a <= s and b >= e)
        assert sorted(got.iter_rows()) == want
