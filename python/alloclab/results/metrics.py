"""The catalogue of base metrics: their names, descriptions, units and
directions, shared by Results, comparisons, verdicts and plots.

- ``BASE_METRICS``: every metric a run reports whatever its policy, in the
  order tables list them: the engine's (latency, throughput, counts, timer
  overhead, steal), the memory and per-op percentile metrics of
  alloclab._measures, and the scheduling metrics of alloclab.machine.
- ``METRIC_INFO``: metric -> (description, unit, lower_is_better), where
  lower_is_better is None for a metric with no better direction (a
  description of the run, not a result).

Layer counters ("<layer>.<counter>") and workload metrics ("wl.<name>")
are named by the library at run time and are not listed here. This module
imports only leaf modules, so that the modules reading the catalogue
(result, plot, compare) need not import each other for it.

What a metric means is decided here and nowhere else: direction (lower or
higher is better, or neither), unit (what its values are printed with)
and is_timing (a time or a rate, decided by the clock and the scheduler,
rather than a count). compare, verdicts, tables and plots ask these.
"""

from . import _measures
from ..host import machine

BASE_METRICS = [
    "alloc_ns", "free_ns", "throughput", "cycles", "alloc_ops", "free_ops", "cross_frees",
    "elapsed_ns", "timer_overhead_ns", "steal_pct",
]
BASE_METRICS += _measures.METRIC_NAMES  # memory and per-op percentiles
BASE_METRICS += machine.METRIC_NAMES  # scheduling in the measured phase

# metric -> (description, unit, lower_is_better)
METRIC_INFO = {
    "alloc_ns": ("allocation latency", "ns", True),
    "free_ns": ("free latency", "ns", True),
    "throughput": ("throughput", "ops/s", False),
    "elapsed_ns": ("measured phase", "ns", None),
    "timer_overhead_ns": ("timer overhead", "ns", None),
    "steal_pct": ("steal time", "%", None),
}
METRIC_INFO.update(_measures.METRIC_INFO)
METRIC_INFO.update(machine.METRIC_INFO)  # scheduling, no direction


# ---------------------------------------------------------------- meaning

def direction(metric):
    """True when lower is better, False when higher is: from METRIC_INFO, else
    by the metric's name; None when alloclab cannot tell."""
    info = METRIC_INFO.get(metric)
    if info is not None and info[2] is not None:
        return info[2]
    if metric.endswith("_per_op") or metric.endswith("_ns") or metric.endswith(".leaked"):
        return True
    if metric in ("throughput",) or metric.endswith("_per_s"):
        return False
    return None


def unit(metric):
    """The unit a metric's values are printed with: METRIC_INFO's ("ns",
    "ops/s", "bytes", "%"), "usec" for a workload's *_usec; none for counts,
    per-op counters and ratios."""
    if metric.endswith("_per_op"):
        return ""
    info = METRIC_INFO.get(metric)
    if info is not None:
        return "" if info[1] in ("ratio",) else info[1]
    if metric.startswith("wl.") and metric.endswith("_usec"):
        return "usec"
    return ""


def is_timing(metric):
    """Whether a metric is a time or a rate (decided by the clock and the
    scheduler, so never by virtual CPUs) rather than a count."""
    info = METRIC_INFO.get(metric)
    if info is not None and info[1] in ("ns", "ops/s", "usec", "us", "s"):
        return True
    return metric.endswith(("_ns", "_usec", "_per_s", "throughput")) and \
        not metric.endswith("_per_op")
