"""Kernel-style presets against real allocators: malloc-free
and malloc-xfree at producers 1 and 2, allocs/cycle 1/16/64/256, sizes 64 and
512, for every buddy-backed preset and every peer (glibc, jemalloc,
gperftools-tcmalloc, mimalloc: each run in its own LD_PRELOAD child), then
xmalloc and larson; alloc+free ns/op, and the ratio to mimalloc.

    python bench/peers.py [--runs 3] [--duration 0.05] [--quick]

Writes bench/results/peers-<workload>.json and prints the tables.
"""
import argparse
import os

import numpy as np

import alloclab as al

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = ["libarena-spill", "libarena-transfer", "libarena-magazine", "buddy"]
PEERS = ["glibc", "jemalloc", "gperftools-tcmalloc", "mimalloc"]


def mean(res, metric, **where):
    pts = res.select(**where)
    return float(np.nanmean(np.concatenate([p[metric] for p in pts]))) if pts else float("nan")


def table(res, title, metric, rows, cols, row_key, col_key, fixed):
    names = KERNEL + PEERS
    print("\n%s (%s, ratio to mimalloc in brackets)" % (title, metric))
    head = "  %-22s" % (row_key + "/" + col_key)
    for r in rows:
        for c in cols:
            head += "%22s" % ("%s/%s" % (r, c))
    print(head)
    for name in names:
        spec = str(al.Policy(al.presets[name]))
        line = "  %-22s" % name
        for r in rows:
            for c in cols:
                where = dict(fixed, policy=spec, **{row_key: r, col_key: c})
                v = mean(res, metric, **where)
                ref = mean(res, metric, **dict(where, policy=str(al.Policy("mimalloc"))))
                line += "%22s" % ("%.1f [%.2f]" % (v, v / ref) if ref == ref else "%.1f" % v)
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=0.05)
    ap.add_argument("--quick", action="store_true", help="allocs/cycle 16,256 and size 64 only")
    a = ap.parse_args()
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    policies = KERNEL + PEERS
    apcs = [16, 256] if a.quick else [1, 16, 64, 256]
    sizes = [64] if a.quick else [64, 512]
    for wl in ("malloc-free", "malloc-xfree"):
        res = al.run(wl, policies, producers=[1, 2], allocs_per_cycle=apcs, size=sizes,
                     runs=a.runs, duration=a.duration, progress=True)
        res.to_json(os.path.join(HERE, "results", "peers-%s.json" % wl))
        for size in sizes:
            for metric in ("alloc_ns", "free_ns"):
                table(res, "%s, size %d" % (wl, size), metric, apcs, [1, 2],
                      "allocs_per_cycle", "producers", {"size": size})
    for wl, params in (("xmalloc", dict(producers=[2, 4])),
                       ("larson", dict(producers=[1, 2], chunks=1000))):
        res = al.run(wl, policies, runs=a.runs, duration=a.duration * 4, progress=True,
                     **params)
        res.to_json(os.path.join(HERE, "results", "peers-%s.json" % wl))
        table(res, wl, "throughput", params["producers"], [res.points[0].params.get(
            "size", res.points[0].params.get("min_size"))], "producers",
            "size" if wl == "xmalloc" else "min_size", {})
    print()
    print(res.cpu_line())


if __name__ == "__main__":
    main()
