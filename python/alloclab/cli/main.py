"""The alloclab command line: the one argparse tree of every command but
`run` (_main_parser), the dispatch in main(), and `alloclab check` (the
machine state that makes numbers noisy). Each command has a module of its
own: run (``run WORKLOAD ...``, its parser built from the workload's C
schema), preload, reproduce, list, show, compare, record, trace and
libarena; flags holds the flags run and reproduce share, format what the
commands print and the error types, quoting the hint for an unquoted '>'.

Errors print ``alloclab: error: <message>`` on stderr and exit 2 (bad input)
or 1 (a run failed); never a traceback. SIGTERM and SIGHUP are raised as
Ctrl-C is, so a run in progress is stopped and its child processes reaped
either way.
"""

import argparse
import sys

from . import (
    compare as cli_compare, format as cli_format, list as cli_list, record as cli_record,
    show as cli_show, trace as cli_trace)
from . import libarena as cli_libarena
from .. import errors
from .._version import __version__
from .format import PROG, UsageError
from .format import Parser as _Parser
from .format import RunFailed as _RunFailed
from .format import err as _err
from ..host import machine
from .preload import cmd_preload, preload_parser
from .reproduce import cmd_reproduce, libarena_parser, local_storage_parser, vmalloc_parser
from .run import cmd_run, load_plugins



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
    return p


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
                load_plugins(["--plugin", f])
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
