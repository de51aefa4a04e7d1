#!/usr/bin/env python3
"""What the device-memory ledger costs at scale: analyze on an export with memory events (ledger
claimed) against the same file with its memory-usage table dropped (no ledger claimed).

    python benchmarks/ledger_scale.py [--rows 2000000 20000000] [--repeat 3] [--out DIR]
        [--code LABEL=SRC ...] [--nsys] [--results FILE.md]

For each size it generates (once, cached in --out) ``lb-N-on.sqlite`` with
benchmarks/make_export.py and copies it to ``lb-N-off.sqlite`` with
``DROP TABLE CUDA_GPU_MEMORY_USAGE_EVENTS`` (no VACUUM: the CUDA API table's pages are the
same; an export without deallocation events claims a ledger too: nothing freed is evidence).
It checks once, untimed, that ``analyze --json`` claims the ledger on the first and not on the
second, then times whole processes interleaved
round-robin (as benchmarks/run.py does, page cache warmed by that check):

- ``analyze``: ``python -P -m nsysaudit analyze FILE --json`` on each file, with this checkout's
  code and with each ``--code LABEL=SRC`` (SRC: a directory holding another version's
  ``nsysaudit`` package, put first on PYTHONPATH);
- ``sql``: the plain SQL census of benchmarks/run.py on the "on" file;
- ``nsys``: ``nsys stats -r cuda_api_sum`` on the "on" file (with --nsys).

Reported: median wall time, peak RSS (GNU time's %M), the ratio ledger/no-ledger of the same
code, and against sql; the 1-minute load average before and after each size.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from make_export import generate  # noqa: E402
from run import QUERY, Sample, find_nsys, machine, run_once  # noqa: E402


def ensure_pair(out: Path, rows: int) -> tuple[Path, Path]:
    """The export with memory events and its copy without its memory-usage table."""
    out.mkdir(parents=True, exist_ok=True)
    on, off = out / f"lb-{rows}-on.sqlite", out / f"lb-{rows}-off.sqlite"
    if not on.exists():
        tmp = on.with_suffix(".tmp")
        t = time.perf_counter()
        print(generate(tmp, rows).line(), file=sys.stderr)
        tmp.rename(on)
        print(f"generated {on} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    if not off.exists():
        tmp = off.with_suffix(".tmp")
        shutil.copyfile(on, tmp)
        con = sqlite3.connect(tmp, isolation_level=None)
        con.execute("DROP TABLE CUDA_GPU_MEMORY_USAGE_EVENTS")
        con.close()
        tmp.rename(off)
    return on, off


def check_ledger(cmd: list[str], env: dict[str, str], claimed: bool) -> dict[str, int]:
    """Run ``cmd`` once (warming the page cache) and check what it says about the ledger."""
    proc = subprocess.run(cmd, capture_output=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode()[-2000:]}")
    memory = orjson.loads(proc.stdout)["memory"]
    if memory["ledger"] is not claimed:
        raise SystemExit(f"{' '.join(cmd)}: memory.ledger is {memory['ledger']}, expected {claimed}")
    return {"events": memory["events"], "deallocations": memory["deallocation_events"]}


def bench(rows: int, repeat: int, out: Path, codes: dict[str, str | None], nsys: bool
          ) -> tuple[dict[str, list[Sample]], dict[str, str], list[str]]:
    on, off = ensure_pair(out, rows)
    tmp = Path(tempfile.mkdtemp(prefix="nsysaudit-ledger-"))
    base = dict(os.environ, NSYSAUDIT_CACHE=str(tmp / "cache"))
    commands: dict[str, tuple[list[str], dict[str, str]]] = {}
    notes = []
    for label, src in codes.items():
        env = dict(base, PYTHONPATH=src) if src else base
        for name, path, claimed in (("ledger", on, True), ("no ledger", off, False)):
            cmd = [sys.executable, "-P", "-m", "nsysaudit", "analyze", str(path), "--json"]
            seen = check_ledger(cmd, env, claimed)
            notes.append(f"{label}, {name}: {seen['events']:,} memory events, "
                         f"{seen['deallocations']:,} deallocations")
            commands[f"analyze {label} | {name}"] = (cmd, env)
    sqlite3_cli = shutil.which("sqlite3")
    if sqlite3_cli:
        commands["sql | -"] = ([sqlite3_cli, str(on), QUERY], base)
    nsys_cli = find_nsys() if nsys else None
    if nsys_cli:
        commands["nsys | -"] = ([nsys_cli, "stats", "-r", "cuda_api_sum", "--format", "csv",
                                 "--force-export", "false", str(on)], base)
    load = [f"before {os.getloadavg()[0]:.2f}"]
    samples: dict[str, list[Sample]] = {k: [] for k in commands}
    try:
        for name, (cmd, env) in commands.items():
            if not name.startswith("analyze"):
                run_once(cmd, env)  # warm, untimed
        for _ in range(repeat):
            for name, (cmd, env) in commands.items():
                samples[name].append(run_once(cmd, env))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load.append(f"after {os.getloadavg()[0]:.2f}")
    return samples, {"load": ", ".join(load)}, notes


def summarize(rows: int, samples: dict[str, list[Sample]], info: dict[str, str], notes: list[str]
              ) -> list[str]:
    med = {k: statistics.median(s.seconds for s in v) for k, v in samples.items()}
    rss = {k: max(s.max_rss_kb for s in v) for k, v in samples.items()}
    lines = [f"### {rows:,} CUDA API rows (1-min load average {info['load']})", "",
             *(f"- {n}" for n in notes), "",
             "| command | ledger | median wall (s) | runs (s) | peak RSS (MiB) | ledger / no ledger "
             "| vs sql |", "|---|---|---|---|---|---|---|"]
    for k, v in samples.items():
        cmd, ledger = k.split(" | ")
        twin = f"{cmd} | no ledger"
        ratio = f"{med[k] / med[twin]:.2f}x" if ledger == "ledger" and twin in med else ""
        vs_sql = f"{med[k] / med['sql | -']:.2f}x" if "sql | -" in med else "n/a"
        runs = " ".join(f"{s.seconds:.2f}" for s in v)
        lines.append(f"| {cmd} | {ledger} | {med[k]:.2f} | {runs} | {rss[k] / 1024:.0f} | {ratio} "
                     f"| {vs_sql} |")
    if "nsys | -" in med:
        for k in med:
            if k.startswith("analyze"):
                lines.append(f"\n{k}: {med['nsys | -'] / med[k]:.2f}x faster than nsys stats.")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[2_000_000, 20_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "data")
    ap.add_argument("--code", action="append", default=[], metavar="LABEL=SRC",
                    help="also time another nsysaudit source tree (SRC/nsysaudit)")
    ap.add_argument("--nsys", action="store_true", help="also time nsys stats -r cuda_api_sum")
    ap.add_argument("--results", type=Path, default=None, help="write the Markdown here")
    a = ap.parse_args(argv)
    codes: dict[str, str | None] = {"this checkout": None}
    for spec in a.code:
        label, _, src = spec.partition("=")
        if not (Path(src) / "nsysaudit" / "__init__.py").exists():
            ap.error(f"--code {spec}: no nsysaudit package in {src}")
        codes[label] = str(Path(src).resolve())
    report = [f"Machine: {machine()}", ""]
    for rows in a.rows:
        samples, info, notes = bench(rows, a.repeat, a.out, codes, a.nsys)
        report += [*summarize(rows, samples, info, notes), ""]
        print("\n".join(report), file=sys.stderr, flush=True)
    text = "\n".join(report)
    print(text)
    if a.results:
        a.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
