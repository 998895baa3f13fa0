"""The red-team file matrix's entries for traces (see redteam_files.py):
`alloclab record --out`, `trace info` (its FILE and its --plot), `run replay
--trace`, and the Python readers and writers of a trace: Trace.load,
trace.read_meta, Trace.save, alloclab.record(out=...) and run(trace=...).

A valid trace (two ops: a malloc and its free) is made once per matrix and
copied where a cell needs one. A written trace is checked by loading it.
For --out, a character device takes the first image's trace in place (the
cell's /dev/null-like node must still be a device afterwards), a FIFO with
no reader, a socket, a directory and '' are refused before the command
runs (docs/record.md).
"""

import os
import threading

from redteam_files import Entry, is_png

_LOCK = threading.Lock()
_MADE = {}
_RUN_PY = "al.run('replay', 'buddy', trace=FILE, runs=1)\n"
_TRACE_PY = ("t = al.Trace.from_ops([[{'kind': 'malloc', 'size': 16, 'id': 0},\n"
             "                        {'kind': 'free', 'ref': 0}]])\n")


def valid_trace():
    """The bytes of a small valid trace, made by the first cell that asks."""
    with _LOCK:
        if "trace" not in _MADE:
            import tempfile
            import alloclab as al
            t = al.Trace.from_ops([[{"kind": "malloc", "size": 16, "id": 0},
                                    {"kind": "free", "ref": 0}]])
            d = tempfile.mkdtemp(prefix="alloclab-rtf-trace-")
            p = os.path.join(d, "t.altrace")
            t.save(p)
            t.close()
            with open(p, "rb") as f:
                _MADE["trace"] = f.read()
            os.unlink(p)
            os.rmdir(d)
        return _MADE["trace"]


def _valid(tmp):
    p = os.path.join(tmp, "valid.altrace")
    with open(p, "wb") as f:
        f.write(valid_trace())
    return p


def _is_trace(path, out, err, ops=1):
    """A written trace reads back as one with at least ``ops`` ops (a
    device: nothing to read)."""
    if not path or not os.path.isfile(path):
        return None
    import alloclab as al
    try:
        with al.Trace.load(path) as t:
            if t.nops < ops:
                return "FILE is a trace of %d ops" % t.nops
    except al.AlloclabError as e:
        return "FILE is not a trace: %s" % e
    return None


def _is_recorded(path, out, err):
    """`true` may make no malloc call: its trace is a trace, of any ops."""
    return _is_trace(path, out, err, ops=0)


# As root a mode-000 file is still readable and writable.
_ROOT = os.geteuid() == 0
_READ = dict(role="input", valid=_valid, expect={"unreadable": "ok"} if _ROOT else {})
_WRITE = dict(role="output", valid=_valid, ok=_is_trace,
              expect={} if _ROOT else {"unreadable": "refused"})

ENTRIES = [
    Entry("trace:record --out", argv=["record", "--out", "FILE", "--", "true"],
          **dict(_WRITE, ok=_is_recorded)),
    Entry("trace:trace info", argv=["trace", "info", "FILE"], **_READ),
    Entry("trace:trace info --plot", role="output", ok=is_png,
          argv=lambda tmp: ["trace", "info", _valid(tmp), "--plot", "FILE"],
          expect={} if _ROOT else {"unreadable": "refused"}),
    Entry("trace:run replay --trace",
          argv=["run", "replay", "--trace", "FILE", "--policy", "buddy", "--runs", "1"],
          **_READ),
    Entry("trace:Trace.load", code="al.Trace.load(FILE).close()", **_READ),
    Entry("trace:Trace.load(Path)", code="import pathlib\n"
          "al.Trace.load(pathlib.Path(FILE)).close()", **_READ),
    Entry("trace:read_meta", code="from alloclab.trace import read_meta\nread_meta(FILE)",
          **_READ),
    Entry("trace:run(trace=FILE)", code=_RUN_PY, **_READ),
    # the finaliser of a raw file the shim wrote; no valid one is made here
    # (only the shim writes them): a symlink to the cell's valid trace, not
    # a raw file, is refused too
    Entry("trace:record.finish", code="import importlib\n"
          "importlib.import_module('alloclab.record').finish(FILE)",
          **dict(_READ, expect={"symlink": "refused", "unreadable": "refused"})),
    Entry("trace:Trace.save", code=_TRACE_PY + "t.save(FILE)", **_WRITE),
    Entry("trace:record(out=FILE)", code="al.record(['ls', '/'], FILE, capture_output=True)",
          **_WRITE),
]
