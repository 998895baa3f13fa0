"""The alloclab command line: the one argparse tree of every command but
`run` (_main_parser), the dispatch in main(), and `alloclab check` (the
machine state that makes numbers noisy). Each command has a module of its
own: run (``run WORKLOAD ...``, its parser built from the workload's C
schema), preload, reproduce, list, show, compare, record, trace and
libarena; flags holds the flags run and reproduce share, format what the
commands print and the error types, quoting the hint for an unquoted '>'.
`alloclab sim` (calibrate and validate the simulated CPUs' cost model,
measure.sim) lives here beside `check`: both read this machine, and each is
a parser and a few lines around one library call.

Errors print ``alloclab: error: <message>`` on stderr and exit 2 (bad input)
or 1 (a run failed); never a traceback. SIGTERM and SIGHUP are raised as
Ctrl-C is, so a run in progress is stopped and its child processes reaped
either way.
"""

import argparse
import hashlib
import json
import sys

from . import (
    compare as cli_compare, format as cli_format, list as cli_list, record as cli_record,
    show as cli_show, trace as cli_trace)
from . import libarena as cli_libarena
from .. import errors
from ..cbind import schema
from ..measure import sim
from .flags import duration_arg, int_list, lines_arg, ns_arg
from .format import integer as _integer
from .._version import __version__
from .format import PROG, UsageError
from .format import Parser as _Parser
from .format import RunFailed as _RunFailed
from .format import err as _err
from ..host import machine
from .preload import cmd_preload, preload_parser
from .reproduce import cmd_reproduce, libarena_parser, local_storage_parser, vmalloc_parser
from .run import cmd_run, load_plugins, warnings_as_lines



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
    preload_parser(sub)
    rp = sub.add_parser("reproduce", help="rerun a seed discussion's experiment")
    rsub = rp.add_subparsers(dest="seed", metavar="SEED")
    libarena_parser(rsub)
    vmalloc_parser(rsub)
    local_storage_parser(rsub)
    rp.set_defaults(seed=None, seeds=tuple(rsub.choices))  # named when none is given
    cli_record.add_parser(sub)
    cli_trace.add_parser(sub)
    sim_parser(sub)
    return p


# ------------------------------------------------------------------ sim

def cell_arg(text):
    """--cell WORKLOAD[:ALLOCS_PER_CYCLE] as a calibration cell's dict."""
    wl, colon, apc = text.partition(":")
    if wl not in schema.workloads():
        raise argparse.ArgumentTypeError(str(errors.UnknownNameError.make(
            "workload", wl, list(schema.workloads()), context="--cell")))
    cell = {"workload": wl}
    if colon and not apc:
        raise argparse.ArgumentTypeError("--cell %s: give the allocs per cycle after the colon "
                                         "(%s:64), or no colon" % (errors.Echo(text), wl))
    if apc:
        if "allocs_per_cycle" not in [p.name for p in schema.workload(wl).params]:
            raise argparse.ArgumentTypeError("--cell %s: %s takes no allocs_per_cycle" % (
                errors.Echo(text), wl))
        try:
            cell["allocs_per_cycle"] = _integer(apc)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError("--cell %s: allocs per cycle is an integer, not "
                                             "%r" % (errors.Echo(text), errors.Echo(apc))) from None
    return cell


def sim_parser(sub):
    """`alloclab sim calibrate` and `alloclab sim validate`."""
    sp = sub.add_parser("sim", help="simulated CPUs: calibrate the cost model, validate it",
                        description="The cost model of --cpu simulated: `calibrate` measures "
                                    "it on this machine at 1 producer, `validate` sets its "
                                    "predictions beside measured runs.")
    ssub = sp.add_subparsers(dest="sim_cmd", metavar="COMMAND")
    for name, what in (("calibrate", "measure the cost model at 1 producer and save it"),
                       ("validate", "simulated against measured, per cell")):
        c = ssub.add_parser(name, help=what, description=what)
        c.add_argument("--policy", action="append", required=True, metavar="SPEC",
                       help="a policy (spec or preset), repeatable")
        c.add_argument("--cell", action="append", type=cell_arg, metavar="WORKLOAD[:N]",
                       help="a cell (workload, allocs per cycle), repeatable (default: %s)" % (
                           ", ".join("%s:%d" % (c["workload"], c["allocs_per_cycle"])
                                     for c in sim.DEFAULT_CELLS) if name == "calibrate" else
                           "malloc-free and malloc-xfree at 64 and 256"))
        c.add_argument("--duration", type=duration_arg, default=None, metavar="SECONDS",
                       help="measured phase per run (default: %g)" % sim.CALIBRATION_SECONDS)
        c.add_argument("--seed", type=_integer, default=1, metavar="N", help="default: 1")
        c.add_argument("--out", metavar="FILE", required=name == "calibrate",
                       help="the calibration file to write" + (
                           "" if name == "calibrate" else
                           ": --calibration's, with the validation in info[\"validation\"]"))
    cal, val = ssub.choices["calibrate"], ssub.choices["validate"]
    cal.add_argument("--line-transfer", type=ns_arg, metavar="NS",
                     help="ns to move a cache line (default: measured by a ping-pong)")
    cal.add_argument("--lines-per-handoff", type=lines_arg, default=None,
                     metavar="N", help="default: %g" % sim.DEFAULT_LINES_PER_HANDOFF)
    cal.add_argument("--fit-handoff", action="store_true",
                     help="fit --lines-per-handoff to measured 2-producer runs (fit_handoff)")
    val.add_argument("--calibration", required=True, metavar="FILE",
                     help="the calibration file (`alloclab sim calibrate --out FILE`)")
    val.add_argument("--runs", type=_integer, default=3, metavar="N", help="default: 3")
    val.add_argument("--producers", type=int_list("producers"), default=None,
                     metavar="N[,N...]", help="default: 1, 2 and every count up to the usable "
                                              "CPUs")


def _calibration_id(cal):
    """The id a run gives the calibration (measure.run: the first 12 hex
    digits of the SHA-1 of its JSON)."""
    return hashlib.sha1(json.dumps(cal.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def cmd_sim(args):
    """`alloclab sim calibrate|validate`: outputs checked first, then the
    library call, a summary on stdout, the file announced on stderr."""
    if args.sim_cmd is None:
        raise UsageError("sim needs a command: calibrate or validate")
    warnings_as_lines()
    cli_format.check_outputs(("--out", args.out, "file"))
    if args.sim_cmd == "validate" and (args.runs < 1 or min(args.producers or [1]) < 1):
        raise UsageError("--runs and --producers must be at least 1")
    kw = {"duration": args.duration} if args.duration is not None else {}
    if args.sim_cmd == "calibrate":
        if args.fit_handoff and args.lines_per_handoff is not None:
            raise UsageError("--fit-handoff fits the lines per handoff that --lines-per-handoff "
                             "gives: use one or the other")
        cal = sim.calibrate(args.policy, cells=args.cell or sim.DEFAULT_CELLS, seed=args.seed,
                            line_transfer=args.line_transfer,
                            lines_per_handoff=sim.DEFAULT_LINES_PER_HANDOFF
                            if args.lines_per_handoff is None else args.lines_per_handoff, **kw)
        if args.fit_handoff:
            cal = sim.fit_handoff(cal, args.policy, cells=args.cell or sim.FIT_CELLS,
                                  seed=args.seed, **kw)
        fit = cal.info.get("fit", {})
        print("calibration %s: %d terms from %d segments (rms %.3g ns), line transfer %.4g ns "
              "[%s], %g line%s per handoff [%s]; %s" % (
                  _calibration_id(cal), len(cal.costs), fit.get("segments", 0),
                  fit.get("rms_ns") or 0.0, cal.line_transfer_ns, cal.info["line_transfer"],
                  cal.lines_per_handoff, "" if cal.lines_per_handoff == 1 else "s",
                  cal.info["lines_per_handoff"], sim.coherence_text(cal)))
    else:
        cal = sim.Calibration.load(args.calibration)
        v = sim.validate(cal, args.policy, cells=args.cell, producers=args.producers,
                         runs=args.runs, seed=args.seed, **kw)
        print(v.text())
        cal.info = dict(cal.info, validation=v.to_dict())
    sys.stdout.flush()
    if args.out:
        cli_format.write_output("--out", args.out, lambda: cal.save(args.out))
        cli_format.wrote(args.out)
    return 0


# ------------------------------------------------------------------ reproduce vmalloc


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
    # a failed write names stdout; a stdout the program was started without
    # fails each write as a closed descriptor does
    sys.stdout = cli_format.NamedStdout(stdout if stdout is not None else
                                        cli_format.ClosedStream(1))
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
        cli_format.check_not_inputs(args)
        if args.cmd in ("list", "preload") and args.plugin:
            for f in ([args.plugin] if isinstance(args.plugin, str) else args.plugin):
                load_plugins(["--plugin", f])
        if args.cmd == "list":
            return cli_list.cmd_list(args)
        if args.cmd == "show":
            return cli_show.cmd_show(args)
        if args.cmd == "preload":
            return cmd_preload(args)
        if args.cmd == "reproduce":
            warnings_as_lines()
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
        if args.cmd == "sim":
            return cmd_sim(args)
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
