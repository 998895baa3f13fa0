"""calibrate() and validate() check every argument before they measure
anything, and take what run() takes; plugin.compile() refuses a bad
argument or a build it cannot load with an alloclab error, and registers
nothing when it refuses."""

import json
import os
import re

import numpy as np
import pytest

import alloclab as al
from alloclab import errors, plugin
from alloclab.cbind import schema
from alloclab.measure import sim

CELL = {"workload": "malloc-free", "allocs_per_cycle": 64}
SHORT = dict(duration=0.01, runs=1)


@pytest.fixture
def nothing_measured(monkeypatch):
    """Every measurement calibrate and validate make fails the test: an
    argument they refuse is refused before it."""
    def measured(*a, **kw):
        raise AssertionError("measured before the arguments were checked")
    for fn in ("_cell_per_op", "_per_op", "line_transfer_ns", "line_transfer_tries",
               "coherence_probe"):
        monkeypatch.setattr(sim, fn, measured)


@pytest.fixture
def cal():
    return sim.Calibration({"seg.acq-rel": 20.0}, 50.0, 1.0, {"test": True},
                           scales={"buddy": [1.0, 1.0]})


def _validate(cal, **kw):
    args = dict(policies=["buddy"], cells=[CELL], producers=[2], **SHORT)
    args.update(kw)
    return sim.validate(cal, **args)


@pytest.mark.parametrize("tolerance,err", [
    (float("nan"), errors.ParameterRangeError),
    (float("inf"), errors.ParameterRangeError),
    (-1, errors.ParameterRangeError),
    (0, errors.ParameterRangeError),
    (2.0, errors.ParameterRangeError),
    ("x", errors.ParameterTypeError),
    (None, errors.ParameterTypeError),
    (True, errors.ParameterTypeError),
])
def test_validate_refuses_a_bad_tolerance_before_it_measures(cal, nothing_measured,
                                                             tolerance, err):
    with pytest.raises(err, match=re.escape("tolerance=%r" % (tolerance,))) as ei:
        _validate(cal, tolerance=tolerance)
    assert "above 0 and at most 1" in str(ei.value)


@pytest.mark.parametrize("producers,err,needle", [
    (["1"], errors.ParameterTypeError, "producers must be an int, not '1'"),
    ([0], errors.ParameterRangeError, "producers=0 is out of range"),
    ([2, 1.5], errors.ParameterTypeError, "producers must be an int, not 1.5"),
    ([], errors.InvalidArgument, "producers: an empty list"),
    ("2", errors.ParameterTypeError, "producers must be an int, not '2'"),
])
def test_validate_refuses_bad_producers_before_it_measures(cal, nothing_measured, producers,
                                                           err, needle):
    with pytest.raises(err, match=needle):
        _validate(cal, producers=producers)


def test_validate_refuses_a_bad_sim_duration_before_it_measures(cal, nothing_measured):
    with pytest.raises(errors.ParameterRangeError, match="sim_duration='x'"):
        _validate(cal, sim_duration="x")


@pytest.fixture
def fake_runs(monkeypatch):
    """validate's measurements, made up: 10 ns measured, 11 simulated."""
    calls = []

    def per_op(policy, cell, producers, cpu, runs, duration, seed, calibration=None):
        calls.append((policy, cell["workload"], producers, cpu))
        return (11.0, 11.0) if cpu == "simulated" else (10.0, 10.0)
    monkeypatch.setattr(sim, "_per_op", per_op)
    monkeypatch.setattr(sim, "line_transfer_ns", lambda: 50.0)
    return calls


def test_validate_takes_what_run_takes(cal, fake_runs):
    v = _validate(cal, policies=[al.Policy("buddy")], producers=np.int64(2),
                  runs=np.int64(1), tolerance=0.05)
    assert {(r["policy"], r["producers"]) for r in v.rows} == {("buddy", 2)}
    assert v.unvalidated() == [("malloc-free", "buddy")]  # 10% off, past 5%
    assert _validate(cal, producers=2, tolerance=0.25).unvalidated() == []


def test_validate_runs_the_default_cells_for_none_and_refuses_an_empty_list(cal, fake_runs):
    with pytest.raises(errors.ParameterTypeError, match="cells must be a non-empty list"):
        _validate(cal, cells=[])
    assert fake_runs == []  # refused before any run
    _validate(cal, cells=None)
    assert {w for _, w, _, _ in fake_runs} == {"malloc-free", "malloc-xfree"}


def test_validation_kept_in_a_calibration_file_has_its_tolerance_checked(cal, tmp_path):
    good = dict(cal.to_dict(), info={"validation": {"tolerance": 0.25, "rows": [],
                                                    "unvalidated": []}})
    assert sim.Calibration.from_dict(good).info["validation"]["tolerance"] == 0.25
    for bad in (float("nan"), -1, "x"):
        d = json.loads(json.dumps(good))
        d["info"]["validation"]["tolerance"] = bad
        p = tmp_path / "cal.json"
        p.write_text(json.dumps(d))
        with pytest.raises(errors.InvalidArgument, match="calibration file .*tolerance="):
            sim.Calibration.load(str(p))
    with pytest.raises(errors.ParameterRangeError, match="tolerance=nan"):
        sim.Validation([], 2, float("nan"))


@pytest.mark.parametrize("key", ["producers", "seed", "duration", "cpu", "runs"])
def test_calibrate_refuses_a_cell_key_it_sets_itself(nothing_measured, key):
    with pytest.raises(errors.InvalidArgument, match="set '%s' for every run" % key) as ei:
        sim.calibrate(["buddy"], cells=[dict(CELL, **{key: 2})], line_transfer=50, **SHORT)
    assert "allocs_per_cycle" in str(ei.value)  # the keys a cell may hold


def test_calibrate_refuses_an_unknown_cell_parameter_before_it_measures(nothing_measured):
    with pytest.raises(errors.UnknownNameError, match="'nosuch'.*allocs_per_cycle"):
        sim.calibrate(["buddy"], cells=[dict(CELL, nosuch=1)], line_transfer=50, **SHORT)


@pytest.mark.parametrize("coherence,err,needle", [
    ("x", errors.ParameterTypeError, "coherence must be None or an object"),
    ({"foo": 1}, errors.UnknownNameError, "unknown coherence key 'foo'; valid coherence "
                                          "keys: load_fraction, read_takes_line"),
    ({"store_fraction": 2}, errors.InvalidArgument, "store_fraction must be a number from 0"),
    ({"read_takes_line": 1}, errors.InvalidArgument, "read_takes_line must be true or false"),
])
def test_calibrate_refuses_a_bad_coherence_before_it_measures(nothing_measured, coherence,
                                                              err, needle):
    with pytest.raises(err, match=needle):
        sim.calibrate(["buddy"], cells=[CELL], line_transfer=50, coherence=coherence, **SHORT)


def test_calibrate_takes_policy_objects_and_numpy_runs():
    c = sim.calibrate([al.Policy("buddy")], cells=[CELL], duration=0.01, runs=np.int64(1),
                      line_transfer=50, coherence={"store_fraction": 0.5})
    assert list(c.scales) == ["buddy"]
    assert c.coherence["store_fraction"] == 0.5 and c.coherence["load_fraction"] == 1.0


# ---- plugin.compile ----

@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path))
    return tmp_path / "plugins"


MISSING_SYMBOL = "int argsx_missing_fn(void);\nint argsx_use(void) { return argsx_missing_fn(); }\n"

# A source that registers a layer named NAME (and nothing else).
REGISTERS = r"""
static int rx_create(const struct al_layer_desc *d, const int64_t *params,
		     struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	return -1;
}
static const struct al_layer_desc rx_desc = { .name = "NAME", AL_LAYER_DESC_INIT, .doc = "x",
	.features = AL_F_BACKEND, .create = rx_create };
AL_REGISTER_LAYER(rx_desc)
"""


def test_a_plugin_with_an_undefined_symbol_is_a_plugin_error_and_is_not_cached(cache):
    for _ in range(2):  # the broken build is not kept: the second try says the same
        with pytest.raises(errors.PluginError, match="undefined symbol 'argsx_missing_fn'"):
            plugin.compile("argsx-undef", MISSING_SYMBOL)
        assert not [f for f in os.listdir(cache) if f.endswith(".so")]
    assert "argsx-undef" not in schema.layers()


@pytest.mark.parametrize("source", [None, b"int x;", 5])
def test_compile_refuses_a_source_that_is_not_text(cache, source):
    with pytest.raises(errors.ParameterTypeError, match="source must be C source text"):
        plugin.compile("argsx-src", source)


@pytest.mark.parametrize("args", ["-O3", None, ["-O3", 3]])
def test_compile_refuses_extra_args_that_are_not_a_list_of_strs(cache, args):
    with pytest.raises(errors.ParameterTypeError, match="extra_compile_args must be a list"):
        plugin.compile("argsx-flags", "int x;", extra_compile_args=args)


def test_a_refused_plugin_registers_nothing(cache):
    src = REGISTERS.replace("NAME", "argsx7")
    with pytest.raises(errors.PluginError, match="registered no layer named 'argsx6'") as ei:
        plugin.compile("argsx6", src)
    assert "argsx7" not in schema.layers() and "argsx6" not in schema.layers()
    assert "it registers 'argsx7'" in str(ei.value)
    p = plugin.compile("argsx7", src, extra_compile_args=["-O1"])  # as itself, it loads
    assert p.name == "argsx7" and "argsx7" in schema.layers()



@pytest.mark.parametrize("exe", ["", "/bin/true"])
def test_an_interpreter_that_cannot_probe_loads_the_plugin_itself(cache, monkeypatch, exe):
    """An embedding program has no sys.executable to start again (or another
    program there): compile loads the build itself, as it did before the
    probe, never failing on the probe's own OSError."""
    import sys
    name = "argsx-noprobe%d" % len(exe)
    monkeypatch.setattr(sys, "executable", exe)
    p = plugin.compile(name, REGISTERS.replace("NAME", name))
    assert p.name == name and name in schema.layers()


def test_a_measured_cell_is_refused_before_a_calibration_is_made(monkeypatch):
    """cpu=pinned,simulated with more producers than CPUs: the pinned cells
    are refused before the minute-long calibration of the simulated ones."""
    from alloclab.measure import run as mrun
    from alloclab.cbind._ffi import lib

    def never(*a, **k):
        raise AssertionError("calibrated before the measured cells were checked")
    monkeypatch.setattr(sim, "calibrate", never)
    monkeypatch.setattr(mrun, "_CALIBRATIONS", {})
    n = int(lib.al_cpus_usable()) + 2
    with pytest.raises(errors.ParameterRangeError, match="cpu=pinned needs producers <= "):
        al.run("malloc-free", "buddy", cpu=["pinned", "simulated"], producers=[1, n],
               runs=1, duration=0.01)


def test_a_given_line_cost_is_not_called_suspect(monkeypatch):
    """With --line-transfer the measured line cost is replaced: a loaded
    calibration warns only of the coherence probe's shares, and never
    advises giving the line cost that was given."""
    from alloclab.measure import run as mrun
    from alloclab.cbind._ffi import lib

    n = int(lib.al_cpus_usable())
    loaded = sim.Calibration({"seg.acq-rel": 100.0}, 50.0, 1.0, {
        "line_transfer_tries": [50.0, 900.0], "load_before": {"1min": n + 5.0}})
    monkeypatch.setattr(sim, "calibrate", lambda *a, **k: loaded)
    for given, want in ((None, "or give --line-transfer"), (60.0, "coherence probe's")):
        monkeypatch.setattr(mrun, "_CALIBRATIONS", {})
        with pytest.warns(sim.SuspectCalibrationWarning) as rec:
            al.run("malloc-free", "buddy", cpu="simulated", producers=2, runs=1, cycles=5,
                   warmup_cycles=0, line_transfer=given)
        texts = [str(w.message) for w in rec if isinstance(w.message,
                                                          sim.SuspectCalibrationWarning)]
        assert texts and all(want in t for t in texts), texts
        if given is not None:
            assert not any("--line-transfer" in t for t in texts), texts


@pytest.mark.parametrize("argv", [
    ["list", "--plugin", "examples/plugins/halfspill.c", "halfspill"],
    ["libarena", "build", "examples/bpf_tree"],
])
def test_a_cache_that_is_a_file_is_named_as_the_fault(tmp_path, argv):
    """$ALLOCLAB_CACHE naming a file: one usage error naming it, not the
    plugin file ('cannot read it') or a bare errno."""
    import subprocess
    import sys
    bad = tmp_path / "a.json"
    bad.write_text("{}")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-m", "alloclab", *argv], cwd=root, text=True,
                       capture_output=True, timeout=300,
                       env=dict(os.environ, ALLOCLAB_CACHE=str(bad)))
    assert p.returncode == 2, p.stderr
    assert p.stderr == ("alloclab: error: $ALLOCLAB_CACHE=%s: cannot make its folder %s/plugins "
                        "for built plugins and libarena trees: Not a directory; set "
                        "$ALLOCLAB_CACHE to a folder alloclab may write\n" % (bad, bad))
    assert bad.read_text() == "{}"
