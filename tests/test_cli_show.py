"""`alloclab show`, `run --format`, `--counters`, the merged warnings and the
file notices, run as a user runs them (subprocesses), on results with known
numbers where the exact output is asserted."""

import csv
import io
import os
import resource

import numpy as np
import pytest

import alloclab as al
from alloclab._ffi import lib
from test_cli import cli

FAST = ["--cycles", "20", "--warmup-cycles", "2"]


def _known(path, runs=3, lock=1.0):
    """A result file with fixed numbers: buddy at 1 and 2 producers, alloc_ns
    10/20/30 and 40/50/60, a key counter (lock_acquired) 1.0 and 2.0 per op,
    a key counter zero everywhere (enomem) and a non-key one (splits)."""
    pts = []
    for prod, base in ((1, 10.0), (2, 40.0)):
        data = {"alloc_ns": np.array([base, base + 10, base + 20][:runs]),
                "free_ns": np.full(runs, 5.0 * prod), "steal_pct": np.zeros(runs),
                "buddy.bytes_held": np.zeros(runs),
                "buddy.lock_acquired_per_op": np.full(runs, lock * prod),
                "buddy.enomem_per_op": np.zeros(runs),
                "buddy.splits_per_op": np.full(runs, 0.5)}
        pts.append(al.Point({"workload": "malloc-free", "policy": "buddy", "size": 64,
                             "allocs_per_cycle": 16, "producers": prod, "stats": "lite"},
                            {}, data))
    meta = {"cpu_model": "synthetic", "clock": "tsc", "ticks_per_ns": 1.0,
            "run": {"workload": "malloc-free", "runs": runs,
                    "sweep": {"producers": [1, 2], "allocs_per_cycle": [16]}}}
    al.Result(meta, pts).to_json(str(path))
    return path


@pytest.fixture
def known(tmp_path):
    return _known(tmp_path / "known.json")


# ---------------------------------------------------------------- show

def test_show_prints_run_tables_again(tmp_path):
    """show FILE prints exactly what the run printed on stdout."""
    j = tmp_path / "r.json"
    p = cli("run", "malloc-free", "--policy", "buddy", "--policy", "libarena-spill",
            "--producers", "1,2", "--allocs-per-cycle", "1,16", "--runs", "2", "--json", str(j),
            *FAST, check=0)
    assert p.stderr == "alloclab: wrote %s\n" % j
    s = cli("show", str(j), check=0)
    assert s.stdout == p.stdout and s.stderr == ""
    for flags in (["--metric", "throughput", "--sd"], ["--counters", "all"]):
        r = cli("run", "malloc-free", "--policy", "buddy", "--runs", "2", "--json", str(j),
                *FAST, *flags, check=0)
        assert cli("show", str(j), *flags, check=0).stdout == r.stdout


def test_show_without_flags_prints_the_metrics_and_axes_run_chose(tmp_path):
    """run --metric/--rows/--cols: a bare `show FILE` prints what the run
    printed (not alloc_ns and free_ns by allocs/cycle); flags still override."""
    j = tmp_path / "r.json"
    r = cli("run", "malloc-free", "--policy", "buddy", "--producers", "1,2",
            "--allocs-per-cycle", "1,16", "--runs", "2", "--json", str(j), "--metric", "alloc_ns",
            "--rows", "producers", "--cols", "allocs_per_cycle", *FAST, check=0)
    s = cli("show", str(j), check=0)
    assert s.stdout == r.stdout and "free latency" not in s.stdout
    assert "  producers" in s.stdout
    o = cli("show", str(j), "--metric", "free_ns", "--rows", "allocs_per_cycle",
            "--cols", "producers", check=0).stdout
    assert "free latency" in o and "allocation latency" not in o and "  allocs/cycle" in o


@pytest.mark.skipif(int(lib.al_cpus_usable()) < 2 or not (
    os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0),
    reason="needs 2 CPUs and SCHED_FIFO rights")
def test_realtime_runs_say_so_in_the_cpu_line(tmp_path):
    """--realtime is named on the cpu line of run and of show, so that the
    two sides of a with/without comparison cannot be mistaken."""
    lines = {}
    for flags in ([], ["--realtime"]):
        j = tmp_path / ("rt%d.json" % len(flags))
        r = cli("run", "malloc-free", "--policy", "buddy", "--runs", "1", "--json", str(j),
                *FAST, *flags, check=0)
        cpu = [line for line in r.stdout.splitlines() if line.startswith("cpu: ")]
        assert cpu == [line for line in cli("show", str(j), check=0).stdout.splitlines()
                       if line.startswith("cpu: ")]
        lines[bool(flags)] = cpu[0]
    assert lines[True].endswith(", realtime (SCHED_FIFO workers)")
    assert "realtime" not in lines[False]


def test_show_known_text(known):
    out = cli("show", str(known), "--metric", "alloc_ns", "--counters", "none", check=0).stdout
    assert out == (
        "malloc-free, allocation latency (ns, lower is better, mean of 3 runs), policy: buddy\n"
        "\n"
        "  allocs/cycle    1p  2p\n"
        "            16    20  50\n"
        "warnings:\n"
        "  unstable, CV > 10%: 16 allocs/cycle, 1p (50%), 16 allocs/cycle, 2p (20%)\n"
        "\n"
        "cpu: None, clock tsc (1.000 ticks/ns)\n"
        "stats: lite (every event counter, no lock times)\n")


def test_show_markdown_exact(known):
    for flags in (["--markdown"], ["--format", "markdown"]):
        out = cli("show", str(known), "--metric", "free_ns", "--counters", "none", *flags,
                  check=0).stdout
        assert out == (
            "**malloc-free, free latency (ns, lower is better, mean of 3 runs), policy: "
            "buddy**\n"
            "\n"
            "| allocs/cycle | 1p | 2p |\n"
            "| --- | ---: | ---: |\n"
            "| 16 | 5 | 10 |\n"
            "\n"
            "- cpu: None, clock tsc (1.000 ticks/ns)\n"
            "- stats: lite (every event counter, no lock times)\n")


def test_show_csv_and_json_exact(known):
    p = cli("show", str(known), "--format", "csv", "--metric", "alloc_ns", check=0)
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert [r["alloc_ns"] for r in rows] == ["10.0", "20.0", "30.0", "40.0", "50.0", "60.0"]
    assert [r["producers"] for r in rows] == ["1"] * 3 + ["2"] * 3
    assert "free_ns" not in rows[0] and "run" in rows[0]  # only the metric asked for
    # the warnings under the table go to stderr: stdout stays CSV
    assert p.stderr.startswith("alloclab: warning: unstable, CV > 10%")
    p = cli("show", str(known), "--format", "json", check=0)
    assert al.Result.from_json(p.stdout) == al.Result.from_json(known.read_text())


def test_show_counters_modes(known):
    def counters(mode):
        out = cli("show", str(known), "--counters", mode, check=0).stdout
        return out[out.index("counters per op"):] if "counters per op" in out else ""
    assert counters("key") == (
        "counters per op, buddy (columns: producers)\n"
        "                       1p 2p\n"
        "  buddy.lock_acquired   1  2\n"
        "  (1 key counter zero in every column hidden; 1 other counter: --counters all "
        "shows them)\n")
    assert counters("all") == (
        "counters per op, buddy (columns: producers)\n"
        "                       1p 2p\n"
        "  buddy.lock_acquired   1  2\n"
        "  (2 constant counters hidden (zero, n/a, or the same in every column))\n")
    assert counters("none") == ""


@pytest.mark.parametrize("args, words", [
    (["--metric", "alloc_nss"], ["alloc_nss", "did you mean alloc_ns", "free_ns",
                                 "<layer>.<counter>", "buddy"]),
    (["--rows", "nope"], ["nope", "producers"]),
    (["--format", "yaml"], ["yaml", "markdown"]),
    (["--counters", "some"], ["some", "key"]),
])
def test_show_bad_flags_exit_2(known, args, words):
    p = cli("show", str(known), *args, check=2)
    assert p.stdout == "" and len(p.stderr.splitlines()) == 1
    assert p.stderr.startswith("alloclab: error: ")
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def test_show_bad_files_exit_2(tmp_path):
    p = cli("show", str(tmp_path / "nope.json"), check=2)
    lines = p.stderr.splitlines()  # one line naming the file and that it is not there
    assert len(lines) == 1 and lines[0].startswith("alloclab: error: "), p.stderr
    assert str(tmp_path / "nope.json") in lines[0] and "no such file" in lines[0].lower()
    bad = tmp_path / "bad.json"
    bad.write_text('{"hello": 1}')
    p = cli("show", str(bad), check=2)
    assert "not an alloclab result" in p.stderr and len(p.stderr.splitlines()) == 1
    empty = tmp_path / "empty.json"
    al.Result({}, []).to_json(str(empty))
    assert "no runs" in cli("show", str(empty), check=2).stderr
    assert cli("show", check=2).stderr.startswith("alloclab: error: ")


# ---------------------------------------------------------------- run --format

def test_run_format_json_is_the_result_and_nothing_else(tmp_path):
    j = tmp_path / "r.json"
    p = cli("run", "malloc-free", "--runs", "2", "--format", "json", "--json", str(j), *FAST,
            check=0)
    assert p.stdout == j.read_text() + "\n"  # the same text as --json writes
    res = al.Result.from_json(p.stdout)
    assert [pt.runs for pt in res.points] == [2]
    # the warnings that text puts under the table are on stderr, prefixed
    err = p.stderr.splitlines()
    assert "alloclab: warning: 2 runs (< 3): the spread and confidence interval are rough: " \
        "every cell" in err
    assert err[-1] == "alloclab: wrote %s" % j


def test_run_format_csv_matches_csv_file(tmp_path):
    c = tmp_path / "r.csv"
    p = cli("run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--runs", "3",
            "--format", "csv", "--csv", str(c), *FAST, check=0)
    assert p.stdout.encode() == c.read_bytes()  # the same bytes, "\n" line ends both
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert len(rows) == 2 * 3 and {r["policy"] for r in rows} == {"buddy", "libc"}
    assert all(r["alloc_ops"] == str(20 * 64) for r in rows)


def test_run_format_markdown_tables(tmp_path):
    p = cli("run", "malloc-free", "--producers", "1,2", "--allocs-per-cycle", "4,8", "--runs",
            "1", "--metric", "alloc_ops", "--format", "markdown", *FAST, check=0)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("**malloc-free, alloc_ops")
    assert lines[2:6] == ["| allocs/cycle | 1p | 2p |", "| --- | ---: | ---: |",
                          "| 4 | 80 | 160 |", "| 8 | 160 | 320 |"]
    assert "**counters per op, buddy (columns: allocs_per_cycle/producers)**" in lines
    assert p.stderr == ""


def test_run_warnings_are_merged_across_metrics():
    p = cli("run", "malloc-free", "--runs", "2", "--metric", "alloc_ns", "--metric",
            "free_ns", "--metric", "throughput", *FAST, check=0)
    assert p.stdout.count("warnings:") == 1
    assert p.stdout.count("2 runs (< 3)") == 1


# ---------------------------------------------------------------- files and help

def test_every_written_file_is_announced(tmp_path):
    j, c, png, jl = (tmp_path / n for n in ("r.json", "r.csv", "r.png", "r.jsonl"))
    p = cli("run", "malloc-free", "--runs", "1", "--json", str(j), "--csv", str(c),
            "--plot", str(png), "--journal", str(jl), *FAST, check=0)
    assert p.stderr.splitlines() == ["alloclab: wrote %s" % f for f in (j, c, jl, png)]
    assert all(f.exists() for f in (j, c, png, jl))


def test_run_help_names_the_metrics():
    for args in (["run", "--help"], ["run", "malloc-free", "--help"]):
        out = cli(*args, check=0).stdout
        assert "metrics (--metric NAME): alloc_ns, free_ns, throughput" in out
        assert "alloclab list metrics" in out and "--counters" in out and "--format" in out


# ---------------------------------------------------------------- compare --counters

def test_compare_counters(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _known(a)
    _known(b, lock=2.0)  # side B: twice the lock acquisitions
    out = cli("compare", str(a), str(b), "--names", "B", check=0).stdout
    tail = out[out.index("counters per op,"):]
    assert tail.splitlines() == [
        "counters per op, buddy -> B (mean over runs; shown, not judged)",
        "  buddy.lock_acquired_per_op: p:1   1 -> 2  2.00x more",
        "  buddy.lock_acquired_per_op: p:2   2 -> 4  2.00x more",
        "  (2 rows hidden (zero on both sides); --counters all shows every one that changed)"]
    out = cli("compare", str(a), str(b), "--counters", "all", check=0).stdout
    assert "(4 rows hidden (unchanged in every cell))" in out and "splits" not in out
    out = cli("compare", str(a), str(b), "--counters", "none", check=0).stdout
    assert "counters per op" not in out


@pytest.mark.parametrize("extra,needle", [
    (["SAME"], "are one file: each round is its own report"),
    (["--metric", "alloc_ns"], "prints its own tables; --metric applies to a result's"),
    (["--rows", "producers", "--sd"], "--rows and --sd apply to a result's"),
])
def test_show_refuses_what_a_report_would_ignore(tmp_path, extra, needle):
    import shutil
    import subprocess
    import sys
    src = os.path.join(os.path.dirname(__file__), "..", "bench", "results", "fidelity",
                       "local_storage-1.json")
    rep = tmp_path / "r.json"
    shutil.copyfile(src, rep)
    args = [str(tmp_path / "." / "r.json") if a == "SAME" else a for a in extra]
    p = subprocess.run([sys.executable, "-m", "alloclab", "show", str(rep), *args],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and needle in p.stderr and len(p.stderr.splitlines()) == 1, \
        p.stderr
