"""Text from traces, telemetry and file names is data: the characters never shown as they are.

One definition serves every place such text is shown to a person: the terminal report
(:func:`nsysaudit.render.terminal.literal`), ``report.md`` (:func:`nsysaudit.render.markdown.md`) and the
one error line on stderr (:func:`nsysaudit.cli.main`). ``--json`` keeps the exact text.

>>> escape("ok\\nverdict: no_failure \\x1b[31m\\u202e\\u200b\\U000e0041")
'ok\\\\nverdict: no_failure \\\\x1b[31m\\\\u202e\\\\u200b\\\\U000e0041'
"""

from __future__ import annotations

import re

# What a terminal or a Markdown viewer acts on, or what hides or reorders text:
# - C0 controls, DEL and C1 controls (ESC and CSI start escape sequences; line breaks forge lines);
# - the Arabic letter mark, the zero-width characters and LRM/RLM (U+200B..U+200F), the line and
#   paragraph separators and the bidi embeddings/overrides (U+2028..U+202E), the word joiner and
#   invisible operators (U+2060..U+2064), the bidi isolates (U+2066..U+2069), the BOM/ZWNBSP (U+FEFF);
# - the tag characters (U+E0000..U+E007F), invisible text that some renderers hide entirely;
# - lone surrogates (undecodable bytes of a file name, ``surrogateescape``): they cannot be encoded.
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\ud800-\udfff\U000e0000-\U000e007f]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_char(ch: str) -> str:
    """One unsafe character as the escape Python would write for it (``\\n``, ``\\x1b``, ``\\u202e``)."""
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape(text: str) -> str:
    """``text`` with every :data:`UNSAFE` character replaced by its escape: one line, shown as written."""
    return UNSAFE.sub(lambda m: escape_char(m.group()), text)


def byte_size(value: int | float) -> str:
    """Bytes as exact digits, with a binary unit when it helps: ``16,777,216 B (16.0 MiB)``.

    The digits are the number the export holds; the unit in brackets is only a reading aid, in
    powers of 1024 as ``nvidia-smi`` and PyTorch's allocator statistics print them.

    >>> byte_size(512)
    '512 B'
    >>> byte_size(149_412_081_522)
    '149,412,081,522 B (139.2 GiB)'
    """
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    v, i = float(value), 0
    while abs(v) >= 1024 and i < len(units) - 1:
        v, i = v / 1024, i + 1
    return f"{value:,} B" if i == 0 else f"{value:,} B ({v:.1f} {units[i]})"


def size_word(value: int) -> str:
    """Bytes in one short binary unit, for a sentence: ``139.0 GiB``, ``64.3 MiB``, ``512 B``.

    >>> size_word(149_283_667_968), size_word(67_373_056), size_word(223_090), size_word(512)
    ('139.0 GiB', '64.3 MiB', '217.9 KiB', '512 B')
    """
    units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    v, i = float(value), 0
    while abs(v) >= 1024 and i < len(units) - 1:
        v, i = v / 1024, i + 1
    return f"{value} B" if i == 0 else f"{v:.1f} {units[i]}"
