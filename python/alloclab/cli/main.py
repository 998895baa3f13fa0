"""The alloclab command line: ``alloclab run WORKLOAD ...``, ``alloclab
check`` (the machine state that makes numbers noisy), ``alloclab preload``
and ``alloclab reproduce SEED``, and the dispatch to the other commands'
modules: cli_list (``list [NAME]``), cli_show (``show FILE``), cli_compare
(``compare``), cli_record, cli_trace. cli_format holds what they share: the
output formats (--format, --counters), the file checks and notices, the
error types; cli_quoting the hint for an unquoted '>' in --policy; the
progress bars are alloclab.progress (--progress / --no-progress).

The flags of ``alloclab run WORKLOAD`` are built from that workload's C
schema: every parameter becomes ``--dashed-name`` taking a comma-separated
list, so a parameter added in C appears here (and in ``--help``) at once.

Errors print ``alloclab: error: <message>`` on stderr and exit 2 (bad input)
or 1 (a run failed); never a traceback.

Flow of ``alloclab run``: the workload is found first among the words
(_find_workload; which options take a value is read from the run parser
itself), its schema then builds the full parser; the flags become run()'s
keyword arguments, and everything (the plan, metric names, table axes,
output files, a journal to resume) is checked before the first run starts,
so a typo costs milliseconds; then run() or sweep(), the tables (or the
--format output: stdout holds nothing else), the files, each announced on
stderr ("alloclab: wrote FILE").
The other commands parse with one argparse tree (_main_parser) and
dispatch in main(). SIGTERM and SIGHUP are raised as Ctrl-C is, so a run
in progress is stopped and its child processes reaped either way.
"""

import argparse
import math
import os
import sys
import textwrap

from . import (
    compare as cli_compare, format as cli_format, list as cli_list, quoting as cli_quoting,
    record as cli_record, show as cli_show, trace as cli_trace)
from . import libarena as cli_libarena
from .. import errors
from ..cbind import schema
from .._version import __version__
from .format import PROG, UsageError
from .format import Parser as _Parser
from .format import RunFailed as _RunFailed
from .format import err as _err
from .format import integer as _integer
from .format import real as _real
from .format import check_outputs as _check_outputs
from .format import split as _split
from .format import write_output as _write_output
from .format import wrote as _wrote
from ..policies.policy import Policy
from ..results.result import BASE_METRICS
from ..measure.run import (
    CPU_MODES, DEFAULT_STATS, MAX_SECONDS, MIN_PHASE_S, REPLAY_TIME_LIMIT, STATS_LEVEL_NAMES,
    TIMINGS, plan, run)
from ..policies import plugin
from ..traces.replay import IncompleteTraceWarning
from ..measure.sweep import sweep
from ..measure.run import adaptive_options
from ..measure.sweep import check_journal
from ..present import plot
from ..host import machine
from ..shim.preload import EXIT_ON_GLIBC
from ..shim.preload import EXIT_STALLED
from ..shim.preload import MIN_SHARE
from ..shim.preload import WATCHDOG
from ..shim import preload
from ..reproduce.vmalloc import TEST_BITS
from .. import reproduce
from ..reproduce.local_storage import other_maps_bounds

# The shortest measured phase `run --duration` takes without --force: a
# phase of a few microseconds (1e-9 was taken) times thread start-up, the
# phase's own deadline checks and a handful of operations, in the noise of
# the timer; pyperf's minimum, which the tables flag, is 100 ms.
MIN_PHASE_FORCE_S = 1e-3


def _int_list(name):
    def conv(text):
        out = []
        for s in _split(text):
            try:
                out.append(_integer(s))
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(
                    "%s takes integers (comma-separated), not %r"
                    % (name, errors.Echo(s))) from None
        return out
    return conv


def _choice_list(name, choices):
    def conv(text):
        out = _split(text)
        for s in out:
            if s not in choices:
                raise argparse.ArgumentTypeError(
                    "unknown %s %r; valid: %s" % (name, errors.Echo(s), ", ".join(choices)))
        return out
    return conv


def _duration(text):
    """Seconds (0.25, 1e-3) or a duration with a unit (250ms, 1s): a finite
    number from 0 to run.MAX_SECONDS (a command refuses 0 where it needs more)."""
    s = text.strip()
    try:
        v = _real(s)
    except argparse.ArgumentTypeError:
        v = None
    if v is not None:
        if not (math.isfinite(v) and 0 <= v <= MAX_SECONDS):
            raise argparse.ArgumentTypeError(
                "%r is not a duration: seconds from 0 to %g" % (errors.Echo(text), MAX_SECONDS))
        return v
    p = schema.Param(name="duration", type=schema.NS, default=0, min=0,
                     max=int(MAX_SECONDS * 1e9), choices=None, doc="")
    try:
        return p.parse_text(s) / 1e9
    except errors.AlloclabError:
        raise argparse.ArgumentTypeError(
            "duration takes seconds (0.25) or a duration (250ms, 1s), not %r"
            % errors.Echo(text)) from None


def _param_list(p):
    def conv(text):
        try:
            return [p.value(p.parse_text(s)) for s in _split(text)]
        except errors.AlloclabError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    conv.__name__ = p.name
    return conv


# ------------------------------------------------------------------ run

def _effort_flags(g):
    """--quick / --rigorous (pyperf's --fast / --rigorous): how much to measure."""
    e = g.add_mutually_exclusive_group()
    e.add_argument("--quick", dest="effort", action="store_const", const="quick",
                   default="normal", help="fewer and shorter runs: a rough answer fast")
    e.add_argument("--rigorous", dest="effort", action="store_const", const="rigorous",
                   help="more and longer runs: tighter intervals, more verdicts decided")


_METRICS_HELP = "\n".join(textwrap.wrap(
    "metrics (--metric NAME): %s; <layer>.<counter> and <layer>.<counter>_per_op for a layer "
    "of the policy (`alloclab list LAYER` lists its counters); wl.<name> for the workload's "
    "own; `alloclab list metrics` describes them" % ", ".join(BASE_METRICS), 78))


def _run_parser(wl):
    name = wl.name if wl else "WORKLOAD"
    desc = wl.doc if wl else "Run a workload; `alloclab run WORKLOAD --help` lists its flags."
    epilog = _METRICS_HELP if wl else "workloads: %s\n\n%s" % (
        ", ".join(schema.workloads()), _METRICS_HELP)
    p = _Parser(prog="%s run %s" % (PROG, name), description=desc,
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog)
    if not wl:
        p.add_argument("workload", help="one of: " + ", ".join(schema.workloads()))
    _run_flags(p.add_argument_group("run"), finite=bool(wl and "finite" in wl.flags))
    _output_flags(p.add_argument_group("output"))
    _run_measure_flags(p)
    if wl and wl.params:
        _workload_flags(p, wl)
    return p


def _run_flags(g, finite=False):
    """What `alloclab run` runs: plugins, policies, producers, runs, timing,
    CPU model, duration, effort, isolation, adaptive runs, seed. ``finite``:
    a workload that ends its own pass (replay), whose duration is a time
    limit and which takes no cycles or warmup."""
    g.add_argument("--plugin", action="append", metavar="FILE.c",
                   help="compile and register a C plugin layer first, repeatable")
    g.add_argument("--policy", action="append", metavar="SPEC",
                   help="policy spec or preset, repeatable (default: buddy); e.g. "
                        "'buddy(arena_limit=64M)'")
    g.add_argument("--producers", type=_int_list("producers"), default=None, metavar="N[,N...]",
                   help="worker threads (default: 1; replay: the trace's threads)")
    g.add_argument("--runs", type=_integer, default=None, metavar="N",
                   help="runs per grid point, each on a fresh allocator (default: 5; --quick "
                        "3, --rigorous 10)")
    g.add_argument("--timing", type=_choice_list("timing", list(TIMINGS)), default=None,
                   metavar="|".join(TIMINGS),
                   help="timing mode(s) (default: batch; per_op_sum with --hist)")
    g.add_argument("--cpu", type=_choice_list("cpu mode", list(CPU_MODES)), default=["auto"],
                   metavar="|".join(CPU_MODES), help="CPU model(s) (default: auto)")
    _stats_flag(g, "stats level(s), swept like --timing: lite counts every event (the "
                   "default), off nothing (counters n/a), full also times the locks (*_ns)")
    g.add_argument("--duration", type=_duration, default=None, metavar="SECONDS",
                   help="a time limit per run: a pass it cuts short is truncated (default: %g)"
                        % REPLAY_TIME_LIMIT if finite else
                        "measured phase per run when --cycles is not given (default: 0.25; "
                        "--quick 0.1, --rigorous 0.5); under %g ms it is refused unless "
                        "--force, under %g ms flagged under the tables"
                        % (1e3 * MIN_PHASE_FORCE_S, 1e3 * MIN_PHASE_S))
    if not finite:
        g.add_argument("--force", action="store_true",
                       help="run a measured phase shorter than %g ms (--duration): it "
                            "measures thread start-up and the timer, not the policy"
                            % (1e3 * MIN_PHASE_FORCE_S))
    g.add_argument("--cycles", type=_integer, default=None, metavar="N",
                   help="refused: a run is one pass of the work" if finite else
                        "measured cycles per worker (instead of --duration)")
    g.add_argument("--warmup-cycles", type=_integer, default=None, metavar="N",
                   help="none: a pass is measured from its first op" if finite else
                        "untimed cycles first (default: 100; --quick 50, --rigorous 200)")
    _effort_flags(g)
    g.add_argument("--processes", action="store_true",
                   help="run every run in a fresh process (its own heap and memory layout)")
    g.add_argument("--isolate", action="store_const", const=True, default=None,
                   help="run every run in a fresh child process that loads the plugins by path, "
                        "with the engine's pointer checks on their layers: a crashing plugin "
                        "fails its run, naming the layer and the signal (default when a policy "
                        "has a plugin layer)")
    g.add_argument("--no-isolate", dest="isolate", action="store_const", const=False,
                   help="run plugin layers in this process, unchecked (full speed; a crash in "
                        "a plugin ends alloclab)")
    g.add_argument("--target-ci", type=_real, default=None, metavar="FRACTION",
                   help="adaptive: add runs to cells whose 95%% CI is wider than this fraction "
                        "of the mean (e.g. 0.02), until --budget is spent")
    g.add_argument("--budget", type=_duration, default=60.0, metavar="SECONDS",
                   help="time budget of --target-ci (default: 60)")
    g.add_argument("--seed", type=_integer, default=1, metavar="N", help="PRNG seed (default: 1)")


def _stats_flag(g, what, sweep=True, hint=None):
    """--stats LEVEL (a comma-separated list when ``sweep``): what the layers
    count. ``hint(value)``: what an unknown level is told besides the valid
    ones, in `alloclab run`'s words ("" for nothing)."""
    levels = STATS_LEVEL_NAMES
    if sweep:
        kind = _choice_list("stats level", levels)
    elif hint:
        def kind(text):
            if text not in levels:
                more = hint(text)
                raise argparse.ArgumentTypeError("unknown stats level %r; valid: %s%s"
                                                 % (errors.Echo(text), ", ".join(levels),
                                                    "; " + more if more else ""))
            return text
    else:
        kind = None
    g.add_argument("--stats", type=kind, choices=None if sweep or hint else levels,
                   default=None, metavar="|".join(levels),
                   help="%s (default: %s)" % (what, DEFAULT_STATS))


def _output_flags(o):
    """What `alloclab run` prints and writes."""
    o.add_argument("--metric", action="append", metavar="NAME",
                   help="metric to tabulate, repeatable (default: alloc_ns and free_ns)")
    o.add_argument("--rows", metavar="PARAM", help="parameter for table rows")
    o.add_argument("--cols", metavar="PARAM", default="producers",
                   help="parameter for table columns (default: producers)")
    o.add_argument("--stat", default="mean", choices=["mean", "median", "min", "max"],
                   help="statistic over runs (default: mean)")
    o.add_argument("--sd", action="store_true", help="show the standard deviation in cells")
    o.add_argument("--json", metavar="FILE", help="write the full result as JSON")
    o.add_argument("--csv", metavar="FILE", help="write tidy rows (one per run) as CSV")
    cli_format.add_view_flags(o)
    _progress_flags(o)


def _progress_flags(o):
    """--progress / --no-progress (progress.py); neither: a bar on a terminal."""
    o.add_argument("--progress", action="store_const", const=True, default=None,
                   help="a progress bar on stderr from the start, even when stderr is not a "
                        "terminal (default: a bar on a terminal once the job lasts 2 s, "
                        "nothing when stderr is piped)")
    o.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                   help="no progress bar")


def _workload_flags(p, wl):
    """A --dashed-name flag per parameter of the workload's C schema, each
    taking a comma-separated list (swept)."""
    w = p.add_argument_group("%s parameters (comma-separated lists are swept)" % wl.name)
    for prm in wl.params:
        flag = "--" + prm.name.replace("_", "-")
        if wl.name == "replay" and prm.name == "trace":  # a file, not the C side's handle
            w.add_argument(flag, dest="w_trace", default=None, metavar="FILE",
                           help="the trace file to replay (written by `alloclab record`); "
                                "one pass per run, --duration is its time limit (default "
                                "%gs), the producers are its threads" % REPLAY_TIME_LIMIT)
            continue
        rng = "one of " + ", ".join(prm.choices or ()) if prm.type == schema.ENUM else \
            "%s..%s" % (prm.format(prm.min), prm.format(prm.max))
        w.add_argument(flag, dest="w_" + prm.name, type=_param_list(prm), default=None,
                       metavar=prm.type_name.upper(),
                       help="%s (%s; default: %s)" % (prm.doc, rng, prm.format(prm.default)))


def _takes_value(parser):
    """A predicate on a command-line word: does this option consume the word
    after it? Read from ``parser``'s own actions (a store_true, store_const
    or help action takes none, every other option one), so the answer
    follows the parser as flags are added. A word argparse would accept as
    an abbreviation (a unique prefix of a long option) is resolved as
    argparse resolves it. Another option takes a value when it names a
    parameter of some workload (those are parsed once the workload is
    known); for anything else the answer is None: unknown, left to argparse
    to refuse by name."""
    flags = {s: a.nargs != 0 for a in parser._actions for s in a.option_strings}
    wl_params = {"--" + p.name.replace("_", "-") for w in schema.workloads().values()
                 for p in w.params}

    def takes_value(word):
        if word in flags:
            return flags[word]
        matches = [s for s in flags if s.startswith("--") and s.startswith(word)]
        if matches:
            return any(flags[s] for s in matches)
        return True if word.replace("_", "-") in wl_params else None
    return takes_value


def _is_workload(word):
    table = schema.workloads()
    return any(w in table for w in (word, word.replace("_", "-"), word.replace("-", "_")))


def _find_workload(argv):
    """The first positional of `run`: the options that take a value are the
    generic run parser's (workload parameters all take one), so the workload
    may come before or after the flags."""
    takes_value = _takes_value(_run_parser(None))
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if a.startswith("-") and len(a) > 1:
            skip = "=" not in a and takes_value(a)
            if skip is None:  # an unknown option: its value, unless a workload comes next
                skip = i + 1 < len(argv) and not _is_workload(argv[i + 1])
            continue
        return a
    return None


def _load_plugins(argv):
    """Compile every --plugin FILE.c in argv (before policies are validated)."""

    files = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--plugin"]
    files += [a.split("=", 1)[1] for a in argv if a.startswith("--plugin=")]
    for f in files:
        try:
            plugin.compile_file(f, what="--plugin")
        except (errors.InvalidArgument, errors.FileFormatError) as e:
            raise UsageError(str(e)) from None  # the message names --plugin and the file
        except errors.AlloclabError as e:
            raise UsageError("--plugin %s: %s" % (f, e)) from None
        except OSError as e:
            raise UsageError("--plugin %s: cannot read it: %s" % (f, e.strerror or e)) from None
    return files


def cmd_run(argv):
    """`alloclab run`: parse, validate everything (exit 2 before any run),
    run or sweep, print the tables (or --format's output), write the files."""
    _load_plugins(argv)
    parsed = _parse_run(argv)
    if parsed is None:
        return 0
    wl, args = parsed
    if wl.name == "replay":
        _trace_warnings_as_lines()
    _check_phase(args)
    kwargs, policy, settings = _plan_run(wl, args)
    metrics = args.metric or ["alloc_ns", "free_ns"]
    _check_metric_names(metrics, policy)
    rows, cols = _table_axes(wl, args, settings)
    _check_run_outputs(args, settings)
    cli_quoting.hint(args.policy or [])
    # what the tables show, so that `alloclab show FILE` prints them again as here
    view = {"metrics": list(metrics), "explicit": bool(args.metric), "rows": rows, "cols": cols}
    try:
        res = _run_or_sweep(wl, policy, args, kwargs)
    except KeyboardInterrupt as e:
        _save_interrupted(e, args, view)
        raise
    cli_show.check_metrics(res, metrics)  # a workload metric is known only now
    res.metadata["view"] = view
    print(cli_format.render(res, cli_format.View(
        metrics, rows, cols, stat=args.stat, sd=args.sd, ci=args.ci, hist=args.hist,
        counters=args.counters, fmt=args.format, explicit_metrics=bool(args.metric))))
    sys.stdout.flush()
    if args.json:
        _write_output("--json", args.json, lambda: res.to_json(args.json, indent=1))
        _wrote(args.json)
    if args.csv:
        _write_output("--csv", args.csv, lambda: res.to_csv(args.csv))
        _wrote(args.csv)
    if args.journal:
        _wrote(args.journal)
    if args.plot:
        written = []
        _write_output("--plot", args.plot, lambda: written.extend(
            _save_run_plots(res, metrics[0], cols, args.plot, args.hist)))
        for path in written:
            _wrote(path)
    return 0


def _trace_warnings_as_lines():
    """A replayed trace cut short (alloclab.replay.IncompleteTraceWarning) is
    one `alloclab: warning:` line, once, not Python's warning text."""
    import warnings

    shown, seen = warnings.showwarning, set()

    def show(message, category, *rest, **kw):
        if not issubclass(category, IncompleteTraceWarning):
            return shown(message, category, *rest, **kw)
        if str(message) not in seen:
            seen.add(str(message))
            cli_format.warn(str(message))

    warnings.showwarning = show
    warnings.simplefilter("always", IncompleteTraceWarning)


def _check_phase(args):
    """A --duration shorter than MIN_PHASE_FORCE_S is refused unless --force
    (a workload that ends its own pass takes --duration as a time limit,
    and no --force)."""
    d = args.duration
    if getattr(args, "force", True) or d is None or not 0 < d < MIN_PHASE_FORCE_S:
        return
    raise UsageError("--duration %g s: a measured phase shorter than %g ms measures thread "
                     "start-up and the timer, not the policy (the tables flag phases under "
                     "%g ms); give a longer --duration or --cycles N, or --force to run it"
                     % (d, 1e3 * MIN_PHASE_FORCE_S, 1e3 * MIN_PHASE_S))


def _save_interrupted(e, args, view):
    """Ctrl-C (``e``) during `run --json FILE`: FILE gets the runs that
    finished (run() keeps them as e.partial, marked interrupted, which
    `show` says), and --csv FILE their rows; each is said on stderr, as is
    a file not written and why. A --journal holds every finished run
    already."""
    outs = [(f, p) for f, p in (("--json", args.json), ("--csv", args.csv)) if p]
    if not outs or args.journal is not None:
        return
    part = getattr(e, "partial", None)
    if part is None:
        sys.stderr.write("%s: no run had finished: %s not written\n"
                         % (PROG, " and ".join("%s %s" % o for o in outs)))
        return
    part.metadata["view"] = view
    it = part.metadata["interrupted"]
    for flag, path in outs:
        try:
            if flag == "--json":
                part.to_json(path, indent=1)
            else:
                part.to_csv(path)
        except (OSError, errors.AlloclabError) as err:
            sys.stderr.write("%s: %s %s not written: %s\n" % (
                PROG, flag, path, getattr(err, "strerror", None) or err))
            continue
        sys.stderr.write("%s: wrote %s: the %d of %d runs that finished before the interrupt%s\n"
                         % (PROG, path, it["runs_finished"], it["runs_planned"],
                            " (marked interrupted)" if flag == "--json" else ""))
    sys.stderr.flush()


def _plan_run(wl, args):
    """(run keyword arguments, [Policy], settings): every check of the run
    (exit 2 on error); a refused spec that looks like an unquoted '>' gets
    the quoting hint."""
    try:
        kwargs, policy = _run_kwargs(wl, args)
        settings, _ = plan(wl.name, policy, **kwargs)
    except errors.AlloclabError as e:
        hint = cli_quoting.hint_text(args.policy or [])
        if hint:
            raise UsageError("%s; %s" % (e, hint)) from None
        raise
    return kwargs, policy, settings


def _run_or_sweep(wl, policy, args, kwargs):
    """run() (or, with --journal, sweep()) as the flags ask; a failed run is
    _RunFailed (exit 1)."""
    try:
        if args.journal is not None:
            return sweep(wl.name, policy, journal=args.journal, progress=args.progress,
                         **kwargs)
        if args.target_ci is not None:
            kwargs.update(target_ci=args.target_ci, budget=args.budget)
        return run(wl.name, policy, progress=args.progress, **kwargs)
    except errors.AlloclabError as e:
        raise _RunFailed(str(e)) from None


def _parse_run(argv):
    """(workload schema, parsed args): the workload name is found first, then
    its flags are built from its schema. None when only help was asked for
    (printed)."""
    wl_name = _find_workload(argv)
    if wl_name is None:
        p = _run_parser(None)
        if any(a in ("-h", "--help") for a in argv):
            p.print_help()
            return None
        raise UsageError("run needs a workload: alloclab run WORKLOAD [flags]; workloads: %s"
                         % ", ".join(schema.workloads()))
    wl = schema.workload(wl_name)  # UnknownNameError listing the valid ones
    argv = list(argv)
    del argv[argv.index(wl_name)]
    return wl, _run_parser(wl).parse_args(argv)


def _run_kwargs(wl, args):
    """(keyword arguments of run()/sweep(), [Policy]) from the parsed flags."""
    params = {}
    for prm in wl.params:
        v = getattr(args, "w_" + prm.name)
        if v is not None:
            params[prm.name] = v
    kwargs = dict(runs=args.runs, producers=args.producers, cpu=args.cpu, timing=args.timing,
                  warmup_cycles=args.warmup_cycles, cycles=args.cycles, duration=args.duration,
                  seed=args.seed, effort=args.effort, processes=args.processes,
                  isolate=args.isolate, stats=args.stats or DEFAULT_STATS, **params)
    if args.hist:  # histograms time every operation: per_op_sum unless --timing says
        kwargs["histogram"] = True
    if args.watchdog is not None:
        kwargs["watchdog"] = args.watchdog
    if args.realtime:
        kwargs["realtime"] = True
    pols = args.policy or ["buddy"]
    return kwargs, [Policy(s) for s in pols]


def _check_metric_names(metrics, policy):
    """Every --metric is a base metric, a counter of a layer of the policy,
    or a workload metric (checked against the Result after the run)."""
    layer_names = {n for pol in policy for n in pol.names}
    for m in metrics:
        layer = m.split(".", 1)[0]
        if "." in m and layer not in layer_names and layer in schema.layers():
            # a real layer's counter, on policies without that layer
            raise UsageError(
                "metric %r counts layer %s, which is not in the polic%s (%s); %s layers: %s"
                % (errors.Echo(m), layer, "ies" if len(policy) > 1 else "y",
                   "; ".join(str(errors.Echo(str(pol))) for pol in policy),
                   "their" if len(policy) > 1 else "its",
                   ", ".join(sorted(layer_names))))
        if m not in BASE_METRICS and m.split(".", 1)[0] not in layer_names and \
                not m.startswith("wl."):
            raise UsageError(
                "unknown metric %r; valid metrics: %s, <layer>.<counter>[_per_op] for a "
                "layer of the policy (%s), or wl.<name> for a workload metric"
                % (errors.Echo(m), ", ".join(BASE_METRICS), ", ".join(sorted(layer_names))))


def _table_axes(wl, args, settings):
    """(rows, cols) parameters of the printed tables, checked."""
    keys = ["policy"] + [p.name for p in wl.params] + ["producers", "timing", "cpu", "stats"]
    for flag, key in (("--rows", args.rows), ("--cols", args.cols)):
        if key is not None and key.replace("-", "_") not in keys:
            raise UsageError(str(errors.UnknownNameError.make(
                "parameter", key, keys, context=flag)))
    rows = args.rows.replace("-", "_") if args.rows else cli_show.default_rows(
        wl, settings["sweep"])
    return rows, args.cols.replace("-", "_")


def _check_run_outputs(args, settings):
    """--journal and --target-ci together are refused; the adaptive options,
    every output file and a journal to resume are checked before any run."""
    if args.journal is not None and args.target_ci is not None:
        raise UsageError("--target-ci adds runs as it goes and --journal resumes a fixed "
                         "grid: use one or the other")
    if args.target_ci is not None:
        adaptive_options(args.target_ci, args.budget)
    _check_outputs(("--json", args.json, "file"), ("--csv", args.csv, "file"),
                   ("--plot", args.plot, "plot"), ("--journal", args.journal, "journal"),
                   *[("--plot", p, "plot") for p in _more_plots(args.plot, args.hist)])
    if args.journal is not None:  # a file not this sweep's journal is refused unwritten
        check_journal(args.journal, settings)


# ------------------------------------------------------------------ measurement

def _run_measure_flags(p):
    g = p.add_argument_group("measurement")
    g.add_argument("--hist", action="store_true",
                   help="per-operation latency histograms: p50/p90/p99/p99.9/max per point "
                        "(times every operation: implies --timing per_op_sum)")
    g.add_argument("--watchdog", type=_real, metavar="SECONDS",
                   help="end a run whose workers make no progress for this long (default 30; "
                        "0 = never)")
    g.add_argument("--realtime", action="store_true",
                   help="run the workers SCHED_FIFO, as the kernel's arena lock holders run "
                        "with preemption off (fewer producers than CPUs; needs CAP_SYS_NICE "
                        "or ulimit -r >= 1)")
    g.add_argument("--ci", action="store_true",
                   help="show the 95%% confidence interval of the mean in cells (±half width)")
    g.add_argument("--plot", metavar="FILE",
                   help="write the first metric against the columns' parameter, a line per "
                        "policy (PNG/PDF/SVG by extension; with --hist also FILE-1: the "
                        "latency histograms)")
    g.add_argument("--journal", metavar="FILE.jsonl",
                   help="run as a resumable sweep: every finished run is appended to FILE; "
                        "rerunning the same command skips what is there (policies interleaved "
                        "in a seeded random order)")


def _more_plots(path, hist):
    """The other files --plot writes with --hist (plot.save names them
    FILE-1.ext, FILE-2.ext), or none. A PDF holds every figure."""
    if not path or not hist or path.endswith(".pdf"):
        return []
    base, ext = cli_format.plot_stem(path)
    return ["%s-%d.%s" % (base, i, ext) for i in (1, 2)]


def _save_run_plots(res, metric, x, path, hist):
    import matplotlib
    matplotlib.use("Agg")

    xs = x if x in res.params() else "producers"
    figs = [plot.latency(res, metric, x=xs, hue="policy")]
    if hist:
        figs.append(plot.latency_hist(res, "alloc"))
        if any(h.count for p in res.points for h in p.hist.get("free", ())):
            figs.append(plot.latency_hist(res, "free"))
    return cli_format.save_plots(figs, path)


def cmd_check(args):

    print(machine.check_json() if args.json else machine.check_text())
    return 0


# ------------------------------------------------------------------ main

def _main_parser():
    p = _Parser(prog=PROG, description="alloclab: kernel-style allocator policies in user space",
                epilog="`alloclab run WORKLOAD --help` lists a workload's flags.")
    p.add_argument("--version", action="version", version="%(prog)s " + __version__)
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND")
    cli_list.add_parser(sub)
    sub.add_parser("run", help="run a workload on one or more policies", add_help=False)
    cli_show.add_parser(sub)
    cli_compare.add_parser(sub)
    cli_libarena.add_parser(sub)
    ck = sub.add_parser(
        "check", help="the machine state that makes numbers noisy, and what to change",
        description="Print what /sys and /proc say about the CPU frequency governor, turbo "
                    "boost, SMT, isolated CPUs, ASLR, the load average, a hypervisor and more, "
                    "and for each problem what to change (as pyperf's `system show`).")
    ck.add_argument("--json", action="store_true", help="the state and advice as JSON")
    _preload_parser(sub)
    rp = sub.add_parser("reproduce", help="rerun a seed discussion's experiment")
    rsub = rp.add_subparsers(dest="seed", metavar="SEED")
    _libarena_parser(rsub)
    _vmalloc_parser(rsub)
    _local_storage_parser(rsub)
    rp.set_defaults(seed=None, seeds=tuple(rsub.choices))  # named when none is given
    cli_record.add_parser(sub)
    cli_trace.add_parser(sub)
    return p


def _stats_file_hint(text):
    """Where a --stats value that looks like a file (a '/' or '.' in it, or
    a file of that name here) is sent: --stats FILE was the old spelling of
    --json FILE. A typo such as OFF gets no hint."""
    if "/" in text or "." in text or os.path.isfile(text):
        return "the counters record file is now --json FILE"
    return ""


def _preload_parser(sub):
    """`alloclab preload`: its flags and the command after --."""

    pp = sub.add_parser(
        "preload", help="run a program with its malloc on a policy (LD_PRELOAD shim)",
        description="Run CMD with malloc, free, calloc, realloc, posix_memalign, ... routed "
                    "through a policy stack, in CMD and every process it starts; run python3 "
                    "with PYTHONMALLOC=malloc, or pymalloc hides most of its allocations. "
                    "Exits with CMD's status, or %d when a process ran on glibc: the policy "
                    "was not built there, or it served less than %g%% of the allocations "
                    "(fallbacks by design, such as requests above its max size, excepted); "
                    "%d when the watchdog ended it; 128+N when signal N ended it."
                    % (EXIT_ON_GLIBC, 100 * MIN_SHARE, EXIT_STALLED),
        usage="alloclab preload [--policy SPEC] [--plugin FILE.c] [--json FILE] [--stats LEVEL] "
              "[--watchdog SECONDS] [--allow-glibc] [--verbose] -- CMD [ARGS...]")
    pp.add_argument("--policy", default="libarena-transfer", metavar="SPEC",
                    help="policy spec or preset (default libarena-transfer)")
    pp.add_argument("--plugin", metavar="FILE.c",
                    help="a C plugin layer to compile into the shim (and register here)")
    pp.add_argument("--json", metavar="FILE",
                    help="write every process's counters (the policy's and the shim's) and "
                         "their sum as JSON when CMD ends")
    _stats_flag(pp, "what the policy's layers count in the shim: lite (every event), off "
                    "(nothing: the layers' counters are not measured, the shim's own are "
                    "kept) or full (also lock hold and wait times, *_ns)", sweep=False,
                hint=_stats_file_hint)
    pp.add_argument("--watchdog", type=float, default=WATCHDOG, metavar="SECONDS",
                    help="end CMD when a policy call in any of its processes makes no "
                         "progress for this long (default %g; 0 = never): one error line, "
                         "exit %d" % (WATCHDOG, EXIT_STALLED))
    pp.add_argument("--allow-glibc", action="store_true",
                    help="exit with CMD's status even when processes ran on glibc (the "
                         "stats say so)")
    pp.add_argument("--verbose", action="store_true",
                    help="the shim reports on stderr in each process, and a summary follows")
    pp.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")


def _libarena_parser(rsub):
    """`alloclab reproduce libarena`: seed 000's grid and outputs."""
    lib_p = rsub.add_parser(
        "libarena", help="seed 000: spill vs transfer cache in front of libarena's buddy",
        description="Seed 000: per-CPU caches in front of libarena's buddy, 'spill' vs "
                    "'transfer cache' (plus plain buddy), on libarena-malloc-free and "
                    "libarena-malloc-xfree, printed in the seed's layout with the counters "
                    "that explain it and the seed's conclusions judged on this data "
                    "(holds / does not hold / inconclusive, with the reason).")
    lib_p.add_argument("--producers", type=_int_list("--producers"), default=[1, 2, 4, 8],
                       help="comma-separated (default 1,2,4,8)")
    lib_p.add_argument("--allocs-per-cycle", type=_int_list("--allocs-per-cycle"),
                       default=None, help="comma-separated (default 1,4,16,64,256; --quick "
                                          "4,64,256)")
    lib_p.add_argument("--size", type=_int_list("--size"), default=[64],
                       help="object size in bytes (default 64)")
    lib_p.add_argument("--runs", type=_integer, default=None,
                       help="runs per cell (default 5, --quick 3, --rigorous 10; virtual-CPU "
                            "cells, judged on counters, at most half, at least 3)")
    lib_p.add_argument("--timing", type=_choice_list("timing", list(TIMINGS)),
                       default=["per_op_sum"],
                       help="per_op_sum (as the seed's bench, the default) and/or batch")
    _stats_flag(lib_p, "what the layers count: lite (every event), off (nothing: the "
                       "counters n/a) or full (also lock times: the wait ns/op rows)",
                sweep=False)
    lib_p.add_argument("--workloads", type=_choice_list("workload", ["malloc-free",
                                                                     "malloc-xfree"]),
                       default=["malloc-free", "malloc-xfree"])
    lib_p.add_argument("--duration", type=_duration, default=None,
                       help="measured phase per run (default 0.1 s, --quick 0.05 s, "
                            "--rigorous 0.5 s)")
    _effort_flags(lib_p)
    lib_p.add_argument("--no-baseline", action="store_true",
                       help="leave out the plain buddy ('no cache') column")
    lib_p.add_argument("--json", metavar="FILE", help="write the report's data as JSON")
    lib_p.add_argument("--plot", metavar="FILE",
                       help="write alloc and free latency plots (PNG/PDF/SVG by extension)")
    _progress_flags(lib_p)


def _preload_shim(args):
    """The shim with --plugin compiled in, or None for the stock one."""
    if args.plugin == "":  # main() compiles the plugins it is given, and skips ''
        raise UsageError("cannot read the --plugin file '': the name is empty")
    if not args.plugin:
        return None

    try:
        return plugin.preload_shim(args.plugin)
    except errors.AlloclabError as e:
        raise UsageError("--plugin %s: %s" % (args.plugin, e)) from None


def cmd_preload(args):
    import threading


    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise UsageError("preload needs a command: alloclab preload --policy SPEC -- CMD ...")
    shim = _preload_shim(args)
    # Everything that can be wrong is found before CMD starts: the spec, the
    # stack, the shim, the --json file (an empty name, a path that cannot be
    # written, a directory, a socket, a named pipe with no reader: its open would wait).
    preload.command(args.policy, cmd, shim=shim, level=args.stats)
    preload.check_watchdog(args.watchdog)
    if args.json is not None:
        preload.check_stats_path(args.json, what="--json file")
    sys.stdout.flush()
    # Signals sent to this process go on to CMD (a terminal's ^C reaches it
    # directly, as it would if CMD ran alone); CMD's stats are written once
    # it is gone, and its status is this process's.
    try:
        proc = preload.run(args.policy, cmd, allow_glibc=args.allow_glibc,
                           shim=shim, verbose=args.verbose, level=args.stats,
                           watchdog=args.watchdog,
                           forward_signals=threading.current_thread() is threading.main_thread())
    except errors.RunError as e:
        proc = e.proc
    except OSError as e:
        if e.filename != cmd[0]:
            raise  # not the exec of CMD: reported as such
        # As env(1) and timeout(1): 127 when CMD is not found, 126 when it is
        # found but cannot be run.
        _err("cannot run %s: %s" % (cmd[0], e.strerror or e))
        return 127 if isinstance(e, FileNotFoundError) else 126
    return _preload_end(args, proc)


def _preload_end(args, proc):
    """After CMD: write --json, then the exit status, with one error line
    when the watchdog, a signal no user sent or glibc ended or served it."""

    st = proc.stats
    if args.json is not None:
        # Checked before CMD started, yet the write can still fail (a full
        # disk, the directory gone): one line naming the file and what CMD's
        # status was, which this exit status no longer carries.
        try:
            preload.write_stats(args.json, st)
        except OSError as e:
            _err("cannot write the --json file %s: %s (%s; its counters record is lost)"
                 % (args.json, e.strerror or e, preload.status_text(proc.returncode)))
            return 2
    if args.verbose:
        sys.stderr.write("%s: %s\n" % (PROG, preload.summary(st)))
    if st["stalled"]:
        _err(st["stalled"])
        return preload.EXIT_STALLED
    killed = preload.signal_error(st, proc.returncode, args.plugin)
    if killed:
        _err(killed)
        return 128 - proc.returncode
    if st["on_glibc"] and not args.allow_glibc:
        _err(preload.glibc_error(st, proc.returncode))
        return preload.EXIT_ON_GLIBC
    rc = proc.returncode
    return 128 - rc if rc < 0 else rc


# ------------------------------------------------------------------ reproduce vmalloc

def _emit_report(make, args):
    """Run a reproduction, print it, and write --json and --plot (each file
    written is announced on stderr); both are checked before it runs."""
    _check_outputs(("--json", args.json, "file"), ("--plot", args.plot, "plot"))
    try:
        rep = make()
    except errors.AlloclabError as e:
        if isinstance(e, (errors.AllocatorExhausted, errors.RunError)):
            raise _RunFailed(str(e)) from None
        raise
    print(rep)
    if args.json:
        _write_output("--json", args.json, lambda: rep.to_json(args.json))
        _wrote(args.json)
    if args.plot:
        written = []
        _write_output("--plot", args.plot, lambda: written.extend(rep.save_figures(args.plot)))
        for path in written:
            _wrote(path)
    return 0


def _vmalloc_parser(rsub):
    """`alloclab reproduce vmalloc` (seed 004)."""

    p = rsub.add_parser(
        "vmalloc", help="seed 004: vmalloc high-order allocation and bulk vfree (test_vmalloc)",
        description="Seed 004: test_vmalloc under v6.18 (vmalloc-default), 6-19-0-rc1 "
                    "(vmalloc-large) and vfree-high-order (vmalloc-large-bulkfree) (with "
                    "--pcp-first also the thread's pcp-first suggestion), normalised to v6.18 "
                    "in the seed's table "
                    "(positive = improvement, (R)/(I) where significant), then Uladzislau "
                    "Rezki's 3- and 100-page comparison, the counters that explain it and "
                    "the seed's conclusions judged on this data.")
    p.add_argument("--scale", type=_real, default=None,
                   help="loops = the seed's loops x SCALE (default: calibrated per row so "
                        "that each run lasts --min-time)")
    p.add_argument("--min-time", type=_duration, default=None, metavar="SECONDS",
                   help="each run's measured phase at least (default 0.1 s, --quick 0.05 s, "
                        "--rigorous 0.25 s)")
    p.add_argument("--runs", type=_integer, default=None,
                   help="runs per cell (default 5, --quick 3, --rigorous 10)")
    _effort_flags(p)
    p.add_argument("--threads", type=_integer, default=1,
                   help="test_vmalloc workers, nr_threads (default 1)")
    p.add_argument("--arch", choices=["arm64", "x86"], default="arm64",
                   help="page-table geometry (default arm64, the seed's machine)")
    p.add_argument("--cpus", type=_integer, default=64,
                   help="CPUs the modelled machine splits its PCP high across (default 64; "
                        "0 = the threads)")
    p.add_argument("--tests", type=_choice_list("test", list(TEST_BITS)), default=None,
                   help="only these tests (comma-separated)")
    pc = p.add_mutually_exclusive_group()
    pc.add_argument("--pcp-first", dest="pcp_first", action="store_true", default=False,
                    help="add the thread's pcp-first suggestion as a column (not in the seed's "
                         "table; about a third more time)")
    pc.add_argument("--no-pcp-first", dest="pcp_first", action="store_false",
                    help="leave out the pcp-first column (the default)")
    p.add_argument("--no-rezki", action="store_true",
                   help="leave out the 3- and 100-page comparison")
    p.add_argument("--json", metavar="FILE", help="write the report's data as JSON")
    p.add_argument("--plot", metavar="FILE",
                   help="write the change plot (PNG/PDF/SVG by extension; a second file "
                        "'-sizes' holds ns per loop against nr_pages)")
    _progress_flags(p)
    return p


def cmd_reproduce_vmalloc(args):

    if args.scale is not None and not args.scale > 0:
        raise UsageError("--scale=%r: a positive fraction of the seed's loops" % args.scale)
    if args.runs is not None and args.runs < 2:
        raise UsageError("--runs=%d: significance needs at least 2 runs per cell" % args.runs)
    if args.threads < 1:
        raise UsageError("--threads=%d: at least 1" % args.threads)
    if args.cpus < 0:
        raise UsageError("--cpus=%d: 0 or more" % args.cpus)
    if args.min_time is not None and not args.min_time > 0:
        raise UsageError("--min-time=%r: a positive number of seconds" % args.min_time)
    return _emit_report(
        lambda: reproduce.vmalloc(scale=args.scale, runs=args.runs, threads=args.threads,
                                arch=args.arch, cpus=args.cpus,
                                  pcp_first=args.pcp_first, tests=args.tests,
                                  rezki=not args.no_rezki, effort=args.effort,
                                  min_time=args.min_time, progress=args.progress),
        args)


def _local_storage_parser(rsub):
    """`alloclab reproduce local-storage` (seed 003)."""
    ls = rsub.add_parser(
        "local-storage", help="seed 003: BPF local storage, kzalloc/bpf_ma vs kmalloc_nolock",
        description="Seed 003: bench local-storage-create before and after BPF local storage "
                    "switched to kmalloc_nolock() (socket: kzalloc vs kmalloc_nolock; task: "
                    "the BPF memory allocator vs kmalloc_nolock), creation speed ± sd and "
                    "kmallocs per create at each batch size, in the seed's layout next to the "
                    "seed's numbers, with the counters that explain the differences and whether "
                    "the seed's direction holds here.")
    ls.add_argument("--storage-types", type=_choice_list("storage type", ["socket", "task"]),
                    default=["socket", "task"], help="comma-separated (default socket,task)")
    ls.add_argument("--batch-sizes", type=_int_list("--batch-sizes"), default=[16, 32, 64],
                    help="comma-separated (default 16,32,64)")
    ls.add_argument("--runs", type=_integer, default=None,
                    help="runs per cell (default 12, --quick 6, --rigorous 30: many short runs, "
                         "as runs of one era differ however long they last); the table's sd "
                         "pools the samples within runs and the runs' spread")
    ls.add_argument("--duration", type=_duration, default=None,
                    help="measured phase per run (default 0.2 s, --quick 0.1 s, --rigorous "
                         "0.3 s; whole --sample lengths count)")
    ls.add_argument("--sample", type=_duration, default=0.1,
                    help="length of one creates/s sample (default 0.1 s; the bench: 1 s)")
    _effort_flags(ls)
    ls.add_argument("--owner-work", choices=["real", "none"], default="real",
                    help="real sockets/threads per owner as the bench (default), or none: the "
                         "allocators alone")
    ls.add_argument("--no-alone", dest="alone", action="store_false",
                    help="with real owners, skip the short runs of the storage path alone "
                         "(owner_work=none) that the report sets against the seed's change "
                         "per create")
    ls.add_argument("--other-maps", type=_integer, default=None, metavar="N",
                    help="other socket-storage maps whose programs give every socket an "
                         "element too (default 1: the seed's machine ran such a service, its "
                         "author said; 0: the bench alone)")
    ls.add_argument("--producers", type=_integer, default=1, help="producers (default 1, as -p 1)")
    ls.add_argument("--gp-latency", type=_duration, default=0.0,
                    help="minimum grace period (default 0: the next quiescent point)")
    ls.add_argument("--rcu-nocb", action="store_true",
                    help="RCU callbacks run on the next producer's CPU (needs 2+ producers)")
    ls.add_argument("--json", metavar="FILE", help="write the report's data as JSON")
    ls.add_argument("--plot", metavar="FILE",
                    help="write creation-speed and kmallocs plots (PNG/PDF/SVG by extension)")
    _progress_flags(ls)


def cmd_reproduce_local_storage(args):

    if (args.runs is not None and args.runs < 1) or args.producers < 1:
        raise UsageError("--runs and --producers must be at least 1")
    lo, hi = other_maps_bounds()
    if args.other_maps is not None and not lo <= args.other_maps <= hi:
        raise UsageError("--other-maps=%d: a number of maps from %d to %d"
                         % (args.other_maps, lo, hi))
    if args.other_maps and "socket" not in args.storage_types:
        raise UsageError("--other-maps=%d gives sockets elements of other maps, but "
                         "--storage-types=%s runs no socket storage; add socket"
                         % (args.other_maps, ",".join(args.storage_types)))
    for flag, v in (("--duration", args.duration), ("--sample", args.sample)):
        if v is not None and not v > 0:
            raise UsageError("%s=%r: a positive number of seconds" % (flag, v))
    return _emit_report(
        lambda: reproduce.local_storage(storage_types=args.storage_types,
                                      batch_sizes=args.batch_sizes, runs=args.runs,
                                      duration=args.duration, sample=args.sample,
                                      owner_work=args.owner_work, producers=args.producers,
                                      gp_latency=int(round(args.gp_latency * 1e9)),
                                        rcu_nocb=args.rcu_nocb, effort=args.effort,
                                        progress=args.progress,
                                        alone=args.alone and args.owner_work == "real",
                                        other_maps=None if args.other_maps is None else
                                        {"socket": args.other_maps, "task": 0}),
        args)


def cmd_reproduce(args, parser):

    if args.seed == "vmalloc":
        return cmd_reproduce_vmalloc(args)
    if args.seed == "local-storage":
        return cmd_reproduce_local_storage(args)
    if args.seed != "libarena":  # argparse refuses an unknown seed; this is none given
        raise UsageError("reproduce needs a seed: alloclab reproduce SEED [flags]; seeds: %s "
                         "(`alloclab reproduce SEED --help` describes one)"
                         % ", ".join(args.seeds))
    if len(args.size) != 1:
        raise UsageError("--size takes one size for a reproduction, not %r" % (args.size,))
    return _emit_report(
        lambda: reproduce.libarena(producers=args.producers,
                                 allocs_per_cycle=args.allocs_per_cycle, runs=args.runs,
                                 size=args.size[0], timings=args.timing,
                                 workloads=args.workloads, duration=args.duration,
                                   baseline=not args.no_baseline, effort=args.effort,
                                   progress=args.progress, stats=args.stats or DEFAULT_STATS),
        args)


class _Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's KeyboardInterrupt would be, so
    that a run in progress is stopped and its child processes are killed
    and reaped the same way (the default action would end this process and
    leave them running)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    raise _Terminated(signum)


def _terminate_like_ctrl_c():
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for s in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) == signal.SIG_DFL:
            signal.signal(s, _raise_terminated)


def main(argv=None):
    stdout = sys.stdout
    sys.stdout = cli_format.NamedStdout(stdout)  # a failed write names stdout
    try:
        return _main(argv)
    finally:
        if sys.stdout.__class__ is cli_format.NamedStdout:
            sys.stdout = stdout


def _main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv or argv[0] != "preload":  # preload forwards signals to its program
            _terminate_like_ctrl_c()
        if argv and argv[0] == "run":
            return cmd_run(argv[1:])
        p = _main_parser()
        args = p.parse_args(argv)
        if args.cmd in ("list", "preload") and args.plugin:
            for f in ([args.plugin] if isinstance(args.plugin, str) else args.plugin):
                _load_plugins(["--plugin", f])
        if args.cmd == "list":
            return cli_list.cmd_list(args)
        if args.cmd == "show":
            return cli_show.cmd_show(args)
        if args.cmd == "preload":
            return cmd_preload(args)
        if args.cmd == "reproduce":
            return cmd_reproduce(args, p)
        if args.cmd == "compare":
            return cli_compare.cmd_compare(args)
        if args.cmd == "check":
            return cmd_check(args)
        if args.cmd == "record":
            return cli_record.cmd_record(args)
        if args.cmd == "trace":
            return cli_trace.cmd_trace(args)
        if args.cmd == "libarena":
            return cli_libarena.cmd_libarena(args)
        p.print_help()
        return 0 if not argv else 2
    except (UsageError, errors.AlloclabError, argparse.ArgumentError) as e:
        _err(str(e))
        return 2
    except _RunFailed as e:
        _err(str(e))
        return 1
    except KeyboardInterrupt as e:  # the run in progress was stopped and torn down
        import signal

        signum = getattr(e, "signum", signal.SIGINT)
        sys.stderr.write("%s: %s\n" % (PROG, "interrupted" if signum == signal.SIGINT else
                                        "terminated (%s)" % signal.Signals(signum).name))
        sys.stderr.flush()
        return 128 + signum
    except BrokenPipeError:
        return 1
    except OSError as e:
        _err(cli_format.os_error_text(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
