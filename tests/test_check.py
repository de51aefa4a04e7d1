"""``nsysaudit check``: expectations over exports, one line per file, JUnit XML, exit 0 / 1 / 2."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import FIXTURES, H200_2025, TORCH, run
from scenarios import observe_nested_failure, release_three_allocations

from nsysaudit.batch.check import Expectations, check, glob_match

EXPECTATIONS = FIXTURES / "expectations.toml"


def assert_agree(lines: list[str], junit: Path) -> None:
    """stdout and the JUnit file agree: a line per testcase, the totals the testsuite's counts."""
    root = ET.parse(junit).getroot()
    counted = [line for line in lines[:-1] if line.split(" ", 1)[0] in ("pass", "FAIL", "ERROR")]
    assert len(counted) == len(list(root.iter("testcase"))) == int(root.get("tests") or -1)
    passed, failed, *unusable = (int(part.split()[0]) for part in lines[-1].split(", "))
    assert failed == int(root.get("failures") or -1) and sum(unusable) == int(root.get("errors") or -1)
    assert passed + failed + sum(unusable) == len(counted)


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
    # 31 exports, 32 checks (capi/observe is checked with and without its telemetry): a line per check
    assert len(exports) == 31 and lines[-1] == "32 passed, 0 failed"
    assert lines[:-1] == [line for line in lines[:-1] if line.startswith("pass ")]
    assert f"pass {TORCH / 'observe.sqlite'} (failure_found, 1 finding(s))" in lines
    capi = FIXTURES / "h200-cuda13-nsys2025.3" / "capi" / "observe.sqlite"
    assert [line for line in lines if str(capi) in line] == [  # each check named as its testcase
        f"pass {capi} [expectation 3 (files = 'h200-cuda13-nsys2025.3/capi/observe.sqlite')] "
        "(inconclusive, 0 finding(s))",
        f"pass {capi} [capi observe with its telemetry] (inconclusive, 0 finding(s))",
    ]
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures")) == ("32", "0")
    assert_agree(lines, junit)


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
    assert err.startswith("nsysaudit: error: ") and "14 failed" in err and err.count("\n") == 1
    lines = out.splitlines()
    assert lines[-1] == "18 passed, 14 failed"
    assert_agree(lines, junit)
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
    assert sum(c.find("failure") is not None for c in cases.values()) == 14


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
    release = tmp_path / "release.sqlite"
    assert report.lines() == [  # a line per check; a file with several names each by its expectation
        f"FAIL {observe} [expectation 1 (files = '*.sqlite')]: 1 failed calls, at most 0 expected",
        f"FAIL {observe} [observe arm]: 1 finding(s), expected 2",
        f"pass {release} [expectation 1 (files = '*.sqlite')] (no_failure, 0 finding(s))",
        f"FAIL {release} [expectation 3 (files = 'release.sqlite')]: verdict is no_failure, "
        "expected failure_found; expected 1 x kind=nested_call_failure, found 0",
        "1 passed, 3 failed",
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


def _bundled_subset(tmp_path: Path, folders: tuple[str, ...]) -> Path:
    """The bundled exports of ``folders`` (and what lies beside them) copied into ``tmp_path``, and
    the committed expectations of those files (its ``[[expect]]`` blocks naming a file there) as
    ``tmp_path/expect.toml``; its path."""
    for folder in folders:
        shutil.copytree(FIXTURES / folder, tmp_path / folder)
    blocks = EXPECTATIONS.read_text().split("[[expect]]")[1:]
    kept = [block for block in blocks if any(f'files = "{folder}/' in block for folder in folders)]
    assert len(kept) >= len(folders), kept
    return write(tmp_path, "".join("[[expect]]" + block for block in kept))


def test_an_unusable_export_is_an_error_line_the_others_are_still_checked_and_junit_says_so(
    capsys, tmp_path: Path
) -> None:
    """A truncated export among good ones (the torch pair and the nsys 2023.4 pair, with their committed
    expectations): its ERROR line, every other file checked, the JUnit file written (an <error>
    testcase, each with its time), replacing an earlier green one; exit 2."""
    expect = _bundled_subset(tmp_path, ("h200-cuda13-nsys2025.3/torch", "h200-cuda13-nsys2023.4"))
    broken = tmp_path / "h200-cuda13-nsys2025.3/torch/observe.sqlite"
    whole = broken.read_bytes()
    junit = tmp_path / "junit.xml"
    code, _, err = run(capsys, "check", tmp_path, "--expect", expect, "--junit", junit)
    assert code == 0, err
    green = ET.parse(junit).getroot()
    assert green.get("errors") == "0" and green.get("failures") == "0"
    broken.write_bytes(whole[: len(whole) // 3])
    code, out, err = run(capsys, "check", tmp_path, "--expect", expect, "--junit", junit)
    assert code == 2
    lines = out.splitlines()
    error = [line for line in lines if line.startswith("ERROR ")]
    assert error == [f"ERROR {broken}: truncated SQLite file: header says {len(whole) // 4096} pages of 4096 bytes "
                     f"({len(whole):,} bytes) but the file has {len(whole) // 3:,} bytes".replace(",", "")], lines
    assert lines[-1] == "3 passed, 0 failed, 1 unusable"
    assert_agree(lines, junit)
    assert err.startswith("nsysaudit: error: 1 input(s) could not be analyzed, the first: ") and str(broken) in err
    assert err.count("\n") == 1
    root = ET.parse(junit).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "0", "1")
    cases = list(root.iter("testcase"))
    assert all(float(c.get("time") or "-1") >= 0 for c in cases)
    errored = [c for c in cases if c.find("error") is not None]
    assert [c.get("file") for c in errored] == [str(broken)]
    assert "truncated SQLite file" in (errored[0].find("error").get("message") or "")  # type: ignore[union-attr]
    assert broken.stat().st_size == len(whole) // 3  # the evidence is left as it was


def test_an_expectation_with_telemetry_checks_the_analysis_with_it(make_export, tmp_path: Path) -> None:
    """A release-like export: no_failure from the export alone, inconclusive with telemetry whose
    runtime_error line records CUBLAS_STATUS_ALLOC_FAILED that no traced call explains; each
    expectation checks its own analysis. (capi/observe was this case until issue 31 made it
    inconclusive without its telemetry too.)"""
    spec = release_three_allocations()
    path = make_export(spec, "observe.sqlite")
    start = spec.session_start_utc_ns
    assert start is not None
    line = {"event": "runtime_error", "pid": 611, "tid": 611, "realtime_ns": start + 20_000,
            "message": "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"}
    (path.parent / "observe.telemetry.jsonl").write_text(json.dumps(line) + "\n")
    capi = path.parent
    text = """
[[expect]]
files = "observe.sqlite"
verdict = "no_failure"
[[expect]]
files = "observe.sqlite"
telemetry = "observe.telemetry.jsonl"
verdict = "no_failure"
"""
    report = check([path], Expectations.parse(text, base=capi))
    assert [c.passed for c in report.cases] == [True, False]
    assert report.cases[1].failures == ("verdict is inconclusive, expected no_failure",)
    missing = Expectations.parse(text.replace("observe.telemetry", "gone.telemetry"), base=capi)
    (_, gone) = check([path], missing).cases
    assert gone.error is not None and "gone.telemetry.jsonl" in gone.error
    with pytest.raises(Exception, match="'telemetry' must be the path of a telemetry file"):
        Expectations.parse('[[expect]]\nfiles = "a"\ntelemetry = 3\n', base=capi)


# --- a subset of the files: --only-matching -----------------------------------------------------------


def test_only_matching_checks_a_folder_against_the_expectations_of_them_all(capsys, tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    code, out, err = run(capsys, "check", TORCH, "--expect", EXPECTATIONS, "--junit", junit)
    assert code == 1 and out.splitlines()[-1] == "2 passed, 24 failed"  # every other expectation fails
    assert sum("matches no file" in line for line in out.splitlines()) == 24
    code, out, err = run(capsys, "check", TORCH, "--expect", EXPECTATIONS, "--junit", junit, "--only-matching")
    assert (code, err) == (0, ""), err
    assert out.splitlines() == [
        f"pass {TORCH / 'observe.sqlite'} (failure_found, 1 finding(s))",
        f"pass {TORCH / 'release.sqlite'} (no_failure, 0 finding(s))",
        "24 expectation(s) match no file checked: left out (--only-matching)",
        "2 passed, 0 failed",
    ]
    assert [c.get("file") for c in ET.parse(junit).getroot().iter("testcase")] == [
        str(TORCH / "observe.sqlite"), str(TORCH / "release.sqlite")
    ]
    assert_agree(out.splitlines(), junit)


def test_only_matching_still_fails_a_file_no_expectation_matches(make_export, tmp_path: Path) -> None:
    new = make_export(observe_nested_failure(), "new.sqlite")
    expectations = Expectations.parse('[[expect]]\nfiles = "gone/*.sqlite"\n', base=tmp_path)
    report = check([new], expectations, only_matching=True)
    assert report.lines() == [
        f"FAIL {new}: no expectation for this file",
        "1 expectation(s) match no file checked: left out (--only-matching)",
        "0 passed, 1 failed",
    ]
    assert not report.passed and [e.index for e in report.left_out] == [1]


# --- JUnit files recognised by their root element -------------------------------------------------------


@pytest.mark.parametrize(
    "earlier",
    [
        b'<testsuites name="pytest"><testsuite name="x" tests="0"/></testsuites>\n',  # no XML declaration
        b'<?xml version="1.0" encoding="utf-8"?><testsuite name="pytest" tests="1"></testsuite>',
        b"\xef\xbb\xbf<!-- written by another tool -->\n<?xml-stylesheet href='x'?>\n<testsuites/>",
        b'<!DOCTYPE testsuites>\n<testsuites xmlns="urn:x"></testsuites>',
        '<?xml version="1.0" encoding="utf-16"?><testsuites/>'.encode("utf-16"),
    ],
    ids=["no-declaration", "testsuite-root", "bom-comment-pi", "doctype", "utf-16"],
)
def test_an_earlier_junit_file_is_replaced_whatever_precedes_its_root(capsys, tmp_path: Path, earlier: bytes) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_bytes(earlier)
    code, _, err = run(capsys, "check", TORCH, "--expect", EXPECTATIONS, "--junit", junit, "--only-matching")
    assert code == 0, err
    assert ET.parse(junit).getroot().get("tests") == "2"


@pytest.mark.parametrize(
    "other",
    [
        b'<?xml version="1.0"?><html><!-- <testsuites> --></html>',  # mentions it, is not one
        b"<testsuitesx/>",
        b"testsuites",
        b"<?xml version='1.0'?>",
        b"<!DOCTYPE [" + b"]" * 50_000,  # no time lost on what is no XML
    ],
    ids=["html-mentioning-it", "other-root", "text", "declaration-only", "unclosed-doctype"],
)
def test_a_file_whose_root_is_not_a_testsuite_is_not_replaced(capsys, tmp_path: Path, other: bytes) -> None:
    target = tmp_path / "junit.xml"
    target.write_bytes(other)
    code, out, err = run(capsys, "check", TORCH, "--expect", EXPECTATIONS, "--junit", target, "--only-matching")
    assert (code, out) == (2, "") and "is not a JUnit XML file, so it is not replaced" in err
    assert target.read_bytes() == other


# --- progress on a terminal ---------------------------------------------------------------------------


class Recorded:
    """A :class:`nsysaudit.Progress` that keeps what it heard."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, object]] = []

    def start(self, label: str, total: int | None) -> None:
        self.heard.append(("start", total))

    def advance(self, amount: int) -> None:
        self.heard.append(("advance", amount))

    def finish(self) -> None:
        self.heard.append(("finish", None))


def test_progress_hears_each_analysis_with_and_without_telemetry() -> None:
    capi = H200_2025 / "capi"
    text = '[[expect]]\nfiles = "*.sqlite"\n[[expect]]\nfiles = "observe.sqlite"\n' \
        'telemetry = "observe.telemetry.jsonl"\n'
    progress = Recorded()
    report = check([capi], Expectations.parse(text, base=capi), progress=progress)
    assert len(report.cases) == 3  # observe twice (with its telemetry too), release once
    assert progress.heard == [("start", 3), ("advance", 1), ("advance", 1), ("advance", 1), ("finish", None)]


@pytest.mark.slow  # a child process on a pseudo-terminal
def test_a_progress_bar_on_a_terminal_stderr_and_the_same_stdout() -> None:
    import pty
    import select
    import subprocess
    import sys

    args = [sys.executable, "-m", "nsysaudit", "check", str(TORCH), "--expect", str(EXPECTATIONS), "--only-matching"]
    plain = subprocess.run(args, capture_output=True, check=False)
    assert plain.returncode == 0 and plain.stderr == b""
    controller, terminal = pty.openpty()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=terminal, stdin=subprocess.DEVNULL,
                            env={**os.environ, "TERM": "xterm", "COLUMNS": "100"})
    os.close(terminal)
    drawn = b""
    while True:
        ready, _, _ = select.select([controller], [], [], 0.1)
        if ready:
            try:
                data = os.read(controller, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            drawn += data
        elif proc.poll() is not None:
            break
    os.close(controller)
    assert proc.stdout is not None and proc.stdout.read() == plain.stdout and proc.wait() == 0
    assert b"checking: 2 analysis(es)" in drawn
