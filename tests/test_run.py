"""run(): validation of every bad input, exact counters, results, tables, JSON."""

import concurrent.futures
import errno
import io
import json
import math
import os
import sys
import warnings

import numpy as np
import pytest

import alloclab as al
from alloclab.results import stats
from alloclab import schema
from alloclab._ffi import ffi, lib
from alloclab.measure.run import DuplicatePolicyWarning

from conftest import FAST, bottom_layers, python_under_address_limit, stacks

BOTTOMS = bottom_layers()


# ---------------------------------------------------------------- bad input

def _raises(exc, *args, match=(), **kw):
    with pytest.raises(exc) as ei:
        al.run(*args, **kw)
    for m in match:
        assert m in str(ei.value), "%r not in %r" % (m, str(ei.value))
    return ei.value


def test_unknown_workload_lists_valid():
    e = _raises(al.UnknownNameError, "nope", "buddy", match=["nope", "malloc-free", "calloc"])
    assert "malloc-free" in e.valid


def test_unknown_policy_and_layer():
    _raises(al.UnknownNameError, "malloc-free", "nosuch", match=["nosuch", "buddy", "libc"])
    _raises(al.UnknownNameError, "malloc-free", ["buddy", "libc > nosuch"], match=["nosuch"])
    _raises(al.UnknownNameError, "malloc-free", "buddy(nope=1)", match=["nope", "arena_limit"])


def test_unknown_param_lists_valid():
    e = _raises(al.UnknownNameError, "malloc-free", "buddy", bogus=3,
                match=["bogus", "allocs_per_cycle", "size"])
    assert set(e.valid) == {"size", "allocs_per_cycle"}
    # nallocs belongs to malloc, not malloc-free
    _raises(al.UnknownNameError, "malloc-free", "buddy", nallocs=3, match=["nallocs"])


@pytest.mark.parametrize("kw, bad", [
    (dict(allocs_per_cycle=1.5), "1.5"),
    (dict(allocs_per_cycle=True), "True"),
    (dict(allocs_per_cycle="16"), "'16'"),
    (dict(size=1.0), "1.0"),
    (dict(size="lots"), "lots"),
    (dict(producers=1.0), "1.0"),
    (dict(runs="3"), "'3'"),
    (dict(cycles=2.5), "2.5"),
    (dict(duration="1s"), "'1s'"),
])
def test_wrong_types(kw, bad):
    _raises(al.ParameterTypeError, "malloc-free", "buddy", match=[bad], **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(size=0), ["size=0", "1"]),
    (dict(size="1M"), ["1M", "512K", "buddy"]),
    (dict(size=[64, 1 << 20]), ["1M", "512K"]),
    (dict(allocs_per_cycle=0), ["allocs_per_cycle=0", "[1, "]),
    (dict(producers=0), ["producers=0", "[1, 1024]"]),
    (dict(producers=100000), ["producers=100000", "[1, 1024]"]),
    (dict(producers=[1, 2, 100000]), ["100000"]),
    (dict(runs=0), ["runs=0"]),
    (dict(cycles=0), ["cycles=0"]),
    (dict(duration=-1), ["duration=-1"]),
    (dict(duration=0), ["duration=0"]),
    (dict(warmup_cycles=-1), ["warmup_cycles=-1"]),
    (dict(seed=-1), ["seed=-1"]),
])
def test_out_of_range(kw, match):
    e = _raises(al.ParameterRangeError, "malloc-free", "buddy", match=match, **kw)
    assert isinstance(e, ValueError)


def test_size_above_max_of_any_policy_in_the_sweep():
    # libc takes any size, buddy does not: the sweep is refused as a whole.
    _raises(al.ParameterRangeError, "malloc-free", ["libc", "buddy"], size="1M",
            match=["buddy", "1M"])
    # libc alone takes it
    al.run("malloc-free", "libc", size="1M", allocs_per_cycle=2, **FAST)


@pytest.mark.parametrize("kw, match", [
    (dict(cpu="sideways"), ["sideways", "auto", "pinned", "virtual"]),
    (dict(cpu=["auto", "sideways"]), ["sideways"]),
    (dict(timing="fast"), ["fast", "batch", "per_op_sum"]),
])
def test_unknown_modes(kw, match):
    _raises(al.UnknownNameError, "malloc-free", "buddy", match=match, **kw)


@pytest.mark.parametrize("workload", ["malloc", "calloc"])
def test_one_producer_workloads(workload):
    _raises(al.ParameterRangeError, workload, "buddy", producers=2,
            match=[workload, "producers=2", "one producer"])


def test_pinned_needs_enough_cpus():
    n = lib.al_cpus_usable()
    _raises(al.ParameterRangeError, "malloc-free", "buddy", cpu="pinned", producers=n + 1,
            match=["pinned", str(n + 1)])


def test_empty_list():
    _raises(al.InvalidArgument, "malloc-free", "buddy", producers=[])


def test_nothing_runs_when_a_later_point_is_bad():
    # The bad value is the last of the sweep; validation must fail first, fast.
    _raises(al.ParameterRangeError, "malloc-free", "buddy", allocs_per_cycle=[1, 16, 0],
            cycles=10_000_000)


# ---------------------------------------------------------------- failures

def test_exhaustion_raises_and_interpreter_survives():
    with pytest.raises(al.AllocatorExhausted) as ei:
        al.run("malloc-free", "buddy(arena_limit=2M)", size=4096, allocs_per_cycle=1000,
               cycles=1, runs=1)
    e = ei.value
    assert "ENOMEM" in str(e)
    assert isinstance(e, MemoryError) and isinstance(e, al.AlloclabError)
    assert e.code < 0
    # A run after it works.
    res = al.run("malloc-free", "buddy(arena_limit=2M)", size=4096, allocs_per_cycle=100,
                 **FAST)
    assert res.points[0]["alloc_ops"][0] == 100 * FAST["cycles"]


# ---------------------------------------------------------------- exact counters

@pytest.mark.parametrize("layer", BOTTOMS)
@pytest.mark.parametrize("producers", [1, 2])
def test_malloc_free_counters(layer, producers):
    apc, cycles = 16, 20
    res = al.run("malloc-free", layer, producers=producers, allocs_per_cycle=apc,
                 cycles=cycles, warmup_cycles=3, runs=2)
    assert len(res.points) == 1
    pt = res.points[0]
    n = cycles * apc * producers
    assert list(pt["cycles"]) == [cycles * producers] * 2
    assert list(pt["alloc_ops"]) == [n, n]
    assert list(pt["free_ops"]) == [n, n]
    assert list(pt["cross_frees"]) == [0, 0]
    assert list(pt["%s.bytes_held" % layer]) == [0, 0]
    assert list(pt["%s.leaked" % layer]) == [0, 0]
    for name in ("allocs", "frees"):
        key = "%s.%s" % (layer, name)
        if key in pt.data:
            assert list(pt[key]) == [n, n]
            assert np.allclose(pt[key + "_per_op"], 0.5)
    assert np.all(pt["alloc_ns"] > 0) and np.all(pt["free_ns"] > 0)
    assert np.all(pt["throughput"] > 0)
    assert pt.info["cpu_mode"] in ("pinned", "virtual")
    assert pt.params == {"workload": "malloc-free", "policy": layer, "size": 64,
                         "allocs_per_cycle": apc, "producers": producers, "timing": "batch",
                         "cpu": "auto", "stats": "lite"}


@pytest.mark.parametrize("spec", stacks())
@pytest.mark.parametrize("workload", ["malloc-free", "malloc-xfree"])
def test_every_stack_runs_without_leaks(spec, workload):
    if workload not in al.schema.workloads():
        pytest.skip("no %s workload" % workload)
    apc, cycles, producers = 40, 10, 2
    if "trylock" in al.Policy(spec).features(0):
        producers = 1  # trylock-only allocations may fail (-EBUSY) under contention
    if al.schema.workload(workload).needs_distinct and not al.Policy(spec).distinct_objects:
        with pytest.raises(al.IncompatiblePolicyError, match="needs distinct objects"):
            al.run(workload, spec, producers=producers, cycles=cycles, runs=1)
        return
    res = al.run(workload, spec, producers=producers, allocs_per_cycle=apc, cycles=cycles,
                 warmup_cycles=2, runs=1)
    pt = res.points[0]
    n = cycles * apc * producers
    assert pt["alloc_ops"][0] == n and pt["free_ops"][0] == n
    names = al.Policy(spec).names
    if workload == "malloc-free":  # (xfree leaves lists in its slots until teardown)
        assert pt["%s.bytes_held" % names[0]][0] == 0  # nothing handed out after the phase
    for key in res.metrics():
        if key.endswith(".leaked"):
            assert pt[key][0] == 0, key


@pytest.mark.parametrize("layer", BOTTOMS)
@pytest.mark.parametrize("workload", ["malloc", "calloc"])
def test_malloc_calloc_counters(layer, workload):
    nallocs, cycles = 50, 4
    res = al.run(workload, layer, nallocs=nallocs, cycles=cycles, warmup_cycles=1, runs=1)
    pt = res.points[0]
    n = nallocs * cycles
    assert pt["alloc_ops"][0] == n
    assert pt["cycles"][0] == cycles
    assert pt["%s.leaked" % layer][0] == 0
    key = "%s.allocs" % layer
    if key in pt.data:
        assert pt[key][0] == n
        assert pt["%s.frees" % layer][0] == n  # freed by the untimed reset


def test_buddy_lock_counters_are_explained():
    res = al.run("malloc-free", "buddy", allocs_per_cycle=8, **FAST)
    pt = res.points[0]
    ops = pt["alloc_ops"][0] + pt["free_ops"][0]
    assert pt["buddy.lock_acquired"][0] == ops  # one lock per op, single producer
    assert pt["buddy.lock_acquired_per_op"][0] == 1.0


def test_virtual_cpus_note():
    n = lib.al_cpus_usable()
    res = al.run("malloc-free", "buddy", producers=n + 2, cpu="virtual", allocs_per_cycle=4,
                 **FAST)
    info = res.points[0].info
    assert info["cpu_mode"] == "virtual"
    assert info["cpu_note"] == "%d virtual CPUs, at most %d concurrent" % (n + 2, n)
    assert "virtual" in res.cpu_line()


# ---------------------------------------------------------------- results

@pytest.fixture(scope="module")
def sweep():
    return al.run("malloc-free", ["buddy", "libc"], producers=[1, 2],
                  allocs_per_cycle=[1, 16, 64], timing="batch", **FAST)


def test_grid_and_table_shape(sweep):
    assert len(sweep.points) == 2 * 2 * 3
    assert set(sweep.swept()) == {"policy", "producers", "allocs_per_cycle"}
    t = sweep.table("alloc_ns")
    assert t.rows == [1, 16, 64] and t.cols == [1, 2]
    assert [b["policy"] for b in t.blocks] == ["buddy", "libc"]
    assert t.cube.shape == (2, 3, 2)
    assert t.values.shape == (3, 4) and t.sd.shape == (3, 4)
    assert not np.isnan(t.values).any()
    text = str(t)
    assert "allocs/cycle" in text and "1p" in text and "2p" in text
    assert "buddy" in text and "libc" in text
    lines = text.splitlines()
    assert lines[0].startswith("malloc-free, allocation latency")
    header = next(line for line in lines if "allocs/cycle" in line)
    assert header.split() == ["allocs/cycle", "1p", "2p", "1p", "2p"]
    body = [line.split() for line in lines[lines.index(header) + 1:]]
    body = body[:body.index(["warnings:"])] if ["warnings:"] in body else body
    assert [row[0] for row in body] == ["1", "16", "64"]
    assert all(len(row) == 5 for row in body)


def test_table_single_row_col_and_stats(sweep):
    one = al.run("malloc-free", "buddy", **FAST)
    t = one.table("alloc_ns")
    assert t.values.shape == (1, 1) and len(t.blocks) == 1
    assert "policy: buddy" in t.title
    t = sweep.table("throughput", rows="producers", cols="allocs_per_cycle", stat="max")
    assert t.values.shape == (2, 6)
    t = sweep.table("buddy.lock_acquired_per_op")
    assert np.isnan(t.cube[1]).all()  # libc has no such counter
    with pytest.raises(al.UnknownNameError, match="nope"):
        sweep.table("nope")
    with pytest.raises(al.UnknownNameError, match="mode"):
        sweep.table("alloc_ns", stat="mode")


def test_metrics(sweep):
    m = sweep.metrics()
    for name in ("alloc_ns", "free_ns", "throughput", "cycles", "alloc_ops", "free_ops",
                 "cross_frees", "timer_overhead_ns", "steal_pct", "buddy.allocs",
                 "buddy.bytes_held", "buddy.allocs_per_op", "buddy.lock_acquired_per_op",
                 "libc.allocs"):
        assert name in m
    assert m[0] == "alloc_ns"


def test_json_round_trip(sweep, tmp_path):
    s = sweep.to_json()
    back = al.Result.from_json(s)
    assert back == sweep
    assert back.metadata == sweep.metadata
    for p, q in zip(back.points, sweep.points):
        assert p.params == q.params and p.info == q.info
        for k in q.data:
            assert p.data[k].dtype == q.data[k].dtype
            np.testing.assert_array_equal(p.data[k], q.data[k])
    assert back.to_json() == s
    path = tmp_path / "r.json"
    sweep.to_json(str(path))
    assert al.Result.from_json(str(path)) == sweep
    json.loads(s)  # plain JSON
    with pytest.raises(al.InvalidArgument):
        al.Result.from_json('{"format": "other"}')


def test_json_keeps_nan():
    res = al.run("malloc", "buddy", nallocs=10, cycles=2, warmup_cycles=0, runs=1)
    assert math.isnan(res.points[0]["free_ns"][0])  # malloc frees nothing timed
    assert al.Result.from_json(res.to_json()) == res


def test_metadata(sweep):
    md = sweep.metadata
    for k in ("cpu_model", "online_cpus", "usable_cpus", "threads_per_core", "kernel",
              "build_flags", "library_version", "alloclab_version", "python", "clock",
              "ticks_per_ns", "timestamp", "run"):
        assert k in md, k
    assert md["alloclab_version"] == al.__version__
    assert md["library_version"] == al.__version__
    assert md["clock"] in ("tsc", "monotonic")
    assert md["run"]["workload"] == "malloc-free"
    assert md["run"]["sweep"]["producers"] == [1, 2]
    assert md["run"]["cycles"] == FAST["cycles"]


def test_rows_csv(sweep, tmp_path):
    rows = sweep.rows()
    assert len(rows) == len(sweep.points) * FAST["runs"]
    assert {"policy", "producers", "allocs_per_cycle", "run", "alloc_ns"} <= set(rows[0])
    assert rows[0]["libc.allocs"] is None or rows[0]["policy"] == "libc"
    path = tmp_path / "r.csv"
    sweep.to_csv(str(path))
    text = path.read_text().splitlines()
    assert len(text) == len(rows) + 1
    buf = io.StringIO()
    sweep.to_csv(buf)
    assert buf.getvalue().splitlines()[0] == text[0]


def test_to_pandas(sweep):
    try:
        import pandas  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pandas"):
            sweep.to_pandas()
    else:
        df = sweep.to_pandas()
        assert len(df) == len(sweep.points)


def test_summary(sweep):
    s = sweep.summary()
    assert "malloc-free" in s and "12 points" in s and "buddy" in s


def test_executor_and_progress(capsys):
    from alloclab.sweep import ConcurrentExecutorWarning
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        # timed runs side by side on this machine's cores: refused, as sweep() refuses them
        with pytest.raises(al.InvalidArgument, match="side by side.*allow_concurrent=True"):
            al.run("malloc-free", "buddy", executor=ex, **FAST)
        with pytest.warns(ConcurrentExecutorWarning, match="side by side"):
            res = al.run("malloc-free", ["buddy", "libc"], allocs_per_cycle=[2, 4],
                         executor=ex, progress=True, allow_concurrent=True, **FAST)
    assert [p.params["allocs_per_cycle"] for p in res.points] == [2, 4, 2, 4]
    for p in res.points:
        assert p["alloc_ops"][0] == FAST["cycles"] * p.params["allocs_per_cycle"]
    assert "4/4 runs" in capsys.readouterr().err


def test_lists_of_everything():
    res = al.run("malloc-free", al.Policy("buddy"), size=["16", 4096], allocs_per_cycle=(1, 2),
                 timing=["batch", "per_op_sum"], cpu=["auto", "virtual"], **FAST)
    assert len(res.points) == 2 * 2 * 2 * 2
    assert {p.params["size"] for p in res.points} == {16, 4096}
    assert {p.params["timing"] for p in res.points} == {"batch", "per_op_sum"}


def test_dashes_and_underscores():
    res = al.run("malloc_free", "buddy", **{"allocs-per-cycle": 3}, **FAST)
    assert res.points[0].params["allocs_per_cycle"] == 3
    assert res.points[0].params["workload"] == "malloc-free"


def test_schema_value_parsing():
    p = schema.workload("malloc-free").param("size")
    assert p.parse("4K") == 4096 and p.parse("1M") == 1 << 20 and p.parse(64) == 64
    assert p.parse("64") == 64 and p.format(3 << 30) == "3G" and p.format(1536) == "1536"
    with pytest.raises(al.ParameterTypeError):
        p.parse(True)
    ns = schema.layer("buddy").param("lock_budget")
    assert ns.parse("250ms") == 250_000_000 and ns.parse("10us") == 10_000
    assert ns.parse("500ns") == 500 and ns.parse("1s") == 10**9 and ns.parse(7) == 7
    assert ns.format(250_000_000) == "250ms" and ns.format(1500) == "1500ns"
    b = schema.layer("buddy").param("fill")
    assert b.parse(True) == 1 and b.parse("false") == 0 and b.parse(1) == 1
    with pytest.raises(al.ParameterTypeError):
        b.parse(2)
    i = schema.workload("malloc-free").param("allocs_per_cycle")
    for bad in (True, 1.0, "1"):
        with pytest.raises(al.ParameterTypeError):
            i.parse(bad)


# ---------------------------------------------------------------- how much to measure

def test_effort_sets_what_is_not_given():
    from alloclab.run import EFFORT, plan
    s, _ = plan("malloc-free", "buddy")
    assert (s["runs"], s["duration"], s["warmup_cycles"]) == (5, 0.25, 100)
    s, _ = plan("malloc-free", "buddy", effort="quick")
    assert (s["runs"], s["duration"], s["warmup_cycles"]) == (3, 0.1, 50)
    s, _ = plan("malloc-free", "buddy", effort="rigorous", runs=4)
    assert (s["runs"], s["duration"]) == (4, EFFORT["rigorous"]["duration"])
    with pytest.raises(al.UnknownNameError, match="'fast'.*quick, normal, rigorous"):
        plan("malloc-free", "buddy", effort="fast")


def test_round_order_pairs_policies_abba():
    from alloclab.run import round_order
    # plan() is policy-major: tasks 0-2 are policy A's cells, 3-5 policy B's
    assert round_order(6, 2, 0) == [0, 3, 1, 4, 2, 5]
    assert round_order(6, 2, 1) == [3, 0, 4, 1, 5, 2]
    assert sorted(round_order(6, 3, 1)) == list(range(6))


def test_interleaved_runs_record_when_they_started():
    res = al.run("malloc-free", ["buddy", "libarena-spill"], runs=3, cycles=2,
                 warmup_cycles=0)
    a, b = res.points
    sa, sb = a.info["run_starts"], b.info["run_starts"]
    # run i of both policies before run i+1 of either
    for i in range(2):
        assert max(sa[i], sb[i]) < min(sa[i + 1], sb[i + 1])
    from alloclab.verdict import Side, paired
    assert paired(Side.from_points([a], "alloc_ns"), Side.from_points([b], "alloc_ns"))


def test_processes_runs_each_run_in_a_fresh_process():
    import os
    res = al.run("malloc-free", "buddy", runs=2, cycles=2, warmup_cycles=0, processes=True)
    pids = res.points[0].info["pids"]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert res.metadata["run"]["processes"] is True
    res = al.run("malloc-free", "buddy", runs=2, cycles=2, warmup_cycles=0)
    assert res.points[0].info["pids"] == [os.getpid()] * 2


def test_adaptive_runs_add_rounds_to_wide_cells_and_keep_pairs(monkeypatch):
    # a target no cell can meet: rounds are added until the budget is spent
    res = al.run("malloc-free", ["buddy", "libarena-spill"], runs=2, cycles=1,
                 warmup_cycles=0, allocs_per_cycle=[1, 64], target_ci=1e-9, budget=0.3)
    ad = res.metadata["run"]["adaptive"]
    assert ad["added_runs"] > 0 and ad["target_ci"] == 1e-9
    by_cell = {}
    for p in res.points:
        by_cell.setdefault(p.params["allocs_per_cycle"], []).append(p.runs)
    for runs in by_cell.values():
        assert runs[0] == runs[1] >= 2  # both policies of a cell: as many runs
    # cells already narrower than the target: nothing is added
    import sys
    monkeypatch.setattr(sys.modules["alloclab.run"], "_rel_ci", lambda raws: 0.01)
    res = al.run("malloc-free", ["buddy"], runs=2, cycles=1, warmup_cycles=0,
                 target_ci=0.02, budget=5)
    assert res.metadata["run"]["adaptive"]["added_runs"] == 0
    with pytest.raises(al.ParameterRangeError, match="target_ci=2"):
        al.run("malloc-free", "buddy", target_ci=2)
    with pytest.raises(al.ParameterRangeError, match="budget=0"):
        al.run("malloc-free", "buddy", target_ci=0.1, budget=0)


# ---------------------------------------------------------------- the plan refuses before any run
#
# Everything known before running is checked by plan(), for every cell of the
# grid, so nothing runs when any cell is bad: run_once is replaced by a
# function that fails the test if it is ever called.

import importlib  # noqa: E402

run_mod = importlib.import_module("alloclab.run")  # al.run is the function
from alloclab.policy import presets  # noqa: E402


@pytest.fixture
def no_run(monkeypatch):
    def boom(*a, **k):  # pragma: no cover - reached only when validation misses
        raise AssertionError("a run started before the plan was refused")
    monkeypatch.setattr(run_mod, "run_once", boom)


@pytest.mark.parametrize("key, value", [
    ("duration", 1e10), ("duration", 1e30), ("duration", float("inf")),
    ("duration", float("nan")), ("duration", -1.0), ("duration", 0),
    ("watchdog", 1e30), ("watchdog", float("nan")), ("watchdog", -1),
    ("mem_sample", 1e30), ("mem_sample", float("inf")),
])
def test_seconds_out_of_range_are_refused(no_run, key, value):
    e = _raises(al.ParameterRangeError, "malloc-free", "buddy", **{key: value})
    assert e.name == key and key in str(e) and "1e+09" in str(e)


def test_the_longest_duration_is_accepted_by_plan():
    settings, tasks = run_mod.plan("malloc-free", "buddy", duration=1e9)
    assert tasks[0]["duration_ns"] == 10**18 < 2**63


@pytest.mark.parametrize("runs", [0, 10**6 + 1, 2**64, 10**30])
def test_runs_out_of_range_are_refused(no_run, runs):
    e = _raises(al.ParameterRangeError, "malloc-free", "buddy", runs=runs)
    assert "[1, 1000000]" in str(e)


def _nmi_safe_by_rule(spec):
    """The rule the nmi workload states, from the registry's features."""
    pol = al.Policy(spec)
    for i in range(len(pol)):
        if "nmi_safe" not in pol.features(i):
            return False
        if "nmi_shield" in pol.features(i):
            return True
    return True


@pytest.mark.parametrize("preset", sorted(presets))
def test_nmi_needs_an_nmi_safe_policy(preset):
    if _nmi_safe_by_rule(preset):
        run_mod.check_compatible("nmi", preset)  # accepted
        return
    with pytest.raises(al.IncompatiblePolicyError) as ei:
        run_mod.check_compatible("nmi", preset)
    e = ei.value
    assert "NMI-safe" in str(e) and preset in str(e)
    assert e.workload == "nmi" and "buddy" in e.valid and preset not in e.valid
    assert "presets it runs on: " + ", ".join(e.valid) in str(e)


@pytest.mark.parametrize("preset", sorted(presets))
def test_test_vmalloc_needs_vmalloc_on_top(preset):
    if al.Policy(preset).names[0] == "vmalloc":
        run_mod.check_compatible("test_vmalloc", preset)
        return
    with pytest.raises(al.IncompatiblePolicyError) as ei:
        run_mod.check_compatible("test_vmalloc", preset)
    assert "vmalloc layer at the top" in str(ei.value) and "vmalloc-default" in ei.value.valid


def test_a_sweep_with_one_incompatible_policy_runs_nothing(no_run):
    """The compatible policy comes first in the sweep: it must not run."""
    _raises(al.IncompatiblePolicyError, "nmi", ["buddy", "kzalloc"], cycles=10,
            match=("'kzalloc' (slab(zero=true))", "layer slab is not NMI-safe"))
    _raises(al.IncompatiblePolicyError, "test_vmalloc", ["vmalloc-default", "buddy"],
            cycles=1, match=("'buddy'", "vmalloc layer at the top"))
    with pytest.raises(al.IncompatiblePolicyError):
        al.sweep("nmi", ["buddy", "kzalloc"], cycles=10)


def test_check_compatible_takes_names_schemas_and_policies():
    run_mod.check_compatible(schema.workload("nmi"), al.Policy("buddy"))
    run_mod.check_compatible("malloc-free", "kzalloc")  # no requirement
    with pytest.raises(al.IncompatiblePolicyError):
        run_mod.check_compatible(schema.workload("nmi"), al.Policy("percpu > slab"))


def test_workload_flags_are_read_from_c():
    assert schema.workload("nmi").flags_mask & lib.AL_WL_NMI
    assert schema.workload("test_vmalloc").flags_mask & lib.AL_WL_VMALLOC
    assert not schema.workload("malloc-free").flags_mask & (lib.AL_WL_NMI | lib.AL_WL_VMALLOC)


def test_larson_min_size_above_max_size_is_refused_before_running(no_run):
    e = _raises(al.InvalidArgument, "larson", "buddy", min_size=1000, max_size=8,
                match=("min_size=1000", "max_size=8"))
    assert not isinstance(e, al.RunError)
    # the bad cell is the last of a sweep: still nothing runs
    _raises(al.InvalidArgument, "larson", "buddy", min_size=[8, 1000], max_size=[512, 8],
            match=("min_size=1000", "max_size=512"))


def test_larson_equal_sizes_run():
    res = al.run("larson", "buddy", min_size=64, max_size=64, **FAST)
    assert res.points[0]["alloc_ops"][0] > 0


def test_c_refuses_larson_sizes_too():
    """al_run itself checks what plan() checks (C users get the same error)."""
    task = run_mod.plan("larson", "buddy", **FAST)[1][0]
    names = [p.name for p in schema.workload("larson").params]
    task["wparams"][names.index("min_size")] = 1000
    task["wparams"][names.index("max_size")] = 8
    with pytest.raises(al.RunError) as ei:
        run_mod.run_once(task)
    assert ei.value.code == -22  # -EINVAL, from al_run's validation, before any setup
    assert "larson: min_size=1000 is above max_size=8" in str(ei.value)


def test_test_vmalloc_threads_must_match_producers(no_run):
    _raises(al.InvalidArgument, "test_vmalloc", "vmalloc-default", nr_threads=2,
            producers=[2, 1], cycles=1, match=("nr_threads=2", "producers=1"))


def test_create_enomem_names_the_parameter_that_fixes_it():
    """Under an address-space limit (ulimit -v) a layer that reserves its
    arena up front fails with a message that names the parameter to lower and
    a value that fits, and the value it names does fit."""
    code = ("import alloclab as al\n"
            "for spec in ('slab', 'pages', 'buddy(arena_limit=8G)'):\n"
            "    try:\n"
            "        al.Allocator(spec)\n"
            "        print('built', spec)\n"
            "    except al.AllocatorExhausted as e:\n"
            "        print(e)\n"
            "al.Allocator('slab(arena_limit=256M)').close()\n"
            "print('fits')\n")

    out = python_under_address_limit(code, 1536 << 20)
    assert out[0] == ("creating allocator 'slab': ENOMEM: slab: create failed: ENOMEM: could "
                      "not reserve arena_limit=4G of address space under this process's "
                      "limit of 1536M (ulimit -v); a smaller arena_limit fixes it, e.g. "
                      "'slab(arena_limit=256M)'")
    assert "could not reserve memory=4G" in out[1] and "'pages(memory=256M)'" in out[1]
    assert "could not reserve arena_limit=8G" in out[2] and "'buddy(arena_limit=256M)'" in out[2]
    assert out[3] == "fits"


# ---------------------------------------------------------------- result files

from alloclab.result import Result, load_json  # noqa: E402

_BAD_RESULTS = [
    ("[1, 2]", "JSON list"),
    ("null", "JSON null"),
    ('"text"', "JSON string"),
    ("3", "JSON number"),
    ("{nope", "not JSON"),
    ('{"hello": 1}', "not an alloclab result"),
    ('{"format": "alloclab-result", "metadata": {}, "points": "x"}', "points is a JSON string"),
    ('{"format": "alloclab-result", "metadata": [], "points": []}', "metadata is a JSON list"),
    ('{"format": "alloclab-result", "format_version": "2", "metadata": {}, "points": []}',
     "format_version is a JSON string"),
    ('{"format": "alloclab-result", "metadata": {}, "points": [1]}', "points[0] is a JSON number"),
    ('{"format": "alloclab-result", "metadata": {}, "points": [{"params": {}, "info": {}, '
     '"data": {"a": {"dtype": "float64", "values": ["x"]}}}]}', "points[0].data.a.values[0]"),
    ('{"format": "alloclab-result", "metadata": {}, "points": [{"params": {}, "info": {}, '
     '"data": {"a": {"dtype": "nosuch", "values": [1]}}}]}', "'nosuch' is not a NumPy type"),
    ('{"format": "alloclab-result", "metadata": {}, "points": [{"params": {}, "info": {}, '
     '"data": {"a": [1]}}]}', "points[0].data.a is a JSON list"),
    ('{"format": "alloclab-result", "format_version": 99, "metadata": {}, "points": []}',
     "newer"),
    ('{"format": "alloclab-result", "metadata": {}, "points": [{"params": {}, "info": {}, '
     '"data": {}, "hist": {"alloc": [{"buckets": [[99999, 1]]}]}}]}',
     "points[0].hist.alloc[0].buckets holds [99999, 1]"),
    ('{"format": "alloclab-result", "metadata": {}, "points": [{"params": {}, "info": {}, '
     '"data": {}, "hist": {"alloc": [{"buckets": [[-1, 1]]}]}}]}', "holds [-1, 1]"),
]


@pytest.mark.parametrize("text, words", _BAD_RESULTS)
def test_from_json_refuses_what_is_not_a_result(tmp_path, text, words):
    with pytest.raises(al.FileFormatError, match=None) as ei:
        Result.from_json(text)
    assert words in str(ei.value)
    f = tmp_path / "r.json"
    f.write_text(text)
    with pytest.raises(al.FileFormatError) as ei:
        Result.from_json(str(f))
    assert words in str(ei.value) and str(f) in str(ei.value) and ei.value.path == str(f)
    assert f.read_text() == text


def test_from_json_refuses_binary_and_devices(tmp_path):
    b = tmp_path / "b.json"
    b.write_bytes(bytes(range(256)))
    with pytest.raises(al.FileFormatError, match="not UTF-8"):
        Result.from_json(str(b))
    with pytest.raises(al.FileFormatError, match="not UTF-8"):
        Result.from_json(b)  # a pathlib.Path
    with pytest.raises(al.FileFormatError, match="not UTF-8"):
        Result.from_json(b"\xff\xfe{}")
    # paths that are not regular files are refused by name before any read
    # (load_json's contract: InvalidArgument), never read without bound
    with pytest.raises(al.InvalidArgument, match="/dev/zero.*character device"):
        load_json("/dev/zero")
    with pytest.raises(al.InvalidArgument, match="directory"):
        load_json(tmp_path)
    with pytest.raises(al.ParameterTypeError):
        load_json(42)


def test_from_json_round_trips_a_path(tmp_path):
    res = al.run("malloc-free", "buddy", **FAST)
    f = tmp_path / "r.json"
    res.to_json(str(f))
    assert Result.from_json(f) == res == Result.from_json(str(f)) == Result.from_json(
        f.read_bytes())


@pytest.mark.parametrize("text, words", _BAD_RESULTS[:5])
def test_compare_loads_paths_strictly(tmp_path, text, words):
    f = tmp_path / "bad.json"
    f.write_text(text)
    res = al.run("malloc-free", "buddy", **dict(FAST, runs=2))
    for a, b in ((f, res), (res, f), (res, [res, str(f)])):
        with pytest.raises(al.FileFormatError) as ei:
            al.compare(a, b)
        assert words in str(ei.value) and str(f) in str(ei.value)
    assert f.read_text() == text


@pytest.mark.parametrize("bad", [None, 5, [5], {"a": 1}])
def test_compare_takes_results_or_paths(bad):
    res = al.run("malloc-free", "buddy", **dict(FAST, runs=2))
    with pytest.raises(al.ParameterTypeError):
        al.compare(res, bad) if bad is not None else al.compare(bad, res)


def test_compare_reads_result_files(tmp_path):
    res = al.run("malloc-free", "buddy", **dict(FAST, runs=2))
    f = tmp_path / "r.json"
    res.to_json(str(f))
    assert al.compare(f, str(f)).to_text() == al.compare(res, res).to_text()


def test_report_from_json_refuses_other_files(tmp_path):
    from alloclab.reproduce._report import Report
    for text in ("[1]", "null", '{"format": "%s", "version": 2, "results": [], "settings": 1}'
                 % Report.FORMAT):
        with pytest.raises(al.FileFormatError):
            Report.from_json(text)


# ------------------------------------------ stacks and workloads that cannot work

# The workloads that link objects through their memory, check their contents or
# keep them live while other workers write theirs (docs/workloads.md lists them).
DISTINCT_WORKLOADS = {"malloc-xfree", "xmalloc", "larson", "stress", "local-storage-create"}
SHARED_POLICIES = ["null", "failnth > null"]


def test_distinct_workloads_declared():
    assert {n for n, w in schema.workloads().items() if w.needs_distinct} == DISTINCT_WORKLOADS
    assert all("distinct" in w["flags"] for w in al.workloads()
               if w["name"] in DISTINCT_WORKLOADS)


@pytest.mark.parametrize("spec", SHARED_POLICIES)
@pytest.mark.parametrize("workload", sorted(DISTINCT_WORKLOADS))
def test_distinct_workload_refused_on_shared_blocks(workload, spec, no_run):
    """Refused before any run starts (xmalloc on null with 2 producers used to
    segfault or hang), naming the workload, the layer and what to use."""
    e = _raises(al.IncompatiblePolicyError, workload, ["buddy", spec], producers=2,
                match=[workload, "'null'", "one block per CPU", "distinct objects", "buddy"])
    assert e.workload == workload and e.policy == str(al.Policy(spec))
    assert "null" not in e.valid and "buddy" in e.valid
    assert isinstance(e, al.InvalidArgument)


@pytest.mark.parametrize("workload", ["malloc-free", "malloc", "calloc", "cache-scratch"])
def test_null_stays_the_floor(workload):
    producers = 1 if schema.workload(workload).one_producer else 2
    r = al.run(workload, "null", runs=1, cycles=20, warmup_cycles=1, producers=producers)
    assert r.points[0]["alloc_ops"][0] > 0


def test_cli_refuses_distinct_workload_on_null(capsys):
    from alloclab.cli import main

    assert main(["run", "xmalloc", "--policy", "null", "--producers", "2",
                 "--cycles", "10"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("alloclab: error: ") and "xmalloc" in err and "null" in err


FRONTS = ["percpu", "magazine", "percpu > transfer", "transfer", "percpu(orders=9)",
          "magazine(orders=9)", "percpu(orders=9) > transfer(orders=9)"]


@pytest.mark.parametrize("backend", ["pages", "libc", "buddy"])
@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("workload", ["malloc-xfree", "larson"])
def test_front_caches_balance_over_any_backend(front, backend, workload):
    """A front cache counts each object under the class of its usable size
    both ways: over pages (a whole page for any size) and libc (24 usable
    bytes for 16) every run ends with nothing leaked."""
    spec = "%s > %s" % (front, backend)
    r = al.run(workload, spec, runs=1, producers=2, cycles=50, warmup_cycles=2,
               **({"chunks": 200, "max_size": 3000} if workload == "larson" else {}))
    p = r.points[0]
    for key in r.metrics():
        if key.endswith(".leaked"):
            assert p[key][0] == 0, key


@pytest.mark.parametrize("front", ["percpu", "magazine"])
def test_front_over_pages_counts_frees(front):
    with al.Allocator("%s > pages" % front, ncpu=2) as a:
        ptrs = [a.alloc(s, cpu=0) for s in (16, 64, 100, 2048) * 8]
        for p in ptrs:
            a.free(p, cpu=1)
        a.check()
        st = a.stats()[0]
        assert st["bytes_held"] == 0
        # pages are of no cached class (orders=8 caches up to 2 KiB): every
        # object passes through, counted as uncached both ways
        assert st["allocs"] == st["frees"] == 0
        if front == "percpu":
            assert st["uncached_allocs"] == st["uncached_frees"] == len(ptrs)
        else:
            assert st["uncached"] == 2 * len(ptrs)  # allocations and frees
    with al.Allocator("%s(orders=9) > pages" % front, ncpu=1) as a:
        ptrs = [a.alloc(16) for _ in range(8)]
        for p in ptrs:
            a.free(p)
        a.check()
        st = a.stats()[0]
        assert st["allocs"] == st["frees"] == 8 and st["bytes_held"] == 0
        assert st["bytes_allocated"] == 8 * 4096  # counted as the pages they are


def _fronts_over_failnth():
    return ["%s > failnth(op=free_bulk, nth=1) > buddy" % f
            for f in ("magazine", "percpu", "percpu > transfer", "transfer", "sheaves")]


FREEING_WORKLOADS = ["malloc-free", "malloc-xfree", "larson", "malloc", "xmalloc",
                     "cache-scratch"]


@pytest.mark.parametrize("extra", [{}, {"histogram": True}], ids=["batch", "histogram"])
@pytest.mark.parametrize("workload", FREEING_WORKLOADS)
def test_a_free_a_lock_refused_is_retried_and_counted(workload, extra):
    """A free refused by a lock that gave up (-ETIMEDOUT, the object still
    the caller's) is tried again, as a refused allocation is: the run goes
    on, every refusal is counted exactly as the layer injected it, and no
    object is lost, at teardown either."""
    r = al.run(workload, "failnth(op=free, nth=7, every=1) > buddy", runs=2, cycles=20,
               warmup_cycles=1, **extra)
    p = r.points[0]
    assert list(p["wl.free_refused_timedout"]) == list(p["failnth.failed_free"])
    assert min(p["failnth.failed_free"]) > 0
    assert list(p["buddy.leaked"]) == [0, 0]


def test_retried_warning_counts_the_runs_refusals_and_flips_with_them():
    assert stats.describe([1.0, 1.01, 0.99], retried=[0, 0, 0]).warnings == []
    st = stats.describe([1.0, 1.01, 0.99], retried=[0, 7, 2])
    assert [w.kind for w in st.warnings] == ["retried"] and st.retried_max == 7
    assert "7 refused operations retried in a run" in st.warnings[0].message
    res = al.run("malloc-free", ["failnth(op=free, nth=50, every=1) > buddy", "buddy"],
                 runs=3, cycles=20, warmup_cycles=1)
    text = res.table("free_ns").to_text()
    line = next(x for x in text.splitlines() if "refused operations retried" in x)
    most = max(res.points[0]["wl.free_refused_timedout"])
    assert most > 0 and "(%.0f)" % most in text.split("refused operations retried")[1]
    kinds = {p["policy"]: [w.kind for w in s.warnings] for p, s in res.stats("free_ns")}
    assert "retried" in kinds["failnth(op=free, nth=50, every=true) > buddy"], line
    assert "retried" not in kinds["buddy"]
    # the frees' retries wait in free_ns, not in the allocations' time
    alloc = {p["policy"]: [w.kind for w in s.warnings] for p, s in res.stats("alloc_ns")}
    assert not any("retried" in k for k in alloc.values())
    assert "refused operations retried" not in res.table("alloc_ns").to_text()


@pytest.mark.parametrize("err", ["ebusy", "etimedout"])
def test_a_refusal_for_a_second_is_reported_whole(err):
    """The worker's error carries the refusal's whole reason, the words the
    live Allocator uses, not a sentence cut at the buffer's end."""
    code = getattr(errno, err.upper())
    why = ffi.string(lib.al_refusal_why(-code)).decode()
    with pytest.raises(al.RunError) as ei:
        al.run("malloc-free", "failnth(op=alloc, nth=1, every=1, err=%s) > buddy" % err,
               runs=1, cycles=2, warmup_cycles=0)
    assert ei.value.code == -code
    assert str(ei.value).endswith("failed: %s: refused for 1 s: %s" % (err.upper(), why))


@pytest.mark.parametrize("spec,hint", [
    ("buddy(arena_limit=1M, chunk_size=64K)",
     " (layer buddy's arena is bounded by arena_limit=1M, and each CPU that allocates grows "
     "64K chunks of its own: give a larger one, e.g. buddy(arena_limit=4G))"),
    ("percpu > buddy(arena_limit=1M, chunk_size=64K)",
     " (layer buddy's arena is bounded by arena_limit=1M, and each CPU that allocates grows "
     "64K chunks of its own: give a larger one, e.g. buddy(arena_limit=4G))"),
])
def test_an_exhausted_arena_names_its_limit(spec, hint):
    with pytest.raises(al.AllocatorExhausted) as ei:
        al.run("malloc-free", spec, size=16384, allocs_per_cycle=128, runs=1, cycles=2)
    assert str(ei.value).endswith("failed: ENOMEM: out of memory" + hint)


def test_a_stack_given_under_two_names_runs_once_and_says_so():
    with pytest.warns(DuplicatePolicyWarning, match="^policy 'percpu > buddy' is the same "
                      "stack as 'libarena-spill' \\(percpu > buddy\\): it runs once, as "
                      "'libarena-spill'$"):
        r = al.run("malloc-free", ["libarena-spill", "percpu > buddy"], runs=1, cycles=5)
    assert [p.params["policy"] for p in r.points] == ["libarena-spill"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DuplicatePolicyWarning)
        r = al.run("malloc-free", ["buddy", "buddy"], runs=1, cycles=5)
    assert [p.params["policy"] for p in r.points] == ["buddy"]


def test_a_teardown_retries_within_one_deadline_and_keeps_the_error():
    """Every free refused: the measured free gives up after a second, and
    teardown's frees share one more second (not one per object: 5000 slots
    would outlast the watchdog, whose error would replace the free's)."""
    with pytest.raises(al.RunError) as ei:
        al.run("larson", "failnth(op=free, nth=1, every=1) > buddy", runs=1, cycles=2,
               warmup_cycles=0, watchdog=20)
    assert not isinstance(ei.value, al.RunStalled)
    assert "failed: ETIMEDOUT: refused for 1 s: a lock" in str(ei.value), str(ei.value)


def test_retried_warning_reads_every_retry_count_and_survives_a_bad_one():
    res = al.run("malloc-free", "buddy", runs=3, cycles=5, warmup_cycles=1)
    p = res.points[0]
    p.data["elapsed_ns"] = np.full(3, 0.2e9)
    assert not any(w.kind == "retried" for _, s in res.stats("free_ns") for w in s.warnings)
    p.data["wl.busy_retries"] = np.array([0.0, 4.0, 0.0])  # the nmi and stress workloads'
    for metric in ("alloc_ns", "free_ns"):
        (_, st), = res.stats(metric)
        assert st.retried_max == 4 and any(w.kind == "retried" for w in st.warnings)
    p.data["wl.free_refused_timedout"] = np.array([1.0, 2.0])  # a file cut short: left out
    (_, st), = res.stats("free_ns")
    assert st.retried_max == 4


def test_a_free_refused_for_a_second_ends_the_run_saying_why():
    with pytest.raises(al.RunError) as ei:
        al.run("malloc-free", "failnth(op=free, nth=1, every=1) > buddy", runs=1, cycles=2,
               warmup_cycles=0)
    assert ei.value.code == -errno.ETIMEDOUT
    for words in ("free(", "failed: ETIMEDOUT: refused for 1 s: a lock", "lock_budget"):
        assert words in str(ei.value), words


@pytest.mark.parametrize("spec", _fronts_over_failnth())
@pytest.mark.parametrize("workload", ["malloc-free", "malloc-xfree"])
def test_drain_retries_a_failed_free_bulk(spec, workload):
    """One transient free_bulk failure below is not a leak: drains retry."""
    r = al.run(workload, spec, runs=2, producers=2, cycles=30, warmup_cycles=1)
    for p in r.points:
        for key in r.metrics():
            if key.endswith(".leaked"):
                assert list(p[key]) == [0, 0], key


@pytest.mark.parametrize("front", ["magazine", "percpu", "percpu > transfer"])
def test_drain_retries_one_by_one(front):
    """The drain's first free_bulk fails: its objects go back one by one."""
    with al.Allocator("%s > failnth(op=free_bulk, nth=1) > buddy" % front, ncpu=1) as a:
        ptrs = [a.alloc(64) for _ in range(64)]
        for p in ptrs:
            a.free(p)
        a.drain()
        a.check()
        st = {s["layer"]: s for s in a.stats()}
        assert st["failnth"]["failed_free_bulk"] == 1
        assert all(s["bytes_held"] == 0 for s in st.values()), st


BPF_MA_THREAD = "bpf_ma(irq_work=thread) > slab"


@pytest.mark.parametrize("workload", ["malloc-free", "malloc-xfree", "malloc", "xmalloc",
                                      "larson"])
def test_bpf_ma_refusals_are_not_exhaustion(workload):
    """An empty cache with its refill pending is a refusal by design: the
    workload retries, and counts each refusal exactly as the layer does."""
    producers = 1 if schema.workload(workload).one_producer else 2
    extra = {"min_size": 64, "max_size": 64} if workload == "larson" else {}
    r = al.run(workload, BPF_MA_THREAD, runs=3, producers=producers, cycles=100,
               warmup_cycles=2, **extra)
    p = r.points[0]

    def counted(metric, like):  # a metric no worker added in a run is NaN there
        return list(np.nan_to_num(p[metric])) if metric in p.data else [0] * len(like)
    for layer, wl in (("alloc_empty", "alloc_refused_empty"),
                      ("reentrant_allocs", "alloc_refused_busy")):
        assert counted("wl." + wl, p["bpf_ma." + layer]) == list(p["bpf_ma." + layer]), wl
    assert list(p["bpf_ma.no_instance"]) == [0] * 3


def test_bpf_ma_no_instance_names_mechanism_and_parameter():
    """preset bpf-ma (fixed size, unit=0: at most 8 instances) cannot serve
    larson's random sizes: not "out of memory", but the mechanism and the
    parameters that change it."""
    with pytest.raises(al.RunError) as ei:
        al.run("larson", "bpf-ma", runs=1, cycles=5, chunks=100)
    e = ei.value
    assert not isinstance(e, al.AllocatorExhausted)
    assert e.code == -errno.ENOSPC
    for m in ("ENOSPC", "instance", "unit", "mode=any", "at most 8"):
        assert m in str(e), m
    # one size, or the parameters it names, run
    al.run("larson", "bpf-ma", runs=1, cycles=5, chunks=100, min_size=64, max_size=64)
    al.run("larson", "bpf_ma(mode=fixed, unit=1000) > slab", runs=1, cycles=5, chunks=100)
    al.run("larson", "bpf_ma > slab", runs=1, cycles=5, chunks=100)


def test_bpf_ma_live_allocator_errnos():
    with al.Allocator("bpf-ma", ncpu=1) as a:
        ptrs = [a.alloc(16 + 8 * k) for k in range(8)]
        with pytest.raises(al.RunError) as ei:
            a.alloc(200)
        assert ei.value.code == -errno.ENOSPC and not isinstance(ei.value, MemoryError)
        assert a.stats()[0]["no_instance"] == 1
        for p in ptrs:
            a.free(p)


# ---- the engine decides whether a cell runs; plan() words its refusal ----

def _check(task, **change):
    """al_run_check on a task's config with fields changed: (rc, fault, message)."""
    from alloclab._ffi import ffi
    cfg = run_mod._config(task)
    for k, v in change.items():
        setattr(cfg, k, v)
    fault = ffi.new("int *")
    err = ffi.new("char[]", 256)
    rc = lib.al_run_check(cfg, fault, err, 256)
    return rc, fault[0], ffi.string(err).decode()


def test_run_check_accepts_what_plan_accepts():
    for task in run_mod.plan("malloc-free", ["buddy", "libc"], producers=[1, 2], **FAST)[1]:
        assert _check(task) == (0, lib.AL_RUN_OK, "")


@pytest.mark.parametrize("workload, change, fault, words", [
    ("malloc", dict(producers=2), "ONE_PRODUCER", ["malloc", "one producer"]),
    ("malloc-free", dict(producers=0), "PRODUCERS", ["producers=0"]),
    ("malloc-free", dict(cpu_mode=7), "MODE", ["cpu_mode 7"]),
    ("malloc-free", dict(cpu_mode=lib.AL_CPU_PINNED, producers=lib.AL_MAX_PRODUCERS),
     "PINNED", ["pinned"]),
    ("malloc-free", dict(histogram=1, timing=lib.AL_TIMING_BATCH), "HISTOGRAM", ["per_op_sum"]),
    ("malloc-free", dict(cycles=0, duration_ns=0), "NO_END", ["cycles"]),
    ("malloc-free", dict(workload=None), "NO_WORKLOAD", ["no workload"]),
])
def test_run_check_names_the_fault(workload, change, fault, words):
    from alloclab._ffi import ffi
    task = run_mod.plan(workload, "buddy", **FAST)[1][0]
    if "workload" in change:
        change["workload"] = ffi.NULL
    rc, got, msg = _check(task, **change)
    assert rc == -errno.EINVAL and got == getattr(lib, "AL_RUN_" + fault)
    for w in words:
        assert w in msg


def test_run_check_size_and_workload_parameters():
    task = run_mod.plan("malloc-free", "buddy", **FAST)[1][0]
    names = [p.name for p in schema.workload("malloc-free").params]
    wp = list(task["wparams"])
    wp[names.index("size")] = al.Policy("buddy").max_size + 1
    rc, fault, msg = _check(dict(task, wparams=wp))
    assert (rc, fault) == (-errno.EINVAL, lib.AL_RUN_SIZE) and "size=%d" % wp[names.index("size")] in msg
    task = run_mod.plan("larson", "buddy", **FAST)[1][0]
    names = [p.name for p in schema.workload("larson").params]
    wp = list(task["wparams"])
    wp[names.index("min_size")], wp[names.index("max_size")] = 1000, 8
    rc, fault, msg = _check(dict(task, wparams=wp))
    assert (rc, fault) == (-errno.EINVAL, lib.AL_RUN_WPARAMS)
    assert msg.startswith("larson: min_size=1000 is above max_size=8")


def test_plan_words_every_engine_refusal(no_run):
    """Each refusal the engine decides reaches the caller as the specific
    exception plan() words for it, naming the value."""
    mx = al.Policy("buddy").max_size
    _raises(al.ParameterRangeError, "malloc-free", "buddy", size=[64, mx + 1],
            match=["size=", "largest request", "'buddy'"])
    _raises(al.InvalidArgument, "malloc-free", "buddy", histogram=True,
            timing=["per_op_sum", "batch"], match=["histogram=True", "per_op_sum"])


def test_run_and_policy_import_nothing_that_imports_them():
    """run builds on policy and executors, sweep on run: no module imports
    one that imports it back, at the top or inside a function."""
    import ast
    import pathlib

    import importlib

    def imports(mod):  # a module's name is the last part of its dotted path
        path = importlib.import_module("alloclab." + mod).__file__
        tree = ast.parse(pathlib.Path(path).read_text())
        out = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                out |= {a.name for a in node.names} | (
                    {node.module.rsplit(".", 1)[-1]} if node.module else set())
        return out

    assert "sweep" not in imports("run") and "run" not in imports("policy")
    assert "run" not in imports("executors") and "sweep" not in imports("executors")


def test_steal_reruns_run_a_disturbed_round_again(monkeypatch):
    """run(steal_reruns=N): a cell's round whose runs had steal time runs
    again, its policies together, and the Result says how many did."""
    R = sys.modules["alloclab.run"]
    real, calls = R.run_once, []

    def fake(task, i, **kw):
        raw = real(task, i, **kw)
        calls.append(task["policy"])
        raw["steal_pct"] = 5.0 if len(calls) == 1 else 0.0  # the first run is disturbed
        return raw
    monkeypatch.setattr(R, "run_once", fake)
    res = al.run("malloc-free", ["buddy", "libc"], runs=2, cycles=20, warmup_cycles=0,
                 steal_reruns=2)
    md = res.metadata["run"]
    assert (md["steal_reruns"], md["steal_rerun_rounds"], md["steal_rerun_attempts"]) == (2, 1, 1)
    assert md["rounds"] == 2 and md["steal_discarded_max_pct"] == 5.0
    assert len(calls) == 2 * 2 + 2  # the first round twice, both policies each time
    assert calls[:2] == calls[2:4] and set(calls[:2]) == {str(al.Policy("buddy")), "libc"}
    assert all(len(p["alloc_ns"]) == 2 for p in res.points)
    calls.clear()
    res = al.run("malloc-free", ["buddy", "libc"], runs=2, cycles=20, warmup_cycles=0)
    assert len(calls) == 4 and "steal_rerun_rounds" not in res.metadata["run"]


@pytest.mark.parametrize("bad", [-1, 11, 1.5, True, "2"])
def test_steal_reruns_bad_values(bad):
    with pytest.raises(al.InvalidArgument, match=r"steal_reruns=.*0 to 10"):
        al.run("malloc-free", "buddy", runs=2, cycles=5, steal_reruns=bad)


LONG_POLICIES = [
    "percpu(capacity=64, batch=16) > transfer(batch=16, max_batches=8) > buddy(arena_limit=64M)",
    "magazine(capacity=32) > transfer(batch=16, max_batches=8) > buddy(arena_limit=64M, "
    "lock=queued)",
    "percpu(capacity=128, batch=32) > buddy(arena_limit=128M, chunk_size=4K)"]


def _long_policy_result():
    pts = [al.Point({"workload": "malloc-free", "policy": pol, "producers": prod,
                     "allocs_per_cycle": apc}, {"cpu_mode": "pinned"},
                    {"alloc_ns": np.array([10.0, 12.0, 11.0]) * (i + 1)})
           for i, pol in enumerate(LONG_POLICIES) for prod in (1, 2) for apc in (1, 16)]
    return al.Result({}, pts)


def test_long_policy_names_make_one_table_not_three():
    """Three long policy specs printed three tables, one per policy (each
    label widened its block past the width); the labels now wrap over their
    blocks and the blocks stand side by side in one table."""
    text = _long_policy_result().table("alloc_ns").to_text()
    lines = text.splitlines()
    headers = [x for x in lines if x.split()[:1] == ["allocs/cycle"]]
    assert len(headers) == 1 and headers[0].split() == ["allocs/cycle"] + ["1p", "2p"] * 3
    assert max(len(x) for x in lines[1:]) <= 110, text
    rows = [x.split() for x in lines[lines.index(headers[0]) + 1:]]
    assert rows == [["1", "11", "11", "22", "22", "33", "33"],
                    ["16", "11", "11", "22", "22", "33", "33"]], text
    heads = " ".join(lines[1:lines.index(headers[0])])
    for pol in LONG_POLICIES:  # every word of every label is there, over its block
        assert all(w in heads for w in pol.split()), (pol, text)


def test_long_column_headers_wrap():
    text = _long_policy_result().table("alloc_ns", rows="producers", cols="policy").to_text()
    lines = text.splitlines()
    assert sum(1 for x in lines if x.split()[:1] == ["producers"]) == 2  # a block each
    assert max(len(x) for x in lines) <= 110, text
    assert "buddy(arena_limit=64M)" in text and "lock=queued)" in text


def test_ctrl_c_hands_on_the_runs_that_finished(monkeypatch):
    """run() raised KeyboardInterrupt and every finished run was lost; the
    exception now carries them (partial), marked interrupted, and a cell
    with no finished run is left out."""
    real = run_mod.run_once
    done = []

    def stop_at_the_fourth(task, i, **kw):
        if len(done) == 3:
            raise KeyboardInterrupt
        done.append(task["point"])
        return real(task, i, **kw)
    monkeypatch.setattr(run_mod, "run_once", stop_at_the_fourth)
    with pytest.raises(KeyboardInterrupt) as e:
        al.run("malloc-free", "buddy", producers=[1, 2], allocs_per_cycle=[1, 4], runs=3,
               cycles=5, warmup_cycles=1)
    part = e.value.partial
    assert part.metadata["interrupted"] == {"runs_finished": 3, "runs_planned": 12,
                                            "signal": "SIGINT"}
    assert len(part.points) == 3 and all(p.runs == 1 for p in part.points)
    assert part.interrupted_line().startswith("interrupted: 3 of 12 runs finished before SIGINT")
    again = al.Result.from_json(part.to_json())
    assert again.metadata["interrupted"]["runs_finished"] == 3
    # none finished: nothing to hand on
    done[:] = [None] * 3
    with pytest.raises(KeyboardInterrupt) as e:
        al.run("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1)
    assert e.value.partial is None


@pytest.mark.parametrize("mark, line", [
    ({"runs_finished": 3, "runs_planned": 12, "signal": "SIGTERM"},
     "interrupted: 3 of 12 runs finished before SIGTERM stopped the run"),
    ({"runs_finished": 14, "runs_planned": 12, "signal": "SIGINT"},
     "interrupted: 14 runs (the 12 planned and adaptive ones) finished before SIGINT"),
    ({"runs_finished": "x", "runs_planned": True}, "interrupted: ? of ? runs finished before "
                                                   "a signal stopped the run"),
])
def test_the_interrupted_line_reads_the_mark(mark, line):
    assert al.Result({"interrupted": mark}, []).interrupted_line().startswith(line)
    assert al.Result({}, []).interrupted_line() is None


# ---------------------------------------------------------------- the spec is parsed once
#
# plan() parses each policy's text once and every task carries the result
# (Policy.parsed()): a run, here, in a child process or on an executor's
# worker, fills the engine's spec from it without parsing the text again.

policy_mod = importlib.import_module(al.Policy.__module__)


def _count_parses(monkeypatch):
    """The specs the C parser is asked to read from now on (policy._parse)."""
    calls, real = [], policy_mod._parse

    def parse(text, spec):
        calls.append(spec)
        return real(text, spec)
    monkeypatch.setattr(policy_mod, "_parse", parse)
    return calls


def test_a_run_parses_each_policy_once_whatever_its_grid(monkeypatch):
    pols = ["libarena-spill", "percpu(capacity=8) > buddy"]
    for p in pols:  # a Result's labels read canonical(), cached per process
        policy_mod.canonical(p)
    calls = _count_parses(monkeypatch)
    res = al.run("malloc-free", pols, producers=[1, 2], allocs_per_cycle=[1, 16], runs=3,
                 cycles=5, warmup_cycles=0)
    assert len(res.points) == 8 and all(p.runs == 3 for p in res.points)
    assert sorted(calls) == sorted(pols)
    given = [al.Policy(p) for p in pols]
    del calls[:]
    al.run("malloc-free", given, runs=2, cycles=5, warmup_cycles=0)
    assert calls == []  # given parsed: not parsed again


def test_a_task_runs_from_its_parsed_form_here_and_in_a_child():
    _, tasks = run_mod.plan("malloc-free", "percpu > buddy", cycles=5, warmup_cycles=0,
                            runs=1, allocs_per_cycle=4)
    assert al.Policy.from_parsed(tasks[0]["parsed"]) == al.Policy("percpu > buddy")
    task = dict(tasks[0], policy="percpu >> no such text")  # a label that would not parse
    for processes in (False, True):
        raw = run_mod.run_once(dict(task, processes=processes), 0)
        assert [ly["layer"] for ly in raw["layers"]] == ["percpu", "buddy"]
        assert raw["alloc_ops"] == 5 * 4
    assert run_mod.task_policy({"policy": "libarena-spill"}).name == "libarena-spill"


def _counters(res):
    """{(point, metric): [per run]} of every layer counter but the lock
    timings (nanoseconds), with the operations and cycles: deterministic
    for one producer."""
    out = {}
    for p in res.points:
        for m, v in p.data.items():
            if "." in m and not m.startswith("wl.") and not m.endswith("_ns"):
                out[(tuple(sorted(p.params.items())), m)] = list(v)
        for m in ("alloc_ops", "free_ops", "cycles"):
            out[(tuple(sorted(p.params.items())), m)] = list(p.data[m])
    return out


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_process_executor_gives_the_counters_of_an_in_process_run(start):
    import multiprocessing
    # one producer: with two, the threads' interleaving moves the counters
    kw = dict(allocs_per_cycle=[3, 33], runs=2, cycles=40, warmup_cycles=4, seed=5)
    pols = ["libarena-transfer", "slab"]
    here = al.run("malloc-free", pols, **kw)
    with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=multiprocessing.get_context(start)) as ex:
        there = al.run("malloc-free", pols, executor=ex, **kw)
    a, b = _counters(here), _counters(there)
    assert len(a) > 40 and a == b
    assert {pid for p in there.points for pid in p.info["pids"]}.isdisjoint({os.getpid()})
