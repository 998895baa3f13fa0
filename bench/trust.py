"""How far the reproductions' verdicts can be trusted: each reproduction run
twice with its defaults (and once with --quick), as a user would from the
command line.

For each: the wall time of the command, the verdicts of both runs, how many
changed between holds and does not hold (goal 0), the share of claims that
latency on real CPUs or counters can decide that were decided (goal >= 80%
on a quiet machine), and, for the tutorial notebook's run() call with the
defaults, the largest CV over its cells.

    python bench/trust.py [--only libarena,vmalloc,local-storage] [--out FILE]

Run it alone: the load average before and after is printed beside the
figures.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPORTS = ("libarena", "vmalloc", "local-storage")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def reproduce(name, extra, tmp):
    path = os.path.join(tmp, "%s%s.json" % (name, "-".join(extra)))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "alloclab", "reproduce", name, "--json", path]
                         + extra, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise SystemExit("reproduce %s failed: %s" % (name, out.stderr[-2000:]))
    with open(path) as f:
        d = json.load(f)
    return wall, d["verdicts"], out.stdout


def real_cpu(v):
    """Whether latency on real CPUs or counters can decide the claim (no
    cell of it is latency on virtual CPUs)."""
    return not any("latency on virtual CPUs" in p for c in v["cells"] for p in c["problems"])


def tutorial_cv():
    import alloclab as al
    res = al.run("malloc-free", ["libarena-spill", "libarena-transfer"], producers=[1, 2],
                 allocs_per_cycle=[16, 256])
    cvs = []
    for m in ("alloc_ns", "free_ns"):
        for params, st in res.stats(m):
            cvs.append((st.cv, "%s %s %dp/%d" % (m, params["policy"], params["producers"],
                                                 params["allocs_per_cycle"])))
    return max(cvs), sorted(cvs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(REPORTS))
    ap.add_argument("--out", default="bench/results/trust")
    args = ap.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    lines = ["load average before: %.2f" % loadavg()]
    data = {"load_before": loadavg(), "reports": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            runs = [reproduce(name, [], tmp) for _ in range(2)]
            quick = reproduce(name, ["--quick"], tmp)
            v1, v2 = runs[0][1], runs[1][1]
            flips = [(a["claim"], a["outcome"], b["outcome"]) for a, b in zip(v1, v2)
                     if {a["outcome"], b["outcome"]} == {"holds", "does not hold"}]
            changed = [(a["claim"], a["outcome"], b["outcome"]) for a, b in zip(v1, v2)
                       if a["outcome"] != b["outcome"]]
            dec = []
            for vs in (v1, v2):
                real = [v for v in vs if real_cpu(v)]
                dec.append((sum(v["outcome"] != "inconclusive" for v in real), len(real)))
            data["reports"][name] = {
                "wall_s": [r[0] for r in runs], "quick_wall_s": quick[0],
                "flips": flips, "changed": changed, "decided_real": dec,
                "outcomes": [[v["outcome"] for v in vs] for vs in (v1, v2)],
                "claims": [v["claim"] for v in v1],
                "quick_outcomes": [v["outcome"] for v in quick[1]]}
            lines.append("")
            lines.append("reproduce %s: wall %.1f s and %.1f s (defaults), %.1f s (--quick)" % (
                name, runs[0][0], runs[1][0], quick[0]))
            lines.append("  holds <-> does not hold between the two runs: %d of %d" % (
                len(flips), len(v1)))
            for c, a, b in changed:
                lines.append("  changed: %s -> %s: %s" % (a, b, c))
            for i, (d, n) in enumerate(dec):
                lines.append("  run %d: %d of %d real-CPU/counter claims decided (%.0f%%)" % (
                    i + 1, d, n, 100.0 * d / n if n else float("nan")))
            for i, vs in enumerate((v1, v2)):
                lines.append("  run %d: %s" % (i + 1, ", ".join(
                    "%s %d" % (o, sum(v["outcome"] == o for v in vs))
                    for o in ("holds", "does not hold", "inconclusive"))))
            lines.append("  last run's verdicts:")
            lines += ["    " + l for l in runs[1][2].split("Seed conclusions on this machine",
                                                          1)[-1].splitlines()[1:]
                      if l.startswith(("- [", "Socket", "Task", "libarena", "per-CPU", "the ",
                                       "Uladzislau"))]
    if "libarena" in names or not names:
        (cv, label), allcv = tutorial_cv()
        data["tutorial_max_cv"] = [cv, label]
        lines.append("")
        lines.append("tutorial notebook's run() with the defaults: largest CV %.1f%% (%s); "
                     "median %.1f%%" % (100 * cv, label, 100 * float(np.median(
                         [c for c, _ in allcv]))))
    data["load_after"] = loadavg()
    lines.append("")
    lines.append("load average after: %.2f" % loadavg())
    text = "\n".join(lines)
    print(text)
    with open(args.out + ".txt", "w") as f:
        f.write(text + "\n")
    with open(args.out + ".json", "w") as f:
        json.dump(data, f, indent=1)


if __name__ == "__main__":
    main()
