"""Reading the application's own receipts: JSON Lines telemetry with clock stamps.

One JSON object per line, with an event name (``event`` by default) and at least one clock
stamp: ``monotonic_ns`` (CLOCK_MONOTONIC) and/or ``realtime_ns`` (UTC, ns since the epoch).
Field names are configurable through :class:`TelemetryOptions`. Every other field (pid, tid,
bytes, message, ...) is kept as data.

A bad line (invalid JSON, not an object, no event name, a clock field that is missing or not an
integer, or a value that could not be kept exactly: an integer outside 64 bits, NaN or an
infinity, a lone surrogate, nesting deeper than 32 levels) is an error naming its line number,
unless ``lenient`` is set: then it becomes a warning with its line number and the other lines
are used. A file with no usable line is always an error.

Nothing here knows about traces; :mod:`nsysaudit.analysis.alignment` maps these stamps to trace time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from nsysaudit.core.digests import sha256_bytes
from nsysaudit.core.errors import BadOption, UnusableInput
from nsysaudit.core.paths import refuse_undecodable_name

ClockKind = Literal["monotonic", "realtime"]
Edge = Literal["start", "end"]

CLOCK_KINDS: tuple[ClockKind, ...] = ("monotonic", "realtime")
DEFAULT_CLOCKS: tuple[tuple[ClockKind, str], ...] = (("monotonic", "monotonic_ns"), ("realtime", "realtime_ns"))
DEFAULT_TOLERANCE_NS = 1_000_000
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Identity fields read from each line when present (shown, matched against the trace's own
# process/thread ids to choose anchors, never used to relabel trace events).
PID_FIELD, TID_FIELD = "pid", "tid"
MAX_ERROR_LINES = 3
MAX_DEPTH = 32  # JSON nesting per line; orjson, which writes the report, stops at 255
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Anchor:
    """A configured anchor: telemetry event ``event`` marks the ``edge`` of NVTX range ``nvtx``."""

    event: str
    nvtx: str
    edge: Edge

    def __str__(self) -> str:
        return f"{self.event}={self.nvtx}:{self.edge}"


def default_edge(event: str) -> Edge:
    """The range edge a telemetry event names: ``*_start``/``*_begin`` a start, anything else an end.

    A line named after a phase without a suffix (``cache_release``) is taken as written when the
    phase finished, the usual way receipts are written (do the work, then log it).
    """
    return "start" if event.endswith(("_start", "_begin")) else "end"


def default_range_name(event: str) -> str:
    """The NVTX range a telemetry event names: ``X_start``/``X_begin``/``X_end`` -> ``X``, else itself."""
    for suffix in ("_start", "_begin", "_end"):
        if event.endswith(suffix) and len(event) > len(suffix):
            return event[: -len(suffix)]
    return event


def parse_anchor(spec: str) -> Anchor:
    """Parse ``EVENT=NVTX_NAME[:start|end]``; without an edge, :func:`default_edge` of EVENT.

    >>> parse_anchor("admission_start=admission")
    Anchor(event='admission_start', nvtx='admission', edge='start')
    >>> parse_anchor("done=backward:end")
    Anchor(event='done', nvtx='backward', edge='end')
    """
    event, sep, target = spec.partition("=")
    if not sep or not event or not target:
        raise BadOption(f"--anchor {spec!r}: expected EVENT=NVTX_NAME[:start|end]")
    name, colon, edge = target.rpartition(":")
    if colon and edge in ("start", "end"):
        return Anchor(event, name, edge)  # type: ignore[arg-type]
    if colon and not name:
        raise BadOption(f"--anchor {spec!r}: the NVTX range name is empty")
    return Anchor(event, target, default_edge(event))


def parse_clock(spec: str) -> tuple[ClockKind, str]:
    """Parse ``KIND`` or ``KIND=FIELD`` (KIND: monotonic | realtime) for ``--telemetry-clock``.

    >>> parse_clock("realtime=wall_ns")
    ('realtime', 'wall_ns')
    >>> parse_clock("monotonic")
    ('monotonic', 'monotonic_ns')
    """
    kind, sep, name = spec.partition("=")
    if kind not in CLOCK_KINDS:
        raise BadOption(f"--telemetry-clock {spec!r}: expected monotonic[=FIELD] or realtime[=FIELD]")
    if sep and not name:
        raise BadOption(f"--telemetry-clock {spec!r}: the field name is empty")
    return kind, (name if sep else dict(DEFAULT_CLOCKS)[kind])


@dataclass(frozen=True)
class TelemetryOptions:
    """How to read a telemetry file and check its alignment with a trace.

    - ``event_key``: the field holding the event name.
    - ``clock``: which clock fields to read, as ``(kind, field)`` pairs; a kind left out is not
      read at all (``(("realtime", "realtime_ns"),)`` reads UTC stamps only).
    - ``lenient``: bad lines become warnings instead of an error.
    - ``anchors``: configured anchors; when empty, the default rule pairs ``X_start``/``X_begin``
      with the start of NVTX range ``X``, ``X_end`` with its end, and ``X`` with the end of ``X``.
    - ``tolerance_ns``: how far the two mappings, and each anchor, may disagree (default 1 ms).
    """

    event_key: str = "event"
    clock: tuple[tuple[ClockKind, str], ...] = DEFAULT_CLOCKS
    lenient: bool = False
    anchors: tuple[Anchor, ...] = ()
    tolerance_ns: int = DEFAULT_TOLERANCE_NS

    def __post_init__(self) -> None:
        if not self.event_key:
            raise BadOption("--telemetry-event-key: the field name is empty")
        if not self.clock:
            raise BadOption("--telemetry-clock: at least one clock field is needed")
        kinds = [k for k, _ in self.clock]
        if len(set(kinds)) != len(kinds):
            raise BadOption(f"--telemetry-clock: a clock kind is given twice ({', '.join(kinds)})")
        if not 0 <= self.tolerance_ns <= INT64_MAX:
            raise BadOption(f"--clock-tolerance must be between 0 and {INT64_MAX:,} ns (got {self.tolerance_ns:,} ns)")

    @classmethod
    def from_specs(
        cls,
        *,
        event_key: str = "event",
        clocks: Sequence[str] = (),
        anchors: Sequence[str] = (),
        tolerance_ns: int = DEFAULT_TOLERANCE_NS,
        lenient: bool = False,
    ) -> TelemetryOptions:
        """The options as the command line spells them: ``clocks`` as ``KIND[=FIELD]`` (none: the
        default clocks), ``anchors`` as ``EVENT=RANGE[:start|:end]``; raises
        :class:`~nsysaudit.core.errors.BadOption` (one line) for a spelling it cannot read."""
        return cls(
            event_key=event_key,
            clock=tuple(parse_clock(c) for c in clocks) if clocks else DEFAULT_CLOCKS,
            anchors=tuple(parse_anchor(a) for a in anchors),
            tolerance_ns=tolerance_ns,
            lenient=lenient,
        )

    @property
    def clock_fields(self) -> dict[ClockKind, str]:
        """``{kind: field}`` of the clocks to read."""
        return dict(self.clock)


@dataclass(frozen=True)
class TelemetryEvent:
    """One usable telemetry line. ``clocks`` maps clock kind to its stamp (ns) when present."""

    line: int
    event: str
    clocks: Mapping[ClockKind, int]
    pid: int | None
    tid: int | None
    fields: Mapping[str, Any]
    # values(...) under the options the line was read with, worked out once when it was read
    measured: Mapping[str, Any] = field(default_factory=dict)

    def values(self, clock_fields: Mapping[ClockKind, str], event_key: str) -> dict[str, Any]:
        """The event's measured values: numeric fields that are not its name, identity or a timestamp.

        These are what a snapshot line (``handoff``: allocated, reserved, physical_free) carries.
        Fields named ``*_ns`` are taken as timestamps, ``pid``/``tid``/``*_pid``/``*_tid`` as
        identities; booleans are flags, not values. (:attr:`measured` holds them for the options
        the line was read with.)
        """
        return _measured(self.fields, {event_key, PID_FIELD, TID_FIELD, *clock_fields.values()})


def _measured(fields: Mapping[str, Any], skip: set[str]) -> dict[str, Any]:
    return {
        k: v
        for k, v in fields.items()
        if k not in skip
        and not k.endswith(("_ns", "_pid", "_tid"))
        and type(v) in (int, float)  # not bool: a flag, not a value
    }


@dataclass(frozen=True)
class BadLine:
    line: int
    problem: str

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "problem": self.problem}


@dataclass(frozen=True)
class TelemetryLog:
    """A parsed telemetry file: its usable events in file order and its bad lines."""

    path: str
    sha256: str  # of the bytes parsed (read once)
    options: TelemetryOptions
    events: tuple[TelemetryEvent, ...]
    bad_lines: tuple[BadLine, ...] = field(default=())
    size_bytes: int = 0
    @property
    def pids(self) -> list[int]:
        return sorted({e.pid for e in self.events if e.pid is not None})

    def has_clock(self, kind: ClockKind) -> bool:
        return any(kind in e.clocks for e in self.events)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _BadValue(ValueError):
    """A JSON value nsysaudit cannot carry through exactly (raised from the decoder's hooks)."""


def _int64(text: str) -> int:
    if len(text) > 20:  # past 64 bits (19 digits and a sign); int() refuses 4,300 digits with a ValueError
        raise _BadValue(f"integer {text[:24]}... ({len(text):,} characters) is outside the 64-bit range")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise _BadValue(f"integer {text[:24]}{'...' if len(text) > 24 else ''} is outside the 64-bit range")
    return value


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise _BadValue(f"number {text[:24]} is too large for a 64-bit float")
    return value


def _constant(text: str) -> float:
    raise _BadValue(f"{text} is not a JSON number (NaN and infinities cannot be kept exactly)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: a key given twice would keep only its last value
    (the stdlib's rule), so which stamp or name the line means is unknown."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _BadValue(f"key {twice!r} is given twice (which value is meant is unknown)")
    return obj


def _decode(text: str) -> Any:
    """``json.loads`` that refuses what could not be kept exactly: integers outside 64 bits, NaN
    and infinities (they would become ``null`` in the JSON report), lone surrogates (they cannot
    be written as UTF-8) and nesting deeper than :data:`MAX_DEPTH` levels."""
    obj = json.loads(
        text, parse_int=_int64, parse_float=_finite, parse_constant=_constant, object_pairs_hook=_unique_keys
    )
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _BadValue(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            value = [value]
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
            value = list(value)
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
            continue
        else:
            continue
        if any(_SURROGATE.search(k) for k in value if isinstance(k, str)):
            raise _BadValue("a string holds a lone surrogate (\\ud800-\\udfff), not Unicode text")
    return obj


_FLAT = frozenset({str, int, bool, type(None)})  # the values of a usual telemetry line
_BIG = float(1 << 63)  # orjson reads an integer literal past the int64 range as a float at least this large


def _fast_decode(raw: bytes) -> Any:
    """What :func:`_decode` gives for ``raw``, when orjson can say it (a fifth of the time): None
    when the line needs the strict decoder, which then decides and words any problem.

    orjson refuses NaN, infinities, lone surrogates and invalid UTF-8 itself. What it lets through
    is checked here: an integer past the int64 range (orjson reads one up to 2^64 - 1 as an int and
    a larger or more negative one as a float), nesting deeper than :data:`MAX_DEPTH`, and a key
    given twice (orjson keeps its last value): the line's keys are counted in its text as ``":``,
    which each key is followed by when no whitespace stands before its colon (a line with a quote
    followed by whitespace is left to the strict decoder), and which a string holding ``\\":``
    would add to: any difference from the keys read, and the strict decoder decides.
    """
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if b'" ' in raw or b'"\t' in raw:
        return None
    if type(obj) is dict and set(map(type, obj.values())) <= _FLAT:
        keys = len(obj)
        for value in obj.values():
            if type(value) is int and value > INT64_MAX:
                return None
    else:
        keys = 0
        stack: list[tuple[Any, int]] = [(obj, 1)]
        while stack:
            value, depth = stack.pop()
            if depth > MAX_DEPTH:
                return None
            kind = type(value)
            if kind is dict:
                keys += len(value)
                stack.extend((v, depth + 1) for v in value.values())
            elif kind is list:
                stack.extend((v, depth + 1) for v in value)
            elif (kind is int and value > INT64_MAX) or (kind is float and abs(value) >= _BIG):
                return None
    if raw.count(b'":') != keys:
        return None
    return obj


def _parse_line(
    raw: bytes, number: int, options: TelemetryOptions, skip: set[str] | None = None
) -> TelemetryEvent | BadLine:
    obj = _fast_decode(raw)
    if obj is None:
        parsed = _strict_decode(raw, number)
        if isinstance(parsed, BadLine):
            return parsed
        obj = parsed
    return _event(obj, number, options, skip)


def _strict_decode(raw: bytes, number: int) -> Any:
    """The line decoded by :func:`_decode`, or the :class:`BadLine` that says why it cannot be."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return BadLine(number, "not UTF-8 text")
    try:
        obj = _decode(text)
    except json.JSONDecodeError as exc:
        return BadLine(number, f"invalid JSON ({exc.msg} at column {exc.colno})")
    except _BadValue as exc:
        return BadLine(number, f"unusable JSON value: {exc}")
    except RecursionError:
        return BadLine(number, f"unusable JSON value: nested deeper than {MAX_DEPTH} levels")
    return obj


def _event(obj: Any, number: int, options: TelemetryOptions, skip: set[str] | None = None) -> TelemetryEvent | BadLine:
    """A decoded line as a telemetry event, or why it is not one. ``skip``: the fields that are not
    values (the event name, identities, clocks; :func:`_not_values`), made once per file."""
    if not isinstance(obj, dict):
        return BadLine(number, f"not a JSON object (a JSON {type(obj).__name__})")
    key = options.event_key
    name = obj.get(key)
    if name is None:
        return BadLine(number, f"no {key!r} field")
    if not isinstance(name, str) or not name:
        return BadLine(number, f"{key!r} is not a non-empty string")
    clocks: dict[ClockKind, int] = {}
    for kind, fname in options.clock:
        value = obj.get(fname)
        if value is None:
            continue
        if not _is_int(value):
            return BadLine(number, f"clock field {fname!r} is not an integer (got {json.dumps(value)[:40]})")
        clocks[kind] = value
    if not clocks:
        wanted = ", ".join(repr(f) for _, f in options.clock)
        return BadLine(number, f"no clock field (expected at least one of {wanted})")
    ids: dict[str, int | None] = {}
    for fname in (PID_FIELD, TID_FIELD):
        value = obj.get(fname)
        if value is not None and not _is_int(value):
            return BadLine(number, f"{fname!r} is not an integer (got {json.dumps(value)[:40]})")
        ids[fname] = value
    measured = _measured(obj, skip if skip is not None else _not_values(options))
    return TelemetryEvent(number, name, clocks, ids[PID_FIELD], ids[TID_FIELD], obj, measured)


def _not_values(options: TelemetryOptions) -> set[str]:
    return {options.event_key, PID_FIELD, TID_FIELD, *(f for _, f in options.clock)}


def load_telemetry(path: str | os.PathLike[str], options: TelemetryOptions | None = None) -> TelemetryLog:
    """Parse a JSON Lines telemetry file.

    Raises :class:`~nsysaudit.core.errors.UnusableInput` (exit code 2 in the CLI) for a missing or
    empty file, a file without any usable line, and, unless ``options.lenient``, any bad line.
    Blank lines are skipped.
    """
    options = options or TelemetryOptions()
    given = Path(path)
    refuse_undecodable_name(given)
    if not given.exists():
        raise UnusableInput(given, "no such file (telemetry)")
    if not given.is_file():
        raise UnusableInput(given, "not a regular file (telemetry)")
    try:
        data = given.read_bytes()
    except OSError as exc:
        raise UnusableInput(given, f"cannot read telemetry: {exc.strerror}") from None
    events: list[TelemetryEvent] = []
    bad: list[BadLine] = []
    skip = _not_values(options)
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        parsed = _parse_line(raw, number, options, skip)
        (bad if isinstance(parsed, BadLine) else events).append(parsed)  # type: ignore[arg-type]
    if bad and not options.lenient:
        first = "; ".join(f"line {b.line}: {b.problem}" for b in bad[:MAX_ERROR_LINES])
        more = f"; {len(bad) - MAX_ERROR_LINES} more bad line(s)" if len(bad) > MAX_ERROR_LINES else ""
        raise UnusableInput(given, f"{first}{more} (telemetry; --lenient skips bad lines)")
    if not events:
        if not data.strip():
            raise UnusableInput(given, "empty telemetry file: no JSON lines")
        raise UnusableInput(
            given, f"no usable telemetry line ({len(bad)} bad line(s), first: line {bad[0].line}: {bad[0].problem})"
        )
    return TelemetryLog(
        path=str(path),
        sha256=sha256_bytes(data),
        options=options,
        events=tuple(events),
        bad_lines=tuple(bad),
        size_bytes=len(data),
    )
