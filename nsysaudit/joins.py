"""``nsysaudit.joins``: the exact joins of CUDA API calls to the library calls around them, kept
at this name for the design card. They live in :mod:`nsysaudit.analysis.joins`."""

from nsysaudit.analysis.joins import *  # noqa: F403
from nsysaudit.analysis.joins import __all__ as __all__
