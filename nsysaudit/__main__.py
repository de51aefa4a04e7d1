"""``python -m nsysaudit`` and the ``nsysaudit`` console script."""

from __future__ import annotations

import os
import sys

# polars' allocator (jemalloc, with its background purging thread) keeps freed pages for 10 s by
# default, so a process that builds and drops frames in turn holds the sum of them: 1.25 GiB of
# peak RSS at 20M CUDA API rows against ~0.85 GiB when freed pages go back to the system within
# 0.2 s (benchmarks/RESULTS.md, issue 13). Set before polars is first imported; a value the user
# set wins. The package's own import (``nsysaudit/__init__.py``) loads no polars.
if "polars" not in sys.modules:
    os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:200,muzzy_decay_ms:0")

from nsysaudit.cli import main


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
