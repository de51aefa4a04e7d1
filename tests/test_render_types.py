"""The renderers and the comparison take the typed documents: a comparison without telemetry conforms
to its type too (its handoff, telemetry and alignment null), a renderer refuses a document of another
kind in words, and polars rows become typed entries only when the frame's columns are their keys."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import TORCH

import nsysaudit
from nsysaudit.render.terminal import comparison_renderable
from nsysaudit.reports import conformance, documents
from nsysaudit.reports.analysis import censored_rows


def test_a_comparison_without_telemetry_conforms_to_its_type() -> None:
    doc = nsysaudit.compare_results(nsysaudit.analyze(TORCH / "observe.sqlite"),
                                    nsysaudit.analyze(TORCH / "release.sqlite")).to_dict()
    for arm in doc["arms"].values():
        assert arm["handoff"] is None and arm["telemetry"] is None
    assert doc["differences"]["handoff"] is None
    assert conformance.problems(json.loads(json.dumps(doc)), documents.ComparisonDocument) == []


def test_the_comparison_renderer_refuses_an_analysis_document(tmp_path) -> None:
    sealed = nsysaudit.seal_analysis(TORCH / "observe.sqlite", tmp_path / "a")
    with pytest.raises(TypeError, match="not a document of kind 'analysis'"):
        comparison_renderable(sealed.document)


def test_censored_rows_are_typed_only_from_the_censored_table() -> None:
    result = nsysaudit.analyze(TORCH / "observe.sqlite")
    assert censored_rows(result.censored_table) == result.coverage["censored"]
    with pytest.raises(ValueError, match="not a censored_table frame"):
        censored_rows(pl.DataFrame({"lib_id": [1]}))
