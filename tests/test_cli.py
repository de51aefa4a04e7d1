"""The CLI shell: exit codes, one-line errors, JSON contract, help on every command, layering."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import H200, run
from scenarios import observe_nested_failure

from nsysaudit.cli import cli

PACKAGE = Path(__file__).parent.parent / "nsysaudit"

CONTRACT = {
    "input": {"path", "sha256", "kind", "nsys_version", "schema_version"},
    "census": {"cuda_api_calls", "nonzero_returns", "by_return"},
    "by_return": {"api", "return_code", "return_name", "count"},
    "library_calls": {"api", "pid", "tid", "thread_name", "start_ns", "end_ns", "source", "coverage", "children"},
    "children": {"api", "return_code", "correlation_id", "start_ns", "end_ns", "bytes"},
    "findings": {"kind", "api", "return_code", "return_name", "correlation_id", "pid", "tid", "thread_name",
                 "start_ns", "end_ns", "requested_bytes", "enclosing"},
    "enclosing": {"api", "start_ns", "end_ns"},
}


def test_json_contract_keys(capsys, make_export) -> None:
    code, out, err = run(capsys, "analyze", "--json", str(make_export(observe_nested_failure())))
    assert code == 0, err
    d = json.loads(out)
    for key in ("input", "census", "library_calls", "findings", "coverage", "verdict"):
        assert key in d
    assert CONTRACT["input"] <= d["input"].keys()
    assert CONTRACT["census"] <= d["census"].keys()
    assert CONTRACT["by_return"] <= d["census"]["by_return"][0].keys()
    lib = d["library_calls"][0]
    assert CONTRACT["library_calls"] <= lib.keys()
    assert CONTRACT["children"] <= lib["children"][0].keys()
    f = d["findings"][0]
    assert CONTRACT["findings"] <= f.keys()
    assert CONTRACT["enclosing"] <= f["enclosing"].keys()
    assert {"by_source", "censored"} <= d["coverage"].keys()
    assert d["verdict"] == "failure_found"


def test_json_is_identical_across_runs(capsys) -> None:
    _, a, _ = run(capsys, "analyze", "--json", str(H200 / "observe.sqlite"))
    _, b, _ = run(capsys, "analyze", "--json", str(H200 / "observe.sqlite"))
    assert a == b


def test_terminal_report_on_real_capture(capsys) -> None:
    code, out, _ = run(capsys, "analyze", str(H200 / "observe.sqlite"))
    assert code == 0
    assert out.split("\n\n")[1].startswith("inconclusive: 1 of 1 library call(s) are censored")
    assert "cudaErrorMemoryAllocation" in out
    assert "censored: cublasCreate_v2" in out and "cuda_api_trace_ends_inside" in out
    code, out, _ = run(capsys, "analyze", str(H200 / "observe.sqlite"), "--details")
    assert code == 0 and "Verdict: inconclusive" in out


NOT_BUILT = "not built (nsysaudit was installed without a C compiler or SQLite's header)"


@pytest.mark.parametrize(
    "case,line",
    [
        ("native", "  engine native, SQLite {v}"),
        ("off", "  engine sqlite3, SQLite {v} (native engine turned off)"),
        ("not built", "  engine sqlite3, SQLite {v} (native engine not built)"),
    ],
)
def test_the_report_says_once_which_engine_read_the_input(capsys, monkeypatch, case: str, line: str) -> None:
    """One line of the header, and three keys of ``input``: the engine, its SQLite, and why the
    native engine did not read the input (a plain install without a compiler says so here)."""
    import sqlite3

    from nsysaudit.read import native

    if case == "native" and native.installed() is not None:
        pytest.skip(f"the native extension is {native.installed()}")
    monkeypatch.setenv("NSYSAUDIT_NATIVE", "0" if case == "off" else "1")
    if case == "not built":
        monkeypatch.setattr(native, "_built", lambda: (None, NOT_BUILT))
    code, out, err = run(capsys, "analyze", str(H200 / "observe.sqlite"))
    assert code == 0 and err == ""
    assert [x for x in out.splitlines() if "engine" in x] == [line.format(v=sqlite3.sqlite_version)]
    code, out, _ = run(capsys, "analyze", "--json", str(H200 / "observe.sqlite"))
    inp = json.loads(out)["input"]
    why = {"native": None, "off": "turned off (NSYSAUDIT_NATIVE=0)", "not built": NOT_BUILT}[case]
    assert (inp["engine"], inp["sqlite_version"], inp["native_unavailable"]) == (
        "native" if case == "native" else "sqlite3", sqlite3.sqlite_version, why,
    )  # fmt: skip


@pytest.mark.parametrize(
    "content,problem",
    [
        (b"", "empty file"),
        (bytes(range(256)) * 40, "not a SQLite database"),
    ],
)
def test_unusable_input_one_line_exit_2(capsys, tmp_path: Path, content: bytes, problem: str) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(content)
    code, out, err = run(capsys, "analyze", str(bad))
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and str(bad) in err and problem in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.sqlite"]


def test_truncated_export_exit_2(capsys, tmp_path: Path) -> None:
    data = (H200 / "observe.sqlite").read_bytes()
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(data[: len(data) // 2])
    code, _, err = run(capsys, "analyze", str(bad))
    assert code == 2 and "truncated" in err and err.count("\n") == 1


def test_sqlite_that_is_not_an_nsys_export_exit_2(capsys, tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    code, _, err = run(capsys, "analyze", str(other))
    assert code == 2 and "not an Nsight Systems export" in err


def test_missing_file_exit_2(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "analyze", str(tmp_path / "nope.sqlite"))
    assert code == 2 and "no such file" in err


def test_console_script_runs_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nsysaudit", "analyze", "--json", str(H200 / "release.sqlite")],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "inconclusive"


def test_every_command_has_help() -> None:
    def walk(group: click.Group, prefix: list[str]) -> None:
        for name, command in group.commands.items():
            assert command.help, f"{' '.join([*prefix, name])} has no help"
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])

    walk(cli, [])


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_only_the_cli_imports_click_and_only_rendering_imports_rich() -> None:
    for path in PACKAGE.rglob("*.py"):
        imported = _imports(path)
        if path.name != "cli.py":
            assert "click" not in imported, f"{path} imports click"
        if path.name not in ("cli.py", "render.py") and path.parent.name != "render":
            assert "rich" not in imported, f"{path} imports rich"


def test_progress_bar_draws_steps_on_a_terminal_console() -> None:
    import io

    from rich.console import Console

    import nsysaudit
    from nsysaudit.render.terminal import TerminalProgress

    buf = io.StringIO()
    bar = TerminalProgress(Console(file=buf, force_terminal=True, width=100))
    result = nsysaudit.analyze(H200 / "observe.sqlite", progress=bar)
    assert result.census["cuda_api_calls"] == 925
    assert "scanning 925 CUDA API rows" in buf.getvalue()


def test_no_progress_output_when_not_a_terminal(capsys) -> None:
    # Under pytest stdout is not a terminal: the report must be exactly what a pipe gets.
    code, out, err = run(capsys, "analyze", str(H200 / "observe.sqlite"))
    assert code == 0 and err == ""
    assert "scanning" not in out


@pytest.mark.parametrize(
    "args",
    [
        ["analyze", "{dir}"],
        ["analyze", str(H200 / "observe.sqlite"), "--telemetry", "{dir}"],
        ["compare", "{dir}", str(H200 / "release.sqlite"), "--out", "{tmp}/cmp"],
    ],
)
def test_a_folder_given_as_an_input_file_is_a_one_line_error(capsys, tmp_path: Path, args: list[str]) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    code, _, err = run(capsys, *[a.format(dir=folder, tmp=tmp_path) for a in args])
    assert code == 2
    assert err.count("\n") == 1 and str(folder) in err and "not a regular file" in err


def test_library_domain_adds_to_cublas_and_cudnn(capsys, make_export, tmp_path: Path) -> None:
    """On the real capture an extra domain must not drop the censored cublasCreate_v2."""
    code, out, err = run(capsys, "analyze", "--json", str(H200 / "observe.sqlite"), "--library-domain", "X")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["verdict"] == "inconclusive"
    assert [lc["api"] for lc in doc["library_calls"]] == ["cublasCreate_v2"]
    # A call in the added domain is found beside the cuBLAS one.
    from builder import LibCall

    spec = observe_nested_failure()
    spec.lib_calls.append(LibCall("myGemm", 30_000, 31_000, 611, 611, library="myLib"))
    path = make_export(spec)
    code, out, err = run(capsys, "analyze", "--json", str(path), "--library-domain", "myLib")
    assert code == 0, err
    assert sorted(lc["api"] for lc in json.loads(out)["library_calls"]) == ["cublasCreate_v2", "myGemm"]
    # Sealed: the command records only the added domain and re-runs to the same report.
    sealed = tmp_path / "sealed"
    code, _, err = run(capsys, "analyze", str(path), "--library-domain", "myLib", "--out", str(sealed))
    assert code == 0, err
    meta = json.loads((sealed / "metadata.json").read_text())
    assert meta["command"].count("--library-domain") == 1 and "myLib" in meta["command"]
    assert json.loads((sealed / "report.json").read_text())["options"]["library_domains"] == [
        "cuBLAS", "cuDNN", "NCCL", "myLib"
    ]
    code, _, err = run(capsys, "verify", str(sealed), "--inputs", str(path))
    assert code == 0, err


def test_a_sealed_report_keeps_the_default_domains(tmp_path: Path) -> None:
    from nsysaudit import seal
    from nsysaudit.core.errors import BadOption

    with pytest.raises(BadOption, match="leave out cuBLAS"):
        seal.seal_analysis(H200 / "observe.sqlite", tmp_path / "out", library_domains=["cuDNN", "X"])
    assert not (tmp_path / "out").exists()


def test_bare_nsysaudit_prints_its_help_on_stdout_and_exits_0(capsys) -> None:
    code, out, err = run(capsys)
    assert (code, err) == (0, "")
    assert out.startswith("Usage: nsysaudit [OPTIONS] COMMAND [ARGS]...") and "\\n" not in out.replace("\n", "")
    assert "nsysaudit analyze run.nsys-rep" in out


def test_every_command_has_an_uncut_summary_and_an_example(capsys) -> None:
    from click.testing import CliRunner

    from nsysaudit.cli import cli

    listing = CliRunner().invoke(cli, ["--help"], terminal_width=80).output
    for name, command in cli.commands.items():
        summary = command.get_short_help_str(limit=200)
        assert not summary.endswith("...") and re.search(rf"\n  {name} +{re.escape(summary)}\n", listing), name
        text = CliRunner().invoke(cli, [name, "--help"], terminal_width=100, obj={"debug": False}).output
        assert "Example" in text and f"nsysaudit {name} " in text.split("Example", 1)[1], name


def test_a_report_without_nsys_says_what_to_install(capsys, tmp_path: Path, monkeypatch) -> None:
    report = tmp_path / "run.qdrep"
    report.write_bytes(b"not really a report")
    monkeypatch.delenv("NSYSAUDIT_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nsys on PATH
    code, out, err = run(capsys, "analyze", str(report))
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "is an Nsight Systems report (.qdrep) and no nsys CLI was found" in err
    assert "install Nsight Systems" in err and "--nsys PATH" in err and "nsys export --type sqlite" in err
