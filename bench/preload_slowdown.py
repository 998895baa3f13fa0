"""Real programs under the preload shim: wall time of
python3 running a fixed multi-threaded script (PYTHONMALLOC=malloc) and of
sqlite3 running a fixed batch of inserts, under glibc and under each
buddy-backed preset; the slowdown against glibc (median of --runs).

    python bench/preload_slowdown.py [--runs 5]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import alloclab as al
from alloclab import preload

SCRIPT = """
import json, threading
def work(i):
    d = {}
    for k in range(60000):
        d[str(k) * (1 + k % 7)] = [k] * (k % 20)
    json.dumps(sorted(d.items()))
ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
"""
SQL = ("create table t(a, b); begin; " +
       "".join("insert into t values(%d, '%s'); " % (i, "x" * (i % 200)) for i in range(30000)) +
       "commit; create index i on t(b); select count(*) from t;")
POLICIES = ["libarena-spill", "libarena-transfer", "libarena-magazine", "buddy"]


def timed(argv, env, stdin=None):
    t = time.perf_counter()
    subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, check=True)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    base = dict(os.environ, PYTHONMALLOC="malloc")
    with tempfile.TemporaryDirectory() as tmp:
        progs = {
            "python3 (4 threads)": ([sys.executable, "-c", SCRIPT], None),
            "sqlite3 (30k inserts)": (["sqlite3", os.path.join(tmp, "db")], SQL),
        }
        print("%-24s %10s" % ("program / policy", "median s") + "%10s" % "vs glibc")
        for prog, (argv, stdin) in progs.items():
            def clean():
                if os.path.exists(os.path.join(tmp, "db")):
                    os.remove(os.path.join(tmp, "db"))
            times = {}
            for pol in ["glibc"] + POLICIES:
                ts = []
                for _ in range(a.runs):  # interleaving policies would be fairer; runs are short
                    clean()
                    if pol == "glibc":
                        ts.append(timed(argv, base, stdin))
                    else:
                        cmd, env = preload.command(pol, argv, env=base)
                        ts.append(timed(cmd, env, stdin))
                times[pol] = statistics.median(ts)
            for pol, t in times.items():
                print("%-24s %10.3f %9.2fx" % (prog + " " + pol if pol == "glibc" else
                                              "  " + pol, t, t / times["glibc"]))


if __name__ == "__main__":
    main()
