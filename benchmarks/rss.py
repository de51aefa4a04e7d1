#!/usr/bin/env python3
"""Where the peak RSS of one ``nsysaudit analyze FILE --json`` is reached: this process's resident
memory sampled every few milliseconds (/proc/self/statm: polars' and the C engine's memory too,
which tracemalloc does not see) while the command runs in it, with benchmarks/stages.py's stages.

    python benchmarks/rss.py FILE [--every 0.01] [--top 12] [--no-stalls]

Printed: the peak and the stages running at it, and per stage (main thread's and others') the
largest RSS seen while it ran and the RSS at its start. ``--no-stalls``: the host-stall analysis
patched out as benchmarks/no_stalls.py does. Linux only; a benchmark, not a test.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from no_stalls import switch_off  # noqa: E402
from stages import Event, instrument, one_round  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--every", type=float, default=0.01)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--no-stalls", action="store_true")
    a = ap.parse_args(argv)
    if a.no_stalls:
        switch_off()
    events: list[Event] = []
    samples: list[tuple[float, int]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append((time.perf_counter() - T0, rss_bytes()))
            time.sleep(a.every)

    import nsysaudit.cli  # noqa: F401

    instrument(events)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start, end = one_round(a.path, events)
    done.set()
    sampler.join()
    at, peak = max(samples, key=lambda s: s[1])
    mib = 1 << 20
    running = [label for label, s, e, _ in events if s <= at <= e]
    print(f"peak RSS {peak / mib:,.0f} MiB at {at - start:.2f} s of {end - start:.2f} s; running: "
          f"{'; '.join(running) or '(no stage)'}")
    rows = []
    for label, s, e, thread in events:
        inside = [r for t, r in samples if s <= t <= e]
        before = [r for t, r in samples if t <= s]
        if inside:
            rows.append((max(inside), label, s - start, e - s, before[-1] if before else 0, thread))
    rows.sort(reverse=True)
    print("| stage | start (s) | wall (s) | RSS at its start (MiB) | largest RSS while it ran (MiB) |")
    print("|---|---|---|---|---|")
    for top, label, s, w, first, _ in rows[: a.top]:
        print(f"| {label} | {s:.2f} | {w:.2f} | {first / mib:,.0f} | {top / mib:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
