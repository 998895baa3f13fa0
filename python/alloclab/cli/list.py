"""`alloclab list [NAME] [--json]`: what can be run.

Without NAME, an overview a line per entry: layers, workloads, presets,
metrics and peer allocators (the parameters are one `list NAME` away, so
the overview fits a screen). With NAME, one entry in full:

- a layer: its doc, features, size and alignment limits, parameters with
  range, default and doc, and its counters with their docs (key ones
  marked: those `run --counters key` shows);
- a workload: its doc and parameters (the --dashed-name flags of `run`);
- a preset: its spec and the stack it builds, top first, each layer with
  every parameter's value (non-default ones marked) and the layer's doc;
- ``layers``, ``workloads``, ``presets``, ``peers``: that section of the
  overview alone (``--json``: its entries as JSON);
- ``metrics``: the base metrics with their descriptions and units, and the
  names layer counters and workload metrics take.

A name that is both a layer and a preset of that one layer alone (buddy,
libc, null, pages) shows the layer. An unknown NAME is an
UnknownNameError naming the closest names first, then every kind of name
list takes. Registered plugin layers (--plugin FILE.c) are listed like
built-in ones. Cost: reads the C registry; nothing runs.
"""

import difflib
import json

from .. import errors
from ..cbind import schema
from .format import UsageError
from ..policies.policy import Policy, presets
from ..results.metrics import BASE_METRICS
from ..results.metrics import METRIC_INFO
from ..policies import peers
from ..policies.policy import policies
from ..policies.policy import workloads

METRICS_NAME = "metrics"


def add_parser(sub):
    lp = sub.add_parser(
        "list", help="layers, workloads, presets and metrics; `list NAME` shows one",
        description="Without NAME: every layer, workload, preset, metric kind and peer "
                    "allocator, a line each. With NAME (a layer, workload or preset, or "
                    "'metrics'): that entry's parameters with defaults and docs, a layer's "
                    "counters, a preset's stack.")
    lp.add_argument("name", nargs="?", metavar="NAME",
                    help="a layer, workload or preset, 'metrics', or a kind: layers, "
                         "workloads, presets, peers")
    lp.add_argument("--json", action="store_true", help="as JSON")
    lp.add_argument("--plugin", action="append", metavar="FILE.c",
                    help="compile and register a C plugin layer first")
    return lp


# ------------------------------------------------------------------ lines

def param_line(p):
    rng = ""
    if p.type == schema.ENUM:
        rng = "one of " + "|".join(p.choices or ())
    elif p.type != schema.BOOL:
        rng = "[%s, %s]" % (p.format(p.min), p.format(p.max))
    return "    %-20s %-5s default %-8s %-24s %s" % (
        p.name, p.type_name, p.format(p.default), rng, p.doc)


def _counter_line(c):
    """One counter of `alloclab list LAYER`: name, kind, key mark, doc, what
    it is derived from, and the level that measures lock times."""
    notes = []
    if c.formula:
        notes.append("= " + c.formula)
    if c.unit == "ns":
        notes.append("ns, stats=full only")
    return "    %-26s %-7s %-3s %s%s" % (c.name, c.kind, "key" if c.key else "", c.doc,
                                         " (%s)" % "; ".join(notes) if notes else "")


def _features_line(s):
    feats = ", ".join(s.features) or "-"
    mx = schema.format_size(s.max_size) if s.max_size else "any"
    al_txt = ("%d bytes" % s.min_align) if s.min_align else "that of the layer below"
    return "  features: %s; max size: %s; alignment: %s%s" % (
        feats, mx, al_txt, "; needs a layer below" if s.needs_backend else "")


def layer_text(s):
    """`alloclab list LAYER`: the layer's doc, features, parameters and counters."""
    out = ["%s: %s" % (s.name, s.doc), "  a layer; " + _features_line(s)[2:],
           "  parameters:" if s.params else "  parameters: none"]
    out += [param_line(p) for p in s.params]
    if s.counters:
        out.append("  counters (metrics <layer>.<name> and <layer>.<name>_per_op; "
                   "key = shown by `run --counters key`; none at --stats off):")
        out += [_counter_line(c) for c in s.counters]
    else:
        out.append("  counters: not declared by the layer (reported by name only, "
                   "%s)" % schema.NO_DOC)
    return "\n".join(out)


def workload_text(w):
    """`alloclab list WORKLOAD`: its doc and parameters (run's flags)."""
    out = ["%s: %s" % (w.name, w.doc),
           "  a workload: `alloclab run %s`%s" % (w.name, "; one producer only"
                                                   if w.one_producer else "")]
    out.append("  parameters (flags --dashed-name, comma-separated lists are swept):"
               if w.params else "  parameters: none")
    out += [param_line(p) for p in w.params]
    return "\n".join(out)


def preset_text(name):
    """`alloclab list PRESET`: the spec and the stack, top first."""
    pol = Policy(name)
    p = schema.presets()[name]
    out = ["%s: %s" % (name, presets[name]),
           "  a preset (--policy %s); %s; runs %s" % (
               name, p.doc, "in a child process (a peer)" if p.peer else "in process"),
           "  its stack, top first (* = not the default):"]
    for i, (layer, _) in enumerate(pol.layers):
        sch = schema.layer(layer)
        out.append("  %d. %s: %s" % (i + 1, layer, sch.doc))
        for p in sch.params:
            v = pol.params(i)[p.name]
            raw = pol.raw_params(i)[sch.params.index(p)]
            out.append("       %s%-20s %s" % ("*" if raw != p.default else " ", p.name,
                                              p.format(raw) if not isinstance(v, str) else v))
    out.append("  `alloclab list LAYER` shows a layer's parameters and counters")
    return "\n".join(out)


def metrics_text():
    out = ["metrics (--metric NAME of run, show and compare):"]
    for m in BASE_METRICS:
        desc, unit, _ = METRIC_INFO.get(m, (m.replace("_", " "), "", None))
        out.append("  %-22s %s%s" % (m, desc, " (%s)" % unit if unit else ""))
    out += ["  <layer>.<counter>      a layer's counter, summed over the run "
            "(`alloclab list LAYER` lists them)",
            "  <layer>.<counter>_per_op  the same per alloc+free operation",
            "  wl.<name>              a workload's own metric (test_vmalloc, "
            "local-storage-create, ...)"]
    return "\n".join(out)


def _sections():
    """{kind: lines} of `alloclab list`, a section per kind; `list KIND`
    (layers, workloads, presets, peers) prints one section."""

    out = {"layers": ["layers: a policy stacks them top first ('percpu > transfer > buddy')"]
                     + ["  %-14s %s" % (s.name, s.doc) for s in schema.layers().values()],
           "workloads": ["workloads: `alloclab run WORKLOAD`"]
                        + ["  %-22s %s" % (w.name, w.doc) for w in schema.workloads().values()],
           "presets": ["presets: --policy NAME"]
                      + ["  %-22s %s  (%s)" % (k, p.spec, p.doc)
                         for k, p in schema.presets().items()],
           "peers": ["peer allocators: the system layer, run under LD_PRELOAD in a child process"]}
    for name, (ok, path, hint) in peers.status().items():
        where = "this process's malloc" if name == peers.current() else (path or "")
        out["peers"].append("  %-22s %s" % (name, ("available  " + where) if ok else
                                            "unavailable: " + hint))
    return out


SECTIONS = ("layers", "workloads", "presets", "peers")


def overview_text():
    """`alloclab list`: a line per entry."""
    out = []
    for lines in _sections().values():
        out += lines + [""]
    out += ["metrics: `alloclab list metrics`; one entry in full: `alloclab list NAME`; "
            "one kind: `alloclab list %s`" % "|".join(SECTIONS)]
    return "\n".join(out)


# ------------------------------------------------------------------ lookup

def _kind(name):
    """("layer"|"workload"|"preset"|"metrics", key) for NAME, or raise
    UnknownNameError naming the close matches first."""
    if name == METRICS_NAME:
        return "metrics", name
    layers, wls = schema.layers(), schema.workloads()
    if name in layers:
        return "layer", name
    for w in (name, name.replace("_", "-"), name.replace("-", "_")):
        if w in wls:
            return "workload", w
    if name in presets:
        return "preset", name
    every = (list(layers) + list(wls) + [p for p in presets if p not in layers] + [METRICS_NAME]
             + list(SECTIONS))
    close = difflib.get_close_matches(name, every, n=4, cutoff=0.5)
    raise errors.UnknownNameError(
        "unknown name %r: not a layer, workload or preset%s; layers: %s; workloads: %s; "
        "presets: %s" % (errors.Echo(name),
                         "; did you mean %s?" % " or ".join(close) if close else "",
                         ", ".join(layers), ", ".join(wls), ", ".join(presets)),
        name=name, kind="name", valid=every)


def _entry_json(kind, key):
    if kind == "layer":
        return dict(schema.layer(key).to_dict(), kind="layer")
    if kind == "workload":
        return dict(schema.workloads()[key].to_dict(), kind="workload")
    if kind == "preset":
        pol = Policy(key)
        return {"kind": "preset", "name": key, "spec": presets[key],
                "doc": schema.presets()[key].doc, "peer": schema.presets()[key].peer,
                "stack": [{"layer": n, "params": pol.params(i)}
                          for i, (n, _) in enumerate(pol.layers)]}
    return {"kind": "metrics", "metrics": [
        dict(zip(("name", "doc", "unit", "lower_is_better"),
                 (m,) + tuple(METRIC_INFO.get(m, (m.replace("_", " "), "", None)))))
        for m in BASE_METRICS]}


def _everything():
    """{kind: entries} as `list --json` prints them, peers included."""

    return {"layers": policies(), "workloads": workloads(), "presets": presets,
            "peers": {name: {"available": ok, "path": path, "hint": hint}
                      for name, (ok, path, hint) in peers.status().items()}}


def cmd_list(args):
    if args.name is not None:
        if not args.name.strip():
            raise UsageError("list NAME: an empty name")
        if args.name in SECTIONS:
            print(json.dumps({args.name: _everything()[args.name]}, indent=2) if args.json
                  else "\n".join(_sections()[args.name]))
            return 0
        kind, key = _kind(args.name)
        if args.json:
            print(json.dumps(_entry_json(kind, key), indent=2, default=str))
        elif kind == "layer":
            print(layer_text(schema.layer(key)))
        elif kind == "workload":
            print(workload_text(schema.workloads()[key]))
        elif kind == "preset":
            print(preset_text(key))
        else:
            print(metrics_text())
        return 0
    if args.json:
        every = _everything()
        del every["peers"]  # the overview's JSON as it was
        print(json.dumps(every, indent=2))
        return 0
    print(overview_text())
    return 0
