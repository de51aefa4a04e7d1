"""Worker functions for fault tests of the batch engines: importable by spawned worker processes
(the tests folder is on their sys.path), so a real worker can really die."""

from __future__ import annotations

import os
import signal
from typing import Any

from nsysaudit.batch.run import AuditOptions, audit_one


def audit_one_or_die(path: str, options: AuditOptions, done: frozenset[str] = frozenset()) -> dict[str, Any]:
    """:func:`nsysaudit.batch.run.audit_one`, except that the worker given ``*-dies.sqlite`` is
    SIGKILLed, as the kernel's OOM killer would."""
    if path.endswith("-dies.sqlite"):
        os.kill(os.getpid(), signal.SIGKILL)
    return audit_one(path, options, done)
