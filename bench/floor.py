"""The harness floor: timer overhead per clock pair and the
ns/op of the `null` policy on malloc-free at allocs_per_cycle 1, 16, 64, 256.

Target: <= 1 ns/op at allocs_per_cycle >= 64 (batch timing).

    python bench/floor.py [--runs 5] [--duration 0.2]

Writes bench/results/floor.json (the whole Result) and prints the tables.
"""
import argparse
import os

import numpy as np

import alloclab as al

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "floor.json"))
    a = ap.parse_args()

    res = al.run("malloc-free", "null", allocs_per_cycle=[1, 16, 64, 256],
                 timing=["batch", "per_op_sum"], producers=1, runs=a.runs,
                 duration=a.duration)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    res.to_json(a.out)
    over = np.concatenate([p["timer_overhead_ns"] for p in res.points])
    print("timer overhead per clock pair: %.2f ns (clock: %s)"
          % (over.mean(), res.metadata.get("clock")))
    for timing in ("batch", "per_op_sum"):
        sub = res.select(timing=timing)  # points
        print("\nnull policy, %s timing, ns/op (mean ± sd over %d runs):" % (timing, a.runs))
        print("  allocs/cycle    alloc           free")
        for p in sub:
            print("  %12d  %6.2f ± %-5.2f  %6.2f ± %-5.2f" % (
                p.params["allocs_per_cycle"], p["alloc_ns"].mean(), p["alloc_ns"].std(ddof=1),
                p["free_ns"].mean(), p["free_ns"].std(ddof=1)))
    print("\nwritten:", a.out)


if __name__ == "__main__":
    main()
