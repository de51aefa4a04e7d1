"""The README and docs/: the README stays short and links every page; every relative link resolves;
the answer the README shows is what ``nsysaudit analyze`` prints now; the pages that list a vocabulary
of the code (censoring reasons, batch columns, dependencies) list all of it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from conftest import REPO

from nsysaudit.analysis.coverage import REASONS
from nsysaudit.batch.run import FINDING_ROW_SCHEMA, INPUT_SCHEMA
from nsysaudit.reports.statements import CENSORED_WORDS

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
MAX_README_LINES = 160

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)\)")
ENGINE_LINE = re.compile(r"^  engine .*$", re.MULTILINE)


def prose(text: str) -> str:
    """``text`` without fenced code blocks and with code spans emptied: what a link can be part of."""
    return CODE_SPAN.sub("`code`", FENCE.sub("", text))


def links(page: Path) -> list[str]:
    return [m["target"] for m in LINK.finditer(prose(page.read_text()))]


def relative_links(page: Path) -> list[str]:
    return [t for t in links(page) if not re.match(r"^[a-z][a-z0-9+.-]*:", t)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def anchors(page: Path) -> set[str]:
    return {slug(m[1]) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", FENCE.sub("", page.read_text()), re.MULTILINE)}


def section(text: str, heading: str) -> str:
    """The body of the ``## heading`` section of a markdown text."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"no section '## {heading}'"
    return match[1]


def test_readme_is_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) < MAX_README_LINES, f"README.md has {len(lines)} lines: move detail into a page under docs/"


def test_every_docs_page_is_linked_from_the_readme() -> None:
    assert DOCS, "docs/ has no pages"
    linked = {(README.parent / t.split("#")[0]).resolve() for t in relative_links(README)}
    missing = [p.name for p in DOCS if p.resolve() not in linked]
    assert not missing, f"docs pages not linked from README.md: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page.resolve()
        if not where.exists():
            broken.append(f"{target}: no such file")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            broken.append(f"{target}: no heading with anchor #{anchor}")
    assert not broken, f"{page.relative_to(REPO)}: broken links: {broken}"


def test_links_are_found() -> None:
    """The link checks above see links at all (a regex that matched nothing would pass them)."""
    assert "docs/coverage.md" in relative_links(README)
    assert "../benchmarks/RESULTS.md" in relative_links(REPO / "docs" / "performance.md")
    assert [m["target"] for m in LINK.finditer(prose("`[a](x.md)` [b](y.md)\n```\n[c](z.md)\n```\n"))] == ["y.md"]


def readme_answer() -> tuple[list[str], list[str]]:
    """The command of the README's terminal excerpt and the lines it shows (up to ``[...]``)."""
    for block in re.findall(r"^```text\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL):
        if block.startswith("$ nsysaudit analyze"):
            lines = block.splitlines()
            command = lines.pop(0)
            while command.endswith("\\"):
                command = command[:-1] + lines.pop(0)
            shown = lines[: lines.index("[...]")] if "[...]" in lines else lines
            return shlex.split(command[2:]), shown
    raise AssertionError("README.md has no ```text block starting with '$ nsysaudit analyze'")


def test_the_readme_answer_is_what_analyze_prints() -> None:
    """The excerpt is the real output at 80 columns, verbatim (the engine line, which depends on the
    install and not on the evidence, normalized on both sides)."""
    argv, shown = readme_answer()
    assert argv[:2] == ["nsysaudit", "analyze"] and len(shown) >= 15
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "nsysaudit", *argv[1:]], capture_output=True, text=True,
                          cwd=REPO, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    printed = ENGINE_LINE.sub("  engine <engine>", proc.stdout).splitlines()
    expected = ENGINE_LINE.sub("  engine <engine>", "\n".join(shown)).splitlines()
    assert printed[: len(expected)] == expected, (
        "README.md's answer differs from what the command prints now; paste its first lines:\n" + proc.stdout
    )


def test_two_commands_are_make_targets() -> None:
    commands = re.findall(r"^make (\w+)", section(README.read_text(), "Two commands"), re.MULTILINE)
    assert commands == ["demo", "test"]
    makefile = (REPO / "Makefile").read_text()
    for target in commands:
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"make {target} is no Makefile target"


def test_the_readme_says_what_each_dependency_is_for() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = project["dependencies"] + project["optional-dependencies"]["fleet"]
    names = [re.split(r"[<>=!~\[ ;]", d)[0] for d in required]
    assert "polars" in names and "dask" in names
    said = section(README.read_text(), "Dependencies")
    assert not [n for n in names if n not in said], "README.md's Dependencies does not name every dependency"
    full = (REPO / "docs" / "dependencies.md").read_text()
    assert not [n for n in names if n not in full]


def test_coverage_page_lists_every_censoring_reason() -> None:
    text = (REPO / "docs" / "coverage.md").read_text()
    assert set(CENSORED_WORDS) == set(REASONS)
    table = re.findall(r"^\| `(\w+)` \|", text, re.MULTILINE)
    assert table == list(REASONS), "docs/coverage.md's table: every reason of analysis/coverage.py, in its order"


def test_batch_page_lists_every_column() -> None:
    text = (REPO / "docs" / "batch.md").read_text()
    words = set(re.findall(r"\w+", text))
    missing = [c for c in [*INPUT_SCHEMA, *FINDING_ROW_SCHEMA] if c not in words]
    assert not missing, f"docs/batch.md does not name the batch columns {missing}"
