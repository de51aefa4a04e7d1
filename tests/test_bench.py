"""The benchmark runs (at a tiny size: this checks that it works, it measures nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parent.parent


def test_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    results = tmp_path / "RESULTS.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run.py"), "--rows", "20000", "40000", "--repeat", "1",
         "--out", str(tmp_path / "data"), "--results", str(results), "--no-wheel", "--real"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = results.read_text()
    assert "### 20,000 CUDA API rows" in text and "### 40,000 CUDA API rows" in text
    assert "| analyze |" in text and "| compare |" in text and "| scan |" in text
    assert "Growth:" in text
    assert "### Small exports: process start to exit" in text
    assert "| analyze (1,229-row real torch export) |" in text and '| python -c "import polars" |' in text
