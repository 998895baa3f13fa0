"""The preload shim on allocation-heavy threaded programs: wall time under
glibc and under the shim with each buddy-backed preset, and the ratio.

    python bench/preload_threads.py [--runs 5] [--scale 1.0] [--only churn2,sqlite3]
                                    [--policies libarena-transfer,buddy] [--counters]

Programs (the C ones are compiled here from the sources below, with the
system's cc; nothing is fetched):
  churn1, churn2, churn4  1, 2 or 4 threads, each replacing a random slot of
                          its own 64 with a new object of 16..256 bytes in a
                          tight loop (churn1 is the single-threaded loop)
  prodcons                one thread allocates 16..256 bytes and passes each
                          object through a lock-free ring to another that frees
  mt4x                    tests/preload/mt.c with 4x as many threads as CPUs
  python3                 bench/preload_slowdown.py's 4-thread script
  sqlite3                 its 30k inserts
  gcc                     gcc -O2 -c csrc/pages/pages.c
Repetitions are interleaved (every program under every policy once per
round), so a change of load hits all cells alike; the median of the rounds
and its ratio to glibc's are reported with the load average before and
after, in bench/results/preload_threads.{txt,json}. --counters runs each
program once more per policy with the shim's stats on and adds the shim's
counters and the layers' lock counts (acquisitions, contended ones, owner
switches), summed over the program's processes, to explain the ratios.
Numbers taken while other work runs on the machine are labelled by the load
average printed beside them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from alloclab import preload

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from preload_slowdown import SCRIPT, SQL  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ["libarena-transfer", "libarena-spill", "libarena-magazine", "buddy"]
GOALS = {"churn1": 1.3, "churn2": 2.0, "churn4": 2.0, "prodcons": 2.0, "mt4x": 1.5,
         "python3": 1.2, "sqlite3": 1.1, "gcc": 1.1}

CHURN = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
static long iters;
static void *worker(void *arg)
{
	unsigned long s = (unsigned long)arg * 2654435761u + 1, sum = 0;
	unsigned char *slot[64] = { 0 };
	long i;
	for (i = 0; i < iters; i++) {
		unsigned k;
		s = s * 6364136223846793005ul + 1442695040888963407ul;
		k = (unsigned)(s >> 58);
		free(slot[k]);
		slot[k] = malloc(16 + (s >> 33) % 241);
		slot[k][0] = (unsigned char)i;
		sum += slot[k][0];
	}
	for (i = 0; i < 64; i++)
		free(slot[i]);
	return (void *)sum;
}
int main(int argc, char **argv)
{
	int n = atoi(argv[1]), i;
	pthread_t t[64];
	iters = atol(argv[2]);
	for (i = 0; i < n; i++)
		pthread_create(&t[i], NULL, worker, (void *)(long)i);
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}
"""

PRODCONS = r"""
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#define RING 1024
static void *ring[RING];
static unsigned long head, tail; /* head: producer's, tail: consumer's */
static long iters;
static void *producer(void *arg)
{
	unsigned long s = 1;
	long i;
	(void)arg;
	for (i = 0; i < iters; i++) {
		unsigned char *p;
		s = s * 6364136223846793005ul + 1442695040888963407ul;
		p = malloc(16 + (s >> 33) % 241);
		p[0] = (unsigned char)i;
		while (head - __atomic_load_n(&tail, __ATOMIC_ACQUIRE) == RING)
			sched_yield();
		ring[head % RING] = p;
		__atomic_store_n(&head, head + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}
static void *consumer(void *arg)
{
	long i;
	(void)arg;
	for (i = 0; i < iters; i++) {
		while (__atomic_load_n(&head, __ATOMIC_ACQUIRE) == tail)
			sched_yield();
		free(ring[tail % RING]);
		__atomic_store_n(&tail, tail + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}
int main(int argc, char **argv)
{
	pthread_t a, b;
	(void)argc;
	iters = atol(argv[1]);
	pthread_create(&a, NULL, producer, NULL);
	pthread_create(&b, NULL, consumer, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	return 0;
}
"""


def build(tmp):
    """Compile the C programs into tmp; {name: path}."""
    out = {}
    for name, src in (("churn", CHURN), ("prodcons", PRODCONS)):
        c = os.path.join(tmp, name + ".c")
        with open(c, "w") as f:
            f.write(src)
        out[name] = os.path.join(tmp, name)
        subprocess.run(["cc", "-O2", "-pthread", "-o", out[name], c], check=True)
    out["mt"] = os.path.join(tmp, "mt")
    subprocess.run(["cc", "-O2", "-pthread", "-o", out["mt"],
                    os.path.join(ROOT, "tests", "preload", "mt.c")], check=True)
    return out


def programs(exe, tmp, scale):
    """{name: (argv, stdin)} at the given scale of work."""
    n = lambda k: str(max(1, int(k * scale)))  # noqa: E731
    return {
        "churn1": ([exe["churn"], "1", n(20e6)], None),
        "churn2": ([exe["churn"], "2", n(10e6)], None),
        "churn4": ([exe["churn"], "4", n(5e6)], None),
        "prodcons": ([exe["prodcons"], n(5e6)], None),
        "mt4x": ([exe["mt"], str(4 * (os.cpu_count() or 1))], None),
        "python3": ([sys.executable, "-c", SCRIPT], None),
        "sqlite3": (["sqlite3", os.path.join(tmp, "db")], SQL),
        "gcc": (["gcc", "-O2", "-I" + os.path.join(ROOT, "csrc", "include"), "-c",
                 os.path.join(ROOT, "csrc", "pages", "pages.c"), "-o",
                 os.path.join(tmp, "pages.o")], None),
    }


def timed(argv, env, stdin, tmp):
    db = os.path.join(tmp, "db")
    if os.path.exists(db):
        os.remove(db)
    t = time.perf_counter()
    subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, check=True)
    return time.perf_counter() - t


def env_for(pol, argv, base, stats=None):
    if pol == "glibc":
        return argv, base
    return preload.command(pol, argv, env=base, stats=stats)


def counters(progs, pols, base, tmp):
    """Per program and policy, the shim's counters per policy allocation and
    the layers' lock counts (from one run with stats on)."""
    out = {}
    for prog, (argv, stdin) in progs.items():
        for pol in pols:
            d = tempfile.mkdtemp(dir=tmp)
            cmd, env = env_for(pol, argv, base, stats=d)
            timed(cmd, env, stdin, tmp)
            recs = preload.records(d)
            shim, locks = {}, {}
            for r in recs:
                for k, v in r.get("shim", {}).items():
                    shim[k] = shim.get(k, 0) + v
                for lay in r.get("layers", []):
                    for k, v in lay.items():
                        if k.endswith(("_acquired", "_contended", "_owner_switches")):
                            key = lay["layer"] + "." + k
                            locks[key] = locks.get(key, 0) + v
            out[prog + " " + pol] = {"shim": shim, "locks": locks}
    return out


def report(res, load, lines):
    lines.append("load average before: %s  after: %s" % (load[0], load[1]))
    lines.append("%-10s %-18s %9s %8s %6s" % ("program", "policy", "median s", "vs glibc",
                                               "goal"))
    for prog, cells in res.items():
        g = statistics.median(cells["glibc"])
        for pol, ts in cells.items():
            m = statistics.median(ts)
            goal = "" if pol == "glibc" or pol == "buddy" else "%.1fx" % GOALS[prog]
            lines.append("%-10s %-18s %9.3f %7.2fx %6s" % (prog, pol, m, m / g, goal))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0, help="work per C program (1.0: ~1 s)")
    ap.add_argument("--only", help="comma-separated programs (default all)")
    ap.add_argument("--policies", help="comma-separated presets (default %s)" % ",".join(POLICIES))
    ap.add_argument("--counters", action="store_true", help="also one run each with stats on")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "preload_threads"))
    a = ap.parse_args()
    pols = a.policies.split(",") if a.policies else POLICIES
    base = dict(os.environ, PYTHONMALLOC="malloc")
    with tempfile.TemporaryDirectory() as tmp:
        progs = programs(build(tmp), tmp, a.scale)
        if a.only:
            unknown = set(a.only.split(",")) - set(progs)
            if unknown:
                ap.error("unknown programs %s; valid: %s" % (sorted(unknown), ", ".join(progs)))
            progs = {k: v for k, v in progs.items() if k in a.only.split(",")}
        load = [" ".join(open("/proc/loadavg").read().split()[:3])]
        res = {p: {pol: [] for pol in ["glibc"] + pols} for p in progs}
        for _ in range(a.runs):
            for prog, (argv, stdin) in progs.items():
                for pol in ["glibc"] + pols:
                    cmd, env = env_for(pol, argv, base)
                    res[prog][pol].append(timed(cmd, env, stdin, tmp))
        load.append(" ".join(open("/proc/loadavg").read().split()[:3]))
        lines = ["runs %d, scale %g, %d CPUs" % (a.runs, a.scale, os.cpu_count() or 1)]
        report(res, load, lines)
        ctrs = counters(progs, pols, base, tmp) if a.counters else None
    if ctrs:
        for cell, c in ctrs.items():
            lines.append("%s: shim %s; locks %s" % (cell, c["shim"], c["locks"]))
    print("\n".join(lines))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out + ".txt", "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.out + ".json", "w") as f:
        json.dump({"runs": a.runs, "scale": a.scale, "load": load, "times": res,
                   "counters": ctrs}, f, indent=1)


if __name__ == "__main__":
    main()
