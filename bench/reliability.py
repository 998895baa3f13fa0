#!/usr/bin/env python3
"""Reliability figures (run by the lead; minutes, not seconds).

1. NMI model: for every NMI-safe policy (presets and stacks), the nmi
   workload with 1 and 2 workers at 0, 1k, 10k and 50k timer signals/s per
   thread, 16 allocations per cycle; each handler run allocates 2 objects
   and frees them, and frees 2 objects its worker allocated for it
   (handler_frees=2): handler operations per second survived with zero
   errors (allocations attempted + frees, per second of the measured phase),
   the share of allocations refused (NULL), the share of NMI frees deferred
   (the layers' nmi_frees_deferred), and the worker time the signals took
   (1 - op/s over op/s without signals: linear in the rate, unlike the op/s
   ratio), per 10k signals/s and per signal. 4 allocations per cycle (on
   the seed's grid): at 16 (percpu's capacity) and 64 (bpf_ma's high - low
   watermark gap) the one or two objects a handler takes or leaves move a
   cache's fill level off the one value where a cycle neither refills nor
   spills, and every cycle then does both (percpu > buddy, 2 workers, 16
   allocs/cycle: -56% at 1k signals/s, buddy locks/op 0 -> 0.012-0.026).
   That is the policy's cliff at that cycle size, not the signal's cost;
   `--allocs-per-cycle 16` shows it.
2. Long stress: the stress workload on every preset for --stress seconds
   each, 2 workers: errors (must be 0), checked bytes, handoffs.
3. Fuzzing: `make fuzz`, then each libFuzzer target for --fuzz seconds from
   the seed corpus: executions per second and in total (needs clang).

Writes bench/results/reliability.{txt,json}.

    python bench/reliability.py [--duration 0.5] [--runs 5] [--stress 10] [--fuzz 60]
               [--rates 0,1000,10000,50000] [--allocs-per-cycle 4]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import alloclab as al
from alloclab import errors, schema, stats


def policies():
    out = []
    bottoms = [n for n, s in schema.layers().items() if not s.needs_backend]
    fronts = [n for n, s in schema.layers().items() if s.needs_backend and n != "failnth"]
    for spec in list(al.presets.values()) + bottoms + ["%s > buddy" % f for f in fronts]:
        try:
            if spec not in out and al.Policy(spec).nmi_safe and al.peers.needed(spec) is None:
                out.append(spec)
        except errors.AlloclabError:
            pass
    return out


def mean(p, k):
    v = p[k]
    return float(sum(v) / len(v)) if len(v) else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=0.5)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--stress", type=float, default=10.0)
    ap.add_argument("--rates", default="0,1000,10000,50000")
    ap.add_argument("--allocs-per-cycle", type=int, default=4)
    ap.add_argument("--fuzz", type=float, default=60.0, help="seconds per fuzz target, 0 = skip")
    a = ap.parse_args()
    rates = [int(x) for x in a.rates.split(",")]
    os.makedirs(os.path.join(os.path.dirname(__file__), "results"), exist_ok=True)
    lines, data = [], {"nmi": {}, "stress": {}}

    def say(s):
        print(s)
        sys.stdout.flush()
        lines.append(s)

    say("== NMI model: nmi workload, 1 and 2 workers, %d allocs/cycle, handler_objs=2, "
        "handler_frees=2, %.1f s x %d runs, cells interleaved run by run"
        % (a.allocs_per_cycle, a.duration, a.runs))
    say("   delivered: handler runs per second per worker; lost: the share of worker time "
        "the signals took, 1 - op/s / op/s at rate 0 (Welch p); per 10k/s: lost x 10k / rate; "
        "us/signal: lost / delivered")
    say("%-26s %2s %6s %11s %10s %10s %8s %8s %6s %16s %9s %9s" % (
        "policy", "P", "rate", "worker op/s", "delivered", "nmi op/s", "refused", "deferred",
        "errors", "lost (p)", "per 10k/s", "us/signal"))
    # first the signal alone: a handler that does nothing (the machine's floor)
    cases = [("signal only (buddy)", "buddy", dict(handler_objs=0, handler_frees=0))]
    cases += [(spec, spec, dict(handler_objs=2, handler_frees=2)) for spec in policies()]
    for label, spec, kw in cases:
        try:
            r = al.run("nmi", spec, runs=a.runs, producers=[1, 2], cpu="virtual",
                       duration=a.duration, warmup_cycles=20, rate=rates,
                       allocs_per_cycle=a.allocs_per_cycle, **kw)
        except errors.AlloclabError as e:
            say("%-26s ERROR %s" % (label, e))
            continue
        ms = r.metrics()
        cells = {(p.params["producers"], p.params["rate"]): p for p in r.points}
        for (nw, rate), p in sorted(cells.items()):
            base = cells.get((nw, 0))
            ops = mean(p, "throughput")
            el = mean(p, "elapsed_ns") / 1e9 if "elapsed_ns" in ms else a.duration
            runs = mean(p, "wl.nmi_handler_runs")  # counted with an empty handler too
            delivered = runs / el / nw if el else float("nan")
            served, refused = mean(p, "wl.nmi_served"), mean(p, "wl.nmi_refused")
            handed = mean(p, "wl.nmi_handed_freed")
            errs = float(sum(p["wl.nmi_free_errors"]))
            deferred = sum(mean(p, k) for k in ms if k.endswith(".nmi_frees_deferred"))
            attempts, frees = served + refused, served + handed
            nmi_ops = (attempts + frees) / el if el else float("nan")
            lost = pv = float("nan")
            if base is not None and rate:
                lost = 1 - ops / mean(base, "throughput")
                pv = stats.welch(base["throughput"], p["throughput"]).pvalue
            per10k = lost * 10000 / rate if rate else float("nan")
            us = lost / delivered * 1e6 if rate and delivered else float("nan")
            say("%-26s %2d %6d %11.3g %10.0f %10.0f %7.1f%% %7.1f%% %6d %16s %9s %9s" % (
                label, nw, rate, ops, delivered if rate else 0, nmi_ops,
                100 * refused / attempts if attempts else 0,
                100 * deferred / frees if frees else 0, errs,
                "%+.1f%% (%.2g)" % (100 * lost, pv) if lost == lost else "-",
                "%+.1f%%" % (100 * per10k) if per10k == per10k else "-",
                "%.1f" % us if us == us else "-"))
            data["nmi"].setdefault(label, {})["%dp/%d" % (nw, rate)] = dict(
                producers=nw, rate=rate, ops_per_sec=ops, nmi_ops_per_sec=nmi_ops,
                handler_runs=runs, delivered_per_worker=delivered, served=served,
                refused=refused, refused_busy=mean(p, "wl.nmi_refused_busy"),
                refused_nomem=mean(p, "wl.nmi_refused_nomem"), handed_freed=handed, deferred=deferred, time_lost=lost,
                time_lost_p=pv, time_lost_per_10k=per10k, us_per_signal=us, free_errors=errs)

    say("")
    say("== Long stress: stress workload, 2 workers, %.0f s per preset" % a.stress)
    for name, spec in al.presets.items():
        if al.peers.needed(spec) is not None or spec == "null":
            continue  # peers run in children; null hands out one block per CPU
        try:
            r = al.run("stress", spec, runs=1, producers=2, cpu="virtual",
                       duration=a.stress, warmup_cycles=1)
        except errors.AlloclabError as e:
            say("%-22s ERROR %s" % (name, e))
            data["stress"][name] = {"error": str(e)}
            continue
        p = r.points[0]
        d = {k: mean(p, "wl." + k) for k in ("stress_errors", "checked_bytes", "handoffs",
                                             "bulk_calls", "busy_retries")}
        say("%-22s errors %d  checked %.3g B  handoffs %d  bulk calls %d  busy retries %d" % (
            name, d["stress_errors"], d["checked_bytes"], d["handoffs"], d["bulk_calls"],
            d["busy_retries"]))
        data["stress"][name] = d

    if a.fuzz > 0:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        say("")
        say("== Fuzzing: libFuzzer + ASan/UBSan, %.0f s per target" % a.fuzz)
        subprocess.run(["make", "-s", "-j2", "fuzz"], cwd=root, check=True)
        data["fuzz"] = {}
        for fam in ("buddy", "front", "slab", "pages"):
            with tempfile.TemporaryDirectory() as d:
                p = subprocess.run(
                    [os.path.join(root, "build", "fuzz", "fuzz_" + fam),
                     "-max_total_time=%d" % a.fuzz, "-print_final_stats=1",
                     "-artifact_prefix=%s/build/fuzz/crash-%s-" % (root, fam), d,
                     os.path.join(root, "tests", "fuzz", "corpus", fam)],
                    capture_output=True, text=True)
            st = dict(re.findall(r"^stat::(\w+):\s+(\d+)", p.stderr, re.M))
            ok = p.returncode == 0
            say("fuzz_%-6s %s  %s executions, %s per second" % (
                fam, "ok     " if ok else "CRASHED", st.get("number_of_executed_units", "?"),
                st.get("average_exec_per_sec", "?")))
            data["fuzz"][fam] = dict(ok=ok, **{k: int(v) for k, v in st.items()})

    out = os.path.join(os.path.dirname(__file__), "results", "reliability")
    with open(out + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(out + ".json", "w") as f:
        json.dump(data, f, indent=1, default=str)


if __name__ == "__main__":
    main()
