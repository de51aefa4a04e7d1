"""``verify``: check every digest of a sealed folder, refuse what it cannot pin, and, given the inputs,
re-run the recorded analysis: the payload must come out byte-identical."""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from nsysaudit.core.digests import sha256_file
from nsysaudit.core.errors import BadOption, CheckFailed, UnusableInput
from nsysaudit.core.limits import read_at_most
from nsysaudit.core.shapes import JSON
from nsysaudit.read.source import SIDE_SUFFIXES
from nsysaudit.reports.compare import REPORT_FORMAT
from nsysaudit.reports.documents import SealedInput
from nsysaudit.seal.layout import (
    ANALYSIS_FORMAT,
    INPUTS,
    MANIFEST,
    MANIFEST_LINE,
    METADATA,
    PICTURES,
    SEAL_FORMAT,
    TAG_FILES,
    TAGMANIFEST,
    ReportKind,
    checksum_line,
    manifest_text,
    payload,
)
from nsysaudit.seal.recipe import (
    CheckedMetadata,
    InputFile,
    build,
    engines,
    input_file,
    recipe_from,
    snapshot_options_from,
    telemetry_options_from,
    tool_versions,
)
from nsysaudit.words import verification_repr

_HEX64 = re.compile(r"[0-9a-f]{64}", re.ASCII)


class VerifiedInput(SealedInput):
    """A sealed input that ``verify`` found at ``path``, with the recorded digest and size."""

    path: str


@dataclass(frozen=True)
class Verification:
    """What ``verify`` checked; it raises :class:`CheckFailed` instead of returning on any failure."""

    dir: Path
    seal: str
    files: tuple[str, ...]
    inputs: tuple[VerifiedInput, ...] = ()
    rerun: bool = False

    def __repr__(self) -> str:
        return verification_repr(str(self.dir), self.seal, len(self.files), self.rerun)


def _safe_name(name: str) -> str | None:
    """Why a manifest entry is refused (escapes DIR, not a plain relative path), or None."""
    if name.startswith(("/", "\\")) or re.match(r"\A[A-Za-z]:", name):
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
        m = MANIFEST_LINE.match(line)
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

    Raises :class:`~nsysaudit.core.errors.UnusableInput` (exit 2) when ``dir`` is not a sealed report
    folder at all (no manifest), and :class:`~nsysaudit.core.errors.CheckFailed` (exit 1) naming
    every missing, extra or changed file, any manifest entry that escapes the folder, an input
    whose digest differs, and a re-run whose report differs.
    """
    root = Path(dir)
    if not root.is_dir():
        raise UnusableInput(root, "no such folder" if not root.exists() else "not a folder")
    if not (root / MANIFEST).exists() and not (root / MANIFEST).is_symlink():
        raise UnusableInput(root, f"no {MANIFEST}: not a sealed nsysaudit report folder")
    _refuse_older_format(root)
    problems = check_files(root)
    digest = sha256_file(root / TAGMANIFEST) if (root / TAGMANIFEST).is_file() else "none"
    if expected_seal is not None and expected_seal.lower().removeprefix("sha256:") != digest:
        problems.append(f"{TAGMANIFEST}: its sha256 {digest} is not the expected seal {expected_seal}")
    if problems:
        raise CheckFailed(f"{root}: verification failed: " + "; ".join(problems))
    meta = metadata_of(root)
    _check_inputs_listing(root, meta)
    kind = check_kind(root, meta)
    files = tuple(sorted([*payload(kind), *TAG_FILES, TAGMANIFEST]))
    if inputs is None:
        return Verification(root, digest, files)
    given = _match_inputs(meta, [input_file("input", p) for p in inputs])
    checked: list[VerifiedInput] = []
    for rec, found in given:
        path = found.path
        if found.sha256 != rec["sha256"] or found.size_bytes != rec["size_bytes"]:
            raise CheckFailed(
                f"input {path} ({rec['role']}): differs from the sealed {rec['name']} "
                f"(sha256 {found.sha256}, {found.size_bytes:,} bytes; recorded {rec['sha256']}, "
                f"{rec['size_bytes']:,} bytes)"
            )
        checked.append({**rec, "path": os.fspath(path)})
    _refuse_other_report_format(root, kind)
    with _as_sealed(given) as paths:
        rebuilt = build(recipe_from(meta, paths), nsys_path=nsys_path)
    for name in payload(kind):
        old = (root / name).read_bytes()
        new = rebuilt.files[name]
        if old != new:
            sealed_with = meta["versions"]
            now = tool_versions()
            changed = [
                f"{k} {sealed_with.get(k)} -> {now.get(k)}"
                for k in ("nsysaudit", "polars", "sqlite", "python", "matplotlib")
                if sealed_with.get(k) != now.get(k)
            ]
            sealed_engines, read_by = meta.get("engines"), engines(rebuilt)
            changed += [
                f"{role} read by {was.get('engine')} -> {read_by[role]['engine']}"
                for role, was in sorted(sealed_engines.items() if isinstance(sealed_engines, dict) else [])
                if isinstance(was, dict) and role in read_by and was.get("engine") != read_by[role]["engine"]
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


OLDER_FORMATS = {
    "nsysaudit.seal/1": f"whose seal does not cover {METADATA}",
    "nsysaudit.seal/2": "made before the timeline pictures and report.html were sealed",
}


def _refuse_older_format(root: Path) -> None:
    """A folder sealed in an older format is named as such (before its files are compared with
    this format's list, which would only say that files are missing)."""
    path = root / METADATA
    try:
        readable = path.is_file() and not path.is_symlink()
        meta: JSON = json.loads(read_at_most(path).decode("utf-8")) if readable else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # ValueError: not JSON, or a 4,300-digit int
        return  # reported by the checks that follow
    fmt = meta.get("format") if isinstance(meta, dict) else None
    if isinstance(fmt, str) and fmt in OLDER_FORMATS:
        raise CheckFailed(
            f"{path}: an {fmt} folder, {OLDER_FORMATS[fmt]}; make it again with this nsysaudit "
            f"(its recorded command) to get an {SEAL_FORMAT} seal that pins every file"
        )


# report.json formats this nsysaudit verifies but no longer writes: a re-run cannot give their bytes.
OLDER_REPORTS = {
    "nsysaudit.analysis/1": "made before report.json named its schema",
    "nsysaudit.compare/1": "made before report.json named its schema",
}
REPORT_FORMATS: dict[ReportKind, str] = {"analyze": ANALYSIS_FORMAT, "compare": REPORT_FORMAT}


def _refuse_other_report_format(root: Path, kind: ReportKind) -> None:
    """Before ``verify --inputs`` re-runs anything: a report.json of another format than this
    nsysaudit writes (``metadata.json``'s ``report.format``, pinned by the seal) cannot come out
    byte-identical; that is said in one line, not as a difference at some line of report.json."""
    try:
        meta: JSON = json.loads((root / METADATA).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # metadata_of() read it: cannot happen
        return
    report = meta.get("report") if isinstance(meta, dict) else None
    fmt = report.get("format") if isinstance(report, dict) else None
    if not isinstance(fmt, str) or fmt == REPORT_FORMATS[kind]:
        return
    why = OLDER_REPORTS.get(fmt, "not a format this nsysaudit knows")
    shown = fmt if len(fmt) <= 80 else fmt[:77] + "..."
    raise CheckFailed(
        f"{root}: its report.json is {shown} ({why}); this nsysaudit writes {REPORT_FORMATS[kind]}, so re-running "
        "it cannot give the same bytes: verify without --inputs checks its seal, and the command recorded in "
        f"{METADATA} makes it again"
    )


def older_folder_problems(root: Path) -> list[str] | None:
    """For a folder sealed in an older format (``OLDER_FORMATS``): what is wrong with it by its own
    manifests (a listed file missing or changed, a file no manifest lists); None for any other
    folder. ``--force`` may replace an older folder that is intact, as it may a current one."""
    path = root / METADATA
    try:
        readable = path.is_file() and not path.is_symlink()
        meta: JSON = json.loads(read_at_most(path).decode("utf-8")) if readable else None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):  # ValueError: not JSON, or a 4,300-digit int
        return None
    if not (isinstance(meta, dict) and meta.get("format") in OLDER_FORMATS):
        return None
    problems: list[str] = []
    known = {MANIFEST, METADATA}
    for listing in (MANIFEST, TAGMANIFEST):
        if not (root / listing).is_file():
            continue
        known.add(listing)
        for name, digest in sorted(_read_manifest(root, listing).items()):
            trouble = _check_entry(root, name)
            if trouble is not None:
                problems.append(f"{trouble} (listed in {listing})")
                continue
            known.add(name)
            if sha256_file(root / name) != digest:
                problems.append(f"{name}: changed since it was sealed")
    for entry in sorted(root.iterdir()):
        if entry.name not in known:
            problems.append(f"{entry.name}: extra (not in {MANIFEST})")
    return problems


def check_kind(root: Path, meta: CheckedMetadata) -> ReportKind:
    """The report's kind as ``metadata.json`` records it; the manifest must list that kind's payload."""
    kind: ReportKind = meta["recipe"]["kind"]
    if set(_read_manifest(root, MANIFEST)) != set(payload(kind)):
        raise CheckFailed(f"{root}: {MANIFEST} does not list the payload of the {kind} report {METADATA} records")
    return kind


def check_files(root: Path) -> list[str]:
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


_KINDS = ("sqlite", "nsys-rep", "telemetry", "snapshot")


def metadata_of(root: Path) -> CheckedMetadata:
    """``metadata.json``, checked for every key and type ``verify`` uses: anything else is a
    tampered folder, a failed check (exit 1), never a traceback."""
    path = root / METADATA
    try:
        meta: JSON = json.loads(read_at_most(path).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:  # ValueError: also an integer of 4,300 digits
        raise CheckFailed(f"{path}: not readable JSON ({str(exc)[:200]})") from None
    if not isinstance(meta, dict) or meta.get("format") != SEAL_FORMAT:
        raise CheckFailed(f"{path}: not {SEAL_FORMAT} metadata")

    def bad(what: str) -> CheckFailed:
        return CheckFailed(f"{path}: {what} (a tampered or foreign {METADATA})")

    inputs, recipe, versions = meta.get("inputs"), meta.get("recipe"), meta.get("versions")
    if not isinstance(versions, dict):
        raise bad("'versions' is not an object")
    if not isinstance(inputs, list) or not inputs:
        raise bad("'inputs' is not a non-empty list")
    records: list[SealedInput] = []
    for i, raw in enumerate(inputs):
        rec = _sealed_input(raw)
        if rec is None:
            raise bad(f"inputs[{i}] is not {{role, name, sha256 (hex), size_bytes (int), kind}}")
        records.append(rec)
    roles = [rec["role"] for rec in records]
    if len(set(roles)) != len(roles):
        raise bad("an input role is listed twice")
    kind = next((k for k in _REPORT_KINDS if isinstance(recipe, dict) and recipe.get("kind") == k), None)
    if not isinstance(recipe, dict) or kind is None:
        raise bad("no recipe to re-run ('recipe.kind' is not compare or analyze)")
    spec_inputs = recipe.get("inputs")
    listed = spec_inputs if isinstance(spec_inputs, list) else []
    spec_roles = [role for r in listed if isinstance(r, dict) and isinstance(role := r.get("role"), str)]
    if not isinstance(spec_inputs, list) or len(spec_roles) != len(listed) or sorted(spec_roles) != sorted(roles):
        raise bad("'recipe.inputs' does not name the roles of 'inputs'")
    options = recipe.get("options")
    if not isinstance(options, dict):
        raise bad("'recipe.options' is not an object")
    domains = options.get("library_domains")
    names = [d for d in domains if isinstance(d, str)] if isinstance(domains, list) else []
    if not isinstance(domains, list) or len(names) != len(domains):
        raise bad("'recipe.options.library_domains' is not a list of strings")
    telemetry = options.get("telemetry")
    if telemetry is not None and not isinstance(telemetry, dict):
        raise bad("'recipe.options.telemetry' is not an object")
    telemetry_options_from(telemetry)  # raises CheckFailed naming the problem
    labels = options.get("labels")
    if labels is not None and (not isinstance(labels, list) or len(labels) != 2
                               or not all(isinstance(a, str) and a for a in labels)):
        raise bad("'recipe.options.labels' is not a list of two names")
    tolerance = snapshot_options_from(options.get("snapshots"))  # the same
    checked: CheckedMetadata = {
        "format": SEAL_FORMAT,
        "inputs": records,
        "recipe": {
            "kind": kind,
            "inputs": [{"role": role} for role in spec_roles],
            "options": {"library_domains": names, "telemetry": telemetry},
        },
        "versions": versions,
    }
    if isinstance(labels, list):
        checked["recipe"]["options"]["labels"] = [str(a) for a in labels]
    if tolerance is not None:
        checked["recipe"]["options"]["snapshot_tolerance_ns"] = tolerance
    if "engines" in meta:
        checked["engines"] = meta["engines"]
    return checked


_REPORT_KINDS: tuple[ReportKind, ...] = ("compare", "analyze")


def _sealed_input(rec: JSON) -> SealedInput | None:
    """A recorded input of metadata.json, if it is one: ``role``, ``name``, ``sha256`` (hex),
    ``size_bytes`` (a non-negative integer) and ``kind``, of those types."""
    if not isinstance(rec, dict):
        return None
    role, name, sha, kind, size = (rec.get(k) for k in ("role", "name", "sha256", "kind", "size_bytes"))
    if not (isinstance(role, str) and isinstance(name, str) and isinstance(sha, str) and isinstance(kind, str)):
        return None
    if _HEX64.fullmatch(sha) is None or kind not in _KINDS or type(size) is not int or size < 0:
        return None
    return {"role": role, "name": name, "sha256": sha, "size_bytes": size, "kind": kind}


def _check_inputs_listing(root: Path, meta: CheckedMetadata) -> None:
    """``inputs-sha256.txt`` and the metadata's inputs must name the same digests."""
    recorded = b"".join(checksum_line(i["sha256"], i["name"]) for i in meta["inputs"])
    if (root / INPUTS).read_bytes() != recorded:
        raise CheckFailed(f"{root}: {INPUTS} and {METADATA} disagree about the inputs")


def _match_inputs(meta: CheckedMetadata, given: list[InputFile]) -> list[tuple[SealedInput, InputFile]]:
    """Pair the given inputs with the recorded ones: by content first (the same SHA-256 and size: the
    right file under another name is that input), then the rest by basename, then (renamed files
    that differ) in recorded order."""
    recorded = meta["inputs"]
    if len(given) != len(recorded):
        names = ", ".join(f"{r['name']} ({r['role']})" for r in recorded)
        raise BadOption(f"--inputs: the report was made from {len(recorded)} input(s) ({names}); {len(given)} given")
    pairs: dict[int, InputFile] = {}
    rest: list[InputFile] = []
    for g in given:
        idx = next((i for i, r in enumerate(recorded)
                    if i not in pairs and r["sha256"] == g.sha256 and r["size_bytes"] == g.size_bytes), None)
        if idx is None:
            rest.append(g)
        else:
            pairs[idx] = g
    counts: dict[str, int] = {}
    for r in recorded:
        counts[r["name"]] = counts.get(r["name"], 0) + 1
    unnamed: list[InputFile] = []
    for g in rest:
        idx = next(
            (i for i, r in enumerate(recorded) if r["name"] == g.name and counts[r["name"]] == 1 and i not in pairs),
            None,
        )
        if idx is None:
            unnamed.append(g)
        else:
            pairs[idx] = g
    free = [i for i in range(len(recorded)) if i not in pairs]
    for i, g in zip(free, unnamed, strict=True):
        pairs[i] = g
    return [(recorded[i], pairs[i]) for i in range(len(recorded))]


@contextlib.contextmanager
def _as_sealed(given: list[tuple[SealedInput, InputFile]]) -> Iterator[dict[str, str]]:
    """Each role's path for the re-run, under the name the report recorded: a report names its inputs
    by basename, so a file given under another name is re-run through a link of the recorded name
    (in a temporary folder, one per role; the side files SQLite's readers look for beside it linked
    too), and its report is the sealed one. Nothing is written beside the evidence."""
    if all(found.name == rec["name"] for rec, found in given):
        yield {rec["role"]: os.fspath(found.path) for rec, found in given}
        return
    with tempfile.TemporaryDirectory(prefix="nsysaudit-verify-") as tmp:
        paths: dict[str, str] = {}
        for rec, found in given:
            if found.name == rec["name"]:
                paths[rec["role"]] = os.fspath(found.path)
                continue
            folder = Path(tmp) / rec["role"]
            folder.mkdir()
            target = found.path.resolve()
            link = folder / rec["name"]
            link.symlink_to(target)
            for suffix in SIDE_SUFFIXES:
                side = target.with_name(target.name + suffix)
                if side.exists() or side.is_symlink():
                    (folder / (rec["name"] + suffix)).symlink_to(side)
            paths[rec["role"]] = os.fspath(link)
        yield paths


def _first_diff(old: bytes, new: bytes) -> str:
    a, b = old.splitlines(), new.splitlines()
    for number, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            return f"first difference at line {number}"
    return f"{len(a)} lines sealed, {len(b)} now"
