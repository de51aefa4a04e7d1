"""Timeline pictures: what the pictures of the real captures show, checked in the SVG
(text elements, ids, geometry), where the marks come from (the timeline model against the JSON
document), that the bytes never change, and the ``plot`` command's output and errors."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from builder import Call, Export, LibCall
from conftest import H200, H200_2025, HOSTILE_TEXT, PUBLIC, TORCH, UNSAFE_SHOWN, hostile_export, unprivileged
from scenarios import PID, WORKER, observe_nested_failure

import nsysaudit
from nsysaudit import seal
from nsysaudit.cli import main
from nsysaudit.core.errors import BadOption
from nsysaudit.render import pictures
from nsysaudit.reports.timeline import aligned_timelines, parse_around, timeline

STOP = H200_2025 / "capture-stop"
SVG = "{http://www.w3.org/2000/svg}"


def analyzed(folder: Path, arm: str, telemetry: bool = True) -> nsysaudit.AnalysisResult:
    tel = folder / f"{arm}.telemetry.jsonl" if telemetry else None
    return nsysaudit.analyze(folder / f"{arm}.sqlite", telemetry=tel)


@pytest.fixture(scope="module")
def torch_pair() -> tuple[nsysaudit.AnalysisResult, nsysaudit.AnalysisResult]:
    return analyzed(TORCH, "observe"), analyzed(TORCH, "release")


@pytest.fixture(scope="module")
def stop() -> nsysaudit.AnalysisResult:
    return analyzed(STOP, "stop")


@pytest.fixture(scope="module")
def torch_svgs(torch_pair) -> dict[str, ET.Element]:
    return {t.arm: ET.fromstring(pictures.render([t], ("svg",))["svg"]) for t in aligned_timelines(*torch_pair)}


def texts(svg: ET.Element) -> list[str]:
    return ["".join(e.itertext()) for e in svg.iter(f"{SVG}text")]


def group(svg: ET.Element, gid: str) -> ET.Element:
    found = [g for g in svg.iter(f"{SVG}g") if g.get("id") == gid]
    assert len(found) == 1, f"{gid}: {len(found)} elements"
    return found[0]


def ids(svg: ET.Element) -> list[str]:
    return [e.get("id", "") for e in svg.iter() if e.get("id")]


def path_xs(element: ET.Element) -> list[float]:
    """The x coordinates of every path in ``element`` (matplotlib writes 'M x y L x y ...')."""
    xs = []
    for path in element.iter(f"{SVG}path"):
        numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", path.get("d", ""))]
        xs += numbers[0::2]
    return xs


# --- what the pictures show ------------------------------------------------------------------------


def test_observe_picture_shows_both_threads_the_failed_call_and_the_boundary(torch_svgs) -> None:
    svg = torch_svgs["observe"]
    shown = texts(svg)
    assert "python3" in shown and "pt_autograd_0" in shown
    assert "pid 683 · tid 683 · main" in shown and "pid 683 · tid 720" in shown
    [finding] = [t for t in shown if t.startswith("finding: ") and "after backward_start" in t]
    assert finding == (
        "finding: cudaMalloc returned 2 (cudaErrorMemoryAllocation), correlation 2433, 55.672 ms after backward_start"
    )
    # The zoom labels the same failure, and the two allocations before it with their bytes.
    assert "finding: cudaMalloc returned 2 (cudaErrorMemoryAllocation), correlation 2433" in shown
    assert "cudaMalloc 1,024 B" in shown and "cudaMalloc 131,072 B" in shown
    # The 27 admission failures on the main thread: those in the window, labelled once with a count.
    [admission] = [t for t in shown if t.startswith("cudaMalloc returned 2 (cudaErrorMemoryAllocation), ")]
    assert re.fullmatch(r"cudaMalloc returned 2 \(cudaErrorMemoryAllocation\), \d+ in view", admission)
    assert "backward_start" in shown and "handoff" in shown and "NVTX backward" in shown
    assert "ms from backward_start (telemetry line 5, trace 4,844,377,837 ns; clock alignment checked)" in shown
    every = ids(svg)
    assert "observe-context-library-call-1" in every and "observe-zoom-library-call-1" in every
    assert "observe-context-failed-markers" in every and "observe-zoom-cuda-calls-failed-0" in every
    assert not [i for i in every if "not-covered" in i]  # the analysis found both library calls complete
    assert len(every) == len(set(every))


def test_release_picture_names_the_unnamed_worker_and_its_three_allocations(torch_svgs) -> None:
    shown = texts(torch_svgs["release"])
    assert "name unknown" in shown and "pid 783 · tid 817" in shown  # no ThreadNames row for tid 817
    assert {"cudaMalloc 1,024 B", "cudaMalloc 131,072 B", "cudaMalloc 67,108,864 B"} <= set(shown)
    assert not [t for t in shown if "returned 2" in t and "in view" not in t]  # no failure in its library call
    assert "zoom on the focus's library call, thread name unknown" in "\n".join(shown)


def test_the_two_arms_share_one_aligned_axis(torch_svgs, torch_pair) -> None:
    """Stacked, the pictures line up: the same tick labels at the same x, 0 at each arm's backward_start."""

    def ticks(svg: ET.Element) -> list[tuple[str, str | None]]:
        return [("".join(e.itertext()), e.get("x")) for e in svg.iter(f"{SVG}text") if e.get("x")
                and re.fullmatch(r"-?[\d,.]+", "".join(e.itertext()))]

    assert ticks(torch_svgs["observe"]) == ticks(torch_svgs["release"])
    observe, release = aligned_timelines(*torch_pair)
    for t, result in ((observe, torch_pair[0]), (release, torch_pair[1])):
        [line] = [e for e in result.to_dict()["telemetry"]["timeline"] if e["event"] == "backward_start"]
        assert t.context.origin_ns == line["trace_ns"]
    assert observe.context.lo_ns - observe.context.origin_ns == release.context.lo_ns - release.context.origin_ns
    assert observe.context.hi_ns - observe.context.origin_ns == release.context.hi_ns - release.context.origin_ns


def test_each_arm_has_a_memory_panel_of_the_ledger_against_the_device_total(torch_svgs, torch_pair) -> None:
    for arm, result in zip(("observe", "release"), torch_pair, strict=True):
        svg = torch_svgs[arm]
        group(svg, f"{arm}-memory-live")
        group(svg, f"{arm}-memory-free")  # the bound on free memory, on a log axis: 0.7 GB of 150 GB shows
        group(svg, f"{arm}-memory-total")
        assert "red: at most this much free, blue: held by traced processes (log scale)" in " ".join(texts(svg))
        bound = "".join(group(svg, f"{arm}-memory-bound").itertext())
        # The numbers are the ledger's at the focus, as report.json has them.
        [point] = [p for p in result.to_dict()["memory"]["at"] if p["point"] == "finding"] or [None]
        if arm == "observe":
            assert point is not None
            [dev] = point["devices"]
            live, free = dev["device_resident_live_bytes"], dev["free_at_most_bytes"]
            assert f"live {live:,} B, at most {free:,} B free" in bound
            assert "at most 697,798,798 B free" in bound
        else:  # the release arm's focus is its cublasCreate_v2, after the cache was freed
            assert "at most 149,335,676,046 B free" in bound
        assert any("device total 150,109,880,320 B (139.8 GiB)" in t for t in texts(svg))


def test_no_memory_panel_without_a_ledger() -> None:
    # A capture made without --cuda-memory-usage=true: no ledger is claimed, so no panel.
    result = nsysaudit.analyze(PUBLIC / "nsys-ai_mock_2026.1.sqlite")
    assert result.to_dict()["memory"]["ledger"] is False
    t = timeline(result)
    assert t.memory is None
    svg = ET.fromstring(pictures.render([t], ("svg",))["svg"])
    assert not [i for i in ids(svg) if "memory" in i]


def test_capture_stop_picture_shades_what_the_trace_does_not_cover(stop) -> None:
    t = timeline(stop)
    svg = ET.fromstring(pictures.render([t], ("svg",))["svg"])
    shown = texts(svg)
    assert "capture stopped" in shown
    assert "not covered: capture stopped →" in shown
    assert "not covered: pid 918's CUDA trace stops (last record 19,595,281 ns) →" in shown
    assert "cublasCreate_v2 · censored · end unknown (the capture's stop)" in shown
    assert "backward_start (unverified)" in shown  # this capture's clock alignment is not checked
    kinds = [s.kind for s in t.context.shades]
    assert kinds == ["cuda_trace_stopped", "capture_stopped"]
    for panel in ("context", "zoom"):
        stopped = group(svg, f"arm-{panel}-not-covered-{kinds.index('capture_stopped')}")
        hatched = [p for p in stopped.iter(f"{SVG}path") if "fill: url(#h" in p.get("style", "")]
        assert hatched, "the part after the capture's stop is hatched"
        # It begins exactly at the capture's stop line and runs to the right edge of the panel.
        line = path_xs(group(svg, f"arm-{panel}-capture-stop"))
        assert min(path_xs(stopped)) == pytest.approx(line[0], abs=1e-3) and len(set(line)) == 1


def test_every_shaded_part_comes_from_the_document(stop) -> None:
    doc = stop.to_dict()
    view = timeline(stop).context
    by_kind = {s.kind: s for s in view.shades}
    assert by_kind["capture_stopped"].start_ns == doc["coverage"]["capture"]["stop_ns"] == 19_603_056
    [api] = [s for s in doc["coverage"]["by_source"] if s["source"] == "cuda_api"]
    assert by_kind["cuda_trace_stopped"].start_ns == api["last_ns"] == 19_595_281
    assert {s.end_ns for s in view.shades} == {view.hi_ns}
    assert view.capture_stop_ns == 19_603_056
    [bar] = view.bars
    assert (bar.start_ns, bar.end_ns, bar.end_known) == (15_008_443, 19_603_056, False)


def test_the_nsys_2023_capture_is_shaded_where_its_cuda_trace_stops() -> None:
    result = nsysaudit.analyze(H200 / "observe.sqlite", telemetry=H200 / "observe.telemetry.jsonl")
    view = timeline(result).context
    [shade] = view.shades
    [censored] = [c for c in result.to_dict()["coverage"]["censored"] if c["tid"] != c["pid"]]
    assert shade.kind == "cuda_trace_stopped" and shade.start_ns == censored["cuda_api_last_ns"]
    assert "cuda_api_trace_ends_inside" in censored["reasons"]


# --- the choices -----------------------------------------------------------------------------------


def test_default_focus_lanes_and_window(torch_pair) -> None:
    observe, release = torch_pair
    t = timeline(observe)
    doc = observe.to_dict()
    [finding] = doc["findings"]
    assert t.focus_label.startswith("the first finding, nested_alloc_failure")
    assert [(lane.pid, lane.tid, lane.name) for lane in t.lanes] == [(683, 683, "python3"), (683, 720, "pt_autograd_0")]
    assert t.context.focus_tick is not None and t.context.focus_tick.correlation_id == finding["correlation_id"]
    enc = finding["enclosing"]
    assert t.context.lo_ns < t.context.origin_ns and t.context.hi_ns > enc["end_ns"]
    assert (t.zoom is not None and t.zoom.lanes == (1,) and t.zoom.origin_ns == enc["start_ns"])
    r = timeline(release)
    assert r.focus_label == "the first library call after backward_start, cublasCreate_v2"
    assert [lane.name for lane in r.lanes] == ["python3", None]


def test_without_telemetry_zero_is_the_start_of_the_library_call(torch_pair) -> None:
    t = timeline(analyzed(TORCH, "observe", telemetry=False))
    [finding] = torch_pair[0].to_dict()["findings"]
    assert t.context.origin_ns == finding["enclosing"]["start_ns"]
    assert t.origin_label.startswith("the start of cublasCreate_v2") and t.origin_label.endswith("no telemetry)")
    assert not t.context.boundaries


def test_around_and_window_choose_the_view(torch_pair) -> None:
    observe = torch_pair[0]
    t = timeline(observe, at_ns=4_900_049_660, window_ns=500_000)
    assert (t.context.lo_ns, t.context.hi_ns) == (4_899_799_660, 4_900_299_660)
    assert [lane.name for lane in t.lanes] == ["python3", "pt_autograd_0"]  # the main thread: NVTX backward
    assert parse_around("finding:1") == ("finding", 1) and parse_around(" 42 ") == ("time", 42)
    for bad in ("finding:x", "stall:-1", "soon", str(1 << 63)):
        with pytest.raises(BadOption):
            parse_around(bad)
    # 0 is parsed, and refused where the count is known, saying how findings are numbered.
    assert parse_around("finding:0") == ("finding", 0) and parse_around("stall:0") == ("stall", 0)
    with pytest.raises(BadOption, match=r"^--around finding:2: the export has 1 finding\(s\) \(finding:1\)$"):
        timeline(observe, finding=2)
    with pytest.raises(BadOption, match=r"^--around finding:0: findings are numbered from 1, as analyze prints"):
        timeline(observe, finding=0)


# --- the bytes -------------------------------------------------------------------------------------


RENDER = """
import hashlib, sys
import nsysaudit
from nsysaudit.render import pictures
from nsysaudit.reports.timeline import timeline
d = sys.argv[1]
t = timeline(nsysaudit.analyze(d + "/observe.sqlite", telemetry=d + "/observe.telemetry.jsonl"))
for fmt, data in sorted(pictures.render([t]).items()):
    print(fmt, hashlib.sha256(data).hexdigest())
"""


def test_pictures_are_the_same_bytes_every_time_in_any_process(torch_pair, tmp_path: Path) -> None:
    t = timeline(torch_pair[0])
    first, second = pictures.render([t]), pictures.render([t])
    assert first == second and set(first) == {"svg", "png"}
    assert first["png"].startswith(b"\x89PNG\r\n\x1a\n") and b"<dc:date>" not in first["svg"]
    here = sorted(f"{fmt} {hashlib.sha256(data).hexdigest()}" for fmt, data in first.items())
    # Another interpreter, another hash seed, and a matplotlibrc that changes everything it can.
    rc = tmp_path / "matplotlibrc"
    rc.write_text("font.size: 20\nfont.family: serif\nsvg.fonttype: path\nsvg.hashsalt: other\nlines.linewidth: 5\n"
                  "axes.facecolor: yellow\nsavefig.dpi: 300\nfigure.figsize: 3, 3\n")
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "MATPLOTLIBRC": str(rc), "MPLBACKEND": "svg"}
        out = subprocess.run([sys.executable, "-c", RENDER, str(TORCH)], capture_output=True, text=True, env=env,
                             check=True)
        assert out.stdout.split("\n")[:-1] == here, out.stderr


def test_trace_text_is_escaped_in_the_picture(make_export) -> None:
    for name, text in sorted({**HOSTILE_TEXT, "math": "$x^2$ \\frac{a}{b}"}.items()):
        result = nsysaudit.analyze(make_export(hostile_export(text), f"{name}.sqlite"))
        svg = pictures.render([timeline(result)], ("svg",))["svg"].decode("utf-8")
        parsed = texts(ET.fromstring(svg))  # always well-formed XML, whatever the thread is called
        assert not UNSAFE_SHOWN.search("".join(parsed)), name
        if name in ("html", "math", "markup"):
            assert any(text in t for t in parsed), name  # shown as written: no markup, no mathtext
        if name == "bidi":
            assert any("abc\\u202eexe.txt" in t for t in parsed)
        assert "<script" not in svg


# --- the plot command ------------------------------------------------------------------------------


def plot(capsys, *args: object) -> tuple[int, str, str]:
    code = main(["plot", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_plot_writes_the_picture_and_says_what_it_chose(capsys, tmp_path: Path) -> None:
    for name in ("observe.svg", "observe.png"):
        out = tmp_path / name
        code, stdout, err = plot(capsys, TORCH / "observe.sqlite", "--telemetry", TORCH / "observe.telemetry.jsonl",
                                 "--out", out)
        assert code == 0, err
        data = out.read_bytes()
        assert stdout.splitlines()[0] == f"timeline: {out} ({len(data):,} bytes)"
        assert "  focus: the first finding, nested_alloc_failure: cudaMalloc returned 2" in stdout
        assert "  0 ms = backward_start (telemetry line 5" in stdout
        assert data.startswith(b"\x89PNG") if name.endswith(".png") else b"pt_autograd_0" in data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["observe.png", "observe.svg"]  # no temporary file left


def test_plot_around_a_time_with_a_window(capsys, tmp_path: Path) -> None:
    out = tmp_path / "t.svg"
    code, stdout, err = plot(capsys, TORCH / "observe.sqlite", "--around", "4900049660", "--window", "0.5",
                             "--out", out)
    assert code == 0, err
    assert "  window: 4,899,799,660 ns to 4,900,299,660 ns (0.5 ms (--window), centred on the focus)" in stdout
    shown = texts(ET.fromstring(out.read_bytes()))
    assert "cudaMalloc returned 2 (cudaErrorMemoryAllocation)" in shown and "pt_autograd_0" in shown
    assert "0" in shown and "µs from the focus (trace 4,900,049,660 ns; no telemetry)" in shown


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--around", "finding:2"], "--around finding:2: the export has 1 finding(s) (finding:1)"),
        (["--around", "finding:0"], "--around finding:0: findings are numbered from 1, as analyze prints them "
                                    "(findings[].number in --json); the export has 1 finding(s) (finding:1)"),
        (["--around", "stall:0"], "--around stall:0: host stalls are numbered from 1, the longest first; the export "
                                  "has 2 call(s) that blocked the host at least 1 ms"),
        (["--around", "later"], "--around 'later': give finding:N"),
        (["--window", "0"], "--window must be more than 0 ms"),
    ],
)
def test_plot_refuses_what_it_cannot_draw_in_one_line(capsys, tmp_path: Path, args: list[str], problem: str) -> None:
    code, _, err = plot(capsys, TORCH / "observe.sqlite", *args, "--out", tmp_path / "x.svg")
    assert code == 2 and err == f"nsysaudit: error: {problem}" + err.split(problem, 1)[1] and err.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_plot_on_unusable_input_writes_nothing(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not sqlite at all" * 100)
    code, stdout, err = plot(capsys, bad, "--out", tmp_path / "x.svg")
    assert code == 2 and err.startswith(f"nsysaudit: error: {bad}: ") and err.count("\n") == 1 and not stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.sqlite"]


@pytest.mark.parametrize("where", ["missing", "file", "suffix", "folder"])
def test_plot_out_that_cannot_be_written_is_one_line(capsys, tmp_path: Path, where: str) -> None:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "a-folder.svg").mkdir()
    out = {"missing": tmp_path / "nope" / "x.svg", "file": tmp_path / "a-file" / "x.svg",
           "suffix": tmp_path / "x.pdf", "folder": tmp_path / "a-folder.svg"}[where]
    code, _, err = plot(capsys, TORCH / "observe.sqlite", "--out", out)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert ("name a .svg or .png file" if where == "suffix" else "cannot write the picture here") in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "a-folder.svg"]


def test_plot_replaces_a_picture_but_never_another_file(capsys, tmp_path: Path) -> None:
    precious = tmp_path / "evidence.png"
    precious.write_bytes(b"SQLite format 3\x00 not a picture")
    code = main(["plot", str(TORCH / "observe.sqlite"), "--out", str(precious)])
    _, err = capsys.readouterr()
    assert code == 2 and "is not an SVG or PNG picture, so it is not replaced" in err and err.count("\n") == 1, err
    assert precious.read_bytes() == b"SQLite format 3\x00 not a picture"
    picture = tmp_path / "t.svg"
    for _ in range(2):  # the second run replaces the picture the first one wrote
        assert main(["plot", str(TORCH / "observe.sqlite"), "--out", str(picture)]) == 0
    capsys.readouterr()
    assert picture.read_bytes().lstrip().startswith(b"<?xml")


def test_plot_into_a_read_only_folder_is_one_line(read_only_folder, tmp_path: Path) -> None:
    locked, prefix = read_only_folder
    proc = unprivileged(prefix, "plot", TORCH / "observe.sqlite", "--out", locked / "x.svg", cache=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"nsysaudit: error: {locked / 'x.svg'}: cannot write the picture here: {locked} is not " \
                          "writable (nothing was written)\n"
    assert not list(locked.iterdir())


# --- damaged or odd exports still give a picture -----------------------------------------------------

INT64_MAX = (1 << 63) - 1


def odd_exports() -> dict[str, Export]:
    wide = observe_nested_failure()
    wide.lib_calls = [LibCall("cublasCreate_v2", -(1 << 62), INT64_MAX, PID, WORKER)]
    wide.calls.append(Call("cudaMalloc_v3020", INT64_MAX - 10, INT64_MAX, PID, WORKER, ret=2, corr=40))
    open_end = observe_nested_failure()
    open_end.lib_calls = [LibCall("cublasCreate_v2", 9_000, None, PID, WORKER)]
    instant = observe_nested_failure()
    instant.calls = [Call("cudaMalloc_v3020", 9_000, 9_000, PID, WORKER, ret=2, corr=22)]
    instant.lib_calls = [LibCall("cublasCreate_v2", 9_000, 9_000, PID, WORKER)]
    nothing = Export(calls=[], lib_calls=[], thread_names={}, processes={})
    return {"int64-wide": wide, "no-end": open_end, "zero-length": instant, "empty": nothing}


@pytest.mark.parametrize("name", sorted(odd_exports()))
def test_an_odd_export_still_gets_a_picture_and_a_sealed_folder(make_export, tmp_path: Path, name: str) -> None:
    path = make_export(odd_exports()[name], f"{name}.sqlite")
    sealed = seal.seal_analysis(path, tmp_path / "sealed")
    svg = ET.fromstring((sealed.dir / "timeline.svg").read_bytes())
    assert texts(svg)
    seal.verify(sealed.dir, [path])  # and made again byte for byte
    if name == "empty":
        assert "no thread has anything in this window" in texts(svg)


def test_a_picture_with_nothing_to_focus_on_says_so_and_shows_the_whole_capture() -> None:
    """No finding, no library call, no failed call (the event capture's release arm): the picture says
    there is nothing to focus on and spans the capture, never a "focus's library call" that is not there."""
    result = nsysaudit.analyze(H200_2025 / "event" / "release.sqlite")
    t = timeline(result)
    cap = result.coverage["capture"]
    assert t.whole_capture and t.context.lo_ns < cap["start_ns"] < cap["stop_ns"] < t.context.hi_ns
    svg = ET.fromstring(pictures.render([t], ("svg",))["svg"])
    shown = " ".join(texts(svg))
    assert "nothing to focus on (nothing failed, no library call): the whole capture" in shown
    assert "focus's library call" not in shown and "finding" not in shown
    assert "at the end of the capture: live" in shown
