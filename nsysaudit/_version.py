"""The package version, in one place (the package root, reports and seals read it from here)."""

__version__ = "0.1.0"
