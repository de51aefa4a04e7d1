"""The analysis: pure functions on the frames of a loaded trace (coverage, joins, findings, verdict, alignment).

:func:`analyze_trace` runs every step in order and returns an :class:`Analysis`.
"""

from nsysaudit.analysis.run import Analysis, analyze_trace

__all__ = ["Analysis", "analyze_trace"]
