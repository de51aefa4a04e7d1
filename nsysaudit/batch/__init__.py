"""Workflows over many inputs: :mod:`~nsysaudit.batch.run` (``nsysaudit batch``, ``audit_many``:
discovery, worker engines, resumable parts), :mod:`~nsysaudit.batch.check` (``nsysaudit check``:
expectations, JUnit) and the deprecated :mod:`~nsysaudit.batch.audit`."""
