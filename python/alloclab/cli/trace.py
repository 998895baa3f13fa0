"""`alloclab trace info FILE [--json] [--plot PATH]`: what a recorded trace
holds (docs/traces-info.md), as text tables, as JSON, and as a figure.

Flow: the outputs are checked first (the --plot file: alloclab.files
check_output, and its format), then the file (alloclab.files.check_input:
it exists, is a regular file, can be read; a pipe or a device is refused
without being opened), then it is
loaded with alloclab.trace.load (a file that is not a trace, or a damaged
one, is its FileFormatError naming the offset), analysed
(alloclab.traceinfo) and printed; the figure is written last and announced
on stderr, as every file the CLI writes is. Every bad input is an
AlloclabError, which cli.main prints as one ``alloclab: error:`` line with
exit status 2; a figure that cannot be written is an OSError (exit 1). This module does not import alloclab.cli (which imports it).
"""

import json
import os
import sys

from .. import errors
from .. import files
from ..traces import trace
from ..present import plot_trace
from .format import integer

PROG = "alloclab"


def add_parser(sub):
    tp = sub.add_parser("trace", help="what a recorded trace holds",
                        description="Inspect a trace written by `alloclab record`.")
    tsub = tp.add_subparsers(dest="trace_cmd", metavar="COMMAND")
    ip = tsub.add_parser(
        "info", help="ops by kind, sizes, lifetimes, live bytes, threads, cross-thread frees, "
                     "reallocs",
        description="Summarise a trace: ops by kind (NULL returns, size-0 requests, free(NULL), "
                    "frees of objects allocated before recording), power-of-two size "
                    "histograms per kind, object lifetimes in ops and in time, live requested "
                    "bytes over time and their peak, the objects live at the end, threads "
                    "(parent tree, ops, span), cross-thread frees by thread pair, and realloc "
                    "patterns (grow/shrink, moved share, growth factors, chains).")
    ip.add_argument("file", metavar="FILE", help="a trace file")
    ip.add_argument("--json", action="store_true",
                    help="print the analysis as JSON instead of tables")
    ip.add_argument("--plot", metavar="PATH",
                    help="write a figure of six panels: live bytes over time and over ops, "
                         "sizes, lifetimes in ops and in time, ops per thread (PNG/PDF/SVG by "
                         "extension)")
    ip.add_argument("--top", type=integer, default=16, metavar="N",
                    help="rows of the threads and thread-pairs tables (default 16)")
    tp.set_defaults(trace_cmd=None, trace_commands=tuple(tsub.choices))


def _check_plot_path(path):
    """Refuse, before the trace is read, a --plot file that could not be
    written (alloclab.files.check_output: a directory, a missing directory,
    a socket, a pipe with no reader) or a format matplotlib lacks."""
    files.check_output(path, "--plot")
    ext = os.path.splitext(path)[1][1:].lower()
    if ext:  # no extension: matplotlib writes PNG
        from matplotlib.backend_bases import FigureCanvasBase
        fmts = sorted(FigureCanvasBase.get_supported_filetypes())
        if ext not in fmts:
            raise errors.UnknownNameError.make("plot format", ext, fmts, context="--plot " + path)


def _refuse_index(path):
    """An index of a recording (alloclab record's FILE.index.json) is not a
    trace: say so and name the traces it lists."""
    if not path.endswith(".index.json"):
        return
    try:
        with files.open_input(path, "index", mode="r", encoding="utf-8") as f:
            doc = json.load(f)
        names = [im.get("path") or im.get("file") for im in doc.get("images", ())]
    except (OSError, ValueError, AttributeError, errors.AlloclabError):
        return
    names = [n for n in names if n]
    raise errors.InvalidArgument("%s is the index of a recording, not a trace; its traces: %s"
                                 % (path, ", ".join(names) or "none"))


def _load(path):
    """The trace in ``path``; a missing, unreadable or non-regular file is
    an InvalidArgument naming it and what it is (judged without reading it:
    a named pipe would block, /dev/zero never ends), a file that is not a
    trace the loader's FileFormatError."""

    files.check_input(path, "trace file")
    _refuse_index(path)
    try:
        return trace.load(path)
    except OSError as e:
        raise errors.InvalidArgument("trace file %s cannot be read: %s" % (
            path, e.strerror or e)) from None


def _write_plot(info, path):
    """The figure, rendered in memory in the format PATH's extension names
    (PNG without one) and written to exactly PATH as alloclab.files writes
    (a regular file replaced whole, a device or a pipe with a reader in
    place): matplotlib's own savefig would add ".png" to a name without an
    extension, and truncate whatever the path is."""
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    fig = plot_trace.overview(info)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=os.path.splitext(path)[1][1:].lower() or "png")
    finally:
        plt.close(fig)
    try:
        files.write_parts(path, [buf.getvalue()], "--plot")
    except OSError as e:  # a full disk: exit 1 as a failed write, after the report
        raise OSError("--plot %s: cannot write: %s" % (path, e.strerror or e)) from None
    sys.stderr.write("%s: wrote %s\n" % (PROG, path))


def _index_lines(path, top=5):
    """When ``path`` is the first image of a recording whose index
    (PATH.index.json, written by `alloclab record`) lists other process
    images, a note naming them, most ops first; nothing when there is no
    readable index (the report stands without it)."""
    try:
        with files.open_input(path + ".index.json", "index", mode="r", encoding="utf-8") as f:
            images = json.load(f)["images"]
        others = sorted(images[1:], key=lambda im: -int(im.get("ops") or 0))
        rows = ["  %s: pid %s, %s, %s ops%s" % (
            im["file"], im.get("pid"), " ".join(map(str, im.get("argv") or [])) or im.get("exe"),
            im.get("ops"), "" if im.get("complete", True) else " (incomplete)")
            for im in others[:top]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, errors.AlloclabError):
        return []
    if not others:
        return []
    out = ["", "this recording holds %d more process images (%s.index.json), most ops first:"
           % (len(others), os.path.basename(path))] + rows
    if len(others) > top:
        out.append("  ... %d more" % (len(others) - top))
    return out


def cmd_info(args):
    if args.top < 1:
        raise errors.ParameterRangeError("--top %d: give 1 or more rows" % args.top,
                                         value=args.top, min=1, max=None)
    if args.plot is not None:
        _check_plot_path(args.plot)
    with _load(args.file) as tr:
        info = tr.info()
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
    else:
        print("\n".join([info.text(top=args.top)] + _index_lines(args.file, args.top)))
    if args.plot is not None:
        _write_plot(info, args.plot)
    return 0


def cmd_trace(args):
    if args.trace_cmd == "info":
        return cmd_info(args)
    raise errors.InvalidArgument("alloclab trace needs a command; valid commands: %s" % (
        ", ".join(args.trace_commands)))
