"""Real programs as workloads, end to end: record four programs, replay each
trace on every preset the shim can run and on the four peers, and say what
each replay did.

    python bench/replay_programs.py [--runs 1] [--out DIR]

Programs: python3 running bench/preload_slowdown.py's 4-thread script
(PYTHONMALLOC=malloc, so that every object is a malloc call), the
sqlite3 batch, `gcc -O2 -c csrc/pages/pages.c` (cc1's image is replayed:
the image with the most ops of the recording) and tests/preload/xstress.c
(4 threads handing objects to each other: cross-thread frees), compiled
here. Per trace: its threads, ops, cross-thread refs and unknown frees;
per policy: whether the replay ran, the ops the policy refused (a size or
alignment the model does not serve: counted, not an error), and alloc/free
ns per op (the mean of --runs; one replay pass each, timed per run of one
op kind, so the clock is part of each figure: compare within a trace).
Exit status 1 when any replay failed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

import alloclab as al
from alloclab import peers, preload
from alloclab.trace import load

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_overhead import programs  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shim_presets():
    ok = []
    for name in al.presets:
        try:
            preload.check(name)
        except al.AlloclabError:
            continue
        ok.append(name)
    return ok


def record_all(tmp):
    progs = programs(tmp)
    exe = os.path.join(tmp, "xstress")
    subprocess.run(["gcc", "-O2", "-pthread", "-o", exe,
                    os.path.join(ROOT, "tests", "preload", "xstress.c")], check=True)
    progs["xstress (4 threads, cross-thread frees)"] = ([exe], None)
    traces = {}
    for name, (argv, stdin) in progs.items():
        rec = al.record(argv, os.path.join(tmp, name.split()[0] + ".altrace"), input=stdin,
                        env=dict(os.environ, PYTHONMALLOC="malloc"), capture_output=True,
                        text=True)
        if rec.returncode:
            raise SystemExit("%s exited with %d under record" % (name, rec.returncode))
        traces[name] = max(rec.images, key=lambda im: im["ops"])["path"]
    return traces


def replay(path, policy, runs):
    try:
        res = al.run("replay", policy, trace=path, runs=runs)
    except al.AlloclabError as e:
        return "FAILED: %s" % e
    p = res.points[0]
    return "ok  refused %6d  alloc %6.1f ns  free %6.1f ns" % (
        np.mean(p.data["wl.refused"]), np.mean(p.data["alloc_ns"]), np.mean(p.data["free_ns"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--out", help="keep the traces in this directory")
    args = ap.parse_args()
    tmp = args.out or tempfile.mkdtemp(prefix="alloclab-replay-programs-")
    os.makedirs(tmp, exist_ok=True)
    failed = 0
    try:
        traces = record_all(tmp)
        pols = shim_presets() + [p for p in peers.NAMES if peers.available(p)]
        for name, path in traces.items():
            t = load(path)
            print("%s: %d threads, %d ops, %d cross-thread refs, %d unknown frees" % (
                name, t.nthreads, t.nops, t._t.cross_refs, t._t.unknown_refs))
            t.close()
            for pol in pols:
                line = replay(path, pol, args.runs)
                failed += line.startswith("FAILED")
                print("  %-22s %s" % (pol, line))
    finally:
        if not args.out:
            shutil.rmtree(tmp, ignore_errors=True)
    missing = [p for p in peers.NAMES if not peers.available(p)]
    if missing:
        print("peers not installed (not replayed): %s" % ", ".join(missing))
    print("%d replays failed" % failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
