"""Reproduce seed 000: per-CPU caches in front of libarena's buddy allocator,
"spill" (percpu > buddy) against "transfer cache" (percpu > transfer > buddy),
plus a plain buddy ("no cache") for the cover letter's TL;DR.

The seed reports mean alloc and free latency over three runs at 1/2/4/8
producers for libarena-malloc-free and libarena-malloc-xfree, and argues from
counts: "one buddy lock per 8 objects", "two locks per free". This module runs
the same grid, prints it in the seed's layout, the counters that explain it,
and the seed's conclusions as claims judged by alloclab.verdict. Producers
beyond the usable CPUs run as virtual CPUs (at most one per real CPU at a
time): their latency never decides a verdict; the claims about them are made
on counters (buddy locks per operation), which 3 runs fix to well under 1%.

    import alloclab.reproduce as rep
    r = rep.libarena(producers=[1, 2])
    print(r)              # tables, counters, verdicts, warnings
    r.plot("alloc_ns")    # latency against producers, a panel per allocs/cycle
"""

import re

import numpy as np

from ..results import _counters
from ..host import machine
from ..judge import verdict as V
from ..cbind._ffi import lib
from ..policies.policy import Policy
from ..results.result import Result, uniq
from ..measure.run import effort_defaults, run as _run
from ._report import STEAL_RERUNS, Report, SeedCell, rerun_tally, side
from ..present import plot_reproduce

DESIGNS = (("transfer cache", "libarena-transfer"), ("spill", "libarena-spill"))
BASELINE = ("no cache", "buddy")
WORKLOADS = ("malloc-free", "malloc-xfree")
METRICS = (("alloc_ns", "allocation latency"), ("free_ns", "free latency"))
ALLOCS_PER_CYCLE = (1, 4, 16, 64, 256)
QUICK_ALLOCS_PER_CYCLE = (4, 64, 256)
# Seconds per run, per effort: 100 ms (pyperf's minimum) by default; --quick
# goes below it, and the report's warnings say so.
DURATION = {"quick": 0.05, "normal": 0.1, "rigorous": 0.5}

# Rows where the 16-slot per-CPU cache overflows (the seed's "interesting rows").
CACHE_CAPACITY = 16
BATCH = 8  # objects per refill/spill: a design constant of the modelled code

# The transfer cache's capacity per order, in batches of BATCH objects, swept
# at SWEEP_APC allocs/cycle (where its hit rate is lowest): the seed's "batches
# rarely go back to the buddy" holds from the smallest capacity at which at
# most RARELY of the spilled batches are flushed to the buddy, in every cell.
SWEEP_PREFIX = "transfer capacity, "
CAPACITIES = (1, 2, 4, 8, 16, 32, 64)
QUICK_CAPACITIES = (2, 8, 32)
SWEEP_APC = 256
RARELY = 0.10

# The seed's tables (16-vCPU VM, mean of 3 runs, ns): (workload, metric, design,
# allocs/cycle) -> [1p, 2p, 4p, 8p]. Shown beside the verdicts, never in them.
SEED_PRODUCERS = (1, 2, 4, 8)
SEED_NS = {
    ("malloc-free", "alloc_ns", "transfer cache", 64): [75, 142, 191, 380],
    ("malloc-free", "alloc_ns", "transfer cache", 256): [104, 149, 240, 446],
    ("malloc-free", "alloc_ns", "spill", 64): [102, 210, 444, 952],
    ("malloc-free", "alloc_ns", "spill", 256): [112, 230, 517, 1110],
    ("malloc-free", "free_ns", "transfer cache", 64): [75, 97, 140, 331],
    ("malloc-free", "free_ns", "transfer cache", 256): [137, 107, 179, 404],
    ("malloc-free", "free_ns", "spill", 64): [137, 252, 508, 1014],
    ("malloc-free", "free_ns", "spill", 256): [156, 267, 668, 1244],
    ("malloc-xfree", "alloc_ns", "transfer cache", 64): [76, 164, 206, 399],
    ("malloc-xfree", "alloc_ns", "transfer cache", 256): [101, 210, 264, 482],
    ("malloc-xfree", "alloc_ns", "spill", 64): [103, 231, 450, 966],
    ("malloc-xfree", "alloc_ns", "spill", 256): [110, 252, 592, 1188],
    ("malloc-xfree", "free_ns", "transfer cache", 64): [74, 99, 128, 311],
    ("malloc-xfree", "free_ns", "transfer cache", 256): [132, 119, 164, 408],
    ("malloc-xfree", "free_ns", "spill", 64): [137, 246, 492, 1002],
    ("malloc-xfree", "free_ns", "spill", 256): [154, 306, 614, 1218],
}


def on_tree(spec, tree, caches_above=False):
    """The spec with its bottom layer (the model's buddy) replaced by the real
    code of a libarena tree, canonical (the tree's registered layer name).
    The model's parameters of that layer are dropped: the tree has its own
    constants. A tree with per-CPU caches of its own refuses caches above it
    unless caches_above (IncompatiblePolicyError)."""
    from ..policies import libarena_real

    tree = libarena_real.check_tree(tree)
    layers = [n if not p else "%s(%s)" % (n, p) for n, p in _split(spec)]
    bottom = "libarena(tree=%s%s)" % (tree, ", caches_above=true" if caches_above else "")
    return str(Policy(" > ".join(layers[:-1] + [bottom])))


def _split(spec):
    """[(layer, its parameters as written)] of a spec, top first, canonical."""
    out = []
    for part in str(Policy(spec)).split(" > "):
        name, _, rest = part.partition("(")
        out.append((name.strip(), rest[:-1] if rest.endswith(")") else rest))
    return out


def libarena(producers=(1, 2, 4, 8), allocs_per_cycle=None, runs=None, size=64,
             timings=("per_op_sum",), workloads=WORKLOADS, duration=None, warmup_cycles=20,
             baseline=True, effort="normal", threshold=0.05, progress=False, stats="lite",
             capacities=None, tree=None, caches_above=False):
    """Run the seed's grid and return a LibarenaReport.

    Every workload x design x producers x allocs/cycle x timing point is run
    ``runs`` times on a fresh allocator, the designs of a cell back to back.
    effort ("quick", "normal", "rigorous") sets runs and duration where they
    are not given; cells at producers above the usable CPUs (virtual CPUs,
    judged on counters) get at most half the runs, at least 3. threshold:
    the margin of "the same" (the seed's "within noise"). stats: the stats
    level of every run ("lite": every counter but the lock times, whose
    rows read "n/a"; "full" times the locks too; "off": no counters, every
    counter row "n/a"). Memory is read at the phase's ends only (mem_sample=0).
    capacities: the transfer cache's batches per order to sweep at
    SWEEP_APC allocs/cycle (default CAPACITIES, QUICK_CAPACITIES at quick;
    () skips the sweep); judged on counters, so short runs suffice.
    tree: every design runs on the tree's own buddy.bpf.c (on_tree; runs
    isolated, unchecked); caches_above: allow the model's caches above a
    tree with per-CPU caches of its own.
    """
    runs, _, _ = effort_defaults(effort, runs, None, 0)
    duration = DURATION[effort] if duration is None else duration
    if effort == "quick":
        allocs_per_cycle = allocs_per_cycle or QUICK_ALLOCS_PER_CYCLE
    allocs_per_cycle = list(allocs_per_cycle or ALLOCS_PER_CYCLE)
    load_before = machine.loadavg()
    designs, real_buddy = _designs(baseline, tree, caches_above)
    unchecked = {"check": False} if real_buddy else {}
    usable = int(lib.al_cpus_usable())
    real = [p for p in producers if p <= usable]
    virt = [p for p in producers if p > usable]
    vruns = min(runs, max(3, runs // 2))
    results = {}
    for wl in workloads:
        parts = []
        for prods, n in ((real, runs), (virt, vruns)):
            if prods:
                parts.append(_run(wl, [spec for _, spec in designs], runs=n, producers=prods,
                                  allocs_per_cycle=allocs_per_cycle, size=size,
                                  timing=list(timings), duration=duration,
                                  warmup_cycles=warmup_cycles, mem_sample=0,
                                  progress=progress, stats=stats, steal_reruns=STEAL_RERUNS,
                                  **unchecked))
        results[wl] = Result.concat(parts) if len(parts) > 1 else parts[0]
    if capacities is None:
        capacities = QUICK_CAPACITIES if effort == "quick" else CAPACITIES
    for wl in workloads if capacities else ():
        results[SWEEP_PREFIX + wl] = _sweep(wl, capacities, tree, caches_above, runs, producers,
                                            size, duration, warmup_cycles, progress, stats,
                                            unchecked)
    settings = {"designs": [list(d) for d in designs], "effort": effort, "runs": runs,
                "virtual_runs": vruns if virt else None, "duration": duration, "size": size,
                "threshold": threshold, "usable_cpus": usable, "stats": stats}
    if real_buddy:
        settings["real_buddy"] = real_buddy
    settings.update(_rerun_totals([results[wl] for wl in workloads]))
    settings["load_before"], settings["load_after"] = load_before, machine.loadavg()
    return LibarenaReport(results, settings)


def _designs(baseline, tree, caches_above):
    """The designs (name, spec) run, on a tree's own buddy when one is named,
    and what the report says of that tree ({} without one)."""
    from ..policies import libarena_real

    designs = list(DESIGNS) + ([BASELINE] if baseline else [])
    if tree is None:
        return designs, {}
    designs = [(d, on_tree(spec, tree, caches_above)) for d, spec in designs]
    return designs, {"tree": libarena_real.info(tree), "layer": _split(designs[0][1])[-1][0],
                     "caches_above": bool(caches_above)}


def _sweep(wl, capacities, tree, caches_above, runs, producers, size, duration, warmup_cycles,
           progress, stats, unchecked):
    """The transfer capacity sweep of one workload."""
    return _run(wl, [_capacity_spec(b, tree, caches_above) for b in capacities],
                runs=min(runs, 3), producers=list(producers), allocs_per_cycle=SWEEP_APC,
                size=size, timing="batch", duration=duration, warmup_cycles=warmup_cycles,
                mem_sample=0, progress=progress, stats="lite" if stats == "off" else stats,
                **unchecked)


def _rerun_totals(results):
    """The rounds run again for steal time over the grid's Results (the
    rerun_tally of each run() with steal_reruns), for the setup line."""
    tot = rerun_tally()
    for res in results:
        for part in res.metadata.get("parts", [res.metadata]):
            run = part.get("run", {})
            for k, v in tot.items():
                tot[k] = max(v, run.get(k, v)) if k.endswith("_max_pct") else v + run.get(k, 0)
    return tot


def _capacity_spec(batches, tree=None, caches_above=False):
    spec = "percpu > transfer(batches=%d) > buddy" % batches
    return spec if tree is None else on_tree(spec, tree, caches_above)


def _batches_of(policy):
    """The transfer layer's batches in a swept spec (its default when the
    spec, normalised, leaves it out)."""
    m = re.search(r"transfer\(.*?batches=(\d+)", policy)
    return int(m.group(1)) if m else Policy("transfer > buddy").params(0)["batches"]


def _seed_factor(wl, metric, new, old, apcs, prods):
    """The seed's new/old ratio range over its cells, as words (context only)."""
    fs = []
    for a in apcs:
        n, o = SEED_NS.get((wl, metric, new, a)), SEED_NS.get((wl, metric, old, a))
        if n and o:
            fs += [n[SEED_PRODUCERS.index(p)] / o[SEED_PRODUCERS.index(p)]
                   for p in prods if p in SEED_PRODUCERS]
    return V.describe_range(min(fs), max(fs), ("faster", "slower")) if fs else ""


class LibarenaReport(Report):
    """The seed-000 experiment: a Result per workload, and their reading."""

    FORMAT = "alloclab-libarena-report"
    TITLE = ("Seed 000: per-CPU caches in front of libarena's buddy: transfer cache against "
             "spill (and no cache)")
    SEED_CELLS = ("every (workload, metric, allocs/cycle, producers) cell of the seed's "
                  "transfer-vs-spill table at producer counts on real CPUs here, transfer cache "
                  "against spill (spill/transfer - 1)")

    def direction_threshold(self):
        return self.settings["threshold"]

    def seed_cells(self, timing=None):
        """The seed's table's cells at the real-CPU producer counts run."""
        timing = timing or (self.timings or ["per_op_sum"])[0]
        prods = [p for p in self.producers if p <= self.usable and p in SEED_PRODUCERS]
        out = []
        for (wl, m, d, a), ns in SEED_NS.items():
            if d != "transfer cache" or wl not in self.workloads:
                continue
            spill = SEED_NS[(wl, m, "spill", a)]
            for p in prods:
                cells = self._cells("transfer cache", "spill", [m], [p], [a], timing, [wl])
                i = SEED_PRODUCERS.index(p)
                if cells:
                    cells[0].label = "%s %s %dp/%d" % (wl, m, p, a)
                    out.append(SeedCell(cells[0].label, 100.0 * (spill[i] / ns[i] - 1.0),
                                        None, cells[0], True))
        return out

    def cell_label(self, key, params):
        return "%s %s %dp/%d" % (key, params.get("policy"), params.get("producers", 0),
                                 params.get("allocs_per_cycle", 0))

    def __init__(self, results, settings=None):
        settings = dict(settings or {})
        settings.setdefault("designs", [list(d) for d in DESIGNS + (BASELINE,)])
        settings.setdefault("threshold", 0.05)
        settings.setdefault("usable_cpus", int(lib.al_cpus_usable()))
        super().__init__(results, settings)
        self.designs = [tuple(d) for d in settings["designs"]]
        self.usable = settings["usable_cpus"]

    # -- access --

    @property
    def workloads(self):
        """The seed's workloads run (the capacity sweep's Results aside)."""
        return [k for k in self.results if not k.startswith(SWEEP_PREFIX)]

    def points(self, workload, design, timing, producers, allocs_per_cycle):
        res = self.results.get(workload)
        if res is None:
            return []
        return res.select(policy=dict(self.designs)[design], timing=timing,
                          producers=producers, allocs_per_cycle=allocs_per_cycle)

    def metric(self, key):
        """A counter's key in the Results: "buddy.*" is the real tree's layer
        when the report ran on one."""
        real = self.settings.get("real_buddy")
        if real and key.startswith("buddy."):
            return real["layer"] + key[len("buddy"):]
        return key

    def cell(self, workload, design, metric, timing, producers, allocs_per_cycle):
        """The metric's runs (NumPy array) for one cell, or None."""
        metric = self.metric(metric)
        s = side(self.points(workload, design, timing, producers, allocs_per_cycle), metric)
        return None if s is None else s.values

    def mean(self, *key):
        v = self.cell(*key)
        return float(np.nanmean(v)) if v is not None and len(v) else float("nan")

    def _axis(self, key):
        return sorted({p.params[key] for wl in self.workloads for p in self.results[wl].points})

    @property
    def producers(self):
        return self._axis("producers")

    @property
    def allocs_per_cycle(self):
        return self._axis("allocs_per_cycle")

    @property
    def timings(self):
        return [t for t in ("per_op_sum", "batch") if t in self._axis("timing")]

    def _runs(self):
        return "/".join(str(r) for r in sorted({p.runs for wl in self.workloads
                                                for p in self.results[wl].points}))

    # -- the seed's tables --

    def table(self, workload, metric, timing, designs=None):
        """One seed-layout table: designs side by side, producers as columns."""
        designs = designs or [d for d, _ in self.designs]
        prods = self.producers
        colw = 6
        blockw = colw * len(prods)
        desc = dict(METRICS).get(metric, metric)
        lines = ["libarena-%s, %s (ns, lower is better), %s timing, mean of %s runs:" % (
            workload, desc, timing, self._runs()), ""]
        lines.append((" " * 14 + "  ".join(d.center(blockw) for d in designs)).rstrip())
        lines.append("  allocs/cycle" + "  ".join(
            "".join(("%dp" % p).rjust(colw) for p in prods) for _ in designs))
        for apc in self.allocs_per_cycle:
            cells = ["".join(("%.0f" % self.mean(workload, d, metric, timing, p, apc)).rjust(colw)
                             for p in prods) for d in designs]
            lines.append(("%d" % apc).rjust(14) + "  ".join(cells))
        return "\n".join(lines)

    # -- counters --

    COUNTERS = (
        ("buddy locks/op", "buddy.lock_acquired_per_op"),
        ("buddy lock wait ns/op", "buddy.lock_wait_ns_per_op"),
        ("spills/op", "percpu.spills_per_op"),
        ("refills/op", "percpu.misses_per_op"),
        ("transfer hit rate", None),
        ("transfer locks/op", "transfer.lock_acquired_per_op"),
        ("transfer wait ns/op", "transfer.lock_wait_ns_per_op"),
    )

    def counter(self, workload, design, name, timing, producers, allocs_per_cycle):
        """The counter row ``name``'s mean in one cell; None where the run's
        stats level did not measure it (shown "n/a"), NaN where no run has it."""
        key = dict(self.COUNTERS)[name]
        c = lambda k: self.mean(workload, design, k, timing, producers, allocs_per_cycle)
        pts = self.points(workload, design, timing, producers, allocs_per_cycle)
        key = None if key is None else self.metric(key)
        keys = [key] if key is not None else ["transfer.remove_hits", "transfer.insert_hits",
                                              "transfer.remove_misses", "transfer.insert_misses"]
        if pts and any(_counters.unmeasured(p, k) for p in pts for k in keys):
            return None
        if key is not None:
            return c(key)
        hits = c("transfer.remove_hits") + c("transfer.insert_hits")
        total = hits + c("transfer.remove_misses") + c("transfer.insert_misses")
        return hits / total if total > 0 else float("nan")

    def counters(self, timing=None, rows=None):
        timing = timing or self.timings[0]
        rows = rows or [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY] or \
            self.allocs_per_cycle[-1:]
        prods = self.producers
        lines = ["Counters that explain it (measured phase, per alloc+free op; %s timing):"
                 % timing]
        for wl in self.workloads:
            for a in rows:
                lines += ["", "libarena-%s, %d allocs/cycle:" % (wl, a),
                          "  %-16s %-22s" % ("design", "counter") +
                          "".join(("%dp" % p).rjust(9) for p in prods)]
                for d, _ in self.designs:
                    for name, _ in self.COUNTERS:
                        if d != "transfer cache" and name.startswith("transfer"):
                            continue
                        if d == BASELINE[0] and name in ("spills/op", "refills/op"):
                            continue
                        vals = [self.counter(wl, d, name, timing, p, a) for p in prods]
                        lines.append("  %-16s %-22s" % (d, name) + "".join(
                            ("n/a" if v is None else "%.3f" % v if np.isfinite(v) else "-")
                            .rjust(9) for v in vals))
        if any("n/a" in line for line in lines):
            lines += ["", "n/a: not measured at stats=%s (lock times need stats=full; "
                      "stats=off counts nothing)" % self.settings.get("stats", "lite")]
        return "\n".join(lines)

    # -- the transfer cache's capacity --

    def capacity_rows(self, workload):
        """The capacity sweep on ``workload``: {batches: {producers: (flushed,
        hit rate)}}, flushed = the share of spilled batches sent to the buddy
        (backend_flushes over insert hits and misses), hit rate as the
        counters' row. Empty when the sweep was not run."""
        res = self.results.get(SWEEP_PREFIX + workload)
        out = {}
        for p in res.points if res is not None else ():
            out.setdefault(_batches_of(p.params["policy"]), {}).setdefault(
                p.params["producers"], []).append(p)
        for b, by in out.items():
            for prods, pts in by.items():
                c = lambda k: float(np.nanmean(side(pts, k).values))
                spilled = c("transfer.insert_hits") + c("transfer.insert_misses")
                moved = spilled + c("transfer.remove_hits") + c("transfer.remove_misses")
                hits = c("transfer.insert_hits") + c("transfer.remove_hits")
                by[prods] = (c("transfer.backend_flushes") / spilled if spilled else np.nan,
                             hits / moved if moved else np.nan)
        return dict(sorted(out.items()))

    def capacity_holds(self, workload):
        """The smallest batches per order from which at most RARELY of the
        spilled batches go back to the buddy at every producer count (and at
        every larger capacity swept), or None."""
        rows = self.capacity_rows(workload)
        found = None
        for b in sorted(rows, reverse=True):
            if not all(f <= RARELY for f, _ in rows[b].values()):
                break
            found = b
        return found

    def capacity_table(self, workload):
        rows = self.capacity_rows(workload)
        if not rows:
            return ""
        prods = sorted({p for by in rows.values() for p in by})
        w = 7 * len(prods)
        lines = ["libarena-%s, transfer cache capacity swept at %d allocs/cycle "
                 "(percpu > transfer(batches=B) > %s, %d objects per batch; counters):"
                 % (workload, SWEEP_APC, self.bottom(), BATCH), "",
                 "  batches  objects  " + "flushed to buddy".center(w) + "  " +
                 "transfer hit rate".center(w),
                 " " * 19 + "".join(("%dp" % p).rjust(7) for p in prods) + "  " +
                 "".join(("%dp" % p).rjust(7) for p in prods)]
        for b, by in rows.items():
            cell = lambda i: "".join(("%.3f" % by[p][i] if p in by else "-").rjust(7)
                                     for p in prods)
            lines.append("%9d%9d  %s  %s" % (b, b * BATCH, cell(0), cell(1)))
        lines += ["", self._capacity_line(workload, rows)]
        return "\n".join(lines)

    def bottom(self):
        """The layer that ran as the buddy: the tree's (libarena_<hash>)
        when the report ran on a libarena tree, else the model's buddy."""
        real = self.settings.get("real_buddy")
        return real["layer"] if real else "buddy"

    def _capacity_line(self, workload, rows):
        b = self.capacity_holds(workload)
        claim = "'batches rarely go back to the buddy' (at most %d%% of spilled batches " \
            "flushed, every producer count)" % round(100 * RARELY)
        if b is None:
            return "%s does not hold up to batches=%d." % (claim, max(rows))
        hit = [h for _, h in rows[b].values()]
        return "%s holds from batches=%d (%d objects per order), transfer hit rate " \
            "%.2f-%.2f there." % (claim, b, b * BATCH, min(hit), max(hit))

    # -- claims --

    def _cells(self, new, old, metrics, producers, apcs, timing, workloads=None):
        cells = []
        for wl in workloads or self.workloads:
            for p in producers:
                for a in apcs:
                    for m in metrics:
                        so = side(self.points(wl, old, timing, p, a), self.metric(m), old)
                        sn = side(self.points(wl, new, timing, p, a), self.metric(m), new)
                        if so is None or sn is None:
                            continue
                        label = "%s%dp/%d%s" % ("" if workloads and len(workloads) == 1
                                                else wl + " ", p, a,
                                                "" if len(metrics) == 1 else " " + m[:-3])
                        cells.append(V.Claim.compare(label, m, so, sn))
        return cells

    def claims(self, timing=None):
        timing = timing or self.timings[0]
        out = []
        for wl in self.workloads:
            out += self._design_claims(wl, timing)
        if any(d == BASELINE[0] for d, _ in self.designs):
            out += self._baseline_claims(timing)
        return out

    def _grid(self):
        """(real, real2, virt, big, hit): the producer counts on real CPUs, those
        of them >= 2, those on virtual CPUs; the allocs/cycle that overflow the
        cache and those it holds."""
        real = [p for p in self.producers if p <= self.usable]
        return (real, [p for p in real if p >= 2],
                [p for p in self.producers if p > self.usable],
                [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY],
                [a for a in self.allocs_per_cycle if a <= CACHE_CAPACITY])

    def _design_claims(self, wl, timing):
        """The seed's claims about transfer cache against spill on ``wl``."""
        thr = self.settings["threshold"]
        real, real2, virt, big, hit = self._grid()
        lat = [m for m, _ in METRICS]
        words = ("faster", "slower")
        out = []
        sec = "libarena-%s (%s frees)" % (wl, "cross-CPU" if wl == "malloc-xfree"
                                          else "same-CPU")
        if real2 and big:
            cells = self._cells("transfer cache", "spill", lat, real2, big, timing, [wl])
            if cells:
                out.append((sec, V.Claim(
                    "at %s producers and %s allocs/cycle the transfer cache cuts alloc and "
                    "free time against spill" % ("/".join(map(str, real2)),
                                                 "/".join(map(str, big))),
                    cells, "lower", words=words),
                    "alloc %s, free %s at 2-8 producers" % (
                        _seed_factor(wl, "alloc_ns", "transfer cache", "spill", big,
                                     (2, 4, 8)),
                        _seed_factor(wl, "free_ns", "transfer cache", "spill", big,
                                     (2, 4, 8)))))
        if virt and big:
            cells = self._cells("transfer cache", "spill", ["buddy.lock_acquired_per_op"],
                                virt, big, timing, [wl])
            if cells:
                out.append((sec, V.Claim(
                    "at %s producers (virtual CPUs: judged on counters) the transfer "
                    "cache takes fewer buddy locks per op than spill" % "/".join(
                        map(str, virt)), cells, "lower", words=("fewer", "more")),
                    "its 4/8-producer latency gaps come from buddy lock contention"))
        if real and hit:
            cells = self._cells("transfer cache", "spill", lat, real, hit, timing, [wl])
            if cells:
                out.append((sec, V.Claim(
                    "at <= %d allocs/cycle (cache hits) the two designs are the same "
                    "within %g%%" % (CACHE_CAPACITY, 100 * thr), cells, "same",
                    margin=thr, words=words),
                    "differences there are code layout or noise, 2-9 ns both ways"))
        if 1 in real and 256 in self.allocs_per_cycle:
            cells = self._cells("transfer cache", "spill", ["free_ns"], [1], [256], timing,
                                [wl])
            if cells:
                seed = {"malloc-free": "137 vs 156 ns", "malloc-xfree": "132 vs 154 ns"}
                out.append((sec, V.Claim(
                    "at 1 producer and 256 allocs/cycle the transfer cache frees faster "
                    "than spill", cells, "lower", words=words), seed.get(wl, "")))
        return out

    def _baseline_claims(self, timing):
        """The TL;DR's claims: each per-CPU cache design against the plain buddy."""
        real, _, virt, big, _ = self._grid()
        lat = [m for m, _ in METRICS]
        words = ("faster", "slower")
        out = []
        sec = "per-CPU caches against no cache (plain buddy)"
        for d, _ in self.designs:
            if d == BASELINE[0]:
                continue
            if 1 in real:
                cells = self._cells(d, BASELINE[0], lat, [1], self.allocs_per_cycle,
                                    timing)
                if cells:
                    out.append((sec, V.Claim(
                        "%s: at 1 producer at least 2x faster than no cache" % d, cells,
                        "lower", by=2.0, words=words),
                        "TL;DR: 2-4x lower alloc/free latency single-threaded"))
            if virt and big:
                cells = self._cells(d, BASELINE[0], ["buddy.lock_acquired_per_op"],
                                    [max(virt)], big, timing)
                if cells:
                    out.append((sec, V.Claim(
                        "%s: at %d producers (virtual CPUs: judged on counters) at least "
                        "%dx fewer buddy locks per op than no cache (one per batch of %d)"
                        % (d, max(virt), BATCH, BATCH), cells, "lower", by=float(BATCH),
                        words=("fewer", "more")),
                        "TL;DR: 10-100x lower latency for 8 producers"))
        return out

    # -- text --

    def cpu_note(self):
        virt = [p for p in self.producers if p > self.usable]
        if not virt:
            return "All producers pinned to distinct CPUs (%d usable)." % self.usable
        return ("Producers %s exceed the %d usable CPUs: they run as virtual CPUs, at most %d "
                "running a cycle at a time; their latency includes no descheduled lock holder "
                "but is not the kernel's, so their claims are judged on counters." % (
                    "/".join(map(str, virt)), self.usable, self.usable))

    def real_note(self):
        """What ran as the buddy when the report ran on a libarena tree."""
        from ..policies import libarena_real

        real = self.settings.get("real_buddy")
        if not real:
            return None
        t = real["tree"]
        return ("The buddy is the real code: buddy.bpf.c of the libarena tree %s (layer %s); "
                "measured: %s; %s%s. The buddy rows count the tree's arena spin lock, "
                "alloclab's lock in arena mode." % (
                    t["tree"], real["layer"], t["measured"], libarena_real.caches_note(t),
                    ", the model's caches above them by request" if real["caches_above"]
                    else ""))

    def body(self):
        parts = [self.real_note()] if self.real_note() else []
        parts += uniq([line for res in self.results.values() for line in res.notes_lines()])
        for t in self.timings:
            for wl in self.workloads:
                for m, _ in METRICS:
                    parts.append(self.table(wl, m, t))
        parts.append(self.cpu_note())
        parts.append(self.counters())
        parts += [t for t in (self.capacity_table(wl) for wl in self.workloads) if t]
        if self.settings.get("stats") == "off" and self._grid()[2]:
            parts.append("n/a: the claims judged on counters (virtual-CPU cells) need "
                         "stats=lite or full; this run counted nothing (stats=off)")
        return parts

    @classmethod
    def figure_suffixes(cls, workloads=None):
        n = len(workloads or WORKLOADS) * len(METRICS)
        return [""] + [str(i) for i in range(1, n)]

    def figures(self):
        figs = [self.plot(m, wl) for wl in self.workloads for m, _ in METRICS]
        return list(zip(figs, self.figure_suffixes(self.workloads)))

    # -- plots --

    def plot(self, metric="alloc_ns", workload="malloc-free", timing=None, ax=None):
        """Latency against producers, one line per design, one panel per
        allocs/cycle; error bars are the 95% CI of the mean. Returns the
        figure (alloclab.plot_reproduce.libarena)."""
        return plot_reproduce.libarena(self, metric, workload, timing, METRICS)
