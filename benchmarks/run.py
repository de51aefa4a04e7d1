#!/usr/bin/env python3
"""Benchmark nsysaudit against the plainest SQL and NVIDIA's own report, on the same files.

    python benchmarks/run.py [--rows 1000000 2000000 20000000] [--repeat 5] [--out benchmarks/data]
                             [--real FILE.sqlite ...] [--results FILE.md] [--no-latency] [--no-wheel]
                             [--no-stages]

For each size it generates (once, cached in --out) an observe and a release export with
benchmarks/make_export.py, then times whole processes, interleaved round-robin so that the
machine's noise falls on every command alike, and reports the median wall time and the peak
RSS (from wait4's rusage of each child):

- ``analyze``:  nsysaudit analyze FILE --json (stdout to /dev/null), the nsysaudit of this Python
                (``make venv``: an editable install)
- ``analyze (pip wheel)``: the same command from a fresh venv into which the wheel ``pip wheel .``
                builds was installed with a plain ``pip install`` (its dependencies from pip's
                registry): what a user who installs the way Python users install runs
- ``sql``:      sqlite3 FILE "select returnValue, count(*) from CUPTI_ACTIVITY_KIND_RUNTIME group by 1"
- ``nsys``:     nsys stats -r cuda_api_sum --format csv FILE (the CLI from `make nsys`), when present
- ``scan``:     benchmarks/scan_only.py FILE: nsysaudit's own census (its CUDA API scan alone), checked
                once to print what ``sql`` prints
- ``compare``:  nsysaudit compare OBSERVE RELEASE --out TMP --force

Ratios are against ``sql`` measured in the same run. After each export's table, where its time goes
(benchmarks/stages.py: each stage of one ``analyze --json`` in process, the median of two rounds
after the timed ones; ``--no-stages`` leaves it out): the hook for re-measuring a stage after a
change. ``--real`` adds real captures (default: the large H200 captures benchmarks/data/burst28.sqlite
and burst15.sqlite, when there; see burst_workload.py): the same commands but ``nsys`` and
``compare``. Then the small-export latency (process start to exit):
``analyze --json`` of a generated 1,000-row export and of the bundled real 1,229-row torch export
(both builds), beside ``python -c "import polars"`` (the floor any polars tool pays) and ``python -c
pass``. This is a benchmark, not a test: the suite only runs it at a tiny size to check that it
works (tests/test_bench.py).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from make_export import generate  # noqa: E402

QUERY = "select returnValue, count(*) from CUPTI_ACTIVITY_KIND_RUNTIME group by 1"


@dataclass
class Sample:
    seconds: float
    max_rss_kb: int
    code: int
    cpu: float = 0.0  # user + sys seconds of the command and the processes it waited for (wait4)


GNU_TIME = "/usr/bin/time"


def run_once(cmd: list[str], env: dict[str, str] | None = None) -> Sample:
    """Run ``cmd`` with stdout discarded: wall time and the command's own peak RSS.

    Peak RSS comes from GNU time's %M when /usr/bin/time exists (wait4's ru_maxrss of a forked
    child can report the parent's size from before exec), else from wait4.
    """
    wrapped = [GNU_TIME, "-f", "%M", *cmd] if os.path.exists(GNU_TIME) else cmd
    start = time.perf_counter()
    proc = subprocess.Popen(
        wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if code != 0:
        raise SystemExit(f"benchmark command failed ({code}): {' '.join(cmd)}\n{err[-2000:]}")
    rss = int(usage.ru_maxrss)
    if wrapped is not cmd:
        rss = int(err.strip().splitlines()[-1])
    return Sample(seconds, rss, code, usage.ru_utime + usage.ru_stime)


def find_nsys() -> str | None:
    env = os.environ.get("NSYSAUDIT_NSYS")
    local = REPO / ".tools" / "nsys" / "target-linux-x64" / "nsys"
    for c in (env, str(local) if local.exists() else None, shutil.which("nsys")):
        if c:
            return c
    return None


def ensure_exports(out: Path, rows: int) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for variant in ("observe", "release"):
        path = out / f"bench-{rows}-{variant}.sqlite"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.unlink(missing_ok=True)
            t = time.perf_counter()
            generate(tmp, rows, variant=variant)
            tmp.rename(path)
            print(f"generated {path} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        paths.append(path)
    return paths[0], paths[1]


def machine() -> str:
    cpu = "unknown cpu"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    import sqlite3
    from importlib.metadata import version

    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB RAM, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, polars {version('polars')}, SQLite {sqlite3.sqlite_version}"
    )


def wheel_install(tmp: Path) -> str:
    """``pip wheel .`` of this checkout, installed with a plain ``pip install`` into a fresh venv
    under ``tmp``: that venv's nsysaudit, checked to run the native engine."""
    wheels, venv = tmp / "wheels", tmp / "venv"

    def quietly(*cmd: str) -> None:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")

    quietly(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels), str(REPO))
    (wheel,) = wheels.glob("nsysaudit-*.whl")
    quietly(sys.executable, "-m", "venv", str(venv))
    quietly(str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel))
    probe = "from nsysaudit.read import native; print(native.unavailable() or 'native')"
    said = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=True)
    if said.stdout.strip() != "native":
        raise SystemExit(f"the pip-installed {wheel.name} cannot run the native engine: {said.stdout.strip()}")
    print(f"installed {wheel.name} into a fresh venv ({venv})", file=sys.stderr)
    return str(venv / "bin" / "nsysaudit")


def bench(
    observe: Path, release: Path | None, repeat: int, builds: dict[str, str], *, with_nsys: bool = True
) -> dict[str, list[Sample]]:
    """Every command on one export (``release``: its twin for ``compare``; ``builds``: the row name
    and nsysaudit of each install), interleaved round-robin."""
    nsys = find_nsys() if with_nsys else None
    sqlite3_cli = shutil.which("sqlite3")
    tmp = Path(tempfile.mkdtemp(prefix="nsysaudit-bench-"))
    env = dict(os.environ, NSYSAUDIT_CACHE=str(tmp / "cache"))
    commands: dict[str, list[str]] = {name: [exe, "analyze", str(observe), "--json"] for name, exe in builds.items()}
    nsysaudit = builds["analyze"]
    if sqlite3_cli:
        commands["sql"] = [sqlite3_cli, str(observe), QUERY]
    if nsys:
        commands["nsys"] = [
            nsys,
            "stats",
            "-r",
            "cuda_api_sum",
            "--format",
            "csv",
            "--force-export",
            "false",
            str(observe),
        ]
    commands["scan"] = [sys.executable, str(HERE / "scan_only.py"), str(observe)]
    if release is not None:
        commands["compare"] = [nsysaudit, "compare", str(observe), str(release), "--out", str(tmp / "cmp"), "--force"]
    samples: dict[str, list[Sample]] = {k: [] for k in commands}
    try:
        for cmd in commands.values():  # warm the page cache once, untimed
            run_once(cmd, env)
        if sqlite3_cli:  # the project's census says what SQLite's says
            ours = subprocess.run(commands["scan"], capture_output=True, check=True, env=env).stdout
            theirs = subprocess.run(commands["sql"], capture_output=True, check=True).stdout
            if ours != theirs:
                raise SystemExit(f"scan_only.py and sqlite3 disagree on {observe}:\n{ours!r}\n{theirs!r}")
        for _ in range(repeat):
            for name, cmd in commands.items():
                samples[name].append(run_once(cmd, env))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return samples


def stages(path: Path, build: str, exe: str) -> list[str]:
    """benchmarks/stages.py of ``path`` with the Python of the nsysaudit ``exe`` (the install ``build``)."""
    python = Path(exe).parent / "python"
    proc = subprocess.run(
        [str(python if python.exists() else sys.executable), str(HERE / "stages.py"), str(path), "--rounds", "2"],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"benchmarks/stages.py {path} failed:\n{proc.stderr[-2000:]}")
    return [f"Where `{build}` spends it (`benchmarks/stages.py`):", "",
            *proc.stdout.strip().splitlines()]


def summarize(title: str, samples: dict[str, list[Sample]]) -> list[str]:
    med = {k: statistics.median(s.seconds for s in v) for k, v in samples.items()}
    rss = {k: max(s.max_rss_kb for s in v) for k, v in samples.items()}
    lines = [
        f"### {title}",
        "",
        "| command | median wall (s) | runs | peak RSS (MiB) | vs sql |",
        "|---|---|---|---|---|",
    ]
    for k in samples:
        ratio = f"{med[k] / med['sql']:.2f}x" if "sql" in med else "n/a"
        lines.append(f"| {k} | {med[k]:.2f} | {len(samples[k])} | {rss[k] / 1024:.0f} | {ratio} |")
    if "nsys" in med:
        lines.append("")
        for k in (k for k in med if k.startswith("analyze")):
            lines.append(f"{k} is {med['nsys'] / med[k]:.2f}x faster than `nsys stats -r cuda_api_sum`.")
    return lines


TORCH = REPO / "tests" / "fixtures" / "h200-cuda13-nsys2025.3" / "torch" / "observe.sqlite"


def latency(repeat: int, out: Path, builds: dict[str, str]) -> list[str]:
    """Process start to exit on small exports, beside the interpreter's and polars' own start-up."""
    out.mkdir(parents=True, exist_ok=True)
    small = out / "small-1000.sqlite"
    if not small.exists():
        tmp = small.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        generate(tmp, 1000)
        tmp.rename(small)
    commands: dict[str, list[str]] = {}
    for name, exe in builds.items():
        how = name.removeprefix("analyze")
        commands[f"analyze{how} (1,000-row generated export)"] = [exe, "analyze", str(small), "--json"]
        commands[f"analyze{how} (1,229-row real torch export)"] = [exe, "analyze", str(TORCH), "--json"]
    commands |= {
        'python -c "import polars"': [sys.executable, "-c", "import polars"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    samples: dict[str, list[Sample]] = {k: [] for k in commands}
    for cmd in commands.values():
        run_once(cmd)
    for _ in range(repeat * 2):
        for name, cmd in commands.items():
            samples[name].append(run_once(cmd))
    lines = [
        "### Small exports: process start to exit",
        "",
        "| command | median wall (s) | min (s) | runs | peak RSS (MiB) |",
        "|---|---|---|---|---|",
    ]
    for name, ss in samples.items():
        lines.append(
            f"| {name} | {statistics.median(x.seconds for x in ss):.3f} | {min(x.seconds for x in ss):.3f} | "
            f"{len(ss)} | {max(x.max_rss_kb for x in ss) / 1024:.0f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 2_000_000, 20_000_000])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=HERE / "data")
    ap.add_argument("--results", type=Path, default=None, help="write the Markdown tables here")
    ap.add_argument("--no-latency", action="store_true", help="skip the small-export latency table")
    ap.add_argument("--real", type=Path, nargs="*", default=None, help="real captures (default: burst28, if there)")
    ap.add_argument("--no-wheel", action="store_true", help="skip the pip-installed wheel's rows")
    ap.add_argument("--no-stages", action="store_true", help="skip the stage timings after each table")
    args = ap.parse_args(argv)
    builds = {"analyze": shutil.which("nsysaudit", path=str(Path(sys.executable).parent)) or "nsysaudit"}
    wheel_tmp = Path(tempfile.mkdtemp(prefix="nsysaudit-wheel-"))
    try:
        if not args.no_wheel:
            builds["analyze (pip wheel)"] = wheel_install(wheel_tmp)
        return report_all(args, builds)
    finally:
        shutil.rmtree(wheel_tmp, ignore_errors=True)


def report_all(args: argparse.Namespace, builds: dict[str, str]) -> int:
    report = [f"Machine: {machine()}", ""]
    medians: dict[int, float] = {}
    # the pip-installed build's stages where there is one: what a user runs
    staged = "analyze (pip wheel)" if "analyze (pip wheel)" in builds else "analyze"
    for rows in args.rows:
        observe, release = ensure_exports(args.out, rows)
        samples = bench(observe, release, args.repeat, builds)
        report += [*summarize(f"{rows:,} CUDA API rows", samples), ""]
        if not args.no_stages:
            report += [*stages(observe, staged, builds[staged]), ""]
        medians[rows] = statistics.median(s.seconds for s in samples["analyze"])
    if len(medians) >= 2:
        small, big = min(medians), max(medians)
        report.append(
            f"Growth: {big // small}x the rows took {medians[big] / medians[small]:.2f}x the time for analyze "
            "(linear would be the same factor; fixed start-up costs make it smaller)."
        )
        report.append("")
    known = [HERE / "data" / "burst28.sqlite", HERE / "data" / "burst15.sqlite"]
    real = args.real if args.real is not None else [p for p in known if p.exists()]
    for path in real:
        samples = bench(path, None, args.repeat, builds, with_nsys=False)
        report += [*summarize(f"{path.name} (real capture, {path.stat().st_size / 2**20:,.0f} MiB)", samples), ""]
        if not args.no_stages:
            report += [*stages(path, staged, builds[staged]), ""]
    if not args.no_latency:
        report += [*latency(args.repeat, args.out, builds), ""]
    text = "\n".join(report)
    print(text)
    if args.results:
        args.results.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
