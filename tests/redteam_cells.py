"""The red-team matrix: every workload x preset x producers, and every
live-allocator abuse x preset, each a *cell* run in a long-lived child
process so that a crash or a hang fails that cell and nothing else.

A cell passes when it completes as its expectation says: a valid run
completes; an invalid request, or an abuse of a live Allocator, raises the
specific alloclab exception written next to it, whose message names the bad
value; and the allocator is still consistent afterwards (its invariants hold,
it hands out distinct blocks). A crash (a fatal signal), a hang (the per-cell
timeout), a generic Python exception, the wrong alloclab exception, a
message that does not name the bad value, or an abuse accepted silently
fails the cell. docs/redteam.md describes the matrix and how to run it.

This file is both the matrix (imported by tests/test_redteam.py) and the
worker (``python tests/redteam_cells.py --worker PARENT_PID``): a worker
reads cell ids on stdin, one a line, runs each, and writes one JSON line per
cell on the descriptor that was its stdout (the C library and Python's own
warnings go to stderr, which the parent keeps in a log per worker).
"""

import ctypes
import json
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import alloclab as al
from alloclab import errors, peers, schema

PRODUCERS = (1, 2, 5)
DEFAULT_SEED = 14
SAMPLE_FRACTION = 0.10
CELL_TIMEOUT = float(os.environ.get("ALLOCLAB_REDTEAM_TIMEOUT", "20"))
STARTUP_TIMEOUT = 120.0  # a worker's interpreter start and import, however loaded the host
WORKERS = int(os.environ.get("ALLOCLAB_REDTEAM_WORKERS", "2"))

# A run cell measures nothing: one run, a few cycles, no memory sampling.
# duration bounds the measured phase (a fixed-loop run cut off by it is
# marked truncated, not failed). The engine's own watchdog ends a stuck run
# well before the cell timeout, so a stall is reported as RunStalled (a
# failure) rather than as a hang.
RUN_SETTINGS = dict(runs=1, cycles=3, warmup_cycles=1, duration=0.5, mem_sample=0,
                    watchdog=5.0, seed=1)

# Workload parameters that only scale a cell's cost, kept small; everything
# else is the workload's default, so the matrix runs what a user runs first.
TINY_PARAMS = {
    "malloc": dict(nallocs=1000),
    "calloc": dict(nallocs=1000),
    "larson": dict(rounds=1000),
    "cache-scratch": dict(repetitions=100),
    "test_vmalloc": dict(test_loop_count=100, nr_pcpu_objects=1000),
    "local-storage-create": dict(sample="1ms"),
    "stress": dict(ops_per_cycle=300),
}

# Workloads that hand objects between threads or keep many of them live at
# once, so they need an allocator that hands out distinct blocks; the null
# floor (one block per CPU) cannot serve them and must be refused before the
# run. malloc-free and cache-scratch are what null exists for (the engine's
# own cost), so they run on it. The registry's own declaration wins when it
# has one (a workload flag whose name says "distinct").
NEEDS_DISTINCT = {"malloc-xfree", "xmalloc", "larson", "stress", "local-storage-create"}

WILD = 0xDEADBEEF000  # page aligned, far from any arena
HUGE = 1 << 50  # fits size_t, can never be served


class CellFailed(Exception):
    """A cell's expectation did not hold; the message says which, ``cause``
    the kind of failure in words shared by every cell that fails alike."""

    def __init__(self, message, cause=None):
        super().__init__(message)
        self.cause = cause


# ---------------------------------------------------------------- the cells


def _peer(preset):
    """The peer a preset runs in a child process, or None (in-process); a
    peer that is not installed is still a peer."""
    try:
        return peers.needed(preset)
    except errors.PeerUnavailable as e:
        return getattr(e, "peer", None) or preset


def in_process_presets():
    """Presets whose allocator runs in this process (peers run in children)."""
    return [n for n in al.presets if _peer(n) is None]


def peer_presets():
    return [n for n in al.presets if n not in in_process_presets()]


def _needs_distinct(wl):
    flags = [f for f in wl.flags if "distinct" in f]
    if flags:
        return True
    declared = any("distinct" in n for n, _ in schema.WORKLOAD_FLAGS)
    return False if declared else wl.name in NEEDS_DISTINCT


# Valid cells that may still end with a specific error by design: the
# workload cannot go on with the policy's defaults, and the error names the
# mechanism and the parameter that changes it. bpf_ma(mode=fixed) keeps one
# instance per distinct request size, at most 8; larson asks for ~1000.
MAY_FAIL = {
    ("larson", "bpf-ma"): ((errors.RunError, errors.InvalidArgument),
                           ["bpf_ma", "instance", "unit"]),
}


def run_expectation(workload, preset, producers):
    """What a run cell must do: ("ok", None), ("refuse", (classes, [words]))
    where the message must contain every word (case-insensitive), or
    ("ok_or_fail", (classes, [words])): complete, or raise as described."""
    wl = schema.workload(workload)
    pol = al.Policy(preset)
    peer = _peer(preset)
    if peer is not None and peer != "glibc" and not peers.available(peer):
        return "refuse", ((errors.PeerUnavailable,), [peer, "install"])
    if workload == "replay" and peer is not None and \
            not isinstance(_replay_trace(producers), str):
        return "refuse", ((errors.InvalidArgument,), ["built in memory", "save"])
    if wl.one_producer and producers != 1:
        return "refuse", ((errors.ParameterRangeError,), ["producers"])
    if workload == "test_vmalloc" and "vmalloc" not in pol.names:
        return "refuse", ((errors.InvalidArgument,), ["vmalloc"])
    if workload == "nmi" and not pol.nmi_safe:
        return "refuse", ((errors.InvalidArgument,), ["nmi"])
    if pol.names[-1] == "null" and _needs_distinct(wl):
        return "refuse", ((errors.InvalidArgument,), ["null"])
    if (workload, preset) in MAY_FAIL:
        return "ok_or_fail", MAY_FAIL[(workload, preset)]
    return "ok", None


_REPLAY_TRACES = {}
_REPLAY_DIR = []  # a TemporaryDirectory, removed when the worker exits


def _replay_trace(nthreads):
    """A small trace of nthreads threads for the replay cells: each thread
    allocates (every alloc kind), reallocs, asks sizes and frees, and frees
    half of the objects of the thread before it (a ring of cross-thread
    frees). Saved to a file when the build can (a peer's child loads it);
    else the in-memory Trace (peers then refuse it, see run_expectation)."""
    if nthreads in _REPLAY_TRACES:
        return _REPLAY_TRACES[nthreads]
    from alloclab.trace import Trace
    kinds = ("malloc", "calloc", "posix_memalign", "aligned_alloc", "memalign", "malloc")
    threads, nid = [[] for _ in range(nthreads)], 0
    for rnd in range(40):
        for k in range(nthreads):
            a, b = nid, nid + 1
            nid += 3
            threads[k].append(dict(kind=kinds[rnd % 6], size=8 + 24 * rnd, aux=16, id=a,
                                   seq=rnd * 1000 + k * 10 + 1))
            threads[k].append(dict(kind="malloc", size=rnd, id=b, seq=rnd * 1000 + k * 10 + 2))
            threads[k].append(dict(kind="realloc", size=4 * rnd + 1, aux=rnd, ref=b, id=b + 1,
                                   seq=rnd * 1000 + k * 10 + 3))
            threads[k].append(dict(kind="usable_size", ref=b + 1,
                                   seq=rnd * 1000 + k * 10 + 4))
            threads[k].append(dict(kind="free", ref=b + 1, seq=rnd * 1000 + k * 10 + 5))
    for k in range(nthreads):  # the ring: thread k frees thread k-1's first allocations
        src = (k - 1) % nthreads
        for rnd in range(40):
            threads[k].append(dict(kind="free", ref=(rnd * nthreads + src) * 3,
                                   seq=100000 + rnd * nthreads + k))
    tr = Trace.from_ops(threads)
    if getattr(tr, "save", None) is not None:
        if not _REPLAY_DIR:
            _REPLAY_DIR.append(tempfile.TemporaryDirectory(prefix="alloclab-redteam-"))
        path = os.path.join(_REPLAY_DIR[0].name, "t%d.altrace" % nthreads)
        tr.save(path)
        tr = path
    _REPLAY_TRACES[nthreads] = tr
    return tr


def run_cells():
    out = []
    for wl in [w["name"] for w in al.workloads()]:
        for preset in al.presets:
            for p in PRODUCERS:
                out.append("run:%s:%s:p%d" % (wl, preset, p))
    return out


ABUSES = {}


def abuse(fn):
    ABUSES[fn.__name__] = fn
    return fn


def abuse_cells():
    inproc = in_process_presets()
    out = ["abuse:%s:%s" % (name, preset) for name in ABUSES if name != "peer_in_process"
           for preset in inproc]
    out += ["abuse:peer_in_process:%s" % preset for preset in peer_presets()]
    return out


# The preload shim's entry points at the limits of size_t: a cell per entry
# and shim preset runs tests/preload/limits.c (that entry's calls alone)
# under the shim, whose output must be glibc's line for line: NULL and the
# same errno at SIZE_MAX, SIZE_MAX - 4000, SIZE_MAX / 2 + 1, products that
# overflow, page rounding that would wrap, alignments past the largest
# power of two (posix_memalign's returned error), the old block kept by a
# failed realloc.
PRELOAD_ENTRIES = ("malloc", "calloc", "realloc", "reallocarray", "memalign", "aligned_alloc",
                   "posix_memalign", "valloc", "pvalloc", "malloc_usable_size")
_LIMITS = []  # (TemporaryDirectory, the built program), made by the first preload cell


def shim_presets():
    """The presets the shim runs (a bottom layer that owns its memory by
    address range), as tests/test_preload.py parametrises them: fixed-size
    bpf-ma is not a general malloc, its any-size mode stands in for it."""
    return [n for n in al.presets
            if schema.layer(al.Policy(al.presets[n]).layers[-1][0]).has("owns")
            and n != "bpf-ma"] + ["bpf_ma(mode=any) > slab"]


def preload_cells():
    return ["preload:%s:%s" % (e, p) for e in PRELOAD_ENTRIES for p in shim_presets()]


def _limits_program():
    if not _LIMITS:
        d = tempfile.TemporaryDirectory(prefix="alloclab-redteam-")
        exe = os.path.join(d.name, "limits")
        subprocess.run([shutil.which("cc") or "cc", "-O1", "-o", exe,
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "preload",
                                     "limits.c")], check=True, timeout=120)
        _LIMITS.append((d, exe))
    return _LIMITS[0][1]


def preload_cell(entry, preset):
    """One entry point at the limits under the shim on preset: exactly what
    glibc answers, nothing served by the policy that glibc refuses, no crash
    and no stall."""
    from alloclab import preload

    exe = _limits_program()
    ref = subprocess.run([exe, entry], capture_output=True, text=True, timeout=CELL_TIMEOUT)
    if ref.returncode or not ref.stdout.endswith("limits 0\n"):
        raise CellFailed("limits %s on glibc itself: exit %d: %s"
                         % (entry, ref.returncode, ref.stdout[-300:]))
    try:  # a stack that pads cannot align pvalloc(1)'s page: glibc's, allowed
        proc = preload.run(preset, [exe, entry], capture_output=True, text=True,
                           allow_glibc=True, watchdog=CELL_TIMEOUT / 2, timeout=CELL_TIMEOUT)
    except errors.RunStalled as e:
        raise CellFailed("the shim stalled: %s" % e, cause="raised RunStalled")
    if proc.returncode < 0:
        raise CellFailed("limits %s was killed by %s under the shim"
                         % (entry, signal.Signals(-proc.returncode).name), cause="crash")
    if proc.stdout != ref.stdout:
        diff = next((a, b) for a, b in zip(proc.stdout.splitlines() + [""],
                                           ref.stdout.splitlines() + [""]) if a != b)
        raise CellFailed("%s under the shim answers %r where glibc answers %r"
                         % (entry, diff[0], diff[1]), cause="silent wrong result")
    sh = proc.stats["shim"]
    if proc.stats["state"] != "ready" or sh.get("libc_refused"):
        raise CellFailed("the policy was not ready or refused %d request(s): %s"
                         % (sh.get("libc_refused", 0), proc.stats["on_glibc"]))
    return "as glibc"


def all_cells():
    return run_cells() + abuse_cells() + preload_cells()


def select_cells(mode, seed):
    """The cells of a run: every cell ("full"), a seeded sample of
    SAMPLE_FRACTION of them ("sample"), or none ("off"), in matrix order."""
    cells = all_cells()
    if mode == "full":
        return cells
    if mode == "off":
        return []
    k = max(1, round(len(cells) * SAMPLE_FRACTION))
    chosen = set(random.Random(seed).sample(cells, k))
    return [c for c in cells if c in chosen]


# ------------------------------------------------------------ expectations


def _hex(addr):
    return "0x%x" % addr


def expect(cls, words, fn, *args, **kw):
    """fn(*args) must raise ``cls`` (or a subclass, never the bare base)
    whose message contains every word (case-insensitive). Returns the
    exception."""
    what = "%s(%s)" % (getattr(fn, "__name__", "call"),
                       ", ".join([_short(a) for a in args] +
                                 ["%s=%s" % (k, _short(v)) for k, v in kw.items()]))
    try:
        ret = fn(*args, **kw)
    except CellFailed:
        raise
    except Exception as e:  # noqa: BLE001 - every other exception is judged here
        classes = cls if isinstance(cls, tuple) else (cls,)
        want = " or ".join(c.__name__ for c in classes)
        if not isinstance(e, classes) or type(e) is errors.AlloclabError and \
                errors.AlloclabError not in classes:
            raise CellFailed("%s raised %s (%s), expected %s" % (
                what, type(e).__name__, e, want),
                cause="raised %s, expected %s" % (type(e).__name__, want))
        msg = str(e).lower()
        missing = [w for w in words if str(w).lower() not in msg]
        if missing:
            raise CellFailed("%s raised %s whose message does not name %s: %r" % (
                what, type(e).__name__, ", ".join(map(str, missing)), str(e)),
                cause="%s does not name %s" % (type(e).__name__, ", ".join(
                    "the address" if str(w).startswith("0x") else repr(w) for w in missing)))
        return e
    want = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
    raise CellFailed("%s was accepted (returned %s), expected %s" % (what, _short(ret), want),
                     cause="accepted, expected %s" % want)


def _short(v):
    if isinstance(v, int) and not isinstance(v, bool) and v > 4096:
        return _hex(v)
    s = repr(v)
    return s if len(s) < 60 else s[:57] + "..."


def valid(what, fn, *args, **kw):
    """A valid call must succeed; any exception fails the cell."""
    try:
        return fn(*args, **kw)
    except Exception as e:  # noqa: BLE001
        raise CellFailed("%s (a valid call) raised %s: %s" % (what, type(e).__name__, e))


def hands_out_distinct(a):
    """False for the null floor, which hands out one block per CPU by design
    (usable where objects are never touched); True for every real allocator."""
    return a.policy.names != ["null"]


def sane(a, where="after the abuse"):
    """The allocator still works and is consistent: blocks are distinct and
    usable, frees are accepted, drain and the invariant checks pass."""
    ps = [valid("alloc(64) %s" % where, a.alloc, 64, cpu=i % a.ncpu) for i in range(8)]
    if hands_out_distinct(a) and len(set(ps)) != len(ps):
        raise CellFailed("%s the allocator handed out the same block twice: %s"
                         % (where, [_hex(p) for p in ps]))
    for p in ps:
        valid("free(%s) %s" % (_hex(p), where), a.free, p, cpu=0)
    valid("drain() %s" % where, a.drain)
    valid("check() %s" % where, a.check)


def fresh(preset, ncpu=2):
    return valid("Allocator(%r, ncpu=%d)" % (preset, ncpu), al.Allocator, preset, ncpu=ncpu)


def distinct_after(a, p):
    """After a refused second free of ``p``, p is either still free or still
    live, but never in the allocator twice: two allocations after a drain
    must differ."""
    a.drain()
    q = valid("alloc(64)", a.alloc, 64)
    r = valid("alloc(64)", a.alloc, 64)
    if q == r and hands_out_distinct(a):
        raise CellFailed("after the refused double free of %s the allocator handed out "
                         "%s twice" % (_hex(p), _hex(q)))
    a.free(q)
    a.free(r)


# ------------------------------------------------------- the abuses, per preset
# Each takes a preset name and raises CellFailed when its expectation fails.


@abuse
def valid_use(preset):
    """Control: ordinary use on two CPUs, cross-CPU frees, bulk calls."""
    with fresh(preset) as a:
        sizes = (1, 8, 16, 63, 64, 100, 1000, 4096)
        ps = [a.alloc(s, cpu=s % 2) for s in sizes]
        for s, p in zip(sizes, ps):
            u = valid("usable_size(%s)" % _hex(p), a.usable_size, p)
            if u and u < s:  # 0: the layer cannot say
                raise CellFailed("usable_size of a %d-byte block is %d" % (s, u))
        for i, p in enumerate(ps):
            a.free(p, cpu=(i + 1) % 2)
        bulk = valid("alloc_bulk(64, 16)", a.alloc_bulk, 64, 16)
        if hands_out_distinct(a) and len(set(bulk)) != len(bulk):
            raise CellFailed("alloc_bulk handed out a block twice")
        n = valid("free_bulk(16 blocks)", a.free_bulk, bulk)
        if n != len(bulk):
            raise CellFailed("free_bulk of %d live blocks returned %d" % (len(bulk), n))
        sane(a, "after valid use")


@abuse
def double_free(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        a.free(p)
        expect(errors.InvalidFreeError, [_hex(p)], a.free, p)
        distinct_after(a, p)
        sane(a)


@abuse
def double_free_then_drain(preset):
    """The double free first, then the drain that walks the free lists."""
    with fresh(preset) as a:
        p = a.alloc(64)
        a.free(p)
        expect(errors.InvalidFreeError, [_hex(p)], a.free, p)
        valid("drain()", a.drain)
        valid("check()", a.check)
        sane(a)


@abuse
def double_free_after_drain(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        a.free(p)
        a.drain()
        expect(errors.InvalidFreeError, [_hex(p)], a.free, p)
        sane(a)


@abuse
def double_free_other_cpu(preset):
    with fresh(preset) as a:
        p = a.alloc(64, cpu=0)
        a.free(p, cpu=0)
        expect(errors.InvalidFreeError, [_hex(p)], a.free, p, cpu=1)
        distinct_after(a, p)
        sane(a)


@abuse
def double_free_not_at_head(preset):
    """A double free of a block that is no longer the last one freed (on
    null, whose three blocks are one, the fourth free of it)."""
    with fresh(preset) as a:
        p, q, r = a.alloc(64), a.alloc(64), a.alloc(64)
        a.free(p)
        a.free(q)
        a.free(r)
        expect(errors.InvalidFreeError, [_hex(p)], a.free, p)
        distinct_after(a, p)
        sane(a)


@abuse
def wild_free(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        expect(errors.InvalidFreeError, [_hex(WILD)], a.free, WILD)
        a.free(p)
        sane(a)


@abuse
def wild_free_heap(preset):
    """An address in this process's own heap that the allocator never gave."""
    with fresh(preset) as a:
        buf = ctypes.create_string_buffer(256)
        addr = (ctypes.addressof(buf) + 15) & ~15
        expect(errors.InvalidFreeError, [_hex(addr)], a.free, addr)
        sane(a)


@abuse
def wild_free_foreign(preset):
    """A block of another allocator built from the same preset."""
    with fresh(preset) as a, fresh(preset) as b:
        p = b.alloc(64)
        expect(errors.InvalidFreeError, [_hex(p)], a.free, p)
        b.free(p)
        sane(a)
        sane(b)


@abuse
def free_misaligned(preset):
    with fresh(preset) as a:
        expect(errors.InvalidFreeError, ["0x1"], a.free, 1)
        sane(a)


@abuse
def free_null(preset):
    """free(0) is free(NULL): a no-op as in C and the kernel, or refused as
    an address this allocator did not hand out; nothing else."""
    with fresh(preset) as a:
        try:
            a.free(0)
        except errors.InvalidFreeError:
            pass
        except Exception as e:  # noqa: BLE001
            raise CellFailed("free(0) raised %s: %s" % (type(e).__name__, e))
        sane(a)


@abuse
def free_interior(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        expect(errors.InvalidFreeError, [_hex(p + 16)], a.free, p + 16)
        valid("free(%s) after the interior free" % _hex(p), a.free, p)
        sane(a)


@abuse
def free_interior_page(preset):
    """A page-aligned address inside a multi-page block."""
    with fresh(preset) as a:
        size = min(16384, a.max_size or 16384)
        p = a.alloc(size)
        inner = p + size // 2
        expect(errors.InvalidFreeError, [_hex(inner)], a.free, inner)
        valid("free(%s) after the interior free" % _hex(p), a.free, p)
        sane(a)


@abuse
def free_bad_values(preset):
    with fresh(preset) as a:
        expect(errors.ParameterTypeError, ["'0x10'"], a.free, "0x10")
        expect(errors.ParameterTypeError, ["1.5"], a.free, 1.5)
        expect(errors.InvalidArgument, ["-4096"], a.free, -4096)
        expect(errors.InvalidArgument, [str(1 << 64)], a.free, 1 << 64)
        sane(a)


@abuse
def free_bulk_duplicates(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        expect(errors.InvalidFreeError, [_hex(p)], a.free_bulk, [p, p])
        distinct_after(a, p)
        sane(a)


@abuse
def free_bulk_duplicate_last(preset):
    with fresh(preset) as a:
        ps = [a.alloc(64) for _ in range(3)]
        expect(errors.InvalidFreeError, [_hex(ps[0])], a.free_bulk, ps + [ps[0]])
        distinct_after(a, ps[0])
        sane(a)


@abuse
def free_bulk_wild(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        expect(errors.InvalidFreeError, [_hex(WILD)], a.free_bulk, [p, WILD])
        distinct_after(a, p)
        sane(a)


@abuse
def free_bulk_interior(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        expect(errors.InvalidFreeError, [_hex(p + 16)], a.free_bulk, [p + 16])
        valid("free(%s)" % _hex(p), a.free, p)
        sane(a)


@abuse
def free_bulk_freed(preset):
    with fresh(preset) as a:
        p, q = a.alloc(64), a.alloc(64)
        a.free(p)
        expect(errors.InvalidFreeError, [_hex(p)], a.free_bulk, [q, p])
        distinct_after(a, p)
        sane(a)


@abuse
def free_bulk_bad_values(preset):
    with fresh(preset) as a:
        if valid("free_bulk([])", a.free_bulk, []) != 0:
            raise CellFailed("free_bulk([]) did not return 0")
        expect(errors.ParameterTypeError, ["none"], a.free_bulk, [None])
        expect(errors.InvalidArgument, ["-1"], a.free_bulk, [-1])
        sane(a)


@abuse
def alloc_zero(preset):
    with fresh(preset) as a:
        expect(errors.InvalidArgument, ["size 0"], a.alloc, 0)
        expect(errors.InvalidArgument, ["size 0"], a.alloc_bulk, 0, 4)
        sane(a)


@abuse
def alloc_negative(preset):
    with fresh(preset) as a:
        expect(errors.InvalidArgument, ["-1"], a.alloc, -1)
        expect(errors.InvalidArgument, ["-4096"], a.alloc_bulk, -4096, 2)
        expect(errors.InvalidArgument, ["-1"], a.alloc_bulk, 64, -1)
        sane(a)


@abuse
def alloc_huge(preset):
    """A request no allocator can serve: refused as out of range (above the
    policy's max size) or as out of memory, naming the size."""
    with fresh(preset) as a:
        cls = errors.InvalidArgument if a.max_size else \
            (errors.AllocatorExhausted, errors.InvalidArgument)
        expect(cls, [str(HUGE)], a.alloc, HUGE)
        expect(cls, [str(1 << 63)], a.alloc, 1 << 63)
        sane(a)


@abuse
def alloc_2_64(preset):
    """2**64 does not fit size_t: an invalid argument, never OverflowError."""
    with fresh(preset) as a:
        expect(errors.InvalidArgument, [str(1 << 64)], a.alloc, 1 << 64)
        expect(errors.InvalidArgument, [str(1 << 64)], a.alloc_bulk, 1 << 64, 2)
        sane(a)


@abuse
def alloc_bad_types(preset):
    with fresh(preset) as a:
        expect(errors.ParameterTypeError, ["64.0"], a.alloc, 64.0)
        expect(errors.ParameterTypeError, ["true"], a.alloc, True)
        expect(errors.ParameterTypeError, ["'64'"], a.alloc, "64")
        sane(a)


@abuse
def alloc_max_size(preset):
    """The largest request the policy declares is served; one byte more is
    refused naming the limit."""
    with fresh(preset) as a:
        mx = a.max_size
        if not mx:
            return
        if mx <= 64 << 20:
            p = valid("alloc(max_size=%d)" % mx, a.alloc, mx)
            a.free(p)
        expect(errors.InvalidArgument, [str(mx + 1)], a.alloc, mx + 1)
        sane(a)


def no_usable_size(a, addr):
    """usable_size of an address that is not a live block: refused naming
    it (InvalidArgument or its subclass InvalidFreeError) or 0, the value
    documented for "cannot say"; never a size, never a crash."""
    try:
        u = a.usable_size(addr)
    except errors.InvalidArgument as e:
        if _hex(addr) not in str(e).lower():
            raise CellFailed("usable_size(%s) raised %s whose message does not name the "
                             "address: %r" % (_hex(addr), type(e).__name__, str(e)))
        return
    except Exception as e:  # noqa: BLE001
        raise CellFailed("usable_size(%s) raised %s: %s, expected InvalidArgument or 0"
                         % (_hex(addr), type(e).__name__, e))
    if u != 0:
        raise CellFailed("usable_size(%s) of an address that is not a live block returned "
                         "%d, expected InvalidArgument or 0" % (_hex(addr), u),
                         cause="returned a size, expected InvalidArgument or 0")


@abuse
def usable_size_wild(preset):
    with fresh(preset) as a:
        no_usable_size(a, WILD)
        sane(a)


@abuse
def usable_size_freed(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        a.free(p)
        a.drain()
        no_usable_size(a, p)
        sane(a)


@abuse
def usable_size_interior(preset):
    with fresh(preset) as a:
        p = a.alloc(64)
        no_usable_size(a, p + 16)
        a.free(p)
        sane(a)


@abuse
def owns_wild(preset):
    with fresh(preset) as a:
        if valid("owns(wild)", a.owns, WILD):
            raise CellFailed("owns(%s) is True for an address never handed out" % _hex(WILD))
        sane(a)


@abuse
def cpu_out_of_range(preset):
    with fresh(preset) as a:
        expect(errors.ParameterRangeError, ["cpu=2"], a.alloc, 64, cpu=2)
        expect(errors.ParameterRangeError, ["cpu=-1"], a.alloc, 64, cpu=-1)
        expect(errors.ParameterRangeError, ["cpu=%d" % (1 << 40)], a.alloc, 64, cpu=1 << 40)
        p = a.alloc(64)
        expect(errors.ParameterRangeError, ["cpu=99"], a.free, p, cpu=99)
        valid("free(%s) after the refused free" % _hex(p), a.free, p)
        expect(errors.ParameterRangeError, ["cpu=7"], a.drain, cpu=7)
        expect(errors.ParameterTypeError, ["1.0"], a.alloc, 64, cpu=1.0)
        sane(a)


@abuse
def ncpu_out_of_range(preset):
    expect(errors.ParameterRangeError, ["ncpu=0"], al.Allocator, preset, ncpu=0)
    expect(errors.ParameterRangeError, ["ncpu=-1"], al.Allocator, preset, ncpu=-1)
    big = 1 << 20
    expect(errors.ParameterRangeError, ["ncpu=%d" % big], al.Allocator, preset, ncpu=big)
    expect(errors.ParameterTypeError, ["2.0"], al.Allocator, preset, ncpu=2.0)


@abuse
def use_after_close(preset):
    """Every call on a closed allocator is refused naming it as closed (the
    generic AlloclabError is accepted here: no specific class fits)."""
    a = fresh(preset)
    p = a.alloc(64)
    a.close()
    closed = (errors.AlloclabError,)
    expect(closed, ["closed"], a.alloc, 64)
    expect(closed, ["closed"], a.free, p)
    expect(closed, ["closed"], a.free_bulk, [p])
    expect(closed, ["closed"], a.alloc_bulk, 64, 2)
    expect(closed, ["closed"], a.usable_size, p)
    expect(closed, ["closed"], a.owns, p)
    expect(closed, ["closed"], a.drain)
    expect(closed, ["closed"], a.check)
    expect(closed, ["closed"], a.stats)


@abuse
def close_twice(preset):
    a = fresh(preset)
    p = a.alloc(64)
    a.free(p)
    valid("close()", a.close)
    valid("close() again", a.close)
    if not a.closed:
        raise CellFailed("closed is False after close()")
    with fresh(preset) as b:  # the context manager closes an already closed one
        b.close()


@abuse
def close_with_live_objects(preset):
    """Closing (and collecting) an allocator that still holds blocks."""
    a = fresh(preset)
    for i in range(64):
        a.alloc(64, cpu=i % 2)
    valid("close() with 64 live blocks", a.close)
    b = fresh(preset)
    b.alloc(64)
    del b  # the garbage collector destroys it


def _threads(fn, n):
    """Run fn(i) on n threads started together; the first exception of any
    thread is returned (None when all completed)."""
    barrier = threading.Barrier(n)
    excs = [None] * n

    def body(i):
        try:
            barrier.wait()
            fn(i)
        except BaseException as e:  # noqa: BLE001 - reported to the caller
            excs[i] = e

    ts = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return next((e for e in excs if e is not None), None)


def _churn(a, cpu, rounds=3000):
    for _ in range(rounds):
        ps = [a.alloc(64, cpu=cpu) for _ in range(4)]
        for p in ps:
            a.free(p, cpu=cpu)


@abuse
def two_threads_two_cpus(preset):
    """Control: two threads, each on its own model CPU."""
    with fresh(preset) as a:
        e = _threads(lambda i: _churn(a, i), 2)
        if e is not None:
            raise CellFailed("two threads on cpus 0 and 1 (valid): %s: %s"
                             % (type(e).__name__, e))
        sane(a)


@abuse
def two_threads_one_cpu(preset):
    """Two threads on the same model CPU: serialised (both complete), or
    the second concurrent user refused with an error naming the CPU."""
    with fresh(preset) as a:
        e = _threads(lambda i: _churn(a, 0), 2)
        if e is not None:
            if not isinstance(e, errors.AlloclabError) or type(e) is errors.AlloclabError \
                    or isinstance(e, errors.InvalidFreeError) \
                    or "cpu" not in str(e).lower():
                raise CellFailed("two threads on cpu 0: %s: %s" % (type(e).__name__, e))
        sane(a)


@abuse
def drain_check_after_abuse(preset):
    """Refused abuses of every kind, then drain and check: nothing was lost
    and the invariants hold."""
    with fresh(preset) as a:
        live = [a.alloc(64, cpu=i % 2) for i in range(16)]
        p = live.pop()
        a.free(p)
        if p not in live:  # on null the same block may still be out on this CPU
            expect(errors.InvalidFreeError, [_hex(p)], a.free, p)
        expect(errors.InvalidFreeError, [_hex(WILD)], a.free, WILD)
        expect(errors.InvalidFreeError, [_hex(live[0] + 16)], a.free, live[0] + 16)
        expect(errors.InvalidArgument, ["size 0"], a.alloc, 0)
        valid("drain()", a.drain)
        valid("drain(cpu=1)", a.drain, cpu=1)
        valid("check() with live blocks", a.check)
        for i, q in enumerate(live):
            valid("free(%s) of a live block" % _hex(q), a.free, q, cpu=i % 2)
        sane(a)


@abuse
def peer_in_process(preset):
    """A peer allocator cannot back an in-process Allocator: the error says
    that peers run in child processes (or which package is missing)."""
    try:
        a = al.Allocator(preset)
    except errors.PeerUnavailable as e:
        if "install" not in str(e).lower():
            raise CellFailed("PeerUnavailable without an install hint: %s" % e)
        return
    except Exception as e:  # noqa: BLE001
        if not isinstance(e, errors.AlloclabError) or type(e) is errors.AlloclabError \
                or "child process" not in str(e).lower():
            raise CellFailed("Allocator(%r) raised %s: %s (expected a specific alloclab "
                             "error saying that peers run in child processes)"
                             % (preset, type(e).__name__, e),
                             cause="raised %s without saying that peers run in child "
                                   "processes" % type(e).__name__)
        return
    a.close()
    raise CellFailed("Allocator(%r) was built in-process" % preset)


# ---------------------------------------------------------------- running one


def run_cell(cell):
    """Run one cell in this process; raises CellFailed on a failed
    expectation, returns a short summary on success."""
    kind, rest = cell.split(":", 1)
    if kind == "selftest" and os.environ.get("ALLOCLAB_REDTEAM_SELFTEST"):
        return _selftest(rest)
    if kind == "abuse":
        name, preset = rest.split(":", 1)
        ABUSES[name](preset)
        return "as expected"
    if kind == "preload":
        entry, preset = rest.split(":", 1)
        return preload_cell(entry, preset)
    workload, preset, p = rest.rsplit(":", 2)
    producers = int(p[1:])
    want, refuse = run_expectation(workload, preset, producers)
    params = dict(TINY_PARAMS.get(workload, {}))
    settings = dict(RUN_SETTINGS)
    if workload == "replay":  # one pass of a small trace: no cycles, no warmup
        del settings["cycles"], settings["warmup_cycles"]
        params["trace"] = _replay_trace(producers)

    def run():
        return al.run(workload, preset, producers=producers, **settings, **params)

    if want == "refuse":
        classes, words = refuse
        e = expect(classes, words, run)
        return "refused: %s" % type(e).__name__
    try:
        res = run()
    except errors.RunStalled as e:
        raise CellFailed("run raised RunStalled: %s" % e, cause="raised RunStalled")
    except Exception as e:  # noqa: BLE001
        if want == "ok_or_fail":
            classes, words = refuse
            expect(classes, words, _reraise, e)
            return "failed by design: %s" % type(e).__name__
        raise CellFailed("run raised %s: %s" % (type(e).__name__, e))
    n = len(res.points) if hasattr(res, "points") else None
    if n is not None and n != 1:
        raise CellFailed("run returned %d points, expected 1" % n)
    return "completed"


def _reraise(e):
    raise e


def _selftest(what):
    """Cells that misbehave on purpose, to test the runner itself."""
    if what == "segv":
        ctypes.string_at(0)
    elif what == "abort":
        os.abort()
    elif what == "hang":
        threading.Event().wait()
    elif what == "fail":
        raise CellFailed("expected failure")
    return "as expected"


def _worker(parent):
    # Die with the parent: a killed pytest leaves no worker behind.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass
    if os.getppid() != parent:
        os._exit(3)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
    try:  # a crashing cell is reported by its signal; a core file helps no one here
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):  # pragma: no cover
        pass
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything printed goes to the log, not into the protocol
    import gc

    out.write(json.dumps({"ready": True}) + "\n")  # cell timeouts start from here

    for line in sys.stdin:
        cell = line.strip()
        if not cell:
            continue
        sys.stderr.write("== %s\n" % cell)
        sys.stderr.flush()
        t0 = time.monotonic()
        try:
            detail = run_cell(cell)
            ok = True
            cause = None
        except CellFailed as e:
            ok, detail, cause = False, str(e), e.cause
        except Exception as e:  # noqa: BLE001 - an unexpected exception fails the cell
            ok = False
            detail = "unexpected %s: %s\n%s" % (type(e).__name__, e,
                                                "".join(traceback.format_exc(limit=6)))
            cause = "unexpected %s" % type(e).__name__
        gc.collect()  # a crash in a destructor is charged to this cell
        out.write(json.dumps({"cell": cell, "ok": ok, "detail": detail, "cause": cause,
                              "seconds": time.monotonic() - t0}) + "\n")


# -------------------------------------------------------------- the runner

PASS, FAIL, CRASH, HANG = "pass", "fail", "crash", "hang"


class Outcome:
    def __init__(self, cell, status, detail, seconds, cause=None):
        self.cell, self.status, self.detail, self.seconds = cell, status, detail, seconds
        self.cause = cause

    def __repr__(self):
        return "Outcome(%s, %s, %r)" % (self.cell, self.status, self.detail)


class _Worker:
    def __init__(self, logdir, index):
        self.log_path = os.path.join(logdir, "worker%d.log" % index)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), "--worker", str(os.getpid())],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
            start_new_session=True)  # Ctrl-C reaches pytest only; we kill the workers
        self.buf = b""
        self.ready = False  # the worker has imported alloclab and waits for cells
        self.cell = None
        self.started = time.monotonic()
        self.deadline = self.started + STARTUP_TIMEOUT
        self.log_offset = 0

    def send(self, cell, timeout):
        self.log.flush()
        self.log_offset = os.path.getsize(self.log_path)
        self.cell = cell
        self.started = time.monotonic()
        self.deadline = self.started + timeout
        self.proc.stdin.write((cell + "\n").encode())
        self.proc.stdin.flush()

    def log_tail(self, limit=1500):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        text = "\n".join(l for l in text.splitlines() if not l.startswith("== "))
        return text[-limit:].strip()

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.log.close()


def _signame(rc):
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return "signal %d" % -rc


class Runner:
    """Runs cells on ``workers`` long-lived child processes, ``timeout``
    seconds each. get(cell) returns the cell's Outcome, running the cells
    queued ahead of it (prefetch) on every worker meanwhile."""

    def __init__(self, workers=WORKERS, timeout=CELL_TIMEOUT):
        self.nworkers = max(1, workers)
        self.timeout = timeout
        self.logdir = tempfile.mkdtemp(prefix="alloclab-redteam-")
        self.workers = []
        self.spawned = []  # every worker process, to prove none is left behind
        self.queue = []
        self.results = {}
        self.t0 = time.monotonic()

    def prefetch(self, cells):
        self.queue.extend(c for c in cells if c not in self.results)

    def _new(self, i):
        w = _Worker(self.logdir, i)
        self.spawned.append(w.proc)
        return w

    def _idle(self):
        while len(self.workers) < self.nworkers:
            self.workers.append(self._new(len(self.workers)))
        return [w for w in self.workers if w.cell is None]

    def _replace(self, w):
        w.kill()
        i = self.workers.index(w)
        self.workers[i] = self._new(i)

    def _finish(self, w, status, detail, seconds=None, cause=None):
        cell = w.cell
        secs = seconds if seconds is not None else time.monotonic() - w.started
        self.results[cell] = Outcome(cell, status, detail, secs, cause)
        w.cell = None
        if status != PASS:
            # A failed cell may have left the worker's heap corrupt or threads
            # spinning: the next cell gets a fresh process.
            self._replace(w)

    def _busy(self):
        return {w.cell for w in self.workers if w.cell is not None}

    def get(self, cell):
        if cell not in self.results and cell not in self._busy():
            if cell in self.queue:
                self.queue.remove(cell)
            self.queue.insert(0, cell)
        while cell not in self.results:
            self._pump()
        return self.results[cell]

    def run_all(self, cells, progress=None):
        self.prefetch(cells)
        for c in cells:
            self.get(c)
            if progress:
                progress(self.results[c])
        return [self.results[c] for c in cells]

    def _pump(self):
        for w in self._idle():
            if not w.ready:
                continue
            while self.queue:
                c = self.queue.pop(0)
                if c in self.results or c in self._busy():
                    continue
                try:
                    w.send(c, self.timeout)
                except (BrokenPipeError, OSError):
                    w.cell = c
                    self._died(w)
                break
        waiting = [w for w in self.workers if w.cell is not None or not w.ready]
        if not waiting:
            return
        wait = max(0.0, min(w.deadline for w in waiting) - time.monotonic())
        readable, _, _ = select.select([w.proc.stdout for w in waiting], [], [], wait)
        for w in waiting:
            if w.proc.stdout in readable:
                chunk = os.read(w.proc.stdout.fileno(), 65536)
                if not chunk:
                    self._died(w)
                    continue
                w.buf += chunk
                while b"\n" in w.buf:
                    line, w.buf = w.buf.split(b"\n", 1)
                    msg = json.loads(line)
                    if msg.get("ready"):
                        w.ready = True
                    elif msg.get("cell") == w.cell:
                        self._finish(w, PASS if msg["ok"] else FAIL, msg["detail"],
                                     msg["seconds"], msg.get("cause"))
            elif time.monotonic() >= w.deadline:
                if not w.ready:
                    self._no_start(w, "did not start within %.0f s" % STARTUP_TIMEOUT)
                tail = w.log_tail()
                self._finish(w, HANG, "no result within %.0f s (the worker was killed)%s"
                             % (self.timeout, "; stderr:\n" + tail if tail else ""))

    def _no_start(self, w, why):
        """A worker that cannot start is a broken harness, not a failing cell:
        stop with its stderr rather than charge every cell with it."""
        w.log.flush()
        tail = w.log_tail()
        self.close()
        raise RuntimeError("red-team worker %s%s" % (why, ":\n" + tail if tail else ""))

    def _died(self, w):
        try:
            rc = w.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            rc = None
        if not w.ready:
            self._no_start(w, "exited with status %s before it was ready" % rc)
        w.log.flush()
        tail = w.log_tail()
        if rc is not None and rc < 0:
            what = "killed by %s" % _signame(rc)
        else:
            what = "the worker exited with status %s" % rc
        self._finish(w, CRASH, what + ("; stderr:\n" + tail if tail else ""))

    def close(self):
        """Kill every worker and remove their logs (each failure already
        carries the end of its worker's stderr). Idempotent."""
        for w in self.workers:
            w.kill()
        self.workers = []
        shutil.rmtree(self.logdir, ignore_errors=True)

    def summary(self):
        by = {}
        for o in self.results.values():
            by[o.status] = by.get(o.status, 0) + 1
        return by


def family(cell):
    """What a cell exercises, without the preset: "double_free", "run larson"."""
    kind, rest = cell.split(":", 1)
    return rest.split(":")[0] if kind != "run" else "run " + rest.split(":")[0]


def group_failures(outcomes):
    """Failing cells grouped by cause: crashes by signal, hangs, and failed
    expectations by what the cell exercises and how it failed (the first
    line of the message, with addresses and large numbers masked, where the
    failure has no cause of its own)."""
    groups = {}
    for o in outcomes:
        if o.status == PASS:
            continue
        if o.status == CRASH:
            key = "crash (%s)" % o.detail.split(";")[0]
        elif o.status == HANG:
            key = "hang"
        elif o.cause:
            key = "fail: %s: %s" % (family(o.cell), o.cause)
        else:
            text = o.detail.splitlines()[0]
            text = re.sub(r"run \d+ of \S+ on '[^']*' \([^)]*\): ", "", text)
            text = re.sub(r"0x[0-9a-f]+", "0x…", text)
            text = re.sub(r"\b\d{3,}\b", "N", text)
            for preset, spec in al.presets.items():
                text = text.replace(repr(spec), "<policy>").replace(repr(preset), "<policy>")
            key = "fail: %s: %s" % (family(o.cell), text[:120])
        groups.setdefault(key, []).append(o.cell)
    return groups


def format_groups(groups, width=100):
    """Lines for a report: each group with its count, then its cells."""
    import textwrap

    lines = []
    for key, cells in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        lines.append("[%d] %s" % (len(cells), key))
        lines += textwrap.wrap(", ".join(cells), width, initial_indent="    ",
                               subsequent_indent="    ", break_on_hyphens=False)
    return lines


def main(argv):
    """Run the matrix from the command line: ``python tests/redteam_cells.py
    [full|sample] [--seed N] [--json PATH]``, printing every failing cell
    grouped by cause."""
    if len(argv) > 2 and argv[1] == "--worker":
        _worker(int(argv[2]))
        return 0
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("mode", nargs="?", default="full", choices=["full", "sample"])
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--json", help="write every outcome to this file")
    ap.add_argument("--only", help="a regular expression the cell ids must match")
    args = ap.parse_args(argv[1:])
    cells = select_cells(args.mode, args.seed)
    if args.only:
        cells = [c for c in cells if re.search(args.only, c)]
    runner = Runner()
    t0 = time.monotonic()
    try:
        outs = runner.run_all(cells)
    finally:
        runner.close()
    wall = time.monotonic() - t0
    by = runner.summary()
    counts = ", ".join("%d %s" % (by.get(k, 0), k) for k in (PASS, FAIL, CRASH, HANG))
    print("red-team matrix (%s, seed %d): %d cells, %s; %.1f s wall on %d workers"
          % (args.mode, args.seed, len(cells), counts, wall, runner.nworkers))
    for line in format_groups(group_failures(outs)):
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([o.__dict__ for o in outs], f, indent=1)
    return 0 if by.get(PASS, 0) == len(cells) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
