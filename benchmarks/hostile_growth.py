#!/usr/bin/env python3
"""How nsysaudit's time and memory grow on pathological exports (issue 6, resource bounds).

    python benchmarks/hostile_growth.py [--scale 1 2 4 8] [--base 100000] [--shapes ...] [--out DIR]

The issue 24 table: ``--shapes telemetry_lines tiny_library_calls --base 1000000 --scale 1`` and
``--shapes many_threads nested_library_calls --base 100000 --scale 1``.

Three shapes, each generated at ``base * scale`` rows (SQLite recursive CTEs over a builder
template, so generation is fast and the file has the real nsys DDL):

- ``many_ranges``: n cuBLAS ranges on one thread, one after another, each holding 2 CUDA API
  calls (n library calls, 2n calls).
- ``nested_ranges``: k = n / 10 ranges nested inside each other on one thread, all holding the same
  n calls: k*n overlapping pairs (quadratic), capped by ``--max-pairs`` (default 1,000,000).
- ``one_thread``: one cublasCreate_v2 range on one thread holding n calls, every 1000th a failed
  cudaMalloc (n pairs; past the cap only the failures are listed).
- ``reversed_failures``: n / 10 failed cudaMalloc rows whose end is before their start (damaged),
  on a thread with n / 10 long overlapping cuBLAS ranges: their nesting is unknown and is looked
  up in the thread's union of ranges, never by forming (row, range) pairs (issue 10, item 7).

The four adversarial shapes of issue 24 (targets in benchmarks/RESULTS.md):

- ``telemetry_lines``: the real torch observe capture with n telemetry lines (``--telemetry``),
  the capture's own 8 lines among n ``tick`` lines of the same form (185 bytes each, both clocks,
  the main thread's pid/tid), spread over the capture.
- ``many_threads``: n threads of one process, each with its ThreadNames name and one cuBLAS range
  holding one CUDA API call.
- ``tiny_library_calls``: n cuBLAS ranges of 90 ns on one thread, each holding one CUDA API call;
  ``tiny_censored_library_calls``: the same ranges after the process's last CUDA API record (no
  diagnostics say the capture went on), so each one is censored (``coverage.censored``, the
  device-memory ledger read at each).
- ``nested_library_calls``: n cuBLAS ranges nested inside each other on one thread, all holding
  the one CUDA API call at their centre (n pairs).

Each analysis runs in its own process (``nsysaudit analyze --json`` to /dev/null); wall time and
peak RSS come from the child's rusage. This is a measurement, not a test: nothing here is timed
inside pytest. Growth no worse than n log n shows as time ratios near the scale ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))

from builder import Call, Export, LibCall, build_export, global_tid  # noqa: E402

PID = TID = 100
GTID = global_tid(PID, TID)


def _template(path: Path) -> tuple[int, int, int, int, int]:
    """A builder export with one of each row; returns (malloc, launch, lib name ids, domain id, failed malloc corr)."""
    spec = Export(
        calls=[
            Call("cudaMalloc_v3020", 1, 2, PID, TID, corr=1, bytes=1 << 20),
            Call("cudaLaunchKernel_v7000", 3, 4, PID, TID, corr=2),
        ],
        lib_calls=[LibCall("cublasCreate_v2", 0, 5, PID, TID)],
    )
    build_export(spec, path)
    con = sqlite3.connect(path)
    ids = dict(con.execute("SELECT value, id FROM StringIds").fetchall())
    (domain,) = con.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = 59").fetchone()
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    con.execute("DELETE FROM CUDA_GPU_MEMORY_USAGE_EVENTS")
    con.execute("DELETE FROM NVTX_EVENTS WHERE eventType = 59")
    con.commit()
    con.close()
    return ids["cudaMalloc_v3020"], ids["cudaLaunchKernel_v7000"], ids["cublasCreate_v2"], domain, 0


def _calls_sql(n: int, step: int, malloc: int, launch: int, fail_every: int) -> str:
    """n calls on the thread, call i at [i*step + 10, i*step + 15]; every fail_every-th a failed cudaMalloc."""
    fail = f"(i % {fail_every} = {fail_every - 1})" if fail_every else "0"
    return f"""
        WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < {n - 1})
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", eventClass, globalTid, correlationId, nameId,
                                                 returnValue, callchainId)
        SELECT i * {step} + 10, i * {step} + 15, 0, {GTID}, i + 1,
               CASE WHEN {fail} THEN {malloc} ELSE {launch} END, CASE WHEN {fail} THEN 2 ELSE 0 END, NULL
        FROM seq"""


def _ranges_sql(k: int, lib: int, domain: int, start: str, end: str) -> str:
    return f"""
        WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < {k - 1})
        INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, textId, domainId)
        SELECT {start}, {end}, 59, {GTID}, {lib}, {domain} FROM seq"""


TORCH = REPO / "tests" / "fixtures" / "h200-cuda13-nsys2025.3" / "torch"


def make_telemetry(n: int, path: Path) -> Path:
    """The torch observe capture's telemetry with n ``tick`` lines added among its own (see above)."""
    lines = [json.loads(line) for line in (TORCH / "observe.telemetry.jsonl").read_text().splitlines()]
    first = lines[0]
    con = sqlite3.connect(f"file:{TORCH / 'observe.sqlite'}?mode=ro&immutable=1", uri=True)
    (session,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    con.close()
    span = first["realtime_ns"] - session, lines[-1]["realtime_ns"] - session  # the lines' own trace span
    ticks = []
    for i in range(n):
        trace_ns = span[0] + (span[1] - span[0]) * i // max(1, n)
        real = session + trace_ns
        mono = first["monotonic_ns"] + (real - first["realtime_ns"])
        ticks.append(
            {"event": "tick", "arm": "observe", "step": i, "pid": first["pid"], "tid": first["tid"],
             "thread": "MainThread", "monotonic_ns": mono, "monotonic_raw_ns": mono - 94_332_909,
             "realtime_ns": real}
        )
    merged = sorted([*lines, *ticks], key=lambda e: e["realtime_ns"])
    with open(path, "w") as out:
        for event in merged:
            out.write(json.dumps(event) + "\n")
    return path


def make(shape: str, n: int, path: Path) -> None:
    if shape == "telemetry_lines":
        shutil.copyfile(TORCH / "observe.sqlite", path)
        make_telemetry(n, path.with_suffix(".jsonl"))
        return
    malloc, launch, lib, domain, _ = _template(path)
    con = sqlite3.connect(path)
    if shape == "many_threads":
        # Thread i (tid 1000 + i): its name, one 80 ns range at i*100 holding one call.
        (top,) = con.execute("SELECT max(id) FROM StringIds").fetchone()
        con.execute(f"""
            WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < {n - 1})
            INSERT INTO StringIds (id, value) SELECT {top + 1} + i, 'worker-' || i FROM seq""")
        con.execute(f"""
            WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < {n - 1})
            INSERT INTO ThreadNames (nameId, priority, globalTid) SELECT {top + 1} + i, 20, {GTID - TID} + 1000 + i
            FROM seq""")
        con.execute(f"""
            WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < {n - 1})
            INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, textId, domainId)
            SELECT i * 100 + 5, i * 100 + 85, 59, {GTID - TID} + 1000 + i, {lib}, {domain} FROM seq""")
        con.execute(f"""
            WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < {n - 1})
            INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", eventClass, globalTid, correlationId, nameId,
                                                     returnValue, callchainId)
            SELECT i * 100 + 10, i * 100 + 15, 0, {GTID - TID} + 1000 + i, i + 1, {launch}, 0, NULL FROM seq""")
    elif shape == "tiny_library_calls":
        con.execute(_calls_sql(n, 100, malloc, launch, 0))
        con.execute(_ranges_sql(n, lib, domain, "i * 100 + 5", "i * 100 + 95"))
    elif shape == "tiny_censored_library_calls":
        # The same ranges, but the process's CUDA API trace ends before the first: all censored.
        con.execute(_ranges_sql(n, lib, domain, f"{n * 300 + 2000} + i * 100", f"{n * 300 + 2090} + i * 100"))
    elif shape == "nested_library_calls":
        con.execute(_calls_sql(1, 100, malloc, launch, 0).replace("i * 100 + 10", f"{n * 10 + 10}")
                    .replace("i * 100 + 15", f"{n * 10 + 15}"))
        con.execute(_ranges_sql(n, lib, domain, "i * 10", f"{n * 20 + 30} - i * 10"))
    elif shape == "many_ranges":
        # Range i covers calls 2i and 2i+1 (calls every 100 ns, a range every 200 ns).
        con.execute(_calls_sql(2 * n, 100, malloc, launch, 0))
        con.execute(_ranges_sql(n, lib, domain, "i * 200 + 5", "i * 200 + 190"))
    elif shape == "nested_ranges":
        k = max(1, n // 10)
        con.execute(_calls_sql(n, 100, malloc, launch, 0))
        con.execute(_ranges_sql(k, lib, domain, "i", f"{n * 100 + 100} - i"))
    elif shape == "one_thread":
        con.execute(_calls_sql(n, 100, malloc, launch, 1000))
        con.execute(_ranges_sql(1, lib, domain, "0", f"{n * 100 + 100}"))
    elif shape == "reversed_failures":
        k = max(1, n // 10)
        con.execute(_calls_sql(k, 100, malloc, launch, 1))
        con.execute('UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET "end" = start - 5')
        con.execute(_ranges_sql(k, lib, domain, "i * 10", f"i * 10 + {k * 100 + 100}"))
    else:
        raise ValueError(shape)
    # The process's CUDA API trace must outlast the ranges (else they are censored, not joined).
    con.execute(
        f"""INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", eventClass, globalTid, correlationId, nameId,
            returnValue) VALUES ({n * 300 + 1000}, {n * 300 + 1001}, 0, {GTID}, {4 * n + 7}, {launch}, 0)"""
    )
    con.commit()
    con.close()


def extra_args(shape: str, path: Path) -> list[str]:
    return ["--telemetry", str(path.with_suffix(".jsonl"))] if shape == "telemetry_lines" else []


def measure(path: Path, extra: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one ``nsysaudit analyze --json`` process."""
    cmd = [sys.executable, "-m", "nsysaudit", "analyze", "--json", *extra, str(path)]
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.PIPE, cwd=REPO)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode() if proc.stderr else ''}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--base", type=int, default=100_000)
    parser.add_argument(
        "--shapes", nargs="+", default=["many_ranges", "nested_ranges", "one_thread", "reversed_failures"]
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="nsysaudit-growth-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{'shape':<20} {'n':>10} {'MB':>7} {'gen s':>6} {'analyze s':>9} {'peak MiB':>9} {'s/n ratio':>9}")
    for shape in args.shapes:
        first: tuple[int, float] | None = None
        for scale in args.scale:
            n = args.base * scale
            path = out / f"{shape}-{n}.sqlite"
            t0 = time.perf_counter()
            if not path.exists():
                make(shape, n, path)
            gen = time.perf_counter() - t0
            wall, rss = measure(path, extra_args(shape, path))
            first = first or (n, wall)
            ratio = (wall / first[1]) / (n / first[0])
            size = sum(p.stat().st_size for p in (path, path.with_suffix(".jsonl")) if p.exists()) / 1e6
            print(f"{shape:<20} {n:>10,} {size:>7.1f} {gen:>6.1f} {wall:>9.2f} {rss:>9.0f} {ratio:>9.2f}", flush=True)
    print(f"files in {out}")


if __name__ == "__main__":
    main()
