"""Every figure the package draws, rendered headless (Agg) to PNG and held
to the house style of alloclab.plot_style: 7 in wide at 200 dpi (1400 px),
4.3 in tall unless its rows need more, no drawn text under 8 pt, no text
outside the figure (each text's window extent, and matplotlib's tight
bounding box of the whole figure), legends outside the axes."""

import inspect
import io
import struct

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import alloclab as al  # noqa: E402
import alloclab.reproduce as rep  # noqa: E402
from alloclab import plot, plot_reproduce, plot_style, plot_trace, tracegen  # noqa: E402

from conftest import FAST  # noqa: E402

# Public functions of the plot modules that do not draw a figure.
NOT_FIGURES = {"save", "figure_paths", "rebin", "ccdf", "figure_formats",
               "refuse_files_beside_a_stream"}
# Twelve policies: past the ten colours of the cycle, and 24 counter bar series.
MANY = ["null", "buddy", "libc", "libarena-spill", "libarena-transfer", "libarena-magazine",
        "kzalloc", "kmalloc-sheaves", "kmalloc-nolock", "bpf-ma", "pages", "percpu(batch=4) > buddy"]


@pytest.fixture(scope="module")
def data():
    res = al.run("malloc-free", ["buddy", "libc", "libarena-spill"], producers=[1, 2],
                 allocs_per_cycle=[1, 16], runs=2, cycles=20, warmup_cycles=2,
                 histogram=True, mem_sample=0)
    return {
        "res": res,
        "cmp": al.compare(res, baseline="buddy", metric=["alloc_ns", "free_ns"]),
        "info": tracegen.program_like(2000, threads=3, seed=1).info(),
        "libarena": rep.libarena(producers=[1, 2], allocs_per_cycle=[4, 64], runs=2,
                                 timings=["batch"], duration=0.002, warmup_cycles=1,
                                 workloads=["malloc-free"]),
        "libarena5": rep.libarena(producers=[1, 2], allocs_per_cycle=[1, 4, 16, 64, 256],
                                  runs=2, timings=["batch"], duration=0.002, warmup_cycles=1,
                                  workloads=["malloc-free"]),
        "many": al.run("malloc-free", MANY, producers=[1, 2], allocs_per_cycle=[16], runs=1,
                       cycles=5, warmup_cycles=1, mem_sample=0),
        "vmalloc": rep.vmalloc(scale=0.001, runs=2, warm=False,
                               tests=["fix_size_alloc_test", "vm_map_ram_test"]),
        "local_storage": rep.local_storage(batch_sizes=[16, 32], runs=2, duration=0.02,
                                           sample=0.01, owner_work="none", warmup_cycles=2),
    }


# (module, function, how to draw it from the data); the height in inches
# where a figure grows past 4.3 with its rows.
FIGURES = [
    ("plot", "latency", lambda d: plot.latency(d["res"], "alloc_ns")),
    ("plot", "latency", lambda d: plot.latency(d["res"], "free_ns", logy=True, error="ci")),
    ("plot", "latency", lambda d: plot.latency(d["res"].filter(allocs_per_cycle=16), error=None)),
    ("plot", "heatmap", lambda d: plot.heatmap(d["cmp"])),
    ("plot", "latency_hist", lambda d: plot.latency_hist(d["res"], "alloc")),
    ("plot", "latency_hist", lambda d: plot.latency_hist(d["res"].histogram("free"), "free")),
    ("plot", "counters", lambda d: plot.counters(d["res"].filter(producers=2,
                                                                 allocs_per_cycle=16))),
    ("plot", "counters", lambda d: plot.counters(d["res"].filter(producers=1), logy=True)),
    ("plot_reproduce", "libarena", lambda d: d["libarena5"].plot("alloc_ns", "malloc-free")),
    ("plot", "latency", lambda d: plot.latency(d["many"], x="producers")),
    ("plot", "counters", lambda d: plot.counters(d["many"])),
    ("plot_trace", "overview", lambda d: plot_trace.overview(d["info"])),
    ("plot_trace", "live_bytes", lambda d: plot_trace.live_bytes(d["info"])),
    ("plot_trace", "sizes", lambda d: plot_trace.sizes(d["info"])),
    ("plot_trace", "lifetimes", lambda d: plot_trace.lifetimes(d["info"])),
    ("plot_trace", "threads", lambda d: plot_trace.threads(d["info"])),
    ("plot_reproduce", "libarena", lambda d: d["libarena"].plot("alloc_ns", "malloc-free")),
    ("plot_reproduce", "libarena", lambda d: d["libarena"].plot("free_ns", "malloc-free")),
    ("plot_reproduce", "vmalloc_rows", lambda d: d["vmalloc"].plot()),
    ("plot_reproduce", "vmalloc_sizes", lambda d: d["vmalloc"].plot_sizes()),
    ("plot_reproduce", "scaling", lambda d: plot_reproduce.scaling(
        _FakeScaling(), [("alloc_ns", "alloc"), ("free_ns", "free")])),
    ("plot_reproduce", "local_storage_speed", lambda d: d["local_storage"].plot()),
    ("plot_reproduce", "local_storage_kmallocs", lambda d: d["local_storage"].plot_kmallocs()),
]
TALLER = {"overview": 8.6}


class _FakeScaling:
    """What plot_reproduce.scaling reads of a Scaling: three designs, measured
    at 1-2 CPUs and simulated at 1-256."""

    designs = [("spill", ""), ("transfer", ""), ("magazine", "")]
    settings = {"cpus": [1, 2, 4, 8, 16, 32, 64, 128, 256], "usable_cpus": 2,
                "workload": "malloc-free", "allocs_per_cycle": 256,
                "calibration": {"id": "0123456789ab"}}

    def series(self, design, metric, kind):
        k = 1 + [d for d, _ in self.designs].index(design)
        cpus = [1, 2] if kind == "measured" else self.settings["cpus"]
        return [(c, 10.0 * k * c ** 0.5, 1.0 if kind == "measured" else 0.0) for c in cpus]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def png_size(fig):
    """(width, height) in pixels of the PNG savefig writes, from its IHDR."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    head = buf.getvalue()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_every_figure_function_is_rendered():
    mods = {"plot": plot, "plot_trace": plot_trace, "plot_reproduce": plot_reproduce}
    public = {(name, f) for name, m in mods.items()
              for f, obj in vars(m).items()
              if inspect.isfunction(obj) and obj.__module__ == m.__name__ and
              not f.startswith("_") and f not in NOT_FIGURES}
    assert public == {(m, f) for m, f, _ in FIGURES}


@pytest.mark.parametrize("mod,name,draw", FIGURES,
                         ids=["%s.%s-%d" % (m, f, i) for i, (m, f, _) in enumerate(FIGURES)])
def test_figure_size_fonts_and_extent(data, mod, name, draw):
    fig = draw(data)
    w, h = fig.get_size_inches()
    assert w == plot_style.FIGSIZE[0] and fig.dpi == plot_style.DPI
    if name in TALLER:
        assert h == TALLER[name]
    else:
        assert h >= plot_style.FIGSIZE[1]
    px = png_size(fig)
    assert px == (1400, round(200 * h))
    assert plot_style.text_problems(fig) == []
    for ax in fig.axes:  # every legend sits outside the data
        leg = ax.get_legend()
        if leg is not None:
            lb = leg.get_window_extent()
            assert lb.y0 >= ax.get_window_extent().y1 - 1


def test_standard_figures_are_7_by_4_3(data):
    for draw in (lambda d: plot.latency(d["res"]), lambda d: d["libarena"].plot(),
                 lambda d: plot_trace.sizes(d["info"])):
        assert png_size(draw(data)) == (1400, 860)


def test_text_problems_finds_small_and_cut_text():
    fig, axes = plot_style.subplots()
    axes[0][0].set_title("x" * 400)  # a title far wider than the figure
    axes[0][0].text(0.5, 0.5, "tiny", fontsize=6)
    found = plot_style.text_problems(fig)
    assert any("outside the figure" in p for p in found)
    assert any("'tiny': 6.0 pt" in p for p in found)
    fig2, axes2 = plot_style.subplots()
    plot_style.suptitle(fig2, "x " * 200)  # wrapped to the width: inside
    assert plot_style.text_problems(fig2) == []


def test_save_writes_the_house_size(tmp_path, data):
    paths = plot.save([plot.latency(data["res"])], str(tmp_path / "f.png"))
    with open(paths[0], "rb") as f:
        assert struct.unpack(">II", f.read(24)[16:24]) == (1400, 860)


def test_cli_plot_writes_the_house_size(tmp_path):
    from alloclab import cli
    out = tmp_path / "r.png"
    assert cli.main(["run", "malloc-free", "--policy", "libc", "--cycles", "20",
                     "--warmup-cycles", "2", "--runs", "1", "--plot", str(out)]) in (0, None)
    with open(out, "rb") as f:
        assert struct.unpack(">II", f.read(24)[16:24]) == (1400, 860)
    assert FAST["runs"] == 1


def test_more_series_than_colours_stay_distinct(data):
    """Past the ten colours of the cycle, lines change marker and style and
    bars take a hatch: no two series of twelve policies look the same."""
    fig = plot.latency(data["many"], x="producers")
    lines = [c.lines[0] for c in fig.axes[0].containers if c.get_label() in MANY]
    looks = {(ln.get_color(), ln.get_marker(), ln.get_linestyle()) for ln in lines}
    assert len(lines) == len(MANY) and len(looks) == len(MANY)
    fig = plot.counters(data["many"])
    handles = fig.legends[0].legend_handles  # a bar series per policy and producer count
    looks = {(tuple(h.get_facecolor()), h.get_hatch()) for h in handles}
    assert len(handles) == 2 * len(MANY) and len(looks) == len(handles)
    assert fig.get_size_inches()[1] > plot_style.FIGSIZE[1]  # taller for its legend rows


# Figures whose panels show one metric: (how to draw it, the panels that
# share a y axis, as (row, column) pairs of the figure's grid).
SHARED_Y = [
    (lambda d: plot.latency(d["res"], "alloc_ns"), [[0, 1]]),
    (lambda d: plot.latency(d["res"], "free_ns", logy=True), [[0, 1]]),
    (lambda d: d["libarena5"].plot("alloc_ns", "malloc-free"), [[0, 1, 2, 3, 4]]),
    (lambda d: d["local_storage"].plot(), "all"),
    (lambda d: d["local_storage"].plot_kmallocs(), "all"),
    (lambda d: plot_trace.live_bytes(d["info"]), [[0, 1]]),
    (lambda d: plot_trace.lifetimes(d["info"]), [[0, 1]]),
    (lambda d: plot_trace.overview(d["info"]), [[0, 1], [4, 5]]),
]


def _panels(fig):
    """The figure's data axes (not colour bars or secondary axes), in order."""
    return [ax for ax in fig.axes if ax.get_subplotspec() is not None]


@pytest.mark.parametrize("draw,groups", SHARED_Y, ids=[str(i) for i in range(len(SHARED_Y))])
def test_panels_of_one_metric_share_their_y_axis(data, draw, groups):
    fig = draw(data)
    axes = _panels(fig)
    groups = [list(range(len(axes)))] if groups == "all" else groups
    assert all(len(g) > 1 for g in groups) and max(max(g) for g in groups) < len(axes)
    for g in groups:
        first = axes[g[0]]
        for i in g[1:]:
            assert first.get_shared_y_axes().joined(first, axes[i])
            assert axes[i].get_ylim() == first.get_ylim()
        # every panel's data fits the shared view
        lo, hi = first.get_ylim()
        for i in g:
            for ln in axes[i].get_lines():
                y = np.asarray(ln.get_ydata(), dtype=float)
                y = y[np.isfinite(y)]
                assert not len(y) or (y.min() >= lo * 0.999 - 1e-9 and y.max() <= hi * 1.001)
    if groups == [[0, 1], [4, 5]]:  # the overview: panels of other metrics stay apart
        assert not axes[2].get_shared_y_axes().joined(axes[2], axes[3])
        assert not axes[0].get_shared_y_axes().joined(axes[0], axes[2])


def test_reproduction_series_at_one_x_are_dodged(data):
    """The libarena designs' points at one producer count, and the local
    storage eras' at one batch size, sit side by side, centred on the x."""
    fig = data["libarena"].plot("alloc_ns", "malloc-free")
    for ax in _panels(fig):
        xs = np.array([c.lines[0].get_xdata() for c in ax.containers], dtype=float)
        assert len(xs) >= 2
        assert np.allclose(xs.mean(axis=0), [1, 2])  # symmetric about the true x
        assert (np.diff(xs, axis=0) > 0).all()  # every series at its own place
        assert list(ax.get_xticks()) == [1, 2]
    fig = data["local_storage"].plot()
    for ax in _panels(fig):
        xs = np.array([c.lines[0].get_xdata() for c in ax.containers], dtype=float)
        if len(xs) > 1:
            assert np.allclose(xs.mean(axis=0), [16, 32]) and (np.diff(xs, axis=0) > 0).all()
