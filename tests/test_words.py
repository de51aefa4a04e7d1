"""Every sentence a user reads is written in one place, nsysaudit/words.py (issue 35).

A *sentence* here is a string literal of five or more words (an f-string counts as one literal; a
word holds a letter, so its fields and numbers are none) in nsysaudit/**, read by ``ast``. What is
not a sentence for a user:

- docstrings;
- error messages: a literal anywhere inside a ``raise`` statement, inside a call of an exception
  class (a builtin one, or a class of the package that derives from one, found by name in the
  package's own class definitions), e.g. ``UnusableInput(path, "...")`` built before it is raised,
  or inside such a class's own body (the message its ``__init__`` makes);
- a type alias spelled as a string (``JSON: TypeAlias = "str | int | ..."``);
- SQL: a literal holding an upper-case SQL keyword as a word (``SELECT``, ``FROM``, ``WHERE``, ...);
- regular expressions: a literal inside a call of the ``re`` module (``re.compile(r"...")``);
- keyword arguments that name a format or a key, not a sentence (``help=`` of the command line is
  the command line's own text: cli.py is left out below, with the schemas' generated descriptions).

The files in :data:`NOT_YET` still hold sentences of their own: each with the number it holds today,
so the list only shrinks; a new sentence anywhere fails :func:`test_no_sentence_outside_words`.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "nsysaudit"
WORDS = PACKAGE / "words.py"
MIN_WORDS = 5

# Not read: the command line's help and its own messages, the JSON Schemas' generated descriptions.
LEFT_OUT = {"cli.py", "__main__.py", "schemas/__init__.py", "schemas/__main__.py"}

# Files of this floor that still write sentences: how many each holds today (only ever lowered).
NOT_YET: dict[str, int] = {
    "analysis/allocator.py": 3,
    "batch/check.py": 5,
    "batch/output.py": 6,
    "batch/run.py": 3,
    "batch/workers.py": 2,
    "read/_unpickle.py": 1,
    "read/damage.py": 2,
    "read/nsys.py": 1,
    "read/scan.py": 1,
    "read/source.py": 2,
    "read/trace.py": 1,
    "render/contract.py": 2,
    "render/html.py": 4,
    "reports/timeline.py": 3,
    "seal/verify.py": 10,
}

_SQL = re.compile(r"\b(SELECT|FROM|WHERE|JOIN|GROUP BY|ORDER BY|CASE|WHEN|THEN|BETWEEN|LIKE|LIMIT|HAVING|PRAGMA|"
                  r"NOT INDEXED|IS NOT NULL|AND|OR|AS|ON)\b")


def _exception_names() -> set[str]:
    """The builtin exception classes and every class of the package that derives from one, by name."""
    known = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}
    bases: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases.setdefault(node.name, set()).update(
                    b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                    if isinstance(b, ast.Name | ast.Attribute)
                )
    grew = True
    while grew:
        grew = False
        for name, of in bases.items():
            if name not in known and of & known:
                known.add(name)
                grew = True
    return known


EXCEPTIONS = _exception_names()


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _called(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _is_exception_class(node: ast.ClassDef) -> bool:
    bases = {b.id if isinstance(b, ast.Name) else b.attr for b in node.bases if isinstance(b, ast.Name | ast.Attribute)}
    return node.name in EXCEPTIONS or bool(bases & EXCEPTIONS)


def _is_re_call(node: ast.Call) -> bool:
    f = node.func
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "re"


def _text(node: ast.Constant | ast.JoinedStr) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    return "".join(v.value if isinstance(v, ast.Constant) else " {} " for v in node.values)  # type: ignore[misc]


def _words(text: str) -> int:
    """How many words ``text`` has: runs of characters holding a letter (a field is no word)."""
    return sum(1 for w in text.split() if any(c.isalpha() for c in w))


def sentences(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every sentence literal in ``source`` (see the module's docstring)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST, exempt: bool) -> None:
        if isinstance(node, ast.Raise) or (
            isinstance(node, ast.Call) and (_called(node) in EXCEPTIONS or _is_re_call(node))
        ) or (isinstance(node, ast.ClassDef) and _is_exception_class(node)):
            exempt = True
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) == "TypeAlias":
            return  # a type, spelled as a string
        if isinstance(node, ast.JoinedStr | ast.Constant) and id(node) not in skip:
            if isinstance(node, ast.Constant) and not isinstance(node.value, str):
                return
            text = _text(node)
            if not exempt and _words(text) >= MIN_WORDS and not _SQL.search(text):
                found.append((node.lineno, text))
            return  # an f-string's parts are not read again
        for child in ast.iter_child_nodes(node):
            walk(child, exempt)

    walk(tree, False)
    yield from sorted(found)


def _files() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if path == WORDS or rel in LEFT_OUT:
            continue
        yield rel, path


def test_no_sentence_outside_words() -> None:
    counts = {rel: len(list(sentences(path.read_text()))) for rel, path in _files()}
    new = {rel: n for rel, n in counts.items() if n > NOT_YET.get(rel, 0)}
    shown = {rel: [t for _, t in sentences((PACKAGE / rel).read_text())][:3] for rel in new}
    assert not new, f"sentences written outside nsysaudit/words.py (file: count; the first of them): {shown}"


def test_the_list_of_files_not_yet_moved_only_shrinks() -> None:
    """A file that lost sentences has its number lowered here, so none can come back unseen."""
    counts = {rel: len(list(sentences(path.read_text()))) for rel, path in _files()}
    stale = {rel: (n, counts.get(rel, 0)) for rel, n in NOT_YET.items() if counts.get(rel, 0) != n}
    assert not stale, f"NOT_YET is stale (file: (listed, held now)): {stale}"


@pytest.mark.parametrize(
    ("source", "count"),
    [
        ('x = f"{n} library call(s) are censored here"\n', 1),  # a new sentence is found
        ('x = "the trace does not cover them"\n', 1),
        ('def f():\n    """A docstring of many words is not a sentence."""\n', 0),
        ('raise ValueError(f"{p}: not a usable nsys export at all")\n', 0),
        ('e = UnusableInput(path, "the export holds no table we read")\n', 0),
        ('q = "SELECT start, end FROM t WHERE x IS NOT NULL"\n', 0),
        ('r = re.compile(r"Not all NVTX events might have been collected")\n', 0),
        ('k = "four words are few"\n', 0),
        ('class Bad(ValueError):\n    def __init__(self):\n        super().__init__("is not any usable export")\n', 0),
        ('op = f"CASE kind WHEN {a} THEN 0 WHEN {b} THEN 1 END"\n', 0),
    ],
)
def test_the_test_finds_a_new_sentence(source: str, count: int) -> None:
    assert len(list(sentences(source))) == count


def test_every_reason_the_package_states_has_its_words() -> None:
    """Each code a ``Reason.of("code", ...)`` of the package names (and each ``code=`` it passes on)
    is a key of :data:`nsysaudit.words.TEMPLATES`: no reason is stated that nothing words."""
    from nsysaudit.words import TEMPLATES

    stated = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and _called(node) == "of" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    stated.add(first.value)
                elif isinstance(first, ast.IfExp):  # Reason.of("a" if x else "b")
                    stated |= {v.value for v in (first.body, first.orelse) if isinstance(v, ast.Constant)}
            if isinstance(node, ast.keyword) and node.arg == "code" and isinstance(node.value, ast.Constant):
                stated.add(node.value.value)
    assert stated, "no Reason.of found: the test reads nothing"
    assert sorted(stated - set(TEMPLATES)) == []
