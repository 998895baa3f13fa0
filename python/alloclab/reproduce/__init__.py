"""Reproductions of the seed discussions' experiments, as functions that
return report objects (tables in the seed's layout, summaries computed from
the data, the counters that explain them, and plots).

- libarena(): seed 000, per-CPU caches in front of libarena's buddy.
- vmalloc(): seed 004, vmalloc's high-order allocation and bulk vfree.
"""
from .libarena import LibarenaReport, libarena
from .vmalloc import VmallocReport, vmalloc

__all__ = ["libarena", "LibarenaReport", "vmalloc", "VmallocReport"]
