"""``python -m nsysaudit`` and the ``nsysaudit`` console script."""

from __future__ import annotations

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
    # Under an address-space limit (ulimit -v), fewer arenas and threads (nsysaudit/core/limits.py).
    from nsysaudit.core.limits import fit_to_limit

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
    sys.exit(code)


if __name__ == "__main__":
    run()
