"""Recording overhead: wall time of real programs under `alloclab record`
against plain glibc, and the size of what they leave.

    python bench/record_overhead.py [--runs 5]

Programs: python3 running bench/preload_slowdown.py's 4-thread script
(PYTHONMALLOC=malloc, so every object is a malloc call), sqlite3 running
its batch of inserts, and `gcc -O2 -c csrc/pages/pages.c` (a driver that
runs cc1 and as: several process images). Per program three columns,
medians of --runs with the modes interleaved within each run (so a slow
moment of the machine hits all three alike):
  glibc     the program alone
  shim      under the recording shim (ALLOCLAB_RECORD): the recording's
            cost to the program, which the goal (<= 2x) is about
  record    the whole `alloclab.record`: the run, finalising every raw file
            and writing the traces compressed with --compress (zlib, the
            default, takes seconds on python3's 14 M ops; lzma minutes)
and, from the last run, the ops recorded (all images), raw bytes per op (the
shim's stream) and trace-file bytes per op (the codec, compressed; goal
<= 6).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import alloclab as al
from alloclab.record import command, finish
from alloclab.trace import COMPRESSORS, DEFAULT_COMPRESSOR

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_slowdown import SCRIPT, SQL  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def programs(tmp):
    out = {"python3 (4 threads)": ([sys.executable, "-c", SCRIPT], None),
           "sqlite3 (30k inserts)": (["sqlite3", os.path.join(tmp, "db")], SQL)}
    cc = shutil.which("gcc")
    if cc:
        out["gcc -O2 -c pages.c"] = ([cc, "-O2", "-I" + os.path.join(ROOT, "csrc", "include"),
                                      "-c", os.path.join(ROOT, "csrc", "pages", "pages.c"),
                                      "-o", os.path.join(tmp, "pages.o")], None)
    return {k: v for k, v in out.items() if shutil.which(v[0][0])}


def clean(tmp):
    for name in ("db", "pages.o"):
        if os.path.exists(os.path.join(tmp, name)):
            os.remove(os.path.join(tmp, name))


def timed(argv, env, stdin):
    t = time.perf_counter()
    subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, check=True)
    return time.perf_counter() - t


def shim_run(argv, env, stdin, tmp):
    """The program under the recording shim; (seconds, ops, raw bytes)."""
    raw = tempfile.mkdtemp(dir=tmp)
    try:
        cmd, renv = command(argv, raw, env=env)
        t = timed(cmd, renv, stdin)
        ops = nbytes = 0
        for name in os.listdir(raw):
            if name.startswith("raw."):
                trace, info = finish(os.path.join(raw, name))
                ops += info["ops"]
                nbytes += info["valid_bytes"]
                trace.close()
        return t, ops, nbytes
    finally:
        shutil.rmtree(raw, ignore_errors=True)


def full_run(argv, env, stdin, tmp, compress):
    """The whole alloclab.record; (seconds, trace-file bytes)."""
    out = os.path.join(tmp, "rec.trace")
    t = time.perf_counter()
    rec = al.record(argv, out, env=env, input=stdin, capture_output=True, text=True,
                    compress=compress)
    t = time.perf_counter() - t
    if rec.returncode:
        raise SystemExit("%s exited %d under record" % (argv[0], rec.returncode))
    size = sum(os.path.getsize(f) for f in rec.files if not f.endswith(".json"))
    for f in rec.files:
        os.remove(f)
    return t, size


def measure(argv, stdin, runs, tmp, compress):
    env = dict(os.environ, PYTHONMALLOC="malloc")
    times = {"glibc": [], "shim": [], "record": []}
    for _ in range(runs):
        clean(tmp)
        times["glibc"].append(timed(argv, env, stdin))
        clean(tmp)
        t, ops, raw = shim_run(argv, env, stdin, tmp)
        times["shim"].append(t)
        clean(tmp)
        t, size = full_run(argv, env, stdin, tmp, compress)
        times["record"].append(t)
    return {k: statistics.median(v) for k, v in times.items()}, ops, raw, size


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--compress", default=DEFAULT_COMPRESSOR, choices=COMPRESSORS,
                    help="the trace files' compressor (default %(default)s)")
    a = ap.parse_args()
    print("%-24s %9s %9s %7s %9s %7s %11s %8s %8s" % (
        "program", "glibc s", "shim s", "shim x", "record s", "rec x", "ops", "raw B/op",
        "file B/op"))
    with tempfile.TemporaryDirectory() as tmp:
        for name, (argv, stdin) in programs(tmp).items():
            med, ops, raw, size = measure(argv, stdin, a.runs, tmp, a.compress)
            g = med["glibc"]
            print("%-24s %9.3f %9.3f %6.2fx %9.3f %6.2fx %11d %8.2f %8.2f" % (
                name, g, med["shim"], med["shim"] / g, med["record"], med["record"] / g, ops,
                raw / max(ops, 1), size / max(ops, 1)))


if __name__ == "__main__":
    main()
