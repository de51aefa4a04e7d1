"""A batch over a job's reports, by rank: the device and rank columns of its rows, and the summary
line that names the failing rank(s).

Each input row gains what its analysis document says (``devices``, ``ranks``; see
:mod:`nsysaudit.analysis.devices`): which devices its processes used, the rank its processes state
(one per-rank report: its rank; one report of every rank: every rank stated) and the ranks and
devices of its findings. A rank is only what a row of the evidence states, never the file name.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypedDict

import polars as pl

from nsysaudit.core.text import escape
from nsysaudit.reports.documents import Process, Ranks, TargetDevice
from nsysaudit.reports.ranks import DocumentKeys


def _joined(values: Iterable[int]) -> str | None:
    said = [str(v) for v in values]
    return ", ".join(said) if said else None


class RankColumns(TypedDict):
    """The device and rank columns of one input's row, the joined ones also as lists (batch/output.py's
    InputRow holds them; the inputs table's columns are made from it)."""

    devices: int
    devices_used: str | None
    rank: int | None
    rank_source: str | None
    ranks: str | None
    failing_ranks: str | None
    failing_rank_unknown: int
    failing_devices: str | None
    devices_used_list: list[str]
    ranks_list: list[int]
    failing_ranks_list: list[int]
    failing_devices_list: list[int]


def input_columns(doc: DocumentKeys) -> RankColumns:
    """The :class:`RankColumns` of one analysis document (``doc``: its keys, as batch/run.py holds
    them; its ``devices``, ``processes`` and ``ranks`` are read)."""
    return _columns(doc["devices"], doc["processes"], doc["ranks"])


def _columns(
    devices: Sequence[TargetDevice], processes: Sequence[Process], ranks: Ranks
) -> RankColumns:
    used = []
    for d in devices:
        if d["processes"]:
            said = ", ".join(x for x in (d["name"], d["bus_location"]) if x)
            used.append(f"{d['device_id']}" + (f" ({said})" if said else ""))
    stated = [p for p in processes if p["rank"] is not None]
    one = {p["rank"] for p in stated}
    failing_devices = sorted({i for f in ranks["failing"] if (i := f["device_id"]) is not None})
    return {
        "devices": len(devices),
        "devices_used": "; ".join(used) or None,
        "rank": next(iter(one)) if len(one) == 1 else None,
        "rank_source": stated[0]["rank_source"] if len(one) == 1 and len(stated) == 1 else None,
        "ranks": _joined(ranks["ranks"]),
        "failing_ranks": _joined(ranks["failing_ranks"]),
        "failing_rank_unknown": ranks["failing_rank_unknown"],
        "failing_devices": _joined(failing_devices),
        "devices_used_list": used,
        "ranks_list": list(ranks["ranks"]),
        "failing_ranks_list": list(ranks["failing_ranks"]),
        "failing_devices_list": failing_devices,
    }


def summary_line(inputs: pl.DataFrame) -> str | None:
    """ "failing rank(s): 1 (report_1.sqlite, device 1); rank unknown in job.sqlite (device 1)": the
    failing ranks of the batch and where they are; None when no input has several devices or a
    stated rank (a batch of single-GPU reports reads as it always did)."""
    if "ranks" not in inputs.columns:
        return None
    rows = inputs.filter(pl.col("status").is_in(["analyzed", "resumed"])).to_dicts()
    if not any(r.get("ranks") is not None or (r.get("devices") or 0) > 1 for r in rows):
        return None
    failing, unknown = [], []
    for r in rows:
        where = f", device {r['failing_devices']}" if r.get("failing_devices") else ""
        if r.get("failing_ranks"):
            failing.append(f"{r['failing_ranks']} ({escape(r['path'])}{where})")
        if r.get("failing_rank_unknown"):
            unknown.append(f"{escape(r['path'])}{' (' + where[2:] + ')' if where else ''}")
    analyzed = sorted({int(x) for r in rows if r.get("ranks") for x in str(r["ranks"]).split(", ")})
    text = "failing rank(s): " + ("; ".join(failing) if failing else "none")
    if unknown:
        text += "; rank unknown in " + "; ".join(unknown)
    return text + f" (ranks stated: {', '.join(map(str, analyzed)) or 'none'})"
