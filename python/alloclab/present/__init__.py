"""Presentation: the house style of every figure (plot_style), plots of
Results and Comparisons (plot), of traces (plot_trace) and of the
reproductions (plot_reproduce); a simulated run's timeline as Chrome
trace-event JSON for Perfetto (timeline)."""
