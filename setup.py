"""The native scan (native/scan.c) as the extension module nsysaudit.read._native; everything else
about the package is in pyproject.toml.

It links the SQLite library that Python's own sqlite3 module links (``-lsqlite3``, the header from
the system: Debian's libsqlite3-dev), and nsysaudit checks at import that both run the same SQLite
(nsysaudit/read/native.py). The extension is optional: where it cannot be built (no C compiler, no
SQLite header) the package installs without it and runs on its pure engines, saying so in every
report (``input.native_unavailable``)."""

import os

from setuptools import Extension, setup

flags = [] if os.name == "nt" else ["-O2", "-Wall", "-Wextra"]
setup(
    ext_modules=[
        Extension(
            "nsysaudit.read._native",
            sources=["native/scan.c"],
            libraries=["sqlite3"],
            extra_compile_args=flags,
            optional=True,
        )
    ]
)
