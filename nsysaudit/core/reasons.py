"""A reason as the analysis states it: a code and the values it stands on, never a sentence.

The sentence is made from it once, by :func:`nsysaudit.words.say`; the document keeps that sentence
(``verdict_reasons``, a warning's ``message``), and the code stays with the facts it came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class Reason:
    """``code``: what the reason is (a key of :mod:`nsysaudit.words`' templates); ``values``: the facts
    its sentence names (counts, names, ids), read-only."""

    code: str
    values: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def of(cls, code: str, **values: object) -> Reason:
        """``Reason.of("censored_calls", calls=3)``: the values as keywords."""
        return cls(code, MappingProxyType(values))
