"""Which transfer-cache capacity do seed 000's numbers imply? A sweep of the
transfer layer's `batches` (capacity per order, in batches of `batch` objects)
against the spill design, on the seed's cells: libarena-malloc-free and
libarena-malloc-xfree, 1 and 2 producers, 64 and 256 allocs/cycle, size 64.

The seed shows only the spill prototype's code; the transfer version's patch
(v2 of "bpf libarena allocator improvements", with buddy_transfer_order and
buddy_transfer_take_batch/put_batch) is not public in any corpus searched, so
its capacity is not known. For every capacity this prints, per cell (workload,
alloc|free, producers, allocs/cycle), the model's spill/transfer latency ratio
beside the seed's, then a line per capacity: in how many cells the model's
ratio has the seed's direction (the seed's are all > 1: transfer is faster),
and the median |log2(model ratio / seed ratio)|. The best capacity is the one
with the most cells in direction, then the smallest median distance. The seed's
numbers come from a 16-vCPU VM; a 2-CPU machine decides only the 1- and
2-producer cells, which is why no others are swept.

    python bench/transfer_capacity.py [--capacities 1 2 4 8 16 32 64] [--runs 3]
        [--duration 0.1] [--producers 1 2] [--apc 64 256] [--timing batch]
    python bench/transfer_capacity.py --cpu simulated --calibration FILE
        [--producers 4 8] ...   (predictions: the seed's 4- and 8-producer cells,
        where a capacity decides most, on simulated CPUs; the machine's load
        does not bear on them, so they may run beside other work)

Long: 2 workloads x (1 + capacities) policies x producers x apc x runs x
duration (the defaults: about 2 x 8 x 4 x 3 x 0.1 s, plus warm-up). Run it on a
quiet machine. Writes bench/results/transfer_capacity.json (the raw Results).
"""
import argparse
import json
import math
import os
import re
import statistics

import alloclab as al
from alloclab.reproduce.libarena import SEED_NS, SEED_PRODUCERS

HERE = os.path.dirname(os.path.abspath(__file__))
SPILL = "percpu > buddy"
WORKLOADS = ("malloc-free", "malloc-xfree")
METRICS = ("alloc_ns", "free_ns")


def transfer_spec(batches):
    return "percpu > transfer(batches=%d) > buddy" % batches


def default_batches():
    return next(p.default for p in al.schema.layer("transfer").params if p.name == "batches")


def batches_of(policy):
    """The capacity of a transfer spec as the Result names it (normalised
    specs leave the default out); None for the spill design."""
    if "transfer" not in policy:
        return None
    m = re.search(r"transfer\([^)]*batches=(\d+)", policy)
    return int(m.group(1)) if m else default_batches()


def medians(res):
    """{(capacity or None, producers, apc, metric): median ns}."""
    out = {}
    for p in res.points:
        cap = batches_of(p.params["policy"])
        for m in METRICS:
            out[(cap, p.params["producers"], p.params["allocs_per_cycle"], m)] = \
                statistics.median(float(x) for x in p.data[m])
    return out


def seed_ratio(wl, metric, producers, apc):
    i = SEED_PRODUCERS.index(producers)
    return SEED_NS[(wl, metric, "spill", apc)][i] / SEED_NS[(wl, metric, "transfer cache", apc)][i]


def score(cells):
    """(cells in the seed's direction, median |log2(model/seed)|) of a list of
    (model ratio, seed ratio)."""
    inside = sum(1 for m, s in cells if (m > 1) == (s > 1) and m != 1)
    dist = statistics.median(abs(math.log2(m / s)) for m, s in cells) if cells else float("nan")
    return inside, dist


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capacities", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=0.1)
    ap.add_argument("--producers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--apc", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--timing", default="batch")
    ap.add_argument("--cpu", default="pinned", choices=["pinned", "simulated"])
    ap.add_argument("--calibration", help="simulated: a saved calibration (measure.sim)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sim = a.cpu == "simulated"
    a.out = a.out or os.path.join(HERE, "results", "transfer_capacity%s.json"
                                  % ("_sim" if sim else ""))
    extra = {"cpu": "simulated", "calibration": a.calibration} if sim else {}
    if sim and a.producers == [1, 2]:
        a.producers = [4, 8]
    bad = [p for p in a.producers if p not in SEED_PRODUCERS]
    if bad or any((w, m, "spill", n) not in SEED_NS for w in WORKLOADS for m in METRICS
                  for n in a.apc):
        ap.error("the seed has producers %s and allocs/cycle 64, 256" % (SEED_PRODUCERS,))

    policies = [SPILL] + [transfer_spec(b) for b in a.capacities]
    results, per_cap = {}, {b: [] for b in a.capacities}
    for wl in WORKLOADS:
        res = al.run(wl, policies, runs=a.runs, producers=a.producers, allocs_per_cycle=a.apc,
                     size=64, duration=a.duration, timing=a.timing, mem_sample=0, **extra)
        results[wl] = res
        med = medians(res)
        print("\n%s: spill/transfer latency ratio, model%s (seed)"
              % (wl, " predicted on simulated CPUs" if sim else ""))
        print("%-8s %5s %5s  " % ("metric", "prod", "apc") +
              " ".join("%13s" % ("T=%d" % b) for b in a.capacities))
        for m in METRICS:
            for prod in a.producers:
                for apc in a.apc:
                    s = seed_ratio(wl, m, prod, apc)
                    row = []
                    for b in a.capacities:
                        r = med[(None, prod, apc, m)] / med[(b, prod, apc, m)]
                        per_cap[b].append((r, s))
                        row.append("%5.2f (%4.2f)" % (r, s))
                    print("%-8s %5d %5d  " % (m, prod, apc) + " ".join(row))
    print("\ncapacity  in direction  median |log2(model/seed)|")
    scored = {b: score(per_cap[b]) for b in a.capacities}
    for b in a.capacities:
        inside, dist = scored[b]
        print("%8d  %6d of %-3d  %8.3f" % (b, inside, len(per_cap[b]), dist))
    best = max(a.capacities, key=lambda b: (scored[b][0], -scored[b][1]))
    print("\nbest match to the seed's direction: batches=%d (%d of %d cells, median "
          "distance %.3f); the model's default is %d" % (
              best, scored[best][0], len(per_cap[best]), scored[best][1], default_batches()))
    if sim:
        print("predicted (simulated CPUs): every model number above is a prediction from "
              "the calibration %s; the seed's numbers are compared, never fitted" % a.calibration)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"settings": vars(a), "best": best,
                   "scores": {str(b): list(scored[b]) for b in a.capacities},
                   "results": {wl: r.to_dict() for wl, r in results.items()}}, f, indent=1)
    print("written:", a.out)


if __name__ == "__main__":
    main()
