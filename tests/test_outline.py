"""The outline (render/outline.py): built once from a document, worded from words.py; the terminal,
report.md and report.html lay out the same entries."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from rich.console import Group

from nsysaudit import words
from nsysaudit.render import outline
from nsysaudit.render.markdown import answer_lines
from nsysaudit.render.terminal import answer_parts, to_text
from nsysaudit.reports.documents import AllocatorNote, Answer

PACKAGE = Path(__file__).resolve().parent.parent / "nsysaudit"


def emitted_note_codes() -> set[str]:
    """The note codes analysis/allocator.py writes (``{"code": "...", "values": ...}`` literals)."""
    tree = ast.parse((PACKAGE / "analysis" / "allocator.py").read_text())
    return {v.value for node in ast.walk(tree) if isinstance(node, ast.Dict)
            for k, v in zip(node.keys, node.values, strict=True)
            if isinstance(k, ast.Constant) and k.value == "code" and isinstance(v, ast.Constant)
            and isinstance(v.value, str)}


def test_every_snapshot_note_the_analysis_writes_has_words() -> None:
    assert emitted_note_codes() == set(words.SNAPSHOT_NOTES)


@pytest.mark.parametrize(("note", "said"), [
    ({"code": "segment_events_unmatched", "values": {"count": 1234}},
     "1,234 segment event(s) inside the capture match no memory event of the trace"),
    ({"code": "history_starts_with_segments", "values": {"reserved_before_bytes": None}},
     "the allocator held unknown B before its history's first entry"),
    ({"code": "from_a_later_version", "values": {"b": 2, "a": True}}, "note from_a_later_version: a true, b 2"),
    ({"code": "no_history", "values": {}}, "note no_history: "),
])
def test_a_note_is_worded_from_its_code_and_values(note: AllocatorNote, said: str) -> None:
    entry = outline._note(note)
    assert [p.text for p in entry.phrases] == [said]
    assert entry.severity == ("warning" if note["code"] in words.WARNING_NOTES else None)


def answer(**extra: object) -> Answer:
    base: Answer = {
        "verdict": "failure_found", "summary": "cudaMalloc returned 2 inside cublasCreate_v2",
        "findings": [{"finding": 0, "kind": "nested_alloc_failure", "what": "cudaMalloc returned 2", "when": None,
                      "held": "139 GiB held"}],
        "censored": [], "censored_total": 0, "limits": [], "stalls": [],
    }
    return {**base, **extra}  # type: ignore[typeddict-item]


def test_the_allocators_view_is_said_under_its_finding_in_every_back_end() -> None:
    section = {"snapshots": [], "stacks": [], "rule": "",
               "at": [{"point": "finding", "finding": 0, "label": "x", "t_ns": 1, "pid": 1, "global_pid": 1,
                       "states": [], "statement": "At the failure, the allocator held <b>9 GiB</b>."}]}
    said = outline.answer_outline(answer(), allocator=section)  # type: ignore[arg-type]
    [finding] = said.entries
    assert [(u.label, u.phrases[0].text) for u in finding.under] == [
        ("held", "139 GiB held"), ("allocator", "At the failure, the allocator held <b>9 GiB</b>.")]
    md = answer_lines(said)
    assert "- allocator: At the failure, the allocator held \\<b\\>9 GiB\\</b\\>." in md
    shown = to_text(Group(*answer_parts(said)), width=200)
    assert "     allocator: At the failure, the allocator held <b>9 GiB</b>." in shown


def test_more_censored_calls_refer_to_where_each_back_end_shows_them() -> None:
    censored = [{"lib_id": i, "what": f"call {i}", "held": None} for i in range(5)]
    said = outline.answer_outline(answer(censored=censored, censored_total=7))
    more = said.entries[-1]
    assert more.phrases[0].text == "and 2 more censored library call(s)" and more.more_in == "coverage"
    assert "- and 2 more censored library call(s) (see Coverage)" in answer_lines(said)
    assert "  and 2 more censored library call(s) (--details)" in to_text(Group(*answer_parts(said)), width=200)


@pytest.mark.parametrize(("verdicts", "gravest"), [
    (["no_failure", "failure_found"], "failure_found"), (["no_failure", "inconclusive"], "inconclusive"),
    (["no_failure", "no_failure"], "no_failure"), ([], ""),
])
def test_the_comparisons_verdict_is_the_gravest_of_its_arms(verdicts: list[str], gravest: str) -> None:
    assert outline.gravest(verdicts) == gravest


def test_a_template_keeps_its_own_words_and_each_back_end_escapes_its_values() -> None:
    """A phrase with values: report.md's markup in the template stays, each value (and each of several,
    and each field of a phrase among them) is trace text, escaped by itself; None is unknown."""
    from nsysaudit.render.markdown import _said as md_said
    from nsysaudit.render.terminal import _said as terminal_said

    pair = outline.Phrase("{kind}={name}", "name", values={"kind": "x|y", "name": "a_b"})
    said = outline.Phrase("sha256 `{sha}` of **{name}**: {many}; {gone}", "name",
                          values={"sha": "ab", "name": "t_1\x1b[31m", "many": ("<b>", pair), "gone": None})
    assert list(outline.pieces(said))[:2] == [("sha256 `", False), ("ab", True)]
    assert md_said(said) == "sha256 `ab` of **t\\_1\\\\x1b\\[31m**: \\<b\\>, x\\|y=a\\_b; unknown"
    assert terminal_said(said).plain == "sha256 `ab` of **t_1\\x1b[31m**: <b>, x|y=a_b; unknown"


def test_an_arms_library_call_in_report_md_escapes_its_names_under_its_heading() -> None:
    """The arm's library call is a section a level below its arm's (####): its API and thread names are
    data in its heading, the allocations in a table, the straddling calls said after the tables."""
    import json

    from nsysaudit.render.markdown import comparison_markdown

    doc = json.loads((Path(__file__).parent / "golden" / "sealed-torch-compare.json").read_text())
    call = doc["arms"]["observe"]["library_calls"][0]
    call.update(api="cublas_<x>", thread_name="t|1", straddling=[{"api": "cudaFree"}])
    text = comparison_markdown(doc)
    assert "#### cublas\\_\\<x\\> on pid " in text and ", name t\\|1)" in text
    assert "\nCalls straddling its edges: 1.\n" in text
    assert call["telemetry"], "the golden's call sits among telemetry lines"
    after_table = text.index("\nCalls straddling its edges: 1.\n")
    telemetry = text.index("\n- ", after_table)  # the first bullet after it: the call's telemetry lines
    assert text.rindex("|", 0, after_table) < after_table < telemetry < text.index("\n####", after_table)
    assert text.count("\n## The observe arm\n") == 1 and "\n### Library calls of interest (" in text
