"""libarena-transfer with and without --realtime (SCHED_FIFO workers).

The kernel's arena lock runs with preemption disabled; a user-space lock
holder can be preempted, and every waiter then spins (or yields) until it
runs again. --realtime makes the workers SCHED_FIFO so that no ordinary task
takes their CPUs. The cell: libarena-malloc-free at 256 allocs/cycle (the
row where the buddy and transfer locks are taken most), 2 producers pinned,
stats=full (lock wait times), with and without realtime, optionally with
--load N busy processes competing for the CPUs (on a quiet machine nothing
preempts the workers, so the two should match).

realtime needs fewer producers than usable CPUs (the main thread and the
watchdog keep one). On a machine with fewer than 3 usable CPUs the
2-producer realtime cell is refused: the script says so, runs the 2-producer
cell without it, and compares the largest producer count realtime allows
(usable - 1) with and without it instead.

    python bench/libarena_realtime.py [--runs 5] [--duration 0.2] [--load 0]
        [--producers 2] [--json FILE]

Run it alone (the lead runs the benches at the end): timing figures.
"""

import argparse
import json
import os
import subprocess
import sys

import alloclab as al
from alloclab import stats
from alloclab._ffi import lib

METRICS = ("alloc_ns", "free_ns", "worker_invol_ctxsw_per_s", "buddy.lock_wait_ns_per_op",
           "transfer.lock_wait_ns_per_op")
W = 28  # column width


def cell(producers, realtime, args):
    r = al.run("malloc-free", "libarena-transfer", runs=args.runs, producers=producers,
               cpu="pinned", allocs_per_cycle=256, duration=args.duration, stats="full",
               realtime=realtime)
    p = r.points[0]
    out = {"producers": producers, "realtime": realtime}
    for m in METRICS:
        st = stats.describe(p[m] if m in p.data else [])
        out[m] = (st.mean, st.ci_half)
    return out


def start_load(n):
    """n busy child processes (ended by pid in stop_load)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_load(procs):
    for p in procs:
        p.kill()
        p.wait()


def row(c):
    return "%4dp  %-8s" % (c["producers"], "on" if c["realtime"] else "off") + "".join(
        ("%.1f ±%.1f" % c[m] if c[m][0] == c[m][0] else "n/a").rjust(W) for m in METRICS)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--load", type=int, default=0, help="busy processes competing for CPUs")
    ap.add_argument("--producers", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    usable = int(lib.al_cpus_usable())
    cells, notes = [], []
    load = start_load(args.load)
    try:
        cells.append(cell(args.producers, False, args))
        if args.producers < usable:
            cells.append(cell(args.producers, True, args))
        else:
            notes.append("not measured: %dp with realtime (refused: %d usable CPUs, realtime "
                         "needs fewer producers than CPUs)" % (args.producers, usable))
            if usable >= 2:
                cells += [cell(usable - 1, rt, args) for rt in (False, True)]
                notes.append("measured instead: %dp with and without realtime" % (usable - 1))
    except al.errors.RunError as e:  # not permitted here
        notes.append("realtime refused: %s" % e)
    finally:
        stop_load(load)
    print("libarena-malloc-free, libarena-transfer, 256 allocs/cycle, pinned, stats=full, "
          "%d runs x %gs, %d busy processes, %d usable CPUs, load before %.2f" % (
              args.runs, args.duration, args.load, usable, os.getloadavg()[0]))
    print("  prod  realtime" + "".join(m.replace("_per_op", "/op").rjust(W) for m in METRICS))
    for c in cells:
        print(row(c))
    for n in notes:
        print(n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"cells": cells, "notes": notes, "usable_cpus": usable,
                       "load_processes": args.load}, f, indent=1)


if __name__ == "__main__":
    main()
