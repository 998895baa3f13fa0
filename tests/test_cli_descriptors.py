"""An output named /dev/stdout (or /dev/fd/N, /proc/self/fd/N, a symlink to
one) is written through the command's own descriptor, where its offset
stands: a log the shell appends to keeps its lines and what the command
printed before, and a file behind the descriptor is never replaced."""

import os
import subprocess
import sys

import pytest

from alloclab import errors, files

RUN = ["run", "malloc-free", "--policy", "buddy", "--runs", "1", "--cycles", "20",
       "--warmup-cycles", "1"]
KEPT = b"precious 1\nprecious 2\n"


def _cli(args, stdout, cwd, stdin=subprocess.DEVNULL):
    return subprocess.run([sys.executable, "-m", "alloclab", *args], stdout=stdout,
                          stderr=subprocess.PIPE, stdin=stdin, text=False, timeout=300,
                          cwd=cwd)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    d = tmp_path_factory.mktemp("res")
    for name, pol in (("a.json", "buddy"), ("b.json", "libarena-spill")):
        p = _cli(["run", "malloc-free", "--policy", pol, "--runs", "2", "--cycles", "20",
                  "--json", str(d / name)], subprocess.DEVNULL, d)
        assert p.returncode == 0, p.stderr
    return d


@pytest.mark.parametrize("argv,starts", [
    (RUN + ["--json", "OUT"], b"{"),
    (RUN + ["--csv", "OUT"], b"workload,"),
    (["compare", "A", "B", "--plot", "OUT"], b"\x89PNG"),
    (["preload", "--json", "OUT", "--", "true"], b"{"),
    (["record", "--quiet", "--out", "OUT", "--", "true"], None),
    (["sim", "calibrate", "--policy", "buddy", "--duration", "0.01", "--out", "OUT"], b"{"),
])
@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1", "link"])
def test_an_output_on_stdout_appends_to_the_log_it_is_redirected_to(tmp_path, results, argv,
                                                                   starts, name):
    log = tmp_path / "log.txt"
    log.write_bytes(KEPT)
    if name == "link":
        os.symlink("/dev/stdout", tmp_path / "link")
        name = str(tmp_path / "link")
    args = [name if a == "OUT" else str(results / "a.json") if a == "A" else
            str(results / "b.json") if a == "B" else a for a in argv]
    with open(log, "ab") as f:
        p = _cli(args, f, tmp_path)
    assert p.returncode == 0, p.stderr
    data = log.read_bytes()
    assert data.startswith(KEPT) and len(data) > len(KEPT) + 100
    if starts is not None:
        assert starts in data[len(KEPT):], data[len(KEPT):len(KEPT) + 200]
    assert os.path.isfile(log) and not os.path.islink(log)


def test_what_the_command_printed_stays_before_the_output(tmp_path):
    log = tmp_path / "out.txt"
    with open(log, "wb") as f:
        p = _cli(RUN + ["--json", "/dev/stdout"], f, tmp_path)
    assert p.returncode == 0, p.stderr
    text = log.read_bytes().decode()
    table, json_part = text.split("\n{", 1)
    assert table.startswith("malloc-free, allocation latency")
    assert '"points"' in json_part


@pytest.mark.parametrize("name,why", [
    ("/dev/fd/9", "it names descriptor 9 of this process, which is not open"),
    ("/dev/stdin", "it names descriptor 0 of this process, which is not open for writing"),
])
def test_a_descriptor_that_cannot_be_written_is_refused_first(tmp_path, name, why):
    src = tmp_path / "in.txt"
    src.write_bytes(KEPT)
    with open(src, "rb") as stdin:
        p = _cli(RUN + ["--json", name], subprocess.PIPE, tmp_path, stdin=stdin)
    assert p.returncode == 2
    assert p.stderr.decode() == "alloclab: error: --json %s: %s\n" % (name, why)
    assert p.stdout == b"" and src.read_bytes() == KEPT


def test_descriptor_names_this_process_only(tmp_path):
    os.symlink("/proc/self/fd/2", tmp_path / "err")
    os.symlink(tmp_path / "err", tmp_path / "err2")
    assert files.descriptor("/dev/stdout") == 1
    assert files.descriptor("/dev/fd/2") == 2
    assert files.descriptor(tmp_path / "err2") == 2
    assert files.descriptor("/proc/%d/fd/1" % os.getpid()) == 1
    assert files.descriptor("/proc/1/fd/1") is None  # another process's
    assert files.descriptor(tmp_path / "plain.json") is None
    (tmp_path / "f").write_text("x")
    assert files.descriptor(tmp_path / "f") is None


def test_a_closed_descriptor_is_refused_by_the_python_api(tmp_path):
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(errors.InvalidArgument, match="descriptor %d of this process, which "
                       "is not open$" % w):
        files.check_output("/dev/fd/%d" % w, "--json")
    os.close(r)


def test_preload_judges_a_descriptor_as_every_output_does(tmp_path):
    p = _cli(["preload", "--json", "/dev/fd/9", "--", "true"], subprocess.PIPE, tmp_path)
    assert p.returncode == 2
    assert p.stderr.decode() == ("alloclab: error: cannot write the --json file /dev/fd/9: it "
                                 "names descriptor 9 of this process, which is not open\n")


def test_a_closed_stdout_is_one_error_line_and_the_files_are_written(tmp_path):
    """Started without descriptor 1 (`>&-`), or with a pipe its reader closed
    (`| true`): the runs still reach --json and --csv, and a closed stdout
    is one error line, not an AttributeError's traceback."""
    outs = ["--json", "r.json", "--csv", "r.csv"]
    p = subprocess.run([sys.executable, "-m", "alloclab", *RUN, *outs], cwd=tmp_path,
                       stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=300, preexec_fn=lambda: os.close(1))
    assert p.returncode == 1
    assert p.stderr.splitlines()[-1] == ("alloclab: error: cannot write the results to stdout: "
                                         "it is closed (the command was started without file "
                                         "descriptor 1)"), p.stderr
    assert (tmp_path / "r.json").read_text().startswith("{")
    assert (tmp_path / "r.csv").read_text().startswith("workload,")
    for f in ("r.json", "r.csv"):
        os.unlink(tmp_path / f)
    r, w = os.pipe()
    os.close(r)  # the reader is gone before anything is printed
    try:
        p = subprocess.run([sys.executable, "-m", "alloclab", *RUN, *outs], cwd=tmp_path,
                           stdin=subprocess.DEVNULL, stdout=w, stderr=subprocess.PIPE,
                           text=True, timeout=300)
    finally:
        os.close(w)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert (tmp_path / "r.json").read_text().startswith("{")
    assert (tmp_path / "r.csv").read_text().startswith("workload,")
    p = subprocess.run([sys.executable, "-m", "alloclab", "list"], stdin=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, timeout=120,
                       preexec_fn=lambda: os.close(1))
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("alloclab: error: cannot write the results to stdout")
