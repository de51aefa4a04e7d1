"""The command line: a thin shell over the library. The only module that uses click.

Every command opens its inputs, calls one library function, renders, and maps errors to exit
codes through one funnel: 2 for unusable input (one line on stderr, no traceback), 1 for a check
that failed, 0 when the analysis ran whatever its verdict.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console

from nsysaudit import __version__
from nsysaudit.analysis import analyze
from nsysaudit.errors import NsysAuditError
from nsysaudit.model import DEFAULT_LIBRARY_DOMAINS
from nsysaudit.render import print_analysis


def dump_json(doc: Any) -> str:
    """Canonical JSON for stdout: sorted keys, no NaN, UTF-8 kept as is."""
    return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nsysaudit")
@click.option("--debug", is_flag=True, help="Show Python tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Forensics on NVIDIA Nsight Systems exports: CUDA allocation failures nested in library calls."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


@cli.command("analyze")
@click.argument("path", type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of tables.")
@click.option(
    "--nsys",
    "nsys_path",
    type=click.Path(dir_okay=False),
    envvar="NSYSAUDIT_NSYS",
    help="nsys binary for exporting .nsys-rep reports (default: $NSYSAUDIT_NSYS, then PATH).",
)
@click.option(
    "--library-domain",
    "library_domains",
    multiple=True,
    default=DEFAULT_LIBRARY_DOMAINS,
    show_default=True,
    help="NVTX domain whose ranges are library calls (repeatable).",
)
def analyze_cmd(path: str, as_json: bool, nsys_path: str | None, library_domains: Sequence[str]) -> None:
    """Analyze one export (.sqlite) or report (.nsys-rep)."""
    result = analyze(path, nsys_path=nsys_path, library_domains=library_domains)
    if as_json:
        click.echo(dump_json(result.to_dict()))
    else:
        print_analysis(result, Console(highlight=False))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; return the exit code. The one error funnel lives here."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="nsysaudit", standalone_mode=False)
    except NsysAuditError as exc:
        if debug:
            raise
        click.echo(f"nsysaudit: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("nsysaudit: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except BrokenPipeError:
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
