"""`alloclab record`: run a command and record its malloc-family calls into
a trace file per process image (docs/record.md).

    alloclab record --out gcc.trace [--policy P] -- gcc -O2 -c x.c

The command's status is this command's (128+N when a signal N ended it);
signals sent to alloclab go on to the command, as with `alloclab preload`.
Bad input (no command, one that cannot be found, an --out that cannot be
written, a policy the shim cannot run) is one `alloclab: error:` line and
exit 2 before anything runs; so is a run where nothing could be recorded.
A run where some process image ran without the recorder (a static or
setuid program, an `env -i` child) writes the traces it has, names those
images on one `alloclab: error:` line and exits 125, as `alloclab
preload` does (--allow-unrecorded: a warning, and CMD's status).
A summary line per trace written goes to stderr, never to stdout (the
command's own output is left as it is).
"""

import argparse
import os
import sys
import threading
from .. import errors
from ..shim.record import INDEX_SUFFIX, record
from ..traces.trace import COMPRESSORS, DEFAULT_COMPRESSOR
from .format import refuse_program_files

PROG = "alloclab"  # as cli.PROG (cli imports this module)
EXIT_UNRECORDED = 125
"""The exit status when a process ran without the recorder, as `alloclab
preload`'s when one ran without the policy (preload.EXIT_ON_GLIBC)."""


def add_parser(sub):
    rp = sub.add_parser(
        "record", help="record a program's allocations into a trace",
        description="Run CMD under the preload shim in record mode: every malloc, calloc, "
                    "realloc, free, posix_memalign, aligned_alloc, memalign, valloc, pvalloc "
                    "and malloc_usable_size call of CMD and of every process it starts, and "
                    "their threads. Writes OUT for CMD's own process, one trace per further "
                    "process image beside it (OUT's stem, .PID, OUT's extension) and "
                    "OUT.index.json naming them all. glibc serves the calls unless --policy "
                    "is given. Exits with CMD's status.",
        usage="alloclab record --out FILE [--policy SPEC] [--compress NAME] -- CMD [ARGS...]")
    rp.add_argument("--out", required=True, metavar="FILE",
                    help="the trace of CMD's process (further processes beside it); a "
                         "character device takes that one trace in place and nothing else")
    rp.add_argument("--policy", default=None,
                    help="serve the calls from this policy spec or preset (default: glibc)")
    rp.add_argument("--compress", default=None, metavar="NAME",
                    help="the trace files' compressor: %s (default: %s)" % (
                        ", ".join(COMPRESSORS), DEFAULT_COMPRESSOR))
    rp.add_argument("--quiet", action="store_true", help="no summary on stderr")
    rp.add_argument("--allow-unrecorded", action="store_true",
                    help="exit with CMD's status even when some of its processes ran without "
                         "the recorder (a static or setuid program, an `env -i` child): they "
                         "are named in a warning instead of an error (exit 125)")
    rp.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")


def _summary(rec):
    out = []
    for im in rec.images:
        line = "%s: %s pid %d (%s): %d ops, %d threads, %d objects" % (
            im["path"] or "(not written)", im["how"], im["pid"],
            os.path.basename(im.get("exe") or "?"),
            im["ops"], im["threads"], im["objects"])
        if not im["complete"]:
            line += "; incomplete: " + im["note"]
        out.append(line)
    if rec.index:
        out.append("index: %s" % rec.index)
    out.extend("warning: " + n for n in rec.notes)
    # an image that exec'd a program without the shim is named once, as unrecorded
    glibc = [x for x in (rec.stats or {}).get("on_glibc", ())
             if not (rec.unrecorded and "which ran without the shim" in x)]
    if glibc:
        out.append("warning: not every call was the policy's: " + "; ".join(glibc))
    return out


def unrecorded_text(rec):
    """The line naming the process images that ran without the recorder, as
    `alloclab preload` names those that ran without the policy."""
    return "%d of %d process image(s) were not recorded: %s; the traces of the others were " \
        "written" % (len(rec.unrecorded), len(rec.images) + len(rec.unrecorded),
                     "; ".join(rec.unrecorded))


def cmd_record(args):

    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise errors.InvalidArgument("record needs a command: alloclab record --out FILE -- "
                                     "CMD ...")
    refuse_program_files("--out", args.out, cmd)
    refuse_program_files("--out's index", args.out + INDEX_SUFFIX, cmd)
    sys.stdout.flush()
    try:
        kw = {"compress": args.compress} if args.compress else {}
        rec = record(cmd, args.out, policy=args.policy, **kw,
                     forward_signals=threading.current_thread() is threading.main_thread())
    except errors.RunError as e:  # nothing recorded: bad input as far as the user can tell
        raise errors.InvalidArgument(str(e)) from None
    if not args.quiet:
        for line in _summary(rec):
            sys.stderr.write("%s: %s\n" % (PROG, line))
    if rec.unrecorded and not args.allow_unrecorded:
        sys.stderr.write("%s: error: %s (--allow-unrecorded accepts such a run)\n"
                         % (PROG, unrecorded_text(rec)))
        return EXIT_UNRECORDED
    if rec.unrecorded:
        sys.stderr.write("%s: warning: %s\n" % (PROG, unrecorded_text(rec)))
    rc = rec.returncode
    return 128 - rc if rc < 0 else rc
