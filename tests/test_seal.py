"""Sealed report folders: layout, determinism, atomic writes, and ``verify`` catching every change."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import H200, find_nsys, needs_native, requires_nsys, reseal_tags, run, sha
from scenarios import observe_nested_failure, release_three_allocations

from nsysaudit import seal
from nsysaudit.core.errors import CheckFailed, OutputNotWritable, UnusableInput
from nsysaudit.render import canonical
from nsysaudit.render.json import indented
from nsysaudit.seal import folder as seal_folder
from nsysaudit.seal.layout import manifest_text, payload
from nsysaudit.seal.recipe import sealed_form
from nsysaudit.seal.verify import parse_manifest

FILES = [
    "inputs-sha256.txt",
    "manifest-sha256.txt",
    "metadata.json",
    "report.html",
    "report.json",
    "report.md",
    "tagmanifest-sha256.txt",
    "timeline-observe.svg",
    "timeline-release.svg",
]
REAL_INPUTS = [
    H200 / "observe.sqlite",
    H200 / "release.sqlite",
    H200 / "observe.telemetry.jsonl",
    H200 / "release.telemetry.jsonl",
]
SEAL_LINE = "seal: sha256:"
SQLITE = sqlite3.sqlite_version


def compare_real(out: Path, *extra: str) -> list[str]:
    return [
        "compare", str(H200 / "observe.sqlite"), str(H200 / "release.sqlite"), "--out", str(out),
        "--observe-telemetry", str(H200 / "observe.telemetry.jsonl"),
        "--release-telemetry", str(H200 / "release.telemetry.jsonl"), *extra,
    ]


@pytest.fixture(scope="module")
def sealed_real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real H200 comparison, sealed once per module (tests work on copies)."""
    out = tmp_path_factory.mktemp("sealed") / "h200-compare"
    seal.seal_compare(
        H200 / "observe.sqlite", H200 / "release.sqlite", out,
        observe_telemetry=H200 / "observe.telemetry.jsonl", release_telemetry=H200 / "release.telemetry.jsonl",
    )
    return out


@pytest.fixture
def bag(sealed_real: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "bag"
    shutil.copytree(sealed_real, copy)
    return copy


# --- the folder ----------------------------------------------------------------------------------


def test_compare_writes_the_sealed_folder_and_prints_the_seal_last(capsys, tmp_path: Path) -> None:
    out = tmp_path / "h200-compare"
    code, stdout, err = run(capsys, *compare_real(out))
    assert code == 0, err
    assert sorted(p.name for p in out.iterdir()) == FILES
    last = stdout.rstrip("\n").splitlines()[-1]
    assert last == SEAL_LINE + sha(out / "tagmanifest-sha256.txt")
    # the answer first: what the comparison cannot establish is part of it
    assert "not established\n  - The comparison cannot establish whether an allocation failed" in stdout
    assert "the full report:" in stdout and "report.html" in stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h200-compare"]  # no temp folder left behind
    code, stdout, err = run(capsys, *compare_real(out, "--force", "--details"))
    assert code == 0 and "does NOT establish" in stdout, err


def test_manifest_is_sha256sum_format_and_checks_inside_the_folder(sealed_real: Path) -> None:
    if shutil.which("sha256sum") is None:
        pytest.skip("sha256sum (coreutils) is not installed")
    for manifest in ("manifest-sha256.txt", "tagmanifest-sha256.txt"):
        proc = subprocess.run(["sha256sum", "-c", manifest], cwd=sealed_real, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [line.split("  ", 1)[1] for line in (sealed_real / "manifest-sha256.txt").read_text().splitlines()]
    assert names == [
        "inputs-sha256.txt", "report.html", "report.json", "report.md", "timeline-observe.svg", "timeline-release.svg"
    ]
    # The inputs' digests check from the folder that holds them.
    proc = subprocess.run(
        ["sha256sum", "-c", str(sealed_real / "inputs-sha256.txt")], cwd=H200, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_report_json_is_canonical_and_has_no_paths_or_time(sealed_real: Path) -> None:
    raw = (sealed_real / "report.json").read_bytes()
    doc = json.loads(raw)
    assert indented(doc) == raw
    assert doc["format"] == "nsysaudit.compare/2" and doc["schema"] == {"kind": "comparison", "version": 1}
    for name in FILES:
        data = (sealed_real / name).read_bytes()
        for path in (str(H200), str(sealed_real), os.getcwd()):
            assert path.encode() not in data, name
    assert "version" not in json.dumps(doc.get("tool", {}))  # tool versions live in metadata.json only


def test_inputs_recorded_with_digest_and_size(sealed_real: Path) -> None:
    meta = json.loads((sealed_real / "metadata.json").read_text())
    recorded = {i["name"]: i for i in meta["inputs"]}
    for path in REAL_INPUTS:
        assert recorded[path.name]["sha256"] == sha(path)
        assert recorded[path.name]["size_bytes"] == path.stat().st_size
    assert meta["versions"].keys() == {"nsysaudit", "python", "polars", "sqlite", "matplotlib"}
    assert meta["nsys"]["observe"] == {"nsys_version": "2023.4.4.54", "schema_version": "3.7.2"}
    assert meta["command"][:2] == ["nsysaudit", "compare"]
    assert not any(os.path.isabs(a) for a in meta["command"])
    assert meta["recipe"]["options"]["telemetry"]["tolerance_ns"] == 1_000_000
    report = json.loads((sealed_real / "report.json").read_text())
    assert sorted(i["name"] for i in report["inputs"]) == sorted(recorded)


def test_compare_twice_gives_identical_bytes(sealed_real: Path, tmp_path: Path) -> None:
    again = tmp_path / "h200-compare"  # the folder's name is in the recorded command, hence in the seal
    sealed = seal.seal_compare(
        H200 / "observe.sqlite", H200 / "release.sqlite", again,
        observe_telemetry=H200 / "observe.telemetry.jsonl", release_telemetry=H200 / "release.telemetry.jsonl",
    )
    for name in FILES:
        assert (again / name).read_bytes() == (sealed_real / name).read_bytes(), name
    assert sealed.seal == sha(sealed_real / "tagmanifest-sha256.txt")


def test_compare_in_another_process_gives_the_same_seal(sealed_real: Path, tmp_path: Path) -> None:
    out = tmp_path / "h200-compare"
    proc = subprocess.run(
        [sys.executable, "-m", "nsysaudit", *compare_real(out, "--json")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    # --json: report.json's document on stdout, compact (docs/json.md: one formatting rule for --json)
    report = (sealed_real / "report.json").read_bytes()
    assert proc.stdout.encode() == canonical.dumps(json.loads(report)) + b"\n" and proc.stdout.count("\n") == 1
    assert proc.stderr.rstrip("\n").splitlines()[-1] == SEAL_LINE + sha(sealed_real / "tagmanifest-sha256.txt")


# --- existing DIR and atomic writes --------------------------------------------------------------


def test_existing_dir_is_refused_without_force_and_nothing_is_written(capsys, tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    code, stdout, err = run(capsys, *compare_real(out))
    assert code == 2 and "already exists" in err and "--force" in err and err.count("\n") == 1
    assert stdout == ""
    assert [p.name for p in out.iterdir()] == ["mine.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_force_replaces_a_sealed_folder_but_never_another_folder(capsys, bag: Path, tmp_path: Path) -> None:
    """--force replaces only a folder that verifies: a tampered report (it may be the evidence of
    tampering), an empty folder or any other folder is refused, and left as it was."""
    release = json.loads((bag / "report.json").read_text())
    code, _, err = run(capsys, "compare", H200 / "release.sqlite", H200 / "observe.sqlite", "--out", bag, "--force")
    assert code == 0, err
    replaced = json.loads((bag / "report.json").read_text())
    assert replaced["inputs"][0]["name"] == "release.sqlite" != release["inputs"][0]["name"]
    assert sorted(p.name for p in bag.iterdir()) == FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bag"]  # no temp or .old folder left behind
    (bag / "report.md").write_text("tampered")
    before = {p.name: p.read_bytes() for p in bag.iterdir()}
    code, _, err = run(capsys, *compare_real(bag, "--force"))
    assert code == 2 and err.count("\n") == 1, err
    assert "is not a sealed nsysaudit report folder (verify fails: report.md: changed" in err
    assert {p.name: p.read_bytes() for p in bag.iterdir()} == before
    for name, make in (("home", lambda d: (d / "notes.txt").write_text("precious")), ("empty", lambda d: None)):
        other = tmp_path / name
        other.mkdir()
        make(other)
        code, _, err = run(capsys, *compare_real(other, "--force"))
        assert code == 2 and "not a sealed nsysaudit report folder" in err, err
        assert [p.read_text() for p in other.iterdir()] == (["precious"] if name == "home" else [])


def test_failed_write_leaves_nothing(monkeypatch, tmp_path: Path) -> None:
    calls = []

    def failing(path: Path, data: bytes) -> None:
        calls.append(path)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        path.write_bytes(data)

    monkeypatch.setattr(seal_folder, "write_atomic", failing)
    with pytest.raises(OutputNotWritable, match="No space left on device"):
        seal.seal_compare(H200 / "observe.sqlite", H200 / "release.sqlite", tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


# --- verify --------------------------------------------------------------------------------------


def test_verify_passes_and_prints_the_seal(capsys, sealed_real: Path) -> None:
    seal_hex = sha(sealed_real / "tagmanifest-sha256.txt")
    code, stdout, err = run(capsys, "verify", sealed_real, "--full")
    assert code == 0, err
    assert stdout.rstrip("\n").splitlines()[-1] == SEAL_LINE + seal_hex
    # Short unless asked: the seal's 64 digits are what compare printed last, once.
    code, stdout, err = run(capsys, "verify", sealed_real)
    assert code == 0 and stdout.rstrip("\n").splitlines()[-1] == f"{SEAL_LINE}{seal_hex[:12]}…", err
    assert seal_hex not in stdout
    code, stdout, err = run(capsys, "verify", sealed_real, "--seal", "sha256:" + seal_hex)
    assert code == 0 and stdout.rstrip("\n").splitlines()[-1] == f"{SEAL_LINE}{seal_hex[:12]}…, as quoted", err
    code, _, err = run(capsys, "verify", sealed_real, "--seal", "0" * 64)
    assert code == 1 and "not the expected seal" in err


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("name", FILES)
def test_verify_fails_after_any_single_byte_changes(capsys, bag: Path, name: str, where: str) -> None:
    path = bag / name
    data = bytearray(path.read_bytes())
    i = {"first": 0, "middle": len(data) // 2, "last": len(data) - 1}[where]
    data[i] ^= 0x01
    path.write_bytes(bytes(data))
    code, stdout, err = run(capsys, "verify", bag)
    assert code == 1, (name, where, stdout)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert name in err or "manifest-sha256.txt" in err, err


def test_verify_names_a_missing_file(capsys, bag: Path) -> None:
    (bag / "report.md").unlink()
    code, _, err = run(capsys, "verify", bag)
    assert code == 1 and "report.md: missing" in err


def test_verify_names_an_extra_file_and_folder(capsys, bag: Path) -> None:
    (bag / "notes.txt").write_text("added later")
    (bag / "sub").mkdir()
    code, _, err = run(capsys, "verify", bag)
    assert code == 1 and "notes.txt: extra file" in err and "sub/: extra folder" in err


@pytest.mark.parametrize(
    "entry,why",
    [("../outside.txt", "escapes the folder"), ("/etc/hostname", "absolute path"), ("a/../report.md", "escapes")],
)
def test_verify_refuses_manifest_entries_that_escape(capsys, bag: Path, entry: str, why: str) -> None:
    manifest = bag / "manifest-sha256.txt"
    lines = manifest.read_text().splitlines()
    lines.append(f"{'0' * 64}  {entry}")
    manifest.write_text("".join(f"{x}\n" for x in sorted(lines, key=lambda x: x.split("  ", 1)[1])))
    reseal_tags(bag)
    code, _, err = run(capsys, "verify", bag)
    assert code == 1 and "refusing entry" in err and why in err, err


def test_verify_refuses_a_symlink_even_with_the_right_bytes(capsys, bag: Path, tmp_path: Path) -> None:
    outside = tmp_path / "report.md"
    shutil.copy(bag / "report.md", outside)
    (bag / "report.md").unlink()
    (bag / "report.md").symlink_to(outside)
    code, _, err = run(capsys, "verify", bag)
    assert code == 1 and "report.md: refusing a symlink" in err


def test_verify_unusable_folder_exit_2(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "verify", tmp_path)
    assert code == 2 and "no manifest-sha256.txt" in err
    code, _, err = run(capsys, "verify", tmp_path / "nope")
    assert code == 2 and "no such folder" in err


def test_verify_with_inputs_reruns_and_confirms(capsys, sealed_real: Path) -> None:
    # Given in any order: matched to the recorded inputs by name.
    code, stdout, err = run(capsys, "verify", sealed_real, "--inputs", *reversed(REAL_INPUTS))
    assert code == 0, err
    assert "byte-identical" in stdout
    digests, words = [sha(p) for p in REAL_INPUTS], " ".join(stdout.split())  # as wrapped at 80 columns
    assert all(f"sha256 {d[:12]}…," in words and d not in words for d in digests), stdout
    code, stdout, err = run(capsys, "verify", sealed_real, "--full", "--inputs", *REAL_INPUTS)
    assert code == 0 and all(f"sha256 {d}," in " ".join(stdout.split()) for d in digests), err


def test_verify_with_a_changed_input_fails_naming_it(capsys, tmp_path: Path) -> None:
    observe = tmp_path / "observe.sqlite"
    shutil.copy(H200 / "observe.sqlite", observe)
    out = tmp_path / "cmp"
    seal.seal_compare(observe, H200 / "release.sqlite", out)
    with open(observe, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 0x01]))
    code, _, err = run(capsys, "verify", out, "--inputs", observe, H200 / "release.sqlite")
    assert code == 1 and str(observe) in err and "(observe)" in err and "differs from the sealed" in err


def test_verify_with_inputs_catches_a_consistent_forgery(capsys, bag: Path) -> None:
    """A report edited and re-hashed everywhere passes the digests; only re-running exposes it."""
    report = bag / "report.json"
    report.write_bytes(report.read_bytes().replace(b'"inconclusive"', b'"no_failure"'))
    digests = {n: sha(bag / n) for n in payload("compare")}
    (bag / "manifest-sha256.txt").write_bytes(manifest_text(digests))
    reseal_tags(bag)
    assert run(capsys, "verify", bag)[0] == 0
    code, _, err = run(capsys, "verify", bag, "--inputs", *REAL_INPUTS)
    assert code == 1 and "re-running the analysis gives a different report.json" in err
    # Same tool and library versions: the difference is in the report, not in nsysaudit.
    assert "same versions as when sealed" in err


def test_a_rerun_compares_the_facts_before_it_draws_and_the_drawn_files_after(capsys, bag: Path, monkeypatch) -> None:
    """verify --inputs compares inputs-sha256.txt, report.json and report.md first: a re-run whose
    report differs fails before the pictures and report.html are drawn; one whose report matches
    draws them (each arm's picture once) and compares them too."""
    from nsysaudit.render import pictures

    drawn: list[str | None] = []
    real = pictures.render

    def counted(timelines: Any, *args: Any, **kwargs: Any) -> Any:
        drawn.extend(t.arm for t in timelines)
        return real(timelines, *args, **kwargs)

    monkeypatch.setattr(pictures, "render", counted)
    assert run(capsys, "verify", bag, "--inputs", *REAL_INPUTS)[0] == 0
    assert sorted(drawn) == ["observe", "release"]
    picture = bag / "timeline-release.svg"
    picture.write_bytes(picture.read_bytes().replace(b"</svg>", b"<!-- forged --></svg>"))
    (bag / "manifest-sha256.txt").write_bytes(manifest_text({n: sha(bag / n) for n in payload("compare")}))
    reseal_tags(bag)
    assert run(capsys, "verify", bag)[0] == 0
    code, _, err = run(capsys, "verify", bag, "--inputs", *REAL_INPUTS)
    assert code == 1 and "re-running the analysis gives a different timeline-release.svg" in err, err
    report = bag / "report.json"
    report.write_bytes(report.read_bytes().replace(b'"inconclusive"', b'"no_failure"'))
    (bag / "manifest-sha256.txt").write_bytes(manifest_text({n: sha(bag / n) for n in payload("compare")}))
    reseal_tags(bag)
    drawn.clear()
    code, _, err = run(capsys, "verify", bag, "--inputs", *REAL_INPUTS)
    assert code == 1 and "re-running the analysis gives a different report.json" in err, err
    assert drawn == []


@needs_native
def test_the_payload_is_the_same_whatever_engine_read_it_and_metadata_says_which(
    capsys, tmp_path: Path, monkeypatch
) -> None:
    """The engine (and its SQLite) is the install's, not the evidence's: it is in metadata.json
    only, every payload file is the same bytes whichever engine read the inputs, and a report sealed
    with one engine verifies with another (the recorded engines are named when a re-run differs)."""
    folders = {}
    for flag in ("1", "0"):
        monkeypatch.setenv("NSYSAUDIT_NATIVE", flag)
        folders[flag] = tmp_path / flag / "h200-compare"  # the folder's name is in the recorded command
        seal.seal_compare(
            H200 / "observe.sqlite", H200 / "release.sqlite", folders[flag],
            observe_telemetry=H200 / "observe.telemetry.jsonl", release_telemetry=H200 / "release.telemetry.jsonl",
        )  # fmt: skip
    native_folder, pure_folder = folders["1"], folders["0"]
    for name in payload("compare"):
        assert (pure_folder / name).read_bytes() == (native_folder / name).read_bytes(), name
    assert b'"engine"' not in (native_folder / "report.json").read_bytes()
    read_by = {f: json.loads((folders[f] / "metadata.json").read_bytes())["engines"] for f in folders}
    off = "turned off (NSYSAUDIT_NATIVE=0)"
    for role in ("observe", "release"):
        assert read_by["1"][role] == {"engine": "native", "sqlite_version": SQLITE, "native_unavailable": None}
        assert read_by["0"][role] == {"engine": "sqlite3", "sqlite_version": SQLITE, "native_unavailable": off}
    code, stdout, err = run(capsys, "verify", native_folder, "--inputs", *REAL_INPUTS)  # sealed native, read pure
    assert code == 0 and "byte-identical" in stdout, err
    report = native_folder / "report.json"
    report.write_bytes(report.read_bytes().replace(b'"inconclusive"', b'"no_failure"'))
    (native_folder / "manifest-sha256.txt").write_bytes(
        manifest_text({n: sha(native_folder / n) for n in payload("compare")})
    )
    reseal_tags(native_folder)
    code, _, err = run(capsys, "verify", native_folder, "--inputs", *REAL_INPUTS)
    assert code == 1 and "observe read by native -> sqlite3, release read by native -> sqlite3" in err


def test_verify_with_the_wrong_number_of_inputs_exit_2(capsys, sealed_real: Path) -> None:
    code, _, err = run(capsys, "verify", sealed_real, "--inputs", H200 / "observe.sqlite")
    assert code == 2 and "4 input(s)" in err


def test_verify_library_api_raises_typed_errors(bag: Path, tmp_path: Path) -> None:
    assert seal.verify(bag).seal == sha(bag / "tagmanifest-sha256.txt")
    (bag / "report.json").write_text("{}")
    with pytest.raises(CheckFailed, match=r"report\.json: changed"):
        seal.verify(bag)
    with pytest.raises(UnusableInput):
        seal.verify(tmp_path / "nothing")


# --- builder fixtures and analyze --out ----------------------------------------------------------


def test_builder_comparison_states_the_difference_in_report_files(capsys, make_export, tmp_path: Path) -> None:
    observe = make_export(observe_nested_failure(), "observe.sqlite")
    release = make_export(release_three_allocations(), "release.sqlite")
    out = tmp_path / "cmp"
    code, _, err = run(capsys, "compare", observe, release, "--out", out)
    assert code == 0, err
    doc = json.loads((out / "report.json").read_text())
    (pair,) = doc["differences"]["library_calls"]
    assert pair["observe"]["failed_allocations"][0]["return_code"] == 2
    assert pair["observe"]["succeeded_before_first_failure"] == 2
    assert pair["release"]["allocated_bytes_each"] == [4_194_304, 2_097_152, 8_388_608]
    text = (out / "report.md").read_text().replace("\\", "")
    assert (
        "cudaMalloc returned 2 (cudaErrorMemoryAllocation), requested bytes unknown, after 2 successful"
        in text
    )
    assert "3 successful nested allocation(s) (4,194,304 + 2,097,152 + 8,388,608 = 14,680,064 bytes)" in text
    code, stdout, err = run(capsys, "verify", out, "--inputs", observe, release)
    assert code == 0 and "byte-identical" in stdout, err


def test_analyze_out_seals_a_single_arm(capsys, tmp_path: Path) -> None:
    out = tmp_path / "observe-sealed"
    code, stdout, err = run(
        capsys, "analyze", H200 / "observe.sqlite", "--telemetry", H200 / "observe.telemetry.jsonl", "--out", out
    )
    assert code == 0, err
    assert "\ninconclusive: 1 of 1 library call(s) are censored" in stdout
    assert stdout.rstrip("\n").splitlines()[-1] == SEAL_LINE + sha(out / "tagmanifest-sha256.txt")
    doc = json.loads((out / "report.json").read_text())
    assert doc["kind"] == "analysis" and doc["verdict"] == "inconclusive"
    assert doc["input"]["path"] == "observe.sqlite" and doc["telemetry"]["path"] == "observe.telemetry.jsonl"
    assert {"input", "census", "library_calls", "findings", "coverage", "verdict", "alignment"} <= doc.keys()
    code, stdout, err = run(
        capsys, "verify", out, "--inputs", H200 / "observe.sqlite", H200 / "observe.telemetry.jsonl"
    )
    assert code == 0 and "byte-identical" in stdout, err
    # With --out, --json prints the same document as without (the seal goes to stderr); the sealed
    # report.json is that document's sealed form.
    code, plain, _ = run(capsys, "analyze", H200 / "observe.sqlite", "--json")
    code, stdout, err = run(capsys, "analyze", H200 / "observe.sqlite", "--out", out, "--force", "--json")
    assert code == 0 and stdout == plain
    printed = json.loads(stdout)
    assert printed["verdict"] == "inconclusive" and printed["tool"]["name"] == "nsysaudit"
    paths = {str(H200 / "observe.sqlite"): "observe.sqlite"}
    sealed_doc = json.loads((out / "report.json").read_text())
    assert {k: v for k, v in sealed_doc.items() if k != "options"} == sealed_form(printed, paths)
    assert err.rstrip("\n").splitlines()[-1] == SEAL_LINE + sha(out / "tagmanifest-sha256.txt")


# --- .nsys-rep inputs (real nsys CLI) ------------------------------------------------------------


@requires_nsys
def test_nsys_rep_arm_seals_and_reverifies_after_a_fresh_export(
    capsys, cpu_report: Path, monkeypatch, tmp_path: Path
) -> None:
    """The export's own digest lives in metadata.json, so a fresh re-export still verifies."""
    monkeypatch.setenv("NSYSAUDIT_NSYS", str(find_nsys()))
    out = tmp_path / "cmp"
    code, _, err = run(capsys, "compare", cpu_report, H200 / "release.sqlite", "--out", out)
    assert code == 0, err
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["nsys"]["observe"]["export"]["sha256"]
    doc = json.loads((out / "report.json").read_text())
    assert doc["inputs"][0] == {
        "role": "observe", "name": "cpu.nsys-rep", "kind": "nsys-rep",
        "sha256": sha(cpu_report), "size_bytes": cpu_report.stat().st_size,
    }
    assert "export" not in doc["arms"]["observe"]["input"]
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path / "fresh-cache"))  # force a new nsys export
    code, stdout, err = run(capsys, "verify", out, "--inputs", cpu_report, H200 / "release.sqlite")
    assert code == 0 and "byte-identical" in stdout, err
    assert (tmp_path / "fresh-cache").exists()


# --- the seal pins every file -------------------------------------------------------------------


def printed_seal(bag: Path) -> str:
    return "sha256:" + sha(bag / "tagmanifest-sha256.txt")


def edit_metadata(bag: Path, change: Callable[[dict[str, Any]], object]) -> None:
    meta = json.loads((bag / "metadata.json").read_text())
    change(meta)
    (bag / "metadata.json").write_bytes(indented(meta))


def test_the_seal_fails_after_a_consistent_edit_of_metadata(capsys, bag: Path) -> None:
    """A consistent forgery: metadata.json edited (command, versions), the tag manifest re-hashed."""
    quoted = printed_seal(bag)

    def forge(meta: dict[str, Any]) -> None:
        meta["command"] = ["nsysaudit", "compare", "other.sqlite", "release.sqlite", "--out", "x"]
        meta["versions"]["nsysaudit"] = "9.9.9"

    edit_metadata(bag, forge)
    reseal_tags(bag)
    assert run(capsys, "verify", bag)[0] == 0  # consistent: only the quoted seal can tell
    code, _, err = run(capsys, "verify", bag, "--seal", quoted, "--inputs", *REAL_INPUTS)
    assert code == 1 and err.count("\n") == 1, err
    assert f"tagmanifest-sha256.txt: its sha256 {sha(bag / 'tagmanifest-sha256.txt')} is not the expected seal" in err


@pytest.mark.parametrize("listing", ["tagmanifest-sha256.txt", "manifest-sha256.txt"])
def test_a_file_added_to_a_rewritten_manifest_is_refused(capsys, bag: Path, listing: str) -> None:
    quoted = printed_seal(bag)
    (bag / "extra.txt").write_text("added later")
    manifest = bag / listing
    entries = parse_manifest(manifest, manifest.read_bytes())
    entries["extra.txt"] = sha(bag / "extra.txt")
    manifest.write_bytes(manifest_text(entries))
    if listing == "manifest-sha256.txt":
        reseal_tags(bag)
    for extra in ([], ["--seal", quoted]):
        code, _, err = run(capsys, "verify", bag, *extra)
        assert code == 1 and err.count("\n") == 1, err
        assert f"{listing} lists extra.txt, which is not one of its files" in err, err
    assert "is not the expected seal" in err


def test_sealed_payload_holds_the_options_and_metadata_cannot_change_them(capsys, tmp_path: Path) -> None:
    out = tmp_path / "h200-compare"
    code, _, err = run(capsys, *compare_real(out, "--clock-tolerance", "1.234567", "--library-domain", "myLib"))
    assert code == 0, err
    options = json.loads((out / "report.json").read_text())["options"]
    assert options["library_domains"] == ["cuBLAS", "cuDNN", "NCCL", "myLib"]
    assert options["telemetry"]["tolerance_ns"] == 1_234_567  # '%g' wrote 1.23457 ms = 1,234,570 ns
    assert options["max_pairs"] == 1_000_000
    report = (out / "report.md").read_text()
    assert "Options: library domains cuBLAS, cuDNN, NCCL, myLib; max pairs 1,000,000; telemetry" in report
    assert "clock tolerance 1,234,567 ns" in report
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["command"][-4:] == ["--library-domain", "myLib", "--clock-tolerance", "1.234567"]

    def loosen(meta: dict[str, Any]) -> None:
        meta["recipe"]["options"]["telemetry"]["tolerance_ns"] = 50_000_000

    edit_metadata(out, loosen)
    reseal_tags(out)
    code, _, err = run(capsys, "verify", out, "--inputs", *REAL_INPUTS)
    assert code == 1 and "re-running the analysis gives a different report.json" in err, err


def test_the_recorded_command_reproduces_the_seal(capsys, tmp_path: Path, monkeypatch) -> None:
    """Made with absolute paths and --force; its command, run in a folder holding the inputs,
    writes the same six files, hence the same seal."""
    first = tmp_path / "first" / "cmp"
    code, stdout, err = run(
        capsys, *compare_real(first, "--force", "--clock-tolerance", "12.345678", "--anchor", "backward_start=backward")
    )
    assert code == 0, err
    seal_line = stdout.rstrip("\n").splitlines()[-1]
    command = json.loads((first / "metadata.json").read_text())["command"]
    assert command[0] == "nsysaudit" and "--force" not in command
    assert command[command.index("--clock-tolerance") + 1] == "12.345678"
    again = tmp_path / "again"
    again.mkdir()
    for path in REAL_INPUTS:
        shutil.copy(path, again / path.name)
    monkeypatch.chdir(again)
    code, stdout, err = run(capsys, *command[1:])
    assert code == 0, err
    assert stdout.rstrip("\n").splitlines()[-1] == seal_line == SEAL_LINE + sha(first / "tagmanifest-sha256.txt")
    for name in FILES:
        assert (again / "cmp" / name).read_bytes() == (first / name).read_bytes(), name


FORGED_METADATA = {
    "inputs-not-a-list": lambda m: m.update(inputs={"a": 1}),
    "size-as-text": lambda m: m["inputs"][0].update(size_bytes="561152"),
    "size-as-bool": lambda m: m["inputs"][0].update(size_bytes=True),
    "sha256-not-hex": lambda m: m["inputs"][0].update(sha256="z" * 64),
    "name-missing": lambda m: m["inputs"][0].pop("name"),
    "role-twice": lambda m: m["inputs"][1].update(role="observe"),
    "recipe-missing": lambda m: m.pop("recipe"),
    "recipe-roles": lambda m: m["recipe"]["inputs"].pop(),
    "recipe-input-not-object": lambda m: m["recipe"]["inputs"].__setitem__(0, "observe"),
    "options-not-object": lambda m: m["recipe"].update(options=[]),
    "domains-not-strings": lambda m: m["recipe"]["options"].update(library_domains=[1, 2]),
    "tolerance-as-float": lambda m: m["recipe"]["options"]["telemetry"].update(tolerance_ns=1e400),
    "tolerance-negative": lambda m: m["recipe"]["options"]["telemetry"].update(tolerance_ns=-1),
    "clock-kind": lambda m: m["recipe"]["options"]["telemetry"].update(clock=[["sundial", "x"]]),
    "anchor-bad": lambda m: m["recipe"]["options"]["telemetry"].update(anchors=["no-equals-sign"]),
    "telemetry-not-object": lambda m: m["recipe"]["options"].update(telemetry="yes"),
    "versions-missing": lambda m: m.pop("versions"),
    "format-1": lambda m: m.update(format="nsysaudit.seal/1"),
    "not-an-object": None,
}


@pytest.mark.parametrize("case", sorted(FORGED_METADATA))
def test_a_forged_metadata_json_is_a_failed_check(capsys, bag: Path, case: str) -> None:
    """Made consistent (tag manifest re-hashed): a wrong type or missing key is exit 1, one line."""
    change = FORGED_METADATA[case]
    if change is None:
        (bag / "metadata.json").write_text("[" * 100_000 + "]" * 100_000)
    else:
        edit_metadata(bag, change)
    reseal_tags(bag)
    for extra in ([], ["--inputs", *REAL_INPUTS]):
        code, _, err = run(capsys, "verify", bag, *extra)
        assert code == 1, (case, err)
        assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1 and "metadata.json" in err, err


def test_a_folder_sealed_before_the_pictures_is_named_and_force_replaces_it_when_intact(
    capsys, bag: Path, tmp_path: Path
) -> None:
    """An nsysaudit.seal/2 folder (no pictures, no report.html): verify names its format instead of
    listing missing files; --force replaces it only while it is intact by its own manifests."""
    for name in ("timeline-observe.svg", "timeline-release.svg", "report.html"):
        (bag / name).unlink()
    manifest = {n: d for n, d in parse_manifest(bag / "manifest-sha256.txt", (bag / "manifest-sha256.txt").read_bytes())
                .items() if n in ("inputs-sha256.txt", "report.json", "report.md")}
    (bag / "manifest-sha256.txt").write_bytes(manifest_text(manifest))
    edit_metadata(bag, lambda m: m.update(format="nsysaudit.seal/2"))
    reseal_tags(bag)
    code, _, err = run(capsys, "verify", bag)
    assert code == 1 and "an nsysaudit.seal/2 folder, made before the timeline pictures" in err, err
    assert err.count("\n") == 1
    older = tmp_path / "older"
    shutil.copytree(bag, older)
    (older / "report.md").write_text("edited")  # no longer intact: --force refuses it
    args = ["compare", *map(str, REAL_INPUTS[:2]), "--observe-telemetry", str(REAL_INPUTS[2]),
            "--release-telemetry", str(REAL_INPUTS[3]), "--force", "--out"]
    code, _, err = run(capsys, *args, older)
    assert code == 2 and "report.md: changed since it was sealed" in err, err
    assert (older / "report.md").read_text() == "edited"
    code, _, err = run(capsys, *args, bag)
    assert code == 0, err
    assert json.loads((bag / "metadata.json").read_text())["format"] == "nsysaudit.seal/3"
    assert run(capsys, "verify", bag)[0] == 0


# --- --force never destroys evidence, and replaces atomically ----------------------------------


def listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def sha256sum_manifest(folder: Path, names: list[str]) -> None:
    """The manifest a person makes of an evidence folder (``sha256sum * > manifest-sha256.txt``)."""
    (folder / "manifest-sha256.txt").write_text("".join(f"{sha(folder / n)}  {n}\n" for n in names))


@pytest.fixture
def evidence_bag(tmp_path: Path) -> Path:
    """A BagIt-like evidence folder: the two exports, a sha256sum manifest, bagit.txt, a tag manifest."""
    evid = tmp_path / "evid"
    evid.mkdir()
    for name in ("observe.sqlite", "release.sqlite"):
        shutil.copy(H200 / name, evid / name)
    sha256sum_manifest(evid, ["observe.sqlite", "release.sqlite"])
    (evid / "bagit.txt").write_text("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
    (evid / "tagmanifest-sha256.txt").write_text(
        f"{sha(evid / 'bagit.txt')}  bagit.txt\n{sha(evid / 'manifest-sha256.txt')}  manifest-sha256.txt\n"
    )
    return evid


def test_force_never_replaces_an_evidence_folder_holding_the_inputs(capsys, evidence_bag: Path) -> None:
    before = listing(evidence_bag)
    code, out, err = run(
        capsys, "compare", evidence_bag / "observe.sqlite", evidence_bag / "release.sqlite", "--out", evidence_bag,
        "--force",
    )
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{evidence_bag} is or holds the input {evidence_bag / 'observe.sqlite'}; refusing to replace it" in err
    assert listing(evidence_bag) == before
    # Without an input inside, the bag is still no sealed report of this tool.
    code, _, err = run(capsys, "compare", H200 / "observe.sqlite", H200 / "release.sqlite", "--out", evidence_bag,
                       "--force")
    assert code == 2 and "not a sealed nsysaudit report folder (verify fails:" in err, err
    assert listing(evidence_bag) == before
    if shutil.which("sha256sum"):
        assert subprocess.run(["sha256sum", "-c", "manifest-sha256.txt"], cwd=evidence_bag).returncode == 0


def test_force_never_replaces_a_sealed_folder_holding_an_input(capsys, tmp_path: Path) -> None:
    """By resolved path (through a symlink) and by inode (a hard link with another name)."""
    out = tmp_path / "sealed"
    assert run(capsys, "compare", H200 / "observe.sqlite", H200 / "release.sqlite", "--out", out)[0] == 0
    link = tmp_path / "link"
    link.symlink_to(out)
    hard = tmp_path / "report-copy.md"
    os.link(out / "report.md", hard)
    before = listing(out)
    for observe in (out / "report.json", link / "report.md", hard):
        code, _, err = run(capsys, "compare", observe, H200 / "release.sqlite", "--out", out, "--force")
        assert code == 2 and f"{out} is or holds the input {observe}" in err, err
    code, _, err = run(capsys, "compare", H200 / "observe.sqlite", H200 / "release.sqlite", "--out", link, "--force")
    assert code == 2 and "not a sealed nsysaudit report folder (a symlink)" in err, err
    assert listing(out) == before


KILL_AT = """
import os, signal, sys
from nsysaudit.seal import fsops
from nsysaudit.seal import folder as seal
from nsysaudit.cli import main
where = sys.argv[1]
real_exchange, real_rename = fsops.exchange, os.rename
def exchange(a, b):
    if where == "before-exchange":
        os.kill(os.getpid(), signal.SIGKILL)
    if where == "between-renames":
        return False  # as where renameat2 is missing: the two-rename fallback
    done = real_exchange(a, b)
    if where == "after-exchange":
        os.kill(os.getpid(), signal.SIGKILL)
    return done
def rename(src, dst):
    real_rename(src, dst)
    if str(dst).endswith(".old"):
        os.kill(os.getpid(), signal.SIGKILL)
fsops.exchange = exchange
seal.os.rename = rename
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("where", ["before-exchange", "after-exchange"])
def test_a_kill_during_force_leaves_the_old_or_the_new_folder(capsys, tmp_path: Path, where: str) -> None:
    """renameat2(RENAME_EXCHANGE): one atomic swap; a SIGKILL at either side of it leaves a DIR that verifies."""
    out = tmp_path / "cmp"
    code, old_out, _ = run(capsys, "compare", H200 / "observe.sqlite", H200 / "release.sqlite", "--out", out)
    assert code == 0
    old_seal = old_out.rstrip("\n").splitlines()[-1]
    args = ["compare", str(H200 / "release.sqlite"), str(H200 / "observe.sqlite"), "--out", str(out), "--force"]
    proc = subprocess.run([sys.executable, "-c", KILL_AT, where, *args], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    code, verified, err = run(capsys, "verify", out, "--full")
    assert code == 0, err
    now = json.loads((out / "report.json").read_text())["inputs"][0]["name"]
    if where == "before-exchange":
        assert verified.rstrip("\n").splitlines()[-1] == old_seal and now == "observe.sqlite"
    else:
        assert verified.rstrip("\n").splitlines()[-1] != old_seal and now == "release.sqlite"


def test_a_kill_between_fallback_renames_is_reported_not_lost(capsys, tmp_path: Path) -> None:
    """Without renameat2 the old folder is renamed aside first; a kill then leaves DIR missing and
    the old report in .DIR.<hex>.old, which the next write names (and never overwrites)."""
    out = tmp_path / "cmp"
    assert run(capsys, "compare", H200 / "observe.sqlite", H200 / "release.sqlite", "--out", out)[0] == 0
    sealed = listing(out)
    args = ["compare", str(H200 / "release.sqlite"), str(H200 / "observe.sqlite"), "--out", str(out), "--force"]
    proc = subprocess.run([sys.executable, "-c", KILL_AT, "between-renames", *args], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    [old] = [p for p in tmp_path.iterdir() if p.name.endswith(".old")]
    assert not out.exists() and listing(old) == sealed
    code, _, err = run(capsys, "compare", H200 / "observe.sqlite", H200 / "release.sqlite", "--out", out)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{out} is missing and {old.name} beside it holds the report an interrupted --force was replacing" in err
    assert listing(old) == sealed and not out.exists()


def test_concurrent_compares_to_one_dir_one_wins(capsys, tmp_path: Path) -> None:
    """Two runs to one new DIR: one writes it, the other is refused in one line; never a mixed folder."""
    out = tmp_path / "cmp"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "nsysaudit", "compare", str(H200 / a), str(H200 / b), "--out", str(out)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for a, b in (("observe.sqlite", "release.sqlite"), ("release.sqlite", "observe.sqlite"))
    ]
    results = [(p.wait(), *p.communicate()) for p in procs]
    assert sorted(code for code, _, _ in results) == [0, 2], results
    [(_, won, _)] = [r for r in results if r[0] == 0]
    [(_, _, lost)] = [r for r in results if r[0] == 2]
    assert lost.count("\n") == 1 and lost.startswith("nsysaudit: error: ") and str(out) in lost, lost
    code, _, err = run(capsys, "verify", out, "--seal", won.rstrip("\n").splitlines()[-1].removeprefix("seal: "))
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp"]


def test_force_refuses_when_another_process_replaced_dir_meanwhile(capsys, tmp_path: Path, monkeypatch) -> None:
    """The swap checks that what it swapped out is the folder it verified; if another run replaced
    DIR in between, it swaps back (that run's report stays whole) and exits 2."""
    from nsysaudit.seal import fsops

    out = tmp_path / "cmp"
    other = tmp_path / "other"
    for folder in (out, other):
        assert run(capsys, "compare", H200 / "observe.sqlite", H200 / "release.sqlite", "--out", folder)[0] == 0
    theirs = listing(other)
    real = fsops.exchange

    def racing(a: Path, b: Path) -> bool:
        real(other, b)  # another process's --force lands first
        return real(a, b)

    monkeypatch.setattr(fsops, "exchange", racing)
    code, _, err = run(capsys, "compare", H200 / "release.sqlite", H200 / "observe.sqlite", "--out", out, "--force")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{out} was replaced by another process meanwhile (nothing was written)" in err
    assert listing(out) == theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp", "other"]  # 'other' now holds the old DIR
