"""core/files: every file nsysaudit writes is written whole or not at all, and nothing is left behind."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import BinaryIO

import pytest

from nsysaudit.core import files
from nsysaudit.core.files import temporary_name, write_atomic, write_with


def test_write_atomic_replaces_the_target_and_leaves_only_it(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_bytes(b"old")
    write_atomic(target, b"new\n")
    assert target.read_bytes() == b"new\n" and os.listdir(tmp_path) == ["report.json"]


def test_the_temporary_name_is_hidden_beside_the_target(tmp_path: Path) -> None:
    name = temporary_name(tmp_path / "inputs.parquet")
    assert name.parent == tmp_path and re.fullmatch(r"\.inputs\.parquet\.[0-9a-f]{12}\.tmp", name.name)


def test_a_writer_that_fails_halfway_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "findings.parquet"
    target.write_bytes(b"old")

    def half(handle: BinaryIO) -> None:
        handle.write(b"half of it")
        raise KeyboardInterrupt  # an interrupt too, not only an OSError

    with pytest.raises(KeyboardInterrupt):
        write_with(target, half)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["findings.parquet"]


def test_a_failed_rename_removes_the_temporary(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_bytes(b"")  # os.replace of a file onto a folder fails
    with pytest.raises(OSError):
        write_atomic(target, b"data")
    assert sorted(os.listdir(tmp_path)) == ["taken"] and os.listdir(target) == ["inside"]


def test_no_folder_is_the_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "missing" / "x.svg", b"<svg/>")
    assert os.listdir(tmp_path) == []


def test_the_bytes_reach_the_disk_before_the_rename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(files.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(files.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    write_atomic(tmp_path / "metadata.json", b"{}")
    assert events == ["fsync", "replace"]
