"""The machine state that makes benchmark numbers noisy, and what to change.

- ``state(root="/")``: what /sys and /proc say (under ``root``, so tests can
  point it at a fake tree): the CPUs online, usable (this process's
  affinity), isolated (isolcpus=) and tickless (nohz_full=); per CPU the
  frequency scaling governor and limits; turbo boost; SMT; ASLR; the load
  average; whether a hypervisor runs us; a cgroup CPU quota; perf sampling;
  transparent hugepages; the power supply. JSON-native; whatever cannot be
  read is None ("not measured"), never an error.
- ``advice(state)``: [(severity, what is wrong, what to change)], severity
  "warning" (it makes numbers noisy) or "info".
- ``warnings(metadata)``: short lines naming what was bad in a Result's
  recorded machine state (``Result.machine_warnings()``; printed under the
  tables of ``alloclab run``).
- ``run_metrics(raw)``: the per-run scheduling metrics from the engine:
  how often the workers were preempted in the measured phase, and where the
  engine's main thread woke up meanwhile.

pyperf's ``system show`` checks the same things for Python benchmarks; the
CPU-bound microbenchmarks alloclab runs are at least as sensitive to them.
"""

import datetime
import json
import math
import os
import platform
import re

import numpy as np

from .._version import __version__
from ..cbind._ffi import cstr, lib

# The 1-minute load average, per usable CPU, above which the machine is
# busy: on 2 CPUs a load above 1.0 means that on average another task wanted
# a CPU, so a worker shares its CPU often. Lower levels are common for a
# minute after a build or an earlier run, and pass; what actually disturbed
# a run shows per cell as the "preempted" warning (stats.PREEMPT_WARN_PER_S).
LOAD_WARN_PER_CPU = 0.5

METRIC_NAMES = ["worker_invol_ctxsw", "worker_invol_ctxsw_per_s", "worker_preempted_per_s",
                "worker_vol_ctxsw", "engine_wakeups", "engine_on_worker_cpus"]

# metric -> (description, unit, lower_is_better): machine state, no direction
METRIC_INFO = {
    "worker_invol_ctxsw": ("workers preempted (involuntary context switches)", "", None),
    "worker_invol_ctxsw_per_s": ("workers preempted per worker-second", "1/s", None),
    "worker_preempted_per_s": ("workers preempted by other tasks per worker-second", "1/s",
                               None),
    "worker_vol_ctxsw": ("workers blocked (voluntary context switches)", "", None),
    "engine_wakeups": ("engine main thread wake-ups", "", None),
    "engine_on_worker_cpus": ("share of main-thread wake-ups on a worker's CPU", "ratio",
                              None),
}

_CMDLINE_PARAMS = ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity", "nosmt")


# ---------------------------------------------------------------- reading

def _path(root, rel):
    return os.path.join(root, rel.lstrip("/"))


def _read(root, rel):
    """The first line of a file under root, stripped; None when unreadable."""
    try:
        with open(_path(root, rel), errors="replace") as f:
            return f.readline().strip()
    except (OSError, ValueError):
        return None


def _read_int(root, rel):
    v = _read(root, rel)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def parse_cpu_list(text):
    """"0-3,8" -> [0, 1, 2, 3, 8]; "" -> []; None or malformed -> None."""
    if text is None:
        return None
    cpus = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                hi = hi.split(":", 1)[0]  # "0-7:2/4" ranges with a stride: the span is enough
                cpus.update(range(int(lo), int(hi) + 1))
            else:
                cpus.add(int(part))
        except ValueError:
            return None
    return sorted(cpus)


def format_cpu_list(cpus):
    """[0, 1, 2, 5] -> "0-2,5"; [] -> "none"."""
    cpus = sorted(set(cpus))
    if not cpus:
        return "none"
    out, start, prev = [], cpus[0], cpus[0]
    for c in cpus[1:] + [None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        out.append(str(start) if start == prev else "%d-%d" % (start, prev))
        if c is not None:
            start = prev = c
    return ",".join(out)


def loadavg(root="/"):
    """/proc/loadavg: {"1min", "5min", "15min", "runnable", "tasks"} (runnable
    counts the reader itself), or None."""
    line = _read(root, "proc/loadavg")
    if not line:
        return None
    f = line.split()
    try:
        out = {"1min": float(f[0]), "5min": float(f[1]), "15min": float(f[2])}
    except (ValueError, IndexError):
        return None
    try:
        run, total = f[3].split("/")
        out["runnable"], out["tasks"] = int(run), int(total)
    except (ValueError, IndexError):
        out["runnable"] = out["tasks"] = None
    return out


def _usable_cpus():
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _cpu_ids(root, online):
    if online is not None:
        return online
    try:
        names = os.listdir(_path(root, "sys/devices/system/cpu"))
    except OSError:
        return []
    return sorted(int(n[3:]) for n in names if re.fullmatch(r"cpu\d+", n))


def _per_cpu(root, cpus, rel):
    """{"<cpu>": first line of cpu<cpu>/<rel>} for the CPUs that have it, or None."""
    out = {}
    for c in cpus:
        v = _read(root, "sys/devices/system/cpu/cpu%d/%s" % (c, rel))
        if v:
            out[str(c)] = v
    return out or None


def _freq_mhz(root, cpus):
    out = {}
    for c in cpus:
        base = "sys/devices/system/cpu/cpu%d/cpufreq/" % c
        lo = _read_int(root, base + "scaling_min_freq")
        hi = _read_int(root, base + "scaling_max_freq")
        if lo is not None and hi is not None:
            out[str(c)] = [lo // 1000, hi // 1000]  # kHz in sysfs
    return out or None


def _turbo(root):
    """(turbo on?, the file that says so) or (None, None)."""
    no_turbo = _read(root, "sys/devices/system/cpu/intel_pstate/no_turbo")
    if no_turbo in ("0", "1"):
        return no_turbo == "0", "/sys/devices/system/cpu/intel_pstate/no_turbo"
    boost = _read(root, "sys/devices/system/cpu/cpufreq/boost")
    if boost in ("0", "1"):
        return boost == "1", "/sys/devices/system/cpu/cpufreq/boost"
    return None, None


def _hypervisor(root):
    """True when the CPU flags say "hypervisor" (x86) or /sys/hypervisor/type
    names one; False when the flags are there without it; None otherwise."""
    kind = _read(root, "sys/hypervisor/type")
    if kind:
        return True
    try:
        with open(_path(root, "proc/cpuinfo"), errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return "hypervisor" in line.split(":", 1)[-1].split()
    except OSError:
        return None
    return None


def _cmdline(root):
    line = _read(root, "proc/cmdline")
    if line is None:
        return None
    out = {}
    for tok in line.split():
        if tok == "--":  # the rest is init's
            break
        key, _, val = tok.partition("=")
        if key in _CMDLINE_PARAMS:
            out[key] = val
    return out


def _thp(root):
    line = _read(root, "sys/kernel/mm/transparent_hugepage/enabled")
    m = re.search(r"\[(\w+)\]", line or "")
    return m.group(1) if m else None


def _cgroup_cpu_max(root):
    """This process's cgroup CPU quota as [quota_us or None (no quota),
    period_us] (cgroup v2 cpu.max, else v1 cpu.cfs_quota_us), or None."""
    try:
        with open(_path(root, "proc/self/cgroup")) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, ctrls, rel = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        rel = rel.strip().lstrip("/")
        if line.startswith("0::"):
            for top in ("sys/fs/cgroup", "sys/fs/cgroup/unified"):
                v = _read(root, os.path.join(top, rel, "cpu.max"))
                if v:
                    q, _, p = v.partition(" ")
                    try:
                        return [None if q == "max" else int(q), int(p)]
                    except ValueError:
                        return None
        elif "cpu" in ctrls.split(","):
            for top in ("sys/fs/cgroup/cpu", "sys/fs/cgroup/cpu,cpuacct"):
                q = _read_int(root, os.path.join(top, rel, "cpu.cfs_quota_us"))
                p = _read_int(root, os.path.join(top, rel, "cpu.cfs_period_us"))
                if q is not None and p:
                    return [None if q < 0 else q, p]
    return None


def _power_online(root):
    base = _path(root, "sys/class/power_supply")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return None
    seen = None
    for n in names:
        v = _read(root, "sys/class/power_supply/%s/online" % n)
        if v == "1":
            return True
        if v == "0":
            seen = False
    return seen


def state(root="/"):
    """The machine state under ``root`` as JSON-native data (None = not
    measured here). ``cpus_usable`` is this process's affinity whatever the
    root."""
    online = parse_cpu_list(_read(root, "sys/devices/system/cpu/online"))
    cpus = _cpu_ids(root, online)
    turbo, turbo_file = _turbo(root)
    smt_active = _read(root, "sys/devices/system/cpu/smt/active")
    return {
        "cpus_online": online,
        "cpus_usable": _usable_cpus(),
        "cpus_isolated": parse_cpu_list(_read(root, "sys/devices/system/cpu/isolated")),
        "cpus_nohz_full": parse_cpu_list(_read(root, "sys/devices/system/cpu/nohz_full")),
        "cmdline": _cmdline(root),
        "cpufreq_driver": next(iter((_per_cpu(root, cpus, "cpufreq/scaling_driver") or
                                     {}).values()), None),
        "governors": _per_cpu(root, cpus, "cpufreq/scaling_governor"),
        "freq_mhz": _freq_mhz(root, cpus),
        "turbo": turbo,
        "turbo_file": turbo_file,
        "smt_active": {"1": True, "0": False}.get(smt_active),
        "smt_control": _read(root, "sys/devices/system/cpu/smt/control") or None,
        "aslr": _read_int(root, "proc/sys/kernel/randomize_va_space"),
        "loadavg": loadavg(root),
        "hypervisor": _hypervisor(root),
        "cgroup_cpu_max": _cgroup_cpu_max(root),
        "perf_event_paranoid": _read_int(root, "proc/sys/kernel/perf_event_paranoid"),
        "perf_event_max_sample_rate": _read_int(root,
                                                "proc/sys/kernel/perf_event_max_sample_rate"),
        "thp": _thp(root),
        "power_online": _power_online(root),
    }


# ---------------------------------------------------------------- judging

def _n_usable(st, metadata=None):
    if metadata and metadata.get("usable_cpus"):
        return int(metadata["usable_cpus"])
    u = (st or {}).get("cpus_usable") or (st or {}).get("cpus_online")
    return len(u) if u else None


def _governor_groups(st):
    """{governor: [cpus]} for the CPUs not on "performance"."""
    bad = {}
    for cpu, gov in sorted((st.get("governors") or {}).items(), key=lambda kv: int(kv[0])):
        if gov != "performance":
            bad.setdefault(gov, []).append(int(cpu))
    return bad


def _problems(st):
    """Every problem as a dict: key, severity, problem (a sentence), change
    (what to do), short (the line for warnings(); None: advice only)."""
    out = []

    def add(key, severity, problem, change, short=None):
        out.append({"key": key, "severity": severity, "problem": problem, "change": change,
                    "short": short})

    for kind in (_clock_problems, _isolation_problems, _sharing_problems, _aslr_problems):
        kind(st, add)
    order = {"warning": 0, "info": 1}
    return sorted(out, key=lambda p: order.get(p["severity"], 2))


def _clock_problems(st, add):
    """What makes the CPU clock vary: the governor, turbo boost, SMT."""
    for gov, cpus in _governor_groups(st).items():
        add("governor", "warning",
            "CPU frequency governor %s on CPUs %s (not performance): the clock follows the load, "
            "so a run's start and a light workload run slower" % (gov, format_cpu_list(cpus)),
            "sudo cpupower frequency-set -g performance",
            "governor %s on CPUs %s (not performance)" % (gov, format_cpu_list(cpus)))
    if st.get("turbo"):
        f = st.get("turbo_file") or "/sys/devices/system/cpu/intel_pstate/no_turbo"
        off = "1" if f.endswith("no_turbo") else "0"
        add("turbo", "warning",
            "turbo boost is on: the clock depends on temperature and on how many cores are busy",
            "echo %s | sudo tee %s" % (off, f), "turbo boost on")
    if st.get("smt_active"):
        add("smt", "warning",
            "SMT is on: a hyperthread sibling shares a worker's core (caches, execution ports)",
            "echo off | sudo tee /sys/devices/system/cpu/smt/control (or boot with nosmt)",
            "SMT on (hyperthread siblings share the workers' cores)")


def _isolation_problems(st, add):
    """Whether the workers' CPUs are isolated, used and tickless."""
    online = st.get("cpus_online") or []
    usable = st.get("cpus_usable")
    iso = st.get("cpus_isolated")
    if iso is not None and not iso and len(online) > 1:
        spare = format_cpu_list(online[1:])
        add("isolcpus", "warning",
            "no CPU is isolated: other tasks, kernel threads and interrupts share the workers' "
            "CPUs",
            "boot with isolcpus=%s nohz_full=%s rcu_nocbs=%s and run alloclab under "
            "taskset -c %s" % (spare, spare, spare, spare))
    elif iso:
        if usable and not set(usable) <= set(iso):
            add("taskset", "warning",
                "CPUs %s are isolated, but alloclab may run on %s and pins its workers to the "
                "first of those" % (format_cpu_list(iso), format_cpu_list(usable)),
                "taskset -c %s alloclab ..." % format_cpu_list(iso))
        nohz = st.get("cpus_nohz_full") or []
        if not set(iso) <= set(nohz):
            add("nohz_full", "info",
                "isolated CPUs %s still take the scheduler tick" % format_cpu_list(iso),
                "add nohz_full=%s rcu_nocbs=%s to the kernel command line"
                % (format_cpu_list(iso), format_cpu_list(iso)))


def _sharing_problems(st, add):
    """What takes CPU time from the workers: load, other guests, a cgroup
    quota, battery throttling."""
    la = st.get("loadavg")
    n = _n_usable(st)
    if la and n and la["1min"] > LOAD_WARN_PER_CPU * n:
        add("load", "warning",
            "load average %.2f (1 min) on %d usable CPU%s: other work competes with the workers"
            % (la["1min"], n, "" if n == 1 else "s"),
            "wait until the machine is idle, or stop what runs (ps -eo pcpu,pid,comm "
            "--sort=-pcpu | head)")
    if st.get("hypervisor"):
        add("hypervisor", "warning",
            "running under a hypervisor: vCPUs share physical cores with other guests (steal "
            "time), so numbers vary more than on bare metal; and each real interrupt here also "
            "takes VM exits, which the model's irq_work=ipi (a kernel entry) does not charge",
            "measure latency claims on bare metal or dedicated, pinned vCPUs; read the steal "
            "and preempted warnings under the tables; what a real irq_work interrupt costs a "
            "VM: bench/kernel_task_storage.py",
            "virtual machine (vCPUs share physical cores with other guests)")
    quota = st.get("cgroup_cpu_max")
    if quota and quota[0] is not None and quota[1]:
        add("cgroup", "warning",
            "a cgroup CPU quota of %.2g CPUs (cpu.max): workers are throttled when the run "
            "exceeds it" % (quota[0] / quota[1]),
            "run outside the quota, or with no more workers than it allows",
            "cgroup CPU quota of %.2g CPUs" % (quota[0] / quota[1]))
    if st.get("power_online") is False:
        add("power", "warning", "on battery: the CPU may be throttled to save power",
            "plug in the power cable", "on battery")


def _aslr_problems(st, add):
    """Address-space randomization: on is spread between runs, off a fixed
    layout."""
    aslr = st.get("aslr")
    if aslr in (1, 2):
        add("aslr", "info",
            "ASLR is on (%s randomization): the memory layout differs from run to run, which "
            "is part of the spread between runs" % ("full" if aslr == 2 else "conservative"),
            "leave it on so that runs sample layouts (pyperf's advice); for one fixed layout, "
            "run under setarch -R")
    elif aslr == 0:
        add("aslr", "info",
            "ASLR is off: every run sees the same memory layout, so a layout effect looks like "
            "a real difference",
            "echo 2 | sudo tee /proc/sys/kernel/randomize_va_space")


def advice(st):
    """[(severity, what is wrong, what to change)] for a state(): severity
    "warning" (makes numbers noisy) or "info"; warnings first."""
    return [(p["severity"], p["problem"], p["change"]) for p in _problems(st or {})]


def _own_workers(metadata):
    """The most workers a run of this Result had running at once (what its
    own runs add to the load average): min(largest producers, usable CPUs)."""
    prods = ((metadata.get("run") or {}).get("sweep") or {}).get("producers") or [0]
    n = _n_usable(metadata.get("machine_state"), metadata) or max(prods)
    return min(max(prods), n)


def warnings(metadata):
    """Short lines naming what was bad in a Result's recorded machine state
    (the load average before and after the run, and state() when recorded);
    [] when nothing was recorded or nothing was bad."""
    metadata = metadata or {}
    st = metadata.get("machine_state")
    n = _n_usable(st, metadata)
    lines = []
    cpus = "%d usable CPU%s" % (n, "" if n == 1 else "s") if n else ""
    before = metadata.get("load_before")
    if before and n and before.get("1min", 0) > LOAD_WARN_PER_CPU * n:
        lines.append("load average %.2f before the run on %s" % (before["1min"], cpus))
    after = metadata.get("load_after")
    if after and n:
        # The 1-minute average after the run includes this run's own workers
        # (at most as many as ran at once): warn about what is beyond them.
        own = _own_workers(metadata)
        if after.get("1min", 0) - own > LOAD_WARN_PER_CPU * n:
            lines.append("load average %.2f after the run on %s%s" % (
                after["1min"], cpus, " (its own workers account for at most %d)" % own
                if own else " (how much of it is this run's own is not recorded)"))
    if st:
        lines += [p["short"] for p in _problems(st) if p["short"] and p["key"] != "load"]
    return lines


# ---------------------------------------------------------------- per run

def run_metrics(raw):
    """{metric: value} from a raw run's "sched" part (empty for raw runs
    recorded before it existed).

    worker_preempted_per_s is worker_invol_ctxsw_per_s less what the
    engine's own main thread explains: each of its wake-ups on a worker's
    CPU (memory samples, watchdog) preempts a worker at most once. What is
    left is other tasks taking the workers' CPUs: the "preempted" warning
    (stats.PREEMPT_WARN_PER_S) reads it."""
    s = raw.get("sched")
    if not s:
        return {}
    workers = raw.get("ncpu_model") or 0
    secs = raw.get("elapsed_ns", 0) / 1e9
    wake = s["engine_wakeups"]
    nan = math.nan
    per_s = s["worker_nivcsw"] / (workers * secs) if workers and secs > 0 else nan
    own = s["engine_wakeups_on_worker_cpus"] / (workers * secs) if workers and secs > 0 else nan
    return {
        "worker_invol_ctxsw": s["worker_nivcsw"],
        "worker_invol_ctxsw_per_s": per_s,
        "worker_preempted_per_s": max(0.0, per_s - own) if per_s == per_s else nan,
        "worker_vol_ctxsw": s["worker_nvcsw"],
        "engine_wakeups": wake,
        "engine_on_worker_cpus": s["engine_wakeups_on_worker_cpus"] / wake if wake else math.nan,
    }


def point_info(raws):
    """{"engine_cpus": [CPUs the main thread woke up on, over the runs]} or {}."""
    if not raws or not any(r.get("sched") for r in raws):
        return {}
    return {"engine_cpus": sorted({c for r in raws for c in (r.get("sched") or {}).get(
        "engine_cpus", ())})}


# ---------------------------------------------------------------- alloclab check

def _fmt_cpus(cpus):
    return "-" if cpus is None else "%s (%d)" % (format_cpu_list(cpus), len(cpus)) if cpus \
        else "none"


def _fmt_groups(per_cpu, fmt=str):
    """{"0": v, "1": v, "2": w} -> "v on CPUs 0-1, w on CPU 2"."""
    if not per_cpu:
        return "-"
    groups = {}
    for cpu, v in per_cpu.items():
        groups.setdefault(fmt(v), []).append(int(cpu))
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join("%s on CPUs %s" % (v, format_cpu_list(c)) for v, c in groups.items())


def _yes_no(v, yes="on", no="off"):
    return "-" if v is None else yes if v else no


def state_lines(st):
    """The state as aligned "name  value" lines (- = not available here)."""
    la = st.get("loadavg")
    load = "-" if not la else "%.2f %.2f %.2f (1, 5, 15 min), %s of %s tasks runnable" % (
        la["1min"], la["5min"], la["15min"],
        "-" if la.get("runnable") is None else la["runnable"],
        "-" if la.get("tasks") is None else la["tasks"])
    cmd = st.get("cmdline")
    aslr = {0: "0 (off)", 1: "1 (conservative)", 2: "2 (full randomization)"}.get(
        st.get("aslr"), "-" if st.get("aslr") is None else str(st.get("aslr")))
    smt = "-"
    if st.get("smt_control") or st.get("smt_active") is not None:
        smt = "%s (%s)" % (st.get("smt_control") or "-",
                           _yes_no(st.get("smt_active"), "active", "inactive"))
    quota = st.get("cgroup_cpu_max")
    rate = st.get("perf_event_max_sample_rate")
    rows = [
        ("CPUs online", _fmt_cpus(st.get("cpus_online"))),
        ("CPUs usable", _fmt_cpus(st.get("cpus_usable")) + "  (this process's affinity)"),
        ("isolated CPUs", _fmt_cpus(st.get("cpus_isolated"))),
        ("nohz_full CPUs", _fmt_cpus(st.get("cpus_nohz_full"))),
        ("kernel cmdline", "-" if cmd is None else " ".join(
            "%s=%s" % kv if kv[1] else kv[0] for kv in cmd.items()) or "no isolation "
            "parameters"),
        ("cpufreq driver", st.get("cpufreq_driver") or "-"),
        ("governor", _fmt_groups(st.get("governors"))),
        ("frequency", _fmt_groups(st.get("freq_mhz"), lambda v: "min=max=%d MHz" % v[0]
                                  if v[0] == v[1] else "%d-%d MHz" % tuple(v))),
        ("turbo boost", _yes_no(st.get("turbo"))),
        ("SMT", smt),
        ("ASLR", aslr),
        ("load average", load),
        ("hypervisor", _yes_no(st.get("hypervisor"), "yes", "no")),
        ("cgroup CPU quota", "-" if quota is None else "none" if quota[0] is None else
         "%.2g CPUs (%d us per %d us)" % (quota[0] / quota[1], quota[0], quota[1])),
        ("perf_event_paranoid", "-" if st.get("perf_event_paranoid") is None else
         "%d%s" % (st["perf_event_paranoid"], "" if rate is None else
                   " (max sample rate %d/s)" % rate)),
        ("transparent hugepages", st.get("thp") or "-"),
        ("power supply", _yes_no(st.get("power_online"), "plugged in", "on battery")),
    ]
    w = max(len(k) for k, _ in rows)
    return ["  %-*s  %s" % (w, k, v) for k, v in rows]


def check_text(st=None):
    """What ``alloclab check`` prints: the state, then each problem with what
    to change."""
    st = state() if st is None else st
    lines = ["machine state (from /sys and /proc; - = not available here):"]
    lines += state_lines(st)
    lines.append("")
    adv = advice(st)
    if not adv:
        lines.append("nothing to change: no known source of noise found")
    else:
        lines.append("what to change:")
        for sev, what, change in adv:
            lines.append("  %s: %s" % (sev, what))
            lines.append("    -> %s" % change)
    return "\n".join(lines)


def check_json(st=None):
    """``alloclab check --json``: {"state": ..., "advice": [{severity, problem,
    change}]}, as text."""
    st = state() if st is None else st
    return json.dumps({"state": st, "advice": [
        {"severity": s, "problem": w, "change": c} for s, w, c in advice(st)]}, indent=2)


# ---------------------------------------------------------------- metadata

def cpu_model():
    """The CPU's model name, as /proc/cpuinfo gives it."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def collect_metadata():
    """The machine, build and clock a run was made on (JSON-native values)."""
    lib.al_clock_init()
    clock = lib.al_clock
    return {
        "cpu_model": cpu_model(),
        "online_cpus": os.cpu_count(),
        "usable_cpus": int(lib.al_cpus_usable()),
        "threads_per_core": int(lib.al_threads_per_core()),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "build_flags": cstr(lib.al_build_flags()),
        "irqflags_executed": bool(lib.al_irqflags_executed()),
        "stats_compiled": bool(lib.al_stats_compiled()),
        "library_version": cstr(lib.al_version()),
        "alloclab_version": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "clock": "tsc" if clock.tsc else "monotonic",
        "ticks_per_ns": float(clock.ticks_per_ns),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine_state": state(),  # governor, turbo, SMT, isolation, load, ...
    }
