"""Judging results: A/B comparisons of Results, marked (I)/(R) only when
the data say so (compare), and the one engine behind every claim and
verdict alloclab prints (verdict). Both read what a metric means from
results.metrics and the statistics of a cell from results.stats. mva is
the analytical cross-check of simulated CPUs: a queueing model of the
locks from a 1-producer point's counters."""
