"""Results of a sweep: every run of every grid point, with the machine's metadata.

A Result keeps raw per-run values as NumPy arrays, one array per metric per
grid point, so means, standard deviations and confidence intervals are
computed from data, never from one number. Metrics:

- alloc_ns, free_ns: ns per operation (measured time / operations)
- throughput: (alloc_ops + free_ops) per second of the measured phase
- cycles, alloc_ops, free_ops, cross_frees, elapsed_ns, timer_overhead_ns,
  steal_pct: as the engine reports them
- "<layer>.<counter>" for every counter of every layer, "<layer>.bytes_held"
  (after the measured phase) and "<layer>.leaked" (after teardown), and
  "<layer>.<counter>_per_op" = counter / (alloc_ops + free_ops); a counter
  the point's stats level did not measure ("stats" parameter: none at
  "off", no lock times at "lite") is absent from its data, shown "n/a" in
  tables, never 0; ``describe(metric)`` gives a counter's doc and kind
- "wl.<name>" for every metric the workload reports (e.g. test_vmalloc's
  "wl.fix_size_alloc_test.avg_usec", local-storage-create's wl.creates_per_s)

- worker_invol_ctxsw (and _per_s: per worker per second of the measured
  phase), worker_vol_ctxsw, engine_wakeups, engine_on_worker_cpus: how the
  run was scheduled (alloclab.machine); metadata["machine_state"] and
  "load_before"/"load_after" record the machine (``machine_warnings()``)
- mem_requested, mem_held, mem_rss (end of the measured phase) and their
  *_peak (sampled), mem_fragmentation = held peak / requested peak, in
  bytes (see the C engine's struct al_mem)
- with histogram=True: <op>_p50_ns, _p90_ns, _p99_ns, _p999_ns, _max_ns
  per run, from the run's merged histogram (``Point.hist``)

It serialises to JSON losslessly (``to_json``/``from_json``) and to tidy rows
(``rows``, ``to_csv``, ``to_pandas``). Results concatenate (``a + b``,
``sum([a, b, c])``, ``Result.concat``: a point that repeats another's runs,
as in ``a + a``, is refused as from_json refuses it; predictions set beside
measurements keep cells of their own, and compare refuses to judge one
against the other) and filter (``filter(policy=..., producers=[1, 2])``). A
file is read only when every field the tables, lines and warnings read is
of the shape they read it in (from_json names the first that is not).
Per-cell statistics (mean, sd, CI, warnings) come from alloclab.stats.
"""

import csv
import io
import json
import math
import os
import re

import numpy as np

from . import _counters, _measures
from . import simulated as _sim
from .. import errors, files
from ..host import machine
from . import stats as _stats
from .metrics import BASE_METRICS, METRIC_INFO
from ..cbind._ffi import lib
from ..cbind import schema
from ..policies.policy import same_policy
from ..policies.policy import canonical
from . import hist as _hist

FORMAT = "alloclab-result"
FORMAT_VERSION = 2  # 2: per-run memory metrics and histograms (Point.hist)

_INT_BASE = {"cycles", "alloc_ops", "free_ops", "cross_frees"}



# ---------------------------------------------------------------- metadata

# ---------------------------------------------------------------- points

def _layer_keys(layers):
    """Metric prefixes for a stack's layers; a repeated name gets '#2', '#3'."""
    seen, keys = {}, []
    for lay in layers:
        n = lay["layer"]
        seen[n] = seen.get(n, 0) + 1
        keys.append(n if seen[n] == 1 else "%s#%d" % (n, seen[n]))
    return keys


def run_metrics(raw):
    """One raw run (from run.run_once) -> {metric: scalar}, in metric order."""
    ops = raw["alloc_ops"] + raw["free_ops"]
    m = {
        "alloc_ns": raw["alloc_ns"] / raw["alloc_ops"] if raw["alloc_ops"] else math.nan,
        "free_ns": raw["free_ns"] / raw["free_ops"] if raw["free_ops"] else math.nan,
        "throughput": ops / (raw["elapsed_ns"] / 1e9) if raw["elapsed_ns"] > 0 else math.nan,
        "cycles": raw["cycles"],
        "alloc_ops": raw["alloc_ops"],
        "free_ops": raw["free_ops"],
        "cross_frees": raw["cross_frees"],
        "elapsed_ns": raw["elapsed_ns"],
        "timer_overhead_ns": raw["timer_overhead_ns"],
        "steal_pct": raw["steal_pct"],
    }
    per_op = {}
    for key, lay in zip(_layer_keys(raw["layers"]), raw["layers"]):
        m[key + ".bytes_held"] = lay["bytes_held"]
        m[key + ".leaked"] = lay["leaked"]
        gauges = set(lay.get("gauges", ()))
        for name, v in lay["counters"]:
            m["%s.%s" % (key, name)] = v
            if name not in gauges:  # a level per op means nothing
                per_op["%s.%s_per_op" % (key, name)] = v / ops if ops else math.nan
    m.update(per_op)
    m.update(_measures.run_metrics(raw))
    m.update(machine.run_metrics(raw))  # workers preempted, engine wake-ups
    for name, v in raw.get("metrics", ()):
        m["wl." + name] = v
    return m


def _array(values):
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.int64)
    return np.array(values, dtype=np.float64)


def _jsonable(v):
    if isinstance(v, np.generic):
        return v.item()
    return v


class Point:
    """One grid point: ``params`` (what was asked), ``info`` (what the engine
    did: cpu mode used, model and concurrent CPUs, clock) and ``data``
    ({metric: NumPy array over runs})."""

    __slots__ = ("params", "info", "data", "hist")

    def __init__(self, params, info, data, hist=None):
        self.params = params
        self.info = info
        self.data = data
        self.hist = hist or {}  # {op: [Histogram per run]} with histogram=True

    @property
    def runs(self):
        return max((len(a) for a in self.data.values()), default=0)

    def __getitem__(self, metric):
        return self.data[metric]

    def __eq__(self, other):
        if not isinstance(other, Point):
            return NotImplemented
        if self.params != other.params or self.info != other.info:
            return False
        if list(self.data) != list(other.data) or self.hist != other.hist:
            return False
        return all(_arrays_equal(self.data[k], other.data[k]) for k in self.data)

    def __repr__(self):
        return "Point(%r, runs=%d%s)" % (self.params, self.runs, ", %s" % _sim.PLOT_LABEL
                                         if _sim.is_simulated(self) else "")

    def to_dict(self):
        d = {
            "params": self.params,
            "info": self.info,
            "data": {k: {"dtype": str(a.dtype), "values": [_jsonable(x) for x in a.tolist()]}
                     for k, a in self.data.items()},
        }
        if self.hist:
            d["hist"] = _measures.hist_to_json(self.hist)
        return d

    @classmethod
    def from_dict(cls, d):
        data = {k: np.array(v["values"], dtype=np.dtype(v["dtype"]))
                for k, v in d["data"].items()}
        return cls(dict(d["params"]), dict(d["info"]), data,
                   _measures.hist_from_json(d.get("hist")))


def _arrays_equal(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _printk_notes(points, point_runs):
    """What the real code under test is and printed: for a point whose policy
    runs a libarena tree, info["libarena"] (the tree, whether it has per-CPU
    caches of its own, whether an ASan build) and its note; what the tree
    printed (bpf_stream_printk, kept by its layer) in info["printk"] and
    info["notes"] of the point whose run created the instance that printed.
    Nothing to do, and nothing imported, where no libarena layer was
    loaded."""
    import sys

    real = sys.modules.get("alloclab.policies.libarena_real")
    if real is None:
        return
    runs = [(i, r["pid"], r["t_start"], params.get("policy"))
            for i, (params, raws) in enumerate(point_runs) for r in raws
            if "pid" in r and "t_start" in r]
    for p in points:
        trees = real.layers_info(p.params.get("policy", ""))
        if trees:
            p.info["libarena"] = [{k: v for k, v in t.items() if k != "note"} for t in trees]
            p.info["notes"] = [t["note"] for t in trees]
    for i, printk in real.notes_for(runs).items():
        points[i].info["printk"] = printk
        points[i].info["notes"] = points[i].info.get("notes", []) + \
            [real.note_text(x) for x in printk]


def point_info(raws):
    r = raws[0]
    info = {
        "cpu_mode": r["cpu_mode"],
        "ncpu_model": r["ncpu_model"],
        "ncpu_concurrent": r["ncpu_concurrent"],
        "ncpu_usable": r["ncpu_usable"],
        "threads_per_core": r["threads_per_core"],
        "clock": "tsc" if r["clock_tsc"] else "monotonic",
        "ticks_per_ns": r["ticks_per_ns"],
        "seeds": [x["seed"] for x in raws],
        **machine.point_info(raws),  # the CPUs the engine's main thread woke up on
    }
    if all("t_start" in x for x in raws):  # when each run began (pairs interleaved runs)
        info["run_starts"] = [x["t_start"] for x in raws]
    if all("pid" in x for x in raws):  # which process ran each run (processes=True)
        info["pids"] = [x["pid"] for x in raws]
    if all((x.get("mem") or {}).get("series") for x in raws):
        # per run: memory over the measured phase ({t_ns, requested, held,
        # rss}: lists; -1 = not known at that sample), Result.mem_series
        info["mem_series"] = [x["mem"]["series"] for x in raws]
    if any(x.get("truncated") for x in raws):
        # per run: workers whose measured phase the duration cut short (a
        # fixed loop that did not finish); verdicts leave such runs out
        info["truncated"] = [int(x.get("truncated", 0)) for x in raws]
    if r["cpu_mode"] == "virtual":
        info["cpu_note"] = "%d virtual CPUs, at most %d concurrent" % (
            r["ncpu_model"], r["ncpu_concurrent"])
    elif r["cpu_mode"] == _sim.MODE:
        info["sim"] = _sim.point_info(raws)
        info["cpu_note"] = "simulated CPUs: times predicted by calibration %s" % (
            info["sim"].get("calibration_id"))
    else:
        info["cpu_note"] = "%d workers pinned to %d of %d usable CPUs" % (
            r["ncpu_model"], r["ncpu_concurrent"], r["ncpu_usable"])
    return info


# ---------------------------------------------------------------- table data

def fmt_value(v):
    """A measured value as tables and summaries print it: "-" for none or
    NaN, integers whole, three significant digits below 10."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v == 0:
        return "0"
    if float(v).is_integer() and abs(v) < 1e15:
        return "%d" % v
    a = abs(v)
    if a >= 1e15:  # past any count a run makes: an exponent, not 16+ digits
        return "%.3g" % v
    if a >= 9.95:
        return "%.0f" % v
    if a >= 0.9995:
        return "%.1f" % v
    return "%.3g" % v


def uniq(vals):
    """The distinct values of ``vals``, in the order they first appear (values
    need not be hashable: parameters may be lists)."""
    out = []
    for v in vals:
        if v not in out:
            out.append(v)
    return out


def _clock_share(metric, pts):
    """For a latency metric of workloads that count the clock reads in
    their timed regions (replay: wl.clock_reads), the largest share of an op
    the clock is, over the cells: (reads per op, ns of clock per op), or
    None when the clock is under a tenth of a read per op. A clock read
    costs half a measured pair (timer_overhead_ns)."""
    if not (metric in ("alloc_ns", "free_ns") or (metric.startswith("wl.") and
                                                 metric.endswith("_ns"))):
        return None
    worst = None
    for ps in pts.values():
        reads = sum(float(np.sum(p.data.get("wl.clock_reads", [0]))) for p in ps)
        ops = sum(float(np.sum(p.data.get("alloc_ops", [0])) + np.sum(p.data.get("free_ops", [0])))
                  for p in ps)
        ovh = [float(np.mean(p.data["timer_overhead_ns"])) for p in ps
               if len(p.data.get("timer_overhead_ns", ()))]
        if not ops or not ovh:
            continue
        per_op = reads / ops
        if per_op >= 0.1 and (worst is None or per_op > worst[0]):
            worst = (per_op, per_op * float(np.mean(ovh)) / 2)
    return worst

def _refused_cells(pts):
    """{cell: (objects, ops)}: per run at most, the allocations the program
    got that the policy refused, and the later ops on them that were
    skipped (replay: wl.refused, wl.skipped), for the cells with any."""
    out = {}
    for k, ps in pts.items():
        ref = [float(np.max(p.data["wl.refused"])) for p in ps
               if len(p.data.get("wl.refused", ()))]
        if ref and max(ref) > 0:
            skip = [float(np.max(p.data["wl.skipped"])) for p in ps
                    if len(p.data.get("wl.skipped", ()))]
            out[k] = (max(ref), max(skip or [0]))
    return out


# ---------------------------------------------------------------- JSON

def dump_json(d, path=None, indent=None, what="result file"):
    """JSON text of d (NaN kept, NumPy scalars as numbers); also written to
    ``path`` when given, as alloclab.files writes every output (a regular
    file replaced whole, a device or a pipe with a reader written in place,
    anything else refused with InvalidArgument)."""
    s = json.dumps(d, indent=indent, allow_nan=True, default=_json_default)
    if path is not None:
        files.write_text(path, s, what)
    return s


JSON_LIMIT = 1 << 30
"""The largest JSON file load_json reads (1 GiB): a larger one (a huge
sparse file) is refused by its size, before anything is read."""


def load_json(s, what="result file"):
    """The JSON object in text (str or bytes), or in the file at a path (str
    or os.PathLike). Raises FileFormatError when the bytes are not UTF-8, the
    text is not JSON, or the JSON is not an object (every alloclab file is
    one, and one nested deeper than the decoder recurses is none);
    InvalidArgument when a path cannot be read: missing, unreadable,
    not a regular file (a directory, a named pipe, a device, a socket: each
    refused without opening it), or larger than JSON_LIMIT."""
    path = None
    if isinstance(s, os.PathLike):
        path = os.fspath(s)
    elif isinstance(s, str) and "\n" not in s and len(s) < 4096 and os.path.lexists(s):
        path = s
    elif not isinstance(s, (str, bytes, bytearray)):
        raise errors.ParameterTypeError(
            "load_json takes JSON text or a path to a file holding it, not %s"
            % type(s).__name__, value=s)
    where = "JSON text"
    if path is not None:
        s = files.read_bytes(path, what, limit=JSON_LIMIT)
        where = path
    if isinstance(s, (bytes, bytearray)):
        try:
            s = bytes(s).decode("utf-8")
        except UnicodeDecodeError as e:
            raise errors.FileFormatError(
                "%s is not UTF-8 text (byte %d): not an alloclab JSON file"
                % (where, e.start), path=path) from None
    try:
        d = json.loads(s)
    except RecursionError:  # the decoder recurses once per level of nesting
        raise errors.FileFormatError(
            "%s nests lists or objects too deeply to decode: not an alloclab JSON file"
            % (where if path is not None else "%.60r" % s), path=path) from None
    except ValueError as e:
        hint = ""
        if path is None and "\n" not in s and len(s) < 4096 and not s.lstrip().startswith(
                ("{", "[")):
            hint = " (and no file of that name exists)"
        raise errors.FileFormatError("%s is not JSON%s: %s" % (
            where if path is not None else "%.60r" % s, hint, e), path=path) from None
    if not isinstance(d, dict):
        raise errors.FileFormatError(
            "%s holds a JSON %s, not the object an alloclab file holds"
            % (where, json_kind(d)), path=path)
    return d


def json_kind(v):
    return {dict: "object", list: "list", str: "string", bool: "boolean",
            type(None): "null", int: "number", float: "number"}.get(type(v), type(v).__name__)


def _need(v, types, where, what):
    """FileFormatError unless ``v`` is of ``types`` (a boolean is no number)."""
    if not isinstance(v, types) or isinstance(v, bool) and bool not in types:
        raise errors.FileFormatError(
            "not an alloclab result: %s is a JSON %s, not %s" % (where, json_kind(v), what))


def _need_list(v, types, where, what, null=True):
    """``v`` a list whose items are of ``types`` (``what``); or null (or
    absent) where ``null``, else only absent (the readers' default)."""
    if v is None and null:
        return
    _need(v, (list,), where, "a list")
    for j, x in enumerate(v):
        _need(x, types, "%s[%d]" % (where, j), what)


_NULL = type(None)
_NUMBER = (int, float)


def _check_result_dict(d):
    """Every field Result.from_dict reads, and every field of the metadata
    and of the points' info that the tables and lines read, of the type they
    read: a FileFormatError naming the first one that is not (path,
    expected type)."""
    _need(d.get("format_version", 0), (int,), "format_version", "an integer")
    _need(d.get("metadata"), (dict,), "metadata", "an object")
    _need(d.get("points"), (list,), "points", "a list")
    _check_metadata(d["metadata"])
    for i, p in enumerate(d["points"]):
        at = "points[%d]" % i
        _need(p, (dict,), at, "an object")
        for k in ("params", "info", "data"):
            _need(p.get(k), (dict,), "%s.%s" % (at, k), "an object")
        runs = _check_data(p["data"], at)
        _check_hist(p.get("hist"), at, runs)
        _check_info(p["info"], at)
        _check_modes(p, at)
    _check_params(d)
    _check_run_modes(d)
    _check_duplicates(d["points"])


# The NumPy types a metric's values may be stored as: what alloclab writes
# (int64, float64) and the other integer and float types, each value
# checked to fit. A boolean, a complex, a date or a string is no measurement.
_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64")


def _bad(where, what):
    return errors.FileFormatError("not an alloclab result: %s %s" % (where, what))


def _data_dtype(v, w):
    """The NumPy type of one metric's values, refused unless it is one of _DTYPES."""
    try:
        dt = np.dtype(v["dtype"])
    except (TypeError, ValueError):
        raise errors.FileFormatError("not an alloclab result: %s.dtype %r is not a "
                                     "NumPy type" % (w, v["dtype"])) from None
    if dt.name not in _DTYPES or not dt.isnative:
        raise _bad(w + ".dtype", "is %s, not a numeric type a metric is stored as; valid: %s"
                   % (errors.shown(v["dtype"]), ", ".join(_DTYPES)))
    return dt


def _value_fits(x, dt):
    """Why the JSON number x cannot be stored as NumPy type dt unchanged, or None."""
    if dt.kind in "iu":
        if x is None or isinstance(x, float) and not (math.isfinite(x) and x.is_integer()):
            return "not an integer, as a %s value must be" % dt.name
        lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
        if not lo <= x <= hi:
            return "out of the range of %s (%d to %d)" % (dt.name, lo, hi)
        return None
    if x is None or isinstance(x, float) and not math.isfinite(x):
        return None  # null and NaN: not measured; an infinity is kept as it is
    big = float(np.finfo(dt).max)
    if isinstance(x, int) and abs(x) > big or isinstance(x, float) and abs(x) > big:
        return "out of the range of %s (at most %.4g in size)" % (dt.name, big)
    return None


def _check_data(data, at):
    """A point's data: {metric: {"dtype": a numeric NumPy type, "values":
    numbers that type holds unchanged}}, every metric with one value per
    run (as many as the others)."""
    lengths = {}
    for k, v in data.items():
        w = "%s.data.%s" % (at, k)
        _need(v, (dict,), w, "an object")
        _need(v.get("dtype"), (str,), w + ".dtype", "a NumPy type name")
        _need(v.get("values"), (list,), w + ".values", "a list")
        dt = _data_dtype(v, w)
        for j, x in enumerate(v["values"]):
            _need(x, (int, float, _NULL), "%s.values[%d]" % (w, j), "a number")
            why = _value_fits(x, dt)
            if why:
                raise _bad("%s.values[%d]" % (w, j), "is %s: %s" % (errors.shown(x), why))
        lengths[k] = len(v["values"])
    counts = list(lengths.values())
    runs = max(counts, key=lambda n: (counts.count(n), n), default=0)  # most metrics' count
    odd = [k for k, n in lengths.items() if n != runs]
    if odd:
        raise _bad("%s.data.%s" % (at, odd[0]),
                   "has %d value%s, where the point's %s has %d, as most of its metrics: "
                   "every metric of a point has a value for each of its runs" % (
                       lengths[odd[0]], "" if lengths[odd[0]] == 1 else "s",
                       next(k for k, n in lengths.items() if n == runs), runs))
    return runs


# Bucket counts and the run count are NumPy int64; the tick sums and
# extremes are the engine's unsigned 64-bit counters.
_COUNT_MAX = (1 << 63) - 1
_TICKS_MAX = (1 << 64) - 1


def _check_hist(h, at, runs):
    """A point's histograms: {op: [{"buckets": [[bucket, count]], "count",
    "sum", "min", "max": tick counts, "ticks_per_ns": the clock}]}, a
    histogram per run; or null."""
    if h is None:
        return
    _need(h, (dict,), at + ".hist", "an object")
    for op, hs in h.items():
        _need(hs, (list,), "%s.hist.%s" % (at, op), "a list")
        for j, x in enumerate(hs):
            w = "%s.hist.%s[%d]" % (at, op, j)
            _need(x, (dict,), w, "an object")
            _check_buckets(x, w)
            _check_hist_fields(x, w)
        if hs and len(hs) != runs:
            raise _bad("%s.hist.%s" % (at, op), "has %d histogram%s, where the point has %d "
                       "run%s (one histogram per run)" % (
                           len(hs), "" if len(hs) == 1 else "s", runs,
                           "" if runs == 1 else "s"))


def _check_buckets(x, w):
    """One histogram's [bucket, count] pairs: each bucket once, below
    AL_HIST_BUCKETS, counts that int64 holds, also all together."""
    _need(x.get("buckets", []), (list,), w + ".buckets", "a list")
    seen, total = set(), 0
    for b in x.get("buckets", []):
        if not (isinstance(b, list) and len(b) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for v in b) and b[0] < lib.AL_HIST_BUCKETS):
            raise errors.FileFormatError(
                "not an alloclab result: %s.buckets holds %r, not a [bucket, "
                "count] pair (bucket < %d)" % (w, b, lib.AL_HIST_BUCKETS))
        if b[1] > _COUNT_MAX:
            raise _bad(w + ".buckets", "holds %s: a count above %d (int64)" % (
                errors.shown(b), _COUNT_MAX))
        if b[0] in seen:
            raise _bad(w + ".buckets", "holds bucket %d twice" % b[0])
        seen.add(b[0])
        total += b[1]
    if total > _COUNT_MAX:
        raise _bad(w + ".buckets", "counts %d operations in all, more than %d (int64)"
                   % (total, _COUNT_MAX))


def _check_hist_fields(x, w):
    """One histogram's count, sum, min and max (non-negative integers in
    range; count and min may be null), its "simulated" mark (a boolean, if
    any) and its clock, ticks_per_ns: a positive number, without which its
    ticks cannot be read as ns."""
    for k, top, null in (("count", _COUNT_MAX, True), ("sum", _TICKS_MAX, False),
                         ("min", _TICKS_MAX, True), ("max", _TICKS_MAX, False)):
        v = x.get(k)
        if v is None and (null or k not in x):
            continue
        _need(v, (int,), "%s.%s" % (w, k), "an integer")
        if not 0 <= v <= top:
            raise _bad("%s.%s" % (w, k), "is %s, not an integer from 0 to %d" % (
                errors.shown(v), top))
    _need(x.get("simulated"), (bool, _NULL), w + ".simulated", "true or false")
    if "ticks_per_ns" not in x:
        raise _bad(w, "has no ticks_per_ns: the clock its ticks were counted in (ticks "
                   "per ns) is needed to read them as ns")
    tpn = x["ticks_per_ns"]
    _need(tpn, _NUMBER, w + ".ticks_per_ns", "a number")
    if not (math.isfinite(tpn) and tpn > 0):
        raise _bad(w + ".ticks_per_ns", "is %s, not a positive number of ticks per ns"
                   % errors.shown(tpn))


def _check_info(info, at):
    """The fields of a point's info that the tables, the cpu line and the
    notes read: absent, null or of their type."""
    w = at + ".info."
    for k in ("cpu_mode", "cpu_note", "clock", "policy_spec"):
        _need(info.get(k), (str, _NULL), w + k, "a string")
    _need(info.get("ncpu_usable"), (int, _NULL), w + "ncpu_usable", "an integer")
    _need_list(info.get("run_starts"), _NUMBER, w + "run_starts", "a number")
    for k, t, what in (("truncated", int, "an integer"), ("notes", str, "a string"),
                       ("printk", dict, "an object")):
        _need_list(info.get(k, []), (t,), w + k, what, null=False)
    for j, x in enumerate(info.get("printk", ())):
        for k, t, what in (("layer", str, "a string"), ("text", str, "a string"),
                           ("count", int, "an integer")):
            _need(x.get(k), (t,), "%sprintk[%d].%s" % (w, j, k), what)


# What each "cpu" parameter runs as (info.cpu_mode): "auto" picks pinned or
# virtual by the CPUs usable; the others run as they are named.
_CPU_RUNS_AS = {"auto": ("pinned", "virtual"), "pinned": ("pinned",),
                "virtual": ("virtual",), _sim.MODE: (_sim.MODE,)}


def _check_modes(p, at):
    """A point says whether its times were measured or predicted in three
    fields: params.cpu (what was asked), info.cpu_mode (what ran) and
    info.sim (the simulation's record). Tables, the cpu line, warnings and
    compare each read some of them, so a point whose fields disagree (a
    simulated point with a label stripped) is refused, naming them."""
    asked, ran = p["params"].get("cpu"), p["info"].get("cpu_mode")
    if "sim" in p["info"] and ran != _sim.MODE:
        raise _bad(at + ".info.sim", "records a simulation (predicted times), but %s.info."
                   "cpu_mode is %s, not %r: its fields disagree on whether it was simulated"
                   % (at, errors.shown(ran) if ran is not None else "absent", _sim.MODE))
    if asked == _sim.MODE and ran != _sim.MODE:
        raise _bad(at + ".params.cpu", "is %r, but %s.info.cpu_mode is %s, not %r: its "
                   "fields disagree on whether it was simulated" % (
                       _sim.MODE, at, errors.shown(ran) if ran is not None else "absent",
                       _sim.MODE))
    if asked in _CPU_RUNS_AS and ran is not None and ran not in _CPU_RUNS_AS[asked]:
        raise _bad(at + ".params.cpu", "is %s, but %s.info.cpu_mode is %s: cpu=%s runs as %s"
                   % (errors.shown(asked), at, errors.shown(ran), asked,
                      " or ".join(_CPU_RUNS_AS[asked])))


def _check_run_modes(d):
    """A run that asked for simulated CPUs only (metadata.run.sweep.cpu) made
    simulated points only: one of its points that is not (its labels gone)
    is refused, naming it. A concatenation (metadata "parts") may set
    measured points beside it."""
    md = d["metadata"]
    cpus = ((md.get("run") or {}).get("sweep") or {}).get("cpu")
    if "parts" in md or cpus != [_sim.MODE]:
        return
    for i, p in enumerate(d["points"]):
        asked, ran = p["params"].get("cpu"), p["info"].get("cpu_mode")
        if _sim.MODE not in (asked, ran):
            raise _bad("points[%d]" % i, "is not simulated (params.cpu %s, info.cpu_mode %s), "
                       "but metadata.run.sweep.cpu says the run simulated every point: its "
                       "fields disagree on whether it was simulated" % (
                           errors.shown(asked) if asked is not None else "absent",
                           errors.shown(ran) if ran is not None else "absent"))


def _check_metadata(md):
    """The metadata the summary, the machine, cpu and load lines, the
    machine warnings, the counter tables and `show` read: absent, null or
    of the shape they read."""
    for k in ("run", "machine_state", "counters", "load_before", "load_after", "view",
              "interrupted"):
        _need(md.get(k), (dict, _NULL), "metadata." + k, "an object")
    for k in ("online_cpus", "usable_cpus", "threads_per_core"):
        _need(md.get(k), (int, _NULL), "metadata." + k, "an integer")
    _need(md.get("ticks_per_ns"), (int, float, _NULL), "metadata.ticks_per_ns", "a number")
    for k in ("load_before", "load_after"):
        _check_load(md.get(k), "metadata." + k)
    run = md.get("run") or {}
    _need(run.get("workload"), (str, _NULL), "metadata.run.workload", "a string")
    _need(run.get("sweep"), (dict, _NULL), "metadata.run.sweep", "an object")
    for k, v in (run.get("sweep") or {}).items():
        _need(v, (list,), "metadata.run.sweep." + k, "a list")
    _need_list((run.get("sweep") or {}).get("producers"), (int,),
               "metadata.run.sweep.producers", "an integer")
    _check_machine_state(md.get("machine_state") or {}, "metadata.machine_state")
    _check_counters(md.get("counters") or {})


def _check_load(la, where):
    """A load average (host.machine.loadavg): 1min, 5min and 15min numbers,
    the task counts numbers or null; or null."""
    for f, v in (la or {}).items():
        minutes = f in ("1min", "5min", "15min")
        _need(v, _NUMBER if minutes else _NUMBER + (_NULL,), "%s.%s" % (where, f), "a number")


def _check_machine_state(st, where):
    """What host.machine.warnings reads of a recorded machine state."""
    for k in ("cpus_online", "cpus_usable", "cpus_isolated", "cpus_nohz_full"):
        _need_list(st.get(k), (int,), "%s.%s" % (where, k), "a CPU number")
    _need(st.get("turbo_file"), (str, _NULL), where + ".turbo_file", "a string")
    gov = st.get("governors")
    _need(gov, (dict, _NULL), where + ".governors", "an object")
    for cpu, g in (gov or {}).items():
        if not re.fullmatch(r"[0-9]+", cpu):
            raise errors.FileFormatError("not an alloclab result: %s.governors names CPU %s, "
                                         "not a CPU number" % (where, errors.shown(cpu)))
        _need(g, (str, _NULL), "%s.governors.%s" % (where, cpu), "a string")
    la = st.get("loadavg")
    _need(la, (dict, _NULL), where + ".loadavg", "an object")
    _check_load(la, where + ".loadavg")
    if la and "1min" not in la:
        raise errors.FileFormatError("not an alloclab result: %s.loadavg has no 1min" % where)
    q = st.get("cgroup_cpu_max")
    if q is not None and not (isinstance(q, list) and len(q) == 2):
        raise errors.FileFormatError(
            "not an alloclab result: %s.cgroup_cpu_max is %s, not a [quota, period] pair"
            % (where, errors.shown(q)))
    for j, v in enumerate(q or ()):
        _need(v, _NUMBER + (_NULL,), "%s.cgroup_cpu_max[%d]" % (where, j), "a number")


def _check_counters(docs):
    """metadata.counters: {layer: [counter descriptors]}, each an object
    with its name (what _counters reads)."""
    for layer, cs in docs.items():
        at = "metadata.counters.%s" % layer
        _need(cs, (list,), at, "a list of counter descriptors")
        for j, c in enumerate(cs):
            w = "%s[%d]" % (at, j)
            _need(c, (dict,), w, "an object")
            _need(c.get("name"), (str,), w + ".name", "a string")
            for k in ("doc", "unit", "kind", "formula"):
                _need(c.get(k), (str, _NULL), "%s.%s" % (w, k), "a string")
            _need_list(c.get("levels"), (str,), w + ".levels", "a string")


# The type of each grid parameter every result has (a point's "params").
_PARAM_TYPES = {"workload": str, "policy": str, "timing": str, "cpu": str, "stats": str,
                "producers": int}

# The parameters every point has: what ran (run() names both in every
# point; the tables, the counter tables and compare key on them).
REQUIRED_PARAMS = ("workload", "policy")


def _param_type(wl, name):
    """The Python type of parameter ``name`` of workload schema ``wl`` (None
    when it is not one, or when its value is a handle: replay's trace)."""
    if name in _PARAM_TYPES:
        return _PARAM_TYPES[name]
    p = next((p for p in wl.params if p.name == name), None) if wl else None
    if p is None or (wl.name == "replay" and name == "trace"):
        return None
    return {schema.BOOL: bool, schema.ENUM: str}.get(p.type, int)


def _check_params(d):
    """Every point names its workload and policy, its parameters are
    scalars, and those alloclab knows are of their type (producers an
    integer, policy a string, a workload's parameters as its schema says):
    a FileFormatError naming the point, the parameter and the value. A
    table built from "2" and 2 would put one cell twice."""
    names = {"int": "an integer", "bool": "true or false", "str": "a string"}
    for i, p in enumerate(d["points"]):
        missing = [k for k in REQUIRED_PARAMS if k not in p["params"]]
        if missing:
            raise errors.FileFormatError(
                "not an alloclab result: points[%d].params has no %s (every point names "
                "its %s)" % (i, " and no ".join(missing), " and ".join(REQUIRED_PARAMS)))
        wl = schema.workloads().get(p["params"].get("workload"))
        for k, v in p["params"].items():
            at = "points[%d].params.%s" % (i, k)
            t = _param_type(wl, k)
            if t is None:
                ok = v is None or isinstance(v, (str, int, float))
            elif t is int:
                ok = isinstance(v, int) and not isinstance(v, bool)
            else:
                ok = isinstance(v, t)
            if not ok:
                raise errors.FileFormatError(
                    "not an alloclab result: %s is %s (a JSON %s), not %s" % (
                        at, errors.shown(v), json_kind(v),
                        names[t.__name__] if t else "a number, a string or null"))


def _repeat(points, key, same):
    """(i, j): the first point i that repeats an earlier point j (equal
    ``key(point)``, and ``same(a, b)``), or None."""
    seen = {}
    for i, p in enumerate(points):
        k = key(p)
        for j in seen.get(k, ()):
            if same(points[j], p):
                return i, j
        seen.setdefault(k, []).append(i)
    return None


def _dict_key(p):
    return json.dumps([p["params"], p["info"]], sort_keys=True, default=str)


def _same_dict_runs(a, b):
    return json.dumps([a["data"], a.get("hist")], sort_keys=True) == \
        json.dumps([b["data"], b.get("hist")], sort_keys=True)


def _check_duplicates(points):
    """No point repeats another: the same parameters and the same runs (the
    same info: seeds, start times; and the same values) would count each
    run twice ("mean of 2 runs" of one run). Points with the same
    parameters and other runs (a concatenation of two results) are kept:
    their runs are pooled."""
    rep = _repeat(points, _dict_key, _same_dict_runs)
    if rep is not None:
        i, j = rep
        raise errors.FileFormatError(
            "not an alloclab result: points[%d] repeats points[%d] (the same parameters "
            "%s and the same runs): its runs would be counted twice"
            % (i, j, errors.shown(_params_text(points[i]["params"]))))


def _params_text(params):
    return ", ".join("%s=%s" % (k, v) for k, v in params.items() if k != "workload")


def _json_default(v):
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError("not JSON serialisable: %r" % (v,))


# ---------------------------------------------------------------- result

def _params_key(params):
    return json.dumps(params, sort_keys=True, default=str)


def _matcher(key, v):
    if callable(v):
        return v
    vals = list(v) if isinstance(v, (list, tuple, set, frozenset, range)) else [v]
    if key == "policy":  # a preset name and its spec name the same policy
        return lambda x: any(same_policy(x, q) for q in vals)
    return lambda x: x in vals


def _refuse_repeats(results, points):
    """InvalidArgument when a point of a concatenation repeats another (the
    same parameters, info and values: the same runs), naming both."""
    rep = _repeat(points, lambda p: json.dumps([p.params, p.info], sort_keys=True,
                                               default=str), Point.__eq__)
    if rep is None:
        return
    where = [(k, i) for k, r in enumerate(results) for i in range(len(r.points))]
    (pi, i), (pj, j) = where[rep[0]], where[rep[1]]
    raise errors.InvalidArgument(
        "Result.concat: point %d of part %d repeats point %d of part %d (the same parameters "
        "%s and the same runs): its runs would be counted twice%s" % (
            i, pi, j, pj, errors.shown(_params_text(points[rep[0]].params)),
            "; a Result added to itself holds no new runs" if results[pi] is results[pj]
            else ""))


def _count(v):
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _interrupted(results):
    """The "interrupted" marker of a concatenation (see interrupted_line):
    None when no part was stopped; else the runs finished and planned over
    every part (one run to its end finished all its runs; None where a
    marker does not say) and the first stopped part's signal."""
    marks = [r.metadata.get("interrupted") for r in results]
    stopped = [m for m in marks if isinstance(m, dict)]
    if not stopped:
        return None
    done, planned = 0, 0
    for r, m in zip(results, marks):
        ran = sum(p.runs for p in r.points)
        d, p = (m.get("runs_finished"), m.get("runs_planned")) if isinstance(m, dict) else \
            (ran, ran)
        done = None if done is None or _count(d) is None else done + d
        planned = None if planned is None or _count(p) is None else planned + p
    return {"runs_finished": done, "runs_planned": planned,
            "signal": stopped[0].get("signal")}


class Result:
    """Every run of every grid point of a sweep, and its metadata."""

    def __init__(self, metadata, points):
        self.metadata = metadata
        self.points = list(points)

    @classmethod
    def from_raw(cls, metadata, point_runs):
        """From [(point params, [raw run dicts])] as run.run_point returns."""
        points = []
        for params, raws in point_runs:
            per_run = [run_metrics(r) for r in raws]
            names = []
            for m in per_run:
                for k in m:
                    if k not in names:
                        names.append(k)
            data = {}
            for k in names:
                vals = [m.get(k, math.nan) for m in per_run]
                data[k] = _array(vals)
            info = point_info(raws)
            if "policy" in params:  # the label the user gave, and what it expands to
                info["policy_spec"] = canonical(params["policy"]) or params["policy"]
            points.append(Point(dict(params), info, data, _measures.point_hists(raws)))
        _printk_notes(points, point_runs)
        return cls(metadata, points)

    # -- lookups --

    def metrics(self):
        """Every metric name present in any point, base metrics first."""
        names = []
        for p in self.points:
            for k in p.data:
                if k not in names:
                    names.append(k)
        base = [m for m in BASE_METRICS if m in names]
        return base + [m for m in names if m not in base]

    def params(self):
        """Parameter names of the grid points, in order."""
        keys = []
        for p in self.points:
            for k in p.params:
                if k not in keys:
                    keys.append(k)
        return keys

    def swept(self):
        """Parameters that take more than one value across the points."""
        return [k for k in self.params() if len(uniq([p.params.get(k) for p in self.points])) > 1]

    def select(self, **where):
        """Points whose params match every key=value given (a policy by its
        preset name or its spec alike), as a list; a value may also be a
        list/tuple/set of values or a predicate, as in filter. A point
        without a parameter given is left out; a name no point has is
        refused (UnknownNameError), as filter refuses it; an empty Result (a
        run interrupted before its first point) has no points to select."""
        if not self.points:
            return []
        conds = self._conditions(where)
        return [p for p in self.points if all(k in p.params and f(p.params[k])
                                              for k, f in conds.items())]

    def _conditions(self, where):
        """{parameter: predicate} for select and filter's keywords;
        UnknownNameError for a name that is no parameter of these points."""
        keys = self.params()
        for k in where:
            if k not in keys:
                raise errors.UnknownNameError.make("parameter", k, keys)
        return {k: _matcher(k, v) for k, v in where.items()}

    # -- results as data: concatenate, filter --

    @classmethod
    def concat(cls, results):
        """One Result holding every point of ``results`` (in order). Points
        with the same parameters and other runs stay separate; tables, stats
        and compare pool their runs. A point that repeats another (the same
        parameters and the same runs: a Result added to itself) is refused,
        as from_json refuses it: its runs would be counted twice. Simulated
        and measured parts may be set together: their cpu parameter keeps
        them in cells of their own, and tables name the predicted ones
        (compare refuses to judge one against the other). Metadata: the
        first result's, with every part's under "parts" when they differ,
        and "interrupted" when a part was: the runs finished and planned
        over every part. ``sum(results)`` concatenates too (0 + a Result is
        that Result)."""
        try:
            results = list(results)
        except TypeError:
            raise errors.ParameterTypeError("Result.concat takes a list of Results, not %r"
                                            % (errors.Echo(results),), value=results) from None
        for r in results:
            if not isinstance(r, Result):
                raise errors.InvalidArgument("Result.concat takes Results, not %r"
                                             % (errors.Echo(r),))
        if not results:
            raise errors.InvalidArgument("Result.concat needs at least one Result")
        points = [p for r in results for p in r.points]
        _refuse_repeats(results, points)
        md = dict(results[0].metadata)
        if any(r.metadata != results[0].metadata for r in results[1:]):
            md["parts"] = [r.metadata for r in results]
        mark = _interrupted(results)
        if mark is not None:
            md["interrupted"] = mark
        return cls(md, points)

    def __add__(self, other):
        if not isinstance(other, Result):
            return NotImplemented
        return Result.concat([self, other])

    def __radd__(self, other):
        # sum(results) starts from 0: 0 + a Result is that Result
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def filter(self, **where):
        """A Result with the points whose params match every key: a value
        (policy specs and presets compare canonically), a list/tuple/set of
        values, or a predicate (callable)."""
        conds = self._conditions(where)
        pts = [p for p in self.points if all(f(p.params.get(k)) for k, f in conds.items())]
        return Result(self.metadata, pts)

    def stats(self, metric, **where):
        """[(params, stats.Stats)] per distinct parameter set (runs of equal
        points pooled), for the points matching ``where`` (as filter)."""
        self._check_metric(metric)
        res = self.filter(**where) if where else self
        groups = {}
        for p in res.points:
            if metric not in p.data:
                continue
            groups.setdefault(_params_key(p.params), [p.params, []])[1].append(p)
        return [(params, _stats.describe(
            np.concatenate([np.asarray(p.data[metric], dtype=float) for p in pts]),
            **_stats.run_context(pts, metric))) for params, pts in groups.values()]

    def histogram(self, op="alloc", **where):
        """The per-op latency Histogram of ``op`` ("alloc" or "free"), all
        runs of the points matching ``where`` merged (run with
        histogram=True)."""
        if op not in _hist.OPS:
            raise errors.UnknownNameError.make("operation", op, list(_hist.OPS))
        res = self.filter(**where) if where else self
        hs = [h for p in res.points for h in p.hist.get(op, ())]
        if not hs:
            raise errors.InvalidArgument(
                "no %s histogram in these points: run with histogram=True (--hist)" % op)
        return sum(hs[1:], hs[0].copy())

    def plot(self, metric="alloc_ns", x="producers", hue="policy", **kw):
        """Latency (or any metric) against ``x``, a line per ``hue`` value:
        alloclab.plot.latency. Returns a matplotlib Figure."""
        from ..present import plot as _plot
        return _plot.latency(self, metric=metric, x=x, hue=hue, **kw)

    def _check_metric(self, metric):
        """UnknownNameError unless some point has ``metric`` or left it out
        because its stats level does not measure it."""
        if not isinstance(metric, str):
            raise errors.ParameterTypeError(
                "metric must be a metric's name (a string), not %s; valid metrics: %s"
                % (errors.shown(metric), ", ".join(self.metrics()) or "(none)"), value=metric)
        if metric not in self.metrics() and not any(
                self._unmeasured(p, metric) for p in self.points):
            layer = metric.split(".", 1)[0]
            layers = uniq([m.split(".", 1)[0] for m in self.metrics()
                            if "." in m and not m.startswith("wl.")])
            extra = ""
            if layer in schema.layers() and layer not in layers:
                extra = "layer %s is not in the result's policies (their layers: %s)" % (
                    layer, ", ".join(layers) or "none")
            raise errors.UnknownNameError.make("metric", metric, self.metrics(), extra=extra)

    def _unmeasured(self, point, metric):
        return _counters.unmeasured(point, metric, self.metadata.get("counters"))

    def describe(self, metric):
        """What a layer's counter metric means, as a dict: metric, layer,
        counter, per_op (a "_per_op" metric), doc ("(no description)" for a
        counter its layer does not document), kind ("counter" or "gauge"),
        formula (a derived counter's, e.g. "hits+misses"; else None), key
        (one the tables need), unit ("ns" for lock times), levels (the stats
        levels that measure it) and measured_at (the levels of this
        Result's points that have it). Docs come from the descriptors
        recorded when the Result was made, else from the registry.
        UnknownNameError for a metric that is not a layer counter here."""
        return _counters.describe(self, metric)

    # -- tables --

    def table(self, metric="alloc_ns", rows="allocs_per_cycle", cols="producers", stat="mean"):
        """The metric as a Table: rows × cols per block of the other swept
        parameters; ``stat`` over runs: mean, median, min or max. A rows/cols
        parameter that is absent gives a single row/column."""
        self._check_metric(metric)
        stats = {"mean": np.mean, "median": np.median, "min": np.min, "max": np.max}
        if not isinstance(stat, str) or stat not in stats:
            raise errors.UnknownNameError.make("statistic", stat, list(stats))
        keys = self.params()
        row_key = rows if rows in keys else None
        col_key = cols if cols in keys else None
        if row_key is not None and row_key == col_key:
            raise errors.InvalidArgument("rows and cols are both %r" % errors.Echo(rows))
        block_keys = [k for k in self.swept() if k not in (row_key, col_key)]
        row_vals = uniq([p.params.get(row_key) for p in self.points]) if row_key else [None]
        col_vals = uniq([p.params.get(col_key) for p in self.points]) if col_key else [None]
        block_vals = uniq([tuple(p.params.get(k) for k in block_keys) for p in self.points])
        nb, nr, nc = len(block_vals), len(row_vals), len(col_vals)
        cube = np.full((nb, nr, nc), np.nan)
        sd = np.full((nb, nr, nc), np.nan)
        n = np.zeros((nb, nr, nc), dtype=np.int64)
        samples, pts, unmeasured = {}, {}, {}
        for p in self.points:
            b = block_vals.index(tuple(p.params.get(k) for k in block_keys))
            r = row_vals.index(p.params.get(row_key)) if row_key else 0
            c = col_vals.index(p.params.get(col_key)) if col_key else 0
            if metric not in p.data:
                why = self._unmeasured(p, metric)
                if why:
                    unmeasured[(b, r, c)] = why
                continue
            samples.setdefault((b, r, c), []).append(np.asarray(p.data[metric], dtype=float))
            pts.setdefault((b, r, c), []).append(p)
        for k in [k for k, v in samples.items() if np.isnan(np.concatenate(v)).all()]:
            unmeasured[k] = _measures.NOT_MEASURED.get(metric, "%s: NaN in every run" % metric)
            del samples[k]  # a value no run measured has no statistics, only "n/a"
        cell_stats = {k: _stats.describe(np.concatenate(v), **_stats.run_context(pts[k], metric))
                      for k, v in samples.items()}
        truncated = {}
        for k, ps in pts.items():
            cut = sum(sum(1 for t in p.info.get("truncated", ()) if t) for p in ps)
            if cut:
                truncated[k] = (cut, sum(p.runs for p in ps))
        clock = _clock_share(metric, pts)
        for (b, r, c), arrs in samples.items():
            x = np.concatenate(arrs)
            x = x[~np.isnan(x)]
            n[b, r, c] = len(x)
            if len(x):
                cube[b, r, c] = stats[stat](x)
                sd[b, r, c] = np.std(x, ddof=1) if len(x) > 1 else np.nan
        blocks = [dict(zip(block_keys, bv)) for bv in block_vals]
        title = self._title(metric, stat, blocks)
        # the presentation room lays the table out; it sits above results
        from ..present.table import Table
        t = Table(title, metric, stat, row_key, col_key, row_vals, col_vals, blocks, cube, sd,
                  n, cell_stats=cell_stats, truncated=truncated, unmeasured=unmeasured)
        t.clock = clock
        t.refused, t.points, t.metadata = _refused_cells(pts), pts, self.metadata
        return t

    def _title(self, metric, stat, blocks):
        # one workload heads the title; several are told apart by the blocks
        wls = uniq([p.params.get("workload") for p in self.points])
        wl = wls[0] if len(wls) == 1 and wls[0] is not None else ""
        desc, unit, lower = METRIC_INFO.get(metric, (metric, "", None))
        if metric.endswith("_per_op"):
            desc, unit, lower = metric, "per op", None
        elif metric.startswith("wl."):
            desc, unit, lower = metric[3:], "workload metric", None
            if metric.endswith("_usec"):
                unit, lower = "usec", True
        bits = [unit] if unit else []
        if lower is not None:
            bits.append("lower is better" if lower else "higher is better")
        runs = uniq([p.runs for p in self.points])
        bits.append("%s of %s run%s" % (stat, "/".join(map(str, runs)),
                                        "" if runs == [1] else "s"))
        title = "%s, %s (%s)" % (wl, desc, ", ".join(bits)) if wl else "%s (%s)" % (
            desc, ", ".join(bits))
        pols = uniq([p.params.get("policy") for p in self.points])
        if len(pols) == 1 and pols[0] is not None:
            title += ", policy: %s" % pols[0]
        return title

    # -- tidy rows --

    def rows(self):
        """One dict per run per point: the point's params, run index, cpu mode
        used, and every metric (None where a point lacks it)."""
        metrics = self.metrics()
        out = []
        for p in self.points:
            for i in range(p.runs):
                row = dict(p.params)
                row["run"] = i
                if "policy_spec" in p.info:
                    row["policy_spec"] = p.info["policy_spec"]
                row["cpu_mode_used"] = p.info.get("cpu_mode")
                for m in metrics:
                    a = p.data.get(m)
                    row[m] = a[i].item() if a is not None and i < len(a) else None
                out.append(row)
        return out

    def to_csv(self, path):
        """Write rows() as CSV to a path or a text file object."""
        rows = self.rows()
        cols = []
        for r in rows:
            for k in r:
                if k not in cols:
                    cols.append(k)
        if hasattr(path, "write"):
            self._write_csv(path, cols, rows)
        else:  # written whole, as alloclab.files writes every output
            buf = io.StringIO(newline="")
            self._write_csv(buf, cols, rows)
            files.write_text(path, buf.getvalue(), "CSV file")

    @staticmethod
    def _write_csv(f, cols, rows):
        # lines end in "\n", as `--format csv` prints them (not the csv module's "\r\n")
        w = csv.DictWriter(f, fieldnames=cols, restval="", lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})

    def to_pandas(self):
        """rows() as a pandas DataFrame (needs pandas)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Result.to_pandas() needs pandas, which is not installed: "
                              "pip install pandas (or use rows() / to_csv())") from None
        return pd.DataFrame(self.rows())

    # -- JSON --

    def to_dict(self):
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "metadata": self.metadata,
            "points": [p.to_dict() for p in self.points],
        }

    def to_json(self, path=None, indent=None):
        """JSON text (lossless); also written to ``path`` when given."""
        return dump_json(self.to_dict(), path, indent=indent)

    @classmethod
    def from_json(cls, s):
        """A Result from to_json() text (or a path to such a file). Raises
        FileFormatError for anything else, naming what is wrong."""
        d = load_json(s)
        try:
            return cls.from_dict(d)
        except errors.FileFormatError as e:
            if isinstance(s, (str, os.PathLike)) and not str(s).lstrip().startswith("{") and \
                    e.path is None:
                raise errors.FileFormatError("%s: %s" % (os.fspath(s), e),
                                             path=os.fspath(s)) from None
            raise

    @classmethod
    def from_dict(cls, d):
        """A Result from to_dict()'s output."""
        if not isinstance(d, dict):
            raise errors.FileFormatError("not an alloclab result: a JSON %s, not an object"
                                         % json_kind(d))
        if d.get("format") != FORMAT:
            raise errors.FileFormatError("not an alloclab result (format %r, not %r)"
                                         % (d.get("format"), FORMAT))
        try:
            _check_result_dict(d)
        except RecursionError:  # a field nested deeper than json.dumps recurses
            raise errors.FileFormatError("not an alloclab result: a field nests lists or "
                                         "objects too deeply") from None
        if d.get("format_version", 0) > FORMAT_VERSION:
            raise errors.FileFormatError(
                "result format version %s is newer than this alloclab reads (%d)"
                % (d.get("format_version"), FORMAT_VERSION))
        try:
            return cls(d["metadata"], [Point.from_dict(p) for p in d["points"]])
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise errors.FileFormatError("not an alloclab result: %s: %s"
                                         % (type(e).__name__, e)) from None

    def __eq__(self, other):
        if not isinstance(other, Result):
            return NotImplemented
        return self.metadata == other.metadata and self.points == other.points

    # -- text --

    def summary(self):
        """A few lines: workload, grid, runs, machine, cpu modes, clock."""
        md = self.metadata
        run = md.get("run", {})
        lines = []
        swept = self.swept()
        wls = uniq([p.params.get("workload") for p in self.points])  # several: concatenated
        lines.append("%s: %d point%s x %s run%s%s" % (
            " and ".join(map(str, wls)) if len(wls) > 1 else run.get("workload", "?"),
            len(self.points), "" if len(self.points) == 1 else "s",
            run.get("runs", "?"), "" if run.get("runs") == 1 else "s",
            (", swept: " + ", ".join(swept)) if swept else ""))
        lines.append("policies: " + "; ".join(uniq([str(p.params.get("policy"))
                                                     for p in self.points])))
        lines.append(self.machine_line())
        lines.append(self.cpu_line())
        lines.extend(self.notes_lines())
        return "\n".join(lines)

    def notes_lines(self):
        """The ``notes:`` lines (what real code ran, what it printed), each
        once however many points carry it."""
        lines = []
        for note in uniq([n for p in self.points for n in p.info.get("notes", [])
                          if " runs buddy.bpf.c of " in n]):
            lines.append("notes: " + note)
        printed = {}
        for p in self.points:
            for x in p.info.get("printk", []):
                printed[(x["layer"], x["text"])] = printed.get((x["layer"], x["text"]), 0) + \
                    x["count"]
        if printed:
            lines.append("notes: " + "; ".join(
                "%s printed %r %d time%s" % (lay, t, n, "" if n == 1 else "s")
                for (lay, t), n in printed.items()) + " (bpf_stream_printk)")
        return lines

    def machine_line(self):
        md = self.metadata
        return "machine: %s, %s online / %s usable CPUs, %s thread%s/core, kernel %s, %s" % (
            md.get("cpu_model"), md.get("online_cpus"), md.get("usable_cpus"),
            md.get("threads_per_core"), "" if md.get("threads_per_core") == 1 else "s",
            md.get("kernel"), md.get("build_flags"))

    def cpu_line(self):
        """cpu mode(s) used, virtual CPU notes, timer overhead and clock."""
        md = self.metadata
        modes = uniq([p.info.get("cpu_mode") for p in self.points])
        notes = uniq([p.info.get("cpu_note") for p in self.points
                       if p.info.get("cpu_mode") in ("virtual", _sim.MODE)])
        ovh = [float(np.mean(p.data["timer_overhead_ns"])) for p in self.points
               if "timer_overhead_ns" in p.data and len(p.data["timer_overhead_ns"])
               and p.info.get("cpu_mode") != _sim.MODE]  # a simulated clock pair is predicted
        s = "cpu: %s" % "/".join(str(m) for m in modes)
        if notes:
            s += " (%s)" % "; ".join(notes)
        if ovh:
            s += ", timer overhead %s ns" % fmt_value(float(np.mean(ovh)))
        s += ", clock %s (%.3f ticks/ns)" % (md.get("clock"), md.get("ticks_per_ns") or 0.0)
        if (md.get("run") or {}).get("realtime"):  # else a run with and without reads alike
            s += ", realtime (SCHED_FIFO workers)"
        return s

    def interrupted_line(self):
        """None, or a line saying the run was stopped before its end
        (metadata["interrupted"], written by `run --json` on Ctrl-C): the
        cells hold only the runs that finished."""
        it = self.metadata.get("interrupted")
        if not isinstance(it, dict):
            return None
        done, planned = it.get("runs_finished"), it.get("runs_planned")
        done, planned = (v if isinstance(v, int) and not isinstance(v, bool) else "?"
                         for v in (done, planned))
        if done != "?" and planned != "?" and done > planned:  # adaptive runs were added
            count = "%d runs (the %d planned and adaptive ones)" % (done, planned)
        else:
            count = "%s of %s runs" % (done, planned)
        return "interrupted: %s finished before %s stopped the run; each cell holds only " \
               "its finished runs, a cell with none is left out" % (
                   count, it.get("signal") if isinstance(it.get("signal"), str) else "a signal")

    def stats_line(self):
        """The stats level(s) the points ran at (their "stats" parameter): what
        their counter metrics hold."""
        levels = uniq([p.params.get("stats") for p in self.points])
        what = {"lite": "every event counter, no lock times", "off": "no counters (n/a)",
                "full": "every counter and lock time"}
        if self.metadata.get("stats_compiled") is False:
            return ("stats: counting compiled out of this build (-DAL_STATS_COMPILED=0): "
                    "no counters at any level")
        if levels == [None]:
            return "stats: not recorded (a result made before stats levels: every counter)"
        return "stats: " + "; ".join("%s (%s)" % (lv, what.get(lv, "?")) if lv else
                                     "not recorded" for lv in levels)

    def mem_series(self, **where):
        """[(point params, run index, {"t_ns", "requested", "held", "rss"}:
        int64 arrays)]: memory sampled over each run's measured phase (every
        mem_sample seconds, at most a few hundred points, thinned evenly),
        -1 where a value was not known at a sample (held mid-phase for a
        layer whose stats cannot be read while workers run)."""
        res = self.filter(**where) if where else self
        return [(dict(p.params), i, {k: np.asarray(v, dtype=np.int64) for k, v in s.items()})
                for p in res.points for i, s in enumerate(p.info.get("mem_series", ()))]

    def truncated(self):
        """[(point params, [run indexes])] of the runs the duration cut short
        (a fixed loop that did not finish: figures of a partial loop)."""
        return [(dict(p.params), [i for i, t in enumerate(p.info["truncated"]) if t])
                for p in self.points if any(p.info.get("truncated", ()))]

    def machine_warnings(self):
        """Short lines naming what was bad in the recorded machine state (load
        before/after the run, governor, turbo, SMT, a hypervisor ...):
        machine.warnings(self.metadata)."""
        return machine.warnings(self.metadata)

    def __repr__(self):
        if not self.points:
            return "<alloclab.Result empty>"
        head = self.summary().splitlines()[0]
        sim = sum(1 for p in self.points if _sim.is_simulated(p))
        if sim:  # predicted times say so wherever they are shown
            head += "; %s: %s" % (_sim.PLOT_LABEL, "every point" if sim == len(self.points)
                                  else "%d of %d points" % (sim, len(self.points)))
        return "<alloclab.Result %s>" % head

    def __str__(self):
        return self.summary()
