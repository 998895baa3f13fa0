"""run(): sweep a workload over policies and parameters.

Every parameter that may vary (workload parameters, producers, the policy,
timing, cpu) accepts a list; the product of all lists is the grid. Each grid
point is run ``runs`` times; each run is one ``lib.al_run()`` call on a fresh
allocator stack, wholly in C (cffi releases the GIL; Python does nothing per
operation).

Everything is validated before anything runs, so a typo in the last value of
a long sweep fails in milliseconds, not after an hour. plan() does it in
phases: the options every cell shares, the policies (parsed by the C
library; a peer must be installed, the workload able to run on each), the
other axes (producers, cpu, timing, workload parameters by name), then the
tasks, one plain dict per grid point, each carrying its policy as parsed
(Policy.parsed(): layer names and int64 parameters), so that a run, in this
process or another, fills the engine's spec without parsing the text again.
Python checks what only it knows (Python types and names, installed peers,
plugin sources, this machine's timer signal rate); the engine decides the
rest: each cell's configuration goes through al_run_check, the check al_run
itself makes, and only the wording of its refusal is here. Cost: one C call
per cell, microseconds.

Runs are interleaved (run i of every cell before run i+1 of any; a cell's
policies back to back in ABBA order) so that machine drift does not favour
one side of a comparison. Imports: run depends on policy, result, executors;
nothing it imports depends on it (sweep builds on run, not the reverse).
"""

import errno
import hashlib
import itertools
import json
import math
import numbers
import os
import signal
import time
import warnings

from ..results import _counters
from .. import errors
from ..host import machine
from ..policies import peers, plugin
from ..cbind import schema
from . import progress as _progress
from .executors import check_executor
from ..cbind._ffi import cstr, error, ffi, lib
from ..policies.policy import Policy, check_compatible
from ..results.hist import Histogram
from ..results.result import Result, run_metrics, uniq
from ..host.machine import collect_metadata
from ..results.stats import STEAL_WARN_PCT, describe
from ..traces import replay
from . import sim as _sim

CPU_MODES = {"auto": lib.AL_CPU_AUTO, "pinned": lib.AL_CPU_PINNED,
             "virtual": lib.AL_CPU_VIRTUAL, "simulated": lib.AL_CPU_SIMULATED}
CPU_MODE_NAMES = {v: k for k, v in CPU_MODES.items()}
TIMINGS = {"batch": lib.AL_TIMING_BATCH, "per_op_sum": lib.AL_TIMING_PER_OP_SUM}
# What the stacks of a run count (counters.h): "lite" (the default) every event
# counter and lock acquisition counts, no clock reads; "off" nothing (the
# layers' counter metrics are absent: not measured, never 0; tables show
# "n/a"; bytes held and the leak check remain); "full" also the locks' hold
# and wait times (the <layer>.*_ns metrics).
STATS_LEVELS = {cstr(lib.al_stats_level_names[i]): i for i in range(lib.AL_STATS_NR)}
DEFAULT_STATS = "lite"
# The level names in the library's order (lite, off, full), as messages list them.
STATS_LEVEL_NAMES = sorted(STATS_LEVELS, key=STATS_LEVELS.get)
MAX_PRODUCERS = lib.AL_MAX_PRODUCERS
_U64_MAX = (1 << 64) - 1


def as_list(v, what):
    """Lists, tuples, ranges and 1-D arrays are sweeps; anything else one value."""
    if isinstance(v, (list, tuple, range)) or (hasattr(v, "ndim") and getattr(v, "ndim") == 1):
        vals = list(v)
        if not vals:
            raise errors.InvalidArgument("%s: an empty list sweeps nothing" % what)
        return vals
    return [v]


def is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def int_in(name, v, lo, hi=None):
    if not is_int(v):
        raise errors.ParameterTypeError("%s must be an int, not %r" % (name, errors.Echo(v)),
                                        name=name, value=v)
    v = int(v)
    if v < lo or (hi is not None and v > hi):
        rng = "[%d, %s]" % (lo, hi if hi is not None and hi < _U64_MAX else "2^64-1")
        raise errors.ParameterRangeError("%s=%d is out of range %s" % (name, v, rng),
                                         name=name, value=v, min=lo, max=hi)
    return v


def _bool(name, v):
    if not isinstance(v, bool):
        raise errors.ParameterTypeError("%s must be True or False, not %r"
                                        % (name, errors.Echo(v)),
                                        name=name, value=v)
    return v


def _choice(kind, v, table):
    if not isinstance(v, str) or v not in table:
        raise errors.UnknownNameError.make(kind, v, list(table))
    return v


# How much to measure, as pyperf's --fast / default / --rigorous: runs per
# cell, seconds in each run's measured phase, untimed cycles before it.
# 5 runs is what a paired t interval needs to see a 1.3x effect at 5% CV in
# every try (3 runs miss it about one time in five); 100 ms is pyperf's
# minimum for one value.
EFFORT = {
    "quick": {"runs": 3, "duration": 0.1, "warmup_cycles": 50},
    "normal": {"runs": 5, "duration": 0.25, "warmup_cycles": 100},
    "rigorous": {"runs": 10, "duration": 0.5, "warmup_cycles": 200},
}
MIN_PHASE_S = 0.1  # a measured phase shorter than this is flagged under tables
STEAL_RERUNS = 2  # an A/B round disturbed by steal time is run again at most this many times
# The longest duration, watchdog or sampling interval in seconds (about 31
# years): the engine adds them to a nanosecond clock in 64 bits, and a
# larger value would wrap its deadline, ending the phase at once.
MAX_SECONDS = 1e9
MAX_RUNS = 1000000  # runs per cell: each builds an allocator, a larger count never ends


def effort_defaults(effort, runs=None, duration=None, warmup_cycles=None):
    """(runs, duration, warmup_cycles): the values given, else the effort's."""
    if effort not in EFFORT:
        raise errors.UnknownNameError.make("effort", effort, list(EFFORT))
    e = EFFORT[effort]
    return (e["runs"] if runs is None else runs,
            e["duration"] if duration is None else duration,
            e["warmup_cycles"] if warmup_cycles is None else warmup_cycles)


def plan(workload, policy, runs=None, producers=None, cpu="auto", timing=None,
         warmup_cycles=None, cycles=None, duration=None, seed=1, histogram=False,
         mem_sample=0.01, watchdog=30.0, effort="normal", processes=False, isolate=None,
         check=None, stats=DEFAULT_STATS, realtime=False, **params):
    """Validate a run() request and return (settings, tasks) without running.

    effort: "quick", "normal" or "rigorous" sets runs, duration and
    warmup_cycles where they are not given (EFFORT). processes=True runs
    every run in a fresh child process (its own heap and memory layout, as
    pyperf's worker processes). watchdog: seconds without progress after
    which a run ends with RunStalled (0 = never).

    isolate=True runs every run in a freshly spawned child process that loads
    the plugin layers by path, so that a plugin that crashes ends the child,
    not this process: the run raises RunError naming the policy, the plugin
    layer(s) and the signal. None (the default) isolates every run when any
    policy has a plugin layer; False runs in this process. Isolation changes
    no result. check=True wraps each plugin layer in the engine's pointer
    checks (every object it hands out aligned to its declared alignment and
    not live already; a violation fails the run naming the layer); None
    (the default) checks whenever runs are isolated. The checks take a lock
    per operation of a plugin layer: pass check=False for timing figures.

    ``tasks`` is a list of plain, picklable dicts, one per grid point, in
    grid order; run_point(task) runs one of them.

    duration bounds every run's warmup and measured phase (seconds each),
    also with ``cycles``: a run it cuts short is marked truncated (its
    figures are not those of the loop asked for; verdicts leave it out).
    With cycles and no duration, the cycles alone end the phase.

    realtime=True: workers SCHED_FIFO, with fewer producers than usable CPUs
    (else ParameterRangeError), where permitted (else RunError, EPERM).

    cpu="simulated": model CPUs in virtual time (predictions): measure.sim.

    The replay workload takes ``trace`` (a trace file's path or an
    alloclab.Trace); its producers are the trace's threads (another value
    is refused), each run is one pass of the trace, and duration is a time
    limit (REPLAY_TIME_LIMIT by default): a pass it cuts short is truncated.
    """
    trace, sim = None, {k: params.pop(k) for k in _sim.OPTIONS if k in params}
    if schema.workload(workload).name == "replay":
        trace, producers, duration, warmup_cycles = _replay_options(
            params, producers, cycles, duration, warmup_cycles)
    wl, opts = _options(workload, runs, warmup_cycles, cycles, duration, seed, histogram,
                        mem_sample, watchdog, effort, processes, timing, realtime)
    policies = _policies(wl, policy)
    isolate, check, plugins = _isolation(policies, processes, isolate, check)
    axes = _axes(wl, 1 if producers is None else producers, cpu, opts["timing"], params)
    axes["stats"] = _stats_levels(stats)
    tasks = _tasks(wl, policies, axes, opts, isolate, check, plugins)
    if trace is not None:
        _replay_tasks(wl, tasks, trace, policies)
    simulated = _checked_cells(wl, tasks, policies, sim)
    settings = _settings(wl, policies, axes, opts, isolate, check, simulated)
    if trace is not None:
        settings["trace"] = {k: v for k, v in trace.items() if k not in ("key", "label")}
    return settings, tasks


_CALIBRATIONS = {}  # policies -> the Calibration made for them in this process


def _timed(tasks):
    """Whether a cell is timed on this machine's CPUs: simulated cells only
    share no timing, so they may run side by side."""
    return not all(t["cpu"] == "simulated" for t in tasks)


def _checked_cells(wl, tasks, policies, sim):
    """The engine's own checks of every cell, before anything runs: of the
    measured cells before a calibration (a minute or more) is made for the
    simulated ones, which the engine checks with their cost table. Returns
    _simulated's record of the simulation."""
    _check_cells(wl, [t for t in tasks if t["cpu"] != "simulated"], policies)
    simulated = _simulated(tasks, policies, **sim)
    _check_cells(wl, [t for t in tasks if t["cpu"] == "simulated"], policies)
    return simulated


def _check_cells(wl, tasks, policies):
    by_name = {pol.name: pol for pol in policies}
    for task in tasks:
        _check_cell(wl, task, by_name[task["policy"]])


def _simulated(tasks, policies, calibration=None, timeline=0, line_transfer=None,
               lines_per_handoff=None, band=True, jitter=None):
    """What the settings record of the simulation ({"simulated": ...}), its
    Calibration set in every simulated task (task["sim"]); None when no task
    is simulated."""
    sim_tasks = [t for t in tasks if t["cpu"] == "simulated"]
    if not sim_tasks:
        if calibration is not None or timeline:
            raise errors.InvalidArgument(
                "calibration and timeline apply to cpu='simulated' only")
        return None
    if any(t.get("stats") == "off" for t in sim_tasks):
        raise errors.InvalidArgument(
            "stats='off' cannot run on simulated CPUs: they charge each event the layers "
            "count its calibrated cost, and at 'off' nothing is counted, so the prediction "
            "would leave those costs out; use stats='lite' (the default) or 'full'",
            value="off", valid=("lite", "full"))
    timeline = int_in("timeline", timeline, 0, 10_000_000)
    for pol in policies:
        if peers.needed(pol) is not None:
            raise errors.SimulationError(
                "%s runs in a process of its own under LD_PRELOAD: its code cannot run on "
                "simulated CPUs; simulate alloclab's layers, measure the peer" % pol.name)
        _warn_unmodelled(pol)
    if calibration is None:
        key = tuple(sorted(p.name for p in policies))
        if key not in _CALIBRATIONS:
            with warnings.catch_warnings():  # said below, as the override leaves them
                warnings.simplefilter("ignore", _sim.SuspectCalibrationWarning)
                _CALIBRATIONS[key] = _sim.calibrate([p.name for p in policies])
            for line in _sim.calibration_warnings(_CALIBRATIONS[key],
                                                  line_given=line_transfer is not None):
                warnings.warn(_sim.SuspectCalibrationWarning(line), stacklevel=4)
        cal = _CALIBRATIONS[key]
    else:
        cal = _sim.as_calibration(calibration)
        _warn_uncalibrated(cal, policies)
    _sim.check_option("line_transfer", line_transfer)
    _sim.check_option("lines_per_handoff", lines_per_handoff)
    _sim.check_option("jitter", jitter, 4)
    cal = cal.with_(line_transfer, lines_per_handoff, jitter)
    band = _bool("band", band)
    cid = hashlib.sha1(json.dumps(cal.to_dict(), sort_keys=True).encode()).hexdigest()[:12]
    for t in sim_tasks:
        t["sim"] = dict(cal.task_options(timeline, t["policy"]), band=band, id=cid)
        t["processes"] = t["isolate"] = False  # one thread of this process, nothing shared
    return {"simulated": {"calibration": cal.to_dict(), "timeline": timeline}}


def _warn_unmodelled(pol):
    """An UnmodelledLocksWarning, before anything runs, for a policy with a
    layer whose locks the simulation cannot see."""
    import warnings

    for name in _sim.unmodelled_layers(pol):
        warnings.warn(_sim.UnmodelledLocksWarning(
            "%s: its %s layer runs glibc's malloc, whose locks and shared memory are not "
            "the simulation's: none of its waits or line transfers is predicted, so its "
            "times on simulated CPUs do not grow with their number; measure it "
            "(--cpu pinned) instead" % (pol.name, name)), stacklevel=4)


def _warn_uncalibrated(cal, policies):
    """An UncalibratedPolicyWarning, before anything runs, for each policy the
    given calibration did not run."""
    import warnings

    for name in _sim.uncalibrated_policies(cal, uniq(p.name for p in policies)):
        warnings.warn(_sim.UncalibratedPolicyWarning(
            "the calibration has no %s (it ran %s): its factor is the geometric mean of "
            "theirs and the terms it never saw cost 0 ns, so its times are not calibrated "
            "for it, and where its path has no sync point its simulated clock barely moves "
            "(a run bounded by its duration may take minutes); calibrate on it (alloclab "
            "sim calibrate --policy %s) or give cycles" % (
                name, ", ".join(sorted(cal.scales)), name)), stacklevel=4)


# A replay's default time limit per run (seconds): a pass normally ends
# long before; the limit only ends a replay that would run on for too long.
REPLAY_TIME_LIMIT = 600.0


def _replay_options(params, producers, cycles, duration, warmup_cycles):
    """The replay workload's trace ref (popped from params) and its producers,
    duration and warmup: a pass is the unit of a run, so cycles do not apply,
    the duration is a time limit and there is no warmup."""
    if "trace" not in params:
        raise errors.InvalidArgument("workload replay needs trace=FILE (a trace recorded "
                                     "by `alloclab record`) or an alloclab.Trace")
    value = params.pop("trace")
    if isinstance(value, (list, tuple)):
        raise errors.InvalidArgument("workload replay takes one trace per run, not a list: "
                                     "run each trace on its own and compare the results")
    ref = replay.resolve(value)
    if cycles is not None:
        raise errors.InvalidArgument(
            "workload replay runs one pass of the trace per run: cycles=%r does not apply "
            "(duration is a time limit)" % (cycles,))
    nthreads = ref["threads"]
    if nthreads > MAX_PRODUCERS:
        raise errors.InvalidArgument(
            "the trace has %d threads, one producer each, and a run takes at most %d "
            "producers" % (nthreads, MAX_PRODUCERS))
    for p in as_list(producers, "producers") if producers is not None else ():
        if p != nthreads:
            raise errors.ParameterRangeError(
                "producers=%r, but the trace has %d threads and replay runs one producer "
                "per thread: leave producers out (or pass %d)" % (p, nthreads, nthreads),
                name="producers", value=p, min=nthreads, max=nthreads)
    return (ref, nthreads, REPLAY_TIME_LIMIT if duration is None else duration,
            0 if warmup_cycles is None else warmup_cycles)


def _replay_tasks(wl, tasks, ref, policies):
    """Every task carries the trace's ref (its handle is found where the run
    happens); a run in a child process gets a ref with a file. Refuses touch
    over a stack that hands out one block per CPU (the objects would overlap)."""
    idx = [p.name for p in wl.params].index("trace")
    by_name = {pol.name: pol for pol in policies}
    child = {}
    for task in tasks:
        pol = by_name[task["policy"]]
        if task["point"].get("touch", "none") != "none" and pol.shared_layer is not None:
            raise errors.UnsupportedCombination(
                "workload replay with touch=%s writes what it allocates, but layer %s of "
                "policy %r hands out one block per CPU: use touch=none, or a real allocator"
                % (task["point"]["touch"], pol.shared_layer, pol.name))
        in_child = task["isolate"] or task["processes"] or peers.needed(pol) is not None
        if in_child and "ref" not in child:
            child["ref"] = replay.for_child(ref)
        task["trace"] = child["ref"] if in_child else ref
        task["trace_index"] = idx
        task["point"]["trace"] = ref["label"]


def _options(workload, runs, warmup_cycles, cycles, duration, seed, histogram, mem_sample,
             watchdog, effort, processes, timing, realtime=False):
    """The options every cell shares, validated: (workload schema, {name: value})."""
    duration_given = duration is not None
    runs, duration, warmup_cycles = effort_defaults(effort, runs, duration, warmup_cycles)
    if not isinstance(processes, bool):
        raise errors.ParameterTypeError("processes must be True or False, not %r"
                                        % (processes,), name="processes", value=processes)
    wl = schema.workload(workload)
    histogram, mem_sample_ns = _measure_options(histogram, mem_sample)
    watchdog_ns = _watchdog_ns(watchdog)
    if timing is None:  # histograms time every operation: per_op_sum
        timing = "per_op_sum" if histogram else "batch"
    runs = int_in("runs", runs, 1, MAX_RUNS)
    warmup_cycles = int_in("warmup_cycles", warmup_cycles, 0, _U64_MAX)
    if cycles is not None:
        cycles = int_in("cycles", cycles, 1, _U64_MAX)
    duration, duration_ns = _duration(duration, cycles is not None and not duration_given)
    return wl, {"effort": effort, "processes": processes, "runs": runs,
                "warmup_cycles": warmup_cycles, "cycles": cycles, "duration": duration,
                "duration_ns": duration_ns, "seed": int_in("seed", seed, 0, _U64_MAX),
                "histogram": histogram, "mem_sample_ns": mem_sample_ns,
                "watchdog_ns": watchdog_ns, "timing": timing,
                "realtime": _bool("realtime", realtime)}


def _duration(duration, cycles_end_it):
    """(duration in seconds or None, in ns or 0): None when the cycles alone
    end the phase (cycles given, duration not)."""
    if isinstance(duration, bool) or not isinstance(duration, numbers.Real):
        raise errors.ParameterTypeError("duration must be a number of seconds, not %r"
                                        % (duration,), name="duration", value=duration)
    duration = float(duration)
    if not math.isfinite(duration) or duration <= 0 or duration > MAX_SECONDS:
        raise errors.ParameterRangeError(
            "duration=%r is out of range: it must be a positive number of seconds, at most "
            "%g" % (duration, MAX_SECONDS), name="duration", value=duration, min=0,
            max=MAX_SECONDS)
    if cycles_end_it:
        return None, 0
    return duration, max(1, int(round(duration * 1e9)))


class DuplicatePolicyWarning(UserWarning):
    """Two policies of one request are the same stack under two names (a
    preset and its spec): it runs once, under the first name."""


def _policies(wl, policy):
    """The policies of a request, deduplicated (a stack given twice under
    two names warns: DuplicatePolicyWarning), each available (its peer
    installed: PeerUnavailable with the apt-get line) and able to serve the
    workload."""
    import warnings

    policies = []
    for pol in (Policy(p) for p in as_list(policy, "policy")):
        same = next((q for q in policies if q == pol), None)
        if same is None:
            policies.append(pol)
        elif same.name != pol.name:
            warnings.warn(DuplicatePolicyWarning(
                "policy %r is the same stack as %r (%s): it runs once, as %r" % (
                    pol.name, same.name, str(pol), same.name)), stacklevel=4)
    for pol in policies:
        peers.needed(pol)
        check_compatible(wl, pol)
    return policies


def _stats_levels(stats):
    """The stats level(s) asked for, validated: InvalidArgument naming the bad
    value and the valid ones."""
    out = []
    for v in as_list(stats, "stats"):
        if not isinstance(v, str) or v not in STATS_LEVELS:
            raise errors.InvalidArgument(
                "stats=%r is not a stats level; valid levels: %s" % (
                    errors.Echo(v), ", ".join(STATS_LEVEL_NAMES)))
        if v not in out:
            out.append(v)
    return out


def _axes(wl, producers, cpu, timing, params):
    """Every axis of the grid but the policy, validated: producers, cpu,
    timing and each workload parameter (by name, dashes or underscores)."""
    axes = {"producers": uniq([int_in("producers", p, 1, MAX_PRODUCERS)
                                  for p in as_list(producers, "producers")]),
            "cpu": uniq([_choice("cpu mode", c, CPU_MODES) for c in as_list(cpu, "cpu")]),
            "timing": uniq([_choice("timing", t, TIMINGS)
                               for t in as_list(timing, "timing")])}
    given = {}
    for k, v in params.items():
        name = k.replace("-", "_")
        p = wl.param(name)  # UnknownNameError listing the valid ones
        if name in given:
            raise errors.InvalidArgument("parameter %s given twice" % name)
        given[name] = uniq([p.parse(x) for x in as_list(v, name)])
    if wl.name == "nmi":
        _check_nmi_rates(given.get("rate", ()))
    axes["wparams"] = [given.get(p.name, [p.default]) for p in wl.params]
    return axes


def _tasks(wl, policies, axes, opts, isolate, check, plugins):
    """One plain, picklable dict per grid point, policy-major, in grid order."""
    parsed = {pol.name: pol.parsed() for pol in policies}  # the one parse, shared
    tasks = []
    for pol, *rest in itertools.product(policies, *axes["wparams"], axes["producers"],
                                        axes["timing"], axes["cpu"], axes["stats"]):
        wraw, (nprod, tim, cpu_mode, level) = rest[:len(wl.params)], rest[len(wl.params):]
        point = {"workload": wl.name, "policy": pol.name}
        point.update({p.name: p.value(v) for p, v in zip(wl.params, wraw)})
        point.update({"producers": nprod, "timing": tim, "cpu": cpu_mode, "stats": level})
        tasks.append({
            "point": point, "workload": wl.name, "policy": pol.name, "parsed": parsed[pol.name],
            "wparams": list(wraw),
            "producers": nprod, "cpu": cpu_mode, "timing": tim, "stats": level,
            "warmup_cycles": opts["warmup_cycles"], "cycles": opts["cycles"] or 0,
            "duration_ns": opts["duration_ns"], "seed": opts["seed"], "runs": opts["runs"],
            "histogram": opts["histogram"], "mem_sample_ns": opts["mem_sample_ns"],
            "watchdog_ns": opts["watchdog_ns"], "processes": opts["processes"],
            "isolate": isolate, "realtime": opts["realtime"],
            # layers whose objects the engine checks (bit i: layer i, top first)
            "check_mask": sum(1 << i for i, n in enumerate(pol.names)
                              if check and n in plugins[pol.name]),
            "plugins": [src for n, src in plugins[pol.name].items()],
        })
    return tasks


def _settings(wl, policies, axes, opts, isolate, check, extra=None):
    """What a Result records of the request (metadata["run"])."""
    out = {"workload": wl.name, **(extra or {})}
    out.update({k: opts[k] for k in ("effort", "processes")})
    out.update(isolate=isolate, check=check)
    out.update({k: opts[k] for k in ("runs", "warmup_cycles", "cycles", "duration", "seed",
                                     "histogram", "realtime")})
    out["mem_sample"] = opts["mem_sample_ns"] / 1e9
    out["sweep"] = {
        "policy": [p.name for p in policies],
        **{p.name: [p.value(v) for v in vals] for p, vals in zip(wl.params, axes["wparams"])},
        "producers": axes["producers"],
        "timing": axes["timing"],
        "cpu": axes["cpu"],
        "stats": axes["stats"],
    }
    return out


def _check_cell(wl, task, pol):
    """The engine decides whether it would run a cell (al_run_check, what
    al_run checks before it builds anything); this words its refusal."""
    fault = ffi.new("int *")
    err = ffi.new("char[]", 256)
    keep = []
    if lib.al_run_check(_config(task, pol=pol, keep=keep), fault, err, 256):
        raise _cell_refusal(wl, task, pol, fault[0], cstr(err))


def _cell_refusal(wl, task, pol, fault, why):
    """The exception for a cell al_run_check refused with ``fault``."""
    nprod = task["producers"]
    if fault == lib.AL_RUN_ONE_PRODUCER:
        return errors.ParameterRangeError(
            "workload %s runs exactly one producer (as the benchmark it models), "
            "not producers=%d" % (wl.name, nprod), name="producers", value=nprod, min=1, max=1)
    if fault == lib.AL_RUN_PINNED:
        usable = lib.al_cpus_usable()
        return errors.ParameterRangeError(
            "cpu=pinned needs producers <= usable CPUs (%d), not producers=%d; "
            "use cpu=\"virtual\" or \"auto\"" % (usable, nprod),
            name="producers", value=nprod, min=1, max=usable)
    if fault in (lib.AL_RUN_REALTIME, lib.AL_RUN_REALTIME_PERM):
        return _realtime_refusal(fault, nprod, why)
    if fault == lib.AL_RUN_HISTOGRAM:
        return errors.InvalidArgument(
            "histogram=True times every operation with its own clock pair, which is "
            "timing=\"per_op_sum\", not \"batch\": leave timing out or pass "
            "timing=\"per_op_sum\"")
    if fault == lib.AL_RUN_SIZE:
        return _size_refusal(wl, task, pol)
    if fault == lib.AL_RUN_WPARAMS:  # the engine's words: "<workload>: <why>"
        return errors.InvalidArgument("workload %s" % why)
    return errors.InvalidArgument("workload %s: %s" % (wl.name, why))


def _realtime_refusal(fault, nprod, why):
    """realtime=True refused: too many producers, or not permitted here."""
    if fault == lib.AL_RUN_REALTIME:
        usable = lib.al_cpus_usable()
        if usable < 2:  # no producer count fits: say so rather than "producers <= 0"
            return errors.ParameterRangeError(
                "realtime=True needs at least 2 usable CPUs (the main thread and the "
                "watchdog keep one), this process has %d: leave realtime off" % usable,
                name="producers", value=nprod, min=1, max=max(usable - 1, 0))
        return errors.ParameterRangeError(
            "realtime=True needs fewer producers than usable CPUs (%d), not producers=%d: "
            "the main thread and the watchdog keep a CPU; use producers <= %d or leave "
            "realtime off" % (usable, nprod, usable - 1),
            name="producers", value=nprod, min=1, max=usable - 1)
    return errors.RunError(why, code=-errno.EPERM)


def _size_refusal(wl, task, pol):
    """A request size below 1 or above the largest the policy accepts."""
    idx = [p.name for p in wl.params].index(wl.size_param)
    sp, size = wl.params[idx], task["wparams"][idx]
    if size < 1:
        return errors.ParameterRangeError(
            "%s=%s is not a valid request: sizes start at 1" % (sp.name, sp.format(size)),
            name=sp.name, value=size, min=1, max=None)
    mx = pol.max_size
    return errors.ParameterRangeError(
        "%s=%s (%d bytes) is above the largest request policy %r accepts "
        "(max %s = %d bytes)" % (sp.name, sp.format(size), size, str(pol),
                                 schema.format_size(mx), mx),
        name=sp.name, value=size, min=1, max=mx)


def _isolation(policies, processes, isolate, check):
    """Validate isolate and check; returns (isolate, check, {policy name:
    {plugin layer: what a child loads}}). A child process must be able to
    load every plugin layer it runs by path."""

    for name, v in (("isolate", isolate), ("check", check)):
        if v is not None and not isinstance(v, bool):
            raise errors.ParameterTypeError("%s must be True, False or None (the default), "
                                            "not %r" % (name, errors.Echo(v)), name=name, value=v)
    layers = {pol.name: plugin.plugin_layers(pol) for pol in policies}
    if isolate is None:
        isolate = any(layers.values())
    if check is None:
        check = isolate
    out = {}
    for pol in policies:
        in_child = isolate or processes or peers.needed(pol) is not None
        why = ("an isolated run's child process" if isolate else "a run's child process")
        out[pol.name] = {n: _plugin_source(n, in_child, why) for n in layers[pol.name]}
    return isolate, check, out


def _plugin_source(name, in_child, why):
    """What a process loads to get plugin layer ``name`` (plugin.source): a
    child process must have its shared object (else PluginError); a run in
    this process takes it when there is one, for an executor's worker
    process to load, else only the name (it runs where it was registered)."""
    try:
        return plugin.source(name, why)
    except errors.PluginError:
        if in_child:
            raise
        return {"name": name}


# nmi: rates up to this many signals per second need no measurement
_NMI_SAFE_RATE = 20000


def _check_nmi_rates(rates):
    """Refuse nmi timer rates this machine cannot deliver (the workers would
    handle signals and nothing else until the watchdog fired)."""
    high = [r for r in rates if r > _NMI_SAFE_RATE]
    if not high:
        return
    cost = ffi.new("double *")
    mx = lib.al_nmi_max_rate(cost)  # measured once per process (~0.1 s)
    if mx <= 0:
        return
    for r in high:
        if r > mx:
            raise errors.ParameterRangeError(
                "rate=%d is more timer signals than this machine delivers: one costs ~%.2g us "
                "of CPU here, so at most %d/s per worker (then signals take 80%% of its "
                "time); use rate <= %d" % (r, cost[0] / 1e3, int(mx), int(mx)),
                name="rate", value=r, min=0, max=int(mx))


def _seconds(name, value, least, zero):
    """``value`` (seconds) as a float: 0 (``zero`` says what that means) or
    ``least`` to MAX_SECONDS; ParameterTypeError / ParameterRangeError naming
    ``name`` and the value otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise errors.ParameterTypeError("%s must be a number of seconds, not %r"
                                        % (name, value), name=name, value=value)
    value = float(value)
    if not math.isfinite(value) or value < 0 or 0 < value < least or value > MAX_SECONDS:
        raise errors.ParameterRangeError(
            "%s=%r is out of range: 0 (%s) or %g to %g seconds"
            % (name, value, zero, least, MAX_SECONDS), name=name, value=value, min=0,
            max=MAX_SECONDS)
    return value


def check_watchdog(watchdog):
    """Seconds as a float (0: off), or ParameterTypeError / ParameterRangeError
    naming the value: 0, or 0.001 to MAX_SECONDS (run's and the shim's)."""
    return _seconds("watchdog", watchdog, 1e-3, "off")


def _watchdog_ns(watchdog):
    """Validate watchdog (seconds, 0 = off); in nanoseconds."""
    return int(round(check_watchdog(watchdog) * 1e9))


def _measure_options(histogram, mem_sample):
    """Validate histogram (bool) and mem_sample (seconds, 0 = the phase's ends only)."""
    if not isinstance(histogram, bool):
        raise errors.ParameterTypeError("histogram must be True or False, not %r" % (histogram,),
                                        name="histogram", value=histogram)
    mem_sample = _seconds("mem_sample", mem_sample, 1e-4, "sample at the phase's ends only")
    return histogram, int(round(mem_sample * 1e9))


# How long the waiting thread stays in C at a time: Python runs its signal
# handlers (Ctrl-C: KeyboardInterrupt) between slices.
_WAIT_SLICE_NS = 50 * 1000 * 1000


def _wait_stopped(h):
    """Wait for a stopped run to end. The engine bounds it (workers that do
    not stop within its grace are left running, the allocator leaked), so
    further Ctrl-Cs while it finishes are not needed and are absorbed."""
    while True:
        try:
            if lib.al_run_wait(h, _WAIT_SLICE_NS) != -errno.EINPROGRESS:
                return
        except KeyboardInterrupt:
            pass


# What abandoned runs' threads may still read (their configurations and
# the buffers these point to), kept for the life of the process.
_ABANDONED = []


def _abandon(objs):
    """Keep ``objs`` alive even through the interpreter's exit, which clears
    module globals while the abandoned threads may still run: one reference
    more than Python will ever drop."""
    import ctypes
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(objs))
    _ABANDONED.append(objs)


def _run_c(cfg, res, on_phase=None, keep=()):
    """lib.al_run(cfg, res), waiting in slices with the GIL released: a
    signal's Python handler runs within a slice, and an exception it raises
    (KeyboardInterrupt) stops the run, waits until it has ended, and
    propagates. on_phase(phase) is called as the run enters each phase
    (lib.AL_RUN_WARMUP, AL_RUN_MEASURED, ...). When the run's threads were
    left running (its watchdog), cfg, res and ``keep`` (what cfg points to)
    are never freed: those threads may still use them."""
    hp = ffi.new("struct al_run **")
    rc = lib.al_run_start(cfg, res, hp)
    if rc:
        return rc
    h = hp[0]
    try:
        seen = lib.AL_RUN_SETUP
        while True:
            rc = lib.al_run_wait(h, _WAIT_SLICE_NS)
            if rc != -errno.EINPROGRESS:
                return rc
            if on_phase is not None:
                phase = lib.al_run_phase(h, ffi.NULL)
                if phase != seen:
                    seen = phase
                    on_phase(phase)
    except BaseException:
        lib.al_run_stop(h)
        _wait_stopped(h)
        raise
    finally:
        if lib.al_run_wait(h, 0) == -errno.EINPROGRESS:  # left by another exception
            lib.al_run_stop(h)
            _wait_stopped(h)
        if lib.al_run_abandoned(h):  # asked once the run has ended, however
            _abandon((cfg, res, keep))
        lib.al_run_free(h)


def run_once(task, run_index=0, in_child=False, on_phase=None, calibrate=False):
    """One al_run() call for a task dict; returns the raw result as plain data.
    A peer allocator's task runs in a child process under LD_PRELOAD.
    Ctrl-C (KeyboardInterrupt) stops the run within about a second and
    propagates; on_phase(phase) is told when the run enters a phase."""
    t_start = time.time()  # wall clock: pairs the interleaved runs of an A/B comparison
    pol = task_policy(task)
    simulated = task["cpu"] == "simulated"
    if not in_child and not simulated:
        peer = peers.needed(pol)
        if peer is not None or task.get("processes") or task.get("isolate"):
            raw = peers.run_in_child(task, run_index, peer)
            raw["t_start"] = t_start
            return raw
        # An executor's worker process may lack the plugin layers the task's
        # process registered: load them by path, as a child does (each one
        # already here costs one lookup).
        plugin.load([s for s in task.get("plugins") or () if s.get("path")])
    if simulated:  # one thread, nothing shared: any process can run it
        plugin.load([s for s in task.get("plugins") or () if s.get("path")])
    keep = []
    cfg = _config(task, run_index, pol, keep=keep, calibrate=calibrate)
    res = ffi.new("struct al_run_result *")
    rc = _run_c(cfg, res, on_phase, keep)
    if rc:
        raise _run_error(rc, res, task, run_index)
    raw = _raw_result(res, cfg, task, t_start)
    if simulated:
        raw["sim"] = _sim.raw_sim(res, keep[0], keep[1], calibrate)
        raw["sim"]["calibration_id"] = task["sim"].get("id")
        raw["sim"]["scale"] = list(task["sim"].get("scale") or ())  # this policy's factors
        raw["sim"]["borrowed_scale"] = bool(task["sim"].get("borrowed_scale"))
        if not calibrate and task["sim"].get("band", True):
            raw["sim"]["band"] = _sim_band(task, run_index, pol)
    return raw


def _sim_band(task, run_index, pol):
    """The same simulated run with the line transfer cost halved and
    doubled: {"line_transfer_ns": [half, double], metric: [at half, at
    double]} for the per-op times, so a verdict can see whether a direction
    holds across the band."""
    out = {"line_transfer_ns": []}
    for f in _sim.BAND:
        t = dict(task, sim=dict(task["sim"], line_transfer_ns=task["sim"]["line_transfer_ns"] * f,
                                timeline=0))
        keep = []
        cfg = _config(t, run_index, pol, keep=keep)
        res = ffi.new("struct al_run_result *")
        rc = _run_c(cfg, res, keep=keep)
        if rc:
            raise _run_error(rc, res, t, run_index)
        out["line_transfer_ns"].append(t["sim"]["line_transfer_ns"])
        for k, ops in (("alloc_ns", res.alloc_ops), ("free_ns", res.free_ops)):
            out.setdefault(k, []).append(float(getattr(res, k)) / ops if ops else None)
    return out


def task_policy(task):
    """The Policy a task runs, from the form plan() parsed (task["parsed"]),
    so a run parses no spec text; a task made without one is parsed here."""
    parsed = task.get("parsed")
    return Policy(task["policy"]) if parsed is None else Policy.from_parsed(parsed)


def task_policies(tasks):
    """The distinct Policies of ``tasks``, in order (task_policy of each)."""
    return [task_policy(t) for t in {t["policy"]: t for t in tasks}.values()]


def _config(task, run_index=0, pol=None, keep=None, calibrate=False):
    """The struct al_run_config of run ``run_index`` of a task (``pol``: the
    task's Policy, when the caller has it). A simulated task's buffers (its
    cost table, its timeline) are appended to ``keep``, which must live as
    long as the config is used."""
    wl = lib.al_workload_find(task["workload"].encode())
    if wl == ffi.NULL:  # pragma: no cover - validated in plan()
        raise errors.UnknownNameError.make("workload", task["workload"], list(schema.workloads()))
    cfg = ffi.new("struct al_run_config *")
    cfg.workload = wl
    for i, v in enumerate(task["wparams"]):
        cfg.wparams[i] = v
    (pol or task_policy(task)).fill_spec(cfg.stack)
    cfg.stack.check = task.get("check_mask", 0)
    if task.get("trace") is not None:  # replay: the trace's handle in this process
        cfg.wparams[task["trace_index"]] = replay.handle(task["trace"])
    cfg.producers = task["producers"]
    cfg.cpu_mode = CPU_MODES[task["cpu"]]
    cfg.timing = TIMINGS[task["timing"]]
    cfg.warmup_cycles = task["warmup_cycles"]
    cfg.cycles = task["cycles"]
    cfg.duration_ns = task["duration_ns"]
    cfg.seed = (task["seed"] + run_index) & _U64_MAX
    cfg.histogram = 1 if task.get("histogram") else 0
    cfg.mem_sample_ns = task.get("mem_sample_ns", 0)
    cfg.watchdog_ns = task.get("watchdog_ns", 0)
    cfg.stats_level = STATS_LEVELS[task.get("stats", DEFAULT_STATS)]
    cfg.realtime = 1 if task.get("realtime") else 0
    if task["cpu"] == "simulated":
        keep.extend(_sim.fill_config(cfg, task, run_index, calibrate))
    return cfg


def _arena_hint(policy):
    """For an exhausted run: the layers whose memory an arena_limit bounds,
    with the limit they ran with and how to raise it ("" for none). Every
    CPU that allocates grows chunks of its own, so many producers fill an
    arena with little memory live."""
    try:
        pol = Policy(policy)
    except errors.AlloclabError:
        return ""
    out, first = [], None
    for i, name in enumerate(pol.names):
        limit, chunk = pol.params(i).get("arena_limit"), pol.params(i).get("chunk_size")
        if isinstance(limit, int):
            first = first or name
            out.append("layer %s's arena is bounded by arena_limit=%dM%s" % (
                name, limit >> 20, "" if not isinstance(chunk, int) else
                ", and each CPU that allocates grows %dK chunks of its own" % (chunk >> 10)))
    if not out:
        return ""
    return " (%s: give a larger one, e.g. %s(arena_limit=4G))" % ("; ".join(out), first)


def _run_error(rc, res, task, run_index):
    """The exception for a run that failed with ``rc``, naming the run."""
    what = "run %d of %s on %r (%s)" % (
        run_index + 1, task["workload"], task["policy"],
        ", ".join("%s=%s" % (k, v) for k, v in task["point"].items()
                  if k not in ("workload", "policy")))
    detail = cstr(res.error)
    if -rc == errno.ENOMEM:
        return error(rc, what, (detail or "out of memory") + _arena_hint(task["policy"]),
                     cls=errors.AllocatorExhausted)
    if -rc == errno.ETIMEDOUT and detail.startswith("watchdog"):
        return error(rc, what, detail, cls=errors.RunStalled)
    return error(rc, what, detail, cls=errors.RunError)


def _raw_layers(res):
    """Each layer's counters, gauges, bytes held and leaked, top first. The
    library reports only what the run's stats level measured (counters.h), so
    what it left out is absent here, not 0."""
    layers = []
    for i in range(min(res.nlayers, lib.AL_MAX_LAYERS)):
        st = res.layers[i]
        name = cstr(st.layer)
        stats = [(cstr(st.v[j].name), int(st.v[j].value), bool(st.v[j].flags & lib.AL_STAT_GAUGE))
                 for j in range(min(st.n, lib.AL_STATS_MAX))]
        layers.append({
            "layer": name,
            "bytes_held": int(st.bytes_held),
            "leaked": int(res.leaked[i]),
            "counters": [(n, v) for n, v, _ in stats],
            "gauges": [n for n, _, g in stats if g],
        })
    return layers


def _raw_result(res, cfg, task, t_start):
    """A finished run's struct al_run_result as plain data."""
    return {
        "t_start": t_start,
        "pid": os.getpid(),
        "seed": int(cfg.seed),
        "cpu_mode": CPU_MODE_NAMES.get(res.cpu_mode, str(res.cpu_mode)),
        **{k: int(getattr(res, k)) for k in (
            "ncpu_model", "ncpu_concurrent", "ncpu_usable", "threads_per_core", "clock_tsc")},
        **{k: float(getattr(res, k)) for k in ("ticks_per_ns", "timer_overhead_ns")},
        **{k: int(getattr(res, k)) for k in ("cycles", "alloc_ops", "free_ops", "cross_frees")},
        **{k: float(getattr(res, k)) for k in ("alloc_ns", "free_ns", "elapsed_ns", "steal_pct")},
        # workers whose measured phase the duration cut short (0 = whole)
        "truncated": int(res.truncated),
        "layers": _raw_layers(res),
        **_raw_measures(res, task),
        # Scheduling in the measured phase (machine.run_metrics reads it).
        "sched": {
            "worker_nvcsw": int(res.worker_nvcsw),
            "worker_nivcsw": int(res.worker_nivcsw),
            "engine_wakeups": int(res.engine_wakeups),
            "engine_wakeups_on_worker_cpus": int(res.engine_wakeups_on_worker_cpus),
            "engine_cpus": [c for c in range(64) if res.engine_cpus >> c & 1],
        },
        # Workload metrics: [(name, value)], reported as "wl.<name>".
        "metrics": [(cstr(res.metrics[i].name), float(res.metrics[i].value))
                    for i in range(min(res.nmetrics, lib.AL_METRICS_MAX))],
    }


def _raw_measures(res, task):
    """Memory samples and, with histogram=True, the merged histograms."""
    m = res.mem
    out = {"mem": {k: int(getattr(m, k)) for k in (
        "samples", "held_samples", "held", "held_peak", "requested", "requested_peak",
        "rss_start", "rss", "rss_peak")}}
    pts = [m.series[i] for i in range(min(m.nseries, lib.AL_MEM_SERIES))]
    # the samples over time (measure.h: bounded, evenly thinned): t_ns, requested, held, rss
    out["mem"]["series"] = {k: [int(getattr(p, k)) for p in pts]
                            for k in ("t_ns", "requested", "held", "rss")}
    if task.get("histogram"):
        tpn = float(res.ticks_per_ns)
        out["hist"] = {"alloc": Histogram.from_c(res.hist[lib.AL_HIST_ALLOC], tpn).to_dict(),
                       "free": Histogram.from_c(res.hist[lib.AL_HIST_FREE], tpn).to_dict()}
    return out


def rerun_tally():
    """What run_round counts over a comparison (the settings' keys): rounds,
    rounds run again, attempts beyond the first, and the most steal (% of a
    run's CPU time) among the attempts not kept."""
    return {"rounds": 0, "steal_rerun_rounds": 0, "steal_rerun_attempts": 0,
            "steal_discarded_max_pct": 0.0}


def run_round(tasks, run_index, runner=None, reverse=False, reruns=STEAL_RERUNS, tally=None):
    """One round of an A/B comparison: each task once, in order (reversed when
    ``reverse``), run again as a whole while the host stole more than
    stats.STEAL_WARN_PCT of any run's CPU time, at most ``reruns`` times.
    Returns (raws in the tasks' order, attempts beyond the first); of the
    attempts, the one whose worst run had the least steal is kept (chosen by
    the steal alone, never by the times). runner(task, run_index): run_once
    by default. tally: a rerun_tally() to count into."""
    runner = runner or run_once
    tried, extra = [], 0
    order = list(reversed(range(len(tasks)))) if reverse else list(range(len(tasks)))
    for extra in range(reruns + 1):
        raws = [None] * len(tasks)
        for j in order:
            raws[j] = runner(tasks[j], run_index)
        tried.append((max(_steal(r) for r in raws), extra, raws))
        if tried[-1][0] <= STEAL_WARN_PCT:
            break
    kept = min(tried, key=lambda t: t[:2])
    if tally is not None:
        tally["rounds"] += 1
        tally["steal_rerun_rounds"] += bool(extra)
        tally["steal_rerun_attempts"] += extra
        tally["steal_discarded_max_pct"] = max(
            [tally["steal_discarded_max_pct"]] + [t[0] for t in tried if t is not kept])
    return kept[2], extra


def _steal(raw):
    v = raw.get("steal_pct")
    return 0.0 if v is None or v != v else float(v)


def round_order(ntasks, npolicies, round_index):
    """The order of plan()'s tasks (policy-major) within round ``round_index``:
    cell by cell, a cell's policies back to back, reversed every other round."""
    per = ntasks // npolicies if npolicies else ntasks
    pols = list(range(npolicies)) if round_index % 2 == 0 else list(range(npolicies))[::-1]
    return [pi * per + c for c in range(per) for pi in pols]


def run_point(task, on_run=None):
    """Run one grid point ``task['runs']`` times; returns (point, [raw runs])."""
    raws = []
    for i in range(task["runs"]):
        raws.append(run_once(task, i))
        if on_run is not None:
            on_run()
    return task["point"], raws


class _Progress:
    """run()'s progress.Bar over its runs; ``phase`` notes a measured phase."""

    def __init__(self, total, progress, desc):
        self.bar = _progress.Bar(total, desc, progress)

    def step(self, n=1):
        self.bar.update(n)

    def phase(self, phase):
        """A run entered its measured phase: say so (Ctrl-C stops it)."""
        if self.bar.shown:
            self.bar.note("measuring" if phase == lib.AL_RUN_MEASURED else "")

    def close(self):
        self.bar.close()


def run(workload, policy, runs=None, producers=None, cpu="auto", timing=None,
        warmup_cycles=None, cycles=None, duration=None, seed=1, progress=None, executor=None,
        histogram=False, mem_sample=0.01, effort="normal", processes=False, isolate=None,
        check=None, target_ci=None, budget=60.0, stats=DEFAULT_STATS, realtime=False,
        steal_reruns=0, allow_concurrent=False, **params):
    """Run ``workload`` on ``policy`` over the product of every list given.

    workload: a workload name ("malloc-free"); policy: a spec, preset, Policy,
    or a list of them; producers, cpu ("auto"/"pinned"/"virtual"), timing
    ("batch"/"per_op_sum") and every workload parameter (by name, e.g.
    ``allocs_per_cycle=[16, 64]``, ``size="4K"``) may be lists. runs: runs
    per grid point, each on a fresh allocator. cycles: measured cycles per
    worker (else the measured phase lasts ``duration`` seconds).
    warmup_cycles: untimed cycles first. effort: "quick", "normal" or
    "rigorous" sets runs, duration and warmup_cycles where not given
    (pyperf's --fast / --rigorous; EFFORT). progress: a bar on stderr.
    executor: a concurrent.futures.Executor to run grid points in parallel
    (default: one after the other; a local pool of several workers is refused
    unless allow_concurrent=True, as sweep()). processes=True: every run in a fresh
    child process. isolate and check: see plan() (a policy with a plugin
    layer runs isolated and checked by default, so a crashing plugin raises
    RunError instead of ending this process).

    target_ci: adaptive runs: after the first ``runs`` rounds, cells whose
    95% confidence interval of the mean (alloc_ns and free_ns, or throughput)
    is wider than ``target_ci`` (a fraction of the mean: 0.02 = +-2%) get
    another round, all policies of the cell together so that their runs
    stay paired, until no cell is wider or ``budget`` seconds are spent. It
    stops on the interval's width, never on a p-value. steal_reruns: a
    cell's round with steal time over 2% of a run's CPU time runs again, its
    policies together, at most this many times (run_round).

    histogram=True records every operation's latency in a histogram (per-op
    percentiles; implies timing="per_op_sum", the default then). mem_sample:
    seconds between memory samples in the measured phase (peak held,
    requested, RSS), 0 = at the phase's ends only. stats: "lite" (default),
    "off", "full" or a list of them: what the layers count (STATS_LEVELS).
    producers: 1 by default; replay's (trace=FILE): the trace's threads.
    Returns a Result. Raises AllocatorExhausted when a run runs out of memory
    and RunError when a run fails otherwise; Ctrl-C's KeyboardInterrupt
    carries the runs that finished as ``partial`` (_keep_finished)."""
    settings, tasks = plan(workload, policy, runs=runs, producers=producers, cpu=cpu,
                           timing=timing, warmup_cycles=warmup_cycles, cycles=cycles,
                           duration=duration, seed=seed, histogram=histogram,
                           mem_sample=mem_sample, effort=effort, processes=processes,
                           isolate=isolate, check=check, stats=stats, realtime=realtime, **params)
    adaptive = adaptive_options(target_ci, budget, executor, allow_concurrent, _timed(tasks))
    _set_reruns(settings, steal_reruns, executor)
    prog = _Progress(len(tasks) * settings["runs"], progress, "alloclab " + workload)
    load_before = machine.loadavg()  # machine state: the load around the whole run
    raws = [[] for _ in tasks]  # each task's finished runs, kept if interrupted
    try:
        out = _run_interleaved(tasks, settings, adaptive, prog, raws) if executor is None \
            else _run_on(executor, tasks, settings["runs"], prog)
    except KeyboardInterrupt as e:
        _keep_finished(e, tasks, raws, settings, load_before)
        raise
    finally:
        prog.close()
    return _result(settings, out, load_before, tasks)


def _keep_finished(e, tasks, raws, settings, load_before):
    """The runs that finished before Ctrl-C (``e``), as ``e.partial``: a
    Result marked metadata["interrupted"] whose cells hold the runs that
    finished (a cell with none left out), so that a caller can save them;
    None when none finished (or the runs ran on an executor)."""
    done = [(t["point"], r) for t, r in zip(tasks, raws) if r]
    e.partial = _result(settings, done, load_before, tasks) if done else None
    if done:
        e.partial.metadata["interrupted"] = {
            "runs_finished": sum(len(r) for _, r in done),
            "runs_planned": len(tasks) * settings["runs"],
            "signal": signal.Signals(getattr(e, "signum", signal.SIGINT)).name}


def _result(settings, out, load_before, tasks):
    """The Result of run()'s [(point, [raw runs])] and its metadata."""
    meta = collect_metadata()
    meta["run"] = settings
    meta["counters"] = _counters.layer_docs(task_policies(tasks))
    meta["load_before"], meta["load_after"] = load_before, machine.loadavg()
    return Result.from_raw(meta, out)


def _run_interleaved(tasks, settings, adaptive, prog, raws):
    """Every task's runs in this process, interleaved: run i of every point
    before run i+1 of any, so an A/B comparison never has all of A's runs in
    one stretch of machine noise and all of B's in another; within a round
    the policies of a cell run back to back, in alternating order (ABBA), so
    that their runs pair up (alloclab.verdict judges per-pair ratios).
    Returns [(point, [raw runs])], kept in ``raws`` (a list per task) as
    they finish; adaptive rounds are added to settings."""
    npol = len(settings["sweep"]["policy"])
    t0 = time.monotonic()
    tally = rerun_tally()

    def runner(task, i):
        return run_once(task, i, on_phase=prog.phase)
    for i in range(settings["runs"]):
        order = round_order(len(tasks), npol, i)
        per_cell = max(1, npol)
        for k in range(0, len(order), per_cell):
            cell = order[k:k + per_cell]
            got, _ = run_round([tasks[j] for j in cell], i, runner,
                               reruns=settings.get("steal_reruns", 0), tally=tally)
            for j, r in zip(cell, got):
                raws[j].append(r)
            prog.step(len(cell))
    if adaptive:
        settings["adaptive"] = _adapt(tasks, raws, npol, adaptive, t0, prog,
                                      settings.get("steal_reruns", 0), tally)
    if settings.get("steal_reruns"):
        settings.update(tally)
    return [(t["point"], r) for t, r in zip(tasks, raws)]


def _set_reruns(settings, n, executor=None):
    """run()'s steal_reruns checked, and kept in its settings when not 0."""
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 0 <= n <= 10:
        raise errors.InvalidArgument("steal_reruns=%r: a number of reruns from 0 to 10" % (n,))
    if n and executor is not None:
        raise errors.InvalidArgument("steal_reruns=%r runs a cell's policies again together, "
                                     "one round after the other: it does not take an executor"
                                     % (n,))
    if n:
        settings["steal_reruns"] = int(n)


def _run_on(executor, tasks, runs, prog):
    """Every grid point on ``executor`` (run_point each); [(point, [raws])]."""
    out = []
    futures = [executor.submit(run_point, t) for t in tasks]
    try:
        for f in futures:
            out.append(f.result())
            prog.step(runs)
    except BaseException:
        for f in futures:
            f.cancel()
        raise
    return out


MAX_ADAPTIVE_RUNS = 100  # runs per cell at most, whatever the budget


def adaptive_options(target_ci, budget, executor=None, allow_concurrent=False, timed=True):
    """The adaptive-runs options checked ({target_ci, budget}, or None), then
    the executor (a local pool that would overlap timed runs is refused, or
    with allow_concurrent warned about; timed=False, every cell simulated:
    any pool; adaptive runs take none)."""
    opts = _adaptive_checked(target_ci, budget)
    if executor is not None:
        check_executor(executor, allow_concurrent, timed)
        if opts:
            raise errors.InvalidArgument("target_ci (adaptive runs) runs cells one after the "
                                         "other: it does not take an executor")
    return opts


def _adaptive_checked(target_ci, budget):
    if target_ci is None:
        return None
    if isinstance(target_ci, bool) or not isinstance(target_ci, numbers.Real) or \
            not 0 < target_ci < 1:
        raise errors.ParameterRangeError(
            "target_ci=%r is out of range: a fraction of the mean, 0 < target_ci < 1 (0.02 = "
            "+-2%%)" % (target_ci,), name="target_ci", value=target_ci, min=0, max=1)
    if isinstance(budget, bool) or not isinstance(budget, numbers.Real) or \
            not (math.isfinite(budget) and budget > 0):
        raise errors.ParameterRangeError(
            "budget=%r is out of range: seconds > 0" % (budget,), name="budget", value=budget,
            min=0, max=None)
    return {"target_ci": float(target_ci), "budget": float(budget)}


def _rel_ci(raws):
    """The widest relative 95% CI half width over a cell's timing metrics."""
    ms = [run_metrics(r) for r in raws]
    widest = 0.0
    for names in (("alloc_ns", "free_ns"), ("throughput",)):
        found = False
        for k in names:
            st = describe([m.get(k, math.nan) for m in ms])
            if st.n >= 2 and st.mean:
                widest = max(widest, st.ci_half / abs(st.mean))
                found = True
        if found:
            break
    return widest


def _adapt(tasks, raws, npol, opts, t0, prog, reruns=0, tally=None):
    """Add rounds to the cells whose interval is wider than the target
    (every policy of a cell together, ABBA order, run again for steal as the
    first rounds: run_round) until the budget is spent."""
    per = len(tasks) // npol if npol else len(tasks)
    added = 0
    wide = []
    while True:
        wide = [c for c in range(per)
                if max(_rel_ci(raws[pi * per + c]) for pi in range(npol)) > opts["target_ci"]
                and len(raws[c]) < MAX_ADAPTIVE_RUNS]
        if not wide or time.monotonic() - t0 >= opts["budget"]:
            break
        for c in wide:
            if time.monotonic() - t0 >= opts["budget"]:
                break
            r = len(raws[c])
            got, _ = run_round([tasks[pi * per + c] for pi in range(npol)], r,
                               reverse=r % 2 == 1, reruns=reruns, tally=tally)
            for pi, raw in enumerate(got):
                raws[pi * per + c].append(raw)
            added += npol
            prog.step(npol)
    return dict(opts, added_runs=added, cells_wider_than_target=len(wide),
                spent_s=round(time.monotonic() - t0, 3))
