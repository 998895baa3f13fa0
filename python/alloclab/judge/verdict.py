"""Claims and verdicts: one engine judges every claim alloclab prints.

A claim names its cells, its metric, the two sides it compares (a "new"
and an "old" value of one parameter, usually two policies, or one side
against a stated value), the direction it expects and optionally a size:

    c = al.claim(res, "libarena-transfer", "libarena-spill", metric="alloc_ns",
                 expect="faster", by=1.3, where={"producers": 2,
                                                 "allocs_per_cycle": [64, 256]})
    print(c.judge())          # [holds] ... 1.41x faster (95% CI 1.32x-1.50x faster) ...
    al.judge([c1, c2])        # several claims judged together (one BH family)

Per cell the effect is estimated on the log scale, so that it is a ratio
(new / old, of geometric means) with a confidence interval:

- runs taken in interleaved rounds (run i of both sides before run i+1 of
  either: al.run() and al.sweep() do this) are paired, and the cell is
  judged on the per-pair log-ratios (a paired t interval, n - 1 degrees of
  freedom), which cancels the drift a shared machine adds to both sides;
- other runs are judged on Welch's t interval of the difference of the
  log means;
- counters that can be zero are judged on the difference of the means
  (the claimed factor is taken against the old side's mean).

The rule (an intersection-union test, so no correction is needed for
"holds"):

- *holds*: in every cell the claim names, the 95% confidence interval of
  the ratio lies beyond the claimed size (``by``, default 1: any change in
  the claimed direction). A claim that two sides are the same
  (``expect="same"``, margin = the practical threshold) or within a range
  (``within=(lo, hi)``) holds when in every cell the equivalence test
  (TOST at ``alpha``: the 90% interval) lies inside the margin; "not
  significant" never makes two things the same.
- *does not hold*: some cell contradicts the claim significantly: the
  one-sided test that the cell lies on the wrong side of the claimed size
  (or outside the range) gives a p-value below ``alpha`` after
  Benjamini-Hochberg across every cell judged together (a report judges
  all its claims together).
- otherwise *inconclusive*, with the reason: noise (the interval straddles
  the claimed size), an interval wholly on the wrong side of the claimed
  size (or outside the margin) whose contradiction is not significant
  (after Benjamini-Hochberg, or at all: TOST's interval is 90%), too few
  runs (fewer than 3 a side), bimodal runs (two groups of runs, each of at
  least 2, at least 25% apart; of paired runs,
  the per-pair ratios: a drift both sides share cancels there), an unstable
  machine (too many runs with steal time, see below), latencies
  measured on virtual CPUs (which never decide; counters may), or
  truncated runs (runs without a value for the metric). Runs in which the
  host stole more than stats.STEAL_WARN_PCT of the CPU time are left out
  of a timing cell's estimate (with their pair); a cell left with fewer than
  3 runs is undecided for that reason.

Simulated CPUs (cpu="simulated") give predictions: a claim whose cells
compare two simulated sides is of the kind "predicted" (Verdict.kind; its
text reads "[predicted: holds] ..."), never a measured verdict; a
simulated side against a measured one is refused (MixedModesError, naming
both modes); a simulated cell above the CPUs of a validation that found
its (workload, policy) off is "unvalidated" and never decides.

Nothing here reads a seed's figure: a claim compares what was measured,
and a claim against a stated value (``value=``) says where the value comes
from in its text.
"""

import json
import math
import numbers
import re

import numpy as np

from .. import errors
from ..results import simulated as _simulated
from ..results import stats as _stats
from ..results.result import uniq
from ..results.metrics import direction, is_timing
from ..results.result import Result
from ..policies.policy import same_policy

HOLDS = "holds"
MEASURED = "measured"  # a verdict's kind; the other: results.simulated.PREDICTED
FAILS = "does not hold"
OPEN = "inconclusive"

ALPHA = 0.05
CONFIDENCE = 0.95  # of the interval that must lie beyond a claimed size
THRESHOLD = 0.02  # the practical threshold: equivalence margin by default
MIN_RUNS = _stats.MIN_RUNS  # runs a side (pairs when paired) needed to decide
BIMODAL_GAP = math.log(1.25)  # two groups of runs at least 25% apart ...
BIMODAL_STAT = 4.0  # ... with a gap of 4 pooled within-group sd or more

# expect= words -> "lower" / "higher" / "same", for a lower-is-better metric
_EXPECT_LOWER_BETTER = {"faster": "lower", "slower": "higher", "better": "lower",
                        "worse": "higher", "fewer": "lower", "more": "higher",
                        "lower": "lower", "higher": "higher", "same": "same"}
_EXPECT_HIGHER_BETTER = dict(_EXPECT_LOWER_BETTER, faster="higher", slower="lower",
                             better="higher", worse="lower")
EXPECT = sorted(_EXPECT_LOWER_BETTER)
SCALES = ("auto", "ratio", "difference")


# ---------------------------------------------------------------- metric kinds

# ---------------------------------------------------------------- samples

class Side:
    """The runs of one side of a cell: values, per-run start times (for
    pairing), per-run steal, the CPU mode; or a stated value."""

    __slots__ = ("values", "starts", "steal", "cpu_mode", "label", "stated", "truncated",
                 "factors")

    def __init__(self, values, starts=None, steal=None, cpu_mode=None, label="", stated=False,
                 truncated=None):
        self.values = np.asarray(values, dtype=float).ravel()
        # per run: the duration cut its loop short (left out of estimates)
        self.truncated = (np.zeros(len(self.values), dtype=bool) if truncated is None else
                          np.asarray(truncated, dtype=bool).ravel())
        self.starts = None if starts is None else np.asarray(starts, dtype=float).ravel()
        self.steal = np.asarray(steal if steal is not None else [], dtype=float).ravel()
        self.cpu_mode = cpu_mode
        self.label = label
        self.stated = stated
        # predicted: the calibration's [alloc, free] factors on this side's
        # policy's costs, when every run had the same (else None)
        self.factors = None

    @classmethod
    def from_points(cls, points, metric, label=""):
        """The runs of ``metric`` over Points (runs of equal points pooled)."""
        vals, starts, steal, cut, used = [], [], [], [], []
        for p in points:
            if metric not in p.data:
                continue
            used.append(p)
            v = np.asarray(p.data[metric], dtype=float)
            vals.append(v)
            st = p.info.get("run_starts")
            starts.append(np.asarray(st, dtype=float) if st is not None and len(st) == len(v)
                          else np.full(len(v), np.nan))
            # the host's steal time moves no virtual clock: a simulated run is not disturbed
            steal.append(np.zeros(len(v)) if _simulated.is_simulated(p) else
                         np.asarray(p.data.get("steal_pct", []), dtype=float))
            tr = p.info.get("truncated")
            cut.append(np.asarray(tr, dtype=bool) if tr is not None and len(tr) == len(v)
                       else np.zeros(len(v), dtype=bool))
        if not vals:
            return None
        s = np.concatenate(starts)
        out = cls(np.concatenate(vals), None if np.isnan(s).any() else s,
                  np.concatenate(steal), _simulated.side_mode(used), label,
                  truncated=np.concatenate(cut))
        out.factors = _simulated.factors(used)
        return out

    @classmethod
    def value(cls, v, label=""):
        return cls([v], label=label, stated=True)


def paired(a, b):
    """Whether two sides' runs were taken in interleaved rounds: as many runs,
    and run i of each before run i+1 of either (by their start times)."""
    if a.stated or b.stated or a.starts is None or b.starts is None:
        return False
    if len(a.starts) != len(b.starts) or len(a.starts) < 2:
        return False
    oa, ob = np.argsort(a.starts), np.argsort(b.starts)
    if not (np.array_equal(oa, np.arange(len(oa))) and np.array_equal(ob, np.arange(len(ob)))):
        return False
    hi = np.maximum(a.starts, b.starts)
    lo = np.minimum(a.starts, b.starts)
    return bool(np.all(hi[:-1] < lo[1:]))


def _disturbed(side, n):
    """Per run: whether the host stole more than STEAL_WARN_PCT of its CPU time
    (such runs are left out of the estimate; steal is not the allocator's)."""
    st = side.steal
    if side.stated or len(st) != n:
        return np.zeros(n, dtype=bool)
    return np.nan_to_num(st, nan=0.0) > _stats.STEAL_WARN_PCT


def bimodal(values):
    """(k, n, factor) when the runs fall in two groups, each of at least 2
    runs, at least 25% apart and separated by 4 pooled within-group sd or
    more (k runs in the upper group, which is ``factor`` times the lower);
    else None. Values must be positive."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x) & (x > 0)]
    n = len(x)
    if n < 4:
        return None
    lx = np.sort(np.log(x))
    best = None
    for k in range(2, n - 1):
        a, b = lx[:k], lx[k:]
        gap = lx[k] - lx[k - 1]
        if gap < BIMODAL_GAP:
            continue
        ss = float(((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum())
        sw = math.sqrt(ss / (n - 2))
        stat = gap / sw if sw > 0 else math.inf
        if stat >= BIMODAL_STAT and (best is None or stat > best[0]):
            best = (stat, n - k, float(math.exp(b.mean() - a.mean())))
    return None if best is None else (best[1], n, best[2])


# ---------------------------------------------------------------- estimates

class Estimate:
    """An effect with its uncertainty: theta (log ratio new/old, or the
    difference new - old), se, df, the scale ("ratio"/"difference"), the old
    side's mean (to turn a factor into a difference), the test used, and n."""

    __slots__ = ("theta", "se", "df", "scale", "ref", "test", "n", "dropped", "cut",
                 "pair_range")

    def __init__(self, theta, se, df, scale, ref, test, n, dropped=0, cut=0):
        self.theta, self.se, self.df = theta, se, df
        self.scale, self.ref, self.test, self.n = scale, ref, test, n
        self.dropped = dropped  # runs (pairs when paired) left out for steal time
        self.cut = cut  # runs (pairs when paired) left out as truncated by the duration
        self.pair_range = None  # paired runs: (least, greatest) per-pair effect on the scale

    def interval(self, confidence=CONFIDENCE):
        if self.se == 0:
            return self.theta, self.theta
        if not (self.se > 0 and self.df > 0):
            return -math.inf, math.inf
        h = _stats.t_ppf(0.5 + confidence / 2.0, self.df) * self.se
        return self.theta - h, self.theta + h

    def p_above(self, bound):
        """One-sided p-value for "theta > bound" (small when clearly above)."""
        return self._p(self.theta - bound)

    def p_below(self, bound):
        """One-sided p-value for "theta < bound"."""
        return self._p(bound - self.theta)

    def _p(self, d):
        if math.isnan(d):
            return math.nan
        if self.se == 0:
            return 0.0 if d > 0 else 1.0
        if not (self.se > 0 and self.df > 0):
            return 1.0
        return _stats.t_sf(d / self.se, self.df)

    def bound(self, factor):
        """A claimed factor (new/old) on this estimate's scale."""
        if self.scale == "ratio":
            return math.log(factor)
        return self.ref * (factor - 1.0)

    def factor(self, theta):
        """theta as a factor new/old (NaN on the difference scale with no reference)."""
        if self.scale == "ratio":
            return math.exp(theta)
        return 1.0 + theta / self.ref if self.ref else math.nan

    def minus(self, other):
        """The contrast self - other of independent estimates (Welch-
        Satterthwaite degrees of freedom)."""
        if self.scale != other.scale:
            raise errors.InvalidArgument("a contrast needs both cells on one scale")
        se = math.hypot(self.se, other.se)
        if self.se == 0 and other.se == 0:
            df = math.inf
        else:
            num = (self.se ** 2 + other.se ** 2) ** 2
            den = sum(s ** 4 / d for s, d in ((self.se, self.df), (other.se, other.df))
                      if s > 0 and d > 0)
            df = num / den if den > 0 else math.nan
        return Estimate(self.theta - other.theta, se, df, self.scale, self.ref,
                        "contrast of %s" % self.test, min(self.n, other.n))


def _keep(side, mask):
    """The side with only the runs where mask is true."""
    if side.stated or mask.all():
        return side
    return Side(side.values[mask], None if side.starts is None else side.starts[mask],
                side.steal[mask] if len(side.steal) == len(mask) else side.steal,
                side.cpu_mode, side.label, truncated=side.truncated[mask])


def estimate(old, new, scale="auto", drop_disturbed=True):
    """The effect of new against old (Side each) and how it was tested.

    scale: "ratio" (log scale), "difference", or "auto" (ratio unless a
    value is zero or negative). drop_disturbed: leave out runs with steal
    time (timings; a count does not depend on who else ran). Returns (Estimate, problems) where problems
    are [(kind, text)] of what keeps the cell from deciding."""
    problems = []
    pair = paired(old, new)
    a, b, old, new, cut = _drop_truncated(old, new, pair)
    a, b, lost, dropped = _drop_disturbed(old, new, a, b, pair, drop_disturbed)
    if lost:
        problems.append(("truncated", "%d run%s without a value" % (lost, "" if lost == 1
                                                                   else "s")))
    if scale == "auto":
        scale = "ratio" if (a > 0).all() and (b > 0).all() else "difference"
    if scale == "ratio" and not ((a > 0).all() and (b > 0).all()):
        scale = "difference"
    ref = float(np.mean(a)) if len(a) else math.nan
    f = np.log if scale == "ratio" else (lambda x: x)
    nmin = min(len(a), len(b)) if not old.stated else len(b)
    few = _too_few_runs(nmin, cut, dropped, old.stated)
    if few:
        problems.append(few)
    nan = math.nan
    if not len(b) or not len(a):
        return Estimate(nan, nan, nan, scale, ref, "none", 0), problems
    est = _fit(a, b, f, scale, ref, old.stated, pair)
    est.dropped = dropped
    est.cut = cut
    if pair:
        d = f(b) - f(a)
        est.pair_range = (float(np.min(d)), float(np.max(d)))
    return est, problems + _bimodal_problems(old, new, a, b, f, pair and scale == "ratio")


def _drop_truncated(old, new, pair):
    """Leave out the runs whose loop the duration cut short (they measure a
    partial loop), both runs of a pair when pairing. Returns (old values,
    new values, old, new, how many runs were cut)."""
    a, b = old.values, new.values
    ta = old.truncated if len(old.truncated) == len(a) else np.zeros(len(a), dtype=bool)
    tb = new.truncated if len(new.truncated) == len(b) else np.zeros(len(b), dtype=bool)
    if pair:
        whole = ~ta & ~tb
        cut = int((~whole).sum())
        return a[whole], b[whole], _keep(old, whole), _keep(new, whole), cut
    cut = int(ta.sum() + tb.sum())
    return a[~ta], b[~tb], _keep(old, ~ta), _keep(new, ~tb), cut


def _drop_disturbed(old, new, a, b, pair, drop_disturbed):
    """Leave out the runs without a value and, with ``drop_disturbed``, those
    steal time disturbed (both runs of a pair when pairing). Returns (old
    values, new values, runs without a value, disturbed runs dropped)."""
    da, db = _disturbed(old, len(a)), _disturbed(new, len(b))
    if not drop_disturbed:
        da, db = np.zeros(len(a), dtype=bool), np.zeros(len(b), dtype=bool)
    if pair:
        keep = np.isfinite(a) & np.isfinite(b)
        lost = int(len(a) - keep.sum())
        calm = keep & ~da & ~db
        dropped = int(keep.sum() - calm.sum())
        return a[calm], b[calm], lost, dropped
    lost = int((~np.isfinite(a)).sum() + (~np.isfinite(b)).sum())
    dropped = int((np.isfinite(a) & da).sum() + (np.isfinite(b) & db).sum())
    return a[np.isfinite(a) & ~da], b[np.isfinite(b) & ~db], lost, dropped


def _too_few_runs(nmin, cut, dropped, stated):
    """(kind, text) when fewer than MIN_RUNS runs are left, naming what took
    them (truncation, steal time, or too few runs given); else None."""
    if nmin >= MIN_RUNS:
        return None
    if cut:
        return ("truncated", "%d run%s cut short by the duration (truncated: a partial "
                "loop), %d left (< %d); give a longer duration"
                % (cut, "" if cut == 1 else "s", nmin, MIN_RUNS))
    if dropped:
        return ("steal", "%d run%s disturbed by steal time above %g%% of CPU time, "
                "%d left (< %d)" % (dropped, "" if dropped == 1 else "s",
                                    _stats.STEAL_WARN_PCT, nmin, MIN_RUNS))
    return ("runs", "%d run%s%s (< %d)" % (nmin, "" if nmin == 1 else "s",
                                          " a side" if not stated else "", MIN_RUNS))


def _fit(a, b, f, scale, ref, stated, pair):
    """The Estimate of f(new) - f(old): a one-sample t against a stated
    value, a paired t, or Welch's t."""
    nan = math.nan
    if stated:
        x = f(b)
        n = len(x)
        sd = float(np.std(x, ddof=1)) if n > 1 else nan
        return Estimate(float(np.mean(x)) - float(f(np.array([a[0]]))[0]),
                        sd / math.sqrt(n) if n > 1 else nan, n - 1, scale, ref,
                        "one-sample t against the stated value", n)
    if pair:
        d = f(b) - f(a)
        n = len(d)
        sd = float(np.std(d, ddof=1)) if n > 1 else nan
        return Estimate(float(np.mean(d)), sd / math.sqrt(n) if n > 1 else nan, n - 1, scale,
                        ref, "paired t on %d %s" % (n, "log-ratios" if scale == "ratio"
                                                     else "differences"), n)
    xa, xb = f(a), f(b)
    na, nb = len(xa), len(xb)
    va = float(np.var(xa, ddof=1)) / na if na > 1 else nan
    vb = float(np.var(xb, ddof=1)) / nb if nb > 1 else nan
    se = math.sqrt(va + vb) if na > 1 and nb > 1 else nan
    if na > 1 and nb > 1 and va + vb > 0:
        df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    else:
        df = math.inf if se == 0 else nan
    return Estimate(float(np.mean(xb) - np.mean(xa)), se, df, scale, ref,
                    "Welch t on %s (%d/%d runs)" % ("log values" if scale == "ratio"
                                                    else "values", na, nb),
                    min(na, nb))


def _factor_problems(metric, old, new, est):
    """("factors", text) when a predicted effect is within the two policies'
    calibration factors (results.simulated.within_factors)."""
    if est.scale != "ratio":
        return []
    r = _simulated.within_factors(metric, old.factors, new.factors, math.exp(est.theta),
                                  THRESHOLD)
    if r is None:
        return []
    return [("factors", "%.2fx predicted, within the %.2fx of the two policies' calibration "
                        "factors" % (math.exp(est.theta), r))]


def _bimodal_problems(old, new, a, b, f, paired_ratio):
    """("bimodal", text) problems: of the per-pair ratios for paired runs on
    the ratio scale, else of each measured side's runs."""
    if paired_ratio:
        # paired runs: what must not split in two is the per-pair ratio; both
        # sides moving together between rounds (the host's drift) cancels in it
        bi = bimodal(np.exp(f(b) - f(a)))
        if bi:
            return [("bimodal", "bimodal ratios of %s to %s: %d of %d pairs at %.1fx "
                     "the others" % (new.label or "new", old.label or "old", bi[0],
                                     bi[1], bi[2]))]
        return []
    problems = []
    for side in (old, new):
        if side.stated:
            continue
        bi = bimodal(side.values)
        if bi:
            problems.append(("bimodal", "bimodal runs of %s: %d of %d at %.1fx the others"
                             % (side.label or "a side", bi[0], bi[1], bi[2])))
    return problems


# ---------------------------------------------------------------- claims

class Cell:
    """One cell of a claim: a label, the metric, and its estimate (a contrast
    of two comparisons, or one comparison of two sides)."""

    __slots__ = ("label", "metric", "est", "problems", "holds", "p", "p_adj", "status",
                 "predicted")

    def __init__(self, label, metric, est, problems, predicted=False):
        self.label, self.metric, self.est, self.problems = label, metric, est, list(problems)
        self.predicted = predicted  # both sides simulated: a prediction, not a measurement
        self.holds = False
        self.p = self.p_adj = math.nan
        self.status = OPEN

    @property
    def decides(self):
        return not self.problems

    def interval(self, confidence=CONFIDENCE):
        return self.est.interval(confidence)


class Claim:
    """A statement about cells: each cell a comparison (or a contrast of two
    comparisons) of one metric, expected lower, higher, the same, or within
    a range. Build with alloclab.claim() (from a Result), or Claim(...) with
    cells made by Claim.compare()/Claim.contrast() (reports do)."""

    def __init__(self, text, cells, expect, by=None, margin=None, within=None, metric=None,
                 lower=None, words=None, note="", absolute=False, unit=""):
        if expect not in ("lower", "higher", "same"):
            raise errors.UnknownNameError.make("expectation", expect,
                                               ["lower", "higher", "same"])
        if by is not None and not (_real(by) and by > 0):
            raise errors.ParameterRangeError(
                "by=%r: a factor > 0 (1.3 = at least 30%% apart)" % (errors.Echo(by),), name="by",
                value=by,
                min=0, max=None)
        _check_margin(margin, within, absolute)
        self.text = text
        self.cells = list(cells)
        if not self.cells:
            raise errors.InvalidArgument("the claim %r names no cells" % errors.Echo(text))
        self.expect = expect
        self.by = by
        self.margin = THRESHOLD if margin is None else margin
        self.within = within
        self.metric = metric or self.cells[0].metric
        self.lower = lower  # lower is better for the metric (None: unknown, a count)
        self.words = words  # (word when new/old < 1, word when > 1), e.g. ("faster", "slower")
        self.note = note
        # absolute: by, margin and within are differences new - old in the metric's
        # unit (for counts near zero), and every cell is on the difference scale
        self.absolute = absolute
        self.unit = unit
        if absolute and any(c.est.scale != "difference" for c in self.cells):
            raise errors.InvalidArgument("an absolute claim needs cells made with "
                                         "scale='difference'")
        kinds = {c.predicted for c in self.cells}
        if len(kinds) > 1:
            _simulated.refuse_mixed(_simulated.MODE, "measured", "the claim %r, which sets "
                                    "side by side cells" % text)
        self.kind = _simulated.PREDICTED if True in kinds else MEASURED

    # -- building cells --

    @staticmethod
    def compare(label, metric, old, new, scale="auto", cpu_decides=None):
        """A cell comparing Side ``new`` against Side ``old``. Latencies on
        virtual CPUs never decide (cpu_decides=None: by the metric's kind).
        Two simulated sides make a predicted cell; a simulated side against
        a measured one is refused (results.simulated.MixedModesError)."""
        if not old.stated:
            _simulated.refuse_mixed(old.cpu_mode, new.cpu_mode, "a claim's cell %s" % label)
        predicted = new.cpu_mode == _simulated.MODE
        timing = is_timing(metric)  # a count does not depend on who else ran on the CPU
        est, problems = estimate(old, new, scale, drop_disturbed=timing)
        if predicted:
            problems += _factor_problems(metric, old, new, est)
        if cpu_decides is None:
            cpu_decides = not timing
        if not cpu_decides and "virtual" in (old.cpu_mode, new.cpu_mode):
            problems.append(("virtual", "latency on virtual CPUs"))
        return Cell(label, metric, est, problems, predicted)

    @staticmethod
    def contrast(label, a, b):
        """A cell whose effect is a's minus b's (each a comparison Cell; both
        predicted or both measured)."""
        _simulated.refuse_mixed(*[_simulated.MODE if x.predicted else "measured" for x in (a, b)],
                                what="a contrast %s" % label)
        return Cell(label, a.metric, a.est.minus(b.est), a.problems + b.problems, a.predicted)

    # -- judging --

    def _bounds(self):
        """(lo, hi): the factors new/old the effect must lie beyond (None: open).
        expect "lower" by s: new/old <= 1/s (s < 1 allows a little higher:
        "at most 1/s higher"); "higher" by s: new/old >= s. Absolute claims:
        the differences new - old instead."""
        if self.absolute:
            if self.expect == "lower":
                return None, -(self.by or 0.0)
            if self.expect == "higher":
                return (self.by or 0.0), None
            return self.within if self.within is not None else (-self.margin, self.margin)
        if self.expect == "lower":
            return None, 1.0 / (self.by or 1.0)
        if self.expect == "higher":
            return (self.by or 1.0), None
        if self.within is not None:
            return self.within
        return 1.0 / (1.0 + self.margin), 1.0 + self.margin

    def _test(self, cell, alpha):
        """(holds, p of the contradiction) for one cell."""
        lo, hi = self._bounds()
        est = cell.est
        if math.isnan(est.theta):
            return False, math.nan
        conv = (lambda v: v) if self.absolute else est.bound
        blo = conv(lo) if lo is not None else None
        bhi = conv(hi) if hi is not None else None
        if self.expect in ("lower", "higher"):
            ilo, ihi = est.interval(CONFIDENCE)
            if self.expect == "lower":
                return ihi < bhi, est.p_above(bhi)
            return ilo > blo, est.p_below(blo)
        # equivalence (TOST at alpha) and its contradiction (outside, either side)
        p_in = max(est.p_above(blo), est.p_below(bhi))
        p_out = min(1.0, 2 * min(est.p_below(blo), est.p_above(bhi)))
        return p_in < alpha, p_out

    def outside(self, cell, alpha=ALPHA):
        """Whether a cell's interval (95%, or TOST's 1 - 2 alpha for "same")
        lies wholly on the wrong side of the claimed size, or wholly outside
        the margin or range, rather than containing its bound."""
        lo, hi = self._bounds()
        conv = (lambda v: v) if self.absolute else cell.est.bound
        ilo, ihi = cell.interval(1 - 2 * alpha if self.expect == "same" else CONFIDENCE)
        above = hi is not None and ilo > conv(hi)
        below = lo is not None and ihi < conv(lo)
        return above or below

    def judge(self, alpha=ALPHA):
        """This claim alone (its cells are the BH family): a Verdict."""
        return judge([self], alpha=alpha)[0]

    # -- words --

    def value(self, cell, theta):
        """theta as what the claim speaks of: a factor new/old, or a difference."""
        return theta if self.absolute else cell.est.factor(theta)

    def one_words(self, v):
        if self.absolute:
            return "%+.3g%s" % (v, " " + self.unit if self.unit else "") \
                if np.isfinite(v) else "n/a"
        return factor_words(v, self.words)

    def range_words(self, lo, hi):
        if self.absolute:
            if not (np.isfinite(lo) and np.isfinite(hi)):
                return "unbounded"
            if abs(hi - lo) < 5e-4 * max(1.0, abs(lo)):
                return self.one_words(lo)
            return "%+.3g to %+.3g%s" % (lo, hi, " " + self.unit if self.unit else "")
        return describe_range(lo, hi, self.words)


class Verdict:
    """A claim's outcome (HOLDS, FAILS, OPEN), the reason, and its cells."""

    def __init__(self, claim, outcome, reason, alpha):
        self.claim, self.outcome, self.reason, self.alpha = claim, outcome, reason, alpha

    @property
    def holds(self):
        """True, False, or None (inconclusive)."""
        return {HOLDS: True, FAILS: False, OPEN: None}[self.outcome]

    @property
    def cells(self):
        return self.claim.cells

    def decided_by(self):
        """'counters' or 'latency' (what the cells measure)."""
        return "latency" if any(is_timing(c.metric) for c in self.cells) else "counters"

    def evidence(self):
        """The numbers behind the outcome, as words."""
        c = self.claim
        cells = c.cells
        parts = []
        fin = [f for f in (c.value(x, x.est.theta) for x in cells) if np.isfinite(f)]
        if fin:
            parts.append("%s %s" % (c.range_words(min(fin), max(fin)),
                                    "in %d cell%s" % (len(cells), "" if len(cells) == 1
                                                      else "s")
                                    if len(cells) > 1 else ""))
        if self.outcome == FAILS:
            bad = [x for x in cells if x.status == FAILS]
            parts.append("contradicted" + _in_cells(c, bad, self.alpha))
        elif self.outcome == HOLDS:
            conf = 1 - 2 * self.alpha if c.expect == "same" else CONFIDENCE  # TOST: 90%
            lo = min(c.value(x, x.interval(conf)[0]) for x in cells)
            hi = max(c.value(x, x.interval(conf)[1]) for x in cells)
            parts.append("%d%% CI within %s" % (round(100 * conf), c.range_words(lo, hi)))
        else:
            parts.append(self.reason)
        tests = sorted({_test_words(x.est.test) for x in cells} - {""})
        parts.append("; ".join(tests))
        cut = sum(getattr(x.est, "cut", 0) for x in cells)
        if cut:
            paired_ = any(x.est.test.startswith("paired") for x in cells)
            parts.append("%d %s cut short by the duration (truncated) left out" % (
                cut, ("pair of runs" if cut == 1 else "pairs of runs") if paired_ else
                ("run" if cut == 1 else "runs")))
        dropped = sum(x.est.dropped for x in cells)
        if dropped:
            paired_ = any(x.est.test.startswith("paired") for x in cells)
            parts.append("%d %s with steal time > %g%% left out" % (
                dropped, ("pair of runs" if dropped == 1 else "pairs of runs") if paired_ else
                ("run" if dropped == 1 else "runs"), _stats.STEAL_WARN_PCT))
        return "; ".join(p.strip() for p in parts if p.strip())

    @property
    def kind(self):
        """"measured", or "predicted" when both sides of every cell ran on
        simulated CPUs: a prediction, never reported as a measured verdict."""
        return self.claim.kind

    def text(self):
        kind = "%s: " % self.kind if self.kind == _simulated.PREDICTED else ""
        return "[%s%s] %s: %s" % (kind, self.outcome, self.claim.text, self.evidence())

    def __str__(self):
        return self.text()

    __repr__ = __str__

    def to_dict(self):
        c = self.claim
        return {"claim": c.text, "kind": self.kind, "outcome": self.outcome,
                "reason": self.reason,
                "expect": c.expect, "by": c.by, "within": c.within, "margin": c.margin,
                "metric": c.metric, "decided_by": self.decided_by(), "cells": [{
                    "label": x.label, "metric": x.metric, "scale": x.est.scale,
                    "factor": x.est.factor(x.est.theta),
                    "ci": [x.est.factor(v) for v in x.interval()], "test": x.est.test,
                    "p_contradiction": x.p, "p_adj": x.p_adj, "status": x.status,
                    "problems": [t for _, t in x.problems]} for x in c.cells]}


def judge(claims, alpha=ALPHA):
    """Judge claims together: the contradiction p-values of all their cells
    form one Benjamini-Hochberg family. ``claims``: a list (or any iterable)
    of Claims; alpha: the significance level, 0 < alpha < 0.5. Returns a
    Verdict per claim."""
    claims = _claim_list(claims)
    if not (_real(alpha) and 0 < alpha < 0.5):
        raise errors.InvalidArgument("alpha=%r: a significance level, 0 < alpha < 0.5 "
                                     "(default %g)" % (errors.Echo(alpha), ALPHA))
    flat = []
    for c in claims:
        for cell in c.cells:
            cell.holds, cell.p = c._test(cell, alpha)
            flat.append(cell)
    adj = _stats.bh_adjust([x.p for x in flat])
    for cell, pa in zip(flat, adj):
        cell.p_adj = float(pa)
    out = []
    for c in claims:
        for cell in c.cells:
            if not cell.decides:
                cell.status = OPEN
            elif cell.p_adj < alpha:
                cell.status = FAILS
            elif cell.holds:
                cell.status = HOLDS
            else:
                cell.status = OPEN
        bad = [x for x in c.cells if x.status == FAILS]
        if bad:
            out.append(Verdict(c, FAILS, "", alpha))
        elif all(x.status == HOLDS for x in c.cells):
            out.append(Verdict(c, HOLDS, "", alpha))
        else:
            out.append(Verdict(c, OPEN, _open_reason(c, alpha), alpha))
    return out


def _claim_list(claims):
    """``claims`` (judge()'s argument) as a list of Claims, else
    ParameterTypeError naming what judge() takes."""
    what = ("judge() takes a list of Claims (from alloclab.claim(); one claim: "
            "claim.judge()), not %r")
    if isinstance(claims, Claim):
        raise errors.ParameterTypeError(what % (errors.Echo(claims),))
    if isinstance(claims, (str, bytes, dict)):
        raise errors.ParameterTypeError(what % (errors.Echo(claims),))
    try:
        it = iter(claims)
    except TypeError:
        raise errors.ParameterTypeError(what % (errors.Echo(claims),)) from None
    out = list(it)
    bad = [c for c in out if not isinstance(c, Claim)]
    if bad:
        raise errors.ParameterTypeError((what + " among them") % (errors.Echo(bad[0]),))
    return out


def _test_words(test):
    """A cell's test ("paired t on 5 log-ratios") as a whole phrase without
    the cell's counts, which differ from cell to cell ("paired t-test on the
    log-ratios"); "" for none."""
    if test == "none":
        return ""
    if test.startswith("contrast of "):
        return "contrast of " + _test_words(test[len("contrast of "):])
    test = re.sub(r" \(\d+/\d+ runs\)$", "", test)
    test = re.sub(r" on \d+ ", " on the ", test)
    test = re.sub(r"^Welch t ", "Welch's t ", test)
    return re.sub(r"\bt (on|against) ", r"t-test \1 ", test)


def _in_cells(claim, cells, alpha, ci=False, p=False):
    """" in CELLS (numbers)", or " (numbers)" for a claim's only cell when it
    has no name (a claim on every point: its label reads "all")."""
    if len(cells) == 1 and len(claim.cells) == 1 and cells[0].label == "all":
        return " " + _cells_text(claim, cells, alpha, ci=ci, p=p)[len("all "):]
    return " in " + _cells_text(claim, cells, alpha, ci=ci, p=p)


def _open_reason(claim, alpha):
    """Why an undecided claim is undecided, by kind, with the cells."""
    kinds = {}
    for x in claim.cells:
        if x.status == HOLDS:
            continue
        if x.problems:
            for kind, text in x.problems:
                kinds.setdefault(kind, []).append((x, text))
        else:
            kinds.setdefault(_undecided_kind(claim, x, alpha), []).append((x, None))
    order = ("virtual", "unvalidated", "factors", "runs", "truncated", "bimodal", "steal",
             "noise", "outside-bh", "outside")
    names = _reason_names(claim, alpha)
    parts = []
    n = len(claim.cells)
    for k in order:
        if k not in kinds:
            continue
        cells = kinds[k]
        labels = uniq([x.label for x, _ in cells])
        what = names[k]
        if k in ("noise", "outside-bh", "outside"):
            what += _in_cells(claim, [x for x, _ in cells], alpha, ci=True, p=k != "noise")
            what += names.get(k + " but", "")
        elif k in ("bimodal", "steal", "truncated", "factors"):
            what += " (%s)" % "; ".join(uniq(["%s: %s" % (x.label, t) for x, t in cells])[:3])
        else:
            what += " (%d of %d cells%s)" % (len(labels), n, (": " + ", ".join(labels[:4]))
                                             if len(labels) < n else "")
        parts.append(what)
    return "inconclusive: " + "; ".join(parts) if parts else "inconclusive"


def _undecided_kind(claim, cell, alpha):
    """Why a cell with no problem is undecided: "noise" when its interval
    contains the claimed size (or a margin's bound); when the interval lies
    wholly on the wrong side, its contradiction was not significant:
    "outside-bh" when only after Benjamini-Hochberg, else "outside"."""
    if not claim.outside(cell, alpha):
        return "noise"
    return "outside-bh" if cell.p < alpha else "outside"


def _reason_names(claim, alpha):
    """The words of each kind of reason (and "<kind> but": what follows its cells)."""
    if claim.expect == "same":
        bound = "range" if claim.within is not None else "margin"
        where = "outside the claimed %s" % bound
    else:
        bound = "size"
        big = claim.by is not None and claim.by > (0 if claim.absolute else 1)
        words = claim.words or ("lower", "higher")
        where = "below the claimed size" if big else \
            "on the wrong side of the claimed size (%s)" % (
                words[1] if claim.expect == "lower" else words[0])
    return {"virtual": "latency on virtual CPUs never decides",
            "unvalidated": "unvalidated predictions never decide",
            "factors": "a predicted difference within the two policies' calibration factors",
            "runs": "too few runs", "truncated": "truncated runs",
            "bimodal": "bimodal runs", "steal": "an unstable machine",
            "noise": "noise: the interval straddles the claimed %s" % bound,
            "outside-bh": "the interval lies %s" % where,
            "outside-bh but": ", but the contradiction is not significant after "
                              "Benjamini-Hochberg correction (p_adj >= %g)" % alpha,
            "outside": "the interval lies %s" % where,
            "outside but": ", but the contradiction is not significant (%sp >= %g)" % (
                "two-sided " if claim.expect == "same" else "", alpha)}


def _cells_text(claim, cells, alpha, ci=False, limit=3, p=False):
    """Cells with their numbers: the effect, then the interval (``ci``), the
    p-value and p_adj (``p``), or p_adj alone (neither)."""
    out = []
    for x in cells[:limit]:
        conf = 1 - 2 * alpha if claim.expect == "same" else CONFIDENCE
        lo, hi = (claim.value(x, v) for v in x.interval(conf))
        s = "%s (%s" % (x.label, claim.one_words(claim.value(x, x.est.theta)))
        if ci:
            s += ", %d%% CI %s" % (round(100 * conf), claim.range_words(lo, hi))
        if p and not math.isnan(x.p):
            s += ", p %s" % _p_text(x.p)
        if (p or not ci) and not math.isnan(x.p_adj):
            s += ", p_adj %s" % _p_text(x.p_adj)
        out.append(s + ")")
    more = len(cells) - limit
    return ", ".join(out) + (" and %d more" % more if more > 0 else "")


def _p_text(p):
    """A p-value as printed; 0 is underflow (or no spread): below any shown."""
    return "%.2g" % p if p > 0 else "< 1e-300"


# ---------------------------------------------------------------- words

def _fx(x):
    if not np.isfinite(x):
        return "inf"
    if x < 9.995:
        return "%.2fx" % x
    if x < 99.95:
        return "%.1fx" % x
    return "%.0fx" % x


def factor_words(f, words=None):
    """A ratio new/old as words: "1.50x slower", "2.00x fewer", "the same
    (1.00x)". ``words``: (word for new < old, word for new > old); default
    ("lower", "higher")."""
    lo_w, hi_w = words or ("lower", "higher")
    if f is None or (isinstance(f, float) and math.isnan(f)):
        return "n/a"
    if f <= 0:
        return "none left (0)" if f == 0 else "n/a"
    if abs(math.log(f)) < 0.005:
        return "the same (1.00x)"
    return "%s %s" % (_fx(1.0 / f), lo_w) if f < 1 else "%s %s" % (_fx(f), hi_w)


def describe_range(lo, hi, words=None):
    """A range of ratios as words: "1.20x-1.50x faster", "1.10x slower to
    1.30x faster"."""
    lo_w, hi_w = words or ("lower", "higher")
    if not (np.isfinite(lo) and np.isfinite(hi)):
        if np.isfinite(lo) or np.isfinite(hi):
            v = lo if np.isfinite(lo) else hi
            return "unbounded (%s)" % factor_words(v, words)
        return "n/a"
    if abs(math.log(max(hi, 1e-300) / max(lo, 1e-300))) < 0.005 or lo == hi:
        return factor_words(lo, words)
    if hi <= 1:
        return "%s-%s %s" % (_fx(1.0 / hi), _fx(1.0 / lo), lo_w) if lo > 0 else \
            "%s %s to none left" % (_fx(1.0 / hi), lo_w)
    if lo >= 1:
        return "%s-%s %s" % (_fx(lo), _fx(hi), hi_w)
    return "%s to %s" % (factor_words(lo, words), factor_words(hi, words))


def metric_words(metric, lower=None):
    """(word for a ratio below 1, above 1) for a metric: latencies and rates
    are faster/slower, counts fewer/more."""
    if lower is None:
        lower = direction(metric)
    if is_timing(metric):
        return ("faster", "slower") if lower is not False else ("slower", "faster")
    return ("fewer", "more")


# ---------------------------------------------------------------- from a Result

def claim(res, new, old=None, metric="alloc_ns", expect="faster", by=None, margin=None,
          within=None, where=None, param="policy", value=None, value_source=None, name=None,
          lower_is_better=None, scale="auto"):
    """A claim about a Result: ``new`` against ``old`` (values of ``param``,
    default the policy; presets and specs alike), or ``new`` against a stated
    ``value`` (with ``value_source`` saying where it comes from; old or value,
    never both; a time or a rate > 0), in every
    cell selected by ``where`` ({param: value or list}) and told apart by the
    parameters that vary there; ``metric`` a name or a list.

    expect: "faster"/"slower"/"better"/"worse" (by the metric's direction),
    "lower"/"higher"/"fewer"/"more", or "same" (within ``margin``, default
    2%); ``within=(lo, hi)``: the ratio new/old lies in [lo, hi]. by: the
    least factor claimed (1.3: at least 30% faster), default any.
    Returns a Claim; claim.judge() or alloclab.judge([...]) gives Verdicts.
    """

    if not isinstance(res, Result):
        raise errors.InvalidArgument("claim takes a Result, not %r" % (errors.Echo(res),))
    metrics = [metric] if isinstance(metric, str) else list(metric)
    if within is not None:
        expect = "same"
    lower, direction = _claim_options(res, metrics, param, scale, expect, lower_is_better)
    _claim_against(old, value, value_source)
    _claim_numbers(metrics, by, margin, within, value)
    _claim_bounds(direction, expect, by, margin, within)
    news, olds, key = _claim_points(res, where, param, new, old)
    cells = _claim_cells(news, olds, key, metrics, param, new, old, value, value_source,
                         scale, res.metadata)
    words = metric_words(metrics[0], lower)
    if name:
        text = name
    else:
        against = old if old is not None else "%s (%s)" % (value, value_source or "stated")
        text = "%s %s %s: %s" % (new, _relation(direction, words, by, margin, within), against,
                                 "/".join(metrics))
    return Claim(text, cells, direction, by=by, margin=margin, within=within,
                 metric=metrics[0], lower=lower, words=words)


def _real(v):
    """Whether ``v`` is a finite real number (NumPy's included), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _claim_against(old, value, value_source):
    """A claim compares ``new`` with ``old`` or with a stated ``value``
    (whose source ``value_source`` names): exactly one of them."""
    if old is None and value is None:
        raise errors.InvalidArgument("a claim compares new with old=... or with value=...")
    if old is not None and value is not None:
        raise errors.InvalidArgument(
            "a claim compares new with old=... or with value=..., not both: old=%r and "
            "value=%r were given; drop one" % (errors.Echo(old), errors.Echo(value)))
    if value_source is not None and value is None:
        raise errors.InvalidArgument(
            "value_source=%r says where a stated value= comes from, but no value= was given"
            % (errors.Echo(value_source),))


def _claim_bounds(direction, expect, by, margin, within):
    """by= bounds a claim of a direction, margin= and within= one of "same"
    (within= in place of margin=): one given where it is not read would be
    silently ignored, so it is refused."""
    if direction == "same" and by is not None:
        raise errors.InvalidArgument(
            "by=%r is the least factor of a claim of a direction (expect='faster', 'lower'...), "
            "not of expect=%r: a claim of the same takes margin= or within="
            % (errors.Echo(by), errors.Echo(expect)))
    if direction != "same" and margin is not None:
        raise errors.InvalidArgument(
            "margin=%r bounds a claim of the same (expect='same'), not of expect=%r: a claim "
            "of a direction takes by= (the least factor)" % (errors.Echo(margin),
                                                             errors.Echo(expect)))
    if margin is not None and within is not None:
        raise errors.InvalidArgument(
            "margin=%r and within=%r: within= is the range in place of the margin; give one"
            % (errors.Echo(margin), errors.Echo(within)))


def _claim_numbers(metrics, by, margin, within, value):
    """claim()'s numbers checked before anything is judged: each a finite
    number in its range, named with the range in the message."""
    if by is not None and not (_real(by) and by >= 1):
        raise errors.InvalidArgument("by=%r: a finite factor >= 1 (1.3: at least 1.3x)"
                                     % (errors.Echo(by),))
    _check_margin(margin, within, absolute=False)
    if value is None:
        return
    if not _real(value):
        raise errors.InvalidArgument("value=%r: a finite number (the stated value of %s)"
                                     % (errors.Echo(value), "/".join(metrics)))
    timed = [m for m in metrics if is_timing(m)]
    if value <= 0 and timed:
        raise errors.InvalidArgument(
            "value=%r: %s is a time or a rate, so a stated value must be > 0"
            % (errors.Echo(value), timed[0]))


def _check_margin(margin, within, absolute):
    """margin: a finite number > 0; within: a pair (lo, hi) of finite
    numbers, lo < hi, and 0 < lo for factors (``absolute``: differences)."""
    if margin is not None and not (_real(margin) and margin > 0):
        raise errors.InvalidArgument(
            "margin=%r: a finite number > 0 (%s)" % (
                errors.Echo(margin), "a difference in the metric's unit" if absolute else
                "a fraction: 0.05 = the same within 5%"))
    if within is None:
        return
    pair = isinstance(within, (tuple, list)) and len(within) == 2 and \
        all(_real(x) for x in within)
    if not (pair and (absolute or 0 < within[0]) and within[0] < within[1]):
        raise errors.InvalidArgument(
            "within=%r: a pair of finite %s (lo, hi), %slo < hi" % (
                errors.Echo(within), "differences" if absolute else "factors",
                "" if absolute else "0 < "))


def _claim_options(res, metrics, param, scale, expect, lower_is_better):
    """claim()'s options checked against the Result; returns (lower is
    better, the direction expected: "lower", "higher" or "same")."""
    known = res.metrics()
    if not metrics:
        raise errors.InvalidArgument("metric=[]: a claim names at least one metric; known: %s"
                                     % ", ".join(known))
    for m in metrics:
        if not isinstance(m, str) or m not in known:
            raise errors.UnknownNameError.make("metric", m, known)
    if param not in res.params():
        raise errors.UnknownNameError.make("parameter", param, res.params())
    if scale not in SCALES:
        raise errors.UnknownNameError.make("scale", scale, list(SCALES))
    if lower_is_better is not None and not isinstance(lower_is_better, (bool, np.bool_)):
        raise errors.ParameterTypeError(
            "lower_is_better=%r: True (lower is better), False (higher is) or None (by the "
            "metric)" % (errors.Echo(lower_is_better),), name="lower_is_better",
            value=lower_is_better)
    lower = bool(lower_is_better) if lower_is_better is not None else direction(metrics[0])
    _one_reading(metrics, lower_is_better)
    table = _EXPECT_HIGHER_BETTER if lower is False else _EXPECT_LOWER_BETTER
    if expect not in table:
        raise errors.UnknownNameError.make("expectation", expect, EXPECT)
    if expect in ("faster", "slower", "better", "worse") and lower is None:
        raise errors.InvalidArgument(
            "alloclab does not know whether lower or higher is better for %r: say "
            "expect='lower' or 'higher', or pass lower_is_better=" % metrics[0])
    return lower, table[expect]


def _one_reading(metrics, lower_is_better):
    """A claim's metrics are read one way: the same direction (unless
    lower_is_better says it for all) and the same words (times and rates
    faster/slower, counts fewer/more); else "faster" would be true of one
    and said of the other."""
    def reading(m):
        lower = direction(m) if lower_is_better is None else bool(lower_is_better)
        return metric_words(m, lower)
    first = reading(metrics[0])
    for m in metrics[1:]:
        if reading(m) != first:
            raise errors.InvalidArgument(
                "metric=%r: %s and %s are not read the same way (a lower %s reads %s, a "
                "lower %s %s): claim each apart" % (
                    errors.Echo(metrics), metrics[0], m, metrics[0], first[0], m,
                    reading(m)[0]))


def _claim_points(res, where, param, new, old):
    """The points of ``res`` selected by ``where`` whose ``param`` is ``new``,
    those where it is ``old`` (none without old), and the key: the other
    parameters that vary there."""

    if where is not None and not isinstance(where, dict):
        raise errors.InvalidArgument("where=%r: a dict {parameter: value or list of values}"
                                     % (errors.Echo(where),))
    sub = res.filter(**where) if where else res
    if not sub.points:
        raise errors.InvalidArgument(
            "where=%r matches no point of the result; %s" % (
                errors.Echo(where), _values_text(res, where)))
    same = same_policy if param == "policy" else (lambda a, b: a == b)
    sides = [("new", new)] + ([("old", old)] if old is not None else [])
    found = []
    for side, want in sides:
        pts = [p for p in sub.points if same(p.params.get(param), want)]
        if not pts:
            _no_side(res, sub, where, param, side, want)
        found.append(pts)
    return found[0], found[1] if old is not None else [], \
        [k for k in sub.swept() if k != param]


def _values_text(res, keys):
    """"producers has 1, 2; ..." for each of ``keys`` over the points of res."""
    return "; ".join("%s has %s" % (k, ", ".join(uniq([str(p.params.get(k))
                                                        for p in res.points])))
                     for k in keys)


def _no_side(res, sub, where, param, side, want):
    """Raise the error for a side of a claim that no point selected by
    ``where`` has: an unknown name when the whole result lacks it too, else
    that the filter left it out."""
    same = same_policy if param == "policy" else (lambda a, b: a == b)
    vals = uniq([str(p.params.get(param)) for p in sub.points])
    if sub is res or not any(same(p.params.get(param), want) for p in res.points):
        raise errors.UnknownNameError.make(param, want, uniq([
            str(p.params.get(param)) for p in res.points]), context="claim (%s)" % side)
    raise errors.InvalidArgument(
        "no point that where=%r matches has %s=%s (the claim's %s side): %s has %s there; "
        "in the whole result %s" % (
            errors.Echo(where), param, errors.Echo(want), side, param, ", ".join(vals),
            _values_text(res, list(where))))


def _claim_cells(news, olds, key, metrics, param, new, old, value, value_source, scale,
                 metadata=None):
    """A compared cell per value of the key and metric: the new points
    against the old ones of that cell, or against the stated ``value``. A
    simulated cell above a validation's CPUs that found its prediction off
    is undecided ("unvalidated")."""
    def kk(p):
        return json.dumps([p.params.get(k) for k in key], default=str)

    groups = {}
    for p in news:
        groups.setdefault(kk(p), [p.params, [], []])[1].append(p)
    for p in olds:
        if kk(p) in groups:
            groups[kk(p)][2].append(p)
    cells = []
    for params, np_, op_ in groups.values():
        if old is not None and not op_:
            raise errors.InvalidArgument(
                "the claim names a cell that %s=%s lacks: %s" % (
                    param, old, ", ".join("%s=%s" % (k, params.get(k)) for k in key)))
        for m in metrics:
            label = ", ".join("%s=%s" % (k, params.get(k)) for k in key) or "all"
            if len(metrics) > 1:
                label += " %s" % m
            sn = Side.from_points(np_, m, str(new))
            so = Side.from_points(op_, m, str(old)) if old is not None else \
                Side.value(value, value_source or "the stated value")
            if sn is None or so is None:
                continue
            cell = Claim.compare(label, m, so, sn, scale=scale)
            if any(_simulated.unvalidated(p, metadata) for p in np_ + op_):
                cell.problems.append(("unvalidated", "a prediction above the CPUs its "
                                      "validation checked, which found it off"))
            cells.append(cell)
    return cells


def _relation(direction, words, by, margin, within):
    """The words between the two sides of a claim's text: "faster than",
    "at least 1.3x faster than", "within 0.9x-1.1x of", ..."""
    if within is not None:
        return "within %s-%s of" % (_fx(within[0]), _fx(within[1]))
    if direction == "same":
        return "the same (within %g%%) as" % (100 * (THRESHOLD if margin is None else margin))
    w = words[0] if direction == "lower" else words[1]
    return "%s%s than" % ("at least %s " % _fx(by) if by else "", w)
