"""Seed 000 on simulated CPUs: the same grid as reproduce.libarena, every
producer count a set of model CPUs in virtual time (measure.sim), so all
32 transfer-vs-spill cells of the seed's four tables (1, 2, 4, 8 producers)
are filled on any machine, and the seed's conclusions are judged on them as
predictions.

A simulated cell's counters count what the real layer code did in the
simulated schedule (those that depend on timing, such as lock contention
or cache hits, are predictions too) and its times come from a calibration
(costs per code path measured here at one producer, a cache-line transfer
cost, the lines a lock handoff moves).
Every table header, judgement and JSON record says "predicted (simulated
CPUs)" and names the calibration (its source and a short id: the first 12
hex digits of the SHA-1 of its JSON, as run() names it); nothing here is
judged as measured. The seed's numbers (libarena.SEED_NS and the seed's
stated savings below) are only compared with, never fitted to.

    import alloclab.reproduce as rep
    r = rep.libarena_simulated(calibration="cal.json")   # or None: calibrate here
    print(r)                 # predicted tables, verdicts, the seed-ratio table
    s = rep.libarena_scaling(calibration="cal.json")     # 1 to 256 CPUs
    s.plot()                 # measured points (pinned) and simulated lines

The claims judged (one Benjamini-Hochberg family): the seed's savings of
the transfer cache against spill at 2-8 producers, per workload and
operation, as ranges (each cell's saving inside the seed's range, TOST);
the transfer cache helping even in malloc-free (lower latency, fewer buddy
locks per op); the cache-hit rows the same; the TL;DR against libarena
without caches (the plain buddy in the same grid): 2-4x lower at one
producer and 10-100x lower at 8. Steal time on the host does not change a
virtual clock, so no simulated run is left out for it.
"""

import hashlib
import json
import math

import numpy as np

from ..judge import verdict as V
from ..measure import sim as _sim
from ..measure.run import effort_defaults, run as _run
from ..present import plot_reproduce
from ..results import simulated as _simulated
from ..results import stats as _stats
from ..results.result import Result, dump_json, load_json
from ._report import STEAL_RERUNS, SeedCell, side
from .libarena import (BASELINE, CACHE_CAPACITY, DESIGNS, METRICS, QUICK_ALLOCS_PER_CYCLE,
                       SEED_NS, SEED_PRODUCERS, WORKLOADS, ALLOCS_PER_CYCLE, LibarenaReport)
from .. import errors
from ..cbind._ffi import lib

# Virtual seconds per simulated run, per effort (a simulated run's time does
# not depend on the machine, so short phases are no less stable).
SIM_DURATION = {"quick": 0.02, "normal": 0.05, "rigorous": 0.25}

# The seed's stated savings of the transfer cache against spill with 2-8
# producers, in percent of spill's time (its summary, same-CPU and
# cross-CPU frees); judged per cell as a range.
SEED_SAVINGS = {("malloc-free", "alloc_ns"): (33, 60), ("malloc-free", "free_ns"): (60, 73),
                ("malloc-xfree", "alloc_ns"): (17, 59), ("malloc-xfree", "free_ns"): (60, 74)}
# The TL;DR: the cached designs' latency against libarena without caches,
# "x lower", at 1 producer and at 8.
TLDR = {1: (2.0, 4.0), 8: (10.0, 100.0)}
# The seed-ratio figure: transfer against spill at these producer counts,
# the simulated ratio (spill / transfer) against the seed's.
RATIO_PRODUCERS = (4, 8)
RATIO_BAND = (0.5, 2.0)
RATIO_GOAL = 0.6  # the share of cells within RATIO_BAND the figure asks for
# The sensitivity band: the ratio cells run again with the calibration's line
# transfer cost times each factor; a direction that flips inside the band is
# inconclusive. Their Results are keyed BAND_PREFIX + "<factor>, <workload>".
BAND = (0.5, 2.0)
BAND_PREFIX = "line transfer x"

# The scaling figure: designs (name, spec), CPUs, the cell.
MAGAZINE = ("magazine", "libarena-magazine")
SCALING_DESIGNS = (DESIGNS[1], DESIGNS[0], MAGAZINE)  # spill, transfer cache, magazine
SCALING_CPUS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SCALING_WORKLOAD = "malloc-free"
SCALING_APC = 256

PREDICTED = "predicted (simulated CPUs)"


# ---- the calibration ----

def calibration_id(cal):
    """The short id run() gives a calibration (SHA-1 of its JSON, 12 hex)."""
    return hashlib.sha1(json.dumps(cal.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def resolve_calibration(calibration, specs, line_transfer=None, lines_per_handoff=None,
                        fit=False):
    """(Calibration, what the report says of it): the one given (a file, a
    dict or a Calibration), else one made here by measure.sim.calibrate()
    for ``specs`` at one producer; fit: lines_per_handoff fitted to this
    machine's measured two-producer runs (sim.fit_handoff; never a seed)."""
    if calibration is None:
        cal = _sim.calibrate(list(specs), line_transfer=line_transfer)
        source = "made here by calibrate() at one producer"
    else:
        cal = _sim.as_calibration(calibration)
        source = calibration if isinstance(calibration, str) else "given"
    if fit:
        cal = _sim.fit_handoff(cal, [s for _, s in DESIGNS])
        source += ", lines_per_handoff fitted on 2-producer measured runs"
    cal = cal.with_(line_transfer if calibration is not None else None, lines_per_handoff)
    info = cal.info
    return cal, {"id": calibration_id(cal), "source": source, "host": info.get("host"),
                 "created": info.get("created"), "line_transfer_ns": cal.line_transfer_ns,
                 "line_transfer": info.get("line_transfer"),
                 "lines_per_handoff": cal.lines_per_handoff,
                 "lines_per_handoff_from": info.get("lines_per_handoff"),
                 "coherence": _sim.coherence_text(cal),
                 "cells": info.get("cells"),
                 "unvalidated": (info.get("validation") or {}).get("unvalidated")}


def calibration_words(c):
    """The calibration as one phrase: id, source, host, line costs."""
    if not c:
        return "calibration unknown"
    bits = ["calibration %s" % c.get("id")]
    more = [str(c.get("source"))] + [x for x in (c.get("host"), c.get("created")) if x]
    more.append("line transfer %.0f ns (%s), %g lines per lock handoff (%s)" % (
        c.get("line_transfer_ns", math.nan), c.get("line_transfer") or "given",
        c.get("lines_per_handoff", math.nan), c.get("lines_per_handoff_from") or "given"))
    if c.get("coherence"):
        more.append(c["coherence"])
    return "%s (%s)" % (bits[0], "; ".join(more))


# ---- the grid ----

def libarena_simulated(producers=SEED_PRODUCERS, allocs_per_cycle=None, runs=None, size=64,
                       timings=("per_op_sum",), workloads=WORKLOADS, duration=None,
                       warmup_cycles=20, baseline=True, effort="normal", threshold=0.05,
                       progress=False, stats="lite", calibration=None, line_transfer=None,
                       lines_per_handoff=None, fit=False, seed=1, band=True):
    """Seed 000's grid on simulated CPUs; a SimulatedLibarenaReport.

    As reproduce.libarena, but every producer count runs as model CPUs in
    virtual time (cpu="simulated"; each run its own seed, so statistics over
    runs still apply). duration: virtual seconds per run (SIM_DURATION by
    effort). calibration: a Calibration, its dict or file; None makes one
    here (resolve_calibration); line_transfer and lines_per_handoff override
    it; fit: fit lines_per_handoff to this machine's 2-producer runs first.
    band: run the seed-ratio cells again with the line transfer cost halved
    and doubled (BAND); a direction that flips there is inconclusive.
    """
    runs, _, _ = effort_defaults(effort, runs, None, 0)
    duration = SIM_DURATION[effort] if duration is None else duration
    apcs = list(allocs_per_cycle or (QUICK_ALLOCS_PER_CYCLE if effort == "quick"
                                     else ALLOCS_PER_CYCLE))
    designs = list(DESIGNS) + ([BASELINE] if baseline else [])
    specs = [s for _, s in designs]
    cal, cal_info = resolve_calibration(calibration, specs, line_transfer, lines_per_handoff,
                                        fit)
    results = {}
    for wl in workloads:
        results[wl] = _run(wl, specs, runs=runs, producers=list(producers), cpu="simulated",
                           calibration=cal, allocs_per_cycle=apcs, size=size,
                           timing=list(timings), duration=duration,
                           warmup_cycles=warmup_cycles, mem_sample=0, progress=progress,
                           stats=stats, seed=seed)
    if band:
        results.update(_band_runs(cal, workloads, producers, apcs, runs, size, timings,
                                  duration, warmup_cycles, progress, stats, seed))
    settings = {"designs": [list(d) for d in designs], "effort": effort, "runs": runs,
                "duration": duration, "size": size, "threshold": threshold,
                "usable_cpus": int(lib.al_cpus_usable()), "stats": stats, "cpu": "simulated",
                "calibration": cal_info, "seed": seed, "band": list(BAND) if band else None}
    return SimulatedLibarenaReport(results, settings)


def band_key(factor, workload):
    return "%s%g, %s" % (BAND_PREFIX, factor, workload)


def _band_runs(cal, workloads, producers, apcs, runs, size, timings, duration,
               warmup_cycles, progress, stats, seed):
    """The ratio cells (transfer cache and spill at RATIO_PRODUCERS, above
    the cache) with the line transfer cost times each factor of BAND."""
    prods = [p for p in producers if p in RATIO_PRODUCERS]
    big = [a for a in apcs if a > CACHE_CAPACITY]
    out = {}
    for f in BAND if prods and big else ():
        for wl in workloads:
            out[band_key(f, wl)] = _run(
                wl, [s for _, s in DESIGNS], runs=runs, producers=prods, cpu="simulated",
                calibration=cal.with_(line_transfer_ns=cal.line_transfer_ns * f),
                allocs_per_cycle=big, size=size, timing=list(timings), duration=duration,
                warmup_cycles=warmup_cycles, mem_sample=0, progress=progress, stats=stats,
                seed=seed)
    return out


def sim_side(points, metric, label=""):
    """verdict.Side of simulated runs: the host's steal time does not move a
    virtual clock, so no run is left out for it."""
    s = side(points, metric, label)
    if s is not None:
        s.steal = np.zeros(len(s.values))
    return s


def _direction_word(row):
    if row["band_flips"]:
        return "inconclusive"
    return ("seed's" if row["direction"] else "OPPOSITE") + (
        "" if row["significant"] else " n.s.")


class SimulatedLibarenaReport(LibarenaReport):
    """The seed-000 grid on simulated CPUs: predicted tables, the seed's
    conclusions judged as predictions, and the seed-ratio table."""

    FORMAT = "alloclab-libarena-simulated-report"
    TITLE = ("Seed 000 on simulated CPUs (predictions): per-CPU caches in front of "
             "libarena's buddy, transfer cache against spill (and no cache)")
    SEED_CELLS = ("every (workload, metric, allocs/cycle, producers) cell of the seed's "
                  "transfer-vs-spill table, on simulated CPUs, transfer cache against spill "
                  "(spill/transfer - 1)")
    simulated = True  # the plots draw no virtual-CPU shading and say "predicted"

    @property
    def workloads(self):
        """The seed's workloads run (the sensitivity band's Results aside)."""
        return [k for k in super().workloads if not k.startswith(BAND_PREFIX)]

    # -- what is simulated --

    @property
    def cal(self):
        return self.settings.get("calibration") or {}

    def tag(self):
        """What every judgement says: predicted, and by which calibration."""
        return "%s, calibration %s)" % (PREDICTED[:-1], self.cal.get("id"))

    def _grid(self):
        """Every producer count is simulated: none is a virtual CPU."""
        real = list(self.producers)
        return (real, [p for p in real if p >= 2], [],
                [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY],
                [a for a in self.allocs_per_cycle if a <= CACHE_CAPACITY])

    def cpu_note(self):
        return ("Every producer count ran as simulated CPUs: that many model CPUs running the "
                "real worker loop and layer code on one thread, in virtual time from %s. "
                "Times are predictions; %s. %s" % (
                    calibration_words(self.cal), _simulated.COUNTERS, self.validation_note()))

    def validation_note(self):
        """What the calibration's validation (sim.validate, attached as its
        info["validation"]) says of the cells above this machine's CPUs."""
        bad = self.cal.get("unvalidated")
        if bad is None:
            return ("The calibration carries no validation against measured runs "
                    "(measure.sim.validate; bench/sim_seed000.py --validate).")
        if not bad:
            return ("Its validation found every 2-producer prediction within %.0f%% of the "
                    "measured runs." % (100 * _sim.TOLERANCE_2P))
        return ("Its validation found the 2-producer prediction off by more than %.0f%% for "
                "%s: their cells above %d CPUs are unvalidated." % (
                    100 * _sim.TOLERANCE_2P, ", ".join("%s on %s" % tuple(x) for x in bad),
                    self.usable))

    def settings_line(self):
        s = self.settings
        return ("Setup: effort %s, %s runs per cell (seeds %d..), %g s of virtual time per "
                "run, simulated CPUs." % (s.get("effort", "normal"), s.get("runs"),
                                          s.get("seed", 1), s.get("duration", math.nan)))

    def table(self, workload, metric, timing, designs=None):
        t = super().table(workload, metric, timing, designs)
        return t.replace("(ns, lower is better)", "(ns, lower is better; %s)" % self.tag(), 1)

    def _cells(self, new, old, metrics, producers, apcs, timing, workloads=None):
        cells = []
        for wl in workloads or self.workloads:
            for p in producers:
                for a in apcs:
                    for m in metrics:
                        so = sim_side(self.points(wl, old, timing, p, a), self.metric(m), old)
                        sn = sim_side(self.points(wl, new, timing, p, a), self.metric(m), new)
                        if so is None or sn is None:
                            continue
                        label = "%s%dp/%d%s" % ("" if workloads and len(workloads) == 1
                                                else wl + " ", p, a,
                                                "" if len(metrics) == 1 else " " + m[:-3])
                        cells.append(V.Claim.compare(label, m, so, sn))
        return cells

    def seed_cells(self, timing=None):
        """The seed's table's cells at every producer count simulated."""
        timing = timing or (self.timings or ["per_op_sum"])[0]
        out = []
        for (wl, m, d, a), ns in SEED_NS.items():
            if d != "transfer cache" or wl not in self.workloads:
                continue
            spill = SEED_NS[(wl, m, "spill", a)]
            for p in [p for p in self.producers if p in SEED_PRODUCERS]:
                cells = self._cells("transfer cache", "spill", [m], [p], [a], timing, [wl])
                i = SEED_PRODUCERS.index(p)
                if cells:
                    cells[0].label = "%s %s %dp/%d" % (wl, m, p, a)
                    out.append(SeedCell(cells[0].label, 100.0 * (spill[i] / ns[i] - 1.0),
                                        None, cells[0], True))
        return out

    # -- claims --

    def claims(self, timing=None):
        timing = timing or self.timings[0]
        out = []
        for wl in self.workloads:
            out += self._savings_claims(wl, timing)
            if wl == "malloc-free":
                out += self._helps_claims(wl, timing)
            out += [c for c in self._design_claims(wl, timing)
                    if "the two designs are the same" in c[1].text
                    or "at 1 producer" in c[1].text]
        if any(d == BASELINE[0] for d, _ in self.designs):
            out += self._tldr_claims(timing)
        return out

    def _savings_claims(self, wl, timing):
        """The seed's savings at 2-8 producers, per operation, as ranges."""
        prods = [p for p in self.producers if 2 <= p <= 8]
        big = [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY]
        sec = "libarena-%s (%s frees)" % (wl, "cross-CPU" if wl == "malloc-xfree"
                                          else "same-CPU")
        out = []
        for m, desc in METRICS:
            lo, hi = SEED_SAVINGS.get((wl, m), (None, None))
            cells = self._cells("transfer cache", "spill", [m], prods, big, timing, [wl])
            if lo is None or not cells:
                continue
            out.append((sec, V.Claim(
                "at %s producers and %s allocs/cycle the transfer cache saves %d-%d%% of "
                "spill's %s (%.2fx-%.2fx faster) in every cell" % (
                    "/".join(map(str, prods)), "/".join(map(str, big)), lo, hi, desc,
                    100.0 / (100 - lo), 100.0 / (100 - hi)),
                cells, "same", within=(1 - hi / 100.0, 1 - lo / 100.0),
                words=("faster", "slower")),
                "%d-%d%% of the %s time with 2-8 producers" % (lo, hi, desc.split()[0])))
        return out

    def _helps_claims(self, wl, timing):
        """"The transfer cache helps even in malloc-free": latency, and the
        counters that the seed says explain it (fewer buddy locks)."""
        prods = [p for p in self.producers if p >= 2]
        big = [a for a in self.allocs_per_cycle if a > CACHE_CAPACITY]
        sec = "the transfer cache helps even in libarena-malloc-free"
        lat = self._cells("transfer cache", "spill", [m for m, _ in METRICS], prods, big,
                          timing, [wl])
        locks = self._cells("transfer cache", "spill", ["buddy.lock_acquired_per_op"], prods,
                            big, timing, [wl])
        out = []
        if lat:
            out.append((sec, V.Claim(
                "on malloc-free (each worker frees its own objects) at %s producers the "
                "transfer cache cuts alloc and free time against spill" % "/".join(
                    map(str, prods)), lat, "lower", words=("faster", "slower")),
                "helps even where nothing moves between CPUs"))
        if locks:
            out.append((sec, V.Claim(
                "on malloc-free at %s producers the transfer cache takes fewer buddy locks "
                "per op than spill (parked batches come back without the buddy)" % "/".join(
                    map(str, prods)), locks, "lower", words=("fewer", "more")),
                "batches most likely rarely go back to the buddy"))
        return out

    def _tldr_claims(self, timing):
        """The TL;DR: each cached design against libarena without caches (the
        plain buddy of the same grid), 2-4x lower at 1 producer, 10-100x at 8."""
        sec = "per-CPU caches against no cache (plain buddy), the TL;DR"
        lat = [m for m, _ in METRICS]
        out = []
        for d, _ in self.designs:
            if d == BASELINE[0]:
                continue
            for p, (lo, hi) in sorted(TLDR.items()):
                if p not in self.producers:
                    continue
                cells = self._cells(d, BASELINE[0], lat, [p], self.allocs_per_cycle, timing)
                if cells:
                    out.append((sec, V.Claim(
                        "%s: at %d producer%s %g-%gx lower alloc and free latency than no "
                        "cache" % (d, p, "" if p == 1 else "s", lo, hi), cells, "same",
                        within=(1.0 / hi, 1.0 / lo), words=("faster", "slower")),
                        "TL;DR: %s" % ("2-4x lower alloc/free latency for single threaded"
                                       if p == 1 else "10x-100x lower for 8 producers")))
        return out

    # -- judgements, all predictions --

    def rule_line(self):
        return ("holds = every cell's 95%% CI beyond the claimed size, or its 90%% CI inside "
                "a claimed range (TOST at %g); does not hold = a cell contradicts it, p < %g "
                "after Benjamini-Hochberg over the report's %d cells; every cell simulated, "
                "so every judgement is a prediction" % (
                    self.alpha, self.alpha,
                    sum(len(v.cells) for _, v, _ in self.verdicts())))

    def verdict_text(self):
        lines = ["Seed conclusions, %s; %s:" % (PREDICTED, calibration_words(self.cal)),
                 "(%s)" % self.rule_line()]
        last = None
        for section, v, ctx in self.verdicts():
            if section != last:
                lines.append("%s:" % section)
                last = section
            lines.append("- %s: %s%s" % (self.tag(), v.text(),
                                          " [seed: %s]" % ctx if ctx else ""))
        n = len(self.verdicts())
        decided = sum(1 for _, v, _ in self.verdicts() if v.outcome != V.OPEN)
        lines.append("%d of %d predictions decided (%s); none is judged measured." % (
            decided, n, self.tag()))
        return "\n".join(lines)

    def direction_text(self, wrap=104):
        text = super().direction_text(wrap)
        return ("%s: " % self.tag()) + text.replace("at real-CPU producer counts",
                                                     "at every simulated producer count", 1)

    # -- the seed's ratios --

    def ratio_rows(self, timing=None, producers=RATIO_PRODUCERS):
        """Transfer against spill per seed cell at ``producers``: dicts with
        the seed's ratio (spill / transfer), the simulated one (of the
        means), its 95% CI (the verdict engine's estimate), whether it has
        the seed's direction, and simulated / seed."""
        timing = timing or self.timings[0]
        rows = []
        for (wl, m, d, a), ns in SEED_NS.items():
            if d != "transfer cache" or wl not in self.workloads:
                continue
            for p in producers:
                cells = self._cells("transfer cache", "spill", [m], [p], [a], timing, [wl])
                if p not in SEED_PRODUCERS or not cells:
                    continue
                i = SEED_PRODUCERS.index(p)
                seed = SEED_NS[(wl, m, "spill", a)][i] / ns[i]
                est = cells[0].est
                sim = 1.0 / est.factor(est.theta)
                ci = sorted(1.0 / est.factor(v) for v in cells[0].interval())
                bd = self._band(wl, m, timing, p, a)
                rows.append({"workload": wl, "metric": m, "allocs_per_cycle": a,
                             "producers": p, "seed_ratio": seed, "simulated_ratio": sim,
                             "ci": ci, "band": bd,
                             "band_flips": any((b > 1) != (sim > 1) for b in bd),
                             "direction": bool((sim > 1) == (seed > 1)
                                               and not any((b > 1) != (sim > 1) for b in bd)),
                             "significant": bool(ci[0] > 1 or ci[1] < 1),
                             "share": sim / seed,
                             "within": bool(RATIO_BAND[0] <= sim / seed <= RATIO_BAND[1])})
        return rows

    def _band(self, wl, m, timing, p, a):
        """spill / transfer with the line transfer cost times each factor of
        the band ([] when the band was not run)."""
        out = []
        for f in self.settings.get("band") or ():
            key = band_key(f, wl)
            t = sim_side(self.points(key, "transfer cache", timing, p, a), self.metric(m))
            s = sim_side(self.points(key, "spill", timing, p, a), self.metric(m))
            if t is not None and s is not None:
                out.append(float(np.mean(s.values) / np.mean(t.values)))
        return out

    def ratio_summary(self, rows=None):
        rows = self.ratio_rows() if rows is None else rows
        n = len(rows)
        k = sum(r["direction"] for r in rows)
        w = sum(r["within"] for r in rows)
        return {"cells": n, "direction": k,
                "band_inconclusive": sum(r["band_flips"] for r in rows),
                "direction_significant": sum(r["direction"] and r["significant"] for r in rows),
                "within": w, "band": list(RATIO_BAND),
                "share_within": w / n if n else None, "goal": RATIO_GOAL,
                "calibration": self.cal.get("id"), "kind": "predicted"}

    def ratio_table(self):
        rows = self.ratio_rows()
        if not rows:
            return ""
        lines = ["Transfer cache against spill at %s producers, spill/transfer (> 1: the "
                 "transfer cache is faster), %s; seed: the seed's tables; band: the ratio with "
                 "the line transfer cost x%s:" % (
                     "/".join(map(str, RATIO_PRODUCERS)), self.tag(),
                     "/x".join("%g" % f for f in self.settings.get("band") or ())), "",
                 "  %-13s %-6s %5s %3s %7s %10s %-11s %-11s %-14s %6s %7s" % (
                     "workload", "op", "apc", "p", "seed", "predicted", "95% CI",
                     "band", "direction", "p/s", "0.5-2x")]
        for r in rows:
            lines.append("  %-13s %-6s %5d %3d %7.2f %10.2f %-11s %-11s %-14s %6.2f %7s" % (
                r["workload"], r["metric"][:-3], r["allocs_per_cycle"], r["producers"],
                r["seed_ratio"], r["simulated_ratio"], "%.2f-%.2f" % tuple(r["ci"]),
                "/".join("%.2f" % b for b in r["band"]) or "-",
                _direction_word(r), r["share"],
                "yes" if r["within"] else "no"))
        s = self.ratio_summary(rows)
        lines += ["", "%s: transfer against spill in the seed's direction in %d of %d cells "
                  "(%d with the 95%% CI clear of 1; n.s.: not; %s); the simulated ratio within "
                  "%g-%gx of the seed's in %d of %d (%.0f%%; the figure asks at least %.0f%%). "
                  "p/s: predicted / seed. The seed's numbers are compared, never fitted." % (
                      self.tag(), s["direction"], s["cells"], s["direction_significant"],
                      "%d inconclusive: the direction flips with the line transfer cost "
                      "x%s" % (s["band_inconclusive"], " or x".join(
                          "%g" % f for f in self.settings["band"]))
                      if self.settings.get("band") else "no sensitivity band run",
                      RATIO_BAND[0], RATIO_BAND[1], s["within"], s["cells"],
                      100.0 * s["share_within"], 100 * RATIO_GOAL)]
        return "\n".join(lines)

    # -- text and data --

    def counters(self, timing=None, rows=None):
        return super().counters(timing, rows).replace(
            "(measured phase,", "(the real code on simulated CPUs, counts of the simulated "
            "schedule: predictions where they depend on timing; timed phase,", 1)

    def body(self):
        parts = [t for t in super().body() if t != self.cpu_note()]
        return [self.cpu_note()] + parts + [t for t in (self.ratio_table(),) if t]

    def machine_lines(self):
        return ["simulated cells: the host's load and steal time bear on the calibration "
                "only, not on a virtual clock"]

    def warning_lines(self, wrap=104):
        keep = []
        for line in super().warning_lines(wrap):
            if line.startswith(("workers preempted", "steal time >", "measured phases "
                                "shorter")):
                keep.append(None)
            elif keep and keep[-1] is None and line.startswith("    "):
                continue  # the wrapped rest of a host warning left out
            else:
                keep.append(line)
        return [x for x in keep if x is not None]

    def to_dict(self):
        d = super().to_dict()
        for v in d["verdicts"]:
            v["kind"] = "predicted"
            v["calibration"] = self.cal.get("id")
        d["direction_share"]["kind"] = "predicted"
        d["seed_ratios"] = {"rows": self.ratio_rows(), "summary": self.ratio_summary()}
        return d


# ---- latency against CPUs, 1 to 256 ----

def libarena_scaling(cpus=SCALING_CPUS, designs=SCALING_DESIGNS, workload=SCALING_WORKLOAD,
                     allocs_per_cycle=SCALING_APC, runs=3, duration=0.02, measured_runs=5,
                     measured_duration=0.1, calibration=None, line_transfer=None,
                     lines_per_handoff=None, size=64, timing="per_op_sum", measured=True,
                     progress=False, seed=1):
    """Latency against CPUs for ``designs``: simulated at every count of
    ``cpus`` (predictions), measured (pinned, steal reruns) at the counts
    this machine has; a Scaling. measured=False: the simulated lines only."""
    designs = [tuple(d) for d in designs]
    specs = [s for _, s in designs]
    cal, cal_info = resolve_calibration(calibration, specs, line_transfer, lines_per_handoff)
    usable = int(lib.al_cpus_usable())
    common = dict(allocs_per_cycle=allocs_per_cycle, size=size, timing=timing, mem_sample=0,
                  progress=progress, seed=seed)
    results = {"simulated": _run(workload, specs, runs=runs, producers=list(cpus),
                                 cpu="simulated", calibration=cal, duration=duration,
                                 **common)}
    pinned = [p for p in cpus if p <= usable]
    if measured and pinned:
        results["measured"] = _run(workload, specs, runs=measured_runs, producers=pinned,
                                   cpu="pinned", duration=measured_duration,
                                   steal_reruns=STEAL_RERUNS, **common)
    settings = {"designs": [list(d) for d in designs], "workload": workload,
                "allocs_per_cycle": allocs_per_cycle, "timing": timing, "runs": runs,
                "duration": duration, "measured_runs": measured_runs,
                "measured_duration": measured_duration, "usable_cpus": usable,
                "calibration": cal_info, "cpus": list(cpus)}
    return Scaling(results, settings)


class Scaling:
    """Latency against CPUs: "simulated" and "measured" Results of one
    cell, per design; a table, JSON and the figure."""

    FORMAT = "alloclab-libarena-scaling"

    def __init__(self, results, settings):
        self.results = dict(results)
        self.settings = dict(settings)
        self.designs = [tuple(d) for d in settings["designs"]]

    @property
    def cal(self):
        return self.settings.get("calibration") or {}

    def series(self, design, metric, kind):
        """[(cpus, mean, 95% CI half-width)] of one design's ``kind``
        ("simulated" or "measured"), by CPUs."""
        res = self.results.get(kind)
        out = []
        for p in sorted({pt.params["producers"] for pt in res.points} if res else ()):
            pts = res.select(policy=dict(self.designs)[design], producers=p)
            s = side(pts, metric)
            if s is not None and len(s.values):
                st = _stats.describe(s.values)
                out.append((p, st.mean, st.ci_half))
        return out

    def text(self):
        lines = ["libarena-%s, %d allocs/cycle, %s timing: latency (ns) against CPUs; "
                 "simulated: %s; measured: pinned" % (
                     self.settings["workload"], self.settings["allocs_per_cycle"],
                     self.settings["timing"], calibration_words(self.cal))]
        cpus = self.settings["cpus"]
        for m, desc in METRICS:
            lines += ["", "%s:" % desc, "  %-16s %-9s" % ("design", "") + "".join(
                ("%d" % p).rjust(8) for p in cpus)]
            for d, _ in self.designs:
                for kind in ("simulated", "measured"):
                    got = {p: v for p, v, _ in self.series(d, m, kind)}
                    if got:
                        lines.append("  %-16s %-9s" % (d, kind[:9]) + "".join(
                            ("%.0f" % got[p] if p in got else "-").rjust(8) for p in cpus))
        lines += ["", "simulated rows are %s; measured rows ran pinned on this machine's %d "
                  "usable CPUs" % (PREDICTED, self.settings["usable_cpus"])]
        return "\n".join(lines)

    __str__ = text

    def to_dict(self):
        return {"format": self.FORMAT, "settings": self.settings,
                "results": {k: r.to_dict() for k, r in self.results.items()}}

    def to_json(self, path=None):
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, s):
        d = load_json(s)
        if not isinstance(d, dict) or d.get("format") != cls.FORMAT:
            raise errors.FileFormatError("not an %s (format %r)" % (
                cls.FORMAT, d.get("format") if isinstance(d, dict) else type(d).__name__))
        if not isinstance(d.get("results"), dict) or not isinstance(d.get("settings"), dict):
            raise errors.FileFormatError("not an %s: it needs results and settings objects"
                                         % cls.FORMAT)
        return cls({k: Result.from_dict(v) for k, v in d["results"].items()}, d["settings"])

    def plot(self, metrics=None):
        """Latency against CPUs (log x), a panel per metric: simulated lines,
        measured points (plot_reproduce.scaling)."""
        return plot_reproduce.scaling(self, metrics or METRICS)
