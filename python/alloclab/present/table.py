"""A Result's metric as a text table, laid out as the seed discussions lay
theirs out: rows x cols, a block per combination of the other swept
parameters; and the lines printed under it (unstable, refused and
truncated cells, the clock). Result.table() fills one from a Result's
points; this module only lays it out.
"""

import math
import textwrap

import numpy as np

from ..results import simulated as _simulated
from ..results import stats as _stats
from ..results.result import fmt_value, uniq

ROW_LABELS = {"allocs_per_cycle": "allocs/cycle", "producers": "producers"}
"""How a table names the parameters its rows or columns sweep."""


def label(key, v):
    if key == "producers":
        return "%sp" % v
    return str(v)

def clock_line(clock):
    """The note under a table whose ops read the clock often."""
    return ("clock: the timed regions read the clock %.2f times per op (batch timing reads it "
            "where the op kind changes, per-op timing twice an op), about %.0f ns of each op's "
            "figure at this machine's timer cost; compare policies by difference or ratio on "
            "the same trace" % clock)

def refused_line(labels, limit=6):
    """The warning under a table for cells whose policy refused objects."""
    more = len(labels) - limit
    names = ", ".join(labels[:limit]) + (" and %d more" % more if more > 0 else "")
    return ("refused: the policy refused allocations the program got (each timed as a "
            "failed call) and skipped the later ops on them, so these cells do not replay the "
            "whole program: %s" % names)


def truncated_line(labels, limit=6):
    """The warning under a table for cells with truncated runs."""
    more = len(labels) - limit
    names = ", ".join(labels[:limit]) + (" and %d more" % more if more > 0 else "")
    return ("truncated: the duration cut the run's loop short, its figures are partial "
            "(left out of verdicts; give a longer duration): %s" % names)


def _block_heads(labels, ncols, colw, share):
    """(column width, [each block's label as lines of one height]): the
    columns widen so that a label fits over its block, as far as the block's
    ``share`` of the width; a longer label (a long policy spec) wraps onto
    more lines, bottom-aligned over its block, so that the blocks still
    stand side by side in one table."""
    if not labels:
        return colw, []
    block_w = ncols * (colw + 1) - 1
    fit = min(max(len(s) for s in labels), max(block_w, share))
    if fit > block_w:
        colw += -(-(fit - block_w) // ncols)
        block_w = ncols * (colw + 1) - 1
    return colw, _lines_of(labels, block_w)


_COL_HEAD_MAX = 24  # a column widens for its header up to this; a longer one wraps


def _lines_of(texts, width):
    """Each text wrapped to ``width``, as lists of lines of one height
    (bottom-aligned: the last lines sit over the columns)."""
    wrapped = [textwrap.wrap(s, width, break_on_hyphens=False) or [""] for s in texts]
    height = max((len(w) for w in wrapped), default=1)
    return [[""] * (height - len(w)) + w for w in wrapped]


def counters_heading(labels, points):
    """The heading of a block of per-op counters whose columns are ``labels``
    over ``points`` (one each): the simulated label and which columns, or
    None when no column is simulated. The counts of simulated CPUs are of
    the simulated schedule (results.simulated.COUNTERS)."""
    head = _simulated.heading(points)
    if head is None:
        return None
    sim = [lab for lab, p in zip(labels, points) if _simulated.is_simulated(p)]
    return head + (": every column" if len(sim) == len(points) else ": " + ", ".join(sim))


class Table:
    """A metric laid out as the seed tables are: rows × cols, one block per
    combination of the other swept parameters (e.g. per policy).

    rows, cols: the row and column values; blocks: one dict per block (the
    swept parameters that distinguish it; empty when there is one block);
    cube, sd_cube, n: (blocks, rows, cols) arrays of the statistic, the
    standard deviation over runs and the run count; values, sd: 2-D
    (rows, blocks × cols) views, blocks side by side."""

    def __init__(self, title, metric, stat, row_key, col_key, rows, cols, blocks, cube, sd_cube,
                 n, cell_stats=None, truncated=None, unmeasured=None):
        self.title = title
        self.metric = metric
        self.stat = stat
        self.row_key = row_key
        self.col_key = col_key
        self.rows = rows
        self.cols = cols
        self.blocks = blocks
        self.cube = cube
        self.sd_cube = sd_cube
        self.n = n
        # {(block, row, col): stats.Stats}, the CI half widths and warnings
        self.cell_stats = cell_stats or {}
        self.ci_cube = np.full(cube.shape, np.nan)
        for (b, r, c), st in self.cell_stats.items():
            self.ci_cube[b, r, c] = st.ci_half
        # {(block, row, col): (truncated runs, runs)} for cells with any
        self.truncated = truncated or {}
        # {(block, row, col): why}: cells whose runs did not measure the
        # metric (a counter at a stats level that leaves it out): "n/a"
        self.unmeasured = unmeasured or {}
        self.clock = None  # (clock reads per op, ns per op) when the clock is a share
        self.refused = {}  # {(block, row, col): (objects, ops) refused and skipped a run}
        self.points = {}  # {(block, row, col): [Point]}: simulated cells say so
        self.metadata = None  # the Result's (a calibration's validation)

    def sim_heading(self):
        """"simulated: predicted (calibration <id>)" and which cells, or None
        for a table of measured cells only; a metric the host measures even
        on simulated CPUs (steal, RSS) is headed as a host measurement."""
        pts = [p for ps in self.points.values() for p in ps]
        head = _simulated.heading(pts, self.metric)
        if head is None:
            return None
        sim = [k for k, ps in sorted(self.points.items())
               if any(_simulated.is_simulated(p) for p in ps)]
        if len(sim) == len(self.points):
            return head + ": every cell"
        return head + ": " + ", ".join(self.cell_label(*k) for k in sim)

    @property
    def values(self):
        return np.concatenate(list(self.cube), axis=1) if len(self.cube) else self.cube

    @property
    def sd(self):
        return np.concatenate(list(self.sd_cube), axis=1) if len(self.sd_cube) else self.sd_cube

    def block_label(self, i):
        b = self.blocks[i]
        return ", ".join(str(v) if k == "policy" else "%s=%s" % (k, v) for k, v in b.items())

    def to_text(self, sd=False, width=110, ci=False, warnings=True):
        """The table as text; sd=True adds "±sd" to each cell, ci=True "±h"
        (the half width of the 95% confidence interval of the mean);
        warnings=True lists unstable cells under the table."""
        nb, nr, nc = self.cube.shape
        row_hdr = ROW_LABELS.get(self.row_key, self.row_key or "")
        row_labels = [label(self.row_key, r) if self.row_key else "" for r in self.rows]
        col_labels = [label(self.col_key, c) if self.col_key else self.metric for c in self.cols]

        def cell(b, r, c):
            if (b, r, c) in self.unmeasured and math.isnan(self.cube[b, r, c]):
                return "n/a"
            s = fmt_value(float(self.cube[b, r, c]))
            if sd and self.n[b, r, c] > 1 and not math.isnan(self.sd_cube[b, r, c]):
                s += " ±" + fmt_value(float(self.sd_cube[b, r, c]))
            if ci and self.n[b, r, c] > 1 and not math.isnan(self.ci_cube[b, r, c]):
                s += " ±" + fmt_value(float(self.ci_cube[b, r, c]))
            return s

        cells = [[[cell(b, r, c) for c in range(nc)] for r in range(nr)] for b in range(nb)]
        colw = max([len(s) for blk in cells for row in blk for s in row] +
                   [min(len(s), _COL_HEAD_MAX) for s in col_labels] + [3])
        first_w = max([len(row_hdr)] + [len(s) for s in row_labels]) + 2
        labels = [self.block_label(i) for i in range(nb)] if nb > 1 else []
        sep = "   "
        colw, heads = _block_heads(labels, nc, colw, (width - first_w) // max(nb, 1) - len(sep))
        block_w = nc * (colw + 1) - 1
        col_heads = _lines_of(col_labels, colw)

        def render(block_ids, with_labels):
            out = []
            if with_labels:
                out += [" " * first_w + "".join(sep + heads[b][k].center(block_w)
                                                for b in block_ids).rstrip()
                        for k in range(len(heads[0]))]
            out += [("%*s" % (first_w, row_hdr if k == len(col_heads[0]) - 1 else "")) +
                    "".join(sep + " ".join("%*s" % (colw, h[k]) for h in col_heads)
                            for _ in block_ids) for k in range(len(col_heads[0]))]
            for r in range(nr):
                out.append(("%*s" % (first_w, row_labels[r])) + "".join(
                    sep + " ".join("%*s" % (colw, s) for s in cells[b][r]) for b in block_ids))
            return out

        lines = [self.title + (" (± 95% CI of the mean)" if ci else
                               " (± sd)" if sd else "")]
        head = self.sim_heading()
        lines += textwrap.wrap(head, width, subsequent_indent="    ") if head else []
        lines.append("")
        per = max(1, (width - first_w) // (len(sep) + block_w))  # blocks side by side
        for g in range(0, max(nb, 1), per):  # one table, unless the columns alone are wider
            lines += render(list(range(g, min(nb, g + per))), bool(labels)) + [""]
        lines.pop()
        if warnings:
            w = self.warning_lines()
            if w:
                lines += ["warnings:"] + ["  " + x for x in w]
        return "\n".join(line.rstrip() for line in lines)

    def cell_label(self, b, r, c):
        parts = [self.block_label(b)] if len(self.blocks) > 1 else []
        for key, v in ((self.row_key, self.rows[r]), (self.col_key, self.cols[c])):
            if key in ("policy", "producers"):
                parts.append(label(key, v))
            elif key is not None:
                parts.append("%s %s" % (v, ROW_LABELS.get(key, key)))
        return ", ".join(parts) or self.metric

    @property
    def warnings(self):
        """[(cell label, stats.StatWarning)] for every cell with a warning."""
        return [(self.cell_label(*k), w) for k, st in sorted(self.cell_stats.items())
                for w in st.warnings]

    def warning_lines(self, limit=6):
        """The warnings, grouped by kind, a line each (for under the table)."""
        lines = _stats.warning_lines(
            [(self.cell_label(*k), st) for k, st in sorted(self.cell_stats.items())], limit)
        shown = uniq(sorted(why for k, why in self.unmeasured.items()
                             if math.isnan(self.cube[k])))
        levels = [why for why in shown if why.startswith("stats=")]
        if levels:
            lines.append("n/a: not measured at the run's stats level (%s)" % "; ".join(levels))
        if len(levels) < len(shown):
            lines.append("n/a: not measured (%s)" % "; ".join(
                why for why in shown if why not in levels))
        if self.truncated:
            lines.append(truncated_line(
                ["%s (%d of %d runs)" % (self.cell_label(*k), cut, n)
                 for k, (cut, n) in sorted(self.truncated.items())], limit))
        if self.refused:
            lines.append(refused_line(
                ["%s (%d objects, %d ops a run)" % (self.cell_label(*k), o, n)
                 for k, (o, n) in sorted(self.refused.items())], limit))
        if self.clock:
            lines += textwrap.wrap(clock_line(self.clock), 104, subsequent_indent="    ")
        for line in _simulated.warning_lines(
                [(self.cell_label(*k), ps) for k, ps in sorted(self.points.items())],
                self.metadata, limit):
            lines += textwrap.wrap(line, 104, subsequent_indent="    ")
        return lines

    def __str__(self):
        return self.to_text()

    def __repr__(self):
        return self.to_text()


