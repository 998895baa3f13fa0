"""Reproductions of the seed discussions' experiments, as functions that
return report objects (tables in the seed's layout, summaries computed from
the data, the counters that explain them, and plots).

- libarena(): seed 000, per-CPU caches in front of libarena's buddy.
- local_storage(): seed 003, BPF local storage switching to kmalloc_nolock().
"""
from .libarena import LibarenaReport, libarena
from .local_storage import LocalStorageReport, local_storage

__all__ = ["libarena", "LibarenaReport", "local_storage", "LocalStorageReport"]
