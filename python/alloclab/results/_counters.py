"""Layer counters as metrics: what a stats level measures, and what a counter means.

A run's stacks count at one stats level (counters.h): "off" counts nothing,
so a layer's counter metrics ("<layer>.<counter>" and its "_per_op") are
absent, not 0; "lite" counts every event but times no lock, so the lock
times (a counter whose descriptor has the ns unit; for a layer without
descriptors, the lock counters' "*_wait_ns"/"*_hold_ns" names) are absent;
"full" measures all of them. The library reports only what a level
measured; "<layer>.bytes_held" and "<layer>.leaked" (the leak check) exist
at every level. This module explains why a metric is absent.

Docs come from the layers' counter descriptors (schema.Counter), recorded
in a Result's metadata["counters"] when it is made so that a saved Result
describes its counters without the plugin that declared them. A counter a
layer reports without a descriptor reads "(no description)"; its kind is
told by whether the Result has its per-op metric (gauges have none).

Cost: dictionary lookups per metric; nothing here runs during a run.
"""

from .. import errors
from ..cbind import schema

LEVELS = ("lite", "off", "full")  # the engine's order (enum al_stats_level)
ACCOUNTING = ("bytes_held", "leaked")  # kept at every level: the leak check
_LOCK_TIME_SUFFIXES = ("_wait_ns", "_hold_ns")


def _desc(layer, name, docs=None):
    """The descriptor dict of counter ``name`` of ``layer`` (from ``docs``,
    {layer: [dicts]}, else the registry), or None."""
    if docs and layer in docs:
        return next((c for c in docs[layer] if c.get("name") == name), None)
    sch = schema.layers().get(layer)
    c = sch.counter(name) if sch is not None else None
    return c.to_dict() if c is not None else None


def _declares(layer, docs=None):
    """Whether ``layer`` declares its counters (so an undeclared name is no counter of it)."""
    if docs and layer in docs:
        return True
    sch = schema.layers().get(layer)
    return bool(sch is not None and sch.counters)


def is_time(layer, name, docs=None):
    """Whether counter ``name`` of ``layer`` is a lock time (ns, stats=full only)."""
    d = _desc(layer, name, docs)
    if d is not None:
        return d.get("unit") == "ns"
    return name.endswith(_LOCK_TIME_SUFFIXES)


def split(metric):
    """(layer key, layer name, counter name, per_op) of "<layer>[#n].<name>[_per_op]";
    None for a metric that is not a layer's ("alloc_ns", "wl.<name>")."""
    if not isinstance(metric, str) or "." not in metric or metric.startswith("wl."):
        return None
    key, name = metric.split(".", 1)
    per_op = name.endswith("_per_op")
    return key, key.split("#", 1)[0], name[:-len("_per_op")] if per_op else name, per_op


def unmeasured(point, metric, docs=None):
    """Why ``point`` has no ``metric`` although its stack has the layer: the
    stats level did not measure it ("stats=off", "stats=lite: lock times need
    stats=full"); None when the metric is not a counter the level left out."""
    parts = split(metric)
    if parts is None or metric in point.data:
        return None
    key, layer, name, _ = parts
    if key + ".bytes_held" not in point.data or name in ACCOUNTING:
        return None
    if _declares(layer, docs) and _desc(layer, name, docs) is None:
        return None  # a layer that declares its counters has no such one
    level = point.params.get("stats")
    if level == "off":
        return "stats=off"
    if level == "lite" and is_time(layer, name, docs):
        return "stats=lite: lock times need stats=full"
    return None


def layer_docs(policies):
    """{layer: [counter dicts]} for every layer of ``policies`` that declares
    counters (what a Result records in metadata["counters"])."""
    out = {}
    for pol in policies:
        for n in pol.names:
            sch = schema.layers().get(n)
            if sch is not None and sch.counters and n not in out:
                out[n] = [c.to_dict() for c in sch.counters]
    return out


def describe(res, metric):
    """A dict describing a layer's counter metric of Result ``res`` (see
    Result.describe); UnknownNameError for a metric that is not one."""
    parts = split(metric)
    known = res.metrics()
    if parts is None or not (metric in known or any(unmeasured(p, metric, res.metadata.get(
            "counters")) for p in res.points)):
        counters = [m for m in known if split(m) is not None]
        raise errors.UnknownNameError.make("counter metric", metric, counters)
    key, layer, name, per_op = parts
    docs = res.metadata.get("counters")
    d = _desc(layer, name, docs)
    if d is None:
        kind = "gauge" if name in ACCOUNTING or ("%s.%s_per_op" % (key, name) not in known
                                                 and "%s.%s" % (key, name) in known) else "counter"
        d = {"name": name, "doc": schema.NO_DOC, "kind": kind, "formula": None, "key": False,
             "unit": "ns" if name.endswith(_LOCK_TIME_SUFFIXES) else "", "reported": False,
             "levels": ["full"] if name.endswith(_LOCK_TIME_SUFFIXES) else
             list(LEVELS) if kind == "gauge" or name in ACCOUNTING else ["lite", "full"]}
        if name in ACCOUNTING:
            d["doc"] = ("bytes handed out and not freed at the end of the measured phase"
                        if name == "bytes_held" else "bytes still held after teardown")
            d["unit"] = "bytes"
    d = dict(d, doc=d.get("doc") or schema.NO_DOC)  # a recorded descriptor may lack its doc
    out = dict(d, metric=metric, layer=layer, counter=name, per_op=per_op)
    out["measured_at"] = sorted({p.params.get("stats", "lite") for p in res.points
                                 if metric in p.data}, key=_level_order)
    if per_op and d["doc"] != schema.NO_DOC:
        out["doc"] = "%s, per alloc+free operation" % d["doc"]
    return out


def _level_order(level):
    return LEVELS.index(level) if level in LEVELS else len(LEVELS)
