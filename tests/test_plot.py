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
        xs = np.array([c.lines[0].get_xdata() for c in ax.containers], dtype=float)
        # dodged: the three policies' points at one x sit side by side, centred on it
        assert np.allclose(xs[1], [1, 2]) and (xs[0] < xs[1]).all() and (xs[1] < xs[2]).all()
        assert np.allclose(xs[0] + xs[2], 2 * xs[1])
        assert np.allclose(xs[2] - xs[0], 2 * al.plot_style.DODGE)  # steps of 1 producer
        assert [t for t in ax.get_xticks()] == [1, 2]  # the ticks stay on the true x
    assert axes[0].get_ylabel() == "allocation latency (ns)"
    # one legend for the figure, outside every panel
    assert all(ax.get_legend() is None for ax in axes)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "buddy", "libc", "libarena-spill"]  # the name the user gave
    # the plotted means are the table's
    t = res.table("alloc_ns")
    y = axes[1].containers[0].lines[0].get_ydata()
    assert np.allclose(y, t.cube[0, 1, :])
    assert "error bars: 95% CI of the mean" in fig._suptitle.get_text()  # the default
    fig2 = res.plot("free_ns", error="sd", panel="allocs_per_cycle")
    assert fig2.axes[0].get_ylabel() == "free latency (ns)"
    assert "error bars: 1 sd" in fig2._suptitle.get_text()
    with pytest.raises(al.UnknownNameError):
        al.plot.latency(res, "alloc_ns", x="nope")


def _bar_ends(ax):
    """[(lower, upper)] of every error bar drawn on ``ax``."""
    return [(seg[0][1], seg[1][1]) for c in ax.containers for seg in c.lines[2][0].get_segments()]


def test_latency_error_bars_are_the_ci_by_default_and_never_below_zero(res):
    """The default bars are the 95% CI of the mean, the half widths that
    alloclab.stats computes; on a linear axis no lower end is below zero,
    even where the sd reaches past it (a lower end cut at zero is marked)."""
    sub = res.filter(policy="libc", allocs_per_cycle=16)
    fig = al.plot.latency(sub, "alloc_ns")
    c = fig.axes[0].containers[0]
    ys = c.lines[0].get_ydata()
    for (lo, hi), y, xv in zip(_bar_ends(fig.axes[0]), ys, [1, 2]):
        st = al.stats.describe(np.concatenate([s.values for _, s in sub.stats(
            "alloc_ns", producers=[xv])]))
        assert hi - y == pytest.approx(st.ci_half)
        assert y - lo == pytest.approx(min(st.ci_half, y))
    # an sd wider than the mean: its lower arm is cut at 0, never drawn below
    wild = al.Result.from_json(sub.to_json())
    for p in wild.points:
        p.data["alloc_ns"] = np.array([1.0, 1.0, 1.0, 200.0])
    for error in ("sd", "ci"):
        fig = al.plot.latency(wild, "alloc_ns", error=error)
        ends = _bar_ends(fig.axes[0])
        assert ends and min(lo for lo, _ in ends) == 0.0
        mean = 203.0 / 4
        assert max(hi for _, hi in ends) > 2 * mean  # the upper arm is not cut
        carets = [ln for ln in fig.axes[0].get_lines() if ln.get_marker() == "v"]
        assert carets and set(carets[0].get_ydata()) == {0.0}


def test_latency_panels_share_their_y_axis(res):
    fig = al.plot.latency(res, "alloc_ns")
    a, b = fig.axes[:2]
    assert a.get_shared_y_axes().joined(a, b)
    assert a.get_ylim() == b.get_ylim()
    hi = max(h for ax in (a, b) for _, h in _bar_ends(ax))
    assert a.get_ylim()[1] >= hi  # the taller panel's bars fit the shared axis
    fig = al.plot.latency(res, "alloc_ns", logy=True)
    a, b = fig.axes[:2]
    assert a.get_shared_y_axes().joined(a, b) and a.get_ylim() == b.get_ylim()
    assert a.get_yscale() == b.get_yscale() == "log"


def test_latency_legend_is_titled_by_its_parameter(res):
    fig = al.plot.latency(res.filter(policy="libc"), "alloc_ns", hue="allocs_per_cycle")
    leg = fig.legends[0]
    assert [t.get_text() for t in leg.get_texts()] == ["1", "16"]
    assert leg.get_title().get_text() == "allocs/cycle"


def _tick_texts(ax, which="y"):
    ax.figure.canvas.draw()
    axis = ax.yaxis if which == "y" else ax.xaxis
    return [t.label1.get_text() for t in axis._update_ticks() if t.label1.get_text()]


def test_log_axes_have_plain_tick_labels(res):
    fig = al.plot.latency(res, "alloc_ns", logy=True)
    for ax in fig.axes:
        assert ax.get_yscale() == "log"
        labels = _tick_texts(ax)
        assert labels and all(set(lab) <= set("0123456789.kMG") for lab in labels), labels
    assert al.plot_style._plain(600) == "600" and al.plot_style._plain(20000) == "20k"
    assert al.plot_style._plain(0.5) == "0.5" and al.plot_style._plain(1.5e6) == "1.5M"


def test_log_error_bars_are_cut_at_the_floor_and_marked():
    fig, axes = al.plot_style.subplots()
    ax = axes[0][0]
    ax.set_yscale("log")
    ys, es = [10.0, 100.0], [30.0, 5.0]  # the first reaches below zero
    floor = al.plot_style.log_floor(ys, es)
    assert floor == pytest.approx(0.8 * 1.0)  # a decade under the lowest mean, 10
    c = al.plot_style.errorbars(ax, [1, 2], ys, es, log=True, floor=floor)
    segs = c.lines[2][0].get_segments()
    assert [s[0][1] for s in segs] == pytest.approx([floor, 95.0])  # lower ends
    assert [s[1][1] for s in segs] == pytest.approx([40.0, 105.0])  # upper ends unchanged
    carets = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
    assert len(carets) == 1 and list(carets[0].get_ydata()) == [floor]


def test_linear_error_bars_are_cut_at_zero_and_marked():
    """A latency cannot be negative: on a linear axis a lower arm that
    would pass zero ends at zero, with a caret; the upper arm and the
    other bars are unchanged, and a NaN arm draws no bar."""
    fig, axes = al.plot_style.subplots()
    ax = axes[0][0]
    ys, es = [10.0, 100.0, 50.0], [30.0, 5.0, float("nan")]
    c = al.plot_style.errorbars(ax, [1, 2, 3], ys, es, lower_limit=0)
    segs = c.lines[2][0].get_segments()
    assert [s[0][1] for s in segs[:2]] == pytest.approx([0.0, 95.0])  # lower ends
    assert [s[1][1] for s in segs[:2]] == pytest.approx([40.0, 105.0])  # upper ends
    assert all(len(s) == 0 for s in segs[2:])  # no bar where the arm is NaN
    carets = [ln for ln in ax.get_lines() if ln.get_marker() == "v"]
    assert len(carets) == 1 and list(carets[0].get_xdata()) == [1.0]
    assert list(carets[0].get_ydata()) == [0.0]
    # without a bound the arm runs below zero, as the data say
    c2 = al.plot_style.errorbars(ax, [1], [10.0], [30.0])
    assert c2.lines[2][0].get_segments()[0][0][1] == pytest.approx(-20.0)


def test_dodge_spreads_series_symmetrically():
    S = al.plot_style
    assert S.x_step([1, 2, 4, 8]) == 1.0 and S.x_step([1, 2, 4, 8], log=True) == 2.0
    assert S.x_step([5]) == 1.0 and S.x_step([5], log=True) == 2.0
    xs = [1, 2, 4]
    shifted = [S.dodge(xs, i, 3, 1.0) for i in range(3)]
    assert np.allclose(shifted[1], xs)  # the middle one of three stays on x
    assert np.allclose(shifted[0] + shifted[2], 2 * np.asarray(xs))  # symmetric about x
    assert (shifted[0] < shifted[1]).all() and (shifted[1] < shifted[2]).all()
    two = [S.dodge(xs, i, 2, 1.0) for i in range(2)]
    assert np.allclose(two[1] - two[0], S.DODGE)  # one DODGE of the step apart
    many = [S.dodge(xs, i, 12, 1.0) for i in range(12)]
    assert np.allclose(many[-1] - many[0], S.DODGE_SPAN)  # all of them within the span
    lg = [S.dodge(xs, i, 2, 2.0, log=True) for i in range(2)]
    assert np.allclose(lg[1] / lg[0], 2.0 ** S.DODGE)  # a factor on a log axis
    assert np.allclose(lg[0] * lg[1], np.asarray(xs, float) ** 2)
    assert np.array_equal(S.dodge(xs, 0, 1, 1.0), xs)  # one series: not moved


def test_latency_on_log_axis_keeps_error_bars_inside(res):
    fig = al.plot.latency(res, "alloc_ns", logy=True, error="sd")
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        for c in ax.containers:
            for seg in c.lines[2][0].get_segments():
                assert lo * 0.999 <= seg[0][1] and seg[1][1] <= hi * 1.001


def test_heatmap_colours_log2_ratio_of_significant_cells(res):
    cmp = al.compare(res, baseline="buddy", metric=["alloc_ns", "free_ns"])
    fig = al.plot.heatmap(cmp)
    ax = fig.axes[0]
    im = ax.get_images()[0]
    lo, hi = im.get_clim()
    assert lo == -hi and hi > 0  # symmetric about 1x
    assert im.get_cmap().name.startswith("RdBu")  # colour-blind safe, diverging
    labels, cols, vals, marks = cmp.matrix()
    geo = [label for label, _ in cmp.geo_rows()]
    assert geo == ["alloc_ns: geometric mean", "free_ns: geometric mean"]
    assert [t.get_text() for t in ax.get_yticklabels()] == labels + geo
    assert [t.get_text() for t in ax.get_xticklabels()] == cols
    arr = im.get_array()
    assert arr.shape == (len(labels) + 2, 2) == (10, 2)
    for i in range(len(labels)):
        for j in range(len(cols)):
            # grey (masked) unless significant and over the threshold
            assert bool(arr.mask[i, j]) == (not marks[i][j])
            if marks[i][j]:
                assert arr[i, j] == pytest.approx(np.log2(1 + vals[i, j] / 100))
    # a geometric mean is coloured only when every cell behind it is, on its side of 1x
    alpha = np.asarray(im.get_alpha())
    assert (alpha[:8] == 1.0).all()
    for row, metric in ((8, "alloc_ns"), (9, "free_ns")):
        for j, col in enumerate(cols):
            g = cmp.geomean(col, metric)
            behind = [(vals[i, j], marks[i][j]) for i in range(len(labels))
                      if labels[i].startswith(metric)]
            lit = all(m and (v > 0) == (g.change_pct > 0) for v, m in behind)
            assert bool(arr.mask[row, j]) == (not lit)
            if lit:
                assert arr[row, j] == pytest.approx(np.log2(g.ratio))
            assert alpha[row, j] == (al.plot.GEOMEAN_ALPHA if lit else 1.0)
    assert ax.get_xlabel().startswith("against buddy; grey: not significant")
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == 20
    for t in texts:  # each cell: its change (with mark, n.s. or <2%), then the reading aid
        first, aid = t.split("\n")
        assert first.split()[-1].endswith("%") or first.split()[-1] in ("n.s.", "<2%")
        assert aid.endswith(("slower", "faster")) or aid == "no change"
    c = cmp.cells[0]
    assert any(t.endswith("\n" + c.aid()) and ("%+.1f%%" % c.change_pct) in t for t in texts)
    cbar = fig.axes[1]
    assert "> 1x = better" in cbar.get_ylabel()
    fig.canvas.draw()
    assert "1x" in [t.get_text() for t in cbar.get_yticklabels()]
    assert len(al.plot.heatmap(cmp, geomean=False).axes[0].texts) == 16
    assert cmp.heatmap(vmax=2).axes[0].get_images()[0].get_clim() == (-1.0, 1.0)
    for bad in (1, 0.5, "2x", -3):
        with pytest.raises(al.InvalidArgument, match="ratio above 1"):
            al.plot.heatmap(cmp, vmax=bad)


def test_heatmap_geomean_is_grey_unless_every_cell_behind_it_is_coloured(res):
    """The geometric mean has no test of its own: over cells no test marked
    it is drawn in the grey of a not-significant cell, in full strength;
    over cells all marked, on one side of 1x, it takes the colour of its
    ratio (at half strength, a summary)."""
    from matplotlib.colors import to_rgba
    cmp = al.compare(res, baseline="buddy", metric=["alloc_ns"])
    labels, cols, _, _ = cmp.matrix()
    col = cols[0]
    mine = [c for c in cmp.cells if c.column == col]
    side = np.sign(cmp.geomean(col).change_pct)
    for c in mine:  # every cell behind the mean marked, on the mean's side
        c.change = abs(c.change) * side
        c.mark = "I" if side > 0 else "R"
    g = cmp.geomean(col)
    row, j = len(labels), cols.index(col)

    def geo_cell(cmp):
        im = al.plot.heatmap(cmp).axes[0].get_images()[0]
        arr = im.get_array()
        return (im.to_rgba(arr)[row, j], bool(arr.mask[row, j]),
                float(np.asarray(im.get_alpha())[row, j]), float(np.ma.getdata(arr)[row, j]))

    rgba, masked, alpha, v = geo_cell(cmp)
    assert not masked and v == pytest.approx(np.log2(g.ratio))
    assert alpha == al.plot.GEOMEAN_ALPHA
    assert tuple(rgba) != to_rgba(al.plot_style.NOT_SIGNIFICANT)
    mine[0].mark = ""  # one cell behind it not significant: the mean is grey
    rgba, masked, alpha, _ = geo_cell(cmp)
    assert masked and alpha == 1.0
    assert tuple(rgba) == pytest.approx(to_rgba(al.plot_style.NOT_SIGNIFICANT))
    mine[0].mark = "I" if side > 0 else "R"
    mine[0].change = -mine[0].change  # marked, but on the other side of 1x
    rgba, masked, _, _ = geo_cell(cmp)
    assert masked and tuple(rgba) == pytest.approx(to_rgba(al.plot_style.NOT_SIGNIFICANT))


def test_heatmap_marks_a_missing_column_na(res):
    cmp = al.compare(res, baseline="buddy", metric=["alloc_ns"])
    c = cmp.cells.pop(0)  # one column of one row has no value
    fig = al.plot.heatmap(cmp, geomean=False)
    ax = fig.axes[0]
    labels, cols, _, _ = cmp.matrix()
    i, j = labels.index(cmp.row_label(c.metric, c.key)), cols.index(c.column)
    assert ax.get_images()[0].get_array().mask[i, j]
    assert "n/a" in [t.get_text() for t in ax.texts]


def test_ratio_labels():
    lab = al.plot_style.ratio_label
    assert [lab(r) for r in (1 / 16, 0.25, 0.5, 0.8, 1, 2, 16)] == [
        "1/16x", "1/4x", "0.5x", "0.8x", "1x", "2x", "16x"]


def test_latency_histogram_and_ccdf(res):
    fig = al.plot.latency_hist(res, "alloc")
    ax1, ax2 = fig.axes[:2]
    assert "latency (ns" in ax1.get_xlabel() and ax1.get_xscale() == "log"
    assert ax1.get_ylabel() == "fraction of operations per bin"
    assert ax2.get_ylabel() == "fraction slower than x (CCDF)" and ax2.get_yscale() == "log"
    assert len(_lines(ax2)) == 3  # a CCDF per policy
    for ln in _lines(ax2):
        y = ln.get_ydata()
        assert y[0] == 1.0 and y[-1] > 0 and np.all(np.diff(y) <= 0)
    # the histogram: outlined bins whose fractions sum to 1
    stairs = [p for p in ax1.patches if p.get_label() in ("buddy", "libc", "libarena-spill")]
    assert len(stairs) == 3
    assert all(sum(s.get_data().values) == pytest.approx(1.0) for s in stairs)
    # percentiles read off the right-hand scale
    right = ax2.child_axes
    fig.canvas.draw()
    assert [t.get_text() for t in right[0].get_yticklabels()] == ["p50", "p90", "p99",
                                                                 "p99.9"]
    one = al.plot.latency_hist(res.histogram("free", policy="libc"), "free")
    assert len(_lines(one.axes[1])) == 1
    assert [t.get_text().split()[0] for t in one.axes[1].texts] == ["p50", "p90", "p99",
                                                                   "p99.9"]
    with pytest.raises(al.InvalidArgument):
        al.plot.latency_hist(42)


def test_rebin_and_ccdf_agree_with_the_histogram(res):
    h = res.histogram("alloc", policy="buddy")
    edges, frac = al.plot.rebin(h)
    assert frac.sum() == pytest.approx(1.0) and len(edges) == len(frac) + 1
    assert np.allclose(np.diff(np.log2(edges)), 1.0 / al.plot.BINS_PER_OCTAVE)
    x, f = al.plot.ccdf(h)
    assert f[0] == 1.0 and np.all(np.diff(f) <= 0) and np.all(np.diff(x) > 0)
    for q in (50, 90, 99):
        # at the first step at or past the q-th percentile (a bucket's upper
        # edge), at most 1 - q/100 of the operations are slower
        i = np.searchsorted(x, h.percentile(q), side="left")
        assert i == len(x) or f[i] <= 1 - q / 100 + 1e-12
    empty = al.Histogram()
    assert [len(a) for a in al.plot.rebin(empty) + al.plot.ccdf(empty)] == [0, 0, 0, 0]


def test_counters_bars_and_na_marks(res):
    sub = res.filter(producers=2, allocs_per_cycle=16)
    fig = al.plot.counters(sub, names=["buddy.lock_acquired", "buddy.allocs"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["buddy.lock_acquired",
                                                             "buddy.allocs"]
    assert ax.get_ylabel() == "per operation (alloc + free)"
    buddy = sub.filter(policy="buddy").points[0]
    bars = {c.get_label(): [p.get_height() for p in c.patches] for c in ax.containers}
    assert bars["buddy"] == pytest.approx([np.mean(buddy.data["buddy.lock_acquired_per_op"]),
                                           np.mean(buddy.data["buddy.allocs_per_op"])])
    # libc has no buddy layer: no bar, "n/a" in each place, never a zero bar
    assert not [h for h in bars["libc"] if np.isfinite(h)]  # only its legend's NaN proxy
    notes = [t.get_text() for t in ax.texts]
    assert notes.count("n/a") == 2
    drawn = sum(1 for hs in bars.values() for h in hs if np.isfinite(h))
    assert drawn + notes.count("n/a") == 3 * 2  # a bar or n/a each
    assert notes.count("0") == sum(h == 0 for h in bars["libarena-spill"])
    assert ax.get_legend() is not None  # above the axes, not over the bars
    auto = al.plot.counters(sub)
    names = [t.get_text() for t in auto.axes[0].get_xticklabels()]
    assert names and all("bytes" not in n and not n.endswith("_ns") for n in names)


def test_counters_tell_a_zero_from_a_missing_value():
    res = al.run("malloc-free", ["buddy", "libc"], allocs_per_cycle=4, **FAST)
    fig = al.plot.counters(res, names=["buddy.lock_contended"])  # 0 on one producer
    notes = sorted(t.get_text() for t in fig.axes[0].texts)
    assert notes == ["0", "n/a"]


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
        if isinstance(n, ast.ImportFrom) and n.level:  # a module's name is its last part
            out |= {a.name for a in n.names} | ({n.module.rsplit(".", 1)[-1]} if n.module
                                                else set())
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


def test_latency_points_of_policies_at_one_x_do_not_overlap(res):
    """Points of two policies at one producers value sat on top of each
    other; each policy's line is offset around the x, the middle one on it."""
    fig = al.plot.latency(res, "alloc_ns")
    ax = fig.axes[0]
    xs = [np.asarray(c.lines[0].get_xdata(), float) for c in ax.containers]
    assert len(xs) == 3
    for k in range(len(xs[0])):
        at = sorted(x[k] for x in xs)
        assert at[0] < at[1] < at[2] and at[1] == pytest.approx([1, 2][k])
