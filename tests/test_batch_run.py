"""``nsysaudit batch`` / ``audit_many``: rows that match ``analyze --json``, on each engine, resumable."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import worker_faults
from conftest import FIXTURES, H200_2025, TORCH, run, unprivileged
from scenarios import observe_nested_failure

import nsysaudit
from nsysaudit.batch import run as fleet
from nsysaudit.batch.output import BatchOutput

REAL = sorted(str(p) for p in FIXTURES.rglob("*.sqlite"))
def analyze_json(capsys: pytest.CaptureFixture[str], path: str) -> dict[str, Any]:
    code, out, err = run(capsys, "analyze", "--json", path)
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def expected_input_row(doc: dict[str, Any]) -> dict[str, Any]:
    """The batch's input row, computed independently from the ``analyze --json`` document."""
    censored = doc["coverage"]["censored"]
    kinds = [f["kind"] for f in doc["findings"]]
    reasons = sorted({r for c in censored for r in c["reasons"]})
    libraries = sorted({f["enclosing"]["library"] for f in doc["findings"]
                        if f["enclosing"] is not None and f["enclosing"]["library"]})
    return {
        "path": doc["input"]["path"],
        **{k: doc["input"][k] for k in ("sha256", "kind", "size_bytes", "nsys_version", "schema_version")},
        "exported_with": (doc["input"].get("export") or {}).get("nsys_version"),
        "verdict": doc["verdict"],
        **{k: doc["census"][k] for k in ("cuda_api_calls", "nonzero_returns", "failed_calls")},
        "library_calls": len(doc["library_calls"]),
        "censored_library_calls": len(censored),
        "censored_reasons": ", ".join(reasons) or None,
        "findings": len(doc["findings"]),
        "nested_alloc_failures": kinds.count("nested_alloc_failure"),
        "straddling_alloc_failures": kinds.count("straddling_alloc_failure"),
        "nested_call_failures": kinds.count("nested_call_failure"),
        "captured_event_wait_failures": kinds.count("captured_event_wait_failure"),
        "library": ", ".join(libraries) or None,
        "warnings": len(doc["warnings"]),
        "error": None,
        "status": "analyzed",
        **expected_rank_columns(doc),
        **{k: doc["stalls"][k] for k in ("blocking_calls", "blocked_ns", "stalls", "stalled_ns")},
        "snapshots": len(doc["allocator"]["snapshots"]) if "allocator" in doc else None,
        "censored_reasons_list": reasons,
        "library_list": libraries,
    }


def expected_rank_columns(doc: dict[str, Any]) -> dict[str, Any]:
    """The batch's device and rank columns, from the document's devices, processes and ranks."""
    used = [d for d in doc["devices"] if d["processes"]]
    stated = [p for p in doc["processes"] if p["rank"] is not None]
    ranks = sorted({p["rank"] for p in stated})
    failing = doc["ranks"]["failing"]
    used_list = [f"{d['device_id']} ({', '.join(x for x in (d['name'], d['bus_location']) if x)})" for d in used]
    failing_ranks = sorted({f["rank"] for f in failing if f["rank"] is not None})
    failing_devices = sorted({f["device_id"] for f in failing if f["device_id"] is not None})
    return {
        "devices": len(doc["devices"]),
        "devices_used": "; ".join(used_list) or None,
        "rank": ranks[0] if len(ranks) == 1 else None,
        "rank_source": stated[0]["rank_source"] if len(stated) == 1 else None,
        "ranks": ", ".join(map(str, ranks)) or None,
        "failing_ranks": ", ".join(map(str, failing_ranks)) or None,
        "failing_rank_unknown": sum(1 for f in failing if f["rank"] is None),
        "failing_devices": ", ".join(map(str, failing_devices)) or None,
        # the joined columns as lists: the same items, typed; [] where the string is null
        "devices_used_list": used_list,
        "ranks_list": ranks,
        "failing_ranks_list": failing_ranks,
        "failing_devices_list": failing_devices,
    }


def expected_holder(doc: dict[str, Any], index: int) -> dict[str, Any]:
    """The ledger's figures at finding ``index``, from the document's ``memory.at[]`` point of it."""
    names = ("held_bytes", "process_held_bytes", "free_at_most_bytes", "device_total_bytes", "holder_pid",
             "holder_bytes", "holders", "held_covered")
    point = next((p for p in doc["memory"]["at"] if p["point"] == "finding" and p.get("finding") == index), None)
    if point is None:
        return dict.fromkeys(names)
    device_id = doc["findings"][index]["device_id"]
    devices = [d for d in point["devices"] if len(point["devices"]) == 1 or d["device_id"] == device_id]
    if len(devices) != 1 or (len(point["devices"]) > 1 and device_id is None):
        return {**dict.fromkeys(names), "held_covered": point["covered"]}
    d = devices[0]
    holding = sorted((p for p in d["processes"] if p["resident_bytes"] > 0), key=lambda p: -p["resident_bytes"])
    return {
        "held_bytes": d["device_resident_live_bytes"], "process_held_bytes": d["process_live_bytes"],
        "free_at_most_bytes": d["free_at_most_bytes"], "device_total_bytes": d["total_bytes"],
        "holder_pid": holding[0]["pid"] if holding else None,
        "holder_bytes": holding[0]["resident_bytes"] if holding else None,
        "holders": sum(1 for p in d["processes"] if p["resident_bytes"] or p["imported_pool_bytes"]),
        "held_covered": point["covered"],
    }


def assert_finding_matches(row: dict[str, Any], finding: dict[str, Any], state: dict[str, Any] | None = None) -> None:
    for key in ("kind", "api", "display_api", "return_code", "return_name", "correlation_id", "pid", "tid",
                "global_tid", "thread_name", "start_ns", "end_ns", "requested_bytes", "out_of_memory", "rank",
                "rank_source", "device_id"):
        assert row[key] == finding[key], key
    enclosing = finding["enclosing"] or {}
    for key in ("api", "library", "source", "start_ns", "end_ns", "recorded_end_ns", "coverage"):
        assert row[f"enclosing_{key}"] == enclosing.get(key), key
    before = enclosing.get("allocations_before") or {}
    assert (row["allocations_before"], row["allocations_before_bytes"]) == (before.get("count"), before.get("bytes"))
    capture = finding["stream_capture"] or {}
    assert row["stream_capture_event_records"] == capture.get("event_records_count")
    assert row["ns_from_capture_end"] == capture.get("ns_from_capture_end")
    allocator = state or {}  # the document's allocator.at[] state at this finding (with snapshots only)
    assert (row["allocator_reserved_bytes"], row["allocator_inactive_bytes"]) == (
        allocator.get("reserved_bytes"), allocator.get("inactive_bytes"))


@pytest.mark.parametrize(("engine", "jobs"), [
    ("local", 1), pytest.param("local", 2, marks=pytest.mark.slow), pytest.param("dask", 2, marks=pytest.mark.slow)
])
def test_rows_match_analyze_json_on_each_engine(capsys, tmp_path: Path, engine: str, jobs: int) -> None:
    (tmp_path / "ev").mkdir()  # the inputs' folder: a batch never writes inside it
    broken = tmp_path / "ev" / "broken.sqlite"
    broken.write_bytes(b"")
    out = tmp_path / "batch"
    code, stdout, err = run(
        capsys, "batch", *REAL, broken, tmp_path / "ev" / "missing.sqlite", "--out", out, "--jobs", jobs,
        "--engine", engine,
    )
    assert code == 0, err
    assert stdout.splitlines()[:2] == [
        "33 input(s): 31 analyzed, 0 resumed, 2 unusable; 10 finding(s)",
        "verdicts: failure_found 10, inconclusive 4, no_failure 17",
    ]
    assert err.count("\n") == 2 and "broken.sqlite: empty file" in err and "missing.sqlite: no such file" in err
    inputs = pl.read_parquet(out / "inputs.parquet")
    findings = pl.read_parquet(out / "findings.parquet")
    assert inputs["path"].to_list() == [*REAL, str(broken), str(tmp_path / "ev" / "missing.sqlite")]
    for path, row in zip(REAL, inputs.head(len(REAL)).iter_rows(named=True), strict=True):
        doc = analyze_json(capsys, path)
        assert row == expected_input_row(doc)
        rows = findings.filter(pl.col("input_sha256") == row["sha256"]).sort("finding").to_dicts()
        assert len(rows) == len(doc["findings"])
        for i, (found, finding) in enumerate(zip(rows, doc["findings"], strict=True)):
            assert_finding_matches(found, finding)
            assert found["path"] == path  # as the inputs table has it
            assert {k: found[k] for k in expected_holder(doc, i)} == expected_holder(doc, i)
    bad = inputs.row(len(REAL), named=True)
    assert bad["status"] == "error" and bad["verdict"] is None and bad["error"].startswith(f"{broken}: empty file")
    assert bad["sha256"] == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # of no bytes
    assert inputs.row(len(REAL) + 1, named=True)["sha256"] is None


def test_csv_by_extension_and_folders_searched(capsys, tmp_path: Path) -> None:
    out = tmp_path / "runs.csv"
    code, stdout, _ = run(capsys, "batch", TORCH, "--out", out, "--jobs", 1)
    assert code == 0
    assert stdout.splitlines()[2:] == [f"wrote {out}", f"wrote {tmp_path / 'runs.findings.csv'}"]
    table = pl.read_csv(out)
    assert table.select("path", "verdict").rows() == [
        (str(TORCH / "observe.sqlite"), "failure_found"),
        (str(TORCH / "release.sqlite"), "no_failure"),
    ]
    found = pl.read_csv(tmp_path / "runs.findings.csv")
    assert found.select("kind", "api", "return_code", "enclosing_api").rows() == [
        ("nested_alloc_failure", "cudaMalloc_v3020", 2, "cublasCreate_v2")
    ]
    assert (tmp_path / "runs.parts" / "batch.json").is_file()


def seed(out: Path, done: list[str], given: list[str]) -> None:
    """A batch of ``given`` that finished ``done`` and was interrupted: its parts, written by the batch's
    own writer with a forged verdict in each (so a test can tell a re-analysis from a resumption; a
    part rewritten afterwards is refused), and no combined tables."""
    output = BatchOutput.at(out)
    options = fleet.AuditOptions()
    prepared = output.prepare(options.recorded(), given)
    for path in done:
        rows = fleet.audit_one(path, options)
        output.save_part({**rows["input"], "verdict": "seeded"}, rows["findings"], prepared.batch)  # type: ignore[typeddict-item]


@pytest.mark.parametrize("engine", ["local", "dask"])
def test_rerun_resumes_by_sha256_without_analyzing_again(tmp_path: Path, engine: str) -> None:
    out = tmp_path / "batch"
    done = [str(TORCH / "observe.sqlite")]
    inputs = [*done, str(TORCH / "release.sqlite")]
    # the same bytes at another path: resumed too (the parts are keyed by content)
    (tmp_path / "ev").mkdir()
    copy = tmp_path / "ev" / "copy-of-observe.sqlite"
    shutil.copyfile(done[0], copy)
    seed(out, done, [*inputs, str(copy)])
    result = fleet.run_batch([*inputs, copy], out=out, jobs=2, engine=engine)  # type: ignore[arg-type]
    table = pl.read_parquet(out / "inputs.parquet")
    assert table.equals(result.inputs)
    assert table.select("path", "verdict", "status").rows() == [
        (inputs[0], "seeded", "resumed"),
        (inputs[1], "no_failure", "analyzed"),
        (str(copy), "seeded", "resumed"),
    ]
    assert pl.read_parquet(out / "findings.parquet")["kind"].to_list() == ["nested_alloc_failure"]


def test_interrupted_batch_keeps_what_it_finished(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i, path in enumerate(REAL * 2):  # 62 inputs, 31 distinct: each file's copy resumed by its content
        shutil.copyfile(path, inputs / f"{i:02d}-{Path(path).name}")
    out = tmp_path / "batch"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsysaudit", "batch", str(inputs), "--out", str(out), "--jobs", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not list((out / "parts").glob("*.input.parquet")) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p.name.split(".")[0] for p in (out / "parts").glob("*.input.parquet")}
    assert finished and not (out / "inputs.parquet").exists()
    result = fleet.run_batch([inputs], out=out, jobs=1)
    resumed = result.inputs.filter(pl.col("status") == "resumed")
    assert set(resumed["sha256"].to_list()) == finished
    assert result.inputs.height == 62 and result.inputs["error"].null_count() == 62
    fresh = fleet.run_batch([inputs], jobs=1).inputs
    assert result.inputs.drop("status").equals(fresh.drop("status"))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie waiting for its reaper has ended)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the workers' parent-death signal")
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stopped_batch_leaves_no_worker_holding_its_output(tmp_path: Path, how: signal.Signals) -> None:
    """A caller waiting for EOF on the batch's stdout (a pipe) gets it: no spawn worker or resource
    tracker outlives the driver, whether it is asked to stop or killed."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for i in range(300):  # far more than finish before the signal
        (inputs / f"{i:03d}.sqlite").symlink_to(REAL[i % len(REAL)])
    out = tmp_path / "batch"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsysaudit", "batch", str(inputs), "--out", str(out), "--jobs", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 60
    while not list((out / "parts").glob("*.input.parquet")) and time.monotonic() < deadline:
        time.sleep(0.02)
    children = [int(c) for c in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    assert len(children) == 3  # two workers and the resource tracker
    proc.send_signal(how)
    try:
        stdout, stderr = proc.communicate(timeout=120)  # returns at EOF: no process holds stdout or stderr
    except subprocess.TimeoutExpired:
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        proc.kill()
        raise
    assert stdout == ""
    if how == signal.SIGTERM:
        assert (proc.returncode, stderr) == (
            143, "nsysaudit: terminated (SIGTERM); what a batch finished is kept in its parts\n"
        )
    deadline = time.monotonic() + 30
    while any(map(_alive, children)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(map(_alive, children))
    assert not (out / "inputs.parquet").exists()  # stopped: the parts stay (a rerun resumes them)


def test_other_options_or_a_foreign_output_are_refused(capsys, tmp_path: Path) -> None:
    out = tmp_path / "batch"
    fleet.run_batch([TORCH], out=out, jobs=1)
    code, stdout, err = run(capsys, "batch", TORCH, "--out", out, "--library-domain", "MyLib")
    assert (code, stdout) == (2, "") and err.count("\n") == 1
    assert f"{out / 'parts'}: its parts were made for another batch (other options" in err
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "inputs.parquet").write_bytes(b"a file of someone else")
    for target, named in ((foreign, foreign / "inputs.parquet"), (tmp_path / "x.parquet", tmp_path / "x.parquet")):
        if target.suffix:
            target.write_bytes(b"mine")
        code, stdout, err = run(capsys, "batch", TORCH, "--out", target)
        assert (code, stdout) == (2, "") and err.count("\n") == 1
        assert err.startswith(f"nsysaudit: error: {named}: cannot write the batch output here: exists and is not")
    assert (foreign / "inputs.parquet").read_bytes() == b"a file of someone else"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch", "mine", "x.parquet"]


def test_read_only_out_parent_is_one_line_exit_2(read_only_folder, tmp_path: Path) -> None:
    locked, prefix = read_only_folder
    proc = unprivileged(prefix, "batch", TORCH, "--out", locked / "batch", "--jobs", "1", cache=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.startswith(f"nsysaudit: error: {locked / 'batch'}") and proc.stderr.count("\n") == 1
    assert ("Permission denied" in proc.stderr or "Operation not permitted" in proc.stderr)  # 0755 or chattr +i
    assert list(locked.iterdir()) == []


def test_engine_that_cannot_start_writes_nothing(capsys, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fleet, "SCHEDULER_TIMEOUT", "1s")
    out = tmp_path / "batch"
    code, stdout, err = run(capsys, "batch", TORCH, "--out", out, "--engine", "dask", "--scheduler", "tcp://127.0.0.1:9")
    assert (code, stdout) == (2, "") and err.startswith("nsysaudit: error: dask scheduler tcp://127.0.0.1:9: cannot")
    assert not out.exists()
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if the [fleet] extra were not installed
    code, _, err = run(capsys, "batch", TORCH, "--out", out, "--engine", "dask")
    assert code == 2 and "pip install 'nsysaudit[fleet]'" in err and err.count("\n") == 1
    assert not out.exists()
    code, _, err = run(capsys, "batch", TORCH, "--out", out, "--scheduler", "tcp://127.0.0.1:9")
    assert code == 2 and "a scheduler address needs engine 'dask'" in err and not out.exists()


def test_audit_many_returns_the_inputs_table_and_builder_findings(make_export) -> None:
    built = make_export(observe_nested_failure())
    table = nsysaudit.audit_many([built, TORCH / "release.sqlite"], jobs=1)
    assert table.columns == list(fleet.INPUT_SCHEMA)
    assert table.select("verdict", "nested_alloc_failures", "status").rows() == [
        ("failure_found", 1, "analyzed"),
        ("no_failure", 0, "analyzed"),
    ]
    result = nsysaudit.run_batch([built], jobs=1)
    assert result.findings.select("api", "return_code", "enclosing_api", "allocations_before_bytes").rows() == [
        ("cudaMalloc_v3020", 2, "cublasCreate_v2", 6 << 20)
    ]
    assert repr(result) == (
        "BatchResult(1 input(s): 1 analyzed, 0 resumed, 0 unusable; 1 finding(s); "
        "verdicts: failure_found 1, inconclusive 0, no_failure 0)"
    )
    assert "<li>1 input(s): 1 analyzed" in result._repr_html_()


def test_find_inputs(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("a/b/x.SQLITE", "a/y.nsys-rep", "a/z.qdrep", "a/notes.txt", "a/b/w.sqlite-wal"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "link").symlink_to(tmp_path / "a", target_is_directory=True)
    given = tmp_path / "given.anything"
    found = fleet.find_inputs([tmp_path, given, tmp_path / "a", tmp_path / "a" / "y.nsys-rep"])
    # sorted, suffixes in any case, the symlinked folder not followed, each file once
    assert found == [str(tmp_path / p) for p in ("a/b/x.SQLITE", "a/y.nsys-rep", "a/z.qdrep")] + [str(given)]


def test_a_folder_without_exports_is_an_unusable_input_row_not_nothing(tmp_path: Path) -> None:
    empty = tmp_path / "no-exports"
    empty.mkdir()
    (empty / "notes.txt").write_text("not an export")
    result = fleet.run_batch([empty, TORCH / "observe.sqlite"], jobs=1)
    rows = result.inputs.select("path", "status", "error").rows()
    assert rows == [
        (str(empty), "error", f"{empty}: folder holds no *.sqlite, *.nsys-rep or *.qdrep file"),
        (str(TORCH / "observe.sqlite"), "analyzed", None),
    ]


def test_a_worker_that_dies_is_one_line_and_the_finished_parts_stay(capsys, tmp_path: Path, monkeypatch) -> None:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    for path in REAL[:4]:
        shutil.copyfile(path, inputs / f"a-{Path(path).parent.name}-{Path(path).name}")
    shutil.copyfile(REAL[0], inputs / "zz-dies.sqlite")
    monkeypatch.setattr(fleet, "audit_one", worker_faults.audit_one_or_die)
    out = tmp_path / "batch"
    code, _, err = run(capsys, "batch", inputs, "--out", out, "--jobs", 2)
    assert code == 2 and err == f"nsysaudit: error: {fleet.WORKER_DIED}\n"
    assert not (out / "inputs.parquet").exists() and (out / "parts" / "batch.json").is_file()
    finished = {p.name.split(".")[0] for p in (out / "parts").glob("*.input.parquet")}
    monkeypatch.undo()
    result = fleet.run_batch([inputs], out=out, jobs=1)  # the rerun resumes what was finished
    assert set(result.inputs.filter(pl.col("status") == "resumed")["sha256"].to_list()) == finished
    assert result.inputs["error"].null_count() == 5


# --- batches as users run them -------------------------------------------------------------------------

TORCH_DIR = H200_2025 / "torch"
NO_GUARD = f"""import nsysaudit
table = nsysaudit.audit_many([{str(TORCH_DIR)!r}], jobs=2)
print(sorted(table.select("verdict", "findings").rows()))
"""


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_audit_many_runs_from_a_script_without_a_main_guard(tmp_path: Path, how: str) -> None:
    """Spawned workers no longer import the caller's script again: without an `if __name__ ==
    "__main__":` guard, or from `python - <<EOF`, they once died ("a worker process died")."""
    script = tmp_path / "audit.py"
    script.write_text(NO_GUARD)
    args, stdin = ([sys.executable, str(script)], None) if how == "script" else ([sys.executable, "-"], NO_GUARD)
    proc = subprocess.run(args, input=stdin, capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[('failure_found', 1), ('no_failure', 0)]"


def test_dask_gets_absolute_paths_for_relative_ones(capsys, tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("distributed")
    monkeypatch.chdir(H200_2025)
    code, _, err = run(capsys, "batch", "torch", "--engine", "dask", "--jobs", "1", "--out", tmp_path / "b")
    assert code == 0, err
    rows = pl.read_parquet(tmp_path / "b" / "inputs.parquet")
    assert rows["path"].to_list() == ["torch/observe.sqlite", "torch/release.sqlite"]  # as given
    assert rows["status"].to_list() == ["analyzed", "analyzed"] and rows["error"].null_count() == 2


def test_a_batch_of_only_unusable_inputs_exits_1(capsys, tmp_path: Path) -> None:
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "empty.sqlite").write_bytes(b"")
    code, stdout, err = run(capsys, "batch", tmp_path / "ev" / "empty.sqlite", tmp_path / "ev" / "missing.sqlite",
                            "--jobs", "1", "--out", tmp_path / "audit")
    assert code == 1
    assert stdout.splitlines()[0] == "2 input(s): 0 analyzed, 0 resumed, 2 unusable; 0 finding(s)"
    assert err.splitlines()[-1] == ("nsysaudit: error: every input of the batch was unusable (2): see the rows' "
                                    "errors")


def test_the_summary_counts_findings_per_input(tmp_path: Path) -> None:
    """An export given twice is two inputs with a finding each (the findings table keeps it once)."""
    twice = tmp_path / "again.sqlite"
    shutil.copyfile(TORCH_DIR / "observe.sqlite", twice)
    result = fleet.run_batch([TORCH_DIR / "observe.sqlite", twice], jobs=1)
    assert result.summary_lines()[0] == "2 input(s): 2 analyzed, 0 resumed, 0 unusable; 2 finding(s)"
    assert result.findings.height == 1
