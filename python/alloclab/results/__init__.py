"""What a run produced and what it means: Result and its JSON/CSV I/O
(result), the meaning of every metric (metrics, _counters, _measures),
latency histograms (hist), and the statistics of a cell's runs (stats)."""
