"""What `alloclab run` and `alloclab show` print: a Result as text (the
tables, histograms, CPU/stats/machine lines, workload metrics, per-op
counters), as Markdown, as JSON or as CSV, and the messages and errors every
subcommand shares (``alloclab: error:`` lines, "wrote FILE" notices).

Formats (``--format``): text is the tables as `run` has always printed
them; markdown the same sections as Markdown tables; json the whole Result
(Result.to_json, what `show` and `compare` read back); csv one row per run
(Result.rows; with explicit metrics, only those metric columns). In json
and csv nothing else reaches stdout: the warnings under the tables and the
machine's go to stderr, so stdout stays parseable.

Counters (``--counters``): per policy, a table of the per-op counters, one
column per grid point. ``key`` keeps the counters the layer declares key
(schema.Counter.key, counters.h) and hides those that are zero or not
measured in every column; ``all`` keeps every counter but those constant
across the columns (zero, n/a, or with two or more columns the same
everywhere); ``none`` prints no counter table. Either way the table says
how many it hid. A layer that declares no counters has no key set: all of
its nonzero ones are kept.

Warnings under several tables are merged into one list after the last
table: one line per kind of run-stability warning over the cells of every
table (each cell named with its metric), so three metrics with unstable
cells give one line, not three; the other lines (n/a, truncated, refused,
clock) once each.

This module imports no other cli module (they import it). Cost: formatting
only; nothing runs.
"""

import argparse
import errno
import io
import math
import os
import re
import shutil
import sys

import numpy as np

from ..results import _counters
from .. import errors
from ..results import stats as _stats
from ..present.table import ROW_LABELS, counters_heading, label as table_label
from ..results.result import fmt_value
from .. import files
from ..present import plot
from ..present.plot import figure_formats
from ..reproduce.vmalloc import summary_text
from ..results.hist import OPS
from ..policies.libarena_real import ENV_TREE as TREE_ENV
from ..results import simulated as _simulated

PROG = "alloclab"
FORMATS = ("text", "markdown", "json", "csv")
COUNTER_MODES = ("key", "all", "none")


class UsageError(Exception):
    """Bad command-line input (exit 2)."""


class RunFailed(Exception):
    """A run failed, or an output could not be written (exit 1)."""


class Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so main() prints one format."""

    _argv = ()

    def parse_known_args(self, args=None, namespace=None):
        self._argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message):
        m = re.fullmatch(r"argument ((?:-\w/)?(--[\w-]+)(?:/-\w)?): expected one argument",
                         message)
        if m and self._dash_value(m.group(1).split("/")):
            # argparse takes a value that starts with "-" (--size -4K) for a flag
            message += " (a value that starts with '-' is written %s=VALUE)" % m.group(2)
        raise UsageError(errors.cut_runs(message))  # argparse echoes a bad value whole

    def _dash_value(self, flags):
        """Whether one of ``flags`` is followed in the arguments by a word
        that starts with "-" (what argparse would not take as its value)."""
        argv = self._argv
        return any(a in flags and i + 1 < len(argv) and argv[i + 1].startswith("-")
                   for i, a in enumerate(argv))


# An error line's runs of non-blank characters longer than this are cut (a
# last guard: each message cuts what it echoes itself; a long path survives)
ERR_RUN_LIMIT = 1024


def err(msg):
    msg = errors.cut_runs(str(msg), ERR_RUN_LIMIT)
    sys.stderr.write("%s: error: %s\n" % (PROG, msg))
    sys.stderr.flush()


def os_error_text(e):
    """The error line of an OSError that ended a command: one naming stdout
    when writing the results there failed (a full disk, /dev/full: the
    errno alone, "[Errno 28] No space left on device", named no file)."""
    if getattr(e, "alloclab_stream", None) == "stdout":
        return "cannot write the results to stdout: %s" % (e.strerror or e)
    return str(e)


class NamedStdout:
    """sys.stdout while a command runs: a write or flush that fails is
    marked as stdout's (an OSError does not say which file it was), so
    that os_error_text can name it. Everything else is the stream's."""

    def __init__(self, stream):
        self.stream = stream

    def _marked(self, call, *args):
        try:
            return call(*args)
        except OSError as e:
            e.alloclab_stream = "stdout"
            raise

    def write(self, s):
        return self._marked(self.stream.write, s)

    def flush(self):
        return self._marked(self.stream.flush)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def refuse_repeats(values, flag):
    """UsageError for a value a repeatable flag was given twice (its table
    would be printed twice)."""
    twice = [v for i, v in enumerate(values) if v in values[:i]]
    if twice:
        raise UsageError("%s %s is given twice: give each once" % (flag, errors.Echo(twice[0])))


class ClosedStream:
    """What stands for a standard stream the program was started without
    (``alloclab list >&-``: sys.stdout is None): a write fails as writing
    to a closed descriptor does, so that the command says so in one line
    rather than with an AttributeError, after writing its files."""

    def __init__(self, fd):
        self.fd = fd

    def write(self, s):
        raise OSError(errno.EBADF, "it is closed (the command was started without file "
                                   "descriptor %d)" % self.fd)

    def flush(self):
        pass

    def isatty(self):
        return False

    def fileno(self):
        raise OSError(errno.EBADF, "closed")


def warn(msg):
    sys.stderr.write("%s: warning: %s\n" % (PROG, msg))
    sys.stderr.flush()


def wrote(path):
    """Announce a file written, on stderr (stdout holds only results)."""
    sys.stderr.write("%s: wrote %s\n" % (PROG, path))
    sys.stderr.flush()


def add_view_flags(g, counters_help="per-op counter rows"):
    """--counters, --format and --markdown (an alias of --format markdown)."""
    g.add_argument("--counters", choices=COUNTER_MODES, default="key",
                   help="%s: key = the counters the layers declare key, nonzero ones "
                        "(default); all = every counter not constant across the columns; "
                        "none" % counters_help)
    f = g.add_mutually_exclusive_group()
    f.add_argument("--format", choices=FORMATS, default="text",
                   help="stdout as text (the tables, the default), markdown (the tables as "
                        "Markdown), json (the whole result, as --json writes it) or csv (a "
                        "row per run, as --csv writes it); json and csv print nothing else "
                        "on stdout")
    f.add_argument("--markdown", dest="format", action="store_const", const="markdown",
                   help="the same as --format markdown")


def split(text):
    """The items of a comma-separated flag value; an empty one is refused
    (argparse's type error, so the message names the flag)."""
    items = [s.strip() for s in text.split(",")]
    if not items or any(not s for s in items):
        raise argparse.ArgumentTypeError("empty value in list %r" % errors.Echo(text))
    return items


def integer(text):
    """An integer flag's value: ASCII digits with an optional sign. Python's
    int() also reads other scripts' digits ('٣') and underscores ('1_000'),
    which no other alloclab input (a policy value, a workload parameter)
    reads: refused here too, so that every number is read one way."""
    s = text.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise argparse.ArgumentTypeError("not an integer (ASCII digits 0-9): %r"
                                         % errors.Echo(text))
    if len(s.lstrip("+-").lstrip("0")) > 40:  # past any count; int() refuses 4300 digits
        raise argparse.ArgumentTypeError("%r has more digits than any count takes (40)"
                                         % errors.Echo(text))
    return int(s, 10)


integer.__name__ = "integer"


def real(text):
    """A number flag's value (0.5, 1e-3), read by float() from ASCII text
    only: float() also reads other scripts' digits and underscores."""
    s = text.strip()
    if not s.isascii() or "_" in s:
        raise argparse.ArgumentTypeError("not a number (ASCII digits 0-9): %r"
                                         % errors.Echo(text))
    try:
        return float(s)
    except ValueError:
        raise argparse.ArgumentTypeError("not a number: %r" % errors.Echo(text)) from None


# ------------------------------------------------------------------ output files

def check_output(flag, path, plot=False):
    """Refuse, before anything runs, an output file that could not be
    written, as alloclab.files judges it (a directory, a socket, a named
    pipe with no reader, a missing or unwritable directory), and a plot
    extension matplotlib has no writer for. Nothing is left behind: an
    existing file is not changed, a new one is created and removed again;
    nothing blocks (a pipe is opened without waiting for a reader)."""
    if not path:
        raise UsageError("%s needs a file name" % flag)
    try:
        files.check_output(path, flag)
    except errors.InvalidArgument as e:
        raise UsageError(str(e)) from None
    if plot:
        ext = os.path.splitext(os.path.basename(path))[1][1:].lower()
        if ext:  # no extension: matplotlib writes PNG
            fmts = figure_formats()
            if ext not in fmts:
                raise UsageError("%s %s: unknown plot format %r; valid extensions: %s"
                                 % (flag, errors.Echo(path), errors.Echo(ext), ", ".join(fmts)))


def check_outputs(*outputs):
    """(flag, path or None, "file"|"plot"|"journal") for every file a command
    writes: each checked as check_output does (a journal by sweep's own
    check), and no two naming the same file, which one would overwrite."""
    seen = {}
    for flag, path, kind in outputs:
        if path is None:
            continue
        if kind != "journal":
            check_output(flag, path, plot=kind == "plot")
        real = os.path.realpath(path)
        if real in seen:
            raise UsageError("%s and %s both name %s: one would overwrite the other"
                             % (seen[real], flag, path))
        seen[real] = flag


# The options that name files a command writes, and those that name files
# (or folders) it reads, by their argparse dest.
OUTPUT_OPTIONS = (("json", "--json"), ("csv", "--csv"), ("plot", "--plot"),
                  ("journal", "--journal"), ("timeline", "--timeline"), ("out", "--out"),
                  ("scaling", "--scaling"))
INPUT_OPTIONS = (("calibration", "--calibration"), ("plugin", "--plugin"),
                 ("w_trace", "--trace"), ("files", "RESULT.json"), ("file", "FILE"),
                 ("more", "ROUND.json"), ("tree", "--tree"))


def same_file(a, b):
    """Whether two paths name one file (a symlink, a hard link or another
    spelling of it); by their resolved names when either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _given(args, options):
    """The (flag, path) of each of ``options`` (dest, flag) that args sets."""
    out = []
    for dest, flag in options:
        v = getattr(args, dest, None)
        for path in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(path, str) and path:
                out.append((flag, path))
    return out


def input_paths(args):
    """The (flag, path) of every file or folder the command reads, the
    libarena tree named by $ALLOCLAB_LIBARENA included where --tree may be
    left out. `sim validate --out` may name its --calibration: it writes that
    calibration back with the validation added, as one whole file, so
    validate's --calibration is left out."""
    ins = _given(args, INPUT_OPTIONS)
    if getattr(args, "sim_cmd", None) == "validate":
        ins = [(flag, path) for flag, path in ins if flag != "--calibration"]
    env = os.environ.get(TREE_ENV)
    if hasattr(args, "tree") and not args.tree and env:
        ins.append(("--tree ($%s)" % TREE_ENV, env))
    return ins


def check_not_inputs(args):
    """Refuse an output that names a file the command reads (its
    --calibration, --plugin, --trace, a result or trace it shows, a file of
    its --tree): the write would replace what it read, or what the next run
    needs."""
    refuse_overlap(_given(args, OUTPUT_OPTIONS), input_paths(args))


def _in_tree(path, tree):
    """Whether path is a file that exists in the folder tree (resolved): a
    new file beside the tree's own is not one it reads."""
    tree = os.path.realpath(tree)
    real = os.path.realpath(path)
    return os.path.exists(real) and not os.path.isdir(real) and \
        os.path.commonpath([real, tree]) == tree


def refuse_overlap(outputs, inputs, writes=None):
    """UsageError for the first (flag, path) of ``outputs`` that is one of
    ``inputs``, compared as files (a symlink, a hard link or another
    spelling of one is the same file), or is a file of an input tree.
    ``writes``: the path the user gave, where the output is a file derived
    from it (a figure's path-1.png)."""
    for oflag, out in outputs:
        for iflag, path in inputs:
            tree = iflag.startswith("--tree")
            if not (_in_tree(out, path) if tree else same_file(out, path)):
                continue
            what = "%s %s" % (oflag, errors.Echo(out)) if writes is None else \
                "%s %s would write %s, which" % (oflag, errors.Echo(writes), errors.Echo(out))
            raise UsageError("%s %s the %s this command reads: writing it would replace it; "
                             "give another file name"
                             % (what, "is a file of" if tree else "is", iflag))


def refuse_program_files(flag, out, cmd):
    """UsageError when the output ``out`` is the program ``cmd`` runs or a
    file one of its arguments names (``FILE`` or ``--opt=FILE``): the write
    would replace what the program runs or reads. Checked before it starts."""
    prog = shutil.which(cmd[0]) or cmd[0]
    if os.path.isfile(prog) and same_file(out, prog):
        raise UsageError("%s %s is the program the command runs (%s): writing it would "
                         "replace it; give another file name" % (flag, errors.Echo(out),
                                                                 errors.Echo(cmd[0])))
    for arg in cmd[1:]:
        for path in {arg, arg.partition("=")[2]}:
            if path and os.path.isfile(path) and same_file(out, path):
                raise UsageError("%s %s is a file the command's arguments name (%s): writing "
                                 "it would replace what the program reads; give another "
                                 "file name" % (flag, errors.Echo(out), errors.Echo(arg)))


def plot_paths(flag, path, suffixes, args):
    """The files a --plot-like flag writes for figures with these file
    suffixes (plot.figure_paths), each checked as check_output does, and
    against the command's inputs (``args``), before anything runs. A device
    or a pipe takes one file: where the figures need more (not a PDF), it is
    refused, since the others would be made beside it (/dev/null-1.png)."""
    paths = plot.figure_paths(path, suffixes)
    refuse_overlap([(flag, p) for p in paths[1:]], input_paths(args), writes=path)
    for p in paths:
        check_output(flag, p, plot=True)
    try:
        plot.refuse_files_beside_a_stream(path, paths, flag)
    except errors.InvalidArgument as e:
        raise UsageError(str(e)) from None
    return paths


def write_output(flag, path, write):
    """Write an output file after the run; a failure (a full disk, /dev/full)
    is one error line naming the flag and the file."""
    try:
        write()
    except OSError as e:
        raise RunFailed("%s %s: cannot write: %s" % (
            flag, path, e.strerror or e)) from None


# ------------------------------------------------------------------ counters

def _mean(p, k):
    a = p.data.get(k)
    if a is None or not len(a):
        return math.nan
    a = np.asarray(a, dtype=float)
    return float(np.nanmean(a)) if not np.all(np.isnan(a)) else math.nan


def _is_key(metric, docs):
    """Whether a per-op counter metric is one its layer declares key; a
    layer that declares no counters has no key set: every counter is kept."""
    parts = _counters.split(metric)
    if parts is None:
        return False
    _, layer, name, _ = parts
    if not _counters._declares(layer, docs):
        return True
    d = _counters._desc(layer, name, docs)
    return bool(d and d.get("key"))


def _hidden(values, constant):
    """Whether a counter row is left out: nothing measured or zero
    everywhere, or with ``constant`` (mode all) and two or more columns the
    same in every column."""
    real = [v for v in values if not math.isnan(v)]
    if not real or all(v == 0 for v in real):
        return True
    return constant and len(values) > 1 and len(real) == len(values) and len(set(real)) == 1


def counter_tables(res, mode="key"):
    """[(title, column labels, [(counter, [cell text])], note, heading)] per
    policy: the per-op counters ``mode`` keeps (module doc); a note says
    what was hidden or why nothing was measured; the heading, which columns
    counted on simulated CPUs (None: none did)."""
    if mode == "none":
        return []
    docs = res.metadata.get("counters")
    pols = list(dict.fromkeys(p.params.get("policy") for p in res.points))
    swept = [k for k in res.swept() if k != "policy"]  # workload when several
    out = []
    for pol in pols:
        pts = [p for p in res.points if p.params.get("policy") == pol]
        names = list(dict.fromkeys(k for p in pts for k in p.data if k.endswith("_per_op")))
        if not names:
            if all(p.params.get("stats") == "off" for p in pts):
                out.append(("counters per op, %s" % pol, [], [], "not measured (stats=off)",
                            None))
            continue
        chosen = [k for k in names if mode == "all" or _is_key(k, docs)]
        keep = [k for k in chosen if not _hidden([_mean(p, k) for p in pts], mode == "all")]
        keep.sort(key=lambda k: (k.split(".", 1)[0], not k.endswith(".lock_acquired_per_op")))
        # a parameter one workload of a concatenation has and another lacks: "-"
        labels = ["/".join(("%sp" % p.params[k]) if k == "producers" and k in p.params else
                           str(p.params.get(k, "-")) for k in swept) or "all" for p in pts]
        rows = [(k[:-len("_per_op")], ["n/a" if _counters.unmeasured(p, k, docs) else
                                       fmt_value(_mean(p, k)) for p in pts]) for k in keep]
        title = "counters per op, %s" % pol
        if swept:
            title += " (columns: %s)" % "/".join(swept)
        out.append((title, labels, rows, _hidden_note(mode, len(chosen) - len(keep),
                                                      len(names) - len(chosen)),
                    counters_heading(labels, pts)))
    return out


def _hidden_note(mode, hidden, others):
    """What a counter table left out, and the flag that shows it."""
    s = "" if hidden == 1 else "s"
    if mode == "all":
        return ("%d constant counter%s hidden (zero, n/a, or the same in every column)"
                % (hidden, s)) if hidden else ""
    parts = []
    if hidden:
        parts.append("%d key counter%s zero in every column hidden" % (hidden, s))
    if others:
        parts.append("%d other counter%s" % (others, "" if others == 1 else "s"))
    return "; ".join(parts) + ": --counters all shows them" if parts else ""


def counters_text(res, mode="key"):
    """The counter tables as text (see counter_tables)."""
    out = []
    for title, labels, rows, note, head in counter_tables(res, mode):
        if not labels:
            out += ["%s: %s" % (title, note), ""]
            continue
        out.append(title)
        if head:
            out.append(head)
        if rows:
            fw = max(len(r[0]) for r in rows) + 2
            cw = max([len(s) for s in labels] + [len(s) for _, cells in rows for s in cells])
            out.append(" " * fw + "  " + " ".join("%*s" % (cw, s) for s in labels))
            for name, cells in rows:
                out.append(("  %-*s" % (fw, name)) + " ".join("%*s" % (cw, s) for s in cells))
        if note:
            out.append("  (%s)" % note)
        out.append("")
    return "\n".join(out).rstrip()


# ------------------------------------------------------------------ other sections

def workload_metrics_text(res):
    """The workload's own results: test_vmalloc's kernel summary lines, or
    every wl.<name> metric (mean over runs) per grid point."""
    if not any(k.startswith("wl.") for p in res.points for k in p.data):
        return ""
    if res.points[0].params.get("workload") == "test_vmalloc":
        return summary_text(res)
    out = ["workload metrics (mean over runs):"]
    for p in res.points:
        out.append("  %s" % ", ".join("%s=%s" % (k, v) for k, v in p.params.items()
                                      if k != "workload"))
        for k, v in p.data.items():
            if k.startswith("wl."):
                x = np.asarray(v, dtype=float)
                x = x[~np.isnan(x)]
                out.append("    %-40s %s" % (k[3:], fmt_value(float(x.mean())) if len(x) else "-"))
    return "\n".join(out)


def has_hist(res):
    return any(h.count for p in res.points for hs in p.hist.values() for h in hs)


def hist_text(res):
    """Per point and operation: percentiles from the merged histograms."""
    swept = [k for k in res.swept() if k != "workload"]
    sim = any(_simulated.is_simulated(p) for p in res.points)
    lines = ["per-operation latency (histograms over all runs; each value includes one clock "
             "pair, the timer overhead%s):" % (
                 "; simulated cells: predictions, each with its clock pair's predicted "
                 "cost" if sim else "")]
    for p in res.points:
        label = ", ".join(str(p.params[k]) if k == "policy" else "%s=%s" % (k, p.params[k])
                          for k in swept) or str(p.params.get("policy"))
        for op in OPS:
            hs = p.hist.get(op)
            if not hs or not sum(h.count for h in hs):
                continue
            h = sum(hs[1:], hs[0].copy())
            ovh = float(np.mean(p.data["timer_overhead_ns"]))
            if _simulated.is_simulated(p):
                lines.append("  %-40s %-5s %s  (predicted)" % (label, op, h.summary()))
            else:
                lines.append("  %-40s %-5s %s" % (label, op, h.summary(ovh)))
    return "\n".join(lines)


def merged_warnings(tables):
    """The warnings of several tables, one line per kind: the run-stability
    kinds (few runs, unstable, steal, preemption, short phases) over the
    cells of every table, each cell named with its metric; the others (n/a,
    truncated, refused, clock) once each."""
    if len(tables) <= 1:
        return tables[0].warning_lines() if tables else []
    cells = [("%s %s" % (t.metric, t.cell_label(*k)), st) for t in tables
             for k, st in sorted(t.cell_stats.items())]
    lines = _stats.warning_lines(cells)
    for t in tables:
        own = set(_stats.warning_lines([(t.cell_label(*k), st)
                                        for k, st in sorted(t.cell_stats.items())]))
        for line in t.warning_lines():
            if line not in own and line not in lines:
                lines.append(line)
    return lines


def unwrapped(lines):
    """Wrapped warning lines (continuations indented by 4) joined again: a
    line each for stderr and Markdown lists."""
    out = []
    for line in lines:
        if line.startswith("    ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


# ------------------------------------------------------------------ Markdown

def _md_row(cells):
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def md_table(header, rows, right=True):
    """A GitHub-flavoured Markdown table; numeric columns right-aligned."""
    out = [_md_row(header), "|" + "|".join([" --- "] + [" ---: " if right else " --- "] *
                                           (len(header) - 1)) + "|"]
    out += [_md_row(r) for r in rows]
    return "\n".join(out)


def table_markdown(t, sd=False, ci=False):
    """A present.table.Table as a Markdown table: a column per block and column."""
    nb, nr, nc = t.cube.shape
    head = [ROW_LABELS.get(t.row_key, t.row_key or "")]
    for b in range(nb):
        for c in range(nc):
            lab = table_label(t.col_key, t.cols[c]) if t.col_key else t.metric
            head.append("%s %s" % (t.block_label(b), lab) if nb > 1 else lab)
    rows = []
    for r in range(nr):
        row = [table_label(t.row_key, t.rows[r]) if t.row_key else ""]
        for b in range(nb):
            for c in range(nc):
                row.append(_md_cell(t, b, r, c, sd, ci))
        rows.append(row)
    sim = t.sim_heading()
    return "**%s**\n\n%s%s" % (t.title, "_%s_\n\n" % sim if sim else "", md_table(head, rows))


def _md_cell(t, b, r, c, sd, ci):
    v = float(t.cube[b, r, c])
    if (b, r, c) in t.unmeasured and math.isnan(v):
        return "n/a"
    s = fmt_value(v)
    spread = t.sd_cube if sd else t.ci_cube if ci else None
    if spread is not None and t.n[b, r, c] > 1 and not math.isnan(spread[b, r, c]):
        s += " ±" + fmt_value(float(spread[b, r, c]))
    return s


def counters_markdown(res, mode="key"):
    out = []
    for title, labels, rows, note, head in counter_tables(res, mode):
        if not labels:
            out.append("**%s**: %s" % (title, note))
            continue
        out.append("**%s**" % title + ("\n_%s_" % head if head else ""))
        if rows:
            out.append(md_table(["counter"] + labels, [[n] + cells for n, cells in rows]))
        if note:
            out.append("_%s_" % note)
    return "\n\n".join(out)


# ------------------------------------------------------------------ a whole result

class View:
    """What to print of a Result: metrics, table axes, statistic, spread,
    histograms, counter mode and format (the flags of run and show)."""

    def __init__(self, metrics, rows, cols, stat="mean", sd=False, ci=False, hist=False,
                 counters="key", fmt="text", explicit_metrics=False):
        self.metrics, self.rows, self.cols = metrics, rows, cols
        self.stat, self.sd, self.ci, self.hist = stat, sd, ci, hist
        self.counters, self.fmt, self.explicit = counters, fmt, explicit_metrics


def render(res, view):
    """The text for stdout of ``res`` in ``view.fmt``; warnings that must not
    reach stdout (json, csv) are written to stderr here."""
    if view.fmt == "json":
        _stderr_warnings(res, view)
        return res.to_json(indent=1)
    if view.fmt == "csv":
        _stderr_warnings(res, view)
        return _csv_text(res, view)
    tables = [res.table(m, rows=view.rows, cols=view.cols, stat=view.stat)
              for m in view.metrics]
    if view.fmt == "markdown":
        return _markdown(res, view, tables)
    return _text(res, view, tables)


def _text(res, view, tables):
    out = [t.to_text(sd=view.sd, ci=view.ci, warnings=False) for t in tables]
    if res.interrupted_line():  # first: every number below is of a partial run
        out.insert(0, res.interrupted_line())
    w = merged_warnings(tables)
    if w and out:
        out[-1] += "\nwarnings:\n" + "\n".join("  " + x for x in w)
    out = [x + "\n" for x in out]
    if view.hist and has_hist(res):
        out.append(hist_text(res) + "\n")
    out.append(res.cpu_line())
    out.append(res.stats_line())
    out.extend(res.notes_lines())
    mw = res.machine_warnings()
    if mw:
        out.append("machine:\n" + "\n".join("  " + x for x in mw))
    for extra in (workload_metrics_text(res), counters_text(res, view.counters)):
        if extra:
            out.append("\n" + extra)
    return "\n".join(out)


def _markdown(res, view, tables):
    out = [table_markdown(t, sd=view.sd, ci=view.ci) for t in tables]
    w = unwrapped(merged_warnings(tables)) + ["machine: " + x for x in res.machine_warnings()]
    if res.interrupted_line():
        w.insert(0, res.interrupted_line())
    if w:
        out.append("Warnings:\n\n" + "\n".join("- " + x for x in w))
    if view.hist and has_hist(res):
        out.append("```\n%s\n```" % hist_text(res))
    out.append("\n".join("- " + x for x in [res.cpu_line(), res.stats_line()] +
                          res.notes_lines()))
    wtext = workload_metrics_text(res)
    if wtext:
        out.append("```\n%s\n```" % wtext)
    c = counters_markdown(res, view.counters)
    if c:
        out.append(c)
    return "\n\n".join(out)


def _stderr_warnings(res, view):
    names = [m for m in view.metrics if m in res.metrics()]
    tables = [res.table(m, rows=view.rows, cols=view.cols, stat=view.stat) for m in names]
    if res.interrupted_line():
        warn(res.interrupted_line())
    for line in unwrapped(merged_warnings(tables)):
        warn(line)
    for line in res.machine_warnings():
        warn("machine: " + line)


def _csv_text(res, view):
    import csv
    rows = res.rows()
    cols = list(dict.fromkeys(k for r in rows for k in r))
    if view.explicit:
        metrics = set(res.metrics())
        cols = [c for c in cols if c not in metrics or c in view.metrics]
    f = io.StringIO()
    w = csv.DictWriter(f, fieldnames=cols, restval="", extrasaction="ignore",
                       lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: ("" if v is None else v) for k, v in r.items()})
    return f.getvalue().rstrip("\n")
