"""The figures of the three reproductions (alloclab.reproduce), in the
house style of plot_style; each report's plot methods call these.

    libarena(report, "alloc_ns", "malloc-free")  # latency vs producers, a panel per allocs/cycle
    vmalloc_rows(report)                         # each kernel against v6.18, per seed row
    vmalloc_sizes(report)                        # fix_size_alloc_test: ns per loop vs nr_pages
    local_storage_speed(report)                  # creates/s vs batch size, the seed's dashed
    local_storage_kmallocs(report)               # kmallocs per create, model and seed

They read a report through its accessors (cells, changes, speeds, counts),
never its printed tables. Changes against a baseline are drawn as ratios
on a log2 axis (0.5x, 1x, 2x), as the heatmap of plot.py colours them: a
regression of -50% and a gain of +100% are the same distance from 1x.
matplotlib is imported when a figure is made.
"""

import math

import numpy as np

from . import plot_style as S
from ..results import stats


def _axes(ax, figsize):
    """(figure, axes): the given axes' or a new house-style figure's."""
    if ax is not None:
        return ax.figure, ax
    fig, axes = S.subplots(figsize=figsize)
    return fig, axes[0][0]


def libarena(report, metric="alloc_ns", workload="malloc-free", timing=None, metrics=None):
    """Latency against producers, one line per design, one panel per
    allocs/cycle, the panels on one shared log y axis; error bars are the
    95% CI of the mean, a lower arm reaching zero cut at the axis floor
    (caret); the designs' points at one producer count are dodged side by
    side. ``metrics``: (name, description) pairs for the title."""
    timing = timing or report.timings[0]
    apcs = report.allocs_per_cycle
    panels = []
    for a in apcs:
        series = []
        for d, _ in report.designs:
            st = [stats.describe(v if v is not None else []) for v in
                  (report.cell(workload, d, metric, timing, p, a) for p in report.producers)]
            series.append((d, [s.mean for s in st], [s.ci_half for s in st]))
        panels.append(series)
    # one floor for the shared axis, under every panel's bars
    floor = S.log_floor([y for ser in panels for s in ser for y in s[1]],
                        [e for ser in panels for s in ser for e in s[2]])
    step = S.x_step(report.producers)
    with S.rc():
        fig, axes = S.subplots(1, len(apcs), sharey=True)
        for ax, a, series in zip(axes[0], apcs, panels):
            for i, (d, ys, es) in enumerate(series):
                S.errorbars(ax, S.dodge(report.producers, i, len(series), step), ys, es,
                            log=True, floor=floor, marker="o", capsize=3, label=d)
            _libarena_axes(ax, report, a)
        if floor is not None:  # once every panel is drawn: the top holds them all
            axes[0][0].set_ylim(bottom=floor)
        for ax in axes[0]:
            S.plain_log(ax, "y")
        axes[0][0].set_ylabel("%s (ns/op, log scale)" % metric)
        S.fig_legend(fig, axes[0][-1], "outside lower center", ncol=min(4, len(series)))
        S.suptitle(fig, "libarena-%s, %s, %s timing (%s; bars: 95%% CI)" % (
            workload, dict(metrics or ()).get(metric, metric), timing,
            "predicted on simulated CPUs" if getattr(report, "simulated", False)
            else "shaded: virtual CPUs"))
    return S.finish(fig)


def _libarena_axes(ax, report, apc):
    # past three panels a one-line title is wider than its panel: two lines
    ax.set_title(("%d\nallocs/cycle" if len(report.allocs_per_cycle) > 3 else
                  "%d allocs/cycle") % apc)
    ax.set_yscale("log")
    ax.set_xlabel("producers")
    ax.set_xticks(report.producers)
    if report.usable < max(report.producers) and not getattr(report, "simulated", False):
        ax.axvspan(report.usable + 0.5, max(report.producers) + 0.5, color="0.92", zorder=0)
    ax.grid(True, alpha=0.3)


def scaling(data, metrics):
    """Latency against CPUs on log axes, a panel per metric of ``metrics``
    ((name, description) pairs): per design a colour, its simulated means a
    dashed line (predictions) and its measured means (pinned, at the CPUs
    the machine has) filled markers with 95% CI bars. ``data``: a Scaling
    (series(design, metric, kind), designs, settings)."""
    meas = {(d, m): data.series(d, m, "measured") for d, _ in data.designs for m, _ in metrics}
    pts = [(y, e) for ser in meas.values() for _, y, e in ser] + [
        (y, 0.0) for d, _ in data.designs for m, _ in metrics
        for _, y, _ in data.series(d, m, "simulated")]
    floor = S.log_floor([y for y, _ in pts], [e for _, e in pts])
    with S.rc():
        fig, axes = S.subplots(1, len(metrics), sharey=True)
        for ax, (m, desc) in zip(axes[0], metrics):
            for i, (d, _) in enumerate(data.designs):
                sim = data.series(d, m, "simulated")
                if sim:
                    xs, ys, _ = zip(*sim)
                    ax.plot(xs, ys, "--", marker="x", color="C%d" % i,
                            label="%s, simulated (predicted)" % d)
                if meas[d, m]:
                    xs, ys, es = zip(*meas[d, m])
                    S.errorbars(ax, xs, ys, es, log=True, floor=floor, linestyle="none",
                                marker="o", capsize=3, color="C%d" % i,
                                label="%s, measured (pinned)" % d)
            _scaling_axes(ax, data, desc)
        if floor is not None:
            axes[0][0].set_ylim(bottom=floor)
        for ax in axes[0]:  # once every panel is drawn: ticks for the shared view
            S.plain_log(ax, "y")
        axes[0][0].set_ylabel("ns/op (log scale)")
        S.fig_legend(fig, axes[0][-1], "outside lower center", ncol=3)
        cal = data.settings.get("calibration") or {}
        S.suptitle(fig, "libarena-%s, %d allocs/cycle: latency against CPUs (dashed: "
                   "predicted on simulated CPUs, calibration %s; points: measured, pinned; shaded: "
                   "beyond this machine's CPUs)" % (
                       data.settings["workload"], data.settings["allocs_per_cycle"],
                       cal.get("id")))
    return S.finish(fig)


def _scaling_axes(ax, data, desc):
    cpus = data.settings["cpus"]
    ax.set_title(desc)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(cpus)
    S.plain_log2(ax, "x")
    ax.set_xlabel("CPUs (producers; log scale)")
    usable = data.settings.get("usable_cpus", 0)
    if usable and usable < max(cpus):
        ax.axvspan(usable * 1.3, max(cpus) * 1.3, color="0.95", zorder=0)
    ax.grid(True, alpha=0.3)


def _ratio(pct):
    """A change in percent (old/new - 1, positive = faster) as old/new."""
    return 1.0 + pct / 100.0 if np.isfinite(pct) else math.nan


def vmalloc_rows(report, designs, short, ax=None):
    """Each kernel's speed against v6.18 per seed row, as a ratio (old/new
    time, > 1x faster) on a log2 axis: bars from 1x, the seed's ratios as
    black markers, "n/a" where a row has no value. ``designs``: the seed's
    (label, preset) kernels whose markers are drawn; ``short``: a row's
    short test name."""
    rows = report.seed_rows()
    cols = report.columns
    h = max(S.FIGSIZE[1], 0.17 * len(rows) * max(1, len(cols)) / 2 + 1.6)
    own = ax is None
    with S.rc():
        fig, ax = _axes(ax, (S.FIGSIZE[0], h))
        y = np.arange(len(rows))
        hgt = 0.8 / max(1, len(cols))
        seen = []
        for i, c in enumerate(cols):
            r = np.array([_ratio(report.change(t, p, hh, c)[0]) for t, p, hh, *_ in rows])
            ok = np.isfinite(r) & (r > 0)
            ax.barh(y[ok] + i * hgt, r[ok] - 1.0, left=1.0, height=hgt, label=c,
                    color="C%d" % i)
            for yy in y[~ok]:
                ax.text(1.0, yy + i * hgt, " n/a", va="center", fontsize=S.NOTE, color="0.3")
            seen += list(r[ok])
        for j, (k, _) in enumerate(designs):
            if k in cols:
                r = [_ratio(row[4 + j][0]) for row in rows]
                ax.plot(r, y + cols.index(k) * hgt, "k" + "dx"[j], markersize=4,
                        label="seed %s" % k)
                seen += [v for v in r if np.isfinite(v)]
        ax.set_yticks(y + hgt * (len(cols) - 1) / 2)
        ax.set_yticklabels(["%s p:%d h:%d" % (short(t), p, hh) for t, p, hh, *_ in rows])
        _vmalloc_axes(ax, seen)
        if own:
            S.fig_legend(fig, ax, "outside lower center", ncol=4)
            S.suptitle(fig, "test_vmalloc: seed 004's kernels as policies, against v6.18")
        else:
            S.legend_above(ax)
    return S.finish(fig)


def _vmalloc_axes(ax, ratios):
    """The row chart's ratio axis: log2, symmetric about 1x, plain labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter
    ax.invert_yaxis()
    ax.axvline(1.0, color="0.3", lw=0.8)
    ax.set_xscale("log", base=2)
    r = [v for v in ratios if np.isfinite(v) and v > 0] or [1.0]
    span = max(abs(math.log2(min(r))), abs(math.log2(max(r))), 0.25) * 1.1
    ax.set_xlim(2.0 ** -span, 2.0 ** span)
    k = max(1, int(math.ceil(span)))
    ticks = [2.0 ** e for e in range(-k, k + 1)] if span > 1 else [0.5, 0.75, 1, 1.5, 2]
    ax.xaxis.set_major_locator(FixedLocator([t for t in ticks if 2.0 ** -span <= t <= 2.0 ** span]))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: S.ratio_label(v)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("speed against v6.18 (v6.18 time / kernel time; > 1x = faster; log scale)")
    ax.grid(True, axis="x", alpha=0.3)


def vmalloc_sizes(report, ax=None):
    """fix_size_alloc_test: ns per loop against nr_pages, one line per
    design (h:0 solid, h:1 dashed), both axes log with plain labels."""
    fs = sorted({(p, h) for t, p, h, *_ in report.seed_rows() if t == "fix_size_alloc_test"})
    with S.rc():
        fig, ax = _axes(ax, None)
        for i, (k, _, _) in enumerate(report.designs):
            for h, style in ((0, "-o"), (1, "--s")):
                pts = [(p, np.nanmean(report.samples("fix_size_alloc_test", p, hh, k)))
                       for p, hh in fs if hh == h]
                if pts:
                    ax.plot(*zip(*pts), style, color="C%d" % i, label="%s h:%d" % (k, h))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        S.plain_log2(ax, "x")
        S.plain_log(ax, "y")
        ax.set_xlabel("nr_pages (log scale)")
        ax.set_ylabel("ns per loop (vmalloc + write + vfree)")
        ax.grid(True, alpha=0.3)
        S.fig_legend(fig, ax, "outside lower center", ncol=3)
        S.suptitle(fig, "fix_size_alloc_test: time per loop against allocation size")
    return S.finish(fig)


def local_storage_speed(report, seed, titles):
    """Creation speed (k/s, +- sd) against batch size, a panel per storage
    type on one shared y axis, the seed's numbers dashed; log y, as the
    model's speeds and the seed's (where a real socket or thread dominates)
    lie decades apart. The eras' points at one batch size are dodged side
    by side (a seed's line beside its era's). ``seed``: {(storage, era,
    batch): (k/s, ...)}; ``titles``: panel titles."""
    sts = report.storage_types
    bs = report.batch_sizes
    speeds = {(st, e): [report.speed(st, e, b) for b in bs]
              for st in sts for e in range(len(report.eras[st]))}
    # one floor for the shared axis, under every panel's bars
    floor = S.log_floor([m for ms in speeds.values() for m, _ in ms],
                        [s for ms in speeds.values() for _, s in ms])
    step = S.x_step(bs)
    with S.rc():
        fig, axes = S.subplots(1, len(sts), sharey=True)
        for ax, st in zip(axes[0], sts):
            k = len(report.eras[st])
            for e, (label, _) in enumerate(report.eras[st]):
                ys, es = [m for m, _ in speeds[st, e]], [s for _, s in speeds[st, e]]
                xs = S.dodge(bs, e, k, step)
                S.errorbars(ax, xs, ys, es, log=True, floor=floor, marker="o",
                            capsize=3, label=label, color="C%d" % e)
                sd = [seed.get((st, e, b), (np.nan,))[0] for b in bs]
                if np.any(np.isfinite(sd)):
                    ax.plot(xs, sd, linestyle="--", marker="x", color="C%d" % e,
                            label="%s (seed)" % label)
            ax.set_title(titles[st])
            ax.set_yscale("log")
            ax.set_xlabel("batch size")
            ax.set_xticks(bs)
            ax.grid(True, alpha=0.3)
            S.legend_above(ax, ncol=2)
        for ax in axes[0]:  # once every panel is drawn: ticks for the shared view
            S.plain_log(ax, "y")
        axes[0][0].set_ylabel("creates (k/s, log scale)")
        S.suptitle(fig, "local storage creation speed: the model (solid, +- sd) and the "
                   "seed (dashed)")
    return S.finish(fig)


def local_storage_kmallocs(report, background, titles):
    """kmallocs per create per era and batch size: the model's traced and
    slab-level counts, and the seed's owner background stacked on the
    traced bar, hatched and labelled as taken from the seed; a zero count
    is marked "0"; the panels share their y axis. ``background``: {storage:
    the seed's background}."""
    sts = report.storage_types
    bs = report.batch_sizes
    w = 0.2
    with S.rc():
        fig, axes = S.subplots(1, len(sts), sharey=True)
        for ax, st in zip(axes[0], sts):
            x = np.arange(len(bs))
            bg = background[st]
            for e, (label, _) in enumerate(report.eras[st]):
                tr = [report.kmallocs(st, e, b)[0] for b in bs]
                sl = [report.kmallocs(st, e, b)[1] for b in bs]
                xs, xl = x + (2 * e - 1.5) * w, x + (2 * e - 0.5) * w
                ax.bar(xs, tr, w, label="%s: traced" % label, color="C%d" % (2 * e))
                ax.bar(xs, [bg] * len(bs), w, bottom=tr, fill=False, hatch="//",
                       label="owner background %.2f (seed)" % bg if e == 0 else None)
                ax.bar(xl, sl, w, label="%s: slab" % label, color="C%d" % (2 * e + 1))
                for px, v in list(zip(xs, tr)) + list(zip(xl, sl)):
                    if not np.isfinite(v) or v == 0:
                        S.mark_bar(ax, px, "n/a" if not np.isfinite(v) else "0")
            ax.set_xticks(x)
            ax.set_xticklabels([str(b) for b in bs])
            ax.set_xlabel("batch size")
            ax.set_title(titles[st])
            ax.grid(True, axis="y", alpha=0.3)
            # drawn: traced, background, slab of the first era, then traced, slab
            # of the second; shown: each era's bars, then the seed's background
            two = len(ax.get_legend_handles_labels()[0]) == 5
            S.legend_above(ax, ncol=1, order=[0, 2, 3, 4, 1] if two else None)
        axes[0][0].set_ylabel("kmallocs per create")
        S.suptitle(fig, "kmallocs per create: the model's traced and slab counts")
    return S.finish(fig)
