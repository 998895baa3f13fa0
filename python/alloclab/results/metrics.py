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
