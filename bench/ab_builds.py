"""Two builds of alloclab, one interleaved benchmark: did a change move the
fast path or the harness floor?

Builds the base revision named by --base and the working tree with pip, as
users install them, into separate directories, then measures the cells of
bench/fastpath.py (malloc-free, size 64, 16 allocs/cycle, 1 producer) and
bench/floor.py (`null` at 1, 16, 64 and 256 allocs/cycle, batch and
per_op_sum timing) with one long-lived measuring process per build. The two
processes take turns, one round of every cell (one short run each) at a time,
in an order that alternates, so the machine's drift falls on both alike. A
process's memory layout is fixed for its life and differs from the next one's,
so this is repeated with --pairs fresh pairs of processes: the paired
log-ratios new/base are averaged per pair, and the 95% t interval is taken
over the pairs, which keeps the process-to-process variation in it.

Verdict per cell: "within +-3%" when the whole 95% interval lies inside
[0.97, 1.03], "OUTSIDE" when it lies wholly beyond either bound, otherwise
"inconclusive" (the interval straddles a bound: noise, not a finding).

    python bench/ab_builds.py --base 83472e9 [--pairs 4] [--rounds 15] [--duration 0.05]

--suite scaling measures buddy, libarena-spill and libarena-transfer at 256
allocs/cycle with 2 pinned producers instead: where the lock's bookkeeping
(its shared statistics line, clock reads in the critical section, yields)
shows, e.g. against the revision before the per-CPU lock counts:

    python bench/ab_builds.py --base 34784bb --suite scaling --out bench/results/ab_scaling.json

Either side may be built with extra compiler flags (--base-cflags,
--new-cflags; appended to csrc/CFLAGS as setup.py's CFLAGS), and --base
WORKTREE builds the working tree as the base too. What counting costs
altogether, the default stats level against counters compiled out:

    python bench/ab_builds.py --base WORKTREE --new-cflags=-DAL_STATS_COMPILED=0

A side with extra flags is built from a fresh copy of its sources, since
setup.py reuses objects whose sources did not change whatever CFLAGS says.

Writes bench/results/ab_builds.json and prints the table with the load average.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import numpy as np
from scipy import stats as sst

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FASTPATH = [
    "percpu(guard=atomic) > buddy",
    "percpu(guard=local) > buddy",
    "percpu(guard=atomic) > transfer > buddy",
    "percpu(guard=local) > transfer > buddy",
    "magazine(guard=local) > buddy",
    "libc",
    "null",
]

WORKER = r"""
import json, sys
import numpy as np
import alloclab as al
duration = float(sys.argv[1])
suite = sys.argv[2]
fastpath = %(fastpath)r

def scaling():
    # the lock's handoff cells: 2 pinned producers, 256 allocs/cycle
    out = {}
    res = al.run("malloc-free", ["buddy", "libarena-spill", "libarena-transfer"], size=64,
                 allocs_per_cycle=256, producers=2, cpu="pinned", runs=1, duration=duration,
                 timing="batch")
    for p in res.points:
        for m in ("alloc_ns", "free_ns"):
            out["2 producers | %%s | %%s" %% (p.params["policy"], m)] = float(p[m][0])
    return out

def measure():
    if suite == "scaling":
        return scaling()
    out = {}
    fp = al.run("malloc-free", fastpath, size=64, allocs_per_cycle=16, producers=1,
                runs=1, duration=duration, timing="batch")
    for p in fp.points:
        for m in ("alloc_ns", "free_ns"):
            out["fastpath | %%s | %%s" %% (p.params["policy"], m)] = float(p[m][0])
    fl = al.run("malloc-free", "null", allocs_per_cycle=[1, 16, 64, 256],
                timing=["batch", "per_op_sum"], producers=1, runs=1, duration=duration)
    for p in fl.points:
        for m in ("alloc_ns", "free_ns"):
            out["floor | null %%d/cycle %%s | %%s" %% (p.params["allocs_per_cycle"],
                                                   p.params["timing"], m)] = float(p[m][0])
    return out

measure()  # warm: first-run effects fall on no round
for line in sys.stdin:
    print("AB-RESULT " + json.dumps(measure()), flush=True)
""" % {"fastpath": FASTPATH}


WORKTREE = "WORKTREE"  # --base value: the working tree as it is


def _fresh_copy(src_rev, dest):
    """A fresh copy of src_rev's sources (None: the working tree's tracked and
    untracked, not ignored, files) in dest, with no build outputs in it."""
    if os.path.isdir(dest):
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", dest],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(dest, ignore_errors=True)
    if src_rev is not None:
        subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", dest, src_rev],
                       check=True, stdout=subprocess.DEVNULL)
        return dest
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"],
                           check=True, capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if os.path.isfile(os.path.join(ROOT, f)):
            os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
            shutil.copy2(os.path.join(ROOT, f), os.path.join(dest, f))
    return dest


def build(src_rev, dest, cflags=""):
    """src_rev (None: the working tree as it is) built by pip, as users install it,
    into dest/site, with ``cflags`` appended to the library's flags; returns the
    directory to put on PYTHONPATH."""
    src = ROOT
    if cflags:
        src = _fresh_copy(src_rev, dest + "-src")
    elif src_rev is not None:
        src = dest + "-src"
        if not os.path.isdir(src):
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", src, src_rev],
                           check=True, stdout=subprocess.DEVNULL)
    site = os.path.join(dest, "site")
    shutil.rmtree(site, ignore_errors=True)
    env = dict(os.environ, CFLAGS=" ".join(shlex.split(os.environ.get("CFLAGS", "")) +
                                           shlex.split(cflags)))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade",
                    "--target", site, src], check=True, stdout=subprocess.DEVNULL, env=env)
    return site


class Worker:
    """One build's long-lived measuring process: each request is one round of
    every cell (one run each), so the two builds can alternate every second
    or so and the machine's drift falls on both alike."""

    def __init__(self, tree, duration, suite="fastpath"):
        # one BLAS thread on both sides (older builds do not set it themselves)
        env = dict(os.environ, PYTHONPATH=tree, OPENBLAS_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, str(duration), suite],
                                     env=env,
                                     cwd=tempfile.gettempdir(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def measure(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("AB-RESULT "):
                return json.loads(line[len("AB-RESULT "):])
        raise RuntimeError("the measuring process ended (exit %s)" % self.proc.wait())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def verdict(lo, hi, margin):
    if lo >= 1 - margin and hi <= 1 + margin:
        return "within +-%g%%" % (margin * 100)
    if hi < 1 - margin or lo > 1 + margin:
        return "OUTSIDE"
    return "inconclusive"


def summarise(base, new, pair_of, margin):
    """Per cell: the paired log-ratios of each round, averaged per pair of
    processes (their memory layout is fixed for their life), and a t interval
    over those pairs: the process-to-process variation is in it."""
    rows = []
    pairs = sorted(set(pair_of))
    for cell in base[0]:
        lr = np.log([n[cell] / b[cell] for b, n in zip(base, new)])
        per_pair = np.array([lr[[i for i, q in enumerate(pair_of) if q == p]].mean()
                             for p in pairs])
        k = len(per_pair)
        m, se = per_pair.mean(), per_pair.std(ddof=1) / np.sqrt(k)
        t = sst.t.ppf(0.975, k - 1)
        lo, hi = np.exp(m - t * se), np.exp(m + t * se)
        rows.append(dict(cell=cell, base=float(np.median([b[cell] for b in base])),
                         new=float(np.median([n[cell] for n in new])), ratio=float(np.exp(m)),
                         lo=float(lo), hi=float(hi), verdict=verdict(lo, hi, margin),
                         per_pair=[float(np.exp(x)) for x in per_pair]))
    return rows


def measure(base_tree, new_tree, a):
    """a.pairs pairs of measuring processes, a.rounds alternating rounds each."""
    base, new, pair_of = [], [], []
    for pair in range(a.pairs):
        workers = {"base": Worker(base_tree, a.duration, a.suite),
                   "new": Worker(new_tree, a.duration, a.suite)}
        for i in range(a.rounds):
            order = ["base", "new"] if (i + pair) % 2 == 0 else ["new", "base"]
            got = {side: workers[side].measure() for side in order}
            base.append(got["base"])
            new.append(got["new"])
            pair_of.append(pair)
        for w in workers.values():
            w.close()
        print("process pair %d/%d done" % (pair + 1, a.pairs), file=sys.stderr)
    return base, new, pair_of


def report(rows, a, head, load0, load1):
    print("base %s%s vs new %s (working tree)%s: %d process pairs x %d alternating rounds, "
          "one %.2f s run per cell and round; ratio new/base, 95%% t interval over the pairs"
          % (a.base, " CFLAGS+=%s" % a.base_cflags if a.base_cflags else "", head,
             " CFLAGS+=%s" % a.new_cflags if a.new_cflags else "", a.pairs, a.rounds,
             a.duration))
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load0 + load1))
    print("  %-62s %8s %8s %7s  %-17s %s" % ("cell (median ns/op)", "base", "new", "ratio",
                                             "95% CI", ""))
    for r in rows:
        print("  %-62s %8.2f %8.2f %7.3f  [%.3f, %.3f]  %s" % (
            r["cell"], r["base"], r["new"], r["ratio"], r["lo"], r["hi"], r["verdict"]))
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    print("verdicts:", ", ".join("%s: %d" % kv for kv in sorted(counts.items())))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True,
                    help="git revision of the 'before' build, or WORKTREE (the working tree)")
    ap.add_argument("--base-cflags", default="", metavar="FLAGS",
                    help="extra compiler flags of the base build")
    ap.add_argument("--new-cflags", default="", metavar="FLAGS",
                    help="extra compiler flags of the new build (the working tree), e.g. "
                         "-DAL_STATS_COMPILED=0")
    ap.add_argument("--suite", default="fastpath", choices=["fastpath", "scaling"],
                    help="fastpath: the 1-producer fast path and the floor; scaling: buddy, "
                         "spill and transfer with 2 pinned producers (the lock's handoffs)")
    ap.add_argument("--pairs", type=int, default=4, help="pairs of measuring processes")
    ap.add_argument("--rounds", type=int, default=15, help="alternating rounds per pair")
    ap.add_argument("--duration", type=float, default=0.05)
    ap.add_argument("--margin", type=float, default=0.03)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "ab_builds.json"))
    a = ap.parse_args()

    tmp = tempfile.gettempdir()
    if a.base == WORKTREE and a.base_cflags == a.new_cflags:
        ap.error("the two sides would be the same build: give --base REV, or different "
                 "--base-cflags/--new-cflags")
    base_rev = None if a.base == WORKTREE else a.base
    # one directory per revision: a worktree left by another base is never reused
    base_tree = build(base_rev, os.path.join(tmp, "alloclab-ab-base-%s" % (base_rev or "worktree")),
                      a.base_cflags)
    new_tree = build(None, os.path.join(tmp, "alloclab-ab-new"), a.new_cflags)
    load0 = os.getloadavg()
    base, new, pair_of = measure(base_tree, new_tree, a)
    load1 = os.getloadavg()
    rows = summarise(base, new, pair_of, a.margin)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    report(rows, a, head, load0, load1)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        cells = list(base[0])  # raw values: one row per round, in the order of cells
        json.dump(dict(base=a.base, new=head, base_cflags=a.base_cflags,
                       new_cflags=a.new_cflags, pairs=a.pairs, rounds=a.rounds,
                       duration=a.duration, load_before=load0, load_after=load1, rows=rows,
                       cells=cells, pair_of=pair_of,
                       raw_base=[[round(r[c], 3) for c in cells] for r in base],
                       raw_new=[[round(r[c], 3) for c in cells] for r in new]),
                  f, separators=(",", ":"))
    print("written:", a.out)


if __name__ == "__main__":
    main()
