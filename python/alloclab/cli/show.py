"""`alloclab show FILE.json`: the tables of a saved result printed again, as
`alloclab run` printed them (pyperf's `show`), or in another format.

    alloclab show r.json [--metric M ...] [--counters key|all|none]
                         [--rows P] [--cols P] [--stat S] [--sd | --ci]
                         [--markdown | --format text|markdown|json|csv]

FILE is what `run --json` (or `run --format json`, or a sweep) wrote; a
reproduction's --json report is printed as the reproduction printed it
(text, or json again). The table axes default as `run` chose them: the
columns by producers, the rows by the workload's swept parameter (from the
schema of the workload named in the file; a workload this alloclab does
not know falls back to the first swept parameter).

Every check happens before anything is printed: a file that cannot be read
or is not a result, or a metric or axis the result does not have, is one
``alloclab: error:`` line (exit 2) naming the valid metrics or parameters.
Cost: reading and formatting the file; nothing runs.
"""

import pathlib

from . import format as cli_format
from .. import errors
from ..cbind import schema
from .format import UsageError
from ..results.result import Result
from ..results.result import load_json
from .. import reproduce
from ..reproduce import _report as reproduce_report
from ..results.metrics import BASE_METRICS

# What `reproduce ... --json` writes, by format: the reports (several print
# as rounds of one reproduction), the scaling figure's data and a fidelity
# table (one file each).
_REPORTS = {c.FORMAT: c for c in (reproduce.LibarenaReport, reproduce.VmallocReport,
                                   reproduce.LocalStorageReport,
                                   reproduce.SimulatedLibarenaReport, reproduce.Scaling,
                                   reproduce.Fidelity)}


def add_parser(sub):
    sp = sub.add_parser(
        "show", help="print a saved result's tables again (run --json FILE)",
        description="Print the tables of a result file as `alloclab run` printed them: the "
                    "metrics, histograms, CPU, stats and machine lines, workload metrics and "
                    "counters; or the result as Markdown, JSON or CSV.")
    sp.add_argument("file", metavar="FILE.json", help="a result (alloclab run --json FILE)")
    sp.add_argument("more", metavar="ROUND.json", nargs="*",
                    help="more rounds of the same reproduction (its --json reports): each "
                         "round's goal shares, and the goal cells in the seed's direction in "
                         "every round")
    sp.add_argument("--metric", action="append", metavar="NAME",
                    help="metric to tabulate, repeatable (default: those the run printed, else "
                         "alloc_ns and free_ns, or the file's first metric); `alloclab list "
                         "metrics` names them")
    sp.add_argument("--rows", metavar="PARAM", help="parameter for table rows")
    sp.add_argument("--cols", metavar="PARAM", default=None,
                    help="parameter for table columns (default: producers)")
    sp.add_argument("--stat", default="mean", choices=["mean", "median", "min", "max"],
                    help="statistic over runs (default: mean)")
    spread = sp.add_mutually_exclusive_group()
    spread.add_argument("--sd", action="store_true", help="the standard deviation in cells")
    spread.add_argument("--ci", action="store_true",
                        help="the 95%% confidence interval of the mean in cells (±half width)")
    cli_format.add_view_flags(sp)
    return sp


def load_result(path, what="compare"):
    """A Result from ``path``; UsageError (one line) for a file that cannot be
    read or is not a result."""
    try:
        return Result.from_json(pathlib.Path(path))  # a path, whatever its text
    except OSError as e:
        raise UsageError("cannot read %s: %s" % (path, e.strerror or e)) from None
    except errors.FileFormatError as e:  # the message names the file and what is wrong
        raise UsageError("%s (%s reads the files alloclab run --json writes%s)" % (
            e, what, " and those of reproduce --json" if what == "show" else "")) from None


def _report(path):
    """A reproduction's report when ``path`` holds one, else None."""
    try:
        d = load_json(pathlib.Path(path))
    except (OSError, errors.AlloclabError):
        return None  # load_result reports it
    fmt = d.get("format") if isinstance(d, dict) else None
    if fmt not in _REPORTS:
        return None
    cls = _REPORTS[fmt]
    try:
        return cls.from_json(pathlib.Path(path))
    except errors.AlloclabError as e:  # the report's own message, with the file it is about
        raise UsageError("%s: %s" % (path, e)) from None


def default_rows(wl, sweep):
    """The row parameter `run` picks: allocs_per_cycle where it is swept (or
    the workload has it and nothing is swept), else the first swept one,
    else a parameter other than the size."""
    names = [p.name for p in wl.params]
    swept = [n for n in names if len(sweep.get(n, [])) > 1]
    if "allocs_per_cycle" in swept or (not swept and "allocs_per_cycle" in names):
        return "allocs_per_cycle"
    if swept:
        return swept[0]
    others = [n for n in names if n != wl.size_param]
    return others[0] if others else (names[0] if names else None)


def _axes(res, args):
    """(rows, cols) for a saved result, each checked against its parameters."""
    params = res.params()
    for flag, key in (("--rows", args.rows), ("--cols", args.cols)):
        if key is not None and key.replace("-", "_") not in params:
            raise UsageError(str(errors.UnknownNameError.make(
                "parameter", key, params, context=flag)))
    cols = args.cols.replace("-", "_") if args.cols else "producers"
    if args.rows:
        return args.rows.replace("-", "_"), cols
    run = res.metadata.get("run") or {}
    wl = schema.workloads().get(run.get("workload"))
    if wl is not None and isinstance(run.get("sweep"), dict):
        rows = default_rows(wl, run["sweep"])
        if rows in params:
            return rows, cols
    swept = [k for k in res.swept() if k not in ("policy", "workload", cols)]
    return (swept[0] if swept else None), cols


def check_metrics(res, metrics):
    """UsageError unless each metric is the result's, naming the close
    matches, the base metrics it has and the layers whose counters it has;
    and each metric once."""
    cli_format.refuse_repeats(metrics, "--metric")
    for m in metrics:
        try:
            res._check_metric(m)
        except errors.UnknownNameError:
            raise UsageError(unknown_metric(res, m)) from None


def unknown_metric(res, metric):
    """The one-line refusal of ``metric`` for Result ``res``."""
    import difflib

    known = res.metrics()
    close = difflib.get_close_matches(metric, known, n=3, cutoff=0.6)
    base = [m for m in BASE_METRICS if m in known]
    layers = list(dict.fromkeys(m.split(".", 1)[0] for m in known
                                if "." in m and not m.startswith("wl.")))
    wl = [m for m in known if m.startswith("wl.")]
    layer = metric.split(".", 1)[0]
    if "." in metric and layer not in layers and layer in schema.layers():
        return ("metric %r counts layer %s, which is not in the result's policies; the "
                "layers whose counters it has: %s" % (errors.Echo(metric), layer,
                                                      ", ".join(layers) or "(none)"))
    msg = "unknown metric %r%s; valid metrics: %s" % (
        errors.Echo(metric), " (did you mean %s?)" % " or ".join(close) if close else "",
        ", ".join(base))
    if layers:
        msg += "; <layer>.<counter>[_per_op] for the layers %s (`alloclab list LAYER` lists " \
               "their counters)" % ", ".join(layers)
    if wl:
        msg += "; workload metrics: %s" % ", ".join(wl)
    return msg


def _saved_view(res):
    """metadata["view"]: the metrics and table axes `run` printed the result
    with (None for a file written otherwise, or one whose view is not that)."""
    v = res.metadata.get("view")
    if not isinstance(v, dict) or not isinstance(v.get("metrics"), list):
        return None
    if not v["metrics"] or not all(isinstance(m, str) for m in v["metrics"]):
        return None
    return v


def _saved_metrics(res, args):
    """(metrics, explicit): --metric's, else those `run` printed, else
    alloc_ns and free_ns where the result has them, else its first metric."""
    if args.metric:
        return args.metric, True
    v = _saved_view(res)
    if v is not None:
        return v["metrics"], bool(v.get("explicit"))
    default = [m for m in ("alloc_ns", "free_ns") if m in res.metrics()] or res.metrics()[:1]
    return default, False


def _saved_axes(res, args):
    """(rows, cols): _axes, with the axes `run` printed standing in for the
    --rows/--cols not given where they are parameters of the result."""
    v = _saved_view(res) or {}
    params = res.params()
    if args.rows is None and v.get("rows") in params:
        args.rows = v["rows"]
    if args.cols is None and v.get("cols") in params:
        args.cols = v["cols"]
    return _axes(res, args)


def _table_flags(args):
    """The table flags given (a report prints its own tables: they would be
    ignored, so they are refused)."""
    given = [f for f, v in (("--metric", args.metric), ("--rows", args.rows),
                            ("--cols", args.cols), ("--sd", args.sd), ("--ci", args.ci),
                            ("--stat", args.stat != "mean"),
                            ("--counters", args.counters != "key")) if v]
    if given:
        raise UsageError("%s: a reproduction's report prints its own tables; %s appl%s to "
                         "a result's (run --json)" % (args.file, " and ".join(given),
                                                      "ies" if len(given) == 1 else "y"))


def _rounds(args):
    """`show R1.json R2.json ...`: the goal across rounds of one reproduction."""
    paths = [args.file] + args.more
    for i, f in enumerate(paths):
        same = [g for g in paths[:i] if cli_format.same_file(g, f)]
        if same:
            raise UsageError("%s and %s are one file: each round is its own report" % (
                same[0], f))
    _table_flags(args)
    reps = [_report(f) for f in paths]
    for f, r in zip(paths, reps):
        if r is None:
            load_result(f, "show")  # names what is wrong with an unreadable file
            raise UsageError("%s is not a reproduction's report: several files are rounds of "
                             "one reproduction (reproduce ... --json)" % f)
        if not isinstance(r, reproduce_report.Report):
            raise UsageError("%s is a reproduction's %s, one file: only reports print as "
                             "rounds" % (f, r.FORMAT[len("alloclab-"):]))
        if r.FORMAT != reps[0].FORMAT:
            kind = [x.FORMAT[len("alloclab-"):-len("-report")] for x in (r, reps[0])]
            raise UsageError("rounds are reports of one reproduction: %s is from reproduce "
                             "%s, %s from reproduce %s" % (f, kind[0], args.file, kind[1]))
    if args.format != "text":
        raise UsageError("rounds print as text only, not %s" % args.format)
    print(reproduce_report.rounds_text(reps, [args.file] + args.more))
    return 0


def cmd_show(args):
    if args.more:
        return _rounds(args)
    rep = _report(args.file)
    if rep is not None:
        _table_flags(args)
        if args.format not in ("text", "json"):
            raise UsageError("%s is a reproduction's report: it prints as text or json, not %s"
                             % (args.file, args.format))
        print(rep.to_json() if args.format == "json" else rep)
        return 0
    res = load_result(args.file, "show")
    if not res.points:
        raise UsageError("%s holds no runs: nothing to show" % args.file)
    metrics, explicit = _saved_metrics(res, args)
    check_metrics(res, metrics)
    rows, cols = _saved_axes(res, args)
    view = cli_format.View(metrics, rows, cols, stat=args.stat, sd=args.sd, ci=args.ci,
                           hist=True, counters=args.counters, fmt=args.format,
                           explicit_metrics=explicit)
    print(cli_format.render(res, view))
    return 0
