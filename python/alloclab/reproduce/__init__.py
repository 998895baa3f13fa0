"""Reproductions of the seed discussions' experiments, as functions that
return report objects (tables in the seed's layout, summaries computed from
the data, the counters that explain them, and plots).

- libarena(): seed 000, per-CPU caches in front of libarena's buddy (on the
  model's buddy, or with tree= on a libarena tree's own code).
- libarena_simulated(): seed 000's grid on simulated CPUs, its conclusions
  judged as predictions; libarena_scaling(): latency against 1-256 CPUs.
- libarena_fidelity(): the model's buddy against a libarena tree's own code.
- vmalloc(): seed 004, vmalloc's high-order allocation and bulk vfree.
- local_storage(): seed 003, BPF local storage switching to kmalloc_nolock().

Each plans its grid with alloclab.run's planner (so every value is checked
before anything runs), runs the policies it compares back to back in each
round (their order alternating, so drift cancels in paired ratios), and
returns a report (reproduce._report) whose verdicts all come from
alloclab.verdict.
"""
from .libarena import LibarenaReport, libarena
from .libarena_sim import Scaling, SimulatedLibarenaReport, libarena_scaling, libarena_simulated
from .libarena_fidelity import Fidelity, libarena_fidelity
from .local_storage import LocalStorageReport, local_storage
from .vmalloc import VmallocReport, vmalloc

__all__ = ["libarena", "LibarenaReport", "libarena_simulated", "SimulatedLibarenaReport",
           "libarena_scaling", "Scaling", "libarena_fidelity", "Fidelity", "vmalloc", "VmallocReport", "local_storage",
           "LocalStorageReport"]
