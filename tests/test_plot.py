"""Plots rendered headless (Agg) and checked for content: axis labels, the
number of lines, panels and bars, the colour range of a heatmap."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import alloclab as al  # noqa: E402

from conftest import FAST  # noqa: E402


@pytest.fixture(scope="module")
def res():
    return al.run("malloc-free", ["buddy", "libc", "libarena-spill"], producers=[1, 2],
                  allocs_per_cycle=[1, 16], runs=2, cycles=20, warmup_cycles=2, histogram=True,
                  mem_sample=0)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _lines(ax):
    return [ln for ln in ax.get_lines() if ln.get_label() and not ln.get_label().startswith("_")]


def test_latency_one_line_per_policy_panel_per_allocs(res):
    fig = al.plot.latency(res, "alloc_ns")
    axes = fig.axes
    assert len(axes) == 2  # a panel per allocs/cycle
    assert [ax.get_title() for ax in axes] == ["allocs/cycle=1", "allocs/cycle=16"]
    for ax in axes:
        assert ax.get_xlabel() == "producers"
        assert len(ax.containers) == 3  # an errorbar per policy
        xs = [list(c.lines[0].get_xdata()) for c in ax.containers]
        assert xs == [[1, 2]] * 3
    assert axes[0].get_ylabel() == "allocation latency (ns)"
    legend = axes[-1].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "buddy", "libc", "libarena-spill"]  # the name the user gave
    # the plotted means are the table's
    t = res.table("alloc_ns")
    y = axes[1].containers[0].lines[0].get_ydata()
    assert np.allclose(y, t.cube[0, 1, :])
    fig2 = res.plot("free_ns", error="ci", panel="allocs_per_cycle")
    assert fig2.axes[0].get_ylabel() == "free latency (ns)" and "95% CI" in fig2._suptitle.get_text()
    with pytest.raises(al.UnknownNameError):
        al.plot.latency(res, "alloc_ns", x="nope")


def test_heatmap_colour_range_and_labels(res):
    cmp = al.compare(res, baseline="buddy", metric=["alloc_ns", "free_ns"])
    fig = al.plot.heatmap(cmp)
    ax = fig.axes[0]
    im = ax.get_images()[0]
    lo, hi = im.get_clim()
    assert lo == -hi and 5 <= hi <= 100  # symmetric about "no change"
    assert im.get_cmap().name == "RdYlGn"
    labels, cols, vals, marks = cmp.matrix()
    geo = [label for label, _ in cmp.geo_rows()]
    assert geo == ["alloc_ns: geometric mean", "free_ns: geometric mean"]
    assert [t.get_text() for t in ax.get_yticklabels()] == labels + geo
    assert [t.get_text() for t in ax.get_xticklabels()] == cols
    assert im.get_array().shape == (len(labels) + 2, 2) == (10, 2)
    assert np.allclose(im.get_array()[8, :], [cmp.geomean(c, "alloc_ns").change_pct for c in cols])
    assert ax.get_xlabel() == "against buddy"
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 20
    # each cell: its change (with mark, n.s. or <2%), then the reading aid
    for t in texts:
        first, aid = t.split("\n")
        assert first.split()[-1].endswith("%") or first.split()[-1] in ("n.s.", "<2%")
        assert aid.endswith(("slower", "faster")) or aid == "no change"
    c = cmp.cells[0]
    assert any(t.endswith("\n" + c.aid()) and ("%+.1f%%" % c.change_pct) in t for t in texts)
    assert "positive = better" in fig.axes[1].get_ylabel()  # the colour bar
    assert len(al.plot.heatmap(cmp, geomean=False).axes[0].texts) == 16
    fig = cmp.heatmap(vmax=30)
    assert fig.axes[0].get_images()[0].get_clim() == (-30, 30)


def test_latency_histogram_and_cdf(res):
    fig = al.plot.latency_hist(res, "alloc")
    ax1, ax2 = fig.axes
    assert "latency (ns" in ax1.get_xlabel() and ax1.get_xscale() == "log"
    assert ax1.get_ylabel() == "fraction of operations"
    assert ax2.get_ylabel() == "fraction <= latency"
    assert len(_lines(ax2)) == 3  # a CDF per policy
    for ln in _lines(ax2):
        y = ln.get_ydata()
        assert y[-1] == pytest.approx(1.0) and np.all(np.diff(y) >= 0)
    one = al.plot.latency_hist(res.histogram("free", policy="libc"), "free")
    assert len(_lines(one.axes[1])) == 1
    assert [t.get_text() for t in one.axes[1].texts] == ["p50", "p90", "p99", "p99.9"]
    with pytest.raises(al.InvalidArgument):
        al.plot.latency_hist(42)


def test_counters_bars(res):
    sub = res.filter(producers=2, allocs_per_cycle=16)
    fig = al.plot.counters(sub, names=["buddy.lock_acquired", "buddy.allocs"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["buddy.lock_acquired",
                                                             "buddy.allocs"]
    assert len(ax.patches) == 3 * 2  # a bar per policy per counter
    assert ax.get_ylabel() == "per operation (alloc + free)"
    heights = [p.get_height() for p in ax.patches]
    buddy = sub.filter(policy="buddy").points[0]
    assert heights[0] == pytest.approx(np.mean(buddy.data["buddy.lock_acquired_per_op"]))
    auto = al.plot.counters(sub)
    names = [t.get_text() for t in auto.axes[0].get_xticklabels()]
    assert names and all("bytes" not in n and not n.endswith("_ns") for n in names)


def test_save(tmp_path, res):
    figs = [al.plot.latency(res), al.plot.latency_hist(res)]
    paths = al.plot.save(figs, str(tmp_path / "out.png"))
    assert paths == [str(tmp_path / "out.png"), str(tmp_path / "out-1.png")]
    assert all((tmp_path / p).stat().st_size > 1000 for p in ("out.png", "out-1.png"))
    pdf = al.plot.save([al.plot.latency(al.run("malloc-free", "libc", **FAST))],
                       str(tmp_path / "x.pdf"))
    assert (tmp_path / "x.pdf").read_bytes()[:4] == b"%PDF" and pdf == [str(tmp_path / "x.pdf")]


def _relative_imports(module):
    """Every module ``module`` imports from the package, at the top or inside
    a function (a lazy import still ties the two modules together)."""
    import ast
    import importlib

    src = open(importlib.import_module(module).__file__).read()
    out = set()
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, ast.ImportFrom) and n.level == 1:
            out |= {n.module} if n.module else {a.name for a in n.names}
    return out


def test_plot_does_not_import_result():
    """result.py calls plot for Result.plot; plot reads the metric catalogue
    from alloclab.metrics and knows a Result by its interface."""
    assert "result" not in _relative_imports("alloclab.plot")
    assert "plot" in _relative_imports("alloclab.result")
    assert al.result.METRIC_INFO is al.metrics.METRIC_INFO
    assert al.result.BASE_METRICS is al.metrics.BASE_METRICS
    assert al.plot._metric_label("alloc_ns") == "allocation latency (ns)"


def test_latency_hist_refuses_what_is_not_a_result(res):
    for bad in (None, [1, 2], al.compare(res, baseline="buddy")):
        with pytest.raises(al.InvalidArgument, match="takes a Result or a Histogram"):
            al.plot.latency_hist(bad)
