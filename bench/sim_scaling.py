"""Latency against CPUs, 1 to 256 (log x), for spill, transfer cache and
magazine on malloc-free at 256 allocs/cycle: simulated lines (predictions)
and measured points (pinned, at the producer counts this machine has)
(alloclab.reproduce.libarena_scaling).

    python bench/sim_scaling.py [--calibration FILE] [--runs 3] [--duration 0.05]
    python bench/sim_scaling.py --smoke --out /tmp/sim   # seconds: the pipeline only

The calibration defaults to OUT/calibration.json (bench/sim_seed000.py
writes it) and is made here when that file is missing. Writes
OUT/scaling.png, OUT/scaling.txt and OUT/scaling.json. 256 model CPUs run
on one thread: the 256-CPU cells dominate the wall time.
"""
import argparse
import os
import time

import matplotlib

matplotlib.use("Agg")

from alloclab.reproduce import libarena_scaling  # noqa: E402
from alloclab.reproduce.libarena_sim import SCALING_CPUS  # noqa: E402

from sim_seed000 import OUT, calibration  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", help="a saved calibration (default: OUT/calibration.json)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=0.05, help="virtual seconds per run")
    ap.add_argument("--measured-runs", type=int, default=5)
    ap.add_argument("--measured-duration", type=float, default=0.2)
    ap.add_argument("--cpus", type=int, nargs="+", default=list(SCALING_CPUS))
    ap.add_argument("--smoke", action="store_true", help="tiny runs, 1-16 CPUs")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    given = a.calibration or os.path.join(a.out, "calibration.json")
    cal, path = calibration(given if os.path.exists(given) else None, a.out, False,
                            0.05 if a.smoke else 0.2)
    kw = dict(cpus=[1, 2, 4, 16], runs=2, duration=0.002, measured_runs=2,
              measured_duration=0.005) if a.smoke else dict(
        cpus=a.cpus, runs=a.runs, duration=a.duration, measured_runs=a.measured_runs,
        measured_duration=a.measured_duration)
    s = libarena_scaling(calibration=cal, **kw)
    s.settings["calibration"]["source"] = path
    s.settings["wall_s"] = round(time.time() - t0, 1)
    text = s.text()
    with open(os.path.join(a.out, "scaling.txt"), "w") as f:
        f.write(("SMOKE RUN (tiny durations): not results\n\n" if a.smoke else "") + text + "\n")
    s.to_json(os.path.join(a.out, "scaling.json"))
    s.plot().savefig(os.path.join(a.out, "scaling.png"))
    print(text)
    print("written: %s/scaling.png, scaling.txt, scaling.json (%.0f s)" % (a.out, time.time() - t0))


if __name__ == "__main__":
    main()
