"""An analytical cross-check for simulated CPUs: a closed queueing network
solved by exact mean-value analysis (MVA).

The model: N customers, one per CPU, each doing allocator operations back
to back. One operation visits

- a delay station (infinite server) for ``think_ns``: the time of one op
  spent outside every lock, on its own CPU, with no one to wait for;
- one FIFO single-server station per lock, ``visits`` times per op (lock
  acquisitions per op), each visit holding the lock for
  S(n) = hold_ns + p_switch(n) * handoff_ns, where the handoff is what the
  lock costs when it moves between CPUs (its cache line and the lines of
  the data it protects) and p_switch(n), the chance that the next holder
  is another CPU than the last, is 1 - 1/n with n CPUs unless given.

Exact MVA (Reiser and Lavenberg, 1980), for n = 1 .. N:

    R_k(n) = V_k * S_k(n) * (1 + Q_k(n - 1))    residence per op at lock k
    X(n)   = n / (Z + sum_k R_k(n))              ops per ns, all CPUs
    Q_k(n) = X(n) * R_k(n)                       CPUs at lock k, on average

and the mean latency of one op at N CPUs is N / X(N) = Z + sum_k R_k(N).
At N = 1 that is Z + sum_k V_k * S_k, the 1-producer measurement the
profile came from. The handoff term depends on n, which makes S_k
load-dependent; the recursion above uses S_k(n) at population n as an
approximation (exact when handoff_ns is 0). The answer is a prediction
from 1-producer counters, not a measurement: it ignores cache-line costs
outside the locks, spinning that slows the holder, and lock budgets.

profile_from_point builds (think_ns, stations) from a measured 1-producer
Point: per op (ops = alloc_ops + free_ops), V = <layer>.<lock>_acquired /
ops, S = <layer>.<lock>_hold_ns / <layer>.<lock>_acquired and
Z = mean op latency - sum V * S, summed over the point's runs. The hold
times exist at stats="full" only, and only for timed locks; a point
without them raises MissingMetricError naming each missing metric.

compare(sim_ns, mva_ns) sets a simulated per-op latency beside this
model's and flags a disagreement of more than DISAGREE_FACTOR either way.
"""

import math
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

from .. import errors
from ..results.result import Point, Result

DISAGREE_FACTOR = 2.0
"""compare() flags a simulated/analytical ratio above this or below its
inverse."""

_ACQUIRED, _HOLD = "_acquired", "_hold_ns"


@dataclass(frozen=True)
class Station:
    """One lock as a queueing station: ``visits`` acquisitions per op,
    ``hold_ns`` per acquisition, ``handoff_ns`` more when the lock moves to
    another CPU; ``p_switch``: the chance of such a move, a number in
    [0, 1] or a function of the CPU count n (None: 1 - 1/n)."""

    name: str
    visits: float
    hold_ns: float
    handoff_ns: float = 0.0
    p_switch: Optional[Union[float, Callable[[int], float]]] = None

    def service_ns(self, n):
        """The mean time one acquisition holds the lock with n CPUs."""
        return self.hold_ns + _p_switch(self, n) * self.handoff_ns


@dataclass(frozen=True)
class MvaResult:
    """The model's answer at ``n`` CPUs: ``per_op_ns`` (the mean latency of
    one op, n / throughput), ``throughput`` (ops per ns, all CPUs),
    ``think_ns``, and per station name ``residence_ns`` (time per op at the
    lock, waits included), ``demand_ns`` (time per op holding it, visits *
    service), ``queue`` (mean CPUs at the lock, holder included) and
    ``utilization`` (the share of time the lock is held)."""

    n: int
    per_op_ns: float
    throughput: float
    think_ns: float
    residence_ns: dict = field(default_factory=dict)
    demand_ns: dict = field(default_factory=dict)
    queue: dict = field(default_factory=dict)
    utilization: dict = field(default_factory=dict)

    @property
    def wait_ns(self):
        """Per station: time per op waiting for the lock (residence less
        demand)."""
        return {k: self.residence_ns[k] - self.demand_ns[k] for k in self.residence_ns}


@dataclass(frozen=True)
class Agreement:
    """compare()'s answer: ``ratio`` = sim_ns / mva_ns, ``flagged`` when it
    is beyond DISAGREE_FACTOR either way, ``text`` one line saying so."""

    sim_ns: float
    mva_ns: float
    ratio: float
    flagged: bool
    text: str


def _p_switch(st, n):
    p = st.p_switch
    if p is None:
        return 1.0 - 1.0 / n
    v = p(n) if callable(p) else p
    v = _number(v, "p_switch of station %r at n=%d" % (st.name, n))
    if not 0.0 <= v <= 1.0:
        raise errors.ParameterRangeError(
            "p_switch of station %r is %r at n=%d; valid: [0, 1]" % (st.name, v, n),
            value=v, min=0.0, max=1.0)
    return v


def _number(v, what):
    """``v`` as a finite float, or ParameterTypeError / ParameterRangeError."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise errors.ParameterTypeError("%s must be a number, not %s" % (
            what, type(v).__name__), value=v)
    f = float(v)
    if not math.isfinite(f):
        raise errors.ParameterRangeError("%s is %r; valid: a finite number" % (what, f),
                                         value=f, min=None, max=None)
    return f


def _non_negative(v, what):
    f = _number(v, what)
    if f < 0:
        raise errors.ParameterRangeError("%s is %r; valid: 0 or more" % (what, f),
                                         value=f, min=0.0, max=None)
    return f


def _count(n, what="n"):
    if isinstance(n, bool) or not isinstance(n, int) and not hasattr(n, "__index__"):
        raise errors.ParameterTypeError("%s must be an integer CPU count, not %s %s" % (
            what, type(n).__name__, errors.shown(n)), value=n)
    n = int(n.__index__())
    if n < 1:
        raise errors.ParameterRangeError("%s is %d; valid: 1 or more CPUs" % (what, n),
                                         value=n, min=1, max=None)
    return n


def _check_stations(stations):
    if isinstance(stations, Station) or not isinstance(stations, (list, tuple)):
        raise errors.ParameterTypeError("stations must be a list of Station, not %s" % (
            type(stations).__name__), value=stations)
    seen = set()
    for i, st in enumerate(stations):
        if not isinstance(st, Station):
            raise errors.ParameterTypeError("stations[%d] must be a Station, not %s" % (
                i, type(st).__name__), value=st)
        if not isinstance(st.name, str) or st.name in seen:
            raise errors.InvalidArgument("stations[%d] has name %s; each station needs a "
                                         "name of its own (names so far: %s)" % (
                                             i, errors.shown(st.name), sorted(seen)),
                                         value=st.name)
        seen.add(st.name)
        for attr in ("visits", "hold_ns", "handoff_ns"):
            _non_negative(getattr(st, attr), "%s of station %r" % (attr, st.name))
        if st.p_switch is not None and not callable(st.p_switch):
            _p_switch(st, 1)
    return list(stations)


def _solve(think_ns, stations, ns):
    """Run the recursion up to max(ns); {n: MvaResult} for each n in ns."""
    z = _non_negative(think_ns, "think_ns")
    stations = _check_stations(stations)
    want = {_count(n) for n in ns}
    queue = [0.0] * len(stations)
    out = {}
    for n in range(1, max(want) + 1):
        demand = [st.visits * st.service_ns(n) for st in stations]
        res = [d * (1.0 + q) for d, q in zip(demand, queue)]
        cycle = z + sum(res)
        if cycle <= 0:
            raise errors.InvalidArgument(
                "an op takes no time in this model (think_ns 0 and no station with visits "
                "and hold time); give think_ns > 0 or a station", value=cycle)
        x = n / cycle
        queue = [x * r for r in res]
        if n in want:
            names = [st.name for st in stations]
            out[n] = MvaResult(
                n=n, per_op_ns=cycle, throughput=x, think_ns=z,
                residence_ns=dict(zip(names, res)), demand_ns=dict(zip(names, demand)),
                queue=dict(zip(names, queue)),
                utilization={k: x * d for k, d in zip(names, demand)})
    return out


def mva(think_ns, stations, n):
    """The model's MvaResult at ``n`` CPUs: ``think_ns`` per op outside the
    locks, ``stations`` a list of Station (the locks)."""
    n = _count(n)
    return _solve(think_ns, stations, [n])[n]


def mva_curve(think_ns, stations, ns):
    """mva() at each CPU count of ``ns``, as a list in the order given (one
    recursion up to the largest)."""
    if isinstance(ns, (str, bytes)) or not hasattr(ns, "__iter__"):
        raise errors.ParameterTypeError("ns must be a list of CPU counts, not %s" % (
            type(ns).__name__), value=ns)
    ns = [_count(n, "ns[%d]" % i) for i, n in enumerate(ns)]
    if not ns:
        raise errors.InvalidArgument("ns is empty; give at least one CPU count", value=ns)
    got = _solve(think_ns, stations, ns)
    return [got[n] for n in ns]


# ---------------------------------------------------------------- from a measurement

def _the_point(point):
    if isinstance(point, Result):
        if len(point.points) != 1:
            raise errors.InvalidArgument(
                "profile_from_point needs one point; the Result has %d (select one with "
                "Result.select or pass result.points[i])" % len(point.points),
                value=len(point.points))
        point = point.points[0]
    if not isinstance(point, Point):
        raise errors.ParameterTypeError("profile_from_point takes a Point (or a Result of "
                                        "one point), not %s" % type(point).__name__,
                                        value=point)
    producers = point.params.get("producers")
    if producers != 1:
        raise errors.ParameterRangeError(
            "profile_from_point needs a 1-producer measurement; this point has producers=%r "
            "(valid: 1)" % (producers,), value=producers, min=1, max=1)
    return point


def _total(point, metric):
    return float(sum(float(v) for v in point.data[metric]))


def _need(point, metrics, why):
    missing = [m for m in metrics if m not in point.data]
    if missing:
        stats = point.params.get("stats", "lite")
        how = ("run with stats='full'" if stats != "full" else
               "at stats='full' these locks are not timed (a layer measures hold time only "
               "for its timed locks)")
        raise errors.MissingMetricError(
            "%s needs %s, which the point lacks (its stats level: %r; %s)" % (
                why, ", ".join(missing), stats, how),
            missing=missing, needed_for=why, value=missing)


def _lock_names(point):
    """The '<layer>.<lock>' of every lock counter in the point."""
    return sorted(m[:-len(_ACQUIRED)] for m in point.data
                  if m.endswith(_ACQUIRED) and "." in m and not m.startswith("wl."))


def profile_from_point(point, handoff_ns=0.0):
    """(think_ns, stations) for mva() from a measured 1-producer Point (or a
    Result of one point) run at stats="full": a Station per lock the point
    acquired, named '<layer>.<lock>', with ``handoff_ns`` each (a
    1-producer run never hands a lock over, so it cannot measure it).
    MissingMetricError names what the point lacks; InvalidArgument when
    the locks' hold time per op exceeds the op's measured latency."""
    point = _the_point(point)
    handoff_ns = _non_negative(handoff_ns, "handoff_ns")
    why = "profile_from_point"
    _need(point, ["alloc_ops", "free_ops", "alloc_ns", "free_ns"], why)
    alloc_ops, free_ops = _total(point, "alloc_ops"), _total(point, "free_ops")
    ops = alloc_ops + free_ops
    if ops <= 0:
        raise errors.InvalidArgument("%s: the point made no operations (alloc_ops + free_ops "
                                     "= 0)" % why, value=ops)
    spent = sum(float(lat) * float(n) for lat_m, n_m in (("alloc_ns", "alloc_ops"),
                                                         ("free_ns", "free_ops"))
                for lat, n in zip(point.data[lat_m], point.data[n_m]) if n)
    locks = [k for k in _lock_names(point) if _total(point, k + _ACQUIRED) > 0]
    _need(point, [k + _HOLD for k in locks], why)
    stations = []
    for k in locks:
        acquired = _total(point, k + _ACQUIRED)
        stations.append(Station(k, visits=acquired / ops,
                                hold_ns=_total(point, k + _HOLD) / acquired,
                                handoff_ns=handoff_ns))
    per_op = spent / ops
    held = sum(st.visits * st.hold_ns for st in stations)
    if held > per_op:
        raise errors.InvalidArgument(
            "%s: the locks are held %.3g ns per op, more than the %.3g ns an op took; the "
            "point's counters and latencies disagree" % (why, held, per_op), value=held)
    return per_op - held, stations


def compare(sim_ns, mva_ns):
    """An Agreement between a simulated per-op latency and the model's:
    flagged when one is more than DISAGREE_FACTOR times the other."""
    sim = _number(sim_ns, "sim_ns")
    ana = _number(mva_ns, "mva_ns")
    for v, what in ((sim, "sim_ns"), (ana, "mva_ns")):
        if v <= 0:
            raise errors.ParameterRangeError("%s is %r; valid: a latency above 0 ns" % (
                what, v), value=v, min=0.0, max=None)
    ratio = sim / ana
    flagged = ratio > DISAGREE_FACTOR or ratio < 1.0 / DISAGREE_FACTOR
    text = "simulated %.4g ns/op, queueing model %.4g ns/op: %.2fx%s" % (
        sim, ana, ratio, " (disagree by more than %gx)" % DISAGREE_FACTOR if flagged else "")
    return Agreement(sim, ana, ratio, flagged, text)
