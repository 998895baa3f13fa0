"""The cache-hit fast path: malloc-free, 1 producer, size 64,
allocs_per_cycle 16 (everything stays in the 16-slot per-CPU cache), alloc and
free ns/op for libarena-spill and libarena-transfer with guard=atomic and
guard=local, and libc, in one interleaved run. Goal: guard=local at or below
libc's ns/op.

    python bench/fastpath.py [--runs 7] [--duration 0.2]

Writes bench/results/fastpath.json and prints the table.
"""
import argparse
import os

import numpy as np

import alloclab as al

HERE = os.path.dirname(os.path.abspath(__file__))

POLICIES = {
    "spill, guard=atomic": "percpu(guard=atomic) > buddy",
    "spill, guard=local": "percpu(guard=local) > buddy",
    "transfer, guard=atomic": "percpu(guard=atomic) > transfer > buddy",
    "transfer, guard=local": "percpu(guard=local) > transfer > buddy",
    "magazine, guard=local": "magazine(guard=local) > buddy",
    "libc": "libc",
    "null (harness floor)": "null",
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--timing", default="batch", choices=["batch", "per_op_sum"])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "fastpath.json"))
    a = ap.parse_args()

    res = al.run("malloc-free", list(POLICIES.values()), size=64, allocs_per_cycle=16,
                 producers=1, runs=a.runs, duration=a.duration, timing=a.timing)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    res.to_json(a.out)
    libc = res.select(policy="libc")[0]
    print("malloc-free, 1 producer, size 64, 16 allocs/cycle, %s timing, %d runs "
          "(mean ± sd, ns/op):" % (a.timing, a.runs))
    print("  %-24s %15s %15s %12s" % ("policy", "alloc", "free", "vs libc"))
    for label, spec in POLICIES.items():
        p = res.select(policy=str(al.Policy(spec)))[0]
        al_, fr = p["alloc_ns"], p["free_ns"]
        ratio = (al_.mean() + fr.mean()) / (libc["alloc_ns"].mean() + libc["free_ns"].mean())
        print("  %-24s %7.2f ± %-5.2f %7.2f ± %-5.2f %11.2fx" % (
            label, al_.mean(), al_.std(ddof=1), fr.mean(), fr.std(ddof=1), ratio))
    print(res.cpu_line())
    print("written:", a.out)


if __name__ == "__main__":
    main()
