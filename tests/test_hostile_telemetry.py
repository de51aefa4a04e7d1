"""Broken telemetry files: a bad line is exit 2 naming the file and the line, unless ``--lenient``
(then a warning that counts it); an integer past Python's digit limit and a key given twice are bad
lines, never a traceback nor the last value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import HUGE_INT, OBSERVE, assert_one_line_error, run, warning_counts


def test_broken_telemetry_lines_exit_2_unless_lenient(capsys, evidence: Path) -> None:
    telemetry = evidence / "bad.telemetry.jsonl"
    telemetry.write_text('{"event": "a", "monotonic_ns": 5}\n{"event": \n')
    code, _, err = run(capsys, "analyze", str(OBSERVE), "--telemetry", str(telemetry))
    assert code == 2 and err.count("\n") == 1 and str(telemetry) in err and "line 2" in err, err
    code, out, err = run(capsys, "analyze", "--json", str(OBSERVE), "--telemetry", str(telemetry), "--lenient")
    assert code == 0, err
    assert warning_counts(json.loads(out))["telemetry_bad_lines"] == 1


@pytest.mark.parametrize("lenient", [False, True])
def test_telemetry_integers_of_thousands_of_digits_are_a_bad_line(capsys, evidence: Path, lenient: bool) -> None:
    telemetry = evidence / "huge.telemetry.jsonl"
    telemetry.write_text(f'{{"event": "a", "monotonic_ns": 5}}\n{{"event": "b", "monotonic_ns": {HUGE_INT}}}\n')
    code, out, err = run(capsys, "analyze", "--json", str(OBSERVE), "--telemetry", str(telemetry),
                         *(["--lenient"] if lenient else []))
    problem = "line 2: unusable JSON value: integer 999999999999999999999999... (5,000 characters) is outside"
    if lenient:
        assert code == 0 and "Traceback" not in err, err
        [w] = [w for w in json.loads(out)["warnings"] if w["kind"] == "telemetry_bad_lines"]
        assert problem in w["message"]
    else:
        assert_one_line_error(code, err, telemetry, problem)


def test_telemetry_keys_given_twice_are_a_bad_line_not_the_last_value(capsys, evidence: Path) -> None:
    telemetry = evidence / "twice.telemetry.jsonl"
    telemetry.write_text('{"event": "a", "monotonic_ns": 5, "monotonic_ns": 7}\n')
    code, _, err = run(capsys, "analyze", str(OBSERVE), "--telemetry", str(telemetry))
    assert_one_line_error(code, err, telemetry, "line 1: unusable JSON value: key 'monotonic_ns' is given twice")
