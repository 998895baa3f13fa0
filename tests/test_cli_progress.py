"""Progress bars (alloclab.progress): none when stderr is piped, a tqdm bar
on a terminal once a job lasts, always with --progress, none with
--no-progress; the command line and the library alike."""

import io
import json
import os
import pty
import subprocess
import sys

import alloclab as al
from alloclab import progress
from test_cli import cli

FAST = ["--cycles", "20", "--warmup-cycles", "2"]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_wanted():
    assert progress.wanted(None, _Tty()) and not progress.wanted(None, io.StringIO())
    assert progress.wanted(True, io.StringIO()) and not progress.wanted(False, _Tty())


def test_bar_on_a_terminal_waits_for_a_long_job():
    f = _Tty()
    with progress.Bar(5, "job", None, file=f) as b:
        b.note("measuring")  # not even a note draws the bar early
        b.update(5)  # done well within DELAY_S: nothing drawn
    assert b.done == 5 and f.getvalue() == ""
    f = _Tty()
    with progress.Bar(5, "job", True, file=f) as b:
        b.note("measuring")
        b.update(2)
    assert "job:" in f.getvalue() and "2/5 runs" in f.getvalue() and "measuring" in f.getvalue()


def test_a_repeated_note_does_not_draw_the_bar_again():
    """A note is drawn at once (a reader may wait for "measuring"), but the
    same note again draws nothing: a log gets no duplicate lines."""
    f = io.StringIO()
    with progress.Bar(3, "job", True, file=f, unit="run") as b:
        b.note("measuring")
        once = f.getvalue()
        assert "measuring" in once
        b.note("measuring")
        assert f.getvalue() == once


def test_no_bar_when_not_wanted():
    f = io.StringIO()
    for want in (None, False):
        with progress.Bar(3, "job", want, file=f) as b:
            b.note("measuring")
            b.update(3)
        assert not b.shown and b.done == 3
    assert f.getvalue() == ""


def test_cli_piped_has_no_bar_and_flags_force_it():
    p = cli("run", "malloc-free", "--runs", "2", *FAST, check=0)
    assert p.stderr == ""
    p = cli("run", "malloc-free", "--runs", "2", "--progress", *FAST, check=0)
    assert "alloclab malloc-free:" in p.stderr and "2/2 runs" in p.stderr
    p = cli("run", "malloc-free", "--runs", "2", "--progress", "--no-progress", *FAST, check=0)
    assert p.stderr == ""


def test_cli_bar_on_a_terminal():
    """stderr a terminal and a run past DELAY_S: a bar; stdout unchanged."""
    master, slave = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "alloclab", "run", "malloc-free", "--runs",
                            "3", "--duration", "%g" % (progress.DELAY_S / 2)],
                           stdout=subprocess.PIPE, stderr=slave, text=True, timeout=120)
        os.close(slave)
        slave = None
        err = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO once the pty's other end is closed
                break
            if not chunk:
                break
            err += chunk
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)
    assert p.returncode == 0 and "allocation latency" in p.stdout
    assert b"alloclab malloc-free:" in err and b"3/3 runs" in err


def test_library_default_is_quiet_when_piped(capsys):
    al.run("malloc-free", "buddy", runs=2, cycles=20, warmup_cycles=2)
    assert capsys.readouterr().err == ""
    al.run("malloc-free", "buddy", runs=2, cycles=20, warmup_cycles=2, progress=True)
    assert "2/2 runs" in capsys.readouterr().err


def test_reproductions_draw_bars_with_progress_only(tmp_path):
    small = {
        "local-storage": ["--storage-types", "socket", "--batch-sizes", "16", "--runs", "1",
                          "--duration", "20ms", "--sample", "10ms", "--owner-work", "none"],
        "vmalloc": ["--tests", "fix_size_alloc_test", "--no-rezki", "--runs", "2",
                    "--scale", "0.001"],
        "libarena": ["--producers", "1", "--allocs-per-cycle", "16", "--runs", "2",
                     "--timing", "batch", "--duration", "5ms", "--workloads", "malloc-free",
                     "--no-baseline"],
    }
    for seed, args in small.items():
        quiet = cli("reproduce", seed, *args, check=0)
        assert quiet.stderr == "", (seed, quiet.stderr)  # piped: no bar
        loud = cli("reproduce", seed, *args, "--progress", check=0)
        unit = "rows" if seed == "vmalloc" else "runs"
        assert "100%" in loud.stderr and " %s [" % unit in loud.stderr, (seed, loud.stderr)


def test_show_prints_a_report_as_the_reproduction_did(tmp_path):
    j = tmp_path / "ls.json"
    p = cli("reproduce", "local-storage", "--storage-types", "socket", "--batch-sizes", "16",
            "--runs", "1", "--duration", "20ms", "--sample", "10ms", "--owner-work", "none",
            "--json", str(j), check=0)
    assert p.stderr == "alloclab: wrote %s\n" % j
    assert cli("show", str(j), check=0).stdout == p.stdout
    assert json.loads(cli("show", str(j), "--format", "json", check=0).stdout) == \
        json.loads(j.read_text())
    err = cli("show", str(j), "--format", "csv", check=2).stderr
    assert err == "alloclab: error: %s is a reproduction's report: it prints as text or " \
        "json, not csv\n" % j


def test_show_rounds_of_one_reproduction(tmp_path):
    files = []
    for i in range(2):
        j = tmp_path / ("ls-%d.json" % i)
        cli("reproduce", "local-storage", "--storage-types", "socket", "--batch-sizes", "16",
            "--runs", "1", "--duration", "20ms", "--sample", "10ms", "--owner-work", "none",
            "--json", str(j), check=0)
        files.append(str(j))
    out = cli("show", *files, check=0).stdout
    assert out.startswith("Rounds: 2 reports of alloclab-local-storage-report\n")
    assert "  %s: in direction " % files[0] in out and "  %s: in direction " % files[1] in out
    assert "in the seed's direction in all 2 rounds: " in out and " of 1 goal cells" in out
    # a result that is not a report, and rounds in another format: one error line, exit 2
    res = tmp_path / "r.json"
    cli("run", "malloc-free", "--policy", "buddy", "--cycles", "5",
        "--runs", "1", "--json", str(res), check=0)
    for args, words in (([files[0], str(res)], "is not a reproduction's report"),
                        (files + ["--format", "json"], "rounds print as text only")):
        p = cli("show", *args, check=2)
        assert p.stdout == "" and len(p.stderr.splitlines()) == 1 and words in p.stderr
