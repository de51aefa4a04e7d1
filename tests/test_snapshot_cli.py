"""Memory snapshots through the commands: ``analyze --snapshot`` (JSON, sealed, verified by re-running),
``compare --observe-snapshot/--release-snapshot``, ``batch --snapshots`` and its naming rule."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
from conftest import H200_2025, run

import nsysaudit
from nsysaudit.batch.run import snapshots_beside
from nsysaudit.render import canonical
from nsysaudit.render.json import analysis_json
from nsysaudit.reports import conformance, documents

SNAP = H200_2025 / "snap"


def copy_arm(folder: Path, arm: str, *names: str) -> list[Path]:
    return [Path(shutil.copyfile(SNAP / n, folder / n)) for n in (f"{arm}.sqlite", *names)]


def test_analyze_json_holds_the_allocator_section(capsys) -> None:
    code, out, err = run(capsys, "analyze", "--json", SNAP / "observe.sqlite", "--telemetry",
                         SNAP / "observe.telemetry.jsonl", "--snapshot", SNAP / "observe-end.pickle")
    assert code == 0, err
    doc = json.loads(out)
    assert conformance.problems(doc, documents.AnalysisDocument) == []
    section = doc["allocator"]
    assert [s["path"] for s in section["snapshots"]] == [str(SNAP / "observe-end.pickle")]
    assert all(p["statement"] for p in section["at"])
    result = nsysaudit.analyze(SNAP / "observe.sqlite", snapshots=[SNAP / "observe-end.pickle"])
    assert analysis_json(result) == canonical.dumps(result.to_dict())  # streamed, the same bytes


def test_a_sealed_analysis_with_snapshots_verifies_by_re_running(capsys, tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    export, handoff, end = copy_arm(evidence, "observe", "observe-handoff.pickle", "observe-end.pickle")
    out = tmp_path / "sealed"
    code, _, err = run(capsys, "analyze", export, "--snapshot", handoff, "--snapshot", end, "--out", out,
                       "--clock-tolerance", "0.5")
    assert code == 0, err
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["command"] == ["nsysaudit", "analyze", "observe.sqlite", "--out", "sealed", "--snapshot",
                               "observe-handoff.pickle", "--snapshot", "observe-end.pickle", "--clock-tolerance", "0.5"]
    assert [(i["role"], i["kind"]) for i in meta["inputs"]] == [
        ("arm", "sqlite"), ("snapshot_1", "snapshot"), ("snapshot_2", "snapshot")]
    assert meta["recipe"]["options"]["snapshots"] == {"tolerance_ns": 500_000}
    report = json.loads((out / "report.json").read_text())
    assert [s["path"] for s in report["allocator"]["snapshots"]] == ["observe-handoff.pickle", "observe-end.pickle"]
    assert report["allocator"]["snapshots"][0]["clock"]["tolerance_ns"] == 500_000
    code, _, err = run(capsys, "verify", out, "--inputs", export, handoff, end)
    assert code == 0, err
    shutil.copyfile(SNAP / "observe-handoff.pickle", end)  # another snapshot under the sealed name
    code, _, err = run(capsys, "verify", out, "--inputs", export, handoff, end)
    assert code == 1 and "snapshot_2" in err, err


def test_a_sealed_comparison_with_snapshots(capsys, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    code, _, err = run(capsys, "compare", SNAP / "observe.sqlite", SNAP / "release.sqlite", "--out", out,
                       "--observe-snapshot", SNAP / "observe-end.pickle",
                       "--release-snapshot", SNAP / "release-end.pickle")
    assert code == 0, err
    report = json.loads((out / "report.json").read_text())
    assert conformance.problems(report, documents.ComparisonDocument) == []
    assert report["differences"]["allocator"]["release"]["segments_released"]["segments"] == 19
    meta = json.loads((out / "metadata.json").read_text())
    assert [i["role"] for i in report["inputs"]] == [i["role"] for i in meta["inputs"]] == [
        "observe", "release", "observe_snapshot_1", "release_snapshot_1"]
    code, _, err = run(capsys, "verify", out, "--inputs", SNAP / "observe.sqlite", SNAP / "release.sqlite",
                       SNAP / "observe-end.pickle", SNAP / "release-end.pickle")
    assert code == 0, err


def test_the_naming_rule_gives_a_snapshot_to_the_longest_name(tmp_path: Path) -> None:
    for name in ("run.sqlite", "run-2.sqlite", "run.nsys-rep", "run.pickle", "run-end.pickle", "run.rank0.pickle",
                 "run_x.pickle", "run-2-end.pickle", "runner.pickle", "run-end.pickle.bak", "other-run.pickle"):
        (tmp_path / name).write_bytes(b"")
    names = [Path(p).name for p in snapshots_beside(tmp_path / "run.sqlite")]
    assert names == ["run-end.pickle", "run.pickle", "run.rank0.pickle", "run_x.pickle"]
    assert [Path(p).name for p in snapshots_beside(tmp_path / "run-2.sqlite")] == ["run-2-end.pickle"]
    assert [Path(p).name for p in snapshots_beside(tmp_path / "run.nsys-rep")] == names


def test_batch_joins_the_snapshots_beside_each_input(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    copy_arm(evidence, "observe", "observe-handoff.pickle", "observe-end.pickle")
    bad = copy_arm(evidence, "release")[0].with_name("release-end.pickle")
    bad.write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    batch = nsysaudit.run_batch([evidence], jobs=1, snapshots=True)
    rows = {Path(r["path"]).name: r for r in batch.inputs.to_dicts()}
    assert rows["observe.sqlite"]["snapshots"] == 2 and rows["observe.sqlite"]["status"] == "analyzed"
    assert rows["release.sqlite"]["status"] == "error"
    assert "release-end.pickle: it names a Python global (os.system)" in rows["release.sqlite"]["error"]
    finding = batch.findings.row(0, named=True)
    assert (finding["allocator_reserved_bytes"], finding["allocator_inactive_bytes"]) == (
        149_344_485_376, 148_689_059_832)
    plain = nsysaudit.run_batch([evidence / "observe.sqlite"], jobs=1)
    assert plain.inputs["snapshots"].to_list() == [None]
    assert plain.findings.select(pl.col("allocator_inactive_bytes").is_null().all()).item()
