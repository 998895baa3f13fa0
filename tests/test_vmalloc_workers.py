"""The vmalloc model's deferred work and per-area records: the lazy purge on
its worker thread (drain_vmap_work) or inline, the vm_struct record and the
zeroed pages[] array of every area (kvzalloc: kmalloc up to a page of
pointers), the kworker CPU, and test_vmalloc's kvfree_rcu frees on the
kworker thread, outside the test thread's time."""

import pytest

import alloclab as al
from alloclab._ffi import ffi, lib

from test_vmalloc import FAST, VMALLOC_PRESETS


def stat(a, layer, name):
    for s in a.stats():
        if s["layer"] == layer:
            return s[name]
    raise KeyError(layer)


def vm_counts(a, *names):
    return [stat(a, "vmalloc", n) for n in names]


# ---------------------------------------------------------------- the purge

@pytest.mark.parametrize("purge", ["worker", "inline"])
def test_purge_past_lazy_max_runs_where_configured(purge):
    """3-page areas (+ the guard page) with lazy_max_pages=64: the 17th vfree
    takes vmap_lazy_nr past 64. The worker is queued once per crossing that
    finds no pending work; inline the freeing thread purges."""
    pol = "vmalloc(lazy_max_pages=64, purge=%s) > pages(memory=64M)" % purge
    with al.Allocator(pol) as a:
        top, c = a._a(), a._c(0)
        ptrs = [lib.al_vmalloc(top, c, 3 * 4096, 0, 0) for _ in range(17)]
        assert all(p != ffi.NULL for p in ptrs)
        for p in ptrs:
            assert lib.al_vfree(top, c, p) == 0
        a.check()  # waits for a queued purge to finish first
        queued, purges, lazy = vm_counts(a, "purge_work_queued", "purges", "lazy_pages")
        if purge == "worker":
            assert queued == 1 and purges == 1
        else:
            assert queued == 0 and purges == 1
        assert lazy == 0  # all 68 pages went back to the free tree
        a.drain()
        a.check()
        assert [s["bytes_held"] for s in a.stats()] == [0, 0]


def test_purge_worker_stops_with_work_queued():
    """Destroying the allocator right after a crossing: the worker finishes or
    drops its pending purge and is joined; nothing leaks or hangs."""
    for _ in range(20):
        with al.Allocator("vmalloc(lazy_max_pages=8) > pages(memory=16M)") as a:
            top, c = a._a(), a._c(0)
            for _ in range(4):
                assert lib.al_vfree(top, c, lib.al_vmalloc(top, c, 4096, 0, 0)) == 0


def test_purge_mode_is_a_named_choice():
    from alloclab.errors import UnknownNameError
    with pytest.raises(UnknownNameError, match="purge; valid choices: worker, inline"):
        al.Allocator("vmalloc(purge=later) > pages")


# ---------------------------------------------------------------- per-area records

@pytest.mark.parametrize("preset", VMALLOC_PRESETS)
@pytest.mark.parametrize("pages", [1, 3, 512, 513])
def test_every_area_has_a_vm_struct_and_a_zeroed_array(preset, pages):
    """__get_vm_area_node's vm_struct, and __vmalloc_area_node's pages[]:
    kmalloc up to 512 pointers (a page), the nested vmalloc side above;
    every entry zeroed."""
    with al.Allocator(al.presets[preset].replace("> pages", "> pages(memory=64M)")) as a:
        top, c = a._a(), a._c(0)
        p = lib.al_vmalloc(top, c, pages * 4096, 0, 0)
        assert p != ffi.NULL
        vm, km, vmx, zeroed = vm_counts(a, "vm_structs", "pages_kmalloc", "pages_vmalloc",
                                        "array_bytes_zeroed")
        assert vm == 1
        assert (km, vmx) == ((1, 0) if pages <= 512 else (0, 1))
        assert zeroed == 8 * pages
        assert lib.al_vfree(top, c, p) == 0
        a.drain()
        a.check()


def test_kworker_cpu_is_past_the_stack():
    with al.Allocator("vmalloc > pages(memory=16M)", ncpu=3) as a:
        assert lib.al_vmalloc_kworker_cpu(a._a()) == 3
    with al.Allocator("pages(memory=16M)") as a:
        assert lib.al_vmalloc_kworker_cpu(a._a()) == 0xFFFFFFFF


def test_kworker_cpu_frees_into_its_own_lists():
    """A vfree at the kworker CPU puts the pages on that CPU's list: the
    pages layer's bytes_held still balances, the check walks its lists."""
    with al.Allocator("vmalloc > pages(memory=16M)") as a:
        top = a._a()
        kw = ffi.new("struct al_ctx *")
        kw.cpu = lib.al_vmalloc_kworker_cpu(top)
        kw.level = 0
        p = lib.al_vmalloc(top, a._c(0), 5 * 4096, 0, 0)
        assert lib.al_vfree(top, kw, p) == 0
        a.check()
        assert [s["bytes_held"] for s in a.stats()] == [0, 0]
        a.drain()
        a.check()


# ---------------------------------------------------------------- kvfree_rcu

@pytest.mark.parametrize("test,bit", [("kvfree_rcu_1_arg_vmalloc_test", 256),
                                      ("kvfree_rcu_2_arg_vmalloc_test", 512)])
def test_kvfree_rcu_frees_outside_the_test_thread(test, bit):
    """Every vmalloc is freed (by the kworker), none by the test thread:
    per_op_sum times vmallocs only. 1200 loops = two full batches of 510 and
    a last partial one."""
    res = al.run("test_vmalloc", "vmalloc-default", run_test_mask=bit, timing="per_op_sum",
                 **dict(FAST, test_loop_count=1200))
    p = res.points[0]
    assert p["wl.%s.passed" % test][0] == 1
    assert p["vmalloc.vmallocs"][0] == 1200 and p["vmalloc.vfrees"][0] == 1200
    assert p["alloc_ops"][0] == 1200
    assert p["free_ops"][0] == 0
    assert p["vmalloc.leaked"][0] == 0 and p["pages.leaked"][0] == 0


def test_kvfree_rcu_two_workers_share_the_kworker():
    res = al.run("test_vmalloc", "vmalloc-large-bulkfree", producers=2, run_test_mask=256 | 512,
                 **dict(FAST, test_loop_count=700))
    p = res.points[0]
    assert p["vmalloc.vmallocs"][0] == 4 * 700 == p["vmalloc.vfrees"][0]
    assert p["wl.kvfree_rcu_1_arg_vmalloc_test.failed"][0] == 0
    assert p["vmalloc.leaked"][0] == 0 and p["pages.leaked"][0] == 0


def test_kvfree_rcu_run_stopped_early_leaks_nothing():
    """A duration far shorter than the loops: the test is cut, its batch is
    freed at teardown, the kworker joined."""
    res = al.run("test_vmalloc", "vmalloc-default", runs=1, warmup_cycles=0, cycles=None,
                 duration=0.05, run_test_mask=256, test_loop_count=10_000_000,
                 nr_pcpu_objects=500)
    p = res.points[0]
    assert p["vmalloc.vmallocs"][0] == p["vmalloc.vfrees"][0] > 0
    assert p["vmalloc.leaked"][0] == 0 and p["pages.leaked"][0] == 0
