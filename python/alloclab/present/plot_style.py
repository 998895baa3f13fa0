"""The house style every alloclab figure shares: its size, fonts, layout,
legends, log axes, error bars and the marks of missing values.

A figure is 7 x 4.3 in at 200 dpi (1400 x 860 px, a column-and-a-half of a
paper at print resolution); a few figures whose rows cannot fit grow taller,
never wider. No text is under 8 pt: titles 10, labels 9, ticks, legends and
notes 8. Layout is matplotlib's constrained layout, which keeps titles,
colour bars and legends placed outside the axes inside the figure; long
titles are wrapped to the figure's width instead of running off its sides.

The rules, and why:
- log axes carry plain tick labels ("20", "500", "2k"), never "6x10^2":
  a reader compares numbers, not exponents; minor ticks stay unlabelled.
- legends sit outside the data (above the panels, or beside a bar chart),
  so no line, bar or error bar hides under one.
- on a log axis an error bar whose lower end reaches zero or below cannot
  be drawn: its lower arm is cut at the axis floor and marked with a caret
  there, instead of running off the axes; on a linear axis the lower arm
  of a quantity that cannot be negative (a latency) is cut at zero, with
  the same caret.
- points of several series at one x are spread side by side (dodged),
  symmetric about the true x, by a small fraction of the step between x
  values (a factor on a log axis), so no point or error bar hides another.
- panels of one metric share their y axis, so they compare by eye.
- a value that was not measured is written "n/a" where its bar would be; a
  measured zero is written "0", so the two read differently.

Functions here build on matplotlib only; plot.py, plot_trace.py and
plot_reproduce.py call them. matplotlib is imported when a figure is made.
"""

import math
import textwrap

import numpy as np

FIGSIZE = (7.0, 4.3)
DPI = 200
MIN_FONT = 8
RC = {"font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "xtick.labelsize": 8,
      "ytick.labelsize": 8, "legend.fontsize": 8, "legend.title_fontsize": 8,
      "figure.titlesize": 10, "axes.formatter.useoffset": False,
      "axes.formatter.limits": (-4, 6)}
NOTE = 8  # annotations, cell texts, "n/a" marks
# Colour-blind-safe diverging map (ColorBrewer RdBu): red worse, blue better.
DIVERGING = "RdBu"
NOT_SIGNIFICANT = "0.88"  # the grey of a heatmap cell whose change is not significant


def plt():
    import matplotlib.pyplot as pyplot
    return pyplot


def rc():
    """A context in which artists are created with the house fonts."""
    import matplotlib
    return matplotlib.rc_context(RC)


def subplots(nrows=1, ncols=1, figsize=None, **kw):
    """(figure, axes) at the house size and dpi, with constrained layout;
    call inside rc()."""
    kw.setdefault("squeeze", False)
    return plt().subplots(nrows, ncols, figsize=figsize or FIGSIZE, dpi=DPI,
                          layout="constrained", **kw)


def wrap(text, fig, fontsize=10, share=1.0):
    """``text`` wrapped to ``share`` of the figure's width at ``fontsize``
    (an average glyph is about 0.55 em wide), so a title never runs off
    the figure's sides; the lines of a wrapped paragraph of about equal
    length."""
    width = max(20, int(fig.get_figwidth() * share * 72.0 / (0.56 * fontsize)))
    out = []
    for line in text.split("\n"):
        n = -(-len(line) // width)  # lines needed; then balance their lengths
        out.append(textwrap.fill(line, min(width, -(-len(line) // max(1, n)) + 6)))
    return "\n".join(out)


def suptitle(fig, text):
    fig.suptitle(wrap(text, fig), fontsize=RC["figure.titlesize"])


def title(ax, text, fontsize=None):
    """An axes title wrapped to the axes' share of the figure."""
    fig = ax.figure
    share = ax.get_position().width if ax.get_position().width > 0 else 1.0
    ax.set_title(wrap(text, fig, fontsize or RC["axes.titlesize"], min(1.0, share + 0.1)),
                 fontsize=fontsize or RC["axes.titlesize"])


def _plain(v, _pos=None):
    """A tick value in plain digits: 0.5, 20, 500, 2k, 1.5M."""
    if v == 0:
        return "0"
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e4, "k")):
        if a >= div:
            return "%g%s" % (v / (div if div != 1e4 else 1e3), suffix)
    return "%g" % v


_LOG_SUBS = (tuple(np.arange(1.0, 10.0, 0.5)), (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0),
             (1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))


def plain_log(ax, which="y"):
    """Plain labels on a log axis: major ticks at 1, 2, 5 x 10^k or as many
    multiples of each power of ten as the axis' length holds (about two
    labels an inch across, three up), minor ticks unlabelled. Call once
    the data are drawn: the tick density follows the current view."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    axis = ax.yaxis if which == "y" else ax.xaxis
    lo, hi = ax.get_ylim() if which == "y" else ax.get_xlim()
    lo, hi = min(lo, hi), max(lo, hi)
    decades = max(math.log10(hi / lo), 0.1) if lo > 0 and hi > 0 else 1.0
    pos = ax.get_position()
    inches = (pos.height * ax.figure.get_figheight() * 3.0 if which == "y" else
              pos.width * ax.figure.get_figwidth() * 2.0)
    subs = next((s for s in _LOG_SUBS if decades * len(s) <= max(3.0, inches)), (1.0,))
    step = max(1, int(math.ceil(decades / max(3.0, inches)))) if subs == (1.0,) else 1
    axis.set_major_locator(LogLocator(base=10.0 ** step, subs=subs, numticks=30)
                           if step == 1 else LogLocator(base=10.0 ** step, numticks=30))
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())


def plain_linear(ax, which="y"):
    """Plain labels (2k, 1.5M) on a linear axis, never an offset or a
    scientific multiplier beside it."""
    from matplotlib.ticker import FuncFormatter
    (ax.yaxis if which == "y" else ax.xaxis).set_major_formatter(FuncFormatter(_plain))


def plain_log2(ax, which="x"):
    """A base-2 log axis labelled with plain powers of two (1, 4, 16, 64)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(FuncFormatter(_plain))
    axis.set_minor_formatter(NullFormatter())


def ratio_label(r):
    """A ratio for a tick: 1/16x, 0.5x, 0.8x, 1x, 2x, 16x (a ratio under 1 whose
    inverse is a whole number above 2 as a fraction: 1/16x, not 0.0625x)."""
    if 0 < r < 1 and 1.0 / r > 2.5 and abs(1.0 / r - round(1.0 / r)) < 1e-6:
        return "1/%dx" % round(1.0 / r)
    return "%gx" % float("%.3g" % r)


def legend_above(ax, ncol=None, order=None, **kw):
    """The axes' legend in a row (or rows) just above it, outside the data.
    An axes title becomes the legend's title, so the two do not overlap.
    ``order``: indices of the handles, in the order to show them (a legend
    fills its columns first)."""
    h, labels = ax.get_legend_handles_labels()
    if not h:
        return None
    if order is not None:
        h, labels = [h[i] for i in order], [labels[i] for i in order]
    title = ax.get_title()
    if title:
        ax.set_title("")
        kw.update(title=title, title_fontsize=RC["axes.titlesize"])
    width = ax.figure.get_figwidth() * min(1.0, ax.get_position().width + 0.15)
    ncol = _fit_columns(labels, ncol or min(len(h), 4), width)
    return ax.legend(h, labels, loc="lower center", bbox_to_anchor=(0.5, 1.01), ncol=ncol,
                     borderaxespad=0.0, frameon=False, handlelength=1.6, columnspacing=1.0,
                     **kw)


def fig_legend(fig, ax, where="outside right upper", ncol=1, **kw):
    """One legend for the figure, from ``ax``'s handles, outside every panel
    ("outside right upper", "outside upper center", ...)."""
    h, labels = ax.get_legend_handles_labels()
    if not h:
        return None
    ncol = _fit_columns(labels, ncol, fig.get_figwidth())
    return fig.legend(h, labels, loc=where, ncol=ncol, frameon=False, **kw)


def legend_below(fig, ax, ncol=4, **kw):
    """One legend for the figure below every panel (fig_legend), the figure
    made taller for each legend row past the second, so that many series
    neither squeeze the panels nor leave the figure."""
    h, labels = ax.get_legend_handles_labels()
    if not h:
        return None
    ncol = _fit_columns(labels, ncol, fig.get_figwidth())
    grow_for_legend(fig, legend_rows(len(labels), ncol))
    return fig.legend(h, labels, loc="outside lower center", ncol=ncol, frameon=False, **kw)


def _fit_columns(labels, ncol, width_in):
    """At most ``ncol`` legend columns, fewer when a row of the longest
    label (at the legend's 8 pt, with its handle) would not fit in
    ``width_in``."""
    entry = max(len(s) for s in labels) * 0.5 * RC["legend.fontsize"] / 72.0 + 0.4
    return max(1, min(ncol, len(labels), int((width_in - 0.2) // entry)))


def errorbars(ax, xs, ys, es, log=False, floor=None, lower_limit=None, **kw):
    """An errorbar line (``es`` None: the line alone; a NaN arm: no bar at
    that point, as where a point has a single run). A lower arm that would
    pass a bound is cut there and a caret marks the cut: on a log axis the
    axis ``floor`` (a lower end at zero or below cannot be drawn), on a
    linear axis ``lower_limit`` (0 for a latency, which cannot be
    negative; None: no bound). Returns the ErrorbarContainer."""
    if es is None:
        return ax.errorbar(xs, ys, **kw)
    ys = np.asarray(ys, dtype=float)
    es = np.asarray(es, dtype=float)
    bound = floor if log else lower_limit
    if bound is None:
        return ax.errorbar(xs, ys, yerr=es, **kw)
    # cut where the lower end reaches the bound (log: at or below the floor)
    cut = np.isfinite(ys) & np.isfinite(es) & (ys - es <= bound if log else ys - es < bound)
    lower = np.where(cut, np.maximum(ys - bound, 0.0), es)
    c = ax.errorbar(xs, ys, yerr=[lower, es], **kw)
    if cut.any():
        ax.plot(np.asarray(xs, dtype=float)[cut], [bound] * int(cut.sum()), linestyle="none",
                marker="v", markersize=5, color=c.lines[0].get_color(), clip_on=False)
    return c


# Several series at one x: each is shifted by DODGE of the smallest step
# between the axis' x values (a ratio on a log axis), all of them together
# by at most DODGE_SPAN of it, symmetric about the true x.
DODGE = 0.06
DODGE_SPAN = 0.3


def x_step(values, log=False):
    """The smallest step between distinct x ``values``: a difference, or on
    a log axis a ratio; 1 (log: 2) when there is one value."""
    v = np.asarray([x for x in values if np.isfinite(x) and (x > 0 or not log)], dtype=float)
    v = np.unique(v)
    if len(v) < 2:
        return 2.0 if log else 1.0
    return float(np.min(v[1:] / v[:-1])) if log else float(np.min(np.diff(v)))


def dodge(xs, i, k, step, log=False):
    """Series i of k's x positions: ``xs`` shifted by (i - (k-1)/2) times
    min(DODGE, DODGE_SPAN / (k-1)) of ``step`` (x_step), so the k series'
    points at one x sit side by side, centred on it; on a log axis the
    shift is a factor (step ** that fraction), the same distance on the
    page at every x."""
    xs = np.asarray(xs, dtype=float)
    if k <= 1:
        return xs
    d = min(DODGE, DODGE_SPAN / (k - 1)) * (i - (k - 1) / 2.0)
    return xs * step ** d if log else xs + d * step


def log_floor(ys, es):
    """The bottom of a log axis for means ``ys`` with error arms ``es``: 0.8
    of the lowest lower end, where a lower end at zero or below counts as a
    decade under the lowest mean (its arm is cut there), and no lower end
    takes the axis more than two decades under the lowest mean. None when
    no mean is positive."""
    ys = np.asarray(ys, dtype=float)
    es = np.nan_to_num(np.asarray(es, dtype=float), nan=0.0)
    ok = np.isfinite(ys) & (ys > 0)
    if not ok.any():
        return None
    low = float(ys[ok].min())
    ends = ys[ok] - es[ok]
    cand = list(ends[ends > 0]) + [low / 10.0 if (ends <= 0).any() else low]
    return max(min(cand), low / 100.0) * 0.8


MARKERS = ("o", "s", "^", "D", "v", "P", "X")
LINESTYLES = ("-", "--", ":", "-.")
HATCHES = ("", "//", "..", "xx", "\\\\", "oo")


def line_style(i):
    """Series i's colour, marker and line style: ten colours (matplotlib's
    colour-blind-aware default cycle), then the same colours with the next
    marker and line style, so the 11th series never looks like the 1st."""
    k = i // 10
    return {"color": "C%d" % (i % 10), "marker": MARKERS[k % len(MARKERS)],
            "linestyle": LINESTYLES[k % len(LINESTYLES)]}


def bar_style(i):
    """Bar series i's colour and hatch: past ten series the colours repeat
    with a hatch, so every series stays distinct."""
    return {"color": "C%d" % (i % 10), "hatch": HATCHES[(i // 10) % len(HATCHES)],
            "edgecolor": "white" if i >= 10 else None, "linewidth": 0}


def legend_rows(n, ncol):
    """Rows a legend of n entries in ncol columns takes."""
    return -(-n // max(1, ncol))


def grow_for_legend(fig, rows, base_rows=2):
    """Make the figure taller (never wider) by a legend row's height for
    each row past ``base_rows``, so a long legend below or above the
    panels does not squeeze them or leave the figure."""
    extra = max(0, rows - base_rows) * 0.19
    if extra:
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + extra)


def mark_bar(ax, x, text, color="0.3"):
    """Write ``text`` ("n/a", "0") on the baseline at bar position x (turned
    upright when longer than a character, to fit a narrow bar's place)."""
    import matplotlib.transforms as mtrans
    tr = mtrans.blended_transform_factory(ax.transData, ax.transAxes)
    ax.text(x, 0.01, text, transform=tr, rotation=90 if len(text) > 1 else 0, ha="center",
            va="bottom",
            fontsize=NOTE, color=color)


def finish(fig):
    """Last touches every figure gets: tick labels at the house size (ticks
    matplotlib creates later while drawing take it too), and no label text
    under MIN_FONT."""
    for ax in fig.axes:
        ax.tick_params(labelsize=RC["xtick.labelsize"])
    for t in fig.findobj(lambda a: hasattr(a, "get_fontsize") and hasattr(a, "set_fontsize")):
        if t.get_fontsize() < MIN_FONT:
            t.set_fontsize(MIN_FONT)
    return fig


def _tick_texts(fig):
    """(every tick label of the figure, the ones drawn): matplotlib keeps
    labels for ticks outside the view, which it does not draw."""
    every, drawn = set(), []
    for ax in fig.findobj(lambda a: hasattr(a, "get_xaxis") and hasattr(a, "get_yaxis")):
        for axis in (ax.xaxis, ax.yaxis):
            for t in axis.majorTicks + axis.minorTicks:
                every |= {id(t.label1), id(t.label2)}
            for t in axis._update_ticks():
                drawn += [lab for lab in (t.label1, t.label2) if lab.get_visible()]
    return every, drawn


def text_problems(fig):
    """What breaks the house style once ``fig`` is drawn: each drawn text
    smaller than MIN_FONT or whose extent leaves the figure, and the
    figure's tight bounding box when it exceeds the figure. [] when none."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    W, H = fig.bbox.width, fig.bbox.height
    every, drawn = _tick_texts(fig)
    texts = [t for t in fig.findobj(lambda a: a.__class__.__name__ in ("Text", "Annotation"))
             if id(t) not in every] + drawn
    out = []
    for t in texts:
        if not t.get_visible() or not t.get_text().strip():
            continue
        if t.get_fontsize() < MIN_FONT:
            out.append("%r: %.1f pt" % (t.get_text(), t.get_fontsize()))
        e = t.get_window_extent(r)
        if e.x0 < -1 or e.y0 < -1 or e.x1 > W + 1 or e.y1 > H + 1:
            out.append("%r outside the figure: %s" % (t.get_text(), e))
    tb = fig.get_tightbbox(r)
    w, h = fig.get_size_inches()
    if tb.x0 < -0.01 or tb.y0 < -0.01 or tb.x1 > w + 0.01 or tb.y1 > h + 0.01:
        out.append("tight bbox %s exceeds %gx%g in" % (tb, w, h))
    return out
