"""What a sealed folder holds: its file names, formats and the ``sha256sum`` manifest form."""

from __future__ import annotations

import re
from collections.abc import Mapping

REPORT_JSON = "report.json"


REPORT_MD = "report.md"


INPUTS = "inputs-sha256.txt"


MANIFEST = "manifest-sha256.txt"


METADATA = "metadata.json"


TAGMANIFEST = "tagmanifest-sha256.txt"


PAYLOAD = (INPUTS, REPORT_JSON, REPORT_MD)


TAG_FILES = (MANIFEST, METADATA)


SEAL_FORMAT = "nsysaudit.seal/2"  # /1 sealed manifest-sha256.txt only


ANALYSIS_FORMAT = "nsysaudit.analysis/1"


_LINE = re.compile(r"^([0-9a-f]{64})  (.+)$")


def manifest_text(digests: Mapping[str, str]) -> bytes:
    """``sha256sum`` format, one ``<hex>  <name>`` line per file, sorted by name."""
    return "".join(f"{digests[name]}  {name}\n" for name in sorted(digests)).encode("utf-8")
