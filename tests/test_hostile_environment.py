"""Faults of the input and of the environment: one line and exit 2, never a traceback; a reader
that goes away is not an error; a usage error is one line, ``--debug`` shows the traceback, Ctrl-C
is one line.

Output streams are tested in a real child process (closed stdout, /dev/full, a pipe closed by its
reader), since only there does the interpreter's own final flush run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import H200, OBSERVE, run, unprivileged

import nsysaudit

TELEMETRY = H200 / "observe.telemetry.jsonl"


def one_line(code: int, err: str, *parts: str) -> None:
    assert code == 2, err
    assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for part in parts:
        assert part in err, err


def child(*args: str, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "nsysaudit", *args], capture_output=False, check=False, **kwargs)


# --- input ---------------------------------------------------------------------------------------


def test_one_changed_byte_in_the_schema_text_is_one_line(capsys, tmp_path: Path) -> None:
    """SQLite quotes the damaged schema text in its message; Python cannot decode it (not UTF-8)."""
    data = bytearray(OBSERVE.read_bytes())
    data[data.index(b"CREATE TABLE") + 2] = 0xFF
    bad = tmp_path / "schema-byte.sqlite"
    bad.write_bytes(bytes(data))
    code, out, err = run(capsys, "analyze", bad)
    one_line(code, err, str(bad), "damaged SQLite schema: its text is not valid UTF-8")
    assert out == ""


@pytest.mark.parametrize(
    "line,problem",
    [
        ('{"event": "x", "monotonic_ns": 123456789012345678901234567890}', "outside the 64-bit range"),
        ('{"event": "x", "monotonic_ns": 1, "pid": -99999999999999999999}', "outside the 64-bit range"),
        ('{"event": "x", "monotonic_ns": 1, "free": NaN}', "NaN is not a JSON number"),
        ('{"event": "x", "monotonic_ns": 1, "free": -Infinity}', "-Infinity is not a JSON number"),
        ('{"event": "x", "monotonic_ns": 1, "free": 1e999}', "too large for a 64-bit float"),
        ('{"event": "x", "monotonic_ns": 1, "deep": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested deeper"),
        ('{"event": "x", "monotonic_ns": 1, "deep": ' + "[" * 40 + "]" * 40 + "}", "nested deeper than 32"),
        ('{"event": "x", "monotonic_ns": 1, "name": "\\udc80"}', "lone surrogate"),
    ],
    ids=["huge-clock", "huge-pid", "nan", "infinity", "float-overflow", "recursion", "deep", "surrogate"],
)
def test_telemetry_values_that_cannot_be_kept_exactly(capsys, tmp_path: Path, line: str, problem: str) -> None:
    """Reported as a bad line (never a traceback, never silently turned into null)."""
    telemetry = tmp_path / "t.jsonl"
    telemetry.write_text(TELEMETRY.read_text() + line + "\n")
    number = len(TELEMETRY.read_text().splitlines()) + 1
    code, out, err = run(capsys, "analyze", OBSERVE, "--telemetry", telemetry)
    one_line(code, err, str(telemetry), f"line {number}: unusable JSON value", problem)
    code, out, err = run(capsys, "analyze", OBSERVE, "--telemetry", telemetry, "--lenient", "--json")
    assert code == 0, err
    doc = json.loads(out)
    [warning] = [w for w in doc["warnings"] if w["kind"] == "telemetry_bad_lines"]
    assert warning["count"] == 1 and problem in warning["message"]
    assert "null" not in json.dumps(doc["telemetry"]["timeline"][-1]["fields"])


def test_audit_turns_an_oserror_into_an_error_row(tmp_path: Path) -> None:
    too_long = tmp_path / ("x" * 300 + ".sqlite")
    frame = nsysaudit.audit_many([OBSERVE, too_long], jobs=1)
    assert frame["verdict"].to_list() == ["inconclusive", None]
    assert frame["error"].to_list()[1] == f"{too_long}: File name too long"


def test_a_too_long_input_name_is_one_line(capsys, tmp_path: Path) -> None:
    too_long = tmp_path / ("x" * 300 + ".sqlite")
    code, _, err = run(capsys, "analyze", too_long)
    one_line(code, err, str(too_long), "File name too long")


# --- output streams ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", [["--json"], []], ids=["json", "terminal"])
def test_closed_stdout_is_one_line_and_nothing_is_written(tmp_path: Path, fmt: list[str]) -> None:
    out = tmp_path / "sealed"
    proc = child(
        "analyze", str(OBSERVE), *fmt, "--out", str(out), stderr=subprocess.PIPE, preexec_fn=lambda: os.close(1)
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err == "nsysaudit: error: standard output is closed; nothing was done (redirect it, e.g. > report.txt)\n"
    assert not out.exists()


@pytest.mark.parametrize("fmt", [["--json"], []], ids=["json", "terminal"])
def test_full_stdout_is_one_line(fmt: list[str]) -> None:
    with open("/dev/full", "wb") as full:
        proc = child("analyze", str(OBSERVE), *fmt, stdout=full, stderr=subprocess.PIPE)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert err == (
        "nsysaudit: error: standard output: cannot write (No space left on device); the output is incomplete\n"
    )


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """``nsysaudit analyze X --json | head -c 10``: exit 141 (as if by SIGPIPE), nothing on stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "nsysaudit", "analyze", "--json", str(OBSERVE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    head = proc.stdout.read(10)
    proc.stdout.close()  # the JSON (160+ KB) is larger than the pipe: the writer meets EPIPE
    err = proc.stderr.read().decode()
    assert (proc.wait(), err) == (141, "")
    assert head == b'{"answer":'


# --- where the report folder goes ----------------------------------------------------------------


@pytest.mark.parametrize("where", ["file-blocked", "read-only", "too-long", "file-blocked-deeper"])
def test_an_out_that_cannot_be_written_is_one_line(capsys, request, tmp_path: Path, where: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    if where == "read-only":
        locked, prefix = request.getfixturevalue("read_only_folder")
        out = locked / "sealed"
        proc = unprivileged(prefix, "analyze", OBSERVE, "--out", out, cache=locked / "cache")
        code, stdout, err = proc.returncode, proc.stdout, proc.stderr
        problem = f"{locked} is not writable"
        assert list(locked.iterdir()) == []
    else:
        out, problem = {
            "file-blocked": (blocker / "sealed", f"{blocker} is not a folder"),
            "file-blocked-deeper": (blocker / "x" / "y" / "sealed", f"{blocker} is not a folder"),
            "too-long": (tmp_path / ("x" * 300), "File name too long"),
        }[where]
        code, stdout, err = run(capsys, "analyze", OBSERVE, "--out", out)
    one_line(code, err, f"{out}: cannot write the report folder here: {problem} (nothing was written)")
    assert stdout == ""
    assert blocker.read_text() == "in the way"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


# --- the command line: usage errors, --debug, Ctrl-C ---------------------------------------------


def test_usage_errors_are_one_line(capsys) -> None:
    for args, problem in (
        (["analyze", str(OBSERVE), "--clock-tolerance", "nan"], "'nan' is not a finite, non-negative number"),
        (["analyze", str(OBSERVE), "--clock-tolerance", "inf"], "'inf' is not a finite, non-negative number"),
        (["analyze", str(OBSERVE), "--clock-tolerance", "-1"], "'-1' is not a finite, non-negative number"),
        (["analyze", str(OBSERVE), "--max-pairs", str(1 << 63)], f"{1 << 63} is not in the range"),
        (["analyze", str(OBSERVE), "--no-such-option"], "No such option '--no-such-option'"),
    ):
        code, out, err = run(capsys, *args)
        assert code == 2 and out == "", (args, out)
        assert err.startswith("nsysaudit: error: ") and err.count("\n") == 1, err
        assert problem in err and "nsysaudit analyze --help" in err, err


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"")
    plain = subprocess.run(
        [sys.executable, "-m", "nsysaudit", "analyze", str(bad)], capture_output=True, text=True, check=False
    )
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    debug = subprocess.run(
        [sys.executable, "-m", "nsysaudit", "--debug", "analyze", str(bad)], capture_output=True, text=True, check=False
    )
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr and "UnusableInput" in debug.stderr
    # after the command too: it was refused there once ("No such option")
    for args in (["analyze", str(bad), "--debug"], ["compare", str(bad), str(bad), "--out", "x", "--debug"]):
        after = subprocess.run([sys.executable, "-m", "nsysaudit", *args], capture_output=True, text=True, check=False)
        assert "Traceback" in after.stderr and "UnusableInput" in after.stderr, after.stderr


def test_ctrl_c_while_the_command_runs_is_one_line(capsys, monkeypatch) -> None:
    import signal

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("SIGINT was not delivered")

    monkeypatch.setattr(nsysaudit, "analyze", interrupted)
    code, out, err = run(capsys, "analyze", str(OBSERVE))
    assert (code, out, err) == (130, "", "nsysaudit: aborted\n")  # click's blank line is not printed


def test_ctrl_c_while_the_cli_is_imported_is_one_line() -> None:
    """SIGINT in the first ~0.2 s, while click and polars are imported: the same one line."""
    script = (
        "import builtins, os, signal, sys\n"
        "real = builtins.__import__\n"
        "def imp(name, *args, **kwargs):\n"
        "    if name == 'polars':\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "    return real(name, *args, **kwargs)\n"
        "builtins.__import__ = imp\n"
        f"sys.argv = ['nsysaudit', 'analyze', {str(OBSERVE)!r}]\n"
        "from nsysaudit.__main__ import run\n"
        "run()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "nsysaudit: aborted\n")
