"""Every sentence a user reads is written in one place, nsysaudit/words.py (issue 35).

A *sentence* here is a string literal of five or more words (an f-string counts as one literal; a
word holds a letter, so its fields and numbers are none) in nsysaudit/**, read by ``ast``. What is
not a sentence for a user:

- docstrings;
- error messages: a literal anywhere inside a ``raise`` statement, inside a call of an exception
  class (a builtin one, or a class of the package that derives from one, found by name in the
  package's own class definitions), e.g. ``UnusableInput(path, "...")`` built before it is raised,
  inside such a class's own body (the message its ``__init__`` makes), or written to standard error
  (``sys.stderr.write``: a child process's one-line error); and text that reaches only those: a
  local name whose every use lies there (``problem = "..."``, ``problems.append("...")``, then
  ``raise BadOption(f"...{problem}")``), and a function or module constant of the package whose
  every use, package-wide, lies there (a helper that words part of a refusal). A use that only tests
  a value (``if problem:``, ``x in TABLE``, ``len(problems)``) carries no text and does not count;
- a type alias spelled as a string (``JSON: TypeAlias = "str | int | ..."``);
- SQL: a literal holding an upper-case SQL keyword as a word (``SELECT``, ``FROM``, ``WHERE``, ...);
- regular expressions: a literal inside a call of the ``re`` module (``re.compile(r"...")``) or of
  ``warnings.filterwarnings`` (its ``message`` is a pattern);
- keyword arguments that name a format or a key, not a sentence (``help=`` of the command line is
  the command line's own text: cli.py is left out below, with the schemas' generated descriptions).

The files in :data:`NOT_YET` still hold sentences of their own: each with the number it holds today,
so the list only shrinks; a new sentence anywhere fails :func:`test_no_sentence_outside_words`.
"""

from __future__ import annotations

import ast
import builtins
import functools
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
    "read/damage.py": 2,
    "read/scan.py": 1,
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
    return (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "re") or (
        _called(node) == "filterwarnings")


def _is_stderr_write(node: ast.Call) -> bool:
    return ast.unparse(node.func) == "sys.stderr.write"


def _starts_error(node: ast.AST) -> bool:
    """Whether ``node`` begins an error context (or a pattern's): what a literal under it is not a sentence."""
    return isinstance(node, ast.Raise) or (
        isinstance(node, ast.Call) and (_called(node) in EXCEPTIONS or _is_re_call(node) or _is_stderr_write(node))
    ) or (isinstance(node, ast.ClassDef) and _is_exception_class(node))


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _carries_no_text(use: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """A use that only tests its value: compared (``in``, ``is None``), a condition, negated, measured."""
    parent = parents.get(id(use))
    if isinstance(parent, ast.Compare) or (isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)):
        return True
    if isinstance(parent, ast.Attribute) and parent.attr in _ADDS:  # names.append(...): adds to it, reads nothing
        return True
    if isinstance(parent, ast.If | ast.While | ast.IfExp | ast.Assert) and parent.test is use:
        return True
    return isinstance(parent, ast.Call) and _called(parent) in ("len", "bool") and use in parent.args


_ADDS = ("append", "extend", "insert")


def _module_names(tree: ast.Module) -> set[str]:
    """The names a module's own top-level assignments bind (its constants)."""
    return {t.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}


def _bindings(scope: ast.AST) -> tuple[dict[str, list[ast.AST]], dict[str, list[ast.AST]]]:
    """Each name's loads in ``scope``, and what ``scope`` binds to it or adds to it (``name = v``,
    ``name += v``, ``name.append(v)``)."""
    loads: dict[str, list[ast.AST]] = {}
    values: dict[str, list[ast.AST]] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loads.setdefault(node.id, []).append(node)
        elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    values.setdefault(t.id, []).append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ADDS \
                and isinstance(node.func.value, ast.Name):
            values.setdefault(node.func.value.id, []).extend(node.args)
    return loads, values


def _only_in_errors(uses: list[ast.AST], inside: set[int], parents: dict[int, ast.AST]) -> bool:
    return any(id(u) in inside for u in uses) and all(id(u) in inside or _carries_no_text(u, parents) for u in uses)


Bindings = tuple[dict[str, list[ast.AST]], dict[str, list[ast.AST]]]


def _scopes(tree: ast.Module) -> list[Bindings]:
    """Each function's :func:`_bindings`."""
    return [_bindings(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _in_errors(tree: ast.Module, error_names: frozenset[str], parents: dict[int, ast.AST] | None = None,
               scopes: list[Bindings] | None = None) -> set[int]:
    """The ids of ``tree``'s nodes in an error context (see the module's docstring); ``error_names``:
    the functions and module constants whose every use is in one. ``parents`` and ``scopes``: the
    tree's :func:`_parents` and :func:`_scopes`, where the caller has them already."""
    inside: set[int] = set()
    parents = _parents(tree) if parents is None else parents

    def mark(node: ast.AST, exempt: bool) -> None:
        named = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in error_names
        if _starts_error(node) or named:
            exempt = True
        if exempt:
            inside.add(id(node))
        for child in ast.iter_child_nodes(node):
            mark(child, exempt)

    mark(tree, False)
    top = _bindings(ast.Module(body=[n for n in tree.body if isinstance(n, ast.Assign | ast.AnnAssign)],
                               type_ignores=[]))[1]
    for name in _module_names(tree) & error_names:
        for value in top.get(name, []):
            mark(value, True)
    for loads, values in _scopes(tree) if scopes is None else scopes:
        grew = True
        while grew:
            grew = False
            for name, bound in values.items():
                if not _only_in_errors(loads.get(name, []), inside, parents):
                    continue
                for value in bound:
                    if id(value) not in inside:
                        mark(value, True)
                        grew = True
    return inside


def error_names(trees: list[ast.Module]) -> frozenset[str]:
    """The functions and module constants of ``trees`` whose every use (by name, in any of them) lies
    in an error context: their text is error text."""
    parents = [_parents(t) for t in trees]
    scopes = [_scopes(t) for t in trees]  # read once: the loop below reads every tree again each round
    candidates = {n.name for t in trees for n in ast.walk(t) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    candidates |= {name for t in trees for name in _module_names(t)}
    candidates = {c for c in candidates if not c.startswith("__")}  # __init__, __str__: called without their name
    uses: dict[str, list[tuple[int, ast.AST]]] = {}
    for i, t in enumerate(trees):
        for n in ast.walk(t):
            name = n.id if isinstance(n, ast.Name) else n.attr if isinstance(n, ast.Attribute) else None
            if name in candidates and isinstance(n.ctx, ast.Load):  # type: ignore[attr-defined]
                uses.setdefault(name, []).append((i, n))
    found: frozenset[str] = frozenset()
    while True:
        inside = [_in_errors(t, found, parents[i], scopes[i]) for i, t in enumerate(trees)]
        grown = frozenset(
            name for name, used in uses.items()
            if any(id(u) in inside[i] for i, u in used)
            and all(id(u) in inside[i] or _carries_no_text(u, parents[i]) for i, u in used)
        )
        if grown == found:
            return found
        found = grown


def _text(node: ast.Constant | ast.JoinedStr) -> str:
    if isinstance(node, ast.Constant):
        return str(node.value)
    return "".join(v.value if isinstance(v, ast.Constant) else " {} " for v in node.values)  # type: ignore[misc]


_TAG = re.compile(r"<[^>]*>")  # an HTML tag or comment: markup, not words
# style sheet rules only: `selector { property: value; ... }`, each declaration closed by its `;`
_CSS = re.compile(r"(\s*[\w.#,>* -]+\{(\s*[a-z-]+\s*:\s*[^;{}]+;)+\s*\})+\s*")
_CSP = re.compile(r"(\s*[a-z-]+-(src|ancestors|uri)(\s+[^;\s]+)+;?)+\s*")  # a Content-Security-Policy


def _words(text: str) -> int:
    """How many words ``text`` has: runs of characters holding a letter (a field is no word), once its
    HTML tags are taken out; a style sheet or a Content-Security-Policy has none."""
    if _CSS.fullmatch(text) or _CSP.fullmatch(text):
        return 0
    return sum(1 for w in _TAG.sub(" ", text).split() if any(c.isalpha() for c in w))


def sentences(source: str, errors: frozenset[str] | None = None) -> Iterator[tuple[int, str]]:
    """(line, text) of every sentence literal in ``source`` (see the module's docstring); ``errors``:
    the package's :func:`error_names` (by default, those of ``source`` alone)."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    inside = _in_errors(tree, error_names([tree]) if errors is None else errors)
    found: list[tuple[int, str]] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) == "TypeAlias":
            return  # a type, spelled as a string
        if isinstance(node, ast.JoinedStr | ast.Constant) and id(node) not in skip:
            if isinstance(node, ast.Constant) and not isinstance(node.value, str):
                return
            text = _text(node)
            if id(node) not in inside and _words(text) >= MIN_WORDS and not _SQL.search(text):
                found.append((node.lineno, text))
            return  # an f-string's parts are not read again
        for child in ast.iter_child_nodes(node):
            walk(child)

    walk(tree)
    yield from sorted(found)


def _files() -> Iterator[tuple[str, Path]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if path == WORDS or rel in LEFT_OUT:
            continue
        yield rel, path


@functools.cache
def package_error_names() -> frozenset[str]:
    """:func:`error_names`, read by name over the whole package (cli.py too: a use there counts): by the
    tests that need them, not as pytest collects this file (every worker of pytest-xdist does)."""
    return error_names([ast.parse(p.read_text()) for p in sorted(PACKAGE.rglob("*.py"))])


@functools.cache
def sentence_counts() -> dict[str, int]:
    """Each package file's sentences outside words.py (read once, by both tests below)."""
    errors = package_error_names()
    return {rel: len(list(sentences(path.read_text(), errors))) for rel, path in _files()}


def test_no_sentence_outside_words() -> None:
    counts = sentence_counts()
    new = {rel: n for rel, n in counts.items() if n > NOT_YET.get(rel, 0)}
    shown = {rel: [t for _, t in sentences((PACKAGE / rel).read_text(), package_error_names())][:3] for rel in new}
    assert not new, f"sentences written outside nsysaudit/words.py (file: count; the first of them): {shown}"


def test_the_list_of_files_not_yet_moved_only_shrinks() -> None:
    """A file that lost sentences has its number lowered here, so none can come back unseen."""
    counts = sentence_counts()
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
        ('css = "body { font-size: 14px; color: #222; }\\nh1 { font-size: 22px; } .a.b { border: none; }"\n', 0),
        ('csp = "default-src \'none\'; style-src \'unsafe-inline\'; img-src data:"\n', 0),
        ('h = \'<section id="t">\\n<h2>Timeline</h2>\\n {} <p class="how"> {} </p>\\n</section>\'\n', 0),
        ('c = "<!-- generated from documents.py: python -m nsysaudit.render.contract -->"\n', 0),
        ('p = "<p>the trace does not cover them</p>"\n', 1),  # prose inside markup is still a sentence
        ('s = "body: the trace does not cover them; see { the log }"\n', 1),
        ('class Bad(ValueError):\n    def __init__(self):\n        super().__init__("is not any usable export")\n', 0),
        ('op = f"CASE kind WHEN {a} THEN 0 WHEN {b} THEN 1 END"\n', 0),
        # text built before its raise, and only for it, is the error's; shown anywhere else, a sentence
        ('def f(p):\n    why = "its folder is not writable here"\n    raise OSError(f"{p}: {why}")\n', 0),
        ('def f(p):\n    why = "its folder is not writable here"\n    print(why)\n    raise OSError(why)\n', 1),
        ('def f(p):\n    why = None\n    if p:\n        why = "its folder is not writable here"\n'
         '    if why is not None:\n        raise OSError(why)\n', 0),
        ('def f():\n    bad = []\n    bad.append("its digest is not the sealed one")\n    if bad:\n'
         '        raise ValueError("; ".join(bad))\n', 0),
        ('def f():\n    bad = []\n    bad.append("its digest is not the sealed one")\n    return bad\n', 1),
        ('def _hint():\n    return "in this checkout make nsys installs it"\n'
         'def f(p):\n    raise OSError(p + _hint())\n', 0),
        ('def _hint():\n    return "in this checkout make nsys installs it"\n'
         'def f(p):\n    raise OSError(p + _hint())\ndef g():\n    return _hint()\n', 1),
        ('OLD = {"1": "made before the report named its schema"}\n'
         'def f(v):\n    if v in OLD:\n        raise ValueError(OLD[v])\n', 0),
        ('OLD = {"1": "made before the report named its schema"}\nx = OLD["1"]\n', 1),
        ('sys.stderr.write("reading it needs more memory than allowed")\n', 0),
        ('warnings.filterwarnings("ignore", message=r"Port \\d+ is already in use")\n', 0),
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
