"""alloclab.stats against SciPy (a test-only dependency): distributions,
describe(), Welch, Mann-Whitney (exact and asymptotic), Benjamini-Hochberg,
the instability warnings, and tables that show CIs and warnings."""

import math

import numpy as np
import pytest

import alloclab as al
from alloclab import stats as st

scipy_stats = pytest.importorskip("scipy.stats")
scipy_special = pytest.importorskip("scipy.special")


@pytest.mark.parametrize("a, b", [(0.5, 0.5), (1, 1), (2, 3), (0.5, 10), (10, 0.5),
                                  (50, 70), (200, 0.5)])
def test_betainc_matches_scipy(a, b):
    for x in np.linspace(0, 1, 41):
        assert st.betainc(a, b, x) == pytest.approx(scipy_special.betainc(a, b, x), abs=1e-13,
                                                    rel=1e-11)


def test_betainc_rejects_bad_shape():
    with pytest.raises(ValueError, match="a > 0"):
        st.betainc(0, 1, 0.5)


@pytest.mark.parametrize("df", [1, 1.5, 2, 3, 4.7, 9, 30, 120, 5000])
def test_t_distribution_matches_scipy(df):
    for t in [-300, -12.7, -3, -1, -0.2, 0, 0.1, 0.7, 2.1, 4.3, 9, 60]:
        assert st.t_cdf(t, df) == pytest.approx(scipy_stats.t.cdf(t, df), rel=1e-10,
                                                abs=1e-300)
        assert st.t_sf(t, df) == pytest.approx(scipy_stats.t.sf(t, df), rel=1e-10,
                                               abs=1e-300)
    for p in [0.001, 0.025, 0.05, 0.5, 0.9, 0.975, 0.995, 0.9995]:
        assert st.t_ppf(p, df) == pytest.approx(scipy_stats.t.ppf(p, df), rel=1e-9, abs=1e-12)


def test_t_edges():
    assert math.isnan(st.t_sf(math.nan, 3)) and math.isnan(st.t_sf(1.0, 0))
    assert st.t_sf(math.inf, 3) == 0.0 and st.t_sf(-math.inf, 3) == 1.0
    with pytest.raises(ValueError):
        st.t_ppf(1.0, 3)


def test_normal_matches_scipy():
    for z in [-8, -2, -0.5, 0, 0.3, 1.96, 5]:
        assert st.norm_cdf(z) == pytest.approx(scipy_stats.norm.cdf(z), rel=1e-12)
        assert st.norm_sf(z) == pytest.approx(scipy_stats.norm.sf(z), rel=1e-12)
    for p in [1e-6, 0.025, 0.5, 0.975, 0.999999]:
        assert st.norm_ppf(p) == pytest.approx(scipy_stats.norm.ppf(p), rel=1e-12)


@pytest.mark.parametrize("values", [[1.0, 2.0, 3.0, 4.5], [100.0, 101.0, 99.5, 100.2, 100.1],
                                    [5.0, 5.0], list(np.linspace(1, 50, 31))])
def test_describe_matches_scipy(values):
    s = st.describe(values)
    x = np.asarray(values)
    assert s.n == len(x)
    assert s.mean == pytest.approx(np.mean(x))
    assert s.sd == pytest.approx(np.std(x, ddof=1))
    assert s.median == pytest.approx(np.median(x))
    assert (s.min, s.max) == (x.min(), x.max())
    if s.sd > 0:
        lo, hi = scipy_stats.t.interval(0.95, len(x) - 1, loc=np.mean(x),
                                        scale=scipy_stats.sem(x))
        assert s.ci == (pytest.approx(lo), pytest.approx(hi))
        assert s.ci_half == pytest.approx((hi - lo) / 2)
        assert s.cv == pytest.approx(np.std(x, ddof=1) / np.mean(x))
    else:
        assert s.ci == (5.0, 5.0) and s.cv == 0.0


def test_describe_other_confidence_and_nans():
    s = st.describe([1.0, np.nan, 2.0, 4.0], confidence=0.99)
    assert s.n == 3
    lo, hi = scipy_stats.t.interval(0.99, 2, loc=np.mean([1, 2, 4]),
                                    scale=scipy_stats.sem([1, 2, 4]))
    assert s.ci == (pytest.approx(lo), pytest.approx(hi))


def test_warnings():
    stable = st.describe([100.0, 101.0, 99.0, 100.5, 100.2], steal=[0, 0.1, 0, 0, 0.5])
    assert stable.warnings == [] and stable.stable
    one = st.describe([3.0])
    assert math.isnan(one.sd) and math.isnan(one.ci[0])
    assert [w.kind for w in one.warnings] == ["runs"]
    assert "1 run" in one.warnings[0].message
    two = st.describe([3.0, 3.1])
    assert [w.kind for w in two.warnings] == ["runs"] and "2 runs" in two.warnings[0].message
    noisy = st.describe([100.0, 150.0, 70.0, 120.0])
    assert [w.kind for w in noisy.warnings] == ["cv"]
    assert "CV" in noisy.warnings[0].message
    stolen = st.describe([100.0, 100.0, 100.0], steal=[0.0, 7.5, 0.0])
    assert [w.kind for w in stolen.warnings] == ["steal"] and "7.5%" in stolen.warnings[0].message
    assert stolen.steal_max == 7.5
    # thresholds are parameters
    assert st.describe([100.0, 150.0, 70.0, 120.0], cv_warn=0.5).warnings == []
    empty = st.describe([])
    assert empty.n == 0 and math.isnan(empty.mean)


def _samples(rng, kind):
    n1, n2 = rng.integers(2, 16, 2)
    a = rng.normal(10, 1, n1)
    b = rng.normal(10 + rng.normal(0, 1), rng.uniform(0.3, 3), n2)
    if kind == "ties":
        a, b = np.round(a), np.round(b)
    return a, b


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # SciPy on nearly equal samples
@pytest.mark.parametrize("kind", ["continuous", "ties"])
def test_welch_matches_scipy(kind):
    rng = np.random.default_rng(7)
    for _ in range(150):
        a, b = _samples(rng, kind)
        if np.var(a) == 0 and np.var(b) == 0:
            continue
        got = st.welch(a, b)
        ref = scipy_stats.ttest_ind(a, b, equal_var=False)
        assert got.statistic == pytest.approx(ref.statistic, rel=1e-10)
        assert got.pvalue == pytest.approx(ref.pvalue, rel=1e-8, abs=1e-14)


def test_welch_degenerate():
    assert st.welch([1.0, 1.0, 1.0], [1.0, 1.0]).pvalue == 1.0  # identical counters
    assert st.welch([1.0, 1.0, 1.0], [2.0, 2.0]).pvalue == 0.0  # deterministic difference
    assert math.isnan(st.welch([1.0], [2.0, 3.0]).pvalue)  # one run: no test


@pytest.mark.parametrize("kind", ["continuous", "ties"])
def test_mannwhitney_matches_scipy(kind):
    rng = np.random.default_rng(11)
    for _ in range(150):
        a, b = _samples(rng, kind)
        got = st.mannwhitney(a, b)
        ref = scipy_stats.mannwhitneyu(a, b)
        assert got.statistic == ref.statistic
        assert got.pvalue == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)


def test_mannwhitney_large_and_exact_boundary():
    rng = np.random.default_rng(3)
    for n1, n2 in [(8, 40), (9, 9), (30, 25), (6, 6)]:
        a, b = rng.normal(0, 1, n1), rng.normal(0.8, 1, n2)
        ref = scipy_stats.mannwhitneyu(a, b)
        assert st.mannwhitney(a, b).pvalue == pytest.approx(ref.pvalue, rel=1e-9)
    assert st.mannwhitney([1.0] * 6, [1.0] * 6).pvalue == 1.0


def test_bh_matches_scipy():
    rng = np.random.default_rng(5)
    for m in (1, 2, 7, 40):
        p = rng.uniform(0, 0.2, m)
        assert np.allclose(st.bh_adjust(p), scipy_stats.false_discovery_control(p))
    p = np.array([0.01, np.nan, 0.04, 0.03])
    adj = st.bh_adjust(p)
    assert np.isnan(adj[1])
    assert np.allclose(adj[[0, 2, 3]], scipy_stats.false_discovery_control([0.01, 0.04, 0.03]))
    assert np.isnan(st.bh_adjust([np.nan])).all()


def test_choose_test():
    assert st.choose_test("auto", 6, 6) == "mannwhitney"
    assert st.choose_test("auto", 6, 5) == "welch"
    assert st.choose_test("welch", 10, 10) == "welch"


def _result(values_by_point, steal=None):
    pts = []
    for i, (params, vals) in enumerate(values_by_point):
        data = {"alloc_ns": np.asarray(vals, dtype=float),
                "steal_pct": np.asarray(steal[i] if steal else [0.0] * len(vals))}
        pts.append(al.Point(dict(params, workload="malloc-free"), {"cpu_mode": "pinned"}, data))
    return al.Result({}, pts)


def test_table_ci_and_warnings():
    r = _result([({"policy": "a", "producers": 1}, [100, 101, 99, 100]),
                 ({"policy": "a", "producers": 2}, [100, 160, 60, 120]),
                 ({"policy": "b", "producers": 1}, [50.0, 50.5, 49.5, 50.0]),
                 ({"policy": "b", "producers": 2}, [50.0, 50.5, 49.5, 50.0])],
                steal=[[0] * 4, [0] * 4, [0, 0, 9.0, 0], [0] * 4])
    t = r.table("alloc_ns", rows="policy", cols="producers")
    s = st.describe([100, 101, 99, 100])
    assert t.ci_cube[0, 0, 0] == pytest.approx(s.ci_half)
    text = t.to_text(ci=True)
    assert "95% CI" in text.splitlines()[0]
    assert "±%s" % al.result.fmt_value(s.ci_half) in text
    assert "warnings:" in text
    w = "\n".join(t.warning_lines())
    assert "CV > 10%" in w and "a, 2p" in w
    assert "steal time" in w and "b, 1p (9.0%)" in w
    assert [lab for lab, _ in t.warnings] == ["a, 2p", "b, 1p"]
    assert "warnings:" not in t.to_text(warnings=False)
    # one run per cell: one line for the whole table
    one = _result([({"policy": "a", "producers": p}, [1.0]) for p in (1, 2, 4)])
    lines = one.table("alloc_ns").warning_lines()
    assert lines == ["1 run (< 3): no spread, no confidence interval: every cell"]


def test_result_stats_pools_equal_points():
    r = _result([({"policy": "a", "producers": 1}, [1.0, 2.0]),
                 ({"policy": "a", "producers": 1}, [3.0]),
                 ({"policy": "b", "producers": 1}, [5.0, 6.0])])
    out = r.stats("alloc_ns")
    assert len(out) == 2
    params, s = out[0]
    assert params["policy"] == "a" and s.n == 3 and s.mean == 2.0
    assert [s.n for _, s in r.stats("alloc_ns", policy="b")] == [2]


def test_short_phase_warning():
    from alloclab import stats
    st = stats.describe([1.0, 1.01, 0.99], phase=[0.2, 0.05, 0.3])
    assert [w.kind for w in st.warnings] == ["short"] and "50 ms (< 100 ms)" in \
        st.warnings[0].message
    assert stats.describe([1.0, 1.01, 0.99], phase=[0.1, 0.2, 0.3]).warnings == []
    lines = stats.warning_lines([("a", st), ("b", stats.describe([1.0, 1.0, 1.0],
                                                                  phase=[0.2] * 3))])
    assert any("shorter than 100 ms" in l and "the shortest 50 ms" in l and ": a" in l
               for l in lines)


def test_tables_flag_short_phases():
    import alloclab as al
    res = al.run("malloc-free", "buddy", runs=3, duration=0.01, warmup_cycles=1)
    assert "measured phases shorter than 100 ms" in res.table("alloc_ns").to_text()


def test_paired_change_pct():
    # old / new - 1 from the geometric mean of the pairs' ratios, with a t
    # interval on the log-ratios.
    assert st.paired_change_pct([2, 2, 2], [1, 1, 1]) == pytest.approx((100, 100, 100))
    change, lo, hi = st.paired_change_pct([1.0, 1.0, 1.0, 1.0], [1.1, 0.9, 1.2, 0.8])
    lr = np.log(np.array([1 / 1.1, 1 / 0.9, 1 / 1.2, 1 / 0.8]))
    half = st.t_ppf(0.975, 3) * lr.std(ddof=1) / 2
    assert (change, lo, hi) == pytest.approx(tuple(
        100 * (np.exp(x) - 1) for x in (lr.mean(), lr.mean() - half, lr.mean() + half)))
    assert lo < 0 < hi  # no pair agrees: the interval spans no change
    one = st.paired_change_pct([3.0], [2.0])
    assert one[0] == pytest.approx(50) and math.isnan(one[1]) and math.isnan(one[2])
