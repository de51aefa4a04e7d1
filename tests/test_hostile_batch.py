"""Hostile input through ``check`` and ``batch``: one line or one error row, never a
traceback; the evidence untouched and nothing written beside it; names from outside escaped."""

from __future__ import annotations

import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import DEEP_JSON, H200_2025, OBSERVE, UNUSABLE, assert_one_line_error, folder_state, run, unprivileged


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
    assert_one_line_error(code, err, bad, problem)  # exit 2, and the good export is still checked:
    good = [line for line in out.splitlines() if line.startswith(f"FAIL {evidence / 'good.sqlite'}: ")]
    assert good and "censored library call(s)" in good[0]  # the 2023.4 arm: censoring not allowed here
    error = [line for line in out.splitlines() if line.startswith("ERROR ")]
    assert len(error) == 1 and error[0].startswith(f"ERROR {bad}: ") and problem in error[0]
    testcases = {c.get("file"): c for c in ET.parse(tmp_path / "j.xml").getroot().iter("testcase")}
    assert testcases[str(bad)].find("error") is not None
    assert testcases[str(evidence / "good.sqlite")].find("error") is None
    (tmp_path / "j.xml").unlink()  # not beside the evidence: folder_state below is of the evidence only

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
    from nsysaudit.batch import run as fleet

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


# --- batch --out targets -----------------------------------------------------------


@pytest.mark.parametrize(
    ("out", "cwd", "named", "problem"),
    [
        # the folder holding the inputs (the line names a place outside it: --out evidence-audit)
        ("evidence", None, "evidence", "it holds the input {evidence}/good.sqlite|evidence-audit"),
        # the inputs' own folder, as . from inside it
        (".", "evidence", ".", "it holds the input {evidence}/good.sqlite|../evidence-audit"),
        # a folder holding the inputs deeper down: a new folder in it, beside the evidence
        (".", None, ".", "it holds the input {evidence}/good.sqlite|audit"),
        # a symlink to the inputs' folder: paths are compared resolved
        ("link", None, "link", "it holds the input {evidence}/good.sqlite|evidence-audit"),
        # a table file beside the inputs
        ("evidence/audit.parquet", None, "evidence/audit.parquet",
         "its folder holds the input {evidence}/good.sqlite|evidence-audit/audit.parquet"),
        # a folder inside the inputs' folder (was written, while a table file there was refused)
        ("evidence/sub", None, "evidence/sub",
         "it lies inside {evidence}, the folder of the input {evidence}/good.sqlite|evidence-audit"),
        ("evidence/deep/audit.csv", None, "evidence/deep/audit.csv",
         "it lies inside {evidence}, the folder of the input {evidence}/good.sqlite|evidence-audit/audit.csv"),
        # a folder holding files no batch wrote
        ("mine", None, "mine", "holds files or folders no nsysaudit batch wrote (notes.txt)"),
        # a parts folder holding a file no batch wrote (a batch's record is there)
        ("done", None, "done/parts", "holds files or folders no nsysaudit batch wrote (x.sqlite)"),
        ("done.parquet", None, "done.parts", "holds files or folders no nsysaudit batch wrote (x.sqlite)"),
    ],
    ids=["inputs-folder", "dot-in-inputs-folder", "ancestor", "symlink", "file-beside", "folder-inside",
         "file-deeper-inside", "foreign-file",
         "foreign-part", "foreign-part-file-form"],
)
def test_batch_out_beside_the_evidence_or_over_other_files_is_refused(
    capsys, monkeypatch, evidence: Path, tmp_path: Path, out: str, cwd: str | None, named: str, problem: str
) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine\n")
    (tmp_path / "link").symlink_to(evidence)
    for done in ("done", "done.parquet"):
        code, *_ = run(capsys, "batch", H200_2025 / "event" / "release.sqlite", "--out", tmp_path / done, "--jobs", 1)
        assert code == 0
    (tmp_path / "done" / "parts" / "x.sqlite").write_bytes(b"")
    (tmp_path / "done.parts" / "x.sqlite").write_bytes(b"")
    before = folder_state(tmp_path)
    monkeypatch.chdir(tmp_path / cwd if cwd else tmp_path)
    given = "good.sqlite" if cwd else evidence
    code, stdout, err = run(capsys, "batch", given, "--out", out, "--jobs", 1)
    assert (code, stdout) == (2, ""), err
    problem, _, instead = problem.partition("|")
    shown = problem.format(evidence="." if cwd else evidence).replace("./good.sqlite", "good.sqlite")
    assert err == f"nsysaudit: error: {named}: cannot write the batch output here: {shown}" + (
        f": a batch never writes beside its evidence; write it elsewhere, e.g. --out {instead} (nothing was "
        "written)\n" if "input" in problem else ": choose an empty or new --out (nothing was written)\n"
    )
    assert folder_state(tmp_path) == before  # nothing written, nothing deleted
    if instead:  # the place it names may be written
        code, _, err = run(capsys, "batch", given, "--out", instead, "--jobs", 1)
        assert code == 0, err


def test_the_refusal_names_a_place_outside_every_evidence_folder(capsys, monkeypatch, tmp_path: Path) -> None:
    """From inside a run's folder, ``batch *.sqlite --out b.csv``: the line names ``../run-audit/b.csv``;
    where that folder holds evidence too, the one beside it; an absolute --out gets an absolute place."""
    run_dir, other = tmp_path / "run", tmp_path / "run-audit"
    for folder in (run_dir, other):
        folder.mkdir()
        shutil.copyfile(OBSERVE, folder / "x.sqlite")
    monkeypatch.chdir(run_dir)
    code, _, err = run(capsys, "batch", "x.sqlite", "--out", "b.csv", "--jobs", 1)
    assert code == 2 and err.endswith("write it elsewhere, e.g. --out ../run-audit/b.csv (nothing was written)\n"), err
    code, _, err = run(capsys, "batch", "x.sqlite", other / "x.sqlite", "--out", "b.csv", "--jobs", 1)
    assert code == 2 and "e.g. --out ../run-audit-audit/b.csv (" in err, err
    code, _, err = run(capsys, "batch", "x.sqlite", "--out", run_dir / "b c.csv", "--jobs", 1)
    assert code == 2 and f"e.g. --out '{tmp_path}/run-audit/b c.csv' (" in err, err
    assert sorted(p.name for p in run_dir.iterdir()) == ["x.sqlite"]


def test_batch_out_that_may_be_written(capsys, monkeypatch, evidence: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path)  # holds evidence/ deeper down: a table file here is not beside an input
    for out in ("empty", "new/audit", "audit.csv", "empty"):  # the last: a rerun resumes
        code, stdout, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1)
        assert code == 0, err
    assert stdout.startswith("1 input(s): 0 analyzed, 1 resumed")
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == ["findings.parquet", "inputs.parquet", "parts"]
    assert sorted(p.name for p in evidence.iterdir()) == ["good.sqlite"]


def test_a_name_that_is_not_utf8_is_an_error_row_with_its_bytes_escaped(capsys, evidence: Path, tmp_path: Path) -> None:
    bad = os.fsdecode(os.fsencode(evidence) + b"/bad\xff.sqlite")
    shutil.copyfile(OBSERVE, bad)
    code, out, err = run(capsys, "batch", evidence, "--out", tmp_path / "b", "--jobs", 1)
    assert code == 0 and out.startswith("2 input(s): 1 analyzed, 0 resumed, 1 unusable"), err
    row = pl.read_parquet(tmp_path / "b" / "inputs.parquet").filter(pl.col("status") == "error").row(0, named=True)
    assert row["path"] == f"{evidence}/bad\\xff.sqlite"  # the byte as \xff: a table holds UTF-8 only
    assert row["error"] == f"{evidence}/bad\\xff.sqlite: its path is not valid UTF-8, so no report can name it " \
        "exactly; give it a UTF-8 name (a link under one is enough)"


@pytest.mark.parametrize("damage", ["other-columns", "other-input"])
def test_a_resumed_part_that_is_not_what_a_batch_wrote_is_refused(
    capsys, evidence: Path, tmp_path: Path, damage: str
) -> None:
    """Parts are trusted, yet held to their schema and their own SHA-256: a part of another shape
    gave a row of nulls, exit 0."""
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(H200_2025 / "event" / "release.sqlite", other / "release.sqlite")
    out = tmp_path / "b"
    code, _, err = run(capsys, "batch", evidence, other, "--out", out, "--jobs", 1)  # a part for each input
    assert code == 0, err
    rows = pl.read_parquet(out / "inputs.parquet")
    sha = rows.filter(pl.col("path").str.ends_with("release.sqlite"))["sha256"][0]
    mine = out / "parts" / f"{sha}.input.parquet"
    if damage == "other-columns":
        pl.DataFrame({"sha256": [sha], "verdict": ["no_failure"]}).write_parquet(mine)
        problem = f"{mine}: cannot write the batch output here: not a part this nsysaudit writes"
    else:  # the part of good.sqlite under release.sqlite's name
        (theirs,) = (p for p in (out / "parts").glob("*.input.parquet") if p != mine)
        shutil.copyfile(theirs, mine)
        problem = f"{out / 'parts' / sha}: cannot write the batch output here: a part whose rows are not those"
    code, stdout, err = run(capsys, "batch", evidence, other, "--out", out, "--jobs", 1)
    assert (code, stdout) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"nsysaudit: error: {problem}"), err


# --- a batch record that is not one --------------------------------------------------------------


def test_a_batch_record_nested_too_deeply_is_one_line(capsys, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    code, _, err = run(capsys, "batch", str(OBSERVE), "--out", str(out), "--jobs", "1")
    assert code == 0, err
    (out / "parts" / "batch.json").write_text(DEEP_JSON)
    code, stdout, err = run(capsys, "batch", str(OBSERVE), "--out", str(out), "--jobs", "1")
    assert (code, stdout) == (2, "")
    assert err == f"nsysaudit: error: {out / 'parts' / 'batch.json'}: cannot write the batch output here: not a " \
        "batch record (unreadable JSON) (nothing was written)\n"


# --- batch output that cannot lie ------------------------------------------------------------------


def test_two_batches_of_other_inputs_into_one_out_never_replace_each_others_tables(
    capsys, evidence: Path, tmp_path: Path
) -> None:
    """Both said "wrote", and the second's table replaced the first's."""
    other = tmp_path / "other"
    other.mkdir()
    shutil.copyfile(H200_2025 / "event" / "release.sqlite", other / "release.sqlite")
    out = tmp_path / "b"
    code, stdout, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1)
    assert code == 0 and "wrote" in stdout, err
    before = folder_state(out)
    code, stdout, err = run(capsys, "batch", other, "--out", out, "--jobs", 1)
    assert (code, stdout) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"nsysaudit: error: {out / 'parts'}: its parts were made for another batch (other PATHs")
    assert folder_state(out) == before
    code, stdout, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1)  # the same batch resumes
    assert code == 0 and stdout.startswith("1 input(s): 0 analyzed, 1 resumed"), err


def test_a_batch_whose_out_another_batch_took_over_writes_no_tables(capsys, evidence: Path, tmp_path: Path) -> None:
    """Two batches of other inputs started into one --out at once: the one whose record was replaced
    while it ran keeps its parts and writes no tables (they would replace the other's)."""
    from nsysaudit.batch import run as fleet
    from nsysaudit.core.errors import BatchOutputNotWritable

    out = tmp_path / "b"

    def other_batch_starts(_row: object) -> None:
        record = out / "parts" / "batch.json"
        record.write_text(record.read_text().replace(str(evidence), str(tmp_path / "elsewhere")))

    with pytest.raises(BatchOutputNotWritable) as caught:
        fleet.run_batch([evidence], out=out, jobs=1, on_row=other_batch_starts)
    assert "another batch (other inputs or options) took this --out over" in str(caught.value)
    assert str(caught.value).endswith("(the parts finished are kept, the tables were not written)")
    assert sorted(p.name for p in out.iterdir()) == ["parts"]


@pytest.mark.parametrize("metadata", ["dropped", "copied"])
def test_a_resumed_part_rewritten_since_is_refused(capsys, evidence: Path, tmp_path: Path, metadata: str) -> None:
    """A part rewritten from failure_found to no_failure resumed as no_failure: parts carry their
    batch and digests (a rewrite that drops them, or copies them over other rows, is refused)."""
    out = tmp_path / "b"
    code, _, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1)
    assert code == 0, err
    (part,) = (out / "parts").glob("*.input.parquet")
    assert pl.read_parquet(part)["verdict"].to_list() == ["inconclusive"]
    kept = pl.read_parquet_metadata(part) if metadata == "copied" else None
    pl.read_parquet(part).with_columns(pl.lit("no_failure").alias("verdict")).write_parquet(part, metadata=kept)
    code, stdout, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1)
    assert (code, stdout) == (2, "") and err.count("\n") == 1
    said = "a part this batch did not write" if metadata == "dropped" else "a part changed since this batch wrote it"
    assert said in err
    assert err.endswith("(the parts finished are kept, the tables were not written)\n")


def test_a_full_disk_after_some_parts_does_not_say_nothing_was_written(
    capsys, monkeypatch, evidence: Path, tmp_path: Path
) -> None:
    from nsysaudit.batch import output
    from nsysaudit.core.errors import BatchOutputNotWritable

    def full(frame: object, target: Path, fmt: str) -> None:
        raise BatchOutputNotWritable(target, "No space left on device")

    monkeypatch.setattr(output, "_write_frame", full)  # the tables; the parts were written
    out = tmp_path / "b"
    code, stdout, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1)
    assert (code, stdout) == (2, "") and err.count("\n") == 1
    assert err == (f"nsysaudit: error: {out / 'findings.parquet'}: cannot write the batch output here: No space left "
                   "on device (the parts finished are kept, the tables were not written)\n")
    assert len(list((out / "parts").glob("*.input.parquet"))) == 1


@pytest.mark.slow
def test_what_distributed_logs_while_an_interrupted_dask_batch_closes_is_not_printed(caplog, monkeypatch) -> None:
    """A client closed with tasks pending makes the scheduler log "Couldn't gather keys" at ERROR
    (the test above failed on that second line, now and then): every distributed logger is silenced
    while the client and the cluster close after an interruption, and has its level back after."""
    import logging

    distributed = pytest.importorskip("distributed")
    from nsysaudit.batch import workers
    from nsysaudit.core.errors import Terminated

    close = distributed.Client.close

    def logging_close(self: Any, *args: Any, **kwargs: Any) -> Any:
        logging.getLogger("distributed.scheduler").error("Couldn't gather keys: {'audit_one-0': 'forgotten'}")
        return close(self, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "close", logging_close)
    names = ("distributed", "distributed.scheduler", "distributed.client")
    levels = {name: logging.getLogger(name).level for name in names}
    results = workers.run_dask(len, ["a", "bb", "ccc", "dddd"], 1, None, timeout="30s")
    assert next(results) in (1, 2, 3, 4)
    with pytest.raises(Terminated):
        results.throw(Terminated())
    said = [r.getMessage() for r in caplog.records]  # every record a handler would have printed
    assert not [m for m in said if "Couldn't gather" in m], said
    assert {name: logging.getLogger(name).level for name in names} == levels
    logging.getLogger("distributed.scheduler").error("after the batch: logged")  # distributed's own again
    assert caplog.records[-1].getMessage() == "after the batch: logged"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_sigterm_during_a_dask_batch_is_one_line(tmp_path: Path) -> None:
    """distributed's tracebacks (or leaked semaphores) instead of one line, before."""
    import signal
    import subprocess
    import sys
    import time

    pytest.importorskip("distributed")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i in range(200):
        (inputs / f"{i:03d}.sqlite").symlink_to(OBSERVE)
    out = tmp_path / "batch"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsysaudit", "batch", str(inputs), "--out", str(out), "--jobs", "2", "--engine", "dask"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    while not list((out / "parts").glob("*.input.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert (proc.returncode, stdout, stderr) == (
        143, "", "nsysaudit: terminated (SIGTERM); what a batch finished is kept in its parts\n"
    )
