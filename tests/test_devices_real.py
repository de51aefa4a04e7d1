"""Ranks and devices on real captures: a 2-rank torchrun job on one H200 (nsys 2025.3), captured one
report per rank (``torchrun --no-python nsys profile -o rank_%q{RANK} ...``) and as one report of the
whole job (``nsys profile python3 -m torch.distributed.run ...``); rank 1's autograd worker fails in
cublasCreate_v2, rank 0 completes (tests/fixtures/h200-cuda13-nsys2025.3/README.md, "ranks/")."""

from __future__ import annotations

from pathlib import Path

import nsysaudit
from nsysaudit.batch.run import run_batch
from nsysaudit.reports.compare import compare_results
from nsysaudit.reports.conformance import problems
from nsysaudit.reports.documents import AnalysisDocument, ComparisonDocument

RANKS = Path(__file__).parent / "fixtures" / "h200-cuda13-nsys2025.3" / "ranks"
RANK_SOURCE = 'META_DATA_CAPTURE PROCESS_0:ENVIRONMENT_VARIABLE RANK="{}"'
H200 = "0 (NVIDIA H200, 0000:00:06.0)"


def test_each_per_rank_report_states_its_rank_in_the_launched_environment() -> None:
    for rank, verdict in ((0, "no_failure"), (1, "failure_found")):
        doc = nsysaudit.analyze(RANKS / f"rank_{rank}.sqlite").to_dict()
        assert problems(doc, AnalysisDocument) == []
        [process] = doc["processes"]
        assert (doc["verdict"], process["rank"], process["rank_source"], process["devices"]) == (
            verdict, rank, RANK_SOURCE.format(rank), [0])
        assert (process["world_size"], process["local_rank"]) == (2, rank)
    failing = nsysaudit.analyze(RANKS / "rank_1.sqlite").to_dict()
    [f] = failing["findings"]
    assert (f["kind"], f["api"], f["return_code"], f["correlation_id"], f["enclosing"]["api"], f["rank"],
            f["device_id"]) == ("nested_alloc_failure", "cudaMalloc_v3020", 2, 2433, "cublasCreate_v2", 1, 0)
    assert failing["answer"]["summary"].endswith(", rank 1, device 0 (NVIDIA H200, 0000:00:06.0)")
    assert failing["ranks"]["failing_ranks"] == [1]


def test_one_report_of_the_job_names_no_rank() -> None:
    """nsys records the environment of the command it launches (torchrun), not of its workers."""
    doc = nsysaudit.analyze(RANKS / "job.sqlite").to_dict()
    assert sorted(p["pid"] for p in doc["processes"]) == [669, 706, 707]
    assert all(p["rank"] is None and p["rank_unknown"] for p in doc["processes"])
    [launch] = doc["launches"]
    assert launch["arguments"][:2] == ["-m", "torch.distributed.run"] and launch["rank_claims"] == []
    [f] = doc["findings"]
    assert (f["pid"], f["rank"], f["device_id"], doc["ranks"]["failing_ranks"]) == (707, None, 0, [])


def test_a_rank_that_had_exited_is_named_where_held_bytes_exceed_the_device() -> None:
    """Rank 0 (pid 706) exits before rank 1 fails; nsys writes no deallocation at exit, so the traced
    bytes at the failure exceed the device's total: no bound, and the reason names rank 0's end."""
    doc = nsysaudit.analyze(RANKS / "job.sqlite").to_dict()
    [point] = [p for p in doc["memory"]["at"] if p["point"] == "finding"]
    [device] = point["devices"]
    assert device["device_resident_live_bytes"] == 150_823_956_267 > device["total_bytes"] == 150_109_880_320
    assert device["free_at_most_bytes"] is None
    ended = next(s["last_ns"] for s in doc["coverage"]["by_source"] if s["pid"] == 706 and s["source"] == "cuda_api")
    assert ended == 10_228_778_163 < point["t_ns"]
    assert device["bound_unknown"].endswith(
        "the CUDA API trace of pid 706 (last at 10,228,778,163 ns) ended before this moment, and a process's "
        "memory goes back to the device at its exit without deallocation events, so some of it may no longer "
        "have been held")


def test_a_batch_of_the_per_rank_reports_names_the_failing_rank() -> None:
    result = run_batch([RANKS / "rank_0.sqlite", RANKS / "rank_1.sqlite"], jobs=1)
    assert result.inputs.select("verdict", "rank", "failing_ranks", "devices_used").rows() == [
        ("no_failure", 0, None, H200), ("failure_found", 1, "1", H200)]
    assert result.summary_lines()[2] == (
        f"failing rank(s): 1 ({RANKS / 'rank_1.sqlite'}, device 0) (ranks stated: 0, 1)")


def test_compare_the_failing_rank_with_the_healthy_one() -> None:
    failing, healthy = (nsysaudit.analyze(RANKS / f"rank_{rank}.sqlite") for rank in (1, 0))
    doc = compare_results(failing, healthy).to_dict()
    assert problems(doc, ComparisonDocument) == []
    ranks = doc["differences"]["ranks"]
    assert (ranks["two_ranks"], ranks["same_job"], ranks["same_job_evidence"]) == (
        True, True, "the same launched command and arguments, world size 2")
    assert ranks["statements"][1] == (
        "At cublasCreate_v2 (call #1 off the main thread), rank 1: 2 nested allocation(s) succeeded, then "
        "cudaMalloc returned 2 (cudaErrorMemoryAllocation); at its start device 0 (NVIDIA H200, 0000:00:06.0) "
        "held 139.2 GiB of 139.8 GiB, most by pid 597 (139.2 GiB); at most 697,930,894 B (665.6 MiB) free")
    # torchrun's ROLE_RANK differs with RANK: the ranks' identity, not a different capture option.
    capture = doc["differences"]["sources"]["capture"]
    assert "PROCESS_0:ENVIRONMENT_VARIABLE:ROLE_RANK" in [d["key"] for d in capture["differs_as_expected"]]
    assert not [d for d in capture["differs"] if d["key"].startswith("PROCESS_0:ENVIRONMENT_VARIABLE")]
