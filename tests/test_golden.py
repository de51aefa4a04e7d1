"""Golden files for every human-facing report: the terminal report (fixed width, no colour) and
report.md. Regenerate with `make golden` (NSYSAUDIT_REGEN_GOLDEN=1) and review the diff."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import H200
from rich.console import Console
from scenarios import observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.render import analysis_renderable, comparison_renderable
from nsysaudit.reports.markdown import analysis_markdown, comparison_markdown

GOLDEN = Path(__file__).parent / "golden"
REPO = Path(__file__).parent.parent
REGEN = os.environ.get("NSYSAUDIT_REGEN_GOLDEN") == "1"


def render(renderable: object) -> str:
    console = Console(width=110, color_system=None, force_terminal=False, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN:
        path.write_text(text)
    assert path.exists(), f"{path} missing: run `make golden`"
    assert text == path.read_text(), f"{name} differs from its golden file: run `make golden` and review the diff"


@pytest.fixture
def at_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reports name inputs as given: analyze with repo-relative paths so the goldens are stable.
    monkeypatch.chdir(REPO)


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("arm", ["observe", "release"])
def test_terminal_report_of_real_capture_with_telemetry(at_repo: None, arm: str) -> None:
    result = nsysaudit.analyze(rel(H200 / f"{arm}.sqlite"), telemetry=rel(H200 / f"{arm}.telemetry.jsonl"))
    check(f"h200-{arm}.txt", render(analysis_renderable(result)))
    check(f"h200-{arm}.md", analysis_markdown(result.to_dict()))


def test_comparison_of_real_captures(at_repo: None) -> None:
    arms = [
        nsysaudit.analyze(rel(H200 / f"{a}.sqlite"), telemetry=rel(H200 / f"{a}.telemetry.jsonl"))
        for a in ("observe", "release")
    ]
    doc = nsysaudit.compare_results(*arms).to_dict()
    check("h200-compare.txt", render(comparison_renderable(doc)))
    check("h200-compare.md", comparison_markdown(doc))


def test_comparison_of_builder_arms(make_export: Callable[..., Path], at_repo: None) -> None:
    observe = nsysaudit.analyze(make_export(observe_nested_failure(), "observe.sqlite"))
    release = nsysaudit.analyze(make_export(release_three_allocations(), "release.sqlite"))
    doc = nsysaudit.compare_results(observe, release).to_dict()
    # tmp paths differ per run; the comparison names inputs by basename only.
    check("builder-compare.txt", render(comparison_renderable(doc)))
    check("builder-compare.md", comparison_markdown(doc))
