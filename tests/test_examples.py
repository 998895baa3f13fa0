"""The example plugins and the layer of docs/plugins.md, built the documented ways.

examples/plugins/pool.c (a bottom layer) and lastfree.c (a front layer) are
written from docs/plugins.md alone; the skeleton layer shown in the document
itself is extracted and compiled too, so the page cannot drift from what
compiles. Each is built through alloclab.plugin and through the CLI's --plugin,
stacked over the other and over the built-ins, and its counters are checked
exactly: lastfree parks the first free of every cycle and serves the first
allocation of the next one from it.
"""
import os
import re
import subprocess
import sys

import pytest

import alloclab as al
from alloclab import plugin
from alloclab.result import Result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "plugins")
DOC = os.path.join(ROOT, "docs", "plugins.md")
POOL = os.path.join(EXAMPLES, "pool.c")
LASTFREE = os.path.join(EXAMPLES, "lastfree.c")
# The ceiling on each example's lines of C (not blank, not only a comment).
MAX_CODE_LINES = {"pool.c": 59, "lastfree.c": 59}  # under 60 lines of C each


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def examples(tmp_path_factory):
    os.environ.setdefault("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    return [plugin.compile_file(POOL)[0].name, plugin.compile_file(LASTFREE)[0].name]


def code_lines(path):
    """Lines of C: not blank, not a comment line (those of a block comment included)."""
    n, in_comment = 0, False
    with open(path) as f:
        for line in f:
            s = line.strip()
            if in_comment:
                in_comment = "*/" not in s
                continue
            if s.startswith("/*"):
                in_comment = "*/" not in s
                continue
            n += bool(s)
    return n


@pytest.mark.parametrize("name", sorted(MAX_CODE_LINES))
def test_example_stays_short(name):
    n = code_lines(os.path.join(EXAMPLES, name))
    assert 0 < n <= MAX_CODE_LINES[name], "%s has %d lines of C" % (name, n)


def test_examples_register_as_documented(examples):
    assert examples == ["pool", "lastfree"]
    layers = {d["name"]: d for d in al.policies()}
    assert layers["pool"]["max_size"] == 256
    assert str(al.Policy("lastfree > pool")) == "lastfree > pool"


@pytest.mark.parametrize("spec", ["pool", "lastfree > pool", "lastfree > buddy",
                                  "percpu > lastfree > buddy", "lastfree > percpu > pool"])
def test_examples_pass_the_contract_suite(examples, spec):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from test_allocator import test_every_stack_round_trip

    test_every_stack_round_trip(spec)


def test_pool_round_trip_and_errors(examples):
    with al.Allocator("pool", ncpu=2) as a:
        p = a.alloc(100, cpu=0)
        assert a.usable_size(p) == 256 and p % 16 == 0
        assert a.stats()[0]["bytes_held"] == 256
        a.free(p, cpu=1)  # to CPU 1's list: CPU 1 gets it back first
        assert a.alloc(8, cpu=1) == p
        with pytest.raises(al.InvalidArgument):
            a.free(p + 8)  # not the start of a slot
        with pytest.raises(al.InvalidArgument, match="257"):
            a.alloc(257)
        a.free(p)
        assert a.stats()[0]["bytes_held"] == 0


def test_lastfree_serves_the_parked_object(examples):
    with al.Allocator("lastfree > buddy", ncpu=1) as a:
        p = a.alloc(64)
        a.free(p)
        assert a.alloc(64) == p  # the parked object
        q = a.alloc(64)
        a.free(q)
        assert a.alloc(16) != q  # 64 usable bytes for 16: too big to hand out
        st = a.stats()[0]
        assert (st["hits"], st["parked"]) == (1, 2)


def expected(cycles, n):
    """lastfree over one worker: the first free of a cycle is parked, and the
    first allocation of the next cycle takes it back."""
    return {"lastfree.hits": cycles - 1, "lastfree.parked": cycles,
            # what reached the layer below: all but the hits; all frees but the parked
            "%s.allocs": cycles * n - (cycles - 1), "%s.frees": cycles * n - cycles}


@pytest.mark.parametrize("below, size, usable", [("pool", 200, 256), ("buddy", 64, 64)])
def test_lastfree_counters_in_a_run(examples, below, size, usable):
    res = al.run("malloc-free", "lastfree > " + below, runs=1, cycles=3, warmup_cycles=0,
                 allocs_per_cycle=16, size=size, isolate=False)
    p = res.select()[0]
    for k, v in expected(3, 16).items():
        if below == "buddy" or "%s" not in k:  # pool counts nothing itself
            assert p[k.replace("%s", below)][0] == v, k
    if below == "pool":  # the parked object is still out of the pool when the run is measured
        assert p["pool.bytes_held"][0] == 256


def test_examples_through_the_cli(tmp_path):
    out = tmp_path / "r.json"
    env = dict(os.environ, ALLOCLAB_CACHE=str(tmp_path / "cache"))
    cmd = [sys.executable, "-m", "alloclab", "run", "malloc-free", "--plugin", POOL,
           "--plugin", LASTFREE, "--policy", "lastfree > pool", "--policy", "lastfree > buddy",
           "--cycles", "3", "--warmup-cycles", "0", "--runs", "1", "--allocs-per-cycle", "16",
           "--size", "200", "--no-isolate", "--json", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    res = Result.from_json(str(out))
    over_pool = res.select(policy="lastfree > pool")[0]
    over_buddy = res.select(policy="lastfree > buddy")[0]
    for k, v in expected(3, 16).items():
        if "%s" not in k:
            assert over_pool[k][0] == v == over_buddy[k][0], k
        else:
            assert over_buddy[k.replace("%s", "buddy")][0] == v, k


def test_the_documented_skeleton_compiles_and_runs(tmp_path):
    with open(DOC) as f:
        blocks = re.findall(r"```c\n(.*?)```", f.read(), re.S)
    src = [b for b in blocks if "AL_COUNTED_LAYER(tap," in b]
    assert len(src) == 1, "docs/plugins.md lost its skeleton layer"
    path = tmp_path / "tap.c"
    path.write_text(src[0])
    assert plugin.compile_file(str(path))[0].name == "tap"
    with al.Allocator("tap > buddy", ncpu=1) as a:
        ptrs = [a.alloc(32) for _ in range(3)]
        for p in ptrs:
            a.free(p)
        assert a.stats()[0]["allocs"] == 3
        assert a.usable_size(a.alloc(32)) == 32


def test_a_layer_without_stats_is_refused_naming_the_entry(tmp_path):
    # AL_LAYER writes no stats(): a layer that forgets it is told which entry is missing
    path = tmp_path / "nostats.c"
    path.write_text("""#include <alloclab/alloclab.h>
struct nostats { struct al_allocator base; };
static void *ns_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{ return al_alloc(a->below, c, size, flags); }
AL_LAYER(nostats, struct nostats, NULL, NULL, (.alloc = ns_alloc, .free = al_below_free),
         (.doc = "forgets stats", .features = AL_F_BACKEND))
""")
    assert plugin.compile_file(str(path))[0].name == "nostats"
    with pytest.raises(al.AlloclabError, match=r"nostats: its ops table has no stats \(alloc, "
                       r"free, destroy and stats are required\)"):
        al.Allocator("nostats > buddy")
