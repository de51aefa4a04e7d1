#!/usr/bin/env python3
"""nsysaudit's own census: the CUDA API scan alone (no library windows, no other table), printed as
``returnValue|count`` lines like the plain SQL census of benchmarks/run.py.

    python benchmarks/scan_only.py FILE

It times what the project's scan engine (native when built, else polars) costs against SQLite's
own ``GROUP BY`` in the same run: the floor under a full ``analyze``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

from nsysaudit.core.intervals import WINDOW_SCHEMA
from nsysaudit.read.scan import ROW_SCHEMA, scan_cuda_api
from nsysaudit.read.source import probe


def census(path: Path) -> tuple[str, dict[int | None, int]]:
    export = probe(path)
    try:
        table = export.table("CUPTI_ACTIVITY_KIND_RUNTIME")
        assert table is not None, f"{path}: no CUDA API table"
        no_windows = pl.DataFrame(schema=WINDOW_SCHEMA)
        scanned = scan_cuda_api(export.conn, path, table.name, table.columns, no_windows, None)
    finally:
        export.close()
    failed = scanned.selected.group_by("return_code").len()
    counts: dict[int | None, int] = {int(k) if k is not None else None: int(n) for k, n in failed.iter_rows()}
    counts[0] = scanned.total - sum(counts.values())
    assert set(scanned.selected.columns) == set(ROW_SCHEMA)
    return scanned.engine, counts


def main(argv: list[str]) -> int:
    engine, counts = census(Path(argv[0]))
    for code in sorted(counts, key=lambda c: (c is None, c or 0)):
        if counts[code]:
            print(f"{'' if code is None else code}|{counts[code]}")
    print(f"engine={engine}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
