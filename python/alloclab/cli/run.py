"""`alloclab run WORKLOAD ...`: its parser built from the workload's C
schema, its checks before anything runs, and what it prints and writes.

The flags of``alloclab run WORKLOAD`` are built from that workload's C
schema: every parameter becomes ``--dashed-name`` taking a comma-separated
list, so a parameter added in C appears here (and in ``--help``) at once.

Errors print ``alloclab: error: <message>`` on stderr and exit 2 (bad input)
or 1 (a run failed); never a traceback.

Flow of ``alloclab run``: the workload is found first among the words
(find_workload; which options take a value is read from the run parser
itself), its schema then builds the full parser; the flags become run()'s
keyword arguments, and everything (the plan, metric names, table axes,
output files, a journal to resume) is checked before the first run starts,
so a typo costs milliseconds; then run() or sweep(), the tables (or the
--format output: stdout holds nothing else), the files, each announced on
stderr ("alloclab: wrote FILE").

The quoting hint lives here too, run being its only caller: an unquoted
``--policy percpu > transfer`` is a shell redirection, not a stack.

The shell runs ``alloclab run malloc-free --policy percpu > transfer`` as
``--policy percpu`` with stdout written into a new file ``transfer`` (and
``> a > b`` creates both files, stdout going to the last). alloclab sees
only the spec ``percpu``, which needs a layer below; the tables vanish
into the file. Detection: the files in the current directory named like a
layer or a preset, modified in the last FRESH_S seconds (the shell created
or truncated them just before starting alloclab), counted only when the
policy spec ends in a layer that needs a layer below, or when stdout is
one of them (a spec that runs by itself, its output lost in the file). The
hint names the quoted form, the files in the order the shell made them.

Cost: one directory listing of names the registry knows, at startup of
`run` only.
"""

import argparse
import json
import os
import sys
import textwrap
import time

from . import format as cli_format, show as cli_show
from .. import errors
from ..cbind import schema
from .format import PROG, UsageError
from .format import Parser as _Parser
from .format import RunFailed as _RunFailed
from .format import integer as _integer
from .format import real as _real
from .format import check_outputs as _check_outputs
from .format import write_output as _write_output
from .format import wrote as _wrote
from ..policies.policy import Policy
from ..results.result import BASE_METRICS
from ..results.hist import METRIC_NAMES as HIST_METRICS
from ..measure.run import (
    CPU_MODES, DEFAULT_STATS, MIN_PHASE_S, REPLAY_TIME_LIMIT, TIMINGS, plan, run)
from ..policies import plugin
from ..traces.replay import IncompleteTraceWarning
from ..measure.sim import SuspectCalibrationWarning, UncalibratedPolicyWarning
from ..measure.sim import UnmodelledLocksWarning
from ..measure.run import DuplicatePolicyWarning
from ..measure.sweep import sweep
from ..measure.run import adaptive_options
from ..measure.sweep import check_journal
from ..present import plot
from .flags import (
    choice_list, duration_arg, effort_flags, int_list, output_flags, param_list, sim_flags,
    sim_kwargs, stats_flag)
from ..judge import mva as _mva
from ..present import timeline as _timeline
from ..results import simulated as _simulated
from ..policies.policy import presets


# ---------------------------------------------------------------- the quoting hint

FRESH_S = 60.0


def _fresh_files():
    """Files in the cwd named like a layer or preset, freshly written, oldest first."""
    now = time.time()
    out = []
    for name in list(schema.layers()) + list(presets):
        try:
            st = os.stat(name)
        except OSError:
            continue
        if os.path.isfile(name) and now - st.st_mtime <= FRESH_S and name not in \
                [n for n, _ in out]:
            out.append((name, st))
    return sorted(out, key=lambda x: x[1].st_mtime_ns)


def _needs_below(spec):
    """Whether the last '>'-part of ``spec`` is a layer that needs one below."""
    last = spec.split(">")[-1].strip().split("(", 1)[0].strip()
    s = schema.layers().get(last)
    return bool(s is not None and s.needs_backend)


def _is_stdout(st):
    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) == (st.st_dev, st.st_ino)


def hint_text(specs):
    """The hint for ``specs`` (the --policy values) in this cwd, or ""."""
    files = _fresh_files()
    if not files:
        return ""
    for spec in specs:
        if _needs_below(spec) or any(_is_stdout(st) for _, st in files):
            chain = " > ".join([spec.strip()] + [n for n, _ in files])
            return ("'>' in an unquoted --policy is a shell redirection: stdout went into "
                    "the file%s %s; quote the spec: --policy '%s'" % (
                        "s" if len(files) > 1 else "",
                        ", ".join("./" + n for n, _ in files), chain))
    return ""


def hint(specs):
    """Warn on stderr when the run's stdout went into a file named like a layer."""
    text = hint_text(specs)
    if text:
        sys.stderr.write("alloclab: warning: %s\n" % text)
        sys.stderr.flush()


# ---------------------------------------------------------------- run


# The shortest measured phase `run --duration` takes without --force: a
# phase of a few microseconds (1e-9 was taken) times thread start-up, the
# phase's own deadline checks and a handful of operations, in the noise of
# the timer; pyperf's minimum, which the tables flag, is 100 ms.
MIN_PHASE_FORCE_S = 1e-3


METRICS_HELP = "\n".join(textwrap.wrap(
    "metrics (--metric NAME): %s; <layer>.<counter> and <layer>.<counter>_per_op for a layer "
    "of the policy (`alloclab list LAYER` lists its counters); wl.<name> for the workload's "
    "own; `alloclab list metrics` describes them" % ", ".join(BASE_METRICS), 78))


def run_parser(wl):
    name = wl.name if wl else "WORKLOAD"
    desc = wl.doc if wl else "Run a workload; `alloclab run WORKLOAD --help` lists its flags."
    epilog = METRICS_HELP if wl else "workloads: %s\n\n%s" % (
        ", ".join(schema.workloads()), METRICS_HELP)
    p = _Parser(prog="%s run %s" % (PROG, name), description=desc,
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=epilog)
    if not wl:
        p.add_argument("workload", help="one of: " + ", ".join(schema.workloads()))
    run_flags(p.add_argument_group("run"), finite=bool(wl and "finite" in wl.flags))
    output_flags(p.add_argument_group("output"))
    run_measure_flags(p)
    sim_flags(p.add_argument_group("simulated CPUs (--cpu simulated: predictions)"))
    if wl and wl.params:
        workload_flags(p, wl)
    return p


def run_flags(g, finite=False):
    """What `alloclab run` runs: plugins, policies, producers, runs, timing,
    CPU model, duration, effort, isolation, adaptive runs, seed. ``finite``:
    a workload that ends its own pass (replay), whose duration is a time
    limit and which takes no cycles or warmup."""
    g.add_argument("--plugin", action="append", metavar="FILE.c",
                   help="compile and register a C plugin layer first, repeatable")
    g.add_argument("--policy", action="append", metavar="SPEC",
                   help="policy spec or preset, repeatable (default: buddy); e.g. "
                        "'buddy(arena_limit=64M)'")
    g.add_argument("--producers", type=int_list("producers"), default=None, metavar="N[,N...]",
                   help="worker threads (default: 1; replay: the trace's threads)")
    g.add_argument("--runs", type=_integer, default=None, metavar="N",
                   help="runs per grid point, each on a fresh allocator (default: 5; --quick "
                        "3, --rigorous 10)")
    g.add_argument("--timing", type=choice_list("timing", list(TIMINGS)), default=None,
                   metavar="|".join(TIMINGS),
                   help="timing mode(s) (default: batch; per_op_sum with --hist)")
    g.add_argument("--cpu", type=choice_list("cpu mode", list(CPU_MODES)), default=["auto"],
                   metavar="|".join(CPU_MODES), help="CPU model(s) (default: auto)")
    stats_flag(g, "stats level(s), swept like --timing: lite counts every event (the "
                   "default), off nothing (counters n/a), full also times the locks (*_ns)")
    g.add_argument("--duration", type=duration_arg, default=None, metavar="SECONDS",
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
    effort_flags(g)
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
    g.add_argument("--budget", type=duration_arg, default=60.0, metavar="SECONDS",
                   help="time budget of --target-ci (default: 60)")
    g.add_argument("--seed", type=_integer, default=1, metavar="N", help="PRNG seed (default: 1)")


def workload_flags(p, wl):
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
        w.add_argument(flag, dest="w_" + prm.name, type=param_list(prm), default=None,
                       metavar=prm.type_name.upper(),
                       help="%s (%s; default: %s)" % (prm.doc, rng, prm.format(prm.default)))


def takes_value_predicate(parser):
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


def is_workload(word):
    table = schema.workloads()
    return any(w in table for w in (word, word.replace("_", "-"), word.replace("-", "_")))


def find_workload(argv):
    """The first positional of `run`: the options that take a value are the
    generic run parser's (workload parameters all take one), so the workload
    may come before or after the flags."""
    takes_value = takes_value_predicate(run_parser(None))
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
                skip = i + 1 < len(argv) and not is_workload(argv[i + 1])
            continue
        return a
    return None


def _option_values(argv, flag):
    """The values given to ``flag`` in argv (FLAG VALUE and FLAG=VALUE)."""
    return ([argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
            + [a.split("=", 1)[1] for a in argv if a.startswith(flag + "=")])


def load_plugins(argv):
    """Compile every --plugin FILE.c in argv (before policies are validated)."""

    files = _option_values(argv, "--plugin")
    # an output naming a plugin is refused before the plugin is even read
    cli_format.refuse_overlap(
        [(flag, v) for dest, flag in cli_format.OUTPUT_OPTIONS
         for v in _option_values(argv, flag)], [("--plugin", f) for f in files])
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
    load_plugins(argv)
    parsed = parse_run(argv)
    if parsed is None:
        return 0
    wl, args = parsed
    cli_format.check_not_inputs(args)
    warnings_as_lines()
    check_phase(args)
    check_run_outputs(args)
    try:  # simulated CPUs without --calibration calibrate here, before any run
        kwargs, policy, settings = plan_run(wl, args)
    except KeyboardInterrupt as e:
        save_interrupted(e, args, None)
        raise
    metrics = args.metric or ["alloc_ns", "free_ns"]
    check_metric_names(metrics, policy, args.hist)
    rows, cols = table_axes(wl, args, settings)
    if args.journal is not None:  # a file not this sweep's journal is refused unwritten
        check_journal(args.journal, settings)
    hint(args.policy or [])
    # what the tables show, so that `alloclab show FILE` prints them again as here
    view = {"metrics": list(metrics), "explicit": bool(args.metric), "rows": rows, "cols": cols}
    try:
        res = run_or_sweep(wl, policy, args, kwargs)
    except KeyboardInterrupt as e:
        save_interrupted(e, args, view)
        raise
    cli_show.check_metrics(res, metrics)  # a workload metric is known only now
    res.metadata["view"] = view
    write_timeline(res, args.timeline)
    try:
        print(cli_format.render(res, cli_format.View(
            metrics, rows, cols, stat=args.stat, sd=args.sd, ci=args.ci, hist=args.hist,
            counters=args.counters, fmt=args.format, explicit_metrics=bool(args.metric))))
        if args.mva:
            print_mva(res, wl, args, kwargs)
        sys.stdout.flush()
    except OSError as e:  # stdout closed or gone (| head): the files still get the runs
        if getattr(e, "alloclab_stream", None) != "stdout":
            raise
        write_files(res, args, metrics, cols)
        raise
    return write_files(res, args, metrics, cols)


def write_files(res, args, metrics, cols):
    """The files run was asked for (--json, --csv, the journal's name,
    --plot), each announced on stderr; 0."""
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
            save_run_plots(res, metrics[0], cols, args.plot, args.hist)))
        for path in written:
            _wrote(path)
    return 0


LINE_WARNINGS = (IncompleteTraceWarning, UncalibratedPolicyWarning, UnmodelledLocksWarning,
                 SuspectCalibrationWarning, DuplicatePolicyWarning)


def warnings_as_lines():
    """A replayed trace cut short (alloclab.replay.IncompleteTraceWarning), a
    simulated policy its calibration did not run
    (measure.sim.UncalibratedPolicyWarning), one with glibc's malloc in it
    (UnmodelledLocksWarning) or a calibration whose line cost is suspect
    (SuspectCalibrationWarning, the one a simulated run makes for itself
    too) is one `alloclab: warning:` line, once, not Python's warning text."""
    import warnings

    shown, seen = warnings.showwarning, set()

    def show(message, category, *rest, **kw):
        if not issubclass(category, LINE_WARNINGS):
            return shown(message, category, *rest, **kw)
        if str(message) not in seen:
            seen.add(str(message))
            cli_format.warn(str(message))

    warnings.showwarning = show
    for category in LINE_WARNINGS:
        warnings.simplefilter("always", category)


def check_phase(args):
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


def save_interrupted(e, args, view):
    """Ctrl-C (``e``) during `run --json FILE`: FILE gets the runs that
    finished (run() keeps them as e.partial, marked interrupted, which
    `show` says), --csv FILE their rows and --timeline FILE the first
    simulated run's events; each is said on stderr, as is a file not
    written and why. A --journal holds every finished run already."""
    outs = [(f, p) for f, p in (("--json", args.json), ("--csv", args.csv),
                                ("--timeline", getattr(args, "timeline", None))) if p]
    if not outs or args.journal is not None:
        return
    part = getattr(e, "partial", None)
    if part is None:
        sys.stderr.write("%s: no run had finished: %s not written\n"
                         % (PROG, " and ".join("%s %s" % o for o in outs)))
        return
    part.metadata["view"] = view
    if outs[-1][0] == "--timeline":  # first, as it drops the events --json does not keep
        try:
            write_timeline(part, outs.pop()[1])
        except (_RunFailed, errors.AlloclabError) as err:
            sys.stderr.write("%s: %s\n" % (PROG, err))
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


def plan_run(wl, args):
    """(run keyword arguments, [Policy], settings): every check of the run
    (exit 2 on error); a refused spec that looks like an unquoted '>' gets
    the quoting hint."""
    try:
        kwargs, policy = run_kwargs(wl, args)
        settings, _ = plan(wl.name, policy, **kwargs)
    except errors.AlloclabError as e:
        hint = hint_text(args.policy or [])
        if hint:
            raise UsageError("%s; %s" % (e, hint)) from None
        raise
    return kwargs, policy, settings


def run_or_sweep(wl, policy, args, kwargs):
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


def parse_run(argv):
    """(workload schema, parsed args): the workload name is found first, then
    its flags are built from its schema. None when only help was asked for
    (printed)."""
    wl_name = find_workload(argv)
    if wl_name is None:
        p = run_parser(None)
        if any(a in ("-h", "--help") for a in argv):
            p.print_help()
            return None
        raise UsageError("run needs a workload: alloclab run WORKLOAD [flags]; workloads: %s"
                         % ", ".join(schema.workloads()))
    wl = schema.workload(wl_name)  # UnknownNameError listing the valid ones
    argv = list(argv)
    del argv[argv.index(wl_name)]
    return wl, run_parser(wl).parse_args(argv)


def run_kwargs(wl, args):
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
    kwargs.update(sim_kwargs(args, args.cpu))
    pols = args.policy or ["buddy"]
    return kwargs, [Policy(s) for s in pols]


def check_metric_names(metrics, policy, hist=True):
    """Every --metric is a base metric, a counter of a layer of the policy,
    or a workload metric (checked against the Result after the run), and
    each is given once."""
    cli_format.refuse_repeats(metrics, "--metric")
    late = [m for m in metrics if m in HIST_METRICS]
    if late and not hist:
        raise UsageError("--metric %s is read from per-operation histograms: add --hist"
                         % late[0])
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


def table_axes(wl, args, settings):
    """(rows, cols) parameters of the printed tables, checked."""
    keys = ["policy"] + [p.name for p in wl.params] + ["producers", "timing", "cpu", "stats"]
    for flag, key in (("--rows", args.rows), ("--cols", args.cols)):
        if key is not None and key.replace("-", "_") not in keys:
            raise UsageError(str(errors.UnknownNameError.make(
                "parameter", key, keys, context=flag)))
    rows = args.rows.replace("-", "_") if args.rows else cli_show.default_rows(
        wl, settings["sweep"])
    return rows, args.cols.replace("-", "_")


def check_run_outputs(args):
    """--journal and --target-ci together are refused; the adaptive options
    and every output file are checked before any run (and before simulated
    CPUs are calibrated); check_journal follows, once the grid is known."""
    if args.journal is not None and args.target_ci is not None:
        raise UsageError("--target-ci adds runs as it goes and --journal resumes a fixed "
                         "grid: use one or the other")
    if args.target_ci is not None:
        adaptive_options(args.target_ci, args.budget)
    plots = cli_format.plot_paths("--plot", args.plot, ["", "1", "2"] if args.hist else [""],
                                  args) if args.plot is not None else []
    _check_outputs(("--json", args.json, "file"), ("--csv", args.csv, "file"),
                   ("--journal", args.journal, "journal"), ("--timeline", args.timeline, "file"),
                   *[("--plot", p, "plot") for p in plots])


def run_measure_flags(p):
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


def save_run_plots(res, metric, x, path, hist):
    import matplotlib
    matplotlib.use("Agg")

    xs = x if x in res.params() else "producers"
    figs = [plot.latency(res, metric, x=xs, hue="policy")]
    if hist:
        figs.append(plot.latency_hist(res, "alloc"))
        if any(h.count for p in res.points for h in p.hist.get("free", ())):
            figs.append(plot.latency_hist(res, "free"))
    return plot.save(figs, path, "--plot")


# ---------------------------------------------------------------- simulated CPUs

def write_timeline(res, path):
    """--timeline FILE: the first run of the first simulated cell as Chrome
    trace JSON (present.timeline); every point's events are then dropped
    from the Result, so that --json holds the numbers, not the trace."""
    if not path:
        return
    first = next((p for p in res.points if (p.info.get("sim") or {}).get("timeline")), None)
    if first is None:
        raise _RunFailed("--timeline %s: the simulated runs kept no events" % path)
    meta = {k: first.params.get(k) for k in ("workload", "policy", "producers")}
    meta.update(seed=first.info["seeds"][0], calibration=first.info["sim"]["calibration_id"])
    _write_output("--timeline", path, lambda: _timeline.write_chrome_trace(
        path, first.info["sim"]["timeline"], meta))
    for p in res.points:
        (p.info.get("sim") or {}).pop("timeline", None)
    _wrote(path)


def _per_op(p):
    """A point's mean ns per op (alloc and free together) over its runs."""
    d = p.data
    ops = float(sum(d["alloc_ops"]) + sum(d["free_ops"]))
    spent = sum(float(t) * float(n) for m, k in (("alloc_ns", "alloc_ops"), ("free_ns", "free_ops"))
                for t, n in zip(d[m], d[k]) if n)
    return spent / ops if ops else float("nan")


def mva_lines(res, measure):
    """[line] per simulated point of ``res``: its per-op latency beside the
    queueing model's from ``measure(point)`` (a measured 1-producer point of
    the same workload and policy at stats=full), and a last line naming the
    disagreements over mva.DISAGREE_FACTOR."""
    cal = ((res.metadata.get("run") or {}).get("simulated") or {}).get("calibration") or {}
    handoff = float(cal.get("line_transfer_ns", 0.0)) * (1 + float(cal.get("lines_per_handoff",
                                                                           0.0)))
    out, bad, cells = [], [], [p for p in res.points if _simulated.is_simulated(p)]
    for p in cells:
        label = "%s, %s" % (p.params.get("policy"), ", ".join(
            "%s=%s" % (k, v) for k, v in p.params.items()
            if k not in ("workload", "policy", "cpu", "timing", "stats")))
        try:
            think, stations = _mva.profile_from_point(measure(p), handoff_ns=handoff)
            ag = _mva.compare(_per_op(p), _mva.mva(think, stations, p.params["producers"])
                              .per_op_ns)
        except errors.AlloclabError as e:
            out.append("  %s: n/a (%s)" % (label, e))
            continue
        out.append("  %s: %s" % (label, ag.text))
        bad += [label] if ag.flagged else []
    head = ("queueing model (mean-value analysis from a measured 1-producer run at "
            "stats=full, lock handoff %g ns) beside the simulation:" % handoff)
    tail = ("mva: %d of %d cells disagree by more than %gx: %s" % (
        len(bad), len(cells), _mva.DISAGREE_FACTOR, "; ".join(bad)) if bad else
        "mva: no cell disagrees by more than %gx" % _mva.DISAGREE_FACTOR)
    return [head] + out + [tail]


def print_mva(res, wl, args, kwargs):
    """--mva: measure each simulated cell's workload and policy at 1
    producer, stats=full (once each), and print mva_lines (stdout for text
    and Markdown, stderr beside json and csv)."""
    measured = {}
    skip = ("workload", "policy", "producers", "cpu", "stats")

    def measure(p):
        key = json.dumps([[k, v] for k, v in sorted(p.params.items()) if k not in skip])
        if key not in measured:
            wparams = {k: v for k, v in p.params.items() if k not in skip + ("timing",)}
            opts = {k: kwargs[k] for k in ("runs", "warmup_cycles", "cycles", "duration",
                                           "seed", "effort") if kwargs.get(k) is not None}
            measured[key] = run(wl.name, p.params["policy"], producers=1, cpu="pinned",
                                stats="full", timing=p.params.get("timing"), mem_sample=0,
                                **opts, **wparams).points[0]
        return measured[key]
    try:
        lines = mva_lines(res, measure)
    except errors.AlloclabError as e:
        raise _RunFailed("--mva: %s" % e) from None
    out = sys.stdout if args.format in ("text", "markdown") else sys.stderr
    out.write("\n" + "\n".join(lines) + "\n")
