"""Shared test fixtures: paths to the bundled real captures and a builder-backed factory."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))

from builder import Export, build_export  # noqa: E402

FIXTURES = TESTS / "fixtures"
H200 = FIXTURES / "h200-cuda13-nsys2023.4"
H200_2025 = FIXTURES / "h200-cuda13-nsys2025.3"
PUBLIC = FIXTURES / "public"


@pytest.fixture
def make_export(tmp_path: Path) -> Callable[..., Path]:
    """Build an nsys-schema SQLite from an :class:`Export` description into tmp_path."""
    counter = iter(range(1_000_000))

    def make(spec: Export, name: str | None = None) -> Path:
        return build_export(spec, tmp_path / (name or f"export-{next(counter)}.sqlite"))

    return make


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep every test's .nsys-rep export cache out of the user's real cache folder."""
    monkeypatch.setenv("NSYSAUDIT_CACHE", str(tmp_path_factory.mktemp("cache")))
