"""metadata.json is typed: what a seal writes conforms to ``SealMetadata``, and what ``verify`` reads
of it (``metadata_of``) is ``CheckedMetadata``, built from the checked values alone."""

from __future__ import annotations

import json
from pathlib import Path

import nsysaudit
from nsysaudit.reports.conformance import problems
from nsysaudit.seal.recipe import CheckedMetadata, SealMetadata
from nsysaudit.seal.verify import metadata_of

TORCH = Path(__file__).resolve().parent / "fixtures" / "h200-cuda13-nsys2025.3" / "torch"


def test_a_sealed_analysis_writes_and_reads_typed_metadata(tmp_path: Path) -> None:
    out = tmp_path / "a"
    nsysaudit.seal_analysis(TORCH / "observe.sqlite", out, telemetry=TORCH / "observe.telemetry.jsonl")
    meta = json.loads((out / "metadata.json").read_text())
    assert problems(meta, SealMetadata) == []
    clocks = [["monotonic", "monotonic_ns"], ["realtime", "realtime_ns"]]
    assert meta["recipe"]["options"]["telemetry"]["clock"] == clocks
    checked: CheckedMetadata = metadata_of(out)  # its JSON values are not problems()-checkable: compared
    assert checked["inputs"] == meta["inputs"] and checked["versions"] == meta["versions"]
    assert checked["recipe"] == {
        "kind": "analyze",
        "inputs": [{"role": "arm"}, {"role": "telemetry"}],
        "options": {"library_domains": meta["recipe"]["options"]["library_domains"],
                    "telemetry": meta["recipe"]["options"]["telemetry"]},
    }
    assert checked.get("engines") == meta["engines"] and set(checked) == {*CheckedMetadata.__annotations__}


def test_a_sealed_comparison_without_telemetry_records_none(tmp_path: Path) -> None:
    out = tmp_path / "c"
    nsysaudit.seal_compare(TORCH / "observe.sqlite", TORCH / "release.sqlite", out)
    meta = json.loads((out / "metadata.json").read_text())
    assert problems(meta, SealMetadata) == []
    assert meta["recipe"]["options"]["telemetry"] is None and meta["report"]["kind"] == "compare"
    assert nsysaudit.verify(out, [TORCH / "observe.sqlite", TORCH / "release.sqlite"]).rerun
