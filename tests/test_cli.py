"""The command line, run as a user runs it: a subprocess."""

import json
import subprocess
import sys
import textwrap

import pytest


def cli(*args, check=None):
    p = subprocess.run([sys.executable, "-m", "alloclab", *args], capture_output=True,
                       text=True, timeout=120)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def test_run_prints_the_table():
    p = cli("run", "malloc-free", "--policy", "buddy", "--producers", "1,2",
            "--allocs-per-cycle", "1,16", "--cycles", "50", "--runs", "1", check=0)
    out = p.stdout
    assert "allocation latency" in out and "free latency" in out
    lines = out.splitlines()
    headers = [line for line in lines if line.split()[:1] == ["allocs/cycle"]]
    assert len(headers) == 2  # alloc_ns and free_ns
    assert headers[0].split() == ["allocs/cycle", "1p", "2p"]
    i = lines.index(headers[0])
    assert [row.split()[0] for row in lines[i + 1:i + 3]] == ["1", "16"]
    assert all(len(row.split()) == 3 for row in lines[i + 1:i + 3])
    assert "cpu: " in out and "timer overhead" in out and "clock" in out
    assert "buddy.lock_acquired" in out
    assert p.stderr == ""


def test_run_two_policies_json_csv(tmp_path):
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    p = cli("run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--cycles", "10",
            "--warmup-cycles", "1", "--runs", "2", "--metric", "throughput", "--json", str(j),
            "--csv", str(c), check=0)
    assert "throughput" in p.stdout and "libc" in p.stdout
    d = json.loads(j.read_text())
    assert len(d["points"]) == 2
    assert len(c.read_text().splitlines()) == 1 + 2 * 2


def test_run_malloc_rows_default_to_its_param():
    p = cli("run", "malloc", "--nallocs", "10,20", "--cycles", "2", "--runs", "1",
            "--warmup-cycles", "0", check=0)
    assert "nallocs" in p.stdout


@pytest.mark.parametrize("args, words", [
    (["run", "nope"], ["nope", "malloc-free"]),
    (["run", "malloc-free", "--policy", "nosuch"], ["nosuch", "buddy"]),
    (["run", "malloc-free", "--policy", "buddy(bogus=1)"], ["bogus", "arena_limit"]),
    (["run", "malloc-free", "--policy", "buddy(arena_limit=1K)"], ["1K", "[1M, 64G]"]),
    (["run", "malloc-free", "--producers", "0"], ["producers=0"]),
    (["run", "malloc-free", "--producers", "100000"], ["100000"]),
    (["run", "malloc-free", "--producers", "two"], ["two"]),
    (["run", "malloc-free", "--size", "0"], ["size=0"]),
    (["run", "malloc-free", "--size", "1M"], ["1M", "512K"]),
    (["run", "malloc-free", "--allocs-per-cycle", "1.5"], ["1.5"]),
    (["run", "malloc-free", "--runs", "0"], ["runs=0"]),
    (["run", "malloc-free", "--cycles", "0"], ["cycles=0"]),
    (["run", "malloc-free", "--duration", "-1"], ["duration"]),
    (["run", "malloc-free", "--cpu", "sideways"], ["sideways", "virtual"]),
    (["run", "malloc-free", "--timing", "fast"], ["fast", "per_op_sum"]),
    (["run", "malloc", "--producers", "2"], ["malloc", "producers=2"]),
    (["run", "malloc-free", "--bogus", "1"], ["--bogus"]),
    (["run", "malloc-free", "--metric", "nope"], ["nope", "alloc_ns"]),
    (["run"], ["workload"]),
    (["frob"], ["frob"]),
])
def test_bad_input_exits_2(args, words):
    p = cli(*args, check=2)
    assert p.stderr.startswith("alloclab: error: "), p.stderr
    assert "Traceback" not in p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def test_failed_run_exits_1():
    p = cli("run", "malloc-free", "--policy", "buddy(arena_limit=2M)", "--size", "4096",
            "--allocs-per-cycle", "1000", "--cycles", "1", "--runs", "1", check=1)
    assert p.stderr.startswith("alloclab: error: ") and "ENOMEM" in p.stderr
    assert "Traceback" not in p.stderr


def test_list():
    p = cli("list", check=0)
    assert "buddy" in p.stdout and "malloc-free" in p.stdout and "presets" in p.stdout
    assert "arena_limit" not in p.stdout  # parameters are one `list NAME` away
    assert len(p.stdout.splitlines()) < 80
    assert "arena_limit" in cli("list", "buddy", check=0).stdout
    assert "allocs_per_cycle" in cli("list", "malloc-free", check=0).stdout
    p = cli("list", "--json", check=0)
    d = json.loads(p.stdout)
    assert {"layers", "workloads", "presets"} <= set(d)


def test_workload_help_lists_its_flags():
    p = cli("run", "malloc-free", "--help", check=0)
    assert "--allocs-per-cycle" in p.stdout and "--size" in p.stdout
    assert "default: 64" in p.stdout
    p = cli("run", "malloc", "--help", check=0)
    assert "--nallocs" in p.stdout and "--allocs-per-cycle" not in p.stdout
    p = cli("run", "--help", check=0)
    assert "malloc-free" in p.stdout


def test_version():
    import alloclab
    p = cli("--version", check=0)
    assert alloclab.__version__ in p.stdout


# ---------------------------------------------------------------- hostile input
#
# Every refusal: exit 2 and exactly one line, `alloclab: error: ...`, naming
# the bad value and the valid ones, before anything runs. The runs asked for
# would take far longer than cli()'s timeout, so a refusal that came after
# running (or never) fails the test.

LONG = ["--duration", "1000", "--runs", "1"]


def one_error_line(p, *words):
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("alloclab: error: "), p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert p.stdout == ""


@pytest.mark.parametrize("args, words", [
    (["--duration", "1e30"], ["'1e30'", "seconds from 0 to 1e+09"]),
    (["--duration", "nan"], ["'nan'", "seconds from 0 to"]),
    (["--duration", "inf"], ["'inf'", "seconds from 0 to"]),
    (["--duration", "-1"], ["'-1'", "seconds from 0 to"]),
    (["--duration", "0"], ["duration=0.0", "positive"]),
    (["--duration", "1e10"], ["'1e10'"]),
    (["--watchdog", "1e30"], ["watchdog=1e+30", "0.001 to 1e+09"]),
    (["--watchdog", "nan"], ["watchdog=nan"]),
    (["--runs", "0"], ["runs=0", "[1, 1000000]"]),
    (["--runs", "99999999999999999999999"], ["runs=99999999999999999999999", "[1, 1000000]"]),
    (["--producers", "10000"], ["producers=10000", "[1, 1024]"]),
    (["--producers", "1,,2"], ["'1,,2'"]),
    (["--target-ci", "5"], ["target_ci=5.0", "0 < target_ci < 1"]),
    (["--target-ci", "0.1", "--budget", "nan"], ["'nan'"]),
    (["--plugin", "."], ["--plugin .", "is a directory, not a regular file"]),
])
def test_bad_numbers_are_one_error_line(args, words):
    one_error_line(cli("run", "malloc-free", *LONG, *args), *words)


@pytest.mark.parametrize("args, words", [
    (["larson", "--min-size", "1000", "--max-size", "8"],
     ["min_size=1000 is above max_size=8"]),
    (["larson", "--min-size", "8,1000", "--max-size", "512"],
     ["min_size=1000 is above max_size=512"]),
    (["test_vmalloc", "--policy", "buddy"],
     ["test_vmalloc", "'buddy'", "vmalloc layer at the top", "vmalloc-default"]),
    (["test_vmalloc", "--policy", "vmalloc-default", "--nr-threads", "4"],
     ["nr_threads=4 with producers=1", "producers=4"]),
    (["nmi", "--policy", "buddy", "--policy", "kzalloc"],
     ["'kzalloc'", "slab is not NMI-safe", "presets it runs on: buddy"]),
    (["nmi", "--policy", "percpu > slab"], ["'percpu > slab'", "slab is not NMI-safe"]),
])
def test_incompatible_plans_exit_2_before_any_run(args, words):
    one_error_line(cli("run", *args, *LONG), *words)


def test_larson_with_equal_sizes_runs():
    cli("run", "larson", "--min-size", "64", "--max-size", "64", "--cycles", "5", "--runs", "1",
        check=0)


@pytest.mark.parametrize("flag, path, words", [
    ("--json", "missing/r.json", ["missing", "does not exist"]),
    ("--csv", "missing/r.csv", ["missing", "does not exist"]),
    ("--plot", "missing/r.png", ["missing", "does not exist"]),
    ("--json", ".", ["is a directory"]),
    ("--json", "file/r.json", ["is not a directory"]),
    ("--plot", "x.bogusext", ["'bogusext'", "valid extensions: ", "png", "svg"]),
    ("--json", "/proc/r.json", ["/proc/r.json cannot be written"]),
    ("--json", "", ["--json needs a file name"]),
    ("--journal", "missing/j.jsonl", ["journal", "does not exist"]),
    ("--journal", ".", ["is a directory"]),
    ("--journal", "/dev/full", ["not a regular file"]),
])
def test_output_paths_are_checked_before_the_run(tmp_path, flag, path, words):
    (tmp_path / "file").write_text("x")
    p = subprocess.run([sys.executable, "-m", "alloclab", "run", "malloc-free", *LONG, flag,
                        path], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    one_error_line(p, *words)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["file"]  # nothing created


def test_two_outputs_naming_one_file_are_refused(tmp_path):
    f = str(tmp_path / "r")
    one_error_line(cli("run", "malloc-free", *LONG, "--json", f, "--csv", f),
                   "--json and --csv both name")
    one_error_line(cli("run", "malloc-free", *LONG, "--journal", f, "--json", f),
                   "--json and --journal both name")
    one_error_line(cli("run", "malloc-free", *LONG, "--hist", "--plot", f + ".png", "--json",
                       f + "-1.png"), "both name " + f + "-1.png")
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_after_the_run_is_one_line():
    p = cli("run", "malloc-free", "--cycles", "5", "--runs", "1", "--json", "/dev/full")
    assert p.returncode == 1
    assert p.stderr == "alloclab: error: --json /dev/full: cannot write: No space left on " \
                       "device\n"
    assert "allocation latency" in p.stdout  # the results were printed first


JOURNAL_NOT_MINE = [
    b'{"format": "alloclab-result", "points": []}\n{"metadata": {}}',  # a result, no final \n
    b"my notes\nthe last line, not ended",
    b"\xff\xfe binary \x00\x01\n\x02",
    b"[1, 2]\n",
    b"null\n",
]


@pytest.mark.parametrize("data", JOURNAL_NOT_MINE)
def test_journal_that_is_not_a_journal_is_left_byte_identical(tmp_path, data):
    j = tmp_path / "notes.jsonl"
    j.write_bytes(data)
    one_error_line(cli("run", "malloc-free", *LONG, "--journal", str(j)),
                   str(j), "not an alloclab sweep journal")
    assert j.read_bytes() == data


def test_journal_of_the_wrong_shape_is_one_line_and_unchanged(tmp_path):
    j = tmp_path / "s.jsonl"
    args = ["run", "malloc-free", "--cycles", "5", "--warmup-cycles", "1", "--runs", "1",
            "--journal", str(j)]
    cli(*args, check=0)
    header = j.read_bytes().split(b"\n")[0]
    d = json.loads(header)
    cases = [header + b'\n{"point": 1, "run": 0, "raw": {}}\n',
             header + b"\n\xff\xfe\n",
             json.dumps(dict(d, version="1")).encode() + b"\n",
             json.dumps(dict(d, settings=[])).encode() + b"\n"]
    for data in cases:
        j.write_bytes(data)
        p = cli(*args)
        one_error_line(p, str(j))
        assert "Traceback" not in p.stderr and j.read_bytes() == data
    j.write_bytes(header + b"\n")  # another sweep's journal
    one_error_line(cli(*args[:-2], "--producers", "2", "--journal", str(j)),
                   "different sweep", "sweep.producers [1] in the journal, [2] here")


@pytest.mark.parametrize("content, words", [
    (b"[1, 2]", ["holds a JSON list"]),
    (b"null", ["holds a JSON null"]),
    (bytes(range(256)), ["not UTF-8"]),
    (b"", ["is not JSON"]),
    (b'{"format": "alloclab-result", "metadata": {}, "points": [7]}', ["points[0]"]),
])
def test_compare_refuses_files_that_are_not_results(tmp_path, content, words):
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    one_error_line(cli("compare", str(bad), str(bad)), str(bad), *words)
    assert bad.read_bytes() == content


def test_compare_refuses_devices_and_directories(tmp_path):
    one_error_line(cli("compare", "/dev/zero", "/dev/zero"), "/dev/zero", "is a character device")
    one_error_line(cli("compare", str(tmp_path), str(tmp_path)), "cannot read", "directory")
    one_error_line(cli("compare", "x.json", "x.json", "--plot", "h.bogus"), "'bogus'")


def test_reproduce_without_a_seed_lists_the_seeds():
    one_error_line(cli("reproduce"), "needs a seed", "libarena, vmalloc, local-storage")
    one_error_line(cli("reproduce", "nosuch"), "'nosuch'", "libarena")


@pytest.mark.parametrize("args, words", [
    (["libarena", "--json", "missing/r.json"], ["missing", "does not exist"]),
    (["libarena", "--plot", "r.bogus"], ["'bogus'"]),
    (["vmalloc", "--min-time", "1e30"], ["'1e30'"]),
    (["vmalloc", "--min-time", "0"], ["--min-time=0.0"]),
    (["local-storage", "--sample", "0"], ["--sample=0.0"]),
    (["local-storage", "--duration", "nan"], ["'nan'"]),
])
def test_reproduce_checks_before_running(args, words):
    one_error_line(cli("reproduce", *args), *words)


@pytest.mark.parametrize("argv, workload", [
    (["--processes", "malloc-free"], "malloc-free"),
    (["--quick", "--sd", "malloc-free", "--runs", "1"], "malloc-free"),
    (["--rigorous", "larson"], "larson"),
    (["--isolate", "malloc-free"], "malloc-free"),
    (["--no-isolate", "--progress", "--hist", "--ci", "malloc-free"], "malloc-free"),
    (["--prog", "malloc-free"], "malloc-free"),          # argparse's abbreviation of --progress
    (["--runs", "3", "malloc-free"], "malloc-free"),
    (["--policy", "buddy", "--producers=2", "larson"], "larson"),
    (["--seed", "7"], None),
    (["--runs", "3", "--", "malloc-free"], "malloc-free"),
])
def test_the_workload_is_found_after_any_flag(argv, workload):
    """Every option of `alloclab run` that takes no value (store_true,
    store_const, help) lets the workload follow it: the set is read from the
    parser, so a flag added there is known without a second list."""
    import importlib
    cli_mod = importlib.import_module("alloclab.cli.run")
    assert cli_mod.find_workload(argv) == workload


def test_no_value_flags_match_the_parser():
    """The words find_workload skips without a value are exactly the run
    parser's zero-argument options."""
    import importlib
    cli_mod = importlib.import_module("alloclab.cli.run")
    p = cli_mod.run_parser(None)
    takes_value = cli_mod.takes_value_predicate(p)
    for a in p._actions:
        for s in a.option_strings:
            assert takes_value(s) == (a.nargs != 0), s
    assert {s for a in p._actions if a.nargs == 0 for s in a.option_strings} >= {
        "-h", "--help", "--sd", "--progress", "--hist", "--ci", "--processes", "--quick",
        "--rigorous", "--isolate", "--no-isolate"}


def test_run_with_a_no_value_flag_before_the_workload():
    p = cli("run", "--processes", "--quick", "malloc-free", "--cycles", "10",
            "--warmup-cycles", "1", "--runs", "1", check=0)
    assert "allocation latency" in p.stdout and p.stderr == ""


@pytest.mark.parametrize("args, named", [
    (["--check", "larson"], "--check"),  # an unknown flag before the workload
    (["--bogus", "3", "larson"], "--bogus 3"),
])
def test_an_unknown_flag_is_named_not_taken_for_the_workload(args, named):
    p = cli("run", *args, check=2)
    assert p.stderr.strip().splitlines()[-1] == "alloclab: error: unrecognized arguments: " + named


@pytest.mark.parametrize("args, hint", [
    (["run", "malloc-free", "--size", "-4K"], True),  # argparse takes -4K for a flag
    (["compare", "a.json", "b.json", "--metric", "-x"], True),
    (["run", "malloc-free", "--size"], False),  # no value at all: no hint
])
def test_a_value_that_starts_with_a_dash_is_told_how_to_write(args, hint):
    p = cli(*args, check=2)
    line = p.stderr.strip().splitlines()[-1]
    flag = args[-2] if hint else args[-1]
    assert line.startswith("alloclab: error: argument %s: expected one argument" % flag), line
    assert line.endswith("(a value that starts with '-' is written %s=VALUE)" % flag) == hint, line


@pytest.mark.parametrize("cmd", ["run", "show"])
def test_a_metric_given_twice_is_refused_before_anything_runs(cmd, tmp_path):
    """Twice, its table was printed twice (compare refuses it too)."""
    args = ["run", "malloc-free", "--runs", "1", "--cycles", "5"]
    if cmd == "show":
        cli(*args, "--json", str(tmp_path / "r.json"), check=0)
        args = ["show", str(tmp_path / "r.json")]
    p = cli(*args, "--metric", "free_ns", "--metric", "free_ns", check=2)
    assert p.stderr == "alloclab: error: --metric free_ns is given twice: give each once\n"
    assert p.stdout == ""


def test_a_histogram_metric_without_hist_says_to_add_it():
    """Refused before the run, and not as an unknown metric ('did you mean
    alloc_ns?') though run --help lists it."""
    p = cli("run", "malloc-free", "--runs", "1", "--cycles", "5", "--metric", "alloc_p99_ns",
            check=2)
    assert p.stderr == ("alloclab: error: --metric alloc_p99_ns is read from per-operation "
                        "histograms: add --hist\n") and p.stdout == ""


def test_compare_by_a_number_and_by_without_baseline(tmp_path):
    f = str(tmp_path / "p.json")
    cli("run", "malloc-free", "--producers", "1,2", "--runs", "2", "--cycles", "5",
        "--json", f, check=0)
    p = cli("compare", f, "--baseline", "1", "--by", "producers", check=0)
    assert "| 2 " in p.stdout.splitlines()[1]  # the one column: producers=2 against 1
    p = cli("compare", f, f, "--by", "producers", check=2)
    assert p.stderr.startswith("alloclab: error: --by producers applies with --baseline VALUE")


def test_a_number_past_any_range_is_one_error_line():
    p = cli("run", "malloc-free", "--policy", "percpu(capacity=%s) > buddy" % ("9" * 5000),
            check=2)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alloclab: error: ")
    assert "(5000 characters) is out of range [1, 1024]" in lines[0]


def _interrupt_after_first_run(argv, deadline_s=60, until=rb"\| *[1-9][0-9]*/[0-9]+ runs"):
    """Start `alloclab run ... --progress`, wait (bounded) until its bar says
    a run finished (or matches ``until``), then send SIGINT; returns
    (returncode, stderr text)."""
    import re
    import selectors
    import signal
    import time

    p = subprocess.Popen([sys.executable, "-m", "alloclab", *argv, "--progress"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = b""
    sel = selectors.DefaultSelector()
    sel.register(p.stderr, selectors.EVENT_READ)
    end = time.monotonic() + deadline_s
    try:
        while not re.search(until, err):
            left = end - time.monotonic()
            assert left > 0 and p.poll() is None, ("no run finished", err[-300:])
            if sel.select(timeout=left):
                chunk = p.stderr.read1(4096) if hasattr(p.stderr, "read1") else \
                    p.stderr.read(1)
                err += chunk
        p.send_signal(signal.SIGINT)
        rest = p.communicate(timeout=deadline_s)[1]
    finally:
        sel.close()
        if p.poll() is None:
            p.kill()
            p.wait()
    return p.returncode, (err + rest).decode("utf-8", "replace")


def test_ctrl_c_writes_the_finished_runs_to_json(tmp_path):
    """Ctrl-C during `run --json FILE` (no --journal) wrote nothing: the runs
    that had finished were lost. FILE now holds them, marked interrupted,
    stderr says so, and `show` says it."""
    out = tmp_path / "r.json"
    rc, err = _interrupt_after_first_run(
        ["run", "malloc-free", "--producers", "1,2", "--runs", "50", "--duration", "0.2",
         "--json", str(out)])
    assert rc == 130, err
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.startswith("alloclab:")]
    assert any(x.startswith("alloclab: wrote %s: the " % out) and "of 100 runs that finished "
               "before the interrupt (marked interrupted)" in x for x in lines), err
    assert lines[-1] == "alloclab: interrupted", lines
    d = json.loads(out.read_text())
    it = d["metadata"]["interrupted"]
    assert it["signal"] == "SIGINT" and it["runs_planned"] == 100
    assert 1 <= it["runs_finished"] < 100
    assert it["runs_finished"] == sum(len(p["data"]["alloc_ns"]["values"])
                                      for p in d["points"])
    s = cli("show", str(out), check=0)
    assert s.stdout.startswith("interrupted: %d of 100 runs finished before SIGINT"
                               % it["runs_finished"]), s.stdout[:300]


def test_ctrl_c_before_any_run_finished_says_json_is_not_written(tmp_path):
    out = tmp_path / "r.json"
    rc, err = _interrupt_after_first_run(
        ["run", "malloc-free", "--runs", "2", "--duration", "30", "--json", str(out),
         "--csv", str(tmp_path / "r.csv")], until=rb"\| *0/2 runs[^\r]*measuring")
    assert rc == 130, err
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.startswith("alloclab:")]
    assert lines == ["alloclab: no run had finished: --json %s and --csv %s not written"
                     % (out, tmp_path / "r.csv"), "alloclab: interrupted"], lines
    assert not out.exists()


def test_ctrl_c_while_the_commands_load_is_no_traceback():
    """An interrupt in the third of a second the console script spends
    importing the package and its commands ends as one during a command
    does, not in a traceback (nor lost in an import callback)."""
    code = textwrap.dedent("""
        import os, signal, sys
        class Interrupting:
            def find_spec(self, name, path=None, target=None):
                if name == "alloclab.cli.main":
                    os.kill(os.getpid(), signal.SIGINT)
        sys.meta_path.insert(0, Interrupting())
        import alloclab_console
        sys.exit(alloclab_console.main(["list"]))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert (p.returncode, p.stderr, p.stdout) == (130, "alloclab: interrupted\n", "")


def test_reproduce_workloads_take_the_names_the_tables_print():
    from alloclab.cli.flags import choice_list
    conv = choice_list("workload", ["malloc-free", "malloc-xfree"], prefix="libarena-")
    assert conv("libarena-malloc-free,malloc-xfree") == ["malloc-free", "malloc-xfree"]
    with pytest.raises(Exception, match="unknown workload 'nope'"):
        conv("libarena-nope")
