"""The example notebook runs top to bottom, as a reader would run it (nbclient, a real kernel)."""

from __future__ import annotations

import nbformat
import pytest
from conftest import REPO
from nbclient import NotebookClient

NOTEBOOK = REPO / "examples" / "explore.ipynb"

pytestmark = pytest.mark.slow  # a real Jupyter kernel


def outputs_text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def test_example_notebook_runs_top_to_bottom() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in notebook.cells if c.cell_type == "code")  # committed without outputs
    # Run in the notebook's own folder, as `jupyter execute examples/explore.ipynb` runs it.
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    text = [outputs_text(c) for c in notebook.cells if c.cell_type == "code"]
    torch = REPO / "tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite"
    assert text[0].startswith(f"Session({torch} (sqlite, nsys")
    assert "cudaErrorMemoryAllocation" in text[1] and "pt_autograd_0" in text[1]
    assert "cudaMalloc_v3020" in text[2]
    assert "failure_found\nnested_alloc_failure cudaMalloc_v3020 2 inside cublasCreate_v2 after [1024, 131072] B" in (
        text[6]
    )
    assert text[7].startswith("BatchResult(31 input(s): 31 analyzed, 0 resumed, 0 unusable; 10 finding(s)")
