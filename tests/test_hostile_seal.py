"""Hostile names and values in sealed folders: input names are sealed exactly (sha256sum's own form
in inputs-sha256.txt) and shown escaped by verify; an extra file's name, a name forged into
metadata.json, an integer of thousands of digits there: one escaped line or a failed check, never
a traceback."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import FORGED, H200, HUGE_INT, OBSERVE, UNSAFE_SHOWN, copy_in, run
from rich.console import Console

# --- sealed input names: escaped where shown, sha256sum's own form in inputs-sha256.txt ----------


def test_hostile_input_names_are_sealed_exactly_and_verified_escaped(capsys, evidence: Path, tmp_path: Path) -> None:
    observe = copy_in(evidence, H200 / "observe.sqlite", "run\\1.sqlite")  # a backslash is part of a POSIX name
    release = copy_in(evidence, H200 / "release.sqlite", f"{FORGED}.sqlite")
    out = tmp_path / "sealed"
    code, _, err = run(capsys, "compare", str(observe), str(release), "--out", str(out))
    assert code == 0, err
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in (observe, release)}
    escaped = FORGED.replace("\n", "\\n")  # sha256sum escapes \\, \n and \r only (after a leading \)
    assert (out / "inputs-sha256.txt").read_bytes() == (
        f"\\{digest[observe]}  run\\\\1.sqlite\n\\{digest[release]}  {escaped}.sqlite\n"
    ).encode()
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["command"] == ["nsysaudit", "compare", "run\\1.sqlite", f"{FORGED}.sqlite", "--out", "sealed"]
    assert [i["name"] for i in meta["inputs"]] == ["run\\1.sqlite", f"{FORGED}.sqlite"]
    if shutil.which("sha256sum"):
        check = subprocess.run(["sha256sum", "-c", str(out / "inputs-sha256.txt")], cwd=evidence,
                               capture_output=True, text=True, check=False)
        assert check.returncode == 0 and check.stdout.count(": OK\n") == 2, check.stdout + check.stderr
    code, stdout, err = run(capsys, "verify", str(out), "--inputs", str(observe), str(release))
    assert code == 0, err
    assert not UNSAFE_SHOWN.search(stdout), repr(stdout)
    assert [line for line in stdout.splitlines() if line.startswith("seal:")] == [stdout.splitlines()[-1]]
    shown = "".join(stdout.split())  # the terminal wraps long lines
    assert "(release)matchesthesealedx\\nseal:sha256:" + "0" * 64 + "\\x1b]0;title\\x07\\u202e.sqlite:" in shown
    assert "(observe)matchesthesealedrun\\1.sqlite:" in shown


def test_a_sealed_name_forged_into_metadata_is_shown_escaped(capsys, evidence: Path, tmp_path: Path) -> None:
    """metadata.json's role and name are shown by verify --inputs: a forged one is text, not a line."""
    from nsysaudit.render.terminal import verification_renderable

    forged = {"path": "o.sqlite", "role": FORGED, "name": FORGED, "sha256": "0" * 64, "size_bytes": 1}
    console = Console(width=400, file=io.StringIO(), color_system=None)
    console.print(verification_renderable("DIR", ["a"], [forged], rerun=False))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert len(text.splitlines()) == 3 and not UNSAFE_SHOWN.search(text)


# --- verify of a folder changed from outside -----------------------------------------------------


def test_verify_escapes_a_hostile_extra_file_name(capsys, tmp_path: Path) -> None:
    """A file named to forge a "seal: ... verified" line is named, escaped, on the one error line."""
    out = tmp_path / "sealed"
    code, _, err = run(capsys, "analyze", str(OBSERVE), "--out", str(out))
    assert code == 0, err
    (out / f"{FORGED}\nverified").write_text("")
    code, stdout, err = run(capsys, "verify", str(out))
    assert code == 1 and stdout == ""
    assert err.count("\n") == 1 and not UNSAFE_SHOWN.search(err), repr(err)
    assert "x\\nseal: sha256:" + "0" * 64 + "\\x1b]0;title\\x07\\u202e\\nverified: extra file" in err


@pytest.mark.parametrize("seal", [False, True])
def test_verify_of_a_metadata_json_with_a_huge_integer_is_a_failed_check(
    capsys, tmp_path: Path, seal: bool
) -> None:
    out = tmp_path / "sealed"
    code, stdout, err = run(capsys, "analyze", str(OBSERVE), "--out", str(out))
    assert code == 0, err
    quoted = stdout.splitlines()[-1].removeprefix("seal: ")
    meta = out / "metadata.json"
    meta.write_text(meta.read_text().replace('"size_bytes": ', f'"size_bytes": {HUGE_INT}', 1))
    code, stdout, err = run(capsys, "verify", str(out), *(["--seal", quoted] if seal else []))
    assert (code, stdout) == (1, "") and err.count("\n") == 1 and "Traceback" not in err, err
    assert str(out) in err and ("not readable JSON" in err or "metadata.json: changed" in err), err


# --- the right inputs under other names ------------------------------------------------------------


def test_verify_pairs_renamed_inputs_by_their_content_and_reruns_them_under_the_sealed_names(
    capsys, evidence: Path, tmp_path: Path
) -> None:
    """The right files under other names, given in any order, are the sealed inputs (matched by
    SHA-256 and size), and the re-run names them as the seal did: byte-identical. Before, a renamed
    pair given out of order was said to differ, and even in order the re-run's inputs-sha256.txt
    named the new names and differed."""
    observe = copy_in(evidence, H200 / "observe.sqlite")
    release = copy_in(evidence, H200 / "release.sqlite")
    out = tmp_path / "sealed"
    code, _, err = run(capsys, "compare", str(observe), str(release), "--out", str(out))
    assert code == 0, err
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    a, b = copy_in(renamed, release, "a.sqlite"), copy_in(renamed, observe, "b.sqlite")
    code, stdout, err = run(capsys, "verify", str(out), "--inputs", str(a), str(b))
    assert code == 0, err
    shown = "".join(stdout.split())  # the terminal wraps long lines
    assert f"input{b}(observe)matchesthesealedobserve.sqlite" in shown
    assert f"input{a}(release)matchesthesealedrelease.sqlite" in shown
    assert "byte-identical" in shown
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in renamed.iterdir()) == ["a.sqlite", "b.sqlite"]  # nothing beside them
    # A file that is none of them still differs, named with the input it was paired with.
    (renamed / "c.sqlite").write_bytes(a.read_bytes()[:-4096] + b"\0" * 4096)
    code, _, err = run(capsys, "verify", str(out), "--inputs", str(renamed / "c.sqlite"), str(b))
    assert code == 1 and f"input {renamed / 'c.sqlite'} (release): differs from the sealed release.sqlite" in err
