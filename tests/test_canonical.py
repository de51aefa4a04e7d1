"""orjson output is byte-identical to the stdlib encoder on what nsysaudit writes."""

from __future__ import annotations

import json

from conftest import H200
from hypothesis import given
from hypothesis import strategies as st

import nsysaudit
from nsysaudit import canonical


def stdlib(doc: object, indent: bool) -> bytes:
    if indent:
        return json.dumps(doc, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False).encode()
    return json.dumps(doc, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def test_real_capture_documents_serialize_identically() -> None:
    for arm in ("observe", "release"):
        r = nsysaudit.analyze(H200 / f"{arm}.sqlite", telemetry=H200 / f"{arm}.telemetry.jsonl")
        doc = r.to_dict()
        for indent in (False, True):
            assert canonical.dumps(doc, indent=indent) == stdlib(doc, indent)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.text(alphabet=st.characters(exclude_categories=["Cs"])),
    st.integers(min_value=-(10**9), max_value=10**9).map(lambda n: round(n / 1000, 3)),
)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(documents)
def test_hostile_strings_and_rounded_floats_serialize_identically(doc: object) -> None:
    for indent in (False, True):
        assert canonical.dumps(doc, indent=indent) == stdlib(doc, indent)
