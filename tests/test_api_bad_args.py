"""Bad arguments to the Python API: each raises the specific alloclab error
that names the bad value and what is valid, before anything is judged,
freed or lost; NumPy integers are integers everywhere. And a verdict's
reason follows from the numbers it prints: "straddles" only for an
interval that contains the claimed size.

Results are built from pinned per-run data (no timing), as in
test_verdict.py, so the expected verdicts are exact.
"""
import numpy as np
import pytest

import alloclab as al
from alloclab import verdict as V
from alloclab.result import Point, Result


def result(cells, metric="alloc_ns"):
    """A Result from {(policy, producers): values}, the runs of every cell
    taken in interleaved rounds (so each cell is judged paired)."""
    points = []
    for j, ((pol, prod), vals) in enumerate(cells.items()):
        vals = np.asarray(vals, dtype=float)
        n = len(vals)
        info = {"cpu_mode": "pinned", "run_starts": [100.0 * i + j for i in range(n)]}
        data = {metric: vals, "steal_pct": np.zeros(n)}
        points.append(Point({"workload": "malloc-free", "policy": pol, "producers": prod},
                            info, data))
    return Result({}, points)


def two_policies(metric="alloc_ns"):
    """buddy and libc at producers 1 and 2, libc 2x lower."""
    return result({("buddy", 1): [100.0, 101, 99], ("libc", 1): [50.0, 51, 49],
                   ("buddy", 2): [100.0, 101, 99], ("libc", 2): [50.0, 51, 49]}, metric)


# ---------------------------------------------------------------- claim numbers

@pytest.mark.parametrize("kw, match", [
    ({"expect": "same", "margin": -1}, r"margin=-1: a finite number > 0"),
    ({"expect": "same", "margin": 0}, r"margin=0: a finite number > 0"),
    ({"expect": "same", "margin": float("nan")}, r"margin=nan: a finite number > 0"),
    ({"expect": "same", "margin": "5%"}, r"margin='5%': a finite number > 0"),
    ({"within": (None, 1)}, r"within=\(None, 1\): a pair of finite factors \(lo, hi\), "
                            r"0 < lo < hi"),
    ({"within": (0, 1)}, r"within=\(0, 1\): a pair of finite factors"),
    ({"within": (0.9, float("inf"))}, r"within=\(0.9, inf\): a pair of finite factors"),
    ({"within": (0.9,)}, r"within=\(0.9,\): a pair of finite factors"),
    ({"by": float("nan")}, r"by=nan: a finite factor >= 1"),
    ({"by": float("inf")}, r"by=inf: a finite factor >= 1"),
    ({"by": True}, r"by=True: a finite factor >= 1"),
])
def test_claim_numbers_are_checked_when_the_claim_is_made(kw, match):
    res = two_policies()
    with pytest.raises(al.InvalidArgument, match=match):
        al.claim(res, "libc", "buddy", **kw)


@pytest.mark.parametrize("kw, match", [
    ({"expect": "faster", "margin": 0.1},
     r"margin=0.1 bounds a claim of the same \(expect='same'\), not of expect='faster'"),
    ({"expect": "lower", "margin": 0.1},
     r"not of expect='lower': a claim of a direction takes by="),
    ({"expect": "same", "by": 1.5}, r"by=1.5 is the least factor of a claim of a direction"),
    ({"within": (0.9, 1.1), "by": 1.5}, r"by=1.5 is the least factor"),
    ({"within": (0.9, 1.1), "margin": 0.05},
     r"margin=0.05 and within=\(0.9, 1.1\): within= is the range in place of the margin"),
])
def test_a_bound_the_claim_would_not_read_is_refused(kw, match):
    """margin= on a claim of a direction (or by= on one of the same) was
    silently ignored: the verdict read as if it had never been given."""
    with pytest.raises(al.InvalidArgument, match=match):
        al.claim(two_policies(), "libc", "buddy", **kw)


def test_the_bounds_a_claim_reads_are_taken():
    res = two_policies()
    assert al.claim(res, "libc", "buddy", expect="faster", by=1.5).judge().outcome == V.HOLDS
    assert al.claim(res, "libc", "buddy", expect="faster", by=3).judge().outcome != V.HOLDS
    assert al.claim(res, "libc", "libc", expect="same", margin=0.05).judge().outcome == V.HOLDS


def two_metrics():
    """libc 2x lower latency and 2x higher throughput than buddy."""
    res = result({("buddy", 1): [100.0, 101, 99], ("libc", 1): [50.0, 51, 49]})
    for p in res.points:
        p.data["throughput"] = 1e9 / np.asarray(p.data["alloc_ns"])
    return res


def test_metrics_read_two_ways_are_refused_not_misworded():
    """A faster throughput is a higher one: a claim over a latency and a
    rate read the rate with the latency's direction ("2.05x slower")."""
    res = two_metrics()
    assert al.claim(res, "libc", "buddy", metric="throughput").judge().outcome == V.HOLDS
    with pytest.raises(al.InvalidArgument, match=r"alloc_ns and throughput are not read the "
                       r"same way \(a lower alloc_ns reads faster, a lower throughput slower\)"):
        al.claim(res, "libc", "buddy", metric=["alloc_ns", "throughput"])
    with pytest.raises(al.InvalidArgument, match=r"metric=\[\]: a claim names at least one"):
        al.claim(res, "libc", "buddy", metric=[])


@pytest.mark.parametrize("bad", ["no", 0, 0.0, [], "False"])
def test_lower_is_better_is_a_bool(bad):
    with pytest.raises(al.ParameterTypeError, match=r"lower_is_better=.*: True \(lower is "
                       r"better\), False \(higher is\) or None"):
        al.claim(two_metrics(), "libc", "buddy", metric="throughput", lower_is_better=bad)


def test_numpy_false_says_higher_is_better():
    res = two_metrics()
    for flag in (False, np.False_):
        v = al.claim(res, "libc", "buddy", metric="throughput", lower_is_better=flag).judge()
        assert v.outcome == V.HOLDS and "2.00x faster" in v.text(), v.text()


def test_a_claim_built_directly_checks_its_margin_and_range():
    cell = V.Claim.compare("c", "alloc_ns", V.Side([100.0, 101, 99]), V.Side([50.0, 51, 49]))
    with pytest.raises(al.InvalidArgument, match=r"margin=-1: a finite number > 0"):
        V.Claim("x", [cell], "same", margin=-1)
    with pytest.raises(al.InvalidArgument, match=r"within=\(1, None\)"):
        V.Claim("x", [cell], "same", within=(1, None))
    diff = V.Claim.compare("c", "n", V.Side([1.0, 1, 1]), V.Side([2.0, 2, 2]),
                           scale="difference")
    # differences may be negative; lo < hi still holds them
    ok = V.Claim("x", [diff], "same", within=(-0.5, 1.5), absolute=True)
    assert ok.judge().outcome == V.HOLDS
    with pytest.raises(al.InvalidArgument, match=r"within=\(1.5, -0.5\): a pair of finite "
                                                  r"differences \(lo, hi\), lo < hi"):
        V.Claim("x", [diff], "same", within=(1.5, -0.5), absolute=True)


# ---------------------------------------------------------------- claim sides

def test_old_and_a_stated_value_are_one_or_the_other():
    res = two_policies()
    with pytest.raises(al.InvalidArgument, match=r"old=\.\.\. or with value=\.\.\., not both: "
                                                  r"old='buddy' and value=5"):
        al.claim(res, "libc", old="buddy", value=5, value_source="x")
    with pytest.raises(al.InvalidArgument, match=r"value_source='x' says where .* no value="):
        al.claim(res, "libc", old="buddy", value_source="x")
    c = al.claim(res, "libc", value=100.0, value_source="the seed")
    assert "the seed" in c.text and c.judge().outcome == V.HOLDS


@pytest.mark.parametrize("metric", ["alloc_ns", "throughput"])
@pytest.mark.parametrize("value", [-5, 0, 0.0])
def test_a_time_or_a_rate_is_never_stated_as_zero_or_less(metric, value):
    res = two_policies(metric)
    with pytest.raises(al.InvalidArgument, match=r"value=%r: %s is a time or a rate, so a "
                                                  r"stated value must be > 0" % (value, metric)):
        al.claim(res, "libc", value=value, metric=metric, expect="lower")


def test_a_stated_value_is_a_finite_number_and_zero_is_a_count():
    res = two_policies()
    for bad in ("5", float("nan"), [5]):
        with pytest.raises(al.InvalidArgument, match=r"value=.*: a finite number"):
            al.claim(res, "libc", value=bad)
    # NumPy's numbers are numbers
    assert al.claim(res, "libc", value=np.float64(100.0)).judge().outcome == V.HOLDS
    c = al.claim(res, "libc", "buddy", by=np.float64(1.5))
    assert c.by == 1.5 and c.judge().outcome == V.HOLDS
    c = al.claim(res, "libc", "buddy", expect="same", margin=np.float32(0.05))
    assert c.judge().outcome == V.FAILS
    # a count may be stated as zero: judged on the difference from it
    counts = result({("libc", 1): [0.2, 0.3, 0.25]}, metric="buddy.lock_acquired_per_op")
    c = al.claim(counts, "libc", value=0, metric="buddy.lock_acquired_per_op",
                 expect="more")
    assert c.judge().outcome == V.HOLDS and c.cells[0].est.scale == "difference"


def test_a_where_that_matches_nothing_says_so_and_lists_the_values():
    res = two_policies()
    with pytest.raises(al.InvalidArgument) as ei:
        al.claim(res, "libc", "buddy", where={"producers": 7})
    assert str(ei.value) == ("where={'producers': 7} matches no point of the result; "
                             "producers has 1, 2")
    assert not isinstance(ei.value, al.UnknownNameError)
    # the policy exists, but not among the points the filter keeps
    with pytest.raises(al.InvalidArgument) as ei:
        al.claim(res, "libc", "buddy", where={"policy": "buddy"})
    assert str(ei.value) == (
        "no point that where={'policy': 'buddy'} matches has policy=libc (the claim's new "
        "side): policy has buddy there; in the whole result policy has buddy, libc")
    # a policy the result never had is still an unknown name, with the valid ones
    with pytest.raises(al.UnknownNameError, match=r"'nope' in claim \(new\); valid policies: "
                                                   r"buddy, libc"):
        al.claim(res, "nope", "buddy", where={"producers": 1})
    with pytest.raises(al.InvalidArgument, match=r"where=\[1\]: a dict"):
        al.claim(res, "libc", "buddy", where=[1])


# ---------------------------------------------------------------- judge()

@pytest.mark.parametrize("bad", [None, "x", 3, {"a": 1}, [1], ["x"]])
def test_judge_names_what_it_takes(bad):
    with pytest.raises(al.ParameterTypeError, match=r"judge\(\) takes a list of Claims"):
        al.judge(bad)


def test_judge_refuses_one_bare_claim_and_a_bad_alpha():
    c = al.claim(two_policies(), "libc", "buddy")
    with pytest.raises(al.ParameterTypeError, match=r"one claim: claim\.judge\(\)"):
        al.judge(c)
    for alpha in (0, 0.5, -0.1, float("nan"), "0.05"):
        with pytest.raises(al.InvalidArgument, match=r"alpha=.*: a significance level, "
                                                      r"0 < alpha < 0.5"):
            al.judge([c], alpha=alpha)
    assert [v.outcome for v in al.judge((x for x in [c]))] == [V.HOLDS]
    assert c.judge(alpha=np.float64(0.01)).outcome == V.HOLDS


# ---------------------------------------------------------------- verdict reasons

OLD = [100.0] * 5
SPREAD = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])


def by_two(spread):
    """Three cells of a claim "libc at least 2x faster than buddy": at
    producers=1 libc is 1.82x faster with per-pair spread ``spread``; at 2
    and 3 it is about 3x faster (those cells hold)."""
    new = list(np.round(100 / 1.82 * np.exp(SPREAD * spread), 2))
    return {("buddy", 1): OLD, ("libc", 1): new, ("buddy", 2): OLD,
            ("libc", 2): [33.0, 33.0, 33.0, 33.0, 33.5], ("buddy", 3): OLD,
            ("libc", 3): [33.0, 33.2, 33.1, 32.9, 33.0]}


def test_an_interval_below_the_size_is_not_said_to_straddle_it():
    cells = by_two(0.088)
    v = al.claim(result(cells), "libc", "buddy", by=2).judge()
    assert v.outcome == V.OPEN, v
    assert v.reason == (
        "inconclusive: the interval lies below the claimed size in producers=1 (1.82x "
        "faster, 95% CI 1.67x-1.98x faster, p 0.019, p_adj 0.058), but the contradiction is "
        "not significant after Benjamini-Hochberg correction (p_adj >= 0.05)")
    one = v.cells[0]
    lo, hi = (one.est.factor(x) for x in one.interval())
    assert 1 / lo < 2 and 1 / hi < 2  # wholly below 2x faster, as the words say
    assert one.p < 0.05 <= one.p_adj
    # the same cell alone: no other cells in its family, so it is contradicted
    alone = {k: cells[k] for k in [("buddy", 1), ("libc", 1)]}
    assert al.claim(result(alone), "libc", "buddy", by=2).judge().outcome == V.FAILS
    # more spread: the interval now holds 2x, and only then does it straddle it
    v = al.claim(result(by_two(0.12)), "libc", "buddy", by=2).judge()
    assert v.outcome == V.OPEN, v
    assert v.reason == ("inconclusive: noise: the interval straddles the claimed size in "
                        "producers=1 (1.82x faster, 95% CI 1.62x-2.05x faster)")


def test_same_outside_the_margin_but_not_significant_says_so():
    # 1.10x slower, 90% CI wholly above the 2% margin, two-sided p above 0.05
    new = list(np.round(110 * np.exp(SPREAD * 0.08), 1))
    v = al.claim(result({("buddy", 1): OLD, ("libc", 1): new}), "libc", "buddy",
                 expect="same").judge()
    assert v.outcome == V.OPEN, v
    assert v.reason == (
        "inconclusive: the interval lies outside the claimed margin (1.10x "
        "slower, 90% CI 1.04x-1.17x slower, p 0.056, p_adj 0.056), but the contradiction is "
        "not significant (two-sided p >= 0.05)")


def test_a_claim_of_any_change_names_the_wrong_side_it_lies_on():
    # "faster" with no size: at producers=1 libc is 1.05x slower, the interval
    # wholly slower; the two other cells hold, so BH leaves it not significant
    cells = by_two(0.088)
    cells[("libc", 1)] = list(np.round(105 * np.exp(SPREAD * 0.044), 1))
    v = al.claim(result(cells), "libc", "buddy").judge()
    assert v.outcome == V.OPEN, v
    assert v.reason == (
        "inconclusive: the interval lies on the wrong side of the claimed size (slower) in "
        "producers=1 (1.05x slower, 95% CI 1.01x-1.10x slower, p 0.017, p_adj 0.052), but "
        "the contradiction is not significant after Benjamini-Hochberg correction "
        "(p_adj >= 0.05)")


# ---------------------------------------------------------------- Allocator

def test_free_bulk_names_what_it_takes_and_frees_nothing():
    with al.Allocator("buddy") as a:
        x = a.alloc(64)
        for bad in (None, 5, "ab", b"\x00"):
            with pytest.raises(al.ParameterTypeError,
                               match=r"free_bulk takes a list \(or any iterable\) of "
                                     r"addresses \(ints\), not "):
                a.free_bulk(bad)
        with pytest.raises(al.ParameterTypeError, match=r"an address is an int, not 1.5"):
            a.free_bulk([x, 1.5])
        assert a.live() == [x]  # nothing was freed
        assert a.free_bulk(iter([x])) == 1 and a.live() == []


def test_numpy_integers_are_integers_for_the_allocator():
    with al.Allocator("buddy", ncpu=np.int64(2)) as a:
        assert a.ncpu == 2 and type(a.ncpu) is int
        x = a.alloc(np.int64(64), cpu=np.int32(1))
        assert type(x) is int
        xs = a.alloc_bulk(np.uint16(64), np.int64(3), cpu=np.int8(1))
        assert a.usable_size(np.uint64(x)) >= 64 and a.owns(np.uint64(x))
        assert a.free_bulk(np.array(xs, dtype=np.uint64), cpu=np.int64(0)) == len(xs)
        a.free(np.uint64(x), cpu=np.int64(1))
        a.drain(cpu=np.int64(1))
        assert a.live() == []
    for kw, what in (({"ncpu": True}, "ncpu"), ({"ncpu": 2.0}, "ncpu")):
        with pytest.raises(al.ParameterTypeError, match=r"%s must be an int" % what):
            al.Allocator("buddy", **kw)
    with al.Allocator("buddy") as a:
        with pytest.raises(al.ParameterTypeError, match=r"size must be an int .*not True"):
            a.alloc(True)
        with pytest.raises(al.ParameterTypeError, match=r"cpu must be an int .*np.float64"):
            a.alloc(64, cpu=np.float64(0))
        with pytest.raises(al.ParameterTypeError, match=r"n must be an int .*not 2.0"):
            a.alloc_bulk(64, 2.0)
