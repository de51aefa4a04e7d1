"""Reading the evidence, never writing it: an export opened read-only, probed, scanned and loaded.

- :mod:`nsysaudit.read.inputs`: what the user named (an export or a report), hashed in the background;
- :mod:`nsysaudit.read.nsys`: the real ``nsys export`` of a report, through a cache bound to its source;
- :mod:`nsysaudit.read.source`: a whole SQLite file opened read-only and probed (tables, versions);
- :mod:`nsysaudit.read.scan`: one streaming pass over the CUDA API table;
- :mod:`nsysaudit.read.trace`: every frame the analysis needs (:class:`~nsysaudit.read.trace.Trace`);
- :mod:`nsysaudit.read.diagnostics`: what nsys itself said (the capture's bounds, its warnings);
- :mod:`nsysaudit.read.telemetry`: the application's own JSON Lines receipts.
"""
