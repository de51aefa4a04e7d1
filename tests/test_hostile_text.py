"""Text from traces is data: markup is shown literally, control, bidi, zero-width and tag
characters escaped, JSON keeps the text exactly, long text is shortened with its length; in the
terminal (plain or colour), in report.md, in compare's sources line and on every error line."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from conftest import FORGED, HOSTILE_TEXT, OBSERVE, UNSAFE_SHOWN, assert_one_line_error, hostile_export, run
from rich.console import Console
from scenarios import observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.render.terminal import analysis_renderable

# --- trace text in the terminal and in JSON ------------------------------------------------------

LONG = "W" * 10_000


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_trace_text_is_shown_literally_in_the_terminal(capsys, make_export, name: str) -> None:
    text = HOSTILE_TEXT[name]
    path = make_export(hostile_export(text))
    code, brief, err = run(capsys, "analyze", str(path))  # the answer alone: escaped as well
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(brief), repr(UNSAFE_SHOWN.search(brief))
    code, out, err = run(capsys, "analyze", str(path), "--details")
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(out), repr(UNSAFE_SHOWN.search(out))
    # One real verdict line; no line forged by trace text.
    assert [line for line in out.splitlines() if line.lower().startswith("verdict:")] == ["Verdict: failure_found"]
    if name in ("markup", "link", "html"):
        assert text in out  # shown as written, markup not interpreted
    if name == "ansi":
        assert "\\x1b[2J\\x1b[31mRED\\x1b]8;;https://evil.example\\x07here" in out
    if name == "forged-line":
        assert "ok\\nverdict: no_failure" in out
    if name == "bidi":
        assert "abc\\u202eexe.txt" in out
    if name == "zero-width":
        assert "ad\\u200bmin\\u200d\\u2060\\u2064\\ufeff" in out
    if name == "tag":
        assert "x\\U000e0041\\U000e007fy" in out


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_trace_text_is_kept_exactly_in_json(capsys, make_export, name: str) -> None:
    text = HOSTILE_TEXT[name]
    code, out, err = run(capsys, "analyze", "--json", str(make_export(hostile_export(text))))
    assert code == 0, err
    doc = json.loads(out)  # cannot break the document
    [finding] = doc["findings"]
    assert finding["thread_name"] == text and finding["enclosing"]["api"] == text
    assert doc["library_calls"][0]["api"] == text
    assert doc["processes"][0]["name"] == text


def test_trace_text_in_a_colour_terminal(make_export) -> None:
    """Through a colour terminal console, rich's own styles are the only escape sequences."""
    result = nsysaudit.analyze(make_export(hostile_export(HOSTILE_TEXT["ansi"] + HOSTILE_TEXT["markup"])))
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, color_system="truecolor", width=120)
    console.print(analysis_renderable(result, details=True))
    sequences = set(re.findall(r"\x1b[^a-zA-Z]*[a-zA-Z]", buffer.getvalue()))
    assert sequences and all(s.startswith("\x1b[") and s.endswith("m") for s in sequences), sequences
    assert "\x1b[2J" not in buffer.getvalue() and "\x1b]8;;https://evil" not in buffer.getvalue()
    assert "[bold red]x[/]" in buffer.getvalue()


def test_very_long_trace_text_is_shortened_with_its_length(capsys, make_export) -> None:
    path = make_export(hostile_export(LONG))
    code, out, err = run(capsys, "analyze", str(path), "--details")
    assert code == 0, err
    assert "(10000 chars)" in out and LONG not in out
    assert max(len(line) for line in out.splitlines()) < 500
    code, out, _ = run(capsys, "analyze", "--json", str(path))
    assert json.loads(out)["findings"][0]["thread_name"] == LONG  # the data itself is never cut


# --- trace text in report.md ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOSTILE_TEXT))
def test_trace_text_is_escaped_in_report_md(make_export, tmp_path: Path, name: str) -> None:
    from nsysaudit import seal

    seal.seal_analysis(make_export(hostile_export(HOSTILE_TEXT[name])), tmp_path / "sealed")
    report = (tmp_path / "sealed" / "report.md").read_text(encoding="utf-8")
    assert not UNSAFE_SHOWN.search(report), repr(UNSAFE_SHOWN.search(report))
    assert "verdict: no_failure" not in report


def test_md_escapes_c1_bidi_zero_width_and_tag_characters() -> None:
    from nsysaudit.render.markdown import md

    assert md("a\x9b31mb\u202ec\u2066d\u200be\ufefff\U000e0041g") == (
        "a\\\\x9b31mb\\\\u202ec\\\\u2066d\\\\u200be\\\\ufefff\\\\U000e0041g"
    )


def test_markdown_report_escapes_trace_text(make_export, tmp_path: Path) -> None:
    from nsysaudit import seal

    text = "[x](https://evil.example) <img src=x> | *em* # h\n- forged item"
    sealed = seal.seal_analysis(make_export(hostile_export(text)), tmp_path / "sealed")
    report = (tmp_path / "sealed" / "report.md").read_text(encoding="utf-8")
    # Every Markdown/HTML character of the trace text is backslash-escaped; the line break too.
    assert not re.search(r"(?<!\\)\[x(?<!\\)\]|(?<!\\)<img|(?<!\\)\*em", report)
    assert "\n- forged item" not in report
    assert "\\[x\\](https://evil.example) \\<img src=x\\> \\| \\*em\\* \\# h\\\\n- forged item" in report
    assert sealed.dir == tmp_path / "sealed"


# --- text in every command and on stderr ---------------------------------------------------------


def test_compare_sources_line_escapes_version_strings(capsys, make_export, tmp_path: Path) -> None:
    observe = observe_nested_failure()
    observe.nsys_version = "2023.4\x1b]8;;https://e.x\x07\nverdicts:  observe no_failure\u200b"
    o = make_export(observe, "observe.sqlite")
    r = make_export(release_three_allocations(), "release.sqlite")
    code, out, err = run(capsys, "compare", str(o), str(r), "--out", str(tmp_path / "cmp"), "--details")
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(out), repr(UNSAFE_SHOWN.search(out))
    shown = " ".join(out.split())  # the terminal wraps long lines
    assert ("nsys version: observe 2023.4\\x1b]8;;https://e.x\\x07\\nverdicts: observe no_failure\\u200b, release "
            "2023.4.4.54 (DIFFERENT)") in shown
    assert [line for line in out.splitlines() if line.lstrip().startswith("verdicts:")] == []


def test_error_line_escapes_a_hostile_file_name(capsys, evidence: Path) -> None:
    bad = evidence / f"{FORGED}.sqlite"
    bad.write_bytes(b"")
    for args in (["analyze", str(bad)], ["compare", str(bad), str(OBSERVE), "--out", str(evidence / "o")]):
        code, out, err = run(capsys, *args)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and not UNSAFE_SHOWN.search(err), repr(err)
        assert "x\\nseal: sha256:" + "0" * 64 + "\\x1b]0;title\\x07\\u202e.sqlite: empty file" in err


def test_error_line_escapes_schema_names_in_sqlite_messages(capsys, make_export) -> None:
    """SQLite's "malformed database schema (NAME)" quotes a schema object's name: one escaped line."""
    spec = observe_nested_failure()
    spec.raw_sql = [
        "PRAGMA writable_schema = ON;"
        "INSERT INTO sqlite_master VALUES ('table', 'evil\nverdict: no_failure\x1b[31m', 'evil', 0, 'CREATE nonsense');"
    ]
    path = make_export(spec)
    code, _, err = run(capsys, "analyze", str(path))
    assert_one_line_error(code, err, path, "malformed database schema (evil\\nverdict: no_failure\\x1b[31m)")
    assert not UNSAFE_SHOWN.search(err)
