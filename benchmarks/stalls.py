#!/usr/bin/env python3
"""What the host-stall analysis costs, measured two ways on the same code, interleaved round-robin:

(a) ``nsysaudit analyze --json`` of the export with GPU activity tables against the same command with
    the stall analysis switched off (benchmarks/no_stalls.py, a patch of that process only): what the
    analysis adds to ``analyze`` (issue 32's target: at most +30 %, peak RSS under 1 GiB);
(b) the same ``analyze`` of the export with the GPU tables against the export without them
    (benchmarks/make_export.py ``--kernels-per-launch``): what the larger file costs in all.

    python benchmarks/stalls.py [--rows 20000000] [--kernels-per-launch 2.45] [--repeat 3] [--out DIR]
                                [--nsysaudit PATH]

Both files have the same CUDA API rows (the same seed): the difference is the GPU tables alone, which
the analysis reads (with the damage check of each) only for the host stalls (docs/stalls.md).
Printed: each command's min / median / max of wall and CPU (user + sys) seconds and its peak RSS, the
ratios of the rounds' pairs (median), and the load average (1 minute) beside the numbers: on a shared
machine the ratio, taken within one run, is what to compare, and CPU the steadier figure. This is a
benchmark, not a test.
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
    python = str(Path(a.nsysaudit).resolve().parent / "python")
    commands = {
        "with GPU tables": [a.nsysaudit, "analyze", str(gpu), "--json"],
        "with GPU tables, stalls off": [python, str(HERE / "no_stalls.py"), str(gpu)],
        "without GPU tables": [a.nsysaudit, "analyze", str(plain), "--json"],
    }
    samples: dict[str, list[Sample]] = {name: [] for name in commands}
    loads = []
    for _ in range(a.repeat):
        for name, cmd in commands.items():
            loads.append(os.getloadavg()[0])
            samples[name].append(run_once(cmd))
    print(f"{a.rows:,} CUDA API rows, {a.kernels_per_launch:g} kernels per launch; load average "
          f"{min(loads):.1f}-{max(loads):.1f} during the runs")
    print("| command | wall min / median / max (s) | CPU min / median / max (s) | peak RSS max (MiB) |")
    print("|---|---|---|---|")
    for name, runs in samples.items():
        wall = sorted(x.seconds for x in runs)
        cpu = sorted(x.cpu for x in runs)
        print(f"| {name} | {wall[0]:.2f} / {statistics.median(wall):.2f} / {wall[-1]:.2f} | {cpu[0]:.2f} / "
              f"{statistics.median(cpu):.2f} / {cpu[-1]:.2f} | {max(x.max_rss_kb for x in runs) / 1024:,.0f} |")
    for label, base in (("(a) the stall analysis on / off", "with GPU tables, stalls off"),
                        ("(b) with / without GPU tables", "without GPU tables")):
        pairs = list(zip(samples["with GPU tables"], samples[base], strict=True))
        wall = statistics.median(x.seconds / y.seconds for x, y in pairs)
        cpu = statistics.median(x.cpu / y.cpu for x, y in pairs)
        print(f"{label}: wall {wall:.2f}x, CPU {cpu:.2f}x (medians of {len(pairs)} pairs)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
