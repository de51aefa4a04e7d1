"""Sealed reports: a report folder whose every byte is hashed, and ``verify`` to check it.

A sealed report folder DIR holds (flat, no sub-folders)::

    report.json              canonical JSON: sorted keys, stable order, no wall-clock time, no paths;
                             ``options`` holds every option that changes the analysis
    report.md                the same facts for people (trace text escaped as Markdown data)
    inputs-sha256.txt        "<sha256>  <basename>" of every input (exports, .nsys-rep, telemetry)
    timeline-observe.svg     each arm's timeline picture (nsysaudit.pictures); an analysis has
    timeline-release.svg     one, timeline.svg
    report.html              report.md with the pictures inline (nsysaudit.html)
    manifest-sha256.txt      "<sha256>  <file>" of the payload files above (sha256sum -c format)
    metadata.json            tool, python, polars, sqlite and matplotlib versions, nsys and schema versions,
                             the command that makes DIR again, the recipe ``verify`` re-runs,
                             inputs with sizes
    tagmanifest-sha256.txt   "<sha256>  <file>" of manifest-sha256.txt and metadata.json

This follows the BagIt idea (RFC 8493: payload manifest, tag files, tag manifest) in a flat
layout; it is not a conformant bag (the payload is not under ``data/`` and there is no
``bagit.txt``). ``sha256sum -c manifest-sha256.txt`` and ``sha256sum -c tagmanifest-sha256.txt``
pass inside DIR. The inputs live outside DIR, so their digests are in their own file
(``inputs-sha256.txt``, checkable with ``sha256sum -c`` from the folder holding the inputs) and
their sizes in ``report.json`` and ``metadata.json``.

The **seal** is the SHA-256 of ``tagmanifest-sha256.txt``, and it pins every byte of every file
in DIR: the tag manifest holds the digests of ``manifest-sha256.txt`` and ``metadata.json``, the
manifest those of the payload files, and ``verify`` refuses any file, folder or manifest
entry beyond these. Editing any file, or adding one (even listed in a rewritten manifest),
changes the tag manifest or makes ``verify`` fail; ``verify --seal`` then fails too. (Format 1
sealed only ``manifest-sha256.txt``; ``verify`` refuses such folders.)

The seal does not depend on the paths the inputs were given by or on the time: the recorded
command names the inputs and DIR by basename (run it in the folder holding the inputs) and
leaves out ``--force``, ``--json`` and ``--nsys``, which change nothing in DIR. It does depend on
the versions in ``metadata.json``: the same inputs and options on the same tool, Python, polars,
SQLite and matplotlib versions give the same bytes and the same seal, and the recorded command
gives them again. Across versions, the reports in ``manifest-sha256.txt`` stay the same (the
pictures, and report.html which holds them, follow matplotlib's version), and ``verify --inputs``
checks the whole payload by re-running the analysis.

Writes are atomic: everything is written into a fresh temporary folder beside DIR, then renamed
to DIR (see :func:`_replace`). An existing DIR is refused unless ``force`` is set, and even then
only a folder that verifies as a sealed report and holds no input is replaced (see
:func:`check_out`; ``--force --out ~`` or ``--out`` an evidence folder deletes nothing).
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from nsysaudit import canonical, fsops
from nsysaudit.analysis import analyze, input_kind
from nsysaudit.errors import BadOption, CheckFailed, OutputExists, OutputNotWritable, UnusableInput
from nsysaudit.html import report_html
from nsysaudit.joins import DEFAULT_MAX_PAIRS
from nsysaudit.model import DEFAULT_LIBRARY_DOMAINS
from nsysaudit.progress import Progress
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.compare import TelemetryFile, basename, compare_results, result_paths, scrub_paths
from nsysaudit.reports.markdown import analysis_markdown, comparison_markdown
from nsysaudit.source import sha256_file
from nsysaudit.telemetry import CLOCK_KINDS, DEFAULT_TOLERANCE_NS, TelemetryOptions, parse_anchor
from nsysaudit.timeline import Timeline, aligned_timelines, timeline

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
INPUTS = "inputs-sha256.txt"
MANIFEST = "manifest-sha256.txt"
METADATA = "metadata.json"
TAGMANIFEST = "tagmanifest-sha256.txt"
TAG_FILES = (MANIFEST, METADATA)
SEAL_FORMAT = "nsysaudit.seal/2"  # /1 sealed manifest-sha256.txt only
ANALYSIS_FORMAT = "nsysaudit.analysis/1"

ReportKind = Literal["compare", "analyze"]
# The timeline picture of each arm (see nsysaudit.timeline): a comparison has two, an analysis one.
PICTURES: dict[ReportKind, tuple[str, ...]] = {
    "compare": ("timeline-observe.svg", "timeline-release.svg"),
    "analyze": ("timeline.svg",),
}


def payload(kind: ReportKind) -> tuple[str, ...]:
    """The payload files of a sealed report of ``kind`` (what ``manifest-sha256.txt`` lists), in
    the order ``verify --inputs`` compares them: the facts first, report.html (which holds the
    others) last."""
    return (INPUTS, REPORT_JSON, REPORT_MD, *PICTURES[kind], REPORT_HTML)


def picture_name(arm: str | None) -> str:
    return "timeline.svg" if arm is None else f"timeline-{arm}.svg"

_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")


# --- canonical bytes -----------------------------------------------------------------------------


def canonical_json(doc: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, 2-space indent, UTF-8, no NaN, one final newline."""
    return canonical.dumps(doc, indent=True) + b"\n"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def manifest_text(digests: Mapping[str, str]) -> bytes:
    """``sha256sum`` format, one ``<hex>  <name>`` line per file, sorted by name."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)).encode("utf-8")


# --- inputs --------------------------------------------------------------------------------------


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "name": self.name,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "kind": self.kind,
        }


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


# --- what to run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """What a sealed report was made from and how: enough for ``verify`` to make it again.

    ``inputs`` maps roles (``observe``, ``release``, ``observe_telemetry``, ``release_telemetry``
    for ``compare``; ``arm``, ``telemetry`` for ``analyze``) to paths.
    """

    kind: ReportKind
    inputs: tuple[tuple[str, str], ...]
    library_domains: tuple[str, ...] = DEFAULT_LIBRARY_DOMAINS
    telemetry_options: TelemetryOptions | None = None

    def path(self, role: str) -> str | None:
        return dict(self.inputs).get(role)

    @property
    def has_telemetry(self) -> bool:
        return any(role.endswith("telemetry") for role, _ in self.inputs)

    def options(self) -> dict[str, Any]:
        """The options that change the analysis, as ``report.json`` (``options``) and metadata.json
        record them (telemetry options only when telemetry was given)."""
        tel = self.telemetry_options or TelemetryOptions()
        return {
            "library_domains": list(self.library_domains),
            "max_pairs": DEFAULT_MAX_PAIRS,  # a sealed analysis always runs with the default limit
            "telemetry": telemetry_options_dict(tel) if self.has_telemetry else None,
        }


def telemetry_options_dict(options: TelemetryOptions) -> dict[str, Any]:
    return {
        "event_key": options.event_key,
        "clock": [[kind, name] for kind, name in options.clock],
        "lenient": options.lenient,
        "anchors": [str(a) for a in options.anchors],
        "tolerance_ns": options.tolerance_ns,
    }


def telemetry_options_from(recorded: Mapping[str, Any] | None) -> TelemetryOptions | None:
    """The :class:`TelemetryOptions` a metadata.json recorded (None: none recorded).

    Anything but the exact types :func:`telemetry_options_dict` writes is a failed check.
    """
    if recorded is None:
        return None
    try:
        clock, anchors, tolerance = recorded["clock"], recorded["anchors"], recorded["tolerance_ns"]
        if not (
            isinstance(recorded["event_key"], str)
            and isinstance(recorded["lenient"], bool)
            and type(tolerance) is int
            and isinstance(anchors, list)
            and all(isinstance(a, str) for a in anchors)
            and isinstance(clock, list)
            and all(isinstance(c, list) and len(c) == 2 and c[0] in CLOCK_KINDS and isinstance(c[1], str)
                    for c in clock)
        ):
            raise TypeError("a value of the wrong type")
        return TelemetryOptions(
            event_key=recorded["event_key"],
            clock=tuple((kind, name) for kind, name in clock),
            lenient=recorded["lenient"],
            anchors=tuple(parse_anchor(a) for a in anchors),
            tolerance_ns=tolerance,
        )
    except (KeyError, TypeError, BadOption) as exc:
        raise CheckFailed(f"{METADATA}: unreadable telemetry options ({exc})") from None


@dataclass
class Built:
    """A report made from a recipe: the document, the payload files' bytes, the inputs."""

    recipe: Recipe
    document: dict[str, Any]
    files: dict[str, bytes]
    inputs: list[InputFile]
    results: dict[str, AnalysisResult] = field(default_factory=dict)


def _analyze(
    path: str,
    telemetry: str | None,
    recipe: Recipe,
    nsys_path: str | os.PathLike[str] | None,
    progress: Progress | None = None,
) -> AnalysisResult:
    return analyze(
        path,
        nsys_path=nsys_path,
        library_domains=recipe.library_domains,
        telemetry=telemetry,
        telemetry_options=recipe.telemetry_options if telemetry is not None else None,
        progress=progress,
    )


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
    telemetry_files: dict[str, TelemetryFile | None] = {}
    for arm in ("observe", "release"):
        path = recipe.path(arm)
        if path is None:
            raise BadOption(f"compare needs an {arm} input")
        telemetry = recipe.path(f"{arm}_telemetry")
        results[arm] = _analyze(path, telemetry, recipe, nsys_path, progress)
        info = results[arm].input
        inputs.append(InputFile(arm, Path(path), info.sha256, info.size_bytes, info.kind))
        telemetry_files[arm] = None
        if telemetry is not None:
            t = _telemetry_input(f"{arm}_telemetry", telemetry, results[arm])
            inputs.append(t)
            telemetry_files[arm] = TelemetryFile(t.name, t.sha256, t.size_bytes)
    comparison = compare_results(results["observe"], results["release"], telemetry_files=telemetry_files)
    doc = comparison.to_dict()
    doc["options"] = recipe.options()
    timelines = aligned_timelines(results["observe"], results["release"])
    return Built(recipe, doc, _payload(doc, comparison_markdown(doc), inputs, timelines), _ordered(inputs), results)


def _telemetry_input(role: str, path: str, result: AnalysisResult) -> InputFile:
    """The telemetry input with the digest of the bytes the analysis read."""
    if result.alignment is None:  # analyze() always aligns the telemetry it is given
        return input_file(role, path, "telemetry")
    p = Path(path)
    return InputFile(role, p, result.alignment.log.sha256, p.stat().st_size, "telemetry")


def sealed_analysis_document(result: AnalysisResult, telemetry: InputFile | None = None) -> dict[str, Any]:
    """The ``analyze --json`` document made fit for sealing.

    Same keys as ``analyze --json`` except: paths (``input.path``, ``telemetry.path``, in
    messages) are basenames; ``tool`` (the tool
    version) and ``input.export`` (the .nsys-rep's export digest, cache state and nsys) move to
    ``metadata.json``, because they depend on the machine, not on the evidence. Added: ``format``,
    ``kind`` and ``inputs`` (and, by :func:`build`, ``options``).
    """
    doc: dict[str, Any] = scrub_paths(result.to_dict(), result_paths(result))
    doc.pop("tool", None)
    inp = dict(doc["input"])
    inp.pop("export", None)
    doc["input"] = inp
    inputs = [
        {
            "role": "arm",
            "name": inp["path"],
            "sha256": inp["sha256"],
            "size_bytes": inp["size_bytes"],
            "kind": inp["kind"],
        }
    ]
    if telemetry is not None:
        inputs.append(telemetry.to_dict())
    doc.update({"format": ANALYSIS_FORMAT, "kind": "analysis", "inputs": inputs})
    return doc


def _build_analyze(recipe: Recipe, nsys_path: str | os.PathLike[str] | None, progress: Progress | None = None) -> Built:
    path = recipe.path("arm")
    if path is None:
        raise BadOption("analyze needs an input")
    telemetry = recipe.path("telemetry")
    result = _analyze(path, telemetry, recipe, nsys_path, progress)
    info = result.input
    inputs = [InputFile("arm", Path(path), info.sha256, info.size_bytes, info.kind)]
    tel = _telemetry_input("telemetry", telemetry, result) if telemetry is not None else None
    if tel is not None:
        inputs.append(tel)
    doc = sealed_analysis_document(result, tel)
    doc["options"] = recipe.options()
    files = _payload(doc, analysis_markdown(doc), inputs, (timeline(result),))
    return Built(recipe, doc, files, inputs, {"arm": result})


_ROLE_ORDER = ("observe", "release", "observe_telemetry", "release_telemetry", "arm", "telemetry")


def _ordered(inputs: list[InputFile]) -> list[InputFile]:
    return sorted(inputs, key=lambda i: _ROLE_ORDER.index(i.role) if i.role in _ROLE_ORDER else len(_ROLE_ORDER))


def _payload(
    doc: Mapping[str, Any], markdown: str, inputs: list[InputFile], timelines: Sequence[Timeline]
) -> dict[str, bytes]:
    lines = "".join(f"{i.sha256}  {i.name}\n" for i in _ordered(inputs))
    # Each arm's timeline picture, and report.html: report.md with the pictures inline. The SVG
    # ids are salted per arm, so that both pictures can sit in one page.
    from nsysaudit.pictures import render  # matplotlib is imported only when a picture is drawn

    pictures = [(t, render([t], ("svg",), salt=f"nsysaudit-{t.arm or 'arm'}")["svg"]) for t in timelines]
    title = "nsysaudit comparison" if doc.get("kind") == "comparison" else "nsysaudit analysis"
    return {
        REPORT_JSON: canonical_json(doc),
        REPORT_MD: markdown.encode("utf-8"),
        INPUTS: lines.encode("utf-8"),
        **{picture_name(t.arm): svg for t, svg in pictures},
        REPORT_HTML: report_html(markdown, [svg for _, svg in pictures], title=title),
    }


# --- metadata ------------------------------------------------------------------------------------


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
    else:
        cmd = ["nsysaudit", "analyze", basename(p("arm") or ""), "--out", basename(os.fspath(out))]
        tel = p("telemetry")
        if tel is not None:
            cmd += ["--telemetry", basename(tel)]
    for d in recipe.library_domains:  # --library-domain adds to the default domains
        if d not in DEFAULT_LIBRARY_DOMAINS:
            cmd += ["--library-domain", d]
    cmd += _telemetry_flags(recipe.options()["telemetry"])
    return cmd


def format_ms(ns: int) -> str:
    """``ns`` as an exact decimal number of milliseconds, as ``--clock-tolerance`` reads it back.

    >>> format_ms(1_234_567), format_ms(1_000_000), format_ms(5_000_000_000), format_ms(1)
    ('1.234567', '1', '5000', '0.000001')
    """
    return format(Decimal(ns).scaleb(-6).normalize(), "f")


def _telemetry_flags(options: Mapping[str, Any] | None) -> list[str]:
    """The command-line flags that give ``options`` (a serialized TelemetryOptions)."""
    if not options:
        return []
    out: list[str] = []
    if options.get("event_key", "event") != "event":
        out += ["--telemetry-event-key", str(options["event_key"])]
    clock = [tuple(c) for c in options.get("clock", [])]
    if clock and clock != [("monotonic", "monotonic_ns"), ("realtime", "realtime_ns")]:
        for kind, name in clock:
            out += ["--telemetry-clock", f"{kind}={name}"]
    if options.get("lenient"):
        out.append("--lenient")
    for anchor in options.get("anchors", []):
        out += ["--anchor", str(anchor)]
    tol = options.get("tolerance_ns")
    if tol is not None and tol != DEFAULT_TOLERANCE_NS:
        out += ["--clock-tolerance", format_ms(int(tol))]
    return out


def _versions() -> dict[str, Any]:
    import polars

    from nsysaudit import __version__
    from nsysaudit.pictures import picture_version

    return {
        "nsysaudit": __version__,
        "python": platform.python_version(),
        "polars": polars.__version__,
        "sqlite": sqlite3.sqlite_version,
        "matplotlib": picture_version(),  # the pictures' bytes depend on it
    }


def _metadata(built: Built, out: str | os.PathLike[str]) -> dict[str, Any]:
    arms = {}
    for role, result in sorted(built.results.items()):
        info = result.input
        arm: dict[str, Any] = {"nsys_version": info.nsys_version, "schema_version": info.schema_version}
        if info.kind == "nsys-rep":
            arm["export"] = {"sha256": info.export_sha256, "exported_with": info.exported_with}
        arms[role] = arm
    return {
        "format": SEAL_FORMAT,
        "seal": f"sha256 of {TAGMANIFEST}",
        "report": {"kind": built.recipe.kind, "format": built.document.get("format")},
        "versions": _versions(),
        "nsys": arms,
        "command": _command(built.recipe, out),
        "recipe": {
            "kind": built.recipe.kind,
            "inputs": [{"role": role, "name": basename(path)} for role, path in built.recipe.inputs],
            "options": built.recipe.options(),
        },
        "inputs": [i.to_dict() for i in built.inputs],
        "files": {"payload": sorted(built.files), "tags": sorted(TAG_FILES), "tag_manifest": TAGMANIFEST},
    }


# --- writing -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sealed:
    """A written report folder and its seal (SHA-256 of its tag manifest)."""

    dir: Path
    seal: str
    files: tuple[str, ...]
    document: dict[str, Any]
    results: dict[str, AnalysisResult] = field(default_factory=dict)


def _out_path(out: str | os.PathLike[str]) -> Path:
    """DIR as an absolute path (``.`` and ``..`` folded), so that its parent and name are real."""
    return Path(os.path.abspath(os.fspath(out)))


def _inode(path: Path) -> tuple[int, int] | None:
    try:
        st = path.lstat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _holds_input(target: Path, inputs: Sequence[str | os.PathLike[str]], *, files: bool) -> str | None:
    """The first input that ``target`` is or holds: by resolved path (symlinks followed), and with
    ``files`` also by inode among the files directly in it (a hard link)."""
    real = target.resolve()
    inodes = {ino for f in target.iterdir() if (ino := _inode(f)) is not None} if files else set()
    for given in inputs:
        resolved = Path(given).resolve()
        if resolved == real or real in resolved.parents or _inode(resolved) in inodes:
            return os.fspath(given)
    return None


def _interrupted(target: Path) -> Path | None:
    """A folder an interrupted two-rename replacement moved aside (see :func:`_replace`)."""
    return next((p for p in sorted(target.parent.glob(f".{glob.escape(target.name)}.*.old")) if p.is_dir()), None)


def check_out(
    out: str | os.PathLike[str], *, force: bool, inputs: Sequence[str | os.PathLike[str]] = ()
) -> tuple[int, int] | None:
    """Refuse an ``out`` that cannot or must not be written; return the inode of the folder to replace.

    An existing ``out`` is refused unless ``force`` is set, and even then it must be a real folder
    (not a symlink) that passes ``verify``'s checks of its files and metadata (a sealed report
    folder of this tool, not merely a folder with a ``manifest-sha256.txt``, as a BagIt bag or a
    ``sha256sum`` evidence folder has), and it must neither be nor hold any of ``inputs``
    (compared by resolved path and by inode). An empty folder is refused too: it is no report.
    Everything is checked before the analysis runs, and again just before the rename.
    """
    target = _out_path(out)
    try:
        exists = target.exists() or target.is_symlink()
        leftover = None if exists else _interrupted(target)
    except OSError as exc:
        raise OutputNotWritable(target, exc.strerror or str(exc)) from None
    if leftover is not None:
        raise OutputExists(
            f"{target} is missing and {leftover.name} beside it holds the report an interrupted --force was "
            f"replacing: move it back to {target.name} (or delete it), then run again (nothing was written)"
        )
    if not exists:
        _check_parent(target)
        return None
    if not force:
        raise OutputExists(f"{target} already exists; pass --force to replace it (nothing was written)")
    why = _not_sealed(target)
    # By path first (no walk of a folder that may be large), by inode once it is known to be flat.
    holder = _holds_input(target, inputs, files=why is None)
    if holder is not None:
        raise OutputExists(
            f"{target} is or holds the input {holder}; refusing to replace it, even with --force (nothing was written)"
        )
    if why is not None:
        raise OutputExists(
            f"{target} exists and is not a sealed nsysaudit report folder ({why}); "
            "refusing to replace it, even with --force (nothing was written)"
        )
    return _inode(target)


def _not_sealed(target: Path) -> str | None:
    """Why ``target`` is not a folder ``--force`` may replace, or None."""
    if target.is_symlink() or not target.is_dir():
        return "a symlink" if target.is_symlink() else "not a folder"
    if not any(target.iterdir()):
        return "an empty folder"
    if not (target / MANIFEST).is_file():
        return f"no {MANIFEST}"
    try:
        problems = _check_files(target)
        if not problems:
            _check_kind(target, _metadata_of(target))
    except CheckFailed as exc:
        problems = [str(exc)]
    return f"verify fails: {problems[0]}" if problems else None


def _check_parent(target: Path) -> None:
    """The nearest existing ancestor of ``target`` must be a writable folder."""
    for ancestor in target.parents:
        try:
            if not ancestor.exists():
                continue
        except OSError as exc:
            raise OutputNotWritable(target, exc.strerror or str(exc)) from None
        if not ancestor.is_dir():
            raise OutputNotWritable(target, f"{ancestor} is not a folder")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise OutputNotWritable(target, f"{ancestor} is not writable")
        return


def _fresh_dir(parent: Path, stem: str) -> Path:
    while True:
        candidate = parent / f".{stem}.{secrets.token_hex(6)}.tmp"
        try:
            candidate.mkdir()  # mode 0o777 minus umask, like any folder the user makes
        except FileExistsError:
            continue
        return candidate


def _write(path: Path, data: bytes) -> None:
    with open(path, "xb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _replace(tmp: Path, target: Path, replacing: tuple[int, int] | None) -> None:
    """Move the complete folder ``tmp`` to ``target``; ``replacing`` is the inode of the folder
    checked for replacement (None: ``target`` must not exist).

    Replacing uses ``renameat2(RENAME_EXCHANGE)`` where the system has it: one atomic swap, so a
    kill at any moment leaves either the old or the new folder at ``target``, never neither; the
    old one, now at ``tmp``, is deleted afterwards. If what was swapped out is not the folder that
    was checked (another process replaced it meanwhile), it is swapped back and refused. Without
    the call it falls back to two renames (old aside to ``.DIR.<hex>.old``, new in); a kill between
    them leaves that ``.old`` folder, which the next write into DIR reports (see :func:`check_out`)
    instead of writing anything. A new ``target`` is moved in with ``RENAME_NOREPLACE`` (or
    ``os.rename``, which fails on a non-empty folder), so of two runs writing the same new DIR one
    wins and the other is refused.
    """
    if replacing is None:
        try:
            if not fsops.rename_noreplace(tmp, target):
                os.rename(tmp, target)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY):
                raise OutputExists(f"{target} was written by another process meanwhile (nothing was written)") from None
            raise
        return
    if fsops.exchange(tmp, target):
        if _inode(tmp) != replacing:
            fsops.exchange(tmp, target)
            raise OutputExists(f"{target} was replaced by another process meanwhile (nothing was written)")
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = target.parent / f".{target.name}.{secrets.token_hex(6)}.old"
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except BaseException:
        os.rename(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def write_sealed(
    out: str | os.PathLike[str],
    files: Mapping[str, bytes],
    metadata: Mapping[str, Any],
    *,
    force: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> Sealed:
    """Write payload ``files``, their manifest, ``metadata`` and the tag manifest into ``out``, atomically.

    Nothing is left behind when it fails (the temporary folder is removed); see :func:`check_out`
    for what may be replaced and :func:`_replace` for how.
    """
    target = _out_path(out)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = _fresh_dir(target.parent, target.name)
    except OSError as exc:
        raise OutputNotWritable(target, exc.strerror or str(exc)) from None
    try:
        for name in sorted(files):
            _write(tmp / name, files[name])
        manifest = manifest_text({name: sha256_bytes(data) for name, data in files.items()})
        meta = canonical_json(metadata)
        _write(tmp / MANIFEST, manifest)
        _write(tmp / METADATA, meta)
        tags = manifest_text({MANIFEST: sha256_bytes(manifest), METADATA: sha256_bytes(meta)})
        _write(tmp / TAGMANIFEST, tags)
        # Checked here, complete folder in hand: DIR may have appeared or changed since seal() checked it.
        replacing = check_out(target, force=force, inputs=inputs)
        _replace(tmp, target, replacing)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputNotWritable(target, exc.strerror or str(exc)) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    names = tuple(sorted([*files, MANIFEST, METADATA, TAGMANIFEST]))
    return Sealed(target, sha256_bytes(tags), names, {})


def sealed_domains(domains: Sequence[str]) -> tuple[str, ...]:
    """The library domains of a sealed report, in the order the CLI gives them: the defaults, then
    the added ones. A set without cuBLAS or cuDNN is refused (exit 2): ``--library-domain`` only
    adds, so the recorded command could not reproduce it."""
    missing = [d for d in DEFAULT_LIBRARY_DOMAINS if d not in domains]
    if missing:
        raise BadOption(
            f"library domains {', '.join(domains) or 'none'} leave out {', '.join(missing)}: a sealed report "
            "always reads those (its recorded command can only add domains with --library-domain)"
        )
    return tuple(dict.fromkeys([*DEFAULT_LIBRARY_DOMAINS, *domains]))


def seal(
    recipe: Recipe,
    out: str | os.PathLike[str],
    *,
    force: bool = False,
    nsys_path: str | os.PathLike[str] | None = None,
    progress: Progress | None = None,
) -> Sealed:
    """Build the report of ``recipe`` and write it sealed into ``out``."""
    recipe = dataclasses.replace(recipe, library_domains=sealed_domains(recipe.library_domains))
    inputs = [path for _, path in recipe.inputs]
    check_out(out, force=force, inputs=inputs)  # fail before the (possibly long) analysis
    built = build(recipe, nsys_path=nsys_path, progress=progress)
    sealed = write_sealed(out, built.files, _metadata(built, _out_path(out)), force=force, inputs=inputs)
    return Sealed(sealed.dir, sealed.seal, sealed.files, built.document, built.results)


def seal_compare(
    observe: str | os.PathLike[str],
    release: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    observe_telemetry: str | os.PathLike[str] | None = None,
    release_telemetry: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    telemetry_options: TelemetryOptions | None = None,
    nsys_path: str | os.PathLike[str] | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> Sealed:
    """Compare an observe arm and a release arm and write the sealed comparison into ``out``.

    >>> sealed = seal_compare("observe.sqlite", "release.sqlite", "out/cmp")  # doctest: +SKIP
    >>> sealed.seal  # doctest: +SKIP
    '3f0c...'
    """
    roles: list[tuple[str, str]] = [("observe", os.fspath(observe)), ("release", os.fspath(release))]
    if observe_telemetry is not None:
        roles.append(("observe_telemetry", os.fspath(observe_telemetry)))
    if release_telemetry is not None:
        roles.append(("release_telemetry", os.fspath(release_telemetry)))
    recipe = Recipe("compare", tuple(roles), tuple(library_domains), telemetry_options)
    return seal(recipe, out, force=force, nsys_path=nsys_path, progress=progress)


def seal_analysis(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    telemetry: str | os.PathLike[str] | None = None,
    library_domains: Sequence[str] = DEFAULT_LIBRARY_DOMAINS,
    telemetry_options: TelemetryOptions | None = None,
    nsys_path: str | os.PathLike[str] | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> Sealed:
    """Analyze one arm and write the sealed report into ``out``."""
    roles: list[tuple[str, str]] = [("arm", os.fspath(path))]
    if telemetry is not None:
        roles.append(("telemetry", os.fspath(telemetry)))
    recipe = Recipe("analyze", tuple(roles), tuple(library_domains), telemetry_options)
    return seal(recipe, out, force=force, nsys_path=nsys_path, progress=progress)


# --- verifying -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    """What ``verify`` checked; it raises :class:`CheckFailed` instead of returning on any failure."""

    dir: Path
    seal: str
    files: tuple[str, ...]
    inputs: tuple[dict[str, Any], ...] = ()
    rerun: bool = False


def _safe_name(name: str) -> str | None:
    """Why a manifest entry is refused (escapes DIR, not a plain relative path), or None."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        return "absolute path"
    parts = name.split("/")
    if ".." in parts:
        return "'..' escapes the folder"
    if "\\" in name:
        return "backslash in path"
    if any(p in ("", ".") for p in parts):
        return "not a plain relative path"
    return None


def parse_manifest(path: Path, data: bytes) -> dict[str, str]:
    """Parse a ``sha256sum`` manifest strictly; any deviation from the canonical form is a failure."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckFailed(f"{path}: not UTF-8 text") from None
    if not text.endswith("\n"):
        raise CheckFailed(f"{path}: does not end with a newline (changed or truncated)")
    entries: dict[str, str] = {}
    for number, line in enumerate(text[:-1].split("\n"), start=1):
        m = _LINE.match(line)
        if m is None:
            raise CheckFailed(f"{path}: line {number} is not '<sha256>  <file>' (changed)")
        digest, name = m.groups()
        why = _safe_name(name)
        if why is not None:
            raise CheckFailed(f"{path}: line {number}: refusing entry {name!r}: {why}")
        if name in entries:
            raise CheckFailed(f"{path}: line {number}: {name} is listed twice")
        entries[name] = digest
    if manifest_text(entries) != data:
        raise CheckFailed(f"{path}: not in canonical form (sorted '<sha256>  <file>' lines; changed)")
    return entries


def _check_entry(root: Path, name: str) -> str | None:
    """Problem with the file an entry names (missing, symlink, not a file), or None."""
    current = root
    for part in name.split("/"):
        current = current / part
        if current.is_symlink():
            return f"{name}: refusing a symlink ({current.relative_to(root)})"
        if not current.exists():
            return f"{name}: missing"
    if not current.is_file():
        return f"{name}: not a regular file"
    return None


def _read_manifest(root: Path, name: str) -> dict[str, str]:
    path = root / name
    if path.is_symlink():
        raise CheckFailed(f"{path}: refusing a symlink")
    if not path.is_file():
        raise CheckFailed(f"{path}: missing")
    return parse_manifest(path, path.read_bytes())


def verify(
    dir: str | os.PathLike[str],
    inputs: Sequence[str | os.PathLike[str]] | None = None,
    *,
    nsys_path: str | os.PathLike[str] | None = None,
    expected_seal: str | None = None,
) -> Verification:
    """Check a sealed report folder; with ``inputs``, also check them and re-run the analysis.

    Raises :class:`~nsysaudit.errors.UnusableInput` (exit 2) when ``dir`` is not a sealed report
    folder at all (no manifest), and :class:`~nsysaudit.errors.CheckFailed` (exit 1) naming
    every missing, extra or changed file, any manifest entry that escapes the folder, an input
    whose digest differs, and a re-run whose report differs.
    """
    root = Path(dir)
    if not root.is_dir():
        raise UnusableInput(root, "no such folder" if not root.exists() else "not a folder")
    if not (root / MANIFEST).exists() and not (root / MANIFEST).is_symlink():
        raise UnusableInput(root, f"no {MANIFEST}: not a sealed nsysaudit report folder")
    problems = _check_files(root)
    digest = sha256_file(root / TAGMANIFEST) if (root / TAGMANIFEST).is_file() else "none"
    if expected_seal is not None and expected_seal.lower().removeprefix("sha256:") != digest:
        problems.append(f"{TAGMANIFEST}: its sha256 {digest} is not the expected seal {expected_seal}")
    if problems:
        raise CheckFailed(f"{root}: verification failed: " + "; ".join(problems))
    meta = _metadata_of(root)
    _check_inputs_listing(root, meta)
    kind = _check_kind(root, meta)
    files = tuple(sorted([*payload(kind), *TAG_FILES, TAGMANIFEST]))
    if inputs is None:
        return Verification(root, digest, files)
    given = _match_inputs(meta, [Path(p) for p in inputs])
    checked = []
    for rec, path in given:
        found = input_file(rec["role"], path, rec["kind"])
        if found.sha256 != rec["sha256"] or found.size_bytes != rec["size_bytes"]:
            raise CheckFailed(
                f"input {path} ({rec['role']}): differs from the sealed {rec['name']} "
                f"(sha256 {found.sha256}, {found.size_bytes:,} bytes; recorded {rec['sha256']}, "
                f"{rec['size_bytes']:,} bytes)"
            )
        checked.append({**rec, "path": os.fspath(path)})
    recipe = _recipe_from(meta, {rec["role"]: os.fspath(path) for rec, path in given})
    rebuilt = build(recipe, nsys_path=nsys_path)
    for name in payload(kind):
        old = (root / name).read_bytes()
        new = rebuilt.files[name]
        if old != new:
            sealed_with = meta["versions"]
            now = _versions()
            changed = [
                f"{k} {sealed_with.get(k)} -> {now.get(k)}"
                for k in ("nsysaudit", "polars", "sqlite", "python", "matplotlib")
                if sealed_with.get(k) != now.get(k)
            ]
            context = (
                "; sealed with other versions: " + ", ".join(changed)
                if changed
                else "; same versions as when sealed"
            )
            raise CheckFailed(
                f"{root / name}: re-running the analysis gives a different {name} ({_first_diff(old, new)}{context})"
            )
    return Verification(root, digest, files, tuple(checked), rerun=True)


def _check_kind(root: Path, meta: Mapping[str, Any]) -> ReportKind:
    """The report's kind as ``metadata.json`` records it; the manifest must list that kind's payload."""
    kind: ReportKind = meta["recipe"]["kind"]
    if set(_read_manifest(root, MANIFEST)) != set(payload(kind)):
        raise CheckFailed(f"{root}: {MANIFEST} does not list the payload of the {kind} report {METADATA} records")
    return kind


def _check_files(root: Path) -> list[str]:
    """Every problem with the folder's files: missing, changed, extra, or listed where they do not belong.

    A manifest that lists anything but its own files is refused even when the listed file's
    digest is right: the seal pins the tag manifest, and ``verify`` accepts no file it cannot pin.
    """
    problems: list[str] = []
    manifest = _read_manifest(root, MANIFEST)
    tags = _read_manifest(root, TAGMANIFEST)
    # The payload of a comparison (both arms' pictures) or of an analysis; verify() checks that
    # metadata.json records the same kind.
    kind: ReportKind = "compare" if set(PICTURES["compare"]) & set(manifest) else "analyze"
    expected_payload = payload(kind)
    for listing, entries, expected in ((MANIFEST, manifest, expected_payload), (TAGMANIFEST, tags, TAG_FILES)):
        for name in expected:
            if name not in entries:
                problems.append(f"{listing} does not list {name}")
        for name, digest in sorted(entries.items()):
            if name not in expected:
                problems.append(f"{listing} lists {name}, which is not one of its files ({', '.join(expected)})")
                continue
            trouble = _check_entry(root, name)
            if trouble is not None:
                problems.append(f"{trouble} (listed in {listing})")
                continue
            actual = sha256_file(root / name)
            if actual != digest:
                problems.append(f"{name}: changed (sha256 {actual}, {listing} says {digest})")
    known = {*expected_payload, *TAG_FILES, TAGMANIFEST}
    for current, dirnames, filenames in os.walk(root):
        for d in sorted(dirnames):
            rel = (Path(current) / d).relative_to(root).as_posix()
            problems.append(f"{rel}/: extra folder (not in {MANIFEST})")
        dirnames.clear()
        for f in sorted(filenames):
            rel = (Path(current) / f).relative_to(root).as_posix()
            if rel not in known:
                problems.append(f"{rel}: extra file (not in {MANIFEST})")
    return problems


_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)
_KINDS = ("sqlite", "nsys-rep", "telemetry")


def _metadata_of(root: Path) -> dict[str, Any]:
    """``metadata.json``, checked for every key and type ``verify`` uses: anything else is a
    tampered folder, a failed check (exit 1), never a traceback."""
    path = root / METADATA
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CheckFailed(f"{path}: not readable JSON ({exc})") from None
    if isinstance(meta, dict) and meta.get("format") == "nsysaudit.seal/1":
        raise CheckFailed(
            f"{path}: an nsysaudit.seal/1 folder, whose seal does not cover {METADATA}; "
            "make it again with this nsysaudit (its recorded command) to get a seal that pins every file"
        )
    if not isinstance(meta, dict) or meta.get("format") != SEAL_FORMAT:
        raise CheckFailed(f"{path}: not {SEAL_FORMAT} metadata")

    def bad(what: str) -> CheckFailed:
        return CheckFailed(f"{path}: {what} (a tampered or foreign {METADATA})")

    inputs, recipe, versions = meta.get("inputs"), meta.get("recipe"), meta.get("versions")
    if not isinstance(versions, dict):
        raise bad("'versions' is not an object")
    if not isinstance(inputs, list) or not inputs:
        raise bad("'inputs' is not a non-empty list")
    for i, rec in enumerate(inputs):
        ok = (
            isinstance(rec, dict)
            and all(isinstance(rec.get(k), str) for k in ("role", "name", "sha256", "kind"))
            and _HEX64.fullmatch(rec["sha256"]) is not None
            and rec["kind"] in _KINDS
            and type(rec.get("size_bytes")) is int
            and rec["size_bytes"] >= 0
        )
        if not ok:
            raise bad(f"inputs[{i}] is not {{role, name, sha256 (hex), size_bytes (int), kind}}")
    roles = [rec["role"] for rec in inputs]
    if len(set(roles)) != len(roles):
        raise bad("an input role is listed twice")
    if not isinstance(recipe, dict) or recipe.get("kind") not in ("compare", "analyze"):
        raise bad("no recipe to re-run ('recipe.kind' is not compare or analyze)")
    spec_inputs = recipe.get("inputs")
    listed = spec_inputs if isinstance(spec_inputs, list) else []
    spec_roles = [r["role"] for r in listed if isinstance(r, dict) and isinstance(r.get("role"), str)]
    if not isinstance(spec_inputs, list) or len(spec_roles) != len(listed) or sorted(spec_roles) != sorted(roles):
        raise bad("'recipe.inputs' does not name the roles of 'inputs'")
    options = recipe.get("options")
    if not isinstance(options, dict):
        raise bad("'recipe.options' is not an object")
    domains = options.get("library_domains")
    if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
        raise bad("'recipe.options.library_domains' is not a list of strings")
    telemetry = options.get("telemetry")
    if telemetry is not None and not isinstance(telemetry, dict):
        raise bad("'recipe.options.telemetry' is not an object")
    telemetry_options_from(telemetry)  # raises CheckFailed naming the problem
    return meta


def _check_inputs_listing(root: Path, meta: Mapping[str, Any]) -> None:
    """``inputs-sha256.txt`` and the metadata's inputs must name the same digests."""
    recorded = "".join(f"{i['sha256']}  {i['name']}\n" for i in meta["inputs"])
    if (root / INPUTS).read_bytes() != recorded.encode("utf-8", errors="surrogatepass"):
        raise CheckFailed(f"{root}: {INPUTS} and {METADATA} disagree about the inputs")


def _match_inputs(meta: Mapping[str, Any], given: list[Path]) -> list[tuple[dict[str, Any], Path]]:
    """Pair given paths with recorded inputs: by basename, then (renamed files) in recorded order."""
    recorded: list[dict[str, Any]] = list(meta.get("inputs", []))
    if len(given) != len(recorded):
        names = ", ".join(f"{r['name']} ({r['role']})" for r in recorded)
        raise BadOption(f"--inputs: the report was made from {len(recorded)} input(s) ({names}); {len(given)} given")
    pairs: dict[int, Path] = {}
    rest: list[Path] = []
    counts: dict[str, int] = {}
    for r in recorded:
        counts[r["name"]] = counts.get(r["name"], 0) + 1
    for p in given:
        idx = next(
            (i for i, r in enumerate(recorded) if r["name"] == p.name and counts[r["name"]] == 1 and i not in pairs),
            None,
        )
        if idx is None:
            rest.append(p)
        else:
            pairs[idx] = p
    free = [i for i in range(len(recorded)) if i not in pairs]
    for i, p in zip(free, rest, strict=True):
        pairs[i] = p
    return [(recorded[i], pairs[i]) for i in range(len(recorded))]


def _recipe_from(meta: Mapping[str, Any], paths: Mapping[str, str]) -> Recipe:
    """The recipe metadata.json records (already checked by :func:`_metadata_of`)."""
    spec = meta["recipe"]
    options = spec["options"]
    return Recipe(
        kind=spec["kind"],
        inputs=tuple((r["role"], paths[r["role"]]) for r in spec["inputs"]),
        library_domains=tuple(options["library_domains"] or DEFAULT_LIBRARY_DOMAINS),
        telemetry_options=telemetry_options_from(options.get("telemetry")),
    )


def _first_diff(old: bytes, new: bytes) -> str:
    a, b = old.splitlines(), new.splitlines()
    for number, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            return f"first difference at line {number}"
    return f"{len(a)} lines sealed, {len(b)} now"
