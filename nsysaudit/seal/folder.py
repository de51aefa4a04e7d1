"""Writing a sealed report folder: atomically, never over evidence, and its seal.

A sealed report folder DIR holds (flat, no sub-folders)::

    report.json              canonical JSON: sorted keys, stable order, no wall-clock time, no paths;
                             ``options`` holds every option that changes the analysis
    report.md                the same facts for people (trace text escaped as Markdown data)
    inputs-sha256.txt        "<sha256>  <basename>" of every input (exports, .nsys-rep, telemetry)
    timeline-observe.svg     each arm's timeline picture (nsysaudit.render.pictures); an analysis
    timeline-release.svg     has one, timeline.svg
    report.html              report.md with the pictures inline (nsysaudit.render.html)
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
manifest those of the payload files, and ``verify`` refuses any file, folder or manifest entry
beyond these. Editing any file, or adding one (even listed in a rewritten manifest), changes the
tag manifest or makes ``verify`` fail; ``verify --seal`` then fails too. (Format 1 sealed only
``manifest-sha256.txt``, format 2 had no pictures: ``verify`` names such folders and refuses them;
``--force`` replaces one that is intact by its own manifests.)

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
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nsysaudit.core.digests import sha256_bytes
from nsysaudit.core.errors import CheckFailed, OutputExists, OutputNotWritable
from nsysaudit.core.files import write_atomic
from nsysaudit.core.progress import Progress
from nsysaudit.read.telemetry import TelemetryOptions
from nsysaudit.read.trace import DEFAULT_LIBRARY_DOMAINS
from nsysaudit.render.json import indented
from nsysaudit.reports.analysis import AnalysisResult
from nsysaudit.reports.documents import ComparisonDocument, SealedAnalysisDocument
from nsysaudit.seal import fsops
from nsysaudit.seal.layout import (
    MANIFEST,
    METADATA,
    TAGMANIFEST,
    manifest_text,
)
from nsysaudit.seal.recipe import (
    Recipe,
    SealMetadata,
    build,
    check_labels,
    sealed_domains,
    sealed_metadata,
    snapshot_roles,
)
from nsysaudit.seal.verify import (
    check_files,
    check_kind,
    metadata_of,
    older_folder_problems,
)


@dataclass(frozen=True)
class Sealed:
    """A written report folder and its seal (SHA-256 of its tag manifest)."""

    dir: Path
    seal: str
    files: tuple[str, ...]
    document: SealedAnalysisDocument | ComparisonDocument
    results: dict[str, AnalysisResult] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"<Sealed {str(self.dir)!r}: seal sha256:{self.seal}, {len(self.files)} files>"


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
        older = older_folder_problems(target)
        if older is not None:  # sealed by an earlier nsysaudit: replaced when intact by its own manifests
            problems = older
        else:
            problems = check_files(target)
            if not problems:
                check_kind(target, metadata_of(target))
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
    metadata: SealMetadata,
    *,
    force: bool = False,
    inputs: Sequence[str | os.PathLike[str]] = (),
) -> tuple[Path, str, tuple[str, ...]]:
    """Write payload ``files``, their manifest, ``metadata`` and the tag manifest into ``out``,
    atomically: the folder, its seal and its file names.

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
            write_atomic(tmp / name, files[name])
        manifest = manifest_text({name: sha256_bytes(data) for name, data in files.items()})
        meta = indented(metadata)
        write_atomic(tmp / MANIFEST, manifest)
        write_atomic(tmp / METADATA, meta)
        tags = manifest_text({MANIFEST: sha256_bytes(manifest), METADATA: sha256_bytes(meta)})
        write_atomic(tmp / TAGMANIFEST, tags)
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
    return target, sha256_bytes(tags), names


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
    metadata = sealed_metadata(built, _out_path(out))
    folder, sealed, names = write_sealed(out, built.files, metadata, force=force, inputs=inputs)
    return Sealed(folder, sealed, names, built.document, built.results)


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
    labels: Sequence[str] | None = None,
    observe_snapshots: Sequence[str | os.PathLike[str]] = (),
    release_snapshots: Sequence[str | os.PathLike[str]] = (),
) -> Sealed:
    """Compare an observe arm and a release arm and write the sealed comparison into ``out``
    (``observe_snapshots``, ``release_snapshots``: each arm's PyTorch memory snapshots, sealed as inputs).
    ``labels``: what the sentences call the two arms (two names; :func:`check_labels`).

    >>> import tempfile, pathlib
    >>> torch = "tests/fixtures/h200-cuda13-nsys2025.3/torch/"
    >>> out = pathlib.Path(tempfile.mkdtemp()) / "cmp"
    >>> sealed = seal_compare(torch + "observe.sqlite", torch + "release.sqlite", out)
    >>> len(sealed.seal), sealed.document["arms"]["observe"]["verdict"]
    (64, 'failure_found')
    """
    roles: list[tuple[str, str]] = [("observe", os.fspath(observe)), ("release", os.fspath(release))]
    if observe_telemetry is not None:
        roles.append(("observe_telemetry", os.fspath(observe_telemetry)))
    if release_telemetry is not None:
        roles.append(("release_telemetry", os.fspath(release_telemetry)))
    named = check_labels(labels) if labels is not None else None
    roles += snapshot_roles(observe_snapshots, "observe_") + snapshot_roles(release_snapshots, "release_")
    recipe = Recipe("compare", tuple(roles), tuple(library_domains), telemetry_options, named)
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
    snapshots: Sequence[str | os.PathLike[str]] = (),
) -> Sealed:
    """Analyze one arm and write the sealed report into ``out`` (``snapshots``: PyTorch memory
    snapshots of the run, sealed as inputs)."""
    roles: list[tuple[str, str]] = [("arm", os.fspath(path))]
    if telemetry is not None:
        roles.append(("telemetry", os.fspath(telemetry)))
    roles += snapshot_roles(snapshots)
    recipe = Recipe("analyze", tuple(roles), tuple(library_domains), telemetry_options)
    return seal(recipe, out, force=force, nsys_path=nsys_path, progress=progress)
