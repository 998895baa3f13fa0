"""The share of a seed's cells the model moves in the seed's direction
(Report.direction_share): computed on synthetic cells whose data the test
controls (all matching, one flipped, not significant, significant but under
the threshold, undecided), its JSON round trip, and each reproduction
printing the line at the fast test settings."""
import json

import numpy as np
import pytest

import alloclab.reproduce as rep
from alloclab import verdict as V
from alloclab.reproduce._report import Report, SeedCell
from alloclab.result import dump_json

BASE = np.array([100.0, 101.0, 99.0, 100.5, 99.5, 100.0])  # ns: tight runs
NOISY = np.array([100.0, 130.0, 70.0, 100.0, 115.0, 85.0])  # ns: wide runs


class Synthetic(Report):
    """A report whose seed cells are given as (name, seed pct, mark, old
    runs, new runs, cpu_mode): lower is better (a latency)."""

    SEED_CELLS = "the synthetic cells"

    def __init__(self, spec):
        super().__init__({}, {})
        self.spec = spec

    def sides(self, old, new, mode):
        return V.Side(np.asarray(old), cpu_mode=mode), V.Side(np.asarray(new), cpu_mode=mode)

    def seed_cells(self):
        out = []
        for name, pct, mark, old, new, mode in self.spec:
            cell = V.Claim.compare(name, "alloc_ns", *self.sides(old, new, mode))
            out.append(SeedCell(name, pct, mark, cell, True))
        return out


def cells(flip=None):
    """Four cells the model moves as the seed does; ``flip``: the one whose
    model data go the other way."""
    spec = [("faster by 20%", 20.0, None, BASE, BASE / 1.2),
            ("slower by 20%", -20.0, None, BASE, BASE * 1.2),
            ("marked I", 4.0, "I", BASE, BASE / 1.1),
            ("marked R", -30.0, "R", BASE, BASE * 1.5)]
    out = []
    for name, pct, mark, old, new in spec:
        if name == flip:
            new = old * old / new
        out.append((name, pct, mark, old, new, None))
    return out


def test_all_cells_matching():
    r = Synthetic(cells())
    d = r.direction_share()
    assert (d["cells"], d["matching"], d["share"]) == (4, 4, 1.0)
    assert d["opposite"] == [] and d["same_sign_not_significant"] == 0
    assert [x["model"] for x in d["detail"]] == ["better", "worse", "better", "worse"]
    assert d["threshold"] == V.THRESHOLD and d["alpha"] == V.ALPHA
    assert ("seed cells matching in direction: 4 of 4 (100%), at real-CPU producer counts; "
            "0 with the seed's sign but not significant; 0 opposite") in str(r)


@pytest.mark.parametrize("flip", ["faster by 20%", "marked R"])
def test_one_flipped_cell_drops_the_count_and_is_named(flip):
    r = Synthetic(cells(flip))
    d = r.direction_share()
    assert (d["cells"], d["matching"]) == (4, 3)
    assert d["opposite"] == [flip]
    text = r.direction_text()
    assert "3 of 4 (75%)" in text and "; 1 opposite" in text
    assert "  opposite: %s (seed " % flip in text


def test_a_not_significant_cell_counts_as_same():
    # NOISY against NOISY / 1.05: 5% faster on the point estimate, far from significant
    spec = [("seed same", 1.0, None, NOISY, NOISY / 1.05, None),
            ("seed better", 10.0, None, NOISY, NOISY / 1.05, None),
            ("seed worse", -10.0, None, NOISY, NOISY / 1.05, None),
            ("seed marks it neither", 7.0, "", NOISY, NOISY / 1.05, None)]
    d = Synthetic(spec).direction_share()
    assert [x["model"] for x in d["detail"]] == ["same"] * 4
    assert d["detail"][0]["model_pct"] == pytest.approx(5.0)
    assert d["detail"][0]["p_adj"] > 0.05
    # matching only where the seed's change is under the threshold (or unmarked)
    assert d["matching"] == 2
    assert d["same_sign_not_significant"] == 1  # "seed better": the model leans its way
    assert d["opposite_sign_not_significant"] == 1  # "seed worse"
    assert d["opposite"] == []
    assert "; 1 not significant with the opposite sign" in Synthetic(spec).direction_text()


def test_a_significant_change_under_the_threshold_is_same():
    tight = np.array([100.0, 100.01, 99.99, 100.0, 100.005, 99.995])
    spec = [("1% faster, seed same", 1.5, None, tight, tight / 1.01, None),
            ("1% faster, seed better", 3.0, None, tight, tight / 1.01, None)]
    d = Synthetic(spec).direction_share()
    assert all(x["p_adj"] < 1e-6 for x in d["detail"])  # significant ...
    assert [x["model"] for x in d["detail"]] == ["same", "same"]  # ... but under 2%
    assert d["matching"] == 1 and d["same_sign_not_significant"] == 1


def test_the_threshold_is_the_reports():
    class FivePct(Synthetic):
        DIRECTION_THRESHOLD = 0.05
    spec = [("4% faster", 4.0, None, BASE, BASE / 1.04, None)]
    assert Synthetic(spec).direction_share()["detail"][0]["model"] == "better"
    d = FivePct(spec).direction_share()
    assert d["detail"][0]["seed"] == d["detail"][0]["model"] == "same"
    assert "at least 5%" in d["definition"]


def test_an_undecided_cell_is_same():
    # latency on virtual CPUs never decides: its clear 20% counts as no change
    spec = [("virtual", 20.0, None, BASE, BASE / 1.2, "virtual")]
    d = Synthetic(spec).direction_share()
    assert d["detail"][0]["model"] == "same" and d["matching"] == 0
    assert d["same_sign_not_significant"] == 1


def test_no_seed_cells():
    d = Synthetic([]).direction_share()
    assert (d["cells"], d["matching"], d["share"]) == (0, 0, None)
    assert "0 of 0 (n/a)" in Synthetic([]).direction_text()


@pytest.mark.parametrize("same_work", [True, False])
def test_a_cell_whose_sides_did_the_same_work_is_labelled_not_missed(same_work):
    # the seed marks a 3% gain; the model's two sides are the same: no change
    class Labelled(Synthetic):
        def seed_cells(self):
            return [c._replace(same_work=same_work and c.name == "same work")
                    for c in super().seed_cells()]
    spec = cells() + [("same work", 3.0, "I", BASE, BASE * 1.2, None)]
    r = Labelled(spec)
    d = r.direction_share()
    text = r.direction_text()
    assert (d["cells"], d["matching"]) == (5, 4)  # never dropped from the denominator
    assert d["detail"][-1]["same_work"] is same_work
    if same_work:
        assert d["opposite"] == [] and d["same_work"] == ["same work"]
        assert (d["differing_cells"], d["differing_matching"]) == (4, 4)
        assert "4 of 5 (80%)" in text
        assert "; 4 of 4 (100%) where the model's two sides do different work, 1 with the same work" in text
        assert ("  same work in the model: no direction expected: same work (seed better "
                "+3.0%, model worse -16.7%)") in text
        assert "opposite:" not in text
    else:  # an ordinary verdict: a significant change the other way
        assert d["opposite"] == ["same work"] and d["same_work"] == []
        assert (d["differing_cells"], d["differing_matching"]) == (5, 4)
        assert "4 of 5 (80%)" in text and "; 1 opposite" in text
        assert "where the model's two sides do different work" not in text
        assert "no direction expected" not in text


def test_json_round_trip():
    r = Synthetic(cells("marked I"))
    d = json.loads(dump_json(r.to_dict()))
    assert d["direction_share"] == r.direction_share()
    assert d["direction_share"]["opposite"] == ["marked I"]


# ---------------------------------------------------------------- end to end

def check_report(r, cls, n):
    d = r.direction_share()
    assert d["cells"] == n, d
    assert "seed cells matching in direction: %d of %d" % (d["matching"], n) in str(r)
    back = cls.from_json(r.to_json())
    assert dump_json(back.direction_share()) == dump_json(d)
    assert json.loads(r.to_json())["direction_share"]["cells"] == n
    return d


def test_vmalloc_prints_the_share():
    r = rep.vmalloc(scale=0.002, runs=3, tests=["fix_align_alloc_test"], rezki=False,
                    warm=False)
    d = check_report(r, rep.VmallocReport, 2)  # the row's (R) and (I) cells
    assert [x["seed"] for x in d["detail"]] == ["worse", "better"]
    assert d["threshold"] == 0.02


def test_vmalloc_h1_cells_of_6_19_are_same_work():
    # h:1 at 512 pages: a PMD mapping, whose block order is the area's own, so
    # 6.19-rc1 has no higher order to try and does v6.18's work; at 64 and 256
    # pages (order-4 contiguous PTEs) it takes one larger block where v6.18
    # took several, so those cells differ in work, as do the h:0 rows
    r = rep.vmalloc(scale=0.0005, runs=3, tests=["fix_size_alloc_test"], rezki=False,
                    warm=False)
    d = r.direction_share()
    assert d["same_work"] == ["fix_size p:512 h:1 6-19-0-rc1"]
    assert r.same_work("fix_size_alloc_test", 512, 1, "6-19-0-rc1")
    assert not r.same_work("fix_size_alloc_test", 64, 1, "6-19-0-rc1")
    assert not r.same_work("fix_size_alloc_test", 256, 1, "6-19-0-rc1")
    assert not r.same_work("fix_size_alloc_test", 16, 0, "6-19-0-rc1")
    assert not r.same_work("fix_size_alloc_test", 64, 1, "vfree-high-order")
    assert "pages.merges" in r.work_counters("fix_size_alloc_test", 16, 1)
    assert d["differing_cells"] == d["cells"] - 1
    assert "where the model's two sides do different work, 1 with the same work in the model" in str(r)
    back = rep.VmallocReport.from_json(r.to_json())
    assert back.direction_share()["same_work"] == d["same_work"]


def test_libarena_prints_the_share():
    r = rep.libarena(producers=[1], allocs_per_cycle=[4, 64], runs=3, timings=["batch"],
                     duration=0.005, warmup_cycles=2, workloads=["malloc-free"],
                     capacities=(), baseline=False)
    d = check_report(r, rep.LibarenaReport, 2)  # alloc and free at 1p/64 (none at 4)
    assert {x["cell"] for x in d["detail"]} == {"malloc-free alloc_ns 1p/64",
                                                "malloc-free free_ns 1p/64"}
    # the seed's 102 vs 75 ns and 137 vs 75 ns: transfer cache better, beyond 5%
    assert [x["seed"] for x in d["detail"]] == ["better", "better"]
    assert d["threshold"] == 0.05


def test_local_storage_prints_the_share():
    r = rep.local_storage(storage_types=["socket"], batch_sizes=[16], runs=3, duration=0.05,
                          sample=0.02, owner_work="none", warmup_cycles=5)
    d = check_report(r, rep.LocalStorageReport, 1)
    assert d["detail"][0]["cell"] == "socket batch 16"
    assert d["detail"][0]["seed"] == "worse"  # 100.566 against 104.217 k/s: -3.5%
    assert d["detail"][0]["seed_pct"] == pytest.approx(-3.503, abs=1e-3)


# ---------------------------------------------------------------- the goal's shares

class Excusing(Synthetic):
    """Synthetic cells, the one named ``excused`` excused with a reason."""

    def __init__(self, spec, excused=None):
        super().__init__(spec)
        self.excused = excused

    def seed_cells(self):
        return [c._replace(excuse="a kernel reason" if c.name == self.excused else None)
                for c in super().seed_cells()]


def test_goal_shares_median_ratio_and_band():
    # model changes: +20% (seed +20), -20% (seed -20), +10% (seed +4), -50% (seed -30);
    # as improvements: 20/20, -16.7/-20, 10/4, -33.3/-30 -> ratios 1.0, 0.83, 2.5, 1.11
    g = Synthetic(cells()).direction_share()["goal"]
    assert (g["cells"], g["matching"], g["decided"], g["excused"]) == (4, 4, 4, [])
    assert g["ratios"]["marked I"] == pytest.approx(2.5, rel=0.02)
    assert g["median_ratio"] == pytest.approx((1.0 + 1.111) / 2, rel=0.01)  # the middle two
    assert g["within"] == 4


class WithNs(Synthetic):
    """Synthetic cells with a change in ns per operation, (model, seed)."""

    def __init__(self, spec, ns):
        super().__init__(spec)
        self.ns = ns

    def cell_ns(self, name):
        return self.ns.get(name)


def test_ns_reading_is_over_the_decided_cells_only():
    spec = cells() + [("seed better", 10.0, None, NOISY, NOISY / 1.05, None)]
    ns = {"faster by 20%": (-50.0, -100.0), "slower by 20%": (400.0, 100.0),
          "marked I": (-30.0, -10.0), "marked R": (float("nan"), 90.0),
          "seed better": (-5.0, -5.0)}
    r = WithNs(spec, ns)
    g = r.direction_share()["goal"]
    assert g["decided"] == 4  # the noisy cell is not decided: no ns ratio either
    assert g["ratios_ns"] == pytest.approx({"faster by 20%": 0.5, "slower by 20%": 4.0,
                                            "marked I": 3.0})
    assert g["median_ratio_ns"] == pytest.approx(3.0)
    assert g["within_ns"] == 2  # 4.0 is outside 0.33-3x
    assert g["median_ratio"] == Synthetic(spec).direction_share()["goal"]["median_ratio"]
    text = " ".join(" ".join(r.goal_text()).split())
    assert ("; a second reading, not the goal's, in ns per operation: median 3.00, 2 of 3 "
            "within" in text)


def test_no_ns_reading_prints_nothing_of_it():
    g = Synthetic(cells()).direction_share()["goal"]
    assert "ratios_ns" not in g
    assert "ns per operation" not in " ".join(Synthetic(cells()).goal_text())


def test_an_opposite_cell_has_a_negative_ratio_outside_the_band():
    g = Synthetic(cells("marked I")).direction_share()["goal"]
    assert g["ratios"]["marked I"] < 0
    assert (g["matching"], g["decided"], g["within"]) == (3, 4, 3)


def test_an_excused_cell_leaves_the_goal_and_is_listed_with_its_reason():
    r = Excusing(cells("marked R"), excused="marked R")
    d = r.direction_share()
    assert d["opposite"] == ["marked R"]  # the share over all cells still names it
    g = d["goal"]
    assert (g["cells"], g["matching"], g["decided"]) == (3, 3, 3)
    assert g["excused"] == [{"cell": "marked R", "reason": "a kernel reason"}]
    text = " ".join(" ".join(r.goal_text()).split())
    assert "goal shares: 4 cells, 1 excused before any run; in direction 3 of 3" in text
    assert "excused: marked R: a kernel reason" in text


def test_no_decided_cell_has_no_median():
    spec = [("seed better", 10.0, None, NOISY, NOISY / 1.05, None)]
    g = Synthetic(spec).direction_share()["goal"]
    assert (g["decided"], g["median_ratio"], g["within"]) == (0, None, 0)
    assert "median model/seed effect over the decided cells n/a" in \
        " ".join(" ".join(Synthetic(spec).goal_text()).split())


def test_rounds_count_the_cells_in_direction_in_every_round():
    from alloclab.reproduce._report import rounds_text
    text = rounds_text([Synthetic(cells()), Synthetic(cells("marked I"))], ["one", "two"])
    assert "  one: in direction 4 of 4" in text and "  two: in direction 3 of 4" in text
    assert "in the seed's direction in all 2 rounds: 3 of 4 goal cells" in text
    assert "missed in at least one round: marked I" in text


def test_the_reproductions_declare_their_excuses_before_running():
    import importlib
    ls = importlib.import_module("alloclab.reproduce.local_storage")
    vm = importlib.import_module("alloclab.reproduce.vmalloc")
    assert set(vm.EXCUSED) == {("fix_size_alloc_test", 512, 1, "6-19-0-rc1")}
    # the seed's task batch 32: +2.6% against an sd of 1.285 k/s (5.6%)
    assert "less than twice" in ls.seed_noise_excuse("task", 32)
    assert [ls.seed_noise_excuse(st, b) for st, b in
            (("socket", 16), ("socket", 32), ("socket", 64), ("task", 16), ("task", 64))] \
        == [None] * 5


class Paired(Synthetic):
    """Synthetic cells from interleaved runs (paired)."""

    def sides(self, old, new, mode):
        t = np.arange(len(old), dtype=float)
        return (V.Side(old, starts=2 * t, cpu_mode=mode),
                V.Side(new, starts=2 * t + 1, cpu_mode=mode))


def _bimodal_ratios(low):
    """40 paired runs whose new/old ratios fall in two groups: 38 at 1/2.4
    and 2 at 1/(2.4/1.3), 2.4/1.3 times faster (both beyond the threshold);
    ``low``: those 2 only 1% faster (within it)."""
    old = 1000.0 * (1 + 0.002 * np.sin(np.arange(40)))
    ratio = np.full(40, 1 / 2.4) * (1 + 0.001 * np.cos(np.arange(40)))
    ratio[[7, 23]] = [1 / 1.01, 1 / 1.011] if low else ratio[[7, 23]] * 1.3
    return old, old * ratio


@pytest.mark.parametrize("low", [False, True])
def test_bimodal_pairs_all_on_one_side_still_decide_the_direction(low):
    """Bimodal paired ratios keep a cell from deciding, except for its
    direction when every pair is beyond the threshold on one side; one pair
    within the threshold takes that away, and the cell is named either way."""
    old, new = _bimodal_ratios(low)
    r = Paired([("p:64 h:1", 196.9, None, old, new, None)])
    cell = r.seed_cells()[0].cell
    assert [k for k, _ in cell.problems] == ["bimodal"] and not cell.decides
    d = r.direction_share()
    assert d["matching"] == (0 if low else 1)
    assert d["decided_by_sign"] == ([] if low else ["p:64 h:1"])
    assert d["same_sign_cells"] == (["p:64 h:1"] if low else [])
    assert d["detail"][0]["model"] == ("same" if low else "better")
    text = r.direction_text()
    assert ("bimodal, every pair on one side beyond the threshold: p:64 h:1" in text) != low
    assert ("the seed's sign, not significant or under the threshold: p:64 h:1" in text) == low
    assert d["goal"]["matching"] == d["matching"]


def test_bimodal_pairs_on_one_side_still_need_the_t_test():
    """Every pair beyond the threshold on one side is not enough when the t
    test over the pairs is not significant: 6 pairs 3% slower and 2 pairs 40x
    slower. The cell stays undecided and is named only as leaning the seed's
    way."""
    old = 1000.0 * (1 + 0.002 * np.sin(np.arange(8)))
    new = old * np.array([1.03, 1.031, 40.0, 1.029, 1.03, 41.0, 1.031, 1.03])
    r = Paired([("bimodal, wide", -3.0, None, old, new, None)])
    cell = r.seed_cells()[0].cell
    assert [k for k, _ in cell.problems] == ["bimodal"]
    assert r._every_pair_one_side(cell)
    d = r.direction_share()
    assert d["detail"][0]["p_adj"] > 0.05 and d["detail"][0]["model"] == "same"
    assert d["decided_by_sign"] == [] and d["same_sign_cells"] == ["bimodal, wide"]
    assert "bimodal, every pair" not in r.direction_text()
