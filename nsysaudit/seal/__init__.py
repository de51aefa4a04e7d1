"""Sealed report folders: write a report with its manifests, verify one, re-run its recipe."""

from nsysaudit.seal.core import Sealed, Verification, seal_analysis, seal_compare, verify

__all__ = ["Sealed", "Verification", "seal_analysis", "seal_compare", "verify"]
