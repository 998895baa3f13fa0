"""Seed 004: the pages layer's page API (free_pages_bulk's aligned blocks as a
property, exhaustion and recovery), vmalloc through the Allocator hook, the
test_vmalloc workload (every test on every preset, nothing leaked, the
kernel's summary lines, workload metrics in Results and JSON), the
reproduction report and its CLI, and the significance test."""

import json
import math
import platform
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import alloclab as al
import alloclab.reproduce as rep
from alloclab import verdict as V
from alloclab._ffi import ffi, lib
from alloclab.reproduce.vmalloc import (SEED_ROWS, TEST_BITS, VmallocReport, change_pct,
                                        machine_policy, summary_text)

from conftest import python_under_address_limit

VMALLOC_PRESETS = ["vmalloc-default", "vmalloc-large", "vmalloc-large-bulkfree",
                   "vmalloc-pcp-first"]


def info(a, cpu=0):
    out = ffi.new("struct al_pages_info *")
    cnt = ffi.new("int *")
    assert lib.al_pages_info(a, out, cpu, cnt, ffi.NULL, ffi.NULL, ffi.NULL) == 0
    return out, cnt[0]


# ---------------------------------------------------------------- the page API

def aligned_blocks(start, n, max_order=10):
    """The reference decomposition: order = min(ffs(pfn) - 1, ilog2(left), max)."""
    out = []
    pfn, left = start, n
    while left:
        o = min((pfn & -pfn).bit_length() - 1 if pfn else max_order,
                left.bit_length() - 1, max_order)
        out.append(o)
        pfn += 1 << o
        left -= 1 << o
    return out


@pytest.fixture(scope="module")
def pages16():
    with al.Allocator("pages(memory=16M, batch=63, decay=0ns)", ncpu=2) as a:
        yield a


@settings(max_examples=60)
@given(st.integers(0, 1023), st.integers(1, 1024))
def test_free_pages_bulk_covers_any_run_with_aligned_blocks(pages16, off, n):
    """Any run of pages of a split 4 MiB block goes back as exactly the
    naturally aligned blocks that cover it, nothing more, nothing less."""
    n = min(n, 1024 - off)
    a, c = pages16._a(), pages16._c(1)
    base = ffi.new("uint64_t *")
    assert lib.al_alloc_pages(a, c, 10, lib.AL_GFP_NOPCP, base) == 0
    base = base[0]
    assert base % 1024 == 0
    assert lib.al_split_page(a, c, base, 10) == 0
    before = pages16.stats()[0]
    freed0, pcp0 = info(a)[0].free_pages, info(a)[0].pcp_pages
    run = ffi.new("uint64_t[]", [base + off + i for i in range(n)])
    assert lib.al_free_pages_bulk(a, c, run, n) == n
    after = pages16.stats()[0]
    want = aligned_blocks(base + off, n)
    assert sum(1 << o for o in want) == n
    assert after["bulk_free_blocks"] - before["bulk_free_blocks"] == len(want)
    assert after["bulk_free_runs"] - before["bulk_free_runs"] == 1
    for o in range(11):
        assert after["free_o%d" % o] - before["free_o%d" % o] == want.count(o), o
    now = info(a)[0]
    assert (now.free_pages - freed0) + (now.pcp_pages - pcp0) == n
    pages16.check()
    # the rest of the block, page by page; then everything merges back
    for i in list(range(off)) + list(range(off + n, 1024)):
        assert lib.al_free_pages(a, c, base + i, 0) == 0
    pages16.drain()
    pages16.check()
    assert info(a)[0].nr_free[10] == 4
    assert pages16.stats()[0]["bytes_held"] == 0


def test_page_api_rejects_other_layers():
    with al.Allocator("buddy") as b:
        a, c = b._a(), b._c(0)
        out = ffi.new("uint64_t *")
        assert not lib.al_pages_is(a)
        assert lib.al_alloc_pages(a, c, 0, 0, out) == -22
        assert lib.al_vmalloc(a, c, 4096, 0, 0) == ffi.NULL
        assert lib.al_vfree(a, c, ffi.NULL) == -22


def test_pages_exhaustion_then_recovery():
    with al.Allocator("pages(memory=4M)", ncpu=2) as a:
        got = []
        with pytest.raises(al.AllocatorExhausted):
            for i in range(2000):
                got.append(a.alloc(4096, cpu=i % 2))
        assert len(got) == 1024
        for i, x in enumerate(got):
            a.free(x, cpu=(i + 1) % 2)
        a.drain()
        a.check()
        assert info(a._a())[0].nr_free[10] == 1
        a.free(a.alloc(4 << 20))


# ---------------------------------------------------------------- vmalloc

def test_policy_needs_pages_below():
    with pytest.raises(al.InvalidArgument, match="page allocator right below"):
        al.Policy("vmalloc > buddy")
    assert al.Policy("vmalloc-default") == al.Policy("vmalloc > pages")
    assert "needs_pages" in al.Policy("vmalloc > pages").features(0)
    assert "pages" in al.Policy("pages").features(0)
    # vmalloc's largest request is its own, not the pages layer's 4 MiB
    assert al.Policy("vmalloc > pages").max_size == 8 << 30


@pytest.mark.parametrize("preset", VMALLOC_PRESETS)
def test_vmalloc_writes_reach_the_mapped_pages(preset):
    with al.Allocator(al.presets[preset].replace("> pages", "> pages(memory=64M)")) as a:
        top, c = a._a(), a._c(0)
        p = lib.al_vmalloc(top, c, 37 * 4096, 0, 0)
        assert p != ffi.NULL
        data = bytes(range(256)) * 40
        assert lib.al_vmalloc_write(top, p + 1000, data, len(data)) == 0
        back = ffi.new("char[]", len(data))
        assert lib.al_vmalloc_read(top, p + 1000, back, len(data)) == 0
        assert ffi.buffer(back, len(data))[:] == data
        pfn = ffi.new("uint64_t *")
        assert lib.al_vmalloc_to_pfn(top, p + 4096, pfn) == 0
        mem = lib.al_page_address(lib.al_vmalloc_pages(top), pfn[0])
        assert ffi.buffer(mem, 4)[:] == data[4096 - 1000:4096 - 1000 + 4]
        a.check()
        assert lib.al_vfree(top, c, p) == 0
        assert lib.al_vmalloc_write(top, p, b"x", 1) == -14  # EFAULT: unmapped
        a.drain()
        a.check()
        assert [s["bytes_held"] for s in a.stats()] == [0, 0]


def test_vmalloc_exhaustion_then_recovery():
    with al.Allocator("vmalloc(alloc=high_order, free=bulk) > pages(memory=4M)") as a:
        got = []
        with pytest.raises(al.AllocatorExhausted, match="ENOMEM"):
            for _ in range(1000):
                got.append(a.alloc(5 * 4096))
        assert len(got) == 1024 // 5
        a.check()
        for x in got:
            a.free(x)
        a.drain()
        a.check()
        assert [s["bytes_held"] for s in a.stats()] == [0, 0]
        a.free(a.alloc(2 << 20))


# ---------------------------------------------------------------- the workload

FAST = dict(runs=1, cycles=1, warmup_cycles=0, test_loop_count=50, nr_pcpu_objects=500,
            sequential_test_order=True)


@pytest.mark.parametrize("preset", VMALLOC_PRESETS)
def test_every_test_alone_passes_and_leaks_nothing(preset):
    pol = al.presets[preset].replace("> pages", "> pages(memory=128M)")
    for name, bit in TEST_BITS.items():
        res = al.run("test_vmalloc", pol, run_test_mask=bit, nr_pages=3, test_repeat_count=2,
                     **FAST)
        p = res.points[0]
        want = "xfailed" if name == "align_shift_alloc_test" else "passed"
        assert p["wl.%s.%s" % (name, want)][0] == 2, name
        assert p["wl.%s.failed" % name][0] == 0, name
        assert p["wl.%s.avg_usec" % name][0] > 0
        assert p["vmalloc.leaked"][0] == 0 and p["pages.leaked"][0] == 0, name
        others = [k for k in p.data if k.startswith("wl.") and k.endswith(".avg_usec")]
        assert others == ["wl.%s.avg_usec" % name]

@pytest.mark.parametrize("preset", VMALLOC_PRESETS)
@pytest.mark.parametrize("test", ["fix_align_alloc_test", "random_size_align_alloc_test",
                                  "fix_size_alloc_test"])
def test_zero_decides_which_pages_are_zeroed(preset, test):
    # The kernel's fix_align and random_size_align tests pass __GFP_ZERO:
    # every page they allocate is zeroed, unless zero=false; fix_size never.
    zeroed = {}
    for zero in (True, False):
        res = al.run("test_vmalloc", preset, run_test_mask=TEST_BITS[test], zero=zero, **FAST)
        p = res.points[0]
        assert p["wl.%s.passed" % test][0] == 1
        zeroed[zero] = (p["pages.pages_zeroed"][0], p["pages.pages_alloc"][0])
    got, pages = zeroed[True]
    assert pages > 0 and got == (pages if test != "fix_size_alloc_test" else 0)
    assert zeroed[False][0] == 0



def test_all_tests_two_threads_per_op_timing():
    res = al.run("test_vmalloc", "vmalloc-pcp-first", producers=2, run_test_mask=2047,
                 nr_pages=20, use_huge=True, timing="per_op_sum", **FAST)
    p = res.points[0]
    for name in TEST_BITS:
        assert p["wl.%s.failed" % name][0] == 0, name
    assert p["wl.fix_size_alloc_test.passed"][0] == 2  # one per worker
    assert p["free_ops"][0] > 0 and p["free_ns"][0] > 0 and p["alloc_ns"][0] > 0
    text = summary_text(res)
    assert "fix_size_alloc_test passed: 2 failed: 0 xfailed: 0 repeat: 1 loops: 50 avg:" in text
    assert "align_shift_alloc_test passed: 0 failed: 0 xfailed: 2" in text


def test_workload_checks_its_policy_and_threads():
    # Both known before running: refused by the plan, not by a failed run.
    with pytest.raises(al.IncompatiblePolicyError, match="needs a vmalloc layer"):
        al.run("test_vmalloc", "pages", **FAST)
    with pytest.raises(al.InvalidArgument, match="nr_threads=3"):
        al.run("test_vmalloc", "vmalloc-default", nr_threads=3, **FAST)


def test_batch_timing_counts_loop_iterations():
    res = al.run("test_vmalloc", "vmalloc-default", run_test_mask=1 | 8, **FAST)
    p = res.points[0]
    assert p["alloc_ops"][0] == 100  # 50 loops x 2 tests
    assert p["vmalloc.vmallocs"][0] == 100
    us = p["wl.fix_size_alloc_test.avg_usec"][0] + p["wl.random_size_alloc_test.avg_usec"][0]
    assert p["alloc_ns"][0] == pytest.approx(us * 1e3 / 100, rel=0.05)
    assert math.isnan(p["free_ns"][0])


def test_workload_metrics_survive_json():
    res = al.run("test_vmalloc", "vmalloc-default", run_test_mask=1, **FAST)
    back = al.Result.from_json(res.to_json())
    assert back == res
    assert "wl.fix_size_alloc_test.avg_usec" in back.metrics()
    t = res.table("wl.fix_size_alloc_test.avg_usec", rows="nr_pages", cols="producers")
    assert "usec" in t.title


def test_cli_run_prints_summary_lines():
    out = subprocess.run(
        [sys.executable, "-m", "alloclab", "run", "test_vmalloc", "--policy", "vmalloc-large",
         "--runs", "1", "--cycles", "1", "--warmup-cycles", "0", "--run-test-mask", "5",
         "--test-loop-count", "20", "--metric", "wl.fix_size_alloc_test.avg_usec"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "fix_size_alloc_test passed: 1 failed: 0 xfailed: 0 repeat: 1 loops: 20" in out.stdout
    assert "long_busy_list_alloc_test passed: 1" in out.stdout


# ---------------------------------------------------------------- statistics

def test_change_pct():
    # the seed's normalisation: old / new - 1
    assert change_pct([615], [100]) == pytest.approx(515)
    assert change_pct([100], [200]) == pytest.approx(-50)


def test_machine_policy():
    assert machine_policy("vmalloc-large-bulkfree") == \
        "vmalloc(alloc=high_order, free=bulk, arch=arm64) > pages(cpus=64)"
    assert machine_policy("vmalloc-default", "x86", 0) == "vmalloc > pages"


# ---------------------------------------------------------------- the reproduction

@pytest.fixture(scope="module")
def report():
    return rep.vmalloc(scale=0.002, runs=3, tests=["fix_size_alloc_test", "vm_map_ram_test"],
                       warm=False, pcp_first=True)


def test_report_layout(report):
    text = str(report)
    lines = report.table().splitlines()
    assert lines[1].split("|")[1].strip() == "Benchmark"
    cols = [c.strip() for c in lines[1].split("|")[3:-1]]
    assert cols == ["6-19-0-rc1", "vfree-high-order", "pcp-first", "seed 6-19-0-rc1",
                    "seed vfree-high-order"]
    body = [l for l in lines[3:-1]]
    want = [r for r in SEED_ROWS if r[0] in ("fix_size_alloc_test", "vm_map_ram_test")]
    assert len(body) == len(want)
    assert "micromm/vmalloc" in body[0]
    assert "fix_size_alloc_test: p:512, h:1, l:200 (usec)" in text
    assert "(I) 514.75%" in text  # the seed's cell
    assert "# Default(100 pages)" in text and "# Patch(3 pages)" in text
    assert "Seed conclusions on this machine" in text
    assert "zone locks/vmalloc" in report.counters()
    from alloclab import verdict as V
    for _, v, _ in report.verdicts():
        assert v.outcome in (V.HOLDS, V.FAILS, V.OPEN) and v.text() in text


def test_report_reads_from_data(report):
    old = report.samples("fix_size_alloc_test", 64, 0, "v6.18")
    new = report.samples("fix_size_alloc_test", 64, 0, "vmalloc-large-bulkfree")
    pct, pv, mark = report.change("fix_size_alloc_test", 64, 0, "vfree-high-order")
    assert pct == pytest.approx((np.mean(old) / np.mean(new) - 1) * 100)
    assert len(old) == 3
    # bulk free returns a 64-page area as one block (the counters that explain it)
    assert report.counter("fix_size_alloc_test", 64, 0, "vfree-high-order",
                          "blocks freed/vmalloc") == pytest.approx(1.0)
    assert report.counter("fix_size_alloc_test", 64, 0, "v6.18",
                          "blocks freed/vmalloc") == pytest.approx(64.0)
    assert report.counter("fix_size_alloc_test", 64, 0, "v6.18",
                          "zone locks/vmalloc") < 0.1
    assert not report.failures()


def test_report_json_round_trip(report, tmp_path):
    path = tmp_path / "v.json"
    report.to_json(str(path))
    back = VmallocReport.from_json(path.read_text())
    assert str(back) == str(report)
    with pytest.raises(al.InvalidArgument):
        VmallocReport.from_json(json.dumps({"format": "nope"}))


def test_report_plots(report):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for fig in (report.plot(), report.plot_sizes()):
        assert fig.axes
        plt.close(fig)


def test_cli_reproduce_vmalloc(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "alloclab", "reproduce", "vmalloc", "--scale", "0.001",
         "--runs", "2", "--tests", "fix_size_alloc_test", "--no-rezki", "--no-pcp-first",
         "--json", str(tmp_path / "v.json"), "--plot", str(tmp_path / "v.png")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "micromm/vmalloc" in out.stdout and "vfree-high-order" in out.stdout
    assert "pcp-first" not in out.stdout
    assert json.loads((tmp_path / "v.json").read_text())["format"] == "alloclab-vmalloc-report"
    assert (tmp_path / "v.png").exists() and (tmp_path / "v-sizes.png").exists()


def test_calibrated_loops_reach_the_minimum_time():
    from alloclab.reproduce.vmalloc import calibrated_loops
    assert calibrated_loops(0.1, 1000.0, 500000) in (110000, 110001)  # 100 ms at 1 us, +10%
    assert calibrated_loops(0.1, 10.0, 500000) == 500000    # never more than the seed's
    assert calibrated_loops(0.1, 3e8, 500000) == 1          # at least one loop
    r = rep.vmalloc(runs=2, tests=["fix_size_alloc_test"], rezki=False, pcp_first=False,
                    min_time=0.02)
    assert r.settings["scale"] is None and r.settings["min_time"] == 0.02
    seed = {_key(t, p, h): l for t, p, h, l, *_ in SEED_ROWS}
    specs = {k: spec for k, _, spec in r.designs}
    for key, res in r.results.items():
        for label, loops in r.settings["loops"][key].items():
            pts = res.select(policy=specs[label])
            assert pts and all(p.params["test_loop_count"] == loops for p in pts)
            # the last calibration step timed `loops` loops of this policy at min_time or
            # more, unless the seed's own loop count capped them
            assert loops == seed[key] or \
                r.settings["calibration_ns_per_loop"][key][specs[label]] * loops >= 0.02e9
        # the policies ran back to back in each round: their runs pair up
        a, b = res.points[:2]
        assert V.paired(V.Side.from_points([a], "elapsed_ns"), V.Side.from_points([b], "elapsed_ns"))
    # where the policies' loops differ the table speaks of ns per loop, else of usec
    table = r.table()
    for key in r.results:
        t, p, h = key.split(" ")
        shared = r.loops(t, int(p[2:]), int(h[2:]))
        want = "%s: p:%s, h:%s, l:%s" % (t, p[2:], h[2:], shared if shared else
                                          "calibrated (ns/loop)")
        assert want in table


def _key(t, p, h):
    return "%s p:%d h:%d" % (t, p, h)


@pytest.mark.parametrize("args,needle", [
    (["--runs", "1"], "--runs=1"),
    (["--scale", "0"], "--scale=0"),
    (["--tests", "nope"], "unknown test 'nope'"),
    (["--arch", "mips"], "invalid choice"),
])
def test_cli_reproduce_vmalloc_bad_input(args, needle):
    out = subprocess.run([sys.executable, "-m", "alloclab", "reproduce", "vmalloc"] + args,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert needle in out.stderr and "Traceback" not in out.stderr


def test_vmalloc_reservation_follows_va_size():
    """vmalloc reserves its range (va_size, plus the base's alignment slack)
    up front: under an address-space limit (ulimit -v) the create names
    va_size and a value that fits, and that value really fits: following the
    advice chain from the defaults builds a working stack."""
    code = ("import alloclab as al\n"
            "for spec in ('vmalloc > pages', 'vmalloc > pages(memory=128M)',\n"
            "             'vmalloc(va_size=128M) > pages(memory=128M)'):\n"
            "    try:\n"
            "        a = al.Allocator(spec)\n"
            "    except al.AllocatorExhausted as e:\n"
            "        print(e)\n"
            "        continue\n"
            "    p = a.alloc(3 << 20)\n"
            "    a.free(p)\n"
            "    a.close()\n"
            "    print('built', spec)\n")

    out = python_under_address_limit(code, 800000 << 10)
    assert "could not reserve memory=4G" in out[0] and "'pages(memory=128M)'" in out[0]
    assert "could not reserve va_size=16G" in out[1] and "'vmalloc(va_size=128M)'" in out[1]
    assert out[2] == "built vmalloc(va_size=128M) > pages(memory=128M)"


@pytest.fixture(scope="module")
def zeroing_report():
    return rep.vmalloc(scale=0.002, runs=3, tests=["random_size_align_alloc_test"], warm=False,
                       rezki=False)


def test_zeroing_section_follows_the_data(zeroing_report, tmp_path):
    r = zeroing_report
    wz = r.settings["without_zero"]["random_size_align_alloc_test p:1 h:0"]
    assert sorted(wz) == ["6-19-0-rc1", "v6.18", "vfree-high-order"]
    assert all(len(v) == 3 and min(v) > 0 for v in wz.values())
    text = r.zeroing()
    assert "random_size_align p:1 h:0" in text and "5.4" in text  # pages zeroed per vmalloc
    # The seed's sign (+8.51%) only without zeroing: said exactly when the data
    # says so (the table's change with zeroing, the zero=false runs without).
    try:
        for with_pct in (-4.0, 4.0):
            r.change = lambda *a, **k: (with_pct, 0.01, "R" if with_pct < 0 else "I")
            for faster_without in (True, False):
                wz["vfree-high-order"] = [x * (0.5 if faster_without else 2.0)
                                          for x in wz["v6.18"]]
                said = "the seed's sign (+8.51%) only without zeroing" in r.zeroing()
                assert said == (with_pct < 0 and faster_without)
    finally:
        del r.change  # the method again
    path = tmp_path / "z.json"
    r.to_json(str(path))
    assert VmallocReport.from_json(path.read_text()).zeroing() == r.zeroing()


def test_header_says_whether_the_zone_lock_flags_ran(zeroing_report):
    """The header says whether spin_lock_irqsave's flags round trip ran, from
    the run's metadata, and says nothing for results that predate the key."""
    r = zeroing_report
    md = next(iter(r.results.values())).metadata
    assert md["irqflags_executed"] == (platform.machine() == "x86_64")
    saved = md["irqflags_executed"]
    try:
        for ran, said in ((True, "run on this CPU (pushf/popf)"),
                          (False, "cannot run at user level on this CPU")):
            md["irqflags_executed"] = ran
            assert said in r.header()
            assert "Zone lock:" in r.header()
        del md["irqflags_executed"]
        assert "Zone lock:" not in r.header()
    finally:
        md["irqflags_executed"] = saved
