"""A/B comparison of Results, marked (I)/(R) only when the data say so.

    cmp = alloclab.compare(old, new, metric="alloc_ns")       # two Results
    cmp = alloclab.compare(old, [new1, new2])                  # a column each
    cmp = alloclab.compare(res, baseline="vmalloc-default")    # policies in one Result
    print(cmp)                   # seed 004's table; cmp.to_markdown(); cmp.heatmap()

Per cell (a metric at one set of parameters), over the runs of each side:

- change, normalised so that positive is better: ``old/new - 1`` for a
  lower-is-better metric (latency: 2x faster is +100%, and seed 004's
  +514.75% only fits this formula), ``new/old - 1`` for a higher-is-better
  one (throughput); computed from the means;
- a two-sided test of "same distribution": Welch's t-test by default,
  Mann-Whitney U when both sides have at least 6 runs (test="auto"), or
  the one named;
- Benjamini-Hochberg correction over every cell of the table (all metrics
  and columns), so that a table of 40 cells does not find 2 differences by
  chance;
- a mark, "(I)" improvement or "(R)" regression, only when the corrected
  p-value is below ``alpha`` AND |change| >= ``threshold`` (default 2%):
  significant but tiny differences are not worth a reader's attention.

Cells are matched by their parameters. Between two Results, the default
key is every parameter both have, less those that are constant on each
side but differ between them (typically the policy: A ran one, B another);
``on=[...]`` names the key instead. Within one Result, ``baseline=`` picks
the old side by the value of ``by`` (default "policy": presets and specs
compare canonically), each other value of ``by`` becomes a column, and the
key is found the same way (``by`` never in it).
"""

import html
import json
import math

import numpy as np

from . import errors
from . import stats as _stats
from .result import METRIC_INFO, Result

TESTS = ("auto", "welch", "mannwhitney")
SHORT = {"producers": "p", "allocs_per_cycle": "allocs/cycle"}


def direction(metric):
    """True when lower is better, False when higher is: from METRIC_INFO, else
    by the metric's name; None when alloclab cannot tell."""
    info = METRIC_INFO.get(metric)
    if info is not None and info[2] is not None:
        return info[2]
    if metric.endswith("_per_op") or metric.endswith("_ns") or metric.endswith(".leaked"):
        return True
    if metric in ("throughput",) or metric.endswith("_per_s"):
        return False
    return None


def change(old_mean, new_mean, lower):
    """The normalised change (a fraction): positive means better."""
    num, den = (old_mean, new_mean) if lower else (new_mean, old_mean)
    if den == 0 or math.isnan(den) or math.isnan(num):
        return math.nan if num == den or math.isnan(num) or math.isnan(den) else math.inf
    return num / den - 1.0


class Cell:
    """One compared cell: key (params), metric, column, old/new Stats,
    change (fraction, positive = better), test, p, p_adj, mark ("I", "R", "")."""

    __slots__ = ("key", "metric", "column", "old", "new", "change", "test", "p", "p_adj",
                 "mark")

    def __init__(self, key, metric, column, old, new, change, test, p):
        self.key, self.metric, self.column = key, metric, column
        self.old, self.new, self.change, self.test, self.p = old, new, change, test, p
        self.p_adj = math.nan
        self.mark = ""

    @property
    def change_pct(self):
        return 100.0 * self.change

    def text(self):
        if math.isnan(self.change):
            return "-"
        s = "%+.2f%%" % self.change_pct if not math.isinf(self.change) else "inf"
        s = s.lstrip("+")
        return "(%s) %s" % (self.mark, s) if self.mark else s

    def __repr__(self):
        return "Cell(%s %s %s: %s, p=%.3g, p_adj=%.3g)" % (
            self.column, self.metric, self.key, self.text(), self.p, self.p_adj)


def _as_results(b):
    if isinstance(b, Result):
        return [b]
    out = list(b)
    for r in out:
        if not isinstance(r, Result):
            raise errors.InvalidArgument("compare takes Results, not %r" % (r,))
    if not out:
        raise errors.InvalidArgument("compare needs at least one Result to compare against")
    return out


def _constant(res, key):
    vals = {json.dumps(p.params.get(key), sort_keys=True, default=str) for p in res.points}
    return vals.pop() if len(vals) == 1 else None


def _default_key(a, others):
    common = [k for k in a.params() if all(k in r.params() for r in others)]
    key = []
    for k in common:
        ca = _constant(a, k)
        if ca is not None and any(_constant(r, k) not in (None, ca) for r in others):
            continue  # constant on each side, different between them: what is compared
        key.append(k)
    return key


def _group(res, key):
    g = {}
    for p in res.points:
        if any(k not in p.params for k in key):
            continue
        kk = json.dumps([p.params[k] for k in key], default=str)
        g.setdefault(kk, []).append(p)
    return g


def _pool(points, metric):
    x = [np.asarray(p.data[metric], dtype=float) for p in points if metric in p.data]
    s = [np.asarray(p.data.get("steal_pct", []), dtype=float) for p in points if metric in p.data]
    pr = [np.asarray(p.data.get("worker_preempted_per_s", []), dtype=float)
          for p in points if metric in p.data]
    if not x:
        return None
    return _stats.describe(np.concatenate(x), steal=np.concatenate(s), preempt=np.concatenate(pr))


def _label(r, i, n, default):
    pols = sorted({str(p.params.get("policy")) for p in r.points})
    if len(pols) == 1:
        return pols[0]
    return default if n == 1 else "%s%d" % (default, i + 1)


def compare(a, b=None, metric="alloc_ns", test="auto", threshold=0.02, alpha=0.05, on=None,
            baseline=None, by="policy", names=None, base_name=None, lower_is_better=None):
    """Compare Results cell by cell; returns a Comparison (see the module doc).

    a: the old side (or the one Result with ``baseline``); b: a Result or a
    list of Results (a column each); metric: a name or a list of names;
    test: "auto", "welch" or "mannwhitney"; threshold: the smallest |change|
    (a fraction) that is marked; alpha: significance after
    Benjamini-Hochberg; on: the parameters that identify a cell; baseline /
    by: compare the values of parameter ``by`` inside ``a`` against
    ``baseline``; names / base_name: column labels; lower_is_better: for
    a metric whose direction alloclab does not know.
    """
    if not isinstance(a, Result):
        raise errors.InvalidArgument("compare takes Results, not %r" % (a,))
    if test not in TESTS:
        raise errors.UnknownNameError.make("test", test, list(TESTS))
    for name, v, lo, hi in (("threshold", threshold, 0, math.inf), ("alpha", alpha, 0, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi or \
                (name == "alpha" and v in (0, 1)):
            raise errors.ParameterRangeError("%s=%r is out of range (%s)" % (
                name, v, "a fraction >= 0, e.g. 0.02 for 2%" if name == "threshold" else
                "0 < alpha < 1"), name=name, value=v, min=lo, max=hi)
    metrics = [metric] if isinstance(metric, str) else list(metric)
    if not metrics:
        raise errors.InvalidArgument("compare needs at least one metric")

    if baseline is not None:
        if b is not None:
            raise errors.InvalidArgument(
                "compare(res, baseline=...) compares inside one Result: give no second Result")
        if by not in a.params():
            raise errors.UnknownNameError.make("parameter", by, a.params())
        old = a.filter(**{by: baseline})
        if not old.points:
            vals = []
            for p in a.points:
                if p.params.get(by) not in vals:
                    vals.append(p.params.get(by))
            raise errors.UnknownNameError.make(by, baseline, [str(v) for v in vals],
                                               context="baseline")
        base_val = old.points[0].params[by]
        others = []
        for p in a.points:
            v = p.params.get(by)
            if v != base_val and v not in others:
                others.append(v)
        if not others:
            raise errors.InvalidArgument("nothing to compare: every point has %s=%r" % (
                by, base_val))
        news = [a.filter(**{by: [v]}) for v in others]
        key = list(on) if on is not None else [k for k in _default_key(old, news) if k != by]
        cols = names or [str(v) for v in others]
        base_name = base_name or str(base_val)
    else:
        if b is None:
            raise errors.InvalidArgument("compare needs a second Result, or baseline=")
        news = _as_results(b)
        old = a
        key = list(on) if on is not None else _default_key(a, news)
        cols = names or [_label(r, i, len(news), "B") for i, r in enumerate(news)]
        base_name = base_name or _label(a, 0, 1, "A")
        if len(set(cols)) < len(cols):
            cols = ["%s (%d)" % (c, i + 1) for i, c in enumerate(cols)]
    if len(cols) != len(news):
        raise errors.InvalidArgument("names: %d labels for %d columns" % (len(cols), len(news)))
    for k in key:
        if k not in old.params():
            raise errors.UnknownNameError.make("parameter", k, old.params(), context="on")

    directions = {}
    for m in metrics:
        lower = lower_is_better if lower_is_better is not None else direction(m)
        if lower is None:
            raise errors.InvalidArgument(
                "alloclab does not know whether lower or higher is better for %r: pass "
                "lower_is_better=True or False" % m)
        known = set(old.metrics()).union(*[set(r.metrics()) for r in news])
        if m not in known:
            raise errors.UnknownNameError.make("metric", m, sorted(known))
        directions[m] = bool(lower)

    go = _group(old, key)
    cells, unmatched = [], 0
    for col, new in zip(cols, news):
        gn = _group(new, key)
        unmatched += len(set(go) ^ set(gn))
        for kk, opts in go.items():
            if kk not in gn:
                continue
            params = {k: opts[0].params[k] for k in key}
            for m in metrics:
                so, sn = _pool(opts, m), _pool(gn[kk], m)
                if so is None or sn is None:
                    continue
                t = _stats.choose_test(test, so.n, sn.n)
                p = _stats.TESTS[t](so.values, sn.values).pvalue
                cells.append(Cell(params, m, col, so, sn, change(so.mean, sn.mean,
                                                                 directions[m]), t, p))
    if not cells:
        raise errors.InvalidArgument(
            "no cells match: the two sides share no values of %s; pass on=[...] with the "
            "parameters that identify a cell" % (", ".join(key) or "(no common parameters)"))
    adj = _stats.bh_adjust([c.p for c in cells])
    for c, pa in zip(cells, adj):
        c.p_adj = float(pa)
        if pa < alpha and abs(c.change) >= threshold:
            c.mark = "I" if c.change > 0 else "R"
    differ = []
    for k in old.params():
        if k in key:
            continue
        vals = {json.dumps(p.params.get(k), default=str) for r in [old] + news for p in r.points}
        if len(vals) > 1:
            differ.append(k)
    return Comparison(cells, cols, base_name, key, metrics, directions, test, threshold, alpha,
                      unmatched, differ)


class Comparison:
    """The cells of a comparison and their rendering (text, Markdown, HTML,
    heatmap, rows)."""

    def __init__(self, cells, columns, base_name, key, metrics, directions, test, threshold,
                 alpha, unmatched=0, differ=()):
        self.cells = cells
        self.columns = list(columns)
        self.base_name = base_name
        self.key = list(key)
        self.metrics = list(metrics)
        self.directions = directions
        self.test = test
        self.threshold = threshold
        self.alpha = alpha
        self.unmatched = unmatched
        self.differ = list(differ)  # parameters that tell the sides apart

    # -- access --

    def cell(self, column=None, metric=None, **key):
        """The one cell matching column, metric and key params."""
        found = [c for c in self.cells
                 if (column is None or c.column == column) and
                 (metric is None or c.metric == metric) and
                 all(c.key.get(k) == v for k, v in key.items())]
        if len(found) != 1:
            raise errors.InvalidArgument("%d cells match %r" % (len(found), dict(
                key, column=column, metric=metric)))
        return found[0]

    @property
    def improvements(self):
        return [c for c in self.cells if c.mark == "I"]

    @property
    def regressions(self):
        return [c for c in self.cells if c.mark == "R"]

    def _row_ids(self):
        rows = []
        for c in self.cells:
            rid = (c.metric, json.dumps(c.key, sort_keys=True, default=str))
            if rid not in rows:
                rows.append(rid)
        return rows

    def _varying(self):
        keys = []
        for k in self.key:
            vals = {json.dumps(c.key.get(k), default=str) for c in self.cells}
            if len(vals) > 1 and k != "workload":
                keys.append(k)
        return keys

    def row_label(self, metric, key):
        unit = METRIC_INFO.get(metric, ("", "", None))[1]
        parts = ["%s:%s" % (SHORT.get(k, k), key[k]) for k in self._varying() if k in key]
        s = metric + (": " + ", ".join(parts) if parts else "")
        return s + (" (%s)" % unit if unit else "")

    def grid(self):
        """[(benchmark, row label, {column: Cell})] in table order."""
        out = []
        by_row = {}
        for c in self.cells:
            rid = (c.metric, json.dumps(c.key, sort_keys=True, default=str))
            by_row.setdefault(rid, {})[c.column] = c
        for rid in self._row_ids():
            cells = by_row[rid]
            any_cell = next(iter(cells.values()))
            out.append((str(any_cell.key.get("workload", "")),
                        self.row_label(any_cell.metric, any_cell.key), cells))
        return out

    # -- text --

    def legend(self):
        n = sum(1 for c in self.cells if not math.isnan(c.p))
        tests = sorted({c.test for c in self.cells})
        lines = [
            "(R)/(I): statistically significant regression/improvement against %s: %s, "
            "p < %g after Benjamini-Hochberg over %d cells, and |change| >= %g%%." % (
                self.base_name, " or ".join(
                    {"welch": "Welch's t-test", "mannwhitney": "Mann-Whitney U"}[t]
                    for t in tests), self.alpha, n, 100 * self.threshold),
            "Results are normalised so that less than zero is a regression and greater than "
            "zero an improvement (lower is better: old/new - 1; higher is better: new/old - 1)."]
        runs = sorted({c.old.n for c in self.cells} | {c.new.n for c in self.cells})
        lines.append("Runs per cell: %s.%s" % ("/".join(map(str, runs)), (
            " The sides differ in: %s." % ", ".join(self.differ)) if self.differ else ""))
        if self.unmatched:
            lines.append("%d cell%s had no counterpart on the other side and are left out." % (
                self.unmatched, "" if self.unmatched == 1 else "s"))
        return lines

    def warning_lines(self, wrap=104):
        labelled = []
        for bench, label, cells in self.grid():
            for col, c in cells.items():
                labelled.append(("%s %s" % (self.base_name, label), c.old))
                labelled.append(("%s %s" % (col, label), c.new))
        seen, uniq = set(), []
        for lab, st in labelled:
            if lab not in seen:
                seen.add(lab)
                uniq.append((lab, st))
        return _stats.warning_lines(uniq, wrap=wrap)

    def to_text(self, warnings=True):
        """Seed 004's layout: a box table, Benchmark | Result Class | a column each."""
        rows = self.grid()
        head = ["Benchmark", "Result Class"] + self.columns
        body = []
        last = None
        for bench, label, cells in rows:
            body.append([bench if bench != last else "", label] +
                        [cells[c].text() if c in cells else "" for c in self.columns])
            last = bench
        w = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]

        def line(ch="-"):
            return "+" + "+".join(ch * (x + 2) for x in w) + "+"

        def fmt(r):
            cells = [r[0].ljust(w[0]), r[1].ljust(w[1])] + [
                r[i].rjust(w[i]) for i in range(2, len(r))]
            return "| " + " | ".join(cells) + " |"

        out = [line(), fmt(head), line("=")] + [fmt(r) for r in body] + [line()]
        out += self.legend()
        if warnings:
            wl = self.warning_lines()
            if wl:
                out += ["warnings:"] + ["  " + x for x in wl]
        return "\n".join(out)

    def to_markdown(self, warnings=True):
        """The table as GitHub Markdown, with the legend below."""
        head = ["Benchmark", "Result Class"] + self.columns
        out = ["| " + " | ".join(head) + " |",
               "|" + "|".join(["---", "---"] + ["---:"] * len(self.columns)) + "|"]
        last = None
        for bench, label, cells in self.grid():
            row = [bench if bench != last else "", label] + [
                _md_cell(cells[c]) if c in cells else "" for c in self.columns]
            out.append("| " + " | ".join(r.replace("|", "\\|") for r in row) + " |")
            last = bench
        out.append("")
        out += self.legend()
        if warnings:
            wl = self.warning_lines(wrap=0)
            if wl:
                out += ["", "Warnings:"] + ["- " + x for x in wl]
        return "\n".join(out)

    def _repr_html_(self):
        """In a notebook: the table with cells coloured by change (a heatmap)."""
        head = ["Benchmark", "Result Class"] + self.columns
        h = ["<table>", "<tr>" + "".join("<th>%s</th>" % html.escape(x) for x in head) + "</tr>"]
        for bench, label, cells in self.grid():
            tds = ["<td>%s</td>" % html.escape(bench), "<td>%s</td>" % html.escape(label)]
            for col in self.columns:
                c = cells.get(col)
                if c is None:
                    tds.append("<td></td>")
                    continue
                tds.append('<td style="background-color:%s;text-align:right" title="p=%.3g, '
                           'p_adj=%.3g, %s, n=%d/%d">%s</td>' % (
                               _colour(c.change), c.p, c.p_adj, c.test, c.old.n, c.new.n,
                               ("<b>%s</b>" if c.mark else "%s") % html.escape(c.text())))
            h.append("<tr>" + "".join(tds) + "</tr>")
        h.append("</table>")
        h.append("<p><small>%s</small></p>" % html.escape(" ".join(self.legend())))
        return "\n".join(h)

    def __str__(self):
        return self.to_text()

    def __repr__(self):
        return self.to_text()

    # -- data --

    def rows(self):
        """Tidy rows, one per cell."""
        out = []
        for c in self.cells:
            r = dict(c.key)
            r.update({"metric": c.metric, "column": c.column, "baseline": self.base_name,
                      "old_mean": c.old.mean, "new_mean": c.new.mean, "old_sd": c.old.sd,
                      "new_sd": c.new.sd, "old_n": c.old.n, "new_n": c.new.n,
                      "change_pct": c.change_pct, "test": c.test, "p": c.p, "p_adj": c.p_adj,
                      "mark": c.mark})
            out.append(r)
        return out

    def to_pandas(self):
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Comparison.to_pandas() needs pandas: pip install pandas "
                              "(or use rows())") from None
        return pd.DataFrame(self.rows())

    def matrix(self):
        """(row labels, columns, change % array (rows x columns), marks)."""
        grid = self.grid()
        vals = np.full((len(grid), len(self.columns)), np.nan)
        marks = [[""] * len(self.columns) for _ in grid]
        for i, (_, _, cells) in enumerate(grid):
            for j, col in enumerate(self.columns):
                if col in cells:
                    vals[i, j] = cells[col].change_pct
                    marks[i][j] = cells[col].mark
        return [label for _, label, _ in grid], list(self.columns), vals, marks

    def heatmap(self, **kw):
        """A heatmap of the changes (matplotlib Figure): alloclab.plot.heatmap."""
        from . import plot
        return plot.heatmap(self, **kw)


def _md_cell(c):
    t = c.text()
    return "**%s**" % t if c.mark else t


def _colour(ch):
    if math.isnan(ch):
        return "#ffffff"
    x = max(-1.0, min(1.0, ch / 0.5))  # full colour at +-50%
    if x >= 0:
        return "#%02x%02x%02x" % (int(255 - 120 * x), 255, int(255 - 120 * x))
    return "#%02x%02x%02x" % (255, int(255 + 120 * x), int(255 + 120 * x))
