"""Simulated CPUs: determinism, lock semantics in virtual time, refusals,
the calibration's round trip and every policy of the contract suite."""

import json
import os
import re

import numpy as np
import pytest

import alloclab as al
from alloclab import errors
from alloclab.measure import run as mrun
from alloclab.measure import sim

QUICK = dict(runs=1, cycles=40, warmup_cycles=2, mem_sample=0)


def _cal(costs=None, line=0.0, lph=0.0):
    return sim.Calibration(costs or {}, line, lph, {"test": True})


def _run(policy, producers, cal, **kw):
    opts = dict(QUICK)
    opts.update(kw)
    return al.run(opts.pop("workload", "malloc-free"), policy, producers=producers,
                  cpu="simulated", calibration=cal, **opts)


def _raw(policy, producers, cal, seed=1, **kw):
    params = dict(QUICK)
    if kw.get("workload", "malloc-free") == "malloc-free":
        params["allocs_per_cycle"] = 16
    params.update(kw)
    params.pop("runs")
    _, tasks = mrun.plan(params.pop("workload", "malloc-free"), policy, producers=producers,
                         cpu="simulated", calibration=cal, seed=seed, runs=1, **params)
    return mrun.run_once(tasks[0], 0)


@pytest.fixture(scope="module")
def cal():
    return sim.calibrate(["libarena-spill", "libarena-transfer", "buddy"], duration=0.05,
                         line_transfer=50.0, lines_per_handoff=1.0)


def test_same_seed_same_run(cal):
    a = _raw("libarena-transfer", 8, cal, seed=3)
    b = _raw("libarena-transfer", 8, cal, seed=3)
    for k in ("alloc_ns", "free_ns", "alloc_ops", "free_ops", "elapsed_ns"):
        assert a[k] == b[k], k
    assert a["layers"] == b["layers"]
    assert a["sim"]["switches"] == b["sim"]["switches"] > 0


def test_seed_decides_ties(cal):
    runs = {_raw("libarena-spill", 4, cal, seed=s)["sim"]["switches"] for s in range(1, 5)}
    assert len(runs) > 1  # the tie-breaks differ between seeds


def test_one_lock_closed_form():
    # buddy alone: one lock per op, the hold is the only cost (0.5 ns floors
    # aside); N CPUs in a FIFO queue on it: each op waits N holds.
    hold = 100.0
    costs = {"seg.acq-rel": hold}
    for n in (1, 4):
        raw = _raw("buddy", n, _cal(costs), allocs_per_cycle=8, cycles=50)
        per_op = (raw["alloc_ns"] + raw["free_ns"]) / (raw["alloc_ops"] + raw["free_ops"])
        assert per_op == pytest.approx(n * hold, rel=0.03), n
        if n > 1:
            assert raw["sim"]["lock_waits"] > 0


def test_handoff_costs_lines():
    base = {"seg.acq-rel": 100.0}
    a = _raw("buddy", 2, _cal(base, 0.0, 0.0), allocs_per_cycle=8)
    b = _raw("buddy", 2, _cal(base, 50.0, 2.0), allocs_per_cycle=8)
    assert b["sim"]["handoffs"] > 0 and b["sim"]["line_ns"] > 0
    assert b["alloc_ns"] / b["alloc_ops"] > a["alloc_ns"] / a["alloc_ops"]


def test_alloc_and_free_segments_have_their_own_factors():
    # one producer, buddy alone: each op is one hold; the alloc part's
    # segments cost twice the table, the free part's once
    cal = sim.Calibration({"seg.acq-rel": 100.0}, 0.0, 0.0, {"test": True},
                          scales={"buddy": [2.0, 1.0]})
    raw = _raw("buddy", 1, cal, allocs_per_cycle=8, cycles=50)
    a, f = raw["alloc_ns"] / raw["alloc_ops"], raw["free_ns"] / raw["free_ops"]
    assert a == pytest.approx(200.0, rel=0.03) and f == pytest.approx(100.0, rel=0.03)
    flipped = sim.Calibration(cal.costs, 0.0, 0.0, scales={"buddy": [1.0, 2.0]})
    raw = _raw("buddy", 1, flipped, allocs_per_cycle=8, cycles=50)
    assert raw["alloc_ns"] / raw["alloc_ops"] < raw["free_ns"] / raw["free_ops"]


def test_scales_load_as_pairs_and_bad_ones_are_refused():
    d = _cal({"seg.acq-rel": 1.0}).to_dict()
    d["scales"] = {"buddy": 0.5}  # a calibration made before the factors were split
    assert sim.Calibration.from_dict(d).scale_for("buddy") == [0.5, 0.5]
    d["scales"] = {"buddy": [0.5, 0.7], "slab": [2.0, 2.0]}
    back = sim.Calibration.from_dict(d)
    assert back.scale_for("buddy") == [0.5, 0.7]
    assert back.scale_for("other") == pytest.approx([1.0, (0.7 * 2.0) ** 0.5])
    for bad in ([0.5], [0.5, 0], "x", -1, [True, 1.0]):
        d["scales"] = {"buddy": bad}
        with pytest.raises(errors.InvalidArgument, match="alloc, free"):
            sim.Calibration.from_dict(d)


def test_offsets_add_per_call_at_the_top_and_calls_are_counted():
    # buddy alone, one producer: one call per op, each one hold of 100 ns;
    # an offset of -30 ns per allocation and +20 per free moves each op by it
    base = sim.Calibration({"seg.acq-rel": 100.0}, 0.0, 0.0, {"test": True},
                           scales={"buddy": [1.0, 1.0]})
    off = sim.Calibration(base.costs, 0.0, 0.0, {"test": True}, scales=base.scales,
                          offsets={"buddy": [-30.0, 20.0]})
    a = _raw("buddy", 1, base, allocs_per_cycle=8, cycles=50)
    b = _raw("buddy", 1, off, allocs_per_cycle=8, cycles=50)
    assert a["sim"]["phase_calls"] == [a["alloc_ops"], a["free_ops"]]
    assert b["alloc_ns"] / b["alloc_ops"] == pytest.approx(
        a["alloc_ns"] / a["alloc_ops"] - 30.0, abs=0.5)
    assert b["free_ns"] / b["free_ops"] == pytest.approx(
        a["free_ns"] / a["free_ops"] + 20.0, abs=0.5)
    # a policy with no factors of its own gets the means of the others' and no offset
    assert off.offset_for("buddy") == [-30.0, 20.0] and off.offset_for("slab") == [0.0, 0.0]


def test_factor_and_offset_solve_two_cells_exactly():
    # measured = 0.8 x simulated - 4 x calls, per op, on two cells
    s, n = np.array([18.0, 37.0]), np.array([1.0, 1.1])
    m = 0.8 * s - 4.0 * n
    f, o = sim._factor_offset(m, s, n)
    assert (f, o) == (pytest.approx(0.8), pytest.approx(-4.0))
    # one cell, or a solution without a positive factor: the geometric mean, no offset
    assert sim._factor_offset(m[:1], s[:1], n[:1]) == (pytest.approx(m[0] / s[0]), 0.0)
    f, o = sim._factor_offset(np.array([10.0, 5.0]), s, np.array([1.0, 1.0]))
    assert o == 0.0 and f == pytest.approx(np.sqrt(10.0 / 18.0 * 5.0 / 37.0))


def test_an_offset_larger_than_a_call_is_refused():
    # one call per op in both cells, costs 10% apart in the table but 2.1x apart
    # measured: the exact pair (13, -1100 ns per call) takes more than a call's
    # whole measured time, so the geometric mean stands, without offset
    s, n = np.array([90.0, 100.0]), np.array([1.0, 1.0])
    m = 13.0 * s - 1100.0 * n
    f, o = sim._factor_offset(m, s, n)
    assert o == 0.0 and f == pytest.approx(np.sqrt(m[0] / s[0] * m[1] / s[1]))


def test_offsets_round_trip_and_bad_ones_are_refused():
    d = _cal({"seg.acq-rel": 1.0}).to_dict()
    d["scales"] = {"buddy": [0.5, 0.7]}
    assert sim.Calibration.from_dict(d).offset_for("buddy") == [0.0, 0.0]  # made before them
    d["offsets"] = {"buddy": [-2.5, 1.0]}
    back = sim.Calibration.from_dict(json.loads(json.dumps(sim.Calibration.from_dict(d).to_dict())))
    assert back.offset_for("buddy") == [-2.5, 1.0]
    for bad in ([0.5], "x", [float("nan"), 1.0], [True, 1.0]):
        d["offsets"] = {"buddy": bad}
        with pytest.raises(errors.InvalidArgument, match="offsets"):
            sim.Calibration.from_dict(d)


def test_objects_move_their_lines_between_cpus():
    # one CPU writes every object it touches: no object's line moves; with a
    # producer and a consumer every consumer's free moves the producer's
    # line, and the producer's next allocation of the block moves it back
    cal = _cal({"seg.acq-rel": 10.0}, line=50.0, lph=0.0)
    one = _raw("buddy", 1, cal, allocs_per_cycle=8)
    assert one["sim"]["object_lines"] == 0
    two = _raw("buddy", 2, cal, workload="xmalloc", batch=16)
    assert two["cross_frees"] > 0
    assert two["sim"]["object_lines"] >= two["cross_frees"]
    assert two["sim"]["lines"] >= two["sim"]["object_lines"]
    free = _raw("buddy", 2, _cal({"seg.acq-rel": 10.0}), workload="xmalloc", batch=16)
    assert free["sim"]["line_ns"] == 0 < two["sim"]["line_ns"]
    assert two["free_ns"] / two["free_ops"] > free["free_ns"] / free["free_ops"]


def _coh(store=0.0, load=1.0, takes=False):
    return {"store_fraction": store, "load_fraction": load, "read_takes_line": takes}


def _with_coh(coh, line=50.0):
    return sim.Calibration({"seg.acq-rel": 10.0}, line, 0.0, {"test": True}, coherence=coh)


def test_stores_pay_their_share_of_a_line():
    # malloc-xfree on two CPUs: an allocation's caller stores into objects
    # the other CPU freed. Every store that takes a line is counted; with
    # store_fraction f it costs f of a line (50 ns), without it nothing, and
    # every whole line costs 50 ns (load_fraction 1, no handoff lines)
    for f in (0.0, 0.2):
        st = _raw("libarena-spill", 2, _with_coh(_coh(store=f)), workload="malloc-xfree")["sim"]
        assert st["store_lines"] > 0
        assert st["line_ns"] == pytest.approx(50.0 * (st["lines"] + f * st["store_lines"]),
                                              rel=1e-6), f


def test_later_loads_of_a_segment_overlap():
    # the buddy's holds load headers other CPUs wrote: with load_fraction
    # below 1 every load after a segment's first costs that share, so the
    # same lines cost less time; the lines counted are the same kind
    whole = _raw("buddy", 2, _with_coh(_coh()), allocs_per_cycle=16)
    part = _raw("buddy", 2, _with_coh(_coh(load=0.1)), allocs_per_cycle=16)
    assert whole["sim"]["lines"] > whole["sim"]["handoffs"] > 0
    per_line = [r["sim"]["line_ns"] / r["sim"]["lines"] for r in (whole, part)]
    assert per_line[0] == pytest.approx(50.0, rel=0.01)
    assert per_line[1] < 0.9 * per_line[0]


def test_reads_that_take_lines_move_them_back():
    # migratory sharing: a CPU's load of the other's line takes it whole, so
    # the writer's next load of it moves it back (more whole lines); where
    # reads share lines, both keep a copy and the next store invalidates the
    # other's instead (more stores that take a line)
    shared = _raw("buddy", 2, _with_coh(_coh(store=0.2)), workload="xmalloc", batch=16)
    taken = _raw("buddy", 2, _with_coh(_coh(store=0.2, takes=True)), workload="xmalloc",
                 batch=16)
    assert taken["sim"]["lines"] > shared["sim"]["lines"]
    assert taken["sim"]["store_lines"] < shared["sim"]["store_lines"]


@pytest.mark.parametrize("bad", [
    {"store_fraction": 1.5, "load_fraction": 1.0, "read_takes_line": False},
    {"store_fraction": 0.1, "load_fraction": -1, "read_takes_line": False},
    {"store_fraction": 0.1, "load_fraction": 0.5, "read_takes_line": 1},
    {"store_fraction": 0.1, "read_takes_line": False},
    "fast"])
def test_bad_coherence_is_refused(cal, bad):
    d = cal.to_dict()
    d["coherence"] = bad
    with pytest.raises(errors.InvalidArgument, match="coherence"):
        sim.Calibration.from_dict(d)


def test_a_calibration_without_coherence_keeps_the_older_model(cal):
    d = cal.to_dict()
    del d["coherence"]
    back = sim.Calibration.from_dict(d)
    assert back.coherence == sim.NO_COHERENCE
    assert sim.Calibration.from_dict(cal.to_dict()).coherence == cal.coherence


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the probe needs two CPUs")
def test_coherence_probe_measures_shares_of_a_transfer():
    coh, ns = sim.coherence_probe(line_ns=50.0, lines=64, tries=5)
    assert set(coh) == set(sim.NO_COHERENCE)
    assert 0 < coh["store_fraction"] <= 1 and 0 < coh["load_fraction"] <= 1
    assert isinstance(coh["read_takes_line"], bool)
    assert ns["line_ns"] == 50.0 and ns["store_ns"] > 0 and ns["reread_ns"] > 0


def test_coherence_probe_refuses_bad_sizes():
    with pytest.raises(errors.SimulationError, match="Invalid argument"):
        sim.coherence_probe(line_ns=50.0, lines=100, tries=5)


def test_buddy_holds_pay_for_the_lines_they_touch():
    # lines_per_handoff 0: a handoff moves the lock's line only; every other
    # line is a header, list head or metadata byte the buddy touched after
    # another CPU wrote it, or an object's first line
    cal = _cal({"seg.acq-rel": 10.0}, line=50.0, lph=0.0)
    two = _raw("buddy", 2, cal, allocs_per_cycle=16)
    st = two["sim"]
    assert st["lines"] > st["handoffs"] + st["object_lines"] > 0
    assert _raw("buddy", 1, cal, allocs_per_cycle=16)["sim"]["lines"] == 0


def test_lock_budget_times_out_in_virtual_time_and_is_retried():
    # a hold longer than the arena lock's 250 ms budget: a waiter gives up at
    # its deadline in virtual time, and the workload tries again, counting
    # each refusal exactly as the buddy counts its lock's
    raw = _raw("buddy", 4, _cal({"seg.acq-rel": 300e6}), allocs_per_cycle=1, cycles=3,
               warmup_cycles=0)
    wl = dict(raw["metrics"])
    ctr = dict(raw["layers"][0]["counters"])
    assert wl["free_refused_timedout"] == ctr["lock_failed_frees"] > 0
    assert wl["alloc_refused_timedout"] == ctr["lock_failed_allocs"] > 0
    assert raw["layers"][0]["leaked"] == 0 and raw["free_ops"] == raw["alloc_ops"] == 12


def test_a_lock_held_past_the_retry_second_ends_the_run():
    # holds of a virtual second: a second of refusals is the workload's error
    with pytest.raises(errors.RunError, match="ETIMEDOUT: refused for 1 s: a lock"):
        _raw("buddy", 4, _cal({"seg.acq-rel": 1e9}), allocs_per_cycle=1, cycles=3,
             warmup_cycles=0)


@pytest.mark.parametrize("n", [1, 4, 64])
@pytest.mark.parametrize("policy", ["buddy", "libarena-spill", "libarena-transfer",
                                    "libarena-magazine", "slab", "sheaves > slab"])
def test_contract_policies_run_and_tear_down(policy, n):
    try:
        raw = _raw(policy, n, _cal({"seg.acq-rel": 20.0, "seg.op-op": 5.0}),
                   allocs_per_cycle=8, cycles=5, warmup_cycles=1)
    except (errors.UnknownNameError, errors.PolicySyntaxError):
        pytest.skip("no policy %s here" % policy)
    assert raw["cpu_mode"] == "simulated"
    assert raw["ncpu_model"] == n
    assert all(l["leaked"] == 0 for l in raw["layers"])
    assert raw["alloc_ops"] == raw["free_ops"] == n * 5 * 8


def test_uncalibrated_terms_are_named():
    raw = _raw("libarena-transfer", 2, _cal({"seg.acq-rel": 10.0}))
    assert raw["sim"]["uncalibrated"]
    assert all("." in n for n in raw["sim"]["uncalibrated"])


def test_calibration_simulates_no_more_than_the_measured_cycles(monkeypatch):
    # bpf-ma's hits have no sync point: before their costs are scaled they
    # move the simulated clock by almost nothing, so a simulated run bounded
    # by its duration alone made billions of operations (minutes). Each
    # simulated run now stops after SIM_WORK_CAP times the cycles its
    # measured runs made.
    seen = []
    orig = mrun.run_once

    def spy(task, run_index=0, **kw):
        raw = orig(task, run_index, **kw)
        seen.append((task["cpu"], task["cycles"], task["duration_ns"], raw["cycles"]))
        return raw

    monkeypatch.setattr(mrun, "run_once", spy)
    cal = sim.calibrate(["bpf-ma"], cells=sim.DEFAULT_CELLS[1:], duration=0.02)
    measured = [c for cpu, _, _, c in seen if cpu == "pinned"]
    simulated = [(cy, d, c) for cpu, cy, d, c in seen if cpu == "simulated"]
    assert len(measured) == sim.CALIBRATION_RUNS and len(simulated) >= 3
    cap = int(sim.SIM_WORK_CAP * np.median(measured))
    for cycles, duration_ns, made in simulated:
        assert (cycles, duration_ns) == (cap, 20_000_000)
        assert made <= cap
    assert cal.scales["bpf-ma"][0] > 0


def test_a_policy_the_calibration_did_not_run_warns_before_it_runs():
    import warnings
    partial = sim.Calibration({}, 0.0, 0.0, {"test": True}, scales={"buddy": 0.5})
    with pytest.warns(sim.UncalibratedPolicyWarning, match="the calibration has no "
                      "libarena-spill \\(it ran buddy\\)"):
        _run("libarena-spill", 1, partial)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sim.UncalibratedPolicyWarning)
        _run("buddy", 1, partial)          # calibrated: no warning
        _run("libarena-spill", 1, _cal())  # no factors at all: every policy gets 1
    assert sim.uncalibrated_policies(partial, ["buddy", "libarena-spill", "buddy"]) == [
        "libarena-spill"]


def test_calibration_round_trip(cal, tmp_path):
    p = tmp_path / "cal.json"
    cal.save(str(p))
    back = sim.Calibration.load(str(p))
    assert back.to_dict() == json.loads(json.dumps(cal.to_dict()))
    assert _raw("libarena-spill", 2, back)["alloc_ns"] == _raw("libarena-spill", 2, cal)[
        "alloc_ns"]


def test_bad_calibration_files(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{\"format\": \"nope\"}")
    with pytest.raises(errors.InvalidArgument, match="not an alloclab calibration"):
        sim.Calibration.load(str(p))
    p.write_text("not json")
    with pytest.raises(errors.InvalidArgument, match="not JSON"):
        sim.Calibration.load(str(p))
    with pytest.raises(errors.InvalidArgument):
        sim.Calibration.load(str(tmp_path))  # a directory


def test_workload_that_cannot_be_simulated_says_why():
    with pytest.raises(errors.InvalidArgument, match="cannot run on simulated CPUs"):
        mrun.plan("cache-scratch", "buddy", producers=2, cpu="simulated", calibration=_cal(),
                  runs=1, cycles=1)


def test_peer_cannot_be_simulated():
    with pytest.raises(errors.SimulationError, match="LD_PRELOAD"):
        mrun.plan("malloc-free", "jemalloc", cpu="simulated", calibration=_cal(), runs=1,
                  cycles=1)


def test_simulation_options_need_simulated_cpu():
    with pytest.raises(errors.InvalidArgument, match="simulated"):
        mrun.plan("malloc-free", "buddy", calibration=_cal(), runs=1, cycles=1)


def test_many_cpus_beyond_the_machine(cal):
    raw = _raw("libarena-transfer", 256, cal, allocs_per_cycle=16, cycles=3, warmup_cycles=0)
    assert raw["ncpu_model"] == 256 and raw["alloc_ops"] == 256 * 3 * 16


def test_timeline_events(cal):
    params = dict(QUICK, allocs_per_cycle=16, timeline=500)
    params.pop("runs")
    _, tasks = mrun.plan("malloc-free", "buddy", producers=4, cpu="simulated",
                         calibration=cal, runs=1, **params)
    raw = mrun.run_once(tasks[0], 0)
    ev = raw["sim"]["timeline"]
    assert 0 < len(ev) <= 500
    kinds = {e[1] for e in ev}
    assert "hold" in kinds and "cycle" in kinds
    assert {e[0] for e in ev} <= set(range(4))


def test_nnls_recovers_known_costs():
    rng = np.random.default_rng(1)
    X = rng.integers(0, 5, size=(400, 3)).astype(float)
    b = np.array([2.0, 0.0, 7.0])
    y = X @ b
    got = sim.nnls_gram(X.T @ X, X.T @ y)
    assert got == pytest.approx(b, abs=1e-6)


def test_xmalloc_and_replay_simulate_deterministically(cal):
    a = _raw("libarena-transfer", 4, cal, workload="xmalloc", batch=16)
    b = _raw("libarena-transfer", 4, cal, workload="xmalloc", batch=16)
    assert a["free_ns"] == b["free_ns"] and a["cross_frees"] == b["cross_frees"] > 0
    assert a["sim"]["lines"] > 0  # consumers' frees move the producers' lines
    runs = [al.run("replay", "libarena-transfer", cpu="simulated", calibration=cal, runs=1,
                   trace="tests/data/trace_v1.altrace") for _ in range(2)]
    assert runs[0].points[0]["alloc_ns"] == runs[1].points[0]["alloc_ns"]
    assert runs[0].points[0].info["cpu_mode"] == "simulated"


def test_threads_of_workloads_and_layers_are_daemons(cal):
    # local storage's reaper (a thread on a model CPU of its own) and
    # test_vmalloc's kworker and vmalloc's purge worker run as daemons in
    # virtual time: the runs end, repeat exactly, and the reaper frees
    # remotely every task it was handed
    ls = [_raw("bpf-ma", 1, cal, workload="local-storage-create", storage_type="task",
               batch_size=16, cycles=20) for _ in range(2)]
    m = dict(ls[0]["metrics"])
    assert m["task_frees_remote"] == m["task_frees"] > 0
    assert ls[0]["alloc_ns"] == ls[1]["alloc_ns"]
    tv = [_raw("vmalloc-default", 2, cal, workload="test_vmalloc", cycles=1, warmup_cycles=0)
          for _ in range(2)]
    assert tv[0]["alloc_ns"] == tv[1]["alloc_ns"] and tv[0]["alloc_ops"] > 0
    assert all(l["leaked"] == 0 for l in tv[0]["layers"])


def test_helper_thread_with_a_mutex_is_refused_with_its_reason():
    with pytest.raises(errors.RunError, match="irq_work=inline, ipi or signal"):
        _raw("bpf_ma(irq_work=thread) > slab", 2, _cal({"seg.acq-rel": 10.0}), cycles=2)


def test_checked_layers_run_clean_on_model_cpus():
    # the pointer checks wrap each layer and keep a thread-local nesting
    # state, switched with each model CPU: interleaved calls of four CPUs
    # are each checked as their own, and nothing is reported
    raw = _raw("libarena-transfer", 4, _cal({"seg.acq-rel": 10.0}), allocs_per_cycle=32,
               cycles=10)
    _, tasks = mrun.plan("malloc-free", "libarena-transfer", producers=4, cpu="simulated",
                         calibration=_cal({"seg.acq-rel": 10.0}), runs=1, cycles=10,
                         warmup_cycles=2, mem_sample=0, allocs_per_cycle=32)
    tasks[0]["check_mask"] = 0b111  # every layer checked
    checked = mrun.run_once(tasks[0], 0)
    assert checked["alloc_ops"] == raw["alloc_ops"]
    assert all(l["leaked"] == 0 for l in checked["layers"])


def test_every_simulated_run_carries_its_band():
    raw = _raw("buddy", 4, _cal({"seg.acq-rel": 50.0}, line=40.0, lph=1.0), allocs_per_cycle=8)
    band = raw["sim"]["band"]
    assert band["line_transfer_ns"] == [20.0, 80.0]
    mid = raw["alloc_ns"] / raw["alloc_ops"]
    # handoffs cost lines: a dearer line makes the same ops slower
    assert band["alloc_ns"][0] < mid < band["alloc_ns"][1]


def test_a_direction_that_flips_in_the_band_is_inconclusive():
    cal = _cal({"seg.acq-rel": 40.0, "seg.op-op": 5.0}, line=40.0, lph=1.0)
    a = al.run("malloc-free", "buddy", producers=4, cpu="simulated", calibration=cal,
               runs=3, cycles=20, warmup_cycles=1, mem_sample=0, allocs_per_cycle=8, seed=1)
    b = al.run("malloc-free", "buddy", producers=4, cpu="simulated", calibration=cal,
               runs=3, cycles=20, warmup_cycles=1, mem_sample=0, allocs_per_cycle=8, seed=9)
    for p in b.points:  # b: slower than a across the band ...
        p.data["alloc_ns"] = [v * 1.5 for v in p.data["alloc_ns"]]
        for band in p.info["sim"]["band"]:
            band["alloc_ns"] = [v * 1.5 for v in band["alloc_ns"]]
    c = al.compare(a, b, metric="alloc_ns", on=["producers"])
    cell = c.cells[0]
    assert cell.predicted and not cell.band_flip and cell.mark == "R"
    for p in b.points:  # ... and faster than a with the line cost halved
        for band in p.info["sim"]["band"]:
            band["alloc_ns"] = [band["alloc_ns"][0] * 0.1, band["alloc_ns"][1]]
    cell = al.compare(a, b, metric="alloc_ns", on=["producers"]).cells[0]
    assert cell.band_flip and cell.mark == ""
    assert "line-cost band" in cell.verdict()


def test_simulated_cells_run_on_a_pool_without_a_warning(cal):
    import concurrent.futures as cf
    import warnings
    with cf.ProcessPoolExecutor(2) as ex, warnings.catch_warnings():
        warnings.simplefilter("error")
        r = al.run("malloc-free", "libarena-spill", producers=[2, 4], cpu="simulated",
                   calibration=cal, runs=1, cycles=5, warmup_cycles=1, mem_sample=0,
                   executor=ex)
    assert len(r.points) == 2


def test_validation_warns_when_the_line_cost_moved():
    row = {"workload": "malloc-free", "allocs_per_cycle": 64, "policy": "libarena-spill",
           "producers": 2, "op": "alloc", "measured_ns": 80.0, "simulated_ns": 88.0,
           "ratio": 1.1, "calibration_cell": False}
    calm = sim.Validation([row], 2, 0.25, {"calibration": 60.0, "measured": [58.0, 62.0]})
    moved = sim.Validation([row], 2, 0.25, {"calibration": 69.0, "measured": [55.0, 54.0]})
    assert calm.line_drift() == pytest.approx(2 / 60)
    assert "line transfer: 60.0 ns at calibration, 58.0 and 62.0 ns" in calm.text()
    assert "warning" not in calm.text()
    assert moved.line_drift() == pytest.approx(15 / 69)
    assert "the line cost moved 22% since the calibration" in moved.text()
    assert sim.Validation([row], 1, 0.25).line_drift() is None
    assert moved.to_dict()["line_ns"] == {"calibration": 69.0, "measured": [55.0, 54.0]}


def test_a_validation_at_one_producer_says_why_it_validates_nothing_above():
    row = {"workload": "malloc-free", "allocs_per_cycle": 64, "policy": "libarena-spill",
           "producers": 1, "op": "alloc", "measured_ns": 80.0, "simulated_ns": 81.0,
           "ratio": 81 / 80, "calibration_cell": False}
    one = sim.Validation([row], 2, 0.25)
    assert one.unvalidated() == [("malloc-free", "libarena-spill")]
    text = one.text()
    assert "the 2-producer figures" not in text  # there are none
    assert text.endswith("unvalidated at every producer count (measured off within 2 CPUs, "
                         "unchecked above them): malloc-free on libarena-spill (no "
                         "2-producer run to validate)")
    two = sim.Validation([row, dict(row, producers=2, ratio=1.5)], 2, 0.25).text()
    assert "the 2-producer figures" in two
    assert two.endswith("unchecked above them): malloc-free on libarena-spill")


@pytest.mark.parametrize("change,needle", [
    ({"line_transfer_ns": 1e19}, "line_transfer_ns must be a number from 0 to 1e+06"),
    ({"line_transfer_ns": float("inf")}, "line_transfer_ns must be a number from 0 to 1e+06"),
    ({"lines_per_handoff": 1e12}, "lines_per_handoff must be a number from 0 to 1e+06"),
    ({"lines_per_handoff": None}, "lines_per_handoff must be a number"),
    ({"costs": {"seg.acq-rel": 1e300}}, "costs must map term names to ns from 0 to 1e+09"),
    ({"costs": {"seg.acq-rel": -1.0}}, "costs must map term names"),
    ({"info": "x"}, "info must be an object, not 'x'"),
    ({"jitter": 99}, "jitter must be a number from 0 to 4, not 99"),
    ({"scales": {"buddy": float("nan")}}, "scales must map policies"),
    ({"offsets": {"buddy": [0.0, 1e300]}}, "offsets must map policies"),
])
def test_a_calibration_out_of_range_is_refused(change, needle):
    d = dict(_cal({"seg.acq-rel": 20.0}, 60.0, 1.0).to_dict(), **change)
    with pytest.raises(errors.InvalidArgument, match="^calibration: " + re.escape(needle)):
        sim.Calibration.from_dict(d)
    args = dict(costs=d["costs"], line_transfer_ns=d["line_transfer_ns"],
                lines_per_handoff=d["lines_per_handoff"], info=d["info"], jitter=d["jitter"],
                scales=d["scales"], offsets=d["offsets"])
    with pytest.raises(errors.InvalidArgument, match=re.escape(needle)):
        sim.Calibration(**args)  # the constructor checks the same


def test_a_calibration_file_larger_than_the_limit_is_refused_unread(tmp_path):
    p = tmp_path / "huge.json"
    with open(p, "wb") as f:
        f.truncate(sim.FILE_LIMIT + 1)  # sparse: no disk used
    with pytest.raises(errors.InvalidArgument, match="more than the %d this reads"
                       % sim.FILE_LIMIT):
        sim.Calibration.load(str(p))


@pytest.mark.parametrize("kw,err,needle", [
    (dict(policies=[]), errors.ParameterTypeError, "policies must be"),
    (dict(policies=["buddy"], cells=["bogus"]), errors.ParameterTypeError, "cells must be"),
    (dict(policies=["buddy"], cells=5), errors.ParameterTypeError, "cells must be"),
    (dict(policies=["buddy"], duration=1e-9), errors.ParameterRangeError, "duration=1e-09"),
    (dict(policies=["buddy"], duration=0), errors.ParameterRangeError, "duration=0"),
    (dict(policies=["buddy"], runs=0), errors.ParameterRangeError, "runs=0"),
    (dict(policies=["buddy"], line_transfer="x"), errors.ParameterRangeError,
     "line_transfer='x'"),
    (dict(policies=["buddy"], line_transfer=-5), errors.ParameterRangeError,
     "line_transfer=-5"),
    (dict(policies=["buddy"], lines_per_handoff=float("inf")), errors.ParameterRangeError,
     "lines_per_handoff=inf"),
])
def test_calibrate_checks_its_arguments_before_it_measures(kw, err, needle):
    with pytest.raises(err, match=re.escape(needle)):
        sim.calibrate(**kw)


def test_validate_takes_a_calibration_file_as_run_does(tmp_path):
    with pytest.raises(errors.InvalidArgument, match="calibration file .*no such file"):
        sim.validate(str(tmp_path / "missing.json"), ["buddy"])


def test_a_policys_factors_are_found_under_any_spelling_of_its_stack():
    cal = sim.Calibration({"seg.acq-rel": 20.0}, 50.0, 1.0, {"test": True},
                          scales={"libarena-spill": [1.5, 1.2], "buddy": [1.0, 1.0]},
                          offsets={"libarena-spill": [3.0, 4.0]})
    for name in ("libarena-spill", "percpu > buddy", "percpu(capacity=16, batch=8) > buddy"):
        assert cal.own_key(name) == "libarena-spill", name
        assert cal.scale_for(name) == [1.5, 1.2] and cal.offset_for(name) == [3.0, 4.0]
        assert sim.uncalibrated_policies(cal, [name]) == []
    assert cal.own_key("libarena-transfer") is None
    assert sim.uncalibrated_policies(cal, ["libarena-transfer"]) == ["libarena-transfer"]
    assert cal.offset_for("libarena-transfer") == [0.0, 0.0]
    with pytest.warns(sim.UncalibratedPolicyWarning, match="has no libarena-transfer"):
        r = al.run("malloc-free", ["percpu > buddy", "libarena-transfer"], producers=2,
                   cpu="simulated", calibration=cal, runs=1, cycles=10)
    borrowed = {p.params["policy"]: p.info["sim"].get("borrowed_scale") for p in r.points}
    assert borrowed == {"percpu > buddy": None, "libarena-transfer": True}
    line = next(x for x in r.table("alloc_ns").to_text().splitlines()
                if "borrowed factors" in x)
    assert "percpu > buddy" not in line


@pytest.mark.parametrize("cpu,stats", [("simulated", "off"), (["pinned", "simulated"],
                                                                ["lite", "off"])])
def test_stats_off_is_refused_on_simulated_cpus(cpu, stats):
    # the model charges counted events: at off the prediction would drop them
    with pytest.raises(errors.InvalidArgument) as ei:
        al.run("malloc-free", "buddy", producers=2, cpu=cpu, stats=stats,
               calibration=_cal({"seg.acq-rel": 20.0}), runs=1, cycles=5)
    assert ei.value.value == "off" and ei.value.valid == ("lite", "full")
    assert str(ei.value).startswith("stats='off' cannot run on simulated CPUs")
    r = al.run("malloc-free", "buddy", producers=2, cpu="simulated", stats="lite",
               calibration=_cal({"seg.acq-rel": 20.0}), runs=1, cycles=5)
    assert r.points[0].params["stats"] == "lite"


def test_the_calibration_a_simulated_run_makes_warns_on_a_loaded_machine(monkeypatch):
    """A run on simulated CPUs without a calibration makes one; on a loaded
    machine its measured line cost may be another program's, and the run
    says so as `sim calibrate` does (the CLI prints it as one line)."""
    monkeypatch.setattr(mrun, "_CALIBRATIONS", {})
    calibrate = sim.calibrate  # a shorter one: the load, not the costs, is the point
    monkeypatch.setattr(sim, "calibrate", lambda pols, **kw: calibrate(pols, duration=0.01))
    monkeypatch.setattr("alloclab.host.machine.loadavg",
                        lambda root="/": {"1min": 1e6, "5min": 1e6, "15min": 1e6})
    with pytest.warns(sim.SuspectCalibrationWarning,
                      match="^the load average was 1000000.00 on .* as the calibration began"):
        al.run("malloc-free", "buddy", producers=2, cpu="simulated", runs=1, cycles=5,
               warmup_cycles=0)


def test_a_calibration_says_when_its_line_cost_is_suspect():
    quiet = sim.Calibration({}, 50.0, 1.0, {"line_transfer_tries": [50.0, 52.0, 60.0],
                                            "load_before": {"1min": 0.0}})
    assert sim.calibration_warnings(quiet) == []
    spread = quiet.with_(info=dict(quiet.info, line_transfer_tries=[15.0, 60.0, 610.0]))
    (line,) = sim.calibration_warnings(spread)
    assert line.startswith("the line transfer's ping-pong tries ranged from 15 to 610 ns")
    busy = quiet.with_(info=dict(quiet.info, load_before={"1min": 1e6}))
    (line,) = sim.calibration_warnings(busy)
    assert line.startswith("the load average was 1000000.00 on ")
    assert sim.calibration_warnings(_cal()) == []  # given: nothing measured to doubt


@pytest.mark.parametrize("workload, kw", [("xmalloc", {"batch": 16}),
                                          ("malloc-xfree", {"allocs_per_cycle": 16})])
def test_histograms_time_the_objects_line_as_the_plain_timing_does(workload, kw):
    """A store into an object whose line another CPU holds is the alloc's
    cost, with histograms on as without: the histogram loop read its clock
    before the object's line was charged, and lost the charge."""
    cal = sim.Calibration({"seg.acq-rel": 100.0}, 50.0, 1.0, {"test": True},
                          coherence={"store_fraction": 0.5, "load_fraction": 1.0,
                                     "read_takes_line": False})
    plain = _raw("libarena-transfer", 4, cal, workload=workload, timing="per_op_sum", **kw)
    hist = _raw("libarena-transfer", 4, cal, workload=workload, histogram=True, **kw)
    assert plain["sim"]["store_lines"] == hist["sim"]["store_lines"] > 0
    for k in ("alloc_ns", "free_ns", "alloc_ops", "free_ops"):
        assert plain[k] == hist[k], k
