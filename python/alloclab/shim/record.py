"""Record a program's malloc-family calls into traces (docs/record.md).

    rec = alloclab.record(["gcc", "-O2", "-c", "x.c"], "gcc.trace")
    rec.returncode, rec.images[0]["file"], rec.index

``record(cmd, out, policy=None)`` runs cmd under the preload shim in record
mode (ALLOCLAB_RECORD: every process image writes a raw file into a private
temporary directory, see csrc/preload/record.c), waits for it, finalises
each raw file into a sealed trace (al_rec_finish) and writes them: ``out``
for the first process image (the command itself), every further image (a
fork child, an exec'd program) beside it as ``<stem>.<pid>[.<n>]<ext>``, and
the index ``<out>.index.json`` naming them all with how each began (first,
fork, exec, spawn) and its parent image. Without a policy glibc serves and
is recorded; with one, the policy serves (as ``alloclab preload``).

Everything that can be refused is refused before the command starts: no
command, a command that cannot be found, an ``out`` that cannot take a
trace (alloclab.files: a directory, a socket, a FIFO with no reader, '',
a missing directory), a policy the shim cannot run. The traces are written
under temporary names and renamed into place once all are written, so a
failure leaves nothing half-written, and nothing is renamed over a file
that is not a regular one: a character device ``out`` takes the first
image's trace in place and nothing else. ``out=None`` keeps the traces in
memory (``rec.images[i]["trace"]``, open alloclab.Trace objects).

The command runs in a process group of its own under a supervisor
(alloclab/_supervise.py) that kills the group and removes the raw folder
when this process dies; a raw folder left by a recorder killed later (while
it finalised) is removed by the next record (clean_stale). Images that ran
without the recorder (a static or setuid program, an ``env -i`` child) are
named in ``rec.unrecorded`` (unrecorded()).

``finish(raw)`` is the finaliser alone: (Trace, info) of one raw file.
Cost: the finaliser reads the raw file once, decoding as it merges the
threads; it holds the trace (48 bytes per op) and its live objects.
"""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

from .. import errors, files
from . import preload
from ..cbind._ffi import ffi, lib, preload_path
from ..traces.trace import COMPRESSORS, DEFAULT_COMPRESSOR, Trace, machine_info, now_utc

INDEX_SUFFIX = ".index.json"
_END = {0: "killed", 1: "exit", 2: "exec"}


class Recording:
    """What ``record`` did: ``returncode`` (the command's status, negative
    for a signal), ``images`` (one dict per process image, the first
    process first: path, pid, ppid, exe, argv, how, parent, ops, threads,
    objects, complete, end, note, unrecorded; ``trace`` when kept in
    memory), ``index`` (the index file's path, None in memory), ``out``
    (the first image's trace file), ``stdout`` and ``stderr`` (with
    capture_output), with a policy, ``stats`` (the shim's merged
    stats, preload.collect: ``on_glibc`` names any process the policy did
    not serve), and ``notes``, lines the caller should be told (the CLI
    prints them as warnings): images not written to a device ``out``;
    ``unrecorded``: one line per process image that ran without the
    recorder (unrecorded(): a static or setuid program, an ``env -i``
    child), whose calls are in no trace."""

    def __init__(self, returncode, images, out, index, stats=None, proc=None):
        self.returncode = returncode
        self.stdout = getattr(proc, "stdout", None)  # with capture_output
        self.stderr = getattr(proc, "stderr", None)
        self.images = images
        self.out = out
        self.index = index
        self.stats = stats
        self.notes = []  # what the caller should be told: traces not written, ...
        self.unrecorded = []  # the process images that ran without the recorder

    @property
    def files(self):
        """Every file written: the traces and the index."""
        return [im["path"] for im in self.images if im.get("path")] + \
            ([self.index] if self.index else [])

    def close(self):
        for im in self.images:
            if im.get("trace") is not None:
                im["trace"].close()


def finish(raw):
    """(Trace, info dict) of one raw file (al_rec_finish): a file cut short
    is finalised up to its last complete chunk (info["complete"] False and
    info["note"] says where). FileFormatError when it is not a raw file of
    this version or does not decode; InvalidArgument, without opening it,
    when raw is missing or not a regular file (alloclab.files: an open of a
    FIFO would block)."""
    files.check_input(raw, "raw file")
    out = ffi.new("struct al_trace **")
    info = ffi.new("struct al_rec_info *")
    err = ffi.new("char[512]")
    rc = lib.al_rec_finish(os.fsencode(raw), out, info, err, 512)
    msg = ffi.string(err).decode("utf-8", "replace")
    if rc == -12:
        raise errors.AllocatorExhausted("out of memory finalising %s" % raw)
    if rc:
        raise errors.FileFormatError("%s: %s" % (raw, msg or os.strerror(-rc)))
    d = {k: getattr(info, k) for k in ("pid", "ppid", "version", "threads", "start_ns",
                                       "file_bytes", "valid_bytes", "chunks", "ops",
                                       "duplicates", "unrecorded", "ticks_per_ns")}
    d["complete"] = bool(info.complete)
    d["end"] = _END.get(info.end, "killed")
    d["note"] = ffi.string(info.note).decode("utf-8", "replace")
    return Trace(out[0]), d


def check_out(out):
    """How ``out`` will be written (files.REPLACE or files.IN_PLACE), or
    InvalidArgument saying why it cannot be; checked before the command
    runs, nothing changed (alloclab.files.check_output). A regular file or
    a new one is replaced whole, and then its index must be writable too; a
    character device or a pipe with a reader takes the first image's trace
    in place; a directory, a socket, a pipe with no reader or '' is refused.
    A symlink is followed and its target judged."""
    how = files.check_output(out, "trace")
    if how == files.REPLACE:
        files.check_output(os.fspath(out) + INDEX_SUFFIX, "index")
    return how


def check_command(cmd):
    """Raise InvalidArgument unless cmd names a program that can be run."""
    if not cmd:
        raise errors.InvalidArgument("record needs a command: record(['prog', 'arg'], out)")
    prog = cmd[0]
    path = prog if os.sep in prog else shutil.which(prog)
    if not path or not os.path.exists(path):
        raise errors.InvalidArgument("cannot run %s: command not found" % prog, value=prog)
    if os.path.isdir(path) or not os.access(path, os.X_OK):
        raise errors.InvalidArgument("cannot run %s: not an executable file" % prog, value=prog)


def command(argv, raw_dir, policy=None, env=None):
    """(argv, env) that run argv recording into raw_dir (the shim's
    ALLOCLAB_RECORD), on the policy or, without one, on glibc. Every
    process image also writes its stats record into raw_dir/stats
    (unrecorded() and, with a policy, preload.collect read them): it says
    what each image exec'd, which tells the images that ran without the
    recorder."""
    if policy is not None:
        argv, env = preload.command(policy, argv, stats=os.path.join(raw_dir, "stats"),
                                    env=env)
    else:
        shim = preload_path()
        if not os.path.exists(shim):
            raise errors.AlloclabError("the preload shim is not built: %s is missing" % shim)
        env = dict(os.environ if env is None else env)
        pre = [p for p in env.get("LD_PRELOAD", "").split() if p and p != shim]
        env["LD_PRELOAD"] = " ".join([shim] + pre)
        env.pop("ALLOCLAB_POLICY", None)
        stats = os.path.join(raw_dir, "stats")
        os.makedirs(stats, exist_ok=True)
        env["ALLOCLAB_STATS"] = os.path.abspath(stats)
    env["ALLOCLAB_RECORD"] = os.path.abspath(raw_dir)
    return list(argv), env


def unrecorded(stats_dir, images, policy=None):
    """One line per process image that ran without the recorder, as
    ``alloclab preload`` names the processes that ran without the policy:
    the image a process exec'd last, when it wrote no record of its own and
    is in no trace (a static or setuid program, which the loader does not
    preload into, or an environment that dropped LD_PRELOAD or
    ALLOCLAB_RECORD: ``env -i``). ``images`` are the traced ones (pid, exe)."""
    traced = {(im["pid"], im.get("exe")) for im in images}
    last = {}
    for r in preload.records(stats_dir):  # in (pid, generation) order: the last wins
        last[r["pid"]] = r
    out = []
    for pid, r in sorted(last.items()):
        if r.get("end") != "exec":
            continue
        target = r.get("exec") or ""
        path = target if "/" in target else (shutil.which(target) or "")
        if path and (pid, os.path.realpath(path)) in traced:
            continue  # traced, though it wrote no stats record (ALLOCLAB_STATS dropped)
        # preload's own test of an image the loader does not preload into
        why = preload.image_skips_preload(path) if path else None
        if why is None and r.get("exec_preload"):
            continue  # its environment kept the recorder: killed before its image started
        why = why or "the environment it was given drops LD_PRELOAD or ALLOCLAB_RECORD%s" % (
            " or ALLOCLAB_POLICY" if policy is not None else "")
        out.append("pid %d (%s): exec'd %s, which ran without the recorder (%s)"
                   % (pid, os.path.basename(target) or "?", target or "?", why))
    return out


def _os_text(s):
    """A string of the shim's index as the OS text it was: the shim writes
    every byte of 0x7f and above as the escape \\u00XX (a byte, not a code
    point: JSON cannot carry bytes), so Latin-1 gives the bytes back, and
    they are decoded as the file system's names are, UTF-8 with
    surrogateescape (os.fsdecode): './prög' stays './prög', and a byte that
    is not UTF-8 becomes a lone surrogate that os.fsencode turns back into
    that byte."""
    if not isinstance(s, str):
        return s
    try:
        return s.encode("latin-1").decode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # not the shim's escapes: left as it is
        return s


def _read_index(raw_dir):
    path = os.path.join(raw_dir, "index.jsonl")
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a killed process
                entry["exe"] = _os_text(entry.get("exe"))
                if isinstance(entry.get("argv"), list):
                    entry["argv"] = [_os_text(a) for a in entry["argv"]]
                out.append(entry)
    except FileNotFoundError:
        pass
    return out


def _lineage(images, root_ppid):
    """Order the images (the first process first, then by start) and say
    how each began: 'first', 'exec' (an earlier image of its pid), 'fork'
    (a child of a recorded image) or 'spawn' (its parent was not recorded)."""
    images.sort(key=lambda im: im["start_ns"])
    firsts = [im for im in images if im["ppid"] == root_ppid]
    if firsts:
        images.remove(firsts[0])
        images.insert(0, firsts[0])
    for i, im in enumerate(images):
        earlier = [j for j, o in enumerate(images[:i]) if o["start_ns"] <= im["start_ns"]]
        same = [j for j in earlier if images[j]["pid"] == im["pid"]]
        par = [j for j in earlier if images[j]["pid"] == im["ppid"]]
        if i == 0 and not same:
            im["how"], im["parent"] = "first", None
        elif same:
            im["how"], im["parent"] = "exec", same[-1]
        elif par:
            im["how"], im["parent"] = "fork", par[-1]
        else:
            im["how"], im["parent"] = "spawn", None
    return images


def _image(raw_dir, entry, policy):
    trace, info = finish(os.path.join(raw_dir, entry["file"]))
    trace.meta.update(program=entry.get("exe"), argv=entry.get("argv"), pid=entry["pid"],
                      ppid=entry["ppid"], policy=policy, recorded=now_utc(),
                      machine=machine_info(), complete=info["complete"], end=info["end"],
                      note=info["note"], unrecorded=info["unrecorded"])
    im = {"pid": entry["pid"], "ppid": entry["ppid"], "exe": entry.get("exe"),
          "argv": entry.get("argv"), "start_ns": entry["start_ns"], "ops": int(trace.nops),
          "threads": int(trace.nthreads), "objects": int(trace.nobjects),
          "raw_bytes": info["valid_bytes"], "trace": trace}
    im.update({k: info[k] for k in ("complete", "end", "note", "unrecorded", "duplicates")})
    return im


def _names(out, images):
    """The trace file of each image: out for the first, <stem>.<pid>[.<n>]<ext>
    for the others; a name taken by something that is not a regular file (a
    directory, a pipe) is passed over for the next <n>, never written."""
    stem, ext = os.path.splitext(os.fspath(out))
    seen = {}
    for i, im in enumerate(images):
        if i == 0:
            im["path"] = os.fspath(out)
            continue
        while True:
            n = seen.get(im["pid"], 0)
            seen[im["pid"]] = n + 1
            im["path"] = "%s.%d%s%s" % (stem, im["pid"], ".%d" % n if n else "", ext)
            if not os.path.lexists(im["path"]) or os.path.isfile(im["path"]):
                break


def _write(out, how, images, cmd, policy, returncode, compress, missed=()):
    """Write the traces and the index; the index's path, or None.

    ``how`` is check_out's: with REPLACE every trace and the index are
    written under temporary names beside their targets, then renamed into
    place once all are written (a failure removes the temporaries and
    leaves every old file as it was); each path is judged again first
    (alloclab.files), so nothing is renamed over a file that is not a
    regular one. With IN_PLACE (``out`` is a character device or a pipe)
    the first image's trace is written into it and nothing else is
    written: the further images and the index have no directory of their
    own to go to (``/dev``), and the caller says so."""
    if how == files.IN_PLACE:
        images[0]["path"] = os.fspath(out)
        for im in images[1:]:
            im["path"] = None
        files.write_parts(out, images[0]["trace"].file_parts(compress)[1], "trace")
        return None
    _names(out, images)
    index = os.fspath(out) + INDEX_SUFFIX
    doc = {"command": list(cmd), "policy": policy, "returncode": returncode,
           "not_recorded": list(missed), "first": os.path.basename(images[0]["path"]),
           "images": [dict({k: v for k, v in im.items() if k not in ("trace", "path")},
                           file=os.path.basename(im["path"])) for im in images]}
    text = (json.dumps(doc, indent=1) + "\n").encode("utf-8")
    jobs = [(im["path"], "trace", lambda im=im: im["trace"].file_parts(compress)[1])
            for im in images] + [(index, "index", lambda: [text])]
    tmps, later = [], []
    try:
        for path, what, parts in jobs:
            if files.check_output(path, what) == files.IN_PLACE:
                later.append((path, what, parts))  # an index that is a device: last
                continue
            target = os.path.realpath(path)  # a symlink stays; its target is replaced
            tmp = os.path.join(os.path.dirname(target), ".%s.%d.%s.tmp" % (
                os.path.basename(target), os.getpid(), os.urandom(4).hex()))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            tmps.append((tmp, target, path, what))
            with os.fdopen(fd, "wb") as f:
                for p in parts():
                    f.write(p)
        for tmp, target, path, what in tmps:  # what may have changed while they were written
            if os.path.lexists(target) and not os.path.isfile(target):
                raise errors.InvalidArgument("%s %s: it became %s while the traces were "
                                             "written; left as it is"
                                             % (what, path, _kind(target)), value=path)
        while tmps:
            tmp, target = tmps[0][:2]
            os.replace(tmp, target)
            tmps.pop(0)
    except BaseException:
        for tmp in [t[0] for t in tmps]:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
        raise
    for path, what, parts in later:
        files.write_parts(path, parts(), what)
    return index


def _kind(path):
    try:
        return files.kind(os.stat(path).st_mode)
    except OSError:
        return "a dangling symlink"


RAW_PREFIX = "alloclab-record-"
"""The raw folders' names in the temporary directory: RAW_PREFIX, the
recorder's pid, a dash, random letters; OWNER_FILE inside says whose."""
OWNER_FILE = "owner.json"
SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervise.py")


def _start_time(pid):
    """The start time of process pid (/proc/PID/stat, in clock ticks since
    boot), which tells it from a later process given the same pid; None
    when there is no such process."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _pid_namespace():
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _raw_dir():
    """A private raw folder for this recorder, naming its owner (pid, start
    time, pid namespace) so that a later recorder can tell when it died."""
    d = tempfile.mkdtemp(prefix="%s%d-" % (RAW_PREFIX, os.getpid()))
    with open(os.path.join(d, OWNER_FILE), "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), "start": _start_time(os.getpid()),
                   "pid_namespace": _pid_namespace()}, f)
    return d


def clean_stale(tmp=None):
    """Remove the raw folders of recorders that died without removing their
    own (SIGKILL while the traces were finalised; while the command runs,
    the supervisor removes them); the paths removed. Only this user's
    folders of recorders in this pid namespace whose process is gone (or
    is another process now) are touched: a live recorder's never."""
    tmp = tmp or tempfile.gettempdir()
    here, removed = _pid_namespace(), []
    try:
        names = [n for n in os.listdir(tmp) if n.startswith(RAW_PREFIX)]
    except OSError:
        return removed
    for name in sorted(names):
        d = os.path.join(tmp, name)
        try:
            st = os.lstat(d)
            with open(os.path.join(d, OWNER_FILE), encoding="utf-8") as f:
                owner = json.load(f)
            pid = int(owner["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not a recorder's, or one still starting
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() \
                or owner.get("pid_namespace") != here:
            continue
        if _start_time(pid) is not None and _start_time(pid) == owner.get("start"):
            continue  # its recorder is alive
        shutil.rmtree(d, ignore_errors=True)
        if not os.path.exists(d):
            removed.append(d)
    return removed


def _supervised(argv, env, raw_dir):
    """(argv, env) that run argv under the supervisor (alloclab/_supervise.py):
    in a process group of its own, killed with it when this process dies.
    The command's environment goes through a file in the private raw
    folder; the supervisor runs with this process's."""
    with open(os.path.join(raw_dir, "env.json"), "w", encoding="utf-8") as f:
        json.dump(env, f)
    own = {k: v for k, v in os.environ.items() if not k.startswith("ALLOCLAB_")}
    return ([sys.executable, "-I", "-S", SUPERVISOR, raw_dir, str(os.getpid()), "--"]
            + list(argv), own)


def _run(cmd, raw_dir, pol, env, forward_signals, kwargs):
    """Run the command recording into raw_dir, under the supervisor;
    (proc, images, stats, the images that ran without the recorder)."""
    argv, env = _supervised(*command(cmd, raw_dir, pol, env), raw_dir)
    if forward_signals:
        proc = preload.run_forwarding(argv, env, **kwargs)
    else:
        proc = subprocess.run(argv, env=env, **kwargs)
    proc.args = list(cmd)
    try:
        with open(os.path.join(raw_dir, "supervisor.pid")) as f:
            root = int(f.read())  # the command's parent
    except (OSError, ValueError):
        root = os.getpid()
    images = []
    try:
        for entry in _read_index(raw_dir):
            images.append(_image(raw_dir, entry, pol))
    except BaseException:
        for im in images:
            im["trace"].close()
        raise
    if not images:
        raise errors.RunError("nothing was recorded: no process of %s loaded the shim (a "
                              "statically linked or setuid program ignores LD_PRELOAD)"
                              % cmd[0], proc=proc)
    stats = preload.collect(os.path.join(raw_dir, "stats"), pol, allow_glibc=True,
                            root_ppid=root) if pol else None
    missed = unrecorded(os.path.join(raw_dir, "stats"), images, pol)
    return proc, _lineage(images, root), stats, missed


def record(cmd, out=None, policy=None, env=None, forward_signals=False,
           compress=DEFAULT_COMPRESSOR, **kwargs):
    """Run cmd recording its malloc-family calls; returns a Recording.
    ``out``: the first process image's trace file (the others beside it,
    and ``<out>.index.json``); None keeps the traces in memory. ``policy``:
    serve the calls from this policy (else glibc). ``forward_signals``
    (main thread only): SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this
    process go on to the command, as ``alloclab preload`` does; kwargs go to
    subprocess. ``compress``: the trace files' compressor (COMPRESSORS;
    lzma is the smallest and the slowest to write). Raises InvalidArgument
    before anything runs when the input is bad, RunError when no process
    image was recorded (a static or setuid program ignores LD_PRELOAD)."""
    cmd = list(cmd)
    if compress not in COMPRESSORS:
        raise errors.UnknownNameError.make("trace compressor", compress, COMPRESSORS)
    check_command(cmd)
    how = check_out(out) if out is not None else None
    pol = str(preload.check(policy)) if policy is not None else None
    stale = clean_stale()
    raw_dir = _raw_dir()
    try:
        proc, images, stats, missed = _run(cmd, raw_dir, pol, env, forward_signals, kwargs)
    finally:
        shutil.rmtree(raw_dir, ignore_errors=True)
    index = None
    try:
        if out is not None:
            index = _write(out, how, images, cmd, pol, proc.returncode, compress, missed)
    finally:
        if out is not None:
            for im in images:
                im.pop("trace").close()
    rec = Recording(proc.returncode, images, os.fspath(out) if out is not None else None,
                    index, stats, proc)
    rec.unrecorded = missed
    if stale:
        rec.notes.append("removed %d raw folder(s) left by recorders that were killed: %s"
                         % (len(stale), ", ".join(stale)))
    if how == files.IN_PLACE and len(images) > 1:
        rec.notes.append("%s is %s: only the first process image's trace was written "
                         "there; %d further image(s) and the index were not written "
                         "(give a file name to keep them)"
                         % (os.fspath(out), _kind(out), len(images) - 1))
    return rec
