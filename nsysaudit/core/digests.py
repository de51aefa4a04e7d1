"""SHA-256 of files and bytes: the inputs' digests, the export cache, the seal's manifests."""

from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    """SHA-256 of a file's bytes, read in chunks (multi-GB exports stay out of memory)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
