"""Plugin cost: the built-in percpu layer compiled again as a
plugin (the same source, renamed), against the built-in, on the cache-hit
fast path (malloc-free, 1 producer, size 64, 16 allocs/cycle) in one
interleaved run; and the compile-and-register time of a plugin (cold: no
cache; warm: the cached module).

    python bench/plugin_cost.py [--runs 9]   (from a source checkout)
"""
import argparse
import os
import re
import tempfile
import time

import alloclab as al
from alloclab import plugin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percpu_as_plugin():
    pol = os.path.join(ROOT, "csrc", "policies")
    src = open(os.path.join(pol, "percpu.c")).read()
    fc = open(os.path.join(pol, "frontcache.h")).read()
    src = src.replace('#include "frontcache.h"', fc)
    src = re.sub(r'\.name = "percpu"', '.name = "percpu_plugin"', src)
    return src


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--duration", type=float, default=0.2)
    a = ap.parse_args()
    src = percpu_as_plugin()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["ALLOCLAB_CACHE"] = tmp
        t = time.perf_counter()
        p = plugin.compile("percpu_plugin", src)
        cold = time.perf_counter() - t
    hs = os.path.join(ROOT, "examples", "plugins", "halfspill.c")
    plugin.compile_file(hs)
    t = time.perf_counter()
    plugin.compile_file(hs)  # same process, same source: returns the loaded plugin
    warm = time.perf_counter() - t
    # In this process, unchecked: the cost of a native call through the ops table is
    # the figure (pointer checks would add a lock per operation; the module's cache
    # directory is gone, so a child could not load it anyway).
    res = al.run("malloc-free", ["percpu > buddy", "percpu_plugin > buddy"], size=64,
                 allocs_per_cycle=16, producers=1, runs=a.runs, duration=a.duration,
                 isolate=False)
    print("compile and register percpu as a plugin (cold cache): %.2f s (%s)" % (
        cold, p.module_path))
    print("compile_file of an already loaded plugin: %.4f s" % warm)
    print("malloc-free, 1 producer, size 64, 16 allocs/cycle, %d runs (ns/op, mean ± sd):"
          % a.runs)
    for spec in ("percpu > buddy", "percpu_plugin > buddy"):
        q = res.select(policy=spec)[0]
        print("  %-24s alloc %6.2f ± %.2f   free %6.2f ± %.2f" % (
            spec, q["alloc_ns"].mean(), q["alloc_ns"].std(ddof=1), q["free_ns"].mean(),
            q["free_ns"].std(ddof=1)))


if __name__ == "__main__":
    main()
