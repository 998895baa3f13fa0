"""libarena's presets in NMI context: libarena-spill and libarena-transfer
under the nmi workload (a per-thread timer signal allocates and frees
through the same policy in its handler) at 10k signals/s per worker, at the
real-CPU producer counts, against the same run without signals (rate=0).

Printed per preset and producer count: errors (a run that fails raises; the
goal is none), handler runs, handler allocations served and refused by
reason (EBUSY: a lock or guard held below, ENOMEM: nothing cached and no
refill at NMI), every layer lock's failures by reason (timeout, deadlock,
no queue node), and the worker's alloc/free time with and without signals.

    python bench/libarena_nmi.py [--runs 3] [--duration 0.5] [--rate 10000]
        [--context nmi|irq] [--json FILE]

Run it alone (the lead runs the benches at the end): timing figures.
"""

import argparse
import json

import alloclab as al
from alloclab import stats
from alloclab._ffi import lib

PRESETS = ("libarena-spill", "libarena-transfer")
WL = ("nmi_handler_runs", "nmi_served", "nmi_refused_busy", "nmi_refused_nomem",
      "nmi_free_errors")
REASONS = ("failed", "timeouts", "deadlocks", "no_node")


def mean(p, m):
    return stats.describe(p[m]).mean if m in p.data else float("nan")


def measure(preset, producers, rate, args):
    r = al.run("nmi", preset, runs=args.runs, producers=producers, cpu="pinned",
               duration=args.duration, rate=rate, handler_objs=2, handler_frees=2,
               context=args.context)
    p = r.points[0]
    out = {m: mean(p, m) for m in ("alloc_ns", "free_ns")}
    out.update({m: mean(p, "wl." + m) for m in WL})
    for layer in ("buddy", "transfer"):
        if layer + ".lock_failed" in p.data:
            out[layer] = {w: mean(p, "%s.lock_%s" % (layer, w)) for w in REASONS}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--rate", type=int, default=10000)
    ap.add_argument("--context", choices=("nmi", "irq"), default="nmi")
    ap.add_argument("--json")
    args = ap.parse_args()
    usable = int(lib.al_cpus_usable())
    rows = []
    for preset in PRESETS:
        for n in range(1, usable + 1):
            base, sig = measure(preset, n, 0, args), measure(preset, n, args.rate, args)
            rows.append({"preset": preset, "producers": n, "baseline": base, "signals": sig})
            print("%s %dp: alloc %.1f -> %.1f ns, free %.1f -> %.1f ns (rate 0 -> %d/s)" % (
                preset, n, base["alloc_ns"], sig["alloc_ns"], base["free_ns"],
                sig["free_ns"], args.rate))
            print("  handler: " + ", ".join("%s %.0f" % (m[4:], sig[m]) for m in WL))
            for layer in ("buddy", "transfer"):
                if layer in sig:
                    print("  %s lock: " % layer + ", ".join(
                        "%s %.0f" % (w, sig[layer][w]) for w in REASONS))
    print("errors: none (a failed run raises)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "rate": args.rate, "context": args.context,
                       "usable_cpus": usable}, f, indent=1)


if __name__ == "__main__":
    main()
