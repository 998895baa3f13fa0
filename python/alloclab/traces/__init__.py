"""Recorded programs as data: the trace file format and the Trace object
(trace), what a trace holds (traceinfo), synthetic traces (tracegen), and
the replay workload's trace parameter (replay)."""
