"""Executors for timed runs: which ones run units side by side.

run() and sweep() hand grid points (or (cell, run) units) to any
concurrent.futures.Executor. Timed units must never share cores: a local
Thread/ProcessPoolExecutor with more than one worker is refused (or, with
allow_concurrent=True, warned about), and a dask cluster with more than one
worker thread on a host is warned about. Simulated cells (cpu="simulated")
are not timed on the machine: each runs on one thread in virtual time and
its numbers do not depend on what runs beside it, so with timed=False any
executor is taken as it is. Looking at an executor costs one
scheduler query for dask, nothing otherwise; nothing here runs a unit.
"""

import concurrent.futures as cf
import warnings

from .. import errors


class ConcurrentExecutorWarning(UserWarning):
    """Timed cells may run side by side on the same cores."""


def check_executor(executor, allow_concurrent, timed=True):
    """Refuse (or warn about) executors that run timed units side by side;
    ``timed=False`` (every unit simulated): any executor, no warning."""
    if not isinstance(executor, cf.Executor):
        raise errors.InvalidArgument(
            "executor must be a concurrent.futures.Executor, not %r" % (executor,))
    if not timed:
        return
    if isinstance(executor, (cf.ThreadPoolExecutor, cf.ProcessPoolExecutor)):
        n = getattr(executor, "_max_workers", 1) or 1
        if n > 1:
            msg = ("%s with max_workers=%d runs timed cells side by side on this machine's "
                   "cores, where they disturb each other's timing" % (type(executor).__name__, n))
            if not allow_concurrent:
                raise errors.InvalidArgument(
                    msg + ": use max_workers=1, or an executor that spreads cells over machines "
                    "(dask: client.get_executor()), or pass allow_concurrent=True to accept it")
            warnings.warn(msg, ConcurrentExecutorWarning, stacklevel=3)
    elif is_dask(executor):
        try:
            info = executor._client.scheduler_info()
            hosts = {}
            for w in info.get("workers", {}).values():
                h = w.get("host", "?")
                hosts[h] = hosts.get(h, 0) + int(w.get("nthreads", 1))
        except Exception:  # pragma: no cover - best effort
            hosts = {}
        crowded = {h: n for h, n in hosts.items() if n > 1}
        if crowded:
            warnings.warn(
                "dask runs %s worker threads on one host: timed cells may run side by side on "
                "the same cores; give each host one worker with one thread" % ", ".join(
                    "%d on %s" % (n, h) for h, n in crowded.items()),
                ConcurrentExecutorWarning, stacklevel=3)


def is_dask(executor):
    return type(executor).__module__.startswith("distributed") and hasattr(executor, "_client")
