"""The Makefile's own output fits 80 columns: `make help`, every command make echoes, every line echoed.

What nsysaudit prints under `make demo` is held to 80 columns by the golden files; these tests hold
what make itself prints, without running a recipe (`make -n`: nothing is built or installed).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
WIDTH = 80

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make(*args: str, makefile: Path | None = None) -> list[str]:
    flags = ["-f", str(makefile)] if makefile is not None else []
    proc = subprocess.run(
        ["make", "--no-print-directory", *flags, *args], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def targets() -> list[str]:
    """The targets `make help` lists (each with its `##` line)."""
    return re.findall(r"^([a-z-]+):.*## ", (REPO / "Makefile").read_text(), re.MULTILINE)


def too_wide(lines: list[str]) -> list[str]:
    return [f"{len(line)}: {line}" for line in lines if len(line.expandtabs()) > WIDTH]


def test_make_help_fits_80_columns() -> None:
    lines = make("help")
    assert len(lines) == len(targets()) >= 10
    assert not too_wide(lines)


def silenced(makefile: str) -> str:
    """The Makefile with each recipe line make does not echo (`@...`, with its continuation lines) a
    no-op, so that `make -n` lists only the commands make prints when it runs them."""
    out: list[str] = []
    skipping = False
    for line in makefile.splitlines():
        if skipping:
            skipping = line.endswith("\\")
            continue
        if line.startswith("\t@"):
            out.append("\t@:")
            skipping = line.endswith("\\")
            continue
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("target", targets())
def test_every_command_make_echoes_fits_80_columns(tmp_path: Path, target: str) -> None:
    # -B: every recipe, prerequisites included, as on a fresh clone; -n: printed, not run.
    copy = tmp_path / "Makefile"
    copy.write_text(silenced((REPO / "Makefile").read_text()))
    assert not too_wide(make("-n", "-B", target, makefile=copy))


def test_the_silencing_keeps_the_echoed_commands() -> None:
    """The test above would pass on an empty Makefile: the copy still lists the echoed commands."""
    text = silenced((REPO / "Makefile").read_text())
    assert "\t$(PY) -m pytest -q\n" in text and "\t@$(NSYSAUDIT) analyze" not in text


def test_every_line_the_recipes_echo_fits_80_columns() -> None:
    # The `echo` commands of every recipe (demo's headings among them), run as make would run them.
    echoed: list[str] = []
    for target in targets():
        for command in make("-n", "-B", target):
            for part in command.split("; "):
                if part.startswith("echo"):
                    proc = subprocess.run(["bash", "-c", part], cwd=REPO, capture_output=True, text=True, check=True)
                    echoed.extend(proc.stdout.splitlines())
    assert any(line.startswith("--- 2. ") for line in echoed), "the demo's headings were not found"
    assert not too_wide(echoed)


def test_demo_leads_with_the_failure_then_its_comparison_then_the_censored_case() -> None:
    commands = [c for c in make("-n", "demo") if "nsysaudit " in c]
    assert [c.split()[1] for c in commands] == ["analyze", "compare", "verify", "analyze"]
    assert "nsys2025.3/torch/observe.sqlite" in commands[0] and "nsys2023.4/observe.sqlite" in commands[3]
