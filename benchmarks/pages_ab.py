#!/usr/bin/env python3
"""Does the native scan's page reader (native/scan.c, ``plan_table`` and ``read_leaves``) earn its
lines? The CUDA API scan of one export by the native engine reading the table's b-tree pages itself
(and checking them as quick_check would: no ``count(*)`` beside it then), against the same reduction
over SQLite's own C API (``nsa_reduce``, an aggregate SQLite's VDBE calls per row, with the
``count(*)`` every engine without the page reader runs beside it), interleaved in one process, with
the arguments ``analyze`` gives it (library windows, marked and counted name ids, allocation keys),
both answers checked equal.

    python benchmarks/pages_ab.py FILE [--rounds 7] [--workers N]

Prints the median wall and CPU (this process's, every thread) of each, and their ratio. The
criterion of issue 22: the page reader stays where its scan is at least 1.5x faster at 20M rows.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from nsysaudit.read import native, scan, trace
from nsysaudit.read.source import probe


def scan_arguments(path: Path) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The arguments ``load`` passes to ``scan_cuda_api`` for ``path`` (one load, its scan replaced)."""
    captured: dict[str, Any] = {}
    real = trace.scan_cuda_api

    def spy(*args: Any, **kwargs: Any) -> scan.CudaApiScan:
        captured["args"], captured["kwargs"] = args, kwargs
        return real(*args, **kwargs)

    trace.scan_cuda_api = spy
    export = probe(path)
    try:
        trace.load(export)
    finally:
        trace.scan_cuda_api = real
        export.close()
    return captured["args"][2:], {k: v for k, v in captured["kwargs"].items() if k != "progress"}


def one(path: Path, args: tuple[Any, ...], kwargs: dict[str, Any], pages: bool) -> tuple[float, float, Any]:
    real_classes = scan.column_classes
    if not pages:  # no plan of the pages at all: neither read nor checked by the page reader
        scan.column_classes = lambda *a, **k: None  # type: ignore[assignment]
    export = probe(path)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        got = scan.scan_cuda_api(export.conn, path, *args, **kwargs)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    finally:
        scan.column_classes = real_classes
        export.close()
    assert got.engine == "native" and (got.page_rows == got.total) == pages, (got.engine, got.page_rows, got.total)
    return wall, cpu, got


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    if native.load() is None:
        raise SystemExit(f"the native engine is {native.unavailable()}")
    args, kwargs = scan_arguments(a.path)
    if a.workers:
        kwargs["workers"] = a.workers
    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    answers = {}
    for _ in range(a.rounds):
        for pages in (True, False):
            wall, cpu, got = one(a.path, args, kwargs, pages)
            times[pages].append((wall, cpu))
            answers[pages] = got
    fast, plain = answers[True], answers[False]
    assert fast.total == plain.total and fast.selected.equals(plain.selected) and fast.span.equals(plain.span)
    assert fast.problems == plain.problems and fast.alloc_rows.equals(plain.alloc_rows)
    med = {p: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for p, t in times.items()}
    print(f"{a.path.name}: {fast.total:,} rows, {a.rounds} rounds, interleaved; the same answer both ways")
    print("| scan | median wall (s) | median CPU (s) |")
    print("|---|---|---|")
    print(f"| native, the table's pages | {med[True][0]:.2f} | {med[True][1]:.2f} |")
    print(f"| native, SQLite's C API (VDBE) | {med[False][0]:.2f} | {med[False][1]:.2f} |")
    print(f"page reader: {med[False][0] / med[True][0]:.2f}x faster (wall), {med[False][1] / med[True][1]:.2f}x (CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
