"""The comparison of an observe arm and a release arm: what it states, and what it refuses to state."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from builder import Call, Export, LibCall
from conftest import H200
from scenarios import MAIN, PID, WORKER, MiB, observe_nested_failure, release_three_allocations

import nsysaudit
from nsysaudit.analysis.interest import FEW_LIBRARY_CALLS
from nsysaudit.render.json import indented as canonical_json
from nsysaudit.render.markdown import comparison_markdown, md
from nsysaudit.reports.compare import compare_results

MakeExport = Callable[..., Path]


def compare_specs(make_export: MakeExport, observe: Export, release: Export) -> dict[str, Any]:
    o = nsysaudit.analyze(make_export(observe, "observe.sqlite"))
    r = nsysaudit.analyze(make_export(release, "release.sqlite"))
    return compare_results(o, r).to_dict()


def unescape(markdown: str) -> str:
    """report.md with Markdown escapes removed, to read the facts as a person sees them."""
    return markdown.replace("\\", "")


@pytest.fixture(scope="module")
def real() -> dict[str, Any]:
    o = nsysaudit.analyze(H200 / "observe.sqlite", telemetry=H200 / "observe.telemetry.jsonl")
    r = nsysaudit.analyze(H200 / "release.sqlite", telemetry=H200 / "release.telemetry.jsonl")
    return compare_results(o, r).to_dict()


def telemetry_line(path: Path, event: str) -> dict[str, Any]:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    (line,) = [x for x in lines if x["event"] == event]
    return line


# --- the real H200 captures ----------------------------------------------------------------------


def test_real_captures_both_arms_censored_so_the_failure_inside_cublas_create_is_not_established(real) -> None:
    for arm in ("observe", "release"):
        assert real["arms"][arm]["verdict"] == "inconclusive"
        (lc,) = real["arms"][arm]["library_calls"]
        assert lc["api"] == "cublasCreate_v2" and lc["thread_role"] == "other"
        assert lc["coverage"] == "censored" and lc["censored_reason"] == "cuda_api_trace_ends_inside"
        assert lc["thread_name"] is None  # not in ThreadNames: unknown, never guessed
        assert lc["allocations"] == {
            "calls": 0,
            "succeeded": 0,
            "failed": 0,
            "succeeded_before_first_failure": None,
            "bytes": 0,
            "bytes_unknown": 0,
            "bytes_each": [],
        }
    presence = real["differences"]["nested_alloc_failure"]
    assert presence["present_in"] == [] and presence["absent_in"] == ["observe", "release"]
    (censored,) = [x for x in real["not_established"] if x["code"] == "censored_library_call"]
    assert censored["arms"] == ["observe", "release"] and censored["api"] == "cublasCreate_v2"
    assert "cannot establish whether an allocation failed inside cublasCreate_v2" in censored["statement"]
    assert "from the traces alone" in censored["statement"]
    assert "not evidence that none failed" in censored["statement"]
    assert censored["statement"] in real["summary"]
    (pair,) = real["differences"]["library_calls"]
    assert pair["nested_calls_same"] is True
    assert pair["observe"]["nested_allocations_failed"] == pair["release"]["nested_allocations_failed"] == 0


def test_real_captures_telemetry_handoff_and_alignment(real) -> None:
    for arm in ("observe", "release"):
        line = telemetry_line(H200 / f"{arm}.telemetry.jsonl", "handoff")
        handoff = real["arms"][arm]["handoff"]
        assert {k: handoff[k] for k in ("allocated", "reserved", "physical_free")} == {
            k: line[k] for k in ("allocated", "reserved", "physical_free")
        }
        assert real["arms"][arm]["alignment"]["checked"] is True
        assert real["arms"][arm]["telemetry_input"]["name"] == f"{arm}.telemetry.jsonl"
    diff = real["differences"]["handoff"]
    assert diff["physical_free"] == {"observe": 3_211_264, "release": 3_211_264, "release_minus_observe": 0}
    # What differs is the snapshot in force when cublasCreate_v2 starts: the release arm freed the cache.
    (pair,) = real["differences"]["library_calls"]
    assert pair["observe"]["telemetry"]["in_force"]["event"] == "handoff"
    assert pair["release"]["telemetry"]["in_force"]["event"] == "cache_release"
    assert pair["release"]["telemetry"]["in_force"]["values"]["physical_free"] == 148_722_745_344
    assert pair["observe"]["telemetry"]["before"]["event"] == "runtime_error"
    assert pair["release"]["telemetry"]["before"]["event"] == "backward_end"
    assert not [x for x in real["not_established"] if x["code"] in ("no_telemetry", "alignment_not_checked")]


def test_real_captures_sources_same_nsys_and_expected_capture_differences(real) -> None:
    src = real["differences"]["sources"]
    assert src["nsys_version"] == {"observe": "2023.4.4.54", "release": "2023.4.4.54", "same": True}
    assert src["schema_version"]["same"] is True
    assert src["capture"]["differs"] == []
    expected = {d["key"]: d for d in src["capture"]["differs_as_expected"]}
    assert set(expected) == {
        "PROCESS_0:ARGUMENT_1",
        "PROCESS_0:ARGUMENT_2",
        "PROFILING_SESSION_UUID",
        "RUN_DURATION_MS",
    }
    assert expected["PROCESS_0:ARGUMENT_1"] == {
        "key": "PROCESS_0:ARGUMENT_1",
        "observe": ["observe"],
        "release": ["release"],
        "why": "the arm's own command arguments",
    }
    assert not [x for x in real["not_established"] if x["code"].startswith("different_")]


def test_real_captures_failing_calls_in_both_arms(real) -> None:
    census = real["differences"]["failing_calls"]["census"]
    assert census["only_in_observe"] == census["only_in_release"] == []
    assert census["in_both"] == [
        {
            "api": "cudaMalloc_v3020",
            "display_api": "cudaMalloc",
            "return_code": 2,
            "return_name": "cudaErrorMemoryAllocation",
            "observe": 13,
            "release": 13,
        }
    ]


def test_real_captures_report_has_no_paths(real) -> None:
    text = canonical_json(real).decode()
    assert str(H200) not in text and "tests/fixtures" not in text
    assert [i["name"] for i in real["inputs"]] == [
        "observe.sqlite",
        "observe.telemetry.jsonl",
        "release.sqlite",
        "release.telemetry.jsonl",
    ]


# --- builder fixtures: the difference in exact terms ---------------------------------------------


def test_builder_observe_failure_vs_release_three_allocations(make_export) -> None:
    doc = compare_specs(make_export, observe_nested_failure(), release_three_allocations())
    presence = doc["differences"]["nested_alloc_failure"]
    assert presence["present_in"] == ["observe"] and presence["absent_in"] == ["release"]
    assert presence["statement"] == (
        "A nested allocation failure is present in observe (1: cudaMalloc returned 2 "
        "(cudaErrorMemoryAllocation) inside cublasCreate_v2) and absent in release"
    )
    (pair,) = doc["differences"]["library_calls"]
    assert pair["match_key"] == {"api": "cublasCreate_v2", "thread_role": "other", "ordinal": 1}
    o, r = pair["observe"], pair["release"]
    assert (o["nested_allocations_succeeded"], o["nested_allocations_failed"]) == (2, 1)
    assert o["succeeded_before_first_failure"] == 2
    assert o["allocated_bytes_each"] == [4 * MiB, 2 * MiB] and o["allocated_bytes"] == 6 * MiB
    (failed,) = o["failed_allocations"]
    assert (failed["api"], failed["return_code"], failed["correlation_id"]) == ("cudaMalloc_v3020", 2, 22)
    assert failed["bytes"] is None  # a failed allocation's size is unknown, never guessed
    assert (r["nested_allocations_succeeded"], r["nested_allocations_failed"]) == (3, 0)
    assert r["allocated_bytes_each"] == [4 * MiB, 2 * MiB, 8 * MiB] and r["allocated_bytes"] == 14 * MiB
    heads = ("observe: cublasCreate_v2 (", "release: cublasCreate_v2 (")
    allocation = [x for x in pair["statements"] if x.startswith(heads)]
    assert allocation == [
        "observe: cublasCreate_v2 (non-main thread, pid 611 tid 642, thread name bwd_worker_0): cudaMalloc "
        "returned 2 (cudaErrorMemoryAllocation), requested bytes unknown, after 2 successful nested "
        "allocation(s); 2 successful nested allocation(s) in all: 4,194,304 + 2,097,152 = 6,291,456 bytes; "
        "coverage complete",
        "release: cublasCreate_v2 (non-main thread, pid 611 tid 642, thread name bwd_worker_0): 3 successful "
        "nested allocation(s) (4,194,304 + 2,097,152 + 8,388,608 = 14,680,064 bytes), none failed; "
        "coverage complete",
    ]
    nested = doc["differences"]["failing_calls"]["nested"]
    assert [(x["api"], x["return_code"], x["observe"], x["release"]) for x in nested["only_in_observe"]] == [
        ("cudaMalloc_v3020", 2, 1, 0)
    ]
    assert nested["only_in_release"] == [] and nested["in_both"] == []
    # Nothing censored: no statement about censoring; telemetry missing is said.
    codes = [x["code"] for x in doc["not_established"]]
    assert "censored_library_call" not in codes
    assert codes.count("no_telemetry") == 2 and codes[-1] == "single_run_per_arm"
    # report.md states the same facts.
    text = unescape(comparison_markdown(doc))
    for statement in [presence["statement"], *pair["statements"]]:
        assert statement in text


def test_failure_in_observe_and_release_censored_is_not_evidence(make_export) -> None:
    release = release_three_allocations()
    release.lib_calls = [LibCall("cublasCreate_v2", 9_000, 50_000, PID, WORKER)]  # ends after the API trace
    doc = compare_specs(make_export, observe_nested_failure(), release)
    presence = doc["differences"]["nested_alloc_failure"]
    assert presence["statement"].endswith(
        "absent in release as far as its trace goes (1 library call(s) censored there)"
    )
    (censored,) = [x for x in doc["not_established"] if x["code"] == "censored_library_call"]
    assert censored["arms"] == ["release"]
    assert "in the release arm from the traces alone" in censored["statement"]


def test_different_nsys_version_and_capture_options_are_listed(make_export) -> None:
    release = release_three_allocations()
    release.nsys_version = "2024.1.1.59"
    release.capture_meta = {"PROCESS_0:COLLECT_GPU_MEMORY_USAGE": "false", "PROFILING_SESSION_UUID": "b"}
    observe = observe_nested_failure()
    observe.capture_meta = {"PROFILING_SESSION_UUID": "a"}
    doc = compare_specs(make_export, observe, release)
    src = doc["differences"]["sources"]
    assert src["nsys_version"] == {"observe": "2023.4.4.54", "release": "2024.1.1.59", "same": False}
    assert src["capture"]["differs"] == [
        {"key": "PROCESS_0:COLLECT_GPU_MEMORY_USAGE", "observe": ["true"], "release": ["false"]}
    ]
    assert [d["key"] for d in src["capture"]["differs_as_expected"]] == ["PROFILING_SESSION_UUID"]
    by_code = {x["code"]: x["statement"] for x in doc["not_established"]}
    assert "2023.4.4.54" in by_code["different_nsys_version"] and "2024.1.1.59" in by_code["different_nsys_version"]
    assert "PROCESS_0:COLLECT_GPU_MEMORY_USAGE" in by_code["different_capture_options"]
    assert "PROFILING_SESSION_UUID" not in by_code["different_capture_options"]


def test_failure_only_in_release(make_export) -> None:
    doc = compare_specs(make_export, release_three_allocations(), observe_nested_failure())
    census = doc["differences"]["failing_calls"]["census"]
    assert [(x["api"], x["return_code"]) for x in census["only_in_release"]] == [("cudaMalloc_v3020", 2)]
    assert census["only_in_observe"] == []
    assert doc["differences"]["nested_alloc_failure"]["present_in"] == ["release"]


def test_many_library_calls_select_those_of_interest(make_export) -> None:
    spec = release_three_allocations()
    spec.lib_calls += [LibCall("cublasSgemm_v2", 40_000 + 100 * i, 40_050 + 100 * i, PID, MAIN) for i in range(12)]
    spec.calls.append(Call("cudaLaunchKernel_v7000", 41_500, 41_600, PID, MAIN, corr=99))
    doc = compare_specs(make_export, observe_nested_failure(), spec)
    release = doc["arms"]["release"]
    assert release["library_calls_total"] == 13 > FEW_LIBRARY_CALLS
    assert [lc["api"] for lc in release["library_calls"]] == ["cublasCreate_v2"]
    assert "other than the process's main thread" in release["library_calls_selection"]
    observe = doc["arms"]["observe"]
    assert observe["library_calls_selection"].startswith("all library calls")


def test_unmatched_library_call_is_said(make_export) -> None:
    release = release_three_allocations()
    release.lib_calls = []
    doc = compare_specs(make_export, observe_nested_failure(), release)
    (pair,) = doc["differences"]["library_calls"]
    assert pair["release"] is None and pair["nested_calls_same"] is None
    assert "release: no matching cublasCreate_v2 call (non-main thread, call #1)" in pair["statements"]


def test_markdown_escapes_trace_text(make_export) -> None:
    observe = observe_nested_failure()
    observe.thread_names[(PID, WORKER)] = "w*<b>x</b>|[l](http://e)\n# h"
    doc = compare_specs(make_export, observe, release_three_allocations())
    text = comparison_markdown(doc)
    assert "<b>" not in text and "\n# h" not in text
    assert md("w*<b>x</b>|[l](http://e)\n# h") in text
    assert r"w\*\<b\>x\</b\>\|\[l\](http://e)\\n\# h" in text


def test_comparison_is_deterministic(make_export) -> None:
    o = make_export(observe_nested_failure(), "observe.sqlite")
    r = make_export(release_three_allocations(), "release.sqlite")
    a = compare_results(nsysaudit.analyze(o), nsysaudit.analyze(r)).to_dict()
    b = compare_results(nsysaudit.analyze(o), nsysaudit.analyze(r)).to_dict()
    assert canonical_json(a) == canonical_json(b)
    assert comparison_markdown(a) == comparison_markdown(b)


def test_library_calls_listed_are_bounded_and_the_rest_counted(make_export) -> None:
    from builder import Call, Export, LibCall

    from nsysaudit.analysis.interest import MAX_LISTED as MAX_LIBRARY_CALLS_LISTED

    n = MAX_LIBRARY_CALLS_LISTED + 50
    calls = [
        Call("cudaMalloc_v3020", 1_000 * i + 10, 1_000 * i + 20, 100, 101, corr=i + 1, bytes=512) for i in range(n)
    ]
    calls.append(Call("cudaMalloc_v3020", 1_000 * 7 + 30, 1_000 * 7 + 40, 100, 101, ret=2, corr=n + 1))
    calls.append(Call("cudaFree_v3020", 10_000_000, 10_000_001, 100, 100, corr=n + 2))
    libs = [LibCall("cublasGemmEx", 1_000 * i, 1_000 * i + 500, 100, 101) for i in range(n)]
    spec = Export(calls=calls, lib_calls=libs)
    a = nsysaudit.analyze(make_export(spec))
    b = nsysaudit.analyze(make_export(spec))
    arm = nsysaudit.compare_results(a, b).to_dict()["arms"]["observe"]
    assert arm["library_calls_total"] == n
    assert arm["library_calls_listed"] == len(arm["library_calls"]) == MAX_LIBRARY_CALLS_LISTED
    assert f"{n} match" in arm["library_calls_selection"]
    # the one enclosing the finding is always listed
    assert any(lc["start_ns"] == 7_000 for lc in arm["library_calls"])
