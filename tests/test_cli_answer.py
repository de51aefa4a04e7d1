"""The answer first: what failed, inside what, on which thread, when, and who held the
memory, on the first screen of `nsysaudit analyze` at 80 columns; details behind --details."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import H200, H200_2025, REPO

import nsysaudit

TORCH = (H200_2025 / "torch").relative_to(Path(__file__).parent.parent)
def cli(*args: object, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "LINES": "24", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "nsysaudit", *map(str, args)], capture_output=True, text=True,
                          env=env, cwd=REPO, check=False)


def test_the_finding_is_within_the_first_20_lines_at_80_columns() -> None:
    proc = cli("analyze", TORCH / "observe.sqlite", "--telemetry", TORCH / "observe.telemetry.jsonl")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    first = "\n".join(lines[:20])
    assert "failure_found: cudaMalloc returned 2 (cudaErrorMemoryAllocation) inside" in first
    assert "cublasCreate_v2 on pt_autograd_0, 55.672 ms after backward_start" in first.replace("\n", " ")
    assert "correlation 2433" in first and "(pid 683, tid 720)" in first
    assert "held: 139.2 GiB of 139.8 GiB held at the failure" in first
    assert "at most 697,798,798 B (665.5 MiB) free" in first.replace("\n", " ").replace("  ", " ")
    assert all(len(line) <= 80 for line in lines)
    # wrapped lines hang under their text, never back at column 0
    held = next(i for i, line in enumerate(lines) if "held:" in line)
    assert lines[held + 1].startswith(" " * 11) and lines[held + 1].strip()
    # the whole digest is not a line of its own; it is shortened where a person reads it
    digest = "fd6413a4baa39e2a9bc4c4ea79c7dac65bd76d222dbc6b184842c5b9d6512b21"
    assert any("fd6413a4baa3…" in line for line in lines[:3]) and digest not in proc.stdout
    assert len(lines) < 40 and "--details" in proc.stdout


def test_details_show_every_section_after_the_answer() -> None:
    proc = cli("analyze", TORCH / "observe.sqlite", "--details", columns=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.index("failure_found:") < out.index("--- details ---") < out.index("Census:")
    for section in ("Findings: 1", "Device memory (CUDA_GPU_MEMORY_USAGE_EVENTS)", "Library calls: 2",
                    "Coverage by trace source and process"):
        assert section in out


def test_a_censored_capture_says_what_is_censored_first() -> None:
    doc = nsysaudit.analyze(H200 / "observe.sqlite").to_dict()
    answer = doc["answer"]
    assert answer["verdict"] == "inconclusive" and answer["findings"] == []
    assert answer["summary"].startswith("1 of 1 library call(s) are censored (1 cuda_api_trace_ends_inside)")
    [censored] = answer["censored"]
    assert censored["what"].startswith("cublasCreate_v2 on thread (name unknown) (pid 611, tid 642): the process's "
                                       "CUDA API trace ends inside it")
    assert censored["held"].startswith("139.3 GiB of 139.8 GiB held at cublasCreate_v2's start (a censored call)")


def test_the_answer_is_the_documents_own_words() -> None:
    """Every sentence of the answer is built from the document's values (no second analysis)."""
    doc = nsysaudit.analyze(TORCH / "observe.sqlite", telemetry=TORCH / "observe.telemetry.jsonl").to_dict()
    [f] = doc["findings"]
    [said] = doc["answer"]["findings"]
    assert said["what"] == (
        f"cudaMalloc returned 2 (cudaErrorMemoryAllocation) inside {f['enclosing']['api']}, on thread "
        f"{f['thread_name']} (pid {f['pid']}, tid {f['tid']}), correlation {f['correlation_id']}, after 2 successful "
        "allocation(s) in it (1,024 + 131,072 B)"
    )
    assert said["when"] == f"{f['telemetry']['after']['ms']:.3f} ms after backward_start (telemetry line 5)"
    [point] = [p for p in doc["memory"]["at"] if p["point"] == "finding"]
    assert said["held"].startswith(point["holder"].split(" The bound assumes")[0])
    assert doc["answer"]["limits"] == doc["verdict_reasons"][1:]
