"""Recorded programs: alloclab.Trace, the decoded form of a trace file.

A Trace owns a sealed C ``struct al_trace`` (trace.h): per program thread,
its operations in order, objects named by dense ids. ``Trace.from_ops``
builds one from Python tuples (tests, synthetic traces). ``ops(thread)`` is
a NumPy view of a thread's ops (no copy), valid while the Trace lives.

The file (docs/traces.md) is read and written here: a fixed prefix (magic,
format version, header length, the header's CRC-32), a JSON header (the
metadata, ``Trace.meta``, plus the counts and how the body is stored), then
the body: the C codec's bytes (codec.c), compressed. Loading trusts nothing:
the lengths are checked against the file, the header and the stored body
against their checksums, decompression is bounded by the header's body
length, the C decoder checks every read, and the counts in the header must
match the decoded trace. Every failure is a FileFormatError naming the path,
the byte offset and what is wrong. A path is judged before anything is
read or written (alloclab.files): load() refuses a directory, a named pipe,
a device or a socket without reading it, and reads the body only once the
prefix, the header and the file's length agree; save() writes a regular
file (or a new one) through a temporary file beside it, renamed over it
once complete (a failed save leaves any old file as it was), a character
device or a pipe with a reader in place, and refuses a directory, a socket
or a pipe with no reader before the trace is encoded.

Lifetime: the C trace is freed when the Trace is closed or collected; a
trace registered for replay (``handle()``) stays registered until then.
The arrays ops(), seq(), t_ns() and owner() return are read-only views that
hold the Trace: the memory outlives neither, and a close() while a view
lives only unregisters and leaves the freeing to the collection.
"""

import bz2
import datetime
import json
import lzma
import os
import platform
import struct
import sys
import weakref
import zlib

import numpy as np

from .. import errors
from . import traceinfo
from ..cbind._ffi import ffi, lib

from ._tracefmt import KINDS, NOID, OP_DTYPE
from .. import files
from ..host import machine

MAGIC = b"\x89ALTRACE\r\n\x1a\n"
FORMAT_VERSION = 1
# magic, format version, header length, CRC-32 of the header
_PREFIX = struct.Struct("<12sIII")
COMPRESSORS = ("lzma", "zlib", "bz2", "none")
DEFAULT_COMPRESSOR = "zlib"
# Per compressor: (lowest, default, highest) level. zlib's default is 1: on
# recorded traces level 6 saves 5-20% of the file and compresses four to
# five times slower, and the recorder's finaliser pays that in wall time.
LEVELS = {"zlib": (1, 1, 9), "lzma": (0, 6, 9), "bz2": (1, 9, 9), "none": (None, None, None)}
# The metadata every header has (None where the saver did not know it).
META_KEYS = ("program", "argv", "pid", "ppid", "policy", "recorded", "machine")
# What the header states about the trace and its body, with their types.
_STORED_KEYS = {"threads": int, "ops": int, "objects": int, "compressor": str,
                "body_length": int, "stored_length": int, "body_crc32": int}
_MAX_HEADER = 64 << 20


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
        self._views = []  # weak references to the arrays _view handed out
        self._pending = None  # closed while views lived: freed by __del__
        self.meta = dict(meta or {})

    @classmethod
    def from_ops(cls, threads, meta=None):
        """Build and seal a trace. ``threads`` is a list (one per thread) of
        lists of ops, each a dict with ``kind`` (a name from KINDS or its
        index) and any of ``size``, ``aux``, ``id``, ``ref`` (None = no
        object), ``dt``, ``flags``, ``seq``, ``t_ns``. Without ``seq`` an
        op's seq is its position in the list of all threads' ops, thread by
        thread; without ``t_ns`` the previous op's t_ns (0 before the
        first) plus dt.
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
                now = o.get("t_ns", now + op.dt)
                rc = lib.al_trace_push(t, k, op, o.get("seq", seq), now)
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
        th = self._thread(thread)
        return self._view(th.ops, th.nops, OP_DTYPE)

    def seq(self, thread):
        th = self._thread(thread)
        return self._view(th.seq, th.nops, np.dtype("<u8"))

    def t_ns(self, thread):
        th = self._thread(thread)
        return self._view(th.t_ns, th.nops, np.dtype("<u8"))

    def owner(self):
        """The thread that created each object id."""
        return self._view(self._t.owner, self._t.nobjects, np.dtype("<u4"))

    def _thread(self, thread):
        if self._t is None:
            raise errors.InvalidArgument("this trace is closed")
        if not 0 <= thread < self._t.nthreads:
            raise errors.ParameterRangeError(
                "thread %r is outside 0..%d" % (thread, self._t.nthreads - 1),
                value=thread, min=0, max=self._t.nthreads - 1)
        return self._t.threads[thread]

    def _view(self, ptr, n, dtype):
        """A read-only array over n items of the C trace at ptr that keeps
        this Trace (and so the memory) alive while any view of it lives:
        the buffer holds a cdata whose (empty) destructor holds the Trace."""
        if not n:
            return np.zeros(0, dtype)
        keep = ffi.gc(ffi.cast("char *", ptr), lambda _p, owner=self: None)
        a = np.frombuffer(ffi.buffer(keep, n * dtype.itemsize), dtype)
        a.flags.writeable = False
        self._views = [r for r in self._views if r() is not None]
        self._views.append(weakref.ref(a))
        return a

    def info(self, points=1000):
        """What the trace holds: alloclab.traceinfo.trace_info(self) (a
        TraceInfo: ops by kind, sizes, lifetimes, live bytes and their peak,
        threads, cross-thread frees, reallocs; .text(), .to_dict())."""
        if self._t is None:
            raise errors.InvalidArgument("this trace is closed")
        return traceinfo.trace_info(self, points=points)

    # ---- files ----
    def save(self, path, compress=DEFAULT_COMPRESSOR, level=None):
        """Write the trace to ``path`` (docs/traces.md). ``compress`` is one
        of COMPRESSORS ("none" or None stores the body as it is); ``level``
        the compressor's level (None: LEVELS' default, chosen for speed).
        The header's metadata is ``meta`` plus the counts and the body's
        length, compressor and checksum; returns that header (a dict)."""
        files.check_output(path, "trace")  # before the encoding, which may take long
        header, parts = self.file_parts(compress, level)
        files.write_parts(path, parts, "trace")
        return header

    def file_parts(self, compress=DEFAULT_COMPRESSOR, level=None):
        """(header, parts): the header save() would write and the file's
        bytes as a list of byte strings (prefix, header, body), for a caller
        that writes several files together (alloclab.record)."""
        name = "none" if compress is None else compress
        if name not in COMPRESSORS:
            raise errors.UnknownNameError.make("trace compressor", name, COMPRESSORS)
        level = _level(name, level)
        header = {key: None for key in META_KEYS}
        header.update(self.meta)
        body = self._encode()
        stored = _compress(name, body, level)
        header.update(threads=int(self.nthreads), ops=int(self.nops),
                      objects=int(self.nobjects), compressor=name, body_length=len(body),
                      stored_length=len(stored), body_crc32=zlib.crc32(stored))
        try:
            text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise errors.InvalidArgument("the trace's meta is not JSON: %s" % e) from None
        if len(text) > _MAX_HEADER:
            raise errors.InvalidArgument("the trace's meta is %d bytes of JSON; at most %d"
                                         % (len(text), _MAX_HEADER))
        prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(text), zlib.crc32(text))
        return header, [prefix, text, stored]

    def _encode(self):
        if self._t is None:
            raise errors.InvalidArgument("this trace is closed")
        err = ffi.new("char[256]")
        n = ffi.new("size_t *")
        rc = lib.al_trace_encode(self._t, ffi.NULL, 0, n, err, 256)
        buf = bytearray(n[0]) if rc == 0 else None
        if buf is not None:
            rc = lib.al_trace_encode(self._t, ffi.from_buffer(buf), len(buf), n, err, 256)
        if rc == -12:
            raise errors.AllocatorExhausted("out of memory encoding a trace")
        if rc:
            raise errors.InvalidArgument("cannot encode the trace: "
                                         + ffi.string(err).decode("utf-8", "replace"))
        return buf

    @classmethod
    def load(cls, path):
        """Read a trace file; FileFormatError when it is not a valid one."""
        return load(path)

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
        if any(r() is not None for r in self._views):
            self._pending = self._t
        else:
            lib.al_trace_free(self._t)
        self._t = None

    def __del__(self):
        self.close()
        # Views hold this Trace, so none is left once it is collected.
        if self._pending is not None:
            lib.al_trace_free(self._pending)
            self._pending = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ---------------------------------------------------------------- the file



def machine_info():
    """The machine a recording is made on, as the header's ``machine``."""
    return {"uname": dict(platform.uname()._asdict()), "cpu_model": machine.cpu_model(),
            "cpus": os.cpu_count()}


def now_utc():
    """A recording's ``recorded`` time: UTC, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _level(name, level):
    """The compressor's level: the default when None, else checked."""
    lo, default, hi = LEVELS[name]
    if level is None:
        return default
    if hi is None:
        raise errors.InvalidArgument("compressor %r takes no level; %r given" % (name, level))
    if isinstance(level, bool) or not isinstance(level, int) or not lo <= level <= hi:
        raise errors.ParameterRangeError("%s level %r is outside %d..%d" % (name, level, lo, hi),
                                         value=level, min=lo, max=hi)
    return level


# Compressed in pieces, so that Ctrl-C is seen between them: a single call
# over a large body (lzma takes minutes on tens of millions of ops) holds
# the interpreter until it returns. The stream is the same as one call's.
_PIECE = 4 << 20


def _compress(name, body, level):
    if name == "none":
        return bytes(body)
    c = {"lzma": lambda: lzma.LZMACompressor(preset=level, check=lzma.CHECK_NONE),
         "zlib": lambda: zlib.compressobj(level),
         "bz2": lambda: bz2.BZ2Compressor(level)}[name]()
    view = memoryview(body)
    out = [c.compress(view[i:i + _PIECE]) for i in range(0, len(view), _PIECE)]
    out.append(c.flush())
    return b"".join(out)


def _decompressor(name):
    return {"lzma": lzma.LZMADecompressor, "zlib": zlib.decompressobj,
            "bz2": bz2.BZ2Decompressor}[name]()


def _bad(path, offset, what):
    return errors.FileFormatError("%s: byte %d: %s" % (path, offset, what),
                                  path=path, offset=offset)


def _read_header(path, data, size=None):
    """The header dict and the body's file offset; checks the prefix.
    ``data`` holds the file's first bytes (at least the prefix and the
    header when the file has them), ``size`` the file's length (len(data)
    when None)."""
    n = _PREFIX.size
    size = len(data) if size is None else size
    head = bytes(data[:len(MAGIC)])
    if head != MAGIC[:len(head)]:
        raise _bad(path, 0, "not an alloclab trace (the file does not start with %r)"
                   % MAGIC)
    if size < n or len(data) < n:
        raise _bad(path, min(size, len(data)), "truncated: the file ends inside its "
                   "%d-byte prefix" % n)
    _, version, hlen, hcrc = _PREFIX.unpack_from(data)
    if version != FORMAT_VERSION:
        raise _bad(path, len(MAGIC), "format version %d; this alloclab reads version %d"
                   % (version, FORMAT_VERSION))
    if hlen > min(_MAX_HEADER, size - n) or hlen > len(data) - n:
        raise _bad(path, size, "truncated: the header of %d bytes runs past the "
                   "end of the file" % hlen)
    text = data[n:n + hlen]
    if zlib.crc32(text) != hcrc:
        raise _bad(path, n, "the header's checksum does not match (CRC-32 %#010x, "
                   "expected %#010x)" % (zlib.crc32(text), hcrc))
    try:
        header = json.loads(bytes(text).decode("utf-8"))
    except RecursionError:
        raise _bad(path, n, "the header nests too deeply to decode") from None
    except ValueError as e:
        raise _bad(path, n, "the header is not JSON: %s" % e) from None
    _check_header(path, n, header)
    return header, n + hlen


def _read_head(path, f, size):
    """(header, body offset) of the open trace file f of ``size`` bytes:
    the prefix is read first and judged (magic, version, the header's
    length against the file's), and only then the header itself, so a file
    that is not a trace costs one 24-byte read."""
    data = f.read(_PREFIX.size)
    if len(data) == _PREFIX.size and data[:len(MAGIC)] == MAGIC:
        hlen = _PREFIX.unpack_from(data)[2]
        if hlen <= min(_MAX_HEADER, size - _PREFIX.size):
            data += f.read(hlen)
    return _read_header(path, data, size)


def _check_header(path, offset, header):
    if not isinstance(header, dict):
        raise _bad(path, offset, "the header is not a JSON object")
    for key, typ in _STORED_KEYS.items():
        v = header.get(key)
        if not isinstance(v, typ) or isinstance(v, bool) or typ is int and v < 0:
            raise _bad(path, offset, "the header's %r is %r; expected a%s %s" % (
                key, v, "" if typ is str else " non-negative", typ.__name__))
    if header["body_length"] >= sys.maxsize:
        raise _bad(path, offset, "the header's body_length %d is beyond what this machine "
                   "can hold" % header["body_length"])
    if header["compressor"] not in COMPRESSORS:
        raise _bad(path, offset, "the header's compressor %r is not one of %s"
                   % (header["compressor"], ", ".join(COMPRESSORS)))


def _read_body(path, data, header, at, size=None):
    """The body's bytes, checked against the header's length and checksum.
    ``data`` is the file from offset ``at`` on (at most the header's
    stored_length of it), ``size`` the file's length."""
    stored = memoryview(data)
    want = header["stored_length"]
    size = at + len(stored) if size is None else size
    if size - at < want:
        raise _bad(path, size, "truncated: the body needs %d bytes, the file has %d"
                   % (want, size - at))
    if size - at > want:
        raise _bad(path, at + want, "%d bytes after the body" % (size - at - want))
    if len(stored) < want:  # shortened while it was read
        raise _bad(path, at + len(stored), "truncated: the body needs %d bytes, %d could "
                   "be read" % (want, len(stored)))
    stored = stored[:want]
    if zlib.crc32(stored) != header["body_crc32"]:
        raise _bad(path, at, "the body's checksum does not match (CRC-32 %#010x, "
                   "expected %#010x)" % (zlib.crc32(stored), header["body_crc32"]))
    name, size = header["compressor"], header["body_length"]
    if name == "none":
        body = stored
    else:
        try:
            d = _decompressor(name)
            body = d.decompress(stored, size + 1)
            done = d.eof and not d.unused_data
        except (lzma.LZMAError, zlib.error, OSError, EOFError, ValueError) as e:
            raise _bad(path, at, "the %s body does not decompress: %s" % (name, e)) from None
        if not done:
            raise _bad(path, at, "the %s body does not decompress to one stream of %d "
                       "bytes" % (name, size))
    if len(body) != size:
        raise _bad(path, at, "the body is %d bytes; the header says %d" % (len(body), size))
    return body


def _decode(path, body, at):
    out = ffi.new("struct al_trace **")
    err = ffi.new("char[512]")
    rc = lib.al_trace_decode(ffi.from_buffer(body), len(body), out, err, 512)
    if rc == -12:
        raise errors.AllocatorExhausted("%s: out of memory decoding a %d-byte trace body"
                                        % (path, len(body)))
    if rc:
        raise _bad(path, at, "the body (after decompression) does not decode: %s"
                   % ffi.string(err).decode("utf-8", "replace"))
    return out[0]


def load(path):
    """Read the trace file at ``path`` into a Trace whose ``meta`` is the
    file's header. The path is judged first (alloclab.files.open_input): a
    directory, a named pipe, a device or a socket is refused without being
    read, and a missing or unreadable file is refused, each an
    InvalidArgument naming it. Then the prefix and the header are read and
    checked, and the body is read only when the file's length is what the
    header declares: a file that is not a trace (/dev/zero's bytes, a sparse
    file of zeros, another tool's file) is refused by its first bytes.
    Raises FileFormatError (naming the path, the byte offset and what is
    wrong) for a file that is not a valid trace."""
    with files.open_input(path, "trace") as f:
        path = os.fspath(path)
        size = os.fstat(f.fileno()).st_size
        header, at = _read_head(path, f, size)
        want = header["stored_length"]
        if size - at != want:  # judged by the sizes before the body is read
            _read_body(path, b"", header, at, size)
        data = f.read(want)
    body = _read_body(path, data, header, at, size)
    t = Trace(_decode(path, body, at), header)
    got = {"threads": t.nthreads, "ops": t.nops, "objects": t.nobjects}
    for key, v in got.items():
        if header[key] != v:
            t.close()
            raise _bad(path, _PREFIX.size, "the header says %d %s, the body holds %d"
                       % (header[key], key, v))
    return t


def read_meta(path):
    """A trace file's header alone (checked, the body not read); the path is
    judged as load() judges it."""
    with files.open_input(path, "trace") as f:
        return _read_head(os.fspath(path), f, os.fstat(f.fileno()).st_size)[0]
