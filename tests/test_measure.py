"""Per-op histograms (Python side and runs), memory per run, and results as
data: rows/CSV/pandas, JSON with the schema version, concat and filter."""

import io
import json
import math

import numpy as np
import pytest

import alloclab as al
from alloclab import hist
from alloclab._ffi import lib

from conftest import FAST


def test_bucket_bounds_match_the_library():
    assert hist.NBUCKETS == lib.AL_HIST_BUCKETS
    for i in range(hist.NBUCKETS):
        assert int(hist.BUCKET_LO[i]) == lib.al_hist_bucket_lo(i)
        assert int(hist.BUCKET_HI[i]) == lib.al_hist_bucket_hi(i)
    rng = np.random.default_rng(1)
    for v in list(range(300)) + [int(x) for x in rng.integers(0, 1 << 62, 2000)] + [(1 << 64) - 1]:
        b = hist.bucket_of(v)
        assert hist.BUCKET_LO[b] <= v <= hist.BUCKET_HI[b]


def test_percentiles_within_a_bucket_of_the_truth():
    rng = np.random.default_rng(2)
    ticks = np.concatenate([rng.integers(40, 60, 5000), rng.integers(1000, 5000, 50),
                            [123456]]).astype(np.int64)
    h = hist.Histogram.from_values(ticks, ticks_per_ns=2.0)
    assert h.count == len(ticks) and h.max == 123456 and h.min == ticks.min()
    for q in (50, 90, 99, 99.9):
        true = np.percentile(ticks, q, method="inverted_cdf")
        got = h.percentile_ticks(q)
        assert true <= got <= true * (1 + 1 / 16) + 1, (q, true, got)
        assert h.percentile(q) == got / 2.0
    assert h.percentile(100) == 123456 / 2.0 and h.max_ns == 123456 / 2.0
    assert h.mean_ns == pytest.approx(ticks.mean() / 2.0)
    x, f = h.cdf()
    assert f[-1] == 1.0 and np.all(np.diff(f) > 0) and np.all(np.diff(x) > 0)
    with pytest.raises(al.InvalidArgument):
        h.percentile(0)


def test_merge_and_round_trip():
    a = hist.Histogram.from_values([10, 20, 30, 1000], 3.0)
    b = hist.Histogram.from_values([5, 7, 2000], 3.0)
    assert a + b == hist.Histogram.from_values([10, 20, 30, 1000, 5, 7, 2000], 3.0)
    assert sum([a, b]) == a + b
    assert a + hist.Histogram(ticks_per_ns=3.0) == a
    assert hist.Histogram.from_dict(json.loads(json.dumps(a.to_dict()))) == a
    with pytest.raises(al.InvalidArgument, match="clocks"):
        a + hist.Histogram.from_values([1], 1.0)
    empty = hist.Histogram()
    assert math.isnan(empty.percentile(50)) and empty.count == 0 and "empty" in repr(empty)


@pytest.fixture(scope="module")
def hres():
    return al.run("malloc-free", ["buddy", "libarena-spill"], producers=[1, 2], histogram=True,
                  runs=2, cycles=30, warmup_cycles=2, mem_sample=0)


def test_run_with_histograms(hres):
    assert {p.params["timing"] for p in hres.points} == {"per_op_sum"}
    assert hres.metadata["run"]["histogram"] is True
    for p in hres.points:
        assert len(p.hist["alloc"]) == 2 and len(p.hist["free"]) == 2
        for i in range(2):
            assert p.hist["alloc"][i].count == p.data["alloc_ops"][i]
            assert p.hist["free"][i].count == p.data["free_ops"][i]
            qs = [p.data["alloc_%s_ns" % k][i] for k in ("p50", "p90", "p99", "p999", "max")]
            assert qs == sorted(qs) and qs[0] > 0
            # the histogram's sum is the per_op_sum total
            h = p.hist["alloc"][i]
            assert h.mean_ns == pytest.approx(p.data["alloc_ns"][i], rel=1e-6)
    h = hres.histogram("alloc", policy="buddy")
    assert h.count == sum(int(x) for p in hres.filter(policy="buddy").points
                          for x in p.data["alloc_ops"])
    assert "p99.9" in h.summary(18.0) and "clock pair" in h.summary(18.0)
    back = al.Result.from_json(hres.to_json())
    assert back == hres and back.points[0].hist["alloc"][1] == hres.points[0].hist["alloc"][1]
    t = hres.table("alloc_p99_ns")
    assert "p99" in t.title and not np.isnan(t.values).any()


def test_histogram_options_are_checked():
    with pytest.raises(al.InvalidArgument, match="per_op_sum"):
        al.run("malloc-free", "libc", histogram=True, timing="batch", **FAST)
    with pytest.raises(al.ParameterTypeError, match="histogram"):
        al.run("malloc-free", "libc", histogram="yes", **FAST)
    with pytest.raises(al.ParameterRangeError, match="mem_sample"):
        al.run("malloc-free", "libc", mem_sample=1e-6, **FAST)
    with pytest.raises(al.ParameterTypeError, match="mem_sample"):
        al.run("malloc-free", "libc", mem_sample="10ms", **FAST)
    plain = al.run("malloc-free", "libc", **FAST)
    assert plain.points[0].hist == {} and "alloc_p50_ns" not in plain.metrics()
    assert plain.points[0].params["timing"] == "batch"
    with pytest.raises(al.InvalidArgument, match="histogram=True"):
        plain.histogram("alloc")
    with pytest.raises(al.UnknownNameError, match="realloc"):
        plain.histogram("realloc")


def test_memory_per_run():
    res = al.run("malloc-xfree", ["buddy", "libarena-spill"], producers=2, size=64,
                 allocs_per_cycle=32, runs=1, duration=0.02, mem_sample=0.002, warmup_cycles=5)
    for p in res.points:
        d = {k: p.data[k][0] for k in p.data if k.startswith("mem_")}
        assert d["mem_samples"] >= 3
        # the list left in the slot at the end: requested exactly, held at least that
        assert d["mem_requested"] == 32 * 64
        assert d["mem_held"] >= d["mem_requested"]
        assert d["mem_fragmentation"] == pytest.approx(d["mem_held"] / d["mem_requested"])
        assert d["mem_requested_peak"] >= d["mem_requested"] and d["mem_requested_peak"] % 64 == 0
        assert d["mem_held_peak"] >= d["mem_held"]
        assert d["mem_rss_peak"] >= d["mem_rss"] > 0
    buddy = res.filter(policy="buddy").points[0]
    assert buddy.data["mem_fragmentation"][0] == 1.0  # 64-byte blocks for 64-byte requests
    mf = al.run("malloc-free", "buddy", size=100, allocs_per_cycle=8, **FAST)
    p = mf.points[0]
    assert p.data["mem_requested"][0] == 0 and p.data["mem_held"][0] == 0
    assert math.isnan(p.data["mem_fragmentation"][0])  # nothing live when the phase ends
    assert p.data["mem_samples"][0] == 2  # mem_sample=0.01 s, a phase far shorter


def test_rows_csv_pandas_and_json_version():
    res = al.run("malloc-free", ["buddy", "libc"], producers=[1, 2], runs=2, cycles=5,
                 warmup_cycles=0, mem_sample=0)
    rows = res.rows()
    assert len(rows) == 8 and {"policy", "producers", "run", "alloc_ns", "mem_held_peak",
                               "mem_rss"} <= set(rows[0])
    buf = io.StringIO()
    res.to_csv(buf)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 9 and "mem_fragmentation" in lines[0].split(",")
    d = json.loads(res.to_json())
    assert d["format"] == "alloclab-result" and d["format_version"] == 2
    assert d["metadata"]["run"]["mem_sample"] == 0 and "cpu_model" in d["metadata"]
    pd = pytest.importorskip("pandas")
    df = res.to_pandas()
    assert isinstance(df, pd.DataFrame) and len(df) == 8


def test_concat_and_filter():
    a = al.run("malloc-free", ["buddy", "libc"], producers=[1, 2], **FAST)
    b = al.run("malloc-free", "libarena-spill", producers=[1, 2], **FAST)
    c = a + b
    assert isinstance(c, al.Result) and len(c.points) == 6
    assert al.Result.concat([a, b]).points == c.points
    assert c.metadata["parts"] == [a.metadata, b.metadata]
    with pytest.raises(al.InvalidArgument, match="repeats"):
        a + a  # the same runs twice would be counted twice
    a2 = al.run("malloc-free", ["buddy", "libc"], producers=[1, 2], **FAST)
    assert len((a + a2).points) == 8
    # equal points of other runs pool their runs in tables and stats
    assert (a + a2).table("alloc_ns").n.max() == 2
    f = c.filter(policy="libarena-spill")
    assert [p.params["policy"] for p in f.points] == ["libarena-spill"] * 2  # the name given
    assert [p.info["policy_spec"] for p in f.points] == ["percpu > buddy"] * 2
    # a preset's spec selects it too, in filter and select alike
    assert c.filter(policy="percpu > buddy").points == f.points
    assert c.select(policy="percpu>buddy") == f.points == c.select(policy="libarena-spill")
    assert c.select(policy="libarena-transfer") == []
    assert len(c.filter(policy=["buddy", "libc"], producers=2).points) == 2
    assert len(c.filter(producers=lambda n: n > 1).points) == 3
    assert c.filter(producers=7).points == []
    assert c.filter(policy="buddy").metadata is c.metadata
    with pytest.raises(al.UnknownNameError, match="nope"):
        c.filter(nope=1)
    with pytest.raises(al.InvalidArgument):
        al.Result.concat([a, "b"])
    with pytest.raises(al.InvalidArgument):
        al.Result.concat([])
    back = al.Result.from_json(c.to_json())
    assert back == c


def test_old_results_still_load():
    res = al.run("malloc-free", "libc", **FAST)
    d = json.loads(res.to_json())
    d["format_version"] = 1
    for p in d["points"]:
        p.pop("hist", None)
    old = al.Result.from_json(json.dumps(d))
    assert old.points[0].hist == {}
    d["format_version"] = 99
    with pytest.raises(al.InvalidArgument, match="newer"):
        al.Result.from_json(json.dumps(d))


def test_held_peak_without_stats_anytime_is_not_measured_never_zero():
    # kzalloc's slab bottom layer may not report bytes held beside running
    # workers: only the two ends are read, so its peak is unknown, never 0
    res = al.run("malloc-free", ["buddy", "kzalloc"], size=64, allocs_per_cycle=16, runs=2,
                 duration=0.03, mem_sample=0.002, warmup_cycles=2)
    slab = res.filter(policy="kzalloc").points[0]
    assert slab.data["mem_samples"][0] > 2
    assert all(math.isnan(v) for v in slab.data["mem_held_peak"])
    buddy = res.filter(policy="buddy").points[0]
    if lib.al_cpus_usable() >= 2:
        # buddy: stats_anytime, read by the main thread on the spare CPU while the
        # worker holds its cycle's objects
        assert all(v > 0 for v in buddy.data["mem_held_peak"])
    else:
        # no CPU to spare: worker 0 samples between its cycles, where malloc-free
        # holds nothing; measured all the same
        assert all(v == 0 for v in buddy.data["mem_held_peak"])
    text = res.table("mem_held_peak").to_text()
    row = [line for line in text.splitlines() if line.split()[:1] == ["16"]][0]
    assert row.split()[-1] == "n/a" and row.split()[-2] != "n/a"
    assert "n/a: not measured (mem_held_peak: " in text and "stats_anytime" in text
    assert "0 runs" not in text  # no statistics of values no run measured
