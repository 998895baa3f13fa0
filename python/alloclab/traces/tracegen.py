"""Synthetic traces shaped like a real program's, for tests and benchmarks.

``program_like(nops, threads, seed)`` builds a sealed Trace with what a
recorded program shows: a skewed size mix (most requests small and of a few
sizes, a lognormal tail, rare large blocks), mostly short lifetimes (a free
takes a recent object more often than an old one), realloc chains that grow
a buffer, the odd calloc, aligned allocation, usable-size query, free(NULL)
and free of an object allocated before recording, and, with several
threads, objects handed to another thread to free. Times are a lognormal
gap between calls (median ~100 ns) with rare long pauses.

Algorithm: a discrete-event loop over the threads' next-call times (a heap),
so the global sequence order is the time order and ids are dense in it.
Each thread keeps its live objects in a list; handed-off ids wait in the
receiving thread's inbox. Deterministic for a seed. Cost: O(nops log
threads) in Python plus Trace.from_ops (a few microseconds an op).
"""

import heapq
import random

from .trace import Trace

_SMALL = (16, 24, 32, 48, 64, 80, 96, 128)
_SMALL_W = (30, 22, 18, 10, 8, 4, 4, 4)


def _size(rng):
    r = rng.random()
    if r < 0.7:
        return rng.choices(_SMALL, _SMALL_W)[0]
    if r < 0.97:
        return max(1, int(rng.lognormvariate(5.5, 1.2)))
    return rng.randint(1 << 14, 1 << 20)


def _gap(rng):
    if rng.random() < 0.005:
        return int(rng.uniform(1e4, 5e6))
    return max(1, int(rng.lognormvariate(4.6, 0.9)))


class _Gen:
    """The generator's state: ids, per-thread live objects and inboxes."""

    def __init__(self, nthreads, seed):
        self.rng = random.Random(seed)
        self.next_id = 0
        self.live = [[] for _ in range(nthreads)]
        self.inbox = [[] for _ in range(nthreads)]
        self.sizes = {}
        self.ops = [[] for _ in range(nthreads)]

    def new(self, k, size):
        i = self.next_id
        self.next_id += 1
        self.sizes[i] = size
        self.live[k].append(i)
        return i

    def take(self, k):
        """A live object of thread k, recent ones likelier; None if none."""
        live = self.live[k]
        if not live:
            return None
        j = len(live) - 1 - min(int(self.rng.expovariate(0.15)), len(live) - 1)
        live[j], live[-1] = live[-1], live[j]
        return live.pop()

    def step(self, k, nthreads):
        """Thread k's next op, as a from_ops dict; nthreads: those started."""
        rng, r = self.rng, self.rng.random()
        if self.inbox[k] and r < 0.3:
            return {"kind": "free", "ref": self.inbox[k].pop(0)}
        if r < 0.50 or not self.live[k]:
            op = self._alloc(k)
            if nthreads > 1 and rng.random() < 0.1:
                to = rng.randrange(nthreads - 1)
                self.inbox[to + (to >= k)].append(self.live[k].pop())
            return op
        if r < 0.53:
            return self._realloc(k)
        if r < 0.535:
            ref = self.live[k][-1]
            return {"kind": "usable_size", "ref": ref, "size": self.sizes[ref] + 8}
        if r < 0.54:
            return {"kind": "free", "ref": None, "flags": 1 if rng.random() < 0.5 else 8}
        return {"kind": "free", "ref": self.take(k)}

    def _alloc(self, k):
        rng, size = self.rng, _size(self.rng)
        r = rng.random()
        if r < 0.05:
            n = rng.choice((1, 2, 4, 8, 16, 100))
            return {"kind": "calloc", "size": size * n, "aux": n,
                    "id": self.new(k, size * n)}
        if r < 0.06:
            return {"kind": "posix_memalign", "size": size, "aux": 64, "id": self.new(k, size)}
        return {"kind": "malloc", "size": size, "id": self.new(k, size)}

    def _realloc(self, k):
        ref = self.take(k)
        old = self.sizes.pop(ref)
        size = old * 2 if self.rng.random() < 0.7 else old + self.rng.randint(1, 64)
        moved = self.rng.random() < 0.4
        return {"kind": "realloc", "size": size, "aux": old, "ref": ref,
                "id": self.new(k, size), "flags": 2 if moved else 0}


def program_like(nops, threads=1, seed=0, meta=None):
    """A sealed Trace of ``nops`` ops over ``threads`` threads (thread 0
    starts the others, one every 50 ops) shaped like a recorded program's."""
    g = _Gen(threads, seed)
    last = [0] * threads
    heap = [(0, 0)]
    started = 1
    for seq in range(1, nops + 1):
        now, k = heapq.heappop(heap)
        if not g.ops[k]:
            op = {"kind": "thread_start", "aux": 0 if k else None}
        else:
            op = g.step(k, started)
        if k == 0 and started < threads and seq % 50 == 0:
            heapq.heappush(heap, (now + _gap(g.rng), started))
            started += 1
        op.update(seq=seq, t_ns=now, dt=min(now - last[k], 0xFFFFFFFF))
        g.ops[k].append(op)
        last[k] = now
        heapq.heappush(heap, (now + _gap(g.rng), k))
    return Trace.from_ops([ops for ops in g.ops], meta=meta)
