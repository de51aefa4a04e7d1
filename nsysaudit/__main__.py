"""``python -m nsysaudit`` and the ``nsysaudit`` console script."""

from __future__ import annotations

import gc
import os
import signal
import sys

# polars sets its allocator (jemalloc) to dirty_decay_ms:500,muzzy_decay_ms:1000 and appends
# _RJEM_MALLOC_CONF after that, so ours wins. Freed pages are then returned within 0.2 s, instead
# of lingering lazily freed (MADV_FREE, still counted in RSS) for up to 1.5 s. A process that builds
# and drops frames in turn holds less: 785,532 KB of peak RSS at 20M CUDA API rows against
# 1,026,044 KB (benchmarks/RESULTS.md, issue 13). This must be set before polars is first imported,
# and a value the user set wins. The package's own import (``nsysaudit/__init__.py``) loads no polars.
if "polars" not in sys.modules:
    os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:200,muzzy_decay_ms:0")
    # polars' in-memory engine for the lazy queries; under an address-space limit (ulimit -v), fewer
    # arenas and threads (nsysaudit/core/limits.py).
    from nsysaudit.core.limits import fit_to_limit, prefer_in_memory_engine

    prefer_in_memory_engine()
    fit_to_limit()



def run() -> None:
    """Run the CLI. Ctrl-C while its modules are still being imported (~0.2 s: click, polars) is
    answered like Ctrl-C later: one line, exit 130, no traceback."""
    try:
        from nsysaudit.cli import main

        code = main()
    except KeyboardInterrupt:
        sys.stderr.write("nsysaudit: aborted\n")
        code = 130
    except MemoryError:  # while importing, under a limit too small for the modules themselves
        sys.stderr.write("nsysaudit: error: out of memory while starting (raise the memory limit: ulimit -v)\n")
        code = 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C while the interpreter exits is no traceback either
    # The command is done (its files closed, its output flushed): what is still alive (the modules'
    # classes and functions, polars' and the analysis's objects: ~45,000 that the collector tracks)
    # lives until the exit. Out of the collector's reach, the interpreter's last collections no longer
    # walk them: they were most of its exit, 20-40 ms of a small export's ~0.35 s (benchmarks/RESULTS.md,
    # branch startup). atexit's handlers (temporary folders among them) still run.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
