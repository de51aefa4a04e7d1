"""Sealed report folders: a report whose every byte is hashed, and ``verify`` to check it.

- :mod:`nsysaudit.seal.layout`: what a sealed folder holds (file names, formats, manifests);
- :mod:`nsysaudit.seal.recipe`: what a report is made from and how (inputs, options, payload, the
  command that makes it again, metadata);
- :mod:`nsysaudit.seal.folder`: writing it, atomically, never over evidence (``seal_compare``,
  ``seal_analysis``);
- :mod:`nsysaudit.seal.verify`: checking it, and re-running its recipe.
"""

from nsysaudit.seal.folder import Sealed, seal_analysis, seal_compare
from nsysaudit.seal.recipe import format_ms
from nsysaudit.seal.verify import Verification, verify

__all__ = ["Sealed", "Verification", "format_ms", "seal_analysis", "seal_compare", "verify"]
