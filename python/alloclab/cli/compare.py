"""`alloclab compare A.json B.json ... | compare R.json --baseline P`: an A/B
comparison of result files, cell by cell (alloclab.compare), and the
layer counters that explain it.

The comparison table is compare()'s (its tests, Benjamini-Hochberg over the
table's cells, the (I)/(R) marks). Under it, with ``--counters key`` (the
default) or ``all``, the per-op counters both sides measured, old -> new
per cell with the ratio in words: a second compare() over the counter
metrics, so the counters never enter the first table's correction; its
cells are shown, not judged (counters of a seeded workload barely vary
between runs, so a p-value says little about them). ``key`` keeps the
counters the layers declare key and hides those zero on both sides
everywhere; ``all`` every counter but those unchanged in every cell; either
way a note says how many were hidden.

Flow: the --plot file is checked, the files are loaded (a bad one is one
``alloclab: error:`` line, exit 2), the metrics checked (one no file has,
or one with no better direction, is refused naming those that serve),
compared, printed: first an ``FILE: interrupted: ...`` line for each file
whose run was stopped (as `show` prints it), then the table, then a
``sides:`` line naming the file of each side (its label may be a policy, a
--names label or the letter of a side with several policies); the heatmap
is written and announced on stderr. StatsLevelWarnings are one
``alloclab: warning:`` line each. Sides that share no cell are refused
naming each file's values of the parameters that tell them apart, in the
flags' words (--on, --pool).
"""

import argparse
import math
import sys
import warnings

from . import format as cli_format, show as cli_show
from .. import errors
from .format import PROG, UsageError
from ..judge.compare import StatsLevelWarning
from ..judge.compare import compare, no_match_text
from ..results.metrics import direction
from ..results.result import Result
from ..present import plot

def add_parser(sub):
    cp = sub.add_parser(
        "compare", help="A/B comparison of result files, (I)/(R) where significant",
        description="Compare result files (alloclab run --json) cell by cell. Each cell shows "
                    "the old and new mean with the half width of its 95% confidence interval "
                    "and the unit, the change in percent (positive = better), (I)/(R) when "
                    "significant after Benjamini-Hochberg over the table and at least the "
                    "threshold, else 'not significant' or 'significant, < 2%', and pyperf's "
                    "reading aid (1.29x slower/faster for times and rates, more/fewer for "
                    "counts); a geometric-mean row per metric follows. The test: Welch's "
                    "t-test, or Mann-Whitney U with >= 6 runs a side where it can reach the "
                    "corrected threshold; the legend says which and why. The first file is the "
                    "baseline; each other file is a column. With one file and --baseline, each "
                    "other policy in it is compared with that one. A side whose cells differ "
                    "in a parameter --on leaves out (two policies, sizes, timings...) is "
                    "refused unless --pool; different workloads are always refused.",
        epilog="example cell: 24.1 ±0.3 ns -> 31.0 ±0.5 ns  -22.26% (R)  1.29x slower")
    cp.add_argument("files", nargs="+", metavar="RESULT.json")
    cp.add_argument("--metric", action="append", metavar="NAME",
                    help="metric to compare, repeatable (default: alloc_ns and free_ns)")
    cp.add_argument("--baseline", metavar="VALUE",
                    help="compare inside one file: the value of --by (a policy) to compare "
                         "the others against")
    cp.add_argument("--by", metavar="PARAM",
                    help="with --baseline: the parameter whose values are compared "
                         "(default: policy)")
    cp.add_argument("--on", metavar="PARAM[,PARAM...]", type=cli_format.split,
                    help="the parameters that identify a cell (default: every parameter both "
                         "sides have, less those that differ wholesale between them)")
    cp.add_argument("--test", default="auto", choices=["auto", "welch", "mannwhitney"],
                    help="significance test (default: auto = Mann-Whitney U when both sides "
                         "have >= 6 runs and its smallest possible p is below alpha/cells, "
                         "else Welch's t-test)")
    cp.add_argument("--threshold", type=_fraction("--threshold", THRESHOLD_MAX),
                    default=0.02, metavar="FRACTION",
                    help="smallest |change| marked, a fraction or a percentage with %%: 0.05 "
                         "or 5%% (default 0.02, i.e. 2%%); a bare number above 1 is refused "
                         "(5 would be 500%%: write 5%% or 500%%)")
    cp.add_argument("--alpha", type=_fraction("--alpha", 1), default=0.05, metavar="FRACTION",
                    help="significance level after Benjamini-Hochberg, between 0 and 1 "
                         "(default: 0.05)")
    cp.add_argument("--names", metavar="NAME[,NAME...]", type=cli_format.split,
                    help="column labels, one per compared file/value")
    cp.add_argument("--pool", action="store_true",
                    help="pool the runs of cells that differ in a parameter --on leaves out "
                         "(e.g. two policies on one side); refused without it. The legend says "
                         "what was pooled. Different workloads are never compared.")
    cp.add_argument("--markdown", action="store_true", help="print a Markdown table")
    cp.add_argument("--counters", choices=cli_format.COUNTER_MODES, default="key",
                    help="per-op counters under the table, old -> new: key = the counters the "
                         "layers declare key (default), all = every counter that changed, none")
    cp.add_argument("--plot", metavar="FILE", help="write a heatmap of the changes")
    return cp


# The largest --threshold: a change of a million percent is past any a
# comparison marks; a larger one (1e400 reads as inf) is a typing error.
THRESHOLD_MAX = 1e4


def _fraction(flag, top):
    """A fraction (0.02) or a percentage (2%) from 0 to ``top``: finite, and
    for --alpha strictly between 0 and 1. A bare number above 1 is refused:
    --threshold 5 meaning 5% would mark nothing under 500%. (argparse puts
    "argument FLAG:" before each message.)"""
    def conv(text):
        t = text.strip()
        pct = t.endswith("%")
        try:
            if not t.isascii() or "_" in t:  # float() reads other scripts' digits
                raise ValueError(t)
            v = float(t[:-1]) / 100.0 if pct else float(t)
        except ValueError:
            raise argparse.ArgumentTypeError(
                "a fraction (0.02) or a percentage (2%%), not %r" % errors.Echo(text)) from None
        if not (math.isfinite(v) and 0 <= v <= top) or (top == 1 and v in (0, 1)):
            raise argparse.ArgumentTypeError("a fraction %s, not %r" % (
                "between 0 and 1 (0.05 or 5%)" if top == 1 else
                "from 0 to %g (0.02 or 2%%)" % top, errors.Echo(text)))
        if not pct and v > 1:
            raise argparse.ArgumentTypeError(
                "a fraction (0.05) or a percentage (5%%), not %r: a bare number is a "
                "fraction, so %s would be %s%%; write %s%% for %s%%, or %s%% for %s%%"
                % (errors.Echo(text), t, fmt_pct(v), t, t, fmt_pct(v), fmt_pct(v)))
        return v
    return conv


def fmt_pct(v):
    """A fraction as the percentage it is, without a float's noise."""
    return "%g" % (100 * v)


def cmd_compare(args):
    cli_format.check_outputs(("--plot", args.plot, "plot"))
    results = [cli_show.load_result(f) for f in args.files]
    metrics = args.metric or ["alloc_ns", "free_ns"]
    _check_metrics(results, metrics)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", StatsLevelWarning)
        cmp = _compare_files(compare, args, results, metrics, args.on, args.names)
    for w in caught:  # one line each, as the tool's other messages
        if issubclass(w.category, StatsLevelWarning):
            sys.stderr.write("%s: warning: %s\n" % (PROG, w.message))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for f, r in zip(args.files, results):  # first: the numbers below are of partial runs
        if r.interrupted_line():
            print("%s: %s" % (f, r.interrupted_line()))
    print(cmp.to_markdown() if args.markdown else cmp.to_text())
    if args.baseline is None:
        print(("\n%s" if args.markdown else "%s") % _sides_line(cmp, args.files))
    counters = _counter_text(compare, args, results, args.on, args.names)
    if counters:
        print()
        print(counters)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        written = []
        cli_format.write_output("--plot", args.plot, lambda: written.extend(
            plot.save([cmp.heatmap()], args.plot, "--plot")))
        for path in written:
            cli_format.wrote(path)
    return 0


def _sides_line(cmp, files):
    """Which file each side is: its label (a policy, --names, or the letters
    A and B1, B2 ... of a side holding several policies) and its file."""
    return "sides: %s = %s (old); %s" % (cmp.base_name, files[0], "; ".join(
        "%s = %s" % (c, f) for c, f in zip(cmp.columns, files[1:])))


def _check_metrics(results, metrics):
    """UsageError for a --metric no file has (naming those they have) or one
    whose better direction alloclab does not know (naming those it does)."""
    every = Result({}, [p for r in results for p in r.points])  # for the names only
    known = every.metrics()
    for m in metrics:
        if m not in known:
            raise UsageError(cli_show.unknown_metric(every, m).replace(
                "unknown metric", "no compared file has metric", 1))
        if direction(m) is None:
            judged = [k for k in known if direction(k) is not None and
                      not k.endswith("_per_op")]
            raise UsageError(
                "compare cannot judge metric %r: it has no better direction (neither lower "
                "nor higher is better); metrics it judges: %s, and <layer>.<counter>_per_op"
                % (errors.Echo(m), ", ".join(judged)))


def _compare_files(compare, args, results, metrics, on, names):
    """compare() of the loaded files as the flags ask."""
    if args.baseline is not None:
        if len(results) != 1:
            raise UsageError("--baseline compares inside one file, not %d" % len(results))
        return _flag_words(lambda: compare(
            results[0], metric=metrics, test=args.test, threshold=args.threshold,
            alpha=args.alpha, on=on, baseline=args.baseline, by=args.by or "policy",
            names=names, pool=args.pool))
    if args.by is not None:  # two files compare side against side, not by a parameter
        raise UsageError("--by %s applies with --baseline VALUE (the values of %s inside one "
                         "file); files are compared as sides: use --on to match their cells"
                         % (args.by, args.by))
    if len(results) < 2:
        raise UsageError("compare needs two or more files (the first is the baseline), "
                         "or one file and --baseline POLICY")
    if names is not None and len(names) != len(results) - 1:
        raise UsageError("--names gives %d label%s for %d compared file%s (one per file after "
                         "the first, the baseline)" % (len(names), "" if len(names) == 1 else "s",
                                                       len(results) - 1,
                                                       "" if len(results) == 2 else "s"))
    return _flag_words(lambda: compare(
        results[0], results[1:], metric=metrics, test=args.test, threshold=args.threshold,
        alpha=args.alpha, on=on, names=names, pool=args.pool), args.files)


def _flag_words(call, files=None):
    """call() (a compare), with its refusal of sides that share no cell
    worded for the command line: each side named by its file (``files``,
    the old side's first) where each side is a file, and the flags --on and
    --pool."""
    try:
        return call()
    except errors.InvalidArgument as e:
        if getattr(e, "apart", None) is None:
            raise
        names = list(files) if files else e.sides
        raise UsageError(no_match_text(e.apart, e.key, names, on="--on PARAM[,PARAM...]",
                                       pool="--pool")) from None




def _counter_metrics(results, mode):
    """The per-op counter metrics every point of every result has (a layer
    both sides run), key ones for ``key``."""
    docs = {}
    for r in results:
        docs.update(r.metadata.get("counters") or {})
    common = [m for m in results[0].metrics() if m.endswith("_per_op") and "." in m and
              not m.startswith("wl.") and all(m in p.data for r in results for p in r.points)]
    return [m for m in common if mode == "all" or cli_format._is_key(m, docs)]


def _counter_text(compare, args, results, on, names):
    """The counters under the comparison (module doc), or ""."""
    if args.counters == "none":
        return ""
    metrics = _counter_metrics(results, args.counters)
    if not metrics:
        return ""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said once, under the main table
        try:
            cmp = _compare_files(compare, args, results, metrics, on, names)
        except (errors.AlloclabError, UsageError):  # cells the counters cannot pair: none
            return ""
    grid = cmp.grid()
    if args.counters == "all":
        keep = [g for g in grid if any(c.old.mean != c.new.mean for c in g[2].values())]
    else:
        keep = [g for g in grid if any(c.old.mean or c.new.mean for c in g[2].values())]
    head = ["counters per op, %s -> %s (mean over runs; shown, not judged)"
            % (cmp.base_name, ", ".join(map(str, cmp.columns)))]
    fmt = cli_format.fmt_value
    rows = [[label] + ["%s -> %s  %s" % (fmt(c.old.mean), fmt(c.new.mean), c.aid())
                       if c is not None else "-"
                       for c in (cells.get(col) for col in cmp.columns)]
            for _, label, cells in keep]
    hid = len(grid) - len(keep)
    note = ("%d row%s hidden (%s)" % (hid, "" if hid == 1 else "s",
                                      "zero on both sides" if args.counters == "key" else
                                      "unchanged in every cell")) if hid else ""
    if args.markdown:
        table = cli_format.md_table(["counter"] + list(cmp.columns), rows) if rows else ""
        return "\n\n".join(x for x in ["**%s**" % head[0], table, note and "_%s_" % note] if x)
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))] if rows else []
    lines = head + ["  " + "   ".join(x.ljust(w[i]) for i, x in enumerate(r)).rstrip()
                    for r in rows]
    return "\n".join(lines + (["  (%s; --counters all shows every one that changed)" % note
                                if args.counters == "key" else "  (%s)" % note] if note else []))
