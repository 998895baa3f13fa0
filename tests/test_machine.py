"""Machine state: state() over fake /sys and /proc trees, advice, the warnings
a Result's metadata gives, the per-run scheduling metrics, the "preempted"
cell warning and `alloclab check`."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import alloclab as al
from alloclab import cli, machine, stats
from alloclab.result import BASE_METRICS, METRIC_INFO, Result


def tree(root, files):
    """Write {relative path: content} under root; returns root as a str."""
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return str(root)


def cpu_files(governor, n=2, driver="intel_pstate"):
    out = {"sys/devices/system/cpu/online": "0-%d\n" % (n - 1)}
    for c in range(n):
        base = "sys/devices/system/cpu/cpu%d/cpufreq/" % c
        out[base + "scaling_governor"] = governor + "\n"
        out[base + "scaling_driver"] = driver + "\n"
        out[base + "scaling_min_freq"] = "800000\n"
        out[base + "scaling_max_freq"] = "3600000\n"
    return out


BAD = {
    **cpu_files("powersave"),
    "sys/devices/system/cpu/intel_pstate/no_turbo": "0\n",
    "sys/devices/system/cpu/smt/active": "1\n",
    "sys/devices/system/cpu/smt/control": "on\n",
    "sys/devices/system/cpu/isolated": "\n",
    "proc/sys/kernel/randomize_va_space": "2\n",
    "proc/loadavg": "0.05 0.10 0.20 1/120 4242\n",
    "proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor avx\n",
    "proc/cmdline": "BOOT_IMAGE=/vmlinuz quiet\n",
}

TUNED = {
    **cpu_files("performance"),
    "sys/devices/system/cpu/intel_pstate/no_turbo": "1\n",
    "sys/devices/system/cpu/smt/active": "0\n",
    "sys/devices/system/cpu/smt/control": "off\n",
    "sys/devices/system/cpu/isolated": "1\n",
    "sys/devices/system/cpu/nohz_full": "1\n",
    "proc/sys/kernel/randomize_va_space": "2\n",
    "proc/loadavg": "0.00 0.01 0.05 1/90 17\n",
    "proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu vme sse2 avx\n",
    "proc/cmdline": "isolcpus=1 nohz_full=1 rcu_nocbs=1 quiet -- isolcpus=7\n",
}


def keys(st):
    return {p["key"] for p in machine._problems(st)}


# ---------------------------------------------------------------- state, advice

def test_state_reads_a_badly_tuned_machine(tmp_path):
    st = machine.state(tree(tmp_path, BAD))
    assert st["cpus_online"] == [0, 1]
    assert st["governors"] == {"0": "powersave", "1": "powersave"}
    assert st["cpufreq_driver"] == "intel_pstate"
    assert st["freq_mhz"] == {"0": [800, 3600], "1": [800, 3600]}
    assert st["turbo"] is True
    assert st["smt_active"] is True and st["smt_control"] == "on"
    assert st["cpus_isolated"] == []
    assert st["cpus_nohz_full"] is None  # no such file: not measured
    assert st["aslr"] == 2
    assert st["hypervisor"] is True
    assert st["loadavg"] == {"1min": 0.05, "5min": 0.10, "15min": 0.20, "runnable": 1,
                             "tasks": 120}
    assert st["cmdline"] == {}
    json.dumps(st)  # JSON-native

    adv = machine.advice(st)
    text = "\n".join("%s | %s | %s" % a for a in adv)
    assert all(sev in ("warning", "info") for sev, _, _ in adv)
    warn = [(what, change) for sev, what, change in adv if sev == "warning"]
    assert any("governor powersave on CPUs 0-1" in w and "cpupower frequency-set -g performance"
               in c for w, c in warn), text
    assert any("turbo" in w and "intel_pstate/no_turbo" in c for w, c in warn), text
    assert any("SMT" in w and "smt/control" in c for w, c in warn), text
    assert any("no CPU is isolated" in w and "isolcpus=1" in c and "nohz_full=1" in c
               for w, c in warn), text
    assert any("hypervisor" in w for w, c in warn), text
    # ASLR is informational; warnings come first
    assert ("info" in [s for s, _, _ in adv]) and [s for s, _, _ in adv][0] == "warning"
    assert any(s == "info" and "ASLR" in w for s, w, _ in adv)


def test_state_of_a_tuned_machine_gives_none_of_that_advice(tmp_path):
    st = machine.state(tree(tmp_path, TUNED))
    assert st["governors"] == {"0": "performance", "1": "performance"}
    assert st["turbo"] is False
    assert st["turbo_file"] == "/sys/devices/system/cpu/intel_pstate/no_turbo"
    assert st["smt_active"] is False
    assert st["cpus_isolated"] == [1] and st["cpus_nohz_full"] == [1]
    assert st["hypervisor"] is False
    assert st["cmdline"] == {"isolcpus": "1", "nohz_full": "1", "rcu_nocbs": "1"}
    found = keys(st)
    assert not found & {"governor", "turbo", "smt", "isolcpus", "nohz_full", "load",
                        "hypervisor"}, found
    # the bad tree, for contrast, has every one of them
    assert {"governor", "turbo", "smt", "isolcpus", "hypervisor"} <= keys(
        machine.state(tree(tmp_path / "bad", BAD)))


def test_boost_file_and_isolated_cpus_outside_the_affinity(tmp_path):
    st = machine.state(tree(tmp_path, {
        **cpu_files("performance", n=4, driver="acpi-cpufreq"),
        "sys/devices/system/cpu/cpufreq/boost": "1\n",
        "sys/devices/system/cpu/isolated": "2-3\n",
    }))
    assert st["turbo"] is True and st["turbo_file"].endswith("cpufreq/boost")
    assert st["cpufreq_driver"] == "acpi-cpufreq"
    adv = machine.advice(dict(st, cpus_usable=[0, 1, 2, 3]))
    assert any("turbo" in w and c.startswith("echo 0 |") and c.endswith("cpufreq/boost")
               for _, w, c in adv)
    assert any("CPUs 2-3 are isolated" in w and "taskset -c 2-3" in c for _, w, c in adv)
    assert any(s == "info" and "nohz_full=2-3" in c for s, _, c in adv)
    adv = machine.advice(dict(st, cpus_usable=[2, 3]))
    assert not any("taskset" in c for _, _, c in adv)


def test_missing_files_are_none_not_errors(tmp_path):
    st = machine.state(str(tmp_path / "nothing-here"))
    measured = {k for k, v in st.items() if v is not None}
    assert measured <= {"cpus_usable"}, measured  # the process's own affinity
    assert machine.advice(st) == []
    text = machine.check_text(st)
    assert "nothing to change" in text and "governor" in text
    json.loads(machine.check_json(st))


def test_malformed_files_are_none(tmp_path):
    st = machine.state(tree(tmp_path, {
        "sys/devices/system/cpu/online": "zero-one\n",
        "proc/loadavg": "busy\n",
        "proc/sys/kernel/randomize_va_space": "maybe\n",
        "sys/devices/system/cpu/smt/active": "?\n",
        "sys/devices/system/cpu/intel_pstate/no_turbo": "\n",
        "proc/self/cgroup": "0::/x\n",
        "sys/fs/cgroup/x/cpu.max": "lots 100000\n",
    }))
    for k in ("cpus_online", "loadavg", "aslr", "smt_active", "turbo", "cgroup_cpu_max"):
        assert st[k] is None, k


def test_cpu_lists():
    assert machine.parse_cpu_list("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert machine.parse_cpu_list("") == []
    assert machine.parse_cpu_list(None) is None
    assert machine.parse_cpu_list("a-b") is None
    assert machine.format_cpu_list([5, 0, 1, 2, 10, 11]) == "0-2,5,10-11"
    assert machine.format_cpu_list([]) == "none"


def test_cgroup_quota_v2_and_v1(tmp_path):
    st = machine.state(tree(tmp_path / "v2", {
        "proc/self/cgroup": "0::/user.slice/job\n",
        "sys/fs/cgroup/user.slice/job/cpu.max": "150000 100000\n",
    }))
    assert st["cgroup_cpu_max"] == [150000, 100000]
    assert any("1.5 CPUs" in w for _, w, _ in machine.advice(st))
    st = machine.state(tree(tmp_path / "v1", {
        "proc/self/cgroup": "4:cpu,cpuacct:/job\n0::/\n",
        "sys/fs/cgroup/cpu/job/cpu.cfs_quota_us": "-1\n",
        "sys/fs/cgroup/cpu/job/cpu.cfs_period_us": "100000\n",
    }))
    assert st["cgroup_cpu_max"] == [None, 100000]
    assert "cgroup" not in keys(st)


def test_load_above_the_threshold_is_advised(tmp_path):
    st = machine.state(tree(tmp_path, TUNED))
    n = len(st["cpus_usable"])
    busy = dict(st, loadavg=dict(st["loadavg"], **{"1min": machine.LOAD_WARN_PER_CPU * n + 0.5}))
    idle = dict(st, loadavg=dict(st["loadavg"], **{"1min": 0.0}))
    assert "load" in keys(busy) and "load" not in keys(idle)


def test_real_state_is_json_native():
    st = machine.state()
    assert json.loads(json.dumps(st)) == st
    assert st["cpus_usable"] == sorted(os.sched_getaffinity(0))
    assert st["loadavg"] is not None and st["loadavg"]["1min"] >= 0


# ---------------------------------------------------------------- warnings(metadata)

def _md(load_before, load_after, governor="performance", producers=(1, 2)):
    return {
        "usable_cpus": 2,
        "run": {"sweep": {"producers": list(producers)}},
        "machine_state": {"governors": {"0": governor, "1": governor}, "turbo": False,
                          "smt_active": False, "hypervisor": False},
        "load_before": {"1min": load_before, "5min": 0.0, "15min": 0.0},
        "load_after": {"1min": load_after, "5min": 0.0, "15min": 0.0},
    }


def test_warnings_flip_with_the_recorded_load():
    assert machine.warnings(_md(0.10, 0.50)) == []
    w = machine.warnings(_md(1.85, 0.50))
    assert w == ["load average 1.85 before the run on 2 usable CPUs"]
    # after the run, the run's own workers (at most 2 here) are not held against it
    assert machine.warnings(_md(0.10, 2.50)) == []
    w = machine.warnings(_md(0.10, 3.60))
    assert len(w) == 1 and w[0].startswith("load average 3.60 after the run on 2 usable CPUs")
    r = Result(_md(1.85, 0.1), [])
    assert r.machine_warnings() == ["load average 1.85 before the run on 2 usable CPUs"]


def test_warnings_name_the_bad_state():
    assert not any("governor" in x for x in machine.warnings(_md(0.0, 0.0)))
    w = machine.warnings(_md(0.0, 0.0, governor="powersave"))
    assert w == ["governor powersave on CPUs 0-1 (not performance)"]
    md = _md(0.0, 0.0)
    md["machine_state"].update(turbo=True, smt_active=True, hypervisor=True)
    w = machine.warnings(md)
    assert "turbo boost on" in w and any(x.startswith("SMT on") for x in w)
    assert any(x.startswith("virtual machine") for x in w)
    assert machine.warnings({}) == []  # nothing recorded: nothing to say


# ---------------------------------------------------------------- per-run metrics

def test_run_records_machine_state_and_scheduling_metrics():
    usable = len(os.sched_getaffinity(0))
    prods = [1, 2] if usable >= 2 else [1]
    res = al.run("malloc-free", "buddy", producers=prods, runs=2, duration=0.05,
                 mem_sample=0.001, warmup_cycles=2)
    md = res.metadata
    assert md["machine_state"]["cpus_usable"] == sorted(os.sched_getaffinity(0))
    for k in ("load_before", "load_after"):
        assert md[k] is not None and md[k]["1min"] >= 0
    for p in res.points:
        d = p.data
        for m in machine.METRIC_NAMES:
            assert m in d and len(d[m]) == 2, m
        assert d["worker_invol_ctxsw"].dtype.kind == "i"
        assert np.all(d["worker_invol_ctxsw"] >= 0) and np.all(d["worker_vol_ctxsw"] >= 0)
        assert np.all(np.isfinite(d["worker_invol_ctxsw_per_s"]))
        assert np.all(d["worker_invol_ctxsw_per_s"] >= 0)
        assert np.all(d["worker_preempted_per_s"] >= 0)
        assert np.all(d["worker_preempted_per_s"] <= d["worker_invol_ctxsw_per_s"])
        if p.params["producers"] < usable:
            # 1 ms samples over a 50 ms phase, by the main thread on a spare CPU
            assert np.all(d["engine_wakeups"] > 0)
            assert np.all(d["engine_on_worker_cpus"] == 0)
            assert p.info["engine_cpus"] and set(p.info["engine_cpus"]) <= os.sched_getaffinity(0)
        else:
            # every CPU runs a worker: worker 0 samples between cycles, main sleeps
            assert np.all(d["engine_wakeups"] == 0)
        assert np.all(d["mem_samples"] > 1)
    assert Result.from_json(res.to_json()) == res
    for m in machine.METRIC_NAMES:
        assert m in BASE_METRICS and METRIC_INFO[m][2] is None
    assert "lower is better" not in res.table("worker_invol_ctxsw_per_s").title


def test_sweep_records_the_load_around_the_session(tmp_path):
    res = al.sweep("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=1,
                   journal=tmp_path / "j.jsonl", progress=False)
    assert res.metadata["load_before"]["1min"] >= 0
    assert res.metadata["load_after"]["1min"] >= 0
    assert "machine_state" in res.metadata


def test_run_metrics_from_synthetic_raw():
    raw = {"ncpu_model": 2, "elapsed_ns": 0.5e9,
           "sched": {"worker_nvcsw": 3, "worker_nivcsw": 100, "engine_wakeups": 40,
                     "engine_wakeups_on_worker_cpus": 20, "engine_cpus": [0, 1]}}
    m = machine.run_metrics(raw)
    assert m["worker_invol_ctxsw"] == 100 and m["worker_vol_ctxsw"] == 3
    assert m["worker_invol_ctxsw_per_s"] == pytest.approx(100.0)  # 100 / (2 workers * 0.5 s)
    assert m["worker_preempted_per_s"] == pytest.approx(80.0)  # less 20 / (2 * 0.5 s)
    assert m["engine_wakeups"] == 40 and m["engine_on_worker_cpus"] == pytest.approx(0.5)
    raw["sched"]["engine_wakeups"] = raw["sched"]["engine_wakeups_on_worker_cpus"] = 0
    assert math.isnan(machine.run_metrics(raw)["engine_on_worker_cpus"])
    assert machine.run_metrics({"ncpu_model": 1, "elapsed_ns": 1.0}) == {}  # older raw runs


# ---------------------------------------------------------------- the "preempted" warning

def test_preempted_warning_above_the_threshold_only():
    t = stats.PREEMPT_WARN_PER_S
    above = stats.describe([100.0, 101.0, 99.0], preempt=[0.0, t + 1, 3.0])
    below = stats.describe([100.0, 101.0, 99.0], preempt=[0.0, t - 1, 3.0])
    assert [w.kind for w in above.warnings] == ["preempted"]
    assert above.preempt_max == t + 1 and "%.0f/s" % (t + 1) in above.warnings[0].message
    assert below.warnings == [] and below.preempt_max == t - 1
    assert stats.describe([1.0, 1.0, 1.0]).warnings == []  # nothing measured: no warning


def test_preempted_warning_flows_through_tables_and_stats():
    usable = len(os.sched_getaffinity(0))
    res = al.run("malloc-free", "buddy", producers=[1, 2] if usable >= 2 else [1], runs=3,
                 cycles=5, warmup_cycles=1, mem_sample=0)
    t = stats.PREEMPT_WARN_PER_S
    for p in res.points:  # pin the measured values: the test is about the flow
        p.data["alloc_ns"] = np.array([100.0, 100.5, 99.5])
        p.data["worker_preempted_per_s"] = np.array([0.0, 1.0, t - 1])
        p.data["elapsed_ns"] = np.full(3, 0.2e9)  # phases long enough: no short warning
        p.data["steal_pct"] = np.zeros(3)  # this VM's own steal time is not this test's
    tab = res.table("alloc_ns")
    assert not any(w.kind == "preempted" for _, w in tab.warnings)
    assert "preempted" not in tab.to_text()
    hot = res.points[-1]
    hot.data["worker_preempted_per_s"] = np.array([0.0, t * 3, 2.0])
    tab = res.table("alloc_ns")
    flagged = [(label, w) for label, w in tab.warnings if w.kind == "preempted"]
    assert len(flagged) == 1
    text = tab.to_text()
    assert "workers preempted by other tasks > %g/s" % t in text
    assert "(%.0f/s)" % (t * 3) in text
    kinds = {p["producers"]: [w.kind for w in s.warnings] for p, s in res.stats("alloc_ns")}
    assert kinds[hot.params["producers"]] == ["preempted"]
    assert all(k == [] for prod, k in kinds.items() if prod != hot.params["producers"])


# ---------------------------------------------------------------- the command line

def _cli(*args):
    return subprocess.run([sys.executable, "-m", "alloclab", *args], capture_output=True,
                          text=True, timeout=120)


def test_cli_check_prints_state_and_advice():
    p = _cli("check")
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith("machine state")
    for word in ("governor", "turbo boost", "SMT", "isolated CPUs", "ASLR", "load average",
                 "hypervisor"):
        assert word in out, word
    st = machine.state()
    for sev, what, change in machine.advice(st):
        if "load average" not in what:  # the load moves between the two reads
            assert what in out and change in out
    assert p.stderr == ""


def test_cli_check_json():
    p = _cli("check", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert set(d) == {"state", "advice"}
    assert set(d["state"]) == set(machine.state())
    assert d["state"]["cpus_usable"] == sorted(os.sched_getaffinity(0))
    for a in d["advice"]:
        assert set(a) == {"severity", "problem", "change"}
        assert a["severity"] in ("warning", "info")


def test_cli_check_bad_flag_exits_2():
    p = _cli("check", "--bogus")
    assert p.returncode == 2
    assert p.stderr.startswith("alloclab: error:") and len(p.stderr.splitlines()) == 1
    assert p.stdout == ""


def test_cli_run_prints_machine_warnings(monkeypatch, capsys):
    busy = {"1min": 9.0, "5min": 9.0, "15min": 9.0, "runnable": 10, "tasks": 100}
    monkeypatch.setattr(machine, "loadavg", lambda root="/": dict(busy))
    rc = cli.main(["run", "malloc-free", "--cycles", "3", "--warmup-cycles", "0", "--runs",
                   "1"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = out.splitlines()
    i = lines.index("machine:")
    n = len(os.sched_getaffinity(0))
    assert "  load average 9.00 before the run on %d usable CPU%s" % (
        n, "" if n == 1 else "s") in lines[i + 1:]
    assert lines.index("machine:") > max(k for k, x in enumerate(lines) if "latency" in x)


def test_numpy_blas_gets_one_thread_unless_the_user_chose():
    """OpenBLAS's spinning threads would run on the pinned workers' CPUs."""
    code = "import alloclab, os; print(os.environ['OPENBLAS_NUM_THREADS'])"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "1", out.stderr
    env["OPENBLAS_NUM_THREADS"] = "3"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "3", out.stderr
