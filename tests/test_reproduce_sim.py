"""Seed 000 on simulated CPUs: the reproduction fills the 32 cells of the
seed's four tables, every judgement is a prediction named by its
calibration, verdicts and the seed-ratio table follow the data (flipped
data, flipped verdicts), the scaling figure draws, and the CLI runs it."""
import copy
import json
import subprocess
import sys

import numpy as np
import pytest

import alloclab.reproduce as rep
from alloclab import verdict as V
from alloclab.measure import sim
from alloclab.reproduce import libarena_sim as ls
from alloclab.reproduce.libarena import SEED_NS, SEED_PRODUCERS


@pytest.fixture(scope="module")
def cal():
    return sim.calibrate(["libarena-transfer", "libarena-spill", "buddy"], duration=0.02,
                         line_transfer=50.0, lines_per_handoff=1.0)


@pytest.fixture(scope="module")
def report(cal):
    return rep.libarena_simulated(allocs_per_cycle=[16, 64, 256], runs=3, duration=0.002,
                                  warmup_cycles=2, calibration=cal)


def test_fills_the_seeds_32_cells(report):
    assert report.producers == [1, 2, 4, 8]
    n = 0
    for (wl, m, d, a) in SEED_NS:
        for p in SEED_PRODUCERS:
            for design in ("transfer cache", "spill"):
                assert np.isfinite(report.mean(wl, design, m, "per_op_sum", p, a)), (wl, m, a, p)
            n += d == "transfer cache"
    assert n == 32
    assert len(report.seed_cells()) == 32
    assert len(report.ratio_rows(producers=SEED_PRODUCERS)) == 32
    pts = [p for res in report.results.values() for p in res.points]
    assert pts and all(p.info["cpu_mode"] == "simulated" for p in pts)


def test_every_judgement_is_a_named_prediction(report):
    text = str(report)
    cid = report.settings["calibration"]["id"]
    assert cid == ls.calibration_id(sim.Calibration.from_dict(
        report.results["malloc-free"].metadata["run"]["simulated"]["calibration"]))
    tag = "predicted (simulated CPUs, calibration %s)" % cid
    judged = [l for l in report.verdict_text().splitlines() if l.startswith("- ")]
    assert judged and all(l.startswith("- " + tag + ": ") for l in judged)
    assert "Seed conclusions on this machine" not in text
    assert "none is judged measured" in text
    d = report.to_dict()
    assert d["verdicts"] and all(v["kind"] == "predicted" and v["calibration"] == cid
                                 for v in d["verdicts"])
    assert d["direction_share"]["kind"] == "predicted"
    assert d["seed_ratios"]["summary"]["kind"] == "predicted"
    for line in text.splitlines():
        if "(ns, lower is better" in line:
            assert tag in line
    claims = [v.claim.text for _, v, _ in report.verdicts()]
    for want in ("saves 33-60%", "saves 60-73%", "saves 17-59%", "saves 60-74%",
                 "on malloc-free (each worker frees its own objects)",
                 "transfer cache: at 8 producers 10-100x lower", "spill: at 8 producers"):
        assert any(want in c for c in claims), want


def test_json_round_trip(report, tmp_path):
    path = tmp_path / "r.json"
    report.to_json(str(path))
    back = rep.SimulatedLibarenaReport.from_json(path.read_text())
    assert str(back) == str(report)
    with pytest.raises(Exception, match="not an alloclab-libarena-report"):
        rep.LibarenaReport.from_json(path.read_text())
    shown = subprocess.run([sys.executable, "-m", "alloclab", "show", str(path)],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout == str(report) + "\n", shown.stderr
    other = tmp_path / "r2.json"
    other.write_text(path.read_text())
    rounds = subprocess.run([sys.executable, "-m", "alloclab", "show", str(path), str(other)],
                            capture_output=True, text=True, timeout=60)
    assert rounds.returncode == 0, rounds.stderr


def _fabricate(report, alloc, free, band=None):
    """The report with every transfer-cache latency at 2-8 producers above
    the cache (apc > 16) set to spill's runs times the factor (alloc, free),
    with a little run-to-run spread; ``alloc``/``free`` None: the seed's own
    ratio of that cell (where the seed has one). The sensitivity band's runs
    are left as they ran (band None), set to the factor ``band``, or left out
    ("off"). The fabricated times stand for predictions under one factor for
    every policy (a difference within the calibration's per-policy factors
    never decides)."""
    results = copy.deepcopy(report.results)
    for res in results.values():
        for p in res.points:
            p.info.setdefault("sim", {})["scale"] = [1.0, 1.0]
    settings = dict(report.settings, band=None) if band == "off" else report.settings
    rng = np.random.default_rng(7)
    for key, res in results.items():
        in_band = key.startswith(ls.BAND_PREFIX)
        if in_band and band in (None, "off"):
            continue
        wl = key.split(", ")[-1]
        fa, ff = (band, band) if in_band else (alloc, free)
        spill = {tuple(sorted((k, v) for k, v in p.params.items() if k != "policy")): p
                 for p in res.points if p.params["policy"] == "libarena-spill"}
        for p in res.points:
            pr, a = p.params["producers"], p.params["allocs_per_cycle"]
            if p.params["policy"] != "libarena-transfer" or pr < 2 or a <= 16:
                continue
            s = spill[tuple(sorted((k, v) for k, v in p.params.items() if k != "policy"))]
            for m, f in (("alloc_ns", fa), ("free_ns", ff)):
                if f is None:
                    seed = SEED_NS[(wl, m, "spill", a)], SEED_NS[(wl, m, "transfer cache", a)]
                    i = SEED_PRODUCERS.index(pr)
                    f = seed[1][i] / seed[0][i]
                noise = 1 + 0.01 * rng.standard_normal(len(s.data[m]))
                p.data[m] = np.asarray(s.data[m], float) * f * noise
    return rep.SimulatedLibarenaReport(results, settings)


def _outcomes(r):
    return {v.claim.text: v.outcome for _, v, _ in r.verdicts()}


def test_verdicts_flip_when_the_data_flips(report):
    # inside the seed's savings (45% of alloc, 67% of free) in every cell: they hold
    good = _outcomes(_fabricate(report, 0.55, 0.33))
    # the transfer cache 1.5x slower than spill everywhere: they do not
    bad = _outcomes(_fabricate(report, 1.5, 1.5))
    savings = [c for c in good if " saves " in c]
    assert len(savings) == 4
    for c in savings:
        assert good[c] == V.HOLDS, c
        assert bad[c] == V.FAILS, c
    helps = [c for c in good if c.startswith("on malloc-free (each worker")]
    assert helps and good[helps[0]] == V.HOLDS and bad[helps[0]] == V.FAILS
    # the counters are not fabricated: the buddy-lock claim does not move
    locks = [c for c in good if "fewer buddy locks" in c]
    assert locks and good[locks[0]] == bad[locks[0]]


def test_ratio_table_follows_the_data(report):
    rows = report.ratio_rows()
    assert len(rows) == 16 and {r["producers"] for r in rows} == {4, 8}
    s = report.ratio_summary(rows)
    assert s["cells"] == 16 and s["kind"] == "predicted"
    assert "the figure asks at least 60%" in report.ratio_table()
    # the seed's own ratios: every cell in the seed's direction and within 0.5-2x
    same = _fabricate(report, None, None, band="off").ratio_summary()
    assert same["direction"] == same["within"] == 16
    # transfer slower than spill everywhere: no cell in the seed's direction
    flipped = _fabricate(report, 1.5, 1.5).ratio_summary()
    assert flipped["direction"] == 0 and flipped["within"] == 0
    # the seed's ratios, but spill faster with the line transfer cost halved and
    # doubled: every direction is inconclusive
    shaky = _fabricate(report, None, None, band=2.0)
    s = shaky.ratio_summary()
    assert s["band_inconclusive"] == 16 and s["direction"] == 0
    assert all(r["band"] and max(r["band"]) < 1 for r in shaky.ratio_rows())
    assert "inconclusive" in shaky.ratio_table()


def test_scaling_figure(cal, tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    s = rep.libarena_scaling(cpus=[1, 2, 4], runs=2, duration=0.002, measured_runs=2,
                             measured_duration=0.005, calibration=cal)
    for d, _ in ls.SCALING_DESIGNS:
        assert [c for c, _, _ in s.series(d, "alloc_ns", "simulated")] == [1, 2, 4]
        got = [c for c, _, _ in s.series(d, "alloc_ns", "measured")]
        assert got and max(got) <= s.settings["usable_cpus"]
    assert "magazine" in s.text() and "predicted (simulated CPUs)" in s.text()
    fig = s.plot()
    assert len(fig.axes) == 2
    title = fig._suptitle.get_text() if fig._suptitle else " ".join(t.get_text() for t in fig.texts)
    assert "predicted on simulated CPUs" in title and "measured, pinned" in title
    p = tmp_path / "s.json"
    s.to_json(str(p))
    assert ls.Scaling.from_json(p.read_text()).text() == s.text()
    shown = subprocess.run([sys.executable, "-m", "alloclab", "show", str(p)],
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and shown.stdout == s.text() + "\n", shown.stderr
    other = tmp_path / "s2.json"
    other.write_text(p.read_text())
    rounds = subprocess.run([sys.executable, "-m", "alloclab", "show", str(p), str(other)],
                            capture_output=True, text=True, timeout=60)
    assert rounds.returncode == 2 and "only reports print as rounds" in rounds.stderr
    (tmp_path / "bad.json").write_text('{"format": "alloclab-libarena-scaling"}')
    bad = subprocess.run([sys.executable, "-m", "alloclab", "show", str(tmp_path / "bad.json")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr


def test_cli_reproduce_simulated(cal, tmp_path):
    cpath = tmp_path / "cal.json"
    cal.save(str(cpath))
    out = subprocess.run(
        [sys.executable, "-m", "alloclab", "reproduce", "libarena", "--cpu", "simulated",
         "--calibration", str(cpath), "--producers", "1,2", "--allocs-per-cycle", "64",
         "--runs", "3", "--duration", "2ms", "--workloads", "malloc-free",
         "--json", str(tmp_path / "r.json")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    cid = ls.calibration_id(sim.Calibration.load(str(cpath)))
    assert "predicted (simulated CPUs, calibration %s)" % cid in out.stdout
    d = json.loads((tmp_path / "r.json").read_text())
    assert d["format"] == "alloclab-libarena-simulated-report"
    assert d["settings"]["calibration"]["source"] == str(cpath)


@pytest.mark.parametrize("args,needle", [
    (["--calibration", "x.json"], "go with --cpu simulated"),
    (["--scaling", "x.png"], "go with --cpu simulated"),
    (["--cpu", "simulated", "--fidelity"], "--tree and --fidelity"),
])
def test_cli_simulated_refusals(args, needle):
    out = subprocess.run([sys.executable, "-m", "alloclab", "reproduce", "libarena"] + args,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_validation_note(report):
    assert "carries no validation" in report.cpu_note()
    cal = dict(report.settings["calibration"], unvalidated=[["malloc-free", "libarena-spill"]])
    off = rep.SimulatedLibarenaReport(report.results, dict(report.settings, calibration=cal))
    assert "malloc-free on libarena-spill: their cells above" in off.cpu_note()
    ok = rep.SimulatedLibarenaReport(report.results, dict(
        report.settings, calibration=dict(cal, unvalidated=[])))
    assert "every 2-producer prediction within 25%" in ok.cpu_note()


def test_cli_scaling(cal, tmp_path):
    cpath = tmp_path / "cal.json"
    cal.save(str(cpath))
    out = subprocess.run(
        [sys.executable, "-m", "alloclab", "reproduce", "libarena", "--cpu", "simulated",
         "--calibration", str(cpath), "--scaling", str(tmp_path / "s.png"), "--producers",
         "1,4", "--runs", "2", "--duration", "2ms", "--json", str(tmp_path / "s.json")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "latency (ns) against CPUs" in out.stdout and "magazine" in out.stdout
    assert (tmp_path / "s.png").exists()
    assert json.loads((tmp_path / "s.json").read_text())["format"] == ls.Scaling.FORMAT
