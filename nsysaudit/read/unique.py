"""Rows the rules assume unique, checked: where two rows of one key disagree, the value is unknown.

nsys writes one row per device in ``TARGET_INFO_GPU``, one per process in ``PROCESSES``, one name
per thread in ``ThreadNames``, one value per metadata name, one name per enum id. A rule that reads
"the" row of a key would otherwise take the first or the last one silently: a second
``TARGET_INFO_GPU`` row with another total would set the bound on free memory, a second ``RANK``
the rank. Here such rows are merged into one per key, each column the value every row of the key
agrees on, else NULL (unknown), and a ``conflicting_rows`` warning names the table, the key and the
values (rows that agree are the same evidence twice: merged without a word). Never a pick.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

import polars as pl

from nsysaudit.core.errors import ReportWarning
from nsysaudit.core.reasons import Reason
from nsysaudit.words import warned

K = TypeVar("K")
V = TypeVar("V")
EXAMPLES = 3


def one_per_key(
    frame: pl.DataFrame, key: Sequence[str], table: str, columns: Mapping[str, str] | None = None,
    *, code: str = "rows_of_one_key_disagree", kind: str = "conflicting_rows",
) -> tuple[pl.DataFrame, list[ReportWarning]]:
    """``frame`` with one row per ``key`` (in the order each key first appears), each other column the
    value all the key's rows agree on (a NULL is a value: NULL and 5 disagree), else NULL; and a
    ``kind`` warning worded by ``code`` when some key's rows disagree. ``columns`` names the frame's
    columns as the table spells them, for the warning."""
    others = [c for c in frame.columns if c not in key]
    if frame.height == frame.select(key).unique().height:
        return frame, []
    grouped = frame.group_by(list(key), maintain_order=True).agg(
        *[pl.col(c).unique(maintain_order=True).alias(c) for c in others]
    )
    disagree = [pl.col(c).list.len() > 1 for c in others]
    conflicts = grouped.filter(pl.any_horizontal(disagree)) if others else grouped.clear()
    merged = grouped.with_columns(
        pl.when(pl.col(c).list.len() == 1).then(pl.col(c).list.first()).otherwise(None).alias(c) for c in others
    ).select(frame.columns)
    if not conflicts.height:
        return merged, []
    named = columns or {}
    examples = []
    for row in conflicts.head(EXAMPLES).iter_rows(named=True):
        which = ", ".join(f"{named.get(k, k)} {row[k]}" for k in key)
        values = "; ".join(
            f"{named.get(c, c)} " + " or ".join(_shown(v) for v in row[c]) for c in others if len(row[c]) > 1
        )
        examples.append(f"{which} ({values})")
    more = f" and {conflicts.height - EXAMPLES} more" if conflicts.height > EXAMPLES else ""
    return merged, [warned(
        Reason.of(code, table=table, examples="; ".join(examples), more=more), conflicts.height, kind=kind,
    )]


def _shown(value: object) -> str:
    if value is None:
        return "NULL"
    return f"{value:,}" if type(value) is int else repr(value)


def agreed(pairs: Iterable[tuple[K, V]]) -> tuple[dict[K, V], dict[K, list[V]]]:
    """The keys of ``pairs`` whose values all agree, with that value, and the keys whose values
    disagree, with their distinct values in the order met (for a mapping read from rows, such as an
    enum's id -> name: a key named twice differently is unknown, never the last row's)."""
    seen: dict[K, list[V]] = {}
    for k, v in pairs:
        values = seen.setdefault(k, [])
        if v not in values:
            values.append(v)
    return ({k: vs[0] for k, vs in seen.items() if len(vs) == 1},
            {k: vs for k, vs in seen.items() if len(vs) > 1})


def disagreement(table: str, what: str, conflicts: Mapping[K, list[V]]) -> list[ReportWarning]:
    """One ``conflicting_rows`` warning for the keys of a mapping whose rows disagree (none: none)."""
    if not conflicts:
        return []
    items = list(conflicts.items())
    shown = "; ".join(f"{_shown(k)}: " + " or ".join(_shown(v) for v in vs) for k, vs in items[:EXAMPLES])
    more = f" and {len(items) - EXAMPLES} more" if len(items) > EXAMPLES else ""
    return [warned(
        Reason.of("rows_disagree_on_value", table=table, what=what, shown=shown, more=more),
        len(items), kind="conflicting_rows",
    )]
