"""Plots of Results and Comparisons; each function returns a matplotlib Figure.

    import alloclab as al
    al.plot.latency(res, "alloc_ns")          # vs producers, a line per policy (seed 000)
    al.plot.heatmap(al.compare(a, b))          # A/B changes, coloured by log2 of the ratio
    al.plot.latency_hist(res, "alloc")        # per-op histogram and CCDF (histogram=True)
    al.plot.counters(res)                      # counters per operation, as bars

matplotlib is imported when a function is called, so ``import alloclab``
stays fast; in a headless process select a backend first
(``matplotlib.use("Agg")``), as the CLI does.

Every figure follows plot_style: 7 x 4.3 in at 200 dpi, no text under
8 pt, legends outside the data, plain numbers on log axes, "n/a" where a
value was not measured. Figures are drawn from a Result's per-run values
(means, sd or CI computed by alloclab.stats) or a Comparison's cells, never
from a printed table. Result.plot calls this module, so it does not import
alloclab.result back: metric labels come from alloclab.metrics, and
latency_hist knows a Result by its interface.
"""

import math
import os
import tempfile

import numpy as np

from .. import errors, files
from . import plot_style as S
from ..results import simulated as _simulated
from ..results.metrics import METRIC_INFO
from ..results.stats import describe
from ..results.hist import OPS as _HIST_OPS, Histogram

_HUE_LABELS = {"producers": "producers", "allocs_per_cycle": "allocs/cycle"}
# Simulated points (predictions): hollow diamonds on a dotted line, whatever
# the series' colour; the legend names the style once, "simulated (predicted)".
SIM_STYLE = {"marker": "D", "linestyle": ":", "markerfacecolor": "none"}


def _plt():
    return S.plt()


def _uniq(vals):
    out = []
    for v in vals:
        if v not in out:
            out.append(v)
    return out


def _metric_label(metric):
    desc, unit, _ = METRIC_INFO.get(metric, (metric, "", None))
    if metric.endswith("_per_op"):
        desc, unit = metric[:-len("_per_op")], "per op"
    return "%s (%s)" % (desc, unit) if unit else desc


def _sortable(vals):
    try:
        return sorted(vals)
    except TypeError:
        return vals


def latency(res, metric="alloc_ns", x="producers", hue="policy", panel=None, error="ci",
            logy=False, title=None, figsize=None):
    """``metric`` against parameter ``x``, one line per value of ``hue``, one
    panel per value of ``panel`` (default: the one other swept parameter,
    e.g. allocs/cycle, as seed 000's tables are split), the panels on one
    shared y axis. Points are means over runs; error bars are the 95% CI of
    the mean ("ci", the default), one sd ("sd") or none (None), and the
    title says which; a point of a single run has no bar. A lower arm that
    would pass zero (linear y) or the axis floor (``logy``) is cut there
    and marked with a caret. The lines' points at one x are dodged (spread
    side by side, centred on it), so none hides another. Virtual-CPU points
    (more producers than usable CPUs) are shaded when x is producers.
    Simulated points (predictions) are a series of their own per hue, in
    SIM_STYLE, with a legend entry "simulated (predicted)"."""
    res._check_metric(metric)
    keys = res.params()
    for k, what in ((x, "x"), (hue, "hue")):
        if k is not None and k not in keys:
            raise errors.UnknownNameError.make("parameter", k, keys, context=what)
    if error not in ("sd", "ci", None):
        raise errors.UnknownNameError.make("error bar", error, ["sd", "ci", "None"])
    pkeys, panels = _panels(res, keys, x, hue, panel)
    usable = None
    vmode = [p for p in res.points if p.info.get("cpu_mode") == "virtual"]
    if x == "producers" and vmode:
        usable = min(p.info.get("ncpu_usable", 0) for p in vmode)
    subs = [res if pv is None else res.filter(**{k: [v] for k, v in zip(pkeys, pv)})
            for pv in panels]
    hues = _uniq([p.params.get(hue) for p in res.points]) if hue else [None]
    series = [_latency_series(sub, metric, x, hue, error, hues) for sub in subs]
    with S.rc():
        fig, axes = S.subplots(1, len(panels), figsize=figsize, sharey=True)
        floor = _latency_floor(series) if logy and error else None
        for ax, sub, pv, ser in zip(axes[0], subs, panels, series):
            _latency_lines(ax, sub, metric, ser, error, logy, floor, _dodger(res, x, hues))
            measured = any(not _simulated.is_simulated(p) for p in sub.points)
            _latency_axes(ax, sub, pkeys, pv, x, usable if measured else None, logy)
        if floor is not None:  # once every panel is drawn: the top holds them all
            axes[0][0].set_ylim(bottom=floor)
            for ax in axes[0]:
                S.plain_log(ax, "y")
        axes[0][0].set_ylabel(_metric_label(metric))
        _sim_legend(axes[0][-1], series)
        if hue:
            S.legend_below(fig, axes[0][-1], ncol=4, title=_HUE_LABELS.get(hue, hue))
        wl = _uniq([p.params.get("workload") for p in res.points])
        S.suptitle(fig, title or "%s%s%s" % (", ".join(map(str, wl)), ": " if wl else "",
                                             _metric_label(metric)) +
                   ("; error bars: %s" % ("1 sd" if error == "sd" else "95% CI of the mean")
                    if error else "") + ("; shaded: virtual CPUs" if usable else ""))
    return S.finish(fig)


def _panels(res, keys, x, hue, panel):
    """(panel parameters, their value tuples, one per panel): ``panel``'s
    values, or by default every combination of the swept parameters other
    than x and hue ([None]: one panel)."""
    others = [k for k in res.swept() if k not in (x, hue, "workload")]
    if panel is None:
        panels = [None] if not others else _uniq(
            [tuple(p.params.get(k) for k in others) for p in res.points])
        return others, panels
    if panel not in keys:
        raise errors.UnknownNameError.make("parameter", panel, keys, context="panel")
    return [panel], _uniq([(p.params.get(panel),) for p in res.points])


def _latency_series(sub, metric, x, hue, error, hues):
    """[(hue index, label, xs, means, error arms, why unmeasured, simulated)],
    a series per value of ``hue`` (of the figure's ``hues``, so a hue keeps
    its colour and place in every panel) the panel has, and one more for
    its simulated points: the mean of ``metric`` over runs at each value of
    ``x``; an arm is NaN where it cannot be computed (a single run)."""
    out = []
    for i, hv in enumerate(hues):
        pts = sub.filter(**{hue: [hv]}) if hue else sub
        if hue and not pts.points:
            continue
        for sim in (False, True):
            part = type(pts)(pts.metadata, [p for p in pts.points
                                            if _simulated.is_simulated(p) == sim])
            if part.points:
                out.append(_one_series(sub, part, metric, x, error, i,
                                       str(hv) if hue else metric, sim))
    return out


def _one_series(sub, pts, metric, x, error, i, label, sim):
    """One series of _latency_series: ``pts`` (one hue, simulated or not)."""
    why = _uniq([w for w in (sub._unmeasured(p, metric) for p in pts.points) if w])
    xs = _sortable(_uniq([p.params.get(x) for p in pts.points]))
    ys, es = [], []
    for xv in xs:
        st = pts.stats(metric, **{x: [xv]})
        s = describe(np.concatenate([s.values for _, s in st]) if st else np.array([]))
        ys.append(s.mean)
        es.append(s.sd if error == "sd" else s.ci_half if error == "ci" else math.nan)
    return (i, label + (" (simulated)" if sim else ""), xs, ys, es, why, sim)


def _sim_legend(ax, series):
    """The legend (drawn from ``ax``) gets every panel's series, and the
    simulated style's own entry once, when any panel has simulated points:
    an empty line on ``ax`` for each entry it lacks."""
    if not any(s[6] for ser in series for s in ser):
        return
    have = set(ax.get_legend_handles_labels()[1])
    for ser in series:
        for i, label, *_, sim in ser:
            if label not in have:
                have.add(label)
                ax.plot([], [], label=label, **dict(S.line_style(i), **(SIM_STYLE if sim else {})))
    ax.plot([], [], color="0.35", label=_simulated.PLOT_LABEL, **SIM_STYLE)


def _latency_floor(series):
    """The shared log axis' floor over every panel's series (plot_style.log_floor)."""
    return S.log_floor([y for ser in series for s in ser for y in s[3]],
                       [e for ser in series for s in ser for e in s[4]])


def _dodger(res, x, hues):
    """f(series index, xs) -> the series' x positions, dodged among the
    figure's ``hues`` by the smallest step between x's values; xs as they
    are when x is not numeric or there is one series."""
    vals = _uniq([p.params.get(x) for p in res.points])
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
    if not numeric or len(hues) < 2:
        return lambda i, xs: xs
    step = S.x_step([float(v) for v in vals])
    return lambda i, xs: S.dodge(xs, i, len(hues), step)


def _latency_lines(ax, sub, metric, series, error, logy, floor, place):
    """A line per value of ``hue`` with its error bars, at the x positions
    ``place`` gives; a series whose stats level did not measure the counter
    is labelled "n/a" and has no points."""
    unmeasured = []
    means = [y for s in series for y in s[3] if np.isfinite(y)]
    # a mean latency, count or size is never negative: no arm below zero either
    bottom = 0.0 if means and min(means) >= 0 else None
    for i, label, xs, ys, es, why, sim in series:
        if why:
            label += " (n/a: %s)" % "; ".join(why)
            unmeasured += why
        style = dict(S.line_style(i), **(SIM_STYLE if sim else {}))
        S.errorbars(ax, place(i, xs), ys, es if error else None, log=logy, floor=floor,
                    lower_limit=bottom, capsize=3, label=label, **style)
    if unmeasured and all(p.data.get(metric) is None for p in sub.points):
        ax.text(0.5, 0.5, S.wrap("n/a: not measured (%s)" % "; ".join(_uniq(unmeasured)),
                                 ax.figure, S.NOTE, 0.4),
                ha="center", va="center", transform=ax.transAxes, fontsize=S.NOTE)


def _latency_axes(ax, sub, pkeys, pv, x, usable, logy):
    """A panel's title, x axis and ticks, the virtual-CPU shading, y scale
    and grid."""
    if pv is not None:
        ax.set_title(", ".join("%s=%s" % (_HUE_LABELS.get(k, k), v)
                               for k, v in zip(pkeys, pv)))
    ax.set_xlabel(_HUE_LABELS.get(x, x))
    if all(isinstance(v, (int, float)) for v in _uniq([p.params.get(x) for p in sub.points])):
        ax.set_xticks(_sortable(_uniq([p.params.get(x) for p in sub.points])))
    if usable and any(p.params.get(x, 0) > usable for p in sub.points):
        ax.axvspan(usable + 0.5, max(p.params.get(x) for p in sub.points) + 0.5,
                   color="0.92", zorder=0)
    if logy:
        ax.set_yscale("log")
        S.plain_log(ax, "y")
    else:
        S.plain_linear(ax, "y")
    ax.grid(True, alpha=0.3)


def _heat_note(pct, verdict, aid):
    v = {"not significant": "n.s.", "not tested": "untested"}.get(verdict, verdict)
    if v.startswith("significant, "):
        v = v[len("significant, "):].replace(" ", "")
    head = ("%s " % v if v.startswith("(") else "") + (
        "%+.1f%%" % pct if np.isfinite(pct) else "inf") + (
        " %s" % v if v and not v.startswith("(") else "")
    return head + ("\n" + aid if aid else "")


GEOMEAN_ALPHA = 0.5  # a coloured geometric mean is a summary: lighter than a tested cell
_RATIO_STEPS = (1.1, 1.25, 1.5) + tuple(2.0 ** k for k in range(1, 11))


def _geo_coloured(g, cells):
    """Whether a geometric-mean cell is coloured: by its own test where it
    has one (a ``significant`` attribute); otherwise only when every cell
    behind it is coloured (significant and over the threshold) and changed
    to the same side of 1x as the mean, so a summary of cells no test
    marked never reads as a significant result."""
    own = getattr(g, "significant", None)
    if own is not None:
        return bool(own)
    if not cells or not np.isfinite(g.change_pct):
        return False
    return all(m and np.isfinite(v) and (v > 0) == (g.change_pct > 0) and v != 0
               for v, m in cells)


def _heat_cells(cmp, geomean):
    """(row labels, columns, change % (rows x columns), coloured: a boolean
    mask of the cells drawn in colour, notes, rows of cells above the
    geometric means). A cell is coloured when marked (significant and over
    the threshold); a geometric mean as _geo_coloured says."""
    labels, cols, vals, marks = cmp.matrix()
    notes = [["" for _ in cols] for _ in labels]
    metric_of = []
    for i, (_, _, cells) in enumerate(cmp.grid()):
        metric_of.append(next(iter(cells.values())).metric)
        for j, col in enumerate(cols):
            c = cells.get(col)
            notes[i][j] = "n/a" if c is None else _heat_note(c.change_pct, c.verdict(),
                                                              c.aid())
    coloured = np.array([[bool(m) for m in row] for row in marks], dtype=bool).reshape(
        vals.shape)
    ncell = len(labels)
    for label, gs in (cmp.geo_rows() if geomean else []):
        row = np.full((1, len(cols)), np.nan)
        lit = np.zeros((1, len(cols)), dtype=bool)
        note = ["n/a" for _ in cols]
        for j, col in enumerate(cols):
            g = gs.get(col)
            if g is not None and np.isfinite(g.change_pct):
                row[0, j] = g.change_pct
                behind = [(vals[i, j], coloured[i, j]) for i in range(ncell)
                          if metric_of[i] == g.metric and np.isfinite(vals[i, j])]
                lit[0, j] = _geo_coloured(g, behind)
                note[j] = _heat_note(g.change_pct, "", g.aid())
        labels = labels + [label]
        vals = np.vstack([vals, row])
        coloured = np.vstack([coloured, lit])
        notes.append(note)
    return labels, cols, vals, coloured, notes, ncell


def _log2_ratio(vals):
    """log2 of the normalised ratio (1 + change, > 1 better) of changes in %."""
    r = 1.0 + np.asarray(vals, dtype=float) / 100.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(r > 0, np.log2(np.where(r > 0, r, 1.0)), -np.inf)


def heatmap(cmp, vmax=None, cmap=S.DIVERGING, title=None, figsize=None, annotate=True,
            geomean=True):
    """A Comparison as a heatmap: rows are its result classes, columns its
    columns. The colour is log2 of the normalised ratio (old/new when lower
    is better, so blue = better, red = worse, on a colour-blind-safe
    diverging map), symmetric about 1x up to ``vmax`` (a ratio, e.g. 2:
    colours saturate at 2x better or worse; default: the smallest of 1.1,
    1.25, 1.5, 2, 4, 8, ..., 1024 that holds every coloured cell). Only cells
    that are significant and over the threshold are coloured; the others
    are grey, "n/a" where a column has no value. Cells print their change
    with its mark (or n.s. = not significant, <2% = under the threshold)
    and the reading aid ("1.29x slower"); with ``geomean`` a
    geometric-mean row per metric under a line. A geometric mean is a
    summary no test judged: it is grey, as a cell that is not significant,
    unless every cell behind it is coloured and changed to the same side
    of 1x, and then coloured at half strength (GEOMEAN_ALPHA)."""
    if vmax is not None and not (isinstance(vmax, (int, float)) and vmax > 1):
        raise errors.InvalidArgument("heatmap vmax is a ratio above 1 (2: colours "
                                     "saturate at 2x better or worse), not %r"
                                     % (errors.Echo(vmax),))
    labels, cols, vals, coloured, notes, ncell = _heat_cells(cmp, geomean)
    lr = _log2_ratio(vals)
    shown = np.ma.masked_array(np.clip(np.nan_to_num(lr, nan=0.0), -60, 60),
                               mask=~coloured | np.isnan(vals))
    if vmax is None:
        big = float(np.max(np.abs(shown.compressed()))) if shown.count() else 0.0
        vmax = next((r for r in _RATIO_STEPS if math.log2(r) >= big), _RATIO_STEPS[-1])
    lim = math.log2(vmax)
    h = max(S.FIGSIZE[1], 0.34 * len(labels) + 1.4)
    with S.rc():
        fig, axes = S.subplots(figsize=figsize or (S.FIGSIZE[0], h))
        ax = axes[0][0]
        cm = S.plt().get_cmap(cmap).with_extremes(bad=S.NOT_SIGNIFICANT)
        # a grey cell is the same grey in every row; a coloured mean is lighter
        alpha = np.where((np.arange(len(labels))[:, None] < ncell) | np.ma.getmaskarray(shown),
                         1.0, GEOMEAN_ALPHA)
        im = ax.imshow(shown, cmap=cm, vmin=-lim, vmax=lim, aspect="auto",
                       alpha=np.broadcast_to(alpha, shown.shape))
        _heat_axes(ax, cmp, labels, cols, ncell)
        if annotate:
            _heat_text(ax, notes, shown, lim, ncell)
        _heat_colorbar(fig, ax, im, lim, cmp)
        kind_ = getattr(cmp, "kind", None)
        sim = " (%s, %s)" % (_simulated.PLOT_LABEL, cmp.predicted) \
            if kind_ == _simulated.PREDICTED else \
            " (rows marked predicted: %s, %s)" % (_simulated.PLOT_LABEL, cmp.predicted) \
            if getattr(cmp, "predicted", None) else ""
        ax.set_title(S.wrap(title or "%s vs %s%s" % (", ".join(cols), cmp.base_name, sim),
                            fig, 10, 0.6))
    return S.finish(fig)


def _heat_axes(ax, cmp, labels, cols, ncell):
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels)
    ax.set_xlabel(S.wrap("against %s; grey: not significant (p_adj >= %g) or |change| < %g%%"
                         % (cmp.base_name, cmp.alpha, 100 * cmp.threshold) +
                         ("; a geometric mean: unless every cell behind it is coloured, "
                          "on its side of 1x" if len(labels) > ncell else ""), ax.figure, 9,
                         0.6))
    if len(labels) > ncell:
        ax.axhline(ncell - 0.5, color="black", linewidth=1.5)


def _heat_text(ax, notes, shown, lim, ncell):
    """Each cell's note, white on a dark colour, bold when coloured, italic
    in the geometric-mean rows."""
    for i, row in enumerate(notes):
        for j, note in enumerate(row):
            if not note:
                continue
            dark = i < ncell and not shown.mask[i, j] and abs(float(shown[i, j])) > 0.6 * lim
            ax.text(j, i, note, ha="center", va="center", fontsize=S.NOTE,
                    color="white" if dark else "black",
                    fontweight="bold" if not shown.mask[i, j] and i < ncell else "normal",
                    fontstyle="italic" if i >= ncell else "normal")


def _heat_colorbar(fig, ax, im, lim, cmp):
    """The colour bar in ratios (0.5x, 1x, 2x), the better side labelled."""
    cb = fig.colorbar(im, ax=ax, fraction=0.06, pad=0.02)
    step = max(1, int(math.ceil(lim / 4.0))) if lim >= 1 else None
    ticks = (step * np.arange(-math.floor(lim / step), math.floor(lim / step) + 1) if step else
             np.log2([1.0 / 2 ** lim, 1.0 / 1.1, 1.0, 1.1, 2 ** lim]))
    ticks = [t for t in ticks if abs(t) <= lim + 1e-9]
    cb.set_ticks(ticks)
    cb.set_ticklabels([S.ratio_label(2.0 ** t) for t in ticks])
    cb.set_label("ratio to %s, > 1x = better (log scale)" % cmp.base_name)
    return cb


def _is_result(data):
    """True for an alloclab Result, told by the interface latency_hist uses
    (points, filter, histogram): Result.plot calls this module, so this
    module does not import alloclab.result back."""
    return all(hasattr(data, a) for a in ("points", "filter", "histogram"))


def _hist_series(data, op, by, where):
    """([(label, Histogram, simulated)], timer overhead in ns or None, what
    each curve pools) of a Result or a Histogram. A Result's curves are one
    per value of ``by``, measured and simulated points apart (a prediction
    is never merged with a measurement); "pools" names the parameters whose
    several values a curve merges ("producers 1, 4"), else ""."""
    if isinstance(data, Histogram):
        return [(op + (" (simulated)" if data.simulated else ""), data, data.simulated)], \
            None, ""
    if not _is_result(data):
        raise errors.InvalidArgument("latency_hist takes a Result or a Histogram, not %r"
                                     % (errors.Echo(data),))
    if op not in _HIST_OPS:
        raise errors.UnknownNameError.make("operation", op, list(_HIST_OPS))
    res = data.filter(**where) if where else data
    if not res.points:
        raise errors.InvalidArgument("latency_hist: %s: nothing to draw" % (
            "no point matches %r" % (where,) if where else "the Result has no points"))
    groups = {}
    for p in res.points:
        key = (p.params.get(by) if by else None, _simulated.is_simulated(p))
        groups.setdefault(key, []).append(p)
    series = []
    for (v, sim), pts in sorted(groups.items(), key=lambda kv: kv[0][1]):  # measured first
        hs = [h for p in pts for h in p.hist.get(op, ())]
        if not hs:
            raise errors.InvalidArgument(
                "no %s histogram in these points: run with histogram=True (--hist)" % op)
        label = str(v) if by else op
        series.append((label + (" (simulated)" if sim and "simulated" not in label else ""),
                       sum(hs[1:], hs[0].copy()), sim))
    ovh = [float(np.mean(p.data["timer_overhead_ns"])) for p in res.points
           if "timer_overhead_ns" in p.data and not _simulated.is_simulated(p)]
    return series, (float(np.mean(ovh)) if ovh else None), _pooled(groups.values(), by)


def _pooled(groups, by):
    """"producers 1, 4; size 64, 128": the parameters (other than ``by``
    and cpu) whose values differ among the points of one curve."""
    keys = []
    for pts in groups:
        for k in _uniq([k for p in pts for k in p.params]):
            if k not in (by, "cpu") and k not in keys and \
                    len(_uniq([p.params.get(k) for p in pts])) > 1:
                keys.append(k)
    return "; ".join("%s %s" % (_HUE_LABELS.get(k, k), ", ".join(map(str, _sortable(_uniq(
        [p.params.get(k) for pts in groups for p in pts]))))) for k in keys)


BINS_PER_OCTAVE = 4


def rebin(h):
    """(edges, fraction of operations per bin) of Histogram ``h`` on bins of
    a quarter octave (2^(k/4) ns): the engine's buckets are 16 to an octave,
    too narrow to read as bars. A bucket goes to the bin of its geometric
    centre."""
    lo, hi, c = h.buckets_ns()
    if not len(c):
        return np.array([]), np.array([])
    lo = np.maximum(lo, 0.5)
    k = np.floor(np.log2(np.sqrt(lo * hi)) * BINS_PER_OCTAVE).astype(int)
    k0 = int(k.min())
    frac = np.bincount(k - k0, weights=c.astype(float)) / float(h.count)
    edges = 2.0 ** ((np.arange(len(frac) + 1) + k0) / BINS_PER_OCTAVE)
    return edges, frac


def ccdf(h):
    """(x_ns, fraction of operations slower than x) of Histogram ``h``: a
    step at every non-empty bucket's upper edge, starting at 1 on the first
    bucket's lower edge; the final 0 is left out (a log axis cannot show
    it)."""
    lo, hi, c = h.buckets_ns()
    if not len(c):
        return np.array([]), np.array([])
    f = 1.0 - np.cumsum(c) / float(h.count)
    return np.concatenate([[lo[0]], hi[:-1]]), np.concatenate([[1.0], f[:-1]])


def latency_hist(data, op="alloc", by="policy", percentiles=(50, 90, 99, 99.9), title=None,
                 figsize=None, **where):
    """Per-op latency of ``op``: the histogram (fraction of operations per
    quarter-octave bin, log-scaled ns, outlined) beside its CCDF (fraction
    of operations slower than x, log y, so p99 and p99.9 read off the
    right-hand scale), one line per value of ``by`` for a Result (points
    filtered by ``where``), or one for a Histogram. The percentiles of a
    single line are marked with their values; the timer overhead (one
    clock pair, included in every measured value) is a dotted line.
    Simulated points (predictions) are lines of their own, never merged
    with measured ones: labelled "(simulated)", drawn dotted, with a legend
    entry "simulated (predicted)" and the calibration in the title. A line
    that merges points of several values of another parameter
    (producers 1 and 4) says so in the legend's title."""
    series, overhead, pooled = _hist_series(data, op, by, where)
    with S.rc():
        fig, axes = S.subplots(1, 2, figsize=figsize)
        ax1, ax2 = axes[0]
        for i, (label, h, sim) in enumerate(series):
            edges, frac = rebin(h)
            if not len(frac):
                continue
            style = S.line_style(i)
            ax1.stairs(frac, edges, label=label, linewidth=1.5, color=style["color"],
                       fill=len(series) == 1, alpha=0.8 if len(series) == 1 else 1.0,
                       linestyle=":" if sim else "-")
            x, f = ccdf(h)
            ax2.step(x, f, where="post", label=label, linewidth=1.5, color=style["color"],
                     linestyle=SIM_STYLE["linestyle"] if sim else style["linestyle"])
        _hist_axes(ax1, ax2, op, overhead, [(lab, h) for lab, h, _ in series], percentiles)
        sim = any(s for _, _, s in series)
        if sim:
            ax2.plot([], [], color="0.35", linestyle=SIM_STYLE["linestyle"],
                     label=_simulated.PLOT_LABEL)
        if len(series) > 1 or sim or pooled:
            S.legend_below(fig, ax2, ncol=4, title=S.wrap(
                "; ".join(t for t in ((by if _is_result(data) else ""), pooled and
                                      "each line pools " + pooled) if t), fig, 8, 0.9))
        S.suptitle(fig, title or "per-operation %s latency%s%s" % (
            op, " (%s: one clock pair, %.0f ns, included)" % (
                "grey vertical dotted line" if sim else "dotted", overhead) if overhead else "",
            "; " + _hist_heading(data) if sim else ""))
    return S.finish(fig)


def _hist_heading(data):
    """What the title says of simulated lines: "simulated: predicted
    (calibration <id>)", or without the id for a Histogram."""
    if isinstance(data, Histogram):
        return _simulated.LABEL
    return _simulated.heading(data.points) or _simulated.LABEL


def _hist_axes(ax1, ax2, op, overhead, series, percentiles):
    """Both panels' scales and labels; the CCDF's percentile scale on its
    right; a single series' percentiles marked on its curve."""
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("%s latency (ns, log scale)" % op)
        ax.grid(True, alpha=0.3)
        if overhead:
            ax.axvline(overhead, color="0.4", linestyle=":", linewidth=1)
        S.plain_log(ax, "x")
    ax1.set_ylabel("fraction of operations per bin")
    ax1.set_ylim(bottom=0)
    ax2.set_ylabel("fraction slower than x (CCDF)")
    ax2.set_yscale("log")
    n = max([h.count for _, h in series] + [1])
    ax2.set_ylim(min(0.5, 0.5 / n), 1.3)
    S.plain_log(ax2, "y")
    qs = [q for q in percentiles if 1.0 - q / 100.0 >= 0.5 / n]
    sec = ax2.secondary_yaxis("right")
    sec.set_yticks([1.0 - q / 100.0 for q in qs], labels=["p%g" % q for q in qs])
    sec.tick_params(labelsize=S.RC["ytick.labelsize"])
    for q in qs:
        ax2.axhline(1.0 - q / 100.0, color="0.6", linewidth=0.6, linestyle="--")
    if len(series) == 1:
        _mark_percentiles(ax2, series[0][1], qs)


def _mark_percentiles(ax, h, qs):
    """Each percentile of ``h`` as a dot on its CCDF with its value beside,
    written to the left of a dot in the right half so it stays inside."""
    lo, hi = (math.log(v) for v in ax.get_xlim())
    for q in qs:
        v = h.percentile(q)
        if not np.isfinite(v) or v <= 0:
            continue
        right = (math.log(v) - lo) / (hi - lo) > 0.55
        ax.plot([v], [1.0 - q / 100.0], "o", color="C3", markersize=4)
        ax.annotate("p%g %s" % (q, _ns_text(v)), (v, 1.0 - q / 100.0),
                    xytext=(-4 if right else 4, 3), textcoords="offset points",
                    ha="right" if right else "left", fontsize=S.NOTE, color="C3")


def _ns_text(v):
    for div, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if v >= div:
            return "%.3g %s" % (v / div, unit)
    return "%.3g ns" % v


def _counter_names(res, limit):
    """The event counters (not times or bytes) that are not zero anywhere,
    at most ``limit`` of the largest, in layer order."""
    cand = [m for m in res.metrics() if m.endswith("_per_op") and "." in m and
            "bytes" not in m and not m.endswith("_ns_per_op")]
    means = {}
    for m in cand:
        v = [float(np.nanmean(p.data[m])) for p in res.points if m in p.data and
             len(p.data[m]) and not np.all(np.isnan(p.data[m]))]
        if v and max(abs(x) for x in v) > 0:
            means[m] = max(abs(x) for x in v)
    top = set(sorted(means, key=lambda k: -means[k])[:limit])
    return [m[:-len("_per_op")] for m in cand if m in top]


def _counter_groups(res):
    """{legend label: [points]}: the points grouped by their swept
    parameters, simulated points apart from measured ones and labelled
    "(simulated)"."""
    swept = [k for k in res.swept() if k != "workload"]
    groups = {}
    for p in res.points:
        lab = ", ".join("%s" % p.params.get(k) if k == "policy" else "%s=%s" % (
            _HUE_LABELS.get(k, k), p.params.get(k)) for k in swept) or "all"
        if _simulated.is_simulated(p) and "simulated" not in lab:
            lab += " (simulated)"
        groups.setdefault(lab, []).append(p)
    return groups


def _counter_mean(pts, key):
    """The mean of ``key`` over the points' runs; NaN when none measured it."""
    v = [np.asarray(p.data[key], dtype=float) for p in pts
         if key in p.data and p.data[key] is not None]
    v = np.concatenate(v) if v else np.array([np.nan])
    return float(np.nanmean(v)) if not np.all(np.isnan(v)) else math.nan


def counters(res, names=None, per_op=True, limit=12, logy=False, title=None, figsize=None,
             **where):
    """Counters per operation as grouped bars: a group per counter
    ("<layer>.<counter>"), a bar per point (labelled by its swept
    parameters), means over runs. A counter the point did not measure (its
    policy has no such layer, or its stats level did not count it) is
    marked "n/a" in its bar's place; a measured zero is marked "0". names:
    counters to show (default: the event counts, not times or bytes, that
    are not zero anywhere, at most ``limit``, in layer order);
    per_op=False shows the raw counts of the measured phase. Simulated
    points' bars are labelled "(simulated)" and the title says their
    counts are of the simulated schedule (simulated: predicted)."""
    res = res.filter(**where) if where else res
    if not res.points:
        raise errors.InvalidArgument("no points to plot")
    suffix = "_per_op" if per_op else ""
    names = _counter_names(res, limit) if names is None else list(names)
    keys = [n + suffix for n in names]
    for k in keys:
        res._check_metric(k)
    groups = _counter_groups(res)
    with S.rc():
        fig, axes = S.subplots(figsize=figsize)
        ax = axes[0][0]
        width = 0.8 / max(1, len(groups))
        xs = np.arange(len(keys))
        for i, (lab, pts) in enumerate(groups.items()):
            pos = xs + (i - (len(groups) - 1) / 2.0) * width
            ys = np.array([_counter_mean(pts, k) for k in keys])
            ok = np.isfinite(ys) & ((ys > 0) | (not logy))
            # a series with no measured bar still gets its legend entry's look
            ax.bar(pos[ok] if ok.any() else pos[:1], ys[ok] if ok.any() else [np.nan], width,
                   label=lab, **S.bar_style(i))
            for x, y in zip(pos, ys):
                if not np.isfinite(y) or y == 0:
                    S.mark_bar(ax, x, "n/a" if not np.isfinite(y) else "0")
        _counter_axes(ax, names, per_op, logy, len(groups))
        wl = _uniq([p.params.get("workload") for p in res.points])
        sim = _simulated.heading(res.points)
        if sim and not all(_simulated.is_simulated(p) for p in res.points):
            sim = "simulated bars: " + sim
        S.suptitle(fig, title or "%s: counters %s (n/a: not measured)%s" % (
            ", ".join(map(str, wl)), "per operation" if per_op else "in the measured phase",
            "; %s, counts of the simulated schedule" % sim if sim else ""))
    return S.finish(fig)


def _counter_axes(ax, names, per_op, logy, ngroups):
    ax.set_xticks(np.arange(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", rotation_mode="anchor")
    ax.set_ylabel("per operation (alloc + free)" if per_op else "count in the measured phase")
    if logy:
        ax.set_yscale("log")
        S.plain_log(ax, "y")
    else:
        ax.set_ylim(bottom=0)
        S.plain_linear(ax, "y")
    if ngroups <= 8:
        S.legend_above(ax, ncol=min(4, ngroups))
    else:  # many series: one legend below the axes, the figure taller for its rows
        S.legend_below(ax.figure, ax, ncol=4)
    ax.grid(True, axis="y", alpha=0.3)


def _stem(path):
    """(base, ext) of a figure path, as os.path.splitext reads its last part
    (".fig" and "fig." have none): no extension is PNG."""
    head, name = os.path.split(path)
    root, ext = os.path.splitext(name)
    if len(ext) < 2:
        return path, "png"
    return os.path.join(head, root), ext[1:]


def _path_text(path, what="plot file"):
    """``path`` (a str or os.PathLike) as a str, or ParameterTypeError."""
    if not isinstance(path, (str, os.PathLike)):
        raise errors.ParameterTypeError("%s must be a path, not %s" % (
            what, type(path).__name__), value=path)
    path = os.fspath(path)
    if not isinstance(path, str):
        raise errors.ParameterTypeError("%s must be a path as text, not %s" % (
            what, type(path).__name__), value=path)
    return path


def figure_formats():
    """The file extensions matplotlib writes figures in (png, pdf, svg, ...);
    pyplot is not imported for it (a command checks its --plot first)."""
    from matplotlib.backend_bases import FigureCanvasBase
    return sorted(FigureCanvasBase.get_supported_filetypes())


def refuse_files_beside_a_stream(path, dests, what="plot file"):
    """InvalidArgument when ``path`` is no regular file (a device, a pipe:
    written in place) but the figures need several files ``dests``: the
    others would be made beside it (/dev/null-1.png)."""
    if len(dests) > 1 and files.check_output(path, what) == files.IN_PLACE:
        raise errors.InvalidArgument(
            "%s %s: it is not a regular file, and the figures need %d files (the others "
            "beside it: %s); give a file name, or a .pdf for one file" % (
                what, errors.Echo(path), len(dests), ", ".join(dests[1:])), value=path)


def _figure_format(path, what="plot file"):
    """The format ``path``'s extension names (lower case; PNG without
    one), or InvalidArgument naming the formats matplotlib can write."""
    ext = _stem(path)[1].lower()
    formats = figure_formats()
    if ext not in formats:
        raise errors.InvalidArgument(
            "%s %s: unknown figure format %s (its extension); supported formats: %s" % (
                what, errors.Echo(path), errors.shown(ext), ", ".join(formats)),
            value=path, valid=formats)
    return ext


def figure_paths(path, suffixes):
    """Where save writes figures whose file suffixes are ``suffixes`` (the
    first ""): a PDF holds them all at ``path``; otherwise the first goes to
    ``path`` as given and each other to base-suffix.ext (PNG where ``path``
    has no extension). ``path`` is a str or os.PathLike; the paths are
    str."""
    path = _path_text(path)
    if _stem(path)[1].lower() == "pdf":
        return [path]
    base, ext = _stem(path)
    return [path if not s else "%s-%s.%s" % (base, s, ext) for s in suffixes]


def _render(figs, ext):
    """The bytes of each figure drawn in format ``ext``, or one PDF holding
    them all (a page each), drawn through a temporary folder."""
    from matplotlib.backends.backend_pdf import PdfPages
    def drawn(tmp):
        with open(tmp, "rb") as src:
            return src.read()
    with tempfile.TemporaryDirectory(prefix="alloclab-plot-") as d:
        tmp = os.path.join(d, "figure." + ext)
        if ext == "pdf":
            with PdfPages(tmp) as pdf:
                for f in figs:
                    pdf.savefig(f)
            return [drawn(tmp)]
        out = []
        for f in figs:
            f.savefig(tmp, format=ext)
            out.append(drawn(tmp))
        return out


def save(figs, path, what="plot file"):
    """Write figures to ``path`` (a str or os.PathLike: a PDF holds them
    all; other formats get path, path-1.ext, path-2.ext, ..., or
    path-SUFFIX.ext for (figure, suffix) pairs, as figure_paths names them)
    and close them; returns the paths written. Nothing is written until
    every path has passed alloclab.files.check_output and every figure is
    drawn, in the format its extension names (PNG without one: no ".png" is
    added to the name given), so a refused path or a failed drawing leaves
    every file as it was; a format matplotlib cannot write is refused first
    (InvalidArgument naming those it can). Each is written as
    alloclab.files writes an output: a regular file replaced whole, so a
    failed write leaves the old one, a device or a pipe with a reader
    written in place, anything else refused."""
    plt = _plt()
    pairs = [f if isinstance(f, tuple) else (f, "" if i == 0 else str(i))
             for i, f in enumerate(figs)]
    path = _path_text(path, what)
    ext = _figure_format(path, what)
    dests = figure_paths(path, [s for _, s in pairs])
    if not pairs:
        return []
    if len(set(dests)) < len(dests):
        raise errors.InvalidArgument("%s %s: two figures would be written to one file (%s); "
                                     "give each figure its own suffix" % (
                                         what, errors.Echo(path), ", ".join(dests)), value=path)
    refuse_files_beside_a_stream(path, dests, what)
    for dest in dests[1:]:
        files.check_output(dest, what)
    try:
        data = _render([f for f, _ in pairs], ext)
        for dest, body in zip(dests, data):
            files.write_parts(dest, [body], what)
    finally:
        for f, _ in pairs:
            plt.close(f)
    return dests
