"""compare() on synthetic Results with known answers: a clear difference is
marked, identical distributions are not, the threshold and the
Benjamini-Hochberg correction hold marks back, the change is normalised so
that positive is better, and the seed-004 layout, Markdown and HTML."""

import math

import numpy as np
import pytest

import alloclab as al
from alloclab import stats as st
from alloclab.compare import change


def point(policy, producers, alloc, tput=None, **extra):
    data = {"alloc_ns": np.asarray(alloc, dtype=float),
            "steal_pct": np.zeros(len(alloc))}
    if tput is not None:
        data["throughput"] = np.asarray(tput, dtype=float)
    params = {"workload": "malloc-free", "policy": policy, "producers": producers}
    params.update(extra)
    return al.Point(params, {"cpu_mode": "pinned"}, data)


def result(*points):
    return al.Result({"cpu_model": "synthetic"}, list(points))


RNG = np.random.default_rng(2024)


def noisy(mean, n=5, sd=1.0):
    return mean + RNG.normal(0, sd, n)


def test_change_formula():
    # lower is better: old/new - 1, the formula seed 004's +514.75% fits
    assert change(6.1475, 1.0, True) == pytest.approx(5.1475)
    assert change(100.0, 200.0, True) == pytest.approx(-0.5)
    # higher is better: new/old - 1
    assert change(100.0, 150.0, False) == pytest.approx(0.5)
    assert math.isinf(change(1.0, 0.0, True)) and math.isnan(change(0.0, 0.0, True))


def test_clear_differences_are_marked():
    old = result(point("A", 1, noisy(100)), point("A", 2, noisy(100)), point("A", 4, noisy(100)))
    new = result(point("B", 1, noisy(50)), point("B", 2, noisy(200)), point("B", 4, noisy(100)))
    cmp = al.compare(old, new)
    assert cmp.columns == ["B"] and cmp.base_name == "A"
    assert cmp.key == ["workload", "producers"] and cmp.differ == ["policy"]
    c1, c2, c4 = (cmp.cell(producers=p) for p in (1, 2, 4))
    assert c1.mark == "I" and c1.change == pytest.approx(c1.old.mean / c1.new.mean - 1)
    assert c1.change_pct > 90
    assert c2.mark == "R" and c2.change < -0.4
    assert c4.mark == ""  # same distribution
    assert {c.test for c in cmp.cells} == {"welch"}  # 5 runs a side
    assert cmp.improvements == [c1] and cmp.regressions == [c2]
    assert c1.text().startswith("(I) ") and c2.text().startswith("(R) -")


def test_identical_distributions_are_not_marked():
    rng = np.random.default_rng(99)
    a = [point("A", p, 100 + rng.normal(0, 5, 6)) for p in range(1, 21)]
    b = [point("B", p, 100 + rng.normal(0, 5, 6)) for p in range(1, 21)]
    cmp = al.compare(result(*a), result(*b))
    assert len(cmp.cells) == 20
    assert {c.test for c in cmp.cells} == {"mannwhitney"}  # >= 6 runs a side
    assert not any(c.mark for c in cmp.cells)
    # unadjusted, one of 20 null cells may well look significant: BH keeps it unmarked
    assert all(c.p_adj >= c.p for c in cmp.cells)


def test_threshold_and_bh():
    # 1% faster with a tiny spread: significant, but below the 2% threshold
    old = result(point("A", 1, [100.0, 100.01, 99.99, 100.0, 100.02]))
    new = result(point("B", 1, [99.0, 99.01, 98.99, 99.0, 99.02]))
    c = al.compare(old, new).cell(producers=1)
    assert c.p_adj < 1e-6 and abs(c.change) < 0.02 and c.mark == ""
    assert al.compare(old, new, threshold=0.005).cell(producers=1).mark == "I"
    # the adjusted p-values are BH over every cell of the table
    olds = [point("A", p, noisy(100, 4, 3)) for p in range(1, 9)]
    news = [point("B", p, noisy(100 + 3 * p, 4, 3)) for p in range(1, 9)]
    cmp = al.compare(result(*olds), result(*news))
    ps = [c.p for c in cmp.cells]
    assert [c.p_adj for c in cmp.cells] == pytest.approx(list(st.bh_adjust(ps)))
    for c in cmp.cells:
        assert (c.mark != "") == (c.p_adj < 0.05 and abs(c.change) >= 0.02)


def test_higher_is_better_and_explicit_tests():
    old = result(point("A", 1, noisy(100), tput=noisy(1000, sd=5)))
    new = result(point("B", 1, noisy(100), tput=noisy(1500, sd=5)))
    cmp = al.compare(old, new, metric=["alloc_ns", "throughput"], test="mannwhitney")
    t = cmp.cell(metric="throughput")
    assert t.change == pytest.approx(t.new.mean / t.old.mean - 1) and t.change > 0.4
    assert t.test == "mannwhitney" and t.mark == "I"  # exact MWU, 5 v 5, all above: p=0.0079
    assert t.p == pytest.approx(2 / math.comb(10, 5))
    assert al.compare(old, new, metric="throughput", test="welch").cell().test == "welch"


def test_seed004_layout_text_and_markdown():
    old = result(point("v6.18", 1, noisy(100)), point("v6.18", 16, noisy(100, sd=0.01)))
    new1 = result(point("rc1", 1, noisy(160)), point("rc1", 16, noisy(100)))
    new2 = result(point("fix", 1, noisy(96)), point("fix", 16, noisy(20, sd=0.01)))
    cmp = al.compare(old, [new1, new2])
    assert cmp.columns == ["rc1", "fix"]
    text = cmp.to_text()
    lines = text.splitlines()
    assert lines[0].startswith("+---") and lines[2].startswith("+===")
    assert lines[1].split("|")[1].strip() == "Benchmark"
    assert [x.strip() for x in lines[1].split("|")[2:5]] == ["Result Class", "rc1", "fix"]
    row1 = [x.strip() for x in lines[3].split("|")[1:-1]]
    assert row1[0] == "malloc-free" and row1[1] == "alloc_ns: p:1 (ns)"
    assert row1[2].startswith("(R) -") and row1[3].startswith("(I) ")
    row2 = [x.strip() for x in lines[4].split("|")[1:-1]]
    assert row2[0] == "" and row2[1] == "alloc_ns: p:16 (ns)"  # benchmark printed once
    assert row2[3].startswith("(I) 39") or row2[3].startswith("(I) 40")  # 100/20 - 1
    assert lines[5].startswith("+---")
    assert "Benjamini-Hochberg" in lines[6]
    assert "normalised" in text and "v6.18" in text
    md = cmp.to_markdown().splitlines()
    assert md[0] == "| Benchmark | Result Class | rc1 | fix |"
    assert md[1] == "|---|---|---:|---:|"
    assert md[2].startswith("| malloc-free | alloc_ns: p:1 (ns) | **(R) -")
    html = cmp._repr_html_()
    assert "<table>" in html and "background-color:#" in html and "<b>(I)" in html
    rows = cmp.rows()
    assert len(rows) == 4 and {"change_pct", "p", "p_adj", "mark", "producers"} <= set(rows[0])


def test_baseline_inside_one_result():
    res = result(point("buddy", 1, noisy(100)), point("buddy", 2, noisy(200)),
                 point("libc", 1, noisy(50)), point("libc", 2, noisy(100)),
                 point("percpu > buddy", 1, noisy(100)), point("percpu > buddy", 2, noisy(100)))
    cmp = al.compare(res, baseline="buddy")
    assert cmp.columns == ["libc", "percpu > buddy"] and cmp.base_name == "buddy"
    assert len(cmp.cells) == 4
    assert cmp.cell("libc", producers=1).mark == "I"
    assert cmp.cell("percpu > buddy", producers=2).mark == "I"
    assert cmp.cell("percpu > buddy", producers=1).mark == ""
    # presets and specs name the baseline canonically
    real = al.Result({}, [point(str(al.Policy(al.presets["libarena-spill"])), 1, noisy(10)),
                          point("buddy", 1, noisy(20))])
    assert al.compare(real, baseline="libarena-spill").columns == ["buddy"]
    with pytest.raises(al.UnknownNameError, match="nosuch"):
        al.compare(res, baseline="nosuch")
    with pytest.raises(al.InvalidArgument, match="one Result"):
        al.compare(res, res, baseline="buddy")


def test_matching_on_and_errors():
    old = result(point("A", 1, noisy(100), size=64), point("A", 2, noisy(100), size=64))
    new = result(point("B", 1, noisy(100), size=128), point("B", 2, noisy(100), size=128))
    cmp = al.compare(old, new)  # policy and size differ wholesale: matched on producers
    assert cmp.key == ["workload", "producers"] and set(cmp.differ) == {"policy", "size"}
    assert "differ in: policy, size" in cmp.to_text()
    with pytest.raises(al.InvalidArgument, match="no cells match"):
        al.compare(old, new, on=["size"])
    with pytest.raises(al.UnknownNameError, match="nope"):
        al.compare(old, new, on=["nope"])
    with pytest.raises(al.UnknownNameError, match="ttest"):
        al.compare(old, new, test="ttest")
    with pytest.raises(al.ParameterRangeError, match="threshold"):
        al.compare(old, new, threshold=-1)
    with pytest.raises(al.ParameterRangeError, match="alpha"):
        al.compare(old, new, alpha=1.5)
    with pytest.raises(al.UnknownNameError, match="free_ns"):
        al.compare(old, new, metric="free_ns")
    with pytest.raises(al.InvalidArgument, match="second Result"):
        al.compare(old)
    # partial overlap: unmatched cells are counted and left out
    more = result(point("B", 1, noisy(100)), point("B", 8, noisy(100)))
    cmp = al.compare(result(point("A", 1, noisy(100)), point("A", 2, noisy(100))), more)
    assert len(cmp.cells) == 1 and cmp.unmatched == 2 and "left out" in cmp.to_text()


def test_unknown_direction_needs_to_be_said():
    def pt(pol, v):
        p = point(pol, 1, noisy(1))
        p.data["mystery"] = np.asarray(v, dtype=float)
        return p
    old, new = result(pt("A", noisy(10))), result(pt("B", noisy(20)))
    with pytest.raises(al.InvalidArgument, match="lower_is_better"):
        al.compare(old, new, metric="mystery")
    c = al.compare(old, new, metric="mystery", lower_is_better=False).cell()
    assert c.mark == "I" and c.change > 0.5


def test_one_run_a_side_is_never_marked():
    cmp = al.compare(result(point("A", 1, [100.0])), result(point("B", 1, [10.0])))
    c = cmp.cell()
    assert math.isnan(c.p) and c.mark == "" and c.change == pytest.approx(9.0)
    assert "1 run" in cmp.to_text()


# -- what a cell pools: never different cells, unless asked --

def two_policy_sides():
    old = result(point("buddy", 1, noisy(100)), point("libarena-spill", 1, noisy(90)),
                 point("buddy", 2, noisy(100)), point("libarena-spill", 2, noisy(90)))
    new = result(point("libc", 1, noisy(80)), point("libarena-magazine", 1, noisy(70)),
                 point("libc", 2, noisy(80)), point("libarena-magazine", 2, noisy(70)))
    return old, new


def test_two_policies_on_a_side_are_not_pooled():
    old, new = two_policy_sides()
    with pytest.raises(al.PoolingError) as e:
        al.compare(old, new, on=["producers"])
    msg = str(e.value)
    assert isinstance(e.value, al.InvalidArgument)
    assert "side A holds 2 values of policy (buddy; libarena-spill)" in msg
    assert "side B holds 2 values of policy (libc; libarena-magazine)" in msg
    assert "add policy to on" in msg and "pool=True" in msg and "--pool" in msg
    assert ("A", "policy", ["buddy", "libarena-spill"]) in e.value.pooled
    # one side pooling is enough to refuse
    with pytest.raises(al.PoolingError, match=r"side A holds 2 values of policy") as e:
        al.compare(old, new.filter(policy="libc"), on=["producers"])
    assert "side libc" not in str(e.value)


def test_pool_true_pools_and_says_what():
    old, new = two_policy_sides()
    cmp = al.compare(old, new, on=["producers"], pool=True)
    assert len(cmp.cells) == 2
    c = cmp.cell(producers=1)
    assert c.old.n == 10 and c.new.n == 10  # both policies' runs in one sample
    assert c.old.mean == pytest.approx(np.mean(np.concatenate(
        [p.data["alloc_ns"] for p in old.points if p.params["producers"] == 1])))
    assert cmp.pooled == [("A", "policy", ["buddy", "libarena-spill"]),
                          ("B", "policy", ["libc", "libarena-magazine"])]
    text = cmp.to_text()
    assert "Pooled on request (pool=True)" in text
    assert "A: 2 values of policy (buddy; libarena-spill)" in text
    assert "B: 2 values of policy (libc; libarena-magazine)" in text
    assert "Pooled on request" not in al.compare(old.filter(policy="buddy"),
                                                 new.filter(policy="libc")).to_text()


def test_a_side_varying_size_outside_on_is_refused():
    old = result(point("A", 1, noisy(100), size=64), point("A", 1, noisy(100), size=128),
                 point("A", 2, noisy(100), size=64), point("A", 2, noisy(100), size=128))
    new = result(point("B", 1, noisy(100), size=64), point("B", 2, noisy(100), size=64))
    with pytest.raises(al.PoolingError, match=r"side A holds 2 values of size \(64; 128\)"):
        al.compare(old, new, on=["producers"])
    # the default key separates what varies on each side: size is in it, no pooling
    cmp = al.compare(old, new)
    assert "size" in cmp.key and len(cmp.cells) == 2 and cmp.unmatched == 2
    assert al.compare(old, new, on=["producers"], pool=True).cell(producers=1).old.n == 10


def test_parameters_a_side_has_in_part_count_as_values():
    old = result(point("A", 1, noisy(100), timing="batch"), point("A", 1, noisy(100)))
    new = result(point("B", 1, noisy(100)))
    with pytest.raises(al.PoolingError, match=r"2 values of timing \(batch; \(unset\)\)"):
        al.compare(old, new, on=["producers"])


def test_duplicate_cells_are_not_pooling():
    # Result.concat of two runs of the same cell: equal params, their runs pooled as before
    a1 = result(point("A", 1, noisy(100)), point("A", 2, noisy(100)))
    a2 = result(point("A", 1, noisy(100)), point("A", 2, noisy(100)))
    new = result(point("B", 1, noisy(50)), point("B", 2, noisy(50)))
    cmp = al.compare(a1 + a2, new)
    assert cmp.cell(producers=1).old.n == 10 and not cmp.pooled
    assert "Pooled" not in cmp.to_text()
    cmp = al.compare(a1 + a2, new, on=["producers"])
    assert cmp.cell(producers=1).old.n == 10


def test_different_workloads_are_never_compared():
    mf = result(point("buddy", 1, noisy(100)), point("buddy", 2, noisy(100)))
    larson = result(point("libc", 1, noisy(100)), point("libc", 2, noisy(100)))
    for p in larson.points:
        p.params["workload"] = "larson"
    for kw in ({}, {"pool": True}, {"on": ["producers"]}, {"on": ["producers"], "pool": True}):
        with pytest.raises(al.IncomparableError) as e:
            al.compare(mf, larson, **kw)
        assert "malloc-free" in str(e.value) and "larson" in str(e.value), kw
    # inside one Result: the baseline's workload against another's
    both = mf + result(*larson.points)
    with pytest.raises(al.IncomparableError, match="workload"):
        al.compare(both, baseline="malloc-free", by="workload")
    with pytest.raises(al.IncomparableError, match=r"malloc-free.*larson"):
        al.compare(both, baseline="buddy")
    # a workload on both sides is matched with itself; the other one is left out
    cmp = al.compare(both, result(point("B", 1, noisy(50))), on=["producers"])
    assert cmp.key == ["workload", "producers"] and len(cmp.cells) == 1 and cmp.unmatched == 3


def test_baseline_inside_one_result_refuses_pooling_too():
    res = result(point("buddy", 1, noisy(100), size=64), point("buddy", 1, noisy(100), size=128),
                 point("libc", 1, noisy(50), size=64), point("libc", 1, noisy(50), size=128))
    with pytest.raises(al.PoolingError, match=r"side buddy holds 2 values of size"):
        al.compare(res, baseline="buddy", on=["producers"])
    cmp = al.compare(res, baseline="buddy", on=["producers"], pool=True)
    assert cmp.cell("libc").new.n == 10 and "libc: 2 values of size (64; 128)" in cmp.to_text()
    # by's own values are what is compared, never "pooled"
    assert len(al.compare(res, baseline="buddy").cells) == 2


# -- the smallest p a test can give, against the p the correction needs --

def test_mannwhitney_min_p():
    assert st.mannwhitney_min_p(6, 6) == pytest.approx(2 / 924)
    assert st.mannwhitney_min_p(5, 5) == pytest.approx(2 / math.comb(10, 5))
    assert st.mannwhitney_min_p(1, 1) == 1.0 and math.isnan(st.mannwhitney_min_p(0, 4))
    # it is what mannwhitney() gives for fully separated sides, exact or approximated
    for n1, n2 in ((6, 6), (3, 9), (9, 9), (12, 20)):
        lo, hi = np.arange(n1, dtype=float), np.arange(n1, n1 + n2, dtype=float)
        assert st.mannwhitney(lo, hi).pvalue == pytest.approx(st.mannwhitney_min_p(n1, n2))
        assert st.mannwhitney(lo[::-1] + 0.5, hi).pvalue >= st.mannwhitney_min_p(n1, n2)


def table_of(ncells, differ, runs=6, sd=1.0, seed=7):
    """ncells cells of `runs` runs a side; the first `differ` cells 10% slower on B."""
    rng = np.random.default_rng(seed)
    a = [point("A", p, 100 + rng.normal(0, sd, runs)) for p in range(ncells)]
    b = [point("B", p, (110 if p < differ else 100) + rng.normal(0, sd, runs))
         for p in range(ncells)]
    return result(*a), result(*b)


def test_auto_takes_welch_where_mannwhitney_cannot_reach_the_corrected_p():
    old, new = table_of(60, 1)
    cmp = al.compare(old, new)
    assert {c.test for c in cmp.cells} == {"welch"}
    assert cmp.lone_bar == pytest.approx(0.05 / 60)
    text = cmp.to_text()
    assert 'Test (test="auto"): Welch\'s t-test rather than Mann-Whitney U' in text
    assert "at 6 vs 6 runs Mann-Whitney's smallest possible p is 0.0022 (2/924)" in text
    assert "0.00083 = 0.05/60" in text
    assert cmp.cell(producers=0).mark == "R"  # Welch finds the one clear difference
    # with 2 cells the bar is 0.025: Mann-Whitney can reach it and auto keeps it
    old, new = table_of(2, 1)
    cmp = al.compare(old, new)
    assert {c.test for c in cmp.cells} == {"mannwhitney"}
    assert 'Test (test="auto"): Mann-Whitney U (>= 6 runs a side).' in cmp.to_text()
    assert "cannot give" not in cmp.to_text() and cmp.cell(producers=0).mark == "R"
    # fewer than 6 runs: Welch, and the legend says why
    old, new = table_of(2, 1, runs=5)
    assert "Welch's t-test (fewer than 6 runs a side)" in al.compare(old, new).to_text()


def test_mannwhitney_asked_for_says_it_cannot_mark_a_lone_difference():
    old, new = table_of(60, 1)
    cmp = al.compare(old, new, test="mannwhitney")
    c = cmp.cell(producers=0)
    assert c.p == pytest.approx(2 / 924) and c.p_adj >= 0.05 and c.mark == ""
    text = cmp.to_text()
    assert 'Test: Mann-Whitney U (test="mannwhitney").' in text
    assert ("Mann-Whitney U at 6 vs 6 runs cannot give p below 0.0022 (2/924), and "
            "Benjamini-Hochberg over 60 cells needs p < 0.00083 (0.05/60)") in text
    assert "at least 3 cells differ" in text and 'test="welch"' in text
    assert "at least 7 runs a side" in text
    assert st.mannwhitney_min_p(7, 7) < 0.05 / 60 < st.mannwhitney_min_p(6, 6)
    # what the legend says holds: 2 fully separated cells stay unmarked, 3 are marked
    for differ, marked in ((2, 0), (3, 3)):
        cmp = al.compare(*table_of(60, differ), test="mannwhitney")
        assert len(cmp.regressions) == marked, differ
    # 3 runs a side: never below 0.1, so no cell can ever be marked
    cmp = al.compare(*table_of(4, 4, runs=3), test="mannwhitney")
    assert "no cell can ever be marked" in cmp.to_text() and not cmp.regressions
    # Welch has no floor: nothing to say
    assert "cannot give" not in al.compare(*table_of(60, 1), test="welch").to_text()
