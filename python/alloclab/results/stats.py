"""Statistics over runs, and the tests that compare two sets of runs.

Everything here is plain Python and NumPy: the t and normal distributions
are computed from the regularized incomplete beta function (a continued
fraction) and ``math.erfc``, so alloclab needs no SciPy at run time (the
test suite checks these numbers against SciPy).

    s = describe([101.0, 99.5, 104.2], steal=[0.0, 0.1, 3.5])
    s.mean, s.sd, s.ci, s.cv, s.warnings

Warnings follow pyperf's habit of saying when a number should not be
trusted: a coefficient of variation above 10%, steal time during a run
above 2% of CPU time (a shared VM's neighbours ran on our CPUs), workers
preempted often during a run (other tasks ran on their CPUs), or fewer
than 3 runs (no usable spread, a confidence interval wider than the mean).

Cost: linear in the number of runs (tens), so computing statistics never
matters next to measuring; nothing here holds state between calls.
"""

import functools
import math
import textwrap
from collections import namedtuple

import numpy as np

from . import simulated as _sim

CV_WARN = 0.10  # coefficient of variation above which a cell is unstable
STEAL_WARN_PCT = 2.0  # steal time (% of CPU time) during any run above which to warn
MIN_RUNS = 3  # fewer runs than this: no trustworthy spread
# Preemptions of the workers by other tasks, per worker per second of the
# measured phase (the metric worker_preempted_per_s: involuntary context
# switches less the engine's own wake-ups on the workers' CPUs), above which
# a run was disturbed; a cell warns on its largest run. Measured on a 2-vCPU
# VM, malloc-free on buddy, 1 and 2 pinned producers, 5 runs of 0.25 s per
# cell: idle, cells at most 16/s (1p) and 24/s (2p), alloc_ns CV 3-7%; one
# `yes` loop, 2p cells 83-111/s (CV 21-61%), 1p cells 40-44/s where the loop
# stayed off the worker's CPU (CV 2-12%) and 213/s where it did not (CV 18%);
# two loops, cells 64-144/s (CV 18-64%). A worker sharing its CPU with a busy
# task is preempted about once per scheduler slice, 100/s and more. Without
# memory sampling (mem_sample=0, as the reproductions run), 2 workers pinned
# on the idle 2-vCPU VM see 55-60/s from the VM's own kernel threads: the
# count separates idle from busy poorly at 2 producers, so the warning is set
# where a busy task sharing a worker's CPU puts it, and no verdict rests on it.
PREEMPT_WARN_PER_S = 100.0
MIN_PHASE_S = 0.1  # a run's measured phase shorter than this warns (pyperf's minimum)

# ---------------------------------------------------------------- distributions


def _betacf(a, b, x):
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a, b, x):
    """The regularized incomplete beta function I_x(a, b), a, b > 0."""
    if not (a > 0 and b > 0):
        raise ValueError("betainc needs a > 0 and b > 0, not a=%r, b=%r" % (a, b))
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lfront = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
              + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lfront) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lfront) * _betacf(b, a, 1.0 - x) / b


def t_sf(t, df):
    """P(T > t) for Student's t with df degrees of freedom (df > 0, may be fractional)."""
    if math.isnan(t) or not df > 0:
        return math.nan
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))  # P(T > |t|)
    return tail if t > 0 else 1.0 - tail


def t_cdf(t, df):
    """P(T <= t) for Student's t."""
    return 1.0 - t_sf(t, df) if t > 0 else t_sf(-t, df)


@functools.lru_cache(maxsize=1024)
def t_ppf(p, df):
    """The t with P(T <= t) = p (0 < p < 1): bisection to double precision."""
    if not 0.0 < p < 1.0:
        raise ValueError("t_ppf needs 0 < p < 1, not %r" % (p,))
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
        if hi > 1e300:
            return math.inf
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def norm_cdf(z):
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def norm_sf(z):
    return 0.5 * math.erfc(z / math.sqrt(2.0))


@functools.lru_cache(maxsize=256)
def norm_ppf(p):
    """The z with P(Z <= z) = p, by bisection on erfc."""
    if not 0.0 < p < 1.0:
        raise ValueError("norm_ppf needs 0 < p < 1, not %r" % (p,))
    if p > 0.5:  # 1 - p is exact here; the lower tail is where erfc is accurate
        return -norm_ppf(1.0 - p)
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if norm_cdf(mid) < p:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


# ---------------------------------------------------------------- describe

StatWarning = namedtuple("StatWarning", "kind message")


def _extreme(values, how):
    """how (np.max or np.min) of the runs' values, NaNs dropped; NaN for none."""
    x = np.asarray(values if values is not None else [], dtype=float).ravel()
    x = x[~np.isnan(x)]
    return float(how(x)) if len(x) else math.nan


class Stats:
    """One cell's runs: n, mean, sd (sample, ddof=1), median, min, max, cv
    (sd / |mean|), ci (lo, hi) for the mean at ``confidence`` (Student t),
    ci_half (the half width) and ``warnings`` (StatWarning(kind, message);
    kinds: "runs", "cv", "steal", "preempted", "short"). ``predicted``: the
    values are predictions of simulated CPUs (cpu="simulated"), not
    measurements; repr and as_dict say so."""

    __slots__ = ("n", "mean", "sd", "median", "min", "max", "cv", "ci", "ci_half", "confidence",
                 "steal_max", "preempt_max", "phase_min", "retried_max", "warnings", "values",
                 "predicted")

    def __init__(self, values, confidence=0.95, steal=None, cv_warn=CV_WARN,
                 steal_warn=STEAL_WARN_PCT, min_runs=MIN_RUNS, preempt=None,
                 preempt_warn=PREEMPT_WARN_PER_S, phase=None, min_phase=MIN_PHASE_S,
                 retried=None, predicted=False):
        x = np.asarray(values, dtype=float).ravel()
        x = x[~np.isnan(x)]
        self.values = x
        self.predicted = bool(predicted)
        self.n = n = int(len(x))
        self.confidence = confidence
        nan = math.nan
        self.mean = float(np.mean(x)) if n else nan
        self.median = float(np.median(x)) if n else nan
        self.min = float(np.min(x)) if n else nan
        self.max = float(np.max(x)) if n else nan
        self.sd = float(np.std(x, ddof=1)) if n > 1 else nan
        if n > 1 and self.mean != 0:
            self.cv = self.sd / abs(self.mean)
        elif n > 1 and self.sd == 0:
            self.cv = 0.0
        else:
            self.cv = nan
        if n > 1:
            h = t_ppf(0.5 + confidence / 2.0, n - 1) * self.sd / math.sqrt(n)
            self.ci_half = h
            self.ci = (self.mean - h, self.mean + h)
        else:
            self.ci_half = nan
            self.ci = (nan, nan)
        self.steal_max = _extreme(steal, np.max)
        self.preempt_max = _extreme(preempt, np.max)
        self.phase_min = _extreme(phase, np.min)
        self.retried_max = _extreme(retried, np.max)
        w = []
        if n < min_runs:
            w.append(StatWarning("runs", "%d run%s (< %d): %s" % (
                n, "" if n == 1 else "s", min_runs,
                "no spread, no confidence interval" if n < 2 else
                "the spread and confidence interval are rough")))
        if not math.isnan(self.cv) and self.cv > cv_warn:
            w.append(StatWarning("cv", "unstable: CV %.1f%% (> %.0f%%)" % (
                100 * self.cv, 100 * cv_warn)))
        if not math.isnan(self.steal_max) and self.steal_max > steal_warn:
            w.append(StatWarning("steal", "steal time %.1f%% of CPU time in a run (> %g%%)" % (
                self.steal_max, steal_warn)))
        if not math.isnan(self.preempt_max) and self.preempt_max > preempt_warn:
            w.append(StatWarning("preempted", "workers preempted by other tasks %.0f/s per "
                                 "worker in a run (> %g/s)" % (self.preempt_max, preempt_warn)))
        if not math.isnan(self.phase_min) and self.phase_min < min_phase:
            w.append(StatWarning("short", "a measured phase of %.0f ms (< %.0f ms)" % (
                1e3 * self.phase_min, 1e3 * min_phase)))
        if not math.isnan(self.retried_max) and self.retried_max > 0:
            w.append(StatWarning("retried", "%.0f refused operations retried in a run (each "
                                 "retry's wait is in the times)" % self.retried_max))
        self.warnings = w

    @property
    def stable(self):
        return not self.warnings

    def as_dict(self):
        return {k: getattr(self, k) for k in ("n", "mean", "sd", "median", "min", "max", "cv",
                                             "ci", "ci_half", "confidence", "steal_max",
                                             "preempt_max", "phase_min", "retried_max",
                                             "predicted")} | {
            "warnings": [w.message for w in self.warnings]}

    def __repr__(self):
        s = "Stats(%sn=%d, mean=%.6g, sd=%.3g, ci=[%.6g, %.6g])" % (
            _sim.PLOT_LABEL + ": " if self.predicted else "",
            self.n, self.mean, self.sd, self.ci[0], self.ci[1])
        if self.warnings:
            s += " warnings: " + "; ".join(w.message for w in self.warnings)
        return s


def describe(values, confidence=0.95, steal=None, preempt=None, phase=None, retried=None,
             predicted=False, **kw):
    """Stats of one cell's runs (NaNs dropped); ``steal``: the runs'
    steal_pct, for the steal warning; ``preempt``: their
    worker_preempted_per_s, for the preempted warning; ``phase``: their
    measured phase in seconds, for the short-phase warning; ``retried``:
    the operations the policy refused and the workload retried in each
    run, for the retried warning; ``predicted``: the values are predictions
    of simulated CPUs."""
    return Stats(values, confidence=confidence, steal=steal, preempt=preempt, phase=phase,
                 retried=retried, predicted=predicted, **kw)


# The workload metrics that count a refused operation the workload tried
# again inside its measured loop (retry.h): each retry's wait is timed, in
# the allocations' time or the frees' (busy_retries, of the nmi and stress
# workloads, counts both).
ALLOC_RETRY_METRICS = ("wl.alloc_refused_empty", "wl.alloc_refused_busy",
                       "wl.alloc_refused_timedout", "wl.busy_retries")
FREE_RETRY_METRICS = ("wl.free_refused_timedout", "wl.busy_retries")


def _retry_metrics(metric):
    """The retry counts whose waits are in ``metric``: the allocations' for an
    alloc_* metric, the frees' for a free_* one, both for anything else."""
    if metric and metric.startswith("alloc"):
        return ALLOC_RETRY_METRICS
    if metric and metric.startswith("free"):
        return FREE_RETRY_METRICS
    return ALLOC_RETRY_METRICS + FREE_RETRY_METRICS


def run_context(points, metric=None):
    """The per-run values behind a cell's warnings, over Points (in run
    order, as their metric's values are pooled): describe()'s keyword
    arguments steal, preempt, phase and retried (the retries whose waits
    are in ``metric``, all of them when it is None), and predicted (any
    point simulated: its values are predictions, unless ``metric`` is one
    the host measures while simulating). A simulated point's runs
    have no steal, preemption or phase (NaN): its times come from virtual
    time, which the machine does not disturb; its retries are counted, as
    their waits are in its virtual times too."""
    def cat(name, scale=1.0):
        arrs = [np.asarray(p.data.get(name, []), dtype=float) *
                (math.nan if _sim.is_simulated(p) else scale)
                for p in points]
        return np.concatenate(arrs) if arrs else np.array([])
    def retried(p):  # a metric of another length than the runs' (a bad file) is left out
        n = len(p.data.get("elapsed_ns", []))
        arrs = [np.nan_to_num(np.asarray(p.data[m], dtype=float).ravel())
                for m in _retry_metrics(metric) if m in p.data]
        return sum((a for a in arrs if a.shape == (n,)), np.zeros(n))
    return {"steal": cat("steal_pct"), "preempt": cat("worker_preempted_per_s"),
            "phase": cat("elapsed_ns", 1e-9),
            "retried": np.concatenate([retried(p) for p in points]) if points else np.array([]),
            "predicted": any(_sim.is_simulated(p) for p in points) and (
                metric is None or _sim.source(metric) != "host")}


# ---------------------------------------------------------------- tests

TestResult = namedtuple("TestResult", "test statistic pvalue")


def _clean(x):
    x = np.asarray(x, dtype=float).ravel()
    return x[~np.isnan(x)]


def welch(a, b):
    """Welch's unequal-variance t-test, two-sided: TestResult("welch", t, p).

    Both sides need 2 runs or more (else p is NaN). When both variances
    are zero (deterministic counters), p is 0 if the means differ, else 1.
    """
    a, b = _clean(a), _clean(b)
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return TestResult("welch", math.nan, math.nan)
    ma, mb = float(np.mean(a)), float(np.mean(b))
    va, vb = float(np.var(a, ddof=1)) / na, float(np.var(b, ddof=1)) / nb
    if va + vb == 0:
        if ma == mb:
            return TestResult("welch", 0.0, 1.0)
        return TestResult("welch", math.copysign(math.inf, ma - mb), 0.0)
    t = (ma - mb) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    p = min(1.0, 2.0 * t_sf(abs(t), df))
    return TestResult("welch", t, p)


def welch_half_width(a, b, confidence=0.95):
    """The Welch half-width of the difference of two samples' means at this
    confidence; 0 when neither varies (deterministic counters); a side of one
    run adds no variance of its own."""
    a, b = _clean(a), _clean(b)
    va = float(np.var(a, ddof=1)) / len(a) if len(a) > 1 else 0.0
    vb = float(np.var(b, ddof=1)) / len(b) if len(b) > 1 else 0.0
    if va + vb == 0:
        return 0.0
    df = (va + vb) ** 2 / sum(v * v / (len(x) - 1) for v, x in ((va, a), (vb, b)) if v > 0)
    return t_ppf(0.5 + confidence / 2, df) * math.sqrt(va + vb)


def paired_change_pct(old, new, confidence=0.95):
    """(change, low, high) in percent of old / new - 1 from runs taken in
    pairs (run i of each back to back): the geometric mean of the pairs'
    ratios and its interval (t on the log-ratios); NaN bounds with fewer
    than two pairs."""
    lr = np.log(np.asarray(old, float) / np.asarray(new, float))
    m = float(np.mean(lr))
    if len(lr) < 2:
        return 100 * (math.exp(m) - 1), float("nan"), float("nan")
    half = t_ppf(0.5 + confidence / 2, len(lr) - 1) * float(np.std(lr, ddof=1)) / \
        math.sqrt(len(lr))
    return tuple(100 * (math.exp(x) - 1) for x in (m, m - half, m + half))


def _rank_average(x):
    """Ranks 1..n with ties given their average rank; and the tie group sizes."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x), dtype=float)
    ties = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        ties.append(j - i + 1)
        i = j + 1
    return ranks, np.array(ties, dtype=float)


@functools.lru_cache(maxsize=128)
def _mwu_counts(m, n):
    """How many of the C(m+n, m) arrangements give U = 0..m*n: the
    coefficients of the Gaussian binomial [m+n choose m]_q, built as
    prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i) with exact integers."""
    size = m * n + 1
    c = [0] * size
    c[0] = 1
    for i in range(1, m + 1):
        k = n + i  # multiply by (1 - q^k), truncated to the degree m*n
        for d in range(size - 1, k - 1, -1):
            c[d] -= c[d - k]
        for d in range(i, size):  # divide by (1 - q^i): prefix sums with stride i
            c[d] += c[d - i]
    return tuple(c)


def mannwhitney(a, b):
    """Mann-Whitney U test, two-sided: TestResult("mannwhitney", U1, p).

    As SciPy's ``method="auto"``: the exact distribution when there are no
    ties and either side has at most 8 values, else the normal
    approximation with tie and continuity corrections.
    """
    a, b = _clean(a), _clean(b)
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        return TestResult("mannwhitney", math.nan, math.nan)
    ranks, ties = _rank_average(np.concatenate([a, b]))
    u1 = float(np.sum(ranks[:n1]) - n1 * (n1 + 1) / 2.0)
    u = max(u1, n1 * n2 - u1)
    has_ties = bool(np.any(ties > 1))
    if (n1 <= 8 or n2 <= 8) and not has_ties:
        counts = _mwu_counts(min(n1, n2), max(n1, n2))
        k = int(round(u))
        p = 2.0 * (sum(counts[k:]) / math.comb(n1 + n2, n1))
    else:
        n = n1 + n2
        s = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - float(np.sum(ties ** 3 - ties)) / (n * (n - 1))))
        if s == 0:
            return TestResult("mannwhitney", u1, 1.0)
        z = (u - n1 * n2 / 2.0 - 0.5) / s
        p = 2.0 * norm_sf(z)
    return TestResult("mannwhitney", u1, min(1.0, max(0.0, p)))


def choose_test(test, na, nb):
    """'auto' -> Mann-Whitney when both sides have >= 6 runs, else Welch."""
    if test == "auto":
        return "mannwhitney" if na >= 6 and nb >= 6 else "welch"
    return test


TESTS = {"welch": welch, "mannwhitney": mannwhitney}


def bh_adjust(pvalues):
    """Benjamini-Hochberg adjusted p-values (NaNs stay NaN and do not count)."""
    p = np.asarray(pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if not m:
        return out
    order = ok[np.argsort(p[ok], kind="mergesort")]
    adj = p[order] * m / np.arange(1, m + 1)
    adj = np.minimum.accumulate(adj[::-1])[::-1]
    out[order] = np.minimum(adj, 1.0)
    return out


def mannwhitney_min_p(n1, n2):
    """The smallest two-sided p-value mannwhitney() can return for n1 vs n2
    runs without ties: both sides fully separated (U = 0 or n1*n2).

    Where mannwhitney() uses the exact distribution (either side has at
    most 8 runs) that is 2 / C(n1 + n2, n1): 2/924 = 0.0022 at 6 vs 6, so
    no p-value below it exists however large the difference. Beyond, it is
    the normal approximation's p at full separation. Welch's t-test has no
    such floor (its p is continuous). Ties (e.g. equal counters) make
    mannwhitney() use the tie-corrected normal approximation, which can go
    lower. NaN when a side is empty.
    """
    n1, n2 = int(n1), int(n2)
    if n1 < 1 or n2 < 1:
        return math.nan
    if n1 <= 8 or n2 <= 8:
        return min(1.0, 2.0 / math.comb(n1 + n2, n1))
    n = n1 + n2
    z = (n1 * n2 / 2.0 - 0.5) / math.sqrt(n1 * n2 / 12.0 * (n + 1))
    return min(1.0, 2.0 * norm_sf(z))


def _names(items, limit):
    if len(items) <= limit:
        return ", ".join(items)
    return ", ".join(items[:limit]) + " and %d more" % (len(items) - limit)


def warning_lines(cells, limit=6, cv_warn=CV_WARN, steal_warn=STEAL_WARN_PCT, wrap=104,
                  preempt_warn=PREEMPT_WARN_PER_S):
    """One line per kind of warning over labelled cells [(label, Stats)],
    wrapped at ``wrap`` columns (0: not wrapped)."""
    lines = []
    runs = {}
    for label, st in cells:
        for w in st.warnings:
            if w.kind == "runs":
                runs.setdefault(w.message, []).append(label)
    for msg, labels in runs.items():
        lines.append("%s: %s" % (msg, "every cell" if len(labels) == len(cells) and
                                 len(cells) > 1 else _names(labels, limit)))
    cv = ["%s (%.0f%%)" % (label, 100 * st.cv) for label, st in cells
          if any(w.kind == "cv" for w in st.warnings)]
    if cv:
        lines.append("unstable, CV > %.0f%%: %s" % (100 * cv_warn, _names(cv, limit)))
    steal = ["%s (%.1f%%)" % (label, st.steal_max) for label, st in cells
             if any(w.kind == "steal" for w in st.warnings)]
    if steal:
        lines.append("steal time > %g%% of CPU time during a run (a busy host): %s" % (
            steal_warn, _names(steal, limit)))
    preempted = ["%s (%.0f/s)" % (label, st.preempt_max) for label, st in cells
                 if any(w.kind == "preempted" for w in st.warnings)]
    if preempted:
        lines.append("workers preempted by other tasks > %g/s per worker during a run: %s"
                     % (preempt_warn, _names(preempted, limit)))
    retried = ["%s (%.0f)" % (label, st.retried_max) for label, st in cells
               if any(w.kind == "retried" for w in st.warnings)]
    if retried:
        lines.append("refused operations retried during a run, each retry's wait in the times "
                     "(most in one run): %s" % _names(retried, limit))
    short = [label for label, st in cells if any(w.kind == "short" for w in st.warnings)]
    if short:
        shortest = min(st.phase_min for label, st in cells
                       if any(w.kind == "short" for w in st.warnings))
        lines.append("measured phases shorter than %.0f ms (pyperf's minimum; the shortest "
                     "%.0f ms): %s" % (1e3 * MIN_PHASE_S, 1e3 * shortest, "every cell" if len(
                         short) == len(cells) and len(cells) > 1 else _names(short, limit)))
    if not wrap:
        return lines
    out = []
    for line in lines:
        out += textwrap.wrap(line, wrap, subsequent_indent="    ", break_on_hyphens=False)
    return out
