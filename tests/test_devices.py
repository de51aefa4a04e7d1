"""Devices and ranks: which GPU each process used, the totals and the ledger per device,
and the rank where a row of the export (or the application's telemetry) states it, on builder
exports of a two-GPU job: TARGET_INFO_GPU with two devices whose ids and CUDA ordinals differ (as
in pipit's real 4x A100 export), memory events on device 1, two processes (rank 0 on device 0 runs
through; rank 1's caching allocator holds device 1 and its autograd worker's cublasCreate_v2 fails).

The two forms nsys writes for such a job: one report of every process (``nsys profile torchrun ...``:
the launched command is torchrun, and nsys records nothing of its workers' environment), and one
report per rank (``torchrun ... nsys profile -o report_%q{RANK} python3 train.py``: each report's
launched command is its rank's python3, with RANK in its recorded environment).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builder import Call, Export, Gpu, LibCall, MemoryEvent, Range, strip_not_null

import nsysaudit
from nsysaudit.analysis.devices import device_truth, program
from nsysaudit.read.devices import DeviceTables, Launch, environment_entry, launches

GiB = 1 << 30
H200_TOTAL = 150_109_880_320  # TARGET_INFO_GPU.totalMemory of the real H200 captures
H100_TOTAL = 85_899_345_920
RANK0, RANK1 = 200, 300
WORKER0, WORKER1 = 220, 320
HELD0, HELD1 = 40 * GiB, 79 * GiB + 512 * (1 << 20)  # what each rank's caching allocator holds
STATIC1 = 223_090  # the driver's module memory on device 1 (correlation 0)
GPUS = [
    # id 0 is CUDA device 1 and id 1 CUDA device 0 as nsys enumerated them: the ids name the devices.
    Gpu(0, "NVIDIA H200", H200_TOTAL, cu_device=1, bus="0000:00:07.0", uuid="GPU-00000000-0000-0000-0000-000000000007"),
    Gpu(1, "NVIDIA H100 80GB HBM3", H100_TOTAL, cu_device=0, bus="0000:00:06.0",
        uuid="GPU-00000000-0000-0000-0000-000000000006"),
]
ORDINALS = [(pid, gpu, 1 - gpu) for pid in (RANK0, RANK1) for gpu in (0, 1)]  # CUDA_VISIBLE_DEVICES=0,1


def rank0_calls() -> list[Call]:
    return [
        Call("cudaMalloc_v3020", 1_000, 2_000, RANK0, RANK0, corr=10, bytes=HELD0, device=0),
        Call("cudaMalloc_v3020", 10_000, 10_500, RANK0, WORKER0, corr=20, bytes=1_024, device=0),
        Call("cudaMalloc_v3020", 11_000, 11_500, RANK0, WORKER0, corr=21, bytes=131_072, device=0),
        Call("cudaMalloc_v3020", 12_000, 12_400, RANK0, WORKER0, corr=22, bytes=67_108_864, device=0),
        Call("cudaDeviceSynchronize_v3020", 30_000, 30_100, RANK0, RANK0, corr=30),  # the trace goes on
    ]


def rank1_calls() -> list[Call]:
    return [
        Call("cudaMalloc_v3020", 1_000, 2_000, RANK1, RANK1, corr=10, bytes=HELD1, device=1),
        Call("cudaMalloc_v3020", 10_000, 10_500, RANK1, WORKER1, corr=20, bytes=1_024, device=1),
        Call("cudaMalloc_v3020", 11_000, 11_500, RANK1, WORKER1, corr=21, bytes=131_072, device=1),
        Call("cudaMalloc_v3020", 12_000, 12_400, RANK1, WORKER1, ret=2, corr=22),
        Call("cudaDeviceSynchronize_v3020", 30_000, 30_100, RANK1, RANK1, corr=30),
    ]


def rank_parts(pid: int, worker: int) -> dict[str, Any]:
    return {
        "lib_calls": [LibCall("cublasCreate_v2", 9_000, 13_000, pid, worker)],
        "ranges": [Range("backward", 8_500, 13_500, pid, worker)],
        "thread_names": {(pid, pid): "python3", (pid, worker): "pt_autograd_0"},
    }


def one_report() -> Export:
    """``nsys profile torchrun --nproc-per-node 2 train.py``: both ranks in one report; the launched
    command (torchrun, pid 100) is traced too, and its recorded environment has no rank."""
    r0, r1 = rank_parts(RANK0, WORKER0), rank_parts(RANK1, WORKER1)
    return Export(
        calls=rank0_calls() + rank1_calls(),
        lib_calls=r0["lib_calls"] + r1["lib_calls"],
        ranges=r0["ranges"] + r1["ranges"],
        thread_names={**r0["thread_names"], **r1["thread_names"]},
        processes={100: "torchrun", RANK0: "python3", RANK1: "python3"},
        memory_events=[MemoryEvent(500, RANK1, STATIC1, device=1)],
        gpu_info=list(GPUS),
        cuda_devices=list(ORDINALS),
        contexts=[(RANK0, 0), (RANK1, 1)],
        capture_meta={"PROCESS_0:COMMAND": "torchrun"},
        arguments=["--nproc-per-node", "2", "train.py"],
        environment=['CUDA_VISIBLE_DEVICES="0,1"', 'MASTER_PORT="29500"'],
    )


def per_rank(rank: int) -> Export:
    """One rank's own report (``nsys profile -o report_%q{RANK} python3 train.py`` under torchrun):
    its launched command is that rank's python3, with RANK in its recorded environment."""
    pid, worker = (RANK0, WORKER0) if rank == 0 else (RANK1, WORKER1)
    parts = rank_parts(pid, worker)
    return Export(
        calls=rank0_calls() if rank == 0 else rank1_calls(),
        **parts,
        processes={pid: "python3"},
        memory_events=[MemoryEvent(500, RANK1, STATIC1, device=1)] if rank == 1 else [],
        gpu_info=list(GPUS),
        cuda_devices=[o for o in ORDINALS if o[0] == pid],
        contexts=[(pid, rank)],
        arguments=["train.py"],
        environment=[f'RANK="{rank}"', f'LOCAL_RANK="{rank}"', 'WORLD_SIZE="2"', 'CUDA_VISIBLE_DEVICES="0,1"'],
    )


def process(doc: dict[str, Any], pid: int) -> dict[str, Any]:
    return next(p for p in doc["processes"] if p["pid"] == pid)


def analyze(path: Path, **kw: Any) -> dict[str, Any]:
    return nsysaudit.analyze(path, **kw).to_dict()


# --- reading what nsys recorded ------------------------------------------------------------------


def test_the_launched_command_as_recorded() -> None:
    capture = {
        "PROCESS_0:COMMAND": ["env"],
        "PROCESS_0:ARGUMENT_1": ["python3"],
        "PROCESS_0:ARGUMENT_0": ["RANK=3"],
        "PROCESS_0:ARGUMENT_2": ["train.py"],
        "PROCESS_0:PID": ["0"],
        "PROCESS_0:ENVIRONMENT_VARIABLE": ['PMI_RANK="3"', "PLAIN=1", 'QUOTED="a=b"'],
        "PROCESS_0:COLLECT_CUDA_TRACE": ["true"],
    }
    (launch,) = launches(capture)
    assert launch.command == "env" and launch.arguments == ("RANK=3", "python3", "train.py")
    assert launch.environment == (("PMI_RANK", "3"), ("PLAIN", "1"), ("QUOTED", "a=b"))
    assert launch.pid is None  # PROCESS_0:PID 0: not recorded
    assert program(launch) == ("python3", ("train.py",), {"RANK": "3"})
    assert environment_entry('BASH_FUNC_x%%="() {  echo "hi"\n}"') == ("BASH_FUNC_x%%", '() {  echo "hi"\n}')


def test_real_single_gpu_export_has_one_device_and_no_rank(h200_torch: Path) -> None:
    doc = analyze(h200_torch)
    (device,) = doc["devices"]
    assert (device["device_id"], device["cuda_device"], device["name"], device["bus_location"]) == (
        0, 0, "NVIDIA H200", "0000:00:06.0")
    assert device["total_bytes"] == H200_TOTAL and device["processes"] == [683]
    (p,) = doc["processes"]
    assert p["devices"] == [0] and p["launched"] is True
    assert p["device_evidence"] == [{"vm": 1, "device_id": 0, "cuda_device": 0, "memory_events": 490,
                                     "sources": ["CUDA_GPU_MEMORY_USAGE_EVENTS", "TARGET_INFO_CUDA_CONTEXT_INFO"]}]
    assert p["rank"] is None and p["rank_source"] is None
    assert p["rank_unknown"].startswith("nsys recorded no environment for the command it launched")
    assert doc["ranks"]["shown"] is False and doc["ranks"]["ranks"] == []
    assert doc["findings"][0]["rank"] is None and doc["findings"][0]["device_id"] == 0


@pytest.fixture
def h200_torch() -> Path:
    return Path(__file__).parent / "fixtures" / "h200-cuda13-nsys2025.3" / "torch" / "observe.sqlite"


def test_real_pipit_export_states_its_rank_in_the_launched_environment() -> None:
    """pipit's CloverLeaf export (nsys 2024.5, one srun task on a 4x A100 node): nsys recorded the
    launched command's environment, PMI_RANK="0" and SLURM_PROCID="0"; its one CUDA context is on
    TARGET_INFO_GPU id 0, which is CUDA device 3 at bus c1:00.0."""
    doc = analyze(Path(__file__).parent / "fixtures" / "public" / "pipit_cloverleaf_2024.5.sqlite")
    assert [(d["device_id"], d["cuda_device"], d["bus_location"]) for d in doc["devices"]] == [
        (0, 3, "0000:c1:00.0"), (1, 2, "0000:82:00.0"), (2, 1, "0000:41:00.0"), (3, 0, "0000:03:00.0")]
    p = process(doc, 1701896)
    assert p["launched"] is True and p["devices"] == [0] and p["rank"] == 0
    assert p["rank_source"] == ('META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE PMI_RANK="0"; '
                                'META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE SLURM_PROCID="0"')
    assert (p["local_rank"], p["world_size"], p["cuda_visible_devices"]) == (0, 1, "0,1,2,3")
    assert doc["devices"][0]["processes"] == [1701896] and doc["devices"][0]["ranks"] == [0]
    assert doc["ranks"]["ranks"] == [0] and doc["ranks"]["shown"] is True


# --- one report of both ranks ---------------------------------------------------------------------


def test_one_report_devices_totals_and_ledger_per_device(make_export: Callable[..., Path]) -> None:
    doc = analyze(make_export(one_report()))
    devices = {d["device_id"]: d for d in doc["devices"]}
    assert devices[0]["total_bytes"] == H200_TOTAL and devices[1]["total_bytes"] == H100_TOTAL
    assert (devices[0]["cuda_device"], devices[1]["cuda_device"]) == (1, 0)
    assert devices[0]["processes"] == [RANK0] and devices[1]["processes"] == [RANK1]
    assert devices[0]["allocated_bytes"] == HELD0 + 1_024 + 131_072 + 67_108_864
    assert devices[1]["allocated_bytes"] == HELD1 + 1_024 + 131_072 + STATIC1
    r1 = process(doc, RANK1)
    assert r1["devices"] == [1]
    assert r1["device_evidence"] == [{"vm": 0, "device_id": 1, "cuda_device": 0, "memory_events": 4,
                                      "sources": ["CUDA_GPU_MEMORY_USAGE_EVENTS", "TARGET_INFO_CUDA_CONTEXT_INFO"]}]
    # The ledger per device: at rank 1's failure, device 1 only, against device 1's own total.
    (finding,) = doc["findings"]
    assert (finding["pid"], finding["device_id"], finding["devices"]) == (RANK1, 1, [1])
    point = next(p for p in doc["memory"]["at"] if p["point"] == "finding")
    (at,) = point["devices"]
    held = HELD1 + 1_024 + 131_072 + STATIC1
    assert (at["device_id"], at["total_bytes"], at["device_resident_live_bytes"]) == (1, H100_TOTAL, held)
    assert at["free_at_most_bytes"] == H100_TOTAL - held
    assert [p["pid"] for p in at["processes"]] == [RANK1]
    assert point["holder"].startswith("device 1 (NVIDIA H100 80GB HBM3, 0000:00:06.0): 79.5 GiB of 80.0 GiB held at "
                                      "the failure, all by pid 300 (python3)")
    per_device = {d["device_id"]: d for d in doc["memory"]["devices"]}
    assert per_device[0]["peak_device_resident_live_bytes"] == HELD0 + 1_024 + 131_072 + 67_108_864
    assert per_device[1]["total_bytes"] == H100_TOTAL


def test_one_report_leaves_the_workers_ranks_unknown(make_export: Callable[..., Path]) -> None:
    doc = analyze(make_export(one_report(), "report_rank1.sqlite"))  # a file name is no evidence
    launch = doc["launches"][0]
    assert (launch["command"], launch["pid"], launch["cuda_visible_devices"]) == ("torchrun", 100, "0,1")
    assert launch["rank_claims"] == [] and launch["environment_variables"] == 2
    torchrun = process(doc, 100)
    assert torchrun["launched"] is True and torchrun["cuda_visible_devices"] == "0,1"
    assert torchrun["rank_unknown"].startswith("the environment nsys recorded for the command it launched "
                                               "(2 variables) has none of RANK, OMPI_COMM_WORLD_RANK")
    for pid in (RANK0, RANK1):
        p = process(doc, pid)
        assert p["launched"] is False and p["rank"] is None and p["cuda_visible_devices"] is None
        assert p["rank_unknown"] == (
            "it is not the command nsys launched (pid 100), and nsys records the environment and command line only "
            "of that command, not of the processes it started; no telemetry was given")
    ranks = doc["ranks"]
    assert (ranks["ranks"], ranks["failing_ranks"], ranks["failing_rank_unknown"]) == ([], [], 1)
    assert ranks["statement"].startswith("failing: pid 300, device 1, rank unknown: it is not the command")
    assert ranks["shown"] is True  # two devices: reports name them
    what = doc["answer"]["findings"][0]["what"]
    assert what.endswith("; rank unknown, device 1 (NVIDIA H100 80GB HBM3, 0000:00:06.0)")


def telemetry_lines(path: Path, ranks: dict[int, int]) -> Path:
    start = 1_796_064_718_689_501_058  # the builder's session start (UTC ns)
    with path.open("w") as f:
        for pid, rank in ranks.items():
            f.write(json.dumps({"event": "start", "pid": pid, "tid": pid, "rank": rank,
                                "realtime_ns": start + 500}) + "\n")
    return path


def test_the_applications_telemetry_states_each_workers_rank(make_export: Callable[..., Path], tmp_path: Path) -> None:
    export = make_export(one_report())
    doc = analyze(export, telemetry=telemetry_lines(tmp_path / "t.jsonl", {RANK0: 0, RANK1: 1}))
    assert (process(doc, RANK0)["rank"], process(doc, RANK1)["rank"], process(doc, 100)["rank"]) == (0, 1, None)
    assert process(doc, RANK1)["rank_source"] == ("telemetry line 2 (start): rank=1, the application's own claim")
    assert doc["ranks"]["failing_ranks"] == [1] and doc["findings"][0]["rank"] == 1
    assert doc["ranks"]["statement"] == ("failing: rank 1 (pid 300, device 1; telemetry line 2 (start): rank=1, the "
                                         "application's own claim)")
    devices = {d["device_id"]: d for d in doc["devices"]}
    assert (devices[0]["ranks"], devices[1]["ranks"]) == ([0], [1])
    assert doc["answer"]["summary"].startswith(
        "cudaMalloc returned 2 (cudaErrorMemoryAllocation) inside cublasCreate_v2 on pt_autograd_0, rank 1, device 1 "
        "(NVIDIA H100 80GB HBM3, 0000:00:06.0),")


# --- one report per rank --------------------------------------------------------------------------


def test_per_rank_reports_read_the_rank_from_the_launched_environment(make_export: Callable[..., Path]) -> None:
    # Named against their ranks on purpose: the file name is never read.
    r0 = analyze(make_export(per_rank(0), "report_1.sqlite"))
    r1 = analyze(make_export(per_rank(1), "report_0.sqlite"))
    p0, p1 = process(r0, RANK0), process(r1, RANK1)
    assert (p0["rank"], p0["local_rank"], p0["world_size"], p0["devices"]) == (0, 0, 2, [0])
    assert (p1["rank"], p1["local_rank"], p1["world_size"], p1["devices"]) == (1, 1, 2, [1])
    assert p1["rank_source"] == 'META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE RANK="1"'
    assert p1["launched"] is True and p1["cuda_visible_devices"] == "0,1"
    assert r0["findings"] == [] and r0["ranks"]["failing"] == []
    (f,) = r1["findings"]
    assert (f["rank"], f["device_id"], f["rank_source"]) == (1, 1, p1["rank_source"])
    assert r1["ranks"]["failing_ranks"] == [1]
    assert [d["device_id"] for d in r1["devices"]] == [0, 1]  # both devices of the host, one used
    assert [d["processes"] for d in r1["devices"]] == [[], [RANK1]]


def test_sources_that_disagree_leave_the_rank_unknown(make_export: Callable[..., Path], tmp_path: Path) -> None:
    export = make_export(per_rank(1))
    doc = analyze(export, telemetry=telemetry_lines(tmp_path / "t.jsonl", {RANK1: 0}))
    p = process(doc, RANK1)
    assert p["rank"] is None and p["rank_source"] is None
    assert p["rank_unknown"] == (
        'the evidence disagrees: META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE RANK="1"; telemetry line 1 '
        "(start): rank=0, the application's own claim")
    assert doc["findings"][0]["rank"] is None


def test_a_rank_on_the_command_line_and_env_assignments(make_export: Callable[..., Path]) -> None:
    spec = per_rank(1)
    spec.environment = []
    spec.capture_meta = {"PROCESS_0:COMMAND": "/usr/bin/env"}
    spec.arguments = ["WORLD_SIZE=2", "python3", "train.py", "--rank", "1"]
    p = process(analyze(make_export(spec)), RANK1)
    assert (p["rank"], p["world_size"]) == (1, 2)
    assert p["rank_source"] == "META_DATA_CAPTURE PROCESS_0 command line: python3 ... --rank 1"


def test_a_launched_command_of_several_processes_names_no_rank(make_export: Callable[..., Path]) -> None:
    spec = per_rank(1)
    spec.processes = {RANK1: "python3", 400: "python3"}  # a DataLoader worker, say: also python3
    doc = analyze(make_export(spec))
    assert [process(doc, pid)["rank"] for pid in (RANK1, 400)] == [None, None]
    assert [process(doc, pid)["launched"] for pid in (RANK1, 400)] == [None, None]
    assert process(doc, RANK1)["rank_unknown"] == (
        "the launched command's rank is recorded (META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE RANK=\"1\"), but "
        "not which traced process it is: 2 traced processes are named 'python3' and PROCESS_0:PID is not recorded: "
        "the export does not say which is the launched command; no telemetry was given")
    spec.capture_meta = {"PROCESS_0:PID": str(RANK1)}  # where nsys recorded the pid, it decides
    doc = analyze(make_export(spec))
    assert process(doc, RANK1)["rank"] == 1 and process(doc, 400)["rank"] is None


def test_without_the_device_tables_the_memory_events_say_the_device(make_export: Callable[..., Path]) -> None:
    spec = per_rank(1)
    spec.cuda_devices, spec.contexts = None, []
    doc = analyze(make_export(spec))
    assert process(doc, RANK1)["device_evidence"] == [
        {"vm": 0, "device_id": 1, "cuda_device": None, "memory_events": 4, "sources": ["CUDA_GPU_MEMORY_USAGE_EVENTS"]}]


def test_device_truth_without_evidence() -> None:
    truth = device_truth(None, [{"pid": 5, "global_pid": 5 << 24, "name": "a.out"}])
    assert truth.devices == [] and truth.launches == [] and not truth.names_devices
    assert truth.of(5 << 24)["rank_unknown"] == (
        "the export records no launched command (META_DATA_CAPTURE has no PROCESS_0 rows); no telemetry was given")
    evidence = DeviceTables(launches=(Launch(0, "python3", (), (("RANK", "x"),), 1, None),))
    assert device_truth(evidence, [{"pid": 5, "global_pid": 5 << 24, "name": "python3"}]).of(5 << 24)["rank"] is None


# --- what people read -----------------------------------------------------------------------------


def test_the_terminal_and_report_md_name_devices_and_ranks(make_export: Callable[..., Path]) -> None:
    from nsysaudit.render.markdown import analysis_markdown
    from nsysaudit.render.terminal import analysis_renderable, to_text

    result = nsysaudit.analyze(make_export(per_rank(1)))
    text = " ".join(to_text(analysis_renderable(result, details=True), width=200).split())
    assert ("failure_found: cudaMalloc returned 2 (cudaErrorMemoryAllocation) inside cublasCreate_v2 on "
            "pt_autograd_0, rank 1, device 1 (NVIDIA H100 80GB HBM3, 0000:00:06.0)") in text
    assert ("Devices and ranks: - device 0 (NVIDIA H200, 0000:00:07.0): 150,109,880,320 B (139.8 GiB), nsys's CUDA "
            "device 1; no traced process used it - device 1 (NVIDIA H100 80GB HBM3, 0000:00:06.0): 85,899,345,920 B "
            "(80.0 GiB), nsys's CUDA device 0; used by pid 300 (rank 1, its cuda:0); peak held 79.5 GiB - failing: "
            'rank 1 (pid 300, device 1; META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE RANK="1")') in text
    short = " ".join(to_text(analysis_renderable(result), width=200).split())
    assert "devices: 2; ranks: 1 (1 of 1 process(es) with a rank)" in short
    report = analysis_markdown(result.to_dict())
    assert "## Devices and ranks" in report and "used by pid 300 (rank 1, its cuda:0)" in report


def test_a_single_device_report_without_ranks_reads_as_before(h200_torch: Path) -> None:
    from nsysaudit.render.terminal import analysis_renderable, to_text

    result = nsysaudit.analyze(h200_torch)
    text = to_text(analysis_renderable(result, details=True), width=200)
    assert "Devices and ranks" not in text and "rank " not in text and "devices: " not in text
    assert result.to_dict()["answer"]["summary"] == (
        "cudaMalloc returned 2 (cudaErrorMemoryAllocation) inside cublasCreate_v2 on pt_autograd_0")


def test_the_documents_of_a_two_gpu_job_are_of_their_types(make_export: Callable[..., Path], tmp_path: Path) -> None:
    from nsysaudit.reports.conformance import problems
    from nsysaudit.reports.documents import AnalysisDocument

    export = make_export(one_report())
    for doc in (analyze(export), analyze(export, telemetry=telemetry_lines(tmp_path / "t.jsonl", {RANK1: 1})),
                analyze(make_export(per_rank(1)))):
        assert problems(doc, AnalysisDocument) == []
def test_a_process_of_unknown_pid_is_null_in_its_document_and_of_its_type(make_export: Callable[..., Path]) -> None:
    """A PROCESSES row whose pid is not an integer (a damaged export) is listed with pid null, as its
    type says (``integer or null``)."""
    from nsysaudit.reports.conformance import problems
    from nsysaudit.reports.documents import AnalysisDocument

    spec = one_report()
    spec.raw_sql = [strip_not_null("PROCESSES"), "UPDATE PROCESSES SET pid = 'x' WHERE name = 'torchrun'"]
    doc = json.loads(json.dumps(analyze(make_export(spec))))
    assert [p["pid"] for p in doc["processes"]] == [None, RANK0, RANK1]
    assert problems(doc, AnalysisDocument) == []


# --- across ranks: batch and compare -----------------------------------------------------------------


def test_a_batch_over_the_per_rank_reports_is_one_row_per_rank(make_export: Callable[..., Path],
                                                                tmp_path: Path) -> None:
    from nsysaudit.batch.run import run_batch

    job = tmp_path / "job"
    job.mkdir()
    for rank in (0, 1):
        shutil.copy(make_export(per_rank(rank)), job / f"report_{rank}.sqlite")
    shutil.copy(make_export(one_report()), job / "all.sqlite")
    result = run_batch([job], jobs=1)
    rows = result.inputs.select("path", "verdict", "rank", "rank_source", "ranks", "devices", "devices_used",
                                "failing_ranks", "failing_rank_unknown", "failing_devices").rows()
    assert rows == [
        (str(job / "all.sqlite"), "failure_found", None, None, None, 2,
         "0 (NVIDIA H200, 0000:00:07.0); 1 (NVIDIA H100 80GB HBM3, 0000:00:06.0)", None, 1, "1"),
        (str(job / "report_0.sqlite"), "no_failure", 0, 'META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE RANK="0"',
         "0", 2, "0 (NVIDIA H200, 0000:00:07.0)", None, 0, None),
        (str(job / "report_1.sqlite"), "failure_found", 1,
         'META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE RANK="1"', "1", 2, "1 (NVIDIA H100 80GB HBM3, 0000:00:06.0)",
         "1", 0, "1"),
    ]
    assert result.findings.select("pid", "rank", "device_id").rows() == [(RANK1, None, 1), (RANK1, 1, 1)]
    assert result.summary_lines()[2] == (
        f"failing rank(s): 1 ({job / 'report_1.sqlite'}, device 1); rank unknown in {job / 'all.sqlite'} (device 1) "
        "(ranks stated: 0, 1)")


def test_a_batch_of_single_gpu_reports_has_no_rank_line() -> None:
    from nsysaudit.batch.run import run_batch

    result = run_batch([Path(__file__).parent / "fixtures" / "h200-cuda13-nsys2025.3" / "torch"], jobs=1)
    assert result.inputs.select("devices", "rank", "ranks", "failing_rank_unknown").rows() == [(1, None, None, 1),
                                                                                               (1, None, None, 0)]
    assert not any(line.startswith("failing rank") for line in result.summary_lines())


def test_compare_the_failing_rank_with_a_healthy_one(make_export: Callable[..., Path]) -> None:
    from nsysaudit.reports.compare import compare_results
    from nsysaudit.reports.conformance import problems
    from nsysaudit.reports.documents import ComparisonDocument

    failing, healthy = (nsysaudit.analyze(make_export(per_rank(r))) for r in (1, 0))
    doc = compare_results(failing, healthy).to_dict()
    assert problems(doc, ComparisonDocument) == []
    ranks = doc["differences"]["ranks"]
    assert (ranks["two_ranks"], ranks["same_job"]) == (True, True)
    assert ranks["same_job_evidence"] == "the same launched command and arguments, world size 2"
    assert (ranks["observe"]["rank"], ranks["observe"]["devices"], ranks["release"]["rank"],
            ranks["release"]["devices"]) == (1, [1], 0, [0])
    assert ranks["statements"] == [
        "The arms are two ranks: rank 1 (observe, pid 300, on device 1 (NVIDIA H100 80GB HBM3, 0000:00:06.0)) and "
        "rank 0 (release, pid 200, on device 0 (NVIDIA H200, 0000:00:07.0)), of one job (the same launched command "
        "and arguments, world size 2); rank 1 failed and rank 0 did not: the failing rank against a healthy one",
        # the library calls, the holder and the headroom of each rank at the same call
        "At cublasCreate_v2 (call #1 off the main thread), rank 1: 2 nested allocation(s) succeeded, then "
        "cudaMalloc returned 2 (cudaErrorMemoryAllocation); at its start device 1 (NVIDIA H100 80GB HBM3, "
        "0000:00:06.0) held 79.5 GiB of 80.0 GiB, most by pid 300 (79.5 GiB); at most 536,647,822 B (511.8 MiB) free",
        "At cublasCreate_v2 (call #1 off the main thread), rank 0: 3 nested allocation(s) succeeded, none failed; at "
        "its start device 0 (NVIDIA H200, 0000:00:07.0) held 40.0 GiB of 139.8 GiB, most by pid 200 (40.0 GiB); at "
        "most 107,160,207,360 B (99.8 GiB) free",
    ]
    assert H100_TOTAL - (HELD1 + STATIC1) == 536_647_822  # the headroom at its start, before its own allocations
    assert doc["answer"]["ranks"] == ranks["statements"] and doc["summary"][3] == ranks["statements"][0]
    # The environment differs only in the ranks' identity: expected, and no "different capture options".
    capture = doc["differences"]["sources"]["capture"]
    assert capture["differs"] == []
    assert [d["key"] for d in capture["differs_as_expected"]] == [
        "PROCESS_0:ENVIRONMENT_VARIABLE:LOCAL_RANK", "PROCESS_0:ENVIRONMENT_VARIABLE:RANK"]
    assert "different_capture_options" not in [x["code"] for x in doc["not_established"]]


def test_compare_of_a_rank_that_used_an_unknown_device_too(make_export: Callable[..., Path]) -> None:
    """A rank whose memory events name its device and, once, no device (a NULL deviceId): its devices
    are the unknown one and its own, and the comparison says so (sorting them once raised TypeError)."""
    from nsysaudit.reports.compare import compare_results

    spec = per_rank(1)
    spec.memory_events.append(MemoryEvent(600, RANK1, 4_096, corr=0, device=1, address=0x9000))
    spec.raw_sql = [strip_not_null("CUDA_GPU_MEMORY_USAGE_EVENTS"),
                    "UPDATE CUDA_GPU_MEMORY_USAGE_EVENTS SET deviceId = NULL WHERE start = 600"]
    failing, healthy = (nsysaudit.analyze(make_export(s)) for s in (spec, per_rank(0)))
    assert process(failing.to_dict(), RANK1)["devices"] == [1, None]
    ranks = compare_results(failing, healthy).to_dict()["differences"]["ranks"]
    assert ranks["observe"]["devices"] == [1, None]
    assert ranks["statements"][0].startswith(
        "The arms are two ranks: rank 1 (observe, pid 300, on device 1 (NVIDIA H100 80GB HBM3, 0000:00:06.0), "
        "device None) and rank 0")


def test_compare_of_arms_without_ranks_says_nothing_of_ranks(make_export: Callable[..., Path]) -> None:
    from nsysaudit.reports.compare import compare_results

    spec = per_rank(0)
    spec.environment = ['RANK="0"', 'WORLD_SIZE="4"', 'HOME="/h"']
    other = per_rank(1)
    other.environment = ['RANK="1"', 'WORLD_SIZE="2"', 'HOME="/g"']
    a, b = nsysaudit.analyze(make_export(other)), nsysaudit.analyze(make_export(spec))
    doc = compare_results(a, b).to_dict()
    ranks = doc["differences"]["ranks"]
    assert (ranks["two_ranks"], ranks["same_job"]) == (True, False)
    assert ranks["statements"][0].endswith("not of one job: their world sizes differ (2 and 4); rank 1 failed and "
                                           "rank 0 did not: the failing rank against a healthy one")
    assert [d["key"] for d in doc["differences"]["sources"]["capture"]["differs"]] == [
        "PROCESS_0:ENVIRONMENT_VARIABLE:HOME", "PROCESS_0:ENVIRONMENT_VARIABLE:WORLD_SIZE"]
    single = compare_results(*(nsysaudit.analyze(make_export(one_report())) for _ in range(2))).to_dict()
    assert single["differences"]["ranks"]["statements"] == [] and single["answer"]["ranks"] == []
