"""A simulated run's timeline as Chrome trace-event JSON, the format that
Perfetto (ui.perfetto.dev) and chrome://tracing open, so that a reader sees
where the model CPUs queue on a lock.

Input: events (cpu, kind, name, start_ns, dur_ns), ``kind`` one of KINDS
("op": one allocator operation, "hold": a lock held, "wait": a lock waited
for, "handoff": a lock's lines moving to another CPU, "cycle": one cycle
of the workload), times in virtual nanoseconds; and a metadata dict with
at least the workload, the policy and the seed.

Output: {"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}.
Process 1 is "alloclab simulated run"; each model CPU is a thread (tid =
the CPU, named "model CPU i" by a metadata event). Every event is a
complete event (ph "X") with ts and dur in microseconds as floats (the
format's unit) and its kind as its category, listed in time order (ties:
by CPU, then the longer first so that an enclosing event precedes what it
encloses, then as given). otherData holds the metadata, a note that the
times are predictions, and how many events there were, were kept and were
dropped.

Bounded: at most ``max_events`` events are kept, the first in time order
(a heap of that size, so a long run's events are never all held at once);
the count dropped is recorded, never silent. Files are written through
alloclab.files: a path that is a directory, a socket or a pipe with no
reader is refused before an event is read, and a regular file is replaced
whole or not at all.
"""

import heapq
import json
import math
from collections.abc import Mapping

from .. import errors, files

KINDS = ("op", "hold", "wait", "handoff", "cycle")
"""The kinds of event a timeline holds."""
PROCESS_NAME = "alloclab simulated run"
NOTE = "simulated: times are predictions"
MAX_EVENTS = 200000
"""The default bound on the events a timeline keeps."""
REQUIRED_METADATA = ("workload", "policy", "seed")
RESERVED_METADATA = ("note", "events_total", "events_kept", "events_dropped", "max_events")


def _event(i, ev):
    """Event ``i`` checked: (cpu, kind, name, start_ns, dur_ns) with floats."""
    if not isinstance(ev, (tuple, list)) or len(ev) != 5:
        raise errors.ParameterTypeError(
            "event %d must be a tuple (cpu, kind, name, start_ns, dur_ns), not %s" % (
                i, errors.shown(ev)), value=ev)
    cpu, kind, name, start, dur = ev
    if isinstance(cpu, bool) or not hasattr(cpu, "__index__") or cpu.__index__() < 0:
        raise errors.InvalidArgument("event %d: cpu %s is not a model CPU number (an "
                                     "integer, 0 or more)" % (i, errors.shown(cpu)), value=cpu)
    if kind not in KINDS:
        raise errors.UnknownNameError.make("event kind", kind, KINDS, context="event %d" % i)
    if not isinstance(name, str):
        raise errors.ParameterTypeError("event %d: name must be a str, not %s" % (
            i, type(name).__name__), value=name)
    times = []
    for what, v in (("start_ns", start), ("dur_ns", dur)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(
                v, "__float__"):
            raise errors.ParameterTypeError("event %d: %s must be a number, not %s" % (
                i, what, type(v).__name__), value=v)
        f = float(v)
        if not math.isfinite(f) or f < 0:
            raise errors.ParameterRangeError("event %d: %s is %r; valid: a finite time, 0 or "
                                             "more" % (i, what, f), value=f, min=0.0, max=None)
        times.append(f)
    return int(cpu.__index__()), kind, name, times[0], times[1]


def _check_metadata(metadata):
    if not isinstance(metadata, Mapping):
        raise errors.ParameterTypeError("metadata must be a dict, not %s" % (
            type(metadata).__name__), value=metadata)
    missing = [k for k in REQUIRED_METADATA if k not in metadata]
    if missing:
        raise errors.InvalidArgument("metadata lacks %s; a timeline names %s" % (
            ", ".join(missing), ", ".join(REQUIRED_METADATA)), value=missing)
    taken = [k for k in metadata if k in RESERVED_METADATA]
    if taken:
        raise errors.InvalidArgument("metadata key %s is the timeline's own; keys it "
                                     "writes: %s" % (", ".join(map(repr, taken)),
                                                     ", ".join(RESERVED_METADATA)), value=taken)
    out = {}
    for k, v in metadata.items():
        if not isinstance(k, str):
            raise errors.ParameterTypeError("metadata key %s must be a str" % errors.shown(k),
                                            value=k)
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise errors.ParameterTypeError("metadata %r is not JSON: %s (%s)" % (
                k, errors.shown(v), e), value=v) from None
        out[k] = v
    return out


def _check_bound(max_events):
    if isinstance(max_events, bool) or not hasattr(max_events, "__index__"):
        raise errors.ParameterTypeError("max_events must be an integer, not %s" % (
            type(max_events).__name__), value=max_events)
    n = int(max_events.__index__())
    if n < 1:
        raise errors.ParameterRangeError("max_events is %d; valid: 1 or more" % n,
                                         value=n, min=1, max=None)
    return n


def _first_events(events, max_events):
    """(the first ``max_events`` checked events in timeline order, how many
    there were)."""
    if isinstance(events, (str, bytes, Mapping)) or not hasattr(events, "__iter__"):
        raise errors.ParameterTypeError("events must be an iterable of (cpu, kind, name, "
                                        "start_ns, dur_ns), not %s" % type(events).__name__,
                                        value=events)
    seen = [0]

    def keyed():
        for i, ev in enumerate(events):
            seen[0] = i + 1
            cpu, kind, name, start, dur = _event(i, ev)
            yield (start, cpu, -dur, i), (cpu, kind, name, start, dur)
    kept = heapq.nsmallest(max_events, keyed(), key=lambda x: x[0])
    return [ev for _, ev in kept], seen[0]


def _trace_events(kept):
    out = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
            "args": {"name": PROCESS_NAME}}]
    for cpu in sorted({ev[0] for ev in kept}):
        out.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": cpu,
                    "args": {"name": "model CPU %d" % cpu}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": cpu,
                    "args": {"sort_index": cpu}})
    out += [{"name": name, "cat": kind, "ph": "X", "ts": start / 1000.0, "dur": dur / 1000.0,
             "pid": 1, "tid": cpu} for cpu, kind, name, start, dur in kept]
    return out


def chrome_trace(events, metadata, max_events=MAX_EVENTS):
    """The trace-event dict of ``events`` (see the module's docstring):
    the first ``max_events`` in time order, the number dropped in
    otherData["events_dropped"]."""
    meta = _check_metadata(metadata)
    bound = _check_bound(max_events)
    kept, total = _first_events(events, bound)
    other = dict(meta)
    other.update(note=NOTE, events_total=total, events_kept=len(kept),
                 events_dropped=total - len(kept), max_events=bound)
    return {"traceEvents": _trace_events(kept), "displayTimeUnit": "ns", "otherData": other}


def write_chrome_trace(path, events, metadata, max_events=MAX_EVENTS):
    """Write chrome_trace(events, metadata, max_events) to ``path`` as JSON
    through alloclab.files (a path that cannot be written is refused
    before an event is read); returns the dict written."""
    files.check_output(path, "timeline file")
    trace = chrome_trace(events, metadata, max_events)
    files.write_text(path, json.dumps(trace, separators=(",", ":"), allow_nan=False),
                     "timeline file")
    return trace
