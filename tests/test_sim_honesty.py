"""A simulated cell says so everywhere a user meets it: tables, warnings,
the CPU line, JSON, plots, verdicts and comparisons; a simulated side is
never judged against a measured one; simulated cells may run side by side
in a sweep and give the numbers a serial sweep gives."""

import concurrent.futures as cf
import hashlib
import json
import warnings

import numpy as np
import pytest

import alloclab as al
from alloclab.measure import sim
from alloclab.measure.executors import ConcurrentExecutorWarning
from alloclab.results import simulated as S

QUICK = dict(runs=3, cycles=40, warmup_cycles=2, mem_sample=0)
COSTS = {"transfer.lock_acquired": 20.0, "buddy.lock_acquired": 30.0, "percpu.misses": 2.0}
# what the machine did while a simulated run ran: not part of the prediction
MACHINE = ("mem_rss", "mem_rss_peak", "worker_invol_ctxsw", "worker_invol_ctxsw_per_s",
           "worker_preempted_per_s", "worker_vol_ctxsw", "engine_wakeups",
           "engine_on_worker_cpus", "timer_overhead_ns", "steal_pct")


def _cal(info=None):
    return sim.Calibration(COSTS, 60.0, 1.0, dict(info or {"test": True}))


def _id(cal):
    return hashlib.sha1(json.dumps(cal.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def _run(policy="libarena-transfer", producers=(1, 4), cal=None, **kw):
    opts = dict(QUICK, **kw)
    return al.run("malloc-free", policy, producers=list(producers), cpu="simulated",
                  calibration=cal or _cal(), **opts)


@pytest.fixture(scope="module")
def simres():
    return _run(["libarena-transfer", "libarena-spill"])


@pytest.fixture(scope="module")
def measured():
    return al.run("malloc-free", ["libarena-transfer", "libarena-spill"], producers=[1],
                  cpu="pinned", **QUICK)


def test_table_heads_simulated_cells_with_the_calibration(simres):
    cid = _id(_cal())
    assert {p.info["sim"]["calibration_id"] for p in simres.points} == {cid}
    text = simres.table("alloc_ns").to_text()
    lines = text.splitlines()
    assert lines[1] == "simulated: predicted (calibration %s): every cell" % cid
    assert ("simulated: times of simulated CPUs are predictions from calibration %s, not "
            "measurements; %s: every cell" % (cid, S.COUNTERS)) in \
        " ".join(x.strip() for x in simres.table("alloc_ns").warning_lines())


def test_markdown_table_is_headed_too(simres):
    from alloclab.cli import format as F
    md = F.table_markdown(simres.table("alloc_ns"))
    assert "_simulated: predicted (calibration %s): every cell_" % _id(_cal()) in md


def test_measured_table_says_nothing_of_simulation(measured):
    t = measured.table("alloc_ns")
    assert t.sim_heading() is None
    assert "simulated" not in t.to_text()
    assert "simulated" not in measured.cpu_line()


def test_mixed_table_names_the_simulated_cells():
    a = _run(producers=[1])
    b = al.run("malloc-free", "libarena-transfer", producers=[1], cpu="pinned", **QUICK)
    t = (a + b).table("alloc_ns")
    head = t.sim_heading()
    assert head == "simulated: predicted (calibration %s): cpu=simulated, 64 allocs/cycle, 1p" \
        % _id(_cal())


def test_cpu_line_says_predicted(simres):
    assert "simulated CPUs: times predicted by calibration %s" % _id(_cal()) in \
        simres.cpu_line()


def test_uncalibrated_terms_are_named_and_absent_when_all_have_a_cost(simres):
    terms = sorted({t for p in simres.points for t in p.info["sim"]["uncalibrated"]})
    assert terms
    lines = simres.table("alloc_ns").warning_lines()
    line = " ".join(x.strip() for x in lines)
    shown = ", ".join(terms[:S.TERMS_SHOWN]) + (
        " and %d more" % (len(terms) - S.TERMS_SHOWN) if len(terms) > S.TERMS_SHOWN else "")
    assert "uncalibrated terms: %s have no cost in the calibration" % shown in line
    full = sim.Calibration(dict(COSTS, **{t: 1.0 for t in terms}), 60.0, 1.0, {})
    res = _run(["libarena-transfer", "libarena-spill"], cal=full)
    assert all(p.info["sim"]["uncalibrated"] == [] for p in res.points)
    assert not any("uncalibrated" in x for x in res.table("alloc_ns").warning_lines())


def _validated(bad):
    return _cal({"validation": {"usable_cpus": 2, "tolerance": 0.25, "rows": [],
                                "unvalidated": bad}})


def test_unvalidated_cells_above_the_usable_cpus():
    res = _run(producers=[2, 4], cal=_validated([["malloc-free", "libarena-transfer"]]))
    line = " ".join(x.strip() for x in res.table("alloc_ns").warning_lines())
    assert ("unvalidated: above the validation's 2 usable CPUs, whose 2-producer prediction "
            "of this workload and policy was off by more than 25% (or was not made: "
            "validated at 1 producer only): 64 allocs/cycle, 4p") in line
    # the 2-producer cell the validation measured off is marked too, apart
    assert ("unvalidated: within the validation's 2 usable CPUs, where its 2-producer "
            "prediction of this workload and policy was off by more than 25% or not made "
            "(measure these cells instead): 64 allocs/cycle, 2p") in line
    spec = _run(al.presets["libarena-transfer"], producers=[4],
                cal=_validated([["malloc-free", "libarena-transfer"]]))
    assert any(x.startswith("unvalidated: ") for x in spec.table("alloc_ns").warning_lines())
    ok = _run(producers=[2, 4], cal=_validated([["malloc-free", "libarena-spill"]]))
    assert not any("unvalidated" in x for x in ok.table("alloc_ns").warning_lines())


def test_unvalidated_cell_never_decides_a_verdict():
    cal = _validated([["malloc-free", "libarena-transfer"]])
    res = _run(["libarena-transfer", "libarena-spill"], producers=[2, 4], cal=cal)
    for n in (2, 4):  # the validated CPUs' cell too: the validation found it off
        v = al.claim(res, "libarena-transfer", "libarena-spill", where={"producers": n}).judge()
        assert v.outcome == "inconclusive"
        assert "unvalidated predictions never decide" in v.reason


def test_json_keeps_mode_calibration_and_seed(tmp_path):
    cal = _validated([])
    res = _run(producers=[2], cal=cal, seed=7)
    path = tmp_path / "r.json"
    res.to_json(str(path))
    back = al.Result.from_json(str(path))
    assert back == res
    p = back.points[0]
    assert p.params["cpu"] == "simulated" and p.info["cpu_mode"] == "simulated"
    assert back.metadata["run"]["simulated"]["calibration"] == cal.to_dict()
    assert back.metadata["run"]["seed"] == 7 and len(p.info["seeds"]) == QUICK["runs"]
    assert p.info["sim"]["calibration_id"] == _id(cal)
    assert back.table("alloc_ns").sim_heading().startswith("simulated: predicted")


def test_simulated_runs_carry_no_machine_warnings(simres):
    st = simres.stats("alloc_ns")[0][1]
    assert np.isnan(st.preempt_max) and np.isnan(st.steal_max) and np.isnan(st.phase_min)
    assert not any(w.kind in ("preempted", "steal", "short") for w in st.warnings)


def test_plot_marks_simulated_points(simres, measured):
    import matplotlib
    matplotlib.use("Agg")
    fig = al.plot.latency(simres, "alloc_ns")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "simulated (predicted)" in labels
    assert "libarena-transfer (simulated)" in labels
    line = [c for c in fig.axes[0].containers if c.get_label() ==
            "libarena-transfer (simulated)"][0].lines[0]
    assert line.get_linestyle() == ":" and line.get_marker() == "D"
    fig2 = al.plot.latency(measured, "alloc_ns")
    assert "simulated (predicted)" not in [t.get_text() for t in fig2.legends[0].get_texts()]


def test_verdict_on_two_simulated_sides_is_predicted(simres, measured):
    v = al.claim(simres, "libarena-transfer", "libarena-spill", where={"producers": 4}).judge()
    assert v.kind == "predicted"
    assert v.text().startswith("[predicted: %s] " % v.outcome)
    assert v.to_dict()["kind"] == "predicted"
    m = al.claim(measured, "libarena-transfer", "libarena-spill").judge()
    assert m.kind == "measured" and "predicted" not in m.text()


def test_host_steal_never_makes_a_prediction_inconclusive(simres):
    """Steal time is the host's: it moves no virtual clock, so a predicted
    verdict never blames "an unstable machine"."""
    import copy
    stolen = copy.deepcopy(simres)
    for p in stolen.points:
        p.data["steal_pct"] = np.full(len(p.data["alloc_ns"]), 50.0)
    for where in ({"producers": 1}, {"producers": 4}):
        a = al.claim(simres, "libarena-transfer", "libarena-spill", where=where).judge()
        b = al.claim(stolen, "libarena-transfer", "libarena-spill", where=where).judge()
        assert "unstable machine" not in b.reason and (a.outcome, a.reason) == (
            b.outcome, b.reason)


def test_verdict_refuses_simulated_against_measured(simres, measured):
    both = simres.filter(producers=1, policy="libarena-transfer") + \
        measured.filter(policy="libarena-transfer")
    with pytest.raises(S.MixedModesError) as e:
        al.claim(both, "simulated", "pinned", param="cpu")
    assert "cpu=simulated" in str(e.value) and "cpu=pinned" in str(e.value)
    assert e.value.modes == ("pinned", "simulated")


def test_compare_of_two_simulated_sides_is_predicted(simres):
    c = al.compare(simres, baseline="libarena-spill")
    assert c.kind == "predicted"
    assert all(cell.verdict().startswith("predicted ") for cell in c.cells)
    assert ("Predicted: both sides ran on simulated CPUs (calibration %s); the marks are "
            "predictions, not measurements." % _id(_cal())) in c.legend()


def test_heatmap_of_a_predicted_comparison_says_so(simres, measured):
    import matplotlib
    matplotlib.use("Agg")
    fig = al.plot.heatmap(al.compare(simres, baseline="libarena-spill"))
    title = " ".join(fig.axes[0].get_title().split())
    assert title.endswith("(simulated (predicted), calibration %s)" % _id(_cal()))
    fig2 = al.plot.heatmap(al.compare(measured, baseline="libarena-spill"))
    assert "predicted" not in fig2.axes[0].get_title()


def test_compare_refuses_simulated_against_measured(simres, measured):
    a = measured.filter(policy="libarena-transfer")
    b = simres.filter(policy="libarena-transfer", producers=1)
    with pytest.raises(S.MixedModesError) as e:
        al.compare(a, b)
    msg = str(e.value)
    assert "a simulated side (cpu=simulated, predictions) against a measured side " \
        "(cpu=pinned)" in msg
    c = al.compare(measured, baseline="libarena-spill")
    assert c.kind == "measured" and not any("predicted" in x.verdict() for x in c.cells)


def test_compare_of_a_result_with_both_kinds_keeps_them_apart(simres, measured):
    """One result of pinned and simulated cells against its baseline: each
    predicted cell says so and is judged, corrected and averaged as it is
    alone, never in one family or one geometric mean with a measurement."""
    from alloclab.judge import compare as C
    both = al.compare(measured + simres, baseline="libarena-spill")
    alone = {False: al.compare(measured, baseline="libarena-spill"),
             True: al.compare(simres, baseline="libarena-spill")}
    assert both.kind == C.MIXED and both.predicted == "calibration %s" % _id(_cal())
    for cell in both.cells:
        pred = cell.key["cpu"] == "simulated"
        assert cell.predicted == pred
        assert cell.verdict().startswith("predicted ") == pred
        twin = alone[pred].cell(producers=cell.key["producers"], metric=cell.metric)
        assert (cell.p_adj, cell.verdict()) == (twin.p_adj, twin.verdict())
    for pred in (False, True):
        g = both.geomean(predicted=pred)
        assert g.ratio == alone[pred].geomean().ratio
        assert g.label().endswith("(predicted)") == pred
    legend = " ".join(both.legend())
    assert "over the %d measured cells and, apart, the %d predicted ones" % (
        len(alone[False].cells), len(alone[True].cells)) in legend
    assert "Predicted: the cells marked \"predicted\" ran on simulated CPUs" in legend
    rows = {label: cells for _, label, cells in both.grid()}
    assert all(label.endswith(", predicted (ns)") == all(c.predicted for c in cells.values())
               for label, cells in rows.items())
    import matplotlib
    matplotlib.use("Agg")
    title = " ".join(al.plot.heatmap(both).axes[0].get_title().split())
    assert title.endswith("(rows marked predicted: simulated (predicted), calibration %s)"
                          % _id(_cal())), title


def test_compare_refuses_two_calibrations(simres):
    """The same policy predicted under two cost models differs by their
    costs, not by what ran: never judged as a change."""
    other = sim.Calibration(dict(COSTS, **{"buddy.lock_acquired": 300.0}), 60.0, 1.0,
                            {"test": True})
    a = simres.filter(policy="libarena-spill", producers=4)
    b = _run("libarena-spill", producers=(4,), cal=other)
    with pytest.raises(S.TwoCalibrationsError) as e:
        al.compare(a, b)
    assert "one side was predicted with calibration %s, the other with %s" % (
        _id(_cal()), _id(other)) in str(e.value)
    assert e.value.ids == ((_id(_cal()),), (_id(other),))
    assert al.compare(a, _run("libarena-spill", producers=(4,))).kind == "predicted"


def _numbers(res):
    return {(p.params["policy"], p.params["producers"]):
            {k: v for k, v in p.data.items() if k not in MACHINE} for p in res.points}


def test_parallel_sweep_gives_the_serial_numbers():
    kw = dict(producers=[1, 4], cpu="simulated", calibration=_cal(), runs=2, cycles=40,
              warmup_cycles=2, mem_sample=0)
    pols = ["libarena-transfer", "libarena-spill"]
    serial = al.sweep("malloc-free", pols, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConcurrentExecutorWarning)
        with cf.ProcessPoolExecutor(2) as ex:
            par = al.sweep("malloc-free", pols, executor=ex, **kw)
    a, b = _numbers(serial), _numbers(par)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].keys() == b[k].keys()
        for m in a[k]:
            assert np.array_equal(a[k][m], b[k][m], equal_nan=True), (k, m)
    assert [p.info["sim"] for p in serial.points] == [p.info["sim"] for p in par.points]


def test_pool_still_refused_for_measured_cells():
    with cf.ThreadPoolExecutor(2) as ex:
        with pytest.raises(al.errors.InvalidArgument, match="side by side"):
            al.sweep("malloc-free", "buddy", producers=[1], cpu="pinned", executor=ex, **QUICK)


@pytest.mark.parametrize("ratio,decides", [(0.64, False), (0.65, False), (1.0, False),
                                           (0.8, False), (0.2, True), (1.7, True),
                                           (1.5, True)])
def test_a_predicted_difference_within_the_policies_factors_never_decides(ratio, decides):
    """Each policy's predicted costs carry its own calibration factor, so
    two policies running the same code are predicted apart by the factors'
    ratio (0.42/0.656 = 0.64x here): an effect no larger is not decided."""
    from alloclab.judge import verdict as J
    old = J.Side(np.full(5, 100.0), cpu_mode="simulated")
    new = J.Side(np.full(5, 100.0 * ratio), cpu_mode="simulated")
    old.factors, new.factors = [0.656, 1.0], [0.420, 1.0]
    cell = J.Claim.compare("cell", "alloc_ns", old, new)
    assert cell.predicted and cell.decides is decides
    if not decides:
        assert cell.problems == [("factors", "%.2fx predicted, within the 0.64x of the two "
                                  "policies' calibration factors" % ratio)]
    free = J.Claim.compare("cell", "free_ns", old, new)  # the same free factors: decides
    assert free.decides
    old.factors = None  # factors not recorded (an older file): nothing to compare
    assert J.Claim.compare("cell", "alloc_ns", old, new).decides


def test_runs_record_their_policys_factors():
    cal = sim.Calibration(COSTS, 60.0, 1.0, {"test": True},
                          scales={"libarena-spill": [0.5, 2.0]})
    r = _run(["libarena-spill", "libarena-transfer"], producers=(1,), cal=cal, runs=2)
    got = {p.params["policy"]: S.factors([p]) for p in r.points}
    assert got["libarena-spill"] == [0.5, 2.0]
    assert got["libarena-transfer"] == [0.5, 2.0]  # the geometric means of those fitted


def test_compare_of_two_policies_within_their_factors_is_inconclusive():
    """compare judges predicted cells as claims do: spill and transfer at
    4 allocs/cycle run the same cache hits, predicted apart only by their
    factors, and the change loses its mark."""
    cal = sim.Calibration(COSTS, 60.0, 1.0, {"test": True},
                          scales={"libarena-spill": [1.0, 1.0],
                                  "libarena-transfer": [0.5, 1.0]})
    r = _run(["libarena-spill", "libarena-transfer"], producers=(1,), cal=cal,
             allocs_per_cycle=4)
    c = al.compare(r, baseline="libarena-spill", metric=["alloc_ns", "free_ns"])
    by = {cell.metric: cell for cell in c.cells}
    assert by["alloc_ns"].factors == pytest.approx(0.5) and by["alloc_ns"].mark == ""
    assert by["alloc_ns"].verdict() == ("predicted inconclusive: within the policies' "
                                        "calibration factors (0.50x)")
    assert by["free_ns"].factors is None  # the same free factors: judged as before


def test_counter_tables_say_which_columns_are_simulated(simres, measured):
    """The counts of simulated CPUs are of the simulated schedule: the
    counters block says so under its title, as the latency table does."""
    from alloclab.cli import format as F
    text = F.counters_text(simres)
    lines = text.splitlines()
    i = lines.index("counters per op, libarena-transfer (columns: producers)")
    assert lines[i + 1] == "simulated: predicted (calibration %s): every column" % _id(_cal())
    assert "_simulated: predicted (calibration %s): every column_" % _id(_cal()) in \
        F.counters_markdown(simres)
    assert "simulated" not in F.counters_text(measured)


def test_stats_of_a_prediction_say_so_and_of_the_hosts_measure_do_not(simres):
    (_, st), = simres.stats("alloc_ns", policy="libarena-transfer", producers=4)
    assert st.predicted and repr(st).startswith("Stats(simulated (predicted): n=3")
    for m in ("steal_pct", "mem_rss"):
        (_, host), = simres.stats(m, policy="libarena-transfer", producers=4)
        assert not host.predicted and "predicted" not in repr(host), m
