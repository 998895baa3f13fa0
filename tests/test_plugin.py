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
static size_t c_usable(struct al_allocator *a, const void *p)
{
	return a->below->ops->usable_size(a->below, p);
}
static bool c_owns(struct al_allocator *a, const void *p)
{
	return a->below->ops->owns && a->below->ops->owns(a->below, p);
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
static const struct al_ops ops = { .abi_version = AL_ABI_VERSION,
	.ops_size = sizeof(struct al_ops), .name = "counting", .alloc = c_alloc, .free = c_free,
	.usable_size = c_usable, .owns = c_owns, .stats = c_stats, .destroy = c_destroy };
static int counting_create(const struct al_layer_desc *d, const int64_t *params,
			   struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct counting *k = al_meta_alloc(sizeof(*k));
	if (!k)
		return -ENOMEM;
	al_counters_init(&k->ctr, C_NR, names, ncpu);
	k->bias = params[0];
	k->base.ops = &ops;
	k->base.desc = d;
	k->base.below = below;
	*out = &k->base;
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
#define DESC(var, nm) static const struct al_layer_desc var = { .abi_version = AL_ABI_VERSION, \
	.desc_size = sizeof(struct al_layer_desc), .name = nm, .doc = "external", \
	.features = AL_F_BACKEND | AL_F_USABLE | AL_F_OWNS, .nparams = 0, .create = ext_create }
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
                          "--policy", "halfspill > buddy", "--stats", str(stats), "--",
                          str(prog)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    from alloclab import preload
    st = preload.read_stats(str(stats))
    assert st["state"] == "ready" and st["layers"][0]["layer"] == "halfspill"
    assert st["layers"][0]["hits"] > 0 and st["layers"][0]["bytes_held"] == 0
