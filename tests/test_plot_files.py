"""The files figures are written to: plot.save writes each whole through
alloclab.files, named as figure_paths says, and the commands check every
one of them before anything runs (reproduce's second and third figures
included), refusing a device or a pipe that would need files beside it."""

import os
import stat
import subprocess
import sys

import pytest

import matplotlib

matplotlib.use("Agg")

from alloclab.present import plot  # noqa: E402


def _fig():
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    return fig


def _cli(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "alloclab", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("path,suffixes,expect", [
    ("d/p.png", ["", "1", "sizes"], ["d/p.png", "d/p-1.png", "d/p-sizes.png"]),
    ("d/p", ["", "1"], ["d/p", "d/p-1.png"]),
    ("d.v/p", ["", "1"], ["d.v/p", "d.v/p-1.png"]),
    ("d/p.pdf", ["", "1", "2"], ["d/p.pdf"]),
    ("d/.p", ["", "1"], ["d/.p", "d/.p-1.png"]),
    ("d/p.", ["", "1"], ["d/p.", "d/p.-1.png"]),
])
def test_figure_paths(path, suffixes, expect):
    assert plot.figure_paths(path, suffixes) == expect


def test_a_path_without_extension_is_written_as_given(tmp_path):
    p = str(tmp_path / "fig")
    written = plot.save([_fig(), (_fig(), "sizes")], p)
    assert written == [p, p + "-sizes.png"]
    assert sorted(os.listdir(tmp_path)) == ["fig", "fig-sizes.png"]
    for w in written:
        with open(w, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", [".fig", "fig.", "fig.PNG"])
def test_odd_names_are_drawn_as_the_check_reads_them(tmp_path, name):
    (written,) = plot.save([_fig()], str(tmp_path / name))
    with open(written, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(tmp_path) == [name]


def test_a_failed_drawing_keeps_the_old_file(tmp_path):
    p = tmp_path / "fig.png"
    p.write_bytes(b"OLD")
    fig = _fig()

    def broken(path, **kw):
        with open(path, "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device")
    fig.savefig = broken
    with pytest.raises(OSError, match="No space"):
        plot.save([fig], str(p))
    assert p.read_bytes() == b"OLD" and os.listdir(tmp_path) == ["fig.png"]


def test_reproduce_checks_its_second_figure_before_it_runs(tmp_path):
    fifo = tmp_path / "r-sizes.svg"
    os.mkfifo(fifo)
    p = _cli("reproduce", "vmalloc", "--runs", "2", "--min-time", "0.01", "--scale", "0.01",
             "--tests", "fix_size_alloc_test", "--plot", str(tmp_path / "r.svg"), timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("alloclab: error: --plot %s: it is a named pipe with no reader"
                               % fifo) and len(p.stderr.splitlines()) == 1
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and sorted(os.listdir(tmp_path)) == [
        "r-sizes.svg"]
    assert p.stdout == ""  # refused before anything ran


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
@pytest.mark.parametrize("argv", [
    ["reproduce", "vmalloc", "--runs", "2", "--min-time", "0.01", "--scale", "0.01",
     "--tests", "fix_size_alloc_test"],
    ["run", "malloc-free", "--policy", "buddy", "--runs", "1", "--duration", "0.02", "--hist"],
])
def test_a_device_cannot_take_several_figures(tmp_path, argv):
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    p = _cli(*argv, "--plot", str(dev), timeout=60)
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("alloclab: error: --plot %s: it is not a regular file, and the "
                               "figures need" % dev) and len(p.stderr.splitlines()) == 1
    assert stat.S_ISCHR(os.stat(dev).st_mode) and os.listdir(tmp_path) == ["null"]


def test_reproduce_names_every_figure_it_writes(tmp_path):
    base = str(tmp_path / "r")
    p = _cli("reproduce", "vmalloc", "--runs", "2", "--min-time", "0.01", "--scale", "0.01",
             "--tests", "fix_size_alloc_test", "--no-rezki", "--plot", base)
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir(tmp_path)) == ["r", "r-sizes.png"]
    wrote = [x for x in p.stderr.splitlines() if x.startswith("alloclab: wrote ")]
    assert wrote == ["alloclab: wrote %s" % base, "alloclab: wrote %s-sizes.png" % base]
