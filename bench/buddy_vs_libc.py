"""buddy and libc on malloc-free: size 64, allocs_per_cycle
1/16/64/256, producers 1 and 2, alloc and free ns/op, and the buddy's lock
acquisitions per operation, all in one interleaved run.

    python bench/buddy_vs_libc.py [--runs 5] [--duration 0.2]

Writes bench/results/buddy_vs_libc.json and prints the tables.
"""
import argparse
import os

import alloclab as al

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "buddy_vs_libc.json"))
    a = ap.parse_args()

    res = al.run("malloc-free", ["buddy", "libc"], size=64,
                 allocs_per_cycle=[1, 16, 64, 256], producers=[1, 2], runs=a.runs,
                 duration=a.duration)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    res.to_json(a.out)
    for metric in ("alloc_ns", "free_ns"):
        print(res.table(metric))
        print()
    print(res.table("buddy.lock_acquired_per_op"))
    print()
    print(res.cpu_line())
    print("written:", a.out)


if __name__ == "__main__":
    main()
