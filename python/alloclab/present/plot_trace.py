"""Plots of what a trace holds (a TraceInfo); each function returns a
matplotlib Figure in the house style of plot_style (7 x 4.3 in at 200 dpi;
the six-panel overview is twice as tall), al.plot.save writes them.

    info = al.trace_info(trace)
    al.plot_trace.overview(info)        # the six panels below in one figure, 3 rows of 2
    al.plot_trace.live_bytes(info)      # live requested bytes over time and ops, peak marked
    al.plot_trace.sizes(info)           # sizes created, power-of-two bins, stacked per kind
    al.plot_trace.lifetimes(info)       # lifetimes in ops and in time
    al.plot_trace.threads(info)         # ops per thread: allocations, frees, others

Each panel is drawn by an ``_on_*`` function on a given Axes, so the
overview and the single plots draw the same thing. The series are the
bucket maxima trace_info kept (at most ``points`` buckets), so a peak is
never smoothed away; bytes are scaled to the unit that suits the peak.
matplotlib is imported when a function is called, as in plot.py.
"""

from .. import errors
from . import plot_style as S
from ..cbind.schema import format_size

_UNITS = (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("B", 1))
_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0))
MAX_THREAD_BARS = 32
OVERVIEW_SIZE = (S.FIGSIZE[0], 2 * S.FIGSIZE[1])  # three rows of two panels


def _check(info):
    if not all(hasattr(info, a) for a in ("live", "sizes", "lifetimes", "threads")):
        raise errors.InvalidArgument("trace plots take a TraceInfo (alloclab.trace_info), "
                                     "not %r" % (info,))


def _byte_unit(peak):
    return next((u, s) for u, s in _UNITS if peak >= s or s == 1)


def _time_unit(span):
    return next((u, s) for u, s in _TIME_UNITS if span >= s or s == 1.0)


def _bin_axis(ax, bounds, xlabel, fmt=format_size, most=10):
    """Power-of-two bins at x = 0, 1, ..., labelled by each bin's lower bound
    (at most ``most`` labels, every other one or fewer when there are more)."""
    xs = list(range(len(bounds)))
    step = max(1, -(-len(bounds) // most))
    ax.set_xticks(xs[::step])
    ax.set_xticklabels(["0" if hi == 1 else fmt(lo) for lo, hi in bounds][::step],
                       rotation=45, ha="right", rotation_mode="anchor")
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="y", alpha=0.3)
    return xs


def _on_live(ax, info, x):
    """Live requested bytes against time (x="time") or global op position
    (x="seq"), each point a bucket's maximum; the peak marked."""
    lv = info.live
    series = lv["by_time"] if x == "time" else lv["by_seq"]
    if series is None:
        ax.text(0.5, 0.5, "no ops", ha="center", va="center", transform=ax.transAxes)
        return
    unit, scale = _byte_unit(max(1, lv["peak_bytes"]))
    xs = series["t_ns"] if x == "time" else series["pos"]
    if x == "time":
        tu, ts = _time_unit(float(xs[-1]) if len(xs) else 0.0)
        xs, xlabel = xs / ts, "time since the trace began (%s)" % tu
    else:
        xlabel = "ops (global sequence order)"
    ax.step(xs, series["bytes"] / scale, where="post")
    top = max(1, lv["peak_bytes"]) / scale
    if lv["peak_seq"] is not None:
        px = lv["peak_t_ns"] / ts if x == "time" else _peak_pos(series, lv)
        ax.plot([px], [lv["peak_bytes"] / scale], "o", color="C3")
        right = len(xs) and px > (float(xs[0]) + float(xs[-1])) / 2
        ax.annotate("peak %.4g %s" % (lv["peak_bytes"] / scale, unit),
                    (px, lv["peak_bytes"] / scale), xytext=(-6 if right else 6, -2),
                    textcoords="offset points", ha="right" if right else "left", va="top",
                    fontsize=S.NOTE, color="C3")
    ax.set_xlabel(xlabel)
    S.plain_linear(ax, "x")
    ax.set_ylabel("live bytes, %s (bucket max)" % unit)
    ax.set_ylim(0, top * 1.08)
    ax.grid(True, alpha=0.3)


def _peak_pos(series, lv):
    """The seq panel's x of the peak: the first bucket whose maximum is it."""
    b = series["bytes"]
    i = next((i for i in range(len(b)) if b[i] == lv["peak_bytes"]), 0)
    return series["pos"][i]


def _on_sizes(ax, info):
    """Sizes created per power-of-two bin, stacked per allocating kind."""
    allh = info.sizes["all"]
    if not allh.total:
        ax.text(0.5, 0.5, "no object created", ha="center", va="center", transform=ax.transAxes)
        return
    bounds = [(lo, hi) for lo, hi, _ in allh.rows()]
    xs = _bin_axis(ax, bounds, "request size (bytes, bin start)")
    bottom = [0] * len(xs)
    for k, h in info.sizes.items():
        if k == "all":
            continue
        ys = [h.count(lo) for lo, _ in bounds]
        ax.bar(xs, ys, bottom=bottom, label=k, width=0.85)
        bottom = [a + b for a, b in zip(bottom, ys)]
    ax.set_ylabel("objects created")
    S.plain_linear(ax, "y")
    S.legend_above(ax)


def _fmt_ns(v):
    u, s = _time_unit(v)
    return "%.3g%s" % (v / s, u)


def _on_lifetimes(ax, info, unit):
    """Lifetimes of the freed objects in ops or in ns, power-of-two bins."""
    h = info.lifetimes[unit]
    if not h.total:
        ax.text(0.5, 0.5, "no object freed", ha="center", va="center", transform=ax.transAxes)
        return
    rows = h.rows()
    xs = _bin_axis(ax, [(lo, hi) for lo, hi, _ in rows],
                   "lifetime in %s (bin start)" % ("ops" if unit == "ops" else "time"),
                   fmt=str if unit == "ops" else _fmt_ns)
    ax.bar(xs, [c for _, _, c in rows], width=0.85)
    ax.set_ylabel("objects freed")
    S.plain_linear(ax, "y")


_THREAD_CLASSES = (("allocations", ("malloc", "calloc", "posix_memalign", "aligned_alloc",
                                     "memalign", "valloc", "pvalloc")),
                   ("frees", ("free",)), ("reallocs", ("realloc",)))


def _on_threads(ax, info, limit=MAX_THREAD_BARS):
    """Ops per thread (the ``limit`` busiest, in thread order), stacked by
    kind: allocations, frees, reallocs, other ops (usable-size queries,
    thread events); the stack is the thread's ops."""
    ths = sorted(sorted(info.threads, key=lambda t: -t["ops"])[:limit],
                 key=lambda t: t["thread"])
    xs = list(range(len(ths)))
    bottom = [0] * len(ths)
    for label, kinds in _THREAD_CLASSES + (("other", None),):
        ys = [t["ops"] - sum(_classified(t)) if kinds is None else
              sum(t["by_kind"].get(k, 0) for k in kinds) for t in ths]
        ax.bar(xs, ys, bottom=bottom, label=label)
        bottom = [a + b for a, b in zip(bottom, ys)]
    ax.set_xticks(xs)
    ax.set_xticklabels([str(t["thread"]) for t in ths],
                       rotation=90 if len(ths) > 16 else 0)
    ax.set_xlabel("thread" + (" (the %d busiest)" % limit if len(info.threads) > limit else ""))
    ax.set_ylabel("ops")
    S.plain_linear(ax, "y")
    S.legend_above(ax)
    ax.grid(True, axis="y", alpha=0.3)


def _classified(t):
    """The thread's ops in the named classes (the rest are "other")."""
    return [sum(t["by_kind"].get(k, 0) for k in kinds) for _, kinds in _THREAD_CLASSES]


def _title(info, what):
    """The command line and `what`; its $ escaped, which matplotlib would
    take for mathtext (`sh -c 'echo $$'` would not draw)."""
    m = info.summary.get("meta") or {}
    prog = " ".join(_argv(m)) or str(m.get("program") or "trace")
    if len(prog) > 60:
        prog = prog[:57] + "..."
    return "%s: %s" % (prog.replace("$", r"\$"), what)


def _argv(meta):
    """The header's argv as strings (a hand-edited header may hold one string)."""
    argv = meta.get("argv") or []
    return [str(a) for a in argv] if isinstance(argv, list) else [str(argv)]


def _figure(info, draws, what, title, figsize, sharey=False):
    """One figure of len(draws) panels side by side (each draw(ax) fills
    one), titled ``title`` or the trace's ``what``; ``sharey``: the panels
    show one metric, on one y axis (labelled once, on the left)."""
    _check(info)
    with S.rc():
        fig, axes = S.subplots(1, len(draws), figsize=figsize, sharey=sharey)
        for ax, draw in zip(axes[0], draws):
            draw(ax)
        if sharey:
            for ax in axes[0][1:]:
                ax.set_ylabel("")
        S.suptitle(fig, title or _title(info, what))
    return S.finish(fig)


def live_bytes(info, title=None, figsize=None):
    """Live requested bytes over time and over ops, the peak marked, on one
    y axis."""
    return _figure(info, [lambda ax: _on_live(ax, info, "time"),
                          lambda ax: _on_live(ax, info, "seq")],
                   "live requested bytes", title, figsize, sharey=True)


def sizes(info, title=None, figsize=None):
    """The sizes of the objects created, stacked per allocating kind."""
    return _figure(info, [lambda ax: _on_sizes(ax, info)], "request sizes", title, figsize)


def lifetimes(info, title=None, figsize=None):
    """Lifetimes of the freed objects: in ops beside in time, on one y axis
    (objects freed)."""
    return _figure(info, [lambda ax: _on_lifetimes(ax, info, "ops"),
                          lambda ax: _on_lifetimes(ax, info, "ns")],
                   "object lifetimes", title, figsize, sharey=True)


def threads(info, title=None, figsize=None):
    """Ops per thread."""
    return _figure(info, [lambda ax: _on_threads(ax, info)], "ops per thread", title, figsize)


def overview(info, title=None, figsize=None):
    """Everything in one figure of six panels, three rows of two, twice the
    usual height: live bytes over time and over ops, sizes and ops per
    thread, lifetimes in ops and in time. The two panels of a row that
    show one metric (live bytes; objects freed) share their y axis."""
    _check(info)
    with S.rc():
        fig, axes = S.subplots(3, 2, figsize=figsize or OVERVIEW_SIZE)
        axes[0][1].sharey(axes[0][0])
        axes[2][1].sharey(axes[2][0])
        _on_live(axes[0][0], info, "time")
        _on_live(axes[0][1], info, "seq")
        _on_sizes(axes[1][0], info)
        _on_threads(axes[1][1], info)
        _on_lifetimes(axes[2][0], info, "ops")
        _on_lifetimes(axes[2][1], info, "ns")
        S.suptitle(fig, title or _title(info, "%d ops, %d threads, peak %s live" % (
            info.summary["nops"], info.summary["nthreads"],
            _fmt_bytes(info.live["peak_bytes"]))))
    return S.finish(fig)


def _fmt_bytes(v):
    u, s = _byte_unit(max(1, v))
    return "%.4g %s" % (v / s, u)
