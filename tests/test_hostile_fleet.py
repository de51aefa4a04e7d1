"""Hostile input through ``check`` and ``batch`` (issue 12): one line or one error row, never a
traceback; the evidence untouched and nothing written beside it; names from outside escaped."""

from __future__ import annotations

import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import polars as pl
import pytest
from conftest import H200_2025, unprivileged
from test_hostile import OBSERVE, UNUSABLE, assert_one_line_error, folder_state

from nsysaudit.cli import main


def run(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    folder = tmp_path / "evidence"
    folder.mkdir()
    shutil.copyfile(OBSERVE, folder / "good.sqlite")
    return folder


@pytest.mark.parametrize("case", sorted(UNUSABLE))
def test_unusable_bytes_through_check_and_batch(capsys, evidence: Path, tmp_path: Path, case: str) -> None:
    content, problem = UNUSABLE[case]
    bad = evidence / f"{case}.sqlite"
    bad.write_bytes(content)
    expect = tmp_path / "expect.toml"
    expect.write_text('[[expect]]\nfiles = "evidence/*.sqlite"\n')
    before = folder_state(evidence)

    code, out, err = run(capsys, "check", evidence, "--expect", expect, "--junit", tmp_path / "j.xml")
    assert_one_line_error(code, err, bad, problem)
    assert out == "" and not (tmp_path / "j.xml").exists()

    code, out, err = run(capsys, "batch", evidence, "--out", tmp_path / "batch", "--jobs", "1")
    assert code == 0 and out.startswith("2 input(s): 1 analyzed, 0 resumed, 1 unusable")
    assert err.count("\n") == 1 and str(bad) in err and problem in err and "Traceback" not in err
    row = pl.read_parquet(tmp_path / "batch" / "inputs.parquet").filter(pl.col("path") == str(bad)).row(0, named=True)
    assert row["status"] == "error" and row["verdict"] is None
    assert row["error"].startswith(f"{bad}: ") and problem in row["error"] and "\n" not in row["error"]
    assert folder_state(evidence) == before  # inputs unchanged, nothing written beside them


def test_names_from_outside_are_escaped_in_lines_and_junit(capsys, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    forged = folder / "x\nFAIL forged.sqlite\x1b[2J.sqlite"
    shutil.copyfile(H200_2025 / "event" / "release.sqlite", forged)
    expect = tmp_path / "expect.toml"
    expect.write_text('[[expect]]\nfiles = "in/*"\nverdict = "failure_found"\n')
    junit = tmp_path / "j.xml"
    code, out, _ = run(capsys, "check", folder, "--expect", expect, "--junit", junit)
    assert code == 1
    shown = str(forged).replace("\n", "\\n").replace("\x1b", "\\x1b")
    assert out.splitlines() == [f"FAIL {shown}: verdict is no_failure, expected failure_found", "0 passed, 1 failed"]
    (case,) = ET.parse(junit).getroot().iter("testcase")
    assert case.get("file") == shown
    code, out, err = run(capsys, "batch", folder, "--out", tmp_path / "b.parquet", "--jobs", "1")
    assert code == 0 and "\x1b" not in out + err and len(out.splitlines()) == 4
    assert pl.read_parquet(tmp_path / "b.parquet")["path"].to_list() == [str(forged)]  # the data keeps it exact


def test_junit_into_a_read_only_folder_is_one_line_and_nothing_runs(read_only_folder, tmp_path: Path) -> None:
    locked, prefix = read_only_folder
    target = locked / "junit.xml"
    expect = Path(__file__).parent / "fixtures" / "expectations.toml"
    proc = unprivileged(prefix, "check", H200_2025, "--expect", expect, "--junit", target, cache=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr == f"nsysaudit: error: {target}: cannot write the JUnit file here: its folder is not writable " \
        "(nothing was written)\n"
    assert list(locked.iterdir()) == []


def test_a_fifo_named_like_an_export_is_an_error_row_even_when_resuming(tmp_path: Path) -> None:
    from nsysaudit import fleet

    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(H200_2025 / "event" / "release.sqlite", folder / "good.sqlite")
    out = tmp_path / "batch"
    fleet.run_batch([folder], out=out, jobs=1)  # a part exists: the rerun hashes every input first
    os.mkfifo(folder / "pipe.sqlite")  # opening it would block forever
    rows = fleet.run_batch([folder], out=out, jobs=1).inputs
    assert rows.select("path", "status", "error").rows() == [
        (str(folder / "good.sqlite"), "resumed", None),
        (str(folder / "pipe.sqlite"), "error", f"{folder / 'pipe.sqlite'}: not a regular file"),
    ]
