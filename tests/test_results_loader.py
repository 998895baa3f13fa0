"""A result file is read whole or refused at load: numbers a point's arrays
cannot hold, metrics of another run count, histograms without their clock
and simulated points whose labels disagree are named by the loader, never
met later as a bare OverflowError or a wrong table. A simulated Result, and
the statistics of its runs, say they are predictions. select takes what
filter takes, sum() adds Results, and outputs named as directories or
replacing a file keep to what the user meant."""

import copy
import json
import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import alloclab as al
from alloclab.measure import sim
from alloclab.results.result import Result

QUICK = dict(cycles=40, warmup_cycles=2, mem_sample=0)


@pytest.fixture(scope="module")
def measured():
    return al.run("malloc-free", "buddy", runs=3, histogram=True, **QUICK)


@pytest.fixture(scope="module")
def simulated():
    cal = sim.Calibration({"seg.acq-rel": 100.0}, 50.0, 1.0, {"test": True})
    return al.run("malloc-free", "buddy", cpu="simulated", calibration=cal, producers=[1, 4],
                  runs=2, **QUICK)


def _refused(d, *words):
    """The loader's message for dict d, which it must refuse as a bad file,
    from text and from a file alike."""
    with pytest.raises(al.FileFormatError) as ei:
        Result.from_json(json.dumps(d))
    msg = str(ei.value)
    for w in words:
        assert w in msg, (w, msg)
    return msg


# ---------------------------------------------------------------- numbers


def _with_values(res, dtype, values, metric="alloc_ns"):
    d = copy.deepcopy(res.to_dict())
    d["points"][0]["data"][metric] = {"dtype": dtype, "values": values}
    return d


@pytest.mark.parametrize("dtype, values, words", [
    ("int8", [1000, 2000, 3], ["values[0] is 1000", "out of the range of int8"]),
    ("float64", [10 ** 400, 1.0, 2.0], ["values[0]", "out of the range of float64"]),
    ("int64", [2 ** 63, 1, 2], ["values[0]", "out of the range of int64"]),
    ("int64", [1.5, 1, 2], ["values[0] is 1.5", "not an integer"]),
    ("int64", [None, 1, 2], ["values[0] is None", "not an integer"]),
    ("float32", [1e39, 1.0, 2.0], ["values[0]", "out of the range of float32"]),
    ("bool", [1, 0, 1], ["dtype is 'bool'", "valid: ", "int64", "float64"]),
    ("complex128", [1, 2, 3], ["dtype is 'complex128'", "valid: "]),
    ("U8", [1, 2, 3], ["dtype is 'U8'", "valid: "]),
])
def test_a_metric_the_numpy_type_cannot_hold_is_refused_at_load(measured, dtype, values, words):
    _refused(_with_values(measured, dtype, values), "points[0].data.alloc_ns", *words)


def test_numbers_a_type_holds_load(measured):
    res = Result.from_json(json.dumps(_with_values(measured, "int8", [1, -2, 127])))
    assert res.points[0]["alloc_ns"].tolist() == [1, -2, 127]
    res = Result.from_json(json.dumps(_with_values(measured, "float64", [None, 1.5, 2])))
    assert np.isnan(res.points[0]["alloc_ns"][0]) and res.points[0]["alloc_ns"][1] == 1.5


def test_a_metric_of_another_run_count_is_refused(measured):
    d = copy.deepcopy(measured.to_dict())
    d["points"][0]["data"]["alloc_ns"]["values"].pop()
    _refused(d, "points[0].data.alloc_ns has 2 values", "has 3")
    d = copy.deepcopy(measured.to_dict())
    d["points"][0]["data"]["free_ns"]["values"].append(1.0)
    _refused(d, "points[0].data.free_ns has 4 values", "has 3")


# ---------------------------------------------------------------- histograms


def _hist_dict(res):
    d = copy.deepcopy(res.to_dict())
    return d, d["points"][0]["hist"]["alloc"]


def test_a_bucket_count_int64_cannot_hold_is_refused(measured):
    d, hs = _hist_dict(measured)
    hs[0]["buckets"][0][1] = 10 ** 30
    _refused(d, "points[0].hist.alloc[0].buckets", "int64")


def test_counts_summing_past_int64_are_refused(measured):
    d, hs = _hist_dict(measured)
    hs[0]["buckets"] = [[1, 2 ** 62], [2, 2 ** 62]]
    _refused(d, "points[0].hist.alloc[0].buckets", "in all")


def test_a_bucket_given_twice_is_refused(measured):
    d, hs = _hist_dict(measured)
    hs[0]["buckets"].append(list(hs[0]["buckets"][0]))
    _refused(d, "points[0].hist.alloc[0].buckets holds bucket %d twice" % hs[0]["buckets"][0][0])


@pytest.mark.parametrize("field, value, words", [
    ("sum", 2 ** 70, ["points[0].hist.alloc[0].sum", "not an integer from 0"]),
    ("count", "many", ["points[0].hist.alloc[0].count is a JSON string"]),
    ("max", -1, ["points[0].hist.alloc[0].max is -1"]),
    ("ticks_per_ns", 0, ["points[0].hist.alloc[0].ticks_per_ns is 0", "positive"]),
    ("ticks_per_ns", None, ["points[0].hist.alloc[0].ticks_per_ns is a JSON null"]),
    ("simulated", "no", ["points[0].hist.alloc[0].simulated is a JSON string"]),
])
def test_bad_histogram_fields_are_refused(measured, field, value, words):
    d, hs = _hist_dict(measured)
    hs[0][field] = value
    _refused(d, *words)


def test_a_histogram_without_its_clock_is_refused_at_load(measured):
    d, hs = _hist_dict(measured)
    del hs[0]["ticks_per_ns"]
    msg = _refused(d, "points[0].hist.alloc[0] has no ticks_per_ns")
    assert "cannot merge" not in msg


def test_a_histogram_per_run(measured):
    d, hs = _hist_dict(measured)
    hs.pop()
    _refused(d, "points[0].hist.alloc has 2 histograms", "3 runs")


def test_a_good_histogram_file_round_trips(measured):
    res = Result.from_json(measured.to_json())
    assert res == measured
    assert res.histogram().count == measured.histogram().count > 0


# ---------------------------------------------------------------- simulated labels


def _edit(res, fn):
    d = copy.deepcopy(res.to_dict())
    for p in d["points"]:
        fn(p)
    return d


def _strip(p):
    del p["params"]["cpu"]
    del p["info"]["cpu_mode"]


def _pinned(p):
    p["params"]["cpu"] = "pinned"
    p["info"]["cpu_mode"] = "pinned"


def _no_mode(p):
    del p["info"]["cpu_mode"]


def _asked_pinned(p):
    p["params"]["cpu"] = "pinned"


@pytest.mark.parametrize("edit, words", [
    (_strip, ["points[0].info.sim records a simulation", "cpu_mode is absent"]),
    (_pinned, ["points[0].info.sim records a simulation", "cpu_mode is 'pinned'"]),
    (_no_mode, ["points[0].info.sim", "cpu_mode is absent"]),
    (_asked_pinned, ["points[0].params.cpu is 'pinned'", "cpu_mode is 'simulated'"]),
])
def test_a_simulated_point_stripped_of_its_labels_is_refused(simulated, edit, words, tmp_path):
    d = _edit(simulated, edit)
    _refused(d, *words)
    f = tmp_path / "r.json"
    f.write_text(json.dumps(d))
    for argv in (["show", str(f)], ["compare", str(f), str(f)]):
        cp = _cli(argv)
        assert cp[0] != 0 and "points[0]" in cp[1] and "simulated" in cp[1], cp


def _cli(argv):
    cp = subprocess.run([sys.executable, "-m", "alloclab"] + argv, capture_output=True,
                        text=True, timeout=120)
    return cp.returncode, cp.stderr


def test_a_simulated_point_without_any_label_is_refused_by_the_run(simulated):
    def strip_all(p):
        _strip(p)
        del p["info"]["sim"]
    _refused(_edit(simulated, strip_all), "points[0] is not simulated",
             "metadata.run.sweep.cpu")


def test_a_measured_point_whose_modes_disagree_is_refused(measured):
    def virtual(p):
        p["params"]["cpu"] = "pinned"
        p["info"]["cpu_mode"] = "virtual"
    _refused(_edit(measured, virtual), "points[0].params.cpu is 'pinned'",
             "cpu_mode is 'virtual'")


def test_consistent_files_load(simulated, measured):
    assert Result.from_json(simulated.to_json()) == simulated
    d = _edit(simulated, lambda p: p["params"].pop("cpu"))  # cpu_mode still says so
    assert Result.from_json(json.dumps(d)).points[0].info["cpu_mode"] == "simulated"
    auto = _edit(measured, lambda p: p["info"].update(cpu_mode="virtual"))
    assert Result.from_json(json.dumps(auto)).points[0].info["cpu_mode"] == "virtual"
    both = Result.from_json((measured + simulated).to_json())
    assert len(both.points) == 3


# ---------------------------------------------------------------- reprs


def test_repr_of_a_simulated_result_says_predicted(simulated, measured):
    assert repr(simulated).endswith("; simulated (predicted): every point>")
    assert "predicted" not in repr(measured)
    assert repr(measured + simulated).endswith("; simulated (predicted): 2 of 3 points>")
    assert "simulated (predicted)" in repr(simulated.points[0])


def test_stats_of_simulated_runs_say_predicted(simulated, measured):
    ((_, st),) = simulated.stats("alloc_ns", producers=4)
    assert st.predicted and repr(st).startswith("Stats(simulated (predicted): n=2,")
    assert st.as_dict()["predicted"] is True
    ((_, st),) = measured.stats("alloc_ns")
    assert not st.predicted and "predicted" not in repr(st)


# ---------------------------------------------------------------- select, sum


def test_select_refuses_an_unknown_parameter_as_filter_does(measured):
    with pytest.raises(al.UnknownNameError) as ei:
        measured.select(foo=1)
    with pytest.raises(al.UnknownNameError) as ef:
        measured.filter(foo=1)
    assert str(ei.value) == str(ef.value) and "producers" in str(ei.value)
    # a run interrupted before its first point: nothing to select, no error
    assert al.Result({}, []).select(policy="buddy") == []


def test_select_takes_a_list_as_filter_does(simulated):
    assert simulated.select(allocs_per_cycle=[64]) == simulated.points
    assert simulated.select(producers=[1, 4]) == simulated.filter(producers=[1, 4]).points
    assert [p.params["producers"] for p in simulated.select(producers=(4,))] == [4]
    assert simulated.select(producers=4) == simulated.filter(producers=4).points
    assert simulated.select(producers=[2]) == []


def test_sum_adds_results(measured, simulated):
    assert sum([measured]) is measured
    total = sum([measured, simulated])
    assert total == measured + simulated and len(total.points) == 3
    with pytest.raises(TypeError):
        1 + measured


# ---------------------------------------------------------------- output paths


@pytest.mark.parametrize("name", ["brandnew/", "brandnew/.", "brandnew/.."])
def test_an_output_named_as_a_directory_is_refused(measured, tmp_path, name):
    path = str(tmp_path / "x") + os.sep + name
    with pytest.raises(al.InvalidArgument, match="names a directory; give a file name"):
        measured.to_json(path)
    with pytest.raises(al.InvalidArgument, match="names a directory; give a file name"):
        measured.to_csv(path)
    assert os.listdir(tmp_path) == []


def test_a_trailing_slash_after_a_file_names_that_file(measured, tmp_path):
    f = tmp_path / "brandnew"
    f.write_text("keep")
    with pytest.raises(al.InvalidArgument) as ei:
        measured.to_csv(str(f) + "/")
    assert "names a directory" in str(ei.value) and "%s is a regular file" % f in str(ei.value)
    with pytest.raises(al.InvalidArgument) as ei:
        measured.to_csv(str(f / "r.csv"))
    assert "%s is not a directory" % f in str(ei.value)
    assert f.read_text() == "keep"


@pytest.mark.parametrize("mode", [0o444, 0o600, 0o640])
def test_replacing_a_file_keeps_its_permission_bits(measured, tmp_path, mode):
    f = tmp_path / "r.json"
    f.write_text("{}")
    os.chmod(f, mode)
    if os.geteuid() != 0 and not mode & stat.S_IWUSR:
        with pytest.raises(al.InvalidArgument, match="Permission denied"):
            measured.to_json(str(f))
        assert f.read_text() == "{}"
        return
    measured.to_json(str(f))
    assert stat.S_IMODE(os.stat(f).st_mode) == mode
    assert Result.from_json(str(f)) == measured


def test_a_value_past_any_count_prints_with_an_exponent():
    """1e308 in a hand-edited file printed as a 309-digit integer."""
    from alloclab.results.result import fmt_value
    assert [fmt_value(v) for v in (1e308, -1e300, 1e15, 123456789012345.0, 12.3, 0.5)] == \
        ["1e+308", "-1e+300", "1e+15", "123456789012345", "12", "0.5"]
