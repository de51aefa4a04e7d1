"""Resource limits: what nsysaudit may use, and inputs sized before they are read.

Under an address-space limit (``ulimit -v``: ``RLIMIT_AS``, or ``RLIMIT_DATA``) every mapping counts,
reserved or used: glibc's per-thread malloc arenas (64 MiB of address space each), the allocators of
polars (jemalloc, its background threads) and of pyarrow, a stack per thread. Left as they are, a
run that needs 400 MB ends at a 1.5 GB limit in SIGSEGV, an abort of polars ("memory allocation of N
bytes failed"), or "cannot allocate memory for thread-local data". So where a limit is set,
:func:`fit_to_limit` (run by the CLI before polars is imported) asks for fewer of each, and the thread
pools are sized to the limit (:func:`threads`); inputs nsysaudit reads whole are sized first
(:func:`refuse_larger`), and an export whose analysis cannot fit the limit is refused before it is
read (:func:`refuse_unfit`): one line, exit 2, never a crash. Without a limit nothing changes.
"""

from __future__ import annotations

import contextlib
import os
import resource

from nsysaudit.core.errors import UnusableInput

MiB = 1 << 20
# What a run of the CLI maps before it reads anything (the interpreter, polars, numpy, SQLite, the
# threads), with the allocators asked for less (:func:`fit_to_limit`): measured 240 MiB of address
# space for a small export's analyze --json, 350 to 400 MiB for compare and the pictures (matplotlib,
# numpy: below that numpy's import can end the process, exit 1); and what the pure engines' reader of
# large tables (ADBC, pyarrow) adds.
BASE_BYTES = 400 * MiB
LARGE_BYTES = 300 * MiB
LARGE_EXPORT = 8 * MiB  # an export past this may hold enough rows for the ADBC reader (50,000)
# Address space a scan thread of the pure engines needs at most (a batch of rows and its frames).
THREAD_BYTES = 256 * MiB
# How much address space an analysis needs per byte of the export it reads, past the above: measured
# 1.6 (pure engines) and 1.8 (native) between generated exports of 1M and 10M CUDA API rows (peak
# 577 to 1,196 MB and 334 to 1,028 MB of address space; benchmarks/RESULTS.md, issue 34).
PER_EXPORT_BYTE = 1.8
# The same for a telemetry file: its lines are held as columns, about 3 bytes per byte of JSON.
TELEMETRY_BYTES_PER_BYTE = 4.0
M_ARENA_MAX = -8  # mallopt(3)


def memory_limit() -> int | None:
    """The address-space limit this process runs under (the smaller of ``RLIMIT_AS`` and
    ``RLIMIT_DATA``, soft), in bytes; None without one."""
    found = []
    for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
        with contextlib.suppress(OSError, ValueError):
            soft, _ = resource.getrlimit(which)
            if soft != resource.RLIM_INFINITY and soft > 0:
                found.append(int(soft))
    return min(found) if found else None


def prefer_in_memory_engine() -> None:
    """polars' in-memory engine for the lazy queries, where the user chose no engine
    (``POLARS_ENGINE_AFFINITY``). polars 2 otherwise runs them on its streaming engine, at 2-3x the
    in-memory engine's cost on the analysis's few-row queries (0.6 against 2.3 ms for one interval
    merge of 20 rows), and under an address-space limit it reserves about 2.5 GB for a lazy sort of
    400k rows (touching a few MB of it). Measured (benchmarks/RESULTS.md, "the in-memory engine"):
    the serialized capture's analysis 251-263 -> 206-207 ms in process, 20M CUDA API rows 5.85-6.32
    -> 5.72-5.75 s, the host stalls' 20M export 11.5-12.2 -> 10.7-10.9 s with peak RSS 1.06-1.08 ->
    1.01-1.03 GB; the same bytes out."""
    os.environ.setdefault("POLARS_ENGINE_AFFINITY", "in-memory")


def fit_to_limit() -> None:
    """Under a limit, before polars or pyarrow is imported: one malloc arena (also for the worker
    processes this one starts), pyarrow's system allocator, jemalloc without background threads
    and with one arena, and polars' threads sized to the limit. A value the user set is kept."""
    limit = memory_limit()
    if limit is None:
        return
    os.environ.setdefault("MALLOC_ARENA_MAX", "1")
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).mallopt(M_ARENA_MAX, 1)
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    # numpy's OpenBLAS maps a buffer per thread as it is imported ("Memory allocation still failed
    # after 10 retries, giving up": exit 1); nsysaudit computes nothing with BLAS.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    conf = os.environ.get("_RJEM_MALLOC_CONF", "")
    if "background_thread" not in conf:
        os.environ["_RJEM_MALLOC_CONF"] = ",".join(filter(None, [conf, "background_thread:false", "narenas:1"]))
    os.environ.setdefault("POLARS_MAX_THREADS", str(threads(os.cpu_count() or 1, limit)))


def return_freed_memory() -> None:
    """Give back to the system the memory glibc's malloc holds freed (``malloc_trim(0)``; nothing
    where the C library is another). The native scan's threads allocate their results in arenas of
    their own, and what they free there stays in the process's RSS: 178 MiB after the scan of 20M
    CUDA API rows, for 134 MiB of frames (benchmarks/RESULTS.md, issue 33 round 3). Microseconds."""
    try:
        import ctypes

        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError, TypeError):  # no such C library, no such function, no CDLL(None)
        return
    trim(0)


def threads(wanted: int, limit: int | None = None) -> int:
    """How many threads of :data:`THREAD_BYTES` a pool may start: ``wanted``, fewer under a limit
    (at least one)."""
    limit = memory_limit() if limit is None else limit
    if limit is None:
        return max(1, wanted)
    return max(1, min(wanted, (limit - BASE_BYTES) // THREAD_BYTES))


def refuse_larger(path: object, size: int, most: int, what: str) -> None:
    """Refuse an input read whole whose ``size`` is past ``most`` bytes (one line, exit 2)."""
    if size > most:
        raise UnusableInput(path, f"{size:,} bytes, larger than any {what} ({most // MiB:,} MiB at most): not read")


RECORD_BYTES = 64 << 20  # a record nsysaudit writes (metadata.json, batch.json, a cache record) is far smaller


def read_at_most(path: str | os.PathLike[str], most: int = RECORD_BYTES) -> bytes:
    """The bytes of a file nsysaudit reads whole (a record of its own), or ValueError when it holds
    more than ``most``: read no further, never held whole (a MemoryError is no answer)."""
    with open(path, "rb") as handle:
        data = handle.read(most + 1)
    if len(data) > most:
        raise ValueError(f"larger than {most // MiB:,} MiB, more than any such record")
    return data


def refuse_unfit(path: object, size: int, *, per_byte: float = PER_EXPORT_BYTE, what: str = "this export") -> None:
    """Refuse an input whose analysis needs more address space than the limit allows, before it is
    read (an estimate from its ``size`` that errs high: a crash past the limit cannot be one line)."""
    limit = memory_limit()
    if limit is None:
        return
    needed = BASE_BYTES + (LARGE_BYTES if size > LARGE_EXPORT else 0) + int(per_byte * size)
    if needed > limit:
        raise UnusableInput(
            path,
            f"analyzing {what} ({size:,} bytes) needs about {needed // MiB:,} MiB of address space, more than the "
            f"limit this process runs under ({limit // MiB:,} MiB: ulimit -v); raise it, or analyze it where more "
            "memory may be used",
        )
