"""The bottom layer, shared by every other: :mod:`~nsysaudit.core.errors` (every error a user can see,
and the warnings' type), :mod:`~nsysaudit.core.ids` (globalTid and globalPid decoding),
:mod:`~nsysaudit.core.intervals` (library-call intervals), :mod:`~nsysaudit.core.codes` (CUDA return
names), :mod:`~nsysaudit.core.text` (trace text shown escaped), :mod:`~nsysaudit.core.digests`
(SHA-256), :mod:`~nsysaudit.core.paths` (basenames, undecodable names), :mod:`~nsysaudit.core.progress`,
:mod:`~nsysaudit.core.lazy` (names imported on first use), :mod:`~nsysaudit.core.files` (the one
atomic file writer) and :mod:`~nsysaudit.core.shapes` (the ``Schema`` and ``JSON`` type aliases). A
core module imports only the core modules before it in that order (``tests/test_layering.py``)."""
