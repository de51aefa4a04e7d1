"""A batch keeps every input under the name it was given, even one file given under two names."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pytest
from conftest import H200_2025

import nsysaudit
from nsysaudit.cli import main

OBSERVE = H200_2025 / "torch" / "observe.sqlite"


def test_one_file_under_two_names_is_two_rows_of_one_analysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copyfile(OBSERVE, tmp_path / "observe.sqlite")
    monkeypatch.chdir(tmp_path)
    result = nsysaudit.run_batch(["observe.sqlite", "./observe.sqlite", str(tmp_path / "observe.sqlite")], jobs=1)
    assert result.inputs.select("path", "status", "verdict", "findings").rows() == [
        ("observe.sqlite", "analyzed", "failure_found", 1),
        ("./observe.sqlite", "analyzed", "failure_found", 1),
        (str(tmp_path / "observe.sqlite"), "analyzed", "failure_found", 1),
    ]
    assert result.inputs["sha256"].n_unique() == 1 and result.findings.height == 1
    assert result.summary_lines()[0] == "3 input(s): 3 analyzed, 0 resumed, 0 unusable; 3 finding(s)"


def test_the_command_writes_and_resumes_a_file_given_twice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "in").mkdir()
    shutil.copyfile(OBSERVE, tmp_path / "in" / "observe.sqlite")
    monkeypatch.chdir(tmp_path)
    names = ["in/observe.sqlite", "in/../in/observe.sqlite"]
    assert main(["batch", *names, "--out", "audit", "--jobs", "1"]) == 0, capsys.readouterr().err
    first = pl.read_parquet(tmp_path / "audit" / "inputs.parquet")
    assert first.select("path", "status").rows() == [(names[0], "analyzed"), (names[1], "analyzed")]
    assert main(["batch", *names, "--out", "audit", "--jobs", "1"]) == 0, capsys.readouterr().err
    again = pl.read_parquet(tmp_path / "audit" / "inputs.parquet")
    assert again.select("path", "status").rows() == [(names[0], "resumed"), (names[1], "resumed")]
    assert again.drop("status").equals(first.drop("status"))
