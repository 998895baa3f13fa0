"""Per-run memory and histogram metrics, from a raw run (run.run_once).

Memory (bytes; the C engine's struct al_mem, sampled by the main thread
during the measured phase, see csrc/include/alloclab/measure.h):

- mem_requested(_peak): bytes the workload asked for and has not freed
  (the workers' live bytes), at the end of the phase (peak: largest sample)
- mem_held(_peak): the bottom layer's bytes_held, i.e. what the stack took
  from its backing memory for the workload, caches above it included; the
  peak is NaN (not measured) when the bottom layer's stats() may not run
  mid-phase (no stats_anytime feature) and samples were taken in between
- mem_rss(_peak): the process's resident set size
- mem_fragmentation: mem_held / mem_requested when the phase ends, with the
  workers quiescent so both are exact (1.0 = nothing lost to rounding or
  held in caches); NaN when the workload holds nothing then (malloc-free
  frees every cycle: read mem_held_peak and mem_requested_peak instead;
  mid-phase samples catch a cycle half done, so their ratio means little)
- mem_samples: how many samples were taken

With histogram=True, <op>_p50_ns ... <op>_max_ns come from the run's merged
histogram of each operation kind (alloc, free).
"""

import math

from . import hist as _hist

MEM_METRICS = ["mem_requested", "mem_requested_peak", "mem_held", "mem_held_peak", "mem_rss",
               "mem_rss_peak", "mem_fragmentation", "mem_samples"]
METRIC_NAMES = MEM_METRICS + _hist.METRIC_NAMES

METRIC_INFO = {
    "mem_requested": ("bytes requested, live at the end", "bytes", True),
    "mem_requested_peak": ("bytes requested, live (peak)", "bytes", True),
    "mem_held": ("bytes held by the allocator at the end", "bytes", True),
    "mem_held_peak": ("bytes held by the allocator (peak)", "bytes", True),
    "mem_rss": ("resident set size at the end", "bytes", True),
    "mem_rss_peak": ("resident set size (peak)", "bytes", True),
    "mem_fragmentation": ("fragmentation, held / requested at the end", "ratio", True),
    "mem_samples": ("memory samples", "", None),
}
# Why a memory metric is NaN in a run (tables show "n/a" and this reason).
NOT_MEASURED = {
    "mem_held_peak": "mem_held_peak: the bottom layer's bytes held is read mid-run only "
                     "when it has the stats_anytime feature",
    "mem_requested": "mem_requested: the workload does not keep its live bytes",
    "mem_requested_peak": "mem_requested_peak: the workload does not keep its live bytes",
    "mem_fragmentation": "mem_fragmentation: nothing requested was live at the phase's end",
}
for _name in _hist.METRIC_NAMES:
    _op, _what = _name.split("_", 1)
    METRIC_INFO[_name] = ("%s latency, %s" % ("allocation" if _op == "alloc" else "free",
                                              _what[:-3].replace("p999", "p99.9")), "ns", True)


def run_metrics(raw):
    """{metric: value} for one raw run (empty when the raw run predates them)."""
    m = {}
    mem = raw.get("mem")
    if mem:
        req = mem["requested"] if mem["requested"] >= 0 else math.nan
        req_peak = mem["requested_peak"] if mem["requested_peak"] >= 0 else math.nan
        m["mem_requested"] = req
        m["mem_requested_peak"] = req_peak
        m["mem_held"] = mem["held"]
        # The bottom layer's bytes_held is read mid-phase only when its stats()
        # may run beside the workers (stats_anytime); without it only the two
        # ends were read, and their larger is no peak: not measured.
        whole = mem.get("held_samples", mem["samples"]) >= mem["samples"]
        m["mem_held_peak"] = mem["held_peak"] if whole else math.nan
        m["mem_rss"] = mem["rss"]
        m["mem_rss_peak"] = mem["rss_peak"]
        m["mem_fragmentation"] = mem["held"] / req if req == req and req > 0 else math.nan
        m["mem_samples"] = mem["samples"]
    if raw.get("hist"):
        m.update(_hist.metrics({op: _hist.Histogram.from_dict(d)
                                for op, d in raw["hist"].items()}))
    return m


def point_hists(raws):
    """{op: [Histogram per run]} when the runs recorded histograms, else {}."""
    if not raws or not all(r.get("hist") for r in raws):
        return {}
    return {op: [_hist.Histogram.from_dict(r["hist"][op]) for r in raws]
            for op in raws[0]["hist"]}


def hist_to_json(hists):
    return {op: [h.to_dict() for h in hs] for op, hs in hists.items()}


def hist_from_json(d):
    if not d:
        return {}
    return {op: [_hist.Histogram.from_dict(x) for x in hs] for op, hs in d.items()}
