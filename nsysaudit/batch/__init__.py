"""Workflows over many inputs: :mod:`~nsysaudit.batch.run` (``nsysaudit batch``, ``audit_many``:
discovery, the run, one input's rows) on the engines of :mod:`~nsysaudit.batch.workers` (local
processes or dask), writing through :mod:`~nsysaudit.batch.output` (the tables, resumable parts),
with the device and rank columns of :mod:`~nsysaudit.batch.ranks`; :mod:`~nsysaudit.batch.check`
(``nsysaudit check``: expectations, JUnit) and the deprecated :mod:`~nsysaudit.batch.audit`."""
