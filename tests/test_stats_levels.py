"""Stats levels and counter docs on the Python side.

A run's stats level ("off", "lite", "full") decides what its layers count:
at "off" no counter metric exists (not measured: absent, shown "n/a",
never 0) while bytes held and the leak check remain; lock times (*_ns)
exist at "full" only. The level is a point parameter, recorded in saved
JSON, and results of different levels are never pooled silently. Counter
descriptors reach Python (alloclab.counters, `alloclab list LAYER`,
Result.describe) for every layer that declares them, plugins included.
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import alloclab as al
from alloclab import _counters, plugin, schema
from alloclab.compare import StatsLevelWarning
from conftest import FAST

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LASTFREE = os.path.join(ROOT, "examples", "plugins", "lastfree.c")
HALFSPILL = os.path.join(ROOT, "examples", "plugins", "halfspill.c")
RUN = dict(FAST, mem_sample=0)
PRESETS = sorted(p for p in al.presets if al.peers.needed(al.presets[p]) is None)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "alloclab", *args], capture_output=True,
                          text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def lastfree(tmp_path_factory):
    os.environ.setdefault("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    return plugin.compile_file(LASTFREE)[0].name


@pytest.fixture(scope="module")
def halfspill(tmp_path_factory):
    os.environ.setdefault("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    return plugin.compile_file(HALFSPILL)[0].name


# A layer whose counters have names only (al_counters_init): no docs, no kinds.
NAMED_SRC = r"""
#include <alloclab/alloclab.h>
static const char *const nm_names[] = { "hits" };
struct named { struct al_allocator base; struct al_counters ctr; };
static int nm_init(struct al_allocator *a, const int64_t *p)
{
	(void)p;
	return al_counters_init(&((struct named *)a)->ctr, 1, nm_names, a->ncpu);
}
static void nm_fini(struct al_allocator *a) { al_counters_fini(&((struct named *)a)->ctr); }
static void *nm_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	al_count(&((struct named *)a)->ctr, c, 0, 1);
	return al_alloc(a->below, c, size, flags);
}
static void nm_stats(struct al_allocator *a, struct al_stats *out)
{
	out->bytes_held = al_below_bytes_held(a);
	al_counters_report(&((struct named *)a)->ctr, out);
}
AL_LAYER(named, struct named, nm_init, nm_fini,
	 (.alloc = nm_alloc, .free = al_below_free, .owns = al_below_owns,
	  .usable_size = al_below_usable_size, .stats = nm_stats),
	 (.doc = "counters by name only", .features = AL_F_BACKEND | AL_F_OWNS | AL_F_USABLE))
"""


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    os.environ.setdefault("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    src = tmp_path_factory.mktemp("named") / "named.c"
    src.write_text(NAMED_SRC)
    return plugin.compile_file(str(src))[0].name, str(src)


def documented_layers():
    return [n for n, s in schema.layers().items() if s.counters]


def _counter_metrics(point, layer):
    return [k for k in point.data if k.startswith(layer + ".") and
            k.split(".", 1)[1] not in _counters.ACCOUNTING]


# ---------------------------------------------------------------- docs

def _check_docs(layer):
    cs = al.counters(layer)
    assert cs, "%s declares no counters" % layer
    names = [c["name"] for c in cs]
    assert len(set(names)) == len(names)
    for c in cs:
        assert set(c) >= {"name", "doc", "kind", "formula", "key", "unit"}
        assert c["kind"] in ("counter", "gauge") and c["unit"] in ("", "ns")
        assert c["doc"] and c["doc"] != schema.NO_DOC, c
        if c["formula"] is not None:  # a derived counter names counters of its own list
            terms = c["formula"].replace("-", "+").split("+")
            assert terms and all(t in names for t in terms), c
        assert c["levels"] == (["full"] if c["unit"] == "ns" else ["lite", "full"])
    out = _cli("list", layer, *(["--plugin", LASTFREE] if layer == "lastfree" else []))
    assert out.returncode == 0, out.stderr
    listed = out.stdout.split("  counters", 1)[1].splitlines()  # parameters may share names
    for c in cs:
        line = next(ln for ln in listed if ln.split()[:1] == [c["name"]])
        assert c["doc"] in line and c["kind"] in line
    return cs


@pytest.mark.parametrize("layer", documented_layers())
def test_builtin_counter_docs_reach_python(layer):
    cs = _check_docs(layer)
    d = {c["name"]: c for c in json.loads(_cli("list", layer, "--json").stdout)["counters"]}
    assert d == {c["name"]: c for c in cs}


def test_percpu_declares_its_counters():
    assert "percpu" in documented_layers()
    hits = next(c for c in al.counters("percpu") if c["name"] == "hits")
    assert hits["kind"] == "counter" and hits["key"]
    cached = next(c for c in al.counters("percpu") if c["name"] == "objects_cached")
    assert cached["kind"] == "gauge"


def test_plugin_counter_docs_reach_python(lastfree):
    cs = _check_docs(lastfree)
    assert [(c["name"], c["key"]) for c in cs] == [("hits", True), ("parked", False)]
    res = al.run("malloc-free", "lastfree > buddy", allocs_per_cycle=4, isolate=False, **RUN)
    d = res.describe("lastfree.hits_per_op")
    assert d["doc"] == "parked objects reused, per alloc+free operation"
    assert (d["layer"], d["counter"], d["per_op"], d["kind"]) == ("lastfree", "hits", True,
                                                                  "counter")
    # the docs travel with the saved Result, without the plugin
    back = al.Result.from_json(res.to_json())
    assert back.metadata["counters"]["lastfree"] == cs
    assert back.describe("lastfree.parked")["doc"] == "frees parked"


def test_describe_every_documented_counter_of_a_run():
    res = al.run("malloc-free", "percpu(guard=local) > buddy", **RUN)
    docs = {c["name"]: c for c in al.counters("percpu")}
    seen = [k for k in res.metrics() if k.startswith("percpu.") and not k.endswith("_per_op")
            and k.split(".", 1)[1] not in _counters.ACCOUNTING]
    assert seen and all(k.split(".", 1)[1] in docs for k in seen)
    for k in seen:
        d = res.describe(k)
        assert d["doc"] == docs[d["counter"]]["doc"] and d["measured_at"] == ["lite"]
        if d["kind"] == "counter":
            assert res.describe(k + "_per_op")["per_op"]
        else:  # a level per op means nothing: gauges have no per-op metric
            assert k + "_per_op" not in res.metrics()


def test_undocumented_layer_counters(named):
    layer, src = named
    assert al.counters(layer) == []  # counters by name only (al_counters_init)
    res = al.run("malloc-free", "named > buddy", stats=["lite", "off"], isolate=False, **RUN)
    lite, off = res.points
    assert lite["named.hits"][0] > 0 and _counter_metrics(off, "named") == []
    d = res.describe("named.hits")
    assert (d["doc"], d["kind"], d["measured_at"]) == (schema.NO_DOC, "counter", ["lite"])
    assert res.describe("named.hits_per_op")["doc"] == schema.NO_DOC
    assert res.describe("named.bytes_held")["kind"] == "gauge"
    assert "n/a" in res.table("named.hits", cols="stats").to_text()
    with pytest.raises(al.UnknownNameError, match="named.hits"):
        res.describe("alloc_ns")
    with pytest.raises(al.UnknownNameError):
        res.describe("nosuch.frees")
    out = _cli("list", layer, "--plugin", src)
    assert out.returncode == 0 and "counters: not declared" in out.stdout


def test_counters_of_an_unknown_layer():
    with pytest.raises(al.UnknownNameError, match="nosuch.*valid layers: .*buddy"):
        al.counters("nosuch")
    with pytest.raises(al.ParameterTypeError):
        al.counters(3)
    assert al.counters("null") == [] or all(c["doc"] for c in al.counters("null"))


def test_list_layer_cli():
    out = _cli("list", "buddy")
    assert out.returncode == 0 and out.stdout.startswith("buddy: ")
    assert "arena_limit" in out.stdout and "counters" in out.stdout
    bad = _cli("list", "nosuch")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("alloclab: error: ")
    assert "nosuch" in bad.stderr and "percpu" in bad.stderr
    full = _cli("list")
    assert full.returncode == 0 and "presets:" in full.stdout


# ---------------------------------------------------------------- levels

@pytest.mark.parametrize("policy", PRESETS)
def test_stats_off_measures_no_counter_and_checks_leaks(policy):
    res = al.run("malloc-free", policy, stats=["off", "lite"], **RUN)
    off, lite = res.points
    assert (off.params["stats"], lite.params["stats"]) == ("off", "lite")
    pol = al.Policy(policy)
    for layer in pol.names:
        if not schema.layer(layer).counters:
            continue  # a layer without descriptors may still report gauges of its state
        assert _counter_metrics(off, layer) == []
        assert _counter_metrics(lite, layer), "%s counts nothing at lite" % layer
    keys = [k[:-len(".leaked")] for k in off.data if k.endswith(".leaked")]
    assert len(keys) == len(pol.names)
    for k in keys:  # the leak check goes on at stats=off
        assert list(off[k + ".leaked"]) == [0] and list(lite[k + ".leaked"]) == [0]
    assert off["alloc_ops"][0] == lite["alloc_ops"][0] > 0


@pytest.mark.parametrize("policy", PRESETS)
def test_lock_times_at_full_only(policy):
    res = al.run("malloc-free", policy, stats=["lite", "full", "off"], **RUN)
    lite, full, off = res.points
    times = lambda p: sorted(k for k in p.data if k.endswith(("_wait_ns", "_hold_ns")))
    assert times(lite) == [] and times(off) == []
    locks = [k for k in full.data if k.endswith("lock_acquired")]
    for k in locks:  # every lock that reports its counts reports its waits at full
        assert k[:-len("acquired")] + "wait_ns" in full.data, k
        # hold times only for timed locks (lock_timing): an untimed one's is absent, not 0
    for k in times(full):
        assert res.describe(k)["levels"] == ["full"]
        assert res.describe(k)["measured_at"] == ["full"]


def test_full_has_lock_times_for_a_locked_stack():
    res = al.run("malloc-free", "buddy", stats=["full", "lite"], **RUN)
    full, lite = res.points
    assert "buddy.lock_wait_ns" in full.data and "buddy.lock_hold_ns" in full.data
    assert "buddy.lock_wait_ns" not in lite.data and "buddy.lock_hold_ns_per_op" not in lite.data
    t = res.table("buddy.lock_wait_ns", cols="stats")
    assert t.cols == ["full", "lite"] and t.values[0, 0] >= 0 and np.isnan(t.values[0, 1])
    row = t.to_text().splitlines()[3].split()
    assert row[-1] == "n/a" and row[-2] != "n/a"
    assert "stats=lite: lock times need stats=full" in t.to_text()


def test_unmeasured_is_nan_in_tables_never_zero():
    res = al.run("malloc-free", "percpu(guard=local) > buddy", stats=["lite", "off"],
                 allocs_per_cycle=[16, 64], **RUN)
    t = res.table("percpu.hits_per_op", cols="stats")
    assert t.cols == ["lite", "off"]
    assert np.all(np.isnan(t.values[:, 1])) and np.all(t.values[:, 0] > 0)
    rows = t.to_text().splitlines()
    assert [r.split()[-1] for r in rows[3:5]] == ["n/a", "n/a"]
    assert "n/a: not measured at the run's stats level (stats=off)" in t.to_text()
    only_off = res.filter(stats="off")
    assert "percpu.hits" not in only_off.metrics()
    assert only_off.table("percpu.hits").to_text().count("n/a") == 3  # 2 cells + the note
    with pytest.raises(al.UnknownNameError):
        only_off.table("percpu.nosuch")  # percpu declares its counters: no such one
    assert [r["percpu.hits"] for r in res.rows() if r["stats"] == "off"] == [None, None]


def test_level_is_recorded_and_survives_json(tmp_path):
    res = al.run("malloc-free", "percpu(guard=local) > buddy", stats="full", **RUN)
    assert res.points[0].params["stats"] == "full"
    assert res.metadata["run"]["sweep"]["stats"] == ["full"]
    assert res.stats_line() == "stats: full (every counter and lock time)"
    back = al.Result.from_json(res.to_json(str(tmp_path / "r.json")))
    assert back == res and back.points[0].params["stats"] == "full"
    assert back.metadata["counters"]["percpu"] == al.counters("percpu")


def test_level_reaches_child_processes():
    res = al.run("malloc-free", "percpu(guard=local) > buddy", stats=["off", "full"],
                 processes=True, **RUN)
    off, full = res.points
    assert _counter_metrics(off, "percpu") == [] and list(off["percpu.leaked"]) == [0]
    assert full["percpu.hits"][0] > 0


def test_default_level_is_lite():
    res = al.run("malloc-free", "null", **RUN)
    assert res.points[0].params["stats"] == "lite"
    settings, tasks = al.run.__globals__["plan"]("malloc-free", "null", **RUN)
    assert [t["stats"] for t in tasks] == ["lite"] and settings["sweep"]["stats"] == ["lite"]


def test_result_without_levels_reads_as_before():
    res = al.run("malloc-free", "null", **RUN)
    for p in res.points:
        del p.params["stats"]
    assert res.stats_line().startswith("stats: not recorded")
    assert res.table("alloc_ns").to_text().count("n/a") == 0


@pytest.mark.parametrize("bad", ["none", "FULL", "", 2, None, ["lite", "max"]])
def test_bad_level_is_refused(bad):
    with pytest.raises(al.InvalidArgument) as e:
        al.run("malloc-free", "null", stats=bad, **RUN)
    msg = str(e.value)
    assert repr(bad if not isinstance(bad, list) else "max") in msg
    assert "valid levels: lite, off, full" in msg


def test_bad_level_cli_exits_2_with_one_line():
    out = _cli("run", "malloc-free", "--policy", "null", "--stats", "lots", "--runs", "1")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("alloclab: error: ")
    assert "'lots'" in out.stderr and "lite, off, full" in out.stderr


def test_cli_run_stats_sweep(tmp_path):
    path = str(tmp_path / "r.json")
    out = _cli("run", "malloc-free", "--policy", "percpu(guard=local) > buddy", "--runs", "1",
               "--cycles", "20", "--warmup-cycles", "0", "--stats", "off,full", "--cols",
               "stats", "--json", path)
    assert out.returncode == 0, out.stderr
    assert "stats: off (no counters (n/a)); full (every counter and lock time)" in out.stdout
    counters = out.stdout[out.stdout.index("counters per op"):].splitlines()
    hits = next(ln for ln in counters if ln.split()[:1] == ["percpu.hits"])
    assert hits.split()[1] == "n/a" and float(hits.split()[2]) > 0
    res = al.Result.from_json(path)
    assert [p.params["stats"] for p in res.points] == ["off", "full"]


# ---------------------------------------------------------------- comparisons

def test_compare_never_pools_levels():
    res = al.run("malloc-free", ["null", "buddy"], stats=["lite", "full"], **dict(RUN, runs=2))
    with pytest.raises(al.PoolingError, match="stats"):
        al.compare(res, baseline="null", on=["workload"])
    cmp = al.compare(res, baseline="null")  # stats is in the key: lite with lite, full with full
    assert {c.key["stats"] for c in cmp.cells} == {"lite", "full"}
    by_level = al.compare(res.filter(policy="buddy"), baseline="lite", by="stats")
    assert by_level.columns == ["full"]


def test_compare_across_levels_warns_when_confounded():
    a = al.run("malloc-free", "null", stats="lite", **dict(RUN, runs=2))
    b = al.run("malloc-free", "buddy", stats="full", **dict(RUN, runs=2))
    with pytest.warns(StatsLevelWarning, match="lite vs full.*policy"):
        cmp = al.compare(a, b)
    assert "different stats levels" in "\n".join(cmp.legend())
    c = al.run("malloc-free", "null", stats="full", **dict(RUN, runs=2))
    with warnings.catch_warnings():
        warnings.simplefilter("error", StatsLevelWarning)
        cmp = al.compare(a, c)  # the level is the only difference: what is compared
    assert cmp.differ == ["stats"]


def test_cli_compare_warns_in_one_line(tmp_path):
    paths = []
    for pol, level in (("null", "lite"), ("buddy", "full")):
        paths.append(str(tmp_path / ("%s.json" % pol)))
        al.run("malloc-free", pol, stats=level, **dict(RUN, runs=2)).to_json(paths[-1])
    out = _cli("compare", *paths)
    assert out.returncode == 0, out.stderr
    assert [ln for ln in out.stderr.splitlines() if ln] == [
        ln for ln in out.stderr.splitlines() if ln.startswith("alloclab: warning: ")]
    assert "different stats levels" in out.stderr


def test_libarena_counters_na_at_off():
    from alloclab import reproduce
    rep = reproduce.libarena(producers=[1], allocs_per_cycle=[64], workloads=["malloc-free"],
                             runs=1, duration=0.01, baseline=False, stats="off")
    text = rep.counters()
    rows = [ln for ln in text.splitlines() if ln.startswith("  ") and "design" not in ln]
    assert rows and all(ln.split()[-1] == "n/a" for ln in rows)
    lite = reproduce.libarena(producers=[1], allocs_per_cycle=[64], workloads=["malloc-free"],
                              runs=1, duration=0.01, baseline=False)
    waits = [ln for ln in lite.counters().splitlines() if "wait ns/op" in ln]
    spills = [ln for ln in lite.counters().splitlines() if "spills/op" in ln]
    assert waits and all(ln.split()[-1] == "n/a" for ln in waits)
    assert spills and all(ln.split()[-1] != "n/a" for ln in spills)


def test_plot_marks_unmeasured_lines():
    import matplotlib
    matplotlib.use("Agg")
    res = al.run("malloc-free", "percpu(guard=local) > buddy", stats=["off", "lite"], **RUN)
    fig = res.plot("percpu.hits_per_op", x="producers", hue="stats")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["off (n/a: stats=off)", "lite"]
    only_off = res.filter(stats="off").plot("percpu.hits_per_op")
    assert "n/a: not measured (stats=off)" in [t.get_text() for t in only_off.axes[0].texts]


def test_cli_metric_the_level_leaves_out_is_a_table_of_na():
    out = _cli("run", "malloc-free", "--policy", "buddy", "--stats", "lite", "--metric",
               "buddy.lock_wait_ns", "--runs", "1", "--duration", "0.01")
    assert out.returncode == 0, out.stderr
    assert "n/a" in out.stdout and "lock times need stats=full" in out.stdout
    out = _cli("run", "malloc-free", "--policy", "buddy", "--metric", "buddy.nosuch",
               "--runs", "1", "--duration", "0.01")
    assert out.returncode == 2 and out.stderr.count("alloclab: error:") == 1
