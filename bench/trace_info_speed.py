"""How long alloclab.trace_info takes on a large synthetic trace.

A program-like trace is generated with NumPy (no C trace is built: the
analysis reads a trace only through ops(k)/seq(k)/t_ns(k)/owner(), so a
duck-typed one measures the same code): objects of log-uniform sizes
(16 B .. 64 KiB), geometric lifetimes, a share freed by another thread, a
dense global seqs as the recorder writes.
Prints the seconds of trace_info (best of --repeat) and the peak resident
memory the analysis added.

    python bench/trace_info_speed.py [--ops 10000000] [--threads 8] [--repeat 3]
"""
import argparse
import resource
import time

import numpy as np

from alloclab._tracefmt import KINDS, NOID, OP_DTYPE
from alloclab.traceinfo import trace_info

K = {k: i for i, k in enumerate(KINDS)}


class SyntheticTrace:
    """The views trace_info reads, over NumPy arrays."""

    def __init__(self, per_thread, owner, nobjects):
        self._t = per_thread
        self._owner = owner
        self.nthreads = len(per_thread)
        self.nobjects = nobjects
        self.nops = sum(len(o) for o, _, _ in per_thread)
        self.meta = {"program": "synthetic"}

    def ops(self, k):
        return self._t[k][0]

    def seq(self, k):
        return self._t[k][1]

    def t_ns(self, k):
        return self._t[k][2]

    def owner(self):
        return self._owner


def _events(nobj, rng):
    """Creation and consumption events of nobj objects in global order: the
    object of each event and whether it is the free. Object i is created at
    2i and freed at 2(i + life) + 1, life geometric (mean 64 objects)."""
    life = rng.geometric(1.0 / 64, nobj)
    key = np.concatenate([2 * np.arange(nobj), 2 * (np.arange(nobj) + life) + 1])
    order = np.argsort(key, kind="stable")
    obj = np.concatenate([np.arange(nobj), np.arange(nobj)])[order]
    return obj, order >= nobj


def build(nops, nthreads, seed=1, cross=0.05):
    """A trace of about nops ops over nthreads threads (malloc/free)."""
    rng = np.random.default_rng(seed)
    nobj = nops // 2
    obj, is_free = _events(nobj, rng)
    owner = rng.integers(0, nthreads, nobj).astype(np.uint32)
    freer = np.where(rng.random(nobj) < cross, rng.integers(0, nthreads, nobj), owner)
    thr = np.where(is_free, freer[obj], owner[obj])
    n = len(obj)
    ops = np.zeros(n, OP_DTYPE)
    sizes = np.exp2(rng.uniform(4, 16, nobj)).astype(np.uint64)
    ops["kind"] = np.where(is_free, K["free"], K["malloc"])
    ops["id"] = np.where(is_free, NOID, obj)
    ops["ref"] = np.where(is_free, obj, NOID)
    ops["size"] = np.where(is_free, 0, sizes[obj])
    seq = np.arange(1, n + 1, dtype=np.uint64)
    t = np.cumsum(rng.integers(20, 200, n)).astype(np.uint64)
    per = []
    for k in range(nthreads):
        m = thr == k
        per.append((ops[m], seq[m], t[m]))
    return SyntheticTrace(per, owner, nobj)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000_000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    tr = build(a.ops, a.threads)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    best = float("inf")
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        info = trace_info(tr)
        best = min(best, time.perf_counter() - t0)
    extra = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
    print("%d ops, %d threads, %d objects: trace_info %.2f s (best of %d), +%d MiB peak RSS"
          % (tr.nops, tr.nthreads, tr.nobjects, best, a.repeat, extra // 1024))
    print("peak live %d bytes at seq %d; %d cross-thread frees" % (
        info.live["peak_bytes"], info.live["peak_seq"], info.cross["total"]))


if __name__ == "__main__":
    main()
