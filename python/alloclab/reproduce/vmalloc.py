"""Reproduce seed 004: vmalloc asking the buddy for high-order pages, freeing
them page by page or in bulk (linux-mm, "mm/vmalloc: Add
attempt_larger_order_alloc parameter", Dec 2025).

Ryan Roberts' table normalises two kernels against v6.18 on lib/test_vmalloc:
"6-19-0-rc1" (high-order allocation, pages freed one by one) regresses most
tests by 20-45%; "vfree-high-order" (the same plus free_pages_bulk in vfree)
turns that into gains of up to 5x. Uladzislau Rezki then compares
fix_size_alloc_test at 3 and 100 pages (about -8% and +118%).

Here the three kernels are policies over the same page allocator:

    v6.18             vmalloc-default         order-0 bulk allocation, per-page free
    6-19-0-rc1        vmalloc-large           high orders first, per-page free
    vfree-high-order  vmalloc-large-bulkfree  high orders first, free_pages_bulk
    pcp-first         vmalloc-pcp-first       the thread's suggestion (an extra column
                                              with pcp_first=True: not in the seed's table)

each with arch=arm64 (the seed's h:1 rows at 16-256 pages differ from h:0
only where vmalloc_huge maps order-4 blocks with contiguous PTEs) and the
page allocator's PCP high split as on a 64-CPU machine (so the PCP reaches
its steady state within the scaled-down loops, as it does within the seed's
500000). Every row is one test alone (run_test_mask), sequential, run
``runs`` times on a fresh allocator with the policies interleaved run by run;
loops are the seed's times ``scale``. A first untimed pass brings the
process's simulated memory in (host page faults), as a kernel's memory
always is.

    import alloclab.reproduce as rep
    r = rep.vmalloc(scale=0.02, runs=5)
    print(r)            # the seed's table, Rezki's comparison, counters, verdicts
    r.plot()

Loops are calibrated per row so that every run's measured phase lasts at
least ``min_time`` (100 ms by default, pyperf's minimum), as pyperf
calibrates: untimed runs of each policy with a few loops (the first also
brings the process's simulated memory in), growing the loops until the
fastest policy's phase lasts min_time, at most the seed's loops. ``scale=``
fixes loops to the seed's times scale instead. Measured runs have no
warmup cycle: a test_vmalloc cycle is the whole test, and the per-CPU
lists' fill-up at the start of a run is a few batches against thousands of
loops.

Significance comes from alloclab.verdict, as every report's: per cell the
paired t interval of the per-run log-ratios (the policies of a row run back
to back in each round), Benjamini-Hochberg across the table, and a cell is
marked (R)/(I) only when significant and its change is at least
THRESHOLD_PCT. The seed's conclusions are claims judged by the same engine.
"""

import math

import numpy as np

from ..host import machine
from ..results import stats
from ..judge import verdict as V
from ..cbind._ffi import lib
from ..policies.policy import Policy, presets
from ..results.result import Result
from ..host.machine import collect_metadata
from ..measure.run import effort_defaults, plan as _plan, run_once as _run_once
from ._report import STEAL_RERUNS, Report, SeedCell, progress_bar, rerun_tally, run_round, side
from ..errors import UnknownNameError
from ..present import plot_reproduce

# Changes smaller than this are never marked (R)/(I), as alloclab.compare.
THRESHOLD_PCT = 2.0

# (kernel label, preset)
BASELINE = ("v6.18", "vmalloc-default")
DESIGNS = (("6-19-0-rc1", "vmalloc-large"), ("vfree-high-order", "vmalloc-large-bulkfree"))
EXTRA = ("pcp-first", "vmalloc-pcp-first")

# The seed's tests that ask for __GFP_ZERO: their rows are also run with
# zero=false, so that the report can say what zeroing decides.
ZEROING_TESTS = ("fix_align_alloc_test", "random_size_align_alloc_test")

TEST_BITS = {
    "fix_size_alloc_test": 1, "full_fit_alloc_test": 2, "long_busy_list_alloc_test": 4,
    "random_size_alloc_test": 8, "fix_align_alloc_test": 16,
    "random_size_align_alloc_test": 32, "align_shift_alloc_test": 64, "pcpu_alloc_test": 128,
    "kvfree_rcu_1_arg_vmalloc_test": 256, "kvfree_rcu_2_arg_vmalloc_test": 512,
    "vm_map_ram_test": 1024,
}

# The seed's table: (test, p, h, l, 6-19-0-rc1, vfree-high-order), each column
# (percent, mark) with mark "R", "I" or "" (not significant).
SEED_ROWS = (
    ("fix_align_alloc_test", 1, 0, 500000, (-40.69, "R"), (3.98, "I")),
    ("fix_size_alloc_test", 1, 0, 500000, (0.10, ""), (-1.47, "")),
    ("fix_size_alloc_test", 4, 0, 500000, (-22.74, "R"), (11.57, "I")),
    ("fix_size_alloc_test", 16, 0, 500000, (-23.63, "R"), (47.42, "I")),
    ("fix_size_alloc_test", 16, 1, 500000, (-1.58, ""), (106.01, "I")),
    ("fix_size_alloc_test", 64, 0, 100000, (-24.39, "R"), (99.12, "I")),
    ("fix_size_alloc_test", 64, 1, 100000, (2.34, "I"), (196.87, "I")),
    ("fix_size_alloc_test", 256, 0, 100000, (-23.29, "R"), (125.42, "I")),
    ("fix_size_alloc_test", 256, 1, 100000, (3.74, "I"), (238.59, "I")),
    ("fix_size_alloc_test", 512, 0, 100000, (-23.80, "R"), (132.38, "I")),
    ("fix_size_alloc_test", 512, 1, 100000, (-2.84, "R"), (514.75, "I")),
    ("full_fit_alloc_test", 1, 0, 500000, (2.74, ""), (0.33, "")),
    ("kvfree_rcu_1_arg_vmalloc_test", 1, 0, 500000, (0.58, ""), (1.36, "")),
    ("kvfree_rcu_2_arg_vmalloc_test", 1, 0, 500000, (-0.66, ""), (1.48, "")),
    ("long_busy_list_alloc_test", 1, 0, 500000, (-25.24, "R"), (77.95, "I")),
    ("pcpu_alloc_test", 1, 0, 500000, (-0.58, ""), (0.60, "")),
    ("random_size_align_alloc_test", 1, 0, 500000, (-45.75, "R"), (8.51, "I")),
    ("random_size_alloc_test", 1, 0, 500000, (-28.16, "R"), (65.34, "I")),
    ("vm_map_ram_test", 1, 0, 500000, (-0.54, ""), (-0.33, "")),
)

# Seed cells outside the goal, each with the kernel code that makes the
# seed's direction unreachable for any faithful model, declared before any
# run: {(test, p, h, design): reason}.
EXCUSED = {
    ("fix_size_alloc_test", 512, 1, "6-19-0-rc1"): (
        "a 2 MiB huge request maps with PMD_SHIFT (__vmalloc_node_range), so "
        "vm_area_alloc_pages gets the block order 9, which is the whole request; its "
        "large-order loop only tries orders above the block order, so 6.19-rc1 makes the "
        "same single order-9 allocation as v6.18: no change of the kernel's work follows"),
}

# Uladzislau Rezki's fix_size_alloc_test runs (loops 1000000, avg usec per run):
# default (v6.18) against the patch (high orders + bulk free).
SEED_REZKI = {
    3: ([541868, 542515, 541561, 542951], [585266, 594301, 598912, 589345]),
    100: ([5724919, 5721430, 5717224], [2629600, 2622811, 2629324]),
}
REZKI_LOOPS = 1000000


# ---------------------------------------------------------------- statistics

def change_pct(old, new):
    """The seed's normalisation for times: old / new - 1, in percent
    (positive = improvement)."""
    mo, mn = float(np.nanmean(old)), float(np.nanmean(new))
    return (mo / mn - 1.0) * 100.0 if mn > 0 else float("nan")


# ---------------------------------------------------------------- policies

def machine_policy(preset, arch="arm64", cpus=64):
    """A preset on the modelled machine: vmalloc's arch, the pages layer's
    CPUs (cpus=0: the run's own)."""
    layers = []
    for name, params in Policy(presets.get(preset, preset)).layers:
        params = dict(params)
        if name == "vmalloc":
            params["arch"] = arch
        elif name == "pages" and cpus:
            params["cpus"] = cpus
        layers.append((name, params))
    return str(Policy.from_layers(layers))


def _row_key(test, p, h):
    return "%s p:%d h:%d" % (test, p, h)


# ---------------------------------------------------------------- running

MIN_TIME = {"quick": 0.05, "normal": 0.1, "rigorous": 0.25}  # seconds per run, per effort
CALIBRATION_LOOPS = 0.001  # the calibration run's loops: the seed's times this


def vmalloc(scale=None, runs=None, threads=1, arch="arm64", cpus=64, pcp_first=False, tests=None,
            rezki=True, warm=True, nr_pcpu_objects=35000, seed=1, effort="normal",
            min_time=None, progress=False):
    """Run the seed's rows and return a VmallocReport.

    runs: runs per policy per row (fresh allocator each, the policies of a
    row back to back); effort ("quick", "normal", "rigorous") sets runs and
    min_time where they are not given. min_time: seconds each run's measured
    phase lasts at least: loops are calibrated per row. scale: fix loops to
    the seed's loops x scale instead (no calibration). threads: workers
    (test_vmalloc's nr_threads); tests: only these test names; rezki: also
    fix_size_alloc_test at 3 and 100 pages; warm: one untimed pass first
    (when loops are calibrated the calibration run is that pass).
    """
    runs, _, _ = effort_defaults(effort, runs, None, 0)
    min_time = _check_options(scale, min_time, tests, effort)
    designs = [BASELINE] + list(DESIGNS) + ([EXTRA] if pcp_first else [])
    specs = [machine_policy(p, arch, cpus) for _, p in designs]
    rows = [(t, p, h, l) for t, p, h, l, _, _ in SEED_ROWS if not tests or t in tests]
    if rezki:
        rows += [("fix_size_alloc_test", n, 0, REZKI_LOOPS) for n in sorted(SEED_REZKI)]
    task = _task_maker(threads, nr_pcpu_objects, seed)
    load_before = machine.loadavg()
    results, loops_used, ns_per_loop, tally = {}, {}, {}, rerun_tally()
    without_zero = {}
    todo = list(dict.fromkeys(rows))
    bar = progress_bar(len(todo), "alloclab reproduce vmalloc", progress, unit="row")
    for i, (t, p, h, l) in enumerate(todo):
        key = _row_key(t, p, h)
        if scale is not None:
            loops = {s: max(1, int(round(l * scale))) for s in specs}
            if warm:
                _rounds([task(s, t, p, h, loops[s], 1) for s in specs], 1)
        else:
            loops, ns_per_loop[key] = _calibrate(task, specs, (t, p, h, l), min_time, warm)
        loops_used[key] = {k: loops[s] for (k, _), s in zip(designs, specs)}
        tasks = [task(s, t, p, h, loops[s], runs) for s in specs]
        raws = _rounds(tasks, runs, STEAL_RERUNS, tally)
        meta = collect_metadata()
        meta["run"] = {"workload": "test_vmalloc", "runs": runs, "row": key}
        results[key] = Result.from_raw(meta, [(tk["point"], r) for tk, r in zip(tasks, raws)])
        if t in ZEROING_TESTS:
            zt = [task(s, t, p, h, loops[s], runs, zero=False) for s in specs]
            zr = _rounds(zt, runs, STEAL_RERUNS, tally)
            without_zero[key] = {k: [r["alloc_ns"] / r["alloc_ops"] for r in rr]
                                 for (k, _), rr in zip(designs, zr)}
        bar.update()
    bar.close()
    settings = {"scale": scale, "min_time": None if scale is not None else min_time,
                "runs": runs, "effort": effort, "threads": threads, "arch": arch, "cpus": cpus,
                "designs": [[k, p, s] for (k, p), s in zip(designs, specs)],
                "rows": [list(r) for r in todo], "loops": loops_used,
                "calibration_ns_per_loop": ns_per_loop, "without_zero": without_zero,
                "nr_pcpu_objects": nr_pcpu_objects, **tally,
                "load_before": load_before, "load_after": machine.loadavg()}
    return VmallocReport(results, settings)


def _check_options(scale, min_time, tests, effort):
    """vmalloc()'s scale, min_time and tests checked; returns min_time (the
    effort's default when None)."""
    if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
        raise ValueError("scale=%r: a positive fraction of the seed's loops" % (scale,))
    if min_time is None:
        min_time = MIN_TIME[effort]
    if not (isinstance(min_time, (int, float)) and min_time > 0):
        raise ValueError("min_time=%r: a positive number of seconds" % (min_time,))
    unknown = [t for t in (tests or ()) if t not in TEST_BITS]
    if unknown:
        raise UnknownNameError.make("test", unknown[0], list(TEST_BITS))
    return min_time


def _task_maker(threads, nr_pcpu_objects, seed):
    """task(spec, test, pages, huge, loops, nruns, warmup=0): one planned
    test_vmalloc task of a row on policy ``spec``."""
    def task(spec, test, p, h, loops, nruns, warmup=0, zero=True):
        return _plan("test_vmalloc", spec, runs=nruns, producers=threads, cycles=1,
                     warmup_cycles=warmup, run_test_mask=TEST_BITS[test], nr_pages=p, zero=zero,
                     use_huge=bool(h), test_loop_count=loops, sequential_test_order=True,
                     nr_pcpu_objects=nr_pcpu_objects, seed=seed, mem_sample=0)[1][0]
    return task


def _rounds(tasks, nruns, reruns=0, tally=None):
    """Runs of each task, round by round, the policies back to back (ABBA); a
    round disturbed by steal time is run again up to ``reruns`` times
    (run.run_round), counted into tally."""
    raws = [[] for _ in tasks]
    for i in range(nruns):
        got, _ = run_round(tasks, i, _run_once, reverse=i % 2 == 1, reruns=reruns, tally=tally)
        for j, r in enumerate(got):
            raws[j].append(r)
    return raws


def _calibrate(task, specs, row, min_time, warm):
    """({spec: loops}, {spec: ns per loop}) for one row, from untimed runs,
    as pyperf calibrates its loops, each policy on its own (their speeds
    differ up to 5x): the first brings memory in; then a policy's loops grow
    (at most 10x a step while a phase is under a few ms) until its phase
    lasts min_time, or the seed's loop count."""
    t, p, h, l = row
    loops = {s: max(1, int(round(l * CALIBRATION_LOOPS))) for s in specs}
    _rounds([task(s, t, p, h, loops[s], 1, warmup=1 if warm else 0) for s in specs], 1)
    ns_per_loop = {}
    pending = list(specs)
    while pending:
        raws = _rounds([task(s, t, p, h, loops[s], 1) for s in pending], 1)
        left = []
        for s, r in zip(pending, raws):
            took = float(r[0]["elapsed_ns"])
            ns_per_loop[s] = took / loops[s]
            if took >= min_time * 1e9 or loops[s] >= l:
                continue
            grow = calibrated_loops(min_time, ns_per_loop[s], l)
            loops[s] = grow if took >= 2e6 else min(10 * loops[s], grow)
            left.append(s)
        pending = left
    return loops, ns_per_loop


def calibrated_loops(min_time, ns_per_loop, seed_loops):
    """Loops for a measured phase of at least min_time seconds at ns_per_loop
    (with 10% to spare), at most the seed's own loop count."""
    if not ns_per_loop > 0:
        return seed_loops
    return max(1, min(seed_loops, int(math.ceil(1.1 * min_time * 1e9 / ns_per_loop))))


# ---------------------------------------------------------------- the report

class VmallocReport(Report):
    """The seed-004 experiment: a Result per row, and their reading."""

    FORMAT = "alloclab-vmalloc-report"
    TITLE = ("Seed 004: vmalloc with high-order pages and bulk vfree (lib/test_vmalloc), "
             "kernels as policies over one page allocator")
    WARN_METRICS = ()  # each row's own avg_usec metric: see warning_lines
    SEED_CELLS = ("every (R)/(I)-marked cell of the seed's table (row x kernel, ns per loop "
                  "against v6.18)")
    DIRECTION_THRESHOLD = THRESHOLD_PCT / 100.0

    def __init__(self, results, settings):
        super().__init__(results, settings)
        self.designs = [(k, p, s) for k, p, s in settings["designs"]]
        self._marks = None

    # -- access --

    def spec(self, label):
        for k, p, s in self.designs:
            if label in (k, p):
                return s
        raise KeyError(label)

    def _points(self, test, p, h, label):
        res = self.results.get(_row_key(test, p, h))
        if res is None:
            return []
        return res.select(policy=self.spec(label))

    def _side(self, test, p, h, label):
        """verdict.Side of a design's ns per loop on a row (the test's avg usec
        over its loops: each design's loops are calibrated on its own)."""
        pts = self._points(test, p, h, label)
        vals, starts, steal = [], [], []
        for pt in pts:
            usec = pt.data.get("wl.%s.avg_usec" % test)
            if usec is None:
                continue
            vals.append(np.asarray(usec, float) * 1e3 / pt.params["test_loop_count"])
            starts += list(pt.info.get("run_starts", []))
            steal.append(np.asarray(pt.data.get("steal_pct", []), float))
        if not vals:
            return None
        v = np.concatenate(vals)
        return V.Side(v, starts if len(starts) == len(v) else None,
                      np.concatenate(steal), pts[0].info.get("cpu_mode"), label)

    def samples(self, test, p, h, label, metric=None):
        """The runs of a row's metric for a design (kernel label or preset);
        default: ns per loop (the test's avg usec over its loops)."""
        if metric is None:
            s = self._side(test, p, h, label)
        else:
            s = side(self._points(test, p, h, label), metric)
        return None if s is None else s.values

    def loops(self, test, p, h, label=None):
        """The loops of a row (of one design, or the one they share), or None."""
        pts = self._points(test, p, h, label) if label else \
            (self.results.get(_row_key(test, p, h)) or Result({}, [])).points
        ls = {pt.params["test_loop_count"] for pt in pts}
        return ls.pop() if len(ls) == 1 else None

    def _rows(self):
        """(test, nr_pages, use_huge) of every row run (keys made by _row_key)."""
        out = []
        for key in self.results:
            test, p, h = key.split(" ")
            out.append((test, int(p[2:]), int(h[2:])))
        return out

    def _cell(self, test, p, h, label):
        """A verdict cell: the design against v6.18 on a row's ns per loop."""
        old = self._side(test, p, h, BASELINE[0])
        new = self._side(test, p, h, label)
        if old is None or new is None:
            return None
        return V.Claim.compare("%s p:%d h:%d" % (_short(test), p, h),
                               "wl.%s.loop_ns" % test, old, new)

    def _table_marks(self, alpha=0.05):
        """{(test, p, h, column): (p_adj, mark)}: a two-sided test per cell from
        the verdict engine's estimate, Benjamini-Hochberg over the table."""
        if self._marks is None:
            keys, ps = [], []
            for t, p, h in self._rows():
                for c in self.columns:
                    cell = self._cell(t, p, h, c)
                    if cell is None:
                        continue
                    e = cell.est
                    keys.append((t, p, h, c))
                    ps.append(min(1.0, 2 * min(e.p_above(0.0), e.p_below(0.0))))
            self._marks = dict(zip(keys, stats.bh_adjust(ps)))
        return self._marks

    def change(self, test, p, h, label, alpha=0.05):
        """(percent, adjusted p-value, mark) of a design against v6.18 on a row:
        marked only when significant after Benjamini-Hochberg and at least
        THRESHOLD_PCT."""
        old = self.samples(test, p, h, BASELINE[0])
        new = self.samples(test, p, h, label)
        if old is None or new is None:
            return float("nan"), float("nan"), ""
        pct = change_pct(old, new)
        adj = float(self._table_marks().get((test, p, h, label), float("nan")))
        mark = ("I" if pct > 0 else "R") if adj < alpha and abs(pct) >= THRESHOLD_PCT else ""
        return pct, adj, mark

    @property
    def columns(self):
        return [k for k, _, _ in self.designs[1:]]

    def seed_rows(self):
        return [r for r in SEED_ROWS if _row_key(r[0], r[1], r[2]) in self.results]

    def seed_cells(self):
        """The seed's (R)/(I)-marked cells that were run, each design against v6.18."""
        out = []
        for t, p, h, _l, *seed in self.seed_rows():
            for (label, _), (pct, mark) in zip(DESIGNS, seed):
                cell = self._cell(t, p, h, label) if mark else None
                if cell is not None:
                    out.append(SeedCell("%s p:%d h:%d %s" % (_short(t), p, h, label), pct,
                                        mark, cell, True, self.same_work(t, p, h, label),
                                        EXCUSED.get((t, p, h, label))))
        return out

    # Same work: every event counter's mean per vmalloc within SAME_WORK_REL of
    # the larger of the two, plus SAME_WORK_ABS, plus the 95% half-width of the
    # difference of the means (Welch, over the runs). Calibrated loops differ
    # between policies, so the same work differs per vmalloc by the warm-up's
    # share; and when the lazy purge runs is the scheduler's choice (its
    # worker thread), so its counters vary between runs of one design: a
    # difference within their uncertainty is not one of work. Counters that
    # do not vary between runs get no such allowance.
    SAME_WORK_REL = 0.02
    SAME_WORK_ABS = 0.05

    def work_counters(self, test, p, h):
        """The pages and vmalloc event counters a row's runs have (a metric with
        a per-op form: no gauges; no times)."""
        res = self.results.get(_row_key(test, p, h))
        if res is None:
            return []
        ms = set(res.metrics())
        return sorted(m for m in ms if m.split(".", 1)[0] in ("pages", "vmalloc") and
                      m + "_per_op" in ms and not m.endswith(("_ns", "_per_op")))

    def same_work(self, test, p, h, label):
        """Whether a design's runs of a row did the same counted work per vmalloc
        as v6.18's (every work counter within SAME_WORK_REL + SAME_WORK_ABS),
        as in the h:1 rows, where v6.18 and 6.19-rc1 both populate huge
        mappings with high orders and free per page: no direction can follow
        from the model there. False when either side has no counters."""
        names = self.work_counters(test, p, h)
        if not names:
            return False
        for m in names:
            ra = self._per_vmalloc_runs(test, p, h, BASELINE[0], m)
            rb = self._per_vmalloc_runs(test, p, h, label, m)
            if ra is None or rb is None:
                return False
            a, b = float(np.mean(ra)), float(np.mean(rb))
            if abs(a - b) > (self.SAME_WORK_REL * max(abs(a), abs(b)) + self.SAME_WORK_ABS +
                             stats.welch_half_width(ra, rb)):
                return False
        return True

    def _per_vmalloc_runs(self, test, p, h, label, metric):
        """A counter per vmalloc in each run of a row and design (finite runs
        only), or None when there are none."""
        vm = self.samples(test, p, h, label, "vmalloc.vmallocs")
        v = self.samples(test, p, h, label, metric)
        if vm is None or v is None:
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            x = np.asarray(v, float) / np.asarray(vm, float)
        x = x[np.isfinite(x)]
        return x if len(x) else None

    def counter_per_vmalloc(self, test, p, h, label, metric):
        """A counter metric per vmalloc (mean over runs) for a row and design."""
        x = self._per_vmalloc_runs(test, p, h, label, metric)
        return float("nan") if x is None else float(np.mean(x))

    # -- the seed's table --

    def table(self):
        """The seed's table: each design against v6.18 (positive =
        improvement; (R)/(I) where significant after Benjamini-Hochberg and at
        least 2%), then the seed's own two columns."""
        cols = self.columns + ["seed " + k for k, _ in DESIGNS]
        rows = []
        for t, p, h, _l, s1, s2 in self.seed_rows():
            lp = self.loops(t, p, h)
            label = "%s: p:%d, h:%d, l:%s (%s)" % (t, p, h, lp if lp else "calibrated",
                                                    "usec" if lp else "ns/loop")
            cells = []
            for c in self.columns:
                pct, _, mark = self.change(t, p, h, c)
                cells.append(_cell(pct, mark))
            cells += [_cell(v, m) for v, m in (s1, s2)]
            rows.append((label, cells))
        w0 = len("micromm/vmalloc")
        w1 = max([len("Result Class")] + [len(r[0]) for r in rows])
        ws = [max([len(c)] + [len(r[1][i]) for r in rows]) for i, c in enumerate(cols)]

        def line(ch="-"):
            return "+" + "+".join(ch * (w + 2) for w in [w0, w1] + ws) + "+"

        def fmt(a, b, cells):
            return "| %-*s | %-*s | " % (w0, a, w1, b) + " | ".join(
                "%-*s" % (w, c) for w, c in zip(ws, cells)) + " |"

        out = [line(), fmt("Benchmark", "Result Class", cols), line("=")]
        for i, (label, cells) in enumerate(rows):
            out.append(fmt("micromm/vmalloc" if i == 0 else "", label, cells))
        out.append(line())
        return "\n".join(out)

    def header(self):
        s = self.settings
        pols = "; ".join("%s = %s" % (k, spec) for k, _, spec in self.designs)
        loops = ("loops = seed x %g" % s["scale"] if s.get("scale") else
                 "loops calibrated per row and policy to >= %g ms per run, times in ns per "
                 "loop" % (1e3 * s["min_time"]))
        return ("test_vmalloc, %d thread%s, %s, %d runs per cell, the policies of a row back "
                "to back.\nPolicies: %s.\nNormalised to %s: positive = improvement (old/new "
                "- 1); (R)/(I) = significant (paired t on per-run log-ratios, p < 0.05 after "
                "Benjamini-Hochberg over the table) and at least %g%%." % (
                    s["threads"], "" if s["threads"] == 1 else "s", loops, s["runs"], pols,
                    BASELINE[0], THRESHOLD_PCT)) + self.irqflags_line()

    def irqflags_line(self):
        """Whether the zone lock's spin_lock_irqsave flags round trip ran:
        nothing for results recorded before the metadata said."""
        if not self.results:
            return ""
        ran = next(iter(self.results.values())).metadata.get("irqflags_executed")
        if ran is None:
            return ""
        if ran:
            return ("\nZone lock: spin_lock_irqsave's flags save and restore run on this CPU "
                    "(pushf/popf); only the privileged cli does not.")
        return ("\nZone lock: spin_lock_irqsave's flags save and restore cannot run at user "
                "level on this CPU: every zone-lock take lacks their cost.")

    # -- the kernel's summary lines --

    def summary_lines(self, test, p, h, label):
        """The kernel's "Summary:" line for each run of a row and design."""
        out = []
        for pt in self._points(test, p, h, label):
            for i in range(pt.runs):
                g = lambda k: pt.data["wl.%s.%s" % (test, k)][i]
                out.append("%s passed: %d failed: %d xfailed: %d repeat: %d loops: %d avg: %d usec"
                           % (test, g("passed"), g("failed"), g("xfailed"),
                              pt.params["test_repeat_count"], pt.params["test_loop_count"],
                              round(g("avg_usec"))))
        return out

    def rezki(self):
        """Uladzislau Rezki's comparison: fix_size_alloc_test at 3 and 100
        pages, default against high orders + bulk free."""
        patch = DESIGNS[1][0]
        out = []
        for n in sorted(SEED_REZKI):
            if _row_key("fix_size_alloc_test", n, 0) not in self.results:
                continue
            for label, title in ((BASELINE[0], "Default"), (patch, "Patch")):
                out.append("# %s(%d pages)" % (title, n))
                out += self.summary_lines("fix_size_alloc_test", n, 0, label)
            pct, _, mark = self.change("fix_size_alloc_test", n, 0, patch)
            old, new = SEED_REZKI[n]
            f = 1.0 / (1.0 + pct / 100.0) if np.isfinite(pct) else float("nan")
            sf = np.mean(new) / np.mean(old)
            out.append("=> %d pages: %s, %s (seed: %s)" % (
                n, _cell(pct, mark).strip(), V.factor_words(f, ("faster", "slower")),
                V.factor_words(sf, ("faster", "slower"))))
            out.append("")
        return "\n".join(out).rstrip()

    # -- counters --

    # (label, layer.counter): the pages layer's work, then the vmalloc
    # layer's own per area (its records, pages[] zeroing, page-table writes,
    # busy-tree locks, and the purges handed to the worker thread).
    COUNTERS = (
        ("zone locks/vmalloc", "pages.zone_lock_acquired"),
        ("pcp bypass/vmalloc", "pages.pcp_bypass"),
        ("pcp drains/vmalloc", "pages.pcp_drains"),
        ("merges/vmalloc", "pages.merges"),
        ("blocks freed/vmalloc", None),
        ("vm_structs/vmalloc", "vmalloc.vm_structs"),
        ("pages[] B zeroed/vmalloc", "vmalloc.array_bytes_zeroed"),
        ("PTEs written/vmalloc", "vmalloc.pte_writes"),
        ("busy-tree locks/vmalloc", "vmalloc.busy_lock_acquired"),
        ("purges queued/vmalloc", "vmalloc.purge_work_queued"),
    )

    def counter(self, test, p, h, label, name):
        """A counter per vmalloc (mean over runs) for a row and design."""
        key = dict(self.COUNTERS)[name]
        vm = self.samples(test, p, h, label, "vmalloc.vmallocs")
        if vm is None:
            return float("nan")
        if key is None:
            v = sum(np.asarray(self.samples(test, p, h, label, "pages.free_o%d" % o), float)
                    for o in range(lib.AL_MAX_PAGE_ORDER + 1))
        else:
            v = self.samples(test, p, h, label, key)
            if v is None:
                return float("nan")
        with np.errstate(invalid="ignore", divide="ignore"):
            return float(np.nanmean(np.asarray(v, float) / np.asarray(vm, float)))

    def counters(self, rows=None):
        """The counters that explain the table, per vmalloc."""
        if rows is None:
            want = {("fix_size_alloc_test", 4, 0), ("fix_size_alloc_test", 16, 0),
                    ("fix_size_alloc_test", 16, 1), ("fix_size_alloc_test", 512, 0),
                    ("fix_size_alloc_test", 512, 1), ("random_size_alloc_test", 1, 0),
                    ("fix_size_alloc_test", 100, 0)}
            rows = [k for k in [(t, p, h) for t, p, h, *_ in self.seed_rows()] +
                    [("fix_size_alloc_test", 100, 0)] if k in want and
                    _row_key(*k) in self.results]
        labels = [k for k, _, _ in self.designs]
        out = ["Counters that explain it (measured phase, per vmalloc; pages and vmalloc "
               "layers):",
               "  %-34s %-22s" % ("row", "counter") + "".join(l[:16].rjust(17) for l in labels)]
        for t, p, h in rows:
            for name, _ in self.COUNTERS:
                vals = [self.counter(t, p, h, l, name) for l in labels]
                out.append("  %-34s %-22s" % ("%s p:%d h:%d" % (t.replace("_alloc_test", ""), p,
                                                                h), name) +
                           "".join(("%.2f" % v if np.isfinite(v) else "-").rjust(17)
                                   for v in vals))
        return "\n".join(out)

    def zeroing(self):
        """The rows whose test asks for __GFP_ZERO: each design against v6.18
        with it (the table's runs) and without it (zero=false)."""
        wz = self.settings.get("without_zero") or {}
        seed = {(t, p, h): dict(zip(self.columns, (s1, s2)))
                for t, p, h, _l, s1, s2 in SEED_ROWS}
        out = []
        for key, by in wz.items():
            test, p, h = key.split(" ")
            p, h = int(p[2:]), int(h[2:])
            for label in self.columns:
                if label not in by:
                    continue
                zeroed = self.samples(test, p, h, label, "pages.pages_zeroed")
                vm = self.samples(test, p, h, label, "vmalloc.vmallocs")
                per = float(np.nanmean(np.asarray(zeroed, float) / np.asarray(vm, float))) \
                    if zeroed is not None and vm is not None else float("nan")
                pct, _, mark = self.change(test, p, h, label)
                without, lo, hi = stats.paired_change_pct(by[BASELINE[0]], by[label])
                out.append("  %-27s %-16s %+8.2f%% %+8.2f%% [%+6.1f, %+6.1f] %8.2f" % (
                    "%s p:%d h:%d" % (_short(test), p, h), label, pct, without, lo, hi, per))
                sp = seed.get((test, p, h), {}).get(label, (float("nan"), ""))[0]
                if mark and sp * pct < 0 and sp * lo > 0 and sp * hi > 0:
                    out.append("    the seed's sign (%+.2f%%) only without zeroing: on this "
                               "machine zeroing decides this cell" % sp)
        if not out:
            return ""
        return "\n".join([
            "Zeroing: the tests that ask for __GFP_ZERO, each design against v6.18 with it (the "
            "table) and\nwithout it (zero=false, the same loops and runs; 95% interval of the "
            "paired runs):",
            "  %-27s %-16s %9s %9s %16s %8s" % ("row", "design", "with", "without", "",
                                                "zeroed/vmalloc")] + out)

    # -- claims --

    def claims(self):
        large, bulk = DESIGNS[0][0], DESIGNS[1][0]
        words = ("faster", "slower")
        out = []
        sec = "the seed's table (against v6.18)"
        reg = [(t, p, h) for t, p, h, _l, s1, _s2 in self.seed_rows() if s1[1] == "R"]
        cells = [c for c in (self._cell(t, p, h, large) for t, p, h in reg) if c]
        if cells:
            out.append((sec, V.Claim(
                "high-order allocation with per-page free (%s) is slower in the rows the seed "
                "marks (R)" % large, cells, "higher", words=words),
                "(R) in %d rows, -22.7%% to -45.8%%" % len(cells)))
        imp = [(t, p, h) for t, p, h, _l, _s1, s2 in self.seed_rows() if s2[1] == "I"]
        cells = [c for c in (self._cell(t, p, h, bulk) for t, p, h in imp) if c]
        if cells:
            out.append((sec, V.Claim(
                "with bulk free (%s) the rows the seed marks (I) are faster" % bulk, cells,
                "lower", words=words), "(I) in %d rows, +4.0%% to +514.8%%" % len(cells)))
        fs = {(p, h): self._cell("fix_size_alloc_test", p, h, bulk)
              for t, p, h, *_ in self.seed_rows() if t == "fix_size_alloc_test"}
        fs = {k: v for k, v in fs.items() if v is not None}
        small = sorted(k for k in fs if k[0] <= 4)
        big = sorted(k for k in fs if k[0] >= 64)
        if small and big:
            cells = [V.Claim.contrast("p:%d h:%d against p:%d h:%d" % (b + s), fs[b], fs[s])
                     for b in big for s in small]
            out.append((sec, V.Claim(
                "bulk free gains more at >= 64 pages than at <= 4 (each large row's "
                "new/old ratio below each small row's)", cells, "lower", words=words),
                "+99% to +515% at >= 64 pages, -1.5% and +11.6% at <= 4"))
        hp = sorted(p for p, h in fs if h == 1 and (p, 0) in fs)
        if hp:
            cells = [V.Claim.contrast("p:%d h:1 against h:0" % p, fs[(p, 1)], fs[(p, 0)])
                     for p in hp]
            out.append((sec, V.Claim(
                "... and more with huge mappings (h:1 above h:0 at every size)", cells,
                "lower", words=words), "h:1 above h:0 by 59-383 points"))
        sec = "Uladzislau Rezki's comparison (v6.18 against high orders + bulk free)"
        c = self._cell("fix_size_alloc_test", 100, 0, bulk)
        if c is not None:
            out.append((sec, V.Claim(
                "at 100 pages the patch is at least 1.5x faster", [c], "lower", by=1.5,
                words=words), "2.18x faster"))
        c = self._cell("fix_size_alloc_test", 3, 0, bulk)
        if c is not None:
            out.append((sec, V.Claim("at 3 pages the patch is slower", [c], "higher",
                                     words=words), "1.09x slower"))
        return out

    # -- text --

    def body(self):
        parts = [self.header(), self.table()]
        rz = self.rezki()
        if rz:
            parts.append("Uladzislau Rezki's comparison (fix_size_alloc_test, v6.18 vs high "
                         "orders + bulk free):\n\n" + rz)
        parts.append(self.counters())
        zeroing = self.zeroing()
        if zeroing:
            parts.append(zeroing)
        failed = self.failures()
        if failed:
            parts.append("Test failures (kernel 'failed' counts): " + ", ".join(failed))
        return parts

    def settings_line(self):
        return self.effort_line()

    def warning_lines(self, wrap=104):
        cells = []
        for key, res in self.results.items():
            test = key.split(" ")[0]
            names = {spec: k for k, _, spec in self.designs}
            for params, st in res.stats("wl.%s.avg_usec" % test):
                cells.append(("%s %s" % (key, names.get(params.get("policy"),
                                                         params.get("policy"))), st))
        return stats.warning_lines(cells, wrap=wrap) + self.machine_lines()

    def failures(self):
        out = []
        for key, res in self.results.items():
            for pt in res.points:
                for k, v in pt.data.items():
                    if k.endswith(".failed") and np.nansum(v):
                        out.append("%s on %s: %d" % (key, pt.params["policy"], np.nansum(v)))
        return out

    @classmethod
    def figure_suffixes(cls, workloads=None):
        return ["", "sizes"]

    def figures(self):
        return list(zip([self.plot(), self.plot_sizes()], self.figure_suffixes()))

    # -- plots --

    def plot(self, ax=None):
        """Each design's speed against v6.18 per row (bars), the seed's as
        markers (alloclab.plot_reproduce.vmalloc_rows)."""
        return plot_reproduce.vmalloc_rows(self, DESIGNS, _short, ax=ax)

    def plot_sizes(self, ax=None):
        """fix_size_alloc_test: ns per loop against nr_pages, one line per
        design (alloclab.plot_reproduce.vmalloc_sizes)."""
        return plot_reproduce.vmalloc_sizes(self, ax=ax)


def _short(test):
    return test.replace("_alloc_test", "").replace("_vmalloc_test", "")


def summary_text(res):
    """The kernel's "Summary:" lines of a test_vmalloc Result: per grid
    point and run, one line per test that ran (counts summed over the
    workers and cycles of the run, avg = mean usec of one test call), then
    the per-operation figure (avg / loops)."""
    out = []
    for pt in res.points:
        tests = [t for t in TEST_BITS if "wl.%s.avg_usec" % t in pt.data]
        if not tests:
            continue
        out.append("# %s" % ", ".join("%s=%s" % (k, v) for k, v in pt.params.items()
                                      if k not in ("workload",)))
        loops = pt.params.get("test_loop_count", 0)
        for i in range(pt.runs):
            for t in tests:
                g = lambda k: pt.data["wl.%s.%s" % (t, k)][i]
                avg = g("avg_usec")
                out.append("%s passed: %d failed: %d xfailed: %d repeat: %d loops: %d avg: %d "
                           "usec (%.1f ns per loop)" % (
                               t, g("passed"), g("failed"), g("xfailed"),
                               pt.params.get("test_repeat_count", 1), loops, round(avg),
                               avg * 1e3 / loops if loops else float("nan")))
            if "wl.all_tests_usec" in pt.data:
                out.append("All test took %d usec (mean per worker)"
                           % round(pt.data["wl.all_tests_usec"][i]))
    return "\n".join(out)


def _cell(pct, mark):
    if not np.isfinite(pct):
        return "-"
    return "%s%.2f%%" % ("(%s) " % mark if mark else "", pct)
