"""The real code under the preload shim: `alloclab preload --policy
'libarena(tree=DIR)' -- CMD` runs CMD's malloc on the tree's own allocator,
compiled into a shim of its own.

Runs everywhere on examples/bpf_tree, and on the kernel's libarena where the
unmodified copy is found ($ALLOCLAB_TEST_LIBARENA, else
../shared/reference/libarena beside the clone)."""
import json
import os
import subprocess
import sys
import sysconfig

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

# malloc N objects of SIZE, free them, and say what the allocator gave:
# the usable size of one object and its offset in a 4 GiB-aligned arena.
PROGRAM = r"""
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
	int n = atoi(argv[1]), i;
	size_t size = (size_t)atol(argv[2]);
	void **p = calloc((size_t)n, sizeof(void *));
	void *one;

	for (i = 0; i < n; i++)
		p[i] = malloc(size);
	for (i = 0; i < n; i++)
		free(p[i]);
	free(p);
	one = malloc(size);
	printf("usable %zu offset %llu\n", malloc_usable_size(one),
	       (unsigned long long)((uintptr_t)one & 0xffffffffull));
	free(one);
	return 0;
}
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """One build cache for the module's tests, not the user's."""
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    d = tmp_path_factory.mktemp("prog")
    src, exe = d / "prog.c", d / "prog"
    src.write_text(PROGRAM)
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()
    subprocess.run(cc + [str(src), "-O1", "-o", str(exe)], check=True)
    return str(exe)


def _preload(policy, cmd, tmp_path, env=None):
    out = tmp_path / "stats.json"
    proc = subprocess.run([sys.executable, "-m", "alloclab", "preload", "--json", str(out),
                           "--policy", policy, "--"] + cmd, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, **(env or {})))
    st = json.loads(out.read_text()) if out.exists() else None
    return proc, st


def _layer(st, prefix="libarena"):
    return [la for la in st["layers"] if la["layer"].startswith(prefix)][0]


def test_example_tree_serves_a_c_program(program, tmp_path):
    proc, st = _preload("libarena(tree=%s)" % EXAMPLE, [program, "1000", "64"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    # the example's class of 64 B, and its window at arena offset 1 << 28
    assert proc.stdout.split()[:2] == ["usable", "64"]
    assert int(proc.stdout.split()[3]) >= 1 << 28
    rec = st["processes"][0]
    assert rec["state"] == "ready" and rec["served"] == 1.0
    sh, la = rec["shim"], _layer(rec)
    assert sh["policy_allocs"] >= 1002 and sh["policy_frees"] >= 1001
    # the tree's own lock, once per alloc and once per free, and nothing left behind
    assert la["lock_acquired"] == sh["policy_allocs"] + sh["policy_frees"]
    assert la["lock_failed"] == 0 and la["loop_exhausted"] == 0 and la["printk"] == 0


def test_example_tree_under_the_models_caches_in_threads_and_forks(tmp_path):
    code = ("import os, threading\n"
            "def work():\n"
            "    x = []\n"
            "    for i in range(20000):\n"
            "        x.append(str(i) * 3)\n"
            "        x = x[-64:]\n"
            "ts = [threading.Thread(target=work) for _ in range(3)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    work(); os._exit(0)\n"
            "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    proc, st = _preload("percpu > transfer > libarena(tree=%s)" % EXAMPLE,
                        [sys.executable, "-c", code], tmp_path, env={"PYTHONMALLOC": "malloc"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "0"
    assert len(st["processes"]) == 2 and all(r["served"] == 1.0 for r in st["processes"])
    assert st["shim"]["forks"] == 1
    la = _layer(st)
    assert la["lock_acquired"] > 0 and la["lock_failed"] == 0


def test_a_bad_tree_is_one_error_before_the_program_runs(tmp_path):
    marker = tmp_path / "ran"
    proc, st = _preload("libarena(tree=%s)" % tmp_path, ["touch", str(marker)], tmp_path)
    assert proc.returncode == 2 and st is None and not marker.exists()
    assert proc.stderr.startswith("alloclab: error:") and "not a libarena tree" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_shim_is_built_once_per_set_of_layers():
    name = lr.load(EXAMPLE)
    a = lr.preload_shim([name])
    assert lr.preload_shim([name]) == a and os.path.isfile(a)
    argv, env = al.preload.command("libarena(tree=%s)" % EXAMPLE, ["true"])
    assert env["LD_PRELOAD"].split()[0] == a and env["ALLOCLAB_POLICY"] == name


def test_a_plugin_shim_and_a_tree_are_refused_together():
    with pytest.raises(al.InvalidArgument, match="cannot be combined"):
        al.preload.command("libarena(tree=%s)" % EXAMPLE, ["true"], shim="/nonexistent.so")


@needs_reference
def test_the_kernels_buddy_serves_python(tmp_path):
    code = "import json; print(sum(len(json.dumps({'k': i})) for i in range(20000)))"
    proc, st = _preload("libarena(tree=%s)" % REFERENCE, [sys.executable, "-c", code], tmp_path,
                        env={"PYTHONMALLOC": "malloc"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "228890"
    rec = st["processes"][0]
    assert rec["state"] == "ready" and rec["served"] == 1.0
    assert rec["shim"]["policy_allocs"] > 20000
    la = _layer(rec)
    assert la["lock_failed"] == 0 and la["loop_exhausted"] == 0 and la["printk"] == 0


@needs_reference
def test_the_kernels_buddy_block_sizes_under_the_shim(program, tmp_path):
    proc, st = _preload("libarena(tree=%s)" % REFERENCE, [program, "100", "17"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == ["usable", "32"]  # 17 B: a 32-byte block
    rec = st["processes"][0]
    la = _layer(rec)
    # one per alloc and per free, and buddy_init's two (its first chunk, then the list)
    assert la["lock_acquired"] == rec["shim"]["policy_allocs"] + rec["shim"]["policy_frees"] + 2
