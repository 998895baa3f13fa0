"""A sweep's wall time against the sum of its cells' run times.

Runs one sweep (policies interleaved in a seeded random order, journal in a
temporary file) and splits its wall time into
  measured   the measured phases (sum of elapsed_ns over every run)
  per run    the rest of each run_once() call: stack creation, threads,
             warmup, teardown, leak check (sum of the units' run times minus
             the measured phases)
  sweep      what the sweep itself adds: planning, ordering, the journal,
             the progress bar, Result building (wall minus the units' times)
and does it again through a one-worker ProcessPoolExecutor (pickling and
process hand-off per unit).

    python bench/sweep_overhead.py [--runs 3] [--duration 0.05]

Writes bench/results/sweep_overhead.json.
"""
import argparse
import concurrent.futures as cf
import json
import os
import tempfile
import time

import numpy as np

import alloclab as al

HERE = os.path.dirname(os.path.abspath(__file__))


def one(label, executor, a, tmp):
    t0 = time.perf_counter()
    res = al.sweep("malloc-free", ["libarena-spill", "libarena-transfer", "buddy"],
                   producers=[1, 2], allocs_per_cycle=[16, 256], runs=a.runs,
                   duration=a.duration, warmup_cycles=20, executor=executor,
                   journal=os.path.join(tmp, label + ".jsonl"), progress=False)
    wall = time.perf_counter() - t0
    sw = res.metadata["sweep"]
    measured = sum(float(np.sum(p.data["elapsed_ns"])) for p in res.points) / 1e9
    out = {"executor": label, "units": sw["units"], "wall_s": wall,
           "units_run_s": sw["session_run_s"], "measured_s": measured,
           "per_run_overhead_s": sw["session_run_s"] - measured,
           "sweep_overhead_s": wall - sw["session_run_s"]}
    print("%-22s units %3d  wall %7.3f s  = measured %7.3f s + per-run %6.3f s (%5.1f ms/unit)"
          " + sweep %6.3f s (%5.2f ms/unit, %4.1f%% of wall)" % (
              label, out["units"], wall, measured, out["per_run_overhead_s"],
              1e3 * out["per_run_overhead_s"] / out["units"], out["sweep_overhead_s"],
              1e3 * out["sweep_overhead_s"] / out["units"],
              100 * out["sweep_overhead_s"] / wall))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=0.05)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "sweep_overhead.json"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [one("in process", None, a, tmp)]
        with cf.ProcessPoolExecutor(max_workers=1) as ex:
            rows.append(one("ProcessPoolExecutor(1)", ex, a, tmp))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"runs": a.runs, "duration": a.duration, "rows": rows}, f, indent=1)
    print("written:", a.out)


if __name__ == "__main__":
    main()
