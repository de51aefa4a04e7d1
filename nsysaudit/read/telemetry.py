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

The usable lines are held as columns (:data:`LINE_SCHEMA`, one row a line), not as an object per
line: a file of 10^6 lines is ~150 MB of columns instead of ~3 GB of Python objects. Each line's
other fields are kept as the canonical JSON text the report writes (``fields``, ``values``).

Nothing here knows about traces; :mod:`nsysaudit.analysis.alignment` maps these stamps to trace time.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal, TypedDict, TypeGuard, TypeVar

import orjson
import polars as pl

from nsysaudit.core.errors import BadOption, UnusableInput
from nsysaudit.core.limits import TELEMETRY_BYTES_PER_BYTE, refuse_unfit
from nsysaudit.core.paths import refuse_undecodable_name
from nsysaudit.core.reasons import Reason
from nsysaudit.core.shapes import JSON, JSONObject
from nsysaudit.words import say

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
V = TypeVar("V")


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
    fields: Mapping[str, JSON]
    # values(...) under the options the line was read with, worked out once when it was read
    measured: Mapping[str, int | float] = field(default_factory=dict)

    def values(self, clock_fields: Mapping[ClockKind, str], event_key: str) -> dict[str, int | float]:
        """The event's measured values: numeric fields that are not its name, identity or a timestamp.

        These are what a snapshot line (``handoff``: allocated, reserved, physical_free) carries.
        Fields named ``*_ns`` are taken as timestamps, ``pid``/``tid``/``*_pid``/``*_tid`` as
        identities; booleans are flags, not values. (:attr:`measured` holds them for the options
        the line was read with.)
        """
        return _measured(self.fields, {event_key, PID_FIELD, TID_FIELD, *clock_fields.values()})


def _measured(fields: Mapping[str, JSON], skip: set[str]) -> dict[str, int | float]:
    """The measured values of ``fields``: its integers and floats, not its booleans."""
    return {
        k: v
        for k, v in fields.items()
        if k not in skip
        and not k.endswith(("_ns", "_pid", "_tid"))
        and (type(v) is int or type(v) is float)  # not bool: a flag, not a value
    }


# An entry of a document's telemetry.warnings (nsysaudit.reports.alignment_section.bad_line_entry).
class TelemetryBadLine(TypedDict):
    """A telemetry line ``--lenient`` skipped, and why (``telemetry.warnings``)."""

    line: int
    problem: str


@dataclass(frozen=True)
class BadLine:
    """A line that is no telemetry event: its number and why (``reason``: a ``line_*`` code of
    :mod:`nsysaudit.words`, worded once as its ``problem``: the warning's, or the error's)."""

    line: int
    reason: Reason

    @property
    def problem(self) -> str:
        return say(self.reason)


# One row per usable line, in file order. ``monotonic``/``realtime``: the line's stamps of the clocks
# read (null: absent, or that clock is not read). ``fields``: the line's fields but its name, pid,
# tid and clock stamps, as canonical JSON (keys sorted, as the report writes them); ``values``: its
# measured values (:meth:`TelemetryEvent.values`) likewise; ``order``: which of
# :attr:`TelemetryLog.field_orders` its fields were written in; ``written``: for a line holding
# objects or arrays, its fields as written (their key order), else null.
LINE_SCHEMA: dict[str, type[pl.DataType]] = {
    "line": pl.Int64,
    "event": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "monotonic": pl.Int64,
    "realtime": pl.Int64,
    "fields": pl.String,
    "values": pl.String,
    "order": pl.UInt32,
    "written": pl.String,
}


@dataclass(frozen=True, eq=False)
class TelemetryLog:
    """A parsed telemetry file: its usable lines as columns (:data:`LINE_SCHEMA`), in file order,
    and its bad lines.

    ``field_orders``: the key orders the lines' fields were written in (a line's ``order`` indexes
    it), so that fields and values are shown as written. ``status_lines``: ``(row, the decoded
    line)`` of each line whose text could record a library status (it holds ``_status`` or ``nccl``
    in any case, or a backslash: an escape could spell it); no other line can, so only these are searched
    (:func:`nsysaudit.analysis.verdict.telemetry_library_failures`).
    """

    path: str
    sha256: str  # of the bytes parsed (read once)
    options: TelemetryOptions
    lines: pl.DataFrame
    field_orders: tuple[tuple[str, ...], ...] = ()
    status_lines: tuple[tuple[int, Mapping[str, JSON]], ...] = ()
    bad_lines: tuple[BadLine, ...] = field(default=())
    size_bytes: int = 0

    @property
    def pids(self) -> list[int]:
        return [int(p) for p in self.lines["pid"].drop_nulls().unique().sort().to_list()]

    def has_clock(self, kind: ClockKind) -> bool:
        return self.lines[kind].null_count() < self.lines.height

    def fields_of(self, fields: str, order: int, written: str | None) -> JSONObject:
        """A line's fields (its ``fields``, ``order`` and ``written`` columns) as written."""
        # Both columns hold a JSON object the reader wrote (a line's fields but its name, ids, clocks).
        if written is not None:
            parsed: JSONObject = orjson.loads(written)
            return parsed
        sorted_fields: JSONObject = orjson.loads(fields)
        return in_order(sorted_fields, self.field_orders[order])

    def values_of(self, values: str, order: int) -> dict[str, int | float]:
        """A line's measured values (its ``values`` and ``order`` columns), in the order written."""
        if values == "{}":
            return {}
        measured: dict[str, int | float] = orjson.loads(values)  # what _measured kept, written by the reader
        return in_order(measured, self.field_orders[order])

    def with_fields(self, names: Sequence[str]) -> Iterator[tuple[int, str, int | None, JSONObject]]:
        """``(line, event, pid, {name: value})`` of each line that has a field named in ``names``,
        in file order, with the values of those it has: a field of the whole line as written (its
        name, pid, tid and clock stamps too), as :attr:`TelemetryEvent.fields` holds it. Lines
        are found by their fields' text (a key is written ``"name":`` there, and a string cannot
        hold that), so that only they are decoded."""
        columns = {self.options.event_key: "event", PID_FIELD: "pid", TID_FIELD: "tid"}
        columns.update({name: kind for kind, name in self.options.clock if name not in columns})
        has = [
            pl.col(columns[name]).is_not_null() if name in columns
            else pl.col("fields").str.contains(orjson.dumps(name).decode() + ":", literal=True)
            for name in names
        ]
        if not has:
            return
        found = self.lines.filter(pl.any_horizontal(has))
        for row in found.iter_rows(named=True):
            fields = self.fields_of(row["fields"], row["order"], row["written"])
            values: JSONObject = {}
            for name in names:
                if name in columns:
                    if row[columns[name]] is not None:
                        values[name] = row[columns[name]]
                elif name in fields:
                    values[name] = fields[name]
            yield row["line"], row["event"], row["pid"], values


def in_order(found: Mapping[str, V], order: Sequence[str]) -> dict[str, V]:
    """``found``'s items in ``order`` (the keys it has)."""
    return {k: found[k] for k in order if k in found}


def _is_int(value: object) -> TypeGuard[int]:
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


def _unique_keys(pairs: list[tuple[str, JSON]]) -> JSONObject:
    """A JSON object whose keys are all different: a key given twice would keep only its last value
    (the stdlib's rule), so which stamp or name the line means is unknown."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise _BadValue(f"key {twice!r} is given twice (which value is meant is unknown)")
    return obj


def _decode(text: str) -> JSON:
    """``json.loads`` that refuses what could not be kept exactly: integers outside 64 bits, NaN
    and infinities (they would become ``null`` in the JSON report), lone surrogates (they cannot
    be written as UTF-8) and nesting deeper than :data:`MAX_DEPTH` levels."""
    obj: JSON = json.loads(
        text, parse_int=_int64, parse_float=_finite, parse_constant=_constant, object_pairs_hook=_unique_keys
    )
    stack: list[tuple[JSON, int]] = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise _BadValue(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, str):
            texts = [value]
        elif isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
            texts = list(value)
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)
            continue
        else:
            continue
        if any(_SURROGATE.search(k) for k in texts):
            raise _BadValue("a string holds a lone surrogate (\\ud800-\\udfff), not Unicode text")
    return obj


_FLAT = frozenset({str, int, bool, type(None)})  # the values of a usual telemetry line
_BIG = float(1 << 63)  # orjson reads an integer literal past the int64 range as a float at least this large


def _fast_decode(raw: bytes) -> JSON:
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
        obj: JSON = orjson.loads(raw)
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
        stack: list[tuple[JSON, int]] = [(obj, 1)]
        while stack:
            value, depth = stack.pop()
            if depth > MAX_DEPTH:
                return None
            if type(value) is dict:
                keys += len(value)
                stack.extend((v, depth + 1) for v in value.values())
            elif type(value) is list:
                stack.extend((v, depth + 1) for v in value)
            elif (type(value) is int and value > INT64_MAX) or (type(value) is float and abs(value) >= _BIG):
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


def _strict_decode(raw: bytes, number: int) -> JSON | BadLine:
    """The line decoded by :func:`_decode`, or the :class:`BadLine` that says why it cannot be."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return BadLine(number, Reason.of("line_not_utf8"))
    try:
        obj = _decode(text)
    except json.JSONDecodeError as exc:
        return BadLine(number, Reason.of("line_invalid_json", message=exc.msg, column=exc.colno))
    except _BadValue as exc:
        return BadLine(number, Reason.of("line_unusable_value", problem=str(exc)))
    except RecursionError:
        return BadLine(number, Reason.of("line_nested_too_deep", levels=MAX_DEPTH))
    return obj


def _event(obj: JSON, number: int, options: TelemetryOptions, skip: set[str] | None = None) -> TelemetryEvent | BadLine:
    """A decoded line as a telemetry event, or why it is not one. ``skip``: the fields that are not
    values (the event name, identities, clocks; :func:`_not_values`), made once per file."""
    if not isinstance(obj, dict):
        return BadLine(number, Reason.of("line_not_object", json_type=type(obj).__name__))
    key = options.event_key
    name = obj.get(key)
    if name is None:
        return BadLine(number, Reason.of("line_without_event", key=key))
    if not isinstance(name, str) or not name:
        return BadLine(number, Reason.of("line_event_not_text", key=key))
    clocks: dict[ClockKind, int] = {}
    for kind, fname in options.clock:
        value = obj.get(fname)
        if value is None:
            continue
        if not _is_int(value):
            return BadLine(number, Reason.of("line_clock_not_integer", field=fname, got=json.dumps(value)[:40]))
        clocks[kind] = value
    if not clocks:
        return BadLine(number, Reason.of("line_without_clock", fields=[f for _, f in options.clock]))
    ids: dict[str, int | None] = {}
    for fname in (PID_FIELD, TID_FIELD):
        value = obj.get(fname)
        if value is None:
            ids[fname] = None
        elif _is_int(value):
            ids[fname] = value
        else:
            return BadLine(number, Reason.of("line_id_not_integer", field=fname, got=json.dumps(value)[:40]))
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
    # Sized before it is read: under a memory limit a file whose lines cannot be held is refused.
    refuse_unfit(given, given.stat().st_size, per_byte=TELEMETRY_BYTES_PER_BYTE, what="this telemetry file")
    reader = _Reader(options)
    digest = hashlib.sha256()
    size = 0
    try:
        with open(given, "rb") as handle:
            for piece in _pieces(handle, given):
                digest.update(piece)
                size += len(piece)
                reader.read(piece)
    except OSError as exc:
        raise UnusableInput(given, f"cannot read telemetry: {exc.strerror}") from None
    bad = reader.bad
    if bad and not options.lenient:
        first = "; ".join(f"line {b.line}: {b.problem}" for b in bad[:MAX_ERROR_LINES])
        more = f"; {len(bad) - MAX_ERROR_LINES} more bad line(s)" if len(bad) > MAX_ERROR_LINES else ""
        raise UnusableInput(given, f"{first}{more} (telemetry; --lenient skips bad lines)")
    if not reader.rows:
        if not bad:  # every line blank (a bad line is one that is not)
            raise UnusableInput(given, "empty telemetry file: no JSON lines")
        raise UnusableInput(
            given, f"no usable telemetry line ({len(bad)} bad line(s), first: line {bad[0].line}: {bad[0].problem})"
        )
    return TelemetryLog(
        path=str(path),
        sha256=digest.hexdigest(),
        options=options,
        lines=reader.frame(),
        field_orders=tuple(reader.orders),
        status_lines=tuple(reader.status),
        bad_lines=tuple(bad),
        size_bytes=size,
    )


PIECE_BYTES = 1 << 23  # the file is read, hashed and parsed this much at a time


MAX_LINE_BYTES = 64 << 20  # a telemetry line is a few hundred bytes; one past this is no line


def _pieces(handle: IO[bytes], path: Path) -> Iterator[bytes]:
    """The file's bytes in pieces of about :data:`PIECE_BYTES`, each but the last ending with a
    newline: the lines of the pieces, numbered on, are the lines of the whole (a piece never ends
    between the CR and the LF of a CRLF). A line longer than :data:`MAX_LINE_BYTES` is refused before
    it is held whole (a file of one endless line would fill the memory)."""
    rest = b""
    while block := handle.read(PIECE_BYTES):
        data = rest + block if rest else block
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
        rest = data[cut:]
        if len(rest) > MAX_LINE_BYTES:
            raise UnusableInput(path, f"a line longer than {MAX_LINE_BYTES >> 20} MiB: not a telemetry file")
    if rest:
        yield rest


def _status_word(lowered: bytes) -> bool:
    """Whether a line's lowered text could record a library status: ``_status`` (cuBLAS, cuDNN ...) or
    ``nccl`` (NCCL's error names and its allocation warnings, as PyTorch's DistBackendError repeats them)."""
    return b"_status" in lowered or b"nccl" in lowered


_STATUS_WORD = re.compile(rb"_[sS][tT][aA][tT][uU][sS]|[nN][cC][cC][lL]")  # bytes.lower(): b"_status", b"nccl"
_ROWS = 1 << 16  # lines per batch of columns while reading (the Python objects of one batch at a time)


class _Reader:
    """Parses pieces of a telemetry file into batches of columns (:data:`LINE_SCHEMA`).

    A line takes the bulk path, which decides it as :func:`_parse_line` would with a few
    dictionary operations, when orjson decodes it to a flat object (no object or array values)
    whose name, stamps and ids are usable, and whose numbers :func:`_fast_decode` would keep (no
    integer past int64, no float that could be one). Two of that function's checks are made once
    per batch of lines where they can be: no quote followed by whitespace, and as many ``":`` in
    the batch as the keys of its bulk lines and the ``":`` of its other lines (each key of a bulk
    line is followed by one, so no line has fewer ``":`` than keys, and equal sums mean equal
    counts on every line). A batch where either fails is read again with them made line by line.
    Every other line takes :func:`_parse_line`, which decides and words problems; every line does
    when the options read one field for two purposes (``--telemetry-clock`` naming one field for
    both clocks): the bulk path takes each of them out of the line once.

    A line's fields and values are appended, as JSON text, to one buffer per column (a bytes
    object kept per line would cost more than all the rest of its reading).
    """

    def __init__(self, options: TelemetryOptions) -> None:
        self.options = options
        self.skip = _not_values(options)
        self.clock_fields = options.clock_fields
        # The bulk path pops the fields that are not values: they must be different fields.
        self.bulk = len(self.skip) == 3 + len(options.clock)
        self.number = 0
        self.rows = 0
        self.batches: list[pl.DataFrame] = []
        self.bad: list[BadLine] = []
        self.status: list[tuple[int, Mapping[str, JSON]]] = []
        self.orders: list[tuple[str, ...]] = []
        self._order_ids: dict[tuple[str, ...], int] = {}
        self._value_keys: list[frozenset[str]] = []  # per order, the keys that may hold values

    def read(self, piece: bytes) -> None:
        raws = piece.splitlines()
        for start in range(0, len(raws), _ROWS):
            self._batch(raws[start : start + _ROWS], piece if len(raws) <= _ROWS else None)

    def _batch(self, raws: list[bytes], text: bytes | None) -> None:
        text = text if text is not None else b"\n".join(raws)
        statusy = b"\\" in text or _STATUS_WORD.search(text) is not None
        careful, colons = True, 0
        if self.bulk:
            whole = pl.Series([text], dtype=pl.Binary)  # searched by polars: about twice as fast
            careful = bool(whole.bin.contains(b'" ').item() or whole.bin.contains(b'"\t').item())
            if not careful:
                try:
                    colons = int(whole.cast(pl.String).str.count_matches('":', literal=True).item())
                except pl.exceptions.ComputeError:  # not UTF-8
                    colons = text.count(b'":')
        done = self._rows(raws, careful, statusy, colons)
        if done is None:  # the count of '":' says some line's differs from its keys
            done = self._rows(raws, True, statusy, colons)
        if done is None:  # cannot happen: careful rows are always made
            raise AssertionError("telemetry rows not made")
        batch, bad, status = done
        self.number += len(raws)
        self.status += [(self.rows + row, obj) for row, obj in status]
        self.rows += batch.height
        self.bad += bad
        if batch.height:
            self.batches.append(batch)

    def _order(self, keys: tuple[str, ...]) -> int:
        found = self._order_ids.get(keys)
        if found is None:
            found = self._order_ids[keys] = len(self.orders)
            self.orders.append(keys)
            self._value_keys.append(frozenset(k for k in keys if not k.endswith(("_ns", "_pid", "_tid"))))
        return found

    def _rows(
        self, raws: list[bytes], careful: bool, statusy: bool, colons: int
    ) -> tuple[pl.DataFrame, list[BadLine], list[tuple[int, Mapping[str, JSON]]]] | None:
        """The batch's columns, bad lines and status lines; None when ``careful`` is False and the
        count of ``":`` (``colons`` in the batch's text) shows that some line needs the per-line
        checks."""
        loads, bulk = orjson.loads, self.bulk
        columns = _Columns()
        bad: list[BadLine] = []
        keys = other = 0  # keys of bulk lines, '":' of the others
        for number, raw in enumerate(raws, self.number + 1):
            try:
                obj = loads(raw)
            except orjson.JSONDecodeError:
                obj = None
            if (
                bulk
                and type(obj) is dict
                and not (careful and (b'" ' in raw or b'"\t' in raw or raw.count(b'":') != len(obj)))
            ):
                n = len(obj)
                if self._bulk_line(columns, obj, raw, number, statusy):
                    keys += n
                    continue
            other += raw.count(b'":')
            if not raw.strip():
                continue
            parsed = _parse_line(raw, number, self.options, self.skip)
            if isinstance(parsed, BadLine):
                bad.append(parsed)
            else:
                columns.add_parsed(parsed, self._order, raw, number, statusy, self.skip)
        if not careful and keys + other != colons:
            return None
        return columns.frame(), bad, columns.status

    def _bulk_line(self, c: _Columns, obj: dict[str, JSON], raw: bytes, number: int, statusy: bool) -> bool:
        """Add the line ``obj`` (``raw`` parsed) to ``c`` without the per-line checks, where every field
        it has is of a type a line may have; False (nothing added; ``obj`` lost the fields that are not
        values) where one is not, for :func:`_parse_line` to word."""
        name = obj.pop(self.options.event_key, None)
        mono_field, real_field = self.clock_fields.get("monotonic"), self.clock_fields.get("realtime")
        mono = obj.pop(mono_field, None) if mono_field is not None else None
        real = obj.pop(real_field, None) if real_field is not None else None
        pid = obj.pop(PID_FIELD, None)
        tid = obj.pop(TID_FIELD, None)
        if not (
            type(name) is str
            and name
            and (mono is not None or real is not None)
            and (mono is None or (type(mono) is int and mono <= INT64_MAX))
            and (real is None or (type(real) is int and real <= INT64_MAX))
            and (pid is None or (type(pid) is int and pid <= INT64_MAX))
            and (tid is None or (type(tid) is int and tid <= INT64_MAX))
        ):
            return False
        order = tuple(obj)
        oid = self._order_ids.get(order)
        if oid is None:
            oid = self._order(order)
        of_values = self._value_keys[oid]
        measured: dict[str, int | float] = {}
        for k, v in obj.items():
            t = type(v)
            if t is int:
                if v > INT64_MAX:  # type: ignore[operator]  # an int: its type was just checked
                    return False
            elif t is float:
                if not -_BIG < v < _BIG:  # type: ignore[operator]
                    return False
            elif t is str or t is bool or v is None:
                continue
            else:  # an object or an array
                return False
            if k in of_values:
                measured[k] = v  # type: ignore[assignment]
        if statusy and (b"\\" in raw or _status_word(raw.lower())):
            c.status.append((len(c.lines), orjson.loads(raw)))
        c.add(number, name, pid, tid, mono, real, obj, measured, oid, None)
        return True

    def frame(self) -> pl.DataFrame:
        if not self.batches:
            return pl.DataFrame(schema=LINE_SCHEMA)
        return pl.concat(self.batches)


class _Columns:
    """A batch's columns as its lines are read: each line's number, event, ids, clocks, its fields
    and values as JSON text (one buffer each, a newline after each line's), the order of its keys,
    its text as written where it nests; and the status lines (row, fields)."""

    def __init__(self) -> None:
        self.lines: list[int] = []
        self.events: list[str] = []
        self.pids: list[int | None] = []
        self.tids: list[int | None] = []
        self.monos: list[int | None] = []
        self.reals: list[int | None] = []
        self.fields = bytearray()  # each line's text and a newline (JSON text holds none)
        self.values = bytearray()
        self.orders: list[int] = []
        self.written: list[bytes | None] = []
        self.status: list[tuple[int, Mapping[str, JSON]]] = []

    def add(
        self, number: int, event: str, pid: int | None, tid: int | None, mono: int | None, real: int | None,
        fields: Mapping[str, JSON], measured: Mapping[str, int | float], order: int, written: bytes | None,
    ) -> None:
        self.lines.append(number)
        self.events.append(event)
        self.pids.append(pid)
        self.tids.append(tid)
        self.monos.append(mono)
        self.reals.append(real)
        self.fields += orjson.dumps(fields, option=_SORTED)
        self.values += orjson.dumps(measured, option=_SORTED) if measured else b"{}\n"
        self.orders.append(order)
        self.written.append(written)

    def add_parsed(
        self, parsed: TelemetryEvent, order_of: Callable[[tuple[str, ...]], int], raw: bytes, number: int,
        statusy: bool, skip: set[str],
    ) -> None:
        """Add a line :func:`_parse_line` made, but the fields that are not values (``skip``)."""
        kept = {k: v for k, v in parsed.fields.items() if k not in skip}
        if statusy and (b"\\" in raw or _status_word(raw.lower())):
            self.status.append((len(self.lines), parsed.fields))
        nested = any(type(v) is dict or type(v) is list for v in kept.values())
        self.add(number, parsed.event, parsed.pid, parsed.tid, parsed.clocks.get("monotonic"),
                 parsed.clocks.get("realtime"), kept, parsed.measured, order_of(tuple(kept)),
                 orjson.dumps(kept) if nested else None)  # as written: its objects' key order

    def frame(self) -> pl.DataFrame:
        count = len(self.lines)
        return pl.DataFrame(
            {
                "line": pl.Series(self.lines, dtype=pl.Int64),
                "event": pl.Series(self.events, dtype=pl.String),
                "pid": pl.Series(self.pids, dtype=pl.Int64),
                "tid": pl.Series(self.tids, dtype=pl.Int64),
                "monotonic": pl.Series(self.monos, dtype=pl.Int64),
                "realtime": pl.Series(self.reals, dtype=pl.Int64),
                "fields": _texts(self.fields, count),
                "values": _texts(self.values, count),
                "order": pl.Series(self.orders, dtype=pl.UInt32),
                "written": pl.Series(self.written, dtype=pl.Binary).cast(pl.String),
            }
        )


_SORTED = orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE


def _texts(buffer: bytearray, count: int) -> pl.Series:
    """The ``count`` texts in ``buffer``, each followed by a newline, as a String column."""
    if not count:
        return pl.Series([], dtype=pl.String)
    whole = pl.Series([bytes(buffer[:-1])], dtype=pl.Binary).cast(pl.String)
    return whole.str.split("\n").explode()
