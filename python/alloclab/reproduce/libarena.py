"""Reproduce seed 000: per-CPU caches in front of libarena's buddy allocator,
"spill" (percpu > buddy) against "transfer cache" (percpu > transfer > buddy),
plus a plain buddy ("no cache") for the cover letter's TL;DR.

The seed reports mean alloc and free latency over three runs at 1/2/4/8
producers for libarena-malloc-free and libarena-malloc-xfree, and argues from
counts: "one buddy lock per 8 objects", "two locks per free", "about 900 of
the 1000 frees". This module runs the same grid, prints it in the seed's
layout, computes the seed's summary sentences from the data, and prints the
counters that explain them. Producers beyond the usable CPUs run as virtual
CPUs (at most one per real CPU at a time); there the conclusions are judged
on counters, not latency, and the report says so.

    import alloclab.reproduce as rep
    r = rep.libarena(producers=[1, 2], runs=3)
    print(r)              # tables, summary, counters, verdicts
    r.plot("alloc_ns")    # latency against producers, a panel per allocs/cycle
"""

import json

import numpy as np

from .. import run as _run
from .._ffi import lib
from ..result import Result
from .. import stats as _stats

DESIGNS = (("transfer cache", "libarena-transfer"), ("spill", "libarena-spill"))
BASELINE = ("no cache", "buddy")
WORKLOADS = ("malloc-free", "malloc-xfree")
METRICS = (("alloc_ns", "allocation latency"), ("free_ns", "free latency"))

# Rows where the 16-slot per-CPU cache overflows (the seed's "interesting rows").
CACHE_CAPACITY = 16


def libarena(producers=(1, 2, 4, 8), allocs_per_cycle=(1, 4, 16, 64, 256), runs=3, size=64,
             timings=("per_op_sum", "batch"), workloads=WORKLOADS, duration=0.05,
             warmup_cycles=20, baseline=True, progress=False):
    """Run the seed's grid and return a LibarenaReport.

    Every workload × design × producers × allocs/cycle × timing point is run
    ``runs`` times on a fresh allocator, designs interleaved run by run.
    """
    designs = list(DESIGNS) + ([BASELINE] if baseline else [])
    results = {}
    for wl in workloads:
        results[wl] = _run(wl, [spec for _, spec in designs], runs=runs,
                           producers=list(producers), allocs_per_cycle=list(allocs_per_cycle),
                           size=size, timing=list(timings), duration=duration,
                           warmup_cycles=warmup_cycles, progress=progress)
    return LibarenaReport(results, designs)


def _pct_range(vals):
    vals = [v for v in vals if np.isfinite(v)]
    if not vals:
        return "n/a"
    lo, hi = min(vals), max(vals)
    if round(lo) == round(hi):
        return "%.0f%%" % lo
    return "%.0f-%.0f%%" % (lo, hi) if lo >= 0 else "%.0f%% to %.0f%%" % (lo, hi)


def _x_range(vals):
    vals = [v for v in vals if np.isfinite(v)]
    if not vals:
        return "n/a"
    lo, hi = min(vals), max(vals)
    return "%.1fx" % lo if abs(hi - lo) < 0.05 else "%.1f-%.1fx" % (lo, hi)


class LibarenaReport:
    """The seed-000 experiment: Results per workload, and their reading."""

    def __init__(self, results, designs=None):
        self.results = results
        self.designs = list(designs or list(DESIGNS) + [BASELINE])
        self._spec = {}
        for wl, res in results.items():
            for p in res.points:
                self._spec.setdefault(p.params["policy"], p.params["policy"])
        self.usable = int(lib.al_cpus_usable())

    # -- access --

    def _canonical(self, spec):
        from ..policy import Policy
        return str(Policy(spec))

    def cell(self, workload, design, metric, timing, producers, allocs_per_cycle):
        """The metric's runs (NumPy array) for one cell, or None."""
        spec = self._canonical(dict(self.designs)[design])
        for p in self.results[workload].points:
            q = p.params
            if (q["policy"] == spec and q["timing"] == timing and q["producers"] == producers
                    and q["allocs_per_cycle"] == allocs_per_cycle):
                return p.data.get(metric)
        return None

    def mean(self, *key):
        v = self.cell(*key)
        return float(np.nanmean(v)) if v is not None and len(v) else float("nan")

    def _axis(self, key):
        vals = set()
        for res in self.results.values():
            for p in res.points:
                vals.add(p.params[key])
        return sorted(vals)

    @property
    def producers(self):
        return self._axis("producers")

    @property
    def allocs_per_cycle(self):
        return self._axis("allocs_per_cycle")

    @property
    def timings(self):
        order = ["per_op_sum", "batch"]
        return [t for t in order if t in self._axis("timing")]

    # -- the seed's tables --

    def table(self, workload, metric, timing, designs=None):
        """One seed-layout table: designs side by side, producers as columns."""
        designs = designs or [d for d, _ in self.designs]
        prods = self.producers
        apcs = self.allocs_per_cycle
        colw = 6
        blockw = colw * len(prods)
        desc = dict(METRICS).get(metric, metric)
        lines = ["libarena-%s, %s (ns, lower is better), %s timing, mean of %s runs:" % (
            workload, desc, timing, self._runs())]
        lines.append("")
        head = " " * 14 + "  ".join(d.center(blockw) for d in designs)
        lines.append(head.rstrip())
        sub = "  allocs/cycle" + "  ".join(
            "".join(("%dp" % p).rjust(colw) for p in prods) for _ in designs)
        lines.append(sub)
        for apc in apcs:
            cells = []
            for d in designs:
                cells.append("".join(
                    ("%.0f" % self.mean(workload, d, metric, timing, p, apc)).rjust(colw)
                    for p in prods))
            lines.append(("%d" % apc).rjust(14) + "  ".join(cells))
        return "\n".join(lines)

    def _runs(self):
        runs = set()
        for res in self.results.values():
            runs.update(p.runs for p in res.points)
        return "/".join(str(r) for r in sorted(runs))

    # -- the seed's summary, from the data --

    def savings(self, workload, metric, timing, producers=None, rows=None):
        """Percent of time the transfer cache saves against spill, per cell."""
        producers = producers or [p for p in self.producers if p >= 2]
        rows = rows or [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY]
        out = []
        for p in producers:
            for a in rows:
                t = self.mean(workload, "transfer cache", metric, timing, p, a)
                s = self.mean(workload, "spill", metric, timing, p, a)
                out.append(100.0 * (1.0 - t / s) if s > 0 else float("nan"))
        return out

    def summary(self, timing=None):
        timing = timing or self.timings[0]
        prods = [p for p in self.producers if p >= 2]
        rows = [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY]
        lines = []
        if prods and rows:
            lines.append("With %s producers (allocs/cycle %s, %s timing), the transfer cache "
                         "saves:" % ("-".join(map(str, [prods[0], prods[-1]])) if len(prods) > 1
                                     else prods[0], "/".join(map(str, rows)), timing))
            for wl, what in (("malloc-free", "same-CPU frees"), ("malloc-xfree", "cross-CPU frees")):
                if wl not in self.results:
                    continue
                lines.append("- %s of the allocation time and %s of the free time with %s." % (
                    _pct_range(self.savings(wl, "alloc_ns", timing)),
                    _pct_range(self.savings(wl, "free_ns", timing)), what))
        if any(d == BASELINE[0] for d, _ in self.designs):
            lines.append("")
            lines.append("Against no cache (plain buddy), latency is lower by (no cache / design):")
            for d, _ in self.designs[:2]:
                for p in sorted({self.producers[0], self.producers[-1]}):
                    r = [self.mean(wl, BASELINE[0], m, timing, p, a) /
                         self.mean(wl, d, m, timing, p, a)
                         for wl in self.results for m, _ in METRICS
                         for a in self.allocs_per_cycle]
                    lines.append("- %s, %d producer%s: %s" % (d, p, "" if p == 1 else "s",
                                                             _x_range(r)))
        hit_rows = [a for a in self.allocs_per_cycle if a <= CACHE_CAPACITY]
        if hit_rows:
            lines.append("")
            lines.append("With %s allocs/cycle (cache hits), transfer vs spill differ by:" %
                         "/".join(map(str, hit_rows)))
            for wl in self.results:
                for m, desc in METRICS:
                    diffs = [self.mean(wl, "spill", m, timing, p, a) -
                             self.mean(wl, "transfer cache", m, timing, p, a)
                             for p in self.producers for a in hit_rows]
                    lines.append("- %s %s: %+.1f to %+.1f ns (positive: transfer faster)" % (
                        wl, desc, np.nanmin(diffs), np.nanmax(diffs)))
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
        key = dict(self.COUNTERS)[name]
        if key is not None:
            return self.mean(workload, design, key, timing, producers, allocs_per_cycle)
        c = lambda k: self.mean(workload, design, k, timing, producers, allocs_per_cycle)
        if name == "transfer hit rate":
            hits = c("transfer.remove_hits") + c("transfer.insert_hits")
            total = hits + c("transfer.remove_misses") + c("transfer.insert_misses")
            return hits / total if total > 0 else float("nan")
        return float("nan")

    def counters(self, timing=None, rows=None):
        timing = timing or self.timings[0]
        rows = rows or [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY] or \
            self.allocs_per_cycle[-1:]
        prods = self.producers
        lines = ["Counters that explain it (measured phase, per alloc+free op; %s timing):"
                 % timing]
        for wl in self.results:
            for a in rows:
                lines.append("")
                lines.append("libarena-%s, %d allocs/cycle:" % (wl, a))
                lines.append("  %-16s %-22s" % ("design", "counter") +
                             "".join(("%dp" % p).rjust(9) for p in prods))
                for d, _ in self.designs:
                    for name, key in self.COUNTERS:
                        if d != "transfer cache" and name.startswith("transfer"):
                            continue
                        if d == BASELINE[0] and name in ("spills/op", "refills/op"):
                            continue
                        vals = [self.counter(wl, d, name, timing, p, a) for p in prods]
                        lines.append("  %-16s %-22s" % (d, name) + "".join(
                            ("%.3f" % v if np.isfinite(v) else "-").rjust(9) for v in vals))
        return "\n".join(lines)

    # -- verdicts --

    def verdicts(self, timing=None):
        """The seed's conclusions, each checked on this machine's data:
        [(claim, holds: bool or None, evidence)]."""
        timing = timing or self.timings[0]
        out = []
        real = [p for p in self.producers if 2 <= p <= self.usable]
        virt = [p for p in self.producers if p > self.usable]
        rows = [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY]
        for wl in self.results:
            if real and rows:
                worse = [(p, a, m) for p in real for a in rows for m, _ in METRICS
                         if self.mean(wl, "transfer cache", m, timing, p, a) >=
                         self.mean(wl, "spill", m, timing, p, a)]
                n = len(real) * len(rows) * len(METRICS)
                out.append((
                    "%s: at %s allocs/cycle with %s producers the transfer cache cuts alloc "
                    "and free time (latency)" % (wl, "/".join(map(str, rows)),
                                                  "/".join(map(str, real))),
                    not worse,
                    "%d of %d cells faster%s" % (n - len(worse), n, "" if not worse else
                                                  "; not in " + ", ".join(
                                                      "%dp/%d %s" % w for w in worse))))
            if virt and rows:
                fewer = [(p, a) for p in virt for a in rows
                         if self.counter(wl, "transfer cache", "buddy locks/op", timing, p, a) <
                         self.counter(wl, "spill", "buddy locks/op", timing, p, a)]
                n = len(virt) * len(rows)
                out.append((
                    "%s: at %s virtual producers (> %d CPUs, judged on counters) the transfer "
                    "cache takes fewer buddy locks per op" % (wl, "/".join(map(str, virt)),
                                                               self.usable),
                    len(fewer) == n, "%d of %d cells" % (len(fewer), n)))
            hit_rows = [a for a in self.allocs_per_cycle if a <= CACHE_CAPACITY]
            if hit_rows:
                # as alloclab.compare judges: Welch per cell, Benjamini-Hochberg
                # across the cells, and a difference under 5% is never "real"
                cells = []
                for p in self.producers:
                    if p > self.usable:
                        continue
                    for a in hit_rows:
                        for m, _ in METRICS:
                            t = self.cell(wl, "transfer cache", m, timing, p, a)
                            s = self.cell(wl, "spill", m, timing, p, a)
                            if t is not None and s is not None:
                                cells.append((p, a, m, t, s, _stats.welch(s, t).pvalue))
                adj = _stats.bh_adjust([c[5] for c in cells])
                big = ["%dp/%d %s %+.1f ns" % (p, a, m, np.nanmean(s) - np.nanmean(t))
                       for (p, a, m, t, s, _), q in zip(cells, adj)
                       if q < 0.05 and abs(np.nanmean(t) - np.nanmean(s)) >=
                       0.05 * np.nanmean(s)]
                out.append(("%s: at <= %d allocs/cycle the two designs are within noise "
                            "(Welch + Benjamini-Hochberg, or under 5%%)" % (wl, CACHE_CAPACITY),
                            not big,
                            "all cells within" if not big else "different: " + ", ".join(big)))
        return out

    def cpu_note(self):
        virt = [p for p in self.producers if p > self.usable]
        if not virt:
            return "All producers pinned to distinct CPUs (%d usable)." % self.usable
        return ("Producers %s exceed the %d usable CPUs: they run as virtual CPUs, at most %d "
                "running a cycle at a time; their latency includes no descheduled lock holder "
                "but is not the kernel's, so judge them on the counters." % (
                    "/".join(map(str, virt)), self.usable, self.usable))

    def __str__(self):
        parts = []
        for t in self.timings:
            for wl in self.results:
                for m, _ in METRICS:
                    parts.append(self.table(wl, m, t))
                    parts.append("")
        parts.append(self.cpu_note())
        parts.append("")
        parts.append(self.summary())
        parts.append("")
        parts.append(self.counters())
        parts.append("")
        parts.append("Seed conclusions on this machine:")
        for claim, holds, ev in self.verdicts():
            parts.append("- [%s] %s: %s" % ("holds" if holds else "does not hold", claim, ev))
        return "\n".join(parts)

    # -- data --

    def to_json(self, path=None):
        s = json.dumps({"format": "alloclab-libarena-report", "designs": self.designs,
                        "results": {wl: json.loads(r.to_json()) for wl, r in
                                    self.results.items()}})
        if path:
            with open(path, "w") as f:
                f.write(s)
        return s

    @classmethod
    def from_json(cls, s):
        d = json.loads(s)
        return cls({wl: Result.from_json(json.dumps(r)) for wl, r in d["results"].items()},
                   [tuple(x) for x in d["designs"]])

    # -- plots --

    def plot(self, metric="alloc_ns", workload="malloc-free", timing=None, ax=None):
        """Latency against producers, one line per design, one panel per
        allocs/cycle; error bars are one sd over runs. Returns the figure."""
        import matplotlib.pyplot as plt

        timing = timing or self.timings[0]
        apcs = self.allocs_per_cycle
        fig, axes = plt.subplots(1, len(apcs), figsize=(3.2 * len(apcs), 3.2), sharey=False,
                                 squeeze=False)
        for ax, a in zip(axes[0], apcs):
            for d, _ in self.designs:
                ys, es = [], []
                for p in self.producers:
                    v = self.cell(workload, d, metric, timing, p, a)
                    ys.append(np.nanmean(v) if v is not None else np.nan)
                    es.append(np.nanstd(v, ddof=1) if v is not None and len(v) > 1 else 0)
                ax.errorbar(self.producers, ys, yerr=es, marker="o", capsize=3, label=d)
            ax.set_title("%d allocs/cycle" % a)
            ax.set_yscale("log")
            ax.set_xlabel("producers")
            ax.set_xticks(self.producers)
            if self.usable < max(self.producers):
                ax.axvspan(self.usable + 0.5, max(self.producers) + 0.5, color="0.92",
                           zorder=0)
        axes[0][0].set_ylabel("%s (ns/op)" % metric)
        axes[0][-1].legend(fontsize="small")
        fig.suptitle("libarena-%s, %s, %s timing (shaded: virtual CPUs)" % (
            workload, dict(METRICS).get(metric, metric), timing))
        fig.tight_layout()
        return fig
