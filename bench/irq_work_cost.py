#!/usr/bin/env python3
"""What one irq_work self-IPI costs on this machine under each stand-in.

kmalloc_nolock's socket storage (local-storage-create, the allocators alone)
defers most frees to irq_work; at stats=full the defer domain times every
interrupt it takes (irq_work_ipi_ns over irq_work_ipis). irq_work=ipi enters
through a null system call (the kernel entry and exit an interrupt taken in
kernel mode also runs); irq_work=signal through a self-signal (two system
calls, a signal frame with the FPU state, sigreturn: an upper bound). Also
the ns per create of each, and of irq_work=inline (no cost).

Run it alone on the machine (a benchmark): the load average is recorded.

    python bench/irq_work_cost.py [--runs 5] [--out bench/results/irq_work_cost]
"""

import argparse
import sys

import numpy as np

import alloclab as al
from alloclab.host import machine

from _results import save

MODES = ("inline", "ipi", "signal")


def one(mode, runs, duration):
    res = al.run("local-storage-create", "nolock(irq_work=%s) > slab" % mode, runs=runs,
                 duration=duration, storage_type="socket", owner_work="none", stats="full",
                 mem_sample=0)
    pt = res.points[0]
    ipis = float(np.sum(pt["nolock.irq_work_ipis"])) if "nolock.irq_work_ipis" in pt.data \
        else 0.0
    ns = float(np.sum(pt["nolock.irq_work_ipi_ns"])) if "nolock.irq_work_ipi_ns" in pt.data \
        else 0.0
    creates = pt["wl.creates_per_s"] if "wl.creates_per_s" in pt.data else None
    return {"ipis": ipis, "ipi_ns_total": ns, "ns_per_ipi": ns / ipis if ipis else None,
            "ns_per_create": float(1e9 / np.mean(creates)) if creates is not None else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--duration", type=float, default=0.2)
    ap.add_argument("--out", default="bench/results/irq_work_cost")
    a = ap.parse_args()
    load0 = machine.loadavg()
    got = {m: one(m, a.runs, a.duration) for m in MODES}
    out = {"modes": got, "runs": a.runs, "duration": a.duration, "load_before": load0,
           "load_after": machine.loadavg(), "host": machine.cpu_model()}
    lines = ["irq_work's self-IPI on this machine (kmalloc_nolock socket storage, allocators "
             "alone, stats=full, %d runs of %g s)" % (a.runs, a.duration),
             "%-8s %12s %14s %14s" % ("irq_work", "interrupts", "ns/interrupt", "ns/create")]
    for m in MODES:
        g = got[m]
        lines.append("%-8s %12d %14s %14s" % (
            m, g["ipis"], "-" if g["ns_per_ipi"] is None else "%.0f" % g["ns_per_ipi"],
            "-" if g["ns_per_create"] is None else "%.0f" % g["ns_per_create"]))
    lines.append("load average before %s, after %s" % (load0, out["load_after"]))
    save(out, a.out, "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
