"""Every sentence nsysaudit shows a user, keyed by the fact or reason code it words (issue 35).

The analysis returns facts and reason codes with their values; the documents keep the code and the
one statement made here from it; the outline (render/outline.py) arranges those statements, and the
terminal, Markdown and HTML back-ends only lay them out. Error messages may stay with their errors.

A new finding's words go into the section of its kind below; nowhere else writes a sentence of five or
more words for a user (tests/test_words.py).
"""

from __future__ import annotations

# --- reasons, warnings and statements of the analysis and the documents (read/, analysis/, reports/) ---


# --- the outline's sentences: answers, sections, tables' captions (render/) ---
# The answer's labels: what an entry of the answer is (render/outline.py).
HELD = "held"
HELD_AT_START = "held at its start"
REPORTED = "reported"
CENSORED = "censored"
STALL = "stall"
ALSO = "also"
MORE_CENSORED = "and {n} more censored library call(s)"
# The comparison's answer: its sections' titles (the terminal writes them in lower case).
RANKS_TITLE = "The ranks"
ARM_TITLE = "{arm} arm"
MEMORY_AT_CALL_TITLE = "Memory at the call"
NOT_ESTABLISHED_TITLE = "Not established"
STALLS_TITLE = "Host stalls"
