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
    assert c1.verdict() == "(I)" and c2.verdict() == "(R)" and c4.verdict() == "not significant"
    assert (" %s (I)  " % c1.change_text()) in c1.text() and c2.change_text().startswith("-")


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
    assert " (R) " in row1[2] and " (I) " in row1[3]
    assert row1[2].startswith(cmp.cell("rc1", producers=1).parts()[0] + " -> ")
    row2 = [x.strip() for x in lines[4].split("|")[1:-1]]
    assert row2[0] == "" and row2[1] == "alloc_ns: p:16 (ns)"  # benchmark printed once
    ch = cmp.cell("fix", producers=16).change_text()
    assert ch.startswith("39") or ch.startswith("40")  # 100/20 - 1
    assert (" %s (I) " % ch) in row2[3]
    assert lines[5].startswith("+---")
    geo = [x.strip() for x in lines[6].split("|")[1:-1]]  # under the cells, its own block
    assert geo[1] == "alloc_ns: geometric mean" and lines[7].startswith("+---")
    assert geo[3].startswith(cmp.geomean("fix").text().split("  ")[0])
    assert "Benjamini-Hochberg" in lines[8]
    assert "normalised" in text and "v6.18" in text
    # every cell's pieces line up within its column
    for col in (2, 3):
        cells = [x.split("|")[col + 1] for x in lines[3:5]]
        assert len({c.index("->") for c in cells}) == 1
    md = cmp.to_markdown().splitlines()
    assert md[0] == "| Benchmark | Result Class | rc1 | fix |"
    assert md[1] == "|---|---|---:|---:|"
    c = cmp.cell("rc1", producers=1)
    o, n, ch, _, aid = c.parts()
    assert md[2] == "| malloc-free | alloc_ns: p:1 (ns) | %s -> %s **%s (R)** %s | %s |" % (
        o, n, ch, aid, cmp.cell("fix", producers=1).text().replace(
            "  %s (I)  " % cmp.cell("fix", producers=1).change_text(),
            " **%s (I)** " % cmp.cell("fix", producers=1).change_text()))
    assert md[4].startswith("|  | *alloc_ns: geometric mean* | *")
    html = cmp._repr_html_()
    assert "<table>" in html and "background-color:#" in html and "<b>" in html
    assert "(I)</b>" in html and "geometric mean" in html and html.count("<tr") == 1 + 2 + 1
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
    # a number from a command line ("--baseline 1 --by producers") is its value
    by_text = al.compare(res, baseline="1", by="producers")
    by_num = al.compare(res, baseline=1, by="producers")
    assert by_text.base_name == by_num.base_name == "1" and by_text.columns == ["2"]
    assert [c.p for c in by_text.cells] == [c.p for c in by_num.cells]
    with pytest.raises(al.UnknownNameError, match="unknown producers '3' in baseline"):
        al.compare(res, baseline="3", by="producers")


def test_matching_on_and_errors():
    old = result(point("A", 1, noisy(100), size=64), point("A", 2, noisy(100), size=64))
    new = result(point("B", 1, noisy(100), size=128), point("B", 2, noisy(100), size=128))
    cmp = al.compare(old, new)  # policy and size differ wholesale: matched on producers
    assert cmp.key == ["workload", "producers"] and set(cmp.differ) == {"policy", "size"}
    assert "differ in: policy, size" in cmp.to_text()
    assert al.compare(old, new, on="producers").key == ["workload", "producers"]  # one name
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


@pytest.mark.parametrize("bad", ["no", "False", 0, 1.0, []])
def test_lower_is_better_is_a_bool_not_a_truth_value(bad):
    """bool("no") is True: a string once flipped the sign of every change."""
    old, new = result(point("A", 1, noisy(10))), result(point("B", 1, noisy(20)))
    with pytest.raises(al.ParameterTypeError, match=r"lower_is_better=.*: True \(lower is "
                       r"better\), False \(higher is\) or None"):
        al.compare(old, new, lower_is_better=bad)
    c = al.compare(old, new, lower_is_better=np.False_).cell()
    assert c.mark == "I" and c.change > 0.5


def test_a_metric_named_twice_is_refused():
    """Named twice, every row and geometric mean was printed twice and the
    correction counted each cell twice."""
    old, new = result(point("A", 1, noisy(10))), result(point("B", 1, noisy(20)))
    with pytest.raises(al.InvalidArgument, match=r"metric 'alloc_ns' is named twice"):
        al.compare(old, new, metric=["alloc_ns", "alloc_ns"])


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


# -- what a cell shows: the values, the change, the verdict, the reading aid --

OLD_NS = [24.0, 24.2, 24.1, 24.3, 23.9]  # mean 24.1, 95% CI half width 0.196
NEW_NS = [31.0, 31.4, 30.6, 31.2, 30.8]  # mean 31.0, 95% CI half width 0.393


def test_cells_show_old_and_new_with_ci_and_unit():
    cmp = al.compare(result(point("A", 1, OLD_NS)), result(point("B", 1, NEW_NS)))
    c = cmp.cell()
    assert c.old.ci_half == pytest.approx(st.describe(OLD_NS).ci_half) == pytest.approx(0.196,
                                                                                        abs=1e-3)
    assert c.parts()[:2] == ("24.1 \u00b10.2 ns", "31.0 \u00b10.4 ns")
    assert c.change_text() == "-22.26%" and c.aid() == "1.29x slower"
    assert c.text() == "24.1 \u00b10.2 ns -> 31.0 \u00b10.4 ns  -22.26% (R)  1.29x slower"
    assert c.text() in cmp.to_text()
    assert "24.1 \u00b10.2 ns -> 31.0 \u00b10.4 ns **-22.26% (R)** 1.29x slower" in \
        cmp.to_markdown()
    row = cmp.rows()[0]
    assert row["old_mean"] == pytest.approx(24.1) and row["new_mean"] == pytest.approx(31.0)
    assert row["old_ci"] == c.old.ci_half and row["new_ci"] == c.new.ci_half
    assert row["unit"] == "ns" and row["ratio"] == pytest.approx(31.0 / 24.1)
    assert row["aid"] == "1.29x slower" and row["significant"] is True
    assert row["verdict"] == "(R)" and row["mark"] == "R"
    # other units: throughput in ops/s (k/M above 1e5), per-op counters without one
    p_old = point("A", 1, OLD_NS, tput=[1.20e7, 1.21e7, 1.19e7, 1.20e7, 1.20e7])
    p_new = point("B", 1, NEW_NS, tput=[1.50e7, 1.52e7, 1.48e7, 1.50e7, 1.50e7])
    for p, v in ((p_old, 0.25), (p_new, 0.5)):
        p.data["buddy.lock_acquired_per_op"] = np.asarray([v, v * 1.01, v * 0.99, v, v])
    cmp = al.compare(result(p_old), result(p_new),
                     metric=["throughput", "buddy.lock_acquired_per_op"])
    t, k = cmp.cell(metric="throughput"), cmp.cell(metric="buddy.lock_acquired_per_op")
    assert t.parts()[:2] == tuple("%.2fM \u00b1%.2fM ops/s" % (x.mean / 1e6, x.ci_half / 1e6)
                                  for x in (t.old, t.new))  # both sides to the same digits
    assert t.old.mean == pytest.approx(1.2e7) and t.new.mean == pytest.approx(1.5e7)
    assert k.unit == "" and k.parts()[:2] == tuple("%.3f \u00b1%.3f" % (x.mean, x.ci_half)
                                                   for x in (k.old, k.new))
    assert k.parts()[0].startswith("0.250 \u00b10.00")
    # one run: no interval, no test
    one = al.compare(result(point("A", 1, [24.0])), result(point("B", 1, [31.0]))).cell()
    assert one.parts()[:2] == ("24.0 ns", "31.0 ns") and one.verdict() == "not tested"


def test_not_significant_exactly_where_p_adj_is_not_below_alpha():
    rng = np.random.default_rng(5)
    olds = [point("A", p, 100 + rng.normal(0, 3, 5)) for p in range(1, 13)]
    shift = [0, 0, 0, 0, 1, 2, 4, 8, 15, 20, 30, 40]
    news = [point("B", p, 100 + shift[p - 1] + rng.normal(0, 3, 5)) for p in range(1, 13)]
    cmp = al.compare(result(*olds), result(*news))
    ns = [c for c in cmp.cells if c.p_adj >= cmp.alpha]
    assert 0 < len(ns) < len(cmp.cells)  # both kinds are in this table
    for c in cmp.cells:
        assert ("not significant" in c.text()) == (c.p_adj >= cmp.alpha), c
        assert (c.mark == "") == (c.p_adj >= cmp.alpha or abs(c.change) < cmp.threshold)
        assert c.change_text() in c.text()  # the percentage stays
        assert c.significant == (c.p_adj < cmp.alpha)
    text = cmp.to_text(warnings=False)
    body = text.split("\n+---")[0]  # the cells' block only
    assert body.count("not significant") == len(ns)
    assert sum(1 for r in cmp.rows() if r["verdict"] == "not significant") == len(ns)
    # significant but under the threshold: said so, not marked
    old = result(point("A", 1, [100.0, 100.01, 99.99, 100.0, 100.02]))
    new = result(point("B", 1, [99.0, 99.01, 98.99, 99.0, 99.02]))
    c = al.compare(old, new).cell()
    assert c.verdict() == "significant, < 2%" and "1.01% significant, < 2%" in c.text()
    assert al.compare(old, new, threshold=0.05).cell().verdict() == "significant, < 5%"


def test_reading_aid_follows_the_data():
    slow, fast = [150.0, 151, 149, 150, 150], [100.0, 101, 99, 100, 100]
    a, b = result(point("A", 1, slow)), result(point("B", 1, fast))
    assert al.compare(a, b).cell().aid() == "1.50x faster"  # lower latency: faster
    assert al.compare(b, a).cell().aid() == "1.50x slower"
    # throughput: higher is faster, and it is the improvement
    ta = result(point("A", 1, fast, tput=[1000.0, 1001, 999, 1000, 1000]))
    tb = result(point("B", 1, fast, tput=[1250.0, 1251, 1249, 1250, 1250]))
    c = al.compare(ta, tb, metric="throughput").cell()
    assert c.aid() == "1.25x faster" and c.mark == "I"
    c = al.compare(tb, ta, metric="throughput").cell()
    assert c.aid() == "1.25x slower" and c.mark == "R"
    # counters: more / fewer of them, whichever is better
    def counted(pol, v):
        p = point(pol, 1, fast)
        p.data["buddy.lock_acquired_per_op"] = np.asarray(v, dtype=float)
        return result(p)
    few, many = counted("A", [0.1, 0.101, 0.099, 0.1, 0.1]), counted("B", [0.13] * 5)
    c = al.compare(few, many, metric="buddy.lock_acquired_per_op").cell()
    assert c.aid() == "1.30x more" and c.mark == "R"
    assert al.compare(many, few, metric="buddy.lock_acquired_per_op").cell().aid() == \
        "1.30x fewer"
    assert al.compare(a, result(point("B", 1, slow))).cell().aid() == "no change"


def test_geometric_mean_row():
    rng = np.random.default_rng(11)
    factors = [1.5, 0.8, 1.1, 1.0]
    olds = [point("A", p, 100 + rng.normal(0, 1, 5), tput=1000 + rng.normal(0, 5, 5))
            for p in range(4)]
    news = [point("B", p, 100 * f + rng.normal(0, 1, 5), tput=1000 / f + rng.normal(0, 5, 5))
            for p, f in enumerate(factors)]
    cmp = al.compare(result(*olds), result(*news), metric=["alloc_ns", "throughput"])
    for m, norm in (("alloc_ns", lambda o, n: o / n), ("throughput", lambda o, n: n / o)):
        r = [norm(np.mean(o.data[m]), np.mean(n.data[m])) for o, n in zip(olds, news)]
        by_hand = float(np.exp(np.mean(np.log(r))))
        g = cmp.geomean("B", m)
        assert g.ratio == pytest.approx(by_hand, rel=1e-12) and g.n == 4
        assert g.change_pct == pytest.approx(100 * (by_hand - 1))
        assert g.aid() == "%.2fx slower" % (1 / by_hand)  # both metrics got slower overall
        assert by_hand < 1
    text = cmp.to_text()
    g = cmp.geomean("B", "alloc_ns")
    line = next(x for x in text.splitlines() if "alloc_ns: geometric mean" in x)
    assert ("%.2f%%" % g.change_pct) in line and g.aid() in line
    assert "*%s*" % g.text() in cmp.to_markdown()
    # a cell whose ratio is infinite cannot enter it: counted out loud
    zero = result(point("B", 9, [0.0] * 5))
    cmp = al.compare(result(*olds, point("A", 9, noisy(100))), result(*news, *zero.points))
    g = cmp.geomean()
    assert g.n == 4 and g.total == 5 and "(4 of 5 cells)" in cmp.to_text()


def test_the_legend_reads_as_sentences():
    """A pooled comparison's legend said "regression/improvement against A"
    (A: the old side's default label) and "1 cell ... are left out"."""
    old, new = two_policy_sides()
    text = al.compare(old, new, on=["producers"], pool=True).to_text()
    assert "regression/improvement against the old side (A): p <" in text, text
    assert "against A:" not in text
    more = result(point("B", 1, noisy(100)), point("B", 8, noisy(100)))
    one = al.compare(result(point("A", 1, noisy(100))), more)
    assert one.unmatched == 1
    assert "1 cell had no counterpart on the other side and is left out." in one.to_text()
    two = al.compare(result(point("A", 1, noisy(100)), point("A", 2, noisy(100))), more)
    assert "2 cells had no counterpart on the other side and are left out." in two.to_text()
