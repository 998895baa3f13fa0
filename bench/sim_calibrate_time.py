#!/usr/bin/env python3
"""How long a calibration of the simulated CPUs takes, and how much it simulates.

Every ``--cpu simulated`` run without ``--calibration`` first calibrates its
policies (measure.sim.calibrate, the default cells). This times it per policy
set and counts, per simulated calibration run, the operations it made and
whether it ended at the measured runs' cycles or at its simulated duration.

Run it alone on the machine (a benchmark): the load average is recorded.

    python bench/sim_calibrate_time.py [--out bench/results/sim/calibrate_time]
"""

import argparse
import time

from alloclab.host import machine
from alloclab.measure import run as mrun
from alloclab.measure import sim

from _results import save

SETS = (["bpf-ma"], ["kmalloc-nolock"], ["buddy", "libarena-transfer"])


def one(policies):
    """Wall time of sim.calibrate(policies) and its simulated runs' sizes."""
    runs = []
    orig = mrun.run_once

    def spy(task, run_index=0, **kw):
        t0 = time.perf_counter()
        raw = orig(task, run_index, **kw)
        if task["cpu"] == "simulated":
            runs.append({"policy": task["policy"], "wall_s": round(time.perf_counter() - t0, 3),
                         "ops": raw["alloc_ops"] + raw["free_ops"], "cycles": raw["cycles"],
                         "cycles_cap": task["cycles"], "fit": bool(kw.get("calibrate"))})
        return raw

    mrun.run_once = spy
    try:
        t0 = time.perf_counter()
        cal = sim.calibrate(policies)
        wall = time.perf_counter() - t0
    finally:
        mrun.run_once = orig
    return {"policies": policies, "wall_s": round(wall, 2), "simulated_runs": runs,
            "scales": cal.scales}


def _load(x):
    return "unknown" if not x else x["1min"]


def text(out):
    cells = ", ".join("%s at %s allocs/cycle" % (c["workload"], c["allocs_per_cycle"])
                      for c in sim.DEFAULT_CELLS)
    lines = ["sim.calibrate wall time (default cells: %s; one producer)" % cells,
             "host: %s" % out["host"]]
    for r in out["sets"]:
        sim_runs = r["simulated_runs"]
        lines.append("  %-28s %7.1f s; %d simulated runs, at most %.3g ops and %.1f s each, "
                     "%d ended at the cap (%gx the measured runs' cycles), the rest at their "
                     "simulated duration" % (
                         "+".join(r["policies"]), r["wall_s"], len(sim_runs),
                         max(x["ops"] for x in sim_runs), max(x["wall_s"] for x in sim_runs),
                         sum(1 for x in sim_runs if x["cycles"] >= x["cycles_cap"]),
                         sim.SIM_WORK_CAP))
    lines.append("1-minute load average before %s, after %s" % (
        _load(out["load_before"]), _load(out["load_after"])))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench/results/sim/calibrate_time")
    a = ap.parse_args()
    out = {"load_before": machine.loadavg(), "host": machine.cpu_model()}
    out["sets"] = [one(p) for p in SETS]
    out["load_after"] = machine.loadavg()
    save(out, a.out, text(out))


if __name__ == "__main__":
    main()
