"""Plots of Results and Comparisons; each function returns a matplotlib Figure.

    import alloclab as al
    al.plot.latency(res, "alloc_ns")          # vs producers, a line per policy (seed 000)
    al.plot.heatmap(al.compare(a, b))          # A/B changes, coloured by change
    al.plot.latency_hist(res, "alloc")        # per-op histogram and CDF (histogram=True)
    al.plot.counters(res)                      # counters per operation, as bars

matplotlib is imported when a function is called, so ``import alloclab``
stays fast; in a headless process select a backend first
(``matplotlib.use("Agg")``), as the CLI does.

Figures are drawn from a Result's per-run values (means, sd or CI computed
by alloclab.stats) or a Comparison's cells, never from a printed table. Result.plot calls
this module, so it does not import alloclab.result back: metric labels come
from alloclab.metrics, and latency_hist knows a Result by its interface.
"""

import math

import numpy as np

from . import errors
from .metrics import METRIC_INFO
from .stats import describe

_HUE_LABELS = {"producers": "producers", "allocs_per_cycle": "allocs/cycle"}


def _plt():
    import matplotlib.pyplot as plt
    return plt


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


def latency(res, metric="alloc_ns", x="producers", hue="policy", panel=None, error="sd",
            logy=False, title=None, figsize=None):
    """``metric`` against parameter ``x``, one line per value of ``hue``, one
    panel per value of ``panel`` (default: the one other swept parameter,
    e.g. allocs/cycle, as seed 000's tables are split). Points are means over
    runs; error bars are one sd ("sd"), the 95% CI of the mean ("ci") or
    none (None). Virtual-CPU points (more producers than usable CPUs) are
    shaded when x is producers."""
    plt = _plt()
    res._check_metric(metric)
    keys = res.params()
    for k, what in ((x, "x"), (hue, "hue")):
        if k is not None and k not in keys:
            raise errors.UnknownNameError.make("parameter", k, keys, context=what)
    if error not in ("sd", "ci", None):
        raise errors.UnknownNameError.make("error bar", error, ["sd", "ci", "None"])
    pkeys, panels = _panels(res, keys, x, hue, panel)
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=figsize or (max(4.0, 3.4 * n), 3.4), squeeze=False)
    usable = None
    vmode = [p for p in res.points if p.info.get("cpu_mode") == "virtual"]
    if x == "producers" and vmode:
        usable = min(p.info.get("ncpu_usable", 0) for p in vmode)
    for ax, pv in zip(axes[0], panels):
        sub = res if pv is None else res.filter(**{k: [v] for k, v in zip(pkeys, pv)})
        _latency_lines(ax, sub, metric, x, hue, error)
        _latency_axes(ax, sub, pkeys, pv, x, usable, logy)
    axes[0][0].set_ylabel(_metric_label(metric))
    if hue:
        axes[0][-1].legend(fontsize="small", title=_HUE_LABELS.get(hue, hue))
    wl = _uniq([p.params.get("workload") for p in res.points])
    fig.suptitle(title or "%s%s%s" % (", ".join(map(str, wl)), ": " if wl else "",
                                       _metric_label(metric)) +
                 ("; error bars: %s" % ("1 sd" if error == "sd" else "95% CI") if error else "") +
                 ("; shaded: virtual CPUs" if usable else ""), fontsize="medium")
    fig.tight_layout()
    return fig


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


def _latency_lines(ax, sub, metric, x, hue, error):
    """A line per value of ``hue``: the mean of ``metric`` over runs at each
    value of ``x``, with its error bars."""
    hues = _uniq([p.params.get(hue) for p in sub.points]) if hue else [None]
    unmeasured = []
    for hv in hues:
        pts = sub.filter(**{hue: [hv]}) if hue else sub
        why = _uniq([w for w in (sub._unmeasured(p, metric) for p in pts.points) if w])
        xs = _sortable(_uniq([p.params.get(x) for p in pts.points]))
        ys, es = [], []
        for xv in xs:
            st = pts.stats(metric, **{x: [xv]})
            vals = np.concatenate([s.values for _, s in st]) if st else np.array([])
            s = describe(vals)
            ys.append(s.mean)
            e = s.sd if error == "sd" else s.ci_half if error == "ci" else math.nan
            es.append(0.0 if math.isnan(e) else e)
        label = str(hv) if hue else metric
        if why:  # points whose stats level did not measure the counter: no value, "n/a"
            label += " (n/a: %s)" % "; ".join(why)
            unmeasured += why
        ax.errorbar(xs, ys, yerr=es if error else None, marker="o", capsize=3, label=label)
    if unmeasured and all(p.data.get(metric) is None for p in sub.points):
        ax.text(0.5, 0.5, "n/a: not measured (%s)" % "; ".join(_uniq(unmeasured)),
                ha="center", va="center", transform=ax.transAxes, fontsize="small")


def _latency_axes(ax, sub, pkeys, pv, x, usable, logy):
    """A panel's title, x axis and ticks, the virtual-CPU shading, y scale
    and grid."""
    if pv is not None:
        ax.set_title(", ".join("%s=%s" % (_HUE_LABELS.get(k, k), v)
                               for k, v in zip(pkeys, pv)), fontsize="medium")
    ax.set_xlabel(_HUE_LABELS.get(x, x))
    if all(isinstance(v, (int, float)) for v in _uniq([p.params.get(x) for p in sub.points])):
        ax.set_xticks(_sortable(_uniq([p.params.get(x) for p in sub.points])))
    if usable and any(p.params.get(x, 0) > usable for p in sub.points):
        ax.axvspan(usable + 0.5, max(p.params.get(x) for p in sub.points) + 0.5,
                   color="0.92", zorder=0)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)


def _heat_note(pct, verdict, aid):
    v = {"not significant": "n.s.", "not tested": "untested"}.get(verdict, verdict)
    if v.startswith("significant, "):
        v = v[len("significant, "):].replace(" ", "")
    head = ("%s " % v if v.startswith("(") else "") + (
        "%+.1f%%" % pct if np.isfinite(pct) else "inf") + (
        " %s" % v if v and not v.startswith("(") else "")
    return head + ("\n" + aid if aid else "")


def heatmap(cmp, vmax=None, cmap="RdYlGn", title=None, figsize=None, annotate=True,
            geomean=True):
    """A Comparison as a heatmap: rows are its result classes, columns its
    columns, colour the change in percent (green better, red worse) on a
    range symmetric about 0: ``vmax`` (default: the largest |change|,
    between 5% and 100%; larger changes saturate); cells print their
    change with its mark (or n.s. = not significant, <2% = significant but
    under the threshold) and the reading aid ("1.29x slower"); with
    ``geomean`` a geometric-mean row per metric under a line."""
    plt = _plt()
    labels, cols, vals, marks = cmp.matrix()
    notes = [["" for _ in cols] for _ in labels]
    for i, (_, _, cells) in enumerate(cmp.grid()):
        for j, col in enumerate(cols):
            c = cells.get(col)
            if c is not None:
                notes[i][j] = _heat_note(c.change_pct, c.verdict(), c.aid())
    ncell = len(labels)
    if geomean:
        for label, gs in cmp.geo_rows():
            labels = labels + [label]
            row = np.full((1, len(cols)), np.nan)
            note = ["" for _ in cols]
            for j, col in enumerate(cols):
                g = gs.get(col)
                if g is not None:
                    row[0, j] = g.change_pct
                    note[j] = _heat_note(g.change_pct, "", g.aid())
            vals = np.vstack([vals, row])
            marks = marks + [["" for _ in cols]]
            notes.append(note)
    finite = np.abs(vals[np.isfinite(vals)])
    if vmax is None:
        vmax = min(100.0, max(5.0, float(finite.max()) if finite.size else 5.0))
    h = max(2.5, 0.45 * len(labels) + 1.6)
    w = max(5.0, 1.9 * len(cols) + 0.07 * max(len(s) for s in labels) + 3)
    fig, ax = plt.subplots(figsize=figsize or (w, h))
    shown = np.where(np.isfinite(vals), vals, np.nan)
    im = ax.imshow(shown, cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto")
    ax.set_xticks(range(len(cols)))
    ax.set_xticklabels(cols)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize="small")
    ax.set_xlabel("against %s" % cmp.base_name)
    if len(labels) > ncell:
        ax.axhline(ncell - 0.5, color="black", linewidth=1.5)
    if annotate:
        for i in range(len(labels)):
            for j in range(len(cols)):
                if not notes[i][j]:
                    continue
                ax.text(j, i, notes[i][j], ha="center", va="center", fontsize="x-small",
                        fontweight="bold" if marks[i][j] else "normal",
                        fontstyle="italic" if i >= ncell else "normal")
    cb = fig.colorbar(im, ax=ax)
    cb.set_label("change %% (positive = better; marked: p_adj < %g, |change| >= %g%%)" % (
        cmp.alpha, 100 * cmp.threshold), fontsize="small")
    ax.set_title(title or "%s vs %s" % (", ".join(cols), cmp.base_name), fontsize="medium")
    fig.tight_layout()
    return fig


def _is_result(data):
    """True for an alloclab Result, told by the interface latency_hist uses
    (points, filter, histogram): Result.plot calls this module, so this
    module does not import alloclab.result back."""
    return all(hasattr(data, a) for a in ("points", "filter", "histogram"))


def latency_hist(data, op="alloc", by="policy", percentiles=(50, 90, 99, 99.9), title=None,
                 figsize=None, **where):
    """Per-op latency of ``op``: the histogram (fraction of operations per
    bucket, log-scaled ns) beside its CDF, one line per value of ``by`` for a
    Result (points filtered by ``where``), or one for a Histogram.
    Percentiles are marked on the CDF of a single line; the timer overhead
    (one clock pair, included in every value) as a dotted line."""
    from .hist import Histogram
    plt = _plt()
    series = []
    overhead = None
    if isinstance(data, Histogram):
        series.append((op, data))
    elif _is_result(data):
        res = data.filter(**where) if where else data
        vals = _uniq([p.params.get(by) for p in res.points]) if by else [None]
        for v in vals:
            sub = res.filter(**{by: [v]}) if by else res
            series.append((str(v) if by else op, sub.histogram(op)))
        ovh = [float(np.mean(p.data["timer_overhead_ns"])) for p in res.points
               if "timer_overhead_ns" in p.data]
        overhead = float(np.mean(ovh)) if ovh else None
    else:
        raise errors.InvalidArgument("latency_hist takes a Result or a Histogram, not %r"
                                     % (data,))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=figsize or (10, 3.6))
    for label, h in series:
        lo, hi, c = h.buckets_ns()
        if not len(c):
            continue
        ax1.bar(lo, c / float(h.count), width=hi - lo, align="edge", alpha=0.6, label=label)
        x, f = h.cdf()
        ax2.step(x, f, where="post", label=label)
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("%s latency (ns, log scale)" % op)
        ax.grid(True, alpha=0.3)
        if overhead:
            ax.axvline(overhead, color="0.5", linestyle=":", linewidth=1)
    ax1.set_ylabel("fraction of operations")
    ax2.set_ylabel("fraction <= latency")
    ax2.set_ylim(0, 1.01)
    if len(series) == 1:
        h = series[0][1]
        for q in percentiles:
            v = h.percentile(q)
            if np.isfinite(v):
                ax2.axvline(v, color="C3", linewidth=0.8, alpha=0.6)
                ax2.annotate("p%g" % q, (v, 0.02 + 0.9 * min(q, 99.9) / 100), fontsize="x-small",
                             rotation=90, color="C3")
    if len(series) > 1:
        ax2.legend(fontsize="small", title=by)
    fig.suptitle(title or "per-operation %s latency%s" % (
        op, " (dotted: one clock pair, %.0f ns, included)" % overhead if overhead else ""),
        fontsize="medium")
    fig.tight_layout()
    return fig


def counters(res, names=None, per_op=True, limit=12, logy=False, title=None, figsize=None,
             **where):
    """Counters per operation as grouped bars: a group per counter
    ("<layer>.<counter>"), a bar per point (labelled by its swept
    parameters), means over runs. names: counters to show (default: the
    event counts, not times or bytes, that are not zero anywhere, at most
    ``limit``, in layer order); per_op=False shows the raw counts of the
    measured phase."""
    plt = _plt()
    res = res.filter(**where) if where else res
    if not res.points:
        raise errors.InvalidArgument("no points to plot")
    suffix = "_per_op" if per_op else ""
    if names is None:
        cand = [m for m in res.metrics() if m.endswith("_per_op") and "." in m and
                "bytes" not in m and not m.endswith("_ns_per_op")]
        means = {}
        for m in cand:
            v = [float(np.nanmean(p.data[m])) for p in res.points if m in p.data and
                 len(p.data[m]) and not np.all(np.isnan(p.data[m]))]
            if v and max(abs(x) for x in v) > 0:
                means[m] = max(abs(x) for x in v)
        top = set(sorted(means, key=lambda k: -means[k])[:limit])
        names = [m[:-len("_per_op")] for m in cand if m in top]
    keys = [n + suffix for n in names]
    for k in keys:
        res._check_metric(k)
    swept = [k for k in res.swept() if k != "workload"]
    labels = [", ".join("%s" % p.params.get(k) if k == "policy" else "%s=%s" % (
        _HUE_LABELS.get(k, k), p.params.get(k)) for k in swept) or "all" for p in res.points]
    groups = {}
    for lab, p in zip(labels, res.points):
        groups.setdefault(lab, []).append(p)
    fig, ax = plt.subplots(figsize=figsize or (
        min(16.0, max(6.0, 2 + 0.5 * len(keys) + 0.12 * len(keys) * len(groups))), 4.2))
    width = 0.8 / max(1, len(groups))
    xs = np.arange(len(keys))
    for i, (lab, pts) in enumerate(groups.items()):
        ys = []
        for k in keys:
            v = np.concatenate([np.asarray(p.data[k], dtype=float) for p in pts if k in p.data]
                               or [np.array([np.nan])])
            ys.append(float(np.nanmean(v)) if not np.all(np.isnan(v)) else 0.0)
        ax.bar(xs + (i - (len(groups) - 1) / 2.0) * width, ys, width, label=lab)
    ax.set_xticks(xs)
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize="small")
    ax.set_ylabel("per operation (alloc + free)" if per_op else "count in the measured phase")
    if logy:
        ax.set_yscale("log")
    ax.legend(fontsize="x-small")
    ax.grid(True, axis="y", alpha=0.3)
    wl = _uniq([p.params.get("workload") for p in res.points])
    ax.set_title(title or "%s: counters %s" % (", ".join(map(str, wl)),
                                               "per operation" if per_op else ""),
                 fontsize="medium")
    fig.tight_layout()
    return fig


def save(figs, path):
    """Write figures to ``path`` (a PDF holds them all; other formats get
    path, path-1.ext, path-2.ext, ...); returns the paths written."""
    plt = _plt()
    figs = list(figs)
    out = []
    if path.endswith(".pdf"):
        from matplotlib.backends.backend_pdf import PdfPages
        with PdfPages(path) as pdf:
            for f in figs:
                pdf.savefig(f)
        out.append(path)
    else:
        base, dot, ext = path.rpartition(".")
        if not dot:
            base, ext = path, "png"
        for i, f in enumerate(figs):
            p = path if i == 0 else "%s-%d.%s" % (base, i, ext)
            f.savefig(p)
            out.append(p)
    for f in figs:
        plt.close(f)
    return out

