"""``python -m nsysaudit`` and the ``nsysaudit`` console script."""

from __future__ import annotations

import sys

from nsysaudit.cli import main


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
