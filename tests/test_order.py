"""core/order.sort_stable: polars' stable sort, row for row, whichever engine orders the rows.

Held to ``frame.sort(by, nulls_last=..., maintain_order=True)`` on frames with ties, nulls and
negative keys, with numpy's lexsort forced (the threshold at 0) and above the real threshold; and
the whole analysis of every bundled export is the same bytes with the lexsort forced.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsysaudit.core import order
from nsysaudit.core.order import sort_stable

ROOT = Path(__file__).resolve().parent.parent

keys = st.lists(st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([-(1 << 63), (1 << 63) - 1])),
                min_size=0, max_size=40)


def lexsorted(frame: pl.DataFrame, by: list[str], nulls_last: bool) -> pl.DataFrame:
    """:func:`sort_stable` of ``frame`` with numpy's lexsort forced (the threshold at 0), however small."""
    threshold, order.LEXSORT_MIN_ROWS = order.LEXSORT_MIN_ROWS, 0
    try:
        return sort_stable(frame, by, nulls_last=nulls_last)
    finally:
        order.LEXSORT_MIN_ROWS = threshold


@settings(max_examples=200, deadline=None)
@given(a=keys, b=keys, nulls_last=st.booleans(), two=st.booleans())
def test_the_lexsort_is_polars_stable_sort(a: list[int | None], b: list[int | None], nulls_last: bool,
                                           two: bool) -> None:
    n = min(len(a), len(b))
    frame = pl.DataFrame({"a": a[:n], "b": b[:n], "row": list(range(n))},
                         schema={"a": pl.Int64, "b": pl.Int64, "row": pl.Int64})
    by = ["a", "b"] if two else ["b"]
    expected = frame.sort(by, nulls_last=nulls_last, maintain_order=True)
    assert lexsorted(frame, by, nulls_last).equals(expected)
    assert sort_stable(frame, by, nulls_last=nulls_last).equals(expected)  # polars' own below the threshold


@settings(max_examples=200, deadline=None)
@given(a=keys, b=keys, c=keys, nulls_last=st.booleans(), presorted=st.integers(0, 3), other_nulls=st.booleans())
def test_rows_already_in_order_by_the_last_keys_sort_as_polars_sorts(
    a: list[int | None], b: list[int | None], c: list[int | None], nulls_last: bool, presorted: int,
    other_nulls: bool,
) -> None:
    """A frame in order by its last ``presorted`` keys already (nulls where this sort puts them, or
    not): only the keys before those are sorted, and the rows come out as polars orders them."""
    n = min(len(a), len(b), len(c))
    frame = pl.DataFrame({"a": a[:n], "b": b[:n], "c": c[:n], "row": list(range(n))},
                         schema={"a": pl.Int64, "b": pl.Int64, "c": pl.Int64, "row": pl.Int64})
    by = ["a", "b", "c"]
    if presorted:
        frame = frame.sort(by[-presorted:], nulls_last=nulls_last != other_nulls, maintain_order=True)
    assert lexsorted(frame, by, nulls_last).equals(frame.sort(by, nulls_last=nulls_last, maintain_order=True))


def test_a_large_frame_in_order_is_returned_as_it_is_and_one_in_order_by_its_last_keys_sorted_by_the_first() -> None:
    rng = np.random.default_rng(11)
    n = order.LEXSORT_MIN_ROWS + 1_000
    start = np.sort(rng.integers(0, 10**9, n))
    frame = pl.DataFrame({"gtid": rng.integers(0, 8, n), "start_ns": start, "correlation_id": np.arange(n)})
    by = ["gtid", "start_ns", "correlation_id"]
    ordered = frame.sort(by, maintain_order=True)
    assert sort_stable(ordered, by) is ordered  # nothing to sort
    assert order._unordered_keys([frame[k].to_numpy() for k in reversed(by)]) == 1  # the thread's key only
    assert sort_stable(frame, by).equals(ordered)


@pytest.mark.parametrize("nulls_last", [False, True])
def test_a_large_frame_with_ties_and_nulls(nulls_last: bool) -> None:
    rng = np.random.default_rng(7)
    n = order.LEXSORT_MIN_ROWS + 1_000
    frame = pl.DataFrame({
        "gtid": rng.integers(0, 4, n), "start_ns": rng.integers(-50, 50, n),
        "id": pl.Series(rng.integers(0, 3, n)).scatter(rng.integers(0, n, 500), None),
        "small": pl.Series(rng.integers(0, 9, n), dtype=pl.UInt8), "row": np.arange(n),
    })
    for by in (["gtid", "start_ns", "id"], ["id", "small"], ["small"]):
        assert sort_stable(frame, by, nulls_last=nulls_last).equals(
            frame.sort(by, nulls_last=nulls_last, maintain_order=True))


def test_other_keys_are_sorted_by_polars() -> None:
    frame = pl.DataFrame({"name": ["b", "a", None, "a"], "row": [0, 1, 2, 3]})
    assert sort_stable(frame, ["name"], nulls_last=True)["row"].to_list() == [1, 3, 0, 2]


def analyzed(path: Path) -> bytes:
    """``nsysaudit analyze PATH --json``, run in this process: the bytes it writes."""
    from nsysaudit.cli import main

    buffer = io.BytesIO()
    text = io.TextIOWrapper(buffer)
    with contextlib.redirect_stdout(text):
        assert main(["analyze", str(path), "--json"]) == 0
    text.flush()
    return buffer.getvalue()


def bundled_exports() -> list[Path]:
    exports = sorted((ROOT / "tests/fixtures").rglob("*.sqlite"))
    assert len(exports) > 20
    return exports


def test_every_bundled_export_analyzed_the_same_with_the_lexsort_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    exports = bundled_exports()
    plain = {path: analyzed(path) for path in exports}
    monkeypatch.setattr(order, "LEXSORT_MIN_ROWS", 0)
    for path in exports:
        assert analyzed(path) == plain[path], path


# Run by another process with a pool of this many polars threads (more than this machine has cores).
OTHER_POOL = 5


@pytest.mark.slow
def test_the_answers_do_not_depend_on_polars_threads(tmp_path: Path) -> None:
    """Every bundled export's ``analyze --json``, the same bytes whatever the size of polars' thread
    pool (fixed when polars is imported): this process's (one thread a pytest-xdist worker, as
    tests/conftest.py shares the cores out) and another process's of :data:`OTHER_POOL` threads."""
    assert pl.thread_pool_size() != OTHER_POOL
    exports = bundled_exports()
    script = (
        "import sys, pathlib, polars\n"
        f"assert polars.thread_pool_size() == {OTHER_POOL}\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_order import analyzed\n"
        "for i, p in enumerate(sys.argv[3:]):\n"
        "    (pathlib.Path(sys.argv[2]) / f'{i}.json').write_bytes(analyzed(pathlib.Path(p)))\n"
    )
    env = {**os.environ, "POLARS_MAX_THREADS": str(OTHER_POOL)}
    subprocess.run([sys.executable, "-c", script, str(ROOT / "tests"), str(tmp_path), *map(str, exports)],
                   env=env, check=True, timeout=600)
    for i, path in enumerate(exports):
        assert (tmp_path / f"{i}.json").read_bytes() == analyzed(path), path
