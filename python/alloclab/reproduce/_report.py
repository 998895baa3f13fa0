"""What the three reproductions share: Results, claims judged by one engine
(alloclab.verdict), the instability warnings, JSON and figures.

A report subclass provides its tables (``body``), its claims (``claims``)
and its figures (``figures``); this base turns them into text whose every
verdict comes from the engine, prints the warnings that say which numbers
not to trust, and reads and writes the same JSON for all three:

    {"format": "alloclab-<name>-report", "version": 2, "settings": {...},
     "results": {key: Result.to_dict(), ...}}

Directions: each report names the cells of the seed's own table it
measured (seed_cells) and direction_share() says how many of them the model
moves the way the seed does. A seed cell's direction is its mark, or
better/worse when the seed's relative difference is at least the report's
threshold (direction_threshold: the minimum effect its verdicts use), else
"same"; the model's is better/worse when the cell decides (no verdict-engine
problem), its two-sided p-value (the engine's estimate: paired t, or Welch)
is below alpha after Benjamini-Hochberg over the seed cells, and its change
is at least the same threshold, else "same". Matching: the two are equal.
A seed cell whose two sides did the same counted work in the model
(SeedCell.same_work: the reproduction says which) is labelled "same work in
the model: no direction expected" instead of being counted as a miss; it
stays in the share's denominator, and the share over the other cells is
printed beside it.

Steal time: every reproduction runs a round of its A/B comparison again,
both sides together and in the same order, when the host stole more than
stats.STEAL_WARN_PCT of a run's CPU time (the verdict engine would leave
that pair out), at most run.STEAL_RERUNS times, keeping the attempt with
the least steal (run.run_round; libarena through run()'s steal_reruns);
the setup line says how many rounds were run again. Which attempt is kept
depends only on the steal, never on the times measured.

Progress: each reproduction counts its runs (or rows) on a progress_bar
(progress.Bar): a tqdm bar on a terminal for a job that lasts, none when
stderr is piped, always with progress=True (--progress).
"""

import math
import statistics
from collections import namedtuple

from .. import errors
from ..host import machine
from ..present import plot
from ..results import stats as _stats
from ..judge import verdict as V
from ..measure.progress import Bar as progress_bar  # noqa: F401 (the reproductions' bars)
from ..results.result import Result, dump_json, load_json
from ..measure.run import (  # noqa: F401 (the reproductions' rounds)
    STEAL_RERUNS, rerun_tally, run_round)

REPORT_VERSION = 2

# One cell of the seed's own table: its name, the seed's change in percent
# (positive = better), the seed's mark ("I", "R", "" or None when it has
# none: then the direction comes from the change), the verdict engine's
# comparison Cell of the same two sides here, whether lower is better, and
# whether the model's two sides did the same counted work per operation
# (then no direction can follow from the model: the cell is labelled so,
# counted apart from the misses, and kept in the denominator), and the
# excuse: None, or why the cell is outside the goal, declared in the
# reproduction's own table before any run (the kernel code that makes the
# seed's direction unreachable, or the seed's own statistics); the model's
# counters are never an excuse.
SeedCell = namedtuple("SeedCell", "name seed_pct mark cell lower_is_better same_work excuse",
                      defaults=(False, None))

# The goal's magnitude band: a decided cell's model/seed effect ratio within
# these bounds counts as matching in size.
MAGNITUDE_BAND = (1.0 / 3.0, 3.0)

SAME_WORK_LABEL = "same work in the model: no direction expected"

_MARKS = {"I": "better", "R": "worse", "": "same"}


class Report:
    """Results keyed by name, the settings they were run with, and their
    reading. Subclasses set FORMAT and TITLE and define body(), claims()
    and figures()."""

    FORMAT = "alloclab-report"
    TITLE = ""
    WARN_METRICS = ("alloc_ns", "free_ns")  # metrics whose cells get stability warnings

    def __init__(self, results, settings=None):
        self.results = dict(results)
        self.settings = dict(settings or {})
        self._verdicts = None

    # -- to be provided --

    def body(self):
        """The tables and counters, as a list of text blocks."""
        return []

    def claims(self):
        """[(section, Claim, seed context)]: what the seed concludes, as claims
        on this data; seed context is a short string shown beside it."""
        return []

    def figures(self):
        """[(matplotlib Figure, file suffix)], the suffixes figure_suffixes'."""
        return []

    # -- verdicts --

    @property
    def alpha(self):
        return self.settings.get("alpha", V.ALPHA)

    def verdicts(self):
        """[(section, Verdict, seed context)]: every claim judged together (one
        Benjamini-Hochberg family for the report)."""
        if self._verdicts is None:
            cl = self.claims()
            vs = V.judge([c for _, c, _ in cl], alpha=self.alpha)
            self._verdicts = [(s, v, ctx) for (s, _, ctx), v in zip(cl, vs)]
        return self._verdicts

    def verdict_text(self):
        lines = ["Seed conclusions on this machine (%s):" % self.rule_line()]
        last = None
        for section, v, ctx in self.verdicts():
            if section != last:
                lines.append("%s:" % section)
                last = section
            lines.append("- " + v.text() + (" [seed: %s]" % ctx if ctx else ""))
        n = len(self.verdicts())
        decided = sum(1 for _, v, _ in self.verdicts() if v.outcome != V.OPEN)
        by = {"latency": [0, 0], "counters": [0, 0]}
        for _, v, _ in self.verdicts():
            k = by[v.decided_by()]
            k[0] += v.outcome != V.OPEN
            k[1] += 1
        lines.append("%d of %d claims decided: %d of %d on latency, %d of %d on counters." % (
            decided, n, by["latency"][0], by["latency"][1], by["counters"][0],
            by["counters"][1]))
        return "\n".join(lines)

    def rule_line(self):
        return ("holds = every cell's 95%% CI beyond the claimed size (TOST at %g for "
                "'the same'); does not hold = a cell contradicts it, p < %g after "
                "Benjamini-Hochberg over the report's %d cells; latency on virtual CPUs never "
                "decides" % (self.alpha, self.alpha,
                             sum(len(v.cells) for _, v, _ in self.verdicts())))

    def decided_share(self, real_only=True):
        """(decided, total) over the claims; real_only: those that latency
        measured on real CPUs or counters can decide (no virtual-CPU latency)."""
        n = d = 0
        for _, v, _ in self.verdicts():
            if real_only and any(k == "virtual" for c in v.cells for k, _ in c.problems):
                continue
            n += 1
            d += v.outcome != V.OPEN
        return d, n

    # -- directions against the seed --

    SEED_CELLS = "the cells of the seed's table"  # what seed_cells() returns, in words
    DIRECTION_THRESHOLD = V.THRESHOLD

    def seed_cells(self):
        """[SeedCell]: the cells of the seed's own table measured here, at
        producer counts that run on real CPUs."""
        return []

    def direction_threshold(self):
        """The minimum relative change (a fraction) that has a direction."""
        return self.DIRECTION_THRESHOLD

    def _direction(self, pct):
        thr = 100.0 * self.direction_threshold()
        if not math.isfinite(pct) or abs(pct) < thr:
            return "same"
        return "better" if pct > 0 else "worse"

    def direction_share(self):
        """How many seed cells the model moves the seed's way: a dict with
        cells (N), matching (K), share (K/N, None when N is 0),
        same_sign_not_significant (M), opposite (the names, significant
        the other way or where the seed has no change),
        opposite_sign_not_significant, same_work (the names of the cells
        whose two sides did the same counted work in the model: a miss
        there is labelled, not counted as opposite or not significant),
        differing_cells and differing_matching (N and K over the other
        cells), threshold, alpha, the definition, and each cell's detail."""
        cells = self.seed_cells()
        ps = [_two_sided_p(c.cell.est) for c in cells]
        adj = _stats.bh_adjust(ps) if cells else []
        detail, k, same_sign, other_sign, opposite, same_work = [], 0, 0, 0, [], []
        k_differ, unsure, by_sign = 0, [], []
        for c, pa in zip(cells, adj):
            seed = _MARKS[c.mark] if c.mark is not None else self._direction(c.seed_pct)
            pct = _improvement_pct(c.cell.est, c.lower_is_better)
            signed = not c.cell.decides and self._every_pair_one_side(c.cell)
            model = (self._direction(pct) if (c.cell.decides or signed) and pa < self.alpha
                     else "same")
            if signed and model != "same":
                by_sign.append(c.name)
            if c.same_work:
                same_work.append(c.name)
            if model == seed:
                k += 1
                k_differ += not c.same_work
            elif c.same_work:
                pass  # no direction expected: labelled, not a miss
            elif model != "same":
                opposite.append(c.name)
            elif math.isfinite(pct) and (pct > 0) == (seed == "better"):
                same_sign += 1
                unsure.append(c.name)
            else:
                other_sign += 1
            detail.append({"cell": c.name, "seed": seed, "seed_pct": c.seed_pct,
                           "model": model, "model_pct": pct, "p_adj": float(pa),
                           "same_work": bool(c.same_work), "excuse": c.excuse})
            ns = self.cell_ns(c.name)
            if ns is not None:
                detail[-1].update(model_ns=ns[0], seed_ns=ns[1])
        n = len(cells)
        return {"cells": n, "matching": k, "share": k / n if n else None,
                "same_sign_not_significant": same_sign, "same_sign_cells": unsure,
                "decided_by_sign": by_sign, "opposite": opposite,
                "opposite_sign_not_significant": other_sign, "same_work": same_work,
                "differing_cells": n - len(same_work), "differing_matching": k_differ,
                "threshold": self.direction_threshold(), "alpha": self.alpha,
                "definition": self.direction_definition(), "detail": detail,
                "goal": goal_shares(detail)}

    def cell_ns(self, name):
        """(model, seed) change of a seed cell in ns per operation, for
        reproductions whose cells pair the model with work of the machine
        itself (a real socket or thread per create), where a percent is over
        each machine's own whole: None where percent is the only reading."""
        return None

    def _every_pair_one_side(self, cell):
        """Whether a cell whose only problem is bimodal paired ratios still
        has a direction: every pair's change lies beyond the direction
        threshold on the same side. The two groups then disagree on the
        size, not on the side, and a sign test over the pairs (p = 2^(1-n),
        two-sided) is below alpha; the cell's size still comes from its t
        estimate."""
        est = cell.est
        if not cell.problems or any(k != "bimodal" for k, _ in cell.problems):
            return False
        if est.pair_range is None or est.scale != "ratio" or 2.0 ** (1 - est.n) >= self.alpha:
            return False
        bound = -math.log(1.0 - self.direction_threshold())
        return est.pair_range[0] >= bound or est.pair_range[1] <= -bound

    def goal_text(self, wrap=104):
        """The goal's shares as printed: cells, excused (with reasons), in
        direction, decided, the median model/seed effect and how many decided
        cells lie within the magnitude band."""
        g = self.direction_share()["goal"]
        lines = wrap_lines(
            "goal shares: %d cells, %d excused before any run; in direction %d of %d; "
            "decided %d; %s" % (g["cells"] + len(g["excused"]), len(g["excused"]),
                                g["matching"], g["cells"], g["decided"],
                                _magnitude_text(g, " over the decided cells")), wrap, "")
        for x in g["excused"]:
            lines += wrap_lines("excused: %s: %s" % (x["cell"], x["reason"]), wrap, "  ")
        lines += wrap_lines(
            "(goal cells: the seed cells less the excused; decided: the model better or worse "
            "as above; effect ratio: the model's change over the seed's, both in percent, "
            "negative where they differ in sign%s)" % (
                self.ns_definition() if g.get("ratios_ns") else ""), wrap, "  ")
        return lines

    def ns_definition(self):
        """The goal note's words on the ns-per-operation reading ('' without one)."""
        return ""

    def direction_definition(self):
        return ("a seed cell: %s; the seed's direction: its mark, else better/worse when its "
                "change is at least %g%%, else same; the model's: better/worse when the "
                "verdict engine's two-sided test of the cell is significant (p < %g after "
                "Benjamini-Hochberg over the seed cells; none of the engine's problems: steal "
                "time, bimodal (unless every pair's change is beyond the threshold on one "
                "side), too few or truncated runs, latency on virtual CPUs) and the change is "
                "at least %g%%, else same" % (
                    self.SEED_CELLS, 100 * self.direction_threshold(), self.alpha,
                    100 * self.direction_threshold()))

    def direction_text(self, wrap=104):
        """The direction share as printed: the count line, the opposite cells
        by name, and the definition."""
        d = self.direction_share()
        n = d["cells"]
        line = ("seed cells matching in direction: %d of %d (%s), at real-CPU producer counts; "
                "%d with the seed's sign but not significant; %d opposite" % (
                    d["matching"], n, "%.0f%%" % (100 * d["share"]) if n else "n/a",
                    d["same_sign_not_significant"], len(d["opposite"])))
        if d["opposite_sign_not_significant"]:
            line += "; %d not significant with the opposite sign" % (
                d["opposite_sign_not_significant"])
        if d["same_work"]:
            m = d["differing_cells"]
            line += ("; %d of %d (%s) where the model's two sides do different work, %d with the same work "
                     "in the model" % (d["differing_matching"], m,
                                       "%.0f%%" % (100.0 * d["differing_matching"] / m)
                                       if m else "n/a", len(d["same_work"])))
        lines = [line]
        by = {x["cell"]: x for x in d["detail"]}

        def cell(nm):
            return "%s (seed %s %+.1f%%, model %s %+.1f%%)" % (
                nm, by[nm]["seed"], by[nm]["seed_pct"], by[nm]["model"], by[nm]["model_pct"])
        if d["opposite"]:
            lines.append("  opposite: " + "; ".join(cell(nm) for nm in d["opposite"]))
        if d.get("same_sign_cells"):
            lines += wrap_lines("the seed's sign, not significant or under the threshold: " +
                                "; ".join(cell(nm) for nm in d["same_sign_cells"]), wrap, "  ")
        if d.get("decided_by_sign"):
            lines += wrap_lines("bimodal, every pair on one side beyond the threshold: " +
                                "; ".join(cell(nm) for nm in d["decided_by_sign"]), wrap, "  ")
        if d["same_work"]:
            lines.append("  %s: %s" % (SAME_WORK_LABEL, "; ".join(
                cell(nm) for nm in d["same_work"])))
        lines += wrap_lines("(" + d["definition"] + ")", wrap, "  ")
        return "\n".join(lines)

    # -- warnings --

    def warning_lines(self, wrap=104):
        """The instability warnings over every cell of the report's metrics,
        the machine's state, and short measured phases."""
        cells = []
        for key, res in self.results.items():
            for m in self.WARN_METRICS:
                for params, st in res.stats(m) if m in res.metrics() else ():
                    cells.append(("%s %s" % (self.cell_label(key, params), m), st))
        lines = _stats.warning_lines(cells, wrap=wrap)
        lines += self.machine_lines()
        return lines

    def cell_label(self, key, params):
        keep = [k for k in ("policy", "producers", "allocs_per_cycle") if k in params]
        return " ".join([str(key)] + ["%s" % params[k] if k == "policy" else "%s=%s" % (
            k, params[k]) for k in keep])

    def machine_lines(self):
        """What was bad in the machine's state: as recorded with the first
        Result, with the load average before and after the whole reproduction
        (the settings' load_before/load_after, else the Results')."""
        if not self.results:
            return []
        res = list(self.results.values())
        md = dict(res[0].metadata)
        md["load_before"] = self.settings.get("load_before", md.get("load_before"))
        md["load_after"] = self.settings.get("load_after", res[-1].metadata.get("load_after"))
        return machine.warnings(md)

    def settings_line(self):
        s = self.settings
        bits = ["effort %s" % s.get("effort", "normal")]
        if s.get("runs") is not None:
            bits.append("%s runs per cell" % s["runs"])
        if s.get("duration") is not None:
            bits.append("%g s measured per run" % s["duration"])
        return "Setup: " + ", ".join(bits + self.rerun_bits()) + "."

    def effort_line(self):
        """The setup line of a report whose tables say their runs: the effort,
        and the rounds run again for steal time."""
        return "Setup: " + ", ".join(["effort %s" % self.settings.get("effort", "normal")]
                                     + self.rerun_bits()) + "."

    def rerun_bits(self):
        """The setup line's note of rounds run again for steal time."""
        n, tries = self.settings.get("steal_rerun_rounds"), self.settings.get("steal_rerun_attempts")
        if not n:
            return []
        return ["%d round%s of %d run again for steal time above %g%% (%d attempt%s more in "
                "all, the least disturbed kept; up to %.1f%% stolen in one not kept)" % (
                    n, "" if n == 1 else "s", self.settings.get("rounds", 0),
                    _stats.STEAL_WARN_PCT, tries, "" if tries == 1 else "s",
                    self.settings.get("steal_discarded_max_pct", float("nan")))]

    # -- text --

    def __str__(self):
        parts = [self.TITLE, self.settings_line(), ""] if self.TITLE else []
        for block in self.body():
            parts += [block, ""]
        parts.append(self.verdict_text())
        parts += ["", self.direction_text()]
        parts += self.goal_text()
        w = self.warning_lines()
        if w:
            parts += ["", "warnings:"] + ["  " + x for x in w]
        return "\n".join(parts)

    # -- data --

    def to_dict(self):
        return {"format": self.FORMAT, "version": REPORT_VERSION, "settings": self.settings,
                "results": {k: r.to_dict() for k, r in self.results.items()},
                "verdicts": [dict(v.to_dict(), section=s, seed=ctx)
                             for s, v, ctx in self.verdicts()],
                "direction_share": self.direction_share()}

    def to_json(self, path=None):
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, s):
        """A report from to_json() text, or a path to such a file."""
        d = load_json(s)
        if d.get("format") != cls.FORMAT:
            raise errors.FileFormatError("not an %s (format %r)" % (cls.FORMAT, d.get("format")))
        if d.get("version") != REPORT_VERSION:
            raise errors.InvalidArgument(
                "%s version %r: this alloclab reads version %d; rerun the reproduction"
                % (cls.FORMAT, d.get("version"), REPORT_VERSION))
        if not isinstance(d.get("results"), dict) or not isinstance(d.get("settings"), dict):
            raise errors.FileFormatError("not an %s: results and settings must be objects"
                                         % cls.FORMAT)
        cls.check_settings(d["settings"])
        return cls({k: Result.from_dict(v) for k, v in d["results"].items()}, d["settings"])

    @classmethod
    def check_settings(cls, settings):
        """A FileFormatError naming the first setting a report read from a
        file holds of a type the text does not read."""
        for k in ("load_before", "load_after"):
            v = settings.get(k)
            if v is not None and (not isinstance(v, dict) or not all(
                    isinstance(x, (int, float, type(None))) and not isinstance(x, bool)
                    for x in v.values())):
                raise errors.FileFormatError("not an %s: settings.%s is %r, not an object of "
                                             "numbers (a load average)" % (cls.FORMAT, k, v))

    @classmethod
    def figure_suffixes(cls, workloads=None):
        """The file suffixes of figures() ("" for the first), known before a
        run so that every file a plot writes is checked first."""
        return [""]

    def save_figures(self, path):
        """Write the figures: one PDF with a page each, or one file per figure
        (the first at PATH, the others at PATH-<suffix>.<ext>), as
        alloclab.plot.save writes them. Returns the paths written."""
        return plot.save(self.figures(), path)


def goal_shares(detail):
    """The goal's shares over direction_share()'s detail: the excused cells
    ({cell, reason}) set apart; over the rest, cells, matching (in the seed's
    direction, same_work cells included as they come), decided (the model
    better or worse), the model/seed effect ratio of each decided cell, its
    median, and how many lie within MAGNITUDE_BAND."""
    excused = [{"cell": x["cell"], "reason": x["excuse"]} for x in detail if x.get("excuse")]
    rest = [x for x in detail if not x.get("excuse")]
    ratios = {}
    for x in rest:
        if x["model"] in ("better", "worse") and x["seed_pct"] and math.isfinite(x["model_pct"]):
            ratios[x["cell"]] = x["model_pct"] / x["seed_pct"]
    vals = list(ratios.values())
    lo, hi = MAGNITUDE_BAND
    out = {"cells": len(rest), "excused": excused,
           "matching": sum(1 for x in rest if x["model"] == x["seed"]),
           "decided": len(ratios), "ratios": ratios,
           "median_ratio": statistics.median(vals) if vals else None,
           "within": sum(1 for v in vals if lo <= v <= hi), "band": list(MAGNITUDE_BAND)}
    ns = {x["cell"]: x["model_ns"] / x["seed_ns"] for x in rest
          if x["cell"] in ratios and "seed_ns" in x and x["seed_ns"]
          and math.isfinite(x["model_ns"]) and math.isfinite(x["seed_ns"])}
    if ns:
        out.update(ratios_ns=ns, median_ratio_ns=statistics.median(ns.values()),
                   within_ns=sum(1 for v in ns.values() if lo <= v <= hi))
    return out


def _magnitude_text(g, over=""):
    """A goal's median effect ratio and its decided cells within the band
    (and the same in ns per operation, where the report has that reading)."""
    med = g["median_ratio"]
    out = "median model/seed effect%s %s; %d of %d decided within %.2f-%gx" % (
        over, "n/a" if med is None else "%.2f" % med, g["within"], g["decided"],
        MAGNITUDE_BAND[0], MAGNITUDE_BAND[1])
    if g.get("ratios_ns"):
        out += ("; a second reading, not the goal's, in ns per operation: median %.2f, %d of "
                "%d within" % (g["median_ratio_ns"], g["within_ns"], len(g["ratios_ns"])))
    return out


def rounds_text(reports, names, wrap=104):
    """The goal across rounds: several reports of one reproduction (each a
    round, named by ``names``), each round's goal line, and the goal cells in
    the seed's direction in every round."""
    goals = [r.direction_share() for r in reports]
    lines = ["Rounds: %d reports of %s" % (len(reports), reports[0].FORMAT)]
    every = None
    for nm, d in zip(names, goals):
        g = d["goal"]
        lines.append("  %s: in direction %d of %d; %s" % (nm, g["matching"], g["cells"],
                                                          _magnitude_text(g)))
        ok = {x["cell"] for x in d["detail"] if not x.get("excuse") and x["model"] == x["seed"]}
        every = ok if every is None else every & ok
    cells = [x["cell"] for x in goals[0]["detail"] if not x.get("excuse")]
    missed = [c for c in cells if c not in every]
    lines.append("in the seed's direction in all %d rounds: %d of %d goal cells" % (
        len(reports), len(every & set(cells)), len(cells)))
    if missed:
        lines += wrap_lines("missed in at least one round: " + "; ".join(missed), wrap, "  ")
    return "\n".join(lines)


def _two_sided_p(est):
    """The two-sided p-value of "no change" from a verdict-engine Estimate."""
    p = 2.0 * min(est.p_above(0.0), est.p_below(0.0))
    return min(1.0, p) if math.isfinite(p) else math.nan


def _improvement_pct(est, lower_is_better):
    """The estimate's change in percent, positive = better: old/new - 1 for
    a lower-is-better metric (as the seeds normalise times), new/old - 1
    otherwise."""
    f = est.factor(est.theta)
    if not (math.isfinite(f) and f > 0):
        return math.nan
    return 100.0 * ((1.0 / f if lower_is_better else f) - 1.0)


def wrap_lines(text, width, indent):
    import textwrap
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + " ")


def side(points, metric, label=""):
    """verdict.Side over Points (None when none has the metric)."""
    return V.Side.from_points(points, metric, label)
