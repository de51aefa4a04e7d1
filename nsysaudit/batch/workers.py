"""The two engines a batch runs its work on, and what their worker processes need.

Each engine calls ``task(path, **shared)`` once per path, in worker processes, and yields what each
call returns as it finishes (not in the order given). ``task`` must be importable by a worker (a
module-level function, or a :func:`functools.partial` of one), and so must what it returns.

- :func:`run_local`: ``jobs`` worker processes on this machine, spawned (``jobs=1``, or one path,
  runs in this process);
- :func:`run_dask`: the same on ``dask.distributed`` (a ``LocalCluster`` of ``jobs`` processes, or
  the scheduler at ``scheduler``); ``shared`` is sent once to every worker, not with every task.

A worker that dies (killed, out of memory) stops the engine with :class:`EngineUnavailable`
(:data:`WORKER_DIED`); so does an engine that cannot start.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Literal, TypeVar

from nsysaudit.core.errors import EngineUnavailable, Terminated, signal_raises

Engine = Literal["local", "dask"]
ENGINES: tuple[Engine, ...] = ("local", "dask")
WORKER_DIED = (
    "a worker process died (killed, or out of memory) while analyzing an input; the inputs finished "
    "are kept in the output's parts: run the batch again to resume"
)
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that made it ends

R = TypeVar("R")  # what the task returns (a batch: its AuditOutcome), yielded as is


def default_jobs() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def worker_env(jobs: int) -> dict[str, str]:
    """Environment for worker processes: polars threads shared out among the workers (every
    worker's polars would otherwise start one thread per core); the caller's own
    POLARS_MAX_THREADS is kept."""
    return {} if "POLARS_MAX_THREADS" in os.environ else {"POLARS_MAX_THREADS": str(max(1, default_jobs() // jobs))}


@contextlib.contextmanager
def _worker_environment(jobs: int) -> Iterator[None]:
    """:func:`worker_env` set in ``os.environ`` only while local workers start (they inherit it)."""
    env = worker_env(jobs)
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _worker_start(parent: int) -> None:
    """Each local worker's first step: on Linux, ask for SIGTERM when the driver ends (even by
    SIGKILL), so that no worker outlives it holding its stdout; a driver already gone ends it now."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


@contextlib.contextmanager
def _main_not_imported() -> Iterator[None]:
    """While local workers start: ``__main__`` hides where it came from, so that the spawned workers
    do not import the caller's script again (they run nsysaudit's own functions only). A script that
    calls :func:`nsysaudit.audit_many` without an ``if __name__ == "__main__":`` guard, or a program
    read from stdin, would otherwise start its own batch in every worker, and those die."""
    main = sys.modules.get("__main__")
    names = ("__file__", "__spec__")
    saved: dict[str, object] = {k: main.__dict__[k] for k in names if main is not None and k in main.__dict__}
    if main is not None:
        main.__dict__.pop("__file__", None)
        main.__dict__["__spec__"] = None
    try:
        yield
    finally:
        if main is not None:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(saved)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate the pool's worker processes now (their current inputs are abandoned)."""
    stop = getattr(pool, "terminate_workers", None)  # Python 3.14
    if stop is not None:
        stop()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.terminate()


def run_local(
    task: Callable[..., R], paths: Sequence[str], jobs: int, shared: Mapping[str, object] | None = None
) -> Iterator[R]:
    """``task(path, **shared)`` for every path on ``jobs`` local worker processes (in this process,
    in order, for ``jobs=1`` or one path)."""
    kwargs = dict(shared or {})
    if jobs == 1 or len(paths) <= 1:
        for path in paths:
            yield task(path, **kwargs)
        return
    workers = min(jobs, len(paths))
    # SIGTERM raises Terminated while the workers run (instead of ending the driver at once, leaving
    # its workers and the resource tracker alive, holding stdout): the workers are stopped on the way out.
    with _worker_environment(workers), signal_raises(signal.SIGTERM, Terminated), _main_not_imported():
        # spawn, not fork: polars' thread pool is not fork-safe.
        pool = ProcessPoolExecutor(
            workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_start,
            initargs=(os.getpid(),),
        )
        stopping = True  # until every input is done: an exception (Terminated too) stops the workers
        try:
            pending: set[Future[R]] = set()
            queue = iter(paths)
            for path in queue:  # keep a few tasks per worker queued, not all: the driver stays small
                pending.add(pool.submit(task, path, **kwargs))
                if len(pending) >= 2 * workers:
                    break
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    try:
                        outcome = future.result()
                    except BrokenProcessPool:
                        raise EngineUnavailable(WORKER_DIED) from None
                    yield outcome
                    nxt = next(queue, None)
                    if nxt is not None:
                        pending.add(pool.submit(task, nxt, **kwargs))
            stopping = False
        finally:
            if stopping:
                _stop_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)


class _QuietClose:
    """distributed's own log lines silenced while a client and its cluster close after an
    interruption (SIGTERM, an error, the caller stopping): a client closed with tasks pending makes
    the scheduler log "Couldn't gather keys" at ERROR, a second line beside the one the CLI says.
    Entered last in the stack that closes them (so left first, before they close); :meth:`restore`,
    called back first in that stack (so last), gives the loggers their levels back."""

    def __init__(self) -> None:
        self._saved: list[tuple[logging.Logger, int]] = []

    def __enter__(self) -> _QuietClose:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            return
        names = [n for n in list(logging.root.manager.loggerDict) if n.split(".")[0] == "distributed"]
        for logger in map(logging.getLogger, dict.fromkeys(["distributed", *names])):
            self._saved.append((logger, logger.level))
            logger.setLevel(logging.CRITICAL + 1)

    def restore(self) -> None:
        while self._saved:
            logger, level = self._saved.pop()
            logger.setLevel(level)


def run_dask(
    task: Callable[..., R],
    paths: Sequence[str],
    jobs: int,
    scheduler: str | None,
    *,
    timeout: str,
    shared: Mapping[str, object] | None = None,
) -> Iterator[R]:
    """``task(path, **shared)`` for every path on dask: the scheduler at ``scheduler`` (reached
    within ``timeout``, dask's form: ``"10s"``), else a LocalCluster of ``jobs`` processes."""
    try:  # an optional extra, imported only here: a module whose names the type checker does not know
        distributed = importlib.import_module("distributed")
    except ImportError:
        raise EngineUnavailable(
            "the dask engine needs dask.distributed: pip install 'nsysaudit[fleet]'"
        ) from None
    # SIGTERM raises Terminated while dask runs: the client and the cluster are closed on the way
    # out (its workers stopped quietly), and the CLI says so in one line; ended outright, the driver
    # left its cluster's processes to print distributed's tracebacks and leaked semaphores.
    with signal_raises(signal.SIGTERM, Terminated), contextlib.ExitStack() as stack:
        quiet = _QuietClose()
        stack.callback(quiet.restore)
        if scheduler is not None:
            try:
                client = stack.enter_context(distributed.Client(scheduler, timeout=timeout))
            except (OSError, TimeoutError, ValueError) as exc:
                raise EngineUnavailable(f"dask scheduler {scheduler}: cannot connect ({exc})") from None
        else:
            # Its scheduler's HTTP server takes another port where 8787 is taken, and warns about it on
            # stderr ("Port 8787 is already in use"): not the batch's business, and no second line.
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message=r"Port \d+ is already in use", category=UserWarning)
            cluster = stack.enter_context(
                distributed.LocalCluster(
                    n_workers=jobs,
                    threads_per_worker=1,
                    processes=True,
                    host="127.0.0.1",
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                    env=worker_env(jobs),  # the nannies set it before their worker starts
                )
            )
            client = stack.enter_context(distributed.Client(cluster))
        stack.enter_context(quiet)
        # one copy of each shared value per worker, not one per task (scatter splits a bare collection)
        kwargs = {k: client.scatter([v], broadcast=True)[0] for k, v in (shared or {}).items()}
        futures = client.map(task, list(paths), **kwargs, pure=False)
        for future in distributed.as_completed(futures):
            try:
                outcome = future.result()
            except distributed.KilledWorker:
                raise EngineUnavailable(WORKER_DIED) from None
            yield outcome
            future.release()
