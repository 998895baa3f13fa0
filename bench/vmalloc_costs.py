"""The figures that decide seed 004's table, from one interleaved run.

What it measures (fix_size_alloc_test on the reproduction's machine
policies: arm64, the pages layer's PCP split as on 64 CPUs):

  * fixed cost per vmalloc in pages' worth, from 3- and 100-page runs:
    per_page = (t100 - t3) / 97, fixed = t3 - 3 * per_page, for
    vmalloc-default and vmalloc-large-bulkfree beside the seed's
    (Rezki's 0.54/5.72 us and 0.59/2.63 us per loop);
  * vfree : vmalloc time on vmalloc-default at 100 pages (timing=per_op_sum
    times every vmalloc into alloc_ns and every vfree into free_ns), beside
    the seed profile's 59.6 : 36.6;
  * the 3- and 100-page ratios of vmalloc-large-bulkfree to
    vmalloc-default (seed 1.09x and 0.46x);
  * with --regression, the h:0 rows p:4..p:512 of the seed's table through
    `alloclab reproduce vmalloc` (its verdicts), vmalloc-large against
    vmalloc-default, beside the seed's -22.7% to -24.4%.

Runs are interleaved: every round runs each (preset, size) once, in
alternating order, on a fresh allocator; a cell's figure is the median over
rounds. The counters per vmalloc (the model's work) are printed with them.
Timing figures are only meaningful on a quiet machine.

    python bench/vmalloc_costs.py [--rounds 7] [--loops3 200000] [--regression]
"""
import argparse
import statistics
import sys

from alloclab.reproduce.vmalloc import machine_policy
from alloclab.run import plan as _plan, run_once as _run_once

PRESETS = ("vmalloc-default", "vmalloc-large-bulkfree")
SEED_US = {("vmalloc-default", 3): 0.542, ("vmalloc-default", 100): 5.721,
           ("vmalloc-large-bulkfree", 3): 0.592, ("vmalloc-large-bulkfree", 100): 2.627}
SEED_VFREE_VMALLOC = 59.64 / 36.64
COUNTERS = ("vmalloc.vm_structs", "vmalloc.pages_kmalloc", "vmalloc.pte_writes",
            "vmalloc.busy_lock_acquired", "vmalloc.purge_work_queued", "pages.zone_lock_acquired",
            "pages.pcp_bypass", "pages.merges")


def task(preset, pages, loops, timing="batch"):
    """One planned fix_size_alloc_test run (a fresh allocator each run)."""
    return _plan("test_vmalloc", machine_policy(preset), runs=1, producers=1, cycles=1,
                 warmup_cycles=0, run_test_mask=1, nr_pages=pages, test_loop_count=loops,
                 sequential_test_order=True, seed=1, mem_sample=0, timing=timing)[1][0]


def fixed_pages(t3, t100):
    """(fixed cost in pages' worth, per-page cost) from per-loop times."""
    per_page = (t100 - t3) / 97.0
    return (t3 - 3 * per_page) / per_page, per_page


def counters(raw, loops):
    """{layer.counter: per vmalloc} of one run's COUNTERS."""
    flat = {"%s.%s" % (l["layer"], k): v for l in raw["layers"] for k, v in l["counters"]}
    return {k: flat.get(k, float("nan")) / loops for k in COUNTERS}


def measure(rounds, loops3, loops100):
    """{(preset, pages): [ns per loop per round]}, {...: counters per vmalloc},
    [vfree/vmalloc ratio per round]."""
    cells = [(p, n) for p in PRESETS for n in (3, 100)]
    tasks = {c: task(c[0], c[1], loops3 if c[1] == 3 else loops100) for c in cells}
    timed = task("vmalloc-default", 100, loops100, timing="per_op_sum")
    for c in cells:
        _run_once(tasks[c], 0)  # brings the simulated memory in
    times = {c: [] for c in cells}
    ctrs, ratio = {}, []
    for r in range(rounds):
        for c in (cells if r % 2 == 0 else cells[::-1]):
            raw = _run_once(tasks[c], r)
            loops = c[1] and (loops3 if c[1] == 3 else loops100)
            times[c].append(raw["elapsed_ns"] / loops)
            ctrs[c] = counters(raw, loops)
        raw = _run_once(timed, r)
        if raw["alloc_ns"] > 0:
            ratio.append(raw["free_ns"] / raw["alloc_ns"])
    return times, ctrs, ratio


def report(times, ctrs, ratio):
    med = {c: statistics.median(v) for c, v in times.items()}
    print("fix_size_alloc_test, ns per loop (median of %d interleaved rounds)" %
          len(next(iter(times.values()))))
    for p in PRESETS:
        fm, pm = fixed_pages(med[(p, 3)], med[(p, 100)])
        fs, _ = fixed_pages(SEED_US[(p, 3)] * 1e3, SEED_US[(p, 100)] * 1e3)
        print("  %-24s 3p %7.0f  100p %8.0f   fixed = %5.1f pages' worth (seed %4.1f; "
              "goal %.1f-%.1f)" % (p, med[(p, 3)], med[(p, 100)], fm, fs, fs / 1.5, fs * 1.5))
    b, d = PRESETS[1], PRESETS[0]
    for n in (3, 100):
        seed = SEED_US[(b, n)] / SEED_US[(d, n)]
        print("  %s / %s at %3d pages: %.2fx (seed %.2fx)" % (b, d, n, med[(b, n)] / med[(d, n)],
                                                             seed))
    if ratio:
        print("  vfree : vmalloc time (vmalloc-default, 100 pages, per_op_sum): %.2f "
              "(seed profile %.2f; goal %.2f-%.2f)" % (statistics.median(ratio),
                                                       SEED_VFREE_VMALLOC,
                                                       SEED_VFREE_VMALLOC / 1.5,
                                                       SEED_VFREE_VMALLOC * 1.5))
    if any(ctrs.values()):
        print("counters per vmalloc (last round):")
        for c, v in sorted(ctrs.items()):
            print("  %-24s %3dp " % c + " ".join("%s=%.2f" % (k.split(".")[1], x)
                                                for k, x in v.items()))


def regression(runs):
    """The h:0 rows p:4..p:512 through the reproduction, with its verdicts."""
    import alloclab.reproduce as rep
    sizes = (4, 16, 64, 256, 512)
    r = rep.vmalloc(runs=runs, tests=["fix_size_alloc_test"], rezki=False)
    print("\n6-19-0-rc1 (vmalloc-large) against v6.18, h:0 rows:")
    for p in sizes:
        pct, adj, mark = r.change("fix_size_alloc_test", p, 0, "6-19-0-rc1")
        print("  p:%-4d %+7.2f%%  p_adj %.3g  %s   (seed (R) about -23%%; goal -11.5%% to "
              "-46%%, significant)" % (p, pct, adj, "(%s)" % mark if mark else "not significant"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--loops3", type=int, default=200000, help="loops of the 3-page runs")
    ap.add_argument("--loops100", type=int, default=20000, help="loops of the 100-page runs")
    ap.add_argument("--regression", action="store_true",
                    help="also the h:0 regression rows via alloclab reproduce vmalloc")
    ap.add_argument("--runs", type=int, default=5, help="runs per cell of --regression")
    a = ap.parse_args(argv)
    if a.rounds < 1 or a.loops3 < 1 or a.loops100 < 1:
        ap.error("--rounds, --loops3 and --loops100 must be positive")
    report(*measure(a.rounds, a.loops3, a.loops100))
    if a.regression:
        regression(a.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
