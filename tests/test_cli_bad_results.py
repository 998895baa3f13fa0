"""Result files that are not what `show` and `compare` read, and results
that do not add up: each is one `alloclab: error:` line (exit 2) naming the
file, the field and what it should be, or a specific exception in Python;
never a traceback. Also what `compare` says about its sides (which file is
which, an interrupted run), its flags' spelling and --threshold's meaning,
and `record --help`'s default compressor."""

import json
import math

import numpy as np
import pytest

import alloclab as al
from alloclab import errors
from alloclab.cbind import schema
from alloclab.results.result import Result
from alloclab.traces.trace import DEFAULT_COMPRESSOR
from test_cli import cli

RUN = dict(cycles=20, warmup_cycles=2, runs=2)
SHOW_TAIL = " (show reads the files alloclab run --json writes and those of reproduce --json)"
COMPARE_TAIL = " (compare reads the files alloclab run --json writes)"
STOPPED = ("interrupted: 3 of 4 runs finished before SIGINT stopped the run; each cell holds "
           "only its finished runs, a cell with none is left out")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """m1: buddy at 1 and 2 producers; m2: libarena-spill at 1 and 2; m3:
    buddy at 4 producers and 16 allocs per cycle; intr: m1 marked
    interrupted (3 of 4 runs)."""
    d = tmp_path_factory.mktemp("res")
    out = {}
    for name, pol, kw in (("m1", "buddy", dict(producers=[1, 2])),
                          ("m2", "libarena-spill", dict(producers=[1, 2])),
                          ("m3", "buddy", dict(producers=[4], allocs_per_cycle=16))):
        out[name] = d / ("%s.json" % name)
        al.run("malloc-free", pol, **kw, **RUN).to_json(str(out[name]))
    out["intr"] = _edited(out["m1"], d / "intr.json", lambda j: j["metadata"].__setitem__(
        "interrupted", {"runs_finished": 3, "runs_planned": 4, "signal": "SIGINT"}))
    return out


def _edited(src, dst, mutate):
    d = json.loads(src.read_text())
    mutate(d)
    dst.write_text(json.dumps(d))
    return dst


def one_error(r, line):
    """r exited 2, printed nothing on stdout and exactly ``line`` on stderr."""
    assert (r.returncode, r.stdout, r.stderr) == (2, "", "alloclab: error: %s\n" % line)


def error_line(r):
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("alloclab: error: "), r.stderr
    return lines[0][len("alloclab: error: "):]


# ---------------------------------------------------------------- nesting


def test_a_calibration_or_journal_nested_too_deeply_is_refused(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000 + "\n")
    run = ["run", "malloc-free", "--policy", "buddy", "--runs", "1", "--cycles", "5"]
    one_error(cli(*run, "--cpu", "simulated", "--calibration", str(deep)),
              "calibration file %s nests lists or objects too deeply to decode: not a "
              "calibration file" % deep)
    one_error(cli(*run, "--journal", str(deep)),
              "%s is not an alloclab sweep journal (its first line is not a journal header); "
              "it was left as it is" % deep)
    assert deep.read_text().startswith("[[[")


def test_a_file_nested_too_deeply_is_refused(files, tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    why = "%s nests lists or objects too deeply to decode: not an alloclab JSON file" % deep
    one_error(cli("show", str(deep)), why + SHOW_TAIL)
    one_error(cli("compare", str(deep), str(files["m1"])), why + COMPARE_TAIL)
    one_error(cli("compare", str(files["m1"]), str(deep)), why + COMPARE_TAIL)
    with pytest.raises(errors.FileFormatError) as e:
        Result.from_json(deep)
    assert str(e.value) == why and e.value.path == str(deep)
    with pytest.raises(errors.FileFormatError, match="nests lists or objects too deeply"):
        Result.from_json("[" * 100000 + "]" * 100000)


def test_a_field_nested_too_deeply_is_refused(files):
    d = json.loads(files["m1"].read_text())
    deep = []
    for _ in range(100000):
        deep = [deep]
    d["points"][0]["info"]["x"] = deep
    with pytest.raises(errors.FileFormatError) as e:
        Result.from_dict(d)
    assert str(e.value) == "not an alloclab result: a field nests lists or objects too deeply"


# ---------------------------------------------------------------- points and metadata


@pytest.mark.parametrize("params, missing", [
    ({}, "workload and no policy"),
    ({"workload": "malloc-free", "producers": 1}, "policy"),
    ({"policy": "buddy"}, "workload"),
])
def test_a_point_without_its_workload_or_policy_is_refused(files, tmp_path, params, missing):
    f = _edited(files["m1"], tmp_path / "noparams.json",
                lambda d: d["points"][0].__setitem__("params", params))
    why = ("%s: not an alloclab result: points[0].params has no %s (every point names its "
           "workload and policy)" % (f, missing))
    one_error(cli("show", str(f)), why + SHOW_TAIL)
    one_error(cli("compare", str(f), str(files["m1"])), why + COMPARE_TAIL)
    with pytest.raises(errors.FileFormatError) as e:
        Result.from_json(str(f))
    assert str(e.value) == why


def _set(path, value):
    """A mutation setting d[path[0]][path[1]]... to value."""
    def mutate(d):
        for k in path[:-1]:
            d = d[k]
        d[path[-1]] = value
    return mutate


@pytest.mark.parametrize("path, value, what", [
    (("metadata", "counters", "buddy"), 5,
     "metadata.counters.buddy is a JSON number, not a list of counter descriptors"),
    (("metadata", "counters", "buddy"), [{"x": 1}],
     "metadata.counters.buddy[0].name is a JSON null, not a string"),
    (("metadata", "counters", "buddy"), [{"name": "allocs", "unit": 5}],
     "metadata.counters.buddy[0].unit is a JSON number, not a string"),
    (("metadata", "machine_state", "cpus_online"), 5,
     "metadata.machine_state.cpus_online is a JSON number, not a list"),
    (("metadata", "machine_state", "cpus_isolated"), ["0"],
     "metadata.machine_state.cpus_isolated[0] is a JSON string, not a CPU number"),
    (("metadata", "machine_state", "governors"), {"a": "performance"},
     "metadata.machine_state.governors names CPU 'a', not a CPU number"),
    (("metadata", "machine_state", "loadavg"), {"a": 1},
     "metadata.machine_state.loadavg has no 1min"),
    (("metadata", "machine_state", "loadavg"), {"1min": "x"},
     "metadata.machine_state.loadavg.1min is a JSON string, not a number"),
    (("metadata", "machine_state", "cgroup_cpu_max"), "x",
     "metadata.machine_state.cgroup_cpu_max is 'x', not a [quota, period] pair"),
    (("metadata", "run", "sweep"), 5, "metadata.run.sweep is a JSON number, not an object"),
    (("metadata", "run", "sweep", "producers"), [1, "2"],
     "metadata.run.sweep.producers[1] is a JSON string, not an integer"),
    (("metadata", "load_after", "1min"), None,
     "metadata.load_after.1min is a JSON null, not a number"),
    (("points", 0, "info", "truncated"), 5,
     "points[0].info.truncated is a JSON number, not a list"),
    (("points", 0, "info", "notes"), None, "points[0].info.notes is a JSON null, not a list"),
    (("points", 0, "info", "printk"), [{"layer": 1}],
     "points[0].info.printk[0].layer is a JSON number, not a string"),
    (("points", 0, "info", "cpu_mode"), [1],
     "points[0].info.cpu_mode is a JSON list, not a string"),
])
def test_metadata_and_info_of_the_wrong_shape_are_refused(files, tmp_path, path, value, what):
    f = _edited(files["m1"], tmp_path / "bad.json", _set(path, value))
    why = "%s: not an alloclab result: %s" % (f, what)
    one_error(cli("show", str(f)), why + SHOW_TAIL)
    with pytest.raises(errors.FileFormatError) as e:
        Result.from_json(str(f))
    assert str(e.value) == why


def test_compare_refuses_metadata_of_the_wrong_shape(files, tmp_path):
    f = _edited(files["m1"], tmp_path / "badc.json", _set(("metadata", "counters", "buddy"), 5))
    one_error(cli("compare", str(f), str(files["m2"])),
              "%s: not an alloclab result: metadata.counters.buddy is a JSON number, not a "
              "list of counter descriptors%s" % (f, COMPARE_TAIL))


def test_a_recorded_descriptor_without_its_unit_or_doc_reads(files):
    d = json.loads(files["m1"].read_text())
    d["metadata"]["counters"]["buddy"] = [{"name": "lock_acquired"}]
    res = Result.from_dict(d)
    info = res.describe("buddy.lock_acquired")
    assert info["doc"] == schema.NO_DOC and info["counter"] == "lock_acquired"


# ---------------------------------------------------------------- Result + Result


def test_a_result_added_to_itself_is_refused(files):
    a = Result.from_json(files["m1"])
    with pytest.raises(errors.InvalidArgument) as e:
        a + a
    assert str(e.value) == (
        "Result.concat: point 0 of part 1 repeats point 0 of part 0 (the same parameters "
        "'policy=buddy, size=64, allocs_per_cycle=64, producers=1, timing=batch, cpu=auto, "
        "stats=lite' and the same runs): its runs would be counted twice; a Result added to "
        "itself holds no new runs")
    b = Result.from_json(files["m2"])
    with pytest.raises(errors.InvalidArgument, match="point 0 of part 2 repeats point 0 of "
                                                     "part 0"):
        Result.concat([a, b, Result.from_json(files["m1"])])
    with pytest.raises(errors.ParameterTypeError, match="takes a list of Results, not 5"):
        Result.concat(5)


def test_the_sum_of_two_results_loads_and_shows(files, tmp_path):
    both = Result.from_json(files["m1"]) + Result.from_json(files["m2"])
    assert len(both.points) == 4 and both.interrupted_line() is None
    f = tmp_path / "both.json"
    both.to_json(str(f))
    r = cli("show", str(f))
    assert r.returncode == 0 and r.stderr.count("alloclab: error") == 0, r.stderr


def test_runs_of_one_cell_with_other_values_still_add():
    """Points with equal parameters and info but other values (made in
    Python) are other runs: they add, and their file loads."""
    def res(x):
        return Result({}, [al.Point({"workload": "malloc-free", "policy": "buddy"},
                                    {"cpu_mode": "pinned"}, {"alloc_ns": x})])
    both = res(np.array([1.0, 2.0])) + res(np.array([3.0, 4.0]))
    assert Result.from_json(both.to_json()) == both
    assert both.table("alloc_ns").n.max() == 4


def test_the_sum_of_an_interrupted_result_is_interrupted(files):
    a, i = Result.from_json(files["m2"]), Result.from_json(files["intr"])
    for s in (a + i, i + a):
        assert s.interrupted_line() == STOPPED.replace("3 of 4", "7 of 8")
        assert s.metadata["interrupted"] == {"runs_finished": 7, "runs_planned": 8,
                                             "signal": "SIGINT"}


def test_two_workloads_added_name_both(files):
    a = Result.from_json(files["m1"])
    larson = al.run("larson", "buddy", **RUN)
    both = a + larson
    assert both.summary().splitlines()[0].startswith("malloc-free and larson: 3 points")
    title = both.table("alloc_ns").title
    assert title == "allocation latency (ns, lower is better, mean of 2 runs), policy: buddy"
    assert a.table("alloc_ns").title.startswith("malloc-free, allocation latency")


# ---------------------------------------------------------------- table(None)


def test_table_of_no_metric_names_the_metrics(files):
    a = Result.from_json(files["m1"])
    with pytest.raises(errors.ParameterTypeError) as e:
        a.table(None)
    assert str(e.value).startswith("metric must be a metric's name (a string), not None; "
                                   "valid metrics: alloc_ns, free_ns, throughput, ")
    with pytest.raises(errors.ParameterTypeError):
        a.stats(["alloc_ns"])
    with pytest.raises(errors.UnknownNameError, match="unknown statistic \\[1\\]"):
        a.table("alloc_ns", stat=[1])


# ---------------------------------------------------------------- compare's flags


@pytest.mark.parametrize("flag, value", [
    ("--names", ","), ("--names", "a,,"), ("--on", "producers,"), ("--on", ",")])
def test_compare_refuses_an_empty_list_item(files, flag, value):
    one_error(cli("compare", str(files["m1"]), str(files["m2"]), flag, value),
              "argument %s: empty value in list %r" % (flag, value))


def test_compare_names_count_is_checked(files):
    one_error(cli("compare", str(files["m1"]), str(files["m2"]), "--names", "a,b"),
              "--names gives 2 labels for 1 compared file (one per file after the first, "
              "the baseline)")


@pytest.mark.parametrize("value, line", [
    ("5", "a fraction (0.05) or a percentage (5%), not '5': a bare number is a fraction, so "
          "5 would be 500%; write 5% for 5%, or 500% for 500%"),
    ("1e400", "a fraction from 0 to 10000 (0.02 or 2%), not '1e400'"),
    ("inf", "a fraction from 0 to 10000 (0.02 or 2%), not 'inf'"),
    ("nan%", "a fraction from 0 to 10000 (0.02 or 2%), not 'nan%'"),
    ("lots", "a fraction (0.02) or a percentage (2%), not 'lots'"),
])
def test_compare_threshold_is_a_fraction_or_a_percentage(files, value, line):
    one_error(cli("compare", str(files["m1"]), str(files["m2"]), "--threshold", value),
              "argument --threshold: " + line)


@pytest.mark.parametrize("value", ["0.05", "5%"])
def test_compare_threshold_of_five_percent(files, value):
    r = cli("compare", str(files["m1"]), str(files["m2"]), "--threshold", value)
    assert r.returncode == 0, r.stderr
    assert "and |change| >= 5%." in r.stdout


def test_compare_alpha_is_between_0_and_1(files):
    one_error(cli("compare", str(files["m1"]), str(files["m2"]), "--alpha", "1"),
              "argument --alpha: a fraction between 0 and 1 (0.05 or 5%), not '1'")


def test_compare_help_says_what_threshold_takes():
    out = " ".join(cli("compare", "--help", check=0).stdout.split())
    assert "--threshold FRACTION" in out and "(default 0.02, i.e. 2%)" in out
    assert "0.05 or 5%" in out


def test_python_compare_refuses_an_infinite_threshold(files):
    a, b = Result.from_json(files["m1"]), Result.from_json(files["m2"])
    for t in (math.inf, math.nan):
        with pytest.raises(errors.ParameterRangeError, match="a finite fraction >= 0"):
            al.compare(a, b, threshold=t)


# ---------------------------------------------------------------- compare's sides


def test_compare_says_which_file_is_which(files):
    r = cli("compare", str(files["m1"]), str(files["m2"]), "--counters", "none")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("+---")
    assert lines[-1] == "sides: buddy = %s (old); libarena-spill = %s" % (
        files["m1"], files["m2"])


def test_compare_names_the_file_of_a_lettered_side(files, tmp_path):
    """A side of two policies is labelled A: the sides line says which file."""
    mixed = _edited(files["m1"], tmp_path / "mixed.json",
                    lambda d: d["points"][1]["params"].__setitem__("policy", "libarena-spill"))
    r = cli("compare", str(mixed), str(files["m2"]), "--counters", "none")
    assert r.returncode == 0, r.stderr
    assert "against the old side (A)" in r.stdout
    assert r.stdout.splitlines()[-1] == "sides: A = %s (old); libarena-spill = %s" % (
        mixed, files["m2"])


def test_compare_says_a_side_was_interrupted(files):
    for old, new in (("m1", "intr"), ("intr", "m1")):
        r = cli("compare", str(files[old]), str(files[new]), "--counters", "none")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0] == "%s: %s" % (files["intr"], STOPPED)
        assert lines[1].startswith("+---")
        assert sum(1 for x in lines if "interrupted:" in x) == 1
    r = cli("compare", str(files["intr"]), str(files["intr"]), "--markdown",
            "--counters", "none")
    assert r.stdout.splitlines()[:2] == ["%s: %s" % (files["intr"], STOPPED)] * 2


def test_compare_names_the_parameters_that_differ(files):
    one_error(cli("compare", str(files["m1"]), str(files["m3"])),
              "no cells match: %s has producers 1, 2, %s has producers 4; and producers "
              "identifies a cell (the key: workload, policy, size, producers, timing, cpu, "
              "stats); to set them side by side, pass --on PARAM[,PARAM...] without producers "
              "(and --pool where a side then holds several of its values)"
              % (files["m1"], files["m3"]))
    a, c = Result.from_json(files["m1"]), Result.from_json(files["m3"])
    with pytest.raises(errors.InvalidArgument) as e:
        al.compare(a, c)
    assert e.value.apart == [(0, "producers", ["1", "2"], ["4"])]
    assert str(e.value) == (
        "no cells match: side buddy has producers 1, 2, side buddy has producers 4; and "
        "producers identifies a cell (the key: workload, policy, size, producers, timing, "
        "cpu, stats); to set them side by side, pass on=[...] without producers (and "
        "pool=True where a side then holds several of its values)")


def test_compare_of_a_metric_no_file_has(files):
    why = error_line(cli("compare", str(files["m1"]), str(files["m2"]), "--metric", "bogus"))
    assert why.startswith("no compared file has metric 'bogus'; valid metrics: alloc_ns, "
                          "free_ns, throughput, ")
    assert "lower_is_better" not in why and "percpu" in why  # the second file's layers too
    a, b = Result.from_json(files["m1"]), Result.from_json(files["m2"])
    with pytest.raises(errors.UnknownNameError) as e:
        al.compare(a, b, metric="bogus")
    assert str(e.value).startswith("unknown metric 'bogus'; valid metrics: ")
    assert str(e.value).endswith("; no side of the comparison has it")


def test_compare_of_a_metric_with_no_direction(files):
    why = error_line(cli("compare", str(files["m1"]), str(files["m2"]), "--metric", "cycles"))
    assert why.startswith("compare cannot judge metric 'cycles': it has no better direction "
                          "(neither lower nor higher is better); metrics it judges: alloc_ns, "
                          "free_ns, throughput, ")
    assert why.endswith(", and <layer>.<counter>_per_op") and "lower_is_better" not in why


# ---------------------------------------------------------------- record --help


def test_record_help_names_the_default_compressor():
    out = " ".join(cli("record", "--help", check=0).stdout.split())
    assert "(default: %s)" % DEFAULT_COMPRESSOR in out and "the default: smallest" not in out
