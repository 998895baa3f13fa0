"""The queueing-model cross-check (alloclab.judge.mva): exact MVA against
numbers worked out by hand, its limits, a profile read from a Point, and
its refusals."""
import math
from fractions import Fraction as F

import numpy as np
import pytest

import alloclab as al
from alloclab import errors
from alloclab.judge import mva as M
from alloclab.results.result import Point


def close(a, b, rel=1e-12):
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-15)


# ---------------------------------------------------------------- the recursion

def test_one_cpu_is_think_plus_demand():
    st = [M.Station("a", visits=0.25, hold_ns=8.0, handoff_ns=100.0),
          M.Station("b", visits=2.0, hold_ns=1.5)]
    r = M.mva(10.0, st, 1)
    # no handoff at one CPU (p_switch(1) = 0), no one to wait for
    assert close(r.per_op_ns, 10.0 + 0.25 * 8.0 + 2.0 * 1.5)
    assert close(r.throughput, 1 / 15.0)
    assert r.wait_ns == {"a": 0.0, "b": 0.0}


@pytest.mark.parametrize("n", [1, 2, 7, 64])
def test_one_lock_and_no_think_time_saturates(n):
    # every CPU is at the lock: an op waits for the n - 1 others, n * S per op
    r = M.mva(0.0, [M.Station("l", visits=1.0, hold_ns=5.0)], n)
    assert close(r.per_op_ns, n * 5.0)
    assert close(r.queue["l"], n)
    assert close(r.utilization["l"], 1.0)


@pytest.mark.parametrize("n", [1, 2, 8, 256])
def test_saturated_lock_with_handoff_and_visits(n):
    r = M.mva(0.0, [M.Station("l", visits=0.5, hold_ns=4.0, handoff_ns=30.0)], n)
    assert close(r.per_op_ns, n * 0.5 * (4.0 + (1 - 1 / n) * 30.0))


def test_textbook_case_by_hand():
    # Z = 3; A: V = 2, S = 1 (D = 2); B: V = 1, S = 3 (D = 3). By hand:
    # n=1: R = (2, 3), cycle 8, X 1/8, Q = (1/4, 3/8)
    # n=2: R = (2*5/4, 3*11/8) = (5/2, 33/8), cycle 77/8, X 16/77,
    #      Q = (40/77, 66/77)
    # n=3: R = (2*117/77, 3*143/77) = (234/77, 429/77), cycle 894/77,
    #      X 231/894, Q = (234/298, 429/298)
    st = [M.Station("A", 2, 1.0), M.Station("B", 1, 3.0)]
    want = {1: (F(8), F(1, 8), (F(1, 4), F(3, 8))),
            2: (F(77, 8), F(16, 77), (F(40, 77), F(66, 77))),
            3: (F(894, 77), F(231, 894), (F(234, 298), F(429, 298)))}
    for r in M.mva_curve(3.0, st, [1, 2, 3]):
        cycle, x, (qa, qb) = want[r.n]
        assert close(r.per_op_ns, cycle) and close(r.throughput, x)
        assert close(r.queue["A"], qa) and close(r.queue["B"], qb)
    r3 = M.mva(3.0, st, 3)
    assert close(r3.residence_ns["A"], F(234, 77)) and close(r3.residence_ns["B"], F(429, 77))
    assert close(r3.wait_ns["B"], F(429, 77) - 3)


def test_littles_law_holds_at_every_n():
    # the CPUs at the locks plus those thinking are all the CPUs
    st = [M.Station("A", 0.1, 40.0, handoff_ns=60.0), M.Station("B", 1.0, 2.0)]
    for r in M.mva_curve(20.0, st, range(1, 40)):
        assert close(sum(r.queue.values()) + r.throughput * r.think_ns, r.n, rel=1e-9)


def test_latency_grows_with_n_and_stays_inside_the_bounds():
    st = [M.Station("A", 0.2, 10.0), M.Station("B", 0.05, 30.0)]
    z = 12.0
    rs = M.mva_curve(z, st, range(1, 65))
    lat = [r.per_op_ns for r in rs]
    assert all(b >= a for a, b in zip(lat, lat[1:]))
    assert lat[-1] > 1.5 * lat[0]
    d = sum(s.visits * s.hold_ns for s in st)
    dmax = max(s.visits * s.hold_ns for s in st)
    for r in rs:  # the asymptotic bounds: no better than alone, nor than the bottleneck
        assert r.per_op_ns >= max(z + d, r.n * dmax) - 1e-9
        assert r.per_op_ns <= z + r.n * d + 1e-9
    tput = [r.throughput for r in rs]
    assert all(b >= a - 1e-15 for a, b in zip(tput, tput[1:]))
    assert tput[-1] <= 1 / dmax + 1e-12


def test_curve_keeps_the_order_given_and_matches_single_points():
    st = [M.Station("A", 0.3, 7.0, handoff_ns=20.0)]
    rs = M.mva_curve(5.0, st, [16, 1, 4, 4])
    assert [r.n for r in rs] == [16, 1, 4, 4]
    for r in rs:
        assert r == M.mva(5.0, st, r.n)


def test_p_switch_given():
    one = M.Station("l", 1.0, 2.0, handoff_ns=10.0, p_switch=1.0)
    assert close(M.mva(0.0, [one], 1).per_op_ns, 12.0)  # a handoff even alone
    fn = M.Station("l", 1.0, 2.0, handoff_ns=10.0, p_switch=lambda n: 0.5 if n > 1 else 0.0)
    assert close(M.mva(0.0, [fn], 4).per_op_ns, 4 * 7.0)


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("n,exc", [(0, errors.ParameterRangeError),
                                   (-3, errors.ParameterRangeError),
                                   (2.0, errors.ParameterTypeError),
                                   (True, errors.ParameterTypeError),
                                   ("4", errors.ParameterTypeError)])
def test_bad_cpu_count(n, exc):
    with pytest.raises(exc) as e:
        M.mva(1.0, [], n)
    assert repr(n) in str(e.value) or str(n) in str(e.value)


def test_bad_stations():
    with pytest.raises(errors.ParameterTypeError, match="list of Station"):
        M.mva(1.0, M.Station("a", 1, 1), 2)
    with pytest.raises(errors.ParameterTypeError, match=r"stations\[1\] must be a Station"):
        M.mva(1.0, [M.Station("a", 1, 1), ("b", 1, 1)], 2)
    with pytest.raises(errors.InvalidArgument, match="'a'.*name of its own"):
        M.mva(1.0, [M.Station("a", 1, 1), M.Station("a", 2, 1)], 2)
    with pytest.raises(errors.ParameterRangeError, match="hold_ns of station 'a' is -1.0"):
        M.mva(1.0, [M.Station("a", 1, -1.0)], 2)
    with pytest.raises(errors.ParameterRangeError, match="finite"):
        M.mva(1.0, [M.Station("a", math.nan, 1.0)], 2)
    with pytest.raises(errors.ParameterRangeError, match=r"p_switch.*1.5.*\[0, 1\]"):
        M.mva(1.0, [M.Station("a", 1, 1, 5.0, p_switch=1.5)], 2)
    with pytest.raises(errors.ParameterRangeError, match="think_ns is -2.0; valid: 0 or more"):
        M.mva(-2.0, [], 1)
    with pytest.raises(errors.InvalidArgument, match="no time"):
        M.mva(0.0, [M.Station("a", 0.0, 5.0)], 3)
    with pytest.raises(errors.InvalidArgument, match="empty"):
        M.mva_curve(1.0, [], [])
    with pytest.raises(errors.ParameterRangeError, match=r"ns\[1\] is 0"):
        M.mva_curve(1.0, [], [1, 0])


# ---------------------------------------------------------------- compare

def test_compare_flags_beyond_two_x_either_way():
    assert not M.compare(100.0, 100.0).flagged
    assert not M.compare(200.0, 100.0).flagged  # exactly 2x is not more than 2x
    assert not M.compare(50.0, 100.0).flagged
    hi, lo = M.compare(201.0, 100.0), M.compare(49.0, 100.0)
    assert hi.flagged and lo.flagged
    assert close(hi.ratio, 2.01) and "disagree" in hi.text
    assert "disagree" not in M.compare(150.0, 100.0).text


@pytest.mark.parametrize("a,b,exc", [(0.0, 1.0, errors.ParameterRangeError),
                                     (1.0, -1.0, errors.ParameterRangeError),
                                     (math.inf, 1.0, errors.ParameterRangeError),
                                     ("1", 1.0, errors.ParameterTypeError)])
def test_compare_refuses_non_latencies(a, b, exc):
    with pytest.raises(exc):
        M.compare(a, b)


# ---------------------------------------------------------------- profile_from_point

def fake_point(producers=1, stats="full", **data):
    base = {"alloc_ops": [1000, 3000], "free_ops": [1000, 3000],
            "alloc_ns": [20.0, 20.0], "free_ns": [30.0, 10.0],
            "buddy.lock_acquired": [100, 300], "buddy.lock_hold_ns": [1000, 3000],
            "buddy.lock_acquired_per_op": [0.05, 0.05],
            "percpu.hits": [900, 2700]}
    base.update(data)
    base = {k: np.array(v) for k, v in base.items() if v is not None}
    return Point({"workload": "malloc-free", "producers": producers, "stats": stats}, {}, base)


def test_profile_from_a_point():
    z, st = M.profile_from_point(fake_point())
    # ops 8000; latency (20*1000 + 30*1000 + 20*3000 + 10*3000) / 8000 = 17.5
    # V = 400 / 8000 = 0.05, S = 4000 / 400 = 10, Z = 17.5 - 0.5 = 17
    assert [s.name for s in st] == ["buddy.lock"]
    assert close(st[0].visits, 0.05) and close(st[0].hold_ns, 10.0)
    assert close(z, 17.0)
    assert close(M.mva(z, st, 1).per_op_ns, 17.5)  # the model reproduces what it read
    _, st = M.profile_from_point(fake_point(), handoff_ns=40.0)
    assert st[0].handoff_ns == 40.0


def test_profile_skips_locks_never_taken():
    z, st = M.profile_from_point(fake_point(**{"transfer.lock_acquired": [0, 0]}))
    assert [s.name for s in st] == ["buddy.lock"]


def test_profile_names_what_is_missing():
    with pytest.raises(errors.MissingMetricError) as e:
        M.profile_from_point(fake_point(stats="lite", **{"buddy.lock_hold_ns": None}))
    assert e.value.missing == ["buddy.lock_hold_ns"]
    assert "buddy.lock_hold_ns" in str(e.value) and "stats='full'" in str(e.value)
    with pytest.raises(errors.MissingMetricError, match="transfer.lock_hold_ns.*not timed"):
        M.profile_from_point(fake_point(**{"transfer.lock_acquired": [5, 5]}))
    with pytest.raises(errors.MissingMetricError, match="free_ns"):
        M.profile_from_point(fake_point(free_ns=None))


def test_profile_refusals():
    with pytest.raises(errors.ParameterRangeError, match="producers=4"):
        M.profile_from_point(fake_point(producers=4))
    with pytest.raises(errors.ParameterTypeError, match="not dict"):
        M.profile_from_point({"alloc_ns": 1})
    with pytest.raises(errors.InvalidArgument, match="more than the"):
        M.profile_from_point(fake_point(**{"buddy.lock_hold_ns": [100000, 300000]}))
    with pytest.raises(errors.InvalidArgument, match="no operations"):
        M.profile_from_point(fake_point(alloc_ops=[0, 0], free_ops=[0, 0]))


def test_profile_from_a_real_run():
    r = al.run("malloc-free", "libarena-spill", runs=1, duration=0.05, stats="full")
    z, st = M.profile_from_point(r)
    assert "buddy.lock" in [s.name for s in st] and z > 0
    p = r.points[0]
    ops = p["alloc_ops"][0] + p["free_ops"][0]
    want = (p["alloc_ns"][0] * p["alloc_ops"][0] + p["free_ns"][0] * p["free_ops"][0]) / ops
    assert close(M.mva(z, st, 1).per_op_ns, want, rel=1e-9)
    assert M.mva(z, st, 8).per_op_ns > want
    lite = al.run("malloc-free", "libarena-spill", runs=1, duration=0.05)
    with pytest.raises(errors.MissingMetricError, match="buddy.lock_hold_ns"):
        M.profile_from_point(lite.points[0])
