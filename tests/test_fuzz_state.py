"""A Hypothesis state machine driving random operation sequences
through alloclab.Allocator, one per layer family (buddy; percpu / transfer /
magazine over buddy; slab, sheaves, nolock, bpf_ma; pages / vmalloc):
allocations of any size, frees of live objects, bogus and double frees
(on validating layers), bulk calls, CPU switches, NMI-context calls where
the policy is NMI-safe, drains. After every step: every layer's check(),
every live object's fill pattern intact (so no two live objects overlap),
and at the end everything freed brings bytes held back to the baseline."""
import ctypes
import errno

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

import alloclab as al
from alloclab import errors
from alloclab._ffi import ffi, lib

FAMILIES = [
    "buddy(chunk_size=64K, arena_limit=1M)",
    "percpu > buddy(chunk_size=64K, arena_limit=1M)",
    "percpu > transfer > buddy(chunk_size=64K, arena_limit=1M)",
    "magazine > buddy(chunk_size=64K, arena_limit=1M)",
    "slab(arena_limit=1M)",
    "sheaves > slab(form=sheaves, arena_limit=1M)",
    "sheaves(capacity=4) > buddy(chunk_size=64K, arena_limit=1M)",
    "nolock > slab(arena_limit=1M)",
    "bpf_ma > buddy(chunk_size=64K, arena_limit=1M)",
    "pages(memory=4M)",
    "vmalloc > pages(memory=4M)",
]
NCPU = 2
TRANSIENT = (-errno.ENOMEM, -errno.EBUSY, -errno.ETIMEDOUT, -errno.EAGAIN)


class Machine(RuleBasedStateMachine):
    spec = None

    @initialize()
    def setup(self):
        self.a = al.Allocator(self.spec, ncpu=NCPU)
        self.pol = self.a.policy
        self.maxsz = min(self.a.max_size or 8192, 8192)
        self.validates = "validates" in self.pol.features(0)
        self.nmi = self.pol.nmi_safe
        self.a.drain()
        self.base = [s["bytes_held"] for s in self.a.stats()]
        self.live = {}  # addr -> (size, tag)
        self.tag = 1

    def teardown(self):
        if not hasattr(self, "a"):
            return
        for addr in list(self.live):
            self._free(addr, 0)
        self.a.drain()
        self._check()
        assert [s["bytes_held"] for s in self.a.stats()] == self.base
        self.a.close()

    # -- helpers --

    def _fill(self, addr, size):
        self.tag = self.tag % 251 + 1
        ctypes.memset(addr, self.tag, size)
        assert addr not in self.live
        self.live[addr] = (size, self.tag)

    def _free(self, addr, cpu):
        size, tag = self.live[addr]
        assert ctypes.string_at(addr, size) == bytes([tag]) * size
        for _ in range(50):  # transient lock failures: retried, never dropped
            try:
                self.a.free(addr, cpu=cpu)
                break
            except errors.InvalidFreeError:
                raise
            except errors.RunError as e:
                if e.code not in TRANSIENT:
                    raise
        else:
            raise AssertionError("free of %#x kept failing" % addr)
        del self.live[addr]

    def _check(self):
        self.a.check()

    # -- rules --

    @rule(size=st.integers(1, 8192), cpu=st.integers(0, NCPU - 1))
    def alloc(self, size, cpu):
        size = min(size, self.maxsz)
        try:
            addr = self.a.alloc(size, cpu=cpu)
        except (errors.AllocatorExhausted, errors.RunError) as e:
            assert e.code in TRANSIENT
            return
        self._fill(addr, size)

    @rule(size=st.integers(1, 2048), n=st.integers(1, 40), cpu=st.integers(0, NCPU - 1))
    def alloc_bulk(self, size, n, cpu):
        size = min(size, self.maxsz)
        try:
            got = self.a.alloc_bulk(size, n, cpu=cpu)
        except (errors.AllocatorExhausted, errors.RunError) as e:
            assert e.code in TRANSIENT
            return
        assert 1 <= len(got) <= n
        for addr in got:
            self._fill(addr, size)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 10**6), cpu=st.integers(0, NCPU - 1))
    def free(self, i, cpu):
        addrs = sorted(self.live)
        self._free(addrs[i % len(addrs)], cpu)

    @precondition(lambda self: self.live)
    @rule(k=st.integers(1, 40), cpu=st.integers(0, NCPU - 1))
    def free_bulk(self, k, cpu):
        addrs = sorted(self.live)[:k]
        for addr in addrs:
            size, tag = self.live[addr]
            assert ctypes.string_at(addr, size) == bytes([tag]) * size
        try:
            n = self.a.free_bulk(addrs, cpu=cpu)
        except errors.RunError as e:
            assert e.code in TRANSIENT  # nothing freed: still live
            return
        assert n == len(addrs)
        for addr in addrs:
            del self.live[addr]

    @precondition(lambda self: self.validates and self.live)
    @rule(i=st.integers(0, 10**6), off=st.sampled_from([1, 8, 16, 4096]))
    def free_bogus(self, i, off):
        addrs = sorted(self.live)
        addr = addrs[i % len(addrs)] + off
        if addr in self.live:
            return
        with pytest.raises(errors.InvalidFreeError):
            self.a.free(addr)

    @precondition(lambda self: self.validates)
    @rule(size=st.integers(1, 512))
    def double_free(self, size):
        try:
            addr = self.a.alloc(size)
        except (errors.AllocatorExhausted, errors.RunError):
            return
        self.a.free(addr)
        with pytest.raises(errors.InvalidFreeError):
            self.a.free(addr)

    @precondition(lambda self: self.nmi)
    @rule(size=st.integers(1, 1024), cpu=st.integers(0, NCPU - 1), keep=st.booleans())
    def nmi_alloc_free(self, size, cpu, keep):
        """An operation in NMI context on a CPU: served or refused, and a
        free in NMI context is accepted (maybe deferred)."""
        size = min(size, self.maxsz)
        c = ffi.new("struct al_ctx *")
        c.cpu, c.level = cpu, lib.AL_CTX_NMI
        p = lib.al_call_alloc(self.a._a(), c, size, 0)
        if p == ffi.NULL:
            assert c.err in TRANSIENT
            return
        addr = int(ffi.cast("uintptr_t", p))
        self._fill(addr, size)
        if keep:  # handed out behind the Allocator's back: enter it in its live set
            self.a._track([addr], "NMI alloc")
        else:
            del self.live[addr]
            assert lib.al_call_free(self.a._a(), c, p) in (0,) + TRANSIENT or \
                pytest.fail("NMI free failed")

    @rule(cpu=st.one_of(st.none(), st.integers(0, NCPU - 1)))
    def drain(self, cpu):
        self.a.drain(cpu)

    @invariant()
    def intact(self):
        if not hasattr(self, "a"):
            return
        self._check()
        for addr, (size, tag) in self.live.items():
            assert ctypes.string_at(addr, size) == bytes([tag]) * size, hex(addr)


@pytest.mark.parametrize("spec", FAMILIES)
def test_state_machine(spec):
    m = type("M", (Machine,), {"spec": spec})
    from hypothesis import settings
    run_state_machine_as_test(m, settings=settings(max_examples=15, stateful_step_count=30,
                                                   deadline=None))
