"""The live Allocator test hook, over every bottom layer that validates frees.

Capability gaps are declared by features (DESIGN §2): tests select layers by
feature, never by try/except.
"""

import ctypes
import errno

import pytest
from hypothesis import given
from hypothesis import strategies as st

import alloclab as al
from alloclab import schema

from conftest import bottom_layers, stacks, validating_bottom_layers

VALIDATING = validating_bottom_layers()
BOTTOMS = bottom_layers()


def held(a):
    return sum(s["bytes_held"] for s in a.stats())


def core_stats(a):
    """The stats a rejected free must not change (error counters may)."""
    return [(s["layer"], s["bytes_held"], s.get("allocs"), s.get("frees")) for s in a.stats()]


@pytest.fixture(params=VALIDATING)
def alloc(request):
    with al.Allocator(request.param, ncpu=4) as a:
        yield a


def test_there_is_a_validating_layer():
    assert "buddy" in VALIDATING


def test_round_trip(alloc):
    sizes = [1, 8, 16, 17, 64, 100, 4096, alloc.max_size or 65536]
    addrs = [alloc.alloc(s) for s in sizes]
    assert len(set(addrs)) == len(addrs)
    for addr, s in zip(addrs, sizes):
        assert alloc.owns(addr)
        if alloc.policy.features(0) and "usable" in alloc.policy.features(0):
            assert alloc.usable_size(addr) >= s
    assert held(alloc) > 0
    for addr in addrs:
        alloc.free(addr)
    alloc.drain()
    assert held(alloc) == 0
    alloc.check()


def test_cross_cpu_free(alloc):
    a = alloc.alloc(64, cpu=1)
    alloc.free(a, cpu=3)
    alloc.drain(cpu=1)
    alloc.drain()
    assert held(alloc) == 0


def test_zeroed_memory():
    layer = VALIDATING[0]
    sch = schema.layer(layer)
    spec = "%s(fill=true)" % layer if any(p.name == "fill" for p in sch.params) else layer
    with al.Allocator(spec) as a:
        dirty = [a.alloc(256) for _ in range(4)]
        for d in dirty:
            ctypes.memset(d, 0xAB, 256)
            a.free(d)
        p = a.alloc(256, zero=True)
        assert ctypes.string_at(p, 256) == bytes(256)
        a.free(p)


def test_invalid_free_leaves_stats_unchanged(alloc):
    a = alloc.alloc(64)
    before = core_stats(alloc)
    for bad in (a + 8, a + 1):
        with pytest.raises(al.InvalidFreeError) as ei:
            alloc.free(bad)
        assert "0x%x" % bad in str(ei.value)
        assert "EINVAL" in str(ei.value)
        assert ei.value.addr == bad
        assert isinstance(ei.value, ValueError)
        assert core_stats(alloc) == before
    alloc.free(a)
    alloc.check()


def test_double_free_leaves_stats_unchanged(alloc):
    a = alloc.alloc(64)
    keep = alloc.alloc(64)  # keeps the chunk alive so the address stays in range
    alloc.free(a)
    before = core_stats(alloc)
    with pytest.raises(al.InvalidFreeError, match="0x%x" % a):
        alloc.free(a)
    assert core_stats(alloc) == before
    alloc.free(keep)
    alloc.check()


def test_foreign_pointer(alloc):
    buf = ctypes.create_string_buffer(128)
    addr = ctypes.addressof(buf)
    assert not alloc.owns(addr)
    before = core_stats(alloc)
    with pytest.raises(al.InvalidFreeError):
        alloc.free(addr)
    assert core_stats(alloc) == before


def test_bulk(alloc):
    addrs = alloc.alloc_bulk(64, 8, cpu=2)
    assert 1 <= len(addrs) <= 8 and len(set(addrs)) == len(addrs)
    assert all(alloc.owns(x) for x in addrs)
    assert alloc.free_bulk(addrs, cpu=2) == len(addrs)
    assert alloc.alloc_bulk(64, 0) == []
    assert alloc.free_bulk([]) == 0
    alloc.drain()
    assert held(alloc) == 0


def test_bad_arguments(alloc):
    with pytest.raises(al.InvalidArgument) as ei:
        alloc.alloc(0)
    assert "size 0" in str(ei.value)
    if alloc.max_size:
        too_big = alloc.max_size + 1
        with pytest.raises(al.InvalidArgument) as ei:
            alloc.alloc(too_big)
        assert str(too_big) in str(ei.value) and str(alloc.max_size) in str(ei.value)
    with pytest.raises(al.ParameterRangeError, match=r"cpu=4 .*\[0, 3\]"):
        alloc.alloc(64, cpu=4)
    with pytest.raises(al.ParameterRangeError):
        alloc.free(0x1000, cpu=-1)
    with pytest.raises(al.ParameterTypeError):
        alloc.alloc(64.0)
    with pytest.raises(al.ParameterRangeError):
        al.Allocator(VALIDATING[0], ncpu=0)


def test_exhaustion_then_recovery():
    with al.Allocator("buddy(arena_limit=1M)") as a:
        got = []
        with pytest.raises(al.AllocatorExhausted) as ei:
            for _ in range(10_000):
                got.append(a.alloc(4096))
        assert "ENOMEM" in str(ei.value)
        assert isinstance(ei.value, MemoryError)
        assert ei.value.code < 0
        assert 0 < len(got) < 10_000
        for x in got:
            a.free(x)
        a.drain()
        assert held(a) == 0
        a.check()
        a.free(a.alloc(4096))


def test_stats_shape(alloc):
    st_ = alloc.stats()
    assert [s["layer"] for s in st_] == alloc.policy.names
    for s in st_:
        assert isinstance(s["bytes_held"], int)
        assert all(isinstance(v, int) for v in s.values() if v is not s["layer"])


def test_close():
    a = al.Allocator(VALIDATING[0])
    x = a.alloc(64)
    a.close()
    a.close()
    assert a.closed
    with pytest.raises(al.AlloclabError, match="closed"):
        a.free(x)
    with pytest.raises(al.AlloclabError, match="closed"):
        a.stats()


@pytest.mark.parametrize("spec", stacks())
def test_every_stack_round_trip(spec):
    """Allocate on every CPU, free on another, drain: every layer is back to 0."""
    with al.Allocator(spec, ncpu=4) as a:
        sizes = [min(s, a.max_size or s) for s in (16, 64, 200, 1000, 4096)]
        got = [(a.alloc(sizes[i % len(sizes)], cpu=i % 4), i) for i in range(300)]
        if a.policy.names[-1] != "null":  # null hands out one preallocated block by design
            assert len({p for p, _ in got}) == len(got)
            assert a.stats()[0]["bytes_held"] > 0
        for p, i in got:
            a.free(p, cpu=(i + 1) % 4)
        assert a.stats()[0]["bytes_held"] == 0
        a.drain()
        assert [s["bytes_held"] for s in a.stats()] == [0] * len(a.policy)
        a.check()


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 8192), st.integers(0, 3)),
                max_size=200))
def test_random_ops_keep_blocks_disjoint(ops):
    """alloc/free in any order: live blocks never overlap, everything comes back."""
    layer = VALIDATING[0]
    with al.Allocator(layer, ncpu=4) as a:
        live = {}
        for is_alloc, size, cpu in ops:
            if is_alloc or not live:
                p = a.alloc(size, cpu=cpu)
                assert p not in live
                live[p] = max(size, a.usable_size(p))
            else:
                p = sorted(live)[size % len(live)]
                del live[p]
                a.free(p, cpu=cpu)
        spans = sorted(live.items())
        for (p, n), (q, _) in zip(spans, spans[1:]):
            assert p + n <= q, "blocks at 0x%x (+%d) and 0x%x overlap" % (p, n, q)
        a.check()
        for p in live:
            a.free(p)
        a.drain()
        assert held(a) == 0
        a.check()


# -- misuse: the live set refuses what the allocator did not hand out --

STACKS = stacks()
DISTINCT = [s for s in STACKS if al.Policy(s).names[-1] != "null"]
WILD = 0xDEADBEEF000


def top_frees(a):
    """Frees the top layer counted, under whichever name it uses."""
    st_ = a.stats()[0]
    for name in ("frees", "kfrees", "vfrees"):
        if name in st_:
            return st_[name]
    return None


def small(a):
    return min(64, a.max_size or 64)


@pytest.mark.parametrize("spec", STACKS)
def test_double_free_raises_and_allocator_stays_usable(spec):
    with al.Allocator(spec, ncpu=2) as a:
        size = small(a)
        p = a.alloc(size)
        keep = a.alloc(size, cpu=1)
        a.free(p)
        before = core_stats(a)
        for cpu in (0, 1):
            with pytest.raises(al.InvalidFreeError) as ei:
                a.free(p, cpu=cpu)
            assert ei.value.addr == p and "0x%x" % p in str(ei.value)
            assert "already freed" in str(ei.value)
        assert core_stats(a) == before
        a.drain()
        a.check()
        # the block is not handed out twice: a burst of allocations is distinct
        # (the Allocator raises InvariantError if a live block came back)
        got = [a.alloc(size, cpu=i % 2) for i in range(64)]
        if spec in DISTINCT:
            assert len(set(got + [keep])) == len(got) + 1
        for i, x in enumerate(got + [keep]):
            a.free(x, cpu=(i + 1) % 2)
        assert a.live() == []
        a.drain()
        assert [s["bytes_held"] for s in a.stats()] == [0] * len(a.policy)
        a.check()


@pytest.mark.parametrize("spec", DISTINCT)
def test_free_bulk_refuses_wild_and_repeated_frees_the_rest_once(spec):
    with al.Allocator(spec, ncpu=1) as a:
        size = small(a)
        v = [a.alloc(size) for _ in range(3)]
        frees0, held0 = top_frees(a), a.stats()[0]["bytes_held"]
        batch = [v[0], WILD, v[1], v[0], 0, v[2], v[1], v[2] + 8]
        with pytest.raises(al.InvalidFreeError) as ei:
            a.free_bulk(batch)
        e = ei.value
        assert isinstance(e, ValueError)
        assert sorted(e.addrs) == sorted([WILD, v[2] + 8, v[0], v[1]])
        assert e.freed == 3
        for x in e.addrs:
            assert "0x%x" % x in str(e)
        assert "repeated" in str(e) and "nothing freed twice" in str(e)
        # exactly the three live blocks were freed, once each
        assert a.live() == []
        if frees0 is not None:
            assert top_frees(a) - frees0 == 3
        if held0:
            assert a.stats()[0]["bytes_held"] == 0
        for x in v:
            with pytest.raises(al.InvalidFreeError):
                a.free(x)
        a.drain()
        assert [s["bytes_held"] for s in a.stats()] == [0] * len(a.policy)
        a.check()
        again = a.alloc_bulk(size, 8)
        assert len(set(again)) == len(again)
        assert a.free_bulk(again) == len(again)
        a.drain()
        a.check()


@pytest.mark.parametrize("spec", DISTINCT)
def test_free_bulk_of_an_already_freed_block(spec):
    with al.Allocator(spec) as a:
        size = small(a)
        p, q = a.alloc(size), a.alloc(size)
        a.free(p)
        with pytest.raises(al.InvalidFreeError, match="0x%x" % p) as ei:
            a.free_bulk([p, q])
        assert ei.value.freed == 1 and ei.value.addrs == [p]
        assert a.live() == []
        assert a.free_bulk([0, 0]) == 0
        a.free(0)  # free(NULL)
        a.drain()
        a.check()


@pytest.mark.parametrize("spec", ["libc", "system"])
def test_libc_never_sees_a_pointer_it_did_not_hand_out(spec):
    buf = ctypes.create_string_buffer(64)
    with al.Allocator(spec) as a:
        p = a.alloc(32)
        for bad in (ctypes.addressof(buf), WILD, 0x10, p + 16):
            with pytest.raises(al.InvalidFreeError, match="0x%x" % bad):
                a.free(bad)
            with pytest.raises(al.InvalidPointerError, match="0x%x" % bad) as e:
                a.usable_size(bad)
            assert not isinstance(e.value, al.InvalidFreeError)  # nothing was freed
        assert a.usable_size(p) >= 32
        a.free(p)
        with pytest.raises(al.InvalidFreeError):
            a.free(p)  # glibc would abort on this double free
        with pytest.raises(al.InvalidPointerError):
            a.usable_size(p)
        assert a.stats()[0]["bytes_held"] == 0


@pytest.mark.parametrize("spec", ["libc", "buddy", "kzalloc"])
def test_sizes_beyond_size_t_raise_the_library_error(spec):
    with al.Allocator(spec) as a:
        for size in (2**64, 2**64 + 1, 2**200):
            with pytest.raises(al.InvalidArgument, match=str(size)) as ei:
                a.alloc(size)
            assert not isinstance(ei.value, OverflowError)
            with pytest.raises(al.InvalidArgument):
                a.alloc_bulk(size, 2)
        with pytest.raises(al.InvalidArgument, match="n must be"):
            a.alloc_bulk(64, 2**40)
        a.check()


def test_peer_allocator_refused_with_how_to_run_it():
    from alloclab import peers

    others = [n for n in peers.NAMES if n != peers.current()]
    assert others
    for name in others:
        with pytest.raises(al.InvalidArgument) as ei:
            al.Allocator(name)
        msg = str(ei.value)
        assert "child process" in msg and "alloclab.run(" in msg, msg
        assert "policy=%r" % name in msg and "--policy %s" % name in msg
        assert "create failed" not in msg
        assert ei.value.peer == name


@pytest.mark.parametrize("spec", STACKS)
def test_two_threads_on_one_cpu_take_turns(spec):
    """Two Python threads hammer cpu=0 (and a third reads stats): the
    Allocator serialises each model CPU, so nothing crashes or hangs and the
    stack ends clean."""
    import threading

    n = 300
    with al.Allocator(spec, ncpu=2) as a:
        size = min(256, a.max_size or 256)
        start = threading.Barrier(3)
        errors_seen = []

        def worker(seed):
            try:
                start.wait()
                mine = []
                for i in range(n):
                    if i % 3 == 2 and mine:
                        a.free(mine.pop(0), cpu=0)
                    else:
                        mine.append(a.alloc(size, cpu=0))
                    if i % 50 == 49:
                        a.free_bulk(mine, cpu=0)
                        mine = []
                a.free_bulk(mine, cpu=0)
            except Exception as exc:  # reported by the main thread
                errors_seen.append(exc)

        def reader():
            try:
                start.wait()
                for _ in range(20):
                    a.stats()
                    a.drain(cpu=0)
            except Exception as exc:
                errors_seen.append(exc)

        ts = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
        ts.append(threading.Thread(target=reader))
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in ts), "a thread hung"
        assert errors_seen == []
        assert a.live() == []
        a.drain()
        assert [s["bytes_held"] for s in a.stats()] == [0] * len(a.policy)
        a.check()


def test_refusal_names_layer_mechanism_and_parameter():
    """A refusal by design from the live Allocator says which layer refused,
    why, and which parameter changes it: here bpf-ma's ninth distinct size."""
    with al.Allocator("bpf-ma", ncpu=1) as a:
        ptrs = [a.alloc(n) for n in range(1, 9)]
        with pytest.raises(al.RunError) as ei:
            a.alloc(9)
        e = ei.value
        assert e.code == -errno.ENOSPC and e.layer == "bpf_ma"
        assert str(e).startswith("alloc(9) on cpu 0: ENOSPC: refused by layer 'bpf_ma' of ")
        for word in ("no instance for this size", "unit=0", "at most 8",
                     "unit=<largest size>", "mode=any", "nothing was allocated"):
            assert word in str(e), word
        assert "retry" not in str(e)  # the same size is refused again
        for p in ptrs:
            a.free(p)


@pytest.mark.parametrize("code,layer,words", [
    (errno.EAGAIN, "bpf_ma", ("cache stayed empty", "refill pending", "irq_work=thread",
                              "irq_work=inline", "a retry may succeed")),
    (errno.EBUSY, "bpf_ma", ("reentrancy guard", "trylock", "irq_work=thread",
                             "irq_work=inline", "a retry may succeed")),
    (errno.ETIMEDOUT, "bpf_ma", ("a lock", "lock_budget", "a retry may succeed")),
    (errno.ENOSPC, "bpf_ma", ("no instance for this size", "mode=any")),
])
def test_refusal_wording_is_the_workloads(code, layer, words):
    """Each refusal by design reads as the workloads' errors do (the one
    string al_refusal_why shares with them), naming the refusing layer."""
    from alloclab._ffi import ffi, lib
    why = ffi.string(lib.al_refusal_why(-code)).decode()
    with al.Allocator("bpf_ma(irq_work=thread) > slab", ncpu=1) as a:
        c = ffi.new("struct al_ctx *")
        c.err = -code
        e = a._alloc_error("alloc(64) on cpu 0", 64, c)
    assert isinstance(e, al.RunError) and e.code == -code and e.layer == layer
    assert ("refused by layer %r of 'bpf_ma(irq_work=thread) > slab': %s" % (layer, why)
            in str(e))
    for word in words:
        assert word in str(e), word
    assert lib.al_refusal_why(-errno.ENOMEM) == ffi.NULL


@pytest.mark.parametrize("spec,layer", [("nolock > slab", "nolock"), ("percpu > buddy", "buddy"),
                                        ("vmalloc > pages", "vmalloc")])
def test_busy_refusal_names_the_locking_layer(spec, layer):
    from alloclab._ffi import ffi
    with al.Allocator(spec, ncpu=1) as a:
        c = ffi.new("struct al_ctx *")
        c.err = -errno.EBUSY
        e = a._alloc_error("alloc(64) on cpu 0", 64, c)
    assert e.layer == layer and ("refused by layer %r" % layer) in str(e)
