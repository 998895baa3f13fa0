"""Two builds of alloclab, one interleaved benchmark: did a change move the
fast path or the harness floor?

Builds the base revision named by --base and the working tree with pip, as
users install them, into separate directories, then runs the cells of bench/fastpath.py
(malloc-free, size 64, 16 allocs/cycle, 1 producer) and bench/floor.py (`null`
at 1, 16, 64 and 256 allocs/cycle, batch and per_op_sum timing) in rounds.
Each round runs one child process per build, in an order that alternates, so
that drift of the machine falls on both sides alike. Per cell and round the
child reports the median ns/op of its runs; the paired log-ratios
new/base over rounds give a t interval (95%), printed as a ratio.

Verdict per cell: "within +-3%" when the whole 95% interval lies inside
[0.97, 1.03], "outside" when it lies wholly beyond either bound, otherwise
"inconclusive" (the interval straddles a bound: noise, not a finding).

    python bench/ab_builds.py --base 83472e9 [--rounds 8] [--runs 3] [--duration 0.1]

Writes bench/results/ab_builds.json and prints the table with the load average.
"""
import argparse
import json
import os
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

CHILD = r"""
import json, sys
import numpy as np
import alloclab as al
runs, duration = int(sys.argv[1]), float(sys.argv[2])
out = {}
fp = al.run("malloc-free", %(fastpath)r, size=64, allocs_per_cycle=16, producers=1,
            runs=runs, duration=duration, timing="batch")
for p in fp.points:
    for m in ("alloc_ns", "free_ns"):
        out["fastpath | %%s | %%s" %% (p.params["policy"], m)] = float(np.median(p[m]))
fl = al.run("malloc-free", "null", allocs_per_cycle=[1, 16, 64, 256],
            timing=["batch", "per_op_sum"], producers=1, runs=runs, duration=duration)
for p in fl.points:
    for m in ("alloc_ns", "free_ns"):
        out["floor | null %%d/cycle %%s | %%s" %% (p.params["allocs_per_cycle"],
                                               p.params["timing"], m)] = float(np.median(p[m]))
print("AB-RESULT " + json.dumps(out))
""" % {"fastpath": FASTPATH}


def build(src_rev, dest):
    """src_rev (None: the working tree as it is) built by pip, as users install it,
    into dest/site; returns the directory to put on PYTHONPATH."""
    src = ROOT
    if src_rev is not None:
        src = dest + "-src"
        if not os.path.isdir(src):
            subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", src, src_rev],
                           check=True, stdout=subprocess.DEVNULL)
    site = os.path.join(dest, "site")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade",
                    "--target", site, src], check=True, stdout=subprocess.DEVNULL)
    return site


def child(tree, runs, duration):
    env = dict(os.environ, PYTHONPATH=tree)
    r = subprocess.run([sys.executable, "-c", CHILD, str(runs), str(duration)], env=env,
                       cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("AB-RESULT ")][-1]
    return json.loads(line[len("AB-RESULT "):])


def verdict(lo, hi, margin):
    if lo >= 1 - margin and hi <= 1 + margin:
        return "within +-%g%%" % (margin * 100)
    if hi < 1 - margin or lo > 1 + margin:
        return "OUTSIDE"
    return "inconclusive"


def summarise(base, new, margin):
    rows = []
    for cell in base[0]:
        lr = np.log([n[cell] / b[cell] for b, n in zip(base, new)])
        k = len(lr)
        m, se = lr.mean(), lr.std(ddof=1) / np.sqrt(k)
        t = sst.t.ppf(0.975, k - 1)
        lo, hi = np.exp(m - t * se), np.exp(m + t * se)
        rows.append(dict(cell=cell, base=float(np.median([b[cell] for b in base])),
                         new=float(np.median([n[cell] for n in new])), ratio=float(np.exp(m)),
                         lo=float(lo), hi=float(hi), verdict=verdict(lo, hi, margin)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="git revision of the 'before' build")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=0.1)
    ap.add_argument("--margin", type=float, default=0.03)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "ab_builds.json"))
    a = ap.parse_args()

    tmp = tempfile.gettempdir()
    base_tree = build(a.base, os.path.join(tmp, "alloclab-ab-base"))
    new_tree = build(None, os.path.join(tmp, "alloclab-ab-new"))
    base, new = [], []
    load0 = os.getloadavg()
    for i in range(a.rounds):
        order = [("base", base_tree), ("new", new_tree)]
        if i % 2:
            order.reverse()
        for side, tree in order:
            (base if side == "base" else new).append(child(tree, a.runs, a.duration))
        print("round %d/%d done" % (i + 1, a.rounds), file=sys.stderr)
    load1 = os.getloadavg()
    rows = summarise(base, new, a.margin)
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    print("base %s vs new %s (working tree), %d rounds x %d runs x %.2f s, paired "
          "log-ratio t interval (95%%)" % (a.base, head, a.rounds, a.runs, a.duration))
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f" % (load0 + load1))
    print("  %-62s %8s %8s %7s  %-17s %s" % ("cell", "base", "new", "ratio", "95% CI", ""))
    for r in rows:
        print("  %-62s %8.2f %8.2f %7.3f  [%.3f, %.3f]  %s" % (
            r["cell"], r["base"], r["new"], r["ratio"], r["lo"], r["hi"], r["verdict"]))
    counts = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    print("verdicts:", ", ".join("%s: %d" % kv for kv in sorted(counts.items())))
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(dict(base=a.base, new=head, rounds=a.rounds, runs=a.runs,
                       duration=a.duration, load_before=load0, load_after=load1, rows=rows,
                       raw_base=base, raw_new=new), f, indent=1)
    print("written:", a.out)


if __name__ == "__main__":
    main()
