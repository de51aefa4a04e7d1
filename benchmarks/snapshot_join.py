#!/usr/bin/env python3
"""What joining a PyTorch memory snapshot costs: reading a 200,000-entry snapshot and joining it to the
trace of the same run (docs/ledger.md, "The allocator's own view").

    python benchmarks/snapshot_join.py [--entries 200000] [--moments 64] [--repeat 3] [--out DIR]
        [--results FILE.md]

It builds (once, cached in --out) a run from code with ``tests/snapshots.py``: a training loop of
``--entries`` history entries (allocations and frees of 512 B to 64 MiB in 2 MiB, 20 MiB and larger
segments, each entry with a Python stack of 5 to 9 frames drawn from 200 stacks, every entry its own
frames list as PyTorch writes them), pickled with protocol 4 (``run-end.pickle``), and the nsys
export of the same run (``run.sqlite``: a ``cudaMalloc``/``cudaFree`` and its memory event per
segment). Then, each step timed ``--repeat`` times in this process:

- ``read``: :func:`nsysaudit.read.snapshot.load_snapshot` (the child process: unpickling with no
  globals, checking every value, decoding to columns; then the frames built here);
- ``join``: :func:`nsysaudit.analysis.allocator.allocator_view` with no moment (which process, which
  clock, the history paired and replayed);
- ``join + N moments``: the same read at ``--moments`` moments spread over the run (each: the
  replayed sums, the inactive ranges, their holders, what lies outside the allocator).

Reported: the median wall time of each, the child's peak RSS (its rusage) and this process's.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import resource
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from snapshots import Toy  # noqa: E402

MIB = 1 << 20


def training_run(entries: int, seed: int = 0) -> Toy:
    """A loop of forward/backward steps: each step allocates activations and gradients into a few
    segments and frees them, so the same addresses come back step after step."""
    rng = random.Random(seed)
    files = [f"layer{i}.py" for i in range(20)]
    stacks = [[]] + [
        [{"filename": rng.choice(files), "line": rng.randint(1, 900), "name": f"f{rng.randint(0, 99)}"}
         for _ in range(rng.randint(5, 9))] + [{"filename": "train.py", "line": 40 + k, "name": "<module>"}]
        for k in range(200)
    ]
    toy = Toy(stacks=stacks)
    t, base = 1_000_000, 0x7F00_0000_0000
    segments = [(base + i * 256 * MIB, size) for i, size in enumerate([2 * MIB] * 4 + [20 * MIB] * 8 + [128 * MIB] * 4)]
    for addr, size in segments:
        t += 3
        toy.segment(t, addr, size, rng.randint(1, 200))
    live: dict[int, int] = {}
    while len(toy.actions) * 3 // 2 < entries:  # an allocation makes 1 entry, a free 2
        addr, size = rng.choice(segments)
        slots = size // (2 * MIB) if size > 2 * MIB else 16
        slot = addr + rng.randrange(slots) * (size // slots)
        t += rng.randint(1, 20)
        if slot in live:
            del live[slot]
            toy.free(t, slot, rng.randint(1, 200))
        else:
            want = rng.choice([512, 4096, 65536, 1 * MIB, size // slots])
            live[slot] = want
            toy.alloc(t, slot, min(want, size // slots), rng.randint(1, 200))
    return toy


def ensure(out: Path, entries: int) -> tuple[Path, Path, Toy]:
    out.mkdir(parents=True, exist_ok=True)
    toy = training_run(entries)
    export, snap = out / f"run-{entries}.sqlite", out / f"run-{entries}-end.pickle"
    if not export.exists():
        toy.export(export)
    if not snap.exists():
        dumped = toy.snapshot()
        for entry in dumped["device_traces"][0]:  # a list of its own per entry, as PyTorch writes them
            entry["frames"] = [dict(f) for f in entry["frames"]]
        tmp = snap.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(dumped, protocol=4))
        tmp.rename(snap)
    return export, snap, toy


CPU: dict[str, float] = {}  # the median CPU seconds (this process and its children) of each step timed


def _cpu() -> float:
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + child.ru_utime + child.ru_stime


def timed(work, repeat: int, name: str = "") -> tuple[float, object]:  # type: ignore[no-untyped-def]
    """The median wall time of ``repeat`` runs of ``work`` (its CPU time in ``CPU[name]``) and its result."""
    times, cpus, result = [], [], None
    for _ in range(repeat):
        started, cpu = time.perf_counter(), _cpu()
        result = work()
        times.append(time.perf_counter() - started)
        cpus.append(_cpu() - cpu)
    CPU[name] = statistics.median(cpus)
    return statistics.median(times), result


def _child_steps(path: Path, repeat: int) -> tuple[float, float]:
    """The child's two steps timed apart, here (the benchmark's own file: trusted): unpickling, then
    checking and decoding to columns."""
    code = (REPO / "nsysaudit" / "read" / "_unpickle.py").read_text()
    steps: dict[str, object] = {"__name__": "snapshot_join_child"}
    exec(compile(code, "_unpickle.py", "exec"), steps)
    data = path.read_bytes()
    load, decode = steps["load"], steps["decode"]
    unpickle_s, top = timed(lambda: load(data), repeat, "unpickle")  # type: ignore[operator]
    decode_s, _ = timed(lambda: decode(top), repeat, "decode")  # type: ignore[operator]
    return unpickle_s, decode_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--moments", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "data")
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args(argv)

    from builder import global_pid

    from nsysaudit.analysis.allocator import allocator_view
    from nsysaudit.read.snapshot import load_snapshot
    from nsysaudit.read.source import probe
    from nsysaudit.read.trace import load

    export, path, toy = ensure(args.out, args.entries)
    opened = probe(export)
    try:
        trace = load(opened)
    finally:
        opened.close()
    gpid = global_pid(toy.pid)
    times = [a.t_us for a in toy.actions]
    moments = [toy.trace_ns(times[len(times) * (k + 1) // (args.moments + 1)]) for k in range(args.moments)]

    def join(snapshot, at):  # type: ignore[no-untyped-def]
        return allocator_view(
            [snapshot], trace.memory, trace.alloc_calls, session_start_utc_ns=trace.session_start_utc_ns,
            capture=trace.capture_bounds, traced_gpids=[gpid], tolerance_ns=1_000_000, telemetry_checked=None,
            wanted=[("telemetry", "t", t, gpid, "line", i) for i, t in enumerate(at)])

    read_s, snapshot = timed(lambda: load_snapshot(path), args.repeat, "read")
    unpickle_s, decode_s = _child_steps(path, args.repeat)
    child_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    join_s, view = timed(lambda: join(snapshot, []), args.repeat, "join")
    moments_s, view = timed(lambda: join(snapshot, moments), args.repeat, "moments")
    own_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    entries = snapshot.entries.height  # type: ignore[attr-defined]
    per_moment = (moments_s - join_s) / max(args.moments, 1) * 1e3

    def us(seconds: float) -> str:
        return f"{seconds / entries * 1e6:.2f} us"

    checked = view.joined[0].section["clock"]["checked"]  # type: ignore[attr-defined]
    load = os.getloadavg()[0]
    lines = [
        f"### {entries:,}-entry snapshot ({path.stat().st_size / 1e6:,.1f} MB, protocol 4), {args.moments} moments",
        "",
        f"Clock checked: {checked}; {len(view.points)} moments read; load average {load:.1f}; "  # type: ignore[attr-defined]
        f"median of {args.repeat}.",
        "",
        "| step | median wall | median CPU | wall per entry |",
        "| --- | --- | --- | --- |",
        f"| read (the child: unpickle, check, decode; the frames here) | {read_s:.2f} s | {CPU['read']:.2f} s | "
        f"{us(read_s)} |",
        f"| of which unpickling (the C unpickler, no globals) | {unpickle_s:.2f} s | {CPU['unpickle']:.2f} s | "
        f"{us(unpickle_s)} |",
        f"| of which checking and decoding to columns | {decode_s:.2f} s | {CPU['decode']:.2f} s | {us(decode_s)} |",
        f"| join (process, clock, pairing, replay) | {join_s:.2f} s | {CPU['join']:.2f} s | {us(join_s)} |",
        f"| join + {args.moments} moments | {moments_s:.2f} s | {CPU['moments']:.2f} s | {per_moment:.1f} ms "
        "per moment |",
        "",
        f"Peak RSS: the reader child {child_rss:,} MiB, this process {own_rss:,} MiB.",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results is not None:
        with args.results.open("a") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
