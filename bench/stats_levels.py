"""What counting costs: alloc and free ns/op of each preset at every stats level.

malloc-free, size 64, 1 producer pinned, batch timing, at 16 and 256
allocs/cycle, for the libarena presets, buddy, kmalloc-sheaves, kzalloc,
bpf-ma, null and `percpu(guard=local) > buddy`, each at stats lite (the
default), off and full. Everything is one interleaved run: round r runs
every cell once, and within a (preset, allocs/cycle) the three levels run
back to back in an order that rotates every round, so drift and ordering
fall on every level alike. Run r of a level pairs with run r of lite (the
same round, seconds apart): per cell the ratio level/lite is the geometric
mean of the paired ratios, with a 95% t interval over the rounds.

    python bench/stats_levels.py [--runs 10] [--duration 0.2]

Writes bench/results/stats_levels.txt (the table) and stats_levels.json
(the Result of every run and the ratio rows), and prints the load average
before and after the run. Numbers measured while anything else runs on the
machine are not figures: run it alone.

The reference for what counting costs altogether is a build with the
counters compiled out (-DAL_STATS_COMPILED=0): bench/ab_builds.py --base HEAD
--new-cflags=-DAL_STATS_COMPILED=0 measures the working tree built that way
against the same tree as it is, in one interleaved A/B run.
"""
import argparse
import json
import os
import sys

import numpy as np
from scipy import stats as sst

import alloclab as al
from alloclab import machine
from alloclab.machine import collect_metadata
from alloclab.result import Result
from alloclab.run import plan, run_once

HERE = os.path.dirname(os.path.abspath(__file__))
PRESETS = ["libarena-spill", "libarena-transfer", "libarena-magazine", "buddy",
           "kmalloc-sheaves", "kzalloc", "bpf-ma", "null", "percpu(guard=local) > buddy"]
LEVELS = ["lite", "off", "full"]  # lite first: the reference of the ratios
METRICS = ["alloc_ns", "free_ns"]


def run_interleaved(a):
    """Every run of every cell: round r runs each (preset, allocs/cycle)'s
    levels back to back, rotated by r. Returns a Result."""
    settings, tasks = plan("malloc-free", a.presets, runs=a.runs, producers=1, cpu=a.cpu,
                           timing="batch", warmup_cycles=a.warmup_cycles,
                           duration=a.duration, stats=LEVELS, size=64,
                           allocs_per_cycle=a.allocs_per_cycle, mem_sample=0)
    groups = {}
    for t in tasks:
        groups.setdefault((t["policy"], t["point"]["allocs_per_cycle"]), {})[t["stats"]] = t
    raws = {id(t): [] for t in tasks}
    for r in range(a.runs):
        for g in groups.values():
            k = r % len(LEVELS)
            for level in LEVELS[k:] + LEVELS[:k]:
                raws[id(g[level])].append(run_once(g[level], r))
        print("round %d/%d done" % (r + 1, a.runs), file=sys.stderr)
    meta = collect_metadata()
    meta["run"] = settings
    return Result.from_raw(meta, [(t["point"], raws[id(t)]) for t in tasks])


def ratios(res):
    """Per (preset, allocs/cycle, level, metric): the mean ns/op and the
    geometric mean of the paired ratios level/lite with a 95% t interval."""
    rows = []
    for p in res.points:
        ref = res.select(policy=p.params["policy"], stats="lite",
                         allocs_per_cycle=p.params["allocs_per_cycle"])[0]
        for m in METRICS:
            lr = np.log(np.asarray(p[m], float) / np.asarray(ref[m], float))
            n = len(lr)
            mean = lr.mean()
            half = sst.t.ppf(0.975, n - 1) * lr.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
            rows.append(dict(policy=p.params["policy"], allocs_per_cycle=p.params[
                "allocs_per_cycle"], stats=p.params["stats"], metric=m,
                ns=float(np.mean(p[m])), ratio=float(np.exp(mean)),
                lo=float(np.exp(mean - half)), hi=float(np.exp(mean + half)), runs=n))
    return rows


def table(rows, a, load0, load1):
    """The text of the report."""
    out = ["malloc-free, size 64, 1 producer (%s), batch timing, %d interleaved rounds of "
           "%g s runs; ns/op and ratio vs lite (geometric mean of the paired ratios, 95%% "
           "t interval over the rounds)" % (a.cpu, a.runs, a.duration),
           "load average before: %s; after: %s" % (_load(load0), _load(load1)), "",
           "  %-30s %5s %-5s %-8s %9s %7s  %s" % ("policy", "apc", "stats", "metric",
                                                   "ns/op", "ratio", "95% CI")]
    for r in rows:
        ci = "" if r["stats"] == "lite" else "[%.3f, %.3f]" % (r["lo"], r["hi"])
        out.append("  %-30s %5d %-5s %-8s %9.2f %7.3f  %s" % (
            r["policy"], r["allocs_per_cycle"], r["stats"], r["metric"], r["ns"], r["ratio"],
            ci))
    return "\n".join(out)


def _load(la):
    return "%.2f %.2f %.2f" % (la["1min"], la["5min"], la["15min"]) if la else "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="interleaved rounds (default 10)")
    ap.add_argument("--duration", type=float, default=0.2, help="measured s per run")
    ap.add_argument("--warmup-cycles", type=int, default=100)
    ap.add_argument("--allocs-per-cycle", type=int, nargs="+", default=[16, 256])
    ap.add_argument("--presets", nargs="+", default=PRESETS)
    ap.add_argument("--cpu", default="pinned", choices=["pinned", "auto", "virtual"])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "stats_levels"),
                    help="path without extension: writes .txt and .json")
    a = ap.parse_args()
    if a.runs < 2:
        ap.error("--runs must be at least 2 (an interval needs two paired runs)")

    load0 = machine.loadavg()
    print("load average before: %s" % _load(load0))
    res = run_interleaved(a)
    load1 = machine.loadavg()
    print("load average after: %s" % _load(load1))
    rows = ratios(res)
    text = table(rows, a, load0, load1)
    print(text)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".txt", "w") as f:
        f.write(text + "\n")
    with open(a.out + ".json", "w") as f:
        json.dump({"load_before": load0, "load_after": load1, "rows": rows,
                   "result": res.to_dict()}, f, default=float, separators=(",", ":"))
    print("written: %s.txt, %s.json" % (a.out, a.out))


if __name__ == "__main__":
    main()
