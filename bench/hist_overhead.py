"""Per-op histogram timing against batch timing.

The same workload three ways, interleaved run by run on a fresh allocator:
  batch        one clock pair around a cycle's allocations (the default)
  per_op_sum   a clock pair around every operation, summed
  histogram    per_op_sum plus a bucket increment per operation (histogram=True)
Prints ns/op per mode (mean ± 95% CI), the overhead of histogram timing
against batch and against per_op_sum (what the bucket increment costs), the
per-op percentiles with the timer overhead beside them, and an A/B table of
histogram vs batch.

    python bench/hist_overhead.py [--runs 5] [--duration 0.2] [--policy buddy ...]

Writes bench/results/hist_overhead.json (the Result of all three modes).
"""
import argparse
import os

import alloclab as al

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = (("batch", dict(timing="batch")), ("per_op_sum", dict(timing="per_op_sum")),
         ("histogram", dict(histogram=True)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--policy", action="append",
                    help="policies (default: null, libc, buddy, libarena-spill)")
    ap.add_argument("--allocs-per-cycle", default="16,256")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "hist_overhead.json"))
    a = ap.parse_args()
    pols = a.policy or ["null", "libc", "buddy", "libarena-spill"]
    apc = [int(x) for x in a.allocs_per_cycle.split(",")]

    parts = []
    for r in range(a.runs):  # interleave the modes run by run
        for name, kw in MODES:
            res = al.run("malloc-free", pols, producers=1, allocs_per_cycle=apc, runs=1,
                         duration=a.duration, seed=r + 1, **kw)
            for p in res.points:
                p.params["mode"] = name
            parts.append(res)
    res = al.Result.concat(parts)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    res.to_json(a.out)

    print("malloc-free, 1 producer, ns/op: mean ± 95%% CI over %d runs per mode" % a.runs)
    print("%-28s %6s  %-18s %-18s %-18s %9s %9s" % (
        "policy", "apc", "batch", "per_op_sum", "histogram", "hist-bat", "hist-pos"))
    for op in ("alloc_ns", "free_ns"):
        print(op)
        for pol in pols:
            canon = str(al.Policy(pol))
            for n in apc:
                st = {m: res.stats(op, policy=canon, allocs_per_cycle=n, mode=m)[0][1]
                      for m, _ in MODES}
                cells = ["%7.2f ± %-7.2f" % (st[m].mean, st[m].ci_half) for m, _ in MODES]
                print("  %-26s %6d  %s %+8.2f %+8.2f" % (
                    pol, n, " ".join(cells), st["histogram"].mean - st["batch"].mean,
                    st["histogram"].mean - st["per_op_sum"].mean))
    hist = res.filter(mode="histogram")
    print("\nper-op percentiles (histogram mode; each includes one clock pair):")
    for pol in pols:
        canon = str(al.Policy(pol))
        for n in apc:
            pts = hist.filter(policy=canon, allocs_per_cycle=n).points
            ovh = sum(p.data["timer_overhead_ns"].mean() for p in pts) / len(pts)
            for op in ("alloc", "free"):
                h = hist.histogram(op, policy=canon, allocs_per_cycle=n)
                print("  %-26s %4d %-5s %s" % (pol, n, op, h.summary(ovh)))
    print()
    print(al.compare(res, baseline="batch", by="mode", metric=["alloc_ns", "free_ns"]))
    print("\nwritten:", a.out)


if __name__ == "__main__":
    main()
