"""The command line: a thin shell over the library. The only module that uses click.

Every command opens its inputs, calls one library function, renders, and maps errors to exit
codes through one funnel: 2 for unusable input (one line on stderr, no traceback), 1 for a check
that failed, 0 when the analysis ran whatever its verdict.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import signal
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import TYPE_CHECKING, BinaryIO, Literal, Protocol, TypeVar, cast

import click

import nsysaudit
from nsysaudit import render
from nsysaudit.core.errors import (
    BadOption,
    CheckFailed,
    Interrupted,
    NsysAuditError,
    OutputFailed,
    Terminated,
    signal_raises,
)

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

INT64_MAX = (1 << 63) - 1
F = TypeVar("F", bound=Callable[..., object])  # a command's function, under the decorators that add options
R = TypeVar("R")  # what a command's function returns


def progress_for(as_json: bool) -> nsysaudit.Progress | None:
    """A progress bar on stderr only for a person at a terminal: never in --json mode or a pipe."""
    if as_json or not sys.stdout.isatty() or not sys.stderr.isatty():
        return None
    return render.progress_bar()


def progress_on_stderr() -> nsysaudit.Progress | None:
    """A progress bar when stderr is a terminal, whatever stdout is (check's lines come after it, and
    are the same with or without it)."""
    stderr = sys.stderr
    return render.progress_bar() if stderr is not None and stderr.isatty() else None


class _Commands(click.Group):
    """The command group. click answers an EOFError raised under a command as if Ctrl-C were pressed
    (an empty line, then "aborted", exit 130): where a stream or a worker ended under a command (out
    of memory, killed), that is a lie; it is one line naming it, exit 2."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except EOFError as exc:
            raise NsysAuditError(
                f"a stream ended unexpectedly (EOFError{': ' + str(exc) if str(exc) else ''}: a worker or a pipe "
                "went away, out of memory or killed); nothing more was done"
            ) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(nsysaudit.__version__, prog_name="nsysaudit")
@click.option("--debug", is_flag=True, help="Show Python tracebacks for errors.")
@click.pass_obj
def cli(state: dict[str, bool], debug: bool) -> None:
    """Forensics on NVIDIA Nsight Systems reports: which CUDA call failed, inside which library call
    (cuBLAS, cuDNN) or after which stream capture, on which thread, and who held the device's memory,
    from the trace alone; where the evidence stops, it says so.

    \b
    Start with:
      nsysaudit analyze run.nsys-rep          (or its SQLite export)
      nsysaudit COMMAND --help                (each command, with examples)
    """
    state["debug"] = debug  # main() reads it to decide whether an error shows its traceback


class Milliseconds(click.ParamType[int, object]):
    """A duration in milliseconds, read as an exact decimal and converted to whole nanoseconds.

    Decimal, not float: the recorded command of a sealed report writes the tolerance back in
    milliseconds (:func:`nsysaudit.seal.format_ms`) and must give the same nanoseconds again.
    NaN, infinities, negative values and values past the 64-bit nanosecond range are refused.
    """

    name = "ms"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        try:
            ms = Decimal(str(value).strip())
        except InvalidOperation:
            self.fail(f"{value!r} is not a number of milliseconds", param, ctx)
        if not ms.is_finite() or ms < 0:
            self.fail(f"{value!r} is not a finite, non-negative number of milliseconds", param, ctx)
        ns = int((ms * 1_000_000).to_integral_value(rounding=ROUND_HALF_EVEN))
        if ns > INT64_MAX:
            self.fail(f"{value!r} ms is more than {INT64_MAX:,} ns", param, ctx)
        return ns


def telemetry_option(*param_decls: str, help: str | None = None) -> Callable[[F], F]:
    """A telemetry file option (``--telemetry``, ``--observe-telemetry``, ...): JSON Lines, optional."""
    return click.option(
        *param_decls,
        type=str,
        default=None,
        metavar="FILE.jsonl",
        help=help
        or "The application's own JSON Lines receipts (event + monotonic_ns/realtime_ns): align their "
        "clock with the trace and place every finding and library call among them.",
    )


def snapshot_option(*param_decls: str, help: str) -> Callable[[F], F]:
    """A memory snapshot option (``--snapshot``, ``--observe-snapshot``, ...): repeatable."""
    return click.option(*param_decls, multiple=True, type=str, metavar="FILE.pickle", help=help)


SNAPSHOT_HELP = (
    "A PyTorch memory snapshot of the same run (torch.cuda.memory._dump_snapshot; repeatable): joined to the "
    "trace by its segments' addresses and its clock, the allocator's reserved, active and inactive memory and who "
    "last used it at each moment (docs/ledger.md). Read with no code loaded; one of another run is refused."
)


def alignment_options(func: Callable[..., R]) -> Callable[..., R]:
    """Declare the telemetry reading/alignment options and hand the command one ``telemetry_options``.

    Adds ``--telemetry-clock``, ``--telemetry-event-key``, ``--anchor``, ``--clock-tolerance`` and
    ``--lenient``; the decorated command receives them as a single
    :class:`~nsysaudit.read.telemetry.TelemetryOptions` keyword argument ``telemetry_options``. Every
    command that reads telemetry uses this, so the options mean the same everywhere (the command's
    signature is not its function's: five keyword arguments in, one out).
    """

    @functools.wraps(func)
    def wrapper(
        *args: object,
        telemetry_event_key: str,
        telemetry_clock: Sequence[str],
        anchors: Sequence[str],
        clock_tolerance: int,
        lenient: bool,
        **kwargs: object,
    ) -> R:
        kwargs["telemetry_options"] = nsysaudit.TelemetryOptions.from_specs(
            event_key=telemetry_event_key,
            clocks=telemetry_clock,
            anchors=anchors,
            tolerance_ns=clock_tolerance,
            lenient=lenient,
        )
        return func(*args, **kwargs)

    options = [
        click.option(
            "--telemetry-clock",
            "telemetry_clock",
            multiple=True,
            metavar="KIND[=FIELD]",
            help="Clock field to read (repeatable), KIND monotonic or realtime; naming any reads only those "
            "named. Default: monotonic=monotonic_ns and realtime=realtime_ns.",
        ),
        click.option(
            "--telemetry-event-key",
            default="event",
            show_default=True,
            metavar="FIELD",
            help="Field of each telemetry line that holds the event name.",
        ),
        click.option(
            "--anchor",
            "anchors",
            multiple=True,
            metavar="EVENT=NVTX_NAME[:start|end]",
            help="Telemetry event EVENT marks the start or end of NVTX range NVTX_NAME in the same process "
            "(repeatable; replaces the default rule: X_start -> start of X, X_end -> end of X, X -> end of X, "
            "same thread).",
        ),
        click.option(
            "--clock-tolerance",
            type=Milliseconds(),
            default="1",
            show_default=True,
            metavar="MS",
            help="Milliseconds the UTC and anchor mappings, and each anchor, may disagree by.",
        ),
        click.option("--lenient", is_flag=True, help="Skip bad telemetry lines (warned with their line numbers)."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper


def echo_telemetry_warnings(result: nsysaudit.AnalysisResult) -> None:
    """One stderr line per telemetry line skipped under --lenient (stdout stays one JSON document)."""
    if result.alignment is None:
        return
    log = result.alignment.log
    for bad in log.bad_lines:
        click.echo(render.escape(f"nsysaudit: warning: {log.path}: line {bad.line}: {bad.problem} (skipped)"), err=True)


FORCE_HELP = "Replace DIR if it is a sealed report that verifies and holds none of the inputs."


def out_options(func: F) -> F:
    """``--out DIR`` and ``--force``: write the report sealed into DIR (see :mod:`nsysaudit.seal`)."""
    func = click.option("--force", is_flag=True, help=FORCE_HELP)(func)
    return click.option(
        "--out",
        type=str,
        default=None,
        metavar="DIR",
        help="Write report.json, report.md, inputs-sha256.txt, the manifests and metadata.json into DIR "
        "and print the seal (SHA-256 of DIR/tagmanifest-sha256.txt) as the last line.",
    )(func)


def with_default_domains(extra: Sequence[str]) -> tuple[str, ...]:
    """``--library-domain`` adds to cuBLAS, cuDNN and NCCL: the full set :func:`nsysaudit.analyze` takes."""
    return tuple(dict.fromkeys([*nsysaudit.DEFAULT_LIBRARY_DOMAINS, *extra]))


def reading_options(func: F) -> F:
    """--nsys and --library-domain: how inputs are read, shared by analyze and compare."""
    func = click.option(
        "--library-domain",
        "library_domains",
        multiple=True,
        callback=lambda _ctx, _param, extra: with_default_domains(extra),
        metavar="DOMAIN",
        help="NVTX domain whose ranges are library calls too, besides "
        f"{', '.join(nsysaudit.DEFAULT_LIBRARY_DOMAINS[:-1])} and {nsysaudit.DEFAULT_LIBRARY_DOMAINS[-1]} "
        "(repeatable).",
    )(func)
    return click.option(
        "--nsys",
        "nsys_path",
        type=str,
        envvar="NSYSAUDIT_NSYS",
        help="nsys binary for exporting .nsys-rep reports (default: $NSYSAUDIT_NSYS, then PATH).",
    )(func)


def echo_seal(sealed: nsysaudit.Sealed, as_json: bool) -> None:
    """Print where the report went and, as the very last line, its seal (stderr under --json)."""
    if not as_json:
        render.show(render.sealed_text(str(sealed.dir), sealed.files))
    click.echo(f"seal: sha256:{sealed.seal}", err=as_json)


@cli.command("analyze", short_help="What failed, inside which library call, who held the memory.")
@click.argument("path", type=str)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option("--details", "-v", "details", is_flag=True,
              help="After the answer, every section: census, findings' calls, memory, library calls, coverage.")
@reading_options
@telemetry_option("--telemetry")
@snapshot_option("--snapshot", "snapshots", help=SNAPSHOT_HELP)
@alignment_options
@out_options
@click.option(
    "--max-pairs",
    type=click.IntRange(min=0, max=INT64_MAX),
    default=nsysaudit.DEFAULT_MAX_PAIRS,
    show_default=True,
    help="Most (library call, CUDA API call) pairs to form; 0 for no limit. Past it, successful nested "
    "calls are not listed (a warning says so) and unexamined failures make the verdict inconclusive.",
)
def analyze_cmd(
    path: str,
    as_json: bool,
    nsys_path: str | None,
    library_domains: Sequence[str],
    telemetry: str | None,
    snapshots: Sequence[str],
    telemetry_options: nsysaudit.TelemetryOptions,
    out: str | None,
    force: bool,
    max_pairs: int,
    details: bool,
) -> None:
    """Analyze one export (.sqlite) or report (.nsys-rep): the answer first (what failed, inside which
    library call, on which thread, when, who held the device's memory), --details for every section,
    --json for the whole document; with --out, also write it sealed.

    \b
    Examples:
      nsysaudit analyze run.nsys-rep
      nsysaudit analyze run.sqlite --telemetry app.jsonl --details
      nsysaudit analyze run.sqlite --json | jq .answer
      nsysaudit analyze run.sqlite --snapshot run-end.pickle --json | jq .allocator.at
    """
    sealed = None
    if out is not None and max_pairs != nsysaudit.DEFAULT_MAX_PAIRS:
        raise BadOption("--max-pairs cannot be combined with --out: a sealed report is verified with the default")
    if out is not None:
        sealed = nsysaudit.seal_analysis(
            path,
            out,
            telemetry=telemetry,
            library_domains=library_domains,
            telemetry_options=telemetry_options,
            nsys_path=nsys_path,
            force=force,
            progress=progress_for(as_json),
            snapshots=snapshots,
        )
        result = sealed.results["arm"]
    else:
        result = nsysaudit.analyze(
            path,
            nsys_path=nsys_path,
            library_domains=library_domains,
            telemetry=telemetry,
            telemetry_options=telemetry_options,
            max_pairs=max_pairs or None,
            progress=progress_for(as_json),
            snapshots=snapshots,
        )
    echo_telemetry_warnings(result)
    with printing() as stdout:
        if as_json:
            sys.stdout.flush()
            # The same document with or without --out (the sealed report.json is its sealed form);
            # streamed: a large export's document is never held whole.
            render.write_analysis(result, cast(BinaryIO, stdout))
            stdout.write(b"\n")
            stdout.flush()
        else:
            render.show(render.analysis_renderable(result, details=details))
        if sealed is not None:
            echo_seal(sealed, as_json)


@cli.command("compare", short_help="Compare an observe arm with a release arm, sealed into a folder.")
@click.argument("observe", type=str)
@click.argument("release", type=str)
@click.option(
    "--out",
    required=True,
    type=str,
    metavar="DIR",
    help="Folder to write the sealed comparison into (must not exist, unless --force).",
)
@telemetry_option("--observe-telemetry", help="The observe arm's JSON Lines telemetry.")
@telemetry_option("--release-telemetry", help="The release arm's JSON Lines telemetry.")
@snapshot_option("--observe-snapshot", "observe_snapshots",
                 help="The observe arm's PyTorch memory snapshot (repeatable; see analyze --snapshot).")
@snapshot_option("--release-snapshot", "release_snapshots",
                 help="The release arm's PyTorch memory snapshot (repeatable; see analyze --snapshot).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="Print the comparison (report.json's document) as one JSON line (the seal goes to stderr).")
@click.option("--details", "-v", "details", is_flag=True,
              help="After the answer, every difference: library calls, failing calls, sources, memory.")
@click.option("--labels", metavar="OBSERVE,RELEASE", default=None,
              help="What the sentences call the two arms, e.g. --labels serialized,forked (default observe,release).")
@reading_options
@alignment_options
def compare_cmd(
    observe: str,
    release: str,
    out: str,
    observe_telemetry: str | None,
    release_telemetry: str | None,
    observe_snapshots: Sequence[str],
    release_snapshots: Sequence[str],
    force: bool,
    as_json: bool,
    details: bool,
    labels: str | None,
    nsys_path: str | None,
    library_domains: Sequence[str],
    telemetry_options: nsysaudit.TelemetryOptions,
) -> None:
    """Compare an OBSERVE arm with a RELEASE arm and write the comparison sealed into DIR.

    OBSERVE and RELEASE are exports (.sqlite) or reports (.nsys-rep). The last line printed is the
    seal: the SHA-256 of DIR/tagmanifest-sha256.txt, which pins every file of DIR: the one line a
    reviewer quotes.

    \b
    Example:
      nsysaudit compare observe.sqlite release.sqlite --out cmp \\
          --observe-telemetry o.jsonl --release-telemetry r.jsonl
    """
    sealed = nsysaudit.seal_compare(
        observe,
        release,
        out,
        observe_telemetry=observe_telemetry,
        release_telemetry=release_telemetry,
        library_domains=library_domains,
        telemetry_options=telemetry_options,
        nsys_path=nsys_path,
        force=force,
        progress=progress_for(as_json),
        labels=labels.split(",") if labels is not None else None,
        observe_snapshots=observe_snapshots,
        release_snapshots=release_snapshots,
    )
    for result in sealed.results.values():
        echo_telemetry_warnings(result)
    with printing() as stdout:
        if as_json:  # compact, as analyze --json (report.json in DIR is indented)
            sys.stdout.flush()
            stdout.write(render.compact(sealed.document))
            stdout.flush()
        else:
            render.show(render.comparison_renderable(sealed.document, details=details))
        echo_seal(sealed, as_json)


@cli.command("verify", short_help="Check a sealed report folder, and re-run it from its inputs.")
@click.argument("directory", metavar="DIR", type=str)
@click.option(
    "--inputs",
    multiple=True,
    type=str,
    metavar="PATH",
    help="The original inputs (repeatable, or several after one --inputs): check their digests and re-run "
    "the analysis with the recorded options; report.json must come out byte-identical.",
)
@click.option("--seal", "expected_seal", metavar="HEX", help="The quoted seal (SHA-256 of tagmanifest-sha256.txt).")
@click.option(
    "--nsys",
    "nsys_path",
    type=str,
    envvar="NSYSAUDIT_NSYS",
    help="nsys binary for re-exporting .nsys-rep inputs (default: $NSYSAUDIT_NSYS, then PATH).",
)
@click.option("--full", is_flag=True, help="Print every digest and the seal whole (default: their first 12 digits).")
@click.argument("more_inputs", nargs=-1, type=str)
def verify_cmd(
    directory: str,
    inputs: Sequence[str],
    expected_seal: str | None,
    nsys_path: str | None,
    full: bool,
    more_inputs: Sequence[str],
) -> None:
    """Check every digest of the sealed report folder DIR (exit 1 naming any changed, missing or extra file).

    The digests and the seal are printed short (the seal's whole 64 digits are what compare and
    analyze --out printed last); --full prints them whole.

    \b
    Examples:
      nsysaudit verify cmp --seal 146325f6...
      nsysaudit verify cmp --inputs observe.sqlite release.sqlite o.jsonl r.jsonl
    """
    if more_inputs and not inputs:
        raise click.UsageError(f"unexpected argument {more_inputs[0]!r} (inputs go after --inputs)")
    given = [*inputs, *more_inputs]
    checked = nsysaudit.verify(directory, given or None, nsys_path=nsys_path, expected_seal=expected_seal)
    with printing():
        render.show(
            render.verification_renderable(str(checked.dir), checked.files, checked.inputs, checked.rerun, full=full)
        )
        from nsysaudit.render.report_outline import short_hash  # loaded already: the lines above are drawn by it

        quoted = ", as quoted" if expected_seal is not None else ""
        click.echo(f"seal: sha256:{checked.seal if full else short_hash(checked.seal)}{quoted}")


@cli.command("batch", short_help="Audit many reports into one table (parquet or csv).")
@click.argument("paths", nargs=-1, required=True, type=str, metavar="PATH...")
@click.option(
    "--out",
    required=True,
    type=str,
    metavar="DIR_OR_FILE",
    help="A folder (inputs.parquet, findings.parquet, parts/) or FILE.parquet / FILE.csv (the inputs table; "
    "the findings beside it as FILE.findings.*). Written as inputs finish; a rerun resumes by SHA-256.",
)
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Worker processes (default: the cores).")
@click.option(
    "--engine", type=click.Choice(["local", "dask"]), default="local", show_default=True,
    help="local: worker processes here; dask: dask.distributed (a LocalCluster unless --scheduler).",
)
@click.option("--scheduler", metavar="ADDRESS", default=None, help="A dask scheduler (with --engine dask).")
@click.option(
    "--snapshots", "snapshots", is_flag=True,
    help="Join the PyTorch memory snapshots beside each input: NAME.pickle, NAME-*.pickle, NAME.*.pickle and "
    "NAME_*.pickle for NAME.sqlite (docs/batch.md).",
)
@click.option(
    "--strict", is_flag=True,
    help="Exit 2 when any input is unusable (CI), after writing the tables with its error row.",
)
@reading_options
def batch_cmd(
    paths: Sequence[str],
    out: str,
    jobs: int | None,
    engine: Literal["local", "dask"],  # click.Choice lets only these through
    scheduler: str | None,
    snapshots: bool,
    strict: bool,
    nsys_path: str | None,
    library_domains: Sequence[str],
) -> None:
    """Audit every PATH (files, or folders searched for *.sqlite, *.nsys-rep, *.qdrep) into two tables.

    One row per input (path, sha256, versions, verdict, census totals, censored calls, findings,
    error) and one row per finding. An unusable input is a row with its one-line error (also shown
    on stderr); it never stops the batch. Exit 0 when the batch ran, 1 when every input was
    unusable; with --strict, 2 when any was (the tables are written first).

    \b
    Examples:
      nsysaudit batch /runs/job-1234 --out audit/
      nsysaudit batch /runs --out audit.csv --jobs 8
      nsysaudit batch /runs --out audit/ --strict
    """
    def warn(row: Mapping[str, object]) -> None:  # an input row
        if row.get("error"):
            click.echo(render.escape(f"nsysaudit: warning: {row['error']} (kept as a row)"), err=True)

    result = nsysaudit.run_batch(
        paths,
        out=out,
        jobs=jobs,
        engine=engine,
        scheduler=scheduler,
        library_domains=library_domains,
        nsys_path=nsys_path,
        progress=progress_for(False),
        on_row=warn,
        snapshots=snapshots,
    )
    with printing():
        for line in result.summary_lines():
            click.echo(render.escape(line))
    unusable = result.unusable()
    if strict and unusable.height:
        raise NsysAuditError(f"{unusable.height} input(s) could not be analyzed (--strict), the first: "
                             f"{unusable['error'][0]} (the tables hold their rows)")
    if result.inputs.height and (result.inputs["status"] == "error").all():
        raise CheckFailed(f"every input of the batch was unusable ({result.inputs.height}): see the rows' errors")


@cli.command("check", short_help="Hold exports to expectations in a TOML file (CI; JUnit XML).")
@click.argument("paths", nargs=-1, required=True, type=str, metavar="PATH...")
@click.option("--expect", "expect", required=True, type=str, metavar="FILE.toml", help="The expectations file.")
@click.option("--junit", type=str, default=None, metavar="FILE", help="Also write JUnit XML (one testcase per check).")
@click.option("--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Worker processes.")
@click.option(
    "--only-matching",
    is_flag=True,
    help="Check only the expectations that match a PATH given: one that matches none is left out, not "
    "failed (a file that no expectation matches still fails).",
)
@click.option(
    "--nsys",
    "nsys_path",
    type=str,
    envvar="NSYSAUDIT_NSYS",
    help="nsys binary for exporting .nsys-rep reports (default: $NSYSAUDIT_NSYS, then PATH).",
)
def check_cmd(
    paths: Sequence[str], expect: str, junit: str | None, jobs: int, only_matching: bool, nsys_path: str | None
) -> None:
    """Check every PATH (files, or folders searched for *.sqlite, *.nsys-rep, *.qdrep) against FILE.toml.

    One line per check, a file against an expectation, as the JUnit XML has one testcase per
    check (pass, FAIL and why, or ERROR and why it could not be analyzed), then "N passed, M
    failed". Every file is checked and the JUnit XML written even when one is unusable. Exit 0
    when all pass, 1 when any fails (a file no expectation matches, or an expectation that matches
    no file, fails too, unless --only-matching), 2 when an input or the expectations file is
    unusable. A progress bar on stderr when it is a terminal.

    \b
    Examples:
      nsysaudit check tests/fixtures --expect tests/fixtures/expectations.toml --junit junit.xml
      nsysaudit check tests/fixtures/public --expect tests/fixtures/expectations.toml --only-matching
    """
    report = nsysaudit.check_exports(paths, expect, junit=junit, jobs=jobs, nsys_path=nsys_path,
                                     only_matching=only_matching, progress=progress_on_stderr())
    lines = report.lines()
    with printing():
        for line in lines:
            click.echo(render.escape(line))
    if report.errors:
        first = report.errors[0]
        count = len({c.path for c in report.errors})
        raise NsysAuditError(f"{count} input(s) could not be analyzed, the first: {first.error} ({lines[-1]})")
    if not report.passed:
        raise CheckFailed(f"{expect}: not every file meets its expectations ({lines[-1]})")


@cli.command("plot", short_help="Draw the timeline around a finding (SVG or PNG).")
@click.argument("path", type=str)
@click.option("--out", required=True, type=str, metavar="FILE.svg|FILE.png", help="The picture to write (atomically).")
@click.option(
    "--around",
    metavar="FINDING|STALL|TIME_NS",
    help="Centre on finding:N (the N-th finding, from 1), stall:N (the N-th longest host stall) or a time in "
    "trace nanoseconds. Default: the first finding, else the first censored library call, else the first "
    "library call after the boundary.",
)
@click.option(
    "--window",
    "window_ns",
    type=Milliseconds(),
    metavar="MS",
    help="Width of the window in milliseconds, centred on the focus. Default: from the boundary to the end of "
    "the focus's library call, widened 6% each side.",
)
@click.option(
    "--boundary",
    default=render.DEFAULT_BOUNDARY,
    show_default=True,
    metavar="EVENT",
    help="Telemetry event at 0 on the x axis (else the start of the focus's library call).",
)
@reading_options
@telemetry_option("--telemetry")
@alignment_options
def plot_cmd(
    path: str,
    out: str,
    around: str | None,
    window_ns: int | None,
    boundary: str,
    nsys_path: str | None,
    library_domains: Sequence[str],
    telemetry: str | None,
    telemetry_options: nsysaudit.TelemetryOptions,
) -> None:
    """Draw the timeline of one export around a finding: threads, library calls, CUDA calls, NVTX,
    telemetry lines, the memory's headroom and what the trace does not cover.

    \b
    Examples:
      nsysaudit plot run.sqlite --telemetry app.jsonl --out timeline.svg
      nsysaudit plot run.sqlite --around finding:2 --window 5 --out finding2.png
    """
    if around is not None:
        render.parse_around(around)  # a bad --around is refused before anything runs
    render.check_picture_out(out)  # before the analysis: nothing is done for an --out that cannot be written
    result = nsysaudit.analyze(
        path,
        nsys_path=nsys_path,
        library_domains=library_domains,
        telemetry=telemetry,
        telemetry_options=telemetry_options,
        progress=progress_for(False),
    )
    echo_telemetry_warnings(result)
    size, notes = render.plot_timeline(result, out, around=around, window_ns=window_ns, boundary=boundary)
    with printing():
        click.echo(render.escape(f"timeline: {out} ({size:,} bytes)"))
        for note in notes:
            click.echo(render.escape(f"  {note}"))


@cli.command("cache", short_help="List the exports of .nsys-rep reports cached, or prune them.")
@click.option("--prune", is_flag=True,
              help="Remove the least recently used exports until the cache fits its bound ($NSYSAUDIT_CACHE_MAX) "
              "or --max-size; exports in use are kept.")
@click.option("--max-size", metavar="SIZE", default=None,
              help="With --prune: the size to prune to (500M, 20G, bytes; 0 empties the cache).")
def cache_cmd(prune: bool, max_size: str | None) -> None:
    """List the exports of .nsys-rep reports in the export cache ($NSYSAUDIT_CACHE/exports, default
    ~/.cache/nsysaudit/exports), least recently used first: when each was last used, its size, the
    report's SHA-256 and the nsys that exported it. The cache holds at most $NSYSAUDIT_CACHE_MAX
    (default 20G; unlimited for no bound): after each new export the least recently used go.

    \b
    Examples:
      nsysaudit cache
      nsysaudit cache --prune --max-size 5G
    """
    if max_size is not None and not prune:
        raise click.UsageError("--max-size is the size --prune prunes to: give --prune too")
    lines = nsysaudit.prune_cache(max_size).lines() if prune else nsysaudit.list_cache().lines()
    with printing():
        for line in lines:
            click.echo(render.escape(line))


@cli.command("schema", short_help="Print the JSON Schema that validates a document.")
@click.argument("kind", required=False, metavar="[KIND]", type=click.Choice(list(nsysaudit.SCHEMA_KINDS)))
def schema_cmd(kind: str | None) -> None:
    """Print the JSON Schema (2020-12) that validates KIND, a document nsysaudit writes; without KIND,
    list them. Every JSON document names its own in its "schema" key (docs/json.md).

    \b
    Examples:
      nsysaudit schema analysis > analysis.schema.json
      nsysaudit analyze run.sqlite --json | jq .schema
    """
    with printing():
        if kind is None:
            for known, validates in nsysaudit.SCHEMA_KINDS.items():
                click.echo(f"{known:<16} {validates}")
        else:
            click.echo(nsysaudit.schema_text(kind), nl=False)


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(dict)["debug"] = True


for _command in cli.commands.values():  # --debug after the command too: nsysaudit analyze X --debug
    _command.params.append(
        click.Option(["--debug"], is_flag=True, expose_value=False, is_eager=True, callback=_set_debug,
                     help="Show Python tracebacks for errors (as nsysaudit --debug COMMAND does).")
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code. The one error funnel lives here.

    Every error is one line on stderr, its text escaped (:func:`nsysaudit.core.text.escape`): file
    names, SQLite messages and schema names come from outside and may hold line breaks or escape
    sequences. A reader that goes away (``nsysaudit analyze X --json | head``) ends the command
    quietly with 141, as if killed by SIGPIPE, the exit status ``head`` users expect.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    state: dict[str, bool] = {"debug": False}  # the group's --debug, set once click has parsed it
    if sys.stdout is None:  # started with stdout closed (>&-): nothing could be shown
        return _error("standard output is closed; nothing was done (redirect it, e.g. > report.txt)", 2)
    with signal_raises(signal.SIGINT, Interrupted):  # not KeyboardInterrupt, which click answers with a line of its own
        return _run(args, state)


def _run(args: list[str], state: dict[str, bool]) -> int:
    try:
        if not [a for a in args if a != "--debug"]:  # bare `nsysaudit`: its help, on stdout, exit 0
            with click.Context(cli, info_name="nsysaudit", **cli.context_settings) as ctx:
                click.echo(ctx.get_help())
            return 0
        cli.main(args=args, prog_name="nsysaudit", standalone_mode=False, obj=state)
        with printing():  # what Python still buffers is written here, not at interpreter exit
            pass
    except OutputFailed as exc:
        _detach_stdout()
        if state["debug"]:
            raise
        return 141 if exc.broken_pipe else _error(str(exc), exc.exit_code)
    except NsysAuditError as exc:
        if state["debug"]:
            raise
        return _error(str(exc), exc.exit_code)
    except click.exceptions.Abort:
        return _error("aborted", 130, prefix="nsysaudit: ")
    except (Interrupted, KeyboardInterrupt):
        return _error("aborted", Interrupted.exit_code, prefix="nsysaudit: ")
    except Terminated:
        return _error("terminated (SIGTERM); what a batch finished is kept in its parts", Terminated.exit_code,
                      prefix="nsysaudit: ")
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return _error(exc.format_message() + hint, exc.exit_code)
    except click.ClickException as exc:
        return _error(exc.format_message(), exc.exit_code)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except OSError as exc:  # the environment failed somewhere no NsysAuditError names it
        if state["debug"]:
            raise
        where = exc.filename if exc.filename is not None else "nsysaudit"
        return _error(f"{where}: {exc.strerror or exc}", 2)
    except MemoryError:  # the environment's limit: one line, exit 2 (never 1, "a check failed")
        if state["debug"]:
            raise
        return _error("out of memory; nothing more was done (raise the memory limit, ulimit -v, or give less input)", 2)
    except RuntimeError as exc:  # threading's "can't start new thread": a limit of memory or of threads
        if state["debug"] or "new thread" not in str(exc):
            raise
        return _error(f"cannot start a thread ({exc}); nothing more was done (raise the memory or thread limit)", 2)
    return 0


def _error(message: str, code: int, *, prefix: str = "nsysaudit: error: ") -> int:
    click.echo(render.escape(prefix + message), err=True)
    return code


class _BytesSink(Protocol):
    def write(self, data: ReadableBuffer, /) -> int: ...

    def flush(self) -> object: ...


class _Stdout(io.RawIOBase):
    """``sys.stdout.buffer`` for writers that hide the OSError they got (polars reports EPIPE as a
    plain ``OSError("Broken pipe (os error 32)")``): the first real error is kept in ``error``."""

    # sys.stdout.buffer, or a replaced stdout that has none, which is then written bytes itself
    # (typeshed's TextIO always has a buffer, so what that object is is said by what is used of it).
    def __init__(self, raw: _BytesSink) -> None:
        self._raw = raw
        self.error: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        try:
            return int(self._raw.write(data))
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self._raw.flush()


@contextlib.contextmanager
def printing() -> Iterator[_Stdout]:
    """Writes to stdout happen inside this block: an OSError there is about stdout, not an input.

    Yields a binary stream over stdout (for streamed ``--json``); flushes stdout at the end.
    """
    buffer = getattr(sys.stdout, "buffer", None)
    # A stdout without a buffer (replaced by a caller) is given the bytes itself, as before.
    out = _Stdout(buffer if buffer is not None else cast(_BytesSink, sys.stdout))
    try:
        yield out
        sys.stdout.flush()
    except OSError as exc:
        raise OutputFailed(out.error or exc) from None


def _detach_stdout() -> None:
    """Point stdout's file descriptor at /dev/null after a failed write, so the interpreter's own
    last flush of what is still buffered cannot fail again ("Exception ignored ... BrokenPipeError")."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (tests capture stdout)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
