"""The libarena layer: a libarena tree's own C, compiled as user-space C
against alloclab's BPF stand-in and run as a layer.

Runs everywhere on examples/bpf_tree (alloclab's own BPF-style allocator in the
shape of a libarena tree), and on the kernel's libarena where the unmodified
copy is found: $ALLOCLAB_TEST_LIBARENA, else ../shared/reference/libarena
beside the clone."""
import os
import shutil
import subprocess
import sys

import pytest

import alloclab as al
from alloclab import libarena_real as lr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "bpf_tree")
REFERENCE = os.environ.get("ALLOCLAB_TEST_LIBARENA") or os.path.join(
    ROOT, "..", "shared", "reference", "libarena")
needs_reference = pytest.mark.skipif(
    not os.path.isfile(os.path.join(REFERENCE, "src", "buddy.bpf.c")),
    reason="no libarena tree at %s (set ALLOCLAB_TEST_LIBARENA to the libarena folder of a "
           "kernel checkout to run these)" % os.path.abspath(REFERENCE))


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """One build cache for the module's tests, not the user's."""
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def _copy(tmp_path, src=EXAMPLE):
    dst = tmp_path / "tree"
    shutil.copytree(src, dst)
    return dst


def _patch(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "alloclab"] + list(args), capture_output=True,
                          text=True, timeout=300)


def _run(policy, apc=64):
    res = al.run("malloc-free", policy, duration=0.05, runs=1, allocs_per_cycle=apc)
    return res.points[0].data


# ---- the example tree: everywhere ----

def test_example_selftests_pass():
    results = lr.run_tests(EXAMPLE)
    assert [r["name"] for r in results] == ["test_pool_classes", "test_pool_reuse",
                                            "test_pool_bulk", "test_pool_invalid_free"]
    assert all(r["passed"] and r["ret"] == 0 for r in results), results


def test_example_alone_and_under_caches_counts_one_lock_per_op():
    name = lr.load(EXAMPLE)
    d = _run(name)
    assert d[name + ".lock_acquired_per_op"][0] == pytest.approx(1.0)
    assert d[name + ".leaked"][0] == 0 and d[name + ".loop_exhausted"][0] == 0
    d = _run("percpu > transfer > " + name, apc=256)
    assert d[name + ".leaked"][0] == 0
    assert d[name + ".lock_acquired_per_op"][0] < 1.0  # the caches absorb most operations


def test_spec_names_the_tree():
    name = lr.load(EXAMPLE)
    p = al.Policy("percpu > libarena(tree=%s, lock_budget=10ms)" % EXAMPLE)
    assert p.names[-1] == name
    assert "lock_budget=10ms" in str(p)


def test_each_allocator_has_its_own_arena_and_globals():
    name = lr.load(EXAMPLE)
    a, b = al.Allocator(name), al.Allocator(name)
    pa, pb = a.alloc(64), b.alloc(64)
    # the same program state in two copies: the same offset in two arenas
    assert pa != pb and pa % (1 << 32) == pb % (1 << 32)
    assert a.owns(pa) and not a.owns(pb)
    a.free(pa)
    b.free(pb)


def test_bulk_uses_the_trees_own_calls():
    name = lr.load(EXAMPLE)
    assert "bulk" in al.schema.layer(name).features
    assert lr.info(EXAMPLE)["bulk"] is True


def test_not_a_tree(tmp_path):
    with pytest.raises(lr.LibarenaTreeError, match="not a libarena tree: src/buddy.bpf.c"):
        lr.load(str(tmp_path))
    with pytest.raises(lr.LibarenaTreeError, match="no such folder"):
        lr.load(str(tmp_path / "nope"))
    (tmp_path / "cal.json").write_text("{}")
    with pytest.raises(lr.LibarenaTreeError, match="cal.json: it is a file, not a folder$"):
        lr.load(str(tmp_path / "cal.json"))


def test_compile_error_names_file_and_line(tmp_path):
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "b->live = 0;\n\tfor", "b->live = 0\n\tfor")
    before = set(os.listdir(lr._object_dir()))
    with pytest.raises(lr.LibarenaCompileError, match=r"src/buddy\.bpf\.c:\d+:\d+: error"):
        lr.load(str(tree))
    assert set(os.listdir(lr._object_dir())) == before  # nothing left behind


def test_missing_helper_is_named(tmp_path):
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "b->live = 0;\n\tfor",
           "b->live = bpf_ktime_get_ns();\n\tfor")
    with pytest.raises(lr.LibarenaCompileError) as e:
        lr.load(str(tree))
    assert "bpf_ktime_get_ns" in str(e.value) and "does not provide" in str(e.value)
    assert "buddy.bpf.c:" in str(e.value)


def test_init_failure_is_reported(tmp_path):
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "if (!b)\n\t\treturn -EINVAL;\n\tret",
           "if (b)\n\t\treturn -ENOSPC;\n\tret")
    with pytest.raises(lr.LibarenaInitError, match="buddy_init failed: -28"):
        lr.load(str(tree))


def test_a_crash_in_the_trees_code_names_the_tree(tmp_path):
    """The layer's registered name (libarena_<hash>) alone does not say which
    tree the user's spec named: the message gives both."""
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c",
           "__weak int buddy_free(struct buddy __arena *b, void __arena *p)\n{",
           "__weak int buddy_free(struct buddy __arena *b, void __arena *p)\n{\n"
           "\t*(volatile int *)0 = 1;")
    with pytest.raises(al.RunError) as ei:
        al.run("malloc-free", "libarena(tree=%s)" % tree, runs=1, cycles=5, warmup_cycles=0,
               allocs_per_cycle=4, isolate=True)
    name = lr.load(str(tree))
    assert ei.value.signal == "SIGSEGV" and ei.value.layers == [name]
    assert "in plugin layer %s of the libarena tree %s (the stack's only plugin)" % (
        name, tree) in str(ei.value), str(ei.value)


def test_cli_test_command_and_errors(tmp_path):
    proc = _cli("libarena", "test", EXAMPLE)
    assert proc.returncode == 0, proc.stderr
    assert "  PASS test_pool_bulk (returned 0)\n" in proc.stdout
    assert "4 passed, 0 failed" in proc.stdout
    tree = _copy(tmp_path)
    _patch(tree / "selftests" / "test_pool.bpf.c", "if (a != b)", "if (a == b)")
    proc = _cli("libarena", "test", str(tree))
    assert proc.returncode == 1
    assert "FAIL test_pool_reuse (returned -22)" in proc.stdout
    tree = _copy(tmp_path / "crash")
    _patch(tree / "selftests" / "test_pool.bpf.c", "\tret = buddy_init(&buddy);\n\tif (ret)\n\t\treturn ret;\n\tn =",
           "\tret = buddy_init(&buddy);\n\tif (ret)\n\t\treturn ret;\n\t*(volatile int *)(long)zero = 1;\n\tn =")
    proc = _cli("libarena", "test", str(tree))
    assert proc.returncode == 1
    assert "FAIL test_pool_bulk (crashed: SIGSEGV)" in proc.stdout
    # the next program runs in a fresh copy
    assert "PASS test_pool_invalid_free" in proc.stdout and "3 passed, 1 failed" in proc.stdout
    proc = _cli("libarena", "test", str(tmp_path / "nope"))
    assert proc.returncode == 2 and proc.stderr.startswith("alloclab: error:")


def test_cli_libarena_without_an_action_is_one_usage_error():
    proc = _cli("libarena")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "alloclab: error: libarena needs an action: build DIR or test DIR"]


# ---- the kernel's libarena: where the copy is at hand ----

@needs_reference
def test_reference_selftests_pass():
    results = lr.run_tests(REFERENCE)
    assert len(results) >= 5 and all(r["passed"] for r in results), results


@needs_reference
def test_reference_buddy_alone_and_under_caches():
    name = lr.load(REFERENCE)
    for apc in (16, 256):
        d = _run(name, apc)
        # one arena spin lock per alloc and per free, as the model's buddy
        assert d[name + ".lock_acquired_per_op"][0] == pytest.approx(1.0)
        assert d[name + ".leaked"][0] == 0
    d = _run("percpu > transfer > " + name, apc=256)
    assert d[name + ".leaked"][0] == 0


@needs_reference
def test_shadowed_header_change_is_not_measured_and_is_named(tmp_path):
    a, b = _copy(tmp_path / "a", REFERENCE), _copy(tmp_path / "b", REFERENCE)
    with open(b / "include" / "bpf_atomic.h", "a") as f:
        f.write("\n#error this copy is never compiled\n")
    name = lr.load(str(a))
    assert lr.load(str(b)) == name
    res = al.run("malloc-free", "libarena(tree=%s)" % b, allocs_per_cycle=16, cycles=5, runs=1)
    assert ("its include/bpf_arena_common.h, include/bpf_arena_spin_lock.h, "
            "include/bpf_atomic.h, include/bpf_may_goto.h are shadowed by alloclab's BPF "
            "stand-in (not measured") in res.points[0].info["notes"][0]
    # a header that is compiled still changes the name
    with open(a / "include" / "libarena" / "buddy.h", "a") as f:
        f.write("\n/* changed */\n")
    assert lr.load(str(a)) != name


@needs_reference
def test_reference_usable_size_is_the_block():
    a = al.Allocator(lr.load(REFERENCE))
    for size, block in ((1, 16), (17, 32), (64, 64), (1000, 1024)):
        p = a.alloc(size)
        assert a.usable_size(p) == block and p % 16 == 0
        a.free(p)


def test_bad_tree_in_a_spec_is_one_error_and_registers_nothing(tmp_path):
    layers = set(al.schema.layers())
    with pytest.raises(lr.LibarenaTreeError, match="not a libarena tree"):
        al.Policy("percpu > libarena(tree=%s)" % tmp_path)
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "if (!b)\n\t\treturn -EINVAL;\n\tret",
           "if (b)\n\t\treturn -ENOSPC;\n\tret")
    before = set(os.listdir(lr._object_dir()))
    with pytest.raises(lr.LibarenaInitError):
        al.Policy("libarena(tree=%s)" % tree)
    assert set(os.listdir(lr._object_dir())) == before
    assert set(al.schema.layers()) == layers
    proc = _cli("run", "malloc-free", "--policy", "libarena(tree=%s)" % tree)
    assert proc.returncode == 2 and proc.stderr.startswith("alloclab: error:")
    assert "buddy_init failed" in proc.stderr


# ---- the contract suite, over the real code (tests/test_allocator.py) ----

import test_allocator as contract  # noqa: E402

TREES = [EXAMPLE] + ([REFERENCE] if os.path.isfile(os.path.join(REFERENCE, "src", "buddy.bpf.c"))
                     else [])


@pytest.fixture(params=TREES, ids=lambda t: os.path.basename(os.path.normpath(t)))
def layer(request):
    return lr.load(request.param)


@pytest.fixture(params=["{}", "percpu > transfer > {}"], ids=["alone", "under-caches"])
def spec(request, layer):
    return request.param.format(layer)


@pytest.fixture
def alloc(layer):
    with al.Allocator(layer, ncpu=4) as a:
        yield a


def test_contract_every_stack_round_trip(spec):
    contract.test_every_stack_round_trip(spec)


def test_contract_two_threads_on_one_cpu_take_turns(spec):
    contract.test_two_threads_on_one_cpu_take_turns(spec)


@pytest.mark.parametrize("case", ["test_round_trip", "test_cross_cpu_free", "test_bulk",
                                  "test_stats_shape", "test_foreign_pointer",
                                  "test_invalid_free_leaves_stats_unchanged"])
def test_contract_allocator(alloc, case):
    getattr(contract, case)(alloc)


@needs_reference
def test_contract_double_free_of_the_real_buddy():
    with al.Allocator(lr.load(REFERENCE), ncpu=4) as a:
        contract.test_double_free_leaves_stats_unchanged(a)


@needs_reference
def test_reference_has_no_bulk_calls_of_its_own():
    assert "bulk" not in al.schema.layer(lr.load(REFERENCE)).features
    a = al.Allocator(lr.load(REFERENCE))
    ptrs = a.alloc_bulk(64, 8)  # the loop fallback
    assert len(ptrs) == 8 and a.free_bulk(ptrs) == 8


# ---- the stand-in's BPF environment, seen from the tree ----

def _stat(a, layer, name):
    return [s for s in a.stats() if s["layer"] == layer][0].get(name, 0)


def test_loop_budget_runs_out_and_is_counted(tmp_path):
    """cond_break in an endless loop ends it when the call's budget (the
    verifier's 8M iterations) is spent, once per call, and each call gets a
    fresh budget."""
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "\tput_locked(b, p, c);\n\tarena_spin_unlock(&b->lock);\n",
           "\tput_locked(b, p, c);\n\tarena_spin_unlock(&b->lock);\n\tfor (;;)\n\t\tcond_break;\n")
    name = lr.load(str(tree))
    with al.Allocator(name) as a:
        for i in (1, 2):
            a.free(a.alloc(64))
            assert _stat(a, name, "loop_exhausted") == i


def test_printk_is_counted_not_printed(tmp_path, capfd):
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "\tif (c < 0) {\n\t\tpool_err(\"pool: no class",
           "\tpool_err(\"pool: said %lu\", size);\n\tif (c < 0) {\n\t\tpool_err(\"pool: no class")
    name = lr.load(str(tree))
    with al.Allocator(name) as a:
        a.free(a.alloc(64))
        a.free(a.alloc(64))
        assert _stat(a, name, "printk") == 2
    out, err = capfd.readouterr()
    assert "pool: said" not in out + err


def test_printk_text_is_in_the_results_notes(tmp_path):
    """What the tree printed is kept, text and count, in the point of the run
    that printed it (isolated in child processes, or not)."""
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "\tif (c < 0) {\n\t\tpool_err(\"pool: no class",
           "\tpool_err(\"pool: said %lu\\n\", size);\n"
           "\tif (c < 0) {\n\t\tpool_err(\"pool: no class")
    name = lr.load(str(tree))
    for isolate in (True, False):
        res = al.run("malloc-free", [name, "buddy"], allocs_per_cycle=16, cycles=10,
                     warmup_cycles=5, runs=2, isolate=isolate)
        real, model = res.points
        # one printk per allocation: 15 cycles of 16 in each of two runs' instances
        assert real.info["printk"] == [{"layer": name, "text": "pool: said 64", "count": 480}]
        assert list(real.data[name + ".printk"]) == [160, 160]  # the measured phase's
        assert "notes" not in model.info
        assert "notes: %s printed 'pool: said 64' 480 times" % name in str(res)
        back = al.Result.from_json(res.to_json())
        assert back.points[0].info["notes"] == real.info["notes"]


def test_smp_processor_id_is_the_callers_cpu(tmp_path):
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "\tif (c < 0) {\n\t\tpool_err(\"pool: no class",
           "\tif (bpf_get_smp_processor_id() == 3)\n\t\treturn NULL;\n"
           "\tif (c < 0) {\n\t\tpool_err(\"pool: no class")
    with al.Allocator(lr.load(str(tree)), ncpu=4) as a:
        a.free(a.alloc(64, cpu=2))
        with pytest.raises(al.AllocatorExhausted):
            a.alloc(64, cpu=3)


def test_each_caller_keeps_its_cpu_across_the_lock_on_simulated_cpus(tmp_path):
    """Simulated CPUs run on fibers of one thread, switched inside the lock:
    the tree still sees its own caller's CPU after the lock returns."""
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c",
           "\tif (arena_spin_lock(&b->lock))\n\t\treturn NULL;\n\tp = take_locked(b, c);\n"
           "\tarena_spin_unlock(&b->lock);\n",
           "\tu32 cpu0 = bpf_get_smp_processor_id();\n\n"
           "\tif (arena_spin_lock(&b->lock))\n\t\treturn NULL;\n"
           "\tif (bpf_get_smp_processor_id() != cpu0)\n\t\tpool_err(\"pool: moved in lock\");\n"
           "\tp = take_locked(b, c);\n\tarena_spin_unlock(&b->lock);\n"
           "\tif (bpf_get_smp_processor_id() != cpu0)\n\t\tpool_err(\"pool: moved in unlock\");\n")
    name = lr.load(str(tree))
    res = al.run("malloc-free", name, producers=4, cpu="simulated", allocs_per_cycle=16,
                 cycles=50, runs=1, check=False)
    d = res.points[0].data
    assert d[name + ".lock_acquired"][0] == 4 * 50 * 16 * 2
    assert d[name + ".lock_contended"][0] > 0  # the fibers did meet in the lock
    assert d[name + ".printk"][0] == 0 and "printk" not in res.points[0].info


def test_arena_is_4gib_aligned_and_read_by_offset():
    with al.Allocator(lr.load(EXAMPLE)) as a:
        p = a.alloc(64)
        # the example's window starts at arena offset 1 << 28: its first object is there
        assert p % (1 << 32) == 1 << 28
        a.free(p)


def test_tree_with_own_caches_refuses_the_models_caches_unless_asked(tmp_path):
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "\tif (c < 0) {\n\t\tpool_err(\"pool: no class",
           "\tif (bpf_get_smp_processor_id() > 4096)\n\t\treturn NULL;\n"
           "\tif (c < 0) {\n\t\tpool_err(\"pool: no class")
    assert lr.info(str(tree))["own_caches"] and not lr.info(EXAMPLE)["own_caches"]
    name = al.Policy("libarena(tree=%s)" % tree).names[-1]  # alone: fine
    assert "per-CPU caches of its own" in al.schema.layer(name).doc
    with pytest.raises(al.IncompatiblePolicyError, match="per-CPU caches of its own"):
        al.Policy("percpu > libarena(tree=%s)" % tree)
    p = al.Policy("percpu > libarena(tree=%s, caches_above=true)" % tree)
    assert p.names == ["percpu", name]
    proc = _cli("libarena", "build", str(tree))
    assert proc.returncode == 0 and "per-CPU caches of its own: yes" in proc.stdout


def test_tree_with_own_caches_refused_by_its_registered_name_too(tmp_path):
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "\tif (c < 0) {\n\t\tpool_err(\"pool: no class",
           "\tif (bpf_get_smp_processor_id() > 4096)\n\t\treturn NULL;\n"
           "\tif (c < 0) {\n\t\tpool_err(\"pool: no class")
    name = lr.load(str(tree))
    with pytest.raises(al.IncompatiblePolicyError, match="per-CPU caches of its own"):
        al.Policy("percpu > transfer > %s" % name)
    assert al.Policy("percpu > %s(caches_above=true)" % name).names == ["percpu", name]
    assert al.Policy(name).names == [name]


def test_own_caches_are_read_as_compiled(tmp_path):
    """A call in a comment is no cache; one under #ifndef BPF_ARENA_ASAN is a
    cache the tree's ASan build switches off, as seed 000's patch does."""
    tree = _copy(tmp_path)
    _patch(tree / "src" / "buddy.bpf.c", "\tif (c < 0) {\n\t\tpool_err(\"pool: no class",
           "\t/* bpf_get_smp_processor_id() would say where */\n"
           "\tif (c < 0) {\n\t\tpool_err(\"pool: no class")
    info = lr.info(str(tree))
    assert not info["own_caches"] and not info["own_caches_asan"]
    _patch(tree / "src" / "buddy.bpf.c", "\t/* bpf_get_smp_processor_id() would say where */\n",
           "#ifndef BPF_ARENA_ASAN\n\tif (bpf_get_smp_processor_id() > 4096)\n\t\treturn NULL;\n"
           "#endif\n")
    info = lr.info(str(tree))
    assert info["own_caches"] and info["own_caches_plain"] and not info["own_caches_asan"]
    assert lr.caches_note(info) == "its own per-CPU caches: yes (off in its ASan build)"
    proc = _cli("libarena", "build", str(tree))
    assert "per-CPU caches of its own: yes (off in its ASan build)" in proc.stdout


def test_the_result_says_what_ran():
    name = lr.load(EXAMPLE)
    res = al.run("malloc-free", ["buddy", name], allocs_per_cycle=16, cycles=5, runs=1)
    model, real = res.points
    assert real.info["libarena"] == [{"layer": name, "tree": os.path.abspath(EXAMPLE),
                                      "own_caches": False, "asan": False}]
    assert "libarena" not in model.info
    assert ("notes: %s runs buddy.bpf.c of the libarena tree %s, compiled natively as user-space "
            "C; its own per-CPU caches: no; none of its headers is shadowed by alloclab's BPF "
            "stand-in" % (name, os.path.abspath(EXAMPLE))) in str(res)


def test_cli_run_and_show_print_the_notes_once(tmp_path):
    out = tmp_path / "r.json"
    proc = _cli("run", "malloc-free", "--policy", "libarena(tree=%s)" % EXAMPLE, "--policy",
                "percpu > transfer > libarena(tree=%s)" % EXAMPLE, "--runs", "1",
                "--duration", "0.02", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    note = ("notes: %s runs buddy.bpf.c of the libarena tree %s, compiled natively as "
            "user-space C; its own per-CPU caches: no" % (lr.load(EXAMPLE), EXAMPLE))
    assert proc.stdout.count(note) == 1, proc.stdout
    shown = _cli("show", str(out))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count(note) == 1, shown.stdout


def test_cli_compare_takes_the_spec_the_user_typed_as_baseline(tmp_path):
    out = tmp_path / "r.json"
    spec = "libarena(tree=%s)" % EXAMPLE
    proc = _cli("run", "malloc-free", "--policy", "buddy", "--policy", spec, "--runs", "2",
                "--duration", "0.02", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    proc = _cli("compare", str(out), "--baseline", spec)  # a fresh process: not yet loaded
    assert proc.returncode == 0, proc.stderr
    assert "buddy" in proc.stdout
    proc = _cli("compare", str(out), "--baseline", "nope")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "alloclab: error: unknown policy 'nope' in baseline; valid policies: buddy, %s"
        % lr.load(EXAMPLE)]


needs_asan = pytest.mark.skipif(lr.asan_runtime() is None,
                                reason="the compiler has no ASan runtime (libasan.so)")


@needs_asan
def test_asan_build_poisons_through_alloclab_and_catches_a_use_after_free(tmp_path):
    results = lr.run_tests(EXAMPLE, asan=True)
    assert [r["name"] for r in results][-1] == "asan_test_pool_poison"
    assert all(r["passed"] for r in results), results
    tree = _copy(tmp_path)
    _patch(tree / "selftests" / "test_pool.bpf.c",
           "\tif (!asan_shadow_set(p) || !asan_shadow_set(p + 63))",
           "\tp[8] = 1; /* a use after free */\n"
           "\tif (!asan_shadow_set(p) || !asan_shadow_set(p + 63))")
    results = {r["name"]: r for r in lr.run_tests(str(tree), asan=True)}
    bad = results["asan_test_pool_poison"]
    assert not bad["passed"] and bad["ret"] is None
    assert bad["message"].startswith(("crashed", "ended early")), bad
    # the ASan report's kind and where, not only how the child ended
    assert "): AddressSanitizer: " in bad["message"], bad
    assert " at selftests/test_pool.bpf.c:" in bad["message"], bad
    assert all(r["passed"] for n, r in results.items() if n != "asan_test_pool_poison")


def test_asan_summary_names_the_kind_and_file_line():
    report = ("==7==ERROR: AddressSanitizer: heap-use-after-free on address 0x7f at pc 0x1\n"
              "WRITE of size 1 at 0x7f thread T0\n"
              "    #0 0x55 in buddy_free src/buddy.bpf.c:212\n"
              "SUMMARY: AddressSanitizer: heap-use-after-free src/buddy.bpf.c:212 in buddy_free\n")
    assert lr.asan_summary(report) == \
        "AddressSanitizer: heap-use-after-free at src/buddy.bpf.c:212 in buddy_free"
    assert lr.asan_summary(report.replace("SUMMARY", "summary")) == \
        "AddressSanitizer: heap-use-after-free at src/buddy.bpf.c:212 in buddy_free"
    assert lr.asan_summary("exit 1\n") == ""


def test_asan_build_is_refused_in_a_process_without_asan(monkeypatch):
    monkeypatch.setenv("ALLOCLAB_LIBARENA_ASAN", "1")
    with pytest.raises(lr.LibarenaInitError, match="loads only into a process started with "
                                                   "AddressSanitizer"):
        lr.load(EXAMPLE)


# ---- two trees, A/B: a patched copy against its base ----

def _ab(base, tmp_path, header, old, new):
    """Run base and a copy with one constant changed, interleaved in one run;
    their layer names and the comparison of the arena pages they hold."""
    patched = _copy(tmp_path, base)
    _patch(patched / "include" / "libarena" / header, old, new)
    a, b = lr.load(base), lr.load(str(patched))
    assert a != b
    res = al.run("malloc-free", [a, b], duration=0.05, runs=3, allocs_per_cycle=256)
    cmp = al.compare(res, baseline=a, metric="alloc_ns")
    pages = {p.params["policy"]: int(p.data["%s.arena_pages" % p.params["policy"]][-1])
             for p in res.points}
    return a, b, cmp, pages


def test_ab_example_slab_size_changes_the_pages_held(tmp_path):
    a, b, cmp, pages = _ab(EXAMPLE, tmp_path, "buddy.h", "POOL_SLAB_BYTES = 64 << 10",
                           "POOL_SLAB_BYTES = 16 << 10")
    # 256 objects of 64 B: one 16 KiB slab (4 pages) against a 64 KiB one (16)
    assert pages == {a: 16, b: 4}
    assert b in str(cmp)


@needs_reference
def test_ab_reference_chunk_orders_change_the_chunk(tmp_path):
    a, b, cmp, pages = _ab(REFERENCE, tmp_path, "buddy.h", "BUDDY_CHUNK_NUM_ORDERS\t= 1 << 4",
                           "BUDDY_CHUNK_NUM_ORDERS\t= 14")
    # one chunk each: 1 MiB (256 pages) in the base, 256 KiB (64) in the patched copy
    assert pages == {a: 256, b: 64}
    assert b in str(cmp)
