"""Reproductions of the seed discussions' experiments, as functions that
return report objects (tables in the seed's layout, summaries computed from
the data, the counters that explain them, and plots).

- libarena(): seed 000, per-CPU caches in front of libarena's buddy.
- vmalloc(): seed 004, vmalloc's high-order allocation and bulk vfree.
- local_storage(): seed 003, BPF local storage switching to kmalloc_nolock().
"""
from .libarena import LibarenaReport, libarena
from .local_storage import LocalStorageReport, local_storage
from .vmalloc import VmallocReport, vmalloc

__all__ = ["libarena", "LibarenaReport", "vmalloc", "VmallocReport", "local_storage",
           "LocalStorageReport"]
