#!/usr/bin/env python3
"""What the damage rule costs an analysis: ``analyze`` and its JSON in one process, with SQLite's
quick_check of the evidence tables beside the reading (as it always runs) and without it (here
only), interleaved; the wall and CPU of each, and quick_check's own, alone.

    python benchmarks/damage_cost.py FILE [--rounds 5]

Not a way to run nsysaudit: without the check a damaged file would be read by whatever engine ran.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

import nsysaudit
from nsysaudit.read import damage, source
from nsysaudit.render import write_analysis


def one(path: Path, check: bool) -> tuple[float, float]:
    real = damage.check_export
    if not check:
        damage.check_export = lambda *a, **k: damage.Damage()  # type: ignore[assignment]
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        write_analysis(nsysaudit.analyze(path), io.BytesIO())
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        damage.check_export = real


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args(argv)
    export = source.probe(a.path)
    try:
        tables = damage.evidence_tables(export)
    finally:
        export.close()
    one(a.path, True)  # warm the page cache and the imports
    times: dict[str, list[tuple[float, float]]] = {"with the check": [], "without": [], "quick_check alone": []}
    for _ in range(a.rounds):
        times["with the check"].append(one(a.path, True))
        times["without"].append(one(a.path, False))
        wall, cpu = time.perf_counter(), time.process_time()
        found = damage.check_export(source.readonly_uri(a.path), tables)
        times["quick_check alone"].append((time.perf_counter() - wall, time.process_time() - cpu))
        assert found.damaged is None, found
    print(f"{a.path.name}: {a.rounds} rounds, interleaved; quick_check of {len(tables)} tables")
    print("| in process | median wall (s) | median CPU (s) |")
    print("|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {statistics.median(w for w, _ in t):.2f} | {statistics.median(c for _, c in t):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
