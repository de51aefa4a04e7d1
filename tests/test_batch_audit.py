"""Batch audits over many exports: one row per input, unusable inputs reported, never dropped."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import H200, PUBLIC
from scenarios import observe_nested_failure

import nsysaudit
from nsysaudit.batch.audit import AUDIT_SCHEMA


def test_audit_of_real_public_builder_and_unusable_inputs(make_export, tmp_path: Path) -> None:
    bad = tmp_path / "empty.sqlite"
    bad.write_bytes(b"")
    built = make_export(observe_nested_failure())
    paths = [H200 / "observe.sqlite", *sorted(PUBLIC.glob("*.sqlite")), built, bad]
    frame = nsysaudit.audit_many(paths, jobs=1)
    assert frame.height == len(paths)
    assert frame["path"].to_list() == [str(p) for p in paths]
    observe = frame.row(0, named=True)
    assert (observe["verdict"], observe["cuda_api_calls"], observe["nonzero_returns"]) == ("inconclusive", 925, 13)
    assert (observe["library_calls"], observe["censored_library_calls"], observe["error"]) == (1, 1, None)
    assert frame.row(len(paths) - 2, named=True)["nested_alloc_failures"] == 1
    last = frame.row(len(paths) - 1, named=True)
    assert last["verdict"] is None and "empty file" in last["error"] and str(bad) in last["error"]
    # Public exports: no failed call in any of them, so no_failure (their reasons name the
    # libraries that were not traced).
    public = frame.slice(1, 5)
    assert set(public["verdict"].to_list()) == {"no_failure"}
    assert public["nonzero_returns"].to_list() == [0] * 5


def test_the_deprecated_audit_warns_and_gives_audit_manys_rows(tmp_path: Path) -> None:
    """The suite's one call of ``nsysaudit.audit`` (pyproject's filterwarnings makes any other
    DeprecationWarning of nsysaudit an error): it warns, naming its replacement, and its rows are
    the batch's own, in its columns, an unusable input's with only its path and error."""
    paths = [H200 / "observe.sqlite", tmp_path / "missing.sqlite"]
    with pytest.deprecated_call(match=r"^nsysaudit\.audit is deprecated; use nsysaudit\.audit_many"):
        frame = nsysaudit.audit(paths)
    many = nsysaudit.audit_many(paths, jobs=1)
    assert frame.schema == AUDIT_SCHEMA and frame.height == 2
    assert frame.row(0, named=True) == {k: many.row(0, named=True)[k] for k in AUDIT_SCHEMA}
    missing = frame.row(1, named=True)
    assert missing["error"] == many["error"][1] == f"{paths[1]}: no such file"
    assert [k for k, v in missing.items() if v is not None] == ["path", "error"]
