"""sweep(): a run() for long experiments, resumable, interleaved and distributable.

    res = alloclab.sweep("malloc-free", ["libarena-spill", "libarena-transfer"],
                         producers=[1, 2, 4, 8], allocs_per_cycle=[16, 64, 256],
                         runs=5, journal="spill-vs-transfer.jsonl")

It validates and builds the grid with run.plan() and runs each (cell, run)
with run.run_once(), as run() does, and adds:

- order: every (cell, run) pair is a unit of work; run i of every cell
  comes before run i+1 of any, and within a round the cells (so the
  policies) are in a random order drawn from ``order_seed`` (default: the
  sweep's seed), so that machine drift (thermal, a neighbour on a shared
  host) does not favour one side of an A/B comparison;
- a progress bar (tqdm: done/total, rate and ETA) on stderr (progress.py);
- resumability: with ``journal=PATH`` each finished unit is appended to a
  JSON Lines file as soon as it is done (a header line with the sweep's
  settings first). Run the same sweep again with the same journal and the
  units already there are skipped; the Result holds all of them. The file
  is read and checked whole before anything is written to it: another
  sweep's journal, or a file that is not a journal (a header or a line of
  the wrong shape, not UTF-8), is refused with the file left as it was,
  and so is a journal that could not be written (check_journal() does
  the same checks alone). An interrupted write (a last line cut short) is
  dropped and redone;
- ``executor=``: any concurrent.futures.Executor runs the units, meant to
  spread them over machines (dask: ``client.get_executor()``; alloclab
  submits with ``pure=False`` itself, without which dask would hand back one
  cached result for identical calls). Timed units must never run side by
  side on the same cores, so a local Thread/ProcessPoolExecutor with more
  than one worker is refused (``allow_concurrent=True`` runs it anyway, with
  a warning), and a dask cluster with more than one worker thread on a host
  is warned about. Simulated cells (cpu="simulated", virtual time on one
  thread) are not timed on the machine: a sweep of simulated cells only
  takes any executor, local pools of many workers included, and gives the
  numbers a serial sweep gives.

The Result's metadata["sweep"] records the order, the journal, how many
units were resumed, and the wall time of this session beside the sum of
its units' own run times (the sweep's overhead).
"""

import concurrent.futures as cf
import contextlib
import json
import os
import random
import signal
import threading
import time

from ..results import _counters
from .. import errors, files
from ..host import machine
from .executors import ConcurrentExecutorWarning, check_executor, is_dask  # noqa: F401
from ..results.result import Result
from ..host.machine import collect_metadata
from .progress import Bar
from .run import plan, run_once, task_policies
from ..results.result import point_info
from ..results.result import run_metrics
from ..results.result import json_kind

JOURNAL_FORMAT = "alloclab-sweep-journal"
JOURNAL_VERSION = 1


def _run_unit(task, run_index):
    """One unit, in whatever process the executor picked: (raw, wall seconds)."""
    t0 = time.perf_counter()
    raw = run_once(task, run_index)
    return raw, time.perf_counter() - t0


def _cell_key(point):
    return json.dumps(point, sort_keys=True, default=str)


def _norm(obj):
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _journal_path(path):
    if isinstance(path, bool) or not isinstance(path, (str, bytes, os.PathLike)):
        raise errors.ParameterTypeError("journal must be a path (str or os.PathLike), not %r"
                                        % (errors.Echo(path),), name="journal", value=path)
    p = os.fsdecode(os.fspath(path))
    if not p:
        raise errors.InvalidArgument("journal must be a path, not ''", name="journal", value=p)
    return p


def _bad_line(path, n, why):
    return errors.FileFormatError("journal %s: line %d is not a finished run (%s); a journal "
                                  "holds only what alloclab wrote to it" % (path, n, why),
                                  path=path)


def _check_unit(path, n, line):
    """A unit line parsed and checked: (cell key, run, raw, wall_s)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad_line(path, n, "not UTF-8 text") from None
    try:
        d = json.loads(text)
    except (ValueError, RecursionError):  # a line nested too deeply to decode is not ours
        raise _bad_line(path, n, "not JSON") from None
    if not isinstance(d, dict):
        raise _bad_line(path, n, "not a JSON object")
    missing = [k for k in ("point", "run", "raw") if k not in d]
    if missing:
        raise _bad_line(path, n, "no %s" % ", ".join(missing))
    run, wall, raw = d["run"], d.get("wall_s"), d["raw"]
    if not isinstance(d["point"], dict):
        raise _bad_line(path, n, "point is not an object")
    if isinstance(run, bool) or not isinstance(run, int) or run < 0:
        raise _bad_line(path, n, "run=%r is not a run index" % (run,))
    if wall is not None and (isinstance(wall, bool) or not isinstance(wall, (int, float))):
        raise _bad_line(path, n, "wall_s=%r is not a number of seconds" % (wall,))
    if not isinstance(raw, dict):
        raise _bad_line(path, n, "raw is not an object")

    try:  # what the Result is built from, read now rather than after the runs
        run_metrics(raw)
        point_info([raw])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError,
            ZeroDivisionError) as e:
        raise _bad_line(path, n, "its raw run lacks or garbles %s" % e) from None
    return _cell_key(d["point"]), run, raw, wall


def _read_journal(path, settings):
    """Read and check the journal at ``path`` against a sweep's settings,
    writing nothing. None when there is no journal yet (no file, or an empty
    one); else (metadata, {(cell key, run): (raw, wall_s)}, length to keep:
    the bytes before a last line cut short by an interrupted write)."""
    data = _journal_bytes(path)
    if not data:
        return None
    keep = data.rfind(b"\n") + 1
    lines = data[:keep].split(b"\n")[:-1]
    header = _journal_header(path, lines, data, settings)
    done = {}
    for n, line in enumerate(lines[1:], 2):
        key, run, raw, wall = _check_unit(path, n, line)
        done[(key, run)] = (raw, wall)
    return header.get("metadata"), done, keep


def _journal_bytes(path):
    """The journal file's bytes; None when there is none yet (no file, or a
    symlink to where one will be made). Anything but a regular file (a
    directory, a device, a pipe, a socket) is refused without opening it
    (alloclab.files), as is one that cannot be read; a file that starts
    with a NUL byte (binary, or a huge sparse file's hole) is no journal and
    is refused before the rest is read."""
    if not os.path.exists(path):
        return None
    try:
        f = files.open_input(path, "journal")
    except errors.InvalidArgument as e:
        raise errors.InvalidArgument(str(e), name="journal", value=path) from None
    try:
        with f:
            head = f.read(1)
            if head == b"\0":  # binary, or a sparse file's hole: not read on
                raise errors.FileFormatError(
                    "%s is not an alloclab sweep journal (it starts with a NUL byte, not the "
                    "'{' of a journal header); it was left as it is" % path, path=path)
            return head + f.read()
    except OSError as e:
        raise errors.InvalidArgument("journal %s cannot be read: %s" % (path, e.strerror or e),
                                     name="journal", value=path) from None


def _journal_header(path, lines, data, settings):
    """The journal's header (its first complete line), checked: a journal
    header of a version this alloclab reads, written by this same sweep."""
    if not lines:
        if data.startswith(b'{"format": "%s"' % JOURNAL_FORMAT.encode()):
            raise errors.FileFormatError(
                "journal %s: its header line was cut short (the sweep that started it was "
                "stopped while writing it); remove the file to start the sweep again" % path,
                path=path)
        raise errors.FileFormatError("%s is not an alloclab sweep journal (it holds no "
                                     "complete line); it was left as it is" % path, path=path)
    try:
        header = json.loads(lines[0].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != JOURNAL_FORMAT:
        raise errors.FileFormatError("%s is not an alloclab sweep journal (its first line is "
                                     "not a journal header); it was left as it is" % path,
                                     path=path)
    version = header.get("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise errors.FileFormatError("journal %s: its header's version is %r, not an integer"
                                     % (path, version), path=path)
    if version > JOURNAL_VERSION:
        raise errors.FileFormatError("journal %s is version %s, newer than this alloclab "
                                     "reads (%d)" % (path, version, JOURNAL_VERSION), path=path)
    for k in ("settings", "metadata"):
        if not isinstance(header.get(k, {}), dict):
            raise errors.FileFormatError("journal %s: its header's %s is a JSON %s, not an "
                                         "object" % (path, k, json_kind(header[k])), path=path)
    old, new = _resumable(header.get("settings", {})), _resumable(_norm(settings))
    if old != new:
        raise errors.InvalidArgument(
            "journal %s belongs to a different sweep (it differs in: %s); use another "
            "journal file to start this one" % (path, "; ".join(_differences(old, new))),
            name="journal", value=path)
    return header


def _resumable(settings):
    """The settings a journal must match to be resumed. Where a run ran
    (isolate) and whether its objects were checked (check) change no
    result: a journal resumes whatever they say this time."""
    return {k: v for k, v in settings.items() if k not in ("isolate", "check")}


def _differences(old, new, prefix=""):
    """'key: journal value here value' for each setting that differs, one
    level into nested settings (the grid under "sweep")."""
    out = []
    for k in sorted(set(old) | set(new), key=str):
        a, b = old.get(k), new.get(k)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict) and not prefix:
            out += _differences(a, b, "%s." % k)
        else:
            out.append("%s%s %s in the journal, %s here" % (
                prefix, k, json.dumps(a), json.dumps(b)))
    return out


def _check_writable(path):
    """Refuse a journal that could not be written, before anything runs
    (alloclab.files judges the path); a journal is read back to resume, so
    it must be a regular file (or a new one), never a device or a pipe."""
    try:
        how = files.check_output(path, "journal")
    except errors.InvalidArgument as e:
        raise errors.InvalidArgument(str(e), name="journal", value=path) from None
    if how != files.REPLACE:
        raise errors.InvalidArgument(
            "journal %s is not a regular file (%s): a journal is read back to resume a sweep"
            % (path, files.kind(os.stat(path).st_mode)), name="journal", value=path)


def check_journal(journal, settings):
    """Check, writing nothing, that ``journal`` can hold the sweep whose
    settings plan() returned: a new file in a writable directory, or a
    writable journal of this very sweep. Returns the number of runs already
    in it. Raises InvalidArgument (a directory, unwritable, another sweep's
    journal) or FileFormatError (not a journal, a line that is not a run)."""
    path = _journal_path(journal)
    state = _read_journal(path, settings)
    _check_writable(path)
    return len(state[1]) if state else 0


class _Journal:
    """The JSON Lines file of a sweep: a header, then one line per finished unit.
    An existing file is read and checked whole before anything is written to
    it; one that is refused is left byte for byte as it was."""

    def __init__(self, path, settings, metadata, units=None):
        self.path = _journal_path(path)
        self.done = {}  # (cell key, run) -> (raw, wall_s)
        self.metadata = metadata
        header = {"format": JOURNAL_FORMAT, "version": JOURNAL_VERSION,
                  "settings": _norm(settings), "metadata": metadata}
        state = _read_journal(self.path, settings)
        _check_writable(self.path)
        if state is None:
            self.f = open(self.path, "w")
            self._write(header)
            return
        md, self.done, keep = state
        stray = set(self.done) - units if units is not None else ()
        if stray:  # settings match, so only an edited journal names a unit outside the grid
            key, r = sorted(stray, key=repr)[0]
            raise errors.FileFormatError(
                "journal %s: %d line(s) name a unit that is not in this sweep (e.g. run %d of "
                "point %s); a journal holds only what alloclab wrote to it"
                % (self.path, len(stray), r, key), path=self.path)
        if md is not None:
            self.metadata = md
        if keep < os.path.getsize(self.path):  # a write cut short: drop the partial line
            with open(self.path, "r+b") as f:
                f.truncate(keep)
        self.f = open(self.path, "a")

    def _write(self, obj):
        # A Ctrl-C must not cut a line in half: the line is built first, and
        # written and flushed with the interrupting signals held back (main thread).
        line = json.dumps(obj, allow_nan=True) + "\n"
        with _sigint_deferred():
            self.f.write(line)
            self.f.flush()

    def add(self, point, run, raw, wall_s):
        self.done[(_cell_key(point), run)] = (raw, wall_s)
        self._write({"point": point, "run": run, "wall_s": wall_s, "raw": raw})

    def close(self):
        self.f.close()


@contextlib.contextmanager
def _sigint_deferred():
    """Hold SIGINT (and SIGTERM/SIGHUP where a handler turns them into an
    exception, as the CLI's does) back for the block (in the main thread;
    elsewhere Python delivers no signals anyway), then deliver them as the
    previous handlers would: after the block, not in the middle of it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got, prev = [], {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            h = signal.getsignal(sig)
            if sig == signal.SIGINT or callable(h):
                prev[sig] = signal.signal(sig, lambda s, frame: got.append((s, frame)))
    except (ValueError, OSError):  # pragma: no cover - no signal support here
        for sig, h in prev.items():
            signal.signal(sig, h)
        yield
        return
    try:
        yield
    finally:
        for sig, h in prev.items():
            signal.signal(sig, h)
        if got:
            sig, frame = got[-1]
            h = prev[sig]
            if callable(h):
                h(sig, frame)
            elif h == signal.SIG_DFL:
                raise KeyboardInterrupt


def sweep(workload, policy, runs=None, journal=None, executor=None, progress=None, shuffle=True,
          order_seed=None, allow_concurrent=False, **kw):
    """Run ``workload`` on ``policy`` over the product of every list given,
    as run() does (same arguments: producers, cpu, timing, warmup_cycles,
    cycles, duration, seed, histogram, mem_sample, effort, processes, isolate,
    check and the workload's parameters), with the order, progress, journal and executor described
    in the module doc. progress: None = a bar when stderr is a terminal and
    the sweep lasts (progress.py).
    shuffle=False keeps grid order within each round of runs.

    Returns the Result of every cell and run, resumed ones included.
    """
    _refuse_run_only(kw)
    settings, tasks = plan(workload, policy, runs=runs, **kw)
    if executor is not None:  # simulated cells are not timed: they may run side by side
        check_executor(executor, allow_concurrent,
                       timed=not all(t["cpu"] == "simulated" for t in tasks))
    order_seed = settings["seed"] if order_seed is None else order_seed
    units = _units(len(tasks), settings["runs"], shuffle, order_seed)
    meta = collect_metadata()
    cells = {(_cell_key(t["point"]), r) for t in tasks for r in range(settings["runs"])}
    jr = _Journal(journal, settings, meta, cells) if journal is not None else None
    done = dict(jr.done) if jr else {}
    resumed = sum(1 for i, r in units if (_cell_key(tasks[i]["point"]), r) in done)
    todo = [(i, r) for i, r in units if (_cell_key(tasks[i]["point"]), r) not in done]
    bar = Bar(len(units), "alloclab sweep", progress, initial=resumed)
    t_start = time.perf_counter()
    session_run_s = 0.0
    load_before = machine.loadavg()  # machine state: the load around this session's runs

    def finished(i, r, raw, wall):
        nonlocal session_run_s
        done[(_cell_key(tasks[i]["point"]), r)] = (raw, wall)
        session_run_s += wall
        if jr:
            jr.add(tasks[i]["point"], r, raw, wall)
        bar.update(1)

    try:
        _execute(tasks, todo, executor, finished)
    finally:
        bar.close()
        if jr:
            jr.close()
    wall = time.perf_counter() - t_start

    md = dict(jr.metadata if jr else meta)
    md["run"] = settings
    md["counters"] = _counters.layer_docs(task_policies(tasks))
    md["load_before"], md["load_after"] = load_before, machine.loadavg()
    md["sweep"] = _sweep_info(shuffle, order_seed, units, resumed, journal, executor, wall,
                              session_run_s, done)
    out = []
    for t in tasks:
        key = _cell_key(t["point"])
        out.append((t["point"], [done[(key, r)][0] for r in range(settings["runs"])]))
    return Result.from_raw(md, out)


def _refuse_run_only(kw):
    """run()'s options that add rounds as the runs come in, named: a sweep's
    cells run in a shuffled order, or on an executor, or resume from a journal."""
    only_run = sorted(set(kw) & {"target_ci", "budget", "steal_reruns"})
    if only_run:
        raise errors.InvalidArgument("sweep() does not take %s: run() does (adaptive rounds and "
                                     "steal reruns run a cell's policies together, one round "
                                     "after the other)" % ", ".join(only_run))


def _units(ntasks, runs, shuffle, order_seed):
    """Every (cell, run) pair in the order they run: round by round (run r of
    every cell before run r+1 of any), each round's cells shuffled by a PRNG
    seeded from (order_seed, round) unless ``shuffle`` is False."""
    units = []
    for r in range(runs):
        idx = list(range(ntasks))
        if shuffle:
            random.Random("%s/%d" % (order_seed, r)).shuffle(idx)
        units += [(i, r) for i in idx]
    return units


def _execute(tasks, todo, executor, finished):
    """Run every (cell, run) of ``todo`` here, in order, or on ``executor``
    as they complete; ``finished(i, r, raw, wall)`` records each. An error
    or Ctrl-C cancels the futures not yet started."""
    if executor is None:
        for i, r in todo:
            raw, wall = _run_unit(tasks[i], r)
            finished(i, r, raw, wall)
        return
    extra = {"pure": False} if is_dask(executor) else {}
    futs = {executor.submit(_run_unit, tasks[i], r, **extra): (i, r) for i, r in todo}
    try:
        for f in cf.as_completed(futs):
            i, r = futs[f]
            raw, wall = f.result()
            finished(i, r, raw, wall)
    except BaseException:
        for f in futs:
            f.cancel()
        raise


def _sweep_info(shuffle, order_seed, units, resumed, journal, executor, wall, session_run_s,
                done):
    """The sweep's own metadata: order, units, resumption, journal, executor
    and the time spent in this session and in all runs."""
    return {
        "order": "shuffled" if shuffle else "grid",
        "order_seed": order_seed,
        "units": len(units),
        "resumed_units": resumed,
        "journal": os.fspath(journal) if journal is not None else None,
        "executor": type(executor).__name__ if executor is not None else None,
        "session_wall_s": wall,
        "session_run_s": session_run_s,
        "run_s": sum(w for _, w in done.values() if w is not None),
    }
