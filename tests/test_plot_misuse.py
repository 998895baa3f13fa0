"""Figures and histograms used as a user may: several figures whose later
path cannot be written, paths as pathlib.Path, unknown formats, and results
of simulated CPUs, whose histograms and counters are predictions and say
so wherever they appear."""

import os
import pathlib
import stat

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import alloclab as al  # noqa: E402
from alloclab.measure import sim  # noqa: E402
from alloclab.present import plot  # noqa: E402
from alloclab.results import simulated  # noqa: E402

PNG = b"\x89PNG\r\n\x1a\n"


def _fig():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    return fig


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def cal():
    # a fixed test calibration: the predictions need not be realistic
    return sim.Calibration({"seg.acq-rel": 100.0}, 50.0, 1.0, {"test": True})


@pytest.fixture(scope="module")
def simres(cal):
    return al.run("malloc-free", "buddy", cpu="simulated", calibration=cal, histogram=True,
                  producers=[1, 2], cycles=20, warmup_cycles=2, runs=2, mem_sample=0)


@pytest.fixture(scope="module")
def mixed(cal):
    return al.run("malloc-free", "buddy", cpu=["pinned", "simulated"], calibration=cal,
                  histogram=True, producers=1, cycles=20, warmup_cycles=2, runs=1,
                  mem_sample=0)


# ---------------------------------------------------------------- save


def test_a_later_path_that_cannot_be_written_leaves_the_first_file(tmp_path):
    first = tmp_path / "fig.png"
    first.write_bytes(b"OLD")
    os.mkdir(tmp_path / "fig-1.png")
    with pytest.raises(al.InvalidArgument, match="fig-1.png: it is a directory"):
        plot.save([_fig(), _fig()], str(first))
    assert first.read_bytes() == b"OLD"
    assert sorted(os.listdir(tmp_path)) == ["fig-1.png", "fig.png"]


def test_a_later_fifo_without_reader_is_refused_before_anything_is_written(tmp_path):
    first = tmp_path / "fig.svg"
    first.write_bytes(b"OLD")
    os.mkfifo(tmp_path / "fig-sizes.svg")
    with pytest.raises(al.InvalidArgument, match="named pipe with no reader"):
        plot.save([_fig(), (_fig(), "sizes")], str(first))
    assert first.read_bytes() == b"OLD"
    assert stat.S_ISFIFO(os.stat(tmp_path / "fig-sizes.svg").st_mode)
    assert sorted(os.listdir(tmp_path)) == ["fig-sizes.svg", "fig.svg"]


def test_save_takes_a_pathlib_path(tmp_path):
    p = tmp_path / "p.png"
    written = plot.save([_fig(), _fig()], p)
    assert written == [str(p), str(tmp_path / "p-1.png")]
    for w in written:
        assert pathlib.Path(w).read_bytes()[:8] == PNG
    assert plot.figure_paths(tmp_path / "a.pdf", ["", "1"]) == [str(tmp_path / "a.pdf")]


def test_an_unknown_format_is_refused_naming_the_supported_ones(tmp_path):
    old = tmp_path / "f.xyz"
    old.write_bytes(b"OLD")
    with pytest.raises(al.InvalidArgument) as e:
        plot.save([_fig(), _fig()], str(old))
    assert "xyz" in str(e.value) and "png" in e.value.valid and "svg" in e.value.valid
    assert "png" in str(e.value) and "pdf" in str(e.value) and "svg" in str(e.value)
    assert old.read_bytes() == b"OLD" and os.listdir(tmp_path) == ["f.xyz"]


def test_what_is_not_a_path_is_a_type_error(tmp_path):
    for bad in (42, b"f.png"):
        with pytest.raises(al.ParameterTypeError, match="must be a path"):
            plot.save([_fig()], bad)
    assert os.listdir(tmp_path) == []


def test_two_figures_for_one_file_are_refused(tmp_path):
    with pytest.raises(al.InvalidArgument, match="two figures would be written to one file"):
        plot.save([_fig(), _fig(), (_fig(), "1")], str(tmp_path / "d.png"))
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- histograms


def test_a_histogram_of_the_simulated_clock_says_it_is_predicted():
    h = al.Histogram.from_values([1000, 2000, 3000], ticks_per_ns=1000.0)
    assert h.simulated
    assert "simulated: predicted" in repr(h) and "simulated: predicted" in h.summary()
    m = al.Histogram.from_values([1, 2, 3], ticks_per_ns=2.5)
    assert not m.simulated and "predicted" not in repr(m) and "predicted" not in m.summary()
    assert "simulated: predicted" in repr(al.Histogram(ticks_per_ns=1000.0))
    # told explicitly, the flag survives a round trip and a merge
    x = al.Histogram.from_values([5, 6], ticks_per_ns=1.0, simulated=True)
    y = al.Histogram.from_dict(x.to_dict())
    assert y.simulated and y == x and (x + y).simulated and x.copy().simulated
    assert "simulated" not in m.to_dict()  # a measured histogram's dict is as before


def test_a_simulated_histogram_is_never_merged_with_a_measured_one():
    s = al.Histogram.from_values([5, 6], ticks_per_ns=1.0, simulated=True)
    m = al.Histogram.from_values([5, 6], ticks_per_ns=1.0)
    with pytest.raises(simulated.MixedModesError, match="simulated.*measured"):
        s + m
    with pytest.raises(al.InvalidArgument):
        m + s
    assert (al.Histogram() + s).simulated and (s + al.Histogram()).simulated


def test_result_histogram_of_a_simulated_cell_is_labelled(simres):
    h = simres.histogram("alloc", producers=2)
    assert h.simulated and "simulated: predicted" in str(h)
    assert "simulated: predicted" in h.summary()


def _legend(fig):
    (lg,) = fig.legends
    return lg.get_title().get_text(), [t.get_text() for t in lg.get_texts()]


def test_latency_hist_of_a_simulated_result_says_predicted(simres):
    fig = plot.latency_hist(simres)
    cid = simulated.calibration_ids(simres.points)[0]
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "simulated: predicted" in title and cid in title
    head, labels = _legend(fig)
    assert labels == ["buddy (simulated)", simulated.PLOT_LABEL]
    # one line merges two cells: the legend says which
    assert "pools producers 1, 2" in head.replace("\n", " ")
    # a title of the user's own still leaves the legend saying it
    fig = plot.latency_hist(simres, title="mine")
    assert simulated.PLOT_LABEL in _legend(fig)[1]


def test_latency_hist_of_no_points_is_an_error_not_an_empty_figure(simres, mixed):
    with pytest.raises(al.InvalidArgument, match=r"no point matches \{'producers': 3\}: "
                                                  r"nothing to draw"):
        plot.latency_hist(simres, producers=3)
    # the overhead line is the grey one where simulated lines are dotted too
    title = plot.latency_hist(mixed)._suptitle.get_text().replace("\n", " ")
    assert "(grey vertical dotted line: one clock pair," in title, title


def test_latency_hist_of_one_cell_states_no_pooling(simres):
    head, labels = _legend(plot.latency_hist(simres, producers=2))
    assert "pools" not in head and labels[0] == "buddy (simulated)"
    with pytest.raises(al.UnknownNameError, match="valid operations: alloc, free"):
        plot.latency_hist(simres, "realloc")


def test_latency_hist_of_a_simulated_histogram_says_predicted(simres):
    fig = plot.latency_hist(simres.histogram("alloc", producers=1))
    assert "simulated: predicted" in fig._suptitle.get_text()
    assert _legend(fig)[1] == ["alloc (simulated)", simulated.PLOT_LABEL]


def test_latency_hist_keeps_measured_and_simulated_apart(mixed):
    fig = plot.latency_hist(mixed, "free")
    _, labels = _legend(fig)
    assert labels == ["buddy", "buddy (simulated)", simulated.PLOT_LABEL]
    ax2 = fig.axes[1]
    ccdfs = {ln.get_label(): ln for ln in ax2.get_lines() if ln.get_label() in labels[:2]}
    assert set(ccdfs) == {"buddy", "buddy (simulated)"}
    assert ccdfs["buddy (simulated)"].get_linestyle() == ":"
    # the dotted clock pair is the measured cells' only: a simulated one has none
    pinned = [p for p in mixed.points if not simulated.is_simulated(p)]
    ovh = pinned[0].data["timer_overhead_ns"][0]
    assert "%.0f ns" % ovh in fig._suptitle.get_text().replace("\n", " ")


def test_counters_of_a_simulated_result_say_predicted(simres, mixed):
    fig = plot.counters(simres)
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "simulated: predicted" in title and "simulated schedule" in title
    labels = [c.get_label() for c in fig.axes[0].containers]
    assert labels and all(lab.endswith("(simulated)") for lab in labels)
    title = plot.counters(mixed)._suptitle.get_text().replace("\n", " ")
    assert "simulated bars: simulated: predicted" in title
    res = al.run("malloc-free", "buddy", cycles=20, warmup_cycles=2, runs=1)
    assert "simulated" not in plot.counters(res)._suptitle.get_text()
