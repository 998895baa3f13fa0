"""Reproductions of the seed discussions' experiments, as functions that
return report objects (tables in the seed's layout, summaries computed from
the data, the counters that explain them, and plots).

- libarena(): seed 000, per-CPU caches in front of libarena's buddy.
"""
from .libarena import LibarenaReport, libarena

__all__ = ["libarena", "LibarenaReport"]
