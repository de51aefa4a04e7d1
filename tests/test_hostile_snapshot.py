"""Hostile and damaged memory snapshots (``--snapshot``): a pickle can run code, build lists a million
deep without a global, declare lengths it does not hold, and make CPython's C unpickler allocate and
zero gigabytes for one memo slot. Each is one line naming the file and the problem, exit 2, nothing
written, and no code run (docs/ledger.md, "Reading it: a pickle is hostile input")."""

from __future__ import annotations

import os
import pickle
import struct
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import H200_2025, assert_one_line_error, folder_state, run

from nsysaudit.core.errors import UnusableInput
from nsysaudit.read.snapshot import load_snapshot

SNAP = H200_2025 / "snap"
EXPORT = SNAP / "observe.sqlite"
REAL = SNAP / "observe-end.pickle"


def real() -> dict[str, Any]:
    return {"segments": [{"device": 0, "address": 1 << 40, "total_size": 2 << 20, "allocated_size": 0,
                          "active_size": 0, "requested_size": 0, "stream": 0, "segment_type": "small",
                          "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                          "blocks": [{"address": 1 << 40, "size": 2 << 20, "requested_size": 0, "state": "inactive",
                                      "frames": []}]}],
            "device_traces": [[]], "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": ""}}


class Shell:
    """Unpickling an instance of this runs ``os.system`` (a classic pickle exploit)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def deep(levels: int) -> bytes:
    """A list ``levels`` deep, with no global: EMPTY_LIST and APPEND only."""
    return b"\x80\x04" + b"]" * levels + b"a" * (levels - 1) + b"."


HOSTILE: dict[str, tuple[bytes, str]] = {
    "global": (b"cos\nsystem\n(S'true'\ntR.", "it names a Python global (os.system)"),
    "stack_global": (b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x04true\x85R.", "it names a Python global (os.system)"),
    "inst": (b"(S'true'\nios\nsystem\n.", "it names a Python global (os.system)"),
    "obj": (b"\x80\x02(cos\nsystem\nS'true'\no.", "it names a Python global (os.system)"),
    "extension_code": (b"\x80\x02\x82\x01.", "unregistered extension code 1"),
    "persistent_id": (b"\x80\x02Pfoo\n.", "it holds a persistent id"),
    "binary_persistent_id": (b"\x80\x02X\x03\x00\x00\x00fooQ.", "it holds a persistent id"),
    "reduce_without_global": (b"\x80\x02])R.", "TypeError: 'list' object is not callable"),
    "build_on_a_list": (b"\x80\x02]}b.", "AttributeError"),
    "out_of_band_buffer": (b"\x80\x05\x97.", "out-of-band data"),
    "memo_bomb": (b"\x80\x02]r" + struct.pack("<I", (1 << 31) - 1) + b".",
                  "needs more memory than the snapshot's size allows"),
    "text_memo_bomb": (b"(lp99999999999\n.", "needs more memory than the snapshot's size allows"),
    "huge_unicode": (b"\x80\x04\x8d" + struct.pack("<Q", 1 << 60) + b"abc.", "pickle data was truncated"),
    "huge_bytes": (b"\x80\x04\x8e" + struct.pack("<Q", 1 << 60) + b"abc.", "needs more memory"),
    "huge_bytearray": (b"\x80\x05\x96" + struct.pack("<Q", 1 << 60) + b"abc.", "needs more memory"),
    "huge_frame": (b"\x80\x04\x95" + struct.pack("<Q", 1 << 60) + b"].", "pickle data was truncated"),
    "truncated": (pickle.dumps(real(), protocol=4)[:-40], "not a pickle this reader can load"),
    "empty": (b"", "empty file, not a pickle"),
    "not_a_pickle": (b"SQLite format 3\x00" + bytes(100), "not a pickle this reader can load"),
    "a_list": (pickle.dumps([1, 2, 3]), "not a PyTorch memory snapshot: the pickle holds a list"),
    "an_int": (pickle.dumps(7), "not a PyTorch memory snapshot: the pickle holds an integer"),
    "no_segments": (pickle.dumps({"device_traces": []}), "no 'segments' (its keys: 'device_traces')"),
    "deep_top": (deep(200_000), "not a PyTorch memory snapshot: the pickle holds a list"),
}


def nested(levels: int) -> list[Any]:
    out: list[Any] = [1]
    for _ in range(levels - 1):
        out = [out]
    return out


def shaped(**changes: Any) -> bytes:
    snap = real()
    for where, value in changes.items():
        target: Any = snap
        *path, last = where.split("__")
        for key in path:
            target = target[int(key) if key.isdigit() else key]
        target[int(last) if last.isdigit() else last] = value
    return pickle.dumps(snap, protocol=4)


WRONG_SHAPES: dict[str, tuple[bytes, str]] = {
    "segments_not_a_list": (shaped(segments={"a": 1}), "segments is a dict, not a list"),
    "segment_not_a_dict": (shaped(segments__0="x"), "segments[0] is a string, not a dict"),
    "address_a_string": (shaped(segments__0__address="0x10"), "segments[0].address is a string, not an integer"),
    "address_a_boolean": (shaped(segments__0__address=True), "segments[0].address is a boolean, not an integer"),
    "size_negative": (shaped(segments__0__total_size=-5), "segments[0].total_size is -5, outside 0 .. 2^63-1"),
    "size_past_64_bits": (shaped(segments__0__total_size=1 << 70), "outside 0 .. 2^63-1"),
    "size_of_many_digits": (shaped(segments__0__total_size=10 ** 4000), "an integer of many digits"),
    "pool_id_of_three": (shaped(segments__0__segment_pool_id=(0, 0, 0)), "segment_pool_id has 3 items, not 2"),
    "block_without_state": (shaped(segments__0__blocks=[{"size": 5}]), "has no 'size' or no 'state'"),
    "frames_not_a_list": (shaped(segments__0__frames=5), "segments[0].frames is an integer, not a list"),
    "a_set_inside": (shaped(external_annotations={1, 2}), "snapshot.external_annotations is a set"),
    "bytes_inside": (shaped(segments__0__blocks__0__frames=[{"filename": b"x", "line": 1, "name": "f"}]),
                     "filename is a bytes, not a string"),
    "a_huge_file_name": (shaped(segments__0__frames=[{"filename": "x" * 70_000, "line": 1, "name": "f"}]),
                         "is a text of 70,000 characters"),
    "a_lone_surrogate": (shaped(allocator_settings={"PYTORCH_CUDA_ALLOC_CONF": "\udcff"}), "holds a lone surrogate"),
    "entry_without_action": (shaped(device_traces=[[{"addr": 1, "size": 2}]]), "device_traces[0][0] has no 'action'"),
    "time_a_float": (shaped(device_traces=[[{"action": "alloc", "addr": 1, "size": 2, "time_us": 1.5}]]),
                     "device_traces[0][0].time_us is a number, not an integer"),
    "deep_in_an_unused_key": (shaped(external_annotations=nested(33)), "is nested more than 32 levels deep"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_each_hostile_pickle_is_one_line_and_exit_2(capsys, evidence: Path, name: str) -> None:
    data, problem = HOSTILE[name]
    path = evidence / f"{name}.pickle"
    path.write_bytes(data)
    before = folder_state(evidence)
    out = evidence.parent / "out"
    started = time.monotonic()
    code, _, err = run(capsys, "analyze", EXPORT, "--snapshot", path, "--out", out)
    assert time.monotonic() - started < 60
    assert_one_line_error(code, err, path, problem)
    assert folder_state(evidence) == before and not out.exists()


@pytest.mark.parametrize("name", sorted(WRONG_SHAPES))
def test_each_wrong_shape_is_one_line(name: str, tmp_path: Path) -> None:
    data, problem = WRONG_SHAPES[name]
    path = tmp_path / f"{name}.pickle"
    path.write_bytes(data)
    with pytest.raises(UnusableInput) as caught:
        load_snapshot(path)
    assert problem in str(caught.value) and "\n" not in str(caught.value)


def test_unpickling_runs_no_code(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for protocol in (0, 2, 4, 5):
        path = tmp_path / f"shell{protocol}.pickle"
        path.write_bytes(pickle.dumps({"segments": [], "x": Shell(marker)}, protocol=protocol))
        with pytest.raises(UnusableInput, match=r"it names a Python global \((os|posix)\.system\)"):
            load_snapshot(path)
    assert not marker.exists()


def test_a_memo_bomb_stays_within_the_readers_memory(tmp_path: Path) -> None:
    # slot 2^27 makes the C unpickler zero 2 GiB (measured: 2,058 MB resident for 9 bytes): refused within a
    # limit of 512 MiB + 40 B per byte, in the child, never in this process
    path = tmp_path / "bomb.pickle"
    path.write_bytes(b"\x80\x02]r" + struct.pack("<I", 1 << 27) + b".")
    with pytest.raises(UnusableInput, match="needs more memory than the snapshot's size allows"):
        load_snapshot(path)


def test_shared_and_self_referencing_objects_are_walked_once(tmp_path: Path) -> None:
    loop: list[Any] = []
    loop.append(loop)
    shared = [{"a": list(range(1000))}] * 100_000  # one dict, 10^5 references: 10^8 items if walked as a tree
    snap = {**real(), "external_annotations": loop, "extra": shared}
    path = tmp_path / "shared.pickle"
    path.write_bytes(pickle.dumps(snap, protocol=4))
    assert load_snapshot(path).segments.height == 1
    frames = [{"filename": "a.py", "line": 1, "name": "f"}] * 1000  # one frames list of 1,000 shared frames
    trace = [{"action": "alloc", "addr": 1, "size": 512, "time_us": 1, "frames": frames} for _ in range(20_000)]
    path.write_bytes(pickle.dumps({**real(), "device_traces": [trace]}, protocol=4))
    started = time.monotonic()
    snapshot = load_snapshot(path)
    assert time.monotonic() - started < 60
    assert snapshot.stack_frames == (0, 1000) and snapshot.frames.height == 64  # 64 frames kept of 1,000


def test_a_snapshot_over_the_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.pickle"
    path.write_bytes(pickle.dumps(real()) + bytes(1000))
    with pytest.raises(UnusableInput, match=r"bytes, more than the 100 a snapshot may have here"):
        load_snapshot(path, max_bytes=100)


def test_not_a_file(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, "analyze", EXPORT, "--snapshot", tmp_path / "missing.pickle")
    assert_one_line_error(code, err, tmp_path / "missing.pickle", "no such file")
    code, _, err = run(capsys, "analyze", EXPORT, "--snapshot", tmp_path)
    assert_one_line_error(code, err, tmp_path, "not a regular file")
    fifo = tmp_path / "fifo.pickle"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "analyze", EXPORT, "--snapshot", fifo)  # never opened: it could block forever
    assert_one_line_error(code, err, fifo, "not a regular file")


def test_a_path_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xff.pickle"))
    path.write_bytes(REAL.read_bytes())
    with pytest.raises(UnusableInput, match="its path is not valid UTF-8"):
        load_snapshot(path)


def test_trace_text_in_a_snapshot_is_data(tmp_path: Path) -> None:
    snap = real()
    snap["segments"][0]["frames"] = [{"filename": "x\x1b[31m\u202e.py", "line": 1, "name": "<module>\n"}]
    path = tmp_path / "text.pickle"
    path.write_bytes(pickle.dumps(snap))
    loaded = load_snapshot(path)
    assert loaded.frames["filename"].to_list() == ["x\x1b[31m\u202e.py"]  # kept exactly; escaped where shown
