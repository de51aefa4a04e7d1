"""Telemetry reading and clock alignment: the real H200 captures, and one test per failure mode."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builder import Export, Range
from conftest import H200, run
from scenarios import MAIN, PID, WORKER, observe_nested_failure

import nsysaudit
from nsysaudit.core.errors import BadOption, UnusableInput
from nsysaudit.read.telemetry import Anchor, TelemetryOptions, load_telemetry, parse_anchor, parse_clock
from nsysaudit.reports import conformance, documents

BEFORE = {"observe": "runtime_error", "release": "backward_end"}
UTC0 = 1_796_064_718_689_501_058  # the builder's default TARGET_INFO_SESSION_START_TIME.utcEpochNs


def telemetry_of(arm: str) -> Path:
    return H200 / f"{arm}.telemetry.jsonl"


def rewrite(src: Path, dst: Path, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> Path:
    """Copy a telemetry file line by line through ``change`` (None drops the line)."""
    out = []
    for line in src.read_text().splitlines():
        obj = change(json.loads(line))
        if obj is not None:
            out.append(json.dumps(obj))
    dst.write_text("\n".join(out) + "\n")
    return dst


def analyze_arm(arm: str, telemetry: Path | None = None, **options: Any) -> dict[str, Any]:
    return nsysaudit.analyze(
        H200 / f"{arm}.sqlite",
        telemetry=telemetry or telemetry_of(arm),
        telemetry_options=TelemetryOptions(**options),
    ).to_dict()


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the real H200 captures -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arm,anchored",
    [
        ("observe", ["prepass_end", "admission_start"]),
        ("release", ["prepass_end", "admission_start", "cache_release"]),
    ],
)
def test_real_captures_both_methods_computed_agree_and_checked(arm: str, anchored: list[str]) -> None:
    d = analyze_arm(arm)
    a = d["alignment"]
    assert a["checked"] is True and a["reasons"] == []
    assert a["utc"]["computed"] and a["anchors"]["computed"]
    assert a["method"] == "utc" and a["clock_field"] == "realtime_ns"
    con = sqlite3.connect(f"file:{H200 / f'{arm}.sqlite'}?mode=ro", uri=True)
    (utc0,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    con.close()
    assert a["offset_ns"] == -utc0
    assert a["tolerance_ns"] == 1_000_000
    # Same-thread anchors only: the worker's `backward` range is not the main thread's moment.
    assert [p["event"] for p in a["anchors"]["pairs"]] == anchored
    assert all(p["same_thread"] and p["pid"] == p["tid"] for p in a["anchors"]["pairs"])
    assert {s["event"] for s in a["anchors"]["skipped"]} <= {"backward_start", "backward_end"}
    # The fixture README: the two mappings agree within ~80 us on these captures.
    assert len(a["residuals_ns"]) == len(anchored)
    assert all(abs(r) < 80_000 for r in a["residuals_ns"])
    assert all(abs(p["residual_ns"]) < 80_000 for p in a["anchors"]["pairs"])
    assert a["agreement"]["max_abs_diff_ns"] < 80_000
    assert a["agreement"]["events"] == d["telemetry"]["events"]
    assert {c["check"]: c["passed"] for c in a["checks"]} == {
        "utc_computed": True,
        "anchors_computed": True,
        "methods_agree": True,
        "anchor_residuals": True,
    }
    tel = d["telemetry"]
    assert tel["path"] == str(telemetry_of(arm))
    assert tel["bad_lines"] == 0 and tel["warnings"] == []
    assert len(tel["sha256"]) == 64
    assert tel["events"] == len(telemetry_of(arm).read_text().splitlines())


def hand_position(arm: str) -> tuple[float, float, int, int]:
    """The worker cublasCreate_v2's position, re-derived from the raw files with sqlite3 and json only."""
    con = sqlite3.connect(f"file:{H200 / f'{arm}.sqlite'}?mode=ro", uri=True)
    (utc0,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    [(start, end, tid)] = con.execute(
        'SELECT n.start, n."end", n.globalTid & 16777215 FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId '
        "WHERE s.value = 'cublasCreate_v2'"
    ).fetchall()
    con.close()
    lines = [json.loads(x) for x in telemetry_of(arm).read_text().splitlines()]
    realtime = {x["event"]: x["realtime_ns"] for x in lines}
    after = round((start - (realtime["backward_start"] - utc0)) / 1e6, 3)
    before = round(((realtime[BEFORE[arm]] - utc0) - end) / 1e6, 3)
    worker = next(x["worker_tid"] for x in lines if "worker_tid" in x)
    return after, before, tid, worker


@pytest.mark.parametrize("arm,after_ms,before_ms", [("observe", 0.757, 0.086), ("release", 0.771, 0.089)])
def test_worker_cublas_create_is_placed_after_backward_start_re_derived_by_hand(
    arm: str, after_ms: float, before_ms: float
) -> None:
    d = analyze_arm(arm)
    [lib] = d["library_calls"]
    hand_after, hand_before, hand_tid, worker_tid = hand_position(arm)
    assert lib["api"] == "cublasCreate_v2" and lib["tid"] == hand_tid == worker_tid
    pos = lib["telemetry"]
    assert pos["after"]["event"] == "backward_start"
    assert pos["before"]["event"] == BEFORE[arm]
    assert pos["after"]["ms"] == hand_after == after_ms
    assert pos["before"]["ms"] == hand_before == before_ms
    assert pos["verified"] is True and pos["method"] == "utc"
    assert pos["during"] == []
    # The snapshot in force when the worker started: the handoff (observe), the release (release).
    force = pos["in_force"]
    if arm == "observe":
        assert force["event"] == "handoff"
        assert force["values"]["physical_free"] == 3_211_264
        assert force["values"]["reserved"] == 149_524_840_448
        assert force["values"]["allocated"] == 805_306_368
    else:
        assert force["event"] == "cache_release"
        assert force["values"] == {"released": 148_719_534_080, "physical_free": 148_722_745_344}
    # Telemetry pid/tid are shown, never used to relabel trace events.
    assert lib["pid"] == d["telemetry"]["pids"][0]
    assert all(e["tid"] != lib["tid"] for e in d["telemetry"]["timeline"])


def shift_from(event: str, clock: str, ns: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Shift ``clock`` by ``ns`` on the line named ``event`` and every line after it (a clock step)."""
    seen = False

    def change(x: dict[str, Any]) -> dict[str, Any]:
        nonlocal seen
        seen = seen or x["event"] == event
        return {**x, clock: x[clock] + ns} if seen else x

    return change


def test_monotonic_shifted_40ms_against_utc_is_not_checked_and_says_why(tmp_path: Path) -> None:
    # From the handoff on, monotonic_ns runs 40 ms ahead of what the UTC stamps say.
    shifted = rewrite(
        telemetry_of("observe"), tmp_path / "shifted.jsonl", shift_from("handoff", "monotonic_ns", 40_000_000)
    )
    d = analyze_arm("observe", shifted)
    a = d["alignment"]
    assert a["checked"] is False
    checks = {c["check"]: c for c in a["checks"]}
    assert checks["methods_agree"]["passed"] is False
    assert checks["anchor_residuals"]["passed"] is True  # prepass_end/admission_start come before the step
    assert 39_900_000 < a["agreement"]["max_abs_diff_ns"] < 40_100_000
    [reason] = a["reasons"]
    assert "disagree" in reason and "differ by up to 39.985 ms" in reason and "tolerance 1.000 ms" in reason
    pos = d["library_calls"][0]["telemetry"]
    assert pos["verified"] is False
    assert pos["after"]["event"] == "backward_start"  # still placed (by UTC), but marked unverified


def test_utc_stamps_shifted_40ms_are_caught_by_the_anchors(tmp_path: Path) -> None:
    shifted = rewrite(
        telemetry_of("release"), tmp_path / "s.jsonl", lambda x: {**x, "realtime_ns": x["realtime_ns"] + 40_000_000}
    )
    a = analyze_arm("release", shifted)["alignment"]
    assert a["checked"] is False
    assert [c["passed"] for c in a["checks"]] == [True, True, False, True]
    assert all(39_900_000 < r < 40_100_000 for r in a["residuals_ns"])  # UTC lands 40 ms after every edge


def test_one_anchor_line_off_fails_the_residual_check(tmp_path: Path) -> None:
    def off(x: dict[str, Any]) -> dict[str, Any]:
        return {**x, "monotonic_ns": x["monotonic_ns"] + 40_000_000} if x["event"] == "cache_release" else x

    a = analyze_arm("release", rewrite(telemetry_of("release"), tmp_path / "s.jsonl", off))["alignment"]
    checks = {c["check"]: c for c in a["checks"]}
    assert checks["anchor_residuals"]["passed"] is False
    assert "'cache_release' line 5" in checks["anchor_residuals"]["detail"]
    assert a["checked"] is False


def test_a_constant_monotonic_offset_is_absorbed_by_the_anchors(tmp_path: Path) -> None:
    # Without a monotonic session start in the export, a uniform monotonic shift is undetectable
    # and harmless: the anchor offset is estimated from the same shifted stamps.
    shifted = rewrite(
        telemetry_of("observe"), tmp_path / "s.jsonl", lambda x: {**x, "monotonic_ns": x["monotonic_ns"] + 40_000_000}
    )
    plain, moved = analyze_arm("observe"), analyze_arm("observe", shifted)
    assert moved["alignment"]["checked"] is True
    assert moved["alignment"]["anchors"]["offset_ns"] == plain["alignment"]["anchors"]["offset_ns"] - 40_000_000
    assert moved["library_calls"][0]["telemetry"] == plain["library_calls"][0]["telemetry"]


def test_shifted_telemetry_cli_text_report_says_not_checked(capsys, tmp_path: Path) -> None:
    shifted = rewrite(telemetry_of("release"), tmp_path / "s.jsonl", shift_from("handoff", "monotonic_ns", -40_000_000))
    code, out, _ = run(capsys, "analyze", str(H200 / "release.sqlite"), "--telemetry", str(shifted), "--details")
    assert code == 0
    out = " ".join(out.split())
    assert "Clock alignment: NOT checked" in out
    assert "FAILED: methods_agree" in out
    assert "clock alignment NOT checked]" in out


# --- bad lines ------------------------------------------------------------------------------------------


def real_lines(arm: str = "observe") -> list[str]:
    return telemetry_of(arm).read_text().splitlines()


@pytest.mark.parametrize(
    "bad,problem",
    [
        ('{"event": "x", "monotonic_ns": 1', "invalid JSON"),
        ("[1, 2, 3]", "not a JSON object"),
        ('{"monotonic_ns": 5}', "no 'event' field"),
        ('{"event": 7, "monotonic_ns": 5}', "'event' is not a non-empty string"),
        ('{"event": "x", "pid": 611}', "no clock field"),
        ('{"event": "x", "monotonic_ns": "66326716676"}', "'monotonic_ns' is not an integer"),
        ('{"event": "x", "realtime_ns": 1.796064724e18}', "'realtime_ns' is not an integer"),
        ('{"event": "x", "realtime_ns": true}', "'realtime_ns' is not an integer"),
        ('{"event": "x", "realtime_ns": 5, "pid": "611"}', "'pid' is not an integer"),
    ],
)
def test_bad_line_is_an_error_naming_its_line(capsys, tmp_path: Path, bad: str, problem: str) -> None:
    lines = real_lines()
    lines.insert(2, bad)
    path = write_lines(tmp_path / "bad.jsonl", lines)
    with pytest.raises(UnusableInput, match="line 3: "):
        load_telemetry(path)
    code, out, err = run(capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", str(path), "--json")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(path) in err and "line 3: " in err and problem in err and "--lenient" in err


def test_lenient_skips_bad_lines_warns_with_line_numbers_and_uses_the_rest(capsys, tmp_path: Path) -> None:
    lines = real_lines()
    lines.insert(2, "not json at all")
    lines.insert(5, '{"event": "handoff_again"}')
    path = write_lines(tmp_path / "bad.jsonl", lines)
    code, out, err = run(
        capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", str(path), "--json", "--lenient"
    )
    assert code == 0
    d = json.loads(out)
    assert [w["line"] for w in d["telemetry"]["warnings"]] == [3, 6]
    assert "invalid JSON" in d["telemetry"]["warnings"][0]["problem"]
    assert "no clock field" in d["telemetry"]["warnings"][1]["problem"]
    assert d["telemetry"]["events"] == len(real_lines())
    assert d["alignment"]["checked"] is True
    assert d["library_calls"][0]["telemetry"]["after"]["event"] == "backward_start"
    [w] = [w for w in d["warnings"] if w["kind"] == "telemetry_bad_lines"]
    assert w["count"] == 2 and "line 3" in w["message"] and "line 6" in w["message"]
    assert "line 3: invalid JSON" in err and "line 6: no clock field" in err
    # Line numbers count the file's own lines (the shifted real lines keep theirs).
    assert [e["line"] for e in d["telemetry"]["timeline"]][:3] == [1, 2, 4]


def test_a_skipped_lines_warning_is_of_its_documented_type(capsys, tmp_path: Path) -> None:
    # telemetry.warnings are the skipped lines (line, problem), not the report's warnings (kind, count, message).
    path = write_lines(tmp_path / "bad.jsonl", [*real_lines(), "not json at all"])
    code, out, _ = run(capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", str(path), "--json", "--lenient")
    assert code == 0
    doc = json.loads(out)
    [skipped] = doc["telemetry"]["warnings"]
    assert skipped.keys() == {"line", "problem"} and skipped["line"] == len(real_lines()) + 1
    assert conformance.problems(doc, documents.AnalysisDocument) == []


def test_a_fractional_telemetry_value_is_of_its_documented_type(tmp_path: Path) -> None:
    # A line's measured values are its numbers, integers or not: the document's type says both.
    lines = [line.replace('"blocks": 21', '"blocks": 21, "fragmentation": 0.25') for line in real_lines()]
    doc = json.loads(json.dumps(analyze_arm("observe", write_lines(tmp_path / "t.jsonl", lines))))
    [values] = [e["values"] for e in doc["telemetry"]["timeline"] if "fragmentation" in e["values"]]
    assert values["fragmentation"] == 0.25 and values["blocks"] == 21
    assert doc["library_calls"][0]["telemetry"]["in_force"]["values"] == values
    assert conformance.problems(doc, documents.AnalysisDocument) == []


def test_nothing_placed_is_of_its_documented_type(tmp_path: Path) -> None:
    # No mapping (no realtime clock read, no event names an NVTX range): method, clock fields, the
    # lines' via and the positions' method are null, as the document's type says they may be.
    path = rewrite(telemetry_of("observe"), tmp_path / "t.jsonl", lambda o: {**o, "event": "x_" + o["event"]})
    doc = json.loads(json.dumps(analyze_arm("observe", path, clock=(("monotonic", "monotonic_ns"),))))
    a = doc["alignment"]
    assert a["method"] is None and a["clock_field"] is None and a["utc"]["clock_field"] is None
    assert {e["via"] for e in doc["telemetry"]["timeline"]} == {None}
    assert doc["library_calls"][0]["telemetry"]["method"] is None
    assert conformance.problems(doc, documents.AnalysisDocument) == []


def test_an_anchor_without_a_utc_residual_is_of_its_documented_type(tmp_path: Path) -> None:
    # An anchor line without a realtime stamp has no UTC residual: residuals_ns holds a null there.
    path = rewrite(telemetry_of("observe"), tmp_path / "t.jsonl",
                   lambda o: {k: v for k, v in o.items() if k != "realtime_ns" or o["event"] != "prepass_end"})
    doc = json.loads(json.dumps(analyze_arm("observe", path)))
    assert doc["alignment"]["method"] == "utc" and None in doc["alignment"]["residuals_ns"]
    assert conformance.problems(doc, documents.AnalysisDocument) == []


def test_a_status_only_in_a_number_field_is_of_its_documented_type(tmp_path: Path) -> None:
    # A library failure recorded only as a status number ("cublas_status": 3) has no text: null.
    status_line = json.dumps({**json.loads(real_lines()[-1]), "event": "lib_error", "cublas_status": 3})
    path = write_lines(tmp_path / "t.jsonl", [*real_lines(), status_line])
    doc = json.loads(json.dumps(analyze_arm("observe", path)))
    [failure] = [f for f in doc["telemetry"]["library_failures"] if f["event"] == "lib_error"]
    assert failure["statuses"] == ["cublas_status=3"] and failure["text"] is None
    assert conformance.problems(doc, documents.AnalysisDocument) == []


def test_lenient_text_report_shows_the_warning(capsys, tmp_path: Path) -> None:
    lines = real_lines()
    lines.insert(1, "{oops")
    path = write_lines(tmp_path / "bad.jsonl", lines)
    code, out, _ = run(
        capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", str(path), "--lenient", "--details"
    )
    assert code == 0
    out = " ".join(out.split())
    assert "Warnings: - telemetry_bad_lines (1):" in out and "line 2: invalid JSON" in out


@pytest.mark.parametrize(
    "content,problem",
    [
        ("", "empty telemetry file"),
        ("\n  \n", "empty telemetry file"),
        ("garbage\n{}\n", "no usable telemetry line"),
    ],
)
def test_unusable_telemetry_even_when_lenient(capsys, tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(content)
    code, out, err = run(
        capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", str(path), "--lenient", "--json"
    )
    assert code == 2 and out == "" and err.count("\n") == 1 and problem in err


def test_missing_telemetry_file_exit_2(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", str(tmp_path / "no.jsonl"))
    assert code == 2 and "no such file" in err and err.count("\n") == 1


def test_lines_with_one_clock_only_are_kept(tmp_path: Path) -> None:
    drop_mono = rewrite(
        telemetry_of("observe"),
        tmp_path / "t.jsonl",
        lambda x: {k: v for k, v in x.items() if k != "monotonic_ns"} if x["event"] == "handoff" else x,
    )
    d = analyze_arm("observe", drop_mono)
    assert d["alignment"]["checked"] is True
    assert d["alignment"]["agreement"]["events"] == 6  # handoff has no monotonic stamp to compare
    [handoff] = [e for e in d["telemetry"]["timeline"] if e["event"] == "handoff"]
    assert handoff["clocks"] == {"realtime_ns": handoff["clocks"]["realtime_ns"]} and handoff["via"] == "utc"


# --- anchors --------------------------------------------------------------------------------------------


def test_events_without_any_anchor_leave_one_method_and_say_so(tmp_path: Path) -> None:
    renamed = rewrite(telemetry_of("observe"), tmp_path / "t.jsonl", lambda x: {**x, "event": "app." + x["event"]})
    d = analyze_arm("observe", renamed)
    a = d["alignment"]
    assert a["checked"] is False
    assert a["anchors"]["computed"] is False and a["anchors"]["pairs"] == []
    assert "no telemetry event names an NVTX range" in a["anchors"]["reason"]
    assert len(a["anchors"]["events_without_anchor"]) == len(real_lines())
    assert a["utc"]["computed"] is True and a["method"] == "utc"
    assert a["residuals_ns"] == []
    checks = {c["check"]: c for c in a["checks"]}
    assert checks["anchors_computed"]["passed"] is False
    assert checks["methods_agree"]["passed"] is None
    assert "only one method computed" in checks["methods_agree"]["detail"]
    assert any("only one method" in r for r in a["reasons"])
    pos = d["library_calls"][0]["telemetry"]
    assert pos["after"]["event"] == "app.backward_start" and pos["after"]["ms"] == 0.757
    assert pos["verified"] is False


def test_telemetry_from_another_process_has_no_anchors_and_says_so(tmp_path: Path) -> None:
    other = rewrite(telemetry_of("observe"), tmp_path / "t.jsonl", lambda x: {**x, "pid": 4242, "tid": 4242})
    d = analyze_arm("observe", other)
    a = d["alignment"]
    assert a["checked"] is False
    assert a["anchors"]["computed"] is False
    assert "no telemetry line comes from a process of this trace" in a["anchors"]["reason"]
    assert "4242" in a["anchors"]["reason"] and "611" in a["anchors"]["reason"]
    assert any("4242" in n and "not processes of this trace" in n for n in a["notes"])
    # Lines of another process are not boundaries of this process's calls.
    pos = d["library_calls"][0]["telemetry"]
    assert pos["after"] is None and pos["before"] is None and pos["in_force"] is None
    # ... and the trace's own pid/tid are kept.
    assert (d["library_calls"][0]["pid"], d["library_calls"][0]["tid"]) == (611, 642)


def test_telemetry_without_pid_matches_any_process_and_says_so(tmp_path: Path) -> None:
    no_pid = rewrite(
        telemetry_of("observe"), tmp_path / "t.jsonl", lambda x: {k: v for k, v in x.items() if k != "pid"}
    )
    d = analyze_arm("observe", no_pid)
    a = d["alignment"]
    assert a["checked"] is True
    assert any("no pid" in n for n in a["notes"])
    assert d["telemetry"]["pids"] == []
    assert d["library_calls"][0]["telemetry"]["after"]["event"] == "backward_start"


def test_configured_cross_thread_anchor_and_tolerance(capsys) -> None:
    base = [str(H200 / "observe.sqlite"), "--telemetry", str(telemetry_of("observe")), "--json"]
    code, out, err = run(capsys, "analyze", *base, "--anchor", "backward_start=backward:start")
    assert code == 0, err
    a = json.loads(out)["alignment"]
    [pair] = a["anchors"]["pairs"]
    assert (pair["event"], pair["nvtx"], pair["edge"], pair["rule"]) == (
        "backward_start",
        "backward",
        "start",
        "configured",
    )
    assert pair["same_thread"] is False and (pair["tid"], pair["telemetry_tid"]) == (642, 611)
    assert pair["residual_ns"] == 0  # one pair: it defines the offset
    # The worker pushes `backward` ~0.47 ms after the main thread's line: the methods differ by that.
    assert 400_000 < a["agreement"]["max_abs_diff_ns"] < 500_000
    assert a["checked"] is True
    code, out, _ = run(
        capsys, "analyze", *base, "--anchor", "backward_start=backward:start", "--clock-tolerance", "0.1"
    )
    a = json.loads(out)["alignment"]
    assert a["checked"] is False and a["tolerance_ns"] == 100_000
    assert any("disagree" in r and "tolerance 0.100 ms" in r for r in a["reasons"])


def test_configured_anchor_that_matches_nothing_is_reported(capsys) -> None:
    code, out, _ = run(
        capsys,
        "analyze",
        str(H200 / "observe.sqlite"),
        "--telemetry",
        str(telemetry_of("observe")),
        "--json",
        "--anchor",
        "handoff=no_such_range",
    )
    assert code == 0
    a = json.loads(out)["alignment"]
    assert a["anchors"]["computed"] is False
    assert a["anchors"]["skipped"][0]["reason"] == "no NVTX range named 'no_such_range' in the trace"


def test_repeated_events_pair_in_order_and_ambiguous_counts_are_skipped(make_export, tmp_path: Path) -> None:
    spec = Export(
        ranges=[Range("step", 1_000_000, 2_000_000, PID, MAIN), Range("step", 3_000_000, 4_000_000, PID, MAIN)],
        processes={PID: "python3"},
    )
    export = make_export(spec)
    mono = 10_000_000_000

    def line(event: str, trace_ns: int) -> str:
        return json.dumps(
            {"event": event, "pid": PID, "tid": MAIN, "monotonic_ns": trace_ns + mono, "realtime_ns": trace_ns + UTC0}
        )

    ok = write_lines(
        tmp_path / "ok.jsonl",
        [line("step_start", 1_000_100), line("step_start", 3_000_300), line("step_end", 2_000_000)],
    )
    a = nsysaudit.analyze(export, telemetry=ok).to_dict()["alignment"]
    assert [(p["event"], p["edge_ns"]) for p in a["anchors"]["pairs"]] == [
        ("step_start", 1_000_000),
        ("step_start", 3_000_000),
    ]
    assert a["anchors"]["skipped"][0]["event"] == "step_end" and "ambiguous" in a["anchors"]["skipped"][0]["reason"]
    assert a["anchors"]["offset_ns"] == -mono - 200  # median of -100 and -300
    assert sorted(a["anchors"]["pairs"][i]["residual_ns"] for i in (0, 1)) == [-100, 100]
    assert a["checked"] is True


def test_finding_on_builder_fixture_gets_a_position(make_export, tmp_path: Path) -> None:
    export = make_export(observe_nested_failure())  # failed cudaMalloc [12_000, 12_400] in cublasCreate_v2
    mono = 5_000_000_000

    def line(event: str, trace_ns: int, tid: int, **fields: Any) -> str:
        return json.dumps(
            {
                "event": event,
                "pid": PID,
                "tid": tid,
                "monotonic_ns": trace_ns + mono,
                "realtime_ns": trace_ns + UTC0 + 7,
                **fields,
            }
        )

    tel = write_lines(
        tmp_path / "t.jsonl",
        [
            line("handoff", 3_000, MAIN, allocated=1, reserved=2, physical_free=3),
            line("backward_start", 8_500, WORKER),
            line("note", 12_200, WORKER, message="[bold red]inside[/bold red]"),
            line("runtime_error", 15_000, MAIN, message="CUBLAS_STATUS_ALLOC_FAILED"),
        ],
    )
    d = nsysaudit.analyze(export, telemetry=tel).to_dict()
    assert d["alignment"]["checked"] is True
    [pair] = d["alignment"]["anchors"]["pairs"]
    assert (pair["event"], pair["nvtx"], pair["tid"]) == ("backward_start", "backward", WORKER)
    [f] = [f for f in d["findings"] if f["kind"] == "nested_alloc_failure"]
    pos = f["telemetry"]
    assert pos["after"] == {"event": "backward_start", "line": 2, "ms": 0.003, "ns": 12_000 - 8_507, "via": "utc"}
    assert pos["before"]["event"] == "runtime_error" and pos["before"]["ns"] == 15_007 - 12_400
    assert pos["during"] == [{"event": "note", "line": 3, "ms_after_start": 0.0}]
    assert pos["in_force"]["event"] == "handoff"
    assert pos["in_force"]["values"] == {"allocated": 1, "reserved": 2, "physical_free": 3}


def test_terminal_report_shows_alignment_positions_and_keeps_markup_literal(capsys, make_export, tmp_path) -> None:
    export = make_export(observe_nested_failure())
    tel = write_lines(
        tmp_path / "t.jsonl",
        [
            json.dumps({"event": "[red]boom[/red]", "pid": PID, "tid": MAIN, "realtime_ns": UTC0 + 11_000}),
        ],
    )
    code, out, _ = run(capsys, "analyze", str(export), "--telemetry", str(tel), "--details")
    assert code == 0
    out = " ".join(out.split())
    assert "Clock alignment: NOT checked" in out
    assert "ms after [red]boom[/red] (line 1)" in out


def test_real_capture_terminal_report(capsys) -> None:
    telemetry = str(telemetry_of("observe"))
    code, out, _ = run(capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", telemetry, "--details")
    assert code == 0
    out = " ".join(out.split())  # the console wraps at its width
    assert "Clock alignment: checked" in out
    assert "0.757 ms after backward_start (line 5), 0.086 ms before runtime_error (line 6)" in out
    assert "in force: handoff (line 4" in out


# --- options --------------------------------------------------------------------------------------------


def test_telemetry_clock_monotonic_only_leaves_anchors_alone(capsys) -> None:
    code, out, _ = run(
        capsys,
        "analyze",
        str(H200 / "observe.sqlite"),
        "--telemetry",
        str(telemetry_of("observe")),
        "--json",
        "--telemetry-clock",
        "monotonic",
    )
    assert code == 0
    d = json.loads(out)
    a = d["alignment"]
    assert a["method"] == "anchors" and a["clock_field"] == "monotonic_ns"
    assert a["utc"]["computed"] is False and "realtime clock is not read" in a["utc"]["reason"]
    assert a["checked"] is False
    pos = d["library_calls"][0]["telemetry"]
    assert pos["after"]["event"] == "backward_start" and pos["after"]["via"] == "anchors"
    assert abs(pos["after"]["ms"] - 0.757) <= 0.02  # the anchor mapping lands within ~20 us of UTC here


def test_telemetry_clock_realtime_only_anchors_on_realtime(capsys) -> None:
    code, out, _ = run(
        capsys,
        "analyze",
        str(H200 / "release.sqlite"),
        "--telemetry",
        str(telemetry_of("release")),
        "--json",
        "--telemetry-clock",
        "realtime=realtime_ns",
    )
    assert code == 0
    a = json.loads(out)["alignment"]
    assert a["anchors"]["clock"] == "realtime" and a["checked"] is True
    assert any("realtime clock" in n for n in a["notes"])


def test_renamed_fields_with_event_key_and_clock_options(capsys, tmp_path: Path) -> None:
    renamed = rewrite(
        telemetry_of("observe"),
        tmp_path / "t.jsonl",
        lambda x: {
            "name": x["event"],
            "mono": x["monotonic_ns"],
            "wall": x["realtime_ns"],
            "pid": x["pid"],
            "tid": x["tid"],
        },
    )
    sqlite = str(H200 / "observe.sqlite")
    code, _, err = run(capsys, "analyze", sqlite, "--telemetry", str(renamed))
    assert code == 2 and "line 1: no 'event' field" in err
    code, out, err = run(
        capsys,
        "analyze",
        sqlite,
        "--telemetry",
        str(renamed),
        "--json",
        "--telemetry-event-key",
        "name",
        "--telemetry-clock",
        "monotonic=mono",
        "--telemetry-clock",
        "realtime=wall",
    )
    assert code == 0, err
    d = json.loads(out)
    assert d["alignment"]["checked"] is True
    assert d["telemetry"]["clock_fields"] == {"monotonic": "mono", "realtime": "wall"}
    assert d["library_calls"][0]["telemetry"]["after"]["ms"] == 0.757


@pytest.mark.parametrize(
    "args,problem",
    [
        (["--anchor", "nonsense"], "expected EVENT=NVTX_NAME"),
        (["--telemetry-clock", "boottime"], "expected monotonic"),
        (["--telemetry-clock", "realtime", "--telemetry-clock", "realtime=x"], "given twice"),
    ],
)
def test_bad_alignment_options_exit_2_one_line(capsys, args: list[str], problem: str) -> None:
    code, out, err = run(
        capsys, "analyze", str(H200 / "observe.sqlite"), "--telemetry", str(telemetry_of("observe")), *args
    )
    assert code == 2 and out == "" and problem in err and err.count("\n") == 1


def test_parse_anchor_and_clock() -> None:
    assert parse_anchor("admission_start=admission") == Anchor("admission_start", "admission", "start")
    assert parse_anchor("prepass_end=prepass") == Anchor("prepass_end", "prepass", "end")
    assert parse_anchor("cache_release=cache_release") == Anchor("cache_release", "cache_release", "end")
    assert parse_anchor("a=ns:range:start") == Anchor("a", "ns:range", "start")
    assert parse_anchor("a=ns:range") == Anchor("a", "ns:range", "end")
    with pytest.raises(BadOption):
        parse_anchor("=x")
    assert parse_clock("realtime") == ("realtime", "realtime_ns")
    with pytest.raises(BadOption):
        parse_clock("monotonic=")


def test_without_telemetry_the_json_has_no_alignment_keys() -> None:
    d = nsysaudit.analyze(H200 / "observe.sqlite").to_dict()
    assert "alignment" not in d and "telemetry" not in d
    assert "telemetry" not in d["library_calls"][0]


# --- the fast decoder (orjson) says only what the strict one says --------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from nsysaudit.read import telemetry as telemetry_module  # noqa: E402


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down (1 is not 1.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


_EDGE_INTS = [0, -1, (1 << 63) - 1, 1 << 63, -(1 << 63), -(1 << 63) - 1, (1 << 64) - 1, 1 << 64, 10**25, -(10**25)]
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.sampled_from(_EDGE_INTS), st.integers(), st.floats(allow_nan=False),
    st.text(st.characters(codec="utf-8"), max_size=8).map(lambda t: t + '":' if t.startswith("x") else t),
)
_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


def _decoded_alike(raw: bytes) -> None:
    fast = telemetry_module._fast_decode(raw)
    strict = telemetry_module._strict_decode(raw, 1)
    if fast is not None:
        assert not isinstance(strict, telemetry_module.BadLine), (raw, strict)
        assert _same(fast, strict), (raw, fast, strict)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(obj=st.dictionaries(st.text(max_size=6), _VALUES, max_size=6), spaced=st.booleans())
def test_fast_decoding_equals_the_strict_decoder(obj: dict[str, Any], spaced: bool) -> None:
    text = json.dumps(obj, ensure_ascii=False, separators=(", ", ": ") if spaced else (",", ":"))
    _decoded_alike(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"event": "a", "monotonic_ns": 5, "monotonic_ns": 7}', b'{"event":"a","event":"b"}',
        b'{"event": "a", "x": {"k": 1, "k": 2}}', b'{"event" : "a", "event" : "b"}', b'{"a": "\\":", "a": 1}',
        b'{"a": 9223372036854775808}', b'{"a": -9223372036854775809}', b'{"a": 18446744073709551616}',
        b'{"a": 1e400}', b'{"a": NaN}', b'{"a": "\\ud800"}', b'{"a": "\xff"}', b"[" * 33 + b"]" * 33,
        b"[" * 32 + b"]" * 32, b'{"a": 1.0, "b": 10000000000000000000.0}', b'\xef\xbb\xbf{"a": 1}', b"5", b'"x"',
        b'{"a": 1}\r', b'{"a":\t1, "b"\t: 2}',
    ],
)
def test_fast_decoding_leaves_every_doubt_to_the_strict_decoder(raw: bytes) -> None:
    _decoded_alike(raw)
    if raw.count(b'"a"') + raw.count(b'"k"') + raw.count(b'"event"') > 2 or b"e400" in raw or b"NaN" in raw:
        assert telemetry_module._fast_decode(raw) is None


# --- the column reader says what the per-line reader says (issue 24, 10^6 lines) ------------------------

_R, _M = 1_796_064_724_000_000_000, 55_000_000_000
_HOSTILE_LINES = [
    b'{"event":"tick","event":"x","realtime_ns":%d}' % _R,  # a key given twice
    b'{"event":"tick","realtime_ns":%d,"realtime_ns":%d}' % (_R, _R + 1),
    b'{"event":"tick","msg":"a\\":b","realtime_ns":%d}' % _R,  # '":' inside a string
    b'{"event":"tick","a\\":b":1,"realtime_ns":%d}' % _R,
    b'{"event" : "tick", "realtime_ns" : %d}' % _R,
    b'{"event":\t"tick",\t"realtime_ns":%d}' % _R,
    b'{"event":"t","realtime_ns":%d,"v":9223372036854775808}' % _R,
    b'{"event":"t","realtime_ns":%d,"v":-9223372036854775809}' % _R,
    b'{"event":"t","realtime_ns":%d,"v":%s}' % (_R, b"9" * 5000),
    b'{"event":"t","realtime_ns":%d,"a":1.5,"b":-0.0,"c":1e300,"d":1e19,"e":true,"f":null,"g_ns":5,"h_pid":1}' % _R,
    b'{"event":"t","realtime_ns":%d,"v":NaN}' % _R,
    b'{"event":"t","realtime_ns":%d,"v":"\\ud800"}' % _R,
    b'{"event":"t","realtime_ns":%d,"v":"\xff"}' % _R,
    b'{"event":"t","realtime_ns":%d,"o":{"z":1,"a":[1,{"y":2,"b":3}]}}' % _R,
    b'{"event":"t","realtime_ns":%d,"v":' % _R + b"[" * 32 + b"]" * 32 + b"}",
    b"",
    b"  \t",
    b"\x0c",
    b'{"realtime_ns":%d}' % _R,
    b'{"event":"","realtime_ns":%d}' % _R,
    b'{"event":"t","monotonic_ns":null,"realtime_ns":null}',
    b'{"event":"t","realtime_ns":1.5}',
    b'{"event":"t","realtime_ns":%d,"pid":"7"}' % _R,
    b'{"event":"t","realtime_ns":%d,"tid":true}' % _R,
    b'{"event":"err","realtime_ns":%d,"m":"CUBLAS\\u005fSTATUS_NOT_INITIALIZED","cublas_status":3}' % _R,
    b'{"event":"q\\"uote\\\\\\u2028","monotonic_ns":%d,"pid":7,"tid":8,"k":"\xd0\xba\xd0\xbb"}' % _M,
    b"[1, 2]",
    b'{"event":"t","realtime_ns":%d} x' % _R,
    b'{"event":"t","realtime_ns":%d}\r{"event":"u","realtime_ns":%d}' % (_R, _R + 2),
    b'{"event":"t","realtime_ns":-9223372036854775808,"monotonic_ns":9223372036854775807}',
]


def _per_line(data: bytes, options: TelemetryOptions) -> tuple[list[tuple[Any, ...]], list[Any]]:
    """What the per-line reader makes of each line: (line, event, pid, tid, clocks, fields, values)."""
    rows, bad = [], []
    skip = telemetry_module._not_values(options)
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        parsed = telemetry_module._parse_line(raw, number, options, skip)
        if isinstance(parsed, telemetry_module.BadLine):
            bad.append(parsed)
            continue
        fields = {k: v for k, v in parsed.fields.items() if k not in skip}
        clocks = {k: parsed.clocks.get(k) for k in ("monotonic", "realtime")}
        rows.append((parsed.line, parsed.event, parsed.pid, parsed.tid, clocks, fields, dict(parsed.measured)))
    return rows, bad


def _columns(log: Any) -> list[tuple[Any, ...]]:
    out = []
    for row in log.lines.iter_rows(named=True):
        clocks = {k: row[k] for k in ("monotonic", "realtime")}
        fields = log.fields_of(row["fields"], row["order"], row["written"])
        out.append((row["line"], row["event"], row["pid"], row["tid"], clocks, fields,
                    log.values_of(row["values"], row["order"])))
    return out


@pytest.mark.parametrize(
    "options",
    [
        TelemetryOptions(lenient=True),
        TelemetryOptions(lenient=True, clock=(("realtime", "realtime_ns"),)),
        TelemetryOptions(lenient=True, clock=(("monotonic", "realtime_ns"), ("realtime", "realtime_ns"))),
        TelemetryOptions(lenient=True, event_key="pid"),
    ],
)
@pytest.mark.parametrize("piece", [64, 1 << 23])
def test_the_column_reader_reads_every_line_as_the_per_line_reader_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, options: TelemetryOptions, piece: int
) -> None:
    """Across pieces and batches (made tiny here, so that every line falls in several of each
    and the batch-wide checks see one odd line among plain ones): the same lines, stamps, ids,
    fields and values in the same order, the same bad lines, the same lines searched for statuses."""
    monkeypatch.setattr(telemetry_module, "PIECE_BYTES", piece)
    monkeypatch.setattr(telemetry_module, "_ROWS", 5)
    plain = [b'{"event":"tick","step":%d,"pid":7,"tid":8,"monotonic_ns":%d,"realtime_ns":%d}' % (i, _M + i, _R + i)
             for i in range(len(_HOSTILE_LINES) * 4)]
    lines = [x for i, odd in enumerate(_HOSTILE_LINES) for x in (*plain[4 * i : 4 * i + 4], odd)]
    data = b"\n".join(lines) + b"\r\n"
    path = tmp_path / "t.jsonl"
    path.write_bytes(data)
    rows, bad = _per_line(data, options)
    if not rows:  # a field read as the name and as an id or a clock: no line is usable
        said = f"({len(bad)} bad line(s), first: line 1: {bad[0].problem})"
        with pytest.raises(UnusableInput, match=re.escape(said)):
            load_telemetry(path, options)
        return
    log = load_telemetry(path, options)
    assert _columns(log) == rows and [type(v) for r in _columns(log) for v in r[5].values()] == [
        type(v) for r in rows for v in r[5].values()
    ]
    assert [list(r[5]) for r in _columns(log)] == [list(r[5]) for r in rows]  # keys in the order written
    assert list(log.bad_lines) == bad
    assert log.sha256 == hashlib.sha256(data).hexdigest() and log.size_bytes == len(data)
    # A field by name, as the whole line holds it (name, ids and stamps too), from the lines that have one.
    names = ["step", "realtime_ns", "event", "pid", "o", "z", "m", "msg", "k", "nope"]
    whole = []
    skip = telemetry_module._not_values(options)
    for number, raw in enumerate(data.splitlines(), start=1):
        parsed = telemetry_module._parse_line(raw, number, options, skip) if raw.strip() else None
        if isinstance(parsed, telemetry_module.TelemetryEvent) and any(n in parsed.fields for n in names):
            whole.append((number, parsed.event, parsed.pid, {n: parsed.fields[n] for n in names if n in parsed.fields}))
    assert list(log.with_fields(names)) == whole
    statuses = [r for r, _ in log.status_lines]
    could = [i for i, r in enumerate(rows) if any("status" in k.lower() or "STATUS" in str(v) for k, v in r[5].items())]
    assert set(could) <= set(statuses)


def test_a_stamp_the_mapping_puts_outside_the_trace_clock_is_not_placed(tmp_path: Path) -> None:
    """realtime_ns = -2^63 on one line: the UTC mapping puts it outside the 64-bit trace clock. It was a
    traceback (polars, then orjson); now that line is not placed, a note says so, the exact difference
    of the two mappings is written as JSON digits, and the alignment is not checked."""
    import subprocess
    import sys

    torch = Path(__file__).parent / "fixtures" / "h200-cuda13-nsys2025.3" / "torch"
    lines = (torch / "observe.telemetry.jsonl").read_text().splitlines()
    damaged = json.loads(lines[2])
    damaged["realtime_ns"] = -(1 << 63)
    lines[2] = json.dumps(damaged)
    telemetry = tmp_path / "t.jsonl"
    telemetry.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([sys.executable, "-m", "nsysaudit", "analyze", str(torch / "observe.sqlite"),
                           "--telemetry", str(telemetry), "--json"], capture_output=True)
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr.decode()[-500:]
    doc = json.loads(proc.stdout)
    assert doc["alignment"]["notes"] == [
        "1 telemetry line(s) would be placed outside the trace's 64-bit clock (a damaged stamp): not placed"]
    line3 = next(t for t in doc["telemetry"]["timeline"] if t["line"] == 3)
    assert (line3["trace_ns"], line3["via"]) == (None, None)
    assert doc["alignment"]["agreement"]["max_abs_diff_ns"] > (1 << 63)  # exact, past 64 bits
    assert doc["alignment"]["checked"] is False and doc["verdict"] == "failure_found"
