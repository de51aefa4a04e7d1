#!/usr/bin/env python3
"""What the host-stall analysis costs: ``nsysaudit analyze --json`` of one export without GPU activity
tables and of the same export with them (benchmarks/make_export.py ``--kernels-per-launch``), the
same code, interleaved round-robin; the median wall time of each, their ratio, and the peak RSS.

    python benchmarks/stalls.py [--rows 20000000] [--kernels-per-launch 2.45] [--repeat 3] [--out DIR]
                                [--nsysaudit PATH]

Both files have the same CUDA API rows (the same seed): the difference is the GPU tables alone, which
the analysis reads (with SQLite's damage check of each) only for the host stalls (docs/stalls.md).
The load average is printed beside the numbers: on a shared machine the ratio, taken within one run,
is what to compare. This is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_export import add_gpu_tables, generate  # noqa: E402
from run import Sample, run_once  # noqa: E402


def exports(out: Path, rows: int, kernels_per_launch: float) -> tuple[Path, Path]:
    """``(without, with)`` GPU tables, made once into ``out`` (the second a copy of the first, then filled)."""
    out.mkdir(parents=True, exist_ok=True)
    plain = out / f"stalls-{rows}.sqlite"
    gpu = out / f"stalls-{rows}-k{kernels_per_launch:g}.sqlite"
    if not plain.exists():
        t = time.perf_counter()
        generate(plain.with_suffix(".tmp"), rows)
        plain.with_suffix(".tmp").rename(plain)
        print(f"generated {plain} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if not gpu.exists():
        t = time.perf_counter()
        tmp = gpu.with_suffix(".tmp")
        shutil.copyfile(plain, tmp)
        counts = add_gpu_tables(tmp, kernels_per_launch)
        tmp.rename(gpu)
        print(f"generated {gpu} in {time.perf_counter() - t:.1f} s: {counts}", file=sys.stderr)
    return plain, gpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=20_000_000)
    ap.add_argument("--kernels-per-launch", type=float, default=2.45)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "data")
    ap.add_argument("--nsysaudit", default=shutil.which("nsysaudit") or "nsysaudit")
    a = ap.parse_args(argv)
    plain, gpu = exports(a.out, a.rows, a.kernels_per_launch)
    samples: dict[str, list[Sample]] = {"without GPU tables": [], "with GPU tables": []}
    loads = []
    for _ in range(a.repeat):
        for name, path in (("without GPU tables", plain), ("with GPU tables", gpu)):
            loads.append(os.getloadavg()[0])
            samples[name].append(run_once([a.nsysaudit, "analyze", str(path), "--json"]))
    medians = {name: statistics.median(s.seconds for s in runs) for name, runs in samples.items()}
    print(f"{a.rows:,} CUDA API rows, {a.kernels_per_launch:g} kernels per launch; load average "
          f"{min(loads):.1f}-{max(loads):.1f} during the runs")
    print("| export | median wall (s) | runs (s) | peak RSS (MiB) |")
    print("|---|---|---|---|")
    for name, runs in samples.items():
        walls = ", ".join(f"{s.seconds:.2f}" for s in runs)
        print(f"| {name} | {medians[name]:.2f} | {walls} | {max(s.max_rss_kb for s in runs) / 1024:.0f} |")
    ratio = medians["with GPU tables"] / medians["without GPU tables"]
    print(f"with / without: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
