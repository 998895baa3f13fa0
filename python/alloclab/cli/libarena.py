"""`alloclab libarena`: a libarena tree's own code in user space.

    alloclab libarena test DIR     the tree's selftests (SEC("syscall") test_*
                                   programs of DIR/selftests/*.bpf.c), each
                                   PASS/FAIL with its return value; exit 0 only
                                   if all pass; --timeout SECONDS: a program's
                                   limit (default 30), past it a FAIL
    alloclab libarena build DIR    compile the tree (cached) and print what the
                                   layer will measure

The tree is compiled as user-space C against alloclab's BPF stand-in
(alloclab.libarena_real): the output says so, since what runs is the tree's
C compiled natively, not BPF's JIT. Bad input (not a tree, a compile error,
a missing helper, a failing buddy_init) is an AlloclabError: the CLI prints
`alloclab: error:` and exits 2.
"""

import argparse
import os

from .. import errors
from ..policies import libarena_real
from .format import UsageError
from .format import real as _real


def timeout_arg(text):
    """--timeout: seconds, a finite number above 0 (libarena_real.check_timeout)."""
    try:
        return libarena_real.check_timeout(_real(text))
    except (errors.InvalidArgument, argparse.ArgumentTypeError):  # not a number, or out of range
        raise argparse.ArgumentTypeError(
            "%r is not a time limit: seconds, more than 0 and at most %g"
            % (errors.Echo(text), libarena_real.MAX_TEST_TIMEOUT)) from None


def add_parser(sub):
    lp = sub.add_parser("libarena", help="run a libarena tree's own code: its selftests",
                        description="A libarena tree (the libarena folder of a kernel "
                                    "checkout) compiled as user-space C against alloclab's "
                                    "stand-in for the BPF environment.")
    lsub = lp.add_subparsers(dest="libarena_cmd", metavar="ACTION")
    tp = lsub.add_parser("test", help="run the tree's selftests (test_* programs)")
    tp.add_argument("tree", nargs="?", metavar="DIR",
                    help="the tree (default $%s)" % libarena_real.ENV_TREE)
    tp.add_argument("--asan", action="store_true",
                    help="an ASan build of the tree (BPF_ARENA_ASAN: its hooks on alloclab's "
                         "poisoning, its accesses checked by AddressSanitizer), which also "
                         "runs its asan_test_* programs; the default in alloclab's sanitizer "
                         "builds and with $%s=1" % libarena_real.ENV_ASAN)
    tp.add_argument("--timeout", type=timeout_arg, metavar="SECONDS",
                    default=libarena_real.DEFAULT_TEST_TIMEOUT,
                    help="how long one program may run (default %(default)g): past it, its "
                         "child is killed, it is a FAIL (timed out after N s) and the "
                         "programs after it run in a fresh copy")
    bp = lsub.add_parser("build", help="compile the tree (cached) and say what is measured")
    bp.add_argument("tree", nargs="?", metavar="DIR",
                    help="the tree (default $%s)" % libarena_real.ENV_TREE)
    return lp


def cmd_libarena(args):
    if args.libarena_cmd not in ("build", "test"):
        raise UsageError("libarena needs an action: build DIR or test DIR")
    tree = args.tree or libarena_real.default_tree()
    if args.libarena_cmd == "build":
        info = libarena_real.info(libarena_real.check_tree(tree))
        print("tree: %s\nobject: %s\nbulk calls of its own: %s\nper-CPU caches of its own: %s%s\n"
              "measured: %s" % (info["tree"], info["object"],
                                "yes" if info["bulk"] else "no (loops)",
                                "yes" if info["own_caches"] else "no",
                                "" if info["own_caches_plain"] == info["own_caches_asan"] else
                                " (%s in its ASan build)" % (
                                    "on" if info["own_caches_asan"] else "off"),
                                info["measured"]))
        return 0
    asan = True if args.asan else None
    results = libarena_real.run_tests(tree, asan=asan, timeout=args.timeout)
    print("libarena selftests of %s (compiled natively as user-space C against alloclab's BPF "
          "stand-in, not run by BPF's JIT%s):" % (
              os.path.abspath(tree), "; an ASan build" if asan or libarena_real.asan_build()
              else ""))
    for r in results:
        line = "%s %s" % ("PASS" if r["passed"] else "FAIL", r["name"])
        if r["ret"] is None:
            line += " (%s)" % r["message"]
        else:
            line += " (returned %d)" % r["ret"]
            if r["message"] and not r["passed"]:
                line += ": %s" % r["message"]
        print("  " + line)
    failed = sum(not r["passed"] for r in results)
    print("%d passed, %d failed" % (len(results) - failed, failed))
    return 0 if not failed else 1
