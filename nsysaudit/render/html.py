"""``report.html``: ``report.md`` for a browser, with the timeline picture inline. One file, no
network, no script.

The body is ``report.md`` itself rendered by markdown-it-py (CommonMark and GFM tables), so the two
files state the same facts by construction; the answer section is a box at the top, coloured by the
verdict the outline states (:class:`nsysaudit.render.markdown.MarkdownReport`: report.md in its
parts, never searched as text), the timeline section (the SVG inline at its own size, and what the
picture chose) right after it, on the first screen. Trace text arrives already escaped by
:func:`nsysaudit.render.markdown.md` (controls, bidi, zero-width and tag characters as ``\\x..``
escapes; every Markdown and HTML character backslash-escaped), which markdown-it turns into
HTML-escaped text. As a second line of defence markdown-it is run without raw HTML, links, images,
autolinks, link references and character entities (the report uses none of them), and the page's
Content-Security-Policy allows no request and no script at all. The bytes depend only on the
Markdown and the SVG: the same report gives the same file.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from markdown_it import MarkdownIt

from nsysaudit import words
from nsysaudit.render.markdown import MarkdownReport

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
CSS = """
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; font-size: 14px; color: #222;
       margin: 0; background: #fff; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #ccc; padding-bottom: 2px; margin-top: 28px; }
h3 { font-size: 15px; } h4 { font-size: 14px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 12px; display: block; overflow-x: auto;
        max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; white-space: nowrap; }
th { background: #f2f2f2; }
code { font-family: "DejaVu Sans Mono", monospace; font-size: 12px; overflow-wrap: anywhere; }
li, p { overflow-wrap: break-word; }
figure { margin: 8px 0; overflow-x: auto; } figure svg { max-width: none; height: auto; display: block; }
.how { font-size: 13px; color: #333; }
.answer { border: 2px solid #888; border-radius: 6px; padding: 2px 18px 6px; margin: 12px 0 18px; }
.answer h2 { border: none; margin-top: 10px; }
.answer.failure_found { border-color: #d62728; background: #fdf1f1; }
.answer.inconclusive { border-color: #d9a400; background: #fff8e5; }
.answer.no_failure { border-color: #2ca02c; background: #f0f9f0; }
""".strip()


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    return md.disable(["link", "image", "autolink", "html_inline", "html_block", "entity", "reference"])


def _svg_element(svg: bytes) -> str:
    """The ``<svg>`` element of a standalone SVG file (without its XML declaration and doctype)."""
    text = svg.decode("utf-8")
    return text[text.index("<svg"):].strip()


def _figures(svgs: Sequence[bytes]) -> str:
    figures = "".join(f"<figure>\n{_svg_element(svg)}\n</figure>\n" for svg in svgs)
    how = words.HOW_TO_READ_PICTURE
    return f'<section id="timeline">\n<h2>Timeline</h2>\n{figures}<p class="how">{how}</p>\n</section>\n'


def report_html(report: MarkdownReport, svgs: Sequence[bytes], *, title: str) -> bytes:
    """The self-contained ``report.html`` of a sealed report: its ``report.md`` (in its parts: the
    answer goes in a box coloured by the verdict it states, the timeline right after it, on the first
    screen) and each arm's timeline picture (as :func:`nsysaudit.render.pictures.render` made it), stacked in
    the order given."""
    md = _markdown()
    answer = "\n".join(report.answer) + "\n"
    box = f'<section class="answer {report.verdict}">\n{md.render(answer)}</section>\n'
    rest = "\n".join(report.rest).rstrip("\n") + "\n"
    body = md.render(f"{report.title}\n\n") + box + _figures(svgs) + md.render(rest)
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{CSS}\n</style>\n</head>\n"
        f"<body>\n<main>\n{body}</main>\n</body>\n</html>\n"
    )
    return page.encode("utf-8")
