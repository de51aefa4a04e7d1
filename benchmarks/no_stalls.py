#!/usr/bin/env python3
"""``nsysaudit analyze FILE --json`` with the host-stall analysis switched off: the benchmark's
reference for what that analysis adds (benchmarks/stalls.py). Not a user option: the answer it
prints lacks the stalls, so it exists only here, as a patch of this process.

    python benchmarks/no_stalls.py FILE [analyze's options]

Switched off is everything the stall analysis brings: the blocking calls' names the scan marks and
the pageable copies read before it (``gpu_work.prepare``), the pass over the GPU tables after it,
and the damage check of the four GPU activity tables only the stalls read (docs/stalls.md): they are
evidence tables for the stalls alone. What stays is every other step of ``analyze`` on the same file (its
SHA-256 included: the file is what it is).
"""

from __future__ import annotations

import sys


def switch_off() -> None:
    """Patch this process's nsysaudit so that ``analyze`` runs without the stall analysis (see above)."""
    from nsysaudit.read import damage, trace

    stall_only = {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                  "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"}
    damage.EVIDENCE_TABLES = tuple(t for t in damage.EVIDENCE_TABLES if t not in stall_only)
    trace.prepare_gpu_work = lambda *args, **kwargs: None  # no Prepared: no marking, no pass


def main(argv: list[str]) -> int:
    from nsysaudit.cli import main as cli

    switch_off()
    return cli(["analyze", *argv, "--json"])

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
