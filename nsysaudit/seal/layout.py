"""What a sealed folder holds: its file names, formats and the ``sha256sum`` manifest form."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
INPUTS = "inputs-sha256.txt"
MANIFEST = "manifest-sha256.txt"
METADATA = "metadata.json"
TAGMANIFEST = "tagmanifest-sha256.txt"
TAG_FILES = (MANIFEST, METADATA)
# /1 sealed manifest-sha256.txt only; /2 had no pictures and no report.html.
SEAL_FORMAT = "nsysaudit.seal/3"
# report.json of a sealed analysis; /1 had no ``schema`` key (see nsysaudit.seal.verify.OLDER_REPORTS).
ANALYSIS_FORMAT = "nsysaudit.analysis/2"

ReportKind = Literal["compare", "analyze"]
# The timeline picture of each arm (see nsysaudit.reports.timeline): a comparison has two, an analysis one.
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
    """The payload file of one arm's picture (``None``: the single arm of an analysis)."""
    return "timeline.svg" if arm is None else f"timeline-{arm}.svg"


MANIFEST_LINE = re.compile(r"\A([0-9a-f]{64})  (.+)\Z")


def manifest_text(digests: Mapping[str, str]) -> bytes:
    """``sha256sum`` format, one ``<hex>  <name>`` line per file, sorted by name."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)).encode("utf-8")


def checksum_line(digest: str, name: str) -> bytes:
    r"""One line as GNU ``sha256sum`` (coreutils 9) writes it, so that ``sha256sum -c`` reads the
    name back: a name holding a backslash, a line feed or a carriage return is written with them
    escaped (``\\``, ``\n``, ``\r``) after a leading backslash; any other byte as it is
    (``sha256sum`` has no escape for it: this is a checksum file, shown escaped wherever it is
    displayed). A name's undecodable bytes (``surrogateescape``) are written back as those bytes.

    >>> line = checksum_line("ab" * 32, "run\\1.sqlite")
    >>> line[:1], line.endswith(b"  run\\\\1.sqlite\n")
    (b'\\', True)
    >>> checksum_line("ab" * 32, "a\nb").endswith(b"  a\\nb\n")
    True
    """
    if any(c in name for c in "\\\n\r"):
        escaped = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
        return f"\\{digest}  {escaped}\n".encode("utf-8", "surrogateescape")
    return f"{digest}  {name}\n".encode("utf-8", "surrogateescape")
