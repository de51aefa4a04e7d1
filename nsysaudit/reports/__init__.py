"""Reports: one document per analysis (:mod:`~nsysaudit.reports.analysis`) or comparison
(:mod:`~nsysaudit.reports.compare`, its sentences in :mod:`~nsysaudit.reports.statements`), built once
from analysis frames and never printed here (that is :mod:`nsysaudit.render`)."""
