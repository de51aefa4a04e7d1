#!/usr/bin/env python3
"""Batch throughput: ``nsysaudit.run_batch`` with ``jobs=1``, ``jobs=2`` and the dask engine.

    python benchmarks/fleet.py [--copies 200] [--large 3] [--rows 2000000] [--repeat 3] [--out DIR]

Two input sets: ``--copies`` copies of the bundled real exports (tests/fixtures, round-robin) and
``--large`` exports of ``--rows`` CUDA API rows made by benchmarks/make_export.py. Each batch runs
in a fresh driver process (``--driver`` mode of this script) writing a fresh ``--out`` folder, so
the timing includes starting the workers, and the driver reports its own peak RSS
(``RUSAGE_SELF``: the driver only, not its workers). The single-file baseline is
``nsysaudit analyze --json FILE`` as a process, on the smallest real export. Configurations run
interleaved round-robin, ``--repeat`` times; medians are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CONFIGS = (("local", 1), ("local", 2), ("dask", 2))


def driver(args: argparse.Namespace) -> None:
    import nsysaudit

    paths = [line for line in Path(args.inputs).read_text().splitlines() if line]
    start = time.perf_counter()
    result = nsysaudit.run_batch(paths, jobs=args.jobs, engine=args.engine, out=args.batch_out)
    seconds = time.perf_counter() - start
    errors = result.inputs["error"].drop_nulls().len()
    me = resource.getrusage(resource.RUSAGE_SELF)
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # worker processes, reaped by now
    cpu = me.ru_utime + me.ru_stime + workers.ru_utime + workers.ru_stime
    print(json.dumps({"seconds": seconds, "inputs": result.inputs.height, "errors": errors, "peak_kb": me.ru_maxrss,
                      "cpu": cpu}))


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--large", type=int, default=3)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="work folder (default: a temporary one)")
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--inputs", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--batch-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.driver:
        driver(args)
        return
    work = args.out or Path(tempfile.mkdtemp(prefix="nsysaudit-fleet-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    real = sorted((REPO / "tests" / "fixtures").rglob("*.sqlite"))
    small = work / "small"
    small.mkdir(exist_ok=True)
    for i in range(args.copies):
        target = small / f"{i:04d}-{real[i % len(real)].name}"
        if not target.exists():
            shutil.copyfile(real[i % len(real)], target)
    large = work / "large"
    large.mkdir(exist_ok=True)
    for i in range(args.large):
        target = large / f"large-{i}.sqlite"
        if not target.exists():
            subprocess.run(
                [sys.executable, str(HERE / "make_export.py"), str(target), "--rows", str(args.rows), "--seed", str(i)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
    sets = {"small": sorted(small.glob("*.sqlite")), "large": sorted(large.glob("*.sqlite"))}
    lists = {}
    for name, paths in sets.items():
        lists[name] = work / f"{name}.txt"
        lists[name].write_text("\n".join(map(str, paths)) + "\n")

    results: dict[tuple[str, str, int], list[dict[str, float]]] = {}
    baseline: list[float] = []
    smallest = min(real, key=lambda p: p.stat().st_size)
    nsysaudit_cli = [sys.executable, "-m", "nsysaudit", "analyze", "--json", str(smallest)]
    loads = os.getloadavg()
    for repeat in range(args.repeat):
        baseline.append(timed(nsysaudit_cli))
        for name in sets:
            for engine, jobs in CONFIGS:
                out = work / f"out-{name}-{engine}-{jobs}-{repeat}"
                shutil.rmtree(out, ignore_errors=True)
                proc = subprocess.run(
                    [sys.executable, __file__, "--driver", "--inputs", str(lists[name]), "--jobs", str(jobs),
                     "--engine", engine, "--batch-out", str(out)],
                    capture_output=True, text=True, check=True,
                )
                sample = json.loads(proc.stdout.strip().splitlines()[-1])
                assert sample["errors"] == 0, sample
                results.setdefault((name, engine, jobs), []).append(sample)
                shutil.rmtree(out, ignore_errors=True)
                print(f"repeat {repeat}: {name} {engine} jobs={jobs}: {sample['seconds']:.2f} s", file=sys.stderr)

    cores = len(os.sched_getaffinity(0))
    print(f"Machine: {cores} cores, Python {sys.version.split()[0]}; {args.repeat} repeats, medians; "
          f"load average {loads[0]:.1f} before, {os.getloadavg()[0]:.1f} after.\n")
    start_ms = statistics.median(baseline) * 1000
    print(f"Single-file baseline: `nsysaudit analyze --json {smallest.relative_to(REPO)}` as a process: "
          f"{start_ms:.0f} ms (median).\n")
    for name, paths in sets.items():
        size = sum(p.stat().st_size for p in paths) / 2**20
        print(f"### {name}: {len(paths)} exports, {size:,.0f} MiB\n")
        print("| engine | jobs | wall (s) | reports/s | speed-up vs jobs=1 | wall per report (ms) "
              "| CPU per report (ms) | driver peak RSS (MiB) |")
        print("|---|---|---|---|---|---|---|---|")
        one = statistics.median(s["seconds"] for s in results[(name, "local", 1)])
        for engine, jobs in CONFIGS:
            samples = results[(name, engine, jobs)]
            wall = statistics.median(s["seconds"] for s in samples)
            peak = statistics.median(s["peak_kb"] for s in samples) / 1024
            cpu = statistics.median(s["cpu"] for s in samples)
            print(f"| {engine} | {jobs} | {wall:.2f} | {len(paths) / wall:.1f} | {one / wall:.2f}x | "
                  f"{wall / len(paths) * 1000:.0f} | {cpu / len(paths) * 1000:.0f} | {peak:.0f} |")
        print()


if __name__ == "__main__":
    main()
