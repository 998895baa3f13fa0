"""The flags that `alloclab run` and `alloclab reproduce` share: lists of
numbers and names, durations, the effort presets, --stats, the output
files and the progress bars; and those of simulated CPUs (--calibration,
--line-transfer, --lines-per-handoff, --timeline, --mva), refused
without --cpu simulated."""


import argparse
import math
import os

from . import format as cli_format
from .. import errors
from ..cbind import schema
from .format import integer as _integer
from .format import real as _real
from .format import split as _split
from ..measure import sim
from ..measure.run import DEFAULT_STATS, MAX_SECONDS, STATS_LEVEL_NAMES


def int_list(name):
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


def choice_list(name, choices, prefix=""):
    """A comma list of ``choices``; each may also be spelled with ``prefix``
    (reproduce libarena's tables head libarena-malloc-free)."""
    def conv(text):
        out = [s[len(prefix):] if prefix and s.startswith(prefix) else s
               for s in _split(text)]
        for s in out:
            if s not in choices:
                raise argparse.ArgumentTypeError(
                    "unknown %s %r; valid: %s" % (name, errors.Echo(s), ", ".join(choices)))
        return out
    return conv


def duration_arg(text):
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


def param_list(p):
    def conv(text):
        try:
            return [p.value(p.parse_text(s)) for s in _split(text)]
        except errors.AlloclabError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    conv.__name__ = p.name
    return conv


def effort_flags(g):
    """--quick / --rigorous (pyperf's --fast / --rigorous): how much to measure."""
    e = g.add_mutually_exclusive_group()
    e.add_argument("--quick", dest="effort", action="store_const", const="quick",
                   default="normal", help="fewer and shorter runs: a rough answer fast")
    e.add_argument("--rigorous", dest="effort", action="store_const", const="rigorous",
                   help="more and longer runs: tighter intervals, more verdicts decided")


def stats_flag(g, what, sweep=True, hint=None):
    """--stats LEVEL (a comma-separated list when ``sweep``): what the layers
    count. ``hint(value)``: what an unknown level is told besides the valid
    ones, in `alloclab run`'s words ("" for nothing)."""
    levels = STATS_LEVEL_NAMES
    if sweep:
        kind = choice_list("stats level", levels)
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


def output_flags(o):
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
    progress_flags(o)


def progress_flags(o):
    """--progress / --no-progress (progress.py); neither: a bar on a terminal."""
    o.add_argument("--progress", action="store_const", const=True, default=None,
                   help="a progress bar on stderr from the start, even when stderr is not a "
                        "terminal (default: a bar on a terminal once the job lasts 2 s, "
                        "nothing when stderr is piped)")
    o.add_argument("--no-progress", dest="progress", action="store_const", const=False,
                   help="no progress bar")


def stats_file_hint(text):
    """Where a --stats value that looks like a file (a '/' or '.' in it, or
    a file of that name here) is sent: --stats FILE was the old spelling of
    --json FILE. A typo such as OFF gets no hint."""
    if "/" in text or "." in text or os.path.isfile(text):
        return "the counters record file is now --json FILE"
    return ""


# ---------------------------------------------------------------- simulated CPUs

# The events a --timeline run keeps per run (the first run of the first
# simulated cell is written): enough for a few milliseconds of 8 CPUs'
# locks, small enough that every run of a sweep may hold its own.
TIMELINE_EVENTS = 20000
SIM_FLAGS = ("--calibration", "--line-transfer", "--lines-per-handoff", "--timeline", "--mva")


def _bounded(text, what):
    v = _real(text)
    if not (math.isfinite(v) and 0 <= v <= 1e6):
        raise argparse.ArgumentTypeError("%r is not %s: a number from 0 to 1e6"
                                         % (errors.Echo(text), what))
    return v


def ns_arg(text):
    """A time in ns, a number from 0 to 1e6 (60, 1.5e2)."""
    return _bounded(text, "a time in ns")


def lines_arg(text):
    """A number of cache lines, from 0 to 1e6 (1, 2.5)."""
    return _bounded(text, "a number of cache lines")


def sim_flags(g):
    """What `alloclab run --cpu simulated` takes besides the run's flags:
    the calibration, the line-transfer and handoff overrides, the timeline
    file and the queueing-model cross-check."""
    g.add_argument("--calibration", metavar="FILE",
                   help="the cost model (`alloclab sim calibrate --out FILE`; default: "
                        "calibrate the policies here first, a few seconds)")
    g.add_argument("--line-transfer", type=ns_arg, metavar="NS",
                   help="ns to move a cache line between CPUs (default: the calibration's)")
    g.add_argument("--lines-per-handoff", type=lines_arg, metavar="N",
                   help="data lines a lock handoff moves besides the lock's (default: the "
                        "calibration's)")
    g.add_argument("--timeline", metavar="FILE",
                   help="write the first run of the first simulated cell as Chrome trace "
                        "JSON (Perfetto, chrome://tracing): each model CPU's lock holds, "
                        "waits and handoffs; at most %d events, the first in time" %
                        TIMELINE_EVENTS)
    g.add_argument("--mva", action="store_true",
                   help="beside each simulated cell, the queueing model's (mean-value "
                        "analysis) latency from a measured 1-producer run at stats=full; "
                        "disagreements over 2x flagged")


def sim_kwargs(args, cpu_modes):
    """run()'s keywords of the simulation from the flags ({} when none is
    given); a flag given without --cpu simulated is refused, a calibration
    file that is not one too."""
    given = [f for f in SIM_FLAGS if getattr(args, f[2:].replace("-", "_")) not in (None, False)]
    if not given:
        return {}
    if "simulated" not in cpu_modes:
        raise cli_format.UsageError("%s appl%s to --cpu simulated only" % (
            " and ".join(given), "ies" if len(given) == 1 else "y"))
    out = {}
    if args.calibration is not None:
        out["calibration"] = sim.Calibration.load(args.calibration)
    if args.line_transfer is not None:
        out["line_transfer"] = args.line_transfer
    if args.lines_per_handoff is not None:
        out["lines_per_handoff"] = args.lines_per_handoff
    if args.timeline is not None:
        out["timeline"] = TIMELINE_EVENTS
    return out
