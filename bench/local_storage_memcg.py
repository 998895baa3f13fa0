"""How memcg charging and the task_struct's RCU-delayed free move the seed-003
task result: the reproduction's task cells with the slab layer's memcg on
(v6.18: kmalloc-cg caches, per-CPU stocks) and off, each with task_exit=rcu
(the default) and inline, printing creates/s per era, the after/before
difference and the memcg counters per create.

    python bench/local_storage_memcg.py [--effort quick|normal|rigorous]
        [--batch-sizes 16,32,64] [--producers 1] [--rcu-nocb] [--owner-work none]

Timing figures are meaningful on a quiet machine only.
"""
import argparse

import alloclab.reproduce as rep

VARIANTS = (
    ("memcg on, task_exit=rcu", True, "rcu"),
    ("memcg off, task_exit=rcu", False, "rcu"),
    ("memcg on, task_exit=inline", True, "inline"),
)


def policies(memcg):
    """The task eras' stacks with the slab layer's memcg set."""
    flag = "true" if memcg else "false"
    return {"task": ("bpf_ma(mode=fixed) > slab(memcg=%s)" % flag,
                     "nolock > slab(memcg=%s)" % flag)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--effort", default="quick", choices=("quick", "normal", "rigorous"))
    ap.add_argument("--batch-sizes", default="32")
    ap.add_argument("--producers", type=int, default=1)
    ap.add_argument("--rcu-nocb", action="store_true")
    ap.add_argument("--owner-work", default="real", choices=("real", "none"))
    a = ap.parse_args()
    bs = [int(x) for x in a.batch_sizes.split(",")]
    for label, memcg, tx in VARIANTS:
        r = rep.local_storage(storage_types=("task",), batch_sizes=bs, effort=a.effort,
                              producers=a.producers, rcu_nocb=a.rcu_nocb,
                              policies=policies(memcg), task_exit=tx,
                              owner_work=a.owner_work)
        for b in bs:
            before, after = r.speed("task", 0, b)[0], r.speed("task", 1, b)[0]
            ch = [r.per_create("task", e, b, "slab.memcg_charges") for e in (0, 1)]
            print("%-28s batch %3d  before %8.3f k/s  after %8.3f k/s  diff %+6.1f%%  "
                  "memcg charges/create %.3f -> %.3f" % (label, b, before, after,
                                                          r.diff("task", b), ch[0], ch[1]))


if __name__ == "__main__":
    main()
