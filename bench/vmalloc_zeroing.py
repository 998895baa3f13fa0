#!/usr/bin/env python3
"""Why random_size_align_alloc_test gets slower with bulk vfree on this machine.

Seed 004 marks random_size_align p:1 h:0 (I) +8.5% under vfree-high-order;
the model measures it slower here. This bench separates the test's two
costs that the policies change:

1. the model: the test on v6.18 and on vfree-high-order, with the kernel's
   __GFP_ZERO (zero=true) and without it (zero=false), the two policies back
   to back in each run; the change is v6.18's time over the other's, less
   one (the seed's normalisation: positive = improvement);
2. the zeroing alone (bench/zero_hotset.c, compiled here): the test's page
   counts zeroed from one order-0 list, as alloc_pages_bulk takes them, or
   from one list per order, as 6.19-rc1's large orders take them and bulk
   vfree gives them back; with sizes of 1-10 pages (the test's) and 1-7
   (orders 0-2 only), beside this CPU's L1 data cache.

Run it alone on the machine (a benchmark): the load average is recorded.

    python bench/vmalloc_zeroing.py [--runs 20] [--out bench/results/fidelity/vmalloc_zeroing]
"""

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import alloclab as al
from alloclab.host import machine
from alloclab.results import stats

from _results import save

# alloclab.reproduce.vmalloc is also the name of the function the package exports.
rv = importlib.import_module("alloclab.reproduce.vmalloc")
HERE = os.path.dirname(os.path.abspath(__file__))
# The reproduction's v6.18 and vfree-high-order on its modelled machine.
POLICIES = {label: rv.machine_policy(preset) for label, preset in (rv.BASELINE, rv.DESIGNS[1])}
SEED_PCT = next(r[5][0] for r in rv.SEED_ROWS if r[0] == "random_size_align_alloc_test")
LOOPS = 300000  # about 0.25 s a run, as the reproduction's --rigorous


def model(zero, runs):
    """ns per loop of each policy (per run) and the paired change."""
    res = al.run("test_vmalloc", list(POLICIES.values()), run_test_mask=32, zero=zero,
                 test_loop_count=LOOPS, cycles=1, warmup_cycles=1, sequential_test_order=True,
                 mem_sample=0, runs=runs, stats="full")
    ns = {name: np.asarray(res.points[i]["alloc_ns"], float)
          for i, name in enumerate(POLICIES)}
    zeroed = float(np.mean(res.points[1]["pages.pages_zeroed"])) / LOOPS
    change, lo, hi = stats.paired_change_pct(ns["v6.18"], ns["vfree-high-order"])
    return {"ns_per_loop": {k: float(np.median(v)) for k, v in ns.items()},
            "change_pct": change, "ci_pct": [lo, hi], "pages_zeroed_per_loop": zeroed}


def hotset(rounds):
    """bench/zero_hotset.c's lines, compiled with the system's cc."""
    with tempfile.TemporaryDirectory() as d:
        exe = os.path.join(d, "zero_hotset")
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "zero_hotset.c")], check=True)
        out = subprocess.run([exe, str(rounds)], check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def l1d_bytes():
    """CPU 0's level-1 data cache in bytes (sysfs; sysconf reads 0 on some VMs)."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for idx in sorted(os.listdir(base)):
            def read(name):
                with open(os.path.join(base, idx, name)) as f:
                    return f.read().strip()
            if idx.startswith("index") and read("level") == "1" and read("type") == "Data":
                size = read("size")
                return int(size[:-1]) * 1024 if size.endswith("K") else int(size)
    except (OSError, ValueError):
        pass
    return None


def text(out):
    lines = ["random_size_align_alloc_test (1-10 pages, aligned, %d loops a run, %d runs), "
             "ns per loop (median) and the change v6.18 -> vfree-high-order (positive = "
             "faster; 95%% CI):" % (LOOPS, out["runs"])]
    for z in ("true", "false"):
        m = out["model"][z]
        lines.append("  zero=%-5s  v6.18 %6.1f  vfree-high-order %6.1f  change %+5.1f%% [%+.1f, "
                     "%+.1f]  pages zeroed per loop %.2f" % (
                         z, m["ns_per_loop"]["v6.18"], m["ns_per_loop"]["vfree-high-order"],
                         m["change_pct"], m["ci_pct"][0], m["ci_pct"][1],
                         m["pages_zeroed_per_loop"]))
    lines.append("the seed (Ryan Roberts' table): %+.2f%% (I); zeroing's share here: %.1f ns per "
                 "loop on v6.18, %.1f on vfree-high-order" % ((SEED_PCT,) + tuple(
                     out["model"]["true"]["ns_per_loop"][k] - out["model"]["false"]["ns_per_loop"][k]
                     for k in POLICIES)))
    l1 = out["l1d_bytes"]
    lines.append("zeroing alone (bench/zero_hotset.c, median of %d rounds); this CPU's L1d: %s" % (
        out["hotset_rounds"], "%d KiB" % (l1 // 1024) if l1 else "unknown"))
    for h in out["hotset"]:
        lines.append("  sizes 1-%-2d %-15s %7.1f ns per loop  hot set %2d pages (%d KiB)" % (
            h["max_pages"], h["mode"], h["ns_per_loop"], h["hot_pages"], h["hot_pages"] * 4))
    lines.append("load average before %s, after %s" % (out["load_before"], out["load_after"]))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default="bench/results/fidelity/vmalloc_zeroing")
    a = ap.parse_args()
    load0 = machine.loadavg()
    out = {"runs": a.runs, "hotset_rounds": a.rounds, "load_before": load0,
           "host": machine.cpu_model(), "l1d_bytes": l1d_bytes(),
           "model": {str(z).lower(): model(z, a.runs) for z in (True, False)},
           "hotset": hotset(a.rounds)}
    out["load_after"] = machine.loadavg()
    save(out, a.out, text(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
