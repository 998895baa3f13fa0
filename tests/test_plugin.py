"""Plugins: C layers compiled and registered at run time, beside the built-ins."""
import ctypes
import os
import shutil
import subprocess
import sys

import pytest

import alloclab as al
from alloclab import plugin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HALFSPILL = os.path.join(ROOT, "examples", "plugins", "halfspill.c")

# A front layer with a generated descriptor: counts what passes through.
COUNTING = r"""
#include <errno.h>
struct counting { struct al_allocator base; struct al_counters ctr; int64_t bias; };
enum { C_allocs, C_frees, C_NR };
static const char *const names[] = { "passed_allocs", "passed_frees" };
static void *c_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct counting *k = (struct counting *)a;
	al_count(&k->ctr, c, C_allocs, 1);
	return al_alloc(a->below, c, size, flags);
}
static int c_free(struct al_allocator *a, struct al_ctx *c, void *p)
{
	struct counting *k = (struct counting *)a;
	int ret = al_free(a->below, c, p);
	if (!ret && p)
		al_count(&k->ctr, c, C_frees, 1);
	return ret;
}
static void c_stats(struct al_allocator *a, struct al_stats *out)
{
	al_counters_report(&((struct counting *)a)->ctr, out);
	al_stats_add(out, "bias", (uint64_t)((struct counting *)a)->bias);
}
static void c_destroy(struct al_allocator *a)
{
	al_counters_fini(&((struct counting *)a)->ctr);
	al_meta_free(a, sizeof(struct counting));
}
static const struct al_ops ops = { .name = "counting", AL_OPS_INIT, .alloc = c_alloc,
	.free = c_free, .usable_size = al_below_usable_size, .owns = al_below_owns,
	.stats = c_stats, .destroy = c_destroy };
static int counting_create(const struct al_layer_desc *d, const int64_t *params,
			   struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct counting *k = al_meta_alloc(sizeof(*k));
	if (!k)
		return -ENOMEM;
	al_counters_init(&k->ctr, C_NR, names, ncpu);
	k->bias = params[0];
	*out = al_allocator_init(&k->base, &ops, d, below, ncpu);
	return 0;
}
"""
COUNTING_PARAMS = [("bias", "int", 3, 0, 100, "a number to read back"),
                   ("mode", "enum", "fast", 0, 0, "a choice", ("fast", "slow"))]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def halfspill():
    return plugin.compile_file(HALFSPILL)[0]


@pytest.fixture(scope="module")
def counting():
    return plugin.compile("counting", COUNTING, params=COUNTING_PARAMS,
                          features=["backend", "usable", "owns"], create="counting_create",
                          doc="counts what passes through")


def test_plugin_passes_the_contract_suite(halfspill):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_allocator import test_every_stack_round_trip

    for spec in ("halfspill > buddy", "halfspill(capacity=4, batch=2) > buddy",
                 "percpu > halfspill > buddy", "halfspill > transfer > buddy"):
        test_every_stack_round_trip(spec)


def test_plugin_runs_like_a_builtin(halfspill):
    res = al.run("malloc-free", ["halfspill > buddy", "libarena-spill"], runs=1, cycles=1,
                 warmup_cycles=0, allocs_per_cycle=17)
    p = res.select(policy="halfspill > buddy")[0]
    # 17 allocations from an empty cache: refills of 8 at 0, 8 and 16 objects used
    assert p["halfspill.refills"][0] == 3 and p["halfspill.hits"][0] == 14
    assert p["buddy.alloc_bulk_calls"][0] == 3
    # 17 frees onto 7 cached: one half-capacity spill (8 of 16)
    assert p["halfspill.spills"][0] == 1
    # allocs is derived (hits + refills), frees counted once per push
    assert p["halfspill.allocs"][0] == 17 and p["halfspill.frees"][0] == 17
    assert p["halfspill.bytes_held"][0] == 0


def test_generated_descriptor(counting):
    s = al.policies()
    mine = [d for d in s if d["name"] == "counting"][0]
    assert [q["name"] for q in mine["params"]] == ["bias", "mode"]
    assert str(al.Policy("counting(bias=7, mode=slow) > buddy")) == \
        "counting(bias=7, mode=slow) > buddy"
    with al.Allocator("counting(bias=7) > buddy") as a:
        p = a.alloc(100)
        a.free(p)
        st = a.stats()[0]
        assert (st["passed_allocs"], st["passed_frees"], st["bias"]) == (1, 1, 7)
    with pytest.raises(al.ParameterRangeError, match="bias"):
        al.Policy("counting(bias=101) > buddy")


def test_plugin_under_and_over_builtins(counting):
    res = al.run("malloc-free", ["counting > percpu > buddy", "percpu > counting > buddy"],
                 runs=1, cycles=2, warmup_cycles=0, allocs_per_cycle=16)
    over = res.select(policy="counting > percpu > buddy")[0]
    under = res.select(policy="percpu > counting > buddy")[0]
    assert over["counting.passed_allocs"][0] == 32  # every allocation passes it
    # below the cache it sees only the refills (no native bulk: a loop of singles)
    assert under["counting.passed_allocs"][0] == under["percpu.refill_objects"][0]


def test_same_source_is_a_cache_hit(halfspill):
    again = plugin.compile_file(HALFSPILL)[0]
    assert again is halfspill


def test_same_name_other_source_is_refused(counting):
    with pytest.raises(al.PluginError, match="already registered"):
        plugin.compile("counting", COUNTING + "\n/* changed */\n", params=COUNTING_PARAMS,
                       features=["backend"], create="counting_create")
    with pytest.raises(al.PluginError, match="already a registered layer"):
        plugin.compile("buddy", "int x;")


def test_compile_error_names_the_line():
    src = "static int ok(void) { return 0; }\nstatic int broken(void) { return undefined_thing; }\n"
    with pytest.raises(al.PluginCompileError) as ei:
        plugin.compile("broken", src, create="ok")
    assert "broken.c:2:" in str(ei.value)
    assert "undefined_thing" in ei.value.compiler_output


def test_source_that_registers_nothing():
    with pytest.raises(al.PluginError, match="registered no layer"):
        plugin.compile("nothing", "static int unused;\n")


@pytest.mark.parametrize("params,exc,needle", [
    ([("depth", "int", 2000, 1, 1024, "")], al.ParameterRangeError, "outside"),
    ([("depth", "float", 1, 1, 2, "")], al.UnknownNameError, "float"),
    ([("mode", "enum", "a", 0, 0, "")], al.InvalidArgument, "needs choices"),
    ([("Bad-Name", "int", 1, 1, 2, "")], al.InvalidArgument, "must match"),
    ([("d", "int", 1, 1, 2, ""), ("d", "int", 1, 1, 2, "")], al.InvalidArgument, "twice"),
])
def test_bad_parameter_declarations(params, exc, needle):
    with pytest.raises(exc, match=needle):
        plugin.compile("badparams", COUNTING, params=params, create="counting_create")


def test_capsule_and_foreign_descriptors(tmp_path):
    cap = plugin.api_capsule()
    assert type(cap).__name__ == "PyCapsule"
    # a shared object built outside alloclab, with two layer descriptors
    src = tmp_path / "ext.c"
    src.write_text(COUNTING.replace("counting_create", "ext_create") + r"""
#define DESC(var, nm) static const struct al_layer_desc var = { .name = nm, AL_LAYER_DESC_INIT, \
	.doc = "external", .features = AL_F_BACKEND | AL_F_USABLE | AL_F_OWNS, .nparams = 0, .create = ext_create }
DESC(d1, "ext-capsule");
DESC(d2, "ext-cffi");
__attribute__((visibility("default"))) const void *desc1(void) { return &d1; }
__attribute__((visibility("default"))) const void *desc2(void) { return &d2; }
""".replace("k->bias = params[0];", "k->bias = 0; (void)params;"))
    so = tmp_path / "libext.so"
    libdir = os.path.dirname(al.lib_path())
    subprocess.check_call([shutil.which("cc"), "-shared", "-fPIC", "-O1", "-include",
                           "alloclab/alloclab.h", "-I" + al.include_dir(), str(src), "-L" + libdir,
                           "-lalloclab", "-Wl,-rpath," + libdir, "-o", str(so)])
    ext = ctypes.CDLL(str(so))
    ext.desc1.restype = ctypes.c_void_p
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    assert plugin.register(new(ext.desc1(), b"alloclab.layer_desc", None)) == "ext-capsule"
    import cffi
    f = cffi.FFI()
    f.cdef("const void *desc2(void);")
    assert plugin.register(f.dlopen(str(so)).desc2()) == "ext-cffi"
    for name in ("ext-capsule", "ext-cffi"):
        with al.Allocator("%s > buddy" % name) as a:
            a.free(a.alloc(64))
    with pytest.raises(al.PluginError, match="already registered"):
        plugin.register(new(ext.desc1(), b"alloclab.layer_desc", None))
    with pytest.raises(al.InvalidArgument, match="must be named"):
        plugin.register(new(ext.desc1(), b"something.else", None))
    with pytest.raises(al.ParameterTypeError):
        plugin.register("not a pointer")


def test_cli_plugin(tmp_path):
    env = dict(os.environ, ALLOCLAB_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "alloclab", "run", "malloc-free", "--plugin",
                          HALFSPILL, "--policy", "halfspill > buddy", "--cycles", "5",
                          "--runs", "1"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "halfspill > buddy" in out.stdout
    bad = tmp_path / "bad.c"
    bad.write_text("int x = ;\n")
    out = subprocess.run([sys.executable, "-m", "alloclab", "run", "malloc-free", "--plugin",
                          str(bad), "--policy", "buddy"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 2 and "bad.c:1:" in out.stderr and "Traceback" not in out.stderr


def test_plugin_under_the_preload_shim(tmp_path):
    prog = tmp_path / "freeall"
    subprocess.check_call([shutil.which("cc"), "-O1", "-o", str(prog),
                           os.path.join(ROOT, "tests", "preload", "freeall.c")])
    stats = tmp_path / "s.json"
    env = dict(os.environ, ALLOCLAB_CACHE=str(tmp_path))
    out = subprocess.run([sys.executable, "-m", "alloclab", "preload", "--plugin", HALFSPILL,
                          "--policy", "halfspill > buddy", "--json", str(stats), "--",
                          str(prog)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    from alloclab import preload
    st = preload.read_stats(str(stats))
    assert st["state"] == "ready" and st["layers"][0]["layer"] == "halfspill"
    assert st["layers"][0]["hits"] > 0 and st["layers"][0]["bytes_held"] == 0


# ---- misuse of register(), crashing and lying plugins, isolated runs ----

@pytest.mark.parametrize("value,exc,needle", [
    (12345, al.InvalidArgument, r"register\(12345\).*0x3039 is not aligned"),
    (12344, al.InvalidArgument, r"register\(12344\).*0x3038 is not readable"),
    (-1, al.InvalidArgument, r"register\(-1\): -1 is not an address"),
    (2**64, al.InvalidArgument, r"is not an address"),
    (0, al.InvalidArgument, "NULL descriptor"),
    (None, al.ParameterTypeError, r"register\(None\).*not NoneType"),
    ("x", al.ParameterTypeError, r"register\('x'\).*not str"),
    (1.5, al.ParameterTypeError, r"register\(1.5\).*not float"),
    (True, al.ParameterTypeError, r"register\(True\).*not bool"),
])
def test_register_refuses_what_is_not_a_descriptor(value, exc, needle):
    before = al.plugin.schema.layers()
    with pytest.raises(exc, match=needle):
        plugin.register(value)
    assert al.plugin.schema.layers() == before


def test_register_refuses_readable_memory_that_is_no_descriptor():
    from alloclab._ffi import ffi, lib

    junk = ctypes.create_string_buffer(256)  # zeros: abi_version 0
    with pytest.raises(al.PluginError, match="abi_version 0 and desc_size 0, expected 1"):
        plugin.register(ctypes.addressof(junk))
    # a descriptor of this ABI whose name points nowhere
    d = ffi.new("struct al_layer_desc *")
    d.abi_version, d.desc_size = lib.AL_ABI_VERSION, ffi.sizeof("struct al_layer_desc")
    d.name = ffi.cast("const char *", 0x10)
    with pytest.raises(al.PluginError, match="name is NULL or unreadable"):
        plugin.register(d)
    name = ffi.new("char[]", b"no-create")
    d.name = name
    with pytest.raises(al.PluginError, match="'no-create' has no create function"):
        plugin.register(d)
    d.create = ffi.cast("void *", ctypes.addressof(junk))  # data, not code
    with pytest.raises(al.PluginError, match="create .* does not point into executable"):
        plugin.register(d)


# A front layer that passes everything to the layer below, except that it
# misbehaves once it has served FAULT_AFTER allocations: `crash` dereferences
# NULL, `misalign` hands out the object 4 bytes in, `duplicate` hands out the
# previous object again while it is live.
LIAR = r"""
#include <errno.h>
#include <stdint.h>
struct liar { struct al_allocator base; unsigned long n; void *last; int mode; int after; };
static void *l_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	struct liar *l = (struct liar *)a;
	unsigned long n = __atomic_add_fetch(&l->n, 1, __ATOMIC_RELAXED);
	void *p;

	if (n > (unsigned long)l->after && l->mode == 0)
		*(volatile int *)(uintptr_t)(n & 0) = 1;
	if (n > (unsigned long)l->after && l->mode == 2 && l->last)
		return l->last;
	p = al_alloc(a->below, c, size + 8, flags);
	if (p && n > (unsigned long)l->after && l->mode == 1)
		return (char *)p + 4;
	l->last = p;
	return p;
}
static void l_stats(struct al_allocator *a, struct al_stats *out) { (void)a; (void)out; }
static void l_destroy(struct al_allocator *a) { al_meta_free(a, sizeof(struct liar)); }
static const struct al_ops ops = { .name = "NAME", AL_OPS_INIT, .alloc = l_alloc,
	.free = al_below_free, .usable_size = al_below_usable_size, .stats = l_stats,
	.destroy = l_destroy };
static int liar_create(const struct al_layer_desc *d, const int64_t *params,
		       struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct liar *l = al_meta_alloc(sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->mode = MODE;
	l->after = (int)params[0];
	*out = al_allocator_init(&l->base, &ops, d, below, ncpu);
	return 0;
}
"""
LIAR_MODES = {"crashy": 0, "misaligned": 1, "duplicate": 2}


@pytest.fixture(scope="module")
def liars():
    return {name: plugin.compile(
        name, LIAR.replace("NAME", name).replace("MODE", str(mode)),
        params=[("after", "int", 40, 0, 1 << 30, "allocations served honestly first")],
        features=["backend", "usable"], create="liar_create")
        for name, mode in LIAR_MODES.items()}


def _crash_run(**kw):
    return al.run("malloc-free", "crashy(after=30) > buddy", runs=1, cycles=20,
                  warmup_cycles=0, allocs_per_cycle=16, **kw)


def test_crashing_plugin_fails_its_run_not_the_interpreter(liars):
    with pytest.raises(al.RunError) as ei:
        _crash_run()  # a plugin in the policy: isolated by default
    msg = str(ei.value)
    assert "'crashy(after=30) > buddy'" in msg and "plugin layer crashy" in msg
    assert "SIGSEGV" in msg and ei.value.signal == "SIGSEGV"
    assert ei.value.layers == ["crashy"]
    # the interpreter carries on: the same plugin, honest for the whole run, runs here
    res = al.run("malloc-free", "crashy(after=1000000) > buddy", runs=1, cycles=20,
                 warmup_cycles=0, allocs_per_cycle=16)
    assert res.select()[0]["buddy.allocs"][0] == 20 * 16


def test_crash_in_a_stack_of_two_plugins_names_both(liars, counting):
    with pytest.raises(al.RunError, match=r"SIGSEGV in one of its plugin layers "
                                          r"\(counting, crashy\)"):
        al.run("malloc-free", "counting > crashy(after=3) > buddy", runs=1, cycles=5,
               warmup_cycles=0, allocs_per_cycle=16, isolate=True)


def test_crash_in_a_sweep_keeps_the_journal(liars, tmp_path):
    from alloclab.sweep import sweep

    journal = tmp_path / "j.jsonl"
    with pytest.raises(al.RunError, match="SIGSEGV"):
        sweep("malloc-free", ["buddy", "crashy(after=30) > buddy"], runs=1, cycles=20,
              warmup_cycles=0, allocs_per_cycle=16, journal=journal, shuffle=False)
    lines = journal.read_text().splitlines()
    assert len(lines) == 2 and '"policy": "buddy"' in lines[1]  # header + buddy's run


@pytest.mark.parametrize("spec,workload,kw", [
    ("halfspill > buddy", "malloc-free", dict(allocs_per_cycle=17)),
    ("halfspill(capacity=4, batch=2) > buddy", "malloc-free", dict(allocs_per_cycle=64)),
    ("percpu > counting(bias=7) > buddy", "malloc-free", dict(allocs_per_cycle=33)),
    ("counting > halfspill > buddy", "malloc", dict()),
])
def test_isolated_run_gives_the_counters_of_an_in_process_run(halfspill, counting, spec,
                                                              workload, kw):
    common = dict(runs=2, cycles=50, warmup_cycles=5, seed=7, **kw)
    here = al.run(workload, spec, isolate=False, **common)
    there = al.run(workload, spec, isolate=True, **common)
    assert here.metadata["run"]["isolate"] is False
    assert there.metadata["run"]["isolate"] is True and there.metadata["run"]["check"] is True
    a, b = here.select()[0].data, there.select()[0].data
    assert sorted(a) == sorted(b)  # the same metrics
    # every layer counter but the lock timings (nanoseconds) is deterministic
    counters = [m for m in a if "." in m and not m.startswith("wl.")
                and not m.endswith("_per_op") and not m.endswith("_ns")]
    assert len(counters) > 20
    for m in counters + ["alloc_ops", "free_ops", "cycles"]:
        assert list(a[m]) == list(b[m]), m
    assert here.select()[0].info["pids"] == [os.getpid()] * 2
    assert os.getpid() not in there.select()[0].info["pids"]
    # the same info, but where and when each run ran (and the clock, calibrated per
    # process, and the memory samples over time, RSS included)
    skip = ("pids", "run_starts", "ticks_per_ns", "engine_cpus", "mem_series")
    assert {k: v for k, v in here.select()[0].info.items() if k not in skip} == \
        {k: v for k, v in there.select()[0].info.items() if k not in skip}


@pytest.mark.parametrize("isolate", [False, True])
def test_a_spawned_worker_loads_the_plugin_and_runs_the_parsed_form(halfspill, counting,
                                                                     isolate):
    """An executor's worker process started fresh (spawn) has no plugin layer
    registered: it gets the task's policy parsed, loads the plugins by path
    (or hands the task to an isolated child that does) and counts as a run in
    this process does."""
    import concurrent.futures as cf
    import multiprocessing
    spec = "percpu > counting(bias=7) > halfspill > buddy"
    common = dict(runs=2, cycles=50, warmup_cycles=5, seed=7, allocs_per_cycle=[17, 40],
                  isolate=isolate, check=False)
    here = al.run("malloc-free", spec, **dict(common, isolate=False))
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        there = al.run("malloc-free", spec, executor=ex, **common)
    assert [p.params for p in here.points] == [p.params for p in there.points]
    for a, b in zip(here.points, there.points):
        counters = [m for m in a.data if m.split(".")[0] in ("counting", "halfspill", "percpu")
                    and not m.endswith("_ns")]
        assert len(counters) > 10 and sorted(a.data) == sorted(b.data)
        for m in counters + ["alloc_ops", "free_ops"]:
            assert list(a.data[m]) == list(b.data[m]), m
        assert os.getpid() not in b.info["pids"]


def test_plugin_policies_run_isolated_by_default(halfspill):
    res = al.run("malloc-free", ["halfspill > buddy", "buddy"], runs=1, cycles=2,
                 warmup_cycles=0)
    assert res.metadata["run"]["isolate"] is True
    assert all(os.getpid() not in p.info["pids"] for p in res.select())
    res = al.run("malloc-free", "buddy", runs=1, cycles=2, warmup_cycles=0)
    assert res.metadata["run"]["isolate"] is False and res.metadata["run"]["check"] is False
    assert res.select()[0].info["pids"] == [os.getpid()]
    with pytest.raises(al.ParameterTypeError, match="isolate must be True, False or None"):
        al.run("malloc-free", "buddy", isolate="yes")


@pytest.mark.parametrize("liar,needle", [
    ("misaligned", r"layer misaligned returned 0x[0-9a-f]+ for a \d+-byte request "
                   r"\(allocation 31\): aligned to 4 bytes, below 16 \(the min_align of buddy "
                   r"below it, which it inherits\)"),
    ("duplicate", r"layer duplicate returned 0x[0-9a-f]+ for a \d+-byte request "
                  r"\(allocation 31\) while it was still live: the same object handed out "
                  r"twice"),
])
@pytest.mark.parametrize("isolate", [True, False])
def test_lying_plugin_is_reported_naming_the_layer(liars, liar, needle, isolate):
    with pytest.raises(al.RunError, match=needle) as ei:
        al.run("malloc-free", "%s(after=30) > buddy" % liar, runs=1, cycles=20,
               warmup_cycles=0, allocs_per_cycle=16, isolate=isolate, check=True)
    assert ei.value.code == -14  # EFAULT: not out of memory, not a leak
    assert not isinstance(ei.value, al.AllocatorExhausted)


def test_declared_alignment_is_checked():
    # honest, but it declares more than buddy's 64-byte blocks have
    plugin.compile("overclaims", LIAR.replace("NAME", "overclaims").replace("MODE", "3"),
                   params=[("after", "int", 0, 0, 1, "unused")], features=["backend", "usable"],
                   create="liar_create", min_align=4096)
    with pytest.raises(al.RunError, match=r"layer overclaims returned 0x[0-9a-f]+ for a 64-byte "
                                          r"request \(allocation \d+\): aligned to \d+ bytes, "
                                          r"below 4096 \(its min_align\)"):
        al.run("malloc-free", "overclaims > buddy", runs=1, cycles=2, warmup_cycles=0)
    with pytest.raises(al.InvalidArgument, match="min_align=24 must be 0"):
        plugin.compile("badalign", COUNTING, create="counting_create", min_align=24)


def test_lying_plugin_honest_until_the_end_passes_the_checks(liars):
    for liar in ("misaligned", "duplicate"):
        res = al.run("malloc-free", "%s(after=100000) > buddy" % liar, runs=1, cycles=20,
                     warmup_cycles=0, allocs_per_cycle=16, producers=[1, 3])
        assert [r["buddy.allocs"][0] for r in res.select()] == [320, 960]


@pytest.mark.parametrize("isolate", [True, False])
def test_unchecked_the_lie_surfaces_later_as_someone_elses_error(liars, isolate):
    # without the checks the duplicate reaches the workload, which frees it
    # twice: buddy refuses the second free, and nothing names the plugin
    with pytest.raises(al.RunError, match=r"worker 0: free\(0x[0-9a-f]+\) failed: EINVAL") as ei:
        al.run("malloc-free", "duplicate(after=30) > buddy", runs=1, cycles=20,
               warmup_cycles=0, allocs_per_cycle=16, isolate=isolate, check=False)
    assert "duplicate returned" not in str(ei.value)


def test_plugin_without_a_path_cannot_run_isolated(tmp_path):
    from alloclab._ffi import ffi, lib

    # a descriptor built in memory, reusing a compiled plugin's create function
    donor = plugin.compile("donor", COUNTING, params=COUNTING_PARAMS,
                           features=["backend", "usable", "owns"], create="counting_create")
    src = lib.al_layer_find(donor.name.encode())
    d = ffi.new("struct al_layer_desc *")
    name = ffi.new("char[]", b"inmemory")
    d.abi_version, d.desc_size, d.name = src.abi_version, src.desc_size, name
    d.features, d.nparams, d.params, d.create = src.features, src.nparams, src.params, src.create
    plugin._keep.append((d, name))
    assert plugin.register(d) == "inmemory"
    with pytest.raises(al.PluginError, match="'inmemory' was registered from memory that "
                                             "belongs to no shared object.*isolate=False"):
        al.run("malloc-free", "inmemory > buddy", runs=1, cycles=2, warmup_cycles=0)
    res = al.run("malloc-free", "inmemory > buddy", runs=1, cycles=2, warmup_cycles=0,
                 allocs_per_cycle=16, isolate=False)
    assert res.select()[0]["inmemory.passed_allocs"][0] == 32
    with pytest.raises(al.PluginError, match="'inmemory'"):
        al.run("malloc-free", "inmemory > buddy", processes=True)


def test_foreign_shared_object_runs_isolated(tmp_path):
    """A descriptor registered by address from a .so without a constructor:
    the child loads the .so and registers the descriptor at the same offset."""
    src = tmp_path / "ext2.c"
    src.write_text(COUNTING.replace("counting_create", "ext_create") + r"""
static const struct al_layer_desc d1 = { .name = "ext-offset", AL_LAYER_DESC_INIT, .doc = "external",
	.features = AL_F_BACKEND | AL_F_USABLE | AL_F_OWNS, .nparams = 0, .create = ext_create };
__attribute__((visibility("default"))) const void *desc1(void) { return &d1; }
""".replace("k->bias = params[0];", "k->bias = 0; (void)params;"))
    so = tmp_path / "libext2.so"
    libdir = os.path.dirname(al.lib_path())
    subprocess.check_call([shutil.which("cc"), "-shared", "-fPIC", "-O1", "-include",
                           "alloclab/alloclab.h", "-I" + al.include_dir(), str(src), "-L" + libdir,
                           "-lalloclab", "-Wl,-rpath," + libdir, "-o", str(so)])
    ext = ctypes.CDLL(str(so))
    ext.desc1.restype = ctypes.c_void_p
    assert plugin.register(ext.desc1()) == "ext-offset"
    common = dict(runs=1, cycles=3, warmup_cycles=0, allocs_per_cycle=16)
    there = al.run("malloc-free", "ext-offset > buddy", **common)
    here = al.run("malloc-free", "ext-offset > buddy", isolate=False, **common)
    assert there.select()[0].info["pids"] != [os.getpid()]
    assert there.select()[0]["ext-offset.passed_allocs"][0] == \
        here.select()[0]["ext-offset.passed_allocs"][0] == 48


def test_cli_isolate(tmp_path, liars):
    env = dict(os.environ, ALLOCLAB_CACHE=str(tmp_path))
    crashy = tmp_path / "crashy.c"
    crashy.write_text(LIAR.replace("NAME", "clicrash").replace("MODE", "0").replace(
        "(int)params[0]", "40").replace("liar_create", "clicrash_create") + r"""
static const struct al_layer_desc desc = { .name = "clicrash", AL_LAYER_DESC_INIT, .doc = "crashes",
	.features = AL_F_BACKEND | AL_F_USABLE, .create = clicrash_create };
AL_REGISTER_LAYER(desc)
""")
    base = [sys.executable, "-m", "alloclab", "run", "malloc-free", "--plugin", str(crashy),
            "--cycles", "20", "--warmup-cycles", "0", "--runs", "1"]
    for extra in ([], ["--isolate"]):
        out = subprocess.run(base + ["--policy", "clicrash > buddy"] + extra,
                             capture_output=True, text=True, env=env, timeout=300)
        assert out.returncode == 1, out.stderr
        assert "SIGSEGV in plugin layer clicrash" in out.stderr
        assert "Traceback" not in out.stderr
    out = subprocess.run(base + ["--policy", "buddy", "--isolate", "--json",
                                 str(tmp_path / "r.json")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    res = al.Result.from_json(str(tmp_path / "r.json"))
    assert res.metadata["run"]["isolate"] is True


def _children(pid):
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def test_ctrl_c_ends_the_isolated_child(tmp_path):
    """SIGINT to the parent alone (a notebook's interrupt) ends the run and
    its child process at once: no orphan keeps running the 30 s run."""
    import signal
    import time

    script = ("import alloclab as al\n"
              "try:\n"
              "    al.run('malloc-free', 'buddy', isolate=True, runs=1, warmup_cycles=0,\n"
              "           duration=30, watchdog=0)\n"
              "except KeyboardInterrupt:\n"
              "    print('interrupted', flush=True)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        kids = []
        while not kids and time.monotonic() < deadline and proc.poll() is None:
            kids = _children(proc.pid)  # the run's child process, once spawned
            time.sleep(0.02)
        assert kids, "no child process appeared"
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=20)
        assert time.monotonic() - t0 < 10
        assert "interrupted" in out
        for k in kids:  # reaped by the parent, not left to init
            assert not os.path.exists("/proc/%d" % k), "child %d outlived the run" % k
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_journal_resumes_whatever_isolate_says(tmp_path):
    from alloclab.sweep import sweep

    j = tmp_path / "j.jsonl"
    kw = dict(runs=1, cycles=3, warmup_cycles=0, journal=j)
    first = sweep("malloc-free", "buddy", isolate=False, **kw)
    again = sweep("malloc-free", "buddy", isolate=True, check=True, **kw)
    assert again.metadata["sweep"]["resumed_units"] == 1
    assert again.select()[0]["alloc_ops"][0] == first.select()[0]["alloc_ops"][0]


def test_parameter_values_take_the_syntax_of_a_spec(tmp_path):
    # a size schema written as "1M" as a spec would; a duration as "250ms"
    src = COUNTING.replace("counting", "specsyntax").replace("k->bias = params[0];",
                                                             "k->bias = params[0] >> 10;")
    plugin.compile("specsyntax", src, create="specsyntax_create", features=["backend", "usable",
                                                                           "owns"],
                   params=[("limit", "size", "1M", "4K", "1G", "bytes"),
                           ("wait", "ns", "250ms", 0, "1s", "a wait"),
                           ("zero", "bool", "false", 0, 1, "zeroes")])
    sch = {q["name"]: q for q in [d for d in al.policies() if d["name"] == "specsyntax"][0]
           ["params"]}
    assert (sch["limit"]["default"], sch["limit"]["min"], sch["limit"]["max"]) == \
        (1 << 20, 4 << 10, 1 << 30)
    assert (sch["wait"]["default"], sch["wait"]["max"]) == (250_000_000, 10**9)
    assert sch["zero"]["default"] is False
    assert str(al.Policy("specsyntax > buddy")) == "specsyntax > buddy"
    with al.Allocator("specsyntax(limit=2M) > buddy") as a:
        a.free(a.alloc(64))
        assert a.stats()[0]["bias"] == 2048  # 2M >> 10


@pytest.mark.parametrize("param, needle", [
    (("limit", "size", "1Q", 0, 10, "x"), r"'limit': default must be a size: 4096 or \"4K\""),
    (("n", "int", "3", 1, 9, "x"), r"'n': default must be an integer, not '3'"),
    (("b", "bool", "maybe", 0, 1, "x"), r"'b': default must be a bool"),
    (("t", "ns", 1.5, 0, 10, "x"), r"'t': default must be a duration in ns"),
])
def test_parameter_values_in_a_bad_syntax_are_named(param, needle):
    with pytest.raises(al.ParameterTypeError, match=needle):
        plugin.compile("badsyntax", COUNTING, create="counting_create", params=[param])


# ---- plugins that loop or hand out one object twice, under the preload shim ----

SPIN = os.path.join(ROOT, "tests", "preload", "plugins", "spin.c")
DUP = os.path.join(ROOT, "tests", "preload", "plugins", "dup.c")
PRELOAD = [sys.executable, "-m", "alloclab", "preload"]
STALLED = (r"alloclab: error: watchdog: a policy call made no progress for 1 s in pid (\d+) "
           r"\(stall\) \(policy spin > buddy\); the program was killed \(SIGKILL\)")


@pytest.fixture(scope="module")
def shim_env(tmp_path_factory):
    """The environment the preload tests run in: one plugin cache for all, so
    that each plugin's shim is built once."""
    return dict(os.environ, ALLOCLAB_CACHE=str(tmp_path_factory.mktemp("cache")))


@pytest.fixture(scope="module")
def stall(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("stall") / "stall")
    subprocess.check_call([shutil.which("cc"), "-O1", "-o", exe,
                           os.path.join(ROOT, "tests", "preload", "stall.c")])
    return exe


def _alive(pid):
    """pid is a process that has not ended (a zombie has)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("mode", ["self", "fork", "exec"])
def test_preload_watchdog_ends_a_policy_call_that_loops(mode, stall, shim_env, tmp_path):
    """A plugin's alloc that never returns, in the program, in a forked child
    or in an image it execs: the watchdog kills it and the program after 1 s
    without progress, says so in one line naming the pid and the policy, and
    exits 124; the stats, written first, say the same."""
    import re
    import time

    from alloclab import preload

    stats = tmp_path / "s.json"
    t0 = time.monotonic()
    out = subprocess.run(PRELOAD + ["--watchdog", "1", "--plugin", SPIN, "--policy",
                                    "spin > buddy", "--json", str(stats), "--", stall, mode],
                         capture_output=True, text=True, env=shim_env, timeout=300)
    took = time.monotonic() - t0
    assert out.returncode == preload.EXIT_STALLED == 124, out.stderr
    (line,) = [x for x in out.stderr.splitlines() if not x.startswith("alloclab: wrote ")]
    m = re.fullmatch(STALLED, line)
    assert m, line
    assert out.stdout == "start %s\n" % mode + ("start self\n" if mode == "exec" else "")
    st = preload.read_stats(str(stats))
    assert st["stalled"] == line[len("alloclab: error: "):]
    pid = int(m.group(1))
    if mode == "fork":  # the child is stuck, its parent waits: both ended
        assert pid != st["root"]
    else:
        assert pid == st["root"]
    assert not _alive(pid) and not _alive(st["root"])
    assert took < 120  # 1 s of watchdog, plus the plugin's build on the first run


def test_preload_watchdog_leaves_calls_that_progress_alone(stall, shim_env):
    """A second of allocations, each call short, under a 0.5 s watchdog: no
    false alarm (a call descheduled that long on a loaded machine would be
    one: the watchdog cannot tell it from a stuck call, so the bound is far
    above a call's time). --watchdog 0 turns it off; a bad value is one
    error line."""
    out = subprocess.run(PRELOAD + ["--watchdog", "0.5", "--plugin", SPIN, "--policy",
                                    "spin > buddy", "--", stall, "busy"],
                         capture_output=True, text=True, env=shim_env, timeout=300)
    assert out.returncode == 0 and out.stderr == "" and out.stdout == "start busy\n"
    for bad in ("-1", "nan", "inf", "1e-9"):
        out = subprocess.run(PRELOAD + ["--watchdog", bad, "--", "true"], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2, out.stderr
        (line,) = out.stderr.splitlines()
        assert line.startswith("alloclab: error: watchdog=") and "out of range" in line


def test_preload_run_raises_run_stalled(stall, shim_env, monkeypatch):
    from alloclab import preload

    monkeypatch.setenv("ALLOCLAB_CACHE", shim_env["ALLOCLAB_CACHE"])
    plugin.compile_file(SPIN)
    shim = plugin.preload_shim(SPIN)
    with pytest.raises(al.RunStalled) as e:
        preload.run("spin > buddy", [stall], shim=shim, watchdog=1, capture_output=True,
                    env=shim_env, timeout=120)
    assert e.value.pid == e.value.stats["root"] and e.value.proc.returncode == -9
    assert "no progress for 1 s in pid %d" % e.value.pid in str(e.value)
    with pytest.raises(al.ParameterTypeError):
        preload.run("buddy", ["true"], watchdog="30")


def test_preload_names_the_signal_that_ended_the_program(shim_env):
    """A plugin that hands one object out twice: python3 dies of a signal,
    and alloclab preload says which, in what process and on which policy, in
    one line, exiting 128 + N. A signal without a plugin is named too."""
    import signal

    env = dict(shim_env, PYTHONMALLOC="malloc")
    out = subprocess.run(PRELOAD + ["--plugin", DUP, "--policy", "dup > buddy", "--",
                                    sys.executable, "-c",
                                    "import json; print(len(json.dumps(list(range(10000)))))"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode > 128, (out.returncode, out.stderr)
    sig = signal.Signals(out.returncode - 128).name
    assert sig in ("SIGSEGV", "SIGBUS", "SIGABRT")
    (line,) = [x for x in out.stderr.splitlines() if x.startswith("alloclab:")]
    assert line.startswith("alloclab: error: pid ") and \
        "(python" in line and "was killed by %s on policy dup > buddy with plugin %s" % (
            sig, DUP) in line, line
    out = subprocess.run(PRELOAD + ["--policy", "buddy", "--", "sh", "-c", "kill -SEGV $$"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 128 + signal.SIGSEGV
    assert out.stderr.splitlines() == [
        "alloclab: error: pid %s (sh) was killed by SIGSEGV on policy buddy"
        % out.stderr.split()[3]]


def test_preload_watchdog_slots_of_ended_processes_are_taken_again(stall, shim_env):
    """More processes than the watch file has slots (256), one after the
    other: the slots of those that ended are taken again, and a stuck call
    in the last one is still caught."""
    import re

    out = subprocess.run(PRELOAD + ["--watchdog", "1", "--plugin", SPIN, "--policy",
                                    "spin > buddy", "--", "sh", "-c",
                                    "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done; "
                                    "exec %s" % stall],
                         capture_output=True, text=True, env=shim_env, timeout=300)
    assert out.returncode == 124, out.stderr
    (line,) = out.stderr.splitlines()
    assert re.fullmatch(STALLED, line), line
