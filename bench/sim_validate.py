#!/usr/bin/env python3
"""Simulated CPUs against this machine's measured runs, determinism and speed.

Calibrates on malloc-free at 64 allocs/cycle (one producer), fits
lines_per_handoff on the same cell at two producers, then validates on
malloc-free and malloc-xfree at 64 and 256 allocs/cycle, 1 and 2 producers,
libarena-spill and libarena-transfer, alloc and free: simulated/measured
per cell. The figures: one producer within 10% on the cells not used for
calibration; two producers within 25% (the fit cell aside). Then two runs
with one seed (identical?), the spread over five seeds, and the wall time of
8 model CPUs for 0.25 s of virtual time and of 256 for 0.05 s.

Run it alone on the machine (a benchmark): the load average is recorded.

    python bench/sim_validate.py [--runs 5] [--out bench/results/sim/validate]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from alloclab.host import machine
from alloclab.measure import run as mrun
from alloclab.measure import sim

POLICIES = ["libarena-spill", "libarena-transfer"]
CELLS = [{"workload": w, "allocs_per_cycle": a}
         for w in ("malloc-free", "malloc-xfree") for a in (64, 256)]


def determinism(cal):
    out = {}
    _, tasks = mrun.plan("malloc-free", "libarena-transfer", producers=8, cpu="simulated",
                         calibration=cal, runs=1, duration=0.05, mem_sample=0,
                         allocs_per_cycle=256, band=False)
    a, b = mrun.run_once(tasks[0], 0), mrun.run_once(tasks[0], 0)
    out["same_seed_identical"] = all(a[k] == b[k] for k in ("alloc_ns", "free_ns",
                                                            "alloc_ops", "layers"))
    per = []
    for seed in range(1, 6):
        _, t = mrun.plan("malloc-free", "libarena-transfer", producers=8, cpu="simulated",
                         calibration=cal, runs=1, duration=0.05, mem_sample=0, seed=seed,
                         allocs_per_cycle=256, band=False)
        r = mrun.run_once(t[0], 0)
        per.append((r["alloc_ns"] + r["free_ns"]) / (r["alloc_ops"] + r["free_ops"]))
    out["seeds_per_op_ns"] = per
    out["seeds_spread_pct"] = 100 * (max(per) - min(per)) / np.mean(per)
    return out


def speed(cal):
    out = {}
    for n, d in ((8, 0.25), (256, 0.05)):
        _, t = mrun.plan("malloc-free", "libarena-transfer", producers=n, cpu="simulated",
                         calibration=cal, runs=1, duration=d, warmup_cycles=0,
                         mem_sample=0, allocs_per_cycle=256, band=False)
        t0 = time.monotonic()
        r = mrun.run_once(t[0], 0)
        out["%d_cpus_%gs" % (n, d)] = {"wall_s": time.monotonic() - t0,
                                       "virtual_s": r["sim"]["virtual_ns"] / 1e9,
                                       "ops": r["alloc_ops"] + r["free_ops"]}
    return out


def shares(val):
    rows = [r for r in val.rows if not r["calibration_cell"]]
    one = [r for r in rows if r["producers"] == 1]
    two = [r for r in rows if r["producers"] == 2]
    return {"1p_within_10pct": "%d of %d" % (sum(abs(r["ratio"] - 1) <= 0.10 for r in one),
                                             len(one)),
            "2p_within_25pct": "%d of %d" % (sum(abs(r["ratio"] - 1) <= 0.25 for r in two),
                                             len(two)),
            "median_ratio_1p": float(np.median([r["ratio"] for r in one])) if one else None,
            "median_ratio_2p": float(np.median([r["ratio"] for r in two])) if two else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="bench/results/sim/validate")
    a = ap.parse_args()
    load0 = machine.loadavg()
    t0 = time.monotonic()
    cal = sim.calibrate(POLICIES)
    cal = sim.fit_handoff(cal, POLICIES, runs=a.runs)
    val = sim.validate(cal, POLICIES, cells=CELLS, producers=[1, 2], runs=a.runs,
                       sim_duration=0.05)
    cal = cal.validated(val)
    cal.save(a.out + "-calibration.json")
    det = determinism(cal)
    spd = speed(cal)
    summary = shares(val)
    out = {"calibration": cal.to_dict(), "validation": val.to_dict(), "summary": summary,
           "determinism": det, "speed": spd, "load_before": load0,
           "load_after": machine.loadavg(), "wall_s": time.monotonic() - t0,
           "host": machine.cpu_model(), "usable_cpus": os.cpu_count()}
    with open(a.out + ".json", "w") as f:
        json.dump(out, f, indent=1)
    text = [val.text(), "",
            "calibration: line_transfer_ns %.1f (%s), lines_per_handoff %g and jitter %g (%s), "
            "factor and offset per call (alloc/free) %s" % (
                cal.line_transfer_ns, cal.info.get("line_transfer"), cal.lines_per_handoff,
                cal.jitter, cal.info.get("lines_per_handoff"),
                ", ".join("%s %.3f/%.3f, %+.2f/%+.2f ns" % (
                    k, v[0], v[1], *cal.offset_for(k)) for k, v in sorted(cal.scales.items()))),
            "coherence: " + sim.coherence_text(cal),
            "summary: %s" % json.dumps(summary),
            "determinism: same seed identical: %s; 5 seeds per-op ns %s (spread %.1f%%)" % (
                det["same_seed_identical"], ", ".join("%.1f" % v for v in det["seeds_per_op_ns"]),
                det["seeds_spread_pct"]),
            "speed: " + "; ".join("%s %.1f s wall for %.3f s virtual (%d ops)" % (
                k, v["wall_s"], v["virtual_s"], v["ops"]) for k, v in spd.items()),
            "load average before %s, after %s" % (load0, out["load_after"])]
    with open(a.out + ".txt", "w") as f:
        f.write("\n".join(text) + "\n")
    print("\n".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
