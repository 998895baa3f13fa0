"""Recorded programs: alloclab.Trace, the decoded form of a trace file.

A Trace owns a sealed C ``struct al_trace`` (trace.h): per program thread,
its operations in order, objects named by dense ids. ``Trace.from_ops``
builds one from Python tuples (tests, synthetic traces); the file format is
read and written here too (docs/traces.md). ``ops(thread)`` is a NumPy view
of a thread's ops (no copy), valid while the Trace lives.

Lifetime: the C trace is freed when the Trace is closed or collected; a
trace registered for replay (``handle()``) stays registered until then.
"""

import numpy as np

from . import errors, traceinfo
from ._ffi import ffi, lib

from ._tracefmt import KINDS, NOID, OP_DTYPE


def _kind_index(kind):
    if isinstance(kind, str):
        try:
            return KINDS.index(kind)
        except ValueError:
            raise errors.UnknownNameError.make("trace op kind", kind, KINDS) from None
    return int(kind)


class Trace:
    """A sealed, decoded trace. ``meta`` is the file header's metadata
    (program, argv, machine, ...; {} for a built trace)."""

    def __init__(self, ptr, meta=None):
        assert ffi.sizeof("struct al_trace_op") == OP_DTYPE.itemsize
        self._t = ptr
        self._handle = None
        self.meta = dict(meta or {})

    @classmethod
    def from_ops(cls, threads, meta=None):
        """Build and seal a trace. ``threads`` is a list (one per thread) of
        lists of ops, each a dict with ``kind`` (a name from KINDS or its
        index) and any of ``size``, ``aux``, ``id``, ``ref`` (None = no
        object), ``dt``, ``flags``, ``seq``, ``t_ns``. Without ``seq`` an
        op's seq is its position in the list of all threads' ops, thread by
        thread; without ``t_ns`` the running sum of the thread's dt.
        Raises InvalidArgument naming the thread and op when the trace is
        inconsistent (an id used before it is created, freed twice, ...)."""
        if not threads:
            raise errors.InvalidArgument("a trace needs at least one thread")
        t = lib.al_trace_new(len(threads))
        if t == ffi.NULL:
            raise errors.AllocatorExhausted("out of memory for a trace of %d threads"
                                            % len(threads))
        self = cls(t, meta)
        op = ffi.new("struct al_trace_op *")
        seq = 0
        for k, ops in enumerate(threads):
            now = 0
            for o in ops:
                seq += 1
                op.kind = _kind_index(o["kind"])
                op.size = o.get("size", 0)
                op.aux = NOID if o.get("aux", 0) is None else o.get("aux", 0)
                op.id = NOID if o.get("id") is None else o["id"]
                op.ref = NOID if o.get("ref") is None else o["ref"]
                op.dt = o.get("dt", 0)
                op.flags = o.get("flags", 0)
                now += op.dt
                rc = lib.al_trace_push(t, k, op, o.get("seq", seq), o.get("t_ns", now))
                if rc:
                    raise errors.InvalidArgument("thread %d: op %r refused (%d)" % (k, o, rc))
        self._seal()
        return self

    def _seal(self):
        err = ffi.new("char[256]")
        rc = lib.al_trace_seal(self._t, err, 256)
        if rc:
            msg = ffi.string(err).decode("utf-8", "replace")
            self.close()
            raise errors.InvalidArgument("inconsistent trace: " + msg)

    # ---- what it holds ----
    @property
    def nthreads(self):
        return self._t.nthreads

    @property
    def nops(self):
        return self._t.nops

    @property
    def nobjects(self):
        return self._t.nobjects

    def ops(self, thread):
        """Thread ``thread``'s ops as a structured array (OP_DTYPE), no copy."""
        th = self._t.threads[thread]
        if not th.nops:
            return np.zeros(0, OP_DTYPE)
        buf = ffi.buffer(th.ops, th.nops * OP_DTYPE.itemsize)
        return np.frombuffer(buf, OP_DTYPE)

    def seq(self, thread):
        th = self._t.threads[thread]
        return np.frombuffer(ffi.buffer(th.seq, th.nops * 8), "<u8") if th.nops else \
            np.zeros(0, "<u8")

    def t_ns(self, thread):
        th = self._t.threads[thread]
        return np.frombuffer(ffi.buffer(th.t_ns, th.nops * 8), "<u8") if th.nops else \
            np.zeros(0, "<u8")

    def owner(self):
        """The thread that created each object id."""
        n = self._t.nobjects
        return np.frombuffer(ffi.buffer(self._t.owner, n * 4), "<u4") if n else \
            np.zeros(0, "<u4")

    def info(self, points=1000):
        """What the trace holds: alloclab.traceinfo.trace_info(self) (a
        TraceInfo: ops by kind, sizes, lifetimes, live bytes and their peak,
        threads, cross-thread frees, reallocs; .text(), .to_dict())."""
        return traceinfo.trace_info(self, points=points)

    # ---- replay ----
    def handle(self):
        """The registry handle the replay workload's ``trace`` parameter takes."""
        if self._t is None:
            raise errors.InvalidArgument("this trace is closed")
        if self._handle is None:
            h = lib.al_trace_register(self._t)
            if h < 0:
                raise errors.RunError("cannot register the trace for replay (%d)" % h)
            self._handle = h
        return self._handle

    def close(self):
        if self._t is None:
            return
        if self._handle is not None:
            lib.al_trace_unregister(self._handle)
            self._handle = None
        lib.al_trace_free(self._t)
        self._t = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
