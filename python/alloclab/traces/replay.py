"""The replay workload's trace parameter, as run() plans and runs it.

A user names the trace to replay with a file path (what ``alloclab
record`` wrote) or an ``alloclab.Trace``; the C workload takes the handle
of a registered trace (trace.h). plan() turns the value into a *ref*, a
plain JSON-able dict that a task carries to wherever the run happens (this
process, a peer's child process, an executor's worker): the file's path, a
key, and the trace's identity (program, threads, ops, objects, a digest of
the decoded ops). ``handle(ref)`` then gives the registered handle in the
running process, loading the file there once (a child loads its own copy);
the handle never leaves the process that registered it, and results record
the path and the identity, never the handle.

A Trace built in memory has no file: it replays in this process, and is
saved to a temporary file (kept until the interpreter exits) when a run
must happen in a child process, or refused when it cannot be saved.

Cost: the digest reads every op once (SHA-256 of the op and seq arrays)
when the trace is planned; nothing is done per run beyond a dict lookup.
A process keeps every trace it was given and the traces it loaded from
files; when the registry's 64 handles are taken, the traces it loaded from
files (other than the one about to run) are closed, and a later run reloads
its file (checked against the digest it was planned with).
"""

import atexit
import hashlib
import os
import tempfile
import warnings

from .. import errors
from .trace import Trace
from .. import files
from . import trace as _trace

_LOADED = {}  # key -> Trace: the traces this process has loaded or was given
_TEMP = []  # temporary trace files written for child processes
_OWNED = set()  # keys of the traces loaded here from files: closed to free handles


def digest(trace):
    """SHA-256 (hex) of the decoded ops and sequence numbers, thread by thread:
    the same trace gives the same digest whatever file or codec it came from."""
    h = hashlib.sha256()
    h.update(b"%d\0" % trace.nthreads)
    for k in range(trace.nthreads):
        h.update(b"%d\0" % len(trace.ops(k)))
        h.update(trace.ops(k).tobytes())
        h.update(trace.seq(k).tobytes())
    return h.hexdigest()


class IncompleteTraceWarning(UserWarning):
    """The trace replayed was cut short: its header says ``complete: false``
    (the recorded program was killed, or crashed, before its image ended),
    so it holds only the ops the program had flushed, and what it frees at
    its end is not what the program freed."""


def incomplete(trace):
    """Why ``trace`` is incomplete, in words, or None when it is complete
    (or was not recorded: a trace built in memory says nothing)."""
    meta = trace.meta if isinstance(trace.meta, dict) else {}
    if meta.get("complete", True) is not False:
        return None
    return "the recording was cut short (complete: false%s): it holds only the ops the " \
        "program had written before it ended" % (
            "; %s" % meta["note"] if meta.get("note") else "")


def identity(trace):
    """What a result records of a trace (never its handle); ``complete``
    False and ``incomplete`` (why) when the recording was cut short."""
    meta = trace.meta or {}
    out = {"program": meta.get("program"), "threads": int(trace.nthreads),
           "ops": int(trace.nops), "objects": int(trace.nobjects), "digest": digest(trace)}
    why = incomplete(trace)
    if why:
        out.update(complete=False, incomplete=why)
    return out


def _warn_incomplete(ref):
    if ref.get("incomplete"):
        warnings.warn(IncompleteTraceWarning("trace %s: %s" % (ref["label"], ref["incomplete"])),
                      stacklevel=4)


def _load_file(path):
    """The Trace in file ``path`` (alloclab.trace.load), with clear errors:
    a missing file, a directory, a named pipe, a device or a socket is
    refused by what it is, without being read (a FIFO would block, a device
    such as /dev/zero never ends)."""
    files.check_input(path, "trace")
    return _trace.load(path)


def resolve(value):
    """The ref of a trace given as a path or a Trace: ParameterTypeError for
    anything else (an int handle is the C side's, not a user's); a trace
    without ops is refused (a replay of it would measure nothing). A trace
    whose recording was cut short (``complete: false``) is replayed with an
    IncompleteTraceWarning, and its ref (which the result records) says
    ``complete: False`` and why."""
    ref = _resolve(value)
    if not ref["ops"]:
        raise errors.InvalidArgument("trace=%s has no ops: nothing to replay" % ref["label"])
    _warn_incomplete(ref)
    return ref


def _resolve(value):
    if isinstance(value, Trace):
        if value._t is None:
            raise errors.InvalidArgument("trace: this Trace is closed")
        key = "mem:%x" % id(value)
        _LOADED[key] = value
        path = value.meta.get("path") if isinstance(value.meta, dict) else None
        return dict(identity(value), path=path, key=key, label=path or "<memory>")
    if isinstance(value, (str, os.PathLike)):
        given = os.fspath(value)
        try:
            st = files.check_input(given, "trace")
        except errors.InvalidArgument as e:
            hint = "; replay takes one trace per run (run again for another)" \
                if "," in given and not os.path.lexists(given) else ""
            raise errors.InvalidArgument("%s%s" % (e, hint), value=given) from None
        path = os.path.abspath(given)
        key = "file:%s:%d:%d" % (path, st.st_mtime_ns, st.st_size)  # a rewritten file reloads
        if key not in _LOADED:
            _LOADED[key] = _load_file(path)
            _OWNED.add(key)
        return dict(identity(_LOADED[key]), path=path, key=key, label=os.fspath(value))
    raise errors.ParameterTypeError(
        "trace must be a trace file's path or an alloclab.Trace, not %r" % (value,),
        name="trace", value=value)


def for_child(ref):
    """The ref a child process can load: a Trace without a file is saved to
    a temporary file; InvalidArgument when it cannot be."""
    if ref.get("path"):
        return ref
    tr = _LOADED.get(ref["key"])
    save = getattr(tr, "save", None)
    if tr is None or save is None:
        raise errors.InvalidArgument(
            "this run happens in a child process (a peer allocator, processes=True or an "
            "isolated plugin), which loads the trace from its file, and this Trace was "
            "built in memory: save it (Trace.save(path)) and pass trace=path")
    fd, path = tempfile.mkstemp(prefix="alloclab-replay-", suffix=".altrace")
    os.close(fd)
    _TEMP.append(path)
    save(path)
    key = "file:" + path
    _LOADED[key] = tr
    return dict(ref, path=path, key=key)


def handle(ref):
    """The registered handle of ``ref``'s trace in this process, loading its
    file here first when needed (a child process). InvalidArgument when the
    file no longer holds the trace that was planned (its digest changed)."""
    tr = _LOADED.get(ref["key"])
    if tr is None or tr._t is None:
        if not ref.get("path"):
            raise errors.InvalidArgument("trace %s is not loaded in this process"
                                         % ref.get("label"))
        tr = _load_file(ref["path"])
        if digest(tr) != ref["digest"]:
            raise errors.InvalidArgument("trace file %r changed since the run was planned"
                                         % ref["path"])
        _LOADED[ref["key"]] = tr
        _OWNED.add(ref["key"])
    try:
        return tr.handle()
    except errors.RunError:
        if _close_loaded(ref["key"]):
            try:
                return tr.handle()
            except errors.RunError:
                pass
        raise errors.RunError(
            "cannot register trace %s for replay: the registry's 64 handles are taken by "
            "the alloclab.Trace objects given to runs in this process; close some "
            "(Trace.close()) or replay in a fresh process (processes=True)"
            % ref.get("label")) from None


def _close_loaded(keep):
    """Close the traces loaded here from files, other than ``keep``, freeing
    their handles and memory (a later run reloads the file); how many."""
    keys = [k for k in _OWNED if k != keep]
    for k in keys:
        _OWNED.discard(k)
        tr = _LOADED.pop(k, None)
        if tr is not None:
            tr.close()
    return len(keys)


@atexit.register
def _remove_temp():
    for path in _TEMP:
        try:
            os.unlink(path)
        except OSError:
            pass
