"""Labels of simulated numbers: a simulated number is a prediction and says
so wherever it appears (counters of the simulated schedule included), and a
number the host measured while simulating is never labelled a prediction."""
import subprocess
import sys
import warnings

import pytest

import alloclab as al
import alloclab.reproduce as rep
from alloclab.cli import format as F
from alloclab.measure import sim
from alloclab.present import table as T
from alloclab.results import simulated as S

TIMING = "those that depend on timing (locks, contention, cache hits) are predictions too"


def _cal():
    return sim.Calibration({"seg.acq-rel": 100.0}, 50.0, 1.0, {"test": True})


@pytest.fixture(scope="module")
def simres():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return al.run("malloc-free", "libarena-transfer", cpu="simulated", calibration=_cal(),
                      producers=[1, 4], allocs_per_cycle=256, duration=0.02, runs=2)


@pytest.fixture(scope="module")
def measured():
    return al.run("malloc-free", "libarena-transfer", cpu="pinned", producers=[1],
                  allocs_per_cycle=256, duration=0.01, runs=1)


class _Pt:
    """A point as the mode checks read it: params and info only."""

    def __init__(self, mode):
        self.params, self.info = {"cpu": mode}, {"cpu_mode": mode}


def test_simulated_warning_never_calls_counters_exact(simres):
    text = " ".join(x.strip() for x in simres.table("alloc_ns").warning_lines())
    assert "exact" not in text
    assert "counters count what the real code did in the simulated schedule: " + TIMING in text
    assert "exact" not in simres.table("alloc_ns").to_text()


def test_reproduction_says_counters_are_of_the_simulated_schedule():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = rep.libarena_simulated(producers=[1, 2], allocs_per_cycle=[256], runs=1,
                                   duration=0.002, warmup_cycles=2, calibration=_cal())
    note, counters = r.cpu_note(), r.counters()
    assert "Times are predictions; " in note and TIMING in note
    assert "exact" not in note and "exact" not in counters
    assert "counts of the simulated schedule: predictions where they depend on timing" \
        in counters


def test_counters_block_heading_of_simulated_columns(simres, measured):
    pts = list(simres.points)
    cid = S.calibration_ids(pts)[0]
    head = T.counters_heading(["1p", "4p"], pts)
    assert head == "simulated: predicted (calibration %s): every column" % cid
    both = [measured.points[0]] + pts[:1]
    assert T.counters_heading(["pinned 1p", "sim 1p"], both) == \
        "simulated: predicted (calibration %s): sim 1p" % cid
    assert T.counters_heading(["1p"], list(measured.points)) is None


@pytest.mark.parametrize("metric", ["steal_pct", "mem_rss", "mem_rss_peak",
                                    "worker_invol_ctxsw", "engine_wakeups"])
def test_host_metrics_of_a_simulated_run_are_not_predictions(simres, measured, metric):
    t = simres.table(metric)
    head = t.sim_heading()
    assert head.startswith("simulated: measured on the host while simulating, not "
                           "predicted (calibration ")
    assert "simulated: predicted" not in t.to_text(warnings=False)
    assert "simulated: predicted" not in F.table_markdown(t)
    m = measured.table(metric)  # measured cells: no word of simulation at all
    assert m.sim_heading() is None and "simulated" not in m.to_text()


def test_only_host_numbers_lose_the_prediction_label(simres):
    head = simres.table("worker_invol_ctxsw_per_s").sim_heading()
    assert head.startswith("simulated: a count the host measured, per simulated (predicted) "
                           "second (calibration ")
    for m in ("alloc_ns", "throughput", "elapsed_ns", "buddy.lock_contended_per_op"):
        assert simres.table(m).sim_heading().startswith("simulated: predicted (calibration ")


def test_cli_show_heads_steal_as_a_host_measurement(simres, tmp_path):
    path = tmp_path / "sim.json"
    path.write_text(simres.to_json(indent=1))
    p = subprocess.run([sys.executable, "-m", "alloclab", "show", str(path), "--metric",
                        "steal_pct", "--counters", "none"], capture_output=True, text=True,
                       check=True)
    lines = p.stdout.splitlines()
    assert lines[1].startswith("simulated: measured on the host while simulating, not "
                               "predicted (calibration ")
    assert "simulated: predicted" not in p.stdout


def test_mixed_refusal_names_every_mode_of_a_side():
    sim_side = [_Pt("simulated")]
    with pytest.raises(S.MixedModesError) as e:
        S.refuse_mixed([_Pt("pinned"), _Pt("virtual")], sim_side, "compare")
    assert "a measured side (cpu=pinned/virtual)" in str(e.value)
    with pytest.raises(S.MixedModesError) as e:
        S.refuse_mixed(sim_side, [_Pt("virtual")], "compare")
    assert "a measured side (cpu=virtual)" in str(e.value)
    S.refuse_mixed([_Pt("pinned")], [_Pt("virtual")])  # both measured: no refusal
    S.refuse_mixed(sim_side, sim_side)


def test_mixed_refusal_never_names_a_mode_that_is_not_one():
    with pytest.raises(S.MixedModesError) as e:
        S.refuse_mixed(S.MODE, "measured", "the claim 'x'")
    msg = str(e.value)
    assert "cpu=measured" not in msg
    assert "a simulated side (cpu=simulated, predictions) against a measured side (this " \
        "machine's CPUs)" in msg
    with pytest.raises(S.MixedModesError) as e:
        S.refuse_mixed("pinned", S.MODE)
    assert "a measured side (cpu=pinned)" in str(e.value)
