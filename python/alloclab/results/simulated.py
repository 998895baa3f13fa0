"""What a simulated cell says about itself, wherever a user meets it.

A cell run on simulated CPUs (cpu="simulated", DESIGN §11) holds predicted
times (a calibrated cost model in virtual time) and counters of what the
real code did in the simulated schedule (COUNTERS: those that depend on
timing, such as lock contention or cache hits, are predictions too). A few
metrics the host measures while it simulates (HOST_METRICS: steal, the
process's RSS, the host thread's context switches) are no prediction, and
MIXED_METRICS divide such a host count by simulated time. Tables, warnings,
plots, verdicts and comparisons take their words from here, so that they
all say the same thing:

- LABEL ("simulated: predicted") heads a table with simulated cells, with
  the calibration's id (the first 12 hex digits of the SHA-1 of its JSON,
  as measure.run gives it to every run), HOST_LABEL and MIXED_LABEL one of
  a host metric or a mixed one (heading(points, metric)); PLOT_LABEL is a
  plot's legend entry; PREDICTED the kind of a verdict or a comparison
  whose sides are both simulated;
- point_info(raws): what a Point keeps of its runs' raw["sim"] (the
  calibration id, the terms without a cost, the engine's per-run counts,
  the sensitivity band, and the first run's timeline when one was asked
  for); band_means(points, metric): the band's values of a side;
- warning_lines(points, metadata): the lines under a table: the times are
  predictions; terms the calibration has no cost for (counted as 0 ns);
  cells above the usable CPUs of a validation that found the (workload,
  policy) off (the calibration's info["validation"]["unvalidated"]).

Nothing here runs anything; it reads Points and a Result's metadata.
"""

import math

from .. import errors
from ..policies.policy import same_policy

MODE = "simulated"
LABEL = "simulated: predicted"
PLOT_LABEL = "simulated (predicted)"
PREDICTED = "predicted"
HOST_LABEL = "simulated: measured on the host while simulating, not predicted"
MIXED_LABEL = "simulated: a count the host measured, per simulated (predicted) second"
COUNTERS = ("counters count what the real code did in the simulated schedule: those that "
            "depend on timing (locks, contention, cache hits) are predictions too")
# Metrics of a simulated run that the host measures rather than the virtual
# clock or the simulated schedule: the host's steal time, the process's
# resident set (the simulator's own included), the context switches of the
# one host thread that runs every model CPU, the engine's main thread.
HOST_METRICS = frozenset(("steal_pct", "mem_rss", "mem_rss_peak", "worker_invol_ctxsw",
                          "worker_vol_ctxsw", "engine_wakeups", "engine_on_worker_cpus"))
# A host count (the host thread's preemptions) over the simulated seconds of
# the model CPUs (host.machine.run_metrics divides by elapsed_ns, virtual).
MIXED_METRICS = frozenset(("worker_invol_ctxsw_per_s", "worker_preempted_per_s"))
TERMS_SHOWN = 8  # uncalibrated terms named in a warning; the rest counted
RUN_COUNTS = ("switches", "sync_points", "lock_waits", "lock_timeouts", "handoffs", "lines",
              "wait_ns", "line_ns", "uncalibrated_units", "virtual_ns")


class MixedModesError(errors.IncomparableError):
    """A simulated side set against a measured one: a prediction and a
    measurement are never judged as if both were measured. ``modes`` holds
    the two sides' CPU modes, both named in the message."""

    modes = ()


def is_simulated(point):
    return point.info.get("cpu_mode") == MODE or point.params.get("cpu") == MODE


def mode_of(point):
    """The CPU mode a point ran in (what the engine used, else what was asked)."""
    return point.info.get("cpu_mode") or point.params.get("cpu")


def calibration_id(point):
    return (point.info.get("sim") or {}).get("calibration_id")


def point_info(raws):
    """info["sim"] of a simulated point's raw runs ({} for a measured one):
    calibration_id, uncalibrated (terms without a cost, in any run),
    borrowed_scale (True when the calibration had no factors of the point's
    own policy),
    per-run lists of the engine's counts, and the first run's timeline
    (events as lists) when the runs kept one."""
    sims = [r.get("sim") for r in raws]
    if not sims or any(s is None for s in sims):
        return {}
    out = {"calibration_id": sims[0].get("calibration_id"),
           "uncalibrated": sorted({t for s in sims for t in s.get("uncalibrated", ())})}
    for k in RUN_COUNTS:
        if all(k in s for s in sims):
            out[k] = [s[k] for s in sims]
    if all(s.get("scale") == sims[0].get("scale") for s in sims) and sims[0].get("scale"):
        out["scale"] = list(sims[0]["scale"])
    if any(s.get("borrowed_scale") for s in sims):
        out["borrowed_scale"] = True  # no factors of its own in the calibration
    if sims[0].get("timeline"):
        out["timeline"] = [list(ev) for ev in sims[0]["timeline"]]
    if all(s.get("band") for s in sims):
        out["band"] = [s["band"] for s in sims]
    return out


def factors(points):
    """The calibration's [alloc, free] factors on the costs of the policy
    the simulated points ran, when every one of them had the same (the
    runs' raw["sim"]["scale"]); else None."""
    seen = {tuple((p.info.get("sim") or {}).get("scale") or ()) for p in points}
    if len(seen) != 1:
        return None
    (f,) = seen
    return list(f) if len(f) == 2 and all(x > 0 for x in f) else None


def within_factors(metric, old, new, ratio, threshold):
    """The ratio of the two sides' calibration factors for ``metric``'s
    operation (alloc_*, free_*), new's over old's, when the predicted
    ``ratio`` (new/old) lies between 1 and it, with ``threshold``'s margin,
    else None. Each policy's costs carry its own factors (measure.sim), so
    two policies running the same code are predicted apart by exactly that
    ratio: an effect between none and it cannot be told from it (one the
    other way, or beyond it, can). ``old``/``new``: [alloc, free] factors or
    None."""
    op = 0 if metric.startswith("alloc") else 1 if metric.startswith("free") else None
    if op is None or old is None or new is None or not ratio > 0:
        return None
    d, t, m = math.log(new[op] / old[op]), math.log(ratio), math.log1p(threshold)
    if abs(d) < 1e-9 or not min(0.0, d) - m <= t <= max(0.0, d) + m:
        return None
    return new[op] / old[op]


def band_means(points, metric):
    """(at half, at double) the line cost: the mean per-op value of metric
    over the points' runs (raw["sim"]["band"], measure.sim.BAND), or None
    when a run has none."""
    vals = []
    for p in points:
        bands = (p.info.get("sim") or {}).get("band")
        if not bands:
            return None
        for b in bands:
            v = b.get(metric)
            if v is None or None in v:
                return None
            vals.append(v)
    if not vals:
        return None
    return tuple(sum(v[i] for v in vals) / len(vals) for i in (0, 1))


def calibration_ids(points):
    ids = []
    for p in points:
        cid = calibration_id(p)
        if is_simulated(p) and cid and cid not in ids:
            ids.append(cid)
    return ids


def source(metric):
    """Where a simulated run's ``metric`` comes from: "host" (measured on the
    host while simulating), "mixed" (a host count per simulated second) or
    "simulated" (the virtual clock or the simulated schedule)."""
    if metric in HOST_METRICS:
        return "host"
    if metric in MIXED_METRICS:
        return "mixed"
    return MODE


def heading(points, metric=None):
    """"simulated: predicted (calibration <id>)" for points with simulated
    ones, else None; for a ``metric`` the host measures, HOST_LABEL (or
    MIXED_LABEL) in its place: that number is no prediction."""
    if not any(is_simulated(p) for p in points):
        return None
    ids = calibration_ids(points)
    words = {"host": HOST_LABEL, "mixed": MIXED_LABEL}.get(source(metric), LABEL)
    return "%s (calibration %s)" % (words, ", ".join(ids) if ids else "not recorded")


def validation(metadata):
    """The calibration's recorded validation (alloclab sim validate --out),
    or None."""
    sim = ((metadata or {}).get("run") or {}).get("simulated") or {}
    v = ((sim.get("calibration") or {}).get("info") or {}).get("validation")
    return v if isinstance(v, dict) else None


def unvalidated(point, metadata):
    """Whether a simulated point is of a (workload, policy) the validation
    found off (a preset and its spec alike): above the validation's usable
    CPUs nothing checked it, and at or below them the validation measured
    it off. Such a point never decides a verdict."""
    v = validation(metadata)
    if v is None or not is_simulated(point):
        return False
    wl, pol = point.params.get("workload"), point.params.get("policy")
    return any(isinstance(x, (list, tuple)) and len(x) == 2 and x[0] == wl and
               same_policy(x[1], pol) for x in v.get("unvalidated", ()))


def _names(labels, limit):
    more = len(labels) - limit
    return ", ".join(labels[:limit]) + (" and %d more" % more if more > 0 else "")


def warning_lines(cells, metadata, limit=6):
    """The lines under a table for its simulated cells: ``cells`` is
    [(label, [points])], every cell of the table."""
    sim = [(lab, [p for p in ps if is_simulated(p)]) for lab, ps in cells]
    sim = [(lab, ps) for lab, ps in sim if ps]
    if not sim:
        return []
    ids = calibration_ids([p for _, ps in sim for p in ps])
    which = "every cell" if len(sim) == len(cells) else _names([lab for lab, _ in sim], limit)
    lines = ["simulated: times of simulated CPUs are predictions from calibration %s, not "
             "measurements; %s: %s" % (", ".join(ids) or "(not recorded)", COUNTERS, which)]
    terms = sorted({t for _, ps in sim for p in ps
                    for t in (p.info.get("sim") or {}).get("uncalibrated", ())})
    if terms:
        lines.append("uncalibrated terms: %s have no cost in the calibration (counted as 0 ns; "
                     "calibrate on a cell that runs them): %s" % (
                         _names(terms, TERMS_SHOWN), _names([lab for lab, ps in sim if any(
                             (p.info.get("sim") or {}).get("uncalibrated") for p in ps)],
                             limit)))
    borrowed = [lab for lab, ps in sim if any((p.info.get("sim") or {}).get("borrowed_scale")
                                              for p in ps)]
    if borrowed:
        lines.append("borrowed factors: the calibration did not run these cells' policies, so "
                     "their cost factors are the geometric mean of the others' (calibrate on "
                     "them): %s" % _names(borrowed, limit))
    return lines + _unvalidated_lines(sim, metadata, limit)


def _unvalidated_lines(sim, metadata, limit):
    """The lines for cells of a (workload, policy) the validation found off:
    those above its usable CPUs, and those at or below them, which it
    measured off (the user can measure them instead)."""
    v = validation(metadata)
    if v is None:
        return []
    usable = v.get("usable_cpus")
    above, within = [], []
    for lab, ps in sim:
        for p in ps:
            if unvalidated(p, metadata):  # a validation without its CPU count: all above
                (within if isinstance(usable, int) and (p.params.get("producers") or 0) <=
                 usable else above).append(lab)
                break
    off = "off by more than %g%%" % (100 * float(v.get("tolerance", 0.25)))
    lines = []
    if above:
        where = ("above the validation's %d usable CPUs, whose" % usable
                 if isinstance(usable, int) else "the validation's")
        lines.append("unvalidated: %s 2-producer prediction of this workload and policy was "
                     "%s (or was not made: validated at 1 producer only): %s"
                     % (where, off, _names(above, limit)))
    if within:
        lines.append("unvalidated: within the validation's %s usable CPUs, where its "
                     "2-producer prediction of this workload and policy was %s or not made "
                     "(measure these cells instead): %s" % (usable, off, _names(within, limit)))
    return lines


def side_mode(points):
    """The CPU mode of one side of a comparison: "simulated" when every point
    is simulated, else the measured modes' ("virtual" when any is); a side
    that pools simulated and measured points is refused."""
    modes = {mode_of(p) for p in points}
    if MODE in modes and len(modes) > 1:
        raise MixedModesError(
            "one side pools simulated and measured (%s) points: a prediction and a "
            "measurement are never pooled; filter on cpu" % "/".join(
                sorted(str(m) for m in modes - {MODE})), modes=tuple(sorted(map(str, modes))))
    if MODE in modes:
        return MODE
    if "virtual" in modes:
        return "virtual"
    return modes.pop() if len(modes) == 1 else None


class TwoCalibrationsError(errors.IncomparableError):
    """Two simulated sides predicted with different calibrations: their
    difference would be the two cost models', not the code's. ``ids``
    holds both calibrations' ids, named in the message."""

    ids = ()


def refuse_two_calibrations(points_a, points_b, what="a comparison"):
    """TwoCalibrationsError when two simulated sides' points were predicted
    with different calibrations (one side's own ids may be several)."""
    a, b = calibration_ids(points_a), calibration_ids(points_b)
    if not a or not b or set(a) == set(b):
        return
    raise TwoCalibrationsError(
        "%s: one side was predicted with calibration %s, the other with %s: their times "
        "would differ by the two cost models, not by what ran; simulate both sides with "
        "one calibration (--calibration FILE)" % (what, ", ".join(a), ", ".join(b)),
        ids=(tuple(a), tuple(b)))


CPU_MODES = ("pinned", "virtual", MODE)


def _side_modes(side):
    """(the side's mode for the test, the words naming it): ``side`` is a
    CPU mode or a list of Points, whose every mode is named (a side of
    pinned and virtual cells: "cpu=pinned/virtual")."""
    if isinstance(side, (list, tuple)):
        return side_mode(side), "cpu=%s" % "/".join(sorted({str(mode_of(p)) for p in side}))
    if side in CPU_MODES:
        return side, "cpu=%s" % side
    return side, "this machine's CPUs"  # a measured side whose mode was not given


def refuse_mixed(side_a, side_b, what="a comparison"):
    """MixedModesError when exactly one of two sides is simulated; each side
    is its CPU mode or its Points, and the message names what each ran on."""
    (mode_a, words_a), (mode_b, words_b) = _side_modes(side_a), _side_modes(side_b)
    if (mode_a == MODE) == (mode_b == MODE):
        return
    meas = words_b if mode_a == MODE else words_a
    raise MixedModesError(
        "%s: a simulated side (cpu=%s, predictions) against a measured side (%s): a "
        "prediction is never judged against a measurement as if both were measured; compare "
        "simulated with simulated, measured with measured (alloclab sim validate sets "
        "predictions beside measurements)" % (what, MODE, meas), modes=(mode_a, mode_b))
