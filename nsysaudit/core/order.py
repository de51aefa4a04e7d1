"""A frame's rows in the order of some integer columns, stable, at a fraction of polars' CPU.

polars sorts by several columns either with a parallel unstable sort or, when every column's nulls
go last, by encoding each row into bytes and merge-sorting them (memcmp on every comparison). At
1.94M rows by three ``Int64`` columns that is 0.52 s of CPU; numpy's ``lexsort`` (one stable sort
per column, fast on the runs a rowid-ordered read already holds) does it in 0.11 s
(benchmarks/RESULTS.md, branch p20m). :func:`sort_stable` gives polars'
``sort(by, nulls_last=..., maintain_order=True)``, row for row: ascending, rows of equal keys in
the frame's order. numpy is imported only for a frame large enough to pay for it (a small export's
``analyze`` imports no numpy: tests/test_cli_startup.py).

Rows a reader gives are often in order already, wholly or by the last keys: the CUDA API rows are
read in start order, so ``(gtid, start, correlation)`` needs only the thread's key sorted, stably.
The longest run of last keys the frame is already in order by is found first (one comparison of
neighbouring rows per key); only the keys before it are sorted, and a frame in order by them all is
returned as it is (at 20M CUDA API rows four of the analysis's large sorts).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import numpy as np

# Below this many rows polars' own sort is used (its cost there is a few milliseconds).
LEXSORT_MIN_ROWS = 1 << 16


def sort_stable(frame: pl.DataFrame, by: Sequence[str], *, nulls_last: bool = False) -> pl.DataFrame:
    """``frame.sort(by, nulls_last=nulls_last, maintain_order=True)``: ascending by ``by``, nulls
    first (or last, with ``nulls_last``), rows of equal keys in ``frame``'s order. Integer keys of a
    large frame are ordered by numpy's stable ``lexsort`` (a null as its own key, before the value's);
    any other frame by polars."""
    if frame.height < LEXSORT_MIN_ROWS or not all(frame.schema[name].is_integer() for name in by):
        return frame.sort(list(by), nulls_last=nulls_last, maintain_order=True)
    import numpy as np

    keys = []  # lexsort's last key is the first to order by
    for name in reversed(by):
        column = frame.get_column(name)
        if column.null_count():
            keys.append(column.fill_null(0).to_numpy())
            keys.append((column.is_null() if nulls_last else column.is_not_null()).to_numpy())
        else:
            keys.append(column.to_numpy())
    needed = _unordered_keys(keys)
    if not needed:
        return frame
    return frame[pl.Series(np.lexsort(keys[-needed:]), dtype=pl.Int64)]


def _unordered_keys(keys: list[np.ndarray]) -> int:
    """How many of the keys (``keys`` in lexsort's order: the last to order by first) a stable sort
    needs: all but the longest run of last keys the rows are in order by already (each pair of
    neighbouring rows increasing there, or equal and in order by the keys after), since a stable sort
    by the others keeps rows equal in them in that order. 0: the rows are in order by every key."""
    import numpy as np

    if not keys:
        return 0
    ordered = np.ones(max(len(keys[0]) - 1, 0), dtype=bool)  # neighbours in order by the keys so far
    in_order = 0  # the longest run of last keys the rows are in order by
    for i, key in enumerate(keys):
        before, after = key[:-1], key[1:]
        ordered = (before < after) | ((before == after) & ordered)
        if ordered.all():
            in_order = i + 1
    return len(keys) - in_order
