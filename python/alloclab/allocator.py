"""A live allocator stack, driven one call at a time from Python.

This is the test hook for notebooks and pytest: every call goes through the
library's ``al_call_*`` entry points with an explicit model CPU, so a test
can say "CPU 3 frees what CPU 1 allocated" on one thread. Measurements never
come from here (see ``alloclab.run``): each call crosses the FFI.

An Allocator is not thread-safe: like a kernel CPU, each model CPU's context
must be used by one thread at a time.
"""

import errno

from . import errors
from ._ffi import check, cstr, error, ffi, lib
from .policy import Policy


class Allocator:
    """``Allocator(policy, ncpu=1)``: a fresh stack built from ``policy``.

    Addresses are plain ints. Use as a context manager, or call close();
    the stack is also destroyed when the object is garbage collected.
    """

    def __init__(self, policy, ncpu=1):
        self.policy = Policy(policy)
        if not isinstance(ncpu, int) or isinstance(ncpu, bool):
            raise errors.ParameterTypeError("ncpu must be an int, not %r" % (ncpu,))
        if not 1 <= ncpu <= lib.AL_MAX_CPUS:
            raise errors.ParameterRangeError(
                "ncpu=%d is out of range [1, %d]" % (ncpu, lib.AL_MAX_CPUS),
                name="ncpu", value=ncpu, min=1, max=lib.AL_MAX_CPUS)
        self.ncpu = ncpu
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

    # -- plumbing --

    def _a(self):
        if self._top is None:
            raise errors.AlloclabError("allocator %r is closed" % str(self.policy))
        return self._top

    def _c(self, cpu):
        if not isinstance(cpu, int) or isinstance(cpu, bool):
            raise errors.ParameterTypeError("cpu must be an int, not %r" % (cpu,))
        if not 0 <= cpu < self.ncpu:
            raise errors.ParameterRangeError(
                "cpu=%d is out of range [0, %d] (allocator built for ncpu=%d)"
                % (cpu, self.ncpu - 1, self.ncpu),
                name="cpu", value=cpu, min=0, max=self.ncpu - 1)
        c = self._ctx + cpu  # struct al_ctx *
        c.err = 0
        return c

    def _size(self, size):
        if not isinstance(size, int) or isinstance(size, bool):
            raise errors.ParameterTypeError("size must be an int, not %r" % (size,))
        if size < 1 or (self.max_size and size > self.max_size):
            raise errors.InvalidArgument(
                "size %d is out of range: policy %r accepts 1 to %s bytes"
                % (size, str(self.policy), self.max_size or "any number of"),
                code=-errno.EINVAL)
        return size

    def _alloc_error(self, what, size, c):
        rc = c.err or -errno.ENOMEM
        if -rc == errno.EINVAL:
            return error(rc, what, "size %d is not valid for %r (max size %s)"
                         % (size, str(self.policy), self.max_size or "unlimited"))
        if -rc == errno.ENOMEM:
            return error(rc, what, "allocator %r is out of memory" % str(self.policy))
        return error(rc, what)

    @staticmethod
    def _ptr(addr):
        if not isinstance(addr, int) or isinstance(addr, bool):
            raise errors.ParameterTypeError("an address is an int, not %r" % (addr,))
        if addr < 0 or addr >= 1 << 64:
            raise errors.InvalidArgument("address %r is not a pointer" % (addr,))
        return ffi.cast("void *", addr)

    # -- object calls --

    def alloc(self, size, cpu=0, zero=False):
        """Allocate ``size`` bytes on model CPU ``cpu``; returns the address."""
        a, c = self._a(), self._c(cpu)
        self._size(size)
        p = lib.al_call_alloc(a, c, size, lib.AL_ZERO if zero else 0)
        if p == ffi.NULL:
            raise self._alloc_error("alloc(%d) on cpu %d" % (size, cpu), size, c)
        return int(ffi.cast("uintptr_t", p))

    def free(self, addr, cpu=0):
        """Free ``addr`` on model CPU ``cpu``. InvalidFreeError for an address
        that is not an allocated block (layers with the validates feature)."""
        a, c = self._a(), self._c(cpu)
        rc = lib.al_call_free(a, c, self._ptr(addr))
        if rc < 0:
            what = "free(0x%x) on cpu %d" % (addr, cpu)
            if -rc == errno.EINVAL:
                raise error(rc, what, "not an allocated block (never allocated, not a block "
                            "start, or already freed)", cls=errors.InvalidFreeError, addr=addr)
            raise error(rc, what, addr=addr)

    def alloc_bulk(self, size, n, cpu=0):
        """Allocate up to ``n`` objects at once; returns their addresses (a
        short list is legal, as in the kernel; empty only when n == 0)."""
        a, c = self._a(), self._c(cpu)
        self._size(size)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise errors.InvalidArgument("n must be an int >= 0, not %r" % (n,))
        if n == 0:
            return []
        out = ffi.new("void *[]", n)
        got = lib.al_call_alloc_bulk(a, c, size, n, out, 0)
        if got <= 0:
            if got < 0:
                c.err = got
            raise self._alloc_error("alloc_bulk(%d, %d) on cpu %d" % (size, n, cpu), size, c)
        return [int(ffi.cast("uintptr_t", out[i])) for i in range(got)]

    def free_bulk(self, addrs, cpu=0):
        """Free a list of addresses at once; returns how many were freed."""
        a, c = self._a(), self._c(cpu)
        addrs = list(addrs)
        if not addrs:
            return 0
        ptrs = ffi.new("void *[]", [self._ptr(x) for x in addrs])
        rc = lib.al_call_free_bulk(a, c, ptrs, len(addrs))
        if rc < 0:
            what = "free_bulk(%d addresses) on cpu %d" % (len(addrs), cpu)
            if -rc == errno.EINVAL:
                raise error(rc, what, "an address is not an allocated block",
                            cls=errors.InvalidFreeError, addr=None)
            raise error(rc, what)
        return rc

    def usable_size(self, addr):
        """Usable bytes of the block at ``addr`` (0 if the layer cannot say)."""
        return int(lib.al_call_usable_size(self._a(), self._ptr(addr)))

    def owns(self, addr):
        """Whether ``addr`` lies in memory this stack manages."""
        return bool(lib.al_call_owns(self._a(), self._ptr(addr)))

    def drain(self, cpu=None):
        """Return cached objects to the layers below: every CPU (None) or one."""
        a = self._a()
        if cpu is None:
            lib.al_stack_drain(a, self._c(0), lib.AL_DRAIN_ALL)
        else:
            lib.al_stack_drain(a, self._c(cpu), lib.AL_DRAIN_CPU)

    def stats(self):
        """Per layer, top first: {"layer", "bytes_held", <counter>: value, ...}."""
        a = self._a()
        buf = ffi.new("struct al_stats[]", lib.AL_MAX_LAYERS)
        n = lib.al_stack_stats(a, buf, lib.AL_MAX_LAYERS)
        return [stats_dict(buf[i]) for i in range(n)]

    def check(self):
        """Walk every layer's invariants (ops.check); raise InvariantError with
        the C message on the first violation. Layers without a check are
        skipped."""
        a = self._a()
        err = ffi.new("char[512]")
        while a != ffi.NULL:
            ops = a.ops
            if ops != ffi.NULL and ops.check != ffi.NULL:
                err[0] = b"\0"
                rc = ops.check(a, err, 512)
                if rc:
                    raise error(rc, "check of layer %s" % cstr(ops.name),
                                cstr(err) or "invariant violated", cls=errors.InvariantError)
            a = a.below

    # -- lifetime --

    def close(self):
        """Destroy the stack now (idempotent)."""
        if self._top is not None:
            top, self._top = self._top, None
            ffi.release(top)

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


def stats_dict(st):
    """A ``struct al_stats`` as {"layer", "bytes_held", <counter>: value}."""
    d = {"layer": cstr(st.layer), "bytes_held": int(st.bytes_held)}
    for j in range(min(st.n, lib.AL_STATS_MAX)):
        d[cstr(st.v[j].name)] = int(st.v[j].value)
    return d
