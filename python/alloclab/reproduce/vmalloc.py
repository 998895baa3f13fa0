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
    pcp-first         vmalloc-pcp-first       the thread's suggestion (extra column)

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

Significance, as alloclab.compare judges it: Welch's t-test per cell
(alloclab.stats), Benjamini-Hochberg across every cell of the table, and a
cell is marked (R)/(I) only when significant and its change is at least
THRESHOLD_PCT.
"""

import json
import math

import numpy as np

from .. import run as _run
from .._ffi import lib
from ..policy import Policy, presets
from ..result import Result
from .. import stats

# Changes smaller than this are never marked (R)/(I), as alloclab.compare.
THRESHOLD_PCT = 2.0

# (kernel label, preset)
BASELINE = ("v6.18", "vmalloc-default")
DESIGNS = (("6-19-0-rc1", "vmalloc-large"), ("vfree-high-order", "vmalloc-large-bulkfree"))
EXTRA = ("pcp-first", "vmalloc-pcp-first")

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

# Uladzislau Rezki's fix_size_alloc_test runs (loops 1000000, avg usec per run):
# default (v6.18) against the patch (high orders + bulk free).
SEED_REZKI = {
    3: ([541868, 542515, 541561, 542951], [585266, 594301, 598912, 589345]),
    100: ([5724919, 5721430, 5717224], [2629600, 2622811, 2629324]),
}
REZKI_LOOPS = 1000000


# ---------------------------------------------------------------- statistics

def welch_test(old, new, alpha=0.05):
    """Welch's t-test (alloclab.stats) of two samples of a lower-is-better
    metric, one cell alone: (p_value, mark), mark "I" when new is significantly
    lower, "R" when significantly higher, "" otherwise or with fewer than 2
    runs a side. The report corrects across cells (VmallocReport.change)."""
    r = stats.welch(old, new)
    diff = float(np.nanmean(old)) - float(np.nanmean(new))
    return r.pvalue, ("I" if diff > 0 else "R") if r.pvalue < alpha and diff else ""


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

def vmalloc(scale=0.04, runs=5, threads=1, arch="arm64", cpus=64, pcp_first=True, tests=None,
            rezki=True, warm=True, nr_pcpu_objects=35000, seed=1, progress=False):
    """Run the seed's rows and return a VmallocReport.

    scale: loops = the seed's loops x scale (at least 1); runs: runs per
    policy per row (fresh allocator each, interleaved); threads: workers
    (test_vmalloc's nr_threads); tests: only these test names; rezki: also
    fix_size_alloc_test at 3 and 100 pages; warm: one untimed pass first.
    """
    if not (isinstance(scale, (int, float)) and scale > 0):
        raise ValueError("scale=%r: a positive fraction of the seed's loops" % (scale,))
    designs = [BASELINE] + list(DESIGNS) + ([EXTRA] if pcp_first else [])
    specs = [machine_policy(p, arch, cpus) for _, p in designs]
    rows = [(t, p, h, l) for t, p, h, l, _, _ in SEED_ROWS if not tests or t in tests]
    if rezki:
        rows += [("fix_size_alloc_test", n, 0, REZKI_LOOPS) for n in sorted(SEED_REZKI)]
    unknown = [t for t in (tests or ()) if t not in TEST_BITS]
    if unknown:
        from ..errors import UnknownNameError
        raise UnknownNameError.make("test", unknown[0], list(TEST_BITS))

    def one(test, p, h, l, nruns):
        return _run("test_vmalloc", specs, runs=nruns, producers=threads, cycles=1,
                    warmup_cycles=1, run_test_mask=TEST_BITS[test], nr_pages=p,
                    use_huge=bool(h), test_loop_count=max(1, int(round(l * scale))),
                    sequential_test_order=True, nr_pcpu_objects=nr_pcpu_objects, seed=seed)

    results = {}
    todo = list(dict.fromkeys(rows))
    if warm:
        for i, (t, p, h, l) in enumerate(todo):
            one(t, p, h, l, 1)
            if progress:
                _progress("warming", i + 1, len(todo))
    for i, (t, p, h, l) in enumerate(todo):
        results[_row_key(t, p, h)] = one(t, p, h, l, runs)
        if progress:
            _progress("measuring", i + 1, len(todo))
    if progress:
        import sys
        sys.stderr.write("\n")
    settings = {"scale": scale, "runs": runs, "threads": threads, "arch": arch, "cpus": cpus,
                "designs": [[k, p, s] for (k, p), s in zip(designs, specs)],
                "rows": [list(r) for r in todo], "nr_pcpu_objects": nr_pcpu_objects}
    return VmallocReport(results, settings)


def _progress(what, i, n):
    import sys
    sys.stderr.write("\ralloclab: %s %d/%d rows" % (what, i, n))
    sys.stderr.flush()


# ---------------------------------------------------------------- the report

class VmallocReport:
    """The seed-004 experiment: a Result per row, and their reading."""

    def __init__(self, results, settings):
        self.results = results
        self.settings = settings
        self.designs = [(k, p, s) for k, p, s in settings["designs"]]

    # -- access --

    def spec(self, label):
        for k, p, s in self.designs:
            if label in (k, p):
                return s
        raise KeyError(label)

    def samples(self, test, p, h, label, metric=None):
        """The runs of a row's metric (default: the test's avg_usec) for a
        design (kernel label or preset)."""
        res = self.results.get(_row_key(test, p, h))
        if res is None:
            return None
        spec = self.spec(label)
        metric = metric or "wl.%s.avg_usec" % test
        for pt in res.points:
            if pt.params["policy"] == spec:
                return pt.data.get(metric)
        return None

    def loops(self, test, p, h):
        res = self.results.get(_row_key(test, p, h))
        return res.points[0].params["test_loop_count"] if res else None

    def _raw_change(self, test, p, h, label):
        old = self.samples(test, p, h, BASELINE[0])
        new = self.samples(test, p, h, label)
        if old is None or new is None:
            return float("nan"), float("nan"), ""
        pv, mark = welch_test(old, new)
        return change_pct(old, new), pv, mark

    def _adjusted(self):
        """BH-adjusted p-values over every (row, design) cell of the report."""
        if getattr(self, "_adj", None) is None:
            keys = sorted({(t, p, h, c) for (t, p, h) in self._rows() for c in self.columns})
            raw = [self._raw_change(*k)[1] for k in keys]
            self._adj = dict(zip(keys, stats.bh_adjust(raw)))
        return self._adj

    def _rows(self):
        """(test, nr_pages, use_huge) of every row run (keys made by _row_key)."""
        out = []
        for key in self.results:
            test, p, h = key.split(" ")
            out.append((test, int(p[2:]), int(h[2:])))
        return out

    def change(self, test, p, h, label, alpha=0.05):
        """(percent, adjusted p-value, mark) of a design against v6.18 on a row:
        marked only when significant after Benjamini-Hochberg and at least
        THRESHOLD_PCT."""
        pct, pv, mark = self._raw_change(test, p, h, label)
        adj = self._adjusted().get((test, p, h, label), pv)
        if not (adj < alpha and abs(pct) >= THRESHOLD_PCT):
            mark = ""
        return pct, adj, mark

    @property
    def columns(self):
        return [k for k, _, _ in self.designs[1:]]

    def seed_rows(self):
        return [r for r in SEED_ROWS if _row_key(r[0], r[1], r[2]) in self.results]

    # -- the seed's table --

    def table(self):
        """The seed's table: each design against v6.18 (positive =
        improvement; (R)/(I) where Welch's test says p < 0.05), then the
        seed's own two columns."""
        cols = self.columns + ["seed " + k for k, _ in DESIGNS]
        rows = []
        for t, p, h, _l, s1, s2 in self.seed_rows():
            label = "%s: p:%d, h:%d, l:%d (usec)" % (t, p, h, self.loops(t, p, h))
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
        return ("Seed 004 on this machine: test_vmalloc, %d thread%s, loops = seed x %g, mean of "
                "%d runs per cell, interleaved.\nPolicies: %s.\nNormalised to %s: positive = "
                "improvement (old/new - 1); (R)/(I) = Welch's t-test, p < 0.05 after "
                "Benjamini-Hochberg over the report, and at least 2%%." % (
                    s["threads"], "" if s["threads"] == 1 else "s", s["scale"], s["runs"], pols,
                    BASELINE[0]))

    # -- the kernel's summary lines --

    def summary_lines(self, test, p, h, label):
        """The kernel's "Summary:" line for each run of a row and design."""
        res = self.results.get(_row_key(test, p, h))
        spec = self.spec(label)
        out = []
        for pt in res.points if res else ():
            if pt.params["policy"] != spec:
                continue
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
            pct, pv, mark = self.change("fix_size_alloc_test", n, 0, patch)
            old, new = SEED_REZKI[n]
            out.append("=> %d pages: %s %s (seed: %+.0f%%, %.2fx)" % (
                n, _cell(pct, mark).strip(), "(%.2fx)" % (1 + pct / 100) if np.isfinite(pct)
                else "", (np.mean(old) / np.mean(new) - 1) * 100, np.mean(old) / np.mean(new)))
            out.append("")
        return "\n".join(out).rstrip()

    # -- counters --

    COUNTERS = (
        ("zone locks/vmalloc", "pages.zone_lock_acquired"),
        ("pcp bypass/vmalloc", "pages.pcp_bypass"),
        ("pcp drains/vmalloc", "pages.pcp_drains"),
        ("merges/vmalloc", "pages.merges"),
        ("blocks freed/vmalloc", None),
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
        out = ["Counters that explain it (measured phase, per vmalloc; pages layer):",
               "  %-34s %-22s" % ("row", "counter") + "".join(l[:16].rjust(17) for l in labels)]
        for t, p, h in rows:
            for name, _ in self.COUNTERS:
                vals = [self.counter(t, p, h, l, name) for l in labels]
                out.append("  %-34s %-22s" % ("%s p:%d h:%d" % (t.replace("_alloc_test", ""), p,
                                                                h), name) +
                           "".join(("%.2f" % v if np.isfinite(v) else "-").rjust(17)
                                   for v in vals))
        return "\n".join(out)

    # -- verdicts --

    def verdicts(self):
        """The seed's conclusions checked on this data: [(claim, holds, evidence)]."""
        out = []
        large, bulk = DESIGNS[0][0], DESIGNS[1][0]
        reg = [(t, p, h) for t, p, h, _l, s1, _s2 in self.seed_rows() if s1[1] == "R"]
        if reg:
            got = [(t, p, h, self.change(t, p, h, large)) for t, p, h in reg]
            neg = [g for g in got if g[3][0] < 0]
            out.append((
                "high-order allocation with per-page free (%s) regresses where the seed "
                "marks (R)" % large,
                len(neg) >= 0.75 * len(got),
                "slower in %d of %d rows (%d significant)%s" % (
                    len(neg), len(got), sum(1 for g in neg if g[3][2] == "R"),
                    "" if len(neg) == len(got) else "; not in " + ", ".join(
                        "%s p:%d h:%d (%+.0f%%)" % (g[0].replace("_alloc_test", ""), g[1], g[2],
                                                     g[3][0]) for g in got if g[3][0] >= 0))))
        imp = [(t, p, h) for t, p, h, _l, _s1, s2 in self.seed_rows() if s2[1] == "I"]
        if imp:
            got = [(t, p, h, self.change(t, p, h, bulk)) for t, p, h in imp]
            pos = [g for g in got if g[3][0] > 0]
            out.append((
                "with bulk free (%s) the same rows improve" % bulk,
                len(pos) >= 0.75 * len(got),
                "faster in %d of %d rows (%d significant)" % (
                    len(pos), len(got), sum(1 for g in pos if g[3][2] == "I"))))
        fs = [(p, h) for t, p, h, *_ in self.seed_rows() if t == "fix_size_alloc_test"]
        if len(fs) >= 4:
            gains = {(p, h): self.change("fix_size_alloc_test", p, h, bulk)[0] for p, h in fs}
            small = [gains[k] for k in gains if k[0] <= 4]
            big = [gains[k] for k in gains if k[0] >= 64]
            if small and big:
                out.append(("bulk free gains most at large sizes",
                            np.nanmin(big) > np.nanmax(small),
                            "fix_size gains %s at <= 4 pages, %s at >= 64" % (
                                _rng(small), _rng(big))))
            hp = [(gains[(p, 1)], gains[(p, 0)]) for p, h in fs if h == 1 and (p, 0) in gains]
            if hp:
                d = [a - b for a, b in hp]
                out.append(("... and most with huge mappings (h:1 above h:0 at the same size, "
                            "on the whole)",
                            float(np.mean(d)) > 0 and sum(x > 0 for x in d) * 2 >= len(d),
                            "h:1 - h:0 = %s points" % ", ".join("%+.0f" % (a - b) for a, b in hp)))
        for n, want in ((100, "about twice as fast"), (3, "about the same (seed: -8%)")):
            if _row_key("fix_size_alloc_test", n, 0) in self.results:
                pct = self.change("fix_size_alloc_test", n, 0, bulk)[0]
                holds = 60 <= pct <= 250 if n == 100 else -25 <= pct <= 25
                out.append(("fix_size_alloc_test at %d pages with high orders + bulk free: %s"
                            % (n, want), bool(holds), "%+.0f%% (%.2fx)" % (pct, 1 + pct / 100)))
        return out

    # -- text --

    def __str__(self):
        parts = [self.header(), "", self.table()]
        rz = self.rezki()
        if rz:
            parts += ["", "Uladzislau Rezki's comparison (fix_size_alloc_test, v6.18 vs "
                          "high orders + bulk free):", "", rz]
        parts += ["", self.counters(), "", "Seed conclusions on this machine:"]
        for claim, holds, ev in self.verdicts():
            parts.append("  [%s] %s: %s" % ("holds" if holds else "does not hold", claim, ev))
        failed = self.failures()
        if failed:
            parts += ["", "Test failures (kernel 'failed' counts): " + ", ".join(failed)]
        return "\n".join(parts)

    def failures(self):
        out = []
        for key, res in self.results.items():
            for pt in res.points:
                for k, v in pt.data.items():
                    if k.endswith(".failed") and np.nansum(v):
                        out.append("%s on %s: %d" % (key, pt.params["policy"], np.nansum(v)))
        return out

    # -- plots --

    def plot(self, ax=None):
        """Percent change per row for each design (bars), the seed's values
        as markers."""
        import matplotlib.pyplot as plt

        rows = self.seed_rows()
        if ax is None:
            fig, ax = plt.subplots(figsize=(10, 0.32 * len(rows) * len(self.columns) + 1.5))
        else:
            fig = ax.figure
        y = np.arange(len(rows))
        hgt = 0.8 / max(1, len(self.columns))
        for i, c in enumerate(self.columns):
            vals = [self.change(t, p, h, c)[0] for t, p, h, *_ in rows]
            ax.barh(y + i * hgt, vals, height=hgt, label=c)
        for j, (k, _) in enumerate(DESIGNS):
            i = self.columns.index(k)
            vals = [r[4 + j][0] for r in rows]
            ax.plot(vals, y + i * hgt, "k" + "dx"[j], label="seed %s" % k)
        ax.set_yticks(y + hgt * (len(self.columns) - 1) / 2)
        ax.set_yticklabels(["%s p:%d h:%d" % (t.replace("_alloc_test", "").replace(
            "_vmalloc_test", ""), p, h) for t, p, h, *_ in rows], fontsize=8)
        ax.invert_yaxis()
        ax.axvline(0, color="grey", lw=0.8)
        ax.set_xscale("symlog", linthresh=20)
        ax.set_xlabel("change against v6.18, % (positive = faster; symlog)")
        ax.set_title("test_vmalloc: seed 004's kernels as policies")
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3)
        fig.tight_layout()
        return fig

    def plot_sizes(self, ax=None):
        """fix_size_alloc_test: ns per loop against nr_pages, one line per
        design (h:0 solid, h:1 dashed)."""
        import matplotlib.pyplot as plt

        if ax is None:
            fig, ax = plt.subplots(figsize=(7, 4.5))
        else:
            fig = ax.figure
        fs = sorted({(p, h) for t, p, h, *_ in self.seed_rows() if t == "fix_size_alloc_test"})
        for i, (k, _, _) in enumerate(self.designs):
            for h, style in ((0, "-o"), (1, "--s")):
                pts = [(p, np.nanmean(self.samples("fix_size_alloc_test", p, hh, k)) * 1e3 /
                        self.loops("fix_size_alloc_test", p, hh)) for p, hh in fs if hh == h]
                if pts:
                    ax.plot(*zip(*pts), style, color="C%d" % i, label="%s h:%d" % (k, h))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("nr_pages")
        ax.set_ylabel("ns per loop (vmalloc + write + vfree)")
        ax.set_title("fix_size_alloc_test")
        ax.legend(fontsize=7)
        fig.tight_layout()
        return fig

    # -- JSON --

    def to_dict(self):
        return {"format": "alloclab-vmalloc-report", "version": 1, "settings": self.settings,
                "results": {k: r.to_dict() for k, r in self.results.items()}}

    def to_json(self, path=None):
        s = json.dumps(self.to_dict(), allow_nan=True)
        if path is not None:
            with open(path, "w") as f:
                f.write(s)
        return s

    @classmethod
    def from_json(cls, s):
        d = json.loads(s)
        if d.get("format") != "alloclab-vmalloc-report":
            from ..errors import InvalidArgument
            raise InvalidArgument("not an alloclab vmalloc report (format %r)" % d.get("format"))
        return cls({k: Result.from_json(json.dumps(v)) for k, v in d["results"].items()},
                   d["settings"])


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


def _rng(vals):
    vals = [v for v in vals if np.isfinite(v)]
    if not vals:
        return "n/a"
    return "%+.0f%%" % vals[0] if len(vals) == 1 else "%+.0f..%+.0f%%" % (min(vals), max(vals))
