"""Per-operation latency histograms (``run(..., histogram=True)``).

The engine records every timed operation's clock-pair interval, in ticks,
into log-linear buckets (csrc/engine/hist.c: 16 linear sub-buckets per
power of two, so a bucket is at most 1/16 as wide as its lower bound), one
histogram per worker per operation kind, merged per run. A Histogram here
holds one merged histogram (one run, or several added together) and reads
percentiles from it:

    h = res.histogram("alloc")          # all runs of all matching points
    h.percentiles()                     # {50: ns, 90: ns, 99: ns, 99.9: ns}
    h.max_ns, h.mean_ns, h.count

A percentile is the upper edge of the bucket holding its rank, clamped to
the exact minimum and maximum: at most 6.25% above the true value. The
values include one clock pair (``timer_overhead_ns``, reported beside them):
the histogram measures what the operation costs with its timer.

A histogram of a simulated run (cpu="simulated") holds predicted times, in
the simulated clock's virtual picoseconds (SIM_TICKS_PER_NS ticks per ns,
sim.h's AL_SIM_TICKS_PER_NS); ``simulated`` says so, its summary and repr
are marked "simulated: predicted", and it is never merged with a measured
one.
"""

import math

import numpy as np

from .. import errors
from ..cbind._ffi import ffi, lib
from . import simulated as _simulated

SUB_BITS = 4
SUB = 1 << SUB_BITS
NBUCKETS = (64 - SUB_BITS + 1) * SUB  # 976: every uint64 value
PERCENTILES = (50, 90, 99, 99.9)
OPS = ("alloc", "free")
SIM_TICKS_PER_NS = float(lib.AL_SIM_TICKS_PER_NS)  # the simulated clock: virtual picoseconds


def _bounds():
    i = np.arange(NBUCKETS, dtype=np.uint64)
    g = i // SUB
    s = i % SUB
    lo = np.where(g == 0, i, (SUB + s) << np.maximum(g, 1) - np.uint64(1))
    width = np.where(g == 0, np.uint64(1), np.uint64(1) << (np.maximum(g, 1) - np.uint64(1)))
    hi = lo + (width - np.uint64(1))
    return lo.astype(np.uint64), hi.astype(np.uint64)


BUCKET_LO, BUCKET_HI = _bounds()


def bucket_of(v):
    """The bucket index of a tick value (as csrc/engine/hist.c)."""
    v = int(v)
    if v < SUB:
        return v
    shift = v.bit_length() - SUB_BITS - 1
    return (shift + 1) * SUB + (v >> shift) - SUB


def _key(q):
    return ("p%g" % q).replace(".", "")


class Histogram:
    """One merged latency histogram: ``counts`` per bucket (ticks), count,
    sum, min and max in ticks, ``ticks_per_ns`` to convert, and
    ``simulated``: whether its times are predictions of simulated CPUs
    (default: told by the clock, SIM_TICKS_PER_NS; no real clock runs at
    a tick per picosecond)."""

    __slots__ = ("counts", "count", "sum", "min", "max", "ticks_per_ns", "simulated")

    def __init__(self, counts=None, count=None, sum=0, min=None, max=0, ticks_per_ns=1.0,
                 simulated=None):
        c = np.zeros(NBUCKETS, dtype=np.int64) if counts is None else \
            np.asarray(counts, dtype=np.int64)
        if c.shape != (NBUCKETS,):
            raise errors.InvalidArgument("a histogram has %d buckets, not %s" % (
                NBUCKETS, c.shape))
        self.counts = c
        self.count = int(c.sum()) if count is None else int(count)
        self.sum = int(sum)
        self.min = int(min) if min is not None and self.count else None
        self.max = int(max) if self.count else 0
        self.ticks_per_ns = float(ticks_per_ns)
        self.simulated = (self.ticks_per_ns == SIM_TICKS_PER_NS if simulated is None
                          else bool(simulated))

    @classmethod
    def from_values(cls, ticks, ticks_per_ns=1.0, simulated=None):
        """A histogram of tick values (for tests and synthetic data)."""
        t = [int(v) for v in ticks]
        c = np.zeros(NBUCKETS, dtype=np.int64)
        for v in t:
            c[bucket_of(v)] += 1
        return cls(c, len(t), sum(t), min(t) if t else None, max(t) if t else 0, ticks_per_ns,
                   simulated)

    @classmethod
    def from_c(cls, h, ticks_per_ns):
        """From a ``struct al_hist`` (cffi)."""
        if not h.count:
            return cls(ticks_per_ns=ticks_per_ns)
        counts = np.frombuffer(ffi.buffer(h.b), dtype=np.uint64).astype(np.int64)
        return cls(counts, int(h.count), int(h.sum), int(h.min), int(h.max), ticks_per_ns)

    # -- (de)serialisation: sparse buckets --

    def to_dict(self):
        """The sparse buckets and totals; "simulated" only where the clock
        does not tell it (a histogram made with simulated= given)."""
        nz = np.flatnonzero(self.counts)
        d = {"buckets": [[int(i), int(self.counts[i])] for i in nz], "count": self.count,
             "sum": self.sum, "min": self.min, "max": self.max,
             "ticks_per_ns": self.ticks_per_ns}
        if self.simulated != (self.ticks_per_ns == SIM_TICKS_PER_NS):
            d["simulated"] = self.simulated
        return d

    @classmethod
    def from_dict(cls, d):
        c = np.zeros(NBUCKETS, dtype=np.int64)
        for i, n in d.get("buckets", ()):
            c[int(i)] = int(n)
        return cls(c, d.get("count"), d.get("sum", 0), d.get("min"), d.get("max", 0),
                   d.get("ticks_per_ns", 1.0), d.get("simulated"))

    # -- merging --

    def __add__(self, other):
        if not isinstance(other, Histogram):
            return NotImplemented
        # an empty side adds nothing: the other's clock and mode stand (of two
        # empty ones, a simulated one's, so no prediction loses its mark)
        if not other.count and (self.count or not other.simulated):
            return self.copy()
        if not self.count:
            return other.copy()
        if self.simulated != other.simulated:
            raise _simulated.MixedModesError(
                "cannot merge a simulated histogram (%s) with a measured one: a prediction "
                "and a measurement are never pooled; filter on cpu" % _simulated.LABEL,
                modes=("measured", _simulated.MODE))
        if not math.isclose(self.ticks_per_ns, other.ticks_per_ns, rel_tol=1e-3):
            raise errors.InvalidArgument(
                "cannot merge histograms of different clocks (%.4f and %.4f ticks/ns)"
                % (self.ticks_per_ns, other.ticks_per_ns))
        return Histogram(self.counts + other.counts, self.count + other.count,
                         self.sum + other.sum, min(self.min, other.min),
                         max(self.max, other.max), self.ticks_per_ns, self.simulated)

    def __radd__(self, other):
        if other == 0:  # sum([...])
            return self.copy()
        return NotImplemented

    def copy(self):
        return Histogram(self.counts.copy(), self.count, self.sum, self.min, self.max,
                         self.ticks_per_ns, self.simulated)

    def __eq__(self, other):
        if not isinstance(other, Histogram):
            return NotImplemented
        return (np.array_equal(self.counts, other.counts) and self.count == other.count and
                self.sum == other.sum and self.min == other.min and self.max == other.max and
                self.ticks_per_ns == other.ticks_per_ns and self.simulated == other.simulated)

    # -- reading --

    def _ns(self, ticks):
        return float(ticks) / self.ticks_per_ns

    def percentile_ticks(self, q):
        """The q-th percentile (0 < q <= 100) in ticks; None when empty."""
        if not self.count:
            return None
        if not 0 < q <= 100:
            raise errors.InvalidArgument("percentile %r is not in (0, 100]" % (q,))
        if q == 100:
            return self.max
        rank = max(1, int(math.ceil(q / 100.0 * self.count)))
        i = int(np.searchsorted(np.cumsum(self.counts), rank))
        v = int(BUCKET_HI[min(i, NBUCKETS - 1)])
        return max(self.min, min(v, self.max))

    def percentile(self, q):
        """The q-th percentile in ns (NaN when empty)."""
        t = self.percentile_ticks(q)
        return math.nan if t is None else self._ns(t)

    def percentiles(self, qs=PERCENTILES):
        return {q: self.percentile(q) for q in qs}

    @property
    def mean_ns(self):
        return self._ns(self.sum) / self.count if self.count else math.nan

    @property
    def max_ns(self):
        return self._ns(self.max) if self.count else math.nan

    @property
    def min_ns(self):
        return self._ns(self.min) if self.count else math.nan

    def buckets_ns(self):
        """(lo_ns, hi_ns, counts) of the non-empty buckets."""
        nz = np.flatnonzero(self.counts)
        return (BUCKET_LO[nz].astype(float) / self.ticks_per_ns,
                (BUCKET_HI[nz].astype(float) + 1) / self.ticks_per_ns, self.counts[nz].copy())

    def cdf(self):
        """(x_ns, fraction <= x) at the upper edge of every non-empty bucket."""
        lo, hi, c = self.buckets_ns()
        if not len(c):
            return np.array([]), np.array([])
        return hi, np.cumsum(c) / float(self.count)

    def summary(self, timer_overhead_ns=None):
        """One line: n, the percentiles, max and mean; a simulated
        histogram's line begins "simulated: predicted"."""
        p = self.percentiles()
        s = self._mark() + "n=%d  " % self.count + "  ".join(
            "p%g %s" % (q, _fmt_ns(v)) for q, v in p.items()) + "  max %s  mean %s" % (
            _fmt_ns(self.max_ns), _fmt_ns(self.mean_ns))
        if timer_overhead_ns is not None:
            s += "  (includes a clock pair: %s)" % _fmt_ns(timer_overhead_ns)
        return s

    def _mark(self):
        """The words that head a simulated histogram's text; "" for a measured one."""
        return "%s  " % _simulated.LABEL if self.simulated else ""

    def __repr__(self):
        return "<Histogram %s>" % (self.summary() if self.count else self._mark() + "empty")


def _fmt_ns(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v >= 1e6:
        return "%.3g ms" % (v / 1e6)
    if v >= 1e3:
        return "%.3g us" % (v / 1e3)
    return "%.0f ns" % v if v >= 10 else "%.1f ns" % v


def metrics(hists):
    """Per-run metrics of {op: Histogram}: <op>_p50_ns ... <op>_max_ns."""
    out = {}
    for op in OPS:
        h = hists.get(op)
        if h is None or not h.count:
            continue
        for q in PERCENTILES:
            out["%s_%s_ns" % (op, _key(q))] = h.percentile(q)
        out["%s_max_ns" % op] = h.max_ns
    return out


METRIC_NAMES = ["%s_%s_ns" % (op, _key(q)) for op in OPS for q in PERCENTILES] + \
    ["%s_max_ns" % op for op in OPS]
