"""Issue 37's batch: ``--strict`` for CI, the joined columns as Parquet lists (JSON arrays in CSV),
the findings' ``path`` and the ledger's figures at each finding, and parts of an older layout refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from conftest import H200_2025, TORCH, run

from nsysaudit.batch import run as fleet
from nsysaudit.batch.output import csv_ready

OBSERVE = TORCH / "observe.sqlite"
LISTS = {"censored_reasons_list": "censored_reasons", "library_list": "library", "devices_used_list": "devices_used",
         "ranks_list": "ranks", "failing_ranks_list": "failing_ranks", "failing_devices_list": "failing_devices"}


@pytest.fixture
def evidence(tmp_path: Path) -> Path:
    """A run's folder: the torch observe export and an empty (unusable) one."""
    folder = tmp_path / "run"
    folder.mkdir()
    shutil.copyfile(OBSERVE, folder / "observe.sqlite")
    (folder / "empty.sqlite").write_bytes(b"")
    return folder


def test_strict_exits_2_on_an_unusable_input_after_writing_the_tables(capsys, evidence: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    code, stdout, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1)
    assert code == 0 and stdout.startswith("2 input(s): 1 analyzed, 0 resumed, 1 unusable")  # without --strict
    empty = evidence / "empty.sqlite"
    code, stdout, err = run(capsys, "batch", evidence, "--out", out, "--jobs", 1, "--strict")
    assert code == 2 and stdout.startswith("2 input(s): 0 analyzed, 1 resumed, 1 unusable")
    assert err.splitlines()[0].startswith(f"nsysaudit: warning: {empty}: empty file")  # the row's line, as without
    assert err.splitlines()[1] == (
        f"nsysaudit: error: 1 input(s) could not be analyzed (--strict), the first: {empty}: empty file (0 bytes), "
        "not an nsys SQLite export (the tables hold their rows)"
    )
    inputs = pl.read_parquet(out / "inputs.parquet")  # written, the error row in it
    assert inputs.select("path", "status").rows() == [(str(empty), "error"), (str(evidence / "observe.sqlite"),
                                                                              "resumed")]
    assert pl.read_parquet(out / "findings.parquet").height == 1


def test_strict_with_every_input_usable_exits_0_and_with_none_exits_2(capsys, evidence: Path, tmp_path: Path) -> None:
    code, _, err = run(capsys, "batch", evidence / "observe.sqlite", "--out", tmp_path / "a", "--jobs", 1, "--strict")
    assert (code, err) == (0, "")
    code, _, err = run(capsys, "batch", evidence / "empty.sqlite", "--out", tmp_path / "b", "--jobs", 1, "--strict")
    assert code == 2 and "1 input(s) could not be analyzed (--strict)" in err  # not 1: that is a failed check
    code, _, err = run(capsys, "batch", evidence / "empty.sqlite", "--out", tmp_path / "c", "--jobs", 1)
    assert code == 1 and "every input of the batch was unusable" in err  # as before, without --strict


def test_list_columns_hold_the_joined_strings_items(tmp_path: Path) -> None:
    """Each joined column has a list sibling: the same items, typed (integers for ranks and devices),
    [] where the string is null, null in an error row; CSV writes them as JSON arrays."""
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "empty.sqlite").write_bytes(b"")
    paths = [*sorted(H200_2025.rglob("*.sqlite")), tmp_path / "ev" / "empty.sqlite"]
    result = fleet.run_batch(paths, out=tmp_path / "audit.parquet", jobs=2)
    inputs = pl.read_parquet(tmp_path / "audit.parquet")
    assert inputs.equals(result.inputs)
    assert {c: inputs.schema[c] for c in LISTS} == {
        "censored_reasons_list": pl.List(pl.String), "library_list": pl.List(pl.String),
        "devices_used_list": pl.List(pl.String), "ranks_list": pl.List(pl.Int64),
        "failing_ranks_list": pl.List(pl.Int64), "failing_devices_list": pl.List(pl.Int64),
    }
    joiner = {"devices_used_list": "; "}
    seen, several = set(), set()
    for row in inputs.iter_rows(named=True):
        for listed, joined in LISTS.items():
            if row["status"] == "error":
                assert row[listed] is None and row[joined] is None
                continue
            said = joiner.get(listed, ", ").join(map(str, row[listed]))
            assert (said or None) == row[joined], (row["path"], listed)
            seen |= {listed} if row[listed] else set()
            several |= {listed} if len(row[listed]) > 1 else set()
    assert seen == set(LISTS) and "censored_reasons_list" in several  # each met with items, one with several
    fleet.run_batch(paths, out=tmp_path / "audit.csv", jobs=2)
    table = pl.read_csv(tmp_path / "audit.csv", infer_schema=False)
    for listed in LISTS:
        cells = [None if c is None else json.loads(c) for c in table[listed].to_list()]
        assert cells == inputs[listed].to_list(), listed


def test_csv_ready_writes_lists_as_json_arrays_and_leaves_other_columns() -> None:
    frame = pl.DataFrame({"a": [["x, y", 'q"'], [], None], "n": [[1, 2], [], None], "s": ["k", None, "m"]},
                         schema={"a": pl.List(pl.String), "n": pl.List(pl.Int64), "s": pl.String})
    assert csv_ready(frame).rows() == [('["x, y", "q\\""]', "[1, 2]", "k"), ("[]", "[]", None), (None, None, "m")]


def test_findings_carry_the_inputs_path_and_the_first_of_two_paths(tmp_path: Path) -> None:
    (tmp_path / "ev").mkdir()
    copy = tmp_path / "ev" / "again.sqlite"
    shutil.copyfile(OBSERVE, copy)
    result = fleet.run_batch([copy, OBSERVE], out=tmp_path / "audit", jobs=1)
    assert result.findings["path"].to_list() == [str(copy)]  # one export, its findings once, its first path
    rerun = fleet.run_batch([copy, OBSERVE], out=tmp_path / "audit", jobs=1)  # resumed: the part has no path
    assert rerun.inputs["status"].to_list() == ["resumed", "resumed"]
    assert rerun.findings.equals(result.findings)
    assert pl.read_parquet(tmp_path / "audit" / "parts" / f"{result.inputs['sha256'][0]}.findings.parquet"
                           ).columns == [c for c in result.findings.columns if c != "path"]


def point(devices: list[dict[str, Any]], covered: bool = True) -> Any:
    return {"point": "finding", "finding": 0, "covered": covered, "devices": devices}


def device(device_id: int, processes: list[tuple[int, int, int]], total: int | None = 100) -> dict[str, Any]:
    """A ledger point's device: ``processes`` as (pid, resident bytes, imported pool bytes)."""
    held = sum(r for _, r, _ in processes)
    return {"device_id": device_id, "total_bytes": total, "device_resident_live_bytes": held,
            "process_live_bytes": processes[0][1] if processes else 0,
            "free_at_most_bytes": None if total is None else total - held,
            "processes": [{"pid": p, "global_pid": p << 24, "resident_bytes": r, "imported_pool_bytes": i}
                          for p, r, i in processes]}


def test_holder_columns_read_the_findings_device_and_its_largest_holder() -> None:
    two = point([device(0, [(7, 10, 0)]), device(1, [(7, 5, 0), (9, 60, 0), (8, 60, 0), (6, 0, 4)])])
    assert fleet.holder_columns(two, 1) == {
        "held_bytes": 125, "process_held_bytes": 5, "free_at_most_bytes": -25, "device_total_bytes": 100,
        "holder_pid": 8, "holder_bytes": 60, "holders": 4, "held_covered": True,  # a tie: the lower global pid
    }
    unknown = fleet.holder_columns(two, None)  # several devices, the finding's unknown: no figures
    assert unknown["held_covered"] is True and {v for k, v in unknown.items() if k != "held_covered"} == {None}
    one = fleet.holder_columns(point([device(3, [], total=None)], covered=False), None)  # its one device
    assert one == {"held_bytes": 0, "process_held_bytes": 0, "free_at_most_bytes": None, "device_total_bytes": None,
                   "holder_pid": None, "holder_bytes": None, "holders": 0, "held_covered": False}
    assert set(fleet.holder_columns(None, 0).values()) == {None}  # no ledger


def test_parts_of_an_older_batch_layout_are_refused_not_misread(capsys, evidence: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit"
    code, *_ = run(capsys, "batch", evidence / "observe.sqlite", "--out", out, "--jobs", 1)
    assert code == 0
    record = json.loads((out / "parts" / "batch.json").read_text())
    (out / "parts" / "batch.json").write_text(json.dumps({**record, "format": 2}, sort_keys=True))
    before = {p.name: p.read_bytes() for p in (out / "parts").iterdir()}
    code, stdout, err = run(capsys, "batch", evidence / "observe.sqlite", "--out", out, "--jobs", 1)
    assert (code, stdout) == (2, "")
    assert err == (f"nsysaudit: error: {out / 'parts'}: its parts were written by another version of nsysaudit (batch "
                   "format 2; this one writes 4, with other columns), so they cannot be resumed: delete --out to start "
                   "over, or choose another (nothing was written)\n")
    assert {p.name: p.read_bytes() for p in (out / "parts").iterdir()} == before
    # A part of the old columns under a record of this format: refused by its columns.
    (out / "parts" / "batch.json").write_text(json.dumps(record, sort_keys=True))
    sha = pl.read_parquet(out / "inputs.parquet")["sha256"][0]
    part = out / "parts" / f"{sha}.input.parquet"
    pl.read_parquet(part).drop("censored_reasons_list").write_parquet(part)
    code, _, err = run(capsys, "batch", evidence / "observe.sqlite", "--out", out, "--jobs", 1)
    assert code == 2 and "not a part this nsysaudit writes (its columns are not input rows of this version)" in err
