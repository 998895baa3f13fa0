"""Misuse a new user tries: conflicting options, corrupt files, shims that
do not load; each refused by name, or run as asked."""

import subprocess
import sys

import pytest

import alloclab.reproduce as rep
from alloclab import errors


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "alloclab", *argv], capture_output=True,
                          text=True)


def one_error(r, *words):
    """r exited 2 with one `alloclab: error:` line naming every word, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("alloclab: error:") == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


# -- other maps for a storage type the reproduction does not run


def test_reproduce_other_maps_for_a_storage_type_left_out():
    """{"socket": 2} with storage_types=["task"] ran the task cells with no other
    maps at all and said other_maps=0; it names both now. A zero count for a
    type left out changes nothing and stays accepted (the CLI passes one)."""
    with pytest.raises(errors.InvalidArgument) as e:
        rep.local_storage(storage_types=["task"], batch_sizes=[16], runs=1, duration=0.05,
                          owner_work="none", other_maps={"socket": 2})
    assert "other_maps=2" in str(e.value) and "socket" in str(e.value) and \
        "['task']" in str(e.value)


def test_cli_reproduce_other_maps_without_socket_storage():
    """`--other-maps 3 --storage-types task` printed a report saying other_maps=0."""
    r = cli("reproduce", "local-storage", "--storage-types", "task", "--batch-sizes", "16",
            "--runs", "1", "--other-maps", "3")
    one_error(r, "--other-maps=3", "--storage-types=task", "socket")


# -- corrupt saved results and reports: one error naming the field, no traceback


@pytest.fixture(scope="module")
def result_file(tmp_path_factory):
    import alloclab as al
    path = tmp_path_factory.mktemp("res") / "r.json"
    al.run("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1).to_json(str(path))
    return path


@pytest.fixture(scope="module")
def report_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("rep") / "ls.json"
    rep.local_storage(storage_types=["socket"], batch_sizes=[16], runs=1, duration=0.02,
                      sample=0.01, warmup_cycles=2, owner_work="none").to_json(str(path))
    return path


@pytest.mark.parametrize("field, bad, words", [
    ("run", "x", "metadata.run is a JSON string, not an object"),
    ("machine_state", 3, "metadata.machine_state is a JSON number"),
    ("load_before", [1], "metadata.load_before is a JSON list"),
    ("load_after", "x", "metadata.load_after"),
    ("counters", 3, "metadata.counters"),
    ("usable_cpus", "2", "metadata.usable_cpus is a JSON string, not an integer"),
    ("ticks_per_ns", "x", "metadata.ticks_per_ns"),
    ("load_before", {"1min": "high"}, "metadata.load_before.1min"),
])
def test_show_and_compare_name_a_corrupt_metadata_field(result_file, tmp_path, field, bad,
                                                         words):
    """A result whose metadata held a field of the wrong type printed an
    AttributeError or TypeError traceback from show and compare."""
    import json
    d = json.loads(result_file.read_text())
    d["metadata"][field] = bad
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    one_error(cli("show", str(f)), str(f), words)
    one_error(cli("compare", str(result_file), str(f)), str(f), words)


@pytest.mark.parametrize("mutate, words", [
    (lambda s: s.__setitem__("other_maps", "x"), "settings.other_maps is 'x'"),
    (lambda s: s.__setitem__("other_maps", None), "settings.other_maps is None"),
    (lambda s: s["other_maps"].__setitem__("socket", "1"), "settings.other_maps.socket is '1'"),
    (lambda s: s["other_maps"].__setitem__("socket", 99), "from 0 to 15"),
    (lambda s: s["other_maps"].__setitem__("inode", 1), "'inode'; valid: socket, task"),
    (lambda s: s["other_maps"].__setitem__("source", 1), "settings.other_maps.source is 1"),
    (lambda s: s.__setitem__("load_before", "x"), "settings.load_before is 'x'"),
])
def test_show_names_a_corrupt_report_setting(report_file, tmp_path, mutate, words):
    """A local-storage report whose other_maps (or load average) was not what
    the report writes printed a traceback from show; from_json raised it.
    show names the file it read."""
    import json
    d = json.loads(report_file.read_text())
    mutate(d["settings"])
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    one_error(cli("show", str(f)), str(f) + ": ", words)
    with pytest.raises(errors.FileFormatError) as e:
        rep.LocalStorageReport.from_json(str(f))
    assert words in str(e.value)


def test_a_report_without_other_maps_still_reads(report_file):
    import json
    d = json.loads(report_file.read_text())
    del d["settings"]["other_maps"]
    r = rep.LocalStorageReport.from_json(json.dumps(d))
    assert "other_maps=0" in str(r)


# -- run() options that do not go together


def test_steal_reruns_with_an_executor_is_refused():
    """run(executor=..., steal_reruns=2) ran every point on the executor without
    any rerun and still wrote steal_reruns=2 into the Result's settings."""
    import concurrent.futures as cf

    import alloclab as al
    with cf.ThreadPoolExecutor(1) as ex:
        with pytest.raises(errors.InvalidArgument) as e:
            al.run("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1, executor=ex,
                   steal_reruns=2)
        assert "steal_reruns=2" in str(e.value) and "executor" in str(e.value)
        # without reruns the executor runs as before
        res = al.run("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1, executor=ex)
        assert "steal_reruns" not in res.metadata["run"]


# -- the preload shim given by a relative path


def test_preload_command_with_a_relative_shim_still_preloads(tmp_path, monkeypatch):
    """preload.command(shim="liballoclab-preload.so") in the shim's directory put
    the bare name in LD_PRELOAD: ld.so searched its library path, printed that
    the object cannot be preloaded and the program ran on glibc, no record."""
    import os
    import shutil

    from alloclab import preload
    d = tmp_path / "shim"
    d.mkdir()
    shutil.copy(preload.preload_path(), d / "liballoclab-preload.so")
    monkeypatch.chdir(d)
    stats = tmp_path / "stats"
    cmd, env = preload.command("buddy", ["true"], shim="liballoclab-preload.so",
                               stats=str(stats))
    assert env["LD_PRELOAD"].split()[0] == str(d / "liballoclab-preload.so")
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=os.sep)
    assert r.returncode == 0 and "cannot be preloaded" not in r.stderr, r.stderr
    recs = preload.records(str(stats))
    assert [x["state"] for x in recs] == ["ready"]


# -- bench/preload_ab.py: refused before anything is built or timed


@pytest.mark.parametrize("args, words", [
    (["--rounds", "0"], "--rounds=0"),
    (["--a", "/nonexistent/shim.so"], "--a /nonexistent/shim.so: no such file"),
    (["--b", "LIB"], "does not run the policy"),
    (["--b", "SELF"], "no process record"),
    (["--policy", "libc"], "--policy libc"),
    (["--programs", "churn1,nope"], "unknown program 'nope'"),
])
def test_preload_ab_refuses_bad_arguments(args, words):
    """--rounds 0 built the programs and ended in a KeyError traceback; a missing
    shim in an AlloclabError traceback; a file ld.so could not preload (not a
    shim) timed glibc under that shim's name."""
    import os

    import alloclab as al
    from alloclab import preload
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shim = preload.preload_path()
    args = [{"LIB": al.lib_path(), "SELF": os.path.abspath(__file__)}.get(x, x) for x in args]
    argv = dict(zip(["--a", "--b"], [shim, shim]))
    for flag, v in zip(args[::2], args[1::2]):
        argv[flag] = v
    r = subprocess.run([sys.executable, os.path.join(root, "bench", "preload_ab.py")] +
                       [x for kv in argv.items() for x in kv], capture_output=True, text=True,
                       timeout=60)
    one_error(r, words)


# -- an empty item in a comma-separated flag


@pytest.mark.parametrize("argv, flag", [
    (["run", "local-storage-create", "--other-maps", "1,"], "--other-maps"),
    (["run", "malloc-free", "--producers", ""], "--producers"),
    (["reproduce", "local-storage", "--batch-sizes", "16,,32"], "--batch-sizes"),
    (["reproduce", "local-storage", "--storage-types", ","], "--storage-types"),
])
def test_an_empty_list_item_names_its_flag(argv, flag):
    """`--other-maps 1,` said only "empty value in list '1,'", not which flag."""
    one_error(cli(*argv), "argument %s: empty value in list" % flag)


@pytest.mark.parametrize("option, value", [("steal_reruns", 2), ("target_ci", 0.02),
                                           ("budget", 5.0)])
def test_sweep_names_the_run_options_it_does_not_take(option, value):
    """sweep(steal_reruns=2) said "unknown parameter 'steal_reruns' in workload
    malloc-free; valid parameters: size, allocs_per_cycle", as if a workload
    parameter had been misspelt."""
    import alloclab as al
    with pytest.raises(errors.InvalidArgument) as e:
        al.sweep("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1, **{option: value})
    assert "sweep() does not take %s: run() does" % option in str(e.value)


# -- bench/observer.py's scaling split


def test_observer_split_leaves_a_lock_untimed_at_2p_in_the_rest():
    """A lock not taken at 1p has hold 0.0 there (no acquisitions) and none
    timed at 2p (nan, the transfer cache's): the split printed "more time
    holding nan + the rest nan" instead of counting it in the rest."""
    import importlib.util
    import math
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench",
                        "observer.py")
    spec = importlib.util.spec_from_file_location("observer_bench", path)
    ob = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ob)

    def lock(acq, wait, hold):
        return dict(acquired_per_op=acq, wait_ns_per_op=wait, hold_ns_per_acquired=hold)
    c = {"buddy/1p": lock(0.1, 0.0, 20.0), "buddy/2p": lock(0.1, 1.5, 30.0),
         "transfer/1p": lock(0.0, 0.0, 0.0), "transfer/2p": lock(0.05, 0.5, math.nan),
         "time/1p": {"ns_per_op": 10.0}, "time/2p": {"ns_per_op": 15.0}}
    parts = ob.slowdown_parts(c)
    assert parts == pytest.approx(dict(extra_ns=5.0, wait_ns=2.0, holding_ns=1.0,
                                       outside_ns=2.0))


# -- errors: echoes cut, the right exception, ASCII digits only


@pytest.mark.parametrize("spec", ["q" * 1000000, "buddy > " + "z" * 1000000,
                                  "buddy(arena_limit=" + "x" * 1000000 + ")",
                                  "buddy(" + "x" * 1000000 + "=1)", "buddy(" + "x" * 1000000,
                                  "buddy > " * 100000])
def test_a_long_policy_is_echoed_cut(spec):
    """A 1 MB spec made a 2 MB message (the name, then the whole spec)."""
    import alloclab as al
    with pytest.raises(errors.AlloclabError) as e:
        al.Policy(spec)
    msg = str(e.value)
    assert len(msg) < 1000, len(msg)
    assert "characters)" in msg  # the length of what was cut is said


def test_shown_cuts_once_and_keeps_short_values_whole():
    assert errors.shown("buddy") == "'buddy'"
    s = errors.shown("q" * 5000)
    assert len(s) < errors.ECHO_LIMIT + 40 and s.endswith("(5000 characters)")
    assert errors.shown(errors.Echo("q" * 5000)) == s
    assert "%r" % errors.Echo("x") == "'x'" and "%s" % errors.Echo("x") == "x"


def test_cli_echoes_a_long_value_cut():
    long = "x" * 100000
    for argv in (["run", "malloc-free", "--producers", long],
                 ["run", "malloc-free", "--metric", long],
                 ["run", "malloc-free", "--policy", "q" + long],
                 ["run", "malloc-free", "--size", long],
                 ["run", "malloc-free", "--stat", long],  # argparse's own choice error
                 ["run", "malloc-free", "--counters", long],
                 ["run", "malloc-free", long],  # argparse's unrecognized arguments
                 ["run", "malloc-free", "--runs", "9" * 5000],  # int() refuses 4300 digits
                 ["show", long], ["compare", long, long]):
        r = cli(*argv)
        one_error(r)
        assert len(r.stderr) < 2000, (argv[2], len(r.stderr))


def test_usable_size_of_a_bad_pointer_is_not_a_bad_free():
    import alloclab as al
    with al.Allocator("buddy") as a:
        p = a.alloc(64)
        for bad in (p + 8, 0x1234):
            with pytest.raises(errors.InvalidPointerError, match="0x%x is not a live block"
                               % bad) as e:
                a.usable_size(bad)
            assert not isinstance(e.value, errors.InvalidFreeError)
            assert e.value.addr == bad
        assert a.usable_size(p) >= 64  # nothing was touched
        a.free(p)
        with pytest.raises(errors.InvalidFreeError):  # a bad free is still one
            a.free(p)


def test_pickling_an_allocator_says_what_to_pass_instead():
    import copy
    import pickle

    import alloclab as al
    with al.Allocator("percpu(capacity=8) > buddy", ncpu=2) as a:
        for f in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(errors.NotPicklableError) as e:
                f(a)
            msg = str(e.value)
            assert isinstance(e.value, TypeError)
            assert "cannot be pickled" in msg and "policy string" in msg, msg
            assert "percpu(capacity=8) > buddy" in msg and "ncpu=2" in msg, msg
            assert "cffi" not in msg.lower()


@pytest.mark.parametrize("argv, flag", [
    (["--producers", "\u0663"], "--producers"), (["--producers", "1,\u0663"], "--producers"),
    (["--runs", "\u0663"], "--runs"), (["--cycles", "\uff18"], "--cycles"),
    (["--seed", "1_0"], "--seed"), (["--warmup-cycles", "\u0661"], "--warmup-cycles"),
    (["--duration", "\u0663"], "--duration"), (["--watchdog", "\u0663"], "--watchdog"),
    (["--target-ci", "\u0660.5"], "--target-ci"), (["--budget", "\u0663"], "--budget"),
])
def test_numbers_take_ascii_digits_only(argv, flag):
    """int() and float() read other scripts' digits ('\u0663' is 3): --producers
    took what capacity= refused. Every number is read one way now."""
    r = cli("run", "malloc-free", *argv)
    one_error(r, flag, "%r" % argv[1].split(",")[-1])


@pytest.mark.parametrize("argv, flag", [
    (["trace", "info", "x.trace", "--top", "\u0663"], "--top"),
    (["preload", "--policy", "buddy", "--watchdog", "\u0663", "--", "true"], "--watchdog"),
])
def test_other_commands_take_ascii_digits_only(argv, flag):
    r = cli(*argv)
    one_error(r, flag, "'\u0663'")


def test_compare_threshold_takes_ascii_digits_only(result_file):
    r = cli("compare", str(result_file), str(result_file), "--threshold", "\u0663")
    one_error(r, "--threshold", "'\u0663'")


@pytest.mark.parametrize("argv, words", [
    (["run", "malloc-free", "--metric", "percpu.hits"],
     ["'percpu.hits'", "layer percpu", "not in the policy (buddy)", "its layers: buddy"]),
    (["run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--metric",
      "percpu.hits_per_op"], ["layer percpu", "not in the policies (buddy; libc)"]),
])
def test_a_counter_of_a_layer_not_in_the_policy_says_so(argv, words):
    one_error(cli(*argv), *words)


def test_show_a_counter_of_a_layer_not_in_the_result_says_so(result_file):
    one_error(cli("show", str(result_file), "--metric", "percpu.hits"), "layer percpu",
              "not in the result's policies")


@pytest.mark.parametrize("argv", [["run", "malloc-free", "--cycles", "5", "--runs", "1"],
                                  ["list"], ["show", "RESULT"]])
def test_a_full_stdout_is_named(argv, result_file):
    """`run ... > /dev/full` said "[Errno 28] No space left on device",
    naming no file."""
    import os
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    argv = [str(result_file) if a == "RESULT" else a for a in argv]
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "alloclab", *argv], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert r.stderr.splitlines() == [
        "alloclab: error: cannot write the results to stdout: No space left on device"], \
        r.stderr


@pytest.mark.parametrize("duration", ["1e-9", "0.0005", "500us"])
def test_a_phase_shorter_than_the_timer_sees_is_refused(duration):
    """--duration 1e-9 ran and printed latencies of a phase of a few
    operations; it is refused unless --force, and --help says so."""
    one_error(cli("run", "malloc-free", "--duration", duration, "--runs", "1"),
              "--duration", "shorter than 1 ms", "--force")


def test_force_runs_a_short_phase_and_the_tables_flag_it():
    r = cli("run", "malloc-free", "--duration", "1e-6", "--runs", "1", "--force",
            "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "measured phases shorter than 100 ms" in r.stdout
    h = cli("run", "malloc-free", "--help").stdout
    assert "--force" in h and "refused unless" in h


def test_a_phase_of_1_ms_needs_no_force():
    r = cli("run", "malloc-free", "--duration", "1ms", "--runs", "1", "--no-progress")
    assert r.returncode == 0, r.stderr


# -- a result whose points repeat or whose parameters are of the wrong type


def _mutated(result_file, tmp_path, mutate):
    import json
    d = json.loads(result_file.read_text())
    mutate(d)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(d))
    return f


def _dup(d):
    d["points"].append(d["points"][0])


@pytest.mark.parametrize("mutate, words", [
    (_dup, ["points[1] repeats points[0]", "policy=buddy", "counted twice"]),
    (lambda d: d["points"][0]["params"].__setitem__("producers", "1"),
     ["points[0].params.producers is '1' (a JSON string), not an integer"]),
    (lambda d: d["points"][0]["params"].__setitem__("producers", True),
     ["points[0].params.producers", "not an integer"]),
    (lambda d: d["points"][0]["params"].__setitem__("size", 64.0),
     ["points[0].params.size is 64.0 (a JSON number), not an integer"]),
    (lambda d: d["points"][0]["params"].__setitem__("policy", ["buddy"]),
     ["points[0].params.policy", "a JSON list", "not a string"]),
    (lambda d: d["points"][0]["params"].__setitem__("other", {"a": 1}),
     ["points[0].params.other", "a JSON object"]),
])
def test_show_refuses_repeated_points_and_mistyped_parameters(result_file, tmp_path, mutate,
                                                              words):
    """show printed such a result as "mean of 2 runs" (the one run counted
    twice) or as two cells of one; it is refused, naming the point and the
    field, in Python (FileFormatError) and on the command line."""
    import alloclab as al
    f = _mutated(result_file, tmp_path, mutate)
    with pytest.raises(errors.FileFormatError) as e:
        al.Result.from_json(str(f))
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    one_error(cli("show", str(f)), str(f), *words)
    one_error(cli("compare", str(result_file), str(f)), str(f), words[0])


def test_two_results_of_one_cell_concatenated_still_load(tmp_path):
    """Points with the same parameters and other runs (Result.concat of two
    runs) pool their runs, as before."""
    import alloclab as al
    a = al.run("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1)
    b = al.run("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1)
    both = al.Result.concat([a, b])
    again = al.Result.from_json(both.to_json())
    assert len(again.points) == 2 and again == both


def test_python_api_errors_echo_a_huge_argument_cut():
    import alloclab as al
    huge = list(range(200000))
    res = al.Result({}, [])
    calls = [lambda: al.Allocator("buddy", ncpu=huge), lambda: al.compare(huge, huge),
             lambda: al.compare(res, res, threshold=huge),
             lambda: al.plot.heatmap(None, vmax=huge),
             lambda: al.verdict.claim(huge, "a", "b"), lambda: al.Result.concat([huge]),
             lambda: al.sweep("malloc-free", "buddy", journal=huge),
             lambda: al.run("malloc-free", "buddy", producers=["x" * 10 ** 6])]
    for f in calls:
        with pytest.raises(errors.AlloclabError) as e:
            f()
        assert len(str(e.value)) < 1000, str(e.value)[:200]
    with al.Allocator("buddy") as a:
        for f in (lambda: a.alloc(huge), lambda: a.free(huge), lambda: a.alloc(64, cpu=huge)):
            with pytest.raises(errors.AlloclabError) as e:
                f()
            assert len(str(e.value)) < 1000, str(e.value)[:200]


def test_python_names_a_counter_of_a_layer_not_in_the_result(result_file):
    import alloclab as al
    res = al.Result.from_json(str(result_file))
    with pytest.raises(errors.UnknownNameError,
                       match="layer percpu is not in the result's policies .their layers: buddy"):
        res.stats("percpu.hits")
