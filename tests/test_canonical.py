"""orjson output is byte-identical to the stdlib encoder on what nsysaudit writes."""

from __future__ import annotations

import json

from conftest import H200
from hypothesis import given
from hypothesis import strategies as st

import nsysaudit
from nsysaudit.render import canonical
from nsysaudit.render.json import analysis_json


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


def test_fast_json_equals_canonical_to_dict_on_real_and_public_exports() -> None:
    from conftest import PUBLIC

    paths = [H200 / "observe.sqlite", H200 / "release.sqlite", *sorted(PUBLIC.glob("*.sqlite"))]
    for path in paths:
        r = nsysaudit.analyze(path)
        assert analysis_json(r) == canonical.dumps(r.to_dict()), path


def test_fast_json_equals_canonical_to_dict_with_hostile_names(make_export) -> None:
    from builder import Call, Export, LibCall

    weird = ['[bold red]x[/]', 'q"uote\\\\', "ctl\x01\x1b[2J", "uni é 漢 😀", "ls\u2028ps"]
    calls, libs = [], []
    for i, name in enumerate(weird):
        t = 10_000 * (i + 1)
        libs.append(LibCall(name, t, t + 5_000, 100, 101))
        calls.append(Call("cudaMalloc_v3020", t + 10, t + 20, 100, 101, corr=2 * i + 1, bytes=4096))
        calls.append(Call("cudaMalloc_v3020", t + 30, t + 40, 100, 101, ret=2, corr=2 * i + 2))
        calls.append(Call(name, t + 4_990, t + 5_010, 100, 101, corr=1000 + i))  # straddling
    calls.append(Call("cudaFree_v3020", 10**6, 10**6 + 1, 100, 100, corr=5000))
    spec = Export(calls=calls, lib_calls=libs, thread_names={(100, 101): "[link=x]worker[/link]\x07"})
    r = nsysaudit.analyze(make_export(spec))
    assert analysis_json(r) == canonical.dumps(r.to_dict())
    assert len(r.to_dict()["findings"]) == len(weird)


def test_fast_json_equals_canonical_to_dict_with_telemetry(tmp_path) -> None:
    """With telemetry, the per-line lists (timeline, agreement diffs, lines without an anchor) are
    written from their frames: the same bytes, on the real captures and on odd lines (issue 24)."""
    from nsysaudit import TelemetryOptions

    for arm in ("observe", "release"):
        r = nsysaudit.analyze(H200 / f"{arm}.sqlite", telemetry=H200 / f"{arm}.telemetry.jsonl")
        assert analysis_json(r) == canonical.dumps(r.to_dict()), arm
    lines = (H200 / "observe.telemetry.jsonl").read_bytes().splitlines()
    real = json.loads(lines[0])["realtime_ns"]
    odd = [
        b'{"event":"q\\"uote \\u2028 \xc3\xa9","realtime_ns":%d,"o":{"z":1,"a":[2.5,null]},"x":-0.0,"pid":null}' % real,
        b'{"event":"mono only","monotonic_ns":5,"tid":3,"allocated":7,"flag":true}',
        b'{"event":"handoff","realtime_ns":%d,"allocated":1,"reserved":2.25,"when_ns":3}' % (real + 5),
        b"not json",
    ]
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join([*lines[:3], *odd, *lines[3:]]) + b"\n")
    for clock in (None, (("realtime", "realtime_ns"),), (("monotonic", "monotonic_ns"),)):
        options = TelemetryOptions(lenient=True, **({"clock": clock} if clock else {}))
        r = nsysaudit.analyze(H200 / "observe.sqlite", telemetry=path, telemetry_options=options)
        assert analysis_json(r) == canonical.dumps(r.to_dict()), clock
