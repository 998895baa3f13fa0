"""What a trace holds (alloclab.trace_info, Trace.info, `alloclab trace info`):
exact numbers for hand-built traces, the vectorised analysis against a
straightforward per-op walk of random traces, the JSON form, the CLI on
saved files and its errors, and the plots."""

import json
import os
import random
import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import alloclab as al  # noqa: E402
from alloclab import cli, plot, plot_trace  # noqa: E402
from alloclab._tracefmt import FLAG_MOVED, FLAG_NULL, FLAG_UNKNOWN, FLAG_ZERO  # noqa: E402
from alloclab.trace import Trace  # noqa: E402
from alloclab.traceinfo import FACTOR_BINS, Pow2Hist, _bitlen  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def op(kind, **kw):
    return dict(kind=kind, **kw)


# ------------------------------------------------------------------ hand-built traces

SIZES = [0, 1, 3, 8, 16, 100, 4096, 4097]


def size_mix():
    """One thread: a malloc of each of SIZES (ids 0..7), a calloc of 3 x 8,
    a posix_memalign of 64 at 64; nothing freed."""
    ops = [op("malloc", size=s, id=i, flags=FLAG_ZERO if s == 0 else 0)
           for i, s in enumerate(SIZES)]
    ops.append(op("calloc", size=24, aux=3, id=8))
    ops.append(op("posix_memalign", size=64, aux=64, id=9))
    return Trace.from_ops([ops])


def test_size_histogram_is_exact_per_kind():
    info = al.trace_info(size_mix())
    assert info.sizes["all"].rows() == [
        (0, 1, 1), (1, 2, 1), (2, 4, 1), (4, 8, 0), (8, 16, 1), (16, 32, 2), (32, 64, 0),
        (64, 128, 2), (128, 256, 0), (256, 512, 0), (512, 1024, 0), (1024, 2048, 0),
        (2048, 4096, 0), (4096, 8192, 2)]
    assert info.sizes["calloc"].rows() == [(16, 32, 1)]
    assert info.sizes["posix_memalign"].rows() == [(64, 128, 1)]
    assert info.sizes["malloc"].total == 8
    assert set(info.sizes) == {"all", "malloc", "calloc", "posix_memalign"}
    k = info.kinds
    assert k["ops"]["malloc"] == 8 and k["ops"]["calloc"] == 1
    assert k["bytes"]["malloc"] == sum(SIZES) and k["bytes"]["calloc"] == 24
    assert k["zero_requests"] == {"malloc": 1}
    assert info.end == {"objects": 10, "bytes": sum(SIZES) + 24 + 64,
                        "sizes": info.sizes["all"], "by_thread": {0: 10}}
    assert info.lifetimes["freed"] == 0 and info.lifetimes["ops"].total == 0


def lifetimes_trace():
    """Thread 0: a(10 B) at t=10, b(20 B) at t=20, c(30 B) at t=30, free a at
    t=70, free c at t=100, b stays live. Lifetimes: a 3 ops / 60 ns, c 2 ops
    / 70 ns."""
    return Trace.from_ops([[
        op("malloc", size=10, id=0, dt=10), op("malloc", size=20, id=1, dt=10),
        op("malloc", size=30, id=2, dt=10), op("free", ref=0, dt=40),
        op("free", ref=2, dt=30)]])


def test_lifetimes_in_ops_and_ns():
    info = lifetimes_trace().info()
    lt = info.lifetimes
    assert lt["freed"] == 2
    assert lt["ops"].rows() == [(2, 4, 2)]  # 3 and 2 ops
    assert lt["ns"].rows() == [(32, 64, 1), (64, 128, 1)]  # 60 and 70 ns
    assert lt["ops_pct"]["50"] == 2 and lt["ns_pct"]["50"] == 60  # nearest rank
    assert info.end["objects"] == 1 and info.end["bytes"] == 20


def test_peak_of_live_bytes_and_when():
    info = lifetimes_trace().info()
    lv = info.live
    assert (lv["peak_bytes"], lv["peak_objects"], lv["peak_seq"], lv["peak_t_ns"],
            lv["peak_thread"], lv["peak_kind"]) == (60, 3, 3, 30, 0, "malloc")
    assert lv["by_seq"]["bytes"].tolist() == [10, 30, 60, 50, 20]
    assert lv["by_seq"]["objects"].tolist() == [1, 2, 3, 2, 1]
    assert lv["by_seq"]["pos"].tolist() == [0, 1, 2, 3, 4]


def test_series_keep_the_peak_in_fewer_buckets():
    info = al.trace_info(lifetimes_trace(), points=2)
    s = info.live["by_seq"]
    assert s["pos"].tolist() == [0, 2] and s["bytes"].tolist() == [30, 60]
    # 10..100 ns in two 45 ns buckets, [10, 55) and [55, 100]; the second
    # starts at 60 bytes, held until a is freed at 70
    t = info.live["by_time"]
    assert t["t_ns"].tolist() == [10, 55] and t["bytes"].tolist() == [60, 60]


def test_time_buckets_without_ops_carry_the_level():
    tr = Trace.from_ops([[op("malloc", size=7, id=0, dt=1), op("free", ref=0, dt=99)]])
    t = tr.info(points=4).live["by_time"]
    assert t["t_ns"].tolist() == [1, 25, 50, 75]
    assert t["bytes"].tolist() == [7, 7, 7, 7]  # the free at 100 falls in the last bucket


def cross_trace():
    """Thread 0 allocates a, b, c; thread 1 (started by 0) frees a and b,
    thread 2 (started by 1) frees c; thread 0 frees its own d."""
    return Trace.from_ops([
        [op("malloc", size=8, id=0, seq=1), op("malloc", size=8, id=1, seq=2),
         op("malloc", size=8, id=2, seq=3), op("malloc", size=8, id=3, seq=4),
         op("free", ref=3, seq=5)],
        [op("thread_start", aux=0, seq=6), op("free", ref=0, seq=7), op("free", ref=1, seq=8),
         op("thread_exit", seq=9)],
        [op("thread_start", aux=1, seq=10), op("free", ref=2, seq=11)]])


def test_cross_thread_frees_and_pairs():
    info = cross_trace().info()
    x = info.cross
    assert (x["total"], x["frees"], x["reallocs"]) == (3, 3, 0)
    assert x["share"] == 0.75
    assert x["pairs"] == [{"from": 0, "to": 1, "count": 2}, {"from": 0, "to": 2, "count": 1}]


def test_threads_parent_tree_and_counts():
    info = cross_trace().info()
    th = info.threads
    assert [t["parent"] for t in th] == [None, 0, 1]
    assert [(t["ops"], t["allocs"], t["frees"], t["bytes"]) for t in th] == [
        (5, 4, 1, 32), (4, 0, 2, 0), (2, 0, 1, 0)]
    assert [(t["started"], t["exited"]) for t in th] == [(False, False), (True, True),
                                                         (True, False)]
    assert [t["by_kind"] for t in th] == [{"malloc": 4, "free": 1},
                                          {"free": 2, "thread_start": 1, "thread_exit": 1},
                                          {"free": 1, "thread_start": 1}]
    lines = info.text().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("threads"))
    assert [ln.split()[0] for ln in lines[i + 2:i + 5]] == ["0", "1", "2"]
    assert lines[i + 3].startswith("    1") and lines[i + 4].startswith("      2")


def realloc_trace():
    """A chain of three reallocs of one object (16 -> 32 moved -> 32 in place
    -> 8 moved, then freed), realloc(NULL, 10), realloc(p, 0) freeing p, a
    failed realloc (p survives and is freed), a realloc of an object from
    before recording, and a resize of a size-0 object."""
    return Trace.from_ops([[
        op("malloc", size=16, id=0), op("realloc", size=32, aux=16, ref=0, id=1, flags=FLAG_MOVED),
        op("realloc", size=32, aux=32, ref=1, id=2), op("realloc", size=8, aux=32, ref=2, id=3,
                                                          flags=FLAG_MOVED),
        op("free", ref=3),
        op("realloc", size=10, id=4), op("realloc", size=0, aux=10, ref=4, flags=FLAG_ZERO),
        op("malloc", size=5, id=5), op("realloc", size=1 << 50, aux=5, ref=5, flags=FLAG_NULL),
        op("free", ref=5),
        op("realloc", size=64, aux=48, id=6, flags=FLAG_UNKNOWN | FLAG_MOVED),
        op("malloc", size=0, id=7, flags=FLAG_ZERO), op("realloc", size=40, aux=0, ref=7, id=8),
        op("free", ref=6), op("free", ref=8)]])


def test_realloc_outcomes_factors_and_chains():
    info = realloc_trace().info()
    r = info.realloc
    assert (r["total"], r["failed"], r["from_null"], r["unknown"], r["to_zero"],
            r["resized"]) == (8, 1, 1, 1, 1, 4)
    assert (r["grow"], r["shrink"], r["same"], r["moved"]) == (2, 1, 1, 2)
    assert r["moved_share"] == 0.5
    assert r["factors"] == dict({b: 0 for b in FACTOR_BINS}, **{
        "1.5-2": 1, "same": 1, "<=1/4": 1, "from 0": 1})
    ch = r["chains"]
    assert ch["objects"] == 2 and ch["mean"] == 2.0
    assert ch["lengths"].rows() == [(1, 2, 1), (2, 4, 1)]
    assert ch["longest"] == {"reallocs": 3, "first_id": 0, "first_size": 16, "last_size": 8,
                             "thread": 0}
    k = info.kinds
    assert k["null_returns"]["realloc"] == 1  # the failed one, not realloc(p, 0)
    assert k["unknown"] == {"realloc": 1}
    # live bytes: the chain's 16/32/32/8, 10 then 0, 5 (freed), 64 with 0 then 40
    assert info.live["by_seq"]["bytes"].tolist() == [16, 32, 32, 8, 0, 10, 0, 5, 5, 0, 64, 64,
                                                     104, 40, 0]
    assert info.end["objects"] == 0
    assert (info.live["peak_bytes"], info.live["peak_seq"]) == (104, 13)


def test_null_returns_unknown_frees_and_free_null():
    tr = Trace.from_ops([[
        op("malloc", size=1 << 60, flags=FLAG_NULL), op("calloc", size=1 << 62, aux=1 << 31,
                                                        flags=FLAG_NULL),
        op("aligned_alloc", size=0, aux=4096, flags=FLAG_NULL | FLAG_ZERO),
        op("free", flags=FLAG_UNKNOWN), op("free", flags=FLAG_UNKNOWN),
        op("free", flags=FLAG_NULL), op("usable_size", size=24, flags=FLAG_UNKNOWN),
        op("malloc", size=24, id=0), op("usable_size", ref=0, size=24), op("free", ref=0)]])
    info = tr.info()
    k = info.kinds
    assert {n: c for n, c in k["null_returns"].items() if c} == {
        "malloc": 1, "calloc": 1, "aligned_alloc": 1}
    assert k["zero_requests"] == {"aligned_alloc": 1}
    assert k["unknown"] == {"free": 2, "usable_size": 1}
    assert k["free_null"] == 1
    assert k["ops"]["free"] == 4 and k["ops"]["usable_size"] == 2
    assert sum(k["ops"].values()) == info.summary["nops"] == 10
    assert k["bytes"]["malloc"] == 24  # failed requests are not bytes requested
    assert info.sizes["all"].rows() == [(16, 32, 1)]
    assert info.cross["total"] == 0 and info.lifetimes["freed"] == 1
    text = info.text()
    assert "free(NULL): 1" in text


def test_empty_trace():
    info = Trace.from_ops([[], []]).info()
    assert info.summary["nops"] == 0 and info.live["peak_seq"] is None
    assert info.live["by_seq"] is None and info.end["objects"] == 0
    assert "no object was created" in info.text()
    json.dumps(info.to_dict())


def test_a_trace_that_only_frees_has_no_peak():
    info = Trace.from_ops([[op("free", flags=FLAG_UNKNOWN)]]).info()
    assert info.live["peak_bytes"] == 0 and info.live["peak_seq"] is None
    assert "no byte was ever live" in info.text()


# ------------------------------------------------------------------ power-of-two bins

def test_bit_length_is_exact_at_every_boundary():
    vals = [0, 1, 2, 3, 4, (1 << 53) - 1, 1 << 53, (1 << 53) + 1, (1 << 63) - 1, 1 << 63,
            (1 << 64) - 1]
    assert _bitlen(np.array(vals, dtype=np.uint64)).tolist() == [v.bit_length() for v in vals]


def test_pow2hist_bounds_and_count():
    h = Pow2Hist(np.array([0, 5, 6, 7, 8], dtype=np.uint64))
    assert h.rows() == [(0, 1, 1), (1, 2, 0), (2, 4, 0), (4, 8, 3), (8, 16, 1)]
    assert h.count(4) == 3 and h.count(1 << 40) == 0 and h.total == 5
    assert h.to_dict()[3] == {"lo": 4, "hi": 8, "count": 3}


# ------------------------------------------------------------------ against a per-op walk

def _random_op(rng, live, nid):
    """One op on the objects in ``live`` (ids; changed in place): returns
    the op (without seq, t_ns) and the next free id."""
    r = rng.random()
    if r < 0.4 or not live:
        kind = rng.choice(["malloc", "calloc", "posix_memalign", "aligned_alloc"])
        size = rng.choice([0, 8, 24, 100, 5000])
        live.append(nid)
        return dict(kind=kind, size=size, id=nid, flags=FLAG_ZERO if size == 0 else 0), nid + 1
    if r < 0.7:
        return dict(kind="free", ref=live.pop(rng.randrange(len(live)))), nid
    if r < 0.82:
        live.append(nid)
        return dict(kind="realloc", ref=live.pop(rng.randrange(len(live) - 1)), id=nid,
                    size=rng.choice([1, 16, 64, 300]),
                    flags=rng.choice([0, FLAG_MOVED])), nid + 1
    other = [lambda: dict(kind="free", flags=FLAG_UNKNOWN),
             lambda: dict(kind="free", flags=FLAG_NULL),
             lambda: dict(kind="malloc", size=1 << 50, flags=FLAG_NULL),
             lambda: dict(kind="realloc", ref=rng.choice(live), size=1 << 50, flags=FLAG_NULL),
             lambda: dict(kind="realloc", ref=live.pop(rng.randrange(len(live))), size=0,
                          flags=FLAG_ZERO | FLAG_NULL),
             lambda: dict(kind="usable_size", ref=rng.choice(live), size=32),
             lambda: dict(kind="realloc", size=40, id=nid)]
    o = other[rng.randrange(len(other))]()
    if o.get("id") is not None:
        live.append(nid)
        nid += 1
    return o, nid


def random_ops(seed, nthreads=3, nops=300, dense=True):
    """A consistent random trace of every kind of outcome (allocations,
    frees from any thread, resizing, failed and freeing reallocs, NULL
    returns, unknown frees, free(NULL), usable-size queries) as from_ops
    threads with explicit seq and t_ns."""
    rng = random.Random(seed)
    threads = [[] for _ in range(nthreads)]
    now = [0] * nthreads
    live, nid, seq = [], 0, 0
    for _ in range(nops):
        k = rng.randrange(nthreads)
        seq += 1 if dense else rng.randint(1, 5)
        now[k] += rng.randint(0, 40)
        o, nid = _random_op(rng, live, nid)
        o.update(seq=seq, t_ns=now[k])
        threads[k].append(o)
    return threads


def walk(threads):
    """The analysis as a per-op walk in seq order: live bytes after each op,
    lifetimes, cross-thread frees, live objects at the end. An op consumes
    its ref when it is a free or a realloc that returned an object or had
    size 0."""
    ops = sorted(((o["seq"], k, o) for k, th in enumerate(threads) for o in th),
                 key=lambda x: x[0])
    obj, live, series, life_ops, life_ns, cross = {}, 0, [], [], [], {}
    for pos, (_, k, o) in enumerate(ops):
        ref, new = o.get("ref"), o.get("id")
        gone = o["kind"] == "free" or (o["kind"] == "realloc" and (
            new is not None or o["size"] == 0))
        if ref is not None and gone:
            size, owner, cpos, ct = obj.pop(ref)
            live -= size
            life_ops.append(pos - cpos)
            life_ns.append(max(0, o["t_ns"] - ct))
            if owner != k:
                cross[(owner, k)] = cross.get((owner, k), 0) + 1
        if new is not None:
            obj[new] = (o["size"], k, pos, o["t_ns"])
            live += o["size"]
        series.append(live)
    return series, life_ops, life_ns, cross, obj


@pytest.mark.parametrize("seed,dense", [(s, d) for s in range(8) for d in (True, False)])
def test_vectorised_analysis_matches_a_per_op_walk(seed, dense):
    threads = random_ops(seed, nthreads=1 + seed % 4, dense=dense)
    info = Trace.from_ops(threads).info(points=10_000)
    series, life_ops, life_ns, cross, left = walk(threads)
    assert info.live["by_seq"]["bytes"].tolist() == series
    assert info.live["peak_bytes"] == max(series)
    assert info.live["by_seq"]["pos"].tolist() == list(range(len(series)))
    assert info.lifetimes["ops"] == Pow2Hist(np.array(life_ops, dtype=np.uint64))
    assert info.lifetimes["ns"] == Pow2Hist(np.array(life_ns, dtype=np.uint64))
    assert info.lifetimes["freed"] + info.end["objects"] == info.summary["nobjects"]
    assert info.end["objects"] == len(left)
    assert info.end["bytes"] == sum(v[0] for v in left.values()) == series[-1]
    assert info.cross["total"] == sum(cross.values())
    assert {(p["from"], p["to"]): p["count"] for p in info.cross["pairs"]} == cross
    assert sum(t["ops"] for t in info.threads) == info.summary["nops"]


@given(st.integers(0, 2**32), st.integers(1, 6), st.integers(0, 200), st.booleans())
def test_invariants_of_any_trace(seed, nthreads, nops, dense):
    info = Trace.from_ops(random_ops(seed, nthreads, nops, dense)).info(points=7)
    s, k = info.summary, info.kinds
    assert sum(k["ops"].values()) == s["nops"] == sum(t["ops"] for t in info.threads)
    assert info.lifetimes["freed"] + info.end["objects"] == s["nobjects"]
    assert info.lifetimes["ops"].total == info.lifetimes["freed"]
    assert info.sizes["all"].total == s["nobjects"]
    assert sum(h.total for n, h in info.sizes.items() if n != "all") == s["nobjects"]
    if s["nops"]:
        assert info.live["by_seq"]["bytes"].max() == info.live["peak_bytes"]
        assert info.live["by_time"]["bytes"].max() == info.live["peak_bytes"]
        assert len(info.live["by_seq"]["pos"]) <= 7 and len(info.live["by_time"]["t_ns"]) <= 7
    r = info.realloc
    assert r["grow"] + r["shrink"] + r["same"] == r["resized"] == sum(r["factors"].values())
    assert r["failed"] + r["from_null"] + r["unknown"] + r["to_zero"] + r["resized"] == r["total"]
    assert sum(p["count"] for p in info.cross["pairs"]) == info.cross["total"]
    assert json.loads(json.dumps(info.to_dict())) == info.to_dict()
    assert info.text()


# ------------------------------------------------------------------ JSON and text

def test_to_dict_round_trips_through_json():
    info = realloc_trace().info()
    d = info.to_dict()
    back = json.loads(json.dumps(d))
    assert back == d
    assert back["realloc"]["chains"]["longest"]["reallocs"] == 3
    assert back["sizes"]["all"] == info.sizes["all"].to_dict()
    assert back["live"]["by_seq"]["bytes"] == info.live["by_seq"]["bytes"].tolist()
    assert set(back) == {"summary", *al.TraceInfo.SECTIONS}


def test_text_header_and_non_empty_bins():
    text = lifetimes_trace().info().text()
    assert "1 threads, 5 ops, 3 objects, from 10 ns to 100 ns after the trace began" in text
    info = size_mix().info()
    assert (info.summary["first_ns"], info.summary["last_ns"]) == (0, 0)
    rows = [ln.split()[0] for ln in info.text().splitlines() if ln.startswith("  ")]
    assert "4K-8K" in rows and "16-32" in rows
    assert "4-8" not in rows and "32-64" not in rows  # empty bins are not printed


def test_text_report_names_the_numbers():
    text = str(cross_trace().info())
    assert "4 threads" not in text and "3 threads, 11 ops, 4 objects" in text
    assert "cross-thread frees: 3 of 4 frees" in text and "(75.0%)" in text
    assert "thread 0 -> thread 1" in text
    assert "live requested bytes: peak 32 B (32 bytes, 4 objects)\n  at seq 4 (a malloc of " \
        "thread 0), 0 ns into the trace" in text


# ------------------------------------------------------------------ the command line

def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "t.trace"
    realloc_trace().save(str(path))
    return str(path)


def test_cli_prints_the_report(capsys, saved):
    rc, out, err = run_cli(capsys, "trace", "info", saved)
    assert rc == 0 and err == ""
    assert "15 ops" in out and "reallocs: 8: 4 resized" in out
    assert "bytes/op" in out


def test_cli_json_is_the_analysis(capsys, saved):
    rc, out, err = run_cli(capsys, "trace", "info", saved, "--json")
    assert rc == 0
    d = json.loads(out)
    ref = json.loads(json.dumps(realloc_trace().info().to_dict()))
    meta = d["summary"].pop("meta")
    ref["summary"].pop("meta")
    assert d == ref
    assert meta["ops"] == 15 and meta["threads"] == 1


@pytest.mark.parametrize("ext", ["png", "pdf", "svg"])
def test_cli_plot_writes_the_figure(capsys, saved, tmp_path, ext):
    out = tmp_path / ("fig." + ext)
    rc, _, err = run_cli(capsys, "trace", "info", saved, "--plot", str(out))
    assert rc == 0 and out.stat().st_size > 1000
    assert err == "alloclab: wrote %s\n" % out


def one_error_line(err):
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("alloclab: error: "), err
    return lines[0]


def test_cli_errors(capsys, saved, tmp_path):
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a trace at all\n")
    cut = tmp_path / "cut.trace"
    cut.write_bytes(open(saved, "rb").read()[:-7])
    index = tmp_path / "rec.trace.index.json"
    index.write_text('{"images": [{"file": "rec.trace"}, {"file": "rec.77.trace"}]}')
    cases = [
        (["trace", "info", str(index)], "index of a recording, not a trace; its traces: "
                                        "rec.trace, rec.77.trace"),
        (["trace", "info", str(tmp_path / "none.trace")], "none.trace: no such file"),
        (["trace", "info", str(tmp_path)], "it is a directory, not a regular file"),
        (["trace", "info", str(junk)], "not an alloclab trace"),
        (["trace", "info", str(cut)], str(cut)),
        (["trace", "info", saved, "--plot", str(tmp_path / "x.nosuch")], "valid plot formats"),
        (["trace", "info", saved, "--plot", str(tmp_path / "no" / "x.png")], "does not exist"),
        (["trace", "info", saved, "--plot", str(tmp_path)], "is a directory"),
        (["trace", "info", saved, "--top", "0"], "--top 0"),
        (["trace"], "valid commands: info"),
        (["trace", "info"], "FILE"),
    ]
    for argv, words in cases:
        rc, out, err = run_cli(capsys, *argv)
        assert rc == 2, (argv, rc, err)
        assert words in one_error_line(err), (argv, err)
        assert out == ""
    assert not (tmp_path / "x.nosuch").exists()


# ------------------------------------------------------------------ plots

def test_overview_has_six_labelled_panels():
    info = cross_trace().info()
    fig = plot_trace.overview(info)
    axes = fig.axes
    assert len(axes) == 6
    assert [ax.get_xlabel() for ax in axes] == [  # three rows of two
        "time since the trace began (ns)", "ops (global sequence order)",
        "request size (bytes, bin start)", "thread",
        "lifetime in ops (bin start)", "lifetime in time (bin start)"]
    assert [t.get_text() for t in axes[0].texts] == ["peak 32 B"]  # beside the peak's dot


def test_size_plot_stacks_kinds():
    info = size_mix().info()
    ax = plot_trace.sizes(info).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["malloc", "calloc", "posix_memalign"]
    nbins = len(info.sizes["all"].rows())
    assert len(ax.patches) == 3 * nbins
    assert sum(p.get_height() for p in ax.patches) == info.sizes["all"].total


def test_thread_plot_and_lifetimes_plot(tmp_path):
    info = cross_trace().info()
    ax = plot_trace.threads(info).axes[0]
    assert len(ax.patches) == 4 * 3  # allocations, frees, reallocs, other for each thread
    heights = [p.get_height() for p in ax.patches]
    assert heights == [4, 0, 0, 1, 2, 1, 0, 0, 0, 0, 2, 1]  # class by class, thread by thread
    assert [sum(heights[k::3]) for k in range(3)] == [t["ops"] for t in info.threads]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "1", "2"]
    fig = plot_trace.lifetimes(lifetimes_trace().info())
    assert sum(p.get_height() for p in fig.axes[0].patches) == 2
    paths = plot.save([fig, plot_trace.live_bytes(info)], str(tmp_path / "p.png"))
    assert paths == [str(tmp_path / "p.png"), str(tmp_path / "p-1.png")]


def test_plots_refuse_what_is_not_an_analysis():
    with pytest.raises(al.InvalidArgument, match="TraceInfo"):
        plot_trace.overview(cross_trace())


def test_the_analysis_outlives_its_trace():
    tr = cross_trace()
    info = tr.info()
    before = info.to_dict()
    tr.close()
    junk = [Trace.from_ops([[op("malloc", size=99, id=0)]]) for _ in range(4)]  # reuse memory
    assert info.to_dict() == before and "thread 0 -> thread 1" in info.text()
    del junk


@pytest.mark.parametrize("kw", [dict(points=0), dict(points=2.5), dict(top_pairs=0),
                                dict(points=True)])
def test_bad_arguments_are_named(kw):
    with pytest.raises(al.ParameterRangeError, match=list(kw)[0]):
        al.trace_info(cross_trace(), **kw)


@pytest.mark.parametrize("what", ["t.trace", None, {"ops": []}])
def test_what_is_not_a_trace_is_refused(what):
    with pytest.raises(al.InvalidArgument, match="alloclab.trace.load"):
        al.trace_info(what)


def test_a_closed_trace_is_refused():
    tr = cross_trace()
    tr.close()
    with pytest.raises(al.InvalidArgument, match="closed"):
        tr.info()


def test_cli_as_a_user_runs_it(saved, tmp_path):
    ok = subprocess.run([sys.executable, "-m", "alloclab", "trace", "info", saved, "--top", "3"],
                        capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and ok.stderr == "" and "reallocs: 8" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "alloclab", "trace", "info",
                          str(tmp_path / "none")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr == "alloclab: error: cannot read trace file %s: no such file\n" % (tmp_path / "none")


def test_a_command_line_with_dollars_is_drawn_as_written(tmp_path):
    # matplotlib reads $...$ as mathtext: `sh -c "kill -SEGV $$"` must still draw.
    meta = {"program": "/bin/sh", "argv": ["sh", "-c", "kill -SEGV $$"]}
    info = Trace.from_ops([[op("malloc", size=1, id=0)]], meta=meta).info()
    for fig in (plot_trace.overview(info), plot_trace.sizes(info)):
        fig.canvas.draw()
    paths = plot.save([plot_trace.overview(info)], str(tmp_path / "d.png"))
    assert os.path.getsize(paths[0]) > 0
    assert info.text().splitlines()[0] == "trace of sh -c kill -SEGV $$"


def test_a_hand_edited_argv_that_is_one_string_is_shown_whole():
    meta = {"program": "/bin/x", "argv": "x --flag"}
    info = Trace.from_ops([[op("malloc", size=1, id=0)]], meta=meta).info()
    assert info.text().splitlines()[0] == "trace of x --flag"
    assert plot_trace.overview(info)._suptitle.get_text().startswith("x --flag: ")


def test_header_names_the_recording():
    meta = {"program": "/usr/bin/gcc", "argv": ["gcc", "-c", "x.c"], "pid": 42, "ppid": 41,
            "recorded": "2026-01-02T03:04:05+00:00", "policy": "buddy",
            "machine": {"cpu_model": "Some CPU", "cpus": 8}, "end": "killed",
            "complete": False, "note": "no exit record", "unrecorded": 3}
    lines = Trace.from_ops([[op("malloc", size=1, id=0)]], meta=meta).info().text().splitlines()
    assert lines[:3] == [
        "trace of gcc -c x.c (pid 42, ppid 41)",
        "recorded 2026-01-02T03:04:05+00:00 on Some CPU (8 CPUs) policy buddy",
        "process image was killed, incomplete: no exit record, 3 calls not recorded"]


def test_cli_names_the_other_images_of_a_recording(capsys, saved):
    images = [{"file": "t.trace", "pid": 1, "ops": 15},
              {"file": "t.2.trace", "pid": 2, "argv": ["sh", "-c", "x"], "ops": 7},
              {"file": "t.3.trace", "pid": 3, "exe": "/bin/cc", "ops": 90, "complete": False}]
    with open(saved + ".index.json", "w") as f:
        json.dump({"images": images}, f)
    rc, out, _ = run_cli(capsys, "trace", "info", saved)
    assert rc == 0
    assert out.splitlines()[-3:] == [
        "this recording holds 2 more process images (t.trace.index.json), most ops first:",
        "  t.3.trace: pid 3, /bin/cc, 90 ops (incomplete)",
        "  t.2.trace: pid 2, sh -c x, 7 ops"]
    with open(saved + ".index.json", "w") as f:
        f.write("{not json")
    rc, out, err = run_cli(capsys, "trace", "info", saved)
    assert rc == 0 and "more process images" not in out and err == ""


def test_cyclic_realloc_links_are_an_error_not_a_hang():
    from alloclab.traceinfo import _chains
    o = {"size": np.zeros(3, np.uint64), "cpos": np.zeros(3, np.int64),
         "owner": np.zeros(3, np.uint32)}
    with pytest.raises(al.InvalidArgument, match="cycle"):
        _chains(o, np.array([0, 1, 2]), np.array([1, 2, 0]))
    chain = _chains(o, np.array([1, 2]), np.array([0, 1]))  # 0 -> 1 -> 2
    assert chain["objects"] == 1 and chain["longest"]["reallocs"] == 2
