"""report.html: one self-contained file in every sealed folder, the facts of report.md
with each arm's picture inline, escaped, covered by the seal; and opened in headless Chromium
(Debian's, `scripts/install-chromium.sh`) it renders without an error or a request, not blank."""

from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import H200_2025, HOSTILE_TEXT, TORCH, UNSAFE_SHOWN, hostile_export, reseal_tags, sha

from nsysaudit import seal
from nsysaudit.cli import main
from nsysaudit.render.json import indented

TORCH_INPUTS = [TORCH / "observe.sqlite", TORCH / "release.sqlite", TORCH / "observe.telemetry.jsonl",
                TORCH / "release.telemetry.jsonl"]
CHROMIUM = os.environ.get("NSYSAUDIT_CHROMIUM", "/usr/bin/chromium")
# `make test` sets this: there a missing browser is a failure, not a skip.
REQUIRE_CHROMIUM = os.environ.get("NSYSAUDIT_REQUIRE_CHROMIUM") == "1"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def sealed_torch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html") / "torch-compare"
    seal.seal_compare(TORCH / "observe.sqlite", TORCH / "release.sqlite", out,
                      observe_telemetry=TORCH / "observe.telemetry.jsonl",
                      release_telemetry=TORCH / "release.telemetry.jsonl")
    return out


class Page(HTMLParser):
    """Every tag with its attributes; the text, list items and table rows outside the timeline."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.stack: list[str] = []
        self.in_timeline = 0
        self.items: list[str] = []
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None
        self._items: list[list[str]] = []  # the list items open, innermost last (lists nest)
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "section" and dict(attrs).get("id") == "timeline":
            self.in_timeline = len(self.stack) + 1
        self.stack.append(tag)
        if self.in_timeline:
            return
        if tag == "li":
            self._items.append([])
        elif tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "li" and self._items and not self.in_timeline:
            self.items.append("".join(self._items.pop()).strip())
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell).strip())
            self._cell = None
        while self.stack:
            if self.stack.pop() == tag:
                break
        if self.in_timeline and len(self.stack) < self.in_timeline:
            self.in_timeline = 0

    def handle_data(self, data: str) -> None:
        if self.in_timeline:
            return
        self.text.append(data)
        for part in (self._items[-1] if self._items else None, self._cell):
            if part is not None:
                part.append(data)


def parse(data: bytes) -> Page:
    page = Page()
    page.feed(data.decode("utf-8"))
    return page


def plain(markdown: str) -> str:
    """Markdown text as a reader sees it: no ``**``, no code backticks, no backslash escapes."""
    text = re.sub(r"(?<!\\)\*\*(.+?)(?<!\\)\*\*", r"\1", markdown)
    text = re.sub(r"(?<!\\)`([^`]*)`", r"\1", text)
    return re.sub(r"\\(.)", r"\1", text)


def test_report_html_is_one_self_contained_file(sealed_torch: Path) -> None:
    data = (sealed_torch / "report.html").read_bytes()
    page = parse(data)
    tags = {tag for tag, _ in page.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed", "base", "audio", "video", "source"}
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            if name in ("href", "xlink:href", "src", "action", "srcset", "poster"):
                assert value is not None and value.startswith("#"), (tag, name, value)  # in-page references only
            assert not (name.startswith("on")), (tag, name)
    urls = re.findall(rb"url\(([^)]*)\)", data)  # the SVGs' hatch patterns, nothing else
    assert urls and all(u.startswith(b"#") for u in urls)
    [csp] = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp["content"] == "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    # Each arm's picture is inline, exactly as sealed beside it.
    text = data.decode("utf-8")
    assert text.count("<svg") == 2
    for arm in ("observe", "release"):
        svg = (sealed_torch / f"timeline-{arm}.svg").read_text("utf-8")
        assert svg[svg.index("<svg"):].strip() in text
    assert text.index('id="observe-context-lane-0"') < text.index('id="release-context-lane-0"')  # observe on top


def test_report_html_states_the_facts_of_report_md(sealed_torch: Path) -> None:
    page = parse((sealed_torch / "report.html").read_bytes())
    markdown = (sealed_torch / "report.md").read_text("utf-8")
    lines = markdown.splitlines()
    bullets = [plain(line.lstrip()[2:]) for line in lines if line.lstrip().startswith("- ")]
    assert sorted(page.items) == sorted(bullets)  # a nested item ends before the one that holds it
    table_rows = [line for line in lines if line.startswith("|") and not re.fullmatch(r"\|(---\|)+", line)]
    assert page.rows == [[plain(c.strip()) for c in re.split(r"(?<!\\)\|", row)[1:-1]] for row in table_rows]
    headings = [plain(line.lstrip("#").strip()) for line in lines if line.startswith("#")]
    shown = "".join(page.text)
    assert all(h in shown for h in headings)
    assert "cudaMalloc returned 2 (cudaErrorMemoryAllocation)" in shown and "pt_autograd_0" in shown


def test_trace_text_is_escaped_in_report_html(make_export, tmp_path: Path) -> None:
    for name, text in sorted(HOSTILE_TEXT.items()):
        out = tmp_path / name
        seal.seal_analysis(make_export(hostile_export(text), f"{name}.sqlite"), out)
        data = (out / "report.html").read_bytes()
        html_text = data.decode("utf-8")
        assert not UNSAFE_SHOWN.search(html_text.replace("\n", "")), name
        page = parse(data)
        assert not {t for t, _ in page.tags} & {"script", "img", "a"}, name
        if name == "html":
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html_text
            assert "<script>alert(1)</script>" in "".join(page.text)  # shown as written, as text
        if name == "bidi":
            assert "abc\\u202eexe.txt" in "".join(page.text)


# --- the seal covers it ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["report.html", "timeline-observe.svg", "timeline-release.svg"])
def test_a_changed_byte_of_a_picture_or_report_html_fails_verify(capsys, sealed_torch: Path, tmp_path: Path,
                                                                  name: str) -> None:
    bag = tmp_path / "bag"
    shutil.copytree(sealed_torch, bag)
    assert main(["verify", str(bag)]) == 0
    capsys.readouterr()
    data = bytearray((bag / name).read_bytes())
    data[len(data) // 2] ^= 0x01
    (bag / name).write_bytes(bytes(data))
    code = main(["verify", str(bag)])
    _, err = capsys.readouterr()
    assert code == 1 and f"{name}: changed (sha256 " in err and err.count("\n") == 1, err


def test_verify_lists_the_pictures_and_re_running_makes_them_again(capsys, sealed_torch: Path) -> None:
    names = [line.split("  ", 1)[1] for line in (sealed_torch / "manifest-sha256.txt").read_text().splitlines()]
    assert names == ["inputs-sha256.txt", "report.html", "report.json", "report.md", "timeline-observe.svg",
                     "timeline-release.svg"]
    meta = json.loads((sealed_torch / "metadata.json").read_text())
    assert meta["files"]["payload"] == names
    checked = seal.verify(sealed_torch, TORCH_INPUTS)
    assert checked.rerun and "timeline-observe.svg" in checked.files and "report.html" in checked.files


def test_analyze_out_seals_its_picture_and_report_html(capsys, tmp_path: Path) -> None:
    out = tmp_path / "stop"
    stop = H200_2025 / "capture-stop"
    code = main(["analyze", str(stop / "stop.sqlite"), "--telemetry", str(stop / "stop.telemetry.jsonl"),
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [
        "inputs-sha256.txt", "manifest-sha256.txt", "metadata.json", "report.html", "report.json", "report.md",
        "tagmanifest-sha256.txt", "timeline.svg",
    ]
    html_text = (out / "report.html").read_text("utf-8")
    assert "not covered: capture stopped" in html_text and html_text.count("<svg") == 1
    seal.verify(out, [stop / "stop.sqlite", stop / "stop.telemetry.jsonl"])


def test_a_manifest_of_the_other_kind_fails_verify(capsys, sealed_torch: Path, tmp_path: Path) -> None:
    """A comparison whose metadata says 'analyze', re-hashed to match, is a failed check."""
    bag = tmp_path / "bag"
    shutil.copytree(sealed_torch, bag)
    meta = json.loads((bag / "metadata.json").read_text())
    meta["recipe"]["kind"] = "analyze"
    (bag / "metadata.json").write_bytes(indented(meta))
    reseal_tags(bag)
    code = main(["verify", str(bag)])
    _, err = capsys.readouterr()
    assert code == 1 and "does not list the payload of the analyze report metadata.json records" in err, err
    assert sha(bag / "report.html") == sha(sealed_torch / "report.html")


# --- in a browser ----------------------------------------------------------------------------------


def browser():  # type: ignore[no-untyped-def]
    """playwright's sync API with Debian's Chromium, or a skip (a failure under `make test`)."""
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "playwright is not installed (pip install -e '.[test]')"
    if missing is None and not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        missing = f"{CHROMIUM} is not installed: run `make chromium` (scripts/install-chromium.sh)"
    if missing is not None:
        if REQUIRE_CHROMIUM:
            pytest.fail(missing)
        pytest.skip(missing)
    return sync_playwright


@pytest.mark.slow
def test_report_html_renders_in_headless_chromium_without_errors(sealed_torch: Path, tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    sync_playwright = browser()
    url = (sealed_torch / "report.html").as_uri()
    console: list[str] = []
    requests: list[str] = []
    failed: list[str] = []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = context.new_page()
            page.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: console.append(f"pageerror: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.goto(url, wait_until="load")
            widths = page.evaluate("[...document.querySelectorAll('svg')].map(s => s.getBoundingClientRect().width)")
            text = page.evaluate("document.body.innerText")
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            context.close()
    assert console == [] and failed == [] and requests == [url], (console, failed, requests)
    assert len(widths) == 2 and min(widths) > 1000
    assert "pt_autograd_0" in text and "cudaMalloc returned 2 (cudaErrorMemoryAllocation)" in text
    keep = os.environ.get("NSYSAUDIT_SCREENSHOT_DIR")
    if keep:
        shutil.copy(shot, Path(keep) / "report-html.png")
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(int)
    height, width, _ = pixels.shape
    assert width >= 1280 and height > 2000
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    inked = float(((r + g + b) < 600).mean())
    assert inked > 0.01, f"{inked:.4f} of the screenshot is not near-white"
    # The failed call's red (#d62728) and the library calls' blue (#4c72b0) are drawn.
    red = int(((r > 180) & (g < 80) & (b < 80)).sum())
    blue = int(((r < 110) & (g > 90) & (g < 140) & (b > 150)).sum())
    assert red > 200 and blue > 200, (red, blue)
    packed = (r << 16 | g << 8 | b)[::4, ::4]
    assert len(np.unique(packed)) > 50  # a drawing, not a flat page


@pytest.mark.slow
@pytest.mark.parametrize("width", [800, 1400])
def test_the_answer_box_and_the_picture_are_on_the_first_screen(sealed_torch: Path, tmp_path: Path,
                                                                width: int) -> None:
    """At 800 and 1400 px (900 tall): the verdict box whole without scrolling, the observe picture
    starting on the same screen, the pictures' text at the same size at both widths (the SVG keeps
    its own size and scrolls, it does not shrink), and no number in a table cell wrapped."""
    sync_playwright = browser()
    url = (sealed_torch / "report.html").as_uri()
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": 900},
        )
        try:
            page = context.new_page()
            page.goto(url, wait_until="load")
            box = page.evaluate("(() => { const r = document.querySelector('section.answer').getBoundingClientRect();"
                                " return [r.top, r.bottom, getComputedStyle(document.querySelector('section.answer'))"
                                ".borderTopColor]; })()")
            figure_top = page.evaluate("document.querySelector('figure').getBoundingClientRect().top")
            svg_text = page.evaluate(
                "(() => { const t = [...document.querySelectorAll('figure svg text')]"
                ".find(e => e.textContent.includes('pt_autograd_0')); return t.getBoundingClientRect().height; })()")
            wrapped = page.evaluate(
                "[...document.querySelectorAll('td')].filter(td => /^[0-9][0-9,]*$/.test(td.innerText.trim()))"
                ".filter(td => td.getClientRects()[0].height > 2 * parseFloat(getComputedStyle(td).fontSize))"
                ".map(td => td.innerText)")
            page.screenshot(path=str(tmp_path / f"first-screen-{width}.png"))
        finally:
            context.close()
    top, bottom, colour = box
    assert 0 <= top < bottom <= 900, box
    assert colour == "rgb(214, 39, 40)"  # the failure_found box (#d62728)
    assert figure_top < 900
    assert 8 < svg_text < 16, svg_text  # a lane label of about 9 pt, whatever the window's width
    assert wrapped == []
    keep = os.environ.get("NSYSAUDIT_SCREENSHOT_DIR")
    if keep:
        shutil.copy(tmp_path / f"first-screen-{width}.png", Path(keep) / f"report-html-{width}.png")
