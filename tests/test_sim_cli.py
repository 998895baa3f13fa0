"""The command line of simulated CPUs, run as a user runs it (a subprocess):
`alloclab run --cpu simulated` with --calibration, --line-transfer,
--lines-per-handoff, --timeline and --mva, and `alloclab sim calibrate` /
`alloclab sim validate`; their refusals (one error line, exit 2) and the
calibration file's round trip."""

import hashlib
import json
import os
import subprocess
import sys

import pytest

from alloclab.measure import sim

QUICK = ["--cycles", "40", "--warmup-cycles", "2", "--runs", "2"]
COSTS = {"transfer.lock_acquired": 20.0, "buddy.lock_acquired": 30.0, "percpu.misses": 2.0}


def cli(*args, check=None):
    p = subprocess.run([sys.executable, "-m", "alloclab", *args], capture_output=True,
                       text=True, timeout=300)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def _id(d):
    return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


@pytest.fixture
def calfile(tmp_path):
    path = tmp_path / "cal.json"
    sim.Calibration(COSTS, 60.0, 1.0, {"test": True}).save(str(path))
    return path


def test_run_simulated_labels_the_tables(calfile, tmp_path):
    j = tmp_path / "r.json"
    p = cli("run", "malloc-free", "--policy", "libarena-transfer", "--cpu", "simulated",
            "--calibration", str(calfile), "--producers", "1,8", "--json", str(j), *QUICK,
            check=0)
    cal = json.loads(calfile.read_text())
    cid = _id(cal)
    lines = p.stdout.splitlines()
    assert lines[1] == "simulated: predicted (calibration %s): every cell" % cid
    assert "simulated: times of simulated CPUs are predictions from calibration %s" % cid \
        in p.stdout
    assert "cpu: simulated (simulated CPUs: times predicted by calibration %s)" % cid in p.stdout
    d = json.loads(j.read_text())
    assert d["metadata"]["run"]["simulated"]["calibration"] == cal
    assert {pt["params"]["cpu"] for pt in d["points"]} == {"simulated"}
    assert {pt["info"]["sim"]["calibration_id"] for pt in d["points"]} == {cid}
    assert d["metadata"]["run"]["seed"] == 1


@pytest.mark.parametrize("scales, warned", [({"libarena-spill": 0.6}, True),
                                            ({"libarena-transfer": 0.6}, False)])
def test_a_policy_the_calibration_did_not_run_is_one_warning_line(tmp_path, scales, warned):
    path = tmp_path / "cal.json"
    sim.Calibration(COSTS, 60.0, 1.0, {"test": True}, scales=scales).save(str(path))
    p = cli("run", "malloc-free", "--policy", "libarena-transfer", "--cpu", "simulated",
            "--calibration", str(path), *QUICK, check=0)
    lines = [x for x in p.stderr.splitlines() if "calibration has no" in x]
    if warned:
        assert lines == [lines[0]] and lines[0].startswith(
            "alloclab: warning: the calibration has no libarena-transfer (it ran "
            "libarena-spill): ")
        assert "--policy libarena-transfer" in lines[0]
    else:
        assert lines == []


def test_line_transfer_and_handoff_override_the_calibration(calfile, tmp_path):
    j = tmp_path / "r.json"
    cli("run", "malloc-free", "--policy", "libarena-transfer", "--cpu", "simulated",
        "--calibration", str(calfile), "--line-transfer", "250", "--lines-per-handoff", "3",
        "--producers", "4", "--json", str(j), *QUICK, check=0)
    cal = json.loads(j.read_text())["metadata"]["run"]["simulated"]["calibration"]
    assert cal["line_transfer_ns"] == 250.0 and cal["lines_per_handoff"] == 3.0
    assert cal["costs"] == COSTS


def test_timeline_writes_the_first_simulated_run(calfile, tmp_path):
    tl, j = tmp_path / "t.json", tmp_path / "r.json"
    p = cli("run", "malloc-free", "--policy", "libarena-spill", "--cpu", "simulated",
            "--calibration", str(calfile), "--producers", "4,2", "--seed", "5",
            "--timeline", str(tl), "--json", str(j), *QUICK, check=0)
    assert "alloclab: wrote %s" % tl in p.stderr
    trace = json.loads(tl.read_text())
    other = trace["otherData"]
    assert other["producers"] == 4 and other["seed"] == 5 and other["policy"] == \
        "libarena-spill" and other["note"] == "simulated: times are predictions"
    tids = {e["tid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert tids == {0, 1, 2, 3}
    assert 0 < other["events_kept"] <= 20000
    assert {"hold", "wait"} <= {e["cat"] for e in trace["traceEvents"] if e["ph"] == "X"}
    d = json.loads(j.read_text())  # the events went to the trace, not into the result
    assert not any("timeline" in pt["info"]["sim"] for pt in d["points"])


def test_no_timeline_by_default(calfile, tmp_path):
    j = tmp_path / "r.json"
    cli("run", "malloc-free", "--policy", "libarena-spill", "--cpu", "simulated",
        "--calibration", str(calfile), "--producers", "2", "--json", str(j), *QUICK, check=0)
    d = json.loads(j.read_text())
    assert d["metadata"]["run"]["simulated"]["timeline"] == 0


def test_mva_prints_the_model_beside_each_simulated_cell(calfile):
    p = cli("run", "malloc-free", "--policy", "libarena-spill", "--cpu", "simulated",
            "--calibration", str(calfile), "--producers", "1,4", "--mva", *QUICK, check=0)
    out = p.stdout
    assert ("queueing model (mean-value analysis from a measured 1-producer run at "
            "stats=full, lock handoff 120 ns) beside the simulation:") in out
    cells = [ln for ln in out.splitlines() if ln.startswith("  libarena-spill, ")]
    assert [c.split(": ", 1)[0] for c in cells] == [
        "  libarena-spill, size=64, allocs_per_cycle=64, producers=%d" % n for n in (1, 4)]
    assert all("simulated " in c and "queueing model " in c for c in cells)
    last = [ln for ln in out.splitlines() if ln.startswith("mva: ")]
    flagged = [c for c in cells if "(disagree by more than 2x)" in c]
    assert last == (["mva: no cell disagrees by more than 2x"] if not flagged else
                    ["mva: %d of 2 cells disagree by more than 2x: %s" % (
                        len(flagged), "; ".join(c.split(": ", 1)[0].strip() for c in flagged))])


def test_mva_beside_json_goes_to_stderr(calfile):
    p = cli("run", "malloc-free", "--policy", "libarena-spill", "--cpu", "simulated",
            "--calibration", str(calfile), "--producers", "2", "--mva", "--format", "json",
            *QUICK, check=0)
    json.loads(p.stdout)  # stdout holds the result alone
    assert "queueing model (mean-value analysis" in p.stderr


@pytest.mark.parametrize("flags, words", [
    (["--calibration", "CAL"], "--calibration applies to --cpu simulated only"),
    (["--line-transfer", "60", "--mva"],
     "--line-transfer and --mva apply to --cpu simulated only"),
    (["--cpu", "simulated", "--line-transfer", "-1"], "'-1' is not a time in ns"),
    (["--cpu", "simulated", "--lines-per-handoff", "x"], "lines-per-handoff"),
    (["--cpu", "simulated", "--calibration", "/nonexistent/cal.json"],
     "cannot read calibration file /nonexistent/cal.json"),
    (["--cpu", "simulated", "--calibration", "NOTCAL"], "is not an alloclab calibration"),
    (["--cpu", "simulated", "--calibration", "CAL", "--timeline", "/"], "--timeline /"),
    (["--cpu", "simulated", "--calibration", "CAL", "--timeline", "T", "--json", "T"],
     "both name"),
])
def test_run_refusals(flags, words, calfile, tmp_path):
    notcal = tmp_path / "notcal.json"
    notcal.write_text('{"format": "something-else"}')
    sub = {"CAL": str(calfile), "NOTCAL": str(notcal), "T": str(tmp_path / "t.json")}
    p = cli("run", "malloc-free", "--policy", "buddy", "--producers", "2",
            *[sub.get(f, f) for f in flags], *QUICK, check=2)
    assert p.stdout == ""
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("alloclab: error: ") and words in err[0], err
    assert not (tmp_path / "t.json").exists()


def test_calibrate_writes_a_file_run_reads(tmp_path):
    out = tmp_path / "c.json"
    p = cli("sim", "calibrate", "--policy", "libarena-spill", "--cell", "malloc-free:16",
            "--line-transfer", "75", "--lines-per-handoff", "2", "--duration", "0.02",
            "--out", str(out), check=0)
    cal = sim.Calibration.load(str(out))
    assert cal.line_transfer_ns == 75.0 and cal.lines_per_handoff == 2.0
    assert cal.info["line_transfer"] == "given"
    assert [c["allocs_per_cycle"] for c in cal.info["cells"]] == [16]
    assert cal.costs and all(v >= 0 for v in cal.costs.values())
    cid = _id(cal.to_dict())
    assert p.stdout.startswith("calibration %s: %d terms from " % (cid, len(cal.costs)))
    assert "line transfer 75 ns [given], 2 lines per handoff [given]" in p.stdout
    assert p.stderr == "alloclab: wrote %s\n" % out
    r = cli("run", "malloc-free", "--policy", "libarena-spill", "--cpu", "simulated",
            "--calibration", str(out), "--producers", "2", *QUICK, check=0)
    assert "simulated: predicted (calibration %s): every cell" % cid in r.stdout


def test_validate_records_the_validation_and_run_marks_unvalidated(calfile, tmp_path):
    out = tmp_path / "v.json"
    p = cli("sim", "validate", "--calibration", str(calfile), "--policy", "libarena-spill",
            "--cell", "malloc-free:64", "--producers", "1,2", "--runs", "1", "--duration",
            "0.02", "--out", str(out), check=0)
    assert p.stdout.startswith("simulated/measured per cell, ns per operation (measured: "
                               "pinned, steal reruns; simulated: predictions)\n")
    cal = sim.Calibration.load(str(out))
    v = cal.info["validation"]
    assert [(r["producers"], r["op"]) for r in v["rows"]] == [
        (1, "alloc"), (1, "free"), (2, "alloc"), (2, "free")]
    assert cal.costs == COSTS and cal.info["test"] is True
    bad = v["unvalidated"]
    assert ("unchecked above them): %s" % (
        "malloc-free on libarena-spill" if bad else "none")) in p.stdout
    # the run reads the recorded verdict: here it is forced, to see both ways
    for verdict in ([["malloc-free", "libarena-spill"]], []):
        v["unvalidated"] = verdict
        cal.save(str(out))
        r = cli("run", "malloc-free", "--policy", "libarena-spill", "--cpu", "simulated",
                "--calibration", str(out), "--producers", "%d" % (v["usable_cpus"] + 2),
                *QUICK, check=0)
        assert ("unvalidated: above the validation's %d usable CPUs" % v["usable_cpus"]
                in r.stdout) == bool(verdict)


@pytest.mark.parametrize("args, words", [
    (["sim"], "sim needs a command: calibrate or validate"),
    (["sim", "calibrate", "--policy", "buddy"], "--out"),
    (["sim", "calibrate", "--policy", "nosuch", "--out", "OUT"], "unknown layer 'nosuch'"),
    (["sim", "calibrate", "--policy", "buddy", "--cell", "nope:64", "--out", "OUT"],
     "unknown workload 'nope' in --cell"),
    (["sim", "calibrate", "--policy", "buddy", "--cell", "malloc-free:x", "--out", "OUT"],
     "allocs per cycle is an integer"),
    (["sim", "calibrate", "--policy", "buddy", "--cell", "larson:64", "--out", "OUT"],
     "larson takes no allocs_per_cycle"),
    (["sim", "calibrate", "--policy", "buddy", "--out", "/"], "--out /"),
    (["sim", "validate", "--policy", "buddy"], "--calibration"),
    (["sim", "validate", "--policy", "buddy", "--calibration", "/nonexistent.json"],
     "cannot read calibration file /nonexistent.json"),
    (["sim", "validate", "--policy", "buddy", "--calibration", "/nonexistent.json",
      "--runs", "0"], "--runs and --producers must be at least 1"),
])
def test_sim_refusals(args, words, tmp_path):
    p = cli(*[str(tmp_path / "o.json") if a == "OUT" else a for a in args], check=2)
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("alloclab: error: ") and words in err[0], err
    assert not (tmp_path / "o.json").exists()


def test_show_and_compare_of_simulated_files(calfile, tmp_path):
    spill, transfer, meas = (tmp_path / n for n in ("s.json", "t.json", "m.json"))
    for pol, path in (("libarena-spill", spill), ("libarena-transfer", transfer)):
        cli("run", "malloc-free", "--policy", pol, "--cpu", "simulated", "--calibration",
            str(calfile), "--producers", "4", "--json", str(path), "--runs", "3",
            *QUICK[:-2], check=0)
    cid = _id(json.loads(calfile.read_text()))
    s = cli("show", str(spill), check=0)
    assert "simulated: predicted (calibration %s): every cell" % cid in s.stdout
    c = cli("compare", str(spill), str(transfer), check=0)
    assert "predicted (I)" in c.stdout or "predicted (R)" in c.stdout or \
        "predicted not significant" in c.stdout or "predicted significant" in c.stdout
    assert ("Predicted: both sides ran on simulated CPUs (calibration %s); the marks are "
            "predictions, not measurements." % cid) in c.stdout
    cli("run", "malloc-free", "--policy", "libarena-transfer", "--cpu", "pinned",
        "--producers", "2", "--json", str(meas), *QUICK, check=0)
    r = cli("compare", str(meas), str(transfer), "--on", "workload", check=2)
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "a simulated side (cpu=simulated, predictions) against a " \
        "measured side (cpu=pinned)" in err[0], err


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                    reason="the fit measures 2 pinned producers")
def test_calibrate_fit_handoff(tmp_path):
    out = tmp_path / "f.json"
    p = cli("sim", "calibrate", "--policy", "libarena-spill", "--line-transfer", "60",
            "--fit-handoff", "--duration", "0.02", "--out", str(out), check=0)
    cal = sim.Calibration.load(str(out))
    assert cal.info["lines_per_handoff"] == "fitted on 2-producer measured runs"
    assert cal.lines_per_handoff in sim.HANDOFF_GRID
    assert cal.info["handoff_fit"]["policies"] == ["libarena-spill"]
    assert "%g line%s per handoff [fitted on 2-producer measured runs]" % (
        cal.lines_per_handoff, "" if cal.lines_per_handoff == 1 else "s") in p.stdout


@pytest.mark.parametrize("args,needle", [
    (["--duration", "0"], "duration=0"),
    (["--fit-handoff", "--lines-per-handoff", "2"], "--fit-handoff fits the lines per handoff"),
    (["--cell", "malloc-free:"], "--cell malloc-free:: give the allocs per cycle"),
    (["--lines-per-handoff", "-1"], "'-1' is not a number of cache lines: a number from 0 "
                                    "to 1e6"),
])
def test_sim_calibrate_refuses_before_it_measures(tmp_path, args, needle):
    p = cli("sim", "calibrate", "--policy", "buddy", "--out", str(tmp_path / "c.json"), *args,
            check=2)
    assert needle in p.stderr and len(p.stderr.splitlines()) == 1 and p.stdout == ""
    assert not (tmp_path / "c.json").exists()


def test_libc_on_simulated_cpus_warns_that_its_locks_are_not_modelled(tmp_path):
    path = tmp_path / "cal.json"
    sim.Calibration(COSTS, 60.0, 1.0, {"test": True}).save(str(path))
    p = cli("run", "malloc-free", "--policy", "libc", "--policy", "percpu > libc",
            "--policy", "buddy", "--cpu", "simulated", "--calibration", str(path), *QUICK,
            check=0)
    lines = [x for x in p.stderr.splitlines() if "glibc's malloc" in x]
    assert [x.split(": its libc layer")[0] for x in lines] == [
        "alloclab: warning: libc", "alloclab: warning: percpu > libc"]  # not buddy
    assert all("do not grow with their number" in x for x in lines)


def test_ctrl_c_writes_the_timeline_of_the_finished_runs(tmp_path):
    from test_cli import _interrupt_after_first_run
    path = tmp_path / "cal.json"
    sim.Calibration(COSTS, 60.0, 1.0, {"test": True}).save(str(path))
    tl, j = tmp_path / "t.json", tmp_path / "r.json"
    rc, err = _interrupt_after_first_run(
        ["run", "malloc-free", "--policy", "libarena-spill", "--cpu", "simulated",
         "--calibration", str(path), "--producers", "4", "--runs", "50", "--duration", "0.05",
         "--timeline", str(tl), "--json", str(j)])
    assert rc == 130, err
    lines = [x for x in err.replace("\r", "\n").splitlines() if x.startswith("alloclab:")]
    assert "alloclab: wrote %s" % tl in lines, lines
    assert json.loads(tl.read_text())["traceEvents"]
    assert "timeline" not in json.dumps(json.loads(j.read_text())["points"][0]["info"])


def test_simulated_histograms_say_they_are_predictions(calfile):
    p = cli("run", "malloc-free", "--policy", "buddy", "--cpu", "simulated", "--calibration",
            str(calfile), "--hist", *QUICK, check=0)
    hist = [x for x in p.stdout.splitlines() if x.startswith("  buddy") and " n=" in x]
    assert len(hist) == 2 and all(x.endswith("(predicted)") and "clock pair" not in x
                                  for x in hist)
    cpu = [x for x in p.stdout.splitlines() if x.startswith("cpu: simulated")]
    assert cpu and "timer overhead" not in cpu[0]  # no measured clock pair to name
