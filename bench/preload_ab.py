"""Two builds of the preload shim against each other and glibc, on the
programs of bench/preload_threads.py: interleaved rounds (glibc, A, B, the
order reversed every other round), the median of each and the median of
the per-round ratios B/A and each against glibc.

    python bench/preload_ab.py --a OLD.so --b NEW.so [--programs churn1,mt4x,python3]
                               [--policy libarena-transfer] [--rounds 7]

Build the other shim from another checkout (`git worktree add DIR REV && make -C DIR
preload`: DIR/build/release/liballoclab-preload.so); the installed one is
python/alloclab/liballoclab-preload.so. Prints the load average before and after.
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from alloclab import errors, preload

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preload_threads as pt  # noqa: E402


def fail(msg):
    sys.stderr.write("alloclab: error: %s\n" % msg)
    sys.exit(2)


def check_shim(flag, path, policy, env):
    """The shim's absolute path, once it has built the policy in a process:
    a shim that ld.so cannot preload, or that keeps the process on glibc,
    would time glibc under its name."""
    if not os.path.isfile(path):
        fail("%s %s: no such file (a shim: DIR/build/release/liballoclab-preload.so)"
             % (flag, path))
    with tempfile.TemporaryDirectory() as d:
        cmd, e = preload.command(policy, ["true"], stats=d, env=env, shim=path)
        subprocess.run(cmd, env=e, capture_output=True, check=False)
        states = [(r.get("state"), r.get("error")) for r in preload.records(d)]
    if [s for s, _ in states] != ["ready"]:
        fail("%s %s does not run the policy %s: %s" % (
            flag, path, policy, "; ".join("%s (%s)" % st for st in states) if states else
            "no process record (ld.so could not preload it, or it is no alloclab shim)"))
    return os.path.abspath(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, help="the first shim (.so)")
    ap.add_argument("--b", required=True, help="the second shim (.so)")
    ap.add_argument("--programs", default="churn1,mt4x,python3")
    ap.add_argument("--policy", default="libarena-transfer")
    ap.add_argument("--rounds", type=int, default=7)
    a = ap.parse_args()
    if a.rounds < 1:
        fail("--rounds=%d: at least 1 round (each runs glibc, A and B once)" % a.rounds)
    base = dict(os.environ, PYTHONMALLOC="malloc")
    names = a.programs.split(",")
    for name in names:
        if name not in pt.GOALS:
            fail("unknown program %r (valid: %s)" % (name, ", ".join(pt.GOALS)))
    try:
        preload.check(a.policy)
    except errors.AlloclabError as e:
        fail("--policy %s: %s" % (a.policy, e))
    a.a = check_shim("--a", a.a, a.policy, base)
    a.b = check_shim("--b", a.b, a.policy, base)
    load0 = os.getloadavg()
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        progs = pt.programs(pt.build(tmp), tmp, 1.0)
        for r in range(a.rounds):
            for name in names:
                argv, stdin = progs[name]
                order = [("glibc", None), ("A", a.a), ("B", a.b)]
                for lab, shim in (order[::-1] if r % 2 else order):
                    cmd, env = (argv, base) if shim is None else preload.command(
                        a.policy, argv, env=base, shim=shim)
                    res.setdefault((name, lab), []).append(pt.timed(cmd, env, stdin, tmp))
    print("A = %s\nB = %s\npolicy %s, %d rounds" % (a.a, a.b, a.policy, a.rounds))
    for name in names:
        g = res[(name, "glibc")]
        for lab in ("A", "B"):
            rat = [x / y for x, y in zip(res[(name, lab)], g)]
            print("%-8s %s  median %.3f s  vs glibc (median of per-round ratios) %.2fx"
                  % (name, lab, statistics.median(res[(name, lab)]), statistics.median(rat)))
        rat = [x / y for x, y in zip(res[(name, "B")], res[(name, "A")])]
        print("%-8s B/A median %.3f  (%s)" % (name, statistics.median(rat),
                                              " ".join("%.2f" % x for x in rat)))
    print("load average before %.2f %.2f %.2f, after %.2f %.2f %.2f"
          % (load0 + os.getloadavg()))


if __name__ == "__main__":
    main()
