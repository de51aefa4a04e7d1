#!/usr/bin/env python3
"""Process start to exit, A against B: whole processes interleaved, ratios of the pairs.

    python benchmarks/startup.py [--pairs 10] [--file EXPORT] [--before PATH/TO/nsysaudit | --before-src DIR]
                                 [--check] [--census] [--no-floors]

Runs, round after round (the order rotated each round, so that the machine's noise falls on every
command alike): ``nsysaudit analyze FILE --json`` (stdout to /dev/null) of this checkout's venv and,
with ``--before``, of another install (e.g. main's checkout, ``/work/main/.venv/bin/nsysaudit``) or,
with ``--before-src DIR``, of another checkout's package run by this venv (``PYTHONPATH=DIR``: the
same interpreter and libraries, whose pages are as warm for both; DIR holds ``nsysaudit/``,
byte-compiled, with its native extension), ``python -c "import polars"`` and ``python -c pass`` of
this Python. For each: the median and the minimum of the wall time, of the CPU (user + system of the
whole process, from wait4's rusage) and the peak RSS; then the median of the per-round ratios of each
command to the others (wall and CPU), and the load average before and after. ``--check`` first
compares the two builds' JSON, byte for byte; ``--census`` adds benchmarks/run.py's sqlite3 census of
FILE. This is a benchmark, not a test: no test times anything (issue 33's start-up target is 1.5x
``python -c "import polars"`` for the bundled 1,229-row export, the default FILE).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import QUERY as CENSUS  # noqa: E402
from run import TORCH as DEFAULT_FILE  # noqa: E402
from run import run_once as run_process  # noqa: E402

Command = tuple[list[str], dict[str, str] | None]  # argv, environment (None: this one)


def run_once(command: Command) -> tuple[float, float, float]:
    """Wall (s), CPU (s: user + system) and peak RSS (MiB) of one process (benchmarks/run.py's
    measure of it)."""
    sample = run_process(*command)
    return sample.seconds, sample.cpu, sample.max_rss_kb / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=10, help="rounds (each runs every command once)")
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE)
    ap.add_argument("--before", help="another install's nsysaudit script (the reference)")
    ap.add_argument("--before-src", help="another checkout's package (a folder holding nsysaudit/), run by this venv")
    ap.add_argument("--check", action="store_true", help="first compare the two installs' JSON (byte for byte)")
    ap.add_argument("--no-floors", action="store_true", help='leave out python -c "import polars" and pass')
    ap.add_argument("--census", action="store_true",
                    help="add the sqlite3 census (run.py's sql: one GROUP BY over the CUDA API table) of FILE")
    args = ap.parse_args()

    here = str(Path(sys.executable).parent / "nsysaudit")
    analyze = ["analyze", str(args.file), "--json"]
    commands: dict[str, Command] = {"after": ([here, *analyze], None)}
    if args.before:
        commands["before"] = ([args.before, *analyze], None)
    elif args.before_src:
        commands["before"] = ([here, *analyze], {**os.environ, "PYTHONPATH": str(Path(args.before_src).resolve())})
    if args.census:
        sqlite3_cli = shutil.which("sqlite3")
        if sqlite3_cli is None:
            raise SystemExit("--census needs the sqlite3 command")
        commands["census"] = ([sqlite3_cli, str(args.file), CENSUS], None)
    if not args.no_floors:
        commands["import polars"] = ([sys.executable, "-c", "import polars"], None)
        commands["pass"] = ([sys.executable, "-c", "pass"], None)

    if args.check and "before" in commands:
        outs = [subprocess.run(commands[k][0], env=commands[k][1], capture_output=True, check=False).stdout
                for k in ("after", "before")]
        print(f"JSON of after and before: {'identical' if outs[0] == outs[1] else 'DIFFERENT'} ({len(outs[0])} bytes)")
        if outs[0] != outs[1]:
            raise SystemExit(1)

    names = list(commands)
    for name in names:  # a warm-up each: the page cache, the bytecode
        run_once(commands[name])
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    for r in range(args.pairs):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            samples[name].append(run_once(commands[name]))
    load_after = Path("/proc/loadavg").read_text().split()[:3]

    print(f"{args.pairs} rounds, file {args.file.name}; load average before {' '.join(load_before)}, "
          f"after {' '.join(load_after)}")
    print()
    print("| command | wall median (s) | wall min (s) | CPU median (s) | CPU min (s) | peak RSS (MiB) |")
    print("|---|---|---|---|---|---|")
    for name in names:
        wall = [s[0] for s in samples[name]]
        cpu = [s[1] for s in samples[name]]
        rss = max(s[2] for s in samples[name])
        print(f"| {name} | {statistics.median(wall):.3f} | {min(wall):.3f} | {statistics.median(cpu):.3f} | "
              f"{min(cpu):.3f} | {rss:.0f} |")
    print()
    print("| ratio (median of the rounds' ratios) | wall | CPU |")
    print("|---|---|---|")
    for a in [n for n in ("after", "before") if n in samples]:
        for b in names:
            if b == a or (a == "before" and b == "after"):
                continue
            wr = statistics.median(x[0] / y[0] for x, y in zip(samples[a], samples[b], strict=True))
            cr = statistics.median(x[1] / y[1] for x, y in zip(samples[a], samples[b], strict=True))
            print(f"| {a} / {b} | {wr:.3f} | {cr:.3f} |")


if __name__ == "__main__":
    main()
