"""A/B comparison of Results, marked (I)/(R) only when the data say so.

    cmp = alloclab.compare(old, new, metric="alloc_ns")       # two Results
    cmp = alloclab.compare(old, [new1, new2])                  # a column each
    cmp = alloclab.compare(res, baseline="vmalloc-default")    # policies in one Result
    print(cmp)                   # seed 004's table; cmp.to_markdown(); cmp.heatmap()

Per cell (a metric at one set of parameters), over the runs of each side:

- the old and new mean, each with the half width of its 95% confidence
  interval and the metric's unit: ``24.1 ±0.3 ns -> 31.0 ±0.5 ns``;
- change, normalised so that positive is better: ``old/new - 1`` for a
  lower-is-better metric (latency: 2x faster is +100%, and seed 004's
  +514.75% only fits this formula), ``new/old - 1`` for a higher-is-better
  one (throughput); computed from the means;
- a two-sided test of "same distribution": Welch's t-test, or Mann-Whitney
  U when both sides have at least 6 runs and it can reach the corrected
  threshold below (test="auto"), or the one named;
- Benjamini-Hochberg correction over every cell of the table (all metrics
  and columns), so that a table of 40 cells does not find 2 differences by
  chance;
- a mark, "(I)" improvement or "(R)" regression, only when the corrected
  p-value is below ``alpha`` AND |change| >= ``threshold`` (default 2%);
  otherwise the cell says "not significant" (p_adj >= alpha) or
  "significant, < 2%" (a real but tiny difference), and keeps its change;
- pyperf compare_to's reading aid, the ratio of the means in words:
  "1.29x slower" / "1.25x faster" for times and rates (a higher rate is
  faster), "1.30x more" / "1.30x fewer" for every other metric (counters,
  per-op counts, bytes). The words say which way the values moved; whether
  that is better is the change's sign and mark.

    24.1 ±0.3 ns -> 31.0 ±0.5 ns  -22.26% (R)  1.29x slower

Under the cells, a geometric-mean row per metric and column: the geometric
mean of the normalised ratios (old/new when lower is better) over the
column's cells, as a change and a reading aid (pyperf's "Geometric mean").

Smallest attainable p: Mann-Whitney U has a floor, 2/C(n1+n2, n1)
(stats.mannwhitney_min_p: 0.0022 at 6 vs 6 runs), while Benjamini-Hochberg
over m cells needs p < alpha/m to mark a lone difference (0.00083 for 60
cells). test="auto" takes Welch's t-test (continuous, no floor) wherever
Mann-Whitney could not reach that, and the legend says which test judged
the cells and why; with test="mannwhitney" the legend says when it cannot
reach it, how many cells must differ for any mark, and the runs needed.

Cells are matched by their parameters. Between two Results, the default
key is every parameter both have, less those that are constant on each
side but differ between them (typically the policy: A ran one, B another);
``on=[...]`` names the key instead. Within one Result, ``baseline=`` picks
the old side by the value of ``by`` (default "policy": presets and specs
compare canonically), each other value of ``by`` becomes a column, and the
key is found the same way (``by`` never in it). The workload is always in
the key, and sides that ran different workloads are refused
(IncomparableError).

A cell never silently pools different cells: when a side holds several
values of a parameter outside the key (two policies on side A with
``on=["producers"]``; a size, timing, cpu mode or stats level) compare()
raises PoolingError naming the parameter and its values, unless
``pool=True``, which pools their runs and says in the legend what was
pooled. Points with equal parameters (one cell run twice, Result.concat)
are one cell and pool as before. Sides that counted at different stats
levels say so in the legend, and when they also differ in something else
(a policy) compare() warns (StatsLevelWarning): counting costs time.

Simulated CPUs give predictions: when both sides of every matched cell ran
on simulated CPUs, the comparison is of the kind "predicted"
(Comparison.kind), each cell's verdict reads "predicted (I)" and the like,
and the legend names the calibration; a simulated side against a measured
one is refused (results.simulated.MixedModesError, naming both modes).
"""

import html
import json
import math
import os
import pathlib

import numpy as np

from .. import errors
from ..results import simulated as _simulated
from ..results import stats as _stats
from ..results.metrics import METRIC_INFO, direction, unit  # noqa: F401 (public here too)
from ..results.result import Result

TESTS = ("auto", "welch", "mannwhitney")
TEST_NAMES = {"welch": "Welch's t-test", "mannwhitney": "Mann-Whitney U"}
SHORT = {"producers": "p", "allocs_per_cycle": "allocs/cycle"}


def change(old_mean, new_mean, lower):
    """The normalised change (a fraction): positive means better."""
    num, den = (old_mean, new_mean) if lower else (new_mean, old_mean)
    if den == 0 or math.isnan(den) or math.isnan(num):
        return math.nan if num == den or math.isnan(num) or math.isnan(den) else math.inf
    return num / den - 1.0


# The reading aid's words, by what a metric measures, for (new above old,
# new below old). Times and rates say "slower"/"faster" as pyperf does, so a
# higher rate is "faster"; every other metric (counters, per-op counts, bytes)
# says "more"/"fewer" of it. The words follow the values; whether that is
# better is the change's sign and mark.
AID_WORDS = {"time": ("slower", "faster"), "rate": ("faster", "slower"),
             "count": ("more", "fewer")}


def kind(metric):
    """"time", "rate" or "count": which words the reading aid uses."""
    u = unit(metric)
    if u in ("ns", "usec") or metric.endswith("_ns") or metric.endswith("_usec"):
        return "time"
    if u == "ops/s" or metric == "throughput" or metric.endswith("_per_s"):
        return "rate"
    return "count"


def reading_aid(old_mean, new_mean, what="time"):
    """pyperf compare_to's reading aid: how many times the new mean is above
    or below the old one, in words (AID_WORDS[what]): "1.50x slower",
    "1.25x faster", "1.30x fewer"; "no change" when equal, "" when the
    means cannot be compared (NaN, or of opposite signs)."""
    if math.isnan(old_mean) or math.isnan(new_mean) or old_mean * new_mean < 0:
        return ""
    if old_mean == new_mean:
        return "no change"
    up, down = AID_WORDS[what]
    hi, lo = max(abs(old_mean), abs(new_mean)), min(abs(old_mean), abs(new_mean))
    factor = "%.2fx" % (hi / lo) if lo > 0 else "\u221ex"
    return "%s %s" % (factor, up if abs(new_mean) > abs(old_mean) else down)


def _layout(*stats):
    """(prefix, scale, decimals) that print these sides' means alike: k/M/G
    above 100000, at least 3 significant digits, and the first digit of the
    smallest CI half width (at most 2 decimals beyond the mean's)."""
    means = [abs(st.mean) for st in stats if math.isfinite(st.mean)]
    a = max(means, default=0.0)
    prefix, scale = "", 1.0
    if a >= 1e5:
        for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
            if a >= scale:
                break
    d = 0
    for st in stats:
        x, h = abs(st.mean) / scale, st.ci_half / scale
        dm = max(0, 2 - math.floor(math.log10(x))) if x > 0 and math.isfinite(x) else 0
        dh = max(0, -math.floor(math.log10(h))) if h > 0 and math.isfinite(h) else 0
        d = max(d, min(max(dm, dh), dm + 2, 6))
    return prefix, scale, d


def value_text(st, unit="", layout=None):
    """A side's mean with the half width of its 95% confidence interval and
    the unit: "24.1 ±0.3 ns" (see _layout; ``layout`` shares one between
    the two sides of a cell)."""
    if math.isnan(st.mean):
        return "-"
    prefix, scale, d = layout or _layout(st)
    x, h = st.mean / scale, st.ci_half / scale
    if x != 0 and abs(x) < 1e-3:  # tiny values: significant digits, not decimals
        s = "%.3g%s" % (x, prefix) + ("" if math.isnan(h) else " \u00b1%.2g%s" % (h, prefix))
    else:
        s = "%.*f%s" % (d, x, prefix)
        if not math.isnan(h):
            s += " \u00b1" + ("0" if h == 0 else "%.*f%s" % (d, h, prefix))
    return s + (" " + unit if unit else "")


def _pct_text(ch):
    if math.isnan(ch):
        return "-"
    if math.isinf(ch):
        return "inf" if ch > 0 else "-inf"
    return ("%+.2f%%" % (100.0 * ch)).lstrip("+")


class Cell:
    """One compared cell: key (params), metric, column, old/new Stats,
    change (fraction, positive = better), test, p, p_adj, mark ("I", "R",
    ""), significant (p_adj < alpha; None when untested), lower (lower is
    better), unit."""

    __slots__ = ("key", "metric", "column", "old", "new", "change", "test", "p", "p_adj",
                 "mark", "significant", "lower", "unit", "threshold", "predicted", "band_flip",
                 "factors")

    def __init__(self, key, metric, column, old, new, change, test, p, lower=True):
        self.key, self.metric, self.column = key, metric, column
        self.old, self.new, self.change, self.test, self.p = old, new, change, test, p
        self.p_adj = math.nan
        self.mark = ""
        self.significant = None
        self.lower = lower
        self.unit = unit(metric)
        self.threshold = 0.02
        self.predicted = False  # both sides simulated: the verdict is a prediction
        self.band_flip = False  # predicted, and the direction flips within the line-cost band
        # predicted, and the change is within the two policies' calibration factors: their
        # ratio, else None
        self.factors = None

    @property
    def change_pct(self):
        return 100.0 * self.change

    @property
    def ratio(self):
        """new mean / old mean, as measured (not normalised)."""
        o, n = self.old.mean, self.new.mean
        if o == 0:
            return math.nan if n == 0 else math.copysign(math.inf, n)
        return n / o

    def change_text(self):
        """The change in percent, positive = better: "-22.26%"."""
        return _pct_text(self.change)

    def verdict(self):
        """"(I)"/"(R)" when marked, "not significant" when p_adj >= alpha,
        "significant, < 2%" when significant but under the threshold, "not
        tested" when no test could judge the cell (a single run); each after
        "predicted " when both sides ran on simulated CPUs."""
        v = self._verdict()
        return "predicted " + v if self.predicted else v

    def _verdict(self):
        if self.band_flip:
            return "inconclusive: flips within the line-cost band"
        if self.factors is not None:
            return "inconclusive: within the policies' calibration factors (%.2fx)" % (
                self.factors)
        if self.mark:
            return "(%s)" % self.mark
        if self.significant is None:
            return "not tested"
        if not self.significant:
            return "not significant"
        return "significant, < %g%%" % (100 * self.threshold)

    def aid(self):
        """The reading aid: "1.29x slower" (see reading_aid)."""
        return reading_aid(self.old.mean, self.new.mean, kind(self.metric))

    def parts(self):
        """(old value, new value, change, verdict, aid), the pieces text() joins."""
        lay = _layout(self.old, self.new)
        return (value_text(self.old, self.unit, lay), value_text(self.new, self.unit, lay),
                self.change_text(), self.verdict(), self.aid())

    def text(self):
        """"24.1 ±0.3 ns -> 31.0 ±0.5 ns  -22.26% (R)  1.29x slower"."""
        o, n, ch, v, aid = self.parts()
        return ("%s -> %s  %s %s  %s" % (o, n, ch, v, aid)).rstrip()

    def __repr__(self):
        return "Cell(%s %s %s: %s, p=%.3g, p_adj=%.3g)" % (
            self.column, self.metric, self.key, self.text(), self.p, self.p_adj)


class GeoMean:
    """One column's geometric mean over one metric's cells: ``ratio`` is the
    geometric mean of the normalised ratios (old/new when lower is better,
    new/old when higher is), so > 1 is better; ``n`` of ``total`` cells
    entered it (a zero or infinite ratio cannot)."""

    __slots__ = ("column", "metric", "ratio", "n", "total", "lower", "predicted")

    def __init__(self, column, metric, cells, lower):
        self.column, self.metric, self.lower = column, metric, lower
        # of predicted cells (both sides simulated), never pooled with measured ones
        self.predicted = any(c.predicted for c in cells)
        if not all(c.predicted == self.predicted for c in cells):
            raise _simulated.MixedModesError(
                "a geometric mean of predicted and measured cells: they are never pooled")
        r = [1.0 + c.change for c in cells if math.isfinite(c.change) and 1.0 + c.change > 0]
        self.n, self.total = len(r), len(cells)
        self.ratio = math.exp(sum(math.log(x) for x in r) / len(r)) if r else math.nan

    @property
    def change(self):
        return self.ratio - 1.0

    @property
    def change_pct(self):
        return 100.0 * self.change

    def aid(self):
        """The reading aid of the geometric mean, in the words of the metric's cells."""
        if math.isnan(self.ratio):
            return ""
        raw = 1.0 / self.ratio if self.lower else self.ratio  # new/old as measured
        return reading_aid(1.0, raw, kind(self.metric))

    def label(self):
        s = "%s: geometric mean%s" % (self.metric, " (predicted)" if self.predicted else "")
        return s + (" (%d of %d cells)" % (self.n, self.total) if self.n < self.total else "")

    def text(self):
        """"+12.34%  1.12x faster"."""
        return ("%s  %s" % (_pct_text(self.change), self.aid())).rstrip()

    def __repr__(self):
        return "GeoMean(%s %s: %s%s over %d cells)" % (
            self.column, self.metric, "predicted " if self.predicted else "", self.text(), self.n)


def _as_result(r):
    """A Result, or the result file a path (str or os.PathLike) names
    (Result.from_json: FileFormatError when it is not one)."""
    if isinstance(r, Result):
        return r
    if isinstance(r, (str, os.PathLike)):
        return Result.from_json(pathlib.Path(r))
    raise errors.ParameterTypeError("compare takes Results or paths of result files, not %r"
                                    % (errors.Echo(r),), value=r)


def _as_results(b):
    if isinstance(b, (Result, str, os.PathLike)):
        return [_as_result(b)]
    if not isinstance(b, (list, tuple)):
        raise errors.ParameterTypeError("compare takes a Result, a path of a result file or a "
                                        "list of them, not %r" % (errors.Echo(b),), value=b)
    out = [_as_result(r) for r in b]
    if not out:
        raise errors.InvalidArgument("compare needs at least one Result to compare against")
    return out


def _constant(res, key):
    vals = {json.dumps(p.params.get(key), sort_keys=True, default=str) for p in res.points}
    return vals.pop() if len(vals) == 1 else None


def _default_key(a, others):
    common = [k for k in a.params() if all(k in r.params() for r in others)]
    key = []
    for k in common:
        ca = _constant(a, k)
        if ca is not None and any(_constant(r, k) not in (None, ca) for r in others):
            continue  # constant on each side, different between them: what is compared
        key.append(k)
    return key


def _group(res, key):
    g = {}
    for p in res.points:
        if any(k not in p.params for k in key):
            continue
        kk = json.dumps([p.params[k] for k in key], default=str)
        g.setdefault(kk, []).append(p)
    return g


def _pool(points, metric):
    points = [p for p in points if metric in p.data]
    if not points:
        return None
    return _stats.describe(np.concatenate([np.asarray(p.data[metric], dtype=float)
                                           for p in points]),
                           **_stats.run_context(points, metric))


_UNSET = object()  # the value of a parameter a point does not have


def _value(p, k):
    return p.params[k] if k in p.params else _UNSET


def _value_id(v):
    return "\0unset" if v is _UNSET else json.dumps(v, sort_keys=True, default=str)


def _show(v):
    return "(unset)" if v is _UNSET else str(v)


def _pooled(groups, key, skip):
    """[(parameter, [values])] that some cell of one side holds more than
    one value of: the parameters whose runs compare() would pool. Points
    with equal parameters (one cell run twice, concatenated) pool nothing."""
    params = []
    for pts in groups.values():
        for p in pts:
            for k in p.params:
                if k not in params and k not in key and k not in skip:
                    params.append(k)
    out = []
    for k in params:
        vals, seen = [], set()
        for pts in groups.values():
            if len({_value_id(_value(p, k)) for p in pts}) < 2:
                continue
            for p in pts:
                v = _value(p, k)
                if _value_id(v) not in seen:
                    seen.add(_value_id(v))
                    vals.append(v)
        if vals:
            out.append((k, vals))
    return out


def _pooling_error(found, key):
    parts = []
    for side, k, vals in found:
        parts.append("side %s holds %d values of %s (%s)" % (
            side, len(vals), k, "; ".join(_show(v) for v in vals)))
    names = []
    for _, k, _ in found:
        if k not in names:
            names.append(k)
    return errors.PoolingError(
        "%s that the cell key (on=/--on: %s) does not separate: add %s to on (--on), "
        "compare one value at a time (Result.filter), or pass pool=True (--pool) to pool "
        "their runs" % ("; ".join(parts), ", ".join(key) or "nothing", ", ".join(names)),
        pooled=[(side, k, [_show(v) for v in vals]) for side, k, vals in found])


def _workloads(res):
    out = []
    for p in res.points:
        w = p.params.get("workload")
        if "workload" in p.params and w not in out:
            out.append(w)
    return out


def _label(r, i, n, default):
    pols = sorted({str(p.params.get("policy")) for p in r.points})
    if len(pols) == 1:
        return pols[0]
    return default if n == 1 else "%s%d" % (default, i + 1)


def _choose_test(test, n1, n2, bar):
    """stats.choose_test, and for "auto" Welch's t-test where Mann-Whitney U
    cannot give a p-value below ``bar`` at n1 vs n2 runs."""
    t = _stats.choose_test(test, n1, n2)
    if test == "auto" and t == "mannwhitney" and _stats.mannwhitney_min_p(n1, n2) >= bar:
        return "welch"
    return t


def _runs_needed(bar):
    """The fewest runs a side (equal sides) at which Mann-Whitney U can give p < bar."""
    for n in range(2, 1000):
        if _stats.mannwhitney_min_p(n, n) < bar:
            return n
    return None


def compare(a, b=None, metric="alloc_ns", test="auto", threshold=0.02, alpha=0.05, on=None,
            baseline=None, by="policy", names=None, base_name=None, lower_is_better=None,
            pool=False):
    """Compare Results cell by cell; returns a Comparison (see the module doc).

    a: the old side (or the one Result with ``baseline``); b: a Result or a
    list of Results (a column each); a Result may be given as the path of
    its file (``alloclab run --json``); metric: a name or a list of names;
    test: "auto", "welch" or "mannwhitney"; threshold: the smallest |change|
    (a fraction) that is marked; alpha: significance after
    Benjamini-Hochberg; on: the parameters that identify a cell; baseline /
    by: compare the values of parameter ``by`` inside ``a`` against
    ``baseline``; names / base_name: column labels; lower_is_better: for
    a metric whose direction alloclab does not know; pool: pool the runs of
    a side's cells that differ in a parameter outside the key (refused by
    default with PoolingError; the legend then names what was pooled).

    Raises IncomparableError when the sides ran different workloads;
    UnknownNameError for a metric no side has; InvalidArgument when no cell
    of one side has a counterpart on the other, its ``apart`` naming the key
    parameters whose values tell the sides apart ([(column index,
    parameter, old values, new values)]), ``key`` and ``sides`` the rest
    of what no_match_text words it with (a caller's own option names).
    """
    a = _as_result(a)
    metrics, on = _check_options(metric, test, threshold, alpha, on)
    if baseline is not None:
        old, news, key, cols, base_name = _sides_in_one(a, b, on, baseline, by, names,
                                                        base_name)
    else:
        old, news, key, cols, base_name = _sides_of_two(a, b, on, names, base_name)
    _check_cells(old, news, key, cols, base_name)
    predicted, sim_keys, kind_ = _predicted(old, news, key, cols, base_name)
    directions = _directions(metrics, old, news, lower_is_better)
    skip = {by} if baseline is not None else set()
    pairs, unmatched, pooled = _pairs(old, news, cols, key, metrics, skip, pool, base_name)
    cells = _judge_apart(pairs, test, threshold, alpha, directions,
                         lambda params: _key_id(params, key) in sim_keys)
    if predicted is not None:
        _band(cells, old, news, cols, key, base_name)
    differ = _differing(old, news, key)
    _warn_stats_levels(differ, old, news)
    out = Comparison(cells, cols, base_name, key, metrics, directions, test, threshold, alpha,
                     unmatched, differ, pooled)
    out.kind = kind_
    out.predicted = predicted
    return out


# A comparison whose cells are some measured, some predicted (a result of
# cpu="pinned,simulated" against its baseline): each cell is of its own kind
MIXED = "measured and predicted"


def _key_id(params, key):
    """A cell's identity among the groups of _group (its key's values)."""
    return json.dumps([params[k] for k in key], default=str)


def _predicted(old, news, key, cols, base_name):
    """(None, set(), "measured") when the matched cells were measured; else
    ("calibration <id>", the keys of the cells whose two sides ran on
    simulated CPUs (predictions), "predicted" when every cell is one, else
    MIXED). A simulated side against a measured one is refused
    (results.simulated.MixedModesError, naming both modes), and two
    simulated sides predicted with different calibrations
    (TwoCalibrationsError, naming both)."""
    go, sims, keys, measured = _group(old, key), [], set(), False
    for col, new in zip(cols, news):
        gn = _group(new, key)
        for kk in go:
            if kk in gn:
                a = _simulated.side_mode(go[kk])
                what = "compare (side %s against side %s, cell %s)" % (
                    base_name, col, ", ".join(str(v) for v in json.loads(kk)))
                _simulated.refuse_mixed(go[kk], gn[kk], what)
                if a == _simulated.MODE:
                    _simulated.refuse_two_calibrations(go[kk], gn[kk], what)
                    sims += go[kk] + gn[kk]
                    keys.add(kk)
                else:
                    measured = True
    if not sims:
        return None, set(), "measured"
    ids = ", ".join(_simulated.calibration_ids(sims)) or "not recorded"
    return "calibration %s" % ids, keys, MIXED if measured else _simulated.PREDICTED


def _judge_apart(pairs, test, threshold, alpha, directions, is_predicted):
    """_judge over the measured pairs and, apart, over the predicted ones
    (``is_predicted(params)``): a prediction never enters the
    Benjamini-Hochberg family of measurements, nor they its. The cells
    come back in the pairs' order, each marked predicted or not."""
    kinds = [bool(is_predicted(pr[0])) for pr in pairs]
    cells = [None] * len(pairs)
    for want in (False, True):
        idx = [i for i, k in enumerate(kinds) if k == want]
        for i, c in zip(idx, _judge([pairs[i] for i in idx], test, threshold, alpha,
                                    directions)):
            c.predicted = want
            cells[i] = c
    return cells


def _band(cells, old, news, cols, key, base_name):
    """A predicted cell whose direction is not the same with the line cost
    halved and doubled (measure.sim.BAND), or whose change is within the two
    sides' policies' calibration factors, loses its mark: inconclusive."""
    go = _group(old, key)
    gns = dict(zip(cols, (_group(new, key) for new in news)))
    cells = [c for c in cells if c.predicted]
    for c in cells:
        kk = _key_id(c.key, key)
        bo = _simulated.band_means(go.get(kk, []), c.metric)
        bn = _simulated.band_means(gns.get(c.column, {}).get(kk, []), c.metric)
        if bo is None or bn is None or not c.change:
            continue
        mid = c.new.mean - c.old.mean
        if any((n - o) * mid <= 0 for o, n in zip(bo, bn)):
            c.band_flip = True
            c.mark = ""
    for c in cells:
        kk = _key_id(c.key, key)
        c.factors = _simulated.within_factors(
            c.metric, _simulated.factors(go.get(kk, [])),
            _simulated.factors(gns.get(c.column, {}).get(kk, [])), c.ratio, c.threshold)
        if c.factors is not None:
            c.mark = ""


def _check_options(metric, test, threshold, alpha, on):
    """compare()'s scalar options checked; returns (metrics as a list, on as
    a list or None)."""
    if test not in TESTS:
        raise errors.UnknownNameError.make("test", test, list(TESTS))
    for name, v, lo, hi in (("threshold", threshold, 0, math.inf), ("alpha", alpha, 0, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi or \
                (name == "alpha" and v in (0, 1)) or not math.isfinite(v):
            raise errors.ParameterRangeError("%s=%r is out of range (%s)" % (
                name, errors.Echo(v),
                "a finite fraction >= 0, e.g. 0.02 for 2%" if name == "threshold" else
                "0 < alpha < 1"), name=name, value=v, min=lo, max=hi)
    metrics = [metric] if isinstance(metric, str) else list(metric)
    if isinstance(on, str):
        on = [on]
    if not metrics:
        raise errors.InvalidArgument("compare needs at least one metric")
    twice = [m for i, m in enumerate(metrics) if m in metrics[:i]]
    if twice:
        raise errors.InvalidArgument("metric %r is named twice: each metric once" % (
            errors.Echo(twice[0]),))
    return metrics, on


def _sides_in_one(a, b, on, baseline, by, names, base_name):
    """compare(res, baseline=...): the old side is ``a``'s points with
    ``by`` = baseline, a new side per other value of ``by``. Returns (old,
    news, key, column labels, base_name)."""
    if b is not None:
        raise errors.InvalidArgument(
            "compare(res, baseline=...) compares inside one Result: give no second Result")
    if by not in a.params():
        raise errors.UnknownNameError.make("parameter", by, a.params())
    if by == "workload":
        raise errors.IncomparableError(
            "compare(by=\"workload\") would set different workloads side by side: "
            "their numbers measure different things; compare policies within a workload")
    old = a.filter(**{by: baseline})
    vals = []
    for p in a.points:
        if p.params.get(by) not in vals:
            vals.append(p.params.get(by))
    same = [v for v in vals if str(v) == baseline] if isinstance(baseline, str) else []
    if not old.points and len(same) == 1:  # "2" from a command line: producers=2
        old = a.filter(**{by: [same[0]]})
    if not old.points:
        raise errors.UnknownNameError.make(by, baseline, [str(v) for v in vals],
                                           context="baseline")
    base_val = old.points[0].params[by]
    others = []
    for p in a.points:
        v = p.params.get(by)
        if v != base_val and v not in others:
            others.append(v)
    if not others:
        raise errors.InvalidArgument("nothing to compare: every point has %s=%r" % (
            by, base_val))
    news = [a.filter(**{by: [v]}) for v in others]
    key = list(on) if on is not None else [k for k in _default_key(old, news) if k != by]
    cols = names or [str(v) for v in others]
    return old, news, key, cols, base_name or str(base_val)


def _sides_of_two(a, b, on, names, base_name):
    """compare(a, b): ``a`` is the old side, each Result of ``b`` a new one.
    Returns (old, news, key, column labels, base_name)."""
    if b is None:
        raise errors.InvalidArgument("compare needs a second Result, or baseline=")
    news = _as_results(b)
    key = list(on) if on is not None else _default_key(a, news)
    cols = names or [_label(r, i, len(news), "B") for i, r in enumerate(news)]
    base_name = base_name or _label(a, 0, 1, "A")
    if len(set(cols)) < len(cols):
        cols = ["%s (%d)" % (c, i + 1) for i, c in enumerate(cols)]
    return a, news, key, cols, base_name


def _check_cells(old, news, key, cols, base_name):
    """The labels fit the columns, the key names parameters of the old side
    (``workload`` is added to it in place: a cell is always one workload's),
    and every side ran a workload the old side ran."""
    if len(cols) != len(news):
        raise errors.InvalidArgument("names: %d label%s for %d column%s" % (
            len(cols), "" if len(cols) == 1 else "s", len(news), "" if len(news) == 1 else "s"))
    for k in key:
        if k not in old.params():
            raise errors.UnknownNameError.make("parameter", k, old.params(), context="on")
    if "workload" not in key and "workload" in old.params():
        key.insert(0, "workload")  # a cell is always one workload's: never compare across
    wl_old = _workloads(old)
    for col, new in zip(cols, news):
        wl_new = _workloads(new)
        if wl_old and wl_new and not set(map(str, wl_old)) & set(map(str, wl_new)):
            raise errors.IncomparableError(
                "side %s ran %s and side %s ran %s: different workloads measure different "
                "things and are never compared (pool=True does not change that); compare "
                "results of one workload" % (
                    base_name, " and ".join(map(str, wl_old)), col,
                    " and ".join(map(str, wl_new))))


def _directions(metrics, old, news, lower_is_better):
    """{metric: lower_is_better} for every metric, each known to a side."""
    directions = {}
    if lower_is_better is not None and not isinstance(lower_is_better, (bool, np.bool_)):
        raise errors.ParameterTypeError(
            "lower_is_better=%r: True (lower is better), False (higher is) or None (by the "
            "metric)" % (errors.Echo(lower_is_better),), name="lower_is_better",
            value=lower_is_better)
    known = set(old.metrics()).union(*[set(r.metrics()) for r in news])
    for m in metrics:
        if not isinstance(m, str) or m not in known:
            raise errors.UnknownNameError.make("metric", m, sorted(known),
                                               extra="no side of the comparison has it")
        lower = lower_is_better if lower_is_better is not None else direction(m)
        if lower is None:
            raise errors.InvalidArgument(
                "alloclab does not know whether lower or higher is better for %r: pass "
                "lower_is_better=True or False" % m, metric=m)
        directions[m] = bool(lower)
    return directions


def _pairs(old, news, cols, key, metrics, skip, pool, base_name):
    """The matched cells as (params, metric, column, old sample, new sample),
    the number of cells only one side has, and what was pooled (refused
    with PoolingError unless ``pool``)."""
    go = _group(old, key)
    gns = [_group(new, key) for new in news]
    matched_old = {kk for kk in go if any(kk in gn for gn in gns)}
    found = [(base_name, k, v) for k, v in _pooled({kk: go[kk] for kk in matched_old}, key,
                                                   skip)]
    for col, gn in zip(cols, gns):
        found += [(col, k, v) for k, v in _pooled({kk: gn[kk] for kk in gn if kk in go}, key,
                                                  skip)]
    if found and not pool:
        raise _pooling_error(found, key)
    pooled = [(side, k, [_show(v) for v in vals]) for side, k, vals in found]
    pairs, unmatched = [], 0
    for col, new, gn in zip(cols, news, gns):
        unmatched += len(set(go) ^ set(gn))
        for kk, opts in go.items():
            if kk not in gn:
                continue
            params = {k: opts[0].params[k] for k in key}
            for m in metrics:
                so, sn = _pool(opts, m), _pool(gn[kk], m)
                if so is not None and sn is not None:
                    pairs.append((params, m, col, so, sn))
    if not pairs:
        apart = [(j, k, vo, vn) for j, new in enumerate(news) for k, vo, vn in
                 _apart(old, new, key)]
        sides = ["side %s" % n for n in [base_name] + list(cols)]
        raise errors.InvalidArgument(no_match_text(apart, key, sides), apart=apart,
                                     key=list(key), sides=sides)
    return pairs, unmatched, pooled


def _values(res, k):
    """The values of parameter ``k`` over the points of ``res``, each once,
    as text, and their identities."""
    vals = [v for v in (_value(p, k) for p in res.points) if v is not _UNSET]
    ids = list(dict.fromkeys(_value_id(v) for v in vals))
    text = list(dict.fromkeys(_show(v) for v in vals))
    return text, set(ids)


def _apart(old, new, key):
    """[(parameter, old values, new values)]: the key parameters whose values
    the two sides share none of; else (no cell matches in their combination)
    those whose values differ."""
    rows = []
    for k in key:
        (to, io), (tn, i_n) = _values(old, k), _values(new, k)
        rows.append((k, to, tn, not io & i_n, io != i_n))
    return [r[:3] for r in rows if r[3]] or [r[:3] for r in rows if r[4]]


def no_match_text(apart, key, names, on="on=[...]", pool="pool=True"):
    """The refusal of sides that have no cell in common: ``apart`` is
    [(column index, parameter, old values, new values)] (the parameters that
    tell the sides apart, compare's InvalidArgument.apart), ``names`` the
    old side's name then each column's; ``on`` and ``pool`` how the caller
    spells those options (Python's keywords; the command line's flags)."""
    said = []
    for j, k, vo, vn in apart:
        said.append("%s has %s %s, %s has %s %s" % (
            names[0], k, ", ".join(vo) or "(unset)", names[j + 1], k,
            ", ".join(vn) or "(unset)"))
    ks = list(dict.fromkeys(k for _, k, _, _ in apart))
    if not ks:
        return ("no cells match: the sides share no cell of %s; pass %s with the parameters "
                "that identify a cell" % (", ".join(key) or "(no common parameters)", on))
    return ("no cells match: %s; and %s identif%s a cell (the key: %s); to set them side by "
            "side, pass %s without %s (and %s where a side then holds several of %s values)"
            % ("; ".join(said), " and ".join(ks), "ies" if len(ks) == 1 else "y",
               ", ".join(key), on, " and ".join(ks), pool, "its" if len(ks) == 1 else "their"))


def _judge(pairs, test, threshold, alpha, directions):
    """A Cell per pair: its test, p-value, Benjamini-Hochberg adjusted p over
    all pairs, and its mark."""
    # The p-value Benjamini-Hochberg needs to mark a lone difference among the
    # cells a test can judge (2 runs or more a side): test="auto" takes
    # Mann-Whitney U only where its smallest attainable p is below it.
    bar = alpha / max(1, sum(1 for _, _, _, so, sn in pairs if so.n >= 2 and sn.n >= 2))
    cells = []
    for params, m, col, so, sn in pairs:
        t = _choose_test(test, so.n, sn.n, bar)
        p = _stats.TESTS[t](so.values, sn.values).pvalue
        cells.append(Cell(params, m, col, so, sn, change(so.mean, sn.mean, directions[m]), t, p,
                          lower=directions[m]))
    adj = _stats.bh_adjust([c.p for c in cells])
    for c, pa in zip(cells, adj):
        c.p_adj = float(pa)
        c.threshold = threshold
        c.significant = None if math.isnan(pa) else bool(pa < alpha)
        if pa < alpha and abs(c.change) >= threshold:
            c.mark = "I" if c.change > 0 else "R"
    return cells


class StatsLevelWarning(UserWarning):
    """compare() set side by side results whose runs counted at different
    stats levels together with another difference: counting costs time, so
    the latency change mixes the instrument with what was meant to differ."""


def _stats_levels(res):
    return sorted({str(p.params.get("stats", "not recorded")) for p in res.points})


def _warn_stats_levels(differ, old, news):
    """Warn when the sides differ in their stats level and in something else
    (a policy): their latency difference includes what counting costs. A
    comparison of stats levels alone (the instrument's own cost) is meant."""
    if "stats" not in differ or len(differ) < 2:
        return
    import warnings
    warnings.warn(
        "the sides ran at different stats levels (%s) and also differ in %s: counting costs "
        "time, so their latency difference includes the instrument's; rerun at one level "
        "(stats=...) to compare %s" % (
            " vs ".join("/".join(_stats_levels(r)) for r in [old] + news),
            ", ".join(k for k in differ if k != "stats"),
            ", ".join(k for k in differ if k != "stats")), StatsLevelWarning, stacklevel=3)


def _differing(old, news, key):
    """The parameters outside the key whose values differ between points."""
    differ = []
    for k in old.params():
        if k in key:
            continue
        vals = {json.dumps(p.params.get(k), default=str) for r in [old] + news for p in r.points}
        if len(vals) > 1:
            differ.append(k)
    return differ


class Comparison:
    """The cells of a comparison and their rendering (text, Markdown, HTML,
    heatmap, rows)."""

    def __init__(self, cells, columns, base_name, key, metrics, directions, test, threshold,
                 alpha, unmatched=0, differ=(), pooled=()):
        self.cells = cells
        self.columns = list(columns)
        self.base_name = base_name
        self.key = list(key)
        self.metrics = list(metrics)
        self.directions = directions
        self.test = test
        self.threshold = threshold
        self.alpha = alpha
        self.unmatched = unmatched
        self.differ = list(differ)  # parameters that tell the sides apart
        self.pooled = list(pooled)  # [(side, parameter, [values])] pooled with pool=True
        # "predicted": both sides of every cell simulated; MIXED: of some (compare() sets it)
        self.kind = "measured"
        self.predicted = None  # then "calibration <id>"

    # -- access --

    def cell(self, column=None, metric=None, **key):
        """The one cell matching column, metric and key params."""
        found = [c for c in self.cells
                 if (column is None or c.column == column) and
                 (metric is None or c.metric == metric) and
                 all(c.key.get(k) == v for k, v in key.items())]
        if len(found) != 1:
            raise errors.InvalidArgument("%d cells match %r" % (len(found), dict(
                key, column=column, metric=metric)))
        return found[0]

    @property
    def improvements(self):
        return [c for c in self.cells if c.mark == "I"]

    @property
    def regressions(self):
        return [c for c in self.cells if c.mark == "R"]

    def _row_ids(self):
        rows = []
        for c in self.cells:
            rid = (c.metric, json.dumps(c.key, sort_keys=True, default=str))
            if rid not in rows:
                rows.append(rid)
        return rows

    def _varying(self):
        keys = []
        for k in self.key:
            vals = {json.dumps(c.key.get(k), default=str) for c in self.cells}
            if len(vals) > 1 and k != "workload":
                keys.append(k)
        return keys

    def row_label(self, metric, key, predicted=False):
        """"alloc_ns: p:2 (ns)": the metric, the varying key, ", predicted"
        for a predicted row beside measured ones, and the unit."""
        unit = METRIC_INFO.get(metric, ("", "", None))[1]
        parts = ["%s:%s" % (SHORT.get(k, k), key[k]) for k in self._varying() if k in key]
        if predicted:
            parts.append("predicted")
        s = metric + (": " + ", ".join(parts) if parts else "")
        return s + (" (%s)" % unit if unit else "")

    def grid(self):
        """[(benchmark, row label, {column: Cell})] in table order."""
        out = []
        by_row = {}
        for c in self.cells:
            rid = (c.metric, json.dumps(c.key, sort_keys=True, default=str))
            by_row.setdefault(rid, {})[c.column] = c
        for rid in self._row_ids():
            cells = by_row[rid]
            any_cell = next(iter(cells.values()))
            label = self.row_label(any_cell.metric, any_cell.key,
                                   self.kind == MIXED and any_cell.predicted)
            out.append((str(any_cell.key.get("workload", "")), label, cells))
        return out

    # -- text --

    def _old_side(self):
        """The old side as the legend names it: its name ("buddy", a file's
        label), or "the old side (A)" where the name is only a default letter."""
        name = str(self.base_name)
        return "the old side (%s)" % name if len(name) == 1 else name

    def _family_text(self):
        """The cells Benjamini-Hochberg corrected over: "4 cells", or, with
        predicted and measured cells, each kind's count (corrected apart)."""
        tested = [c for c in self.cells if not math.isnan(c.p)]
        if self.kind != MIXED:
            return "%d cells" % len(tested)
        pred = sum(1 for c in tested if c.predicted)
        return "the %d measured cells and, apart, the %d predicted ones" % (
            len(tested) - pred, pred)

    def legend(self):
        lines = [
            "(R)/(I): statistically significant regression/improvement against %s: p < %g "
            "after Benjamini-Hochberg over %s, and |change| >= %g%%." % (
                self._old_side(), self.alpha, self._family_text(), 100 * self.threshold),
            "Results are normalised so that less than zero is a regression and greater than "
            "zero an improvement (lower is better: old/new - 1; higher is better: new/old - 1).",
            self.aid_line()]
        lines += self.test_lines()
        runs = sorted({c.old.n for c in self.cells} | {c.new.n for c in self.cells})
        lines.append("Runs per cell: %s.%s" % ("/".join(map(str, runs)), (
            " The sides differ in: %s." % ", ".join(self.differ)) if self.differ else ""))
        if "stats" in self.differ:
            lines.append("The sides counted at different stats levels: counting costs time, "
                         "and a counter one level does not measure has no cell.")
        if self.pooled:
            lines.append("Pooled on request (pool=True), each cell's runs taken together: %s." % (
                "; ".join("%s: %d values of %s (%s)" % (side, len(vals), k, "; ".join(vals))
                          for side, k, vals in self.pooled)))
        if self.kind == MIXED:
            lines.append("Predicted: the cells marked \"predicted\" ran on simulated CPUs on "
                         "both sides (%s); their marks and geometric means are predictions, "
                         "not measurements, kept apart from the measured cells'." % (
                             self.predicted))
        elif self.predicted:
            lines.append("Predicted: both sides ran on simulated CPUs (%s); the marks are "
                         "predictions, not measurements." % self.predicted)
        if self.unmatched:
            one = self.unmatched == 1
            lines.append("%d cell%s had no counterpart on the other side and %s left out." % (
                self.unmatched, "" if one else "s", "is" if one else "are"))
        return lines

    @property
    def lone_bar(self):
        """alpha / m: the p-value Benjamini-Hochberg over the m tested cells
        needs to mark a difference that is the only one in the table."""
        m = sum(1 for c in self.cells if not math.isnan(c.p))
        return self.alpha / m if m else math.nan

    def test_lines(self):
        """Which test judged the cells, why (test="auto"), and whether it can
        reach the corrected threshold at all."""
        tested = [c for c in self.cells if not math.isnan(c.p)]
        if not tested:
            return ["Test: none (a side has a single run in every cell)."]
        m, bar = len(tested), self.lone_bar
        used = [t for t in ("welch", "mannwhitney") if any(c.test == t for c in tested)]
        out = []
        if self.test != "auto":
            out.append("Test: %s (test=\"%s\")." % (TEST_NAMES[self.test], self.test))
        else:
            why = []
            mwu = [c for c in tested if c.test == "mannwhitney"]
            few = [c for c in tested if c.test == "welch" and min(c.old.n, c.new.n) < 6]
            swapped = [c for c in tested if c.test == "welch" and min(c.old.n, c.new.n) >= 6]
            if mwu:
                why.append("Mann-Whitney U%s (>= 6 runs a side)" % (
                    " in %d cells" % len(mwu) if len(used) > 1 else ""))
            if few:
                why.append("Welch's t-test%s (fewer than 6 runs a side)" % (
                    " in %d cells" % len(few) if len(used) > 1 else ""))
            if swapped:
                n1, n2 = _worst(swapped)
                why.append("Welch's t-test%s rather than Mann-Whitney U: at %d vs %d runs "
                           "Mann-Whitney's smallest possible p is %s, not below %.2g = %g/%d, "
                           "the p Benjamini-Hochberg over %d cells needs to mark a lone "
                           "difference" % (" in %d cells" % len(swapped) if len(used) > 1 or few
                                           else "", n1, n2, _min_p_text(n1, n2), bar,
                                           self.alpha, m, m))
            out.append("Test (test=\"auto\"): %s." % "; ".join(why))
        stuck = [c for c in tested if c.test == "mannwhitney" and
                 _stats.mannwhitney_min_p(c.old.n, c.new.n) >= bar]
        if stuck:
            n1, n2 = _worst(stuck)
            pmin = _stats.mannwhitney_min_p(n1, n2)
            need = math.floor(pmin * m / self.alpha) + 1  # BH: k cells at pmin pass pmin*m/k
            runs = _runs_needed(bar)
            out.append(
                "Mann-Whitney U at %d vs %d runs cannot give p below %s, and Benjamini-Hochberg "
                "over %d cells needs p < %.2g (%g/%d) to mark a lone difference: %s. Use "
                "test=\"welch\" (--test welch)%s." % (
                    n1, n2, _min_p_text(n1, n2), m, bar, self.alpha, m,
                    "no cell can ever be marked" if need > m else
                    "a cell is marked only when at least %d cells differ with no overlap between "
                    "the sides" % need,
                    " or at least %d runs a side" % runs if runs else ""))
        return out

    def warning_lines(self, wrap=104):
        labelled = []
        for bench, label, cells in self.grid():
            for col, c in cells.items():
                labelled.append(("%s %s" % (self.base_name, label), c.old))
                labelled.append(("%s %s" % (col, label), c.new))
        seen, uniq = set(), []
        for lab, st in labelled:
            if lab not in seen:
                seen.add(lab)
                uniq.append((lab, st))
        return _stats.warning_lines(uniq, wrap=wrap)

    def geomeans(self):
        """[GeoMean] per metric and column, in table order: pyperf's
        "Geometric mean" row."""
        out = []
        for m in self.metrics:
            for pred in (False, True):  # measured and predicted cells apart
                for col in self.columns:
                    cells = [c for c in self.cells
                             if c.metric == m and c.column == col and c.predicted == pred]
                    if cells:
                        out.append(GeoMean(col, m, cells, self.directions[m]))
        return out

    def geomean(self, column=None, metric=None, predicted=None):
        """The one GeoMean of ``column``, ``metric`` and kind (``predicted``:
        of simulated cells; any of them may be left out when there is only
        one)."""
        found = [g for g in self.geomeans() if (column is None or g.column == column) and
                 (metric is None or g.metric == metric) and
                 (predicted is None or g.predicted == predicted)]
        if len(found) != 1:
            raise errors.InvalidArgument("%d geometric means match %r" % (
                len(found), dict(column=column, metric=metric, predicted=predicted)))
        return found[0]

    def geo_rows(self):
        """[(label, {column: GeoMean})], a row per metric."""
        rows = []
        for m, pred in [(m, p) for m in self.metrics for p in (False, True)]:
            gs = {g.column: g for g in self.geomeans() if g.metric == m and g.predicted == pred}
            if gs:
                n = {(g.n, g.total) for g in gs.values()}
                label = next(iter(gs.values())).label() if len(n) == 1 else \
                    "%s: geometric mean%s" % (m, " (predicted)" if pred else "")
                rows.append((label, gs))
        return rows

    def aid_line(self):
        kinds = []
        for m in self.metrics:
            if kind(m) not in kinds:
                kinds.append(kind(m))
        words = {"time": "Nx slower/faster for times", "rate": "Nx faster/slower for rates "
                 "(faster = higher)", "count": "Nx more/fewer for counts"}
        return ("Each cell: old mean ±95%% CI -> new mean ±95%% CI, the change, its mark or "
                "\"not significant\" (p_adj >= %g) or \"significant, < %g%%\", and the ratio "
                "of the means (%s). Geometric mean: of the normalised ratios over a column's "
                "cells, as a change and a ratio." % (
                    self.alpha, 100 * self.threshold, "; ".join(words[k] for k in kinds)))

    def to_text(self, warnings=True):
        """Seed 004's layout: a box table, Benchmark | Result Class | a column
        each; each cell old -> new (mean ±95% CI), change, mark or verdict,
        reading aid, aligned within its column; a geometric-mean row per
        metric under the cells."""
        head = ["Benchmark", "Result Class"] + self.columns
        blank = ("", "", "", "", "")
        parts = []  # per body row: [bench, label, parts per column]
        last = None
        for bench, label, cells in self.grid():
            parts.append([bench if bench != last else "", label] +
                         [cells[c].parts() if c in cells else blank for c in self.columns])
            last = bench
        geo = [["", label] + [("", "", g[c].text().split("  ")[0], "", g[c].aid())
                              if c in g else blank for c in self.columns]
               for label, g in self.geo_rows()]
        nc = len(self.columns)
        sub = [[max([len(r[2 + j][i]) for r in parts + geo] + [0]) for i in range(5)]
               for j in range(nc)]

        def cell(j, pt):
            w = sub[j]
            if not any(pt):
                return ""
            vals = (pt[0].rjust(w[0]) + " -> " + pt[1].rjust(w[1])) if pt[0] else \
                " " * (w[0] + 4 + w[1])
            return "%s  %s %s  %s" % (vals, pt[2].rjust(w[2]), pt[3].ljust(w[3]),
                                      pt[4].ljust(w[4]))

        body = [r[:2] + [cell(j, pt) for j, pt in enumerate(r[2:])] for r in parts]
        foot = [r[:2] + [cell(j, pt) for j, pt in enumerate(r[2:])] for r in geo]
        w = [max(len(r[i]) for r in [head] + body + foot) for i in range(len(head))]

        def line(ch="-"):
            return "+" + "+".join(ch * (x + 2) for x in w) + "+"

        def fmt(r):
            cells = [r[0].ljust(w[0]), r[1].ljust(w[1])] + [
                r[i].ljust(w[i]) for i in range(2, len(r))]
            return "| " + " | ".join(cells) + " |"

        out = [line(), fmt(head), line("=")] + [fmt(r) for r in body] + [line()]
        if foot:
            out += [fmt(r) for r in foot] + [line()]
        out += self.legend()
        if warnings:
            wl = self.warning_lines()
            if wl:
                out += ["warnings:"] + ["  " + x for x in wl]
        return "\n".join(out)

    def to_markdown(self, warnings=True):
        """The table as GitHub Markdown (marked changes in bold), a
        geometric-mean row per metric, the legend below."""
        head = ["Benchmark", "Result Class"] + self.columns
        out = ["| " + " | ".join(head) + " |",
               "|" + "|".join(["---", "---"] + ["---:"] * len(self.columns)) + "|"]
        last = None
        for bench, label, cells in self.grid():
            row = [bench if bench != last else "", label] + [
                _md_cell(cells[c]) if c in cells else "" for c in self.columns]
            out.append("| " + " | ".join(r.replace("|", "\\|") for r in row) + " |")
            last = bench
        for label, g in self.geo_rows():
            row = ["", "*%s*" % label] + ["*%s*" % g[c].text() if c in g else ""
                                          for c in self.columns]
            out.append("| " + " | ".join(r.replace("|", "\\|") for r in row) + " |")
        out.append("")
        out += self.legend()
        if warnings:
            wl = self.warning_lines(wrap=0)
            if wl:
                out += ["", "Warnings:"] + ["- " + x for x in wl]
        return "\n".join(out)

    def _repr_html_(self):
        """In a notebook: the table with cells coloured by change (a heatmap),
        the geometric means under it, the legend below."""
        head = ["Benchmark", "Result Class"] + self.columns
        h = ["<table>", "<tr>" + "".join("<th>%s</th>" % html.escape(x) for x in head) + "</tr>"]
        for bench, label, cells in self.grid():
            tds = ["<td>%s</td>" % html.escape(bench), "<td>%s</td>" % html.escape(label)]
            for col in self.columns:
                c = cells.get(col)
                if c is None:
                    tds.append("<td></td>")
                    continue
                o, n, ch, v, aid = c.parts()
                change_html = html.escape("%s %s" % (ch, v))
                tds.append('<td style="background-color:%s;text-align:right" title="p=%.3g, '
                           'p_adj=%.3g, %s, n=%d/%d">%s -&gt; %s<br>%s %s</td>' % (
                               _colour(c.change), c.p, c.p_adj, c.test, c.old.n, c.new.n,
                               html.escape(o), html.escape(n),
                               ("<b>%s</b>" if c.mark else "%s") % change_html,
                               html.escape(aid)))
            h.append("<tr>" + "".join(tds) + "</tr>")
        for label, g in self.geo_rows():
            tds = ["<td></td>", "<td><i>%s</i></td>" % html.escape(label)]
            for col in self.columns:
                x = g.get(col)
                tds.append("<td></td>" if x is None else
                           '<td style="background-color:%s;text-align:right"><i>%s</i></td>' % (
                               _colour(x.change), html.escape(x.text())))
            h.append('<tr style="border-top:2px solid #888">' + "".join(tds) + "</tr>")
        h.append("</table>")
        h.append("<p><small>%s</small></p>" % html.escape(" ".join(self.legend())))
        return "\n".join(h)

    def __str__(self):
        return self.to_text()

    def __repr__(self):
        return self.to_text()

    # -- data --

    def rows(self):
        """Tidy rows, one per cell: its key, metric, column, unit, old/new
        mean, 95% CI half width (old_ci, new_ci), sd and n, ratio (new/old
        mean), change_pct (positive = better), aid ("1.29x slower"), test,
        p, p_adj, significant (p_adj < alpha; None untested), mark and
        verdict (the cell's "(R)", "not significant", ...)."""
        out = []
        for c in self.cells:
            r = dict(c.key)
            r.update({"metric": c.metric, "column": c.column, "baseline": self.base_name,
                      "unit": c.unit, "old_mean": c.old.mean, "new_mean": c.new.mean,
                      "old_ci": c.old.ci_half, "new_ci": c.new.ci_half, "old_sd": c.old.sd,
                      "new_sd": c.new.sd, "old_n": c.old.n, "new_n": c.new.n,
                      "ratio": c.ratio, "change_pct": c.change_pct, "aid": c.aid(),
                      "test": c.test, "p": c.p, "p_adj": c.p_adj,
                      "significant": c.significant, "mark": c.mark,
                      "verdict": c.verdict()})
            out.append(r)
        return out

    def to_pandas(self):
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Comparison.to_pandas() needs pandas: pip install pandas "
                              "(or use rows())") from None
        return pd.DataFrame(self.rows())

    def matrix(self):
        """(row labels, columns, change % array (rows x columns), marks)."""
        grid = self.grid()
        vals = np.full((len(grid), len(self.columns)), np.nan)
        marks = [[""] * len(self.columns) for _ in grid]
        for i, (_, _, cells) in enumerate(grid):
            for j, col in enumerate(self.columns):
                if col in cells:
                    vals[i, j] = cells[col].change_pct
                    marks[i][j] = cells[col].mark
        return [label for _, label, _ in grid], list(self.columns), vals, marks

    def heatmap(self, **kw):
        """A heatmap of the changes (matplotlib Figure): alloclab.plot.heatmap."""
        from ..present import plot
        return plot.heatmap(self, **kw)


def _worst(cells):
    """The (n1, n2) among cells whose Mann-Whitney floor is highest."""
    return max(((c.old.n, c.new.n) for c in cells),
               key=lambda n: _stats.mannwhitney_min_p(*n))


def _min_p_text(n1, n2):
    p = _stats.mannwhitney_min_p(n1, n2)
    if n1 <= 8 or n2 <= 8:
        return "%.2g (2/%d)" % (p, math.comb(n1 + n2, n1))
    return "%.2g" % p


def _md_cell(c):
    o, n, ch, v, aid = c.parts()
    change_s = "%s %s" % (ch, v)
    return ("%s -> %s %s %s" % (o, n, "**%s**" % change_s if c.mark else change_s, aid)).rstrip()


def _colour(ch):
    if math.isnan(ch):
        return "#ffffff"
    x = max(-1.0, min(1.0, ch / 0.5))  # full colour at +-50%
    if x >= 0:
        return "#%02x%02x%02x" % (int(255 - 120 * x), 255, int(255 - 120 * x))
    return "#%02x%02x%02x" % (255, int(255 + 120 * x), int(255 + 120 * x))
