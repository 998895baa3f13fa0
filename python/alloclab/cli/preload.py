"""`alloclab preload --policy SPEC -- COMMAND`: a program run with its
malloc on a policy through the LD_PRELOAD shim (alloclab.shim.preload),
its end told in one line (a stalled policy call, a signal, glibc serving)."""


import argparse
import sys

from .. import errors
from .format import PROG, UsageError
from .format import err as _err
from .format import wrote as _wrote
from .format import real
from .format import refuse_program_files
from ..policies import plugin
from ..shim.preload import EXIT_ON_GLIBC
from ..shim.preload import EXIT_STALLED
from ..shim.preload import MIN_SHARE
from ..shim.preload import WATCHDOG
from ..shim import preload
from .flags import stats_file_hint, stats_flag


def preload_parser(sub):
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
    stats_flag(pp, "what the policy's layers count in the shim: lite (every event), off "
                    "(nothing: the layers' counters are not measured, the shim's own are "
                    "kept) or full (also lock hold and wait times, *_ns)", sweep=False,
                hint=stats_file_hint)
    pp.add_argument("--watchdog", type=real, default=WATCHDOG, metavar="SECONDS",
                    help="end CMD when a policy call in any of its processes makes no "
                         "progress for this long (default %g; 0 = never): one error line, "
                         "exit %d" % (WATCHDOG, EXIT_STALLED))
    pp.add_argument("--allow-glibc", action="store_true",
                    help="exit with CMD's status even when processes ran on glibc (the "
                         "stats say so)")
    pp.add_argument("--verbose", action="store_true",
                    help="the shim reports on stderr in each process, and a summary follows")
    pp.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")


def preload_shim(args):
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
    shim = preload_shim(args)
    # Everything that can be wrong is found before CMD starts: the spec, the
    # stack, the shim, the --json file (an empty name, a path that cannot be
    # written, a directory, a socket, a named pipe with no reader: its open would wait).
    preload.command(args.policy, cmd, shim=shim, level=args.stats)
    preload.check_watchdog(args.watchdog)
    if args.json is not None:
        preload.check_stats_path(args.json, what="--json file")
        refuse_program_files("--json", args.json, cmd)
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
    return preload_end(args, proc)


def preload_end(args, proc):
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
        _wrote(args.json)
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
