"""``nsysaudit check``: expectations over exports, one line per file, JUnit XML, exit 0 / 1 / 2."""

from __future__ import annotations

import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import FIXTURES, H200_2025, TORCH, run
from scenarios import observe_nested_failure, release_three_allocations

from nsysaudit.batch.check import Expectations, check, glob_match

EXPECTATIONS = FIXTURES / "expectations.toml"
def write(folder: Path, text: str, name: str = "expect.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def test_committed_expectations_pass_over_every_bundled_export(capsys, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    code, out, err = run(capsys, "check", FIXTURES, "--expect", EXPECTATIONS, "--junit", junit)
    assert code == 0, out + err
    lines = out.splitlines()
    exports = sorted(FIXTURES.rglob("*.sqlite"))
    assert len(exports) == 26 and lines[-1] == "26 passed, 0 failed"
    assert lines[:-1] == [line for line in lines[:-1] if line.startswith("pass ")]
    assert f"pass {TORCH / 'observe.sqlite'} (failure_found, 1 finding(s))" in lines
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("27", "0")


def test_a_wrong_expectation_fails_naming_the_file_and_why_and_in_junit(capsys, tmp_path: Path) -> None:
    text = EXPECTATIONS.read_text().replace(
        'api = "cudaMalloc_v3020", return_code = 2, enclosing = "cublasCreate_v2"',
        'api = "cudaMalloc_v3020", return_code = 3, enclosing = "cublasCreate_v2"',
    )
    public = 'files = "public/*.sqlite"\nverdict = '
    text = text.replace(public + '"no_failure"', public + '"inconclusive"')
    expect = write(tmp_path, text)
    shutil.copytree(FIXTURES, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("expectations.toml"))
    junit = tmp_path / "out.xml"
    code, out, err = run(capsys, "check", tmp_path, "--expect", expect, "--junit", junit)
    assert code == 1
    assert err.startswith("nsysaudit: error: ") and "12 failed" in err and err.count("\n") == 1
    lines = out.splitlines()
    assert lines[-1] == "14 passed, 12 failed"
    observe = tmp_path / "h200-cuda13-nsys2025.3/torch/observe.sqlite"
    assert (  # the finding closest to the expectation is named, with the field that differs
        f"FAIL {observe}: expected 1 x kind=nested_alloc_failure api=cudaMalloc_v3020 return_code=3 "
        "enclosing=cublasCreate_v2, found 0 (finding 1 differs: return_code 2, not 3)" in lines
    )
    saxpy = tmp_path / "public/pipit_saxpy_2022.2.sqlite"
    assert f"FAIL {saxpy}: verdict is no_failure, expected inconclusive" in lines
    cases = {c.get("file"): c for c in ET.parse(junit).getroot().iter("testcase")}
    failure = cases[str(observe)].find("failure")
    assert failure is not None and "return_code=3" in (failure.get("message") or "")
    assert cases[str(tmp_path / "h200-cuda13-nsys2025.3/torch/release.sqlite")].find("failure") is None
    assert sum(c.find("failure") is not None for c in cases.values()) == 12


def test_files_without_expectation_and_expectations_without_files_fail(capsys, make_export, tmp_path: Path) -> None:
    make_export(observe_nested_failure(), "new.sqlite")
    expect = write(
        tmp_path,
        '[[expect]]\nfiles = "gone/*.sqlite"\nverdict = "no_failure"\n',
    )
    junit = tmp_path / "j.xml"
    code, out, _ = run(capsys, "check", tmp_path, "--expect", expect, "--junit", junit)
    assert code == 1
    assert out.splitlines() == [
        f"FAIL {tmp_path / 'new.sqlite'}: no expectation for this file",
        f"FAIL expectation 1 (files = 'gone/*.sqlite'): matches no file (relative to {tmp_path})",
        "0 passed, 2 failed",
    ]
    names = [c.get("name") for c in ET.parse(junit).getroot().iter("testcase")]
    assert names == [f"{tmp_path / 'new.sqlite'} [no expectation]", "expectation 1 (files = 'gone/*.sqlite')"]


def test_every_kind_of_expectation_is_checked(make_export, tmp_path: Path) -> None:
    observe = make_export(observe_nested_failure(), "observe.sqlite")
    make_export(release_three_allocations(), "release.sqlite")
    expectations = Expectations.parse(
        """
[[expect]]
files = "*.sqlite"
max_failed_calls = 0
[[expect]]
name = "observe arm"
files = "observe.sqlite"
findings = 2
[[expect]]
files = "release.sqlite"
verdict = "failure_found"
findings = [{ kind = "nested_call_failure" }]
""",
        base=tmp_path,
    )
    report = check([tmp_path], expectations)
    assert report.lines() == [
        f"FAIL {observe}: expectation 1 (files = '*.sqlite'): 1 failed calls, at most 0 expected; "
        "observe arm: 1 finding(s), expected 2",
        f"FAIL {tmp_path / 'release.sqlite'}: expectation 3 (files = 'release.sqlite'): verdict is no_failure, "
        "expected failure_found; expected 1 x kind=nested_call_failure, found 0",
        "0 passed, 2 failed",
    ]
    assert [c.passed for c in report.cases] == [False, False, True, False]


def test_censoring_must_be_allowed(tmp_path: Path) -> None:
    stop = H200_2025 / "capture-stop"
    strict = Expectations.parse('[[expect]]\nfiles = "stop.sqlite"\nverdict = "inconclusive"\n', base=stop)
    (line, summary) = check([stop], strict).lines()
    assert line == (
        f"FAIL {stop / 'stop.sqlite'}: 1 censored library call(s) (capture_ended_inside, "
        "nsys_warned_cuda_events_missing); allowed: none"
    )
    assert summary == "0 passed, 1 failed"
    text = '[[expect]]\nfiles = "stop.sqlite"\nallow_censored = ["capture_ended_inside"]\n'
    some = Expectations.parse(text, base=stop)
    assert "allowed: capture_ended_inside" in check([stop], some).lines()[0]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[expect]\nfiles = 1", "not valid TOML: "),
        ('[[expect]]\nfiles = "a"\nverdit = "no_failure"\n', "[[expect]] number 1: unknown key(s) verdit"),
        ('[[expect]]\nfiles = "a"\nverdict = "ok"\n', "verdict 'ok' is not one of"),
        ('[[expect]]\nverdict = "no_failure"\n', "'files' must be a path or glob"),
        ('[[expect]]\nfiles = "a"\nfindings = [{ kind = "oom" }]\n', "finding 1: kind 'oom' is not one of"),
        ('[[expect]]\nfiles = "a"\nfindings = [{ retrun_code = 2 }]\n', "finding 1: unknown key(s) retrun_code"),
        ('[[expect]]\nfiles = "a"\nfindings = -1\n', "'findings' must be a count"),
        ('[[expect]]\nfiles = "a"\nmax_failed_calls = "3"\n', "'max_failed_calls' must be a non-negative integer"),
        ('[expect]\nfiles = "a"\n', "no [[expect]] tables"),
        ('files = "a"\n', "unknown top-level key(s) files"),
    ],
)
def test_unusable_expectations_file_is_one_line_exit_2(capsys, tmp_path: Path, text: str, problem: str) -> None:
    expect = write(tmp_path, text)
    junit = tmp_path / "j.xml"
    code, out, err = run(capsys, "check", TORCH, "--expect", expect, "--junit", junit)
    assert (code, out) == (2, "")
    assert err.startswith(f"nsysaudit: error: {expect}: ") and problem in err and err.count("\n") == 1, err
    assert not junit.exists()


def test_an_expectations_file_that_is_not_a_regular_file_is_refused_unread(capsys, tmp_path: Path) -> None:
    """/dev/zero would be read forever (4 GB in 10 s), a FIFO without a writer would block: both are
    refused before a byte is read, as --telemetry refuses them."""
    fifo = tmp_path / "expect.toml"
    os.mkfifo(fifo)
    for expect in (Path("/dev/zero"), fifo):
        code, out, err = run(capsys, "check", TORCH, "--expect", expect)
        assert (code, out, err) == (2, "", f"nsysaudit: error: {expect}: not a regular file\n")


def test_expectations_nested_too_deeply_are_one_line_not_a_traceback(capsys, tmp_path: Path) -> None:
    expect = write(tmp_path, "x = " + "[" * 5000 + "]" * 5000 + "\n")
    code, out, err = run(capsys, "check", TORCH, "--expect", expect)
    assert (code, out, err) == (
        2, "", f"nsysaudit: error: {expect}: not usable TOML: arrays or tables nested too deeply\n"
    )


def test_toml_syntax_error_names_its_line(capsys, tmp_path: Path) -> None:
    expect = write(tmp_path, '[[expect]]\nfiles = "a"\nverdict = no_failure\n')
    code, _, err = run(capsys, "check", TORCH, "--expect", expect)
    assert code == 2 and "line 3" in err


def test_unusable_input_or_expectations_path_is_one_line_exit_2(capsys, tmp_path: Path) -> None:
    expect = write(tmp_path, '[[expect]]\nfiles = "*.sqlite"\n')
    junit = tmp_path / "j.xml"
    for args, named in (
        (["check", tmp_path / "missing.sqlite", "--expect", expect, "--junit", junit], tmp_path / "missing.sqlite"),
        (["check", tmp_path, "--expect", tmp_path / "none.toml"], tmp_path / "none.toml"),
        (["check", tmp_path, "--expect", tmp_path], tmp_path),
        (["check", tmp_path / "empty-dir", "--expect", expect], tmp_path / "empty-dir"),
        (["check", TORCH, "--expect", EXPECTATIONS, "--junit", tmp_path / "no" / "j.xml"], tmp_path / "no" / "j.xml"),
    ):
        (tmp_path / "empty-dir").mkdir(exist_ok=True)
        code, out, err = run(capsys, *args)
        assert (code, out) == (2, ""), (args, out, err)
        assert err.startswith("nsysaudit: error: ") and str(named) in err and err.count("\n") == 1, err
    assert not junit.exists()


def test_glob_rules() -> None:
    assert glob_match("public/*.sqlite", "public/a.sqlite")
    assert not glob_match("public/*.sqlite", "public/x/a.sqlite")
    assert glob_match("**/observe.sqlite", "observe.sqlite")
    assert glob_match("**/observe.sqlite", "a/b/observe.sqlite")
    assert glob_match("a/**", "a/b/c.sqlite")
    assert not glob_match("observe.sqlite", "/abs/observe.sqlite")
    assert glob_match("/abs/*.sqlite", "/abs/observe.sqlite")


def test_junit_never_replaces_a_file_that_is_not_junit(capsys, tmp_path: Path) -> None:
    # --junit naming an export by mistake must not destroy the evidence; an earlier JUnit file
    # (a rerun of the same CI job) is replaced.
    export = tmp_path / "observe.sqlite"
    shutil.copyfile(TORCH / "observe.sqlite", export)
    before = export.read_bytes()
    expect = write(tmp_path, '[[expect]]\nfiles = "observe.sqlite"\nverdict = "failure_found"\nfindings = 1\n'
                             'max_failed_calls = 28\n')
    code, out, err = run(capsys, "check", export, "--expect", expect, "--junit", export)
    assert (code, out) == (2, "") and "is not a JUnit XML file, so it is not replaced" in err, err
    assert export.read_bytes() == before
    junit = tmp_path / "j.xml"
    for _ in range(2):
        code, out, err = run(capsys, "check", export, "--expect", expect, "--junit", junit)
        assert code == 0, out + err
    assert ET.parse(junit).getroot().find("testsuite") is not None


def test_an_unusable_export_is_an_error_line_the_others_are_still_checked_and_junit_says_so(
    capsys, tmp_path: Path
) -> None:
    """A truncated export among good ones: its ERROR line, every other file checked, the JUnit file
    written (an <error> testcase, each with its time), replacing an earlier green one; exit 2."""
    shutil.copytree(FIXTURES, tmp_path, dirs_exist_ok=True)
    broken = tmp_path / "h200-cuda13-nsys2025.3/torch/observe.sqlite"
    whole = broken.read_bytes()
    junit = tmp_path / "junit.xml"
    code, _, err = run(capsys, "check", tmp_path, "--expect", tmp_path / "expectations.toml", "--junit", junit)
    assert code == 0, err
    green = ET.parse(junit).getroot()
    assert green.get("errors") == "0" and green.get("failures") == "0"
    broken.write_bytes(whole[: len(whole) // 3])
    code, out, err = run(capsys, "check", tmp_path, "--expect", tmp_path / "expectations.toml", "--junit", junit)
    assert code == 2
    lines = out.splitlines()
    error = [line for line in lines if line.startswith("ERROR ")]
    assert error == [f"ERROR {broken}: truncated SQLite file: header says {len(whole) // 4096} pages of 4096 bytes "
                     f"({len(whole):,} bytes) but the file has {len(whole) // 3:,} bytes".replace(",", "")], lines
    assert lines[-1] == "25 passed, 0 failed, 1 unusable"
    assert err.startswith("nsysaudit: error: 1 input(s) could not be analyzed, the first: ") and str(broken) in err
    assert err.count("\n") == 1
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("27", "0", "1")
    cases = list(root.iter("testcase"))
    assert all(float(c.get("time") or "-1") >= 0 for c in cases)
    errored = [c for c in cases if c.find("error") is not None]
    assert [c.get("file") for c in errored] == [str(broken)]
    assert "truncated SQLite file" in (errored[0].find("error").get("message") or "")  # type: ignore[union-attr]
    assert broken.stat().st_size == len(whole) // 3  # the evidence is left as it was


def test_an_expectation_with_telemetry_checks_the_analysis_with_it(tmp_path: Path) -> None:
    """capi/observe: no_failure from the export alone, inconclusive with its telemetry (a
    runtime_error line that no traced call explains); each expectation checks its own analysis."""
    capi = H200_2025 / "capi"
    text = """
[[expect]]
files = "observe.sqlite"
verdict = "no_failure"
[[expect]]
files = "observe.sqlite"
telemetry = "observe.telemetry.jsonl"
verdict = "no_failure"
"""
    report = check([capi / "observe.sqlite"], Expectations.parse(text, base=capi))
    assert [c.passed for c in report.cases] == [True, False]
    assert report.cases[1].failures == ("verdict is inconclusive, expected no_failure",)
    missing = Expectations.parse(text.replace("observe.telemetry", "gone.telemetry"), base=capi)
    (_, gone) = check([capi / "observe.sqlite"], missing).cases
    assert gone.error is not None and "gone.telemetry.jsonl" in gone.error
    with pytest.raises(Exception, match="'telemetry' must be the path of a telemetry file"):
        Expectations.parse('[[expect]]\nfiles = "a"\ntelemetry = 3\n', base=capi)
