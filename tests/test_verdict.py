"""The verdict engine: claims over synthetic Results whose truth is known.

The rule: holds when every named cell's 95% interval lies beyond the
claimed size; does not hold when a cell contradicts it significantly after
Benjamini-Hochberg; otherwise inconclusive, with the reason. Each test
builds data where the answer is known and checks the verdict flips with it.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import alloclab as al
from alloclab import verdict as V
from alloclab.result import Point, Result
from alloclab.run import EFFORT

DEFAULT_RUNS = EFFORT["normal"]["runs"]  # what al.run() does when runs is not given


def result(cells, paired=True, cpu_mode="pinned", steal=0.0, metric="alloc_ns"):
    """A Result from {(policy, producers): values}; paired: runs of every
    cell taken in interleaved rounds (per-run start times say so)."""
    points = []
    for j, ((pol, prod), vals) in enumerate(cells.items()):
        vals = np.asarray(vals, dtype=float)
        n = len(vals)
        starts = [100.0 * i + j for i in range(n)] if paired else \
            [1000.0 * j + i for i in range(n)]
        info = {"cpu_mode": cpu_mode, "run_starts": starts}
        data = {metric: vals, "steal_pct": np.full(n, steal)}
        points.append(Point({"workload": "malloc-free", "policy": pol, "producers": prod},
                            info, data))
    return Result({}, points)


def lognormal(rng, mean, cv, n):
    return mean * np.exp(rng.normal(0.0, cv, n))


def ab(rng, factor, cv, n, prods=(1, 2), shared=0.0):
    """old = buddy, new = libc at old * factor; shared: per-round drift (both sides)."""
    cells = {}
    for p in prods:
        drift = np.exp(rng.normal(0.0, shared, n))
        cells[("buddy", p)] = lognormal(rng, 100.0, cv, n) * drift
        cells[("libc", p)] = lognormal(rng, 100.0 * factor, cv, n) * drift
    return cells


def test_a_clear_effect_at_the_default_runs_holds_and_flips_with_the_data():
    rng = np.random.default_rng(1)
    # a 1.3x effect (new is 1.3x faster) at 5% CV with the default runs: holds
    res = result(ab(rng, 1 / 1.3, 0.05, DEFAULT_RUNS))
    v = V.claim(res, "libc", "buddy", expect="faster").judge()
    assert v.outcome == V.HOLDS, v
    assert "faster" in v.evidence() and "slower" not in v.evidence()
    # the same data read the other way round: the claim does not hold
    v = V.claim(res, "buddy", "libc", expect="faster").judge()
    assert v.outcome == V.FAILS, v
    assert "contradicted" in v.evidence()
    # data flipped: new is 1.3x slower
    res = result(ab(rng, 1.3, 0.05, DEFAULT_RUNS))
    assert V.claim(res, "libc", "buddy", expect="faster").judge().outcome == V.FAILS
    assert V.claim(res, "libc", "buddy", expect="slower").judge().outcome == V.HOLDS


def test_a_claimed_size_must_be_beaten_by_the_whole_interval():
    rng = np.random.default_rng(2)
    res = result(ab(rng, 1 / 1.3, 0.01, 8))
    assert V.claim(res, "libc", "buddy", by=1.2).judge().outcome == V.HOLDS
    # 1.3x measured, 1.5x claimed: every cell is significantly below the size
    v = V.claim(res, "libc", "buddy", by=1.5).judge()
    assert v.outcome == V.FAILS, v
    # 1.3x measured, 1.3x claimed: the interval straddles it
    v = V.claim(res, "libc", "buddy", by=1.3).judge()
    assert v.outcome == V.OPEN and "straddles" in v.reason, v


def test_growing_spread_makes_it_inconclusive():
    rng = np.random.default_rng(3)
    outcomes = []
    for cv in (0.02, 0.05, 0.6):
        res = result(ab(rng, 1 / 1.3, cv, DEFAULT_RUNS))
        outcomes.append(V.claim(res, "libc", "buddy").judge().outcome)
    assert outcomes[0] == V.HOLDS and outcomes[-1] == V.OPEN, outcomes


def test_bimodal_runs_are_inconclusive():
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]
    cells = {("buddy", 1): base, ("libc", 1): [60.0, 61.0, 59.5, 140.0, 141.0, 139.0]}
    v = V.claim(result(cells), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "bimodal ratios" in v.reason, v
    v = V.claim(result(cells, paired=False), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "bimodal runs of libc" in v.reason, v
    # the host in two states over the rounds, both sides alike: paired, the ratio is steady
    drift = np.array([1.0, 1.0, 1.5, 1.5, 1.0, 1.5])
    cells = {("buddy", 1): np.array(base) * drift,
             ("libc", 1): np.array([80.0, 80.5, 79.8, 80.2, 80.1, 79.9]) * drift}
    v = V.claim(result(cells), "libc", "buddy").judge()
    assert v.outcome == V.HOLDS, v
    v = V.claim(result(cells, paired=False), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "bimodal" in v.reason, v
    assert V.bimodal([7.5, 7.4, 7.6, 62.8, 47.3]) == (2, 5, pytest.approx(7.3, rel=0.05))
    assert V.bimodal(base) is None
    # two groups 5% apart are not "bimodal": within what a claim's size can see
    assert V.bimodal([100, 100.1, 99.9, 105, 105.1, 104.9]) is None


def test_interleaved_runs_are_paired_and_drift_cancels():
    rng = np.random.default_rng(4)
    # 20% per-round drift hits both sides alike; the effect is 1.10x
    cells = ab(rng, 1 / 1.1, 0.01, 6, prods=(1,), shared=0.2)
    v = V.claim(result(cells, paired=True), "libc", "buddy").judge()
    assert v.outcome == V.HOLDS and "paired t" in v.evidence(), v
    v = V.claim(result(cells, paired=False), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "Welch" in v.evidence(), v


def test_same_is_an_equivalence_test_not_a_missing_difference():
    rng = np.random.default_rng(5)
    tight = result(ab(rng, 1.0, 0.005, 8))
    v = V.claim(tight, "libc", "buddy", expect="same").judge()
    assert v.outcome == V.HOLDS and "90% CI" in v.evidence(), v
    # noisy data with no significant difference: not "the same", inconclusive
    noisy = result(ab(rng, 1.0, 0.3, 4))
    v = V.claim(noisy, "libc", "buddy", expect="same").judge()
    assert v.outcome == V.OPEN, v
    # clearly different: the equivalence claim does not hold
    far = result(ab(rng, 1.2, 0.005, 8))
    assert V.claim(far, "libc", "buddy", expect="same").judge().outcome == V.FAILS
    # a range: new/old within [1.1, 1.3]
    assert V.claim(far, "libc", "buddy", within=(1.1, 1.3)).judge().outcome == V.HOLDS
    assert V.claim(far, "libc", "buddy", within=(1.3, 2.0)).judge().outcome == V.FAILS


def test_latency_on_virtual_cpus_never_decides_counters_may():
    rng = np.random.default_rng(6)
    cells = ab(rng, 1 / 2.0, 0.01, 6, prods=(8,))
    v = V.claim(result(cells, cpu_mode="virtual"), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "virtual CPUs" in v.reason, v
    counted = result(cells, cpu_mode="virtual", metric="buddy.lock_acquired_per_op")
    v = V.claim(counted, "libc", "buddy", metric="buddy.lock_acquired_per_op",
                expect="fewer").judge()
    assert v.outcome == V.HOLDS and v.decided_by() == "counters", v
    assert "fewer" in v.evidence()


def test_too_few_runs_steal_and_truncated_runs_are_named():
    cells = {("buddy", 1): [100.0, 100.5], ("libc", 1): [50.0, 50.2]}
    v = V.claim(result(cells), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "too few runs" in v.reason
    rng = np.random.default_rng(7)
    # every run disturbed by steal time: an unstable machine, nothing left to judge
    v = V.claim(result(ab(rng, 0.5, 0.01, 5), steal=5.0), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "unstable machine" in v.reason and "steal" in v.reason
    # one disturbed pair of six is left out, and the evidence says so
    some = result(ab(rng, 0.5, 0.01, 6))
    for p in some.points:
        p.data["steal_pct"] = np.array([0, 0, 6.0, 0, 0, 0])
        p.data["alloc_ns"][2] *= 3  # what steal does to that run
    v = V.claim(some, "libc", "buddy").judge()
    # one pair in each of the two cells
    assert v.outcome == V.HOLDS and "2 pairs of runs with steal time > 2% left out" in v.text(), v
    assert [c.est.n for c in v.cells] == [5, 5] and [c.est.dropped for c in v.cells] == [1, 1]
    # counts do not depend on steal: nothing is left out
    for p in some.points:
        p.data["buddy.lock_acquired_per_op"] = p.data["alloc_ns"] / 1000
    v = V.claim(some, "libc", "buddy", metric="buddy.lock_acquired_per_op",
                expect="fewer").judge()
    assert [c.est.dropped for c in v.cells] == [0, 0] and "left out" not in v.text()
    cells = {("buddy", 1): [100.0, 101, 99, 100, 100], ("libc", 1): [50.0, 50, math.nan, 51, 49]}
    v = V.claim(result(cells), "libc", "buddy").judge()
    assert v.outcome == V.OPEN and "truncated" in v.reason


def test_counters_with_zeros_are_judged_on_differences():
    cells = {("buddy", 1): [0.094, 0.094, 0.094], ("libc", 1): [0.0, 0.0, 0.0]}
    res = result(cells, metric="buddy.lock_acquired_per_op")
    v = V.claim(res, "libc", "buddy", metric="buddy.lock_acquired_per_op",
                expect="fewer").judge()
    assert v.outcome == V.HOLDS and "none left" in v.evidence(), v
    assert v.cells[0].est.scale == "difference"
    v = V.claim(res, "buddy", "libc", metric="buddy.lock_acquired_per_op",
                expect="fewer").judge()
    assert v.outcome == V.FAILS


def test_a_stated_value_is_a_one_sample_claim_and_says_where_it_comes_from():
    res = result({("kzalloc", 1): [2.0, 2.0, 2.0]}, metric="slab.traced_per_create")
    v = V.claim(res, "kzalloc", value=3.02, value_source="the seed: 4.15 - 1.13",
                metric="slab.traced_per_create", expect="same", margin=0.05,
                lower_is_better=True).judge()
    assert v.outcome == V.FAILS and "the seed: 4.15 - 1.13" in v.claim.text, v
    v = V.claim(res, "kzalloc", value=2.0, metric="slab.traced_per_create", expect="same",
                lower_is_better=True).judge()
    assert v.outcome == V.HOLDS


def test_benjamini_hochberg_across_claims_judged_together():
    # one weak contradiction: alone it is significant, among many null cells it is not
    rng = np.random.default_rng(8)
    weak = {("buddy", 1): [100.0, 100.4, 99.6, 100.2, 99.8],
            ("libc", 1): [100.9, 101.4, 100.5, 101.1, 100.8]}
    c = V.claim(result(weak), "libc", "buddy", expect="faster")
    alone = c.judge()
    assert alone.outcome == V.FAILS and alone.cells[0].p < 0.05
    nulls = [V.claim(result(ab(rng, 1 / 1.5, 0.2, 3, prods=(1, 2, 3, 4))), "libc", "buddy")
             for _ in range(20)]
    together = V.judge([c] + nulls)
    assert together[0].cells[0].p_adj >= together[0].cells[0].p


def test_contrast_cells():
    rng = np.random.default_rng(9)
    big = V.Claim.compare("big", "alloc_ns", V.Side(lognormal(rng, 100, 0.01, 6)),
                          V.Side(lognormal(rng, 40, 0.01, 6)))
    small = V.Claim.compare("small", "alloc_ns", V.Side(lognormal(rng, 100, 0.01, 6)),
                            V.Side(lognormal(rng, 90, 0.01, 6)))
    # "the gain is larger at big sizes": big's log-ratio is lower than small's
    c = V.Claim("gains most at big sizes", [V.Claim.contrast("big - small", big, small)],
                "lower", words=("faster", "slower"))
    assert c.judge().outcome == V.HOLDS
    c = V.Claim("gains most at small sizes", [V.Claim.contrast("small - big", small, big)],
                "lower", words=("faster", "slower"))
    assert c.judge().outcome == V.FAILS


def test_bad_claims_raise_naming_the_bad_value():
    res = result({("buddy", 1): [1.0, 1, 1], ("libc", 1): [1.0, 1, 1]})
    with pytest.raises(al.UnknownNameError, match="nope"):
        V.claim(res, "nope", "buddy")
    with pytest.raises(al.UnknownNameError, match="quicker"):
        V.claim(res, "libc", "buddy", expect="quicker")
    with pytest.raises(al.UnknownNameError, match="free_nz"):
        V.claim(res, "libc", "buddy", metric="free_nz")
    with pytest.raises(al.InvalidArgument, match="within"):
        V.claim(res, "libc", "buddy", within=(2, 1))
    with pytest.raises(al.InvalidArgument, match="by=0.5"):
        V.claim(res, "libc", "buddy", by=0.5)
    with pytest.raises(al.UnknownNameError, match="'log'.*auto, ratio, difference"):
        V.claim(res, "libc", "buddy", scale="log")


def _consistent(v):
    """The verdict's words follow its numbers."""
    c = v.claim
    text = v.text()
    lo_w, hi_w = c.words
    for cell in c.cells:
        f = cell.est.factor(cell.est.theta)
        lo, hi = (cell.est.factor(x) for x in cell.interval())
        if v.outcome == V.HOLDS and c.expect == "lower":
            assert hi < 1.0 / (c.by or 1.0)
        if v.outcome == V.HOLDS and c.expect == "higher":
            assert lo > (c.by or 1.0)
        if v.outcome == V.FAILS:
            assert any(x.p_adj < v.alpha for x in c.cells)
    fs = [x.est.factor(x.est.theta) for x in c.cells]
    if all(f < 0.995 for f in fs):
        assert text.split(": ", 1)[1].split(";")[0].endswith(lo_w) or lo_w in text
    if v.outcome == V.HOLDS:
        assert "does not" not in text and "inconclusive" not in text
    if v.outcome == V.OPEN:
        assert text.startswith("[inconclusive]") and v.reason.startswith("inconclusive")


@settings(max_examples=200, deadline=None)
@given(factor=st.floats(0.3, 3.0), cv=st.floats(0.001, 0.5), n=st.integers(2, 8),
       expect=st.sampled_from(["faster", "slower", "same"]), seed=st.integers(0, 2 ** 31))
def test_no_verdict_text_contradicts_its_numbers(factor, cv, n, expect, seed):
    rng = np.random.default_rng(seed)
    v = V.claim(result(ab(rng, factor, cv, n)), "libc", "buddy", expect=expect).judge()
    _consistent(v)
    d = v.to_dict()
    assert d["outcome"] == v.outcome and len(d["cells"]) == 2


def test_factor_words():
    assert V.factor_words(0.5, ("faster", "slower")) == "2.00x faster"
    assert V.factor_words(1.5, ("faster", "slower")) == "1.50x slower"
    assert V.factor_words(1.001) == "the same (1.00x)"
    assert V.describe_range(0.5, 0.8, ("faster", "slower")) == "1.25x-2.00x faster"
    assert V.describe_range(0.9, 1.2, ("faster", "slower")) == "1.11x faster to 1.20x slower"
    assert V.describe_range(1.2, 1.5, ("fewer", "more")) == "1.20x-1.50x more"


def test_absolute_claims_on_counts_near_zero():
    cells = {("bpf-ma", 1): [0.03, 0.031, 0.029, 0.03], ("kmalloc-nolock", 1): [0.0] * 4}
    res = result(cells, metric="traced_per_create")
    a = V.Side.from_points(res.select(policy="kmalloc-nolock"), "traced_per_create")
    b = V.Side.from_points(res.select(policy="bpf-ma"), "traced_per_create")
    cell = V.Claim.compare("batch 16", "traced_per_create", a, b, scale="difference")
    near = V.Claim("about as many", [cell], "same", margin=0.1, absolute=True,
                   unit="per create")
    assert near.judge().outcome == V.HOLDS and "per create" in near.judge().text()
    far = V.Claim("3 more", [cell], "same", within=(2.9, 3.1), absolute=True)
    assert far.judge().outcome == V.FAILS
    with pytest.raises(al.InvalidArgument, match="scale='difference'"):
        V.Claim("x", [V.Claim.compare("c", "m", V.Side([1.0, 1, 1]), V.Side([2.0, 2, 2]),
                                      scale="ratio")], "same", absolute=True)


def test_verdict_texts_are_whole_sentences():
    """The evidence ended in "...; paired t" (the test's name cut at " on "),
    and a claim over one unnamed cell read "straddles the claimed size in
    all (...)"."""
    rng = np.random.default_rng(4)
    cells = ab(rng, 1 / 1.1, 0.01, 6, prods=(1,), shared=0.2)
    v = V.claim(result(cells, paired=True), "libc", "buddy").judge()
    assert "paired t-test on the log-ratios" in v.evidence(), v
    v = V.claim(result(cells, paired=False), "libc", "buddy").judge()
    assert "Welch's t-test on log values" in v.evidence(), v
    # noise: a 1.01x effect at 20% CV with one cell, no parameter naming it
    cells = ab(rng, 1 / 1.01, 0.2, 6, prods=(1,))
    v = V.claim(result(cells, paired=True), "libc", "buddy", by=1.02).judge()
    assert v.outcome == V.OPEN and "straddles the claimed size" in v.reason, v
    assert " in all" not in v.reason and "size (" in v.reason, v.reason
    for part in v.evidence().split("; "):
        assert not part.endswith((" t", " in all")), v.evidence()
    assert V._test_words("Welch t on values (3/4 runs)") == "Welch's t-test on values"
    assert V._test_words("one-sample t against the stated value") == \
        "one-sample t-test against the stated value"
    assert V._test_words("contrast of paired t on 5 differences") == \
        "contrast of paired t-test on the differences"
