"""Golden files for every human-facing report: the terminal report (fixed width, no colour) and
report.md. Regenerate with `make golden` (NSYSAUDIT_REGEN_GOLDEN=1) and review the diff."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ENGINE_KEYS, H200, H200_2025, REPO
from scenarios import nccl_arm, nccl_telemetry, observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.render import canonical, terminal
from nsysaudit.render.markdown import analysis_markdown, answer_lines, comparison_markdown
from nsysaudit.render.outline import answer_outline
from nsysaudit.render.terminal import analysis_renderable, comparison_renderable

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("NSYSAUDIT_REGEN_GOLDEN") == "1"


def render(renderable: object) -> str:
    """The report as the terminal shows it (no trailing spaces), 110 columns, no colour; the line
    saying which engine read the input (and its SQLite) depends on the install, not the evidence:
    it is pinned by tests/test_cli.py, and here reads ``engine <engine>``."""
    return render_at(renderable, 110)


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if REGEN:
        path.parent.mkdir(exist_ok=True)
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
    check(f"h200-{arm}.txt", render(analysis_renderable(result, details=True)))
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


def test_nccl_builder_case(make_export, tmp_path: Path, at_repo: None) -> None:
    """The NCCL failure (tests/scenarios.py, nccl_arm): its answer and the comparison of its arms."""
    results = []
    for arm in ("observe", "release"):
        telemetry = tmp_path / f"{arm}.telemetry.jsonl"
        telemetry.write_text("".join(json.dumps(line) + "\n" for line in nccl_telemetry(arm)))
        results.append(nsysaudit.analyze(make_export(nccl_arm(arm), f"{arm}.sqlite"), telemetry=telemetry))
    check("builder-nccl-answer.md", "\n".join(answer_lines(answer_outline(results[0].to_dict()["answer"]))))
    doc = nsysaudit.compare_results(*results).to_dict()
    check("builder-nccl-compare.txt", render(comparison_renderable(doc)))
    check("builder-nccl-compare.md", comparison_markdown(doc))


# --- the real nsys 2025.3 captures ------------------------------------------------------------------

REAL_2025 = ["torch/observe", "torch/release", "capi/observe", "capi/release", "event/observe", "event/release",
             "capture-stop/stop", "async/observe", "async/release", "expandable/observe", "expandable/release",
             "shared/observe", "shared/release", "nccl/observe", "nccl/release", "sync/serialized", "sync/forked"]


def analyze_real(name: str) -> nsysaudit.AnalysisResult:
    base = H200_2025 / name
    telemetry = base.with_name(base.name + ".telemetry.jsonl")
    return nsysaudit.analyze(rel(base.with_suffix(".sqlite")), telemetry=rel(telemetry))


def render_at(renderable: object, width: int) -> str:
    """:func:`render` at ``width`` columns."""
    return re.sub(r"^  engine .*$", "  engine <engine>", terminal.to_text(renderable, width=width), flags=re.MULTILINE)


@pytest.mark.parametrize("name", ["torch/observe", "async/observe", "capture-stop/stop", "nccl/observe",
                                  "sync/serialized"])
def test_the_answer_first_at_80_columns(at_repo: None, name: str) -> None:
    """What a newcomer sees without --details: the answer, in 80 columns, hanging indents."""
    check(f"answer-{name.replace('/', '-')}.txt", render_at(analysis_renderable(analyze_real(name)), 80))


@pytest.mark.parametrize("name", REAL_2025)
def test_reports_of_real_nsys2025_captures(at_repo: None, name: str) -> None:
    result = analyze_real(name)
    stem = "nsys2025-" + name.replace("/", "-")
    check(f"{stem}.txt", render(analysis_renderable(result, details=True)))
    check(f"{stem}.md", analysis_markdown(result.to_dict()))


@pytest.mark.parametrize("pair", ["torch", "event", "capi", "async", "expandable", "shared", "nccl"])
def test_comparisons_of_real_nsys2025_pairs(at_repo: None, pair: str) -> None:
    doc = nsysaudit.compare_results(analyze_real(f"{pair}/observe"), analyze_real(f"{pair}/release")).to_dict()
    check(f"nsys2025-{pair}-compare.txt", render(comparison_renderable(doc)))
    check(f"nsys2025-{pair}-compare.md", comparison_markdown(doc))


def test_comparison_of_the_sync_pair_in_its_own_names(at_repo: None) -> None:
    """The host stalls of the serialized and forked arms, named as compare --labels names them."""
    doc = nsysaudit.compare_results(analyze_real("sync/serialized"), analyze_real("sync/forked"),
                                    labels=("serialized", "forked")).to_dict()
    check("nsys2025-sync-compare.txt", render(comparison_renderable(doc)))
    check("nsys2025-sync-compare.md", comparison_markdown(doc))


@pytest.mark.parametrize("name", [*REAL_2025, "2023.4/observe", "2023.4/release"])
def test_json_of_every_real_capture(at_repo: None, name: str) -> None:
    """The whole JSON contract of each real capture, with its telemetry (indented for review)."""
    if name.startswith("2023.4/"):
        arm = name.split("/")[1]
        result = nsysaudit.analyze(rel(H200 / f"{arm}.sqlite"), telemetry=rel(H200 / f"{arm}.telemetry.jsonl"))
    else:
        result = analyze_real(name)
    doc = result.to_dict()
    doc["tool"]["version"] = "<version>"  # the contract, not the release number
    doc["input"].update(dict.fromkeys(ENGINE_KEYS, "<engine>"))  # the install, not the evidence
    check(f"json/{name.replace('/', '-')}.json", canonical.dumps(doc, indent=True).decode() + "\n")


# --- sealed folders: what a reviewer receives ------------------------------------------------------


def test_sealed_single_arm_report(at_repo: None, tmp_path: Path) -> None:
    base = H200_2025 / "torch" / "observe"
    sealed = nsysaudit.seal_analysis(
        rel(base.with_suffix(".sqlite")), tmp_path / "arm", telemetry=rel(base.with_name("observe.telemetry.jsonl"))
    )
    check("sealed-torch-observe.md", (sealed.dir / "report.md").read_text())
    check("sealed-torch-observe.json", (sealed.dir / "report.json").read_text())


def test_sealed_comparison_report(at_repo: None, tmp_path: Path) -> None:
    torch = H200_2025 / "torch"
    sealed = nsysaudit.seal_compare(
        rel(torch / "observe.sqlite"),
        rel(torch / "release.sqlite"),
        tmp_path / "cmp",
        observe_telemetry=rel(torch / "observe.telemetry.jsonl"),
        release_telemetry=rel(torch / "release.telemetry.jsonl"),
    )
    check("sealed-torch-compare.md", (sealed.dir / "report.md").read_text())
    check("sealed-torch-compare.json", (sealed.dir / "report.json").read_text())
    check("sealed-torch-compare.inputs.txt", (sealed.dir / "inputs-sha256.txt").read_text())


# --- the memory snapshots (snap/, issue 36): the allocator's own view in the answer and the details ----


def analyze_snap(arm: str) -> nsysaudit.AnalysisResult:
    base = H200_2025 / "snap"
    return nsysaudit.analyze(rel(base / f"{arm}.sqlite"), telemetry=rel(base / f"{arm}.telemetry.jsonl"),
                             snapshots=[rel(base / f"{arm}-handoff.pickle"), rel(base / f"{arm}-end.pickle")])


def test_reports_with_memory_snapshots(at_repo: None) -> None:
    observe, release = analyze_snap("observe"), analyze_snap("release")
    check("snap-observe.txt", render(analysis_renderable(observe, details=True)))
    check("snap-observe.md", analysis_markdown(observe.to_dict()))
    doc = nsysaudit.compare_results(observe, release).to_dict()
    check("snap-compare.txt", render(comparison_renderable(doc)))
    check("snap-compare.md", comparison_markdown(doc))
