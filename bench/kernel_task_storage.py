#!/usr/bin/env python3
"""The kernel's own bpf_mem_alloc task storage, timed, beside the model's.

This machine's kernel predates seed 003's change: its task local storage
still allocates through bpf_mem_alloc (the seed's "before" era). A
tp_btf/sched_process_fork program (kernel_task_storage/task_storage.bpf.c)
creates each new thread's storage as local-storage-create's task program
does, and times it in the kernel, with the irq_work interrupts it takes; the
RCU softirq, where the storage is freed (free_task from
delayed_put_task_struct), is timed whole. Each batch size runs with the
program creating storage and with it only looking it up; the difference is
the storage's own path, alloc and free, on this machine's real kernel.

Beside it, the model's storage path alone (owner_work=none, bpf-ma, the
reproduction's "before" era, stats=full), with its irq_work interrupts per
create and what it charges for each.

Needs root, the kernel's BTF (/sys/kernel/btf/vmlinux), clang, bpftool and
libbpf's headers (Debian: apt-get install clang bpftool libbpf-dev). Run it
alone (a benchmark): the load average is recorded.

    python bench/kernel_task_storage.py [--runs 10] [--seconds 0.3]
        [--out bench/results/fidelity/kernel_task_storage]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

from alloclab.host import machine
from alloclab.reproduce import local_storage
from alloclab.results.stats import describe

from _results import save

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SRC = os.path.join(HERE, "kernel_task_storage")
BUILD = os.path.join(ROOT, "build", "kernel_task_storage")
BATCHES = (16, 32, 64)


def missing():
    """Why the kernel side cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (loading BPF tracing programs)"
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        return "the kernel has no BTF (/sys/kernel/btf/vmlinux)"
    for tool in ("clang", "bpftool", "cc"):
        if not shutil.which(tool):
            return "%s is not installed" % tool
    if not os.path.exists("/usr/include/bpf/libbpf.h"):
        return "libbpf's headers are not installed (libbpf-dev)"
    return None


def build():
    os.makedirs(BUILD, exist_ok=True)
    obj = os.path.join(BUILD, "task_storage.bpf.o")
    arch = "/usr/include/%s-linux-gnu" % os.uname().machine
    subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-I" + arch, "-I" + SRC, "-c",
                    os.path.join(SRC, "task_storage.bpf.c"), "-o", obj], check=True)
    with open(os.path.join(BUILD, "task_storage.skel.h"), "w") as f:
        subprocess.run(["bpftool", "gen", "skeleton", obj, "name", "task_storage_bpf"],
                       stdout=f, check=True)
    exe = os.path.join(BUILD, "driver")
    subprocess.run(["cc", "-O2", "-Wall", "-I" + SRC, "-I" + BUILD, "-o", exe,
                    os.path.join(SRC, "driver.c"), "-lbpf", "-lpthread"], check=True)
    return exe


def _per_call(c):
    calls = c["alloc_calls"] + c["alloc_calls_irq_work"]
    return (c["alloc_ns"] + c["alloc_ns_irq_work"]) / calls if calls else 0.0


def _round_rows(got):
    """Per batch size, one round's figures per create (create against lookup).
    The RCU softirq's time is taken less what it takes while no thread is
    made (the round's idle segment), per second of each segment."""
    cells = {(c["batch"], c["mode"]): c for c in got["cells"]}
    idle = cells[(0, "idle")]
    idle_rate = idle["rcu_softirq_ns"] / idle["wall_s"]
    rows = {}
    for b in BATCHES:
        cr, lk = cells[(b, "create")], cells[(b, "lookup")]
        n, n0 = cr["creates"], lk["creates"]
        iw = cr["alloc_calls_irq_work"]
        rcu = (cr["rcu_softirq_ns"] - idle_rate * cr["wall_s"]) / n
        rcu0 = (lk["rcu_softirq_ns"] - idle_rate * lk["wall_s"]) / n0
        row = {
            "creates": n, "lookups": n0,
            "alloc_ns": _per_call(cr) - _per_call(lk), "lookup_ns": _per_call(lk),
            "alloc_ns_without_irq_work":
                cr["alloc_ns"] / max(cr["alloc_calls"], 1) - _per_call(lk),
            "free_ns": rcu - rcu0,
            "irq_work_windows": iw,
            "irq_work_window_ns": cr["alloc_ns_irq_work"],
            "irq_work_window_handler_ns": cr["alloc_handler_ns_irq_work"],
            "irq_work_window_handlers": cr["alloc_handlers"],
            "plain_call_ns": cr["alloc_ns"] / max(cr["alloc_calls"], 1),
            "irq_work_per_create": (cr["alloc_handlers"] + cr["rcu_softirq_handlers"]) / n
                - (lk["alloc_handlers"] + lk["rcu_softirq_handlers"]) / n0,
        }
        row["path_ns"] = row["alloc_ns"] + row["free_ns"]
        rows[b] = row
    return rows


def _mean_ci(values):
    """(mean, half-width of its 95% interval, None with one value)."""
    st = describe(values)
    return float(st.mean), (float(st.ci_half) if st.n > 1 else None)


def kernel_side(exe, runs, seconds):
    """runs rounds, one driver each (a fresh load of the programs), the two
    modes' order alternating; per batch size the mean over rounds with its
    95% interval, and the interrupt windows pooled."""
    rounds = []
    for r in range(runs):
        out = subprocess.run([exe, str(seconds), str(r % 2)], check=True,
                             capture_output=True, text=True).stdout
        rounds.append(json.loads(out))
    per = [_round_rows(g) for g in rounds]
    rows = {}
    for b in BATCHES:
        rs = [p[b] for p in per]
        tot = {k: sum(r[k] for r in rs) for k in ("irq_work_windows", "irq_work_window_ns",
                                                  "irq_work_window_handler_ns",
                                                  "irq_work_window_handlers")}
        row = {k: _mean_ci([r[k] for r in rs]) for k in (
            "path_ns", "alloc_ns", "free_ns", "alloc_ns_without_irq_work", "lookup_ns",
            "plain_call_ns", "irq_work_per_create")}
        iw, nh = tot["irq_work_windows"], tot["irq_work_window_handlers"]
        row.update({
            "ns_per_irq_work_window": tot["irq_work_window_ns"] / iw if iw else None,
            "handler_ns_per_irq_work_window":
                tot["irq_work_window_handler_ns"] / iw if iw else None,
            # a call that took interrupts, less a plain call and the handlers'
            # own time, over its interrupts: at most what raising and taking
            # one costs (anything else in the window counts too)
            "ns_to_raise_and_take_irq_work": (
                tot["irq_work_window_ns"] - tot["irq_work_window_handler_ns"]
                - iw * row["plain_call_ns"][0]) / nh if nh else None})
        rows[b] = row
    remote = sum(g["frees_remote"] for g in rounds)
    local = sum(g["frees_local"] for g in rounds)
    return {"rows": rows, "rounds": rounds, "frees_remote_share": remote / max(remote + local, 1),
            "vm_exit_ns": float(np.median([g["vm_exit_ns"] for g in rounds]))}


def model_side(runs, seconds):
    r = local_storage(storage_types=["task"], batch_sizes=BATCHES, runs=runs,
                      duration=seconds, owner_work="none", alone=False, stats="full")
    rows = {}
    for b in BATCHES:
        ipis = r.per_create("task", 0, b, "bpf_ma.irq_work_ipis")
        ipi_ns = r.per_create("task", 0, b, "bpf_ma.irq_work_ipi_ns")
        rows[b] = {"path_ns": 1e6 / r.speed("task", 0, b)[0], "irq_work_per_create": ipis,
                   "ns_per_irq_work": ipi_ns / ipis if ipis else None}
    return rows


def _ci(mc):
    m, h = mc
    return "%.0f" % m if h is None else "%.0f ±%.0f" % (m, h)


def _f(v, fmt="%.0f"):
    return "-" if v is None else fmt % v


NOTES = """\
kern path = alloc + free: the storage's own ns per create in the kernel (creating against
 looking up), mean over the rounds +- the half-width of its 95% interval.
alloc: the program's bpf_task_storage_get with create, timed in the kernel, less the
 lookup's: the creating thread's cost, as the model's figure is. With the irq_work
 interrupts taken inside it (unit_alloc raises the refill and takes it when it restores
 IRQs). alloc -iw: the same over the calls that took no interrupt.
free: the RCU softirq's time per create (less its time while no thread is made), less the
 lookup-only runs' (bpf_task_storage_free runs there, with the trims' interrupts); on
 whichever CPU runs the callbacks. Trimmed objects not reused are freed later from the
 RCU Tasks Trace kthread, not counted here.
iw/crt: irq_work interrupts per create, each side; ns/iw win: a create call that took
 one or more, whole; handler ns: the handlers' own time in it (irq_work_entry to
 irq_work_exit).
model: the model's storage path alone, ns per create of its creating thread (its reaper
 frees on another CPU); iw/crt and ns/iw: its interrupts and what it charges for each
 (irq_work=ipi: one real kernel entry, no APIC write, no interrupt delivery)."""


def report(k, m, a, load0, load1):
    lines = ["Task local storage, bpf_mem_alloc era: this machine's kernel (%s) against the "
             "model, per create" % os.uname().release,
             "(kernel: %d rounds of %g s per mode and batch size, create against lookup-only, "
             "interleaved; model: bpf-ma alone, %d runs of %g s, stats=full)"
             % (a.runs, a.seconds, a.model_runs, a.seconds), "",
             "%5s  %13s %11s %9s %11s %8s %11s %11s  %9s %8s %8s" % (
                 "batch", "kern path", "alloc", "alloc -iw", "free", "iw/crt", "ns/iw win",
                 "handler ns", "model", "iw/crt", "ns/iw")]
    for b in BATCHES:
        r, mr = k["rows"][b], m[b]
        lines.append("%5d  %13s %11s %9.0f %11s %8.3f %11s %11s  %9.0f %8.3f %8s" % (
            b, _ci(r["path_ns"]), _ci(r["alloc_ns"]), r["alloc_ns_without_irq_work"][0],
            _ci(r["free_ns"]), r["irq_work_per_create"][0], _f(r["ns_per_irq_work_window"]),
            _f(r["handler_ns_per_irq_work_window"]), mr["path_ns"],
            mr["irq_work_per_create"], _f(mr["ns_per_irq_work"])))
    lines += [
        "", NOTES,
        "Storage freed on another CPU than its creator's: %.0f%% (a segment of its own)."
        % (100 * k["frees_remote_share"]),
        "Raising and taking one irq_work interrupt costs at most %s ns beyond its handler at "
        "batch %s (a create call" % (
            ", ".join(_f(k["rows"][b]["ns_to_raise_and_take_irq_work"]) for b in BATCHES),
            "/".join(map(str, BATCHES))),
        " that took some, less a plain call and the handlers' time, over its interrupts: "
        "an upper bound, as",
        " anything else in that call counts too); a VM exit here (CPUID): %.0f ns."
        % k["vm_exit_ns"],
        "load average before %s, after %s" % (load0, load1)]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--model-runs", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=0.3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fidelity",
                                                  "kernel_task_storage"))
    a = ap.parse_args()
    why = missing()
    if why:
        print("alloclab: error: the kernel side cannot run here: %s" % why, file=sys.stderr)
        return 2
    exe = build()
    load0 = machine.loadavg()
    k = kernel_side(exe, a.runs, a.seconds)
    m = model_side(a.model_runs, a.seconds)
    load1 = machine.loadavg()
    text = report(k, m, a, load0, load1)
    out = {"kernel": k, "model": {str(b): v for b, v in m.items()},
           "kernel_release": os.uname().release, "host": machine.cpu_model(),
           "runs": a.runs, "model_runs": a.model_runs, "seconds": a.seconds,
           "load_before": load0, "load_after": load1}
    out["kernel"]["rows"] = {str(b): v for b, v in k["rows"].items()}
    save(out, a.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
