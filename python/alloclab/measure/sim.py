"""Simulated CPUs: the calibration, and what a simulated run needs from it.

A simulated run (``cpu="simulated"``) runs the real worker loops and layer
code of N model CPUs on one thread in virtual time (DESIGN §11; the engine:
csrc/engine/sim.c). Its time comes from a cost model made here:

- ``calibrate()`` runs named cells at one producer in the same simulation,
  but with the real clock: each segment of code between two sync points is
  timed (less an empty segment's timing cost) together with what it did
  (its kind pair and the layer counters it moved). The costs per term are
  fitted by non-negative least squares over every segment of every
  calibration run. The cost of moving a cache line between CPUs is measured
  by a ping-pong between two real CPUs (``line_transfer_ns``), or given;
  how stores and reads move lines on this machine by a probe of the same two
  CPUs (``coherence``: a store's share of a transfer, and whether a read
  takes a line whole), or given.
- ``lines_per_handoff`` (data lines a lock handoff moves besides the lock's)
  is the one free parameter; it is given, or fitted with ``fit_handoff()``
  to this machine's measured two-producer runs of named cells, never to a
  seed's table.

A ``Calibration`` is saved as JSON (``save``/``load``) with the host, the
cells it was made on and the fit's residual, and travels with every
simulated Result. A simulated number is a prediction: results, tables and
verdicts say so.
"""

import errno
import json
import math
import numbers
import os
import time
import warnings

import numpy as np

from .. import errors, files
from ..cbind import schema
from ..host import machine
from ..cbind._ffi import ffi, lib
from ..policies.policy import Policy
from ..results.result import uniq

# Cells the default calibration runs (one producer each): malloc-free at 64
# allocs/cycle (the caches' hit paths) and at 1024 (bursts past every
# cache's capacity: refills, flushes and misses all run). Other cells are
# predictions that a validation checks.
DEFAULT_CELLS = ({"workload": "malloc-free", "allocs_per_cycle": 64},
                 {"workload": "malloc-free", "allocs_per_cycle": 1024})
CALIBRATION_SECONDS = 0.2
# The shortest measured phase a calibration or a validation takes per run.
MIN_CELL_SECONDS = 1e-3
FORMAT = "alloclab-calibration/1"
DEFAULT_LINES_PER_HANDOFF = 1.0
# How lines move besides a load's whole transfer (al_sim_config): a store's
# share of one, the share of a layer's load after the first its segment
# waited for, and whether a read takes a line whole. A calibration made
# before the probe existed, or with the line cost given and nothing else,
# has these: stores free, every load a whole transfer, reads shared.
NO_COHERENCE = {"store_fraction": 0.0, "load_fraction": 1.0, "read_takes_line": False}
# The probe: lines per round (a store stream past the store buffer's
# entries) and rounds (the median is kept). A reread above this share of a
# ping-pong transfer means the other CPU's read took the line.
PROBE_LINES, PROBE_TRIES = 256, 200
READ_TAKES_LINE_SHARE = 0.5
TIMELINE_MAX_EVENTS = 200000
# plan()/run() keywords of simulated cells: a Calibration (or its dict or
# file; default: calibrate() for the policies, once per process), the line
# transfer and handoff lines overriding it, and the timeline events kept per
# run (hold, wait, handoff, cycle; present.timeline writes them; 0 = none);
# band=False skips the runs at half and double the line cost (BAND);
# jitter: the sigma of each segment's lognormal cost factor (Calibration).
OPTIONS = ("calibration", "timeline", "line_transfer", "lines_per_handoff", "band", "jitter")
# The sensitivity band: every simulated run is also made with the line
# transfer cost times these (its per-op times in raw["sim"]["band"]).
BAND = (0.5, 2.0)


def _factors(v):
    """A factor > 0, or [alloc, free] factors > 0?"""
    def ok(x):
        return _number(x, 0, NS_MAX) and x > 0
    return ok(v) or (isinstance(v, (list, tuple)) and len(v) == 2 and all(map(ok, v)))


def _offsets(v):
    """[alloc, free] finite numbers?"""
    return isinstance(v, (list, tuple)) and len(v) == 2 and all(
        _number(x, -NS_MAX, NS_MAX) for x in v)


def _pair(v):
    """[alloc, free] from a factor or a pair."""
    return [float(v), float(v)] if isinstance(v, (int, float)) else [float(x) for x in v]


class UncalibratedPolicyWarning(UserWarning):
    """A simulated run of a policy its calibration did not run: its factor
    is the geometric mean of the others', and the terms the calibration
    never saw cost 0 ns."""


class SuspectCalibrationWarning(UserWarning):
    """A calibration whose measured line cost is suspect: its ping-pong
    tries spread wide, or the machine was loaded as it began
    (calibration_warnings). Every simulated time scales with that cost."""


class UnmodelledLocksWarning(UserWarning):
    """A simulated policy with a layer whose locks and shared state are not
    the simulation's (libc: glibc's malloc): no wait or line transfer of
    that layer is ever predicted, so its times do not scale with the model
    CPUs."""


# Layers whose own locks and shared state a simulation cannot see.
UNMODELLED_LAYERS = ("libc",)


def unmodelled_layers(policy):
    """The layers of a Policy that UnmodelledLocksWarning is about."""
    return [n for n in policy.names if n in UNMODELLED_LAYERS]


def uncalibrated_policies(cal, names):
    """The policies of ``names`` that ``cal`` has no factor for, under any
    spelling of their stack (none when it has no factors at all: every
    policy then gets 1)."""
    return [n for n in names if cal.scales and cal.own_key(n) is None]


def _stack(name):
    """A policy's stack as one canonical spec (a preset and its spec, or a
    spec with its defaults written out, read the same); the name itself when
    it does not parse."""
    try:
        return str(Policy(name))
    except errors.AlloclabError:
        return name


# The largest calibration file read (a huge sparse file is refused by its
# size), and the largest numbers a calibration holds: a line transfer of a
# millisecond is no machine's, and a far larger one overflows the simulated
# clock; a term may cost up to a second (a test holds a lock past its
# budget that way).
FILE_LIMIT = 1 << 30
NS_MAX = 1e6
COST_MAX = 1e9


def _number(v, lo, hi):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and lo <= v <= hi


def _check_calibration(costs, line_transfer_ns, lines_per_handoff, info, jitter, scales,
                       offsets, where):
    """InvalidArgument naming ``where`` and the first value out of its range."""
    def bad(what):
        return errors.InvalidArgument("%s: %s" % (where, what))
    if not isinstance(costs, dict) or not all(
            isinstance(k, str) and _number(v, 0, COST_MAX) for k, v in costs.items()):
        raise bad("costs must map term names to ns from 0 to %g" % COST_MAX)
    for k, v in (("line_transfer_ns", line_transfer_ns),
                 ("lines_per_handoff", lines_per_handoff)):
        if not _number(v, 0, NS_MAX):
            raise bad("%s must be a number from 0 to %g, not %r" % (k, NS_MAX, v))
    if not _number(jitter, 0, 4):
        raise bad("jitter must be a number from 0 to 4, not %r" % (jitter,))
    if info is not None and not isinstance(info, dict):
        raise bad("info must be an object, not %r" % (info,))
    kept = (info or {}).get("validation")  # Calibration.validated's
    if isinstance(kept, dict) and "tolerance" in kept:
        check_tolerance(kept["tolerance"], where)
    if not isinstance(scales, dict) or not all(
            isinstance(k, str) and _factors(v) for k, v in scales.items()):
        raise bad("scales must map policies to a factor from 0 to %g (not 0) or to [alloc, "
                  "free] such factors" % NS_MAX)
    if not isinstance(offsets, dict) or not all(
            isinstance(k, str) and _offsets(v) for k, v in offsets.items()):
        raise bad("offsets must map policies to [alloc, free] ns from -%g to %g"
                  % (NS_MAX, NS_MAX))


class Calibration:
    """Costs per term (ns per unit), the line transfer cost, the handoff
    lines, and where they came from."""

    def __init__(self, costs, line_transfer_ns, lines_per_handoff=DEFAULT_LINES_PER_HANDOFF,
                 info=None, jitter=0.0, scales=None, offsets=None, coherence=None,
                 where="calibration"):
        _check_calibration(costs, line_transfer_ns, lines_per_handoff, info, jitter,
                           scales or {}, offsets or {}, where)
        self.costs = dict(costs)
        # policy -> [alloc, free]: factors on the costs of the segments of
        # each part of the run (calibrate; a plain number: both), and ns
        # added per call at the top of the stack in that part, after the
        # factor (may be negative)
        self.scales = {k: _pair(v) for k, v in dict(scales or {}).items()}
        self.offsets = {k: _pair(v) for k, v in dict(offsets or {}).items()}
        self.line_transfer_ns = float(line_transfer_ns)
        self.lines_per_handoff = float(lines_per_handoff)
        self.jitter = float(jitter)
        if coherence is not None and not isinstance(coherence, dict):
            raise errors.InvalidArgument("%s: coherence must be an object, not %r"
                                         % (where, coherence))
        self.coherence = _coherence(dict(NO_COHERENCE, **dict(coherence or {})), where)
        self.info = dict(info or {})

    def to_dict(self):
        return {"format": FORMAT, "costs": self.costs,
                "line_transfer_ns": self.line_transfer_ns,
                "lines_per_handoff": self.lines_per_handoff, "jitter": self.jitter,
                "scales": self.scales, "offsets": self.offsets, "coherence": self.coherence,
                "info": self.info}

    @classmethod
    def from_dict(cls, d, where="calibration"):
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise errors.InvalidArgument(
                "%s is not an alloclab calibration (format %r; expected %r)"
                % (where, d.get("format") if isinstance(d, dict) else type(d).__name__, FORMAT))
        _coherence(d.get("coherence", NO_COHERENCE), where)  # exactly its keys
        return cls(d.get("costs"), d.get("line_transfer_ns"), d.get("lines_per_handoff"),
                   d.get("info"), d.get("jitter", 0.0), d.get("scales", {}), d.get("offsets", {}),
                   d.get("coherence", NO_COHERENCE), where)

    def save(self, path):
        files.write_text(path, json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n",
                         what="calibration file")

    @classmethod
    def load(cls, path):
        data = files.read_bytes(path, what="calibration file", limit=FILE_LIMIT)
        try:
            d = json.loads(data.decode("utf-8"))
        except RecursionError:
            raise errors.InvalidArgument("calibration file %s nests lists or objects too deeply "
                                         "to decode: not a calibration file" % path) from None
        except (UnicodeDecodeError, ValueError) as e:
            raise errors.InvalidArgument("calibration file %s is not JSON: %s"
                                         % (path, e)) from None
        return cls.from_dict(d, "calibration file %s" % path)

    def with_(self, line_transfer_ns=None, lines_per_handoff=None, jitter=None, info=None):
        """A copy with the parameters given (None: this one's)."""
        def pick(v, mine):
            return mine if v is None else v
        return Calibration(self.costs, pick(line_transfer_ns, self.line_transfer_ns),
                           pick(lines_per_handoff, self.lines_per_handoff),
                           pick(info, self.info), pick(jitter, self.jitter), self.scales,
                           self.offsets, self.coherence)

    def validated(self, validation):
        """This calibration with a Validation's verdict kept in its info, so
        that the runs made with it mark the (workload, policy) cells above
        the validated CPUs "unvalidated" where the validation says so."""
        return self.with_(info=dict(self.info, validation=validation.to_dict()))

    def own_key(self, policy):
        """The name ``policy``'s own factors are kept under: itself, or
        another spelling of the same stack (libarena-spill and
        "percpu > buddy"); None when the calibration did not run it."""
        if policy is None or policy in self.scales:
            return policy if policy in self.scales else None
        stack = _stack(policy)
        return next((k for k in self.scales if _stack(k) == stack), None)

    def scale_for(self, policy):
        """The [alloc, free] factors on the costs for ``policy``: its own,
        fitted on the calibration cells, else the geometric means of those
        fitted ([1, 1] without any)."""
        own = self.own_key(policy)
        if own is not None:
            return list(self.scales[own])
        if not self.scales:
            return [1.0, 1.0]
        logs = np.log(np.array(list(self.scales.values()), float))
        return [float(v) for v in np.exp(logs.mean(axis=0))]

    def offset_for(self, policy):
        """The [alloc, free] ns added per call at the top for ``policy``: its own,
        fitted with its factors; a policy without factors of its own (which
        gets their geometric means) gets none."""
        own = self.own_key(policy)
        return list(self.offsets.get(own, [0.0, 0.0])) if own is not None else [0.0, 0.0]

    def task_options(self, timeline=0, policy=None):
        """What a task carries to the engine (plain, picklable)."""
        return {"costs": sorted(self.costs.items()),
                "scale": self.scale_for(policy), "offset": self.offset_for(policy),
                "borrowed_scale": bool(self.scales) and self.own_key(policy) is None,
                "line_transfer_ns": self.line_transfer_ns,
                "lines_per_handoff": self.lines_per_handoff, "jitter": self.jitter,
                "coherence": dict(self.coherence), "timeline": int(timeline)}


def _coherence(v, where):
    """A calibration's coherence entry, checked."""
    if not isinstance(v, dict) or set(v) != set(NO_COHERENCE):
        raise errors.InvalidArgument("%s: coherence must have exactly %s, not %r"
                                     % (where, ", ".join(sorted(NO_COHERENCE)), v))
    for k in ("store_fraction", "load_fraction"):
        f = v[k]
        if not isinstance(f, (int, float)) or isinstance(f, bool) or not 0 <= f <= 1:
            raise errors.InvalidArgument("%s: coherence %s must be a number from 0 to 1, "
                                         "not %r" % (where, k, f))
    r = v["read_takes_line"]
    if not isinstance(r, bool):
        raise errors.InvalidArgument("%s: coherence read_takes_line must be true or false, "
                                     "not %r" % (where, r))
    return dict(v)


def coherence_text(cal):
    """One line on how the calibration moves lines besides whole transfers."""
    c = cal.coherence
    return ("stores %.3g, later loads of a segment %.3g of a line, reads %s lines (%s)" % (
        c["store_fraction"], c["load_fraction"],
        "take" if c["read_takes_line"] else "share", cal.info.get("coherence", "given")))


def as_calibration(value):
    """A Calibration from a Calibration, a dict or a path."""
    if isinstance(value, Calibration):
        return value
    if isinstance(value, dict):
        return Calibration.from_dict(value)
    if isinstance(value, (str, os.PathLike)):
        return Calibration.load(os.fspath(value))
    raise errors.ParameterTypeError(
        "calibration must be a Calibration, its dict or a file's path, not %r" % (value,),
        name="calibration", value=value)


# ---- the engine's side ----

def new_table(costs=()):
    """A struct al_sim_table holding ``costs`` (name, ns)."""
    t = ffi.new("struct al_sim_table *")
    costs = list(costs)
    if len(costs) > lib.AL_SIM_FEATURES:
        raise errors.InvalidArgument("a calibration has %d terms; at most %d fit"
                                     % (len(costs), lib.AL_SIM_FEATURES))
    for i, (name, ns) in enumerate(costs):
        b = name.encode()[:lib.AL_SIM_NAME - 1]
        ffi.memmove(t.name[i], b, len(b))
        t.cost_ns[i] = float(ns)
    t.n = len(costs)
    return t


def fill_config(cfg, task, run_index=0, calibrate=False):
    """Fill cfg.sim for a simulated task; returns the buffers cfg points to
    (keep them alive until the run has ended)."""
    so = task.get("sim") or {}
    table = new_table(so.get("costs", ()))
    cfg.sim.seed = cfg.seed
    cfg.sim.line_transfer_ns = float(so.get("line_transfer_ns", 0.0))
    cfg.sim.lines_per_handoff = float(so.get("lines_per_handoff", DEFAULT_LINES_PER_HANDOFF))
    cfg.sim.jitter = float(so.get("jitter", 0.0))
    coh = so.get("coherence", NO_COHERENCE)
    cfg.sim.store_fraction = float(coh["store_fraction"])
    cfg.sim.load_fraction = float(coh["load_fraction"])
    cfg.sim.read_takes_line = 1 if coh["read_takes_line"] else 0
    cfg.sim.phase_scale = _pair(so.get("scale", 1.0))
    cfg.sim.phase_offset_ns = _pair(so.get("offset", 0.0))
    cfg.sim.calibrate = 1 if calibrate else 0
    cfg.sim.table = table
    events = ffi.NULL
    n = int(so.get("timeline", 0) or 0)
    if n:
        events = ffi.new("struct al_sim_event[]", n)
        cfg.sim.events = events
        cfg.sim.events_max = n
    return table, events


_EV_KINDS = {0: "cycle", 1: "hold", 2: "wait", 3: "handoff"}


def raw_sim(res, table, events, calibrate=False):
    """What a simulated run reports, as plain data."""
    st = res.sim
    names = [ffi.string(table.name[i]).decode() for i in range(table.n)]
    seen = [float(table.seen[i]) for i in range(table.n)]
    known = [not math.isnan(table.cost_ns[i]) for i in range(table.n)]
    out = {k: int(getattr(st, k)) for k in (
        "switches", "sync_points", "segments", "lock_waits", "lock_timeouts", "handoffs",
        "lines", "object_lines", "store_lines", "events", "events_dropped")}
    out.update({k: float(getattr(st, k)) for k in (
        "wait_ns", "line_ns", "uncalibrated_units", "virtual_ns")})
    out["phase_calls"] = [int(st.phase_calls[0]), int(st.phase_calls[1])]
    out["uncalibrated"] = sorted(n for n, s, k in zip(names, seen, known)
                                 if s and not k and "." in n) if not calibrate else []
    if calibrate:
        n = table.n
        out["fit"] = {"names": names, "seen": seen,
                      "xtx": [float(table.xtx[i * lib.AL_SIM_FEATURES + j])
                              for i in range(n) for j in range(n)],
                      "xty": [float(table.xty[i]) for i in range(n)],
                      "yy": float(table.yy), "nseg": int(table.nseg),
                      "dropped": int(table.dropped), "null_ns": float(table.null_ns)}
    if events != ffi.NULL and st.events:
        out["timeline"] = [
            (int(events[i].cpu), _EV_KINDS.get(int(events[i].kind), "op"),
             names[events[i].what - 1] if events[i].kind in (1, 2) and events[i].what else
             _EV_KINDS.get(int(events[i].kind), "op"),
             events[i].start_ps / 1000.0, events[i].dur_ps / 1000.0)
            for i in range(min(int(st.events), len(events)))]
    return out


# ---- the fit ----

def nnls_gram(G, h, ridge=1e-9, iters=None):
    """min ||Xb - y||^2 subject to b >= 0, from G = X'X and h = X'y
    (Lawson-Hanson's active set method, on the normal equations)."""
    n = len(h)
    G = np.asarray(G, float) + ridge * np.eye(n) * max(1.0, float(np.trace(G)) / max(n, 1))
    h = np.asarray(h, float)
    b = np.zeros(n)
    passive = np.zeros(n, bool)
    for _ in range(iters or 3 * n + 10):
        w = h - G @ b
        cand = np.where(~passive & (w > 1e-12 * max(1.0, np.abs(h).max())))[0]
        if not len(cand):
            break
        passive[cand[np.argmax(w[cand])]] = True
        while True:
            idx = np.where(passive)[0]
            z = np.zeros(n)
            z[idx] = np.linalg.solve(G[np.ix_(idx, idx)], h[idx])
            if (z[idx] > 0).all():
                b = z
                break
            neg = idx[z[idx] <= 0]
            alpha = np.min(b[neg] / (b[neg] - z[neg]))
            b = b + alpha * (z - b)
            passive &= b > 1e-12
            b[~passive] = 0
    return b


def fit(parts):
    """Costs per term from calibration runs' normal equations (raw["sim"]["fit"]
    of each): (costs, report)."""
    names = []
    for p in parts:
        for n, s in zip(p["names"], p["seen"]):
            if s and n not in names and (n.startswith("seg.") or "." in n):
                names.append(n)
    ix = {n: i for i, n in enumerate(names)}
    k = len(names)
    G, h, yy, nseg = np.zeros((k, k)), np.zeros(k), 0.0, 0
    for p in parts:
        m = len(p["names"])
        X = np.asarray(p["xtx"], float).reshape(m, m)
        for a, na in enumerate(p["names"]):
            if na not in ix:
                continue
            h[ix[na]] += p["xty"][a]
            for b, nb in enumerate(p["names"]):
                if nb in ix:
                    G[ix[na], ix[nb]] += X[a, b]
        yy += p["yy"]
        nseg += p["nseg"]
    b = nnls_gram(G, h)
    sse = float(yy - 2 * b @ h + b @ G @ b)
    costs = {n: float(v) for n, v in zip(names, b)}
    return costs, {"segments": nseg, "terms": k,
                   "rms_ns": math.sqrt(max(sse, 0.0) / max(nseg, 1)),
                   "null_ns": parts[0]["null_ns"] if parts else None,
                   "dropped": sum(p["dropped"] for p in parts)}


def line_transfer_ns(rounds=100000, tries=9):
    """One cache line moved between two real CPUs, ns: the least of a few
    ping-pongs (a vCPU descheduled during one inflates it; nothing makes one
    faster than the hardware). SimulationError with fewer than two CPUs."""
    return float(min(line_transfer_tries(rounds, tries)))


# A calibration's line cost is suspect when its ping-pong tries spread wider
# than this (the host moved or contended the vCPUs), or when the 1-minute
# load average as the calibration began left fewer than two CPUs free (with
# this spare): the ping-pong needs two, and waits for a busy one.
TRIES_SPREAD = 2.0
LOAD_SPARE = 0.5


def line_transfer_tries(rounds=100000, tries=9):
    """Every ping-pong of line_transfer_ns, ns each."""
    vals = []
    for _ in range(tries):
        v = lib.al_sim_pingpong_ns(rounds)
        if v < 0:
            raise errors.SimulationError(
                "cannot measure a cache-line transfer on one usable CPU: give "
                "line_transfer_ns (e.g. 60 for cores of one socket)")
        vals.append(float(v))
    return vals


def _line(line_transfer, load):
    """(the line transfer ns, what info keeps of it): given, or measured
    (the least of the ping-pong tries, each kept, with ``load``, the load
    average as the calibration began: its own runs raise it after)."""
    if line_transfer is not None:
        return float(line_transfer), {"line_transfer": "given"}
    tries = line_transfer_tries()
    return min(tries), {"line_transfer": "measured (ping-pong)", "line_transfer_tries": tries,
                        "load_before": load}


def calibration_warnings(cal, line_given=False):
    """Lines on what makes a calibration's measured line cost suspect: its
    ping-pong tries spread wide, or the machine was loaded around them.
    ``line_given``: a run replaces the line cost (--line-transfer), so only
    the coherence probe's shares, measured with it, may be another
    program's."""
    out = []
    tries = cal.info.get("line_transfer_tries") or []
    n = int(lib.al_cpus_usable()) or 1
    load = (cal.info.get("load_before") or {}).get("1min")
    loaded = tries and load is not None and load > max(n - 2, 0) + LOAD_SPARE
    if line_given:
        return ["the load average was %.2f on %d usable CPU%s as the calibration began: the "
                "coherence probe's shares of a line (stores, loads) may be another "
                "program's; calibrate on a quiet machine (alloclab sim calibrate --out) and "
                "give --calibration" % (load, n, "" if n == 1 else "s")] if loaded else []
    if tries and min(tries) > 0 and max(tries) / min(tries) > TRIES_SPREAD:
        out.append("the line transfer's ping-pong tries ranged from %.0f to %.0f ns (the "
                   "least, %.0f, is the calibration's): the host moved or contended the "
                   "vCPUs; calibrate again on a quiet machine, or give --line-transfer" % (
                       min(tries), max(tries), cal.line_transfer_ns))
    if loaded:
        out.append("the load average was %.2f on %d usable CPU%s as the calibration began: "
                   "its ping-pong needs two free CPUs, so the line cost may be another "
                   "program's; calibrate again on a quiet machine, or give --line-transfer"
                   % (load, n, "" if n == 1 else "s"))
    return out


def coherence_probe(line_ns=None, lines=PROBE_LINES, tries=PROBE_TRIES):
    """How this machine moves lines between two real CPUs: {"store_fraction":
    a stream of stores into the other CPU's lines, per line, as a share of a
    ping-pong transfer; "load_fraction": a stream of independent loads of
    them, likewise; "read_takes_line": whether the writer's reread after the
    other CPU's read costs a transfer (migratory sharing)}, and the probe's
    ns ({"store_ns", "load_ns", "reread_ns", "line_ns"}); line_ns: the
    transfer (None: a ping-pong now). SimulationError with fewer than two
    CPUs."""
    st, ld, rr = (ffi.new("double *") for _ in range(3))
    rc = lib.al_sim_coherence_probe(lines, tries, st, ld, rr)
    if rc == -errno.ENODEV:
        raise errors.SimulationError(
            "cannot probe cache coherence on one usable CPU: give line_transfer_ns")
    if rc:
        raise errors.SimulationError("the coherence probe failed: %s" % os.strerror(-rc))
    line = line_transfer_ns() if line_ns is None else float(line_ns)
    return ({"store_fraction": round(min(1.0, st[0] / line), 4),
             "load_fraction": round(min(1.0, max(ld[0] / line, 1e-4)), 4),
             "read_takes_line": bool(rr[0] > READ_TAKES_LINE_SHARE * line)},
            {"store_ns": st[0], "load_ns": ld[0], "reread_ns": rr[0], "line_ns": line})


# Keywords calibrate, validate and fit_handoff give every run of a cell
# themselves (or take as their own arguments): a cell holding one would
# clash with them.
CELL_RESERVED = ("policy", "producers", "cpu", "duration", "cycles", "seed", "runs",
                 "mem_sample") + OPTIONS


def _policy_names(policies):
    """[policy names] from a policy (name, spec or Policy) or a list of them."""
    if isinstance(policies, (str, Policy)):
        policies = [policies]
    if not isinstance(policies, (list, tuple)) or not policies or not all(
            isinstance(p, Policy) or (isinstance(p, str) and p) for p in policies):
        raise errors.ParameterTypeError(
            "policies must be a policy (its name, spec or a Policy) or a non-empty list of "
            "them, not %r" % (errors.Echo(policies),), name="policies", value=policies)
    return [p.name if isinstance(p, Policy) else p for p in policies]


def _cells(cells):
    """[cell dicts], each a "workload" and its parameters, none of them a
    keyword the runs of a cell are given here (CELL_RESERVED)."""
    if not isinstance(cells, (list, tuple)) or not cells or not all(
            isinstance(c, dict) and isinstance(c.get("workload"), str) for c in cells):
        raise errors.ParameterTypeError(
            "cells must be a non-empty list of dicts, each with its \"workload\" and its "
            "parameters ({\"workload\": \"malloc-free\", \"allocs_per_cycle\": 64}), not %r"
            % (errors.Echo(cells),), name="cells", value=cells)
    for c in cells:
        clash = [k for k in c if k in CELL_RESERVED]
        if clash:
            wl = schema.workload(c["workload"])  # UnknownNameError naming the valid ones
            raise errors.InvalidArgument(
                "cell %r: calibrate and validate set %s for every run themselves (their own "
                "arguments), not per cell; a cell holds \"workload\" and the workload's "
                "parameters (%s: %s)" % (errors.Echo(c), ", ".join(map(repr, clash)), wl.name,
                                         ", ".join(p.name for p in wl.params) or "none"),
                name="cells", value=clash, valid=[p.name for p in wl.params])
    return [dict(c) for c in cells]


def _sim_args(policies, cells, duration, runs, line_transfer=None,
              lines_per_handoff=DEFAULT_LINES_PER_HANDOFF, producers=1, seed=1,
              sim_duration=None):
    """([policy names], [cell dicts], [producer counts]) of calibrate,
    validate and fit_handoff, after each argument is checked (a specific
    error naming the bad value), and every cell planned at those producers
    as the simulated runs are (what plan() refuses, refused before any run).
    Policies may be Policy objects, runs a NumPy integer, producers one
    count or a list of them, as run() takes them."""
    from .run import MAX_PRODUCERS, MAX_SECONDS, as_list, int_in, plan
    policies, cells = _policy_names(policies), _cells(cells)
    for name, v in (("duration", duration), ("sim_duration", sim_duration)):
        if (name == "duration" or v is not None) and not _number(v, MIN_CELL_SECONDS,
                                                                 MAX_SECONDS):
            raise errors.ParameterRangeError(
                "%s=%r: a measured phase from %g to %g seconds (a shorter one measures "
                "the clock, not the cell)" % (name, v, MIN_CELL_SECONDS, MAX_SECONDS),
                name=name, value=v, min=MIN_CELL_SECONDS, max=MAX_SECONDS)
    if not isinstance(runs, numbers.Integral) or isinstance(runs, bool) or \
            not 1 <= runs <= 1000:
        raise errors.ParameterRangeError("runs=%r: an integer from 1 to 1000" % (runs,),
                                         name="runs", value=runs, min=1, max=1000)
    check_option("line_transfer", line_transfer)
    check_option("lines_per_handoff", lines_per_handoff)
    counts = uniq([int_in("producers", p, 1, MAX_PRODUCERS)
                   for p in as_list(producers, "producers")])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the runs themselves warn
        for c in cells:
            params = {k: v for k, v in c.items() if k != "workload"}
            for pol in policies:
                plan(c["workload"], pol, producers=counts, cpu="simulated", duration=duration,
                     seed=seed, runs=1, mem_sample=0, calibration=_BOOT, **params)
    return policies, cells, counts


def check_option(name, v, hi=NS_MAX):
    """ParameterRangeError unless ``v`` (a calibration's override, None for
    none) is a number from 0 to ``hi``."""
    if v is not None and not _number(v, 0, hi):
        raise errors.ParameterRangeError("%s=%r: a number from 0 to %g" % (name, v, hi),
                                         name=name, value=v, min=0, max=hi)


def calibrate(policies, cells=DEFAULT_CELLS, duration=CALIBRATION_SECONDS, seed=1,
              line_transfer=None, lines_per_handoff=DEFAULT_LINES_PER_HANDOFF, runs=1,
              coherence=None):
    """A Calibration for ``policies`` from ``cells`` (dicts: workload and its
    parameters) at one producer on this machine."""
    from . import run as mrun

    policies, cells, _ = _sim_args(policies, cells, duration, runs, line_transfer,
                                   lines_per_handoff, seed=seed)
    coherence = _given_coherence(coherence)
    parts, used = [], []
    t0, load = time.time(), machine.loadavg()
    measured = {(pol, i): _cell_per_op(pol, cell, duration, seed, None)
                for i, cell in enumerate(cells) for pol in policies}
    for i, cell in enumerate(cells):
        cell = dict(cell)
        wl = cell.pop("workload")
        for pol in policies:
            cycles = measured[pol, i][2][1]  # SIM_WORK_CAP times the measured runs' work
            _, tasks = mrun.plan(wl, pol, producers=1, cpu="simulated", duration=duration,
                                 cycles=cycles, seed=seed, runs=runs, mem_sample=0,
                                 calibration=_BOOT, **cell)
            for task in tasks:
                for r in range(runs):
                    raw = mrun.run_once(task, r, calibrate=True)
                    parts.append(raw["sim"]["fit"])
                used.append(task["point"])
    costs, report = fit(parts)
    scales, offsets, scale_cells = _scale(policies, cells, costs, measured, seed)
    report["scale"] = scales
    report["offset_ns"] = offsets
    report["scale_cells"] = scale_cells
    lt, line_info = _line(line_transfer, load)
    probe = None
    if coherence is None and line_transfer is None:
        coherence, probe = coherence_probe(lt)
    info = {"host": machine.cpu_model(), "hostname": os.uname().nodename,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "cells": used, **line_info,
            "coherence": "measured (probe: %s)" % ", ".join(
                "%s %.1f" % kv for kv in sorted(probe.items())) if probe else
            "given" if coherence is not None else
            "none (stores free, every load a whole line, reads shared)",
            "lines_per_handoff": "given", "fit": report, "seconds": round(time.time() - t0, 2)}
    cal = Calibration(costs, lt, lines_per_handoff, info, scales=scales, offsets=offsets,
                      coherence=coherence)
    for line in calibration_warnings(cal):
        warnings.warn(SuspectCalibrationWarning(line), stacklevel=2)
    return cal


def _given_coherence(coherence):
    """calibrate's coherence: None (probed, or none with the line cost
    given), or an object of some of NO_COHERENCE's keys (the rest: theirs),
    checked; a specific error naming the bad key or value."""
    if coherence is None:
        return None
    if not isinstance(coherence, dict):
        raise errors.ParameterTypeError(
            "coherence must be None or an object of some of %s, not %r" % (
                ", ".join(sorted(NO_COHERENCE)), errors.Echo(coherence)),
            name="coherence", value=coherence)
    for k in coherence:
        if k not in NO_COHERENCE:
            raise errors.UnknownNameError.make("coherence key", k, sorted(NO_COHERENCE))
    return _coherence(dict(NO_COHERENCE, **coherence), "coherence")


def _scale(policies, cells, costs, measured, seed):
    """Per policy, for the allocations and for the frees, a factor on the
    fitted costs and an offset in ns per call at the top of the stack:
    timing segments alone costs the code its overlap with its neighbours
    (and the harness's cache lines), not alike in the two parts, and the
    fit spreads that over the terms the cheap calls share, so one factor
    cannot hold both a cell of cheap hits and one of refills and flushes.
    Fitted to this machine's measured runs of the calibration cells
    themselves (pinned, one producer): measured ns per op = factor x the
    simulated ns per op + offset x the calls per op, solved on the cells
    (exactly on two, least squares on more), then refined, since a segment
    never costs less than the floor: a round simulates the cells with the
    pair and solves again for what the floor added, and is kept when it
    brings the cells closer. One cell, a solution without a positive factor,
    or one whose offset would take a call's whole measured time (cells that
    cannot tell the two apart) get the geometric mean of measured over
    simulated and no offset. Fitted on the
    calibration cells only; every other cell is a prediction a validation
    checks. ``measured``: {(policy, cell index): _cell_per_op's measured
    reading}. Returns (factors, offsets, the cells measured)."""
    unit = Calibration(costs, 0.0, 0.0)
    rows, used = {}, []
    for i, cell in enumerate(cells):
        for pol in policies:
            meas, point, length = measured[pol, i]
            rows.setdefault(pol, []).append(
                (meas[:2], _cell_per_op(pol, cell, length, seed, unit)[0]))
            used.append(point)
    factors, offsets = {}, {}
    for pol, got in rows.items():
        m = np.array([g[0] for g in got])      # cells x (alloc, free): measured
        s = np.array([g[1][:2] for g in got])  # simulated with factor 1, offset 0
        n = np.array([g[1][2:] for g in got])  # calls at the top per op
        pairs = [_factor_offset(m[:, i], s[:, i], n[:, i]) for i in (0, 1)]
        best = None
        for _ in range(SCALE_ROUNDS):
            cal = Calibration(costs, 0.0, 0.0, scales={pol: [f for f, _ in pairs]},
                              offsets={pol: [o for _, o in pairs]})
            now = np.array([_cell_per_op(pol, c, measured[pol, i][2], seed, cal)[0][:2]
                            for i, c in enumerate(cells)])
            err = float(np.max(np.abs(np.log(now / m))))
            if best is not None and err >= best[0]:
                break
            best = (err, pairs)
            lin = np.array([[f * s[j, i] + o * n[j, i] for i, (f, o) in enumerate(pairs)]
                            for j in range(len(cells))])
            pairs = [_factor_offset(m[:, i] - (now - lin)[:, i], s[:, i], n[:, i])
                     for i in (0, 1)]
        factors[pol] = [f for f, _ in best[1]]
        offsets[pol] = [o for _, o in best[1]]
    return factors, offsets, used


# A simulated calibration run stops after this many times the cycles its
# cell's measured runs made, if its simulated duration has not ended it
# first. Where the duration ends it (the usual case) nothing changes; a run
# whose simulated clock barely moves (costs not scaled yet, on a path with no
# sync point) is stopped well past the measured work, minutes earlier. At
# 1x, the cap also cut runs that the duration would have ended, and
# libarena-transfer's 2-producer prediction of malloc-free at 256
# allocs/cycle (free) moved from 0.90-0.92 of the measured to 1.25-1.29.
SIM_WORK_CAP = 4

# Measured runs per calibration cell (their median): a factor and an offset
# are solved from two cells, so one noisy run would move every prediction.
CALIBRATION_RUNS = 5

# Rounds of _scale's refinement, the first included (the floor's share is
# small: a round or two settle it).
SCALE_ROUNDS = 3


def _cell_per_op(policy, cell, length, seed, calibration):
    """One producer on ``cell``: measured (calibration None: pinned, the
    median of CALIBRATION_RUNS runs of ``length`` seconds) or simulated with
    ``calibration`` (one run, then with the calls at the top per op;
    ``length``: (seconds, cycles), the first reached ends it). Returns
    ([alloc ns, free ns, (alloc calls, free calls)] per op, the cell's
    point), and when measured also (length, SIM_WORK_CAP times the median
    cycles a run made: the cap of the cell's simulated runs, see there)."""
    from . import run as mrun

    cell = dict(cell)
    wl = cell.pop("workload")
    if calibration is None:
        _, tasks = mrun.plan(wl, policy, producers=1, cpu="pinned", duration=length, seed=seed,
                             runs=1, mem_sample=0, **cell)
    else:
        _, tasks = mrun.plan(wl, policy, producers=1, cpu="simulated", duration=length[0],
                             cycles=length[1], seed=seed, runs=1, mem_sample=0,
                             calibration=calibration, **cell)
    vals, cycles = [], []
    for r in range(CALIBRATION_RUNS if calibration is None else 1):
        raw = mrun.run_once(tasks[0], r)
        ops = (max(raw["alloc_ops"], 1), max(raw["free_ops"], 1))
        v = [raw["alloc_ns"] / ops[0], raw["free_ns"] / ops[1]]
        if calibration is not None:
            v += [raw["sim"]["phase_calls"][i] / ops[i] for i in (0, 1)]
        vals.append(v)
        cycles.append(raw["cycles"])
    got = list(np.median(np.array(vals), axis=0)), tasks[0]["point"]
    cap = max(1, int(SIM_WORK_CAP * np.median(cycles)))
    return got if calibration is not None else got + ((length, cap),)


def _factor_offset(measured, simulated, segments):
    """(factor, offset ns per call) with measured = factor x simulated +
    offset x calls over the cells (per op), in relative error (exact on two
    cells); or (geometric-mean factor, 0) where the solution has no positive
    factor, or an offset that takes a call's whole measured time in any cell
    (what the fitted costs overstate per call is less than what the call
    costs: a larger one is noise of cells that cannot tell a cost per call
    from a cost per ns, as on the plain buddy, one lock per call in either,
    where the solve returned a factor of 13 with -1.2 us per call)."""
    ok = (measured > 0) & (simulated > 0)
    if not ok.any():
        return 1.0, 0.0
    m, s, n = measured[ok], simulated[ok], segments[ok]
    geo = float(np.exp(np.mean(np.log(m / s))))
    if len(m) < 2:
        return geo, 0.0
    A = np.stack([s, n], axis=1) / m[:, None]  # relative errors: each cell weighs the same
    sol, _, rank, _ = np.linalg.lstsq(A, np.ones(len(m)), rcond=None)
    f, o = float(sol[0]), float(sol[1])
    if rank < 2 or not (f > 0 and math.isfinite(o)) or np.any(np.abs(o) * n >= m):
        return geo, 0.0
    return f, o


# A placeholder calibration that lets calibrate() plan its own runs.
_BOOT = Calibration({}, 0.0, 0.0, {"boot": True})


# ---- the free parameter, and the validation ----

FIT_CELLS = ({"workload": "malloc-free", "allocs_per_cycle": 64},)
HANDOFF_GRID = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
JITTER_GRID = (0.0, 0.25, 0.5, 1.0)
TOLERANCE_2P = 0.25  # a 2-producer prediction off by more leaves the cells above unvalidated
# The largest tolerance, a share of the measured time (1: a prediction of
# double the measured is off by 100%): a larger one would pass every
# prediction below the measured, however far off.
TOLERANCE_MAX = 1.0


def check_tolerance(tolerance, where=None):
    """A Validation's tolerance, checked: a finite number above 0 and at
    most TOLERANCE_MAX; ParameterTypeError or ParameterRangeError naming it
    (``where``: the file it was read from, InvalidArgument)."""
    if isinstance(tolerance, numbers.Real) and not isinstance(tolerance, bool) and \
            0 < tolerance <= TOLERANCE_MAX:
        return float(tolerance)
    what = ("tolerance=%r: the share a 2-producer prediction may be off the measured time "
            "(%g: %g%%), a number above 0 and at most %g" % (
                errors.Echo(tolerance), TOLERANCE_2P, 100 * TOLERANCE_2P, TOLERANCE_MAX))
    if where is not None:
        raise errors.InvalidArgument("%s: validation %s" % (where, what))
    cls = errors.ParameterRangeError if isinstance(tolerance, numbers.Real) and \
        not isinstance(tolerance, bool) else errors.ParameterTypeError
    raise cls(what, name="tolerance", value=tolerance)


def _per_op(policy, cell, producers, cpu, runs, duration, seed, calibration=None):
    """Mean alloc and free ns per op of one cell (measured or simulated)."""
    from . import run as mrun

    cell = dict(cell)
    wl = cell.pop("workload")
    kw = {"calibration": calibration, "band": False} if cpu == "simulated" \
        else {"steal_reruns": 2}
    r = mrun.run(wl, policy, producers=producers, cpu=cpu, runs=runs, duration=duration,
                 seed=seed, mem_sample=0, **kw, **cell)
    pt = r.points[0]
    return float(np.mean(pt["alloc_ns"])), float(np.mean(pt["free_ns"]))


def fit_handoff(calibration, policies, cells=FIT_CELLS, runs=3, duration=0.2, seed=1,
                grid=HANDOFF_GRID, jitters=JITTER_GRID):
    """The two free parameters, lines_per_handoff and jitter, fitted to this
    machine's measured two-producer runs of ``cells`` (pinned): the grid
    point whose predictions are closest in log ratio, summed over policies,
    cells, alloc and free. Never a seed's number. Returns the calibration
    with them and with where they came from."""
    policies, cells, _ = _sim_args(policies, cells, duration, runs, producers=2, seed=seed)
    calibration = as_calibration(calibration)
    meas = {(p, i): _per_op(p, c, 2, "pinned", runs, duration, seed)
            for p in policies for i, c in enumerate(cells)}
    best = None
    for lph in grid:
        for jit in jitters:
            cal = calibration.with_(lines_per_handoff=lph, jitter=jit)
            err = 0.0
            for (p, i), m in meas.items():
                s = _per_op(p, cells[i], 2, "simulated", runs, min(duration, 0.05), seed, cal)
                err += sum(abs(math.log(max(a, 1e-9) / max(b, 1e-9))) for a, b in zip(s, m))
            if best is None or err < best[0]:
                best = (err, lph, jit)
    out = calibration.with_(lines_per_handoff=best[1], jitter=best[2])
    out.info = dict(out.info, lines_per_handoff="fitted on 2-producer measured runs",
                    jitter="fitted on 2-producer measured runs",
                    handoff_fit={"cells": list(cells), "policies": list(policies),
                                 "grid": list(grid), "jitters": list(jitters),
                                 "log_error": best[0],
                                 "measured": {"%s %d" % k: v for k, v in meas.items()}})
    return out


def _used(calibration, fitted, pol, producers, cell):
    """Whether a cell took part in the calibration (one producer) or in the
    handoff fit (two): fitted, not predicted."""
    def same(f):
        return all(f.get(k) == v for k, v in cell.items())
    if any(f.get("policy") == pol and f.get("producers") == producers and same(f)
           for f in fitted):
        return True
    hf = calibration.info.get("handoff_fit") or {}
    return producers == 2 and pol in hf.get("policies", ()) and any(
        same(c) for c in hf.get("cells", ()))


# A line cost of the measured runs this far from the calibration's (a
# share) makes a validation warn: predictions with lines move with it.
LINE_DRIFT = 0.15


class Validation:
    """Simulated against measured, per cell and op, with the verdict on the
    cells above this machine's CPUs."""

    def __init__(self, rows, usable, tolerance, line_ns=None):
        self.rows = rows
        self.usable = usable
        self.tolerance = check_tolerance(tolerance)
        # {"calibration": ns, "measured": [before, after] the measured runs}
        self.line_ns = line_ns

    def unvalidated(self):
        """(workload, policy) whose 2-producer prediction is off by more than
        the tolerance (or was not checked at 2 producers)."""
        bad = set()
        pairs = {(r["workload"], r["policy"]) for r in self.rows}
        for wp in pairs:
            two = [r for r in self.rows if (r["workload"], r["policy"]) == wp
                   and r["producers"] == 2]
            if not two or any(abs(r["ratio"] - 1) > self.tolerance for r in two):
                bad.add(wp)
        return sorted(bad)

    def to_dict(self):
        return {"rows": self.rows, "usable_cpus": self.usable, "tolerance": self.tolerance,
                "unvalidated": [list(x) for x in self.unvalidated()], "line_ns": self.line_ns}

    def line_drift(self):
        """How far the line cost of the measured runs is from the
        calibration's (the largest relative difference), or None."""
        ln = self.line_ns or {}
        now = [v for v in ln.get("measured") or () if v]
        if not now or not ln.get("calibration"):
            return None
        return max(abs(v / ln["calibration"] - 1) for v in now)

    def text(self):
        lines = ["simulated/measured per cell, ns per operation (measured: pinned, steal "
                 "reruns; simulated: predictions)",
                 "%-13s %-20s %5s %3s %-5s %10s %10s %6s" % (
                     "workload", "policy", "apc", "p", "op", "measured", "simulated", "ratio")]
        for r in self.rows:
            lines.append("%-13s %-20s %5s %3d %-5s %10.1f %10.1f %6.2f%s" % (
                r["workload"], r["policy"], r.get("allocs_per_cycle", ""), r["producers"],
                r["op"], r["measured_ns"], r["simulated_ns"], r["ratio"],
                "  (calibration cell)" if r["calibration_cell"] else ""))
        if self.usable <= 2 and any(r["producers"] == 2 for r in self.rows):
            lines.append("note: on %d CPUs the measured runs see at most one waiter per lock "
                         "(the 2-producer figures)" % self.usable)
        drift = self.line_drift()
        if drift is not None:
            lines.append("line transfer: %.1f ns at calibration, %s ns before and after the "
                         "measured runs" % (self.line_ns["calibration"], " and ".join(
                             "%.1f" % v for v in self.line_ns["measured"])))
            if drift > LINE_DRIFT:
                lines.append("warning: the line cost moved %.0f%% since the calibration (the "
                             "host places the CPUs): predictions with lines move with it; "
                             "calibrate again before judging them" % (100 * drift))
        bad = self.unvalidated()
        two = {(r["workload"], r["policy"]) for r in self.rows if r["producers"] == 2}
        lines.append("unvalidated at every producer count (measured off within %d CPUs, "
                     "unchecked above them): %s" % (self.usable, ", ".join(
            "%s on %s%s" % (wp + ("" if wp in two else " (no 2-producer run to validate)",))
            for wp in bad) if bad else "none"))
        return "\n".join(lines)


def validate(calibration, policies, cells=None, producers=None, runs=3, duration=0.2, seed=1,
             tolerance=TOLERANCE_2P, sim_duration=None):
    """Run each cell measured (pinned) and simulated at 1, 2 and every
    producer count up to the usable CPUs; a Validation. The calibration's
    own cells are marked (they were fitted, not predicted)."""
    usable = int(lib.al_cpus_usable())
    tolerance = check_tolerance(tolerance)
    if cells is None:
        cells = [{"workload": w, "allocs_per_cycle": a}
                 for w in ("malloc-free", "malloc-xfree") for a in (64, 256)]
    if producers is None:
        producers = sorted({1, 2} | set(range(1, usable + 1)))
    policies, cells, producers = _sim_args(policies, cells, duration, runs,
                                           producers=producers, seed=seed,
                                           sim_duration=sim_duration)
    calibration = as_calibration(calibration)
    fitted = [dict(c) for c in calibration.info.get("cells", [])]
    rows, line = [], []
    if usable >= 2:
        line.append(line_transfer_ns())
    for cell in cells:
        for pol in policies:
            for p in producers:
                m = _per_op(pol, cell, p, "pinned" if p <= usable else "virtual", runs,
                            duration, seed)
                s = _per_op(pol, cell, p, "simulated", runs, sim_duration or duration, seed,
                            calibration)
                used = _used(calibration, fitted, pol, p, cell)
                for op, mv, sv in (("alloc", m[0], s[0]), ("free", m[1], s[1])):
                    rows.append(dict(cell, policy=pol, producers=p, op=op, measured_ns=mv,
                                     simulated_ns=sv, ratio=sv / mv if mv else float("nan"),
                                     calibration_cell=used))
    if usable >= 2:
        line.append(line_transfer_ns())
    return Validation(rows, usable, tolerance,
                      {"calibration": calibration.line_transfer_ns, "measured": line})
