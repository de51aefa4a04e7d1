"""Property-based and byte-level fuzzing: no crash, honest exit codes, exact joins.

1. Generated exports (the builder, the real DDL): the CLI exits 0, the census equals a count of
   the spec, and the nested and straddling failures and every library call's children are exactly
   what a brute-force reference join over the spec (pure Python, below) finds. With any pair
   limit the verdict stays sound: never ``failure_found`` without a reference finding, never
   ``no_failure`` with one. The input's bytes never change.
2. Byte-level mutations of a small real export (header, schema page and the pages of the tables
   the analysis reads; truncations), through ``analyze`` and either arm of ``compare``: exit code
   0 or 2, one line on stderr, never a traceback; a folder ``compare`` writes verifies.
3. Sealed folders (``verify``): any changed byte of any of the six files is exit 1 (2 where the
   folder is no longer one), one line; any value of ``metadata.json`` replaced by any JSON value
   with the tag manifest re-hashed to match, with or without ``--inputs``: one line, never a
   traceback.

Bounded in time: about 150 examples each, no deadline per example; the whole file runs in
well under a minute.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from builder import LIBRARY_TABLES, Call, Export, LibCall, build_export, global_tid
from conftest import H200
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nsysaudit.cli import main
from nsysaudit.core.codes import is_allocation_api
from nsysaudit.core.errors import UnusableInput
from nsysaudit.read.source import check_sqlite_file

pytestmark = pytest.mark.slow

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=True,
)

# (pid, tid, vm): the same TID in another process, and the same PID/TID in another VM, are other threads.
THREADS = [(100, 100, 0), (100, 101, 0), (200, 101, 0), (100, 101, 1)]
APIS = [
    "cudaMalloc_v3020",
    "cudaMallocAsync_v11020",
    "cuMemAlloc_v2",
    "cudaFree_v3020",
    "cudaLaunchKernel_v7000",
    "cuLaunchKernel",
    "cudaStreamQuery_v3020",  # its 600 is a poll, not a failure
    "cudaGetLastError_v3020",  # its non-zero return reports an earlier error
]
RETURNS = [0, 0, 0, 2, 1, 600]
LIB_APIS = ["cublasCreate_v2", "cublasLtCreate", "cudnnCreate"]


@st.composite
def calls(draw: st.DrawFn) -> list[Call]:
    out = []
    for i in range(draw(st.integers(0, 25))):
        pid, tid, vm = draw(st.sampled_from(THREADS))
        start = draw(st.integers(0, 300))
        end = start + draw(st.integers(0, 40))
        api = draw(st.sampled_from(APIS))
        ret = draw(st.sampled_from(RETURNS))
        nbytes = draw(st.integers(1, 1 << 30)) if ret == 0 and is_allocation_api(api) else None
        out.append(Call(api, start, end, pid, tid, ret=ret, corr=i + 1, bytes=nbytes, vm=vm))
    return out


@st.composite
def lib_calls(draw: st.DrawFn) -> list[LibCall]:
    out = []
    for _ in range(draw(st.integers(0, 8))):
        pid, tid, vm = draw(st.sampled_from(THREADS))
        start = draw(st.integers(0, 300))
        source = draw(st.sampled_from(["nvtx", "nvtx", "table"]))
        open_ended = source == "nvtx" and draw(st.integers(0, 19)) == 0
        end = None if open_ended else start + draw(st.integers(0, 150))
        library = draw(st.sampled_from(sorted(LIBRARY_TABLES)))
        out.append(LibCall(draw(st.sampled_from(LIB_APIS)), start, end, pid, tid, library, source, vm))
    return out


@st.composite
def exports(draw: st.DrawFn) -> Export:
    spec = Export(calls=draw(calls()), lib_calls=draw(lib_calls()))
    if draw(st.booleans()):
        # A late call per process keeps its CUDA API trace open past every library call (else the
        # calls are censored); without it, censoring is exercised too.
        late = [
            Call("cudaStreamSynchronize_v3020", 10_000, 10_001, pid, pid, corr=1000 + i, vm=vm)
            for i, (pid, vm) in enumerate(sorted({(p, v) for p, _, v in THREADS}))
        ]
        spec.calls += late
    return spec


# --- the reference: brute force over the spec, no SQL, no polars -----------------------------------


@dataclass(frozen=True)
class Reference:
    nested: frozenset[tuple[int, int, int]]  # (correlation id, pid, tid) of nested failed allocations
    straddling: frozenset[tuple[int, int, int]]
    children: Counter[tuple[Any, ...]]  # per library call: its identity and its nested calls
    nested_calls: frozenset[tuple[int, int, int]] = frozenset()  # other failed calls wholly inside
    unexplained: int = 0  # failed calls no finding explains (failed_calls)


def is_failure(c: Call) -> bool:
    """The reference's own reading of a non-zero return (see nsysaudit.core.codes.return_class)."""
    if c.ret == 0 or c.api == "cudaGetLastError_v3020":
        return False
    return not (c.api == "cudaStreamQuery_v3020" and c.ret == 600)


def same_thread(a: Call | LibCall, b: Call | LibCall) -> bool:
    return (a.vm, a.pid, a.tid) == (b.vm, b.pid, b.tid)


def reference(spec: Export) -> Reference:
    closed = [lc for lc in spec.lib_calls if lc.end is not None]
    nested, straddling, nested_calls, unexplained = set(), set(), set(), 0
    for c in spec.calls:
        if not is_failure(c):
            continue
        key = (c.corr or 0, c.pid, c.tid)
        inside = [lc for lc in closed if same_thread(lc, c) and lc.start <= c.start and c.end <= (lc.end or 0)]
        overlap = [lc for lc in closed if same_thread(lc, c) and lc.start <= c.end and c.start <= (lc.end or 0)]
        if inside:
            (nested if is_allocation_api(c.api) else nested_calls).add(key)
        elif overlap and is_allocation_api(c.api):
            straddling.add(key)
        else:
            unexplained += 1
    children: Counter[tuple[Any, ...]] = Counter()
    for lc in spec.lib_calls:
        kids: tuple[int, ...] = ()
        if lc.end is not None:
            kids = tuple(
                sorted(
                    c.corr or 0
                    for c in spec.calls
                    if same_thread(lc, c) and lc.start <= c.start and c.end <= lc.end
                )
            )
        source = f"NVTX:{lc.library}" if lc.source == "nvtx" else LIBRARY_TABLES[lc.library][0]
        children[(lc.api, global_tid(lc.pid, lc.tid, lc.vm), lc.start, lc.end, source, kids)] += 1
    return Reference(frozenset(nested), frozenset(straddling), children, frozenset(nested_calls), unexplained)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any] | None, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), code
    assert "Traceback" not in err
    return code, (json.loads(out) if code == 0 else None), err


@SETTINGS
@given(spec=exports())
def test_generated_exports_match_the_brute_force_reference(capsys, spec: Export) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = build_export(spec, Path(tmp) / "generated.sqlite")
        digest = sha256(path)
        code, doc, err = run_json(capsys, "analyze", "--json", "--max-pairs", "0", str(path))
        assert code == 0 and doc is not None, err
        assert sha256(path) == digest and [p.name for p in Path(tmp).iterdir()] == ["generated.sqlite"]

    ref = reference(spec)
    assert doc["census"]["cuda_api_calls"] == len(spec.calls)
    assert doc["census"]["nonzero_returns"] == sum(1 for c in spec.calls if c.ret != 0)
    found = {
        kind: {(f["correlation_id"], f["pid"], f["tid"]) for f in doc["findings"] if f["kind"] == kind}
        for kind in ("nested_alloc_failure", "straddling_alloc_failure", "nested_call_failure")
    }
    assert found["nested_alloc_failure"] == ref.nested
    assert found["straddling_alloc_failure"] == ref.straddling
    assert found["nested_call_failure"] == ref.nested_calls
    assert len(doc["findings"]) == len(ref.nested) + len(ref.straddling) + len(ref.nested_calls)
    assert sum(g["count"] for g in doc["failed_calls"]) == ref.unexplained
    for f in doc["findings"]:
        if f["kind"] != "nested_alloc_failure":
            continue
        # The enclosing call is the innermost one: no enclosing call is shorter.
        durations = [e["end_ns"] - e["start_ns"] for e in f["enclosing_chain"]]
        assert f["enclosing"]["end_ns"] - f["enclosing"]["start_ns"] == min(durations)
        assert f["requested_bytes"] is None  # a failed allocation's size is unknown, never guessed
    got = Counter(
        (
            lc["api"], lc["global_tid"], lc["start_ns"], lc["end_ns"], lc["source"],
            tuple(sorted(c["correlation_id"] for c in lc["children"])),
        )
        for lc in doc["library_calls"]
    )
    assert got == ref.children
    assert (doc["verdict"] == "failure_found") == bool(ref.nested or ref.nested_calls)
    # Well-formed input: the only warning is the one the spec asks for (an NVTX range without end).
    expected = {"library_call_without_end"} if any(lc.end is None for lc in spec.lib_calls) else set()
    assert {w["kind"] for w in doc["warnings"]} == expected


@SETTINGS
@given(spec=exports(), max_pairs=st.integers(1, 12))
def test_any_pair_limit_keeps_the_verdict_sound(capsys, spec: Export, max_pairs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = build_export(spec, Path(tmp) / "generated.sqlite")
        code, doc, err = run_json(capsys, "analyze", "--json", "--max-pairs", str(max_pairs), str(path))
    assert code == 0 and doc is not None, err
    ref = reference(spec)
    def keys(kind: str) -> set[tuple[int, int, int]]:
        return {(f["correlation_id"], f["pid"], f["tid"]) for f in doc["findings"] if f["kind"] == kind}

    # Whatever a limit leaves out, nothing is invented.
    assert keys("nested_alloc_failure") <= ref.nested
    assert keys("nested_call_failure") <= ref.nested_calls
    if doc["verdict"] == "failure_found":
        assert ref.nested or ref.nested_calls
    if ref.nested or ref.nested_calls:
        assert doc["verdict"] != "no_failure", doc["verdict_reasons"]
    # A failure inside a library call the limit left unexamined is never called "outside" silently.
    if not doc["findings"] and (ref.nested or ref.nested_calls):
        assert any(g["library_call_unexamined"] for g in doc["failed_calls"]) or any(
            "pair limit" in r for r in doc["verdict_reasons"]
        )
    listed = sum(len(lc["children"]) + len(lc["straddling"]) for lc in doc["library_calls"])
    assert listed == doc["limits"]["pairs_listed"]
    if doc["limits"]["pairs"] > max_pairs:
        assert any(w["kind"] == "pair_limit" for w in doc["warnings"])
        assert doc["limits"]["pairs_listed"] <= max_pairs


# --- byte-level fuzz of the header and reader path --------------------------------------------------

SEED = H200 / "observe.sqlite"
SEED_BYTES = SEED.read_bytes()
PAGE = int.from_bytes(SEED_BYTES[16:18], "big")


def _table_pages(table: str) -> list[int]:
    """Every b-tree page (interior and leaf) of ``table`` in the seed, 1-based."""
    con = sqlite3.connect(f"file:{SEED}?mode=ro", uri=True)
    try:
        (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    finally:
        con.close()
    pages, todo = [], [root]
    while todo:
        page = todo.pop()
        pages.append(page)
        base = (page - 1) * PAGE
        head = base + (100 if page == 1 else 0)
        if SEED_BYTES[head] == 0x05:  # interior table page: follow its children
            cells = int.from_bytes(SEED_BYTES[head + 3 : head + 5], "big")
            todo.append(int.from_bytes(SEED_BYTES[head + 8 : head + 12], "big"))
            for i in range(cells):
                ptr = int.from_bytes(SEED_BYTES[head + 12 + 2 * i : head + 14 + 2 * i], "big")
                todo.append(int.from_bytes(SEED_BYTES[base + ptr : base + ptr + 4], "big"))
    return pages


READ_PAGES = sorted(
    {
        page
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds", "ThreadNames",
                      "CUDA_GPU_MEMORY_USAGE_EVENTS", "META_DATA_EXPORT", "PROCESSES", "ENUM_NSYS_EVENT_TYPE")
        for page in _table_pages(table)
    }
)


@st.composite
def mutations(draw: st.DrawFn) -> bytes:
    data = bytearray(SEED_BYTES)
    for _ in range(draw(st.integers(1, 4))):
        # Mostly the pages the analysis reads; the magic string rarely (it only ever says "not SQLite").
        where = draw(st.sampled_from(["table", "header", "table", "schema", "table", "anywhere"]))
        if where == "header" and draw(st.integers(0, 9)) == 0:
            offset = draw(st.integers(0, 15))  # the magic string
        elif where == "header":
            offset = draw(st.integers(16, 99))
        elif where == "schema":
            offset = draw(st.integers(100, PAGE - 1))
        elif where == "table":
            page = draw(st.sampled_from(READ_PAGES))
            offset = (page - 1) * PAGE + draw(st.integers(0, PAGE - 1)) ^ draw(st.integers(0, PAGE - 1))
        else:
            offset = draw(st.integers(16, len(data) - 1))
        how = draw(st.sampled_from(["byte", "bit", "zero-run", "random-run"]))
        if how == "byte":
            data[offset] = draw(st.integers(0, 255))
        elif how == "bit":
            data[offset] ^= 1 << draw(st.integers(0, 7))
        else:
            length = min(draw(st.integers(1, 64)), len(data) - offset)
            fill = bytes(length) if how == "zero-run" else random.Random(offset).randbytes(length)
            data[offset : offset + length] = fill
    if draw(st.integers(0, 9)) == 0:
        del data[len(data) - draw(st.integers(1, len(data))) :]
    return bytes(data)


@SETTINGS
@given(data=mutations())
def test_mutated_real_export_exits_0_or_2_never_a_traceback(capsys, data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutated.sqlite"
        path.write_bytes(data)
        code = main(["analyze", "--json", str(path)])
        out, err = capsys.readouterr()
        event(f"exit {code}: {err.split(': ', 3)[-1][:40] if code else 'analyzed'}")
        assert code in (0, 2), (code, err)
        assert "Traceback" not in err
        if code == 2:
            assert out == "" and err.startswith("nsysaudit: error: ") and err.count("\n") == 1, err
            assert str(path) in err
        else:
            json.loads(out)
        assert path.read_bytes() == data
        assert [p.name for p in Path(tmp).iterdir()] == ["mutated.sqlite"]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(header=st.binary(min_size=0, max_size=120), size=st.integers(0, 1 << 20), keep_magic=st.booleans())
def test_header_check_never_fails_other_than_unusable_input(header: bytes, size: int, keep_magic: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h.sqlite"
        head = (b"SQLite format 3\x00" + header[16:]) if keep_magic else header
        path.write_bytes(head + bytes(max(0, size - len(head))))
        try:
            result = check_sqlite_file(path)
        except UnusableInput as exc:
            assert str(path) in str(exc) and "\n" not in str(exc)
        else:
            assert result.page_size >= 512 and (result.page_count is None or result.page_count > 0)


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=mutations(), position=st.sampled_from(["observe", "release"]))
def test_mutated_real_export_in_compare_exits_0_or_2_and_what_is_written_verifies(
    capsys, data: bytes, position: str
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mutated.sqlite"
        path.write_bytes(data)
        arms = [str(path), str(H200 / "release.sqlite")]
        out = Path(tmp) / "cmp"
        code = main(["compare", *(arms if position == "observe" else arms[::-1]), "--out", str(out)])
        _, err = capsys.readouterr()
        assert code in (0, 2), (code, err)
        if code == 2:
            assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1 and str(path) in err, err
            assert not out.exists()
        else:
            assert main(["verify", str(out)]) == 0, capsys.readouterr().err
        assert path.read_bytes() == data


# --- 3. sealed folders: any change is a failed check, never a traceback ---------------------------


@pytest.fixture(scope="module")
def sealed_builder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    from scenarios import observe_nested_failure, release_three_allocations

    from nsysaudit.seal import seal_compare

    work = tmp_path_factory.mktemp("sealed-builder")
    inputs = [build_export(observe_nested_failure(), work / "observe.sqlite"),
              build_export(release_three_allocations(), work / "release.sqlite")]
    seal_compare(*inputs, work / "cmp")
    return work / "cmp", inputs


SEALED_FILES = ["inputs-sha256.txt", "manifest-sha256.txt", "metadata.json", "report.html", "report.json",
                "report.md", "tagmanifest-sha256.txt", "timeline-observe.svg", "timeline-release.svg"]


@pytest.mark.pure_skip
@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(SEALED_FILES), offset=st.integers(0, 1 << 20), value=st.integers(0, 255),
       with_inputs=st.booleans())
def test_a_changed_byte_of_a_sealed_folder_fails_verify_in_one_line(
    capsys, sealed_builder: tuple[Path, list[Path]], name: str, offset: int, value: int, with_inputs: bool
) -> None:
    import shutil

    sealed, inputs = sealed_builder
    with tempfile.TemporaryDirectory() as tmp:
        bag = Path(tmp) / "bag"
        shutil.copytree(sealed, bag)
        data = bytearray((bag / name).read_bytes())
        i = offset % len(data)
        data[i] = value if value != data[i] else value ^ 0xFF
        (bag / name).write_bytes(bytes(data))
        code = main(["verify", str(bag), *(["--inputs", *map(str, inputs)] if with_inputs else [])])
        _, err = capsys.readouterr()
        assert code in (1, 2), (code, err)  # 2 only when the manifest itself is unreadable as a folder
        assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1 and "Traceback" not in err, err


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@pytest.mark.pure_skip
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data(), with_inputs=st.booleans())
def test_a_forged_metadata_value_is_a_failed_check_never_a_traceback(
    capsys, sealed_builder: tuple[Path, list[Path]], data: st.DataObject, with_inputs: bool
) -> None:
    """Any value of metadata.json replaced by any JSON value, the tag manifest re-hashed to match."""
    import shutil

    from nsysaudit.seal.layout import manifest_text

    sealed, inputs = sealed_builder
    meta = json.loads((sealed / "metadata.json").read_text())
    where = data.draw(st.sampled_from(_paths(meta)[1:]))
    value = data.draw(JSON_VALUES)
    target = meta
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    with tempfile.TemporaryDirectory() as tmp:
        bag = Path(tmp) / "bag"
        shutil.copytree(sealed, bag)
        (bag / "metadata.json").write_text(json.dumps(meta))
        digests = {n: sha256(bag / n) for n in ("manifest-sha256.txt", "metadata.json")}
        (bag / "tagmanifest-sha256.txt").write_bytes(manifest_text(digests))
        code = main(["verify", str(bag), *(["--inputs", *map(str, inputs)] if with_inputs else [])])
        _, err = capsys.readouterr()
        event(f"exit {code}")
        assert code in (0, 1, 2), (code, err)
        if code:
            assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1, err
