"""One numbering of findings a user sees everywhere (issue 37, item 2): from 1, as the terminal and
report.md print them; ``findings[].number`` and ``finding_number`` beside every ``finding`` index (from
0, kept: the contract renames no key), the batch's ``finding_number``, ``plot --around finding:N``."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from builder import Call, LibCall
from conftest import FIXTURES, TORCH, run
from scenarios import NCCL_MAIN, NCCL_PID, nccl_arm, nccl_telemetry

import nsysaudit

NCCL_OBSERVE = FIXTURES / "h200-cuda13-nsys2025.3" / "nccl"


def indexed(doc: object, path: str = "$") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object of ``doc`` with a ``finding`` key (a finding's index), and where it is."""
    if isinstance(doc, dict):
        if "finding" in doc and not isinstance(doc["finding"], dict | list | str):
            yield path, doc
        for k, v in doc.items():
            yield from indexed(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from indexed(v, f"{path}[{i}]")


def numbered(doc: dict[str, Any]) -> list[str]:
    assert [f["number"] for f in doc["findings"]] == list(range(1, len(doc["findings"]) + 1))
    places = []
    for where, entry in indexed(doc):
        i = entry["finding"]
        assert entry["finding_number"] == (None if i is None else i + 1), where
        places.append(re.sub(r"\[\d+\]", "[]", where))
    return sorted(set(places))


@pytest.mark.parametrize("arm", [TORCH, NCCL_OBSERVE], ids=["torch", "nccl"])
def test_every_finding_index_has_its_number_beside_it_and_the_terminal_prints_it(capsys, arm: Path) -> None:
    telemetry = arm / "observe.telemetry.jsonl"
    code, out, err = run(capsys, "analyze", arm / "observe.sqlite", "--telemetry", telemetry, "--json")
    assert code == 0, err
    doc = json.loads(out)
    places = numbered(doc)
    assert {"$.answer.findings[]", "$.memory.at[]", "$.ranks.failing[]"} <= set(places), places
    if arm == NCCL_OBSERVE:
        assert "$.telemetry.library_failures[]" in places
    code, text, err = run(capsys, "analyze", arm / "observe.sqlite", "--telemetry", telemetry)
    assert code == 0, err
    printed = [int(n) for n in re.findall(r"^  (\d+)\. ", text, re.MULTILINE)]
    assert printed == [f["number"] for f in doc["findings"]] == [1]


def test_the_comparison_and_the_sealed_report_carry_the_numbers(tmp_path: Path) -> None:
    sealed = nsysaudit.seal_compare(TORCH / "observe.sqlite", TORCH / "release.sqlite", tmp_path / "cmp")
    doc = json.loads((sealed.dir / "report.json").read_text())
    assert numbered(doc["arms"]["observe"]) and doc["answer"]["arms"]["observe"]["findings"][0]["finding_number"] == 1


def test_the_batch_findings_carry_finding_number(tmp_path: Path) -> None:
    batch = nsysaudit.run_batch([TORCH / "observe.sqlite", NCCL_OBSERVE / "observe.sqlite"], jobs=1,
                                out=tmp_path / "audit")
    findings = pl.read_parquet(tmp_path / "audit" / "findings.parquet")
    assert findings.equals(batch.findings)
    assert (findings["finding_number"] == findings["finding"] + 1).all() and findings.height == 2
    assert findings.columns.index("finding_number") == findings.columns.index("finding") + 1


def test_an_nccl_error_line_is_tied_to_the_finding_of_its_number_when_another_kind_comes_first(
    make_export, tmp_path: Path
) -> None:
    """A straddling allocation failure (not a kind an NCCL line is tied to) before NCCL's failed
    cuMemCreate: the line names the second finding, numbered 2, and its sentence is said with it (the
    index was once the position among the tied kinds only, so the line went to the first finding)."""
    arm = nccl_arm("observe")
    straddling = Call("cudaMalloc_v3020", 1_310_000_000, 1_310_200_000, NCCL_PID, NCCL_MAIN, ret=2, corr=500)
    cublas = LibCall("cublasCreate_v2", 1_310_100_000, 1_310_900_000, NCCL_PID, NCCL_MAIN)
    path = make_export(dataclasses.replace(arm, calls=[*arm.calls, straddling], lib_calls=[*arm.lib_calls, cublas]))
    telemetry = tmp_path / "t.jsonl"
    telemetry.write_text("".join(json.dumps(line) + "\n" for line in nccl_telemetry("observe")))
    doc = nsysaudit.analyze(path, telemetry=telemetry).to_dict()
    assert [(f["number"], f["kind"], f["api"]) for f in doc["findings"]] == [
        (1, "straddling_alloc_failure", "cudaMalloc_v3020"), (2, "nested_alloc_failure", "cuMemCreate")]
    [failure] = doc["telemetry"]["library_failures"]
    assert (failure["finding"], failure["finding_number"]) == (1, 2)
    first, second = doc["answer"]["findings"]
    assert "reported" not in first and "NCCL's error" in second["reported"]
    numbered(doc)


@pytest.mark.parametrize(
    ("around", "problem"),
    [
        ("finding:0", "--around finding:0: findings are numbered from 1, as analyze prints them (findings[].number "
                      "in --json); the export has 1 finding(s) (finding:1)"),
        ("finding:2", "--around finding:2: the export has 1 finding(s) (finding:1)"),
    ],
)
def test_plot_takes_the_number_analyze_prints(capsys, tmp_path: Path, around: str, problem: str) -> None:
    code, out, err = run(capsys, "plot", TORCH / "observe.sqlite", "--around", "finding:1", "--out", tmp_path / "a.svg")
    assert code == 0 and "finding 1 (--around)" in out, err
    code, _, err = run(capsys, "plot", TORCH / "observe.sqlite", "--around", around, "--out", tmp_path / "b.svg")
    assert (code, err) == (2, f"nsysaudit: error: {problem}\n")
    assert not (tmp_path / "b.svg").exists()
