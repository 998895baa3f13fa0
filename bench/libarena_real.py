"""The model's buddy beside libarena's own buddy.bpf.c on malloc-free: size 64,
1 producer (--producers 1 2 for both), 16/64/256 allocs per cycle, interleaved
in one run: alloc and free ns/op (medians over runs), arena spin lock
acquisitions per operation and, with --full (stats=full: two clock reads per
hold, so slower), the time the lock is held per acquisition; the bytes held at
their peak and at teardown.

    python bench/libarena_real.py [--tree DIR] [--runs 5] [--duration 0.2] [--full]

DIR is a libarena tree (default $ALLOCLAB_LIBARENA, else the reference copy in
../shared/reference/libarena beside the clone). What runs as "real" is the
tree's C compiled natively as user-space C against alloclab's BPF stand-in:
the algorithms side by side, not BPF's JIT'd arena accesses, may_goto or the
kernel's arena lock. Writes bench/results/libarena_real.json.
"""
import argparse
import os
import statistics

import alloclab as al
from alloclab import libarena_real

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "shared", "reference", "libarena")
APC = [16, 64, 256]


def _median(v):
    return statistics.median(float(x) for x in v)


def rows(res, model, real):
    """(producers, allocs/cycle, model|real, alloc ns, free ns, locks/op, lock
    hold ns per acquisition or nan, peak bytes held, bytes held at teardown)
    per point."""
    out = []
    for p in res.points:
        layer = real if p.params["policy"] == real else model
        d = p.data
        acq = sum(float(x) for x in d["%s.lock_acquired" % layer])
        hold = sum(float(x) for x in d.get("%s.lock_hold_ns" % layer, [float("nan")]))
        out.append((p.params.get("producers"), p.params.get("allocs_per_cycle"),
                    "real" if layer == real else "model",
                    _median(d["alloc_ns"]), _median(d["free_ns"]),
                    _median(d["%s.lock_acquired_per_op" % layer]),
                    hold / acq if acq else float("nan"), _median(d["mem_held_peak"]),
                    _median(d["%s.bytes_held" % layer])))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=libarena_real.default_tree() or REFERENCE)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--producers", type=int, nargs="+", default=[1])
    ap.add_argument("--full", action="store_true", help="stats=full: lock hold times")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "libarena_real.json"))
    a = ap.parse_args()

    real = libarena_real.load(a.tree)
    res = al.run("malloc-free", ["buddy", real], size=64, allocs_per_cycle=APC,
                 producers=a.producers, runs=a.runs, duration=a.duration,
                 stats="full" if a.full else "lite")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    res.to_json(a.out)
    print("malloc-free, 64 B: the model's buddy vs %s (%s)" % (
        real, libarena_real.info(a.tree)["measured"]))
    print("%4s %6s %-6s %9s %9s %9s %9s %10s %9s" % (
        "prod", "apc", "buddy", "alloc ns", "free ns", "locks/op", "hold ns", "peak held",
        "held end"))
    for r in rows(res, "buddy", real):
        print("%4s %6s %-6s %9.1f %9.1f %9.3f %9.1f %10.0f %9.0f" % r)
    print(res.cpu_line())
    print("written:", a.out)


if __name__ == "__main__":
    main()
