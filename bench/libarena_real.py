"""The model's buddy beside libarena's own buddy.bpf.c on malloc-free, 64 B,
interleaved in one run (alloclab.reproduce.libarena_fidelity): alloc, free and
per-op ns (medians over runs), arena spin lock acquisitions per operation, the
lock's hold time per acquisition (stats=full), and the bytes held and arena
bytes committed at teardown.

    python bench/libarena_real.py [--tree DIR] [--runs 5] [--duration 0.2]
        default: 1 producer, 16/64/256 allocs/cycle, stats=lite (the per-op figure)
    python bench/libarena_real.py --fidelity
        1 and 2 producers, 64/256 allocs/cycle, stats=full (the fidelity report;
        `alloclab reproduce libarena --fidelity --tree DIR` prints the same)

DIR is a libarena tree (default $ALLOCLAB_LIBARENA, else the reference copy in
../shared/reference/libarena beside the clone). What runs as "real" is the
tree's C compiled natively as user-space C against alloclab's BPF stand-in:
the algorithms side by side, not BPF's JIT'd arena accesses, may_goto or the
kernel's arena lock. Both sides run isolated and unchecked (check=True would
add the engine's pointer checks, a mutex per operation, to the real side
only). Writes bench/results/libarena_real.json (the rows, settings and the
Result); bench/results/libarena_real_notes.md says what the numbers mean.
"""
import argparse
import os

from alloclab import libarena_real
from alloclab.reproduce import libarena_fidelity

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, "..", "..", "shared", "reference", "libarena")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tree", default=libarena_real.default_tree() or REFERENCE)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--producers", type=int, nargs="+", default=None)
    ap.add_argument("--allocs-per-cycle", type=int, nargs="+", default=None)
    ap.add_argument("--fidelity", action="store_true",
                    help="1/2 producers, 64/256 allocs/cycle, stats=full")
    ap.add_argument("--full", action="store_true", help="stats=full: lock hold times")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "libarena_real.json"))
    a = ap.parse_args()

    prods = a.producers or ([1, 2] if a.fidelity else [1])
    apc = a.allocs_per_cycle or ([64, 256] if a.fidelity else [16, 64, 256])
    f = libarena_fidelity(a.tree, producers=prods, allocs_per_cycle=apc, runs=a.runs,
                          duration=a.duration, stats="full" if a.full or a.fidelity else "lite")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    f.to_json(a.out)
    print(f)
    print("written:", a.out)


if __name__ == "__main__":
    main()
