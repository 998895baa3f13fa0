"""A live allocator stack, driven one call at a time from Python.

This is the test hook for notebooks and pytest: every call goes through the
library's ``al_call_*`` entry points with an explicit model CPU, so a test
can say "CPU 3 frees what CPU 1 allocated" on one thread. Measurements never
come from here (see ``alloclab.run``): each call crosses the FFI.

Misuse is refused before it reaches C, for every policy: the Allocator keeps
the set of blocks it handed out and not yet freed (its live set), so a
double free, a wild pointer or a repeated address in ``free_bulk`` raises
InvalidFreeError naming the address, and nothing below is touched, even
for layers that validate nothing themselves (``libc``, per-CPU caches).

Threads: like a kernel CPU, a model CPU's context is used by one thread at
a time. The Allocator serialises the calls of each model CPU with a lock of
its own, so two Python threads passing the same ``cpu=`` take turns, while
threads on different CPUs run in C concurrently (the GIL is released during
each call). Calls that touch every CPU (drain(), stats(), check(), close())
hold all the CPU locks.
"""

import errno
import numbers
import threading

from .. import errors
from ..cbind import schema
from ..cbind._ffi import check, cstr, error, ffi, lib
from .policy import Policy
from . import peers

_SIZE_MAX = (1 << 64) - 1   # size_t on the LP64 targets alloclab builds for
_BULK_MAX = (1 << 31) - 1   # the C bulk calls count in an int


def _int(value, what):
    """``value`` as a plain int: any integer type (NumPy's included, as
    alloclab.run takes them) but bool; else ParameterTypeError naming
    ``what`` (the message's subject, "ncpu must be an int")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise errors.ParameterTypeError("%s must be an int (any integer type but bool), not %r"
                                        % (what, errors.Echo(value)))
    return int(value)


def _peer_refusal(pol):
    """The error for a policy over a peer allocator this process cannot run
    in place, or None. A peer other than the process's own malloc is only
    ever loaded with LD_PRELOAD into a child process, one run at a time."""

    name, params = pol.layers[-1]
    if name != "system":
        return None
    want = params.get("allocator", "glibc")
    have = peers.current()
    if want == have:
        return None
    how = ("measure it with alloclab.run(workload, policy=%r) or `alloclab run WORKLOAD "
           "--policy %s`, which run it in a child process with the peer preloaded"
           % (pol.name, pol.name))
    if want != "glibc" and not peers.available(want):
        how += "; %s is not installed here: %s" % (want, peers.install_hint(want))
    shown = str(pol) if pol.name == str(pol) else "%s (%s)" % (pol.name, pol)
    return error(-errno.EOPNOTSUPP, "creating allocator %s" % shown,
                 "it runs the peer allocator %s, but this process's malloc is %s: peers run "
                 "only in child processes (started under LD_PRELOAD), so an in-process "
                 "Allocator cannot use one; %s" % (want, have, how),
                 cls=errors.InvalidArgument, peer=want)


class Allocator:
    """``Allocator(policy, ncpu=1)``: a fresh stack built from ``policy``.

    Addresses are plain ints. Use as a context manager, or call close();
    the stack is also destroyed when the object is garbage collected.
    """

    def __init__(self, policy, ncpu=1):
        self.policy = Policy(policy)
        ncpu = _int(ncpu, "ncpu")
        if not 1 <= ncpu <= lib.AL_MAX_CPUS:
            raise errors.ParameterRangeError(
                "ncpu=%d is out of range [1, %d]" % (ncpu, lib.AL_MAX_CPUS),
                name="ncpu", value=ncpu, min=1, max=lib.AL_MAX_CPUS)
        refused = _peer_refusal(self.policy)
        if refused is not None:
            raise refused
        self.ncpu = ncpu
        self._top = None
        self._locks = [threading.Lock() for _ in range(ncpu)]
        self._live = {}                      # address -> times handed out, not freed
        self._distinct = self.policy.names[-1] != "null"
        self._live_lock = threading.Lock()   # guards _live across CPUs
        spec = self.policy.stack_spec()
        out = ffi.new("struct al_allocator **")
        err = ffi.new("char[256]")
        rc = lib.al_stack_create(spec, ncpu, out, err, 256)
        check(rc, "creating allocator %r" % str(self.policy), cstr(err))
        self._top = ffi.gc(out[0], lib.al_stack_destroy)
        self._ctx = ffi.new("struct al_ctx[]", ncpu)
        for i in range(ncpu):
            self._ctx[i].cpu = i
            self._ctx[i].level = lib.AL_CTX_TASK
            self._ctx[i].err = 0
        self.max_size = self.policy.max_size
        self.min_align = self.policy.min_align

    def __reduce_ex__(self, protocol):
        # cffi's own refusal ("cannot pickle '_cffi_backend.__CDataGCP'")
        # names none of this: the stack lives in C memory of this process.
        raise errors.NotPicklableError(
            "an Allocator cannot be pickled or copied: its stack and blocks live in this "
            "process's memory; pass its policy string instead (%s) and build an Allocator "
            "from it where it is needed: Allocator(%s, ncpu=%d)"
            % (errors.shown(str(self.policy)), errors.shown(str(self.policy)), self.ncpu))

    # -- plumbing --

    def _a(self):
        if self._top is None:
            raise errors.AlloclabError("allocator %r is closed" % str(self.policy))
        return self._top

    def _cpu(self, cpu):
        cpu = _int(cpu, "cpu")
        if not 0 <= cpu < self.ncpu:
            raise errors.ParameterRangeError(
                "cpu=%d is out of range [0, %d] (allocator built for ncpu=%d)"
                % (cpu, self.ncpu - 1, self.ncpu),
                name="cpu", value=cpu, min=0, max=self.ncpu - 1)
        return cpu

    def _c(self, cpu):
        """The context of model CPU ``cpu``; the caller holds its lock."""
        c = self._ctx + cpu  # struct al_ctx *
        c.err = 0
        return c

    def _all_locks(self):
        """Context manager holding every CPU lock (in CPU order: no deadlock
        with a caller holding one)."""
        return _AllLocks(self._locks)

    def _size(self, size):
        size = _int(size, "size")
        top = min(self.max_size or _SIZE_MAX, _SIZE_MAX)
        if size < 1 or size > top:
            raise errors.InvalidArgument(
                "size %d is out of range: policy %r accepts 1 to %d bytes"
                % (size, str(self.policy), top), code=-errno.EINVAL)
        return size

    def _alloc_error(self, what, size, c):
        rc = c.err or -errno.ENOMEM
        if -rc == errno.EINVAL:
            return error(rc, what, "size %d is not valid for %r (max size %s)"
                         % (size, str(self.policy), self.max_size or "unlimited"))
        if -rc == errno.ENOMEM:
            return error(rc, what, "allocator %r is out of memory" % str(self.policy))
        why = lib.al_refusal_why(rc)
        if why != ffi.NULL:
            layer = self._refusing_layer(rc)
            again = "" if -rc == errno.ENOSPC else ", a retry may succeed"
            return error(rc, what, "refused by layer %r of %r: %s; nothing was allocated%s"
                         % (layer, str(self.policy), cstr(why), again), layer=layer)
        return error(rc, what)

    def _refusing_layer(self, rc):
        """The topmost layer that refuses by design with ``rc``: bpf_ma for an
        empty cache or a size without an instance; for a busy guard or lock,
        bpf_ma, a trylock layer or one whose waits a lock_budget bounds. The
        top layer if none matches."""
        for name in self.policy.names:
            sch = schema.layer(name)
            if name == "bpf_ma":
                return name
            if -rc in (errno.EBUSY, errno.ETIMEDOUT) and (
                    sch.has("trylock") or any(p.name == "lock_budget" for p in sch.params)):
                return name
        return self.policy.names[0]

    @staticmethod
    def _addr(addr):
        """``addr`` as a plain int, refused unless it is an integer that fits
        a pointer."""
        if isinstance(addr, bool) or not isinstance(addr, numbers.Integral):
            raise errors.ParameterTypeError("an address is an int, not %r" % (errors.Echo(addr),))
        addr = int(addr)
        if addr < 0 or addr >= 1 << 64:
            raise errors.InvalidArgument("address %r is not a pointer" % (errors.Echo(addr),))
        return addr

    def _track(self, addrs, what):
        """Enter freshly allocated blocks in the live set. A block that is
        already live was handed out twice: the stack is corrupt (except over
        `null`, the harness floor, which hands out one block per CPU: there
        the live set counts how many times each block is out)."""
        dup = []
        with self._live_lock:
            for x in addrs:
                n = self._live.get(x, 0)
                if n and self._distinct:
                    dup.append(x)
                self._live[x] = n + 1
        if dup:
            raise errors.InvariantError(
                "%s: policy %r handed out %s while still allocated (a block handed out "
                "twice: the allocator is corrupt)"
                % (what, str(self.policy), _hexes(dup)),
                code=-errno.EFAULT, addrs=dup)

    def _take(self, addr):
        """Remove one reference to addr from the live set; False if none (the
        caller holds _live_lock)."""
        n = self._live.get(addr, 0)
        if not n:
            return False
        if n == 1:
            del self._live[addr]
        else:
            self._live[addr] = n - 1
        return True

    def _give_back(self, addrs):
        with self._live_lock:
            for x in addrs:
                self._live[x] = self._live.get(x, 0) + 1

    def _not_live(self, addr, what):
        return error(-errno.EINVAL, what,
                     "0x%x is not a live block of this allocator (never allocated by it, not "
                     "a block start, or already freed); nothing was freed" % addr,
                     cls=errors.InvalidFreeError, addr=addr)

    # -- object calls --

    def alloc(self, size, cpu=0, zero=False):
        """Allocate ``size`` bytes on model CPU ``cpu``; returns the address."""
        cpu = self._cpu(cpu)
        size = self._size(size)
        with self._locks[cpu]:
            a, c = self._a(), self._c(cpu)
            p = lib.al_call_alloc(a, c, size, lib.AL_ZERO if zero else 0)
            if p == ffi.NULL:
                raise self._alloc_error("alloc(%d) on cpu %d" % (size, cpu), size, c)
            addr = int(ffi.cast("uintptr_t", p))
            self._track([addr], "alloc(%d) on cpu %d" % (size, cpu))
        return addr

    def free(self, addr, cpu=0):
        """Free ``addr`` on model CPU ``cpu``. ``free(0)`` does nothing, as
        free(NULL). InvalidFreeError for an address that is not a live block
        of this allocator (double free, wild pointer): nothing is freed."""
        cpu = self._cpu(cpu)
        addr = self._addr(addr)
        if not addr:
            return
        p = ffi.cast("void *", addr)
        what = "free(0x%x) on cpu %d" % (addr, cpu)
        with self._locks[cpu]:
            a = self._a()
            with self._live_lock:
                live = self._take(addr)
            if not live:
                raise self._not_live(addr, what)
            rc = lib.al_call_free(a, self._c(cpu), p)
            if rc < 0:
                self._give_back([addr])  # not freed: still the caller's
                if -rc == errno.EINVAL:
                    raise error(rc, what, "the policy refused a block it handed out",
                                cls=errors.InvariantError, addr=addr)
                raise error(rc, what, addr=addr)

    def alloc_bulk(self, size, n, cpu=0):
        """Allocate up to ``n`` objects at once; returns their addresses (a
        short list is legal, as in the kernel; empty only when n == 0)."""
        cpu = self._cpu(cpu)
        size = self._size(size)
        n = _int(n, "n")
        if not 0 <= n <= _BULK_MAX:
            raise errors.InvalidArgument("n must be an int in [0, %d], not %r"
                                         % (_BULK_MAX, errors.Echo(n)), code=-errno.EINVAL)
        if n == 0:
            return []
        out = ffi.new("void *[]", n)
        what = "alloc_bulk(%d, %d) on cpu %d" % (size, n, cpu)
        with self._locks[cpu]:
            a, c = self._a(), self._c(cpu)
            got = lib.al_call_alloc_bulk(a, c, size, n, out, 0)
            if got <= 0:
                if got < 0:
                    c.err = got
                raise self._alloc_error(what, size, c)
            addrs = [int(ffi.cast("uintptr_t", out[i])) for i in range(got)]
            self._track(addrs, what)
        return addrs

    def free_bulk(self, addrs, cpu=0):
        """Free a list of addresses at once; returns how many were freed.

        Zeros are skipped (free(NULL)). Addresses that are not live blocks
        of this allocator, and any address repeated in the list, are refused:
        every valid address is freed exactly once, then InvalidFreeError
        names the refused ones (``addrs``) and says how many were freed
        (``freed``)."""
        cpu = self._cpu(cpu)
        addrs = [self._addr(x) for x in _addresses(addrs)]
        what = "free_bulk(%d addresses) on cpu %d" % (len(addrs), cpu)
        with self._locks[cpu]:
            a = self._a()
            valid, bad, repeated, taken = [], [], [], set()
            with self._live_lock:
                for x in addrs:
                    if not x:
                        continue
                    if self._take(x):
                        valid.append(x)
                        taken.add(x)
                    elif x in taken:
                        repeated.append(x)
                    else:
                        bad.append(x)
            freed = 0
            if valid:
                ptrs = ffi.new("void *[]", [ffi.cast("void *", x) for x in valid])
                c = self._c(cpu)
                rc = lib.al_call_free_bulk(a, c, ptrs, len(valid))
                if rc < 0:
                    self._give_back(valid)  # nothing was freed
                    raise error(rc, what, "nothing was freed", addrs=bad + repeated)
                if rc < len(valid):
                    raise error(c.err or -errno.EFAULT, what,
                                "the policy freed %d of %d live blocks" % (rc, len(valid)),
                                cls=errors.InvariantError)
                freed = len(valid)
        refused = bad + repeated
        if refused:
            parts = []
            if bad:
                parts.append("%d not a live block of this allocator (never allocated by it, "
                             "not a block start, or already freed): %s"
                             % (len(bad), _hexes(bad)))
            if repeated:
                parts.append("%d repeated in the list: %s"
                             % (len(repeated), _hexes(repeated)))
            raise error(-errno.EINVAL, what,
                        "refused %s; the other %d were freed once each (nothing lost, nothing "
                        "freed twice)" % ("; ".join(parts), freed),
                        cls=errors.InvalidFreeError, addr=refused[0], addrs=refused,
                        freed=freed)
        return freed

    def usable_size(self, addr):
        """Usable bytes of the live block at ``addr`` (0 if the layer cannot
        say). InvalidPointerError for an address that is not a live block of
        this allocator (the layer is never asked about it)."""
        addr = self._addr(addr)
        p = ffi.cast("void *", addr)
        top = self._a()  # a closed allocator says so before anything else
        with self._live_lock:
            live = addr in self._live
        if not live:
            raise error(-errno.EINVAL, "usable_size(0x%x)" % addr,
                        "0x%x is not a live block of this allocator (never allocated by "
                        "it, not a block start, or already freed)" % addr,
                        cls=errors.InvalidPointerError, addr=addr)
        return int(lib.al_call_usable_size(top, p))

    def owns(self, addr):
        """Whether ``addr`` lies in memory this stack manages."""
        return bool(lib.al_call_owns(self._a(), ffi.cast("void *", self._addr(addr))))

    def live(self):
        """The addresses handed out and not yet freed, sorted."""
        with self._live_lock:
            return sorted(self._live)

    def drain(self, cpu=None):
        """Return cached objects to the layers below: every CPU (None) or one."""
        if cpu is None:
            with self._all_locks():
                lib.al_stack_drain(self._a(), self._c(0), lib.AL_DRAIN_ALL)
        else:
            cpu = self._cpu(cpu)
            with self._locks[cpu]:
                lib.al_stack_drain(self._a(), self._c(cpu), lib.AL_DRAIN_CPU)

    def stats(self):
        """Per layer, top first: {"layer", "bytes_held", <counter>: value, ...}."""
        buf = ffi.new("struct al_stats[]", lib.AL_MAX_LAYERS)
        with self._all_locks():
            n = lib.al_stack_stats(self._a(), buf, lib.AL_MAX_LAYERS)
            return [stats_dict(buf[i]) for i in range(n)]

    def check(self):
        """Walk every layer's invariants (ops.check); raise InvariantError with
        the C message on the first violation. Layers without a check are
        skipped."""
        err = ffi.new("char[512]")
        with self._all_locks():
            a = self._a()
            while a != ffi.NULL:
                ops = a.ops
                if ops != ffi.NULL and ops.check != ffi.NULL:
                    err[0] = b"\0"
                    rc = ops.check(a, err, 512)
                    if rc:
                        raise error(rc, "check of layer %s" % cstr(ops.name),
                                    cstr(err) or "invariant violated",
                                    cls=errors.InvariantError)
                a = a.below

    # -- lifetime --

    def close(self):
        """Destroy the stack now (idempotent). Waits for calls in flight on
        other threads."""
        if self._top is None:
            return
        with self._all_locks():
            if self._top is not None:
                top, self._top = self._top, None
                ffi.release(top)
                with self._live_lock:
                    self._live.clear()

    @property
    def closed(self):
        return self._top is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "Allocator(%r, ncpu=%d%s)" % (str(self.policy), self.ncpu,
                                             ", closed" if self.closed else "")


def _addresses(addrs):
    """An iterator over ``addrs``, the argument of free_bulk: a list (or any
    iterable) of addresses. ParameterTypeError for anything else (None, one
    address, text), before anything is freed."""
    if not isinstance(addrs, (str, bytes, bytearray)):
        try:
            return iter(addrs)
        except TypeError:
            pass
    raise errors.ParameterTypeError(
        "free_bulk takes a list (or any iterable) of addresses (ints), not %r; "
        "free one address with free(addr)" % (errors.Echo(addrs),))


def _hexes(addrs, limit=16):
    """Addresses for a message: the first ``limit``, then how many more."""
    s = ", ".join("0x%x" % x for x in addrs[:limit])
    if len(addrs) > limit:
        s += " and %d more" % (len(addrs) - limit)
    return s


class _AllLocks:
    """Holds every lock of a list, taken in order, released in reverse."""

    def __init__(self, locks):
        self._locks = locks

    def __enter__(self):
        taken = []
        try:
            for lk in self._locks:
                lk.acquire()
                taken.append(lk)
        except BaseException:  # Ctrl-C while waiting: give back what was taken
            for lk in reversed(taken):
                lk.release()
            raise
        return self

    def __exit__(self, *exc):
        for lk in reversed(self._locks):
            lk.release()


def stats_dict(st):
    """A ``struct al_stats`` as {"layer", "bytes_held", <counter>: value}."""
    d = {"layer": cstr(st.layer), "bytes_held": int(st.bytes_held)}
    for j in range(min(st.n, lib.AL_STATS_MAX)):
        d[cstr(st.v[j].name)] = int(st.v[j].value)
    return d
