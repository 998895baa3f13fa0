"""The counters per operation of every preset on deterministic 1-producer runs.

The counter machinery and the fast paths may change how events are counted
(one per-CPU block per call, derived counters, stats levels) but never what
is counted: tests/test_counters_golden.py reruns these cells and compares
every counter with tests/data/counters_golden.json, recorded before that
work. `python tests/counters_golden.py` rewrites the file (only when a model
change is meant to change the counts; say so in the commit).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "data", "counters_golden.json")

# (policy, workload, workload parameters): 1 producer, fixed cycles and seed.
CELLS = [
    (p, "malloc-free", {"allocs_per_cycle": n, "size": 64})
    for p in ("buddy", "libarena-spill", "libarena-transfer", "libarena-transfer-v1",
              "libarena-magazine", "null", "percpu(guard=local) > buddy",
              "percpu(guard=local) > transfer > buddy", "kzalloc", "kmalloc-sheaves",
              "kmalloc-nolock", "bpf-ma", "pages")
    for n in (16, 256)
] + [
    (p, "larson", {}) for p in ("libarena-transfer", "kmalloc-sheaves", "kzalloc", "libarena-spill")
] + [
    # The vmalloc presets with the lazy purge inline: on its worker thread
    # (the default) when a purge runs depends on the scheduler.
    (p, "test-vmalloc", {"test_loop_count": 100, "nr_pcpu_objects": 500})
    for p in ("vmalloc(purge=inline) > pages", "vmalloc(alloc=high_order, purge=inline) > pages",
              "vmalloc(alloc=high_order, free=bulk, purge=inline) > pages",
              "vmalloc(alloc=pcp_first, free=bulk, purge=inline) > pages")
]
CYCLES = 200
# Values that are times or levels, not event counts.
SKIP_SUFFIXES = ("_ns", "_ticks")


def cell_key(policy, workload, params):
    return "%s | %s | %s" % (policy, workload, json.dumps(params, sort_keys=True))


def measure(policy, workload, params, **kw):
    """{layer.counter: value} of one deterministic run (event counts only)."""
    import alloclab

    res = alloclab.run(workload, policy, runs=1, producers=1, cpu="pinned",
                       warmup_cycles=0, cycles=2 if workload == "test-vmalloc" else CYCLES, seed=7, mem_sample=0, **params, **kw)
    (point,) = res.points
    out = {}
    for metric in point.data:
        if metric.endswith("_per_op") or "." not in metric or metric.startswith("wl."):
            continue
        layer, name = metric.split(".", 1)
        if name in ("bytes_held", "leaked") or name.endswith(SKIP_SUFFIXES):
            continue
        out[metric] = float(point.data[metric][0])
    return out


def main():
    golden = {}
    for policy, workload, params in CELLS:
        a = measure(policy, workload, params)
        b = measure(policy, workload, params)
        same = {k: v for k, v in a.items() if b.get(k) == v}
        golden[cell_key(policy, workload, params)] = same
        dropped = sorted(set(a) - set(same))
        print("%-60s %3d counters%s" % (cell_key(policy, workload, params), len(same),
                                        "; nondeterministic: " + ", ".join(dropped)
                                        if dropped else ""), file=sys.stderr)
    with open(GOLDEN, "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
