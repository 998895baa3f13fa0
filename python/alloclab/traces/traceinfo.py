"""What a trace holds: ``alloclab.trace_info(trace)`` (also ``Trace.info()``).

The analysis reads a sealed trace through its NumPy views (``ops(k)``,
``seq(k)``, ``t_ns(k)``, ``owner()``, ``nthreads``, ``nobjects``, ``meta``)
and returns a TraceInfo: ops by kind (with NULL returns, size-0 requests,
free(NULL) and frees of objects allocated before recording), power-of-two
size histograms per allocating kind, object lifetimes in ops and in ns, the
live requested bytes over the global sequence and over time with their peak,
the objects still live at the end, the threads (ops, parent tree, span), the
frees of another thread's objects and the realloc patterns (grow, shrink,
moved share, growth factors, chains of reallocs of one object).

Algorithm: every thread's columns are concatenated once; the global order
is the seq order, found without sorting when the seqs are dense (the
recorder's case: a bincount proves seq - min is a permutation) and by one
stable argsort otherwise. Per object (ids are dense) its size and the
position and time it was created are scattered into arrays indexed by id;
each consuming op gathers its ref's from them, which gives lifetimes,
cross-thread frees and the bytes a free takes away. A free, and a realloc
that resized (a new id) or freed (size 0), consumes its ref; a failed
realloc leaves it. Columns are selected by index arrays (take), several
times faster than boolean masks on ten million ops.
Live bytes are the running sum of +size per creation and -size of the ref
per consumption in global order, so they return to exactly the bytes of
the objects live at the end. Time on the time axis is the running maximum
of t_ns in global order: threads read their clocks apart from the seq
counter, and a monotone axis keeps every op in the bucket its seq puts it.
Realloc chains are found by pointer jumping (root = root[root] until no
root changes): O(ops * log(longest chain)), with no assumption on id order.

Invariants the tests hold: the ops of all kinds sum to nops; live bytes
end at end_bytes; lifetimes are counted for freed objects only, so freed +
end_objects == nobjects.

Cost: O(ops) time (O(ops log ops) for sparse seqs) and about 70 bytes per
op of scratch, all vectorised: ten million ops take seconds. The series are
reduced to at most ``points`` buckets that keep each bucket's maximum, so
no peak is lost in a plot. Imports _tracefmt and errors, never
alloclab.trace (which imports this). The text report is at the end.
"""

import math

import numpy as np

from .. import errors
from ._tracefmt import FLAG_MOVED, FLAG_NULL, FLAG_UNKNOWN, FLAG_ZERO, KINDS, NOID
from ..cbind.schema import format_size

K = {name: i for i, name in enumerate(KINDS)}
ALLOC_KINDS = ("malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign",
               "valloc", "pvalloc")
# Growth factors (new size / old size) of reallocs that resized an object.
FACTOR_BINS = ("<=1/4", "1/4-1/2", "1/2-1", "same", "1-1.25", "1.25-1.5", "1.5-2", "2-4", ">4",
               "from 0")
_POW2 = np.array([1 << k for k in range(64)], dtype=np.uint64)


def _bitlen(v):
    """The bit length of each uint64 (0 -> 0, 1 -> 1, 2..3 -> 2, ...). frexp
    is exact below 2^53; the few values above (a float rounds 2^k - 1 up)
    are placed by an exact search."""
    v = np.asarray(v, dtype=np.uint64)
    out = np.frexp(v.astype(np.float64))[1].astype(np.int64)
    big = v >= np.uint64(1 << 53)
    if big.any():
        out[big] = np.searchsorted(_POW2, v[big], side="right")
    return out


class Pow2Hist:
    """A histogram in power-of-two bins: bin 0 holds the value 0, bin k >= 1
    the values in [2^(k-1), 2^k). ``counts[k]`` is bin k's count."""

    def __init__(self, values=None, counts=None):
        if counts is None:
            counts = np.bincount(_bitlen(values), minlength=1) if len(values) else []
        self.counts = [int(c) for c in counts]
        while self.counts and not self.counts[-1]:
            self.counts.pop()

    @staticmethod
    def bounds(k):
        """Bin k as [lo, hi): (0, 1) for bin 0."""
        return (0, 1) if k == 0 else (1 << (k - 1), 1 << k)

    @property
    def total(self):
        return sum(self.counts)

    def rows(self):
        """(lo, hi, count) from the first non-empty bin to the last."""
        first = next((k for k, c in enumerate(self.counts) if c), len(self.counts))
        return [self.bounds(k) + (c,) for k, c in enumerate(self.counts) if k >= first]

    def count(self, lo):
        """The count of the bin that starts at ``lo`` (0 for an absent bin)."""
        k = int(_bitlen([lo])[0])
        return self.counts[k] if k < len(self.counts) else 0

    def to_dict(self):
        return [{"lo": lo, "hi": hi, "count": c} for lo, hi, c in self.rows()]

    def __eq__(self, other):
        return isinstance(other, Pow2Hist) and self.counts == other.counts

    def __repr__(self):
        return "Pow2Hist(%r)" % (self.rows(),)


def _pct(values, qs=(50, 90, 99)):
    if not len(values):
        return {str(q): None for q in qs}
    # nearest rank: a percentile is one of the values (a whole number of ops)
    return {str(q): float(v) for q, v in zip(qs, np.percentile(values, qs,
                                                               method="inverted_cdf"))}


# ---------------------------------------------------------------- gathering

def _gather(trace):
    """Every thread's columns, concatenated in thread order; ``thr`` is the
    thread of each op."""
    n = trace.nthreads
    ops = [trace.ops(k) for k in range(n)]
    c = {f: np.concatenate([o[f] for o in ops]) if n else np.zeros(0)
         for f in ("kind", "flags", "size", "id", "ref")}
    c["seq"] = np.concatenate([trace.seq(k) for k in range(n)])
    c["t"] = np.concatenate([trace.t_ns(k) for k in range(n)])
    c["thr"] = np.repeat(np.arange(n, dtype=np.uint32), [len(o) for o in ops])
    return c


def _global_order(seq):
    """(pos, at): ``pos[i]`` is op i's position in global seq order,
    ``at[p]`` the op at position p. Dense seqs (a permutation of a range)
    need no sort."""
    n = len(seq)
    if not n:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    s0 = int(seq.min())
    pos = (seq - np.uint64(s0)).astype(np.int64) if int(seq.max()) - s0 + 1 == n else None
    if pos is not None and np.bincount(pos).max() == 1:
        at = np.empty(n, np.int64)
        at[pos] = np.arange(n, dtype=np.int64)
        return pos, at
    at = np.argsort(seq, kind="stable").astype(np.int64)
    pos = np.empty(n, np.int64)
    pos[at] = np.arange(n, dtype=np.int64)
    return pos, at


def _consumes(c):
    """Ops after which their ref is gone: a free, and a realloc that resized
    (it created a new id) or freed (size 0). A failed realloc keeps it."""
    known = c["ref"] != NOID
    rl = (c["kind"] == K["realloc"]) & ((c["id"] != NOID) | (c["size"] == 0))
    return known & ((c["kind"] == K["free"]) | rl)


def _objects(trace, c, pos):
    """Per object id (o): size, creation position and time, whether it was
    consumed, owner thread. Per creating op (g): its kind and size. Per
    consuming op (f): its ref, position, time, thread and kind, and the
    ref's size, creation position and time and owner, gathered once for the
    sections that need them. Columns are taken by index (a boolean mask
    selects several times slower than take on ten million ops)."""
    n = int(trace.nobjects)
    cm = c["id"] != NOID
    fm = _consumes(c)
    ci, fi = np.flatnonzero(cm), np.flatnonzero(fm)
    ids, refs = c["id"].take(ci).astype(np.intp), c["ref"].take(fi).astype(np.intp)
    g = {"kind": c["kind"].take(ci), "size": c["size"].take(ci)}
    o = {"size": np.zeros(n, np.uint64), "cpos": np.zeros(n, np.int64),
         "ct": np.zeros(n, np.uint64), "freed": np.zeros(n, bool)}
    o["size"][ids] = g["size"]
    o["cpos"][ids] = pos.take(ci)
    o["ct"][ids] = c["t"].take(ci)
    o["freed"][refs] = True
    o["owner"] = np.asarray(trace.owner()) if n else np.zeros(0, np.uint32)
    f = {"ref": refs, "pos": pos.take(fi), "t": c["t"].take(fi), "thr": c["thr"].take(fi),
         "kind": c["kind"].take(fi), "size": o["size"].take(refs),
         "cpos": o["cpos"].take(refs), "ct": o["ct"].take(refs), "owner": o["owner"].take(refs)}
    f["index"] = fi
    return o, f, g, cm, fm


# ---------------------------------------------------------------- sections

def _kinds(c, g):
    """Ops, requested bytes, NULL returns and size-0 requests per kind; free(NULL)
    and the frees, reallocs and queries of objects from before recording.
    One bincount of (kind, flags) gives every per-kind flag count."""
    kind, flags = c["kind"], c["flags"]
    nk = len(KINDS)
    tab = np.bincount(kind.astype(np.intp) * 32 + (flags & 31), minlength=nk * 32)
    tab = tab[:nk * 32].reshape(nk, 32)
    fl = np.arange(32)

    def with_flag(bit):
        return tab[:, (fl & bit) != 0].sum(axis=1)
    nul = with_flag(FLAG_NULL)
    rl = np.flatnonzero(kind == K["realloc"])
    # realloc(p, 0) that freed p returns NULL by design, not as a failure
    nul[K["realloc"]] -= np.count_nonzero((c["size"][rl] == 0) & (c["ref"][rl] != NOID) &
                                          ((flags[rl] & FLAG_NULL) != 0))
    fr = np.flatnonzero(kind == K["free"])
    nbytes = np.bincount(g["kind"], weights=g["size"].astype(np.float64), minlength=nk)
    zero, unk = with_flag(FLAG_ZERO), with_flag(FLAG_UNKNOWN)
    return {
        "ops": {k: int(tab[i].sum()) for i, k in enumerate(KINDS)},
        "bytes": {k: int(nbytes[K[k]]) for k in ALLOC_KINDS},
        "null_returns": {k: int(nul[K[k]]) for k in ALLOC_KINDS},
        "zero_requests": {k: int(zero[i]) for i, k in enumerate(KINDS) if zero[i]},
        "free_null": int(np.count_nonzero((c["ref"][fr] == NOID) &
                                          ((flags[fr] & FLAG_UNKNOWN) == 0))),
        "unknown": {k: int(unk[i]) for i, k in enumerate(KINDS) if unk[i]},
    }


def _sizes(g):
    """The size histogram of the objects created, over all kinds and per
    allocating kind that created any (one bincount of (kind, bin))."""
    kind, size = g["kind"].astype(np.intp), g["size"]
    tab = np.bincount(kind * 65 + _bitlen(size), minlength=len(KINDS) * 65)
    tab = tab[:len(KINDS) * 65].reshape(len(KINDS), 65)
    out = {"all": Pow2Hist(counts=tab.sum(axis=0))}
    for k in ALLOC_KINDS:
        if tab[K[k]].any():
            out[k] = Pow2Hist(counts=tab[K[k]])
    return out


def _lifetimes(f):
    """Lifetimes of the objects freed (or resized away by realloc): ops
    between creation and consumption in global order, and ns between them
    (clamped at 0: two threads' clocks may disagree by a few ns)."""
    ops = (f["pos"] - f["cpos"]).astype(np.uint64)
    ns = np.where(f["t"] > f["ct"], f["t"] - f["ct"], 0).astype(np.uint64)
    return {"freed": int(len(ops)), "ops": Pow2Hist(ops), "ns": Pow2Hist(ns),
            "ops_pct": _pct(ops), "ns_pct": _pct(ns)}


def _end(o):
    """The objects never freed: how many, their bytes and sizes, per owner."""
    live = ~o["freed"]
    sizes = o["size"][live]
    by_thread = np.bincount(o["owner"][live], minlength=0) if live.any() else []
    return {"objects": int(live.sum()), "bytes": int(sizes.sum(dtype=np.uint64)),
            "sizes": Pow2Hist(sizes),
            "by_thread": {int(k): int(v) for k, v in enumerate(by_thread) if v}}


def _series_by_seq(live, objs, points):
    """At most ``points`` buckets of equal op count: the first position of
    each and the maximum live bytes and objects in it."""
    n = len(live)
    b = max(1, min(points, n))
    starts = np.unique(np.linspace(0, n, b + 1)[:-1].astype(np.int64))
    return {"pos": starts, "bytes": np.maximum.reduceat(live, starts),
            "objects": np.maximum.reduceat(objs, starts)}


def _series_by_time(tm, live, points):
    """At most ``points`` buckets of equal time span over the monotone time
    axis: each bucket's start (ns) and the maximum live bytes in it, which
    counts the level it starts at (held until its first op) as well as the
    level after each op in it; a bucket no op falls in holds that level."""
    t0, t1 = int(tm[0]), int(tm[-1])
    if t1 == t0:
        return {"t_ns": np.array([t0], np.uint64), "bytes": np.array([live.max()])}
    edges = np.linspace(t0, t1, max(1, min(points, t1 - t0)) + 1)[:-1]
    idx = np.searchsorted(tm, edges, side="left")
    vals = np.maximum.reduceat(live, idx)
    empty = np.append(idx[1:] == idx[:-1], False)
    before = np.where(idx > 0, live[np.maximum(idx - 1, 0)], 0)
    return {"t_ns": edges.astype(np.uint64),
            "bytes": np.where(empty, before, np.maximum(vals, before))}


def _live(c, f, cm, fm, pos, at, points):
    """Live requested bytes and objects after each op in global order, their
    series, and the peak (the first op that reached it)."""
    n = len(pos)
    if not n:
        return {"peak_bytes": 0, "peak_objects": 0, "peak_seq": None, "peak_t_ns": None,
                "peak_thread": None, "peak_kind": None, "by_seq": None, "by_time": None}
    delta = np.where(cm, c["size"], 0).astype(np.int64)
    delta[f["index"]] -= f["size"].astype(np.int64)
    live = np.cumsum(delta[at])
    objs = np.cumsum((cm.astype(np.int8) - fm.astype(np.int8))[at], dtype=np.int64)
    tm = np.maximum.accumulate(c["t"][at])
    p = int(np.argmax(live))
    i = int(at[p])
    out = {"peak_bytes": 0, "peak_objects": 0, "peak_seq": None, "peak_t_ns": None,
           "peak_thread": None, "peak_kind": None}
    if live[p] > 0:  # else no byte was ever live: no op is the peak
        out = {"peak_bytes": int(live[p]), "peak_objects": int(objs[p]),
               "peak_seq": int(c["seq"][i]), "peak_t_ns": int(tm[p]),
               "peak_thread": int(c["thr"][i]), "peak_kind": KINDS[int(c["kind"][i])]}
    out["by_seq"] = _series_by_seq(live, objs, points)
    out["by_time"] = _series_by_time(tm, live, points)
    return out


def _per_thread(mask, weights, starts):
    """Per thread (its ops contiguous from starts[k] to starts[k + 1]): the
    sum of ``weights`` over the ops in ``mask``."""
    vals = mask if weights is None else np.where(mask, weights, 0)
    out = np.zeros(len(starts) - 1, np.int64)
    nonempty = np.flatnonzero(starts[1:] > starts[:-1])
    if len(nonempty):
        out[nonempty] = np.add.reduceat(vals, starts[nonempty], dtype=np.int64)
    return out


def _parents(trace):
    """Each thread's parent, from the aux of its thread_start op (-1: none)."""
    parent = np.full(trace.nthreads, -1, np.int64)
    started, exited = set(), set()
    for k in range(trace.nthreads):
        ops = trace.ops(k)
        st = np.flatnonzero(ops["kind"] == K["thread_start"])
        if len(st):
            started.add(k)
            aux = int(ops["aux"][st[-1]])
            parent[k] = -1 if aux == NOID else aux
        if np.any(ops["kind"] == K["thread_exit"]):
            exited.add(k)
    return parent, started, exited


def _threads(trace, c, cm, fm):
    """Per thread: its ops (and per kind), allocations (ops that created an
    object), frees (ops that consumed one; a resizing realloc is both),
    requested bytes, its parent (from its thread_start op), its first and
    last op times and span."""
    n, nk = trace.nthreads, len(KINDS)
    lens = [int(trace.ops(k).shape[0]) for k in range(n)]
    kinds = np.bincount(c["thr"].astype(np.intp) * nk + c["kind"], minlength=n * nk)
    kinds = kinds[:n * nk].reshape(n, nk)
    starts = np.concatenate([[0], np.cumsum(lens, dtype=np.int64)])
    allocs, frees = _per_thread(cm, None, starts), _per_thread(fm, None, starts)
    nbytes = _per_thread(cm, c["size"], starts)
    parent, started, exited = _parents(trace)
    out = []
    for k in range(n):
        t = trace.t_ns(k)
        first, last = (int(t[0]), int(t[-1])) if len(t) else (None, None)
        out.append({"thread": k, "parent": None if parent[k] < 0 else int(parent[k]),
                    "ops": lens[k], "by_kind": {KINDS[i]: int(v) for i, v in
                                                enumerate(kinds[k]) if v},
                    "allocs": int(allocs[k]), "frees": int(frees[k]),
                    "bytes": int(nbytes[k]), "first_ns": first, "last_ns": last,
                    "span_ns": None if first is None else last - first,
                    "started": k in started, "exited": k in exited})
    return out


def _cross(f, nthreads, top):
    """Frees (and reallocs that consumed) of objects another thread created:
    counts by kind, their share of all consumptions of recorded objects,
    and the (allocating thread, freeing thread) pairs, most first."""
    x = f["owner"] != f["thr"]
    key = f["owner"][x].astype(np.uint64) * np.uint64(nthreads) + f["thr"][x]
    uk, cnt = np.unique(key, return_counts=True)
    order = np.argsort(-cnt, kind="stable")
    pairs = [{"from": int(uk[i] // nthreads), "to": int(uk[i] % nthreads), "count": int(cnt[i])}
             for i in order]
    total = int(x.sum())
    return {"frees": int(np.count_nonzero(x & (f["kind"] == K["free"]))),
            "reallocs": int(np.count_nonzero(x & (f["kind"] == K["realloc"]))),
            "total": total, "share": total / len(x) if len(x) else 0.0,
            "npairs": len(pairs), "pairs": pairs[:top]}


def _factor_bins(old, new):
    """Counts per FACTOR_BINS of the growth factor new / old; a resize of a
    size-0 object is "from 0" (or "same" when it stays 0)."""
    z = old == 0
    f = new[~z].astype(np.float64) / old[~z].astype(np.float64)
    shrink = np.bincount(np.searchsorted([0.25, 0.5], f[f < 1], side="left"), minlength=3)
    grow = np.bincount(np.searchsorted([1.25, 1.5, 2.0, 4.0], f[f > 1], side="left"),
                       minlength=5)
    same = np.count_nonzero(f == 1) + np.count_nonzero(z & (new == 0))
    counts = list(shrink) + [same] + list(grow) + [np.count_nonzero(z & (new > 0))]
    return {b: int(v) for b, v in zip(FACTOR_BINS, counts)}


def _chains(o, ids, refs):
    """Chains of reallocs of one object: each resize links its new id to
    the old; the root of every id is found by pointer jumping. A sealed
    trace creates a ref before the id that replaces it, so the links have
    no cycle and each round doubles the reach: 64 rounds cover any chain,
    and a 65th change means a trace that was not sealed."""
    n = len(o["size"])
    root = np.arange(n, dtype=np.int64)
    root[ids] = refs
    for _ in range(65):
        nxt = root[root]
        if np.array_equal(nxt, root):
            break
        root = nxt
    else:
        raise errors.InvalidArgument("realloc links form a cycle: the trace is not sealed")
    length = np.bincount(root[ids], minlength=n) if len(ids) else np.zeros(n, np.int64)
    lens = length[length > 0]
    out = {"objects": int(len(lens)), "lengths": Pow2Hist(lens),
           "mean": float(lens.mean()) if len(lens) else 0.0, "longest": None}
    if len(lens):
        r = int(np.argmax(length))
        members = ids[root[ids] == r]
        last = int(members[np.argmax(o["cpos"][members])])
        out["longest"] = {"reallocs": int(length[r]), "first_id": r,
                          "first_size": int(o["size"][r]), "last_size": int(o["size"][last]),
                          "thread": int(o["owner"][r])}
    return out


def _realloc(c, o):
    """Reallocs by outcome (failed, from NULL, of an unknown object, freed
    to size 0, resized), the resizes as grow/shrink/same with the share that
    moved and their growth factors, and the chains."""
    rl = c["kind"] == K["realloc"]
    flags, size, ref, id_ = c["flags"][rl], c["size"][rl], c["ref"][rl], c["id"][rl]
    failed = ((flags & FLAG_NULL) != 0) & (size > 0) & (id_ == NOID)
    unknown = ~failed & ((flags & FLAG_UNKNOWN) != 0)
    from_null = ~failed & ~unknown & (ref == NOID)
    to_zero = (ref != NOID) & (id_ == NOID) & (size == 0)
    resize = (ref != NOID) & (id_ != NOID)
    old, new = o["size"][ref[resize]], size[resize]
    moved = int(np.count_nonzero(resize & ((flags & FLAG_MOVED) != 0)))
    nres = int(resize.sum())
    return {"total": int(rl.sum()), "failed": int(failed.sum()),
            "from_null": int(from_null.sum()), "unknown": int(unknown.sum()),
            "to_zero": int(to_zero.sum()), "resized": nres,
            "grow": int(np.count_nonzero(new > old)), "shrink": int(np.count_nonzero(new < old)),
            "same": int(np.count_nonzero(new == old)), "moved": moved,
            "moved_share": moved / nres if nres else 0.0,
            "factors": _factor_bins(old, new),
            "chains": _chains(o, id_[resize].astype(np.int64), ref[resize].astype(np.int64))}


# ---------------------------------------------------------------- the result

def _jsonable(v):
    """Plain JSON values of a section: histograms as bin lists, arrays as lists."""
    if isinstance(v, Pow2Hist):
        return v.to_dict()
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


class TraceInfo:
    """What a trace holds; every section is a dict of plain values (with
    Pow2Hist histograms and, in ``live``, NumPy series):

    - ``kinds``: ``ops`` per kind, requested ``bytes``, ``null_returns``
      and ``zero_requests`` per kind, ``free_null``, ``unknown`` (per kind:
      ops on objects allocated before recording began);
    - ``sizes``: Pow2Hist of the sizes created, ``all`` and per kind;
    - ``lifetimes``: ``freed``, Pow2Hist ``ops`` (positions in global order
      between creation and consumption) and ``ns``, percentiles;
    - ``live``: ``peak_bytes`` and when (``peak_seq``, ``peak_t_ns``,
      ``peak_thread``, ``peak_kind``, ``peak_objects``), series ``by_seq``
      (``pos``, ``bytes``, ``objects``) and ``by_time`` (``t_ns``, ``bytes``),
      each value the maximum in its bucket;
    - ``end``: the objects live at the end (``objects``, ``bytes``, ...);
    - ``threads``: a dict per thread; ``cross``: cross-thread frees;
      ``realloc``: outcomes, growth factors and chains.
    """

    SECTIONS = ("kinds", "sizes", "lifetimes", "live", "end", "threads", "cross", "realloc")

    def __init__(self, summary, **sections):
        self.summary = summary
        for k in self.SECTIONS:
            setattr(self, k, sections[k])

    def to_dict(self):
        """The whole analysis as JSON-able values (json.dumps takes it)."""
        d = {"summary": _jsonable(self.summary)}
        d.update({k: _jsonable(getattr(self, k)) for k in self.SECTIONS})
        return d

    def text(self, top=16):
        """The report as text tables; ``top`` rows of the long lists
        (threads, thread pairs) at most."""
        return "\n".join(_report(self, top))

    def __str__(self):
        return self.text()


def trace_info(trace, points=1000, top_pairs=64):
    """Analyse a sealed trace (an alloclab.Trace). ``points``: the most
    buckets a series over seq or time keeps (each its maximum);
    ``top_pairs``: the most (allocating, freeing) thread pairs kept."""
    if not all(hasattr(trace, a) for a in ("ops", "seq", "t_ns", "owner", "nthreads")):
        raise errors.InvalidArgument("trace_info takes an alloclab Trace (alloclab.trace.load "
                                     "reads a file into one), not %r" % (trace,))
    for name, v in (("points", points), ("top_pairs", top_pairs)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise errors.ParameterRangeError("%s=%r: give an integer of 1 or more" % (name, v),
                                             value=v, min=1, max=None)
    c = _gather(trace)
    pos, at = _global_order(c["seq"])
    o, f, g, cm, fm = _objects(trace, c, pos)
    t = c["t"]
    summary = {"nthreads": int(trace.nthreads), "nops": int(len(pos)),
               "nobjects": int(trace.nobjects),
               "first_ns": int(t.min()) if len(t) else None,
               "last_ns": int(t.max()) if len(t) else None,
               "meta": dict(getattr(trace, "meta", {}) or {})}
    return TraceInfo(summary, kinds=_kinds(c, g), sizes=_sizes(g), lifetimes=_lifetimes(f),
                     live=_live(c, f, cm, fm, pos, at, points), end=_end(o),
                     threads=_threads(trace, c, cm, fm),
                     cross=_cross(f, max(1, trace.nthreads), top_pairs),
                     realloc=_realloc(c, o))


# ---------------------------------------------------------------- the text report

def _bytes(v):
    """Bytes for a reader: 512 B, 1.5 KiB, 3.2 MiB, ..."""
    v = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return ("%d %s" % (v, unit)) if unit == "B" else "%.1f %s" % (v, unit)
        v /= 1024.0
    return "%.1f TiB" % v


def _ns(v):
    """ns for a reader: 850 ns, 12.5 us, 3.25 s."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= scale:
            return "%.3g %s" % (v / scale, unit)
    return "%d ns" % v


def _size_label(lo, hi):
    return "0" if hi == 1 else "%s-%s" % (format_size(lo), format_size(hi))


def _share(n, total):
    return "%.1f%%" % (100.0 * n / total) if total else "-"


def _table(head, rows, indent="  "):
    """Text columns: the first (and an unnamed last one, a bar) left-aligned,
    the others right-aligned, each as wide as its widest cell."""
    rows = [[str(x) for x in r] for r in rows]
    w = [max(len(r[j]) for r in [head] + rows) for j in range(len(head))]
    left = {0} | ({len(head) - 1} if not head[-1] else set())

    def line(r):
        return indent + "  ".join(r[j].ljust(w[j]) if j in left else r[j].rjust(w[j])
                                  for j in range(len(r))).rstrip()
    return [line(head)] + [line(r) for r in rows]


def _bar(n, most, width=30):
    return "#" * max(1 if n else 0, int(round(width * n / most))) if most else ""


def _hist_table(hist, label, unit_head):
    """A histogram's non-empty bins (the JSON keeps the empty ones)."""
    rows = [r for r in hist.rows() if r[2]]
    total = hist.total
    most = max((c for _, _, c in rows), default=0)
    return _table([unit_head, "count", "share", ""],
                  [[label(lo, hi), c, _share(c, total), _bar(c, most)] for lo, hi, c in rows])


def _head_lines(info):
    """The program, when and where it was recorded, the file's bytes per op
    (from the header's metadata, when the trace came from a file), and the
    counts."""
    s, m = info.summary, info.summary["meta"]
    out = []
    argv = m.get("argv") or []
    argv = [str(a) for a in argv] if isinstance(argv, list) else [str(argv)]
    if argv or m.get("program"):
        extra = ["%s %s" % (k, m[k]) for k in ("pid", "ppid") if m.get(k) is not None]
        out.append("trace of %s%s" % (" ".join(argv) or m["program"],
                                      " (%s)" % ", ".join(extra) if extra else ""))
    mach = m.get("machine") or {}
    where = [x for x in (m.get("recorded") and "recorded %s" % m["recorded"],
                         mach.get("cpu_model") and "on %s" % mach["cpu_model"],
                         mach.get("cpus") and "(%s CPUs)" % mach["cpus"],
                         m.get("policy") and "policy %s" % m["policy"]) if x]
    if where:
        out.append(" ".join(where))
    ends = {"exit": "ended by exit", "exec": "ended by exec", "killed": "was killed"}
    image = [x for x in (m.get("end") and ends.get(m["end"], "ended by %s" % m["end"]),
                         m.get("complete") is False and "incomplete%s" % (
                             ": %s" % m["note"] if m.get("note") else ""),
                         m.get("unrecorded") and "%s calls not recorded" % m["unrecorded"]) if x]
    if image:
        out.append("process image " + ", ".join(image))
    if m.get("stored_length") and s["nops"]:
        out.append("file body: %d bytes, %s (%.2f bytes/op)" % (
            m["stored_length"], m.get("compressor", "?"), m["stored_length"] / s["nops"]))
    out.append("%d threads, %d ops, %d objects%s" % (
        s["nthreads"], s["nops"], s["nobjects"], "" if s["last_ns"] is None else
        ", from %s to %s after the trace began" % (_ns(s["first_ns"]), _ns(s["last_ns"]))))
    return out


def _kinds_lines(info):
    k = info.kinds
    nops = info.summary["nops"]
    rows = []
    for kind in KINDS:
        n = k["ops"][kind]
        if not n:
            continue
        rows.append([kind, n, _share(n, nops),
                     _bytes(k["bytes"][kind]) if kind in k["bytes"] else "",
                     k["null_returns"].get(kind, "") or "",
                     k["zero_requests"].get(kind, "") or "", k["unknown"].get(kind, "") or ""])
    out = ["ops by kind (bytes: requested by calls that succeeded; unknown: objects from "
           "before recording):"]
    out += _table(["kind", "ops", "share", "bytes", "NULL", "size 0", "unknown"], rows)
    out.append("  free(NULL): %d" % k["free_null"])
    return out


def _sizes_lines(info):
    kinds = [k for k in ALLOC_KINDS if k in info.sizes]
    allh = info.sizes["all"]
    if not allh.total:
        return ["sizes: no object was created"]
    rows = []
    for lo, hi, c in (r for r in allh.rows() if r[2]):
        rows.append([_size_label(lo, hi), c, _share(c, allh.total)] +
                    [info.sizes[k].count(lo) or "" for k in kinds])
    return (["sizes of the objects created (bytes, non-empty bins [lo, hi)), per kind:"] +
            _table(["size", "all", "share"] + kinds, rows))


def _lifetime_lines(info):
    lt = info.lifetimes
    if not lt["freed"]:
        return ["lifetimes: no object was freed"]
    pct = ", ".join("p%s %s ops / %s" % (q, _fmt_num(lt["ops_pct"][q]), _ns(lt["ns_pct"][q]))
                    for q in lt["ops_pct"])
    out = ["lifetimes of the %d objects freed (a realloc ends one and starts another):"
           % lt["freed"], "  " + pct, " in ops (global sequence positions between alloc and free):"]
    out += _hist_table(lt["ops"], lambda lo, hi: "0" if hi == 1 else "%d-%d" % (lo, hi),
                       "ops [lo, hi)")
    out.append(" in time:")
    out += _hist_table(lt["ns"], lambda lo, hi: "0" if hi == 1 else "%s-%s" % (_ns(lo), _ns(hi)),
                       "time [lo, hi)")
    return out


def _fmt_num(v):
    return "-" if v is None else ("%d" % v if float(v).is_integer() else "%.3g" % v)


def _live_lines(info):
    lv, e = info.live, info.end
    if lv["peak_seq"] is None:
        out = ["live bytes: no byte was ever live"]
    else:
        out = ["live requested bytes: peak %s (%d bytes, %d objects)" % (
                   _bytes(lv["peak_bytes"]), lv["peak_bytes"], lv["peak_objects"]),
               "  at seq %d (a %s of thread %d), %s into the trace" % (
                   lv["peak_seq"], lv["peak_kind"], lv["peak_thread"], _ns(lv["peak_t_ns"]))]
    out.append("live at the end: %d objects, %s (%d bytes)" % (e["objects"], _bytes(e["bytes"]),
                                                               e["bytes"]))
    if e["by_thread"]:
        most = sorted(e["by_thread"].items(), key=lambda x: -x[1])
        out.append("  objects per allocating thread: " + ", ".join(
            "thread %s %d" % (k, v) for k, v in most[:8]) + (", ..." if len(most) > 8 else ""))
    return out


def _thread_order(threads):
    """(thread, depth) in parent-tree order: each root, then its children
    depth first; a thread whose parent chain loops is listed as a root."""
    kids = {}
    for t in threads:
        kids.setdefault(t["parent"], []).append(t["thread"])
    out, seen = [], set()

    def walk(k, depth):
        stack = [(k, depth)]
        while stack:
            k, d = stack.pop()
            if k in seen:
                continue
            seen.add(k)
            out.append((k, d))
            stack += [(c, d + 1) for c in reversed(kids.get(k, []))]
    for t in kids.get(None, []):
        walk(t, 0)
    for t in threads:
        walk(t["thread"], 0)
    return out


def _threads_lines(info, top):
    order = _thread_order(info.threads)
    rows = []
    for k, d in order[:top]:
        t = info.threads[k]
        rows.append(["  " * d + str(k), "-" if t["parent"] is None else t["parent"], t["ops"],
                     t["allocs"], t["frees"], _bytes(t["bytes"]), _ns(t["span_ns"]),
                     "/".join(e for e, on in (("start", t["started"]), ("exit", t["exited"]))
                              if on)])
    out = ["threads (in parent-tree order, children indented; span: first to last op):"]
    out += _table(["thread", "parent", "ops", "allocs", "frees", "bytes", "span", "events"],
                  rows)
    if len(order) > top:
        out.append("  ... %d more threads (--json lists all)" % (len(order) - top))
    return out


def _cross_lines(info, top):
    x = info.cross
    frees = sum(t["frees"] for t in info.threads)
    out = ["cross-thread frees: %d of %d frees of recorded objects (%s): %d free, %d realloc"
           % (x["total"], frees, _share(x["total"], frees), x["frees"], x["reallocs"])]
    if x["pairs"]:
        out += _table(["allocated by -> freed by", "count", "share"],
                      [["thread %d -> thread %d" % (p["from"], p["to"]), p["count"],
                        _share(p["count"], x["total"])] for p in x["pairs"][:top]])
        if x["npairs"] > min(top, len(x["pairs"])):
            out.append("  ... %d more pairs" % (x["npairs"] - min(top, len(x["pairs"]))))
    return out


def _realloc_lines(info):
    r = info.realloc
    if not r["total"]:
        return ["reallocs: none"]
    out = ["reallocs: %d: %d resized (%d grow, %d shrink, %d same; %s moved)" % (
               r["total"], r["resized"], r["grow"], r["shrink"], r["same"],
               _share(r["moved"], r["resized"])),
           "  %d from NULL, %d to size 0, %d failed, %d of objects from before recording" % (
               r["from_null"], r["to_zero"], r["failed"], r["unknown"])]
    if r["resized"]:
        most = max(r["factors"].values())
        out += _table(["growth (new/old)", "count", "share", ""],
                      [[b, n, _share(n, r["resized"]), _bar(n, most)]
                       for b, n in r["factors"].items()])
    ch = r["chains"]
    if ch["objects"]:
        lg = ch["longest"]
        out.append("chains: %d objects reallocated, %.2f reallocs each on average" % (
            ch["objects"], ch["mean"]))
        out.append("  longest: %d reallocs of id %d (thread %d), %d -> %d bytes" % (
            lg["reallocs"], lg["first_id"], lg["thread"], lg["first_size"], lg["last_size"]))
        out += _hist_table(ch["lengths"], lambda lo, hi: "%d-%d" % (lo, hi - 1) if hi - lo > 1
                           else str(lo), "reallocs per object")
    return out


def _report(info, top):
    out = _head_lines(info)
    for part in (_kinds_lines(info), _sizes_lines(info), _lifetime_lines(info),
                 _live_lines(info), _threads_lines(info, top), _cross_lines(info, top),
                 _realloc_lines(info)):
        out += [""] + part
    return out
