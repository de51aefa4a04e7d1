#!/usr/bin/env python3
"""Where the time of one ``nsysaudit analyze FILE --json`` goes: each stage's start, end and wall
time (seconds from this process's start) and the thread it ran on, the command run in this process.

    python benchmarks/stages.py FILE [--rounds 3] [--markdown]

The stages are found, not listed: every nsysaudit function that ``analyze`` calls by name from
session.py (the input, its SHA-256, the damage check, the reading, the report), from read/trace.py's
``_load`` (each table read, the CUDA API scan and its own check) and from analysis/run.py's
``_analyze`` (each step of the analysis), and the work on other threads (the SHA-256, SQLite's or the
native check of the other evidence tables, a ``count(*)``). A new step called from one of them (the
stall analysis, once analysis/run.py calls it) shows up as a row of its own. Each round runs the
whole command once more in the same process (the page cache and the imports warm after the
first); the table gives the median of each stage over the rounds. benchmarks/run.py prints it for
every export it times (its hook for re-measuring after a change).
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import functools  # noqa: E402
import io  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from types import FunctionType, ModuleType  # noqa: E402

Event = tuple[str, float, float, str]  # stage, start, end (s from T0), thread


def _timed(
    label: str, func: Callable[..., object], events: list[Event], depth: threading.local
) -> Callable[..., object]:
    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        outer = getattr(depth, "n", 0) == 0  # a stage inside a stage is the outer one's time
        depth.n = getattr(depth, "n", 0) + 1
        start = time.perf_counter()
        try:
            return func(*args, **kwargs)
        finally:
            depth.n -= 1
            if outer:
                events.append((label, start - T0, time.perf_counter() - T0, threading.current_thread().name))

    return wrapper


def _callees(module: ModuleType, skip: set[str]) -> list[str]:
    """The nsysaudit functions ``module`` holds by name (its own and those it imported)."""
    return [
        name
        for name, value in vars(module).items()
        if isinstance(value, FunctionType) and value.__module__.startswith("nsysaudit.") and name not in skip
    ]


def instrument(events: list[Event]) -> None:
    """Wrap every stage (see the module docstring); each records into ``events``."""
    from nsysaudit import session
    from nsysaudit.analysis import run
    from nsysaudit.read import damage, inputs, scan, trace

    groups: list[tuple[ModuleType, str, set[str]]] = [
        (session, "", {"analyze", "open", "engine_of", "register_io_source"}),
        (trace, "read: ", {"load", "_load", "frame", "_strict_frame", "_fits", "_require", "warning"}),
        (run, "analysis: ", {"analyze_trace", "_analyze", "warning"}),
    ]
    for module, prefix, skip in groups:  # a depth per group: its stages are the parts of the one above
        depth = threading.local()
        for name in _callees(module, skip):
            setattr(module, name, _timed(prefix + name, getattr(module, name), events, depth))
        # and the functions of the modules it calls through (``verdicts.decide(...)``)
        for alias, held in list(vars(module).items()):
            if isinstance(held, ModuleType) and held.__name__.startswith("nsysaudit.analysis."):
                for name in _callees(held, skip):
                    if not name.startswith("_") and vars(held)[name].__module__ == held.__name__:
                        setattr(held, name, _timed(f"{prefix}{alias}.{name}", getattr(held, name), events, depth))
    # the work on other threads: their own depth, their own rows
    for module, name, label in ((inputs, "sha256_file", "sha256 (thread)"),
                                (damage, "check_export", "damage check (thread)"),
                                (scan, "_count_rows", "count(*) (thread)")):  # fmt: skip
        setattr(module, name, _timed(label, getattr(module, name), events, threading.local()))
    from nsysaudit.render import json as render_json

    write = _timed("write JSON", render_json.write_analysis, events, threading.local())
    render_json.write_analysis = write  # type: ignore[assignment]


def one_round(path: Path, events: list[Event]) -> tuple[float, float]:
    """``analyze PATH --json`` in this process, stdout discarded: its start and end (s from T0)."""
    from nsysaudit.cli import main

    del events[:]
    start = time.perf_counter() - T0
    with contextlib.redirect_stdout(io.TextIOWrapper(io.BytesIO())):
        code = main(["analyze", str(path), "--json"])
    if code != 0:
        raise SystemExit(f"analyze {path} --json exited {code}")
    return start, time.perf_counter() - T0


def table(rounds: list[tuple[float, float, list[Event]]], imports: float) -> list[str]:
    """The median of each stage over the rounds, in the order of the first round."""
    order: list[str] = []
    spans: dict[str, list[tuple[float, float, str]]] = {}
    for start, _, events in rounds:
        seen: set[str] = set()
        for label, a, b, thread in sorted(events, key=lambda e: e[1]):
            if label in seen:  # called again in one round: its first call's start, its time summed
                first = spans[label][-1]
                spans[label][-1] = (first[0], first[1] + b - a, first[2])
                continue
            seen.add(label)
            if label not in spans:
                order.append(label)
                spans[label] = []
            spans[label].append((a - start, b - a, thread))
    lines = [
        f"Imports before the first round: {imports:.3f} s. Medians of {len(rounds)} round(s); start from the "
        "command's start.",
        "",
        "| stage | start (s) | wall (s) | thread |",
        "|---|---|---|---|",
    ]
    for label in order:
        s = spans[label]
        start = statistics.median(x[0] for x in s)
        wall = statistics.median(x[1] for x in s)
        thread = "main" if s[0][2] == "MainThread" else s[0][2].split("_")[0]
        lines.append(f"| {label} | {start:.3f} | {wall:.3f} | {thread} |")
    total = statistics.median(end - start for start, end, _ in rounds)
    lines.append(f"| **the command, in process** | 0.000 | {total:.3f} | |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    events: list[Event] = []
    import nsysaudit.cli  # noqa: F401  the imports a command pays before its first stage

    imports = time.perf_counter() - T0
    instrument(events)
    rounds = []
    for _ in range(a.rounds):
        start, end = one_round(a.path, events)
        rounds.append((start, end, list(events)))
    print("\n".join(table(rounds, imports)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
