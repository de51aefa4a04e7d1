"""What a sealed report is made from and how: the inputs, the options, the payload files, the command
that makes the folder again, and the metadata ``verify`` re-runs it from."""

from __future__ import annotations

import os
import platform
import sqlite3
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import NotRequired, TypedDict

from nsysaudit.analysis.joins import DEFAULT_MAX_PAIRS
from nsysaudit.core.digests import sha256_file
from nsysaudit.core.errors import BadOption, CheckFailed, UnusableInput
from nsysaudit.core.paths import basename, scrub_paths
from nsysaudit.core.progress import Progress
from nsysaudit.core.shapes import JSON, JSONObject
from nsysaudit.core.text import escape
from nsysaudit.read.inputs import input_kind
from nsysaudit.read.telemetry import CLOCK_KINDS, ClockKind, TelemetryOptions, parse_anchor
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS
from nsysaudit.render.html import report_html
from nsysaudit.render.json import indented
from nsysaudit.render.markdown import MarkdownReport, analysis_report, comparison_report
from nsysaudit.reports.analysis import AnalysisResult, input_entry
from nsysaudit.reports.compare import compare_results, result_paths
from nsysaudit.reports.documents import (
    SCHEMA_VERSION,
    AnalysisDocument,
    ComparisonDocument,
    Input,
    SealedAnalysisDocument,
    SealedInput,
    SealedOptions,
    SealedSnapshotOptions,
    SealedTelemetryOptions,
    TelemetryFileRecord,
)
from nsysaudit.reports.timeline import Timeline, aligned_timelines, timeline
from nsysaudit.seal.layout import (
    ANALYSIS_FORMAT,
    INPUTS,
    METADATA,
    PICTURES,
    REPORT_HTML,
    REPORT_JSON,
    REPORT_MD,
    SEAL_FORMAT,
    TAG_FILES,
    TAGMANIFEST,
    ReportKind,
    checksum_line,
    picture_name,
)
from nsysaudit.session import analyze


@dataclass(frozen=True)
class InputFile:
    """One input of a sealed report: its role, the path it was given by, and its digest."""

    role: str
    path: Path
    sha256: str
    size_bytes: int
    kind: str

    @property
    def name(self) -> str:
        return basename(str(self.path))


def sealed_input(f: InputFile) -> SealedInput:
    """An input of the sealed documents' ``inputs``: its role, name, digest, size and kind."""
    return {"role": f.role, "name": f.name, "sha256": f.sha256, "size_bytes": f.size_bytes, "kind": f.kind}


def input_file(role: str, path: str | os.PathLike[str], kind: str | None = None) -> InputFile:
    """Hash one input; a missing or unreadable file is unusable input (exit 2)."""
    p = Path(path)
    if not p.is_file():
        raise UnusableInput(p, "no such file" if not p.exists() else "not a regular file")
    try:
        digest = sha256_file(p)
    except OSError as exc:
        raise UnusableInput(p, f"cannot read: {exc.strerror}") from None
    return InputFile(role, p, digest, p.stat().st_size, kind or input_kind(p))


@dataclass(frozen=True)
class Recipe:
    """What a sealed report was made from and how: enough for ``verify`` to make it again.

    ``inputs`` maps roles (``observe``, ``release``, ``observe_telemetry``, ``release_telemetry``
    for ``compare``; ``arm``, ``telemetry`` for ``analyze``; memory snapshots ``snapshot_1``,
    ``snapshot_2``, ... and ``observe_snapshot_1``, ``release_snapshot_1``, ..., in the order given)
    to paths.
    """

    kind: ReportKind
    inputs: tuple[tuple[str, str], ...]
    library_domains: tuple[str, ...] = DEFAULT_LIBRARY_DOMAINS
    telemetry_options: TelemetryOptions | None = None
    labels: tuple[str, str] | None = None  # compare --labels (None: observe, release)

    def path(self, role: str) -> str | None:
        return dict(self.inputs).get(role)

    @property
    def has_telemetry(self) -> bool:
        return any(role.endswith("telemetry") for role, _ in self.inputs)

    def snapshots(self, prefix: str = "") -> list[str]:
        """The memory snapshots of an arm (``prefix``: ``observe_``, ``release_``; none for ``analyze``),
        in the order given."""
        found = [(int(role[len(prefix) + len("snapshot_"):]), path) for role, path in self.inputs
                 if role.startswith(f"{prefix}snapshot_") and role[len(prefix) + len("snapshot_"):].isdigit()]
        return [path for _, path in sorted(found)]

    @property
    def has_snapshots(self) -> bool:
        return any("snapshot_" in role for role, _ in self.inputs)

    def options(self) -> SealedOptions:
        """The options that change the analysis, as ``report.json`` (``options``) and metadata.json
        record them (telemetry options only when telemetry was given, the snapshots' only when
        snapshots were)."""
        tel = self.telemetry_options or TelemetryOptions()
        out: SealedOptions = {
            "library_domains": list(self.library_domains),
            "max_pairs": DEFAULT_MAX_PAIRS,  # a sealed analysis always runs with the default limit
            "telemetry": telemetry_options_dict(tel) if self.has_telemetry else None,
        }
        if self.labels is not None:
            out["labels"] = list(self.labels)
        if self.has_snapshots:
            out["snapshots"] = {"tolerance_ns": tel.tolerance_ns}
        return out


def snapshot_roles(paths: Sequence[str | os.PathLike[str]], prefix: str = "") -> list[tuple[str, str]]:
    """The recipe's roles of an arm's memory snapshots: ``{prefix}snapshot_1``, ... in the order given."""
    return [(f"{prefix}snapshot_{i}", os.fspath(p)) for i, p in enumerate(paths, start=1)]


def snapshot_options_from(recorded: JSON) -> int | None:
    """The snapshots' tolerance a metadata.json recorded (None: none recorded); anything but what
    :meth:`Recipe.options` writes is a failed check."""
    if recorded is None:
        return None
    tolerance = recorded.get("tolerance_ns") if isinstance(recorded, dict) else None
    if type(tolerance) is not int or not 0 <= tolerance <= (1 << 63) - 1:
        raise CheckFailed(f"{METADATA}: unreadable snapshot options (tolerance_ns is not a non-negative integer)")
    return tolerance


def telemetry_options_dict(options: TelemetryOptions) -> SealedTelemetryOptions:
    return {
        "event_key": options.event_key,
        "clock": [[kind, name] for kind, name in options.clock],
        "lenient": options.lenient,
        "anchors": [str(a) for a in options.anchors],
        "tolerance_ns": options.tolerance_ns,
    }


def telemetry_options_from(recorded: JSONObject | None) -> TelemetryOptions | None:
    """The :class:`TelemetryOptions` a metadata.json recorded (None: none recorded).

    Anything but the exact types :func:`telemetry_options_dict` writes is a failed check.
    """
    if recorded is None:
        return None
    try:
        clock, anchors, tolerance = recorded["clock"], recorded["anchors"], recorded["tolerance_ns"]
        event_key = recorded["event_key"]
        lenient = recorded["lenient"] if isinstance(event_key, str) else None  # read in this order: same KeyError
        texts = [a for a in anchors if isinstance(a, str)] if isinstance(anchors, list) else []
        pairs = [p for p in map(_clock_pair, clock) if p is not None] if isinstance(clock, list) else []
        if not (
            isinstance(event_key, str)
            and isinstance(lenient, bool)
            and type(tolerance) is int
            and isinstance(anchors, list)
            and len(texts) == len(anchors)
            and isinstance(clock, list)
            and len(pairs) == len(clock)
        ):
            raise TypeError("a value of the wrong type")
        return TelemetryOptions(
            event_key=event_key,
            clock=tuple(pairs),
            lenient=lenient,
            anchors=tuple(parse_anchor(a) for a in texts),
            tolerance_ns=tolerance,
        )
    except (KeyError, TypeError, BadOption) as exc:
        raise CheckFailed(f"{METADATA}: unreadable telemetry options ({exc})") from None


def _clock_pair(value: JSON) -> tuple[ClockKind, str] | None:
    """A recorded ``[kind, field]`` clock as :class:`TelemetryOptions` holds it; None if it is not one."""
    if not (isinstance(value, list) and len(value) == 2 and isinstance(value[1], str)):
        return None
    kind = next((k for k in CLOCK_KINDS if k == value[0]), None)
    return None if kind is None else (kind, value[1])


@dataclass
class Built:
    """A report made from a recipe: the document, the payload files' bytes, the inputs."""

    recipe: Recipe
    document: SealedAnalysisDocument | ComparisonDocument
    files: Payload
    inputs: list[InputFile]
    results: dict[str, AnalysisResult] = field(default_factory=dict)


def _analyze(
    path: str,
    telemetry: str | None,
    recipe: Recipe,
    nsys_path: str | os.PathLike[str] | None,
    progress: Progress | None = None,
    snapshots: Sequence[str] = (),
) -> AnalysisResult:
    return analyze(
        path,
        nsys_path=nsys_path,
        library_domains=recipe.library_domains,
        telemetry=telemetry,
        telemetry_options=recipe.telemetry_options if telemetry is not None or snapshots else None,
        progress=progress,
        snapshots=snapshots,
    )


def _snapshot_inputs(roles: Sequence[str], result: AnalysisResult) -> list[InputFile]:
    """The snapshot inputs with the digest and size of the bytes the analysis read (by role, in order)."""
    joined = result.analysis.allocator.joined if result.analysis.allocator is not None else ()
    return [InputFile(role, Path(j.snapshot.path), j.snapshot.sha256, j.snapshot.size_bytes, "snapshot")
            for role, j in zip(roles, joined, strict=True)]


def build(
    recipe: Recipe, *, nsys_path: str | os.PathLike[str] | None = None, progress: Progress | None = None
) -> Built:
    """Analyze the recipe's inputs and make the payload files (not written anywhere)."""
    if recipe.kind == "compare":
        return _build_compare(recipe, nsys_path, progress)
    return _build_analyze(recipe, nsys_path, progress)


def _build_compare(recipe: Recipe, nsys_path: str | os.PathLike[str] | None, progress: Progress | None = None) -> Built:
    results: dict[str, AnalysisResult] = {}
    inputs: list[InputFile] = []
    telemetry_files: dict[str, TelemetryFileRecord | None] = {}
    for arm in ("observe", "release"):
        path = recipe.path(arm)
        if path is None:
            raise BadOption(f"compare needs an {arm} input")
        telemetry = recipe.path(f"{arm}_telemetry")
        snapshots = recipe.snapshots(f"{arm}_")
        results[arm] = _analyze(path, telemetry, recipe, nsys_path, progress, snapshots)
        info = results[arm].input
        inputs.append(InputFile(arm, Path(path), info.sha256, info.size_bytes, info.kind))
        inputs += _snapshot_inputs([r for r, _ in snapshot_roles(snapshots, f"{arm}_")], results[arm])
        telemetry_files[arm] = None
        if telemetry is not None:
            t = _telemetry_input(f"{arm}_telemetry", telemetry, results[arm])
            inputs.append(t)
            telemetry_files[arm] = {"name": t.name, "sha256": t.sha256, "size_bytes": t.size_bytes}
    comparison = compare_results(results["observe"], results["release"], telemetry_files=telemetry_files,
                                 labels=recipe.labels)
    doc = comparison.to_dict()
    doc["options"] = recipe.options()
    arms = results["observe"], results["release"]
    files = _payload(doc, comparison_report(doc), inputs, lambda: aligned_timelines(*arms))
    return Built(recipe, doc, files, _ordered(inputs), results)


def _telemetry_input(role: str, path: str, result: AnalysisResult) -> InputFile:
    """The telemetry input with the digest and size of the bytes the analysis read."""
    if result.alignment is None:  # analyze() always aligns the telemetry it is given
        return input_file(role, path, "telemetry")
    log = result.alignment.log
    return InputFile(role, Path(path), log.sha256, log.size_bytes, "telemetry")


def sealed_analysis_document(
    result: AnalysisResult, telemetry: InputFile | None = None, snapshots: Sequence[InputFile] = ()
) -> SealedAnalysisDocument:
    """The sealed form (:func:`sealed_form`) of ``result``'s document."""
    return sealed_form(result.to_dict(), result_paths(result),
                       sealed_input(telemetry) if telemetry is not None else None, [sealed_input(s) for s in snapshots])


def sealed_form(
    document: AnalysisDocument, paths: Mapping[str, str], telemetry: SealedInput | None = None,
    snapshots: Sequence[SealedInput] = (),
) -> SealedAnalysisDocument:
    """The ``analyze --json`` document (``analyze --json`` prints it with or without ``--out``) made
    fit for sealing: ``report.json``. ``paths``: each path the document may name, to its basename.

    Same keys as ``analyze --json`` except: paths (``input.path``, ``telemetry.path``, in
    messages) are basenames; ``tool`` (the tool
    version), ``input.export`` (the .nsys-rep's export digest, cache state and nsys) and the
    engine that read it (``input.engine``, ``input.sqlite_version``, ``input.native_unavailable``)
    move to ``metadata.json``, because they depend on the machine and the install, not on the
    evidence (every engine gives the same payload; ``verify`` re-runs it on whatever is installed).
    Added: ``format``, ``kind`` and ``inputs`` (and, by :func:`build`, ``options``).
    """
    scrubbed: AnalysisDocument = scrub_paths(document, paths)  # the same document, its paths basenames
    inp: Input = scrubbed["input"].copy()
    inp.pop("export", None)
    inp.pop("engine", None)  # ENGINE_KEYS
    inp.pop("sqlite_version", None)
    inp.pop("native_unavailable", None)
    inputs: list[SealedInput] = [
        {
            "role": "arm",
            "name": inp["path"],
            "sha256": inp["sha256"],
            "size_bytes": inp["size_bytes"],
            "kind": inp["kind"],
        }
    ]
    if telemetry is not None:
        inputs.append(telemetry)
    inputs += snapshots
    sealed: SealedAnalysisDocument = {  # AnalysisKeys (tool left out), then what the seal adds
        "input": inp,
        "census": scrubbed["census"],
        "findings": scrubbed["findings"],
        "failed_calls": scrubbed["failed_calls"],
        "coverage": scrubbed["coverage"],
        "processes": scrubbed["processes"],
        "verdict": scrubbed["verdict"],
        "verdict_reasons": scrubbed["verdict_reasons"],
        "warnings": scrubbed["warnings"],
        "limits": scrubbed["limits"],
        "memory": scrubbed["memory"],
        "answer": scrubbed["answer"],
        "library_calls": scrubbed["library_calls"],
        "devices": scrubbed["devices"],
        "launches": scrubbed["launches"],
        "ranks": scrubbed["ranks"],
        "stalls": scrubbed["stalls"],
        "format": ANALYSIS_FORMAT,
        "kind": "analysis",
        "inputs": inputs,
        "schema": {"kind": "sealed-analysis", "version": SCHEMA_VERSION},
    }
    if "alignment" in scrubbed:
        sealed["alignment"] = scrubbed["alignment"]
    if "telemetry" in scrubbed:
        sealed["telemetry"] = scrubbed["telemetry"]
    if "allocator" in scrubbed:
        sealed["allocator"] = scrubbed["allocator"]
    return sealed


def _build_analyze(recipe: Recipe, nsys_path: str | os.PathLike[str] | None, progress: Progress | None = None) -> Built:
    path = recipe.path("arm")
    if path is None:
        raise BadOption("analyze needs an input")
    telemetry = recipe.path("telemetry")
    snapshots = recipe.snapshots()
    result = _analyze(path, telemetry, recipe, nsys_path, progress, snapshots)
    info = result.input
    inputs = [InputFile("arm", Path(path), info.sha256, info.size_bytes, info.kind)]
    tel = _telemetry_input("telemetry", telemetry, result) if telemetry is not None else None
    if tel is not None:
        inputs.append(tel)
    snaps = _snapshot_inputs([r for r, _ in snapshot_roles(snapshots)], result)
    inputs += snaps
    doc = sealed_analysis_document(result, tel, snaps)
    doc["options"] = recipe.options()
    files = _payload(doc, analysis_report(doc), inputs, lambda: (timeline(result),))
    return Built(recipe, doc, files, inputs, {"arm": result})


_ROLE_ORDER = ("observe", "release", "observe_telemetry", "release_telemetry", "arm", "telemetry")


def _ordered(inputs: list[InputFile]) -> list[InputFile]:
    return sorted(inputs, key=lambda i: _ROLE_ORDER.index(i.role) if i.role in _ROLE_ORDER else len(_ROLE_ORDER))


class Payload(Mapping[str, bytes]):
    """The payload files' bytes by name (in :func:`~nsysaudit.seal.layout.payload`'s order): the
    facts made at once, the pictures and report.html (which holds them) drawn on first use, once.
    ``verify --inputs`` compares the facts first, so a re-run whose report differs fails before
    anything is drawn (half of a small report's re-run is the drawing)."""

    def __init__(self, facts: dict[str, bytes], drawn: tuple[str, ...], draw: Callable[[], dict[str, bytes]]) -> None:
        self._facts, self._names, self._draw = facts, drawn, draw
        self._drawn: dict[str, bytes] | None = None

    def __getitem__(self, name: str) -> bytes:
        if name in self._facts:
            return self._facts[name]
        if name not in self._names:
            raise KeyError(name)
        if self._drawn is None:
            self._drawn = self._draw()
        return self._drawn[name]

    def __iter__(self) -> Iterator[str]:
        return iter((*self._facts, *self._names))

    def __len__(self) -> int:
        return len(self._facts) + len(self._names)


def _payload(
    doc: SealedAnalysisDocument | ComparisonDocument,
    markdown: MarkdownReport,
    inputs: list[InputFile],
    timelines: Callable[[], Sequence[Timeline]],
) -> Payload:
    """The payload of ``doc``: its facts now, its ``timelines``' pictures and report.html when first read."""
    lines = b"".join(checksum_line(i.sha256, i.name) for i in _ordered(inputs))
    facts = {INPUTS: lines, REPORT_JSON: indented(doc), REPORT_MD: markdown.text.encode("utf-8")}  # payload()'s order
    kind: ReportKind = "compare" if doc["kind"] == "comparison" else "analyze"

    def draw() -> dict[str, bytes]:
        # Each arm's timeline picture, and report.html: report.md with the pictures inline. The SVG
        # ids are salted per arm, so that both pictures can sit in one page.
        from nsysaudit.render.pictures import render  # matplotlib is imported only when a picture is drawn

        pictures = [(t, render([t], ("svg",), salt=f"nsysaudit-{t.arm or 'arm'}")["svg"]) for t in timelines()]
        title = "nsysaudit comparison" if kind == "compare" else "nsysaudit analysis"
        drawn = {picture_name(t.arm): svg for t, svg in pictures}
        drawn[REPORT_HTML] = report_html(markdown, [svg for _, svg in pictures], title=title)
        return drawn

    return Payload(facts, (*PICTURES[kind], REPORT_HTML), draw)


def _command(recipe: Recipe, out: str | os.PathLike[str]) -> list[str]:
    """The command that makes DIR again, run in the folder that holds the inputs.

    Inputs and DIR are named by basename (as in ``inputs-sha256.txt``), so the command, and with
    it the seal, does not depend on where the files were; ``--force``, ``--json`` and ``--nsys``
    are left out: they change nothing in DIR.
    """
    p = recipe.path
    if recipe.kind == "compare":
        cmd = ["nsysaudit", "compare", basename(p("observe") or ""), basename(p("release") or "")]
        cmd += ["--out", basename(os.fspath(out))]
        for arm in ("observe", "release"):
            tel = p(f"{arm}_telemetry")
            if tel is not None:
                cmd += [f"--{arm}-telemetry", basename(tel)]
        for arm in ("observe", "release"):
            for snap in recipe.snapshots(f"{arm}_"):
                cmd += [f"--{arm}-snapshot", basename(snap)]
    else:
        cmd = ["nsysaudit", "analyze", basename(p("arm") or ""), "--out", basename(os.fspath(out))]
        tel = p("telemetry")
        if tel is not None:
            cmd += ["--telemetry", basename(tel)]
        for snap in recipe.snapshots():
            cmd += ["--snapshot", basename(snap)]
    for d in recipe.library_domains:  # --library-domain adds to the default domains
        if d not in DEFAULT_LIBRARY_DOMAINS:
            cmd += ["--library-domain", d]
    options = recipe.options()
    cmd += _telemetry_flags(options["telemetry"])
    cmd += _snapshot_flags(options.get("snapshots"), options["telemetry"])
    if recipe.labels is not None:
        cmd += ["--labels", ",".join(recipe.labels)]
    return cmd


def check_labels(labels: Sequence[str]) -> tuple[str, str]:
    """The two arms' names ``compare --labels`` gives (observe's first), checked: two different
    non-empty names of printable characters, without a comma. Raises :class:`BadOption`."""
    names = tuple(labels)
    if (len(names) != 2 or names[0] == names[1]
            or any(not n.strip() or n != n.strip() or "," in n or escape(n) != n for n in names)):
        raise BadOption("--labels takes two different names, the observe arm's first: --labels serialized,forked "
                        "(printable characters, no comma)")
    return names[0], names[1]


def _snapshot_flags(options: SealedSnapshotOptions | None, telemetry: SealedTelemetryOptions | None) -> list[str]:
    """``--clock-tolerance`` for the snapshots when no telemetry flag gives it already."""
    if options is None or telemetry is not None or options["tolerance_ns"] == TelemetryOptions().tolerance_ns:
        return []
    return ["--clock-tolerance", format_ms(options["tolerance_ns"])]


def format_ms(ns: int) -> str:
    """``ns`` as an exact decimal number of milliseconds, as ``--clock-tolerance`` reads it back.

    >>> format_ms(1_234_567), format_ms(1_000_000), format_ms(5_000_000_000), format_ms(1)
    ('1.234567', '1', '5000', '0.000001')
    """
    return format(Decimal(ns).scaleb(-6).normalize(), "f")


def _telemetry_flags(options: SealedTelemetryOptions | None) -> list[str]:
    """The command-line flags that give ``options`` (a serialized TelemetryOptions): one per option that
    differs from the CLI's default (``TelemetryOptions()``), so the command is as short as it can be."""
    if not options:
        return []
    default = telemetry_options_dict(TelemetryOptions())
    out: list[str] = []
    if options["event_key"] != default["event_key"]:
        out += ["--telemetry-event-key", options["event_key"]]
    if options["clock"] != default["clock"]:
        for kind, name in options["clock"]:
            out += ["--telemetry-clock", f"{kind}={name}"]
    if options["lenient"]:
        out.append("--lenient")
    for anchor in options["anchors"]:
        out += ["--anchor", anchor]
    if options["tolerance_ns"] != default["tolerance_ns"]:
        out += ["--clock-tolerance", format_ms(options["tolerance_ns"])]
    return out


class ToolVersions(TypedDict):
    """What made a sealed report (metadata.json's ``versions``): the pieces its bytes depend on."""

    nsysaudit: str
    python: str
    polars: str
    sqlite: str
    matplotlib: str


def tool_versions() -> ToolVersions:
    import polars

    from nsysaudit._version import __version__
    from nsysaudit.render.pictures import picture_version

    return {
        "nsysaudit": __version__,
        "python": platform.python_version(),
        "polars": polars.__version__,
        "sqlite": sqlite3.sqlite_version,
        "matplotlib": picture_version(),  # the pictures' bytes depend on it
    }


# The keys of an analysis's ``input`` that say how nsysaudit read it: metadata.json's ``engines``.
ENGINE_KEYS = ("engine", "sqlite_version", "native_unavailable")


class EngineRecord(TypedDict):
    """How nsysaudit read one input (:data:`ENGINE_KEYS` of its analysis' ``input``)."""

    engine: str | None
    sqlite_version: str | None
    native_unavailable: str | None


class ExportRecord(TypedDict):
    sha256: str | None
    exported_with: str | None


class ArmVersions(TypedDict):
    """The nsys that made one input (``export``: a .nsys-rep's export)."""

    nsys_version: str | None
    schema_version: str | None
    export: NotRequired[ExportRecord]


class ReportRecord(TypedDict):
    kind: ReportKind
    format: str


class RecipeRole(TypedDict):
    role: str


class RecipeInput(RecipeRole):
    name: str


class RecipeRecord(TypedDict):
    """What ``verify`` re-runs: the kind of report, its inputs by role (basenames) and its options."""

    kind: ReportKind
    inputs: list[RecipeInput]
    options: SealedOptions


class FilesRecord(TypedDict):
    payload: list[str]
    tags: list[str]
    tag_manifest: str


class SealMetadata(TypedDict):
    """``metadata.json`` as :func:`sealed_metadata` writes it."""

    format: str
    seal: str
    report: ReportRecord
    versions: ToolVersions
    nsys: dict[str, ArmVersions]
    engines: dict[str, EngineRecord]
    command: list[str]
    recipe: RecipeRecord
    inputs: list[SealedInput]
    files: FilesRecord


def engines(built: Built) -> dict[str, EngineRecord]:
    """Per input role, the engine that read it (metadata.json's ``engines``)."""
    out: dict[str, EngineRecord] = {}
    for role, result in sorted(built.results.items()):
        described = input_entry(result.input)
        out[role] = {  # ENGINE_KEYS
            "engine": described.get("engine"),
            "sqlite_version": described.get("sqlite_version"),
            "native_unavailable": described.get("native_unavailable"),
        }
    return out


def sealed_metadata(built: Built, out: str | os.PathLike[str]) -> SealMetadata:
    arms: dict[str, ArmVersions] = {}
    for role, result in sorted(built.results.items()):
        info = result.input
        arm: ArmVersions = {"nsys_version": info.nsys_version, "schema_version": info.schema_version}
        if info.kind == "nsys-rep":
            arm["export"] = {"sha256": info.export_sha256, "exported_with": info.exported_with}
        arms[role] = arm
    return {
        "format": SEAL_FORMAT,
        "seal": f"sha256 of {TAGMANIFEST}",
        "report": {"kind": built.recipe.kind, "format": built.document["format"]},
        "versions": tool_versions(),
        "nsys": arms,
        "engines": engines(built),
        "command": _command(built.recipe, out),
        "recipe": {
            "kind": built.recipe.kind,
            "inputs": [{"role": role, "name": basename(path)} for role, path in built.recipe.inputs],
            "options": built.recipe.options(),
        },
        "inputs": [sealed_input(i) for i in built.inputs],
        "files": {"payload": sorted(built.files), "tags": sorted(TAG_FILES), "tag_manifest": TAGMANIFEST},
    }


def sealed_domains(domains: Sequence[str]) -> tuple[str, ...]:
    """The library domains of a sealed report, in the order the CLI gives them: the defaults, then
    the added ones. A set without one of them (cuBLAS, cuDNN, NCCL) is refused (exit 2):
    ``--library-domain`` only adds, so the recorded command could not reproduce it."""
    missing = [d for d in DEFAULT_LIBRARY_DOMAINS if d not in domains]
    if missing:
        raise BadOption(
            f"library domains {', '.join(domains) or 'none'} leave out {', '.join(missing)}: a sealed report "
            "always reads those (its recorded command can only add domains with --library-domain)"
        )
    return tuple(dict.fromkeys([*DEFAULT_LIBRARY_DOMAINS, *domains]))


class CheckedOptions(TypedDict):
    library_domains: list[str]
    telemetry: JSONObject | None
    labels: NotRequired[list[str]]
    snapshot_tolerance_ns: NotRequired[int]


class CheckedRecipe(TypedDict):
    kind: ReportKind
    inputs: list[RecipeRole]
    options: CheckedOptions


class CheckedMetadata(TypedDict):
    """A ``metadata.json`` as :func:`~nsysaudit.seal.verify.metadata_of` checked it: every key and type
    ``verify`` relies on (``engines`` as parsed: it is read only to say what changed)."""

    format: str
    inputs: list[SealedInput]
    recipe: CheckedRecipe
    versions: JSONObject
    engines: NotRequired[JSON]


def recipe_from(meta: CheckedMetadata, paths: Mapping[str, str]) -> Recipe:
    """The recipe metadata.json records (already checked by :func:`metadata_of`)."""
    spec = meta["recipe"]
    options = spec["options"]
    telemetry = telemetry_options_from(options.get("telemetry"))
    tolerance = options.get("snapshot_tolerance_ns")
    if telemetry is None and tolerance is not None:
        telemetry = TelemetryOptions(tolerance_ns=tolerance)
    return Recipe(
        kind=spec["kind"],
        inputs=tuple((r["role"], paths[r["role"]]) for r in spec["inputs"]),
        library_domains=tuple(options["library_domains"] or DEFAULT_LIBRARY_DOMAINS),
        telemetry_options=telemetry,
        labels=(options["labels"][0], options["labels"][1]) if "labels" in options else None,
    )
