"""Which CUDA API calls can block the host until work on the device completes, by their names.

The explicit synchronizations always block (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
``cudaEventSynchronize``, ``cudaThreadSynchronize``, ``cuCtxSynchronize``, ``cuStreamSynchronize``,
``cuEventSynchronize``, with nsys's version suffixes and the ``_ptsz`` forms). The implicit ones
block only in some cases, which the device-side rows of the same correlation id tell
(:mod:`nsysaudit.read.gpu_work` reads them; CUDA's "API synchronization behavior" is the rule):

- ``sync_copy``: a synchronous copy (``cudaMemcpy*``, ``cuMemcpy*`` without ``Async``), unless every
  copy row of it is device to device (such a copy does not synchronize with the host);
- ``async_copy``: an asynchronous copy (``cudaMemcpy*Async``, ``cuMemcpy*Async``) only when a copy
  row of it reads or writes pageable host memory (the driver stages it, synchronously);
- ``sync_memset``: a synchronous memset (``cudaMemset*``, ``cuMemsetD*`` without ``Async``) only
  when its target is pinned or managed host memory (as ``nsys analyze -r cuda_memset_sync`` says);
- ``free``: ``cudaFree`` / ``cuMemFree`` of device memory (they synchronize the device; the
  ``Async``, host and array forms do not, or are not device memory).

>>> blocking_kind("cudaStreamSynchronize_v3020"), blocking_kind("cuMemcpyDtoHAsync_v2")
('explicit', 'async_copy')
>>> blocking_kind("cudaMemcpy_v3020"), blocking_kind("cudaFreeAsync_v11020"), blocking_kind("cudaStreamWaitEvent_v3020")
('sync_copy', None, None)
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

from nsysaudit.core.codes import display_name

BlockingKind = Literal["explicit", "sync_copy", "async_copy", "sync_memset", "free"]
BLOCKING_KINDS: tuple[BlockingKind, ...] = ("explicit", "sync_copy", "async_copy", "sync_memset", "free")

_EXPLICIT = re.compile(r"^cu(da)?(Stream|Device|Event|Ctx|Thread)Synchronize(_v\d+)?(_ptsz)?$")
_COPY = re.compile(r"^cu(da)?Memcpy")
_MEMSET = re.compile(r"^(cudaMemset|cuMemsetD)")
_FREE = re.compile(r"^(cudaFree|cuMemFree)(_v\d+)?$")

# The SQL LIKE patterns that find every such name in StringIds (a superset; blocking_kind decides).
NAME_PATTERNS = ("%Synchronize%", "%Memcpy%", "%Memset%", "%Free%")


@lru_cache(maxsize=4096)
def blocking_kind(api: str | None) -> BlockingKind | None:
    """Whether ``api`` (raw or display name) can block the host, and how (see the module docstring)."""
    if api is None:
        return None
    name = display_name(api)
    if _EXPLICIT.match(name):
        return "explicit"
    if _FREE.match(name):
        return "free"
    if _COPY.match(name):
        return "async_copy" if "Async" in name else "sync_copy"
    if _MEMSET.match(name) and "Async" not in name:
        return "sync_memset"
    return None
