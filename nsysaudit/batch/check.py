"""Expectations over exports: ``nsysaudit check PATH... --expect FILE.toml [--junit FILE]``.

A CI job states, per file or glob, what the analysis of each export must say, and fails when it
changes (a trainer's memory-policy regression shows up as a new nested failure, a fix as its
disappearance). The expectations file is TOML, one ``[[expect]]`` table per file or glob::

    [[expect]]
    files = "h200-cuda13-nsys2025.3/torch/observe.sqlite"   # a path or glob, relative to this file
    verdict = "failure_found"          # failure_found | inconclusive | no_failure
    max_failed_calls = 28              # census.failed_calls must be at most this
    allow_censored = []                # censoring reasons allowed (omitted: none allowed)
    findings = [                       # exactly these findings (or an integer: their count)
      { kind = "nested_alloc_failure", api = "cudaMalloc_v3020", return_code = 2, enclosing = "cublasCreate_v2" },
    ]
    telemetry = "h200-cuda13-nsys2025.3/torch/observe.telemetry.jsonl"   # optional: analyze with it

Globs: ``*``, ``?`` and ``[...]`` within one path segment, ``**`` for any number of segments.
Each finding table may give ``count`` (default 1) and any of ``kind``, ``api``, ``return_code``,
``enclosing`` (the innermost enclosing library call's api), ``library`` (its library: ``cuBLAS``,
``cuDNN``, ``NCCL``); the file's findings must be exactly
these (each expected finding matched by a distinct finding, none left over). Every key is checked:
an unknown key is an error, so a typo cannot make a check pass.

Every (file, expectation whose glob matches it) pair is one check. An export that cannot be
analyzed is an error check (an ``ERROR`` line, a JUnit ``<error>``); the others are still checked.
Two more rules keep a CI job honest: a file that no expectation matches fails ("no expectation for this file"), so a new
fixture cannot slip in unchecked; an expectation that matches none of the files checked fails
("matches no file"), so a renamed fixture cannot leave its expectation silently unused, unless
the check is of a subset (``only_matching``, ``--only-matching``): then it is left out. The report
has a line per check, as the JUnit file has a testcase per check.

>>> from nsysaudit.batch.check import Expectations, check
>>> expectations = Expectations.parse('''
... [[expect]]
... files = "torch/observe.sqlite"
... verdict = "failure_found"
... findings = [{ kind = "nested_alloc_failure", return_code = 2, enclosing = "cublasCreate_v2" }]
... max_failed_calls = 28
... ''', base="tests/fixtures/h200-cuda13-nsys2025.3")
>>> report = check(["tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite"], expectations)
>>> report.lines()
['pass tests/fixtures/h200-cuda13-nsys2025.3/torch/observe.sqlite (failure_found, 1 finding(s))', '1 passed, 0 failed']
"""

from __future__ import annotations

import codecs
import fnmatch
import functools
import os
import re
import stat
import tomllib
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nsysaudit import words
from nsysaudit.analysis.stalls import RangeStalls
from nsysaudit.batch.output import FindingRow, InputRow
from nsysaudit.batch.run import KIND_COLUMNS, AuditOptions, AuditOutcome, audit_one, find_inputs
from nsysaudit.batch.workers import run_local
from nsysaudit.core.errors import BadOption, ExpectationsUnusable, UnusableInput
from nsysaudit.core.files import write_atomic
from nsysaudit.core.limits import refuse_larger
from nsysaudit.core.progress import Progress
from nsysaudit.core.text import escape

VERDICTS = ("failure_found", "inconclusive", "no_failure")
EXPECT_KEYS = {"files", "verdict", "findings", "allow_censored", "max_failed_calls", "name", "telemetry",
               "stall_ms_max", "stall_ms_max_by_range"}
FINDING_KEYS = {"kind", "api", "return_code", "enclosing", "library", "count"}


# --- the expectations file -----------------------------------------------------------------------------


@dataclass(frozen=True)
class FindingExpectation:
    """Expected findings: ``count`` of them, each matching every field given (None: any)."""

    count: int = 1
    kind: str | None = None
    api: str | None = None
    return_code: int | None = None
    enclosing: str | None = None
    library: str | None = None  # the enclosing call's library (cuBLAS, cuDNN, NCCL)

    def matches(self, row: Mapping[str, object]) -> bool:
        return all(
            want is None or row[column] == want
            for want, column in (
                (self.kind, "kind"),
                (self.api, "api"),
                (self.return_code, "return_code"),
                (self.enclosing, "enclosing_api"),
                (self.library, "enclosing_library"),
            )
        )

    def fields(self) -> list[tuple[str, str, str | int]]:
        """The fields given: (name in the file, finding row column, value)."""
        given: tuple[tuple[str, str, str | int | None], ...] = (
            ("kind", "kind", self.kind), ("api", "api", self.api), ("return_code", "return_code", self.return_code),
            ("enclosing", "enclosing_api", self.enclosing), ("library", "enclosing_library", self.library),
        )
        return [(name, column, value) for name, column, value in given if value is not None]

    def differences(self, row: Mapping[str, object]) -> list[str]:
        """The fields in which finding ``row`` differs from this expectation: "return_code 2, not 3"."""
        return [f"{name} {row[column]}, not {value}" for name, column, value in self.fields() if row[column] != value]

    def describe(self) -> str:
        parts = [f"{name}={value}" for name, _, value in self.fields()]
        return f"{self.count} x " + (" ".join(parts) or "any finding")


@dataclass(frozen=True)
class Expectation:
    """One ``[[expect]]`` table (see the module docstring); ``index`` counts from 1."""

    index: int
    files: str
    base: Path
    verdict: str | None = None
    findings: tuple[FindingExpectation, ...] | int | None = None
    allow_censored: frozenset[str] = frozenset()
    max_failed_calls: int | None = None
    name: str | None = None
    telemetry: Path | None = None  # the file's telemetry, for the analysis this expectation checks
    stall_ms_max: float | None = None  # the stalls' time (stalls.stalled_ns) at most this, in ms
    stall_ms_max_by_range: tuple[tuple[str, float], ...] = ()  # (NVTX range glob, ms): each matching range's

    @property
    def label(self) -> str:
        return self.name or f"expectation {self.index} (files = {self.files!r})"

    def applies_to(self, path: str) -> bool:
        return glob_match(self.files, _relative(path, self.base))

    def failures(
        self, row: InputRow, findings: Sequence[FindingRow], ranges: Sequence[RangeStalls] = (), ranges_total: int = 0
    ) -> list[str]:
        """Why the input ``row`` (and its ``findings`` rows, the NVTX ranges holding its stalls) does
        not meet this expectation."""
        why = self._stall_failures(row, ranges, ranges_total)
        if self.verdict is not None and row["verdict"] != self.verdict:
            why.append(words.check_verdict(row["verdict"], self.verdict))
        if self.max_failed_calls is not None and (row["failed_calls"] or 0) > self.max_failed_calls:
            why.append(words.check_failed_calls(row["failed_calls"], self.max_failed_calls))
        reasons = set((row["censored_reasons"] or "").split(", ")) - {""}
        if reasons - self.allow_censored:
            why.append(words.check_censored(row["censored_library_calls"], sorted(reasons),
                                            sorted(self.allow_censored)))
        if isinstance(self.findings, int):
            if len(findings) != self.findings:
                why.append(words.check_findings(len(findings), self.findings))
        elif self.findings is not None:
            why += _unmatched(self.findings, findings)
        return why


    def _stall_failures(self, row: InputRow, ranges: Sequence[RangeStalls], ranges_total: int) -> list[str]:
        """The stall budgets (docs/check.md): the whole trace's, and each NVTX range's a glob names."""
        why = []
        stalled = row.get("stalled_ns") or 0
        if self.stall_ms_max is not None and stalled > self.stall_ms_max * 1e6:
            calls = row.get("stalls") or 0
            why.append(words.check_stalls(stalled, calls, self.stall_ms_max))
        for pattern, budget in self.stall_ms_max_by_range:
            over = [r for r in ranges if r["range"] is not None and fnmatch.fnmatchcase(r["range"], pattern)
                    and r["stalled_ns"] > budget * 1e6]
            for r in over:
                why.append(words.check_range_stalls(escape(r["range"] or ""), r["pid"], r["stalled_ns"], budget,
                                                    pattern))
            # The ranges are listed longest stalls first: one not listed took no longer than the last listed.
            if not over and ranges_total > len(ranges) and ranges and ranges[-1]["stalled_ns"] > budget * 1e6:
                why.append(words.check_ranges_unlisted(ranges_total, len(ranges), pattern))
        return why


def _unmatched(expected: Sequence[FindingExpectation], rows: Sequence[FindingRow]) -> list[str]:
    """Match expected findings to distinct rows, most specific first; say what is missing or extra."""
    left = list(rows)
    why = []
    described: set[int] = set()  # findings already named as "differs" (not repeated as unexpected)
    specific = sorted(expected, key=lambda e: -sum(v is not None for v in (e.kind, e.api, e.return_code, e.enclosing,
                                                                            e.library)))
    for want in specific:
        hits = [r for r in left if want.matches(r)][: want.count]
        for r in hits:
            left.remove(r)
        if len(hits) < want.count:
            said = f"expected {want.describe()}, found {len(hits)}"
            near = min(left, key=lambda r: len(want.differences(r)), default=None)
            if near is not None:  # the finding closest to what was expected: which fields differ
                described.add(id(near))
                said += f" (finding {near['finding_number']} differs: {'; '.join(want.differences(near))})"
            why.append(said)
    for r in left:
        if id(r) in described:
            continue
        enclosing = f" inside {r['enclosing_api']}" if r["enclosing_api"] is not None else ""
        why.append(words.check_unexpected_finding(r["kind"], r["api"], r["return_code"], enclosing))
    return why


@dataclass(frozen=True)
class Expectations:
    """A parsed expectations file. Globs are relative to ``base`` (the file's folder)."""

    source: str
    entries: tuple[Expectation, ...]

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Expectations:
        """Read ``path``; raises :class:`ExpectationsUnusable` (one line) for anything it cannot use."""
        where = Path(path)
        try:
            text = _read_regular(where).decode("utf-8")
        except FileNotFoundError:
            raise ExpectationsUnusable(where, "no such file") from None
        except IsADirectoryError:
            raise ExpectationsUnusable(where, "not a regular file") from None
        except UnicodeDecodeError as exc:
            raise ExpectationsUnusable(where, f"not UTF-8 text (byte {exc.start})") from None
        except UnusableInput as exc:  # larger than any expectations file
            raise ExpectationsUnusable(where, exc.problem) from None
        except OSError as exc:
            raise ExpectationsUnusable(where, f"cannot read: {exc.strerror or exc}") from None
        return cls.parse(text, base=where.parent, source=str(where))

    @classmethod
    def parse(cls, text: str, *, base: str | os.PathLike[str] = ".", source: str = "<expectations>") -> Expectations:
        """Parse TOML ``text`` (see the module docstring)."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ExpectationsUnusable(source, f"not valid TOML: {exc}") from None
        except RecursionError:  # tomllib parses nested arrays and inline tables recursively
            raise ExpectationsUnusable(source, "not usable TOML: arrays or tables nested too deeply") from None
        unknown = set(doc) - {"expect"}
        if unknown:
            raise ExpectationsUnusable(
                source, f"unknown top-level key(s) {', '.join(sorted(unknown))} (expected [[expect]])"
            )
        tables = doc.get("expect")
        if not isinstance(tables, list) or not tables:
            raise ExpectationsUnusable(source, "no [[expect]] tables")
        return cls(source, tuple(_entry(source, i, t, Path(base)) for i, t in enumerate(tables, 1)))


def _read_regular(path: Path) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most :data:`MAX_EXPECTATIONS_BYTES`; opened
    without blocking and checked before reading, so /dev/zero (endless), a FIFO (no writer: it would
    block) or a 3 GB file (a MemoryError, not one line) is refused, not read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise IsADirectoryError(path)  # not a regular file (the caller's one line says so)
        refuse_larger(path, info.st_size, MAX_EXPECTATIONS_BYTES, "expectations file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(MAX_EXPECTATIONS_BYTES + 1)  # a file that grew meanwhile is read no further
        refuse_larger(path, len(data), MAX_EXPECTATIONS_BYTES, "expectations file")
        return data
    finally:
        os.close(fd)


MAX_EXPECTATIONS_BYTES = 16 << 20  # thousands of [[expect]] tables take a few hundred kB


def _entry(source: str, index: int, table: object, base: Path) -> Expectation:
    def bad(problem: str) -> ExpectationsUnusable:
        return ExpectationsUnusable(source, f"[[expect]] number {index}: {problem}")

    if not isinstance(table, dict):
        raise bad("not a table")
    unknown = set(table) - EXPECT_KEYS
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(EXPECT_KEYS))})")
    files = table.get("files")
    if not isinstance(files, str) or not files:
        raise bad("'files' must be a path or glob (a non-empty string)")
    verdict = table.get("verdict")
    if verdict is not None and verdict not in VERDICTS:
        raise bad(f"verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    allowed = table.get("allow_censored", [])
    if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
        raise bad("'allow_censored' must be a list of censoring reasons (strings)")
    max_failed = table.get("max_failed_calls")
    if max_failed is not None and (type(max_failed) is not int or max_failed < 0):
        raise bad("'max_failed_calls' must be a non-negative integer")
    name = table.get("name")
    if name is not None and not isinstance(name, str):
        raise bad("'name' must be a string")
    telemetry = table.get("telemetry")
    if telemetry is not None and (not isinstance(telemetry, str) or not telemetry):
        raise bad("'telemetry' must be the path of a telemetry file (relative to the expectations file)")
    stall_max = table.get("stall_ms_max")
    if stall_max is not None and (type(stall_max) not in (int, float) or stall_max < 0):
        raise bad("'stall_ms_max' must be a non-negative number of milliseconds")
    by_range = table.get("stall_ms_max_by_range", {})
    if not isinstance(by_range, dict) or not all(
        isinstance(k, str) and k and type(v) in (int, float) and v >= 0 for k, v in by_range.items()
    ):
        raise bad("'stall_ms_max_by_range' must be a table of NVTX range globs to non-negative milliseconds")
    raw = table.get("findings")
    findings: tuple[FindingExpectation, ...] | int | None
    if raw is None:
        findings = None
    elif type(raw) is int and raw >= 0:
        findings = raw
    elif isinstance(raw, list):
        findings = tuple(_finding(bad, n, f) for n, f in enumerate(raw, 1))
    else:
        raise bad("'findings' must be a count (a non-negative integer) or a list of finding tables")
    return Expectation(index, files, base, verdict, findings, frozenset(allowed), max_failed, name,
                       None if telemetry is None else base / telemetry,
                       None if stall_max is None else float(stall_max),
                       tuple((k, float(v)) for k, v in by_range.items()))


def _finding(bad: Callable[[str], ExpectationsUnusable], n: int, raw: object) -> FindingExpectation:
    if not isinstance(raw, dict):
        raise bad(f"finding {n} is not a table")
    unknown = set(raw) - FINDING_KEYS
    if unknown:
        known = ", ".join(sorted(FINDING_KEYS))
        raise bad(f"finding {n}: unknown key(s) {', '.join(sorted(unknown))} (known: {known})")
    if "kind" in raw and raw["kind"] not in KIND_COLUMNS:
        raise bad(f"finding {n}: kind {raw['kind']!r} is not one of {', '.join(KIND_COLUMNS)}")
    for key in ("kind", "api", "enclosing", "library"):
        if key in raw and not isinstance(raw[key], str):
            raise bad(f"finding {n}: {key!r} must be a string")
    for key in ("return_code", "count"):
        if key in raw and type(raw[key]) is not int:
            raise bad(f"finding {n}: {key!r} must be an integer")
    if raw.get("count", 1) < 1:
        raise bad(f"finding {n}: 'count' must be at least 1")
    return FindingExpectation(**raw)


def _relative(path: str, base: Path) -> str:
    """``path`` relative to ``base`` with ``/`` separators, when it is under it; else absolute."""
    full = Path(os.path.abspath(path))
    try:
        return full.relative_to(Path(os.path.abspath(base))).as_posix()
    except ValueError:
        return full.as_posix()


def glob_match(pattern: str, path: str) -> bool:
    """``path`` (``/``-separated) matches ``pattern``: ``*``, ``?``, ``[...]`` within a segment,
    ``**`` any number of segments (none included)."""
    if pattern.startswith("/") != path.startswith("/"):
        return False
    return _match(pattern.strip("/").split("/"), path.strip("/").split("/"))


def _match(pat: list[str], parts: list[str]) -> bool:
    if not pat:
        return not parts
    if pat[0] == "**":
        return any(_match(pat[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pat[0]) and _match(pat[1:], parts[1:])


# --- running the checks ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckCase:
    """One (file, expectation) check; ``path`` is None for an expectation that matched no file
    and ``expectation`` None for a file no expectation matched. ``error``: the input (or its
    telemetry) could not be analyzed at all, its one line; ``seconds``: the analysis's time;
    ``summary``: what the analysis checked said, ``(verdict, n finding(s))``."""

    path: str | None
    expectation: Expectation | None
    failures: tuple[str, ...]
    error: str | None = None
    seconds: float | None = None
    summary: str | None = None  # "(verdict, n finding(s))" of the analysis checked

    @property
    def passed(self) -> bool:
        return not self.failures and self.error is None

    @property
    def name(self) -> str:
        what = self.expectation.label if self.expectation is not None else "no expectation"
        return f"{self.path} [{what}]" if self.path is not None else what


@dataclass(frozen=True)
class CheckReport:
    """Every check, in the order the files were given (a file's checks in the order of its
    expectations), then the expectations that matched no file; ``left_out``: those matching no file
    that were left out (``only_matching``), no check at all."""

    cases: tuple[CheckCase, ...]
    summaries: dict[str, str] = field(default_factory=dict)  # path -> "(verdict, n finding(s))", its first check's
    left_out: tuple[Expectation, ...] = ()

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    @property
    def errors(self) -> list[CheckCase]:
        """The checks whose input could not be analyzed (each an ``error`` testcase)."""
        return [c for c in self.cases if c.error is not None]

    def lines(self) -> list[str]:
        """One line per check, as the JUnit file has one testcase per check (a file with several
        checks names each by its expectation, as its testcase), then ``N passed, M failed`` (and
        ``, K unusable``), counting checks; the expectations left out are said before it."""
        out: list[str] = []
        checks = Counter(c.path for c in self.cases if c.path is not None)
        passed = failed = unusable = 0
        for case in self.cases:
            name = case.name if case.path is None or checks[case.path] > 1 else case.path
            if case.error is not None:
                unusable += 1
                error = case.error.removeprefix(f"{case.path}: ") if case.path is not None else case.error
                out.append(f"ERROR {name}: {error}")  # the line names the file once
            elif case.failures:
                failed += 1
                out.append(f"FAIL {name}: {'; '.join(case.failures)}")
            else:
                passed += 1
                out.append(f"pass {name} {case.summary or ''}".rstrip())
        if self.left_out:
            out.append(words.check_left_out(len(self.left_out)))
        out.append(f"{passed} passed, {failed} failed" + (f", {unusable} unusable" if unusable else ""))
        return out

    def junit(self) -> bytes:
        """JUnit XML: one testcase per check, with its ``time``; a ``<failure>`` with the reasons for
        a failed one, an ``<error>`` with its one line for an input that could not be analyzed.

        Written with the standard library (``xml.etree``): the format needs no more, and text from
        file names is escaped (:func:`nsysaudit.core.text.escape`), since XML 1.0 cannot hold control
        characters at all.
        """
        failures = sum(bool(c.failures) and c.error is None for c in self.cases)
        errors = len(self.errors)
        total = sum(c.seconds or 0.0 for c in self.cases)
        counts = {"name": "nsysaudit check", "tests": str(len(self.cases)), "failures": str(failures),
                  "errors": str(errors), "time": f"{total:.3f}"}
        suites = ET.Element("testsuites", counts)
        suite = ET.SubElement(suites, "testsuite", counts)
        for case in self.cases:
            element = ET.SubElement(suite, "testcase", classname="nsysaudit.check", name=escape(case.name),
                                    time=f"{case.seconds or 0.0:.3f}")
            if case.path is not None:
                element.set("file", escape(case.path))
            if case.error is not None:
                message = escape(case.error)
                ET.SubElement(element, "error", message=message, type="UnusableInput").text = message
            elif case.failures:
                message = escape("; ".join(case.failures))
                ET.SubElement(element, "failure", message=message, type="ExpectationFailed").text = message
        ET.indent(suites)
        return bytes(ET.tostring(suites, encoding="utf-8", xml_declaration=True)) + b"\n"


def check(
    paths: Iterable[str | os.PathLike[str]],
    expectations: Expectations,
    *,
    jobs: int | None = 1,
    nsys_path: str | os.PathLike[str] | None = None,
    only_matching: bool = False,
    progress: Progress | None = None,
) -> CheckReport:
    """Analyze every input (folders searched as by ``batch``) and check it against ``expectations``.

    An input that cannot be analyzed (or whose telemetry cannot be read) is an ``error`` check with
    its one line; the others are still checked. An expectation with ``telemetry`` checks the
    analysis of its files with that telemetry (one more analysis of each file). An expectation that
    matches none of the files fails, unless ``only_matching``: then it is left out (a subset of the
    files checked against the expectations of them all); a file no expectation matches fails either
    way. ``progress`` hears one step, an advance per analysis. Raises
    :class:`~nsysaudit.core.errors.BadOption` when no input was found.
    """
    given = list(paths)
    for path in given:  # a path named on the command line that is not there is a mistake in the job
        if not os.path.lexists(path):
            raise BadOption(f"{escape(os.fspath(path))}: no such file or folder (nothing was checked)")
    inputs = find_inputs(given)
    for path in inputs:  # find_inputs keeps a folder that holds no input as given
        if os.path.isdir(path):
            raise BadOption(f"{escape(path)}: the folder holds no *.sqlite, *.nsys-rep or *.qdrep file "
                            "(nothing was checked)")
    if not inputs:
        raise BadOption(f"no *.sqlite, *.nsys-rep or *.qdrep file under {', '.join(map(str, given)) or 'no path'}")
    options = AuditOptions(nsys_path=None if nsys_path is None else os.fspath(nsys_path))
    applying = {path: [e for e in expectations.entries if e.applies_to(path)] for path in inputs}
    plain = [p for p in inputs if not applying[p] or any(e.telemetry is None for e in applying[p])]
    with_telemetry = [(p, t) for p in inputs for t in dict.fromkeys(e.telemetry for e in applying[p] if e.telemetry)]
    outcomes = _analyses(plain, with_telemetry, options, jobs or 1, progress)
    cases: list[CheckCase] = []
    matched: set[int] = set()
    summaries: dict[str, str] = {}
    for path in inputs:
        if not applying[path]:
            outcome = outcomes[(path, None)]
            error = outcome["input"].get("error")
            cases.append(CheckCase(path, None, (words.CHECK_NO_EXPECTATION,), error, outcome["seconds"]))
        for e in applying[path]:
            matched.add(e.index)
            outcome = outcomes[(path, e.telemetry)]
            row = outcome["input"]
            if row.get("error"):
                cases.append(CheckCase(path, e, (), row["error"], outcome["seconds"]))
                continue
            summary = f"({row['verdict']}, {row['findings']} finding(s))"
            summaries.setdefault(path, summary)
            failures = tuple(e.failures(row, outcome["findings"], outcome.get("stall_ranges", []),
                                        outcome.get("stall_ranges_total", 0)))
            cases.append(CheckCase(path, e, failures, None, outcome["seconds"], summary))
    unmatched = tuple(e for e in expectations.entries if e.index not in matched)
    if only_matching:
        return CheckReport(tuple(cases), summaries, unmatched)
    cases += [CheckCase(None, e, (words.check_no_file(e.base),)) for e in unmatched]
    return CheckReport(tuple(cases), summaries)


def _analyses(
    plain: list[str],
    with_telemetry: list[tuple[str, Path]],
    options: AuditOptions,
    jobs: int,
    progress: Progress | None,
) -> dict[tuple[str, Path | None], AuditOutcome]:
    """Each file's analysis without telemetry (``plain``, on ``jobs`` workers) and with each telemetry
    its expectations name, by (path, telemetry); ``progress`` advances as each finishes."""
    outcomes: dict[tuple[str, Path | None], AuditOutcome] = {}
    total = len(plain) + len(with_telemetry)
    if progress is not None:
        progress.start(f"checking: {total} analysis(es)", total)
    try:
        for outcome in run_local(functools.partial(audit_one, options=options), plain, jobs):  # in order for 1 job
            outcomes[(outcome["input"]["path"], None)] = outcome
            if progress is not None:
                progress.advance(1)
        for path, telemetry in with_telemetry:
            outcomes[(path, telemetry)] = audit_one(path, options, telemetry=os.fspath(telemetry))
            if progress is not None:
                progress.advance(1)
    finally:
        if progress is not None:
            progress.finish()
    return outcomes


def check_exports(
    paths: Iterable[str | os.PathLike[str]],
    expectations: Expectations | str | os.PathLike[str],
    *,
    junit: str | os.PathLike[str] | None = None,
    jobs: int | None = 1,
    nsys_path: str | os.PathLike[str] | None = None,
    only_matching: bool = False,
    progress: Progress | None = None,
) -> CheckReport:
    """``nsysaudit check``: load ``expectations`` (a TOML file, or :class:`Expectations`), refuse an
    unusable ``junit`` target before any analysis, :func:`check` every input, write the JUnit XML."""
    if not isinstance(expectations, Expectations):
        expectations = Expectations.load(expectations)
    if junit is not None:
        check_writable(junit)
    report = check(paths, expectations, jobs=jobs, nsys_path=nsys_path, only_matching=only_matching,
                   progress=progress)
    if junit is not None:
        write_junit(report, junit)
    return report


JUNIT_ROOTS = ("testsuites", "testsuite")
_PROLOG = re.compile(  # what may stand before the root element: space, the declaration, PIs, comments, a doctype
    rb"(?:\s+|<\?.*?\?>|<!--.*?-->|<!DOCTYPE(?:[^\[>]|\[[^\]]*\])*>)*", re.DOTALL
)  # each part can match only one way: linear time on any 64 KiB
_ROOT = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?([A-Za-z_][\w.-]*)[\s/>]")


def _is_junit(path: Path) -> bool:
    """Whether ``path`` is a JUnit file (one this command may replace): its root element is
    ``<testsuites>`` or ``<testsuite>``, whatever precedes it (an XML declaration or none, comments,
    processing instructions, a doctype, a byte order mark), as the tools that write JUnit files make
    them. Read from its first 64 KiB, never parsed further (no entity is expanded)."""
    try:
        with path.open("rb") as f:
            head = f.read(65536)
    except OSError:
        return False
    for bom, codec in ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if head.startswith(bom):  # a UTF-16 file (rare): its text, as UTF-8
            head = head[len(bom):].decode(codec, "replace").encode()
    head = head.removeprefix(codecs.BOM_UTF8)
    prolog = _PROLOG.match(head)
    root = _ROOT.match(head, prolog.end() if prolog else 0)
    return root is not None and root.group(1).decode("ascii", "replace") in JUNIT_ROOTS


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse a ``--junit`` target that could not be written, before any analysis runs, and one that
    would replace a file that is not a JUnit report (an export named by mistake is evidence)."""
    target = Path(path)
    parent = target.parent
    problem = None
    if target.is_dir():
        problem = "is a folder"
    elif target.is_symlink() or (target.exists() and not target.is_file()):
        problem = "is not a regular file"
    elif target.exists() and not _is_junit(target):
        problem = "exists and is not a JUnit XML file, so it is not replaced"
    elif not parent.is_dir():
        problem = "its folder does not exist" if not parent.exists() else "its parent is not a folder"
    elif not os.access(parent, os.W_OK | os.X_OK):
        problem = "its folder is not writable"
    if problem is not None:
        raise BadOption(f"{target}: cannot write the JUnit file here: {problem} (nothing was written)")


def write_junit(report: CheckReport, path: str | os.PathLike[str]) -> None:
    """Write ``report.junit()`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    target = Path(path)
    try:
        write_atomic(target, report.junit())
    except OSError as exc:
        raise BadOption(f"{target}: cannot write the JUnit file: {exc.strerror or exc} (nothing was written)") from None

