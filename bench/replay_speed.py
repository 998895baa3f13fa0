"""Replay speed: ops/s per producer of the replay workload on a large
synthetic trace, through ``null`` (the harness floor: the goal is >= 20
million ops/s per producer, so the harness is never the bottleneck) and a
couple of presets.

The trace: per thread, bursts of 1..32 allocations (sizes 16 B to 1 KiB,
a malloc-heavy mix with some calloc and realloc) followed by freeing them in
random order, so runs of one kind alternate as in real programs. Threads
are independent (no cross-thread frees) unless --cross, where every thread
frees half of the previous thread's objects (a ring of waits).

ops/s per producer = trace ops / threads / elapsed (the measured phase's
wall time: one pass). Run on an otherwise idle machine for figures.

    python bench/replay_speed.py [--ops N] [--threads 1,2] [--cross]
                                 [--policy null --policy buddy ...] [--runs 5]
                                 [--trace FILE ...]  (recorded traces instead)
"""

import argparse
import random
import sys

import alloclab as al
from alloclab._ffi import ffi, lib
from alloclab.trace import Trace


def _thread_program(rnd, nops):
    """One thread's ops as (kind, size, aux, local id or None, local ref or None)."""
    out, live, nid = [], [], 0
    while len(out) < nops:
        burst = rnd.randint(1, 32)
        for _ in range(burst):
            size = rnd.choice((16, 24, 32, 48, 64, 96, 128, 256, 512, 1024))
            r = rnd.random()
            if r < 0.05 and live:
                old = live.pop()
                out.append(("realloc", size * 2, old[1], nid, old[0]))
                live.append((nid, size * 2))
            else:
                out.append(("calloc" if r < 0.1 else "malloc", size, 1, nid, None))
                live.append((nid, size))
            nid += 1
        rnd.shuffle(live)
        while len(live) > rnd.randint(0, 8):
            out.append(("free", 0, 0, None, live.pop()[0]))
    out = out[:nops]
    gone = {o[4] for o in out if o[4] is not None}
    return out, [(o[3], o[1]) for o in out if o[3] is not None and o[3] not in gone]


def build(threads, ops_per_thread, cross, seed=1):
    """A sealed Trace: per-thread programs interleaved round-robin in seq
    order; with cross, objects left live by thread k are freed by k+1."""
    from alloclab._tracefmt import KINDS, NOID
    rnd = random.Random(seed)
    progs = [_thread_program(rnd, ops_per_thread) for _ in range(threads)]
    t = lib.al_trace_new(threads)
    tr = Trace(t)
    base, nid = [], 0
    for ops, _ in progs:  # global ids: thread k's local ids shifted
        base.append(nid)
        nid += sum(1 for o in ops if o[3] is not None)
    op = ffi.new("struct al_trace_op *")
    seq = 0
    for i in range(ops_per_thread + 1):
        for k, (ops, live) in enumerate(progs):
            if i < len(ops):
                kind, size, aux, lid, lref = ops[i]
                items = [(kind, size, aux, base[k] + lid if lid is not None else NOID,
                          base[k] + lref if lref is not None else NOID, k)]
            elif cross and i == ops_per_thread:  # the ring: free what k-1 left
                prev = progs[k - 1][1]
                items = [("free", 0, 0, NOID, base[k - 1] + lid, k) for lid, _ in prev]
            else:
                items = []
            for kind, size, aux, oid, ref, th in items:
                seq += 1
                op.kind, op.size, op.aux, op.id, op.ref = KINDS.index(kind), size, aux, oid, ref
                if lib.al_trace_push(t, th, op, seq, seq):
                    raise MemoryError("al_trace_push")
    tr._seal()
    return tr


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=2000000, help="ops per thread (default 2M)")
    ap.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    ap.add_argument("--cross", action="store_true", help="a ring of cross-thread frees")
    ap.add_argument("--policy", action="append",
                    help="repeatable (default: null, buddy, libarena-transfer)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--trace", action="append", metavar="FILE",
                    help="replay these recorded traces instead of synthetic ones")
    args = ap.parse_args(argv)
    policies = args.policy or ["null", "buddy", "libarena-transfer"]
    print("%-20s %7s %12s %10s %14s" % ("policy", "threads", "ops", "runs", "Mops/s/prod"))
    if args.trace:
        from alloclab.trace import load
        traces = [load(path) for path in args.trace]
    else:
        traces = [build(int(x), args.ops, args.cross) for x in args.threads.split(",")]
    for tr in traces:
        n = tr.nthreads
        res = al.run("replay", policies, trace=tr, runs=args.runs, mem_sample=0)
        for p in res.points:
            el = p.data["elapsed_ns"]
            mops = tr.nops / n / el * 1e3
            print("%-20s %7d %12d %10d %8.2f +-%.2f" % (p.params["policy"], n, tr.nops,
                                                     len(el), mops.mean(), mops.std()))
        tr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
