"""Seed 000 on simulated CPUs: all 32 transfer-vs-spill cells of the seed's four
tables (1, 2, 4, 8 producers; malloc-free and malloc-xfree; 64 and 256
allocs/cycle, plus the cache-hit rows), the seed's conclusions judged as
predictions, and the 4/8-producer cells set against the seed's own ratios
(alloclab.reproduce.libarena_simulated).

    python bench/sim_seed000.py [--calibration FILE] [--fit] [--validate] [--runs 5]
        [--duration 0.25]
    python bench/sim_seed000.py --smoke --out /tmp/sim   # seconds: checks the pipeline only

Without --calibration it first calibrates on this machine at one producer
(measure.sim.calibrate, the line transfer by a ping-pong between two CPUs)
for every design the simulated benchmarks use (transfer cache, spill, plain
buddy, magazine), with --fit also fitting lines_per_handoff to this
machine's measured two-producer runs (never to the seed), with --validate
checking it against measured runs at 1 and 2 producers (cells off by more
than 25% at 2 producers are then unvalidated above this machine's CPUs),
and saves it as
OUT/calibration.json, which bench/sim_scaling.py then reuses. Writes
OUT/seed000.txt (the report) and OUT/seed000.json (its data, the
calibration inside every Result). Run it alone on the machine: the
calibration is measured, so it is as good as the machine is quiet; the
simulated runs themselves do not depend on the load.
"""
import argparse
import os
import time

from alloclab.measure import sim
from alloclab.reproduce import libarena_simulated
from alloclab.reproduce.libarena_sim import SCALING_DESIGNS

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "sim")
SPECS = ["libarena-transfer", "libarena-spill", "buddy"] + [s for _, s in SCALING_DESIGNS
                                                            if s.endswith("magazine")]


def calibration(path, out, fit, duration, validate=False):
    """A calibration: the file given, else one made here and saved in OUT;
    validate: simulated against measured at the CPUs this machine has
    (sim.validate), attached as its info["validation"] and written to
    OUT/validation.txt."""
    if path:
        return sim.Calibration.load(path), path
    cal = sim.calibrate(SPECS, duration=duration)
    if fit:
        cal = sim.fit_handoff(cal, ["libarena-transfer", "libarena-spill"])
    if validate:
        v = sim.validate(cal, ["libarena-transfer", "libarena-spill"])
        cal.info["validation"] = v.to_dict()
        with open(os.path.join(out, "validation.txt"), "w") as f:
            f.write(v.text() + "\n")
        print(v.text())
    path = os.path.join(out, "calibration.json")
    cal.save(path)
    print("calibration written:", path)
    return cal, path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", help="a saved calibration (default: make one here)")
    ap.add_argument("--fit", action="store_true",
                    help="fit lines_per_handoff to measured 2-producer runs (with no "
                         "--calibration)")
    ap.add_argument("--validate", action="store_true",
                    help="validate the new calibration against measured runs at 1 and 2 "
                         "producers (malloc-free and malloc-xfree, 64 and 256 allocs/cycle)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.25, help="virtual seconds per run")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny runs (3 x 2 ms, 64/256 allocs/cycle): the pipeline, not numbers")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()

    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    cal, path = calibration(a.calibration, a.out, a.fit and not a.smoke,
                            0.05 if a.smoke else sim.CALIBRATION_SECONDS,
                            a.validate and not a.smoke)
    kw = dict(runs=3, duration=0.002, allocs_per_cycle=[16, 64, 256], warmup_cycles=2) \
        if a.smoke else dict(runs=a.runs, duration=a.duration)
    r = libarena_simulated(calibration=cal, **kw)
    r.settings["calibration"]["source"] = path
    r.settings["wall_s"] = round(time.time() - t0, 1)
    if a.smoke:
        r.settings["smoke"] = "tiny runs: checks the pipeline, the numbers mean nothing"
    text = str(r)
    with open(os.path.join(a.out, "seed000.txt"), "w") as f:
        f.write(("SMOKE RUN (tiny durations): not results\n\n" if a.smoke else "") + text + "\n")
    r.to_json(os.path.join(a.out, "seed000.json"))
    print(text)
    print("written: %s/seed000.txt, seed000.json (%.0f s)" % (a.out, time.time() - t0))


if __name__ == "__main__":
    main()
