"""Reproduce seed 003: BPF local storage switching to kmalloc_nolock().

The seed ("Switch to kmalloc_nolock() in BPF local storage") runs
``bench -p 1 local-storage-create --storage-type <socket,task> --batch-size
<16,32,64>`` before and after the switch and reports creation speed (mean
± sd over 1-second samples, k/s) and kmallocs per create:

- socket storage: kzalloc (before) against kmalloc_nolock (after);
- task storage: the BPF memory allocator (before) against kmalloc_nolock.

This module runs the same grid on the ``local-storage-create`` workload,
the "before" and "after" allocators interleaved cell by cell, and prints it
in the seed's layout next to the seed's own numbers, with the counters that
explain each difference and whether the seed's direction holds here.

    import alloclab.reproduce as rep
    r = rep.local_storage(batch_sizes=[16, 32])
    print(r)                  # tables, counters, verdicts
    r.plot()                  # creation speed against batch size

owner_work="real" (the default) opens a real socket or creates a real
thread per owner, as the bench does, so the allocator is a few percent of a
create and percentages compare with the seed's; owner_work="none" measures
the allocators alone. The kmalloc tracepoint column adds the owner's own
kmallocs, which happen in the real kernel where the model cannot count
them: the workload's owner_kmallocs estimate (from the seed's
kmalloc_nolock rows, where the allocator fires none).
"""

import json
import math

import numpy as np

from ..run import plan as _plan, run_once as _run_once
from ..result import Result, collect_metadata

WORKLOAD = "local-storage-create"

# storage type -> ((label, preset), ...) before, after
ERAS = {
    "socket": (("kzalloc", "kzalloc"), ("kmalloc_nolock", "kmalloc-nolock")),
    "task": (("BPF memory allocator", "bpf-ma"), ("kmalloc_nolock", "kmalloc-nolock")),
}
TITLES = {"socket": "Socket local storage", "task": "Task local storage"}

# The seed's table: (storage, era index, batch) -> (k/s, sd, kmallocs/create)
SEED = {
    ("socket", 0, 16): (104.217, 0.974, 4.15), ("socket", 0, 32): (104.355, 0.606, 4.13),
    ("socket", 0, 64): (103.611, 0.707, 4.15),
    ("socket", 1, 16): (100.566, 0.560, 1.13), ("socket", 1, 32): (99.708, 0.684, 1.15),
    ("socket", 1, 64): (98.375, 1.757, 1.13),
    ("task", 0, 16): (24.668, 0.121, 2.54), ("task", 0, 32): (22.899, 0.097, 2.67),
    ("task", 0, 64): (22.559, 0.076, 2.56),
    ("task", 1, 16): (25.399, 0.142, 2.51), ("task", 1, 32): (23.495, 1.285, 2.66),
    ("task", 1, 64): (23.701, 0.207, 2.63),
}

# (label, how to compute it per create from a point) for the counter table
COUNTERS = (
    ("slab kmallocs", "slab.kmallocs"),
    ("traced kmallocs", None),
    ("new slabs", "slab.slab_allocs"),
    ("list_lock", "slab.list_lock_acquired"),
    ("cmpxchg retries", "slab.cmpxchg_retries"),
    ("bpf_ma refills", "bpf_ma.refills"),
    ("bpf_ma trims", "bpf_ma.trims"),
    ("bpf_ma empty", "bpf_ma.alloc_empty"),
    ("nolock retries", "nolock.retries"),
    ("deferred frees", "nolock.frees_deferred"),
    ("kfree_rcu", "wl.kfree_rcu"),
    ("call_rcu", "wl.call_rcu"),
    ("reuse_now", "wl.reuse_now"),
    ("charges", "wl.charges"),
)


def local_storage(storage_types=("socket", "task"), batch_sizes=(16, 32, 64), runs=1,
                  duration=3.0, sample=0.5, warmup_cycles=20, owner_work="real", producers=1,
                  gp_latency=0, rcu_nocb=False, timing="batch", progress=False, policies=None,
                  **params):
    """Run the seed's grid and return a LocalStorageReport.

    Every storage type x batch size x era cell runs ``runs`` times (each a
    fresh allocator, ``duration`` seconds measured in ``sample``-second
    samples), the two eras of a cell back to back so that machine noise hits
    both alike. ``policies`` overrides the allocators: {storage type: (before
    spec, after spec)}. Extra keyword arguments are workload parameters.
    """
    storage_types = list(storage_types)
    for st in storage_types:
        if st not in ERAS:
            from .. import errors
            raise errors.UnknownNameError.make("storage type", st, list(ERAS))
    eras = {st: [(lab, (policies or {}).get(st, (None, None))[i] or spec)
                 for i, (lab, spec) in enumerate(ERAS[st])] for st in storage_types}
    tasks = []
    for st in storage_types:
        for b in batch_sizes:
            for lab, spec in eras[st]:
                _, t = _plan(WORKLOAD, spec, runs=runs, producers=producers,
                                     timing=timing, warmup_cycles=warmup_cycles,
                                     duration=duration, storage_type=st, batch_size=b,
                                     owner_work=owner_work, gp_latency=gp_latency,
                                     rcu_nocb=rcu_nocb, sample=int(sample * 1e9), **params)
                tasks += t
    total = len(tasks) * runs
    raws = [[] for _ in tasks]
    done = 0
    for i in range(runs):
        for t, r in zip(tasks, raws):
            r.append(_run_once(t, i))
            done += 1
            if progress:
                import sys
                sys.stderr.write("\ralloclab: %d/%d runs" % (done, total))
                sys.stderr.flush()
    if progress:
        import sys
        sys.stderr.write("\n")
    meta = collect_metadata()
    meta["run"] = {"workload": WORKLOAD, "runs": runs, "duration": duration,
                   "sample": sample, "owner_work": owner_work, "producers": producers}
    res = Result.from_raw(meta, [(t["point"], r) for t, r in zip(tasks, raws)])
    return LocalStorageReport(res, eras)


def _diff(new, old):
    """Percent difference, positive = new is faster (higher is better)."""
    return 100.0 * (new / old - 1.0) if old and np.isfinite(old) and np.isfinite(new) else \
        float("nan")


class LocalStorageReport:
    """The seed-003 experiment: one Result, and its reading."""

    def __init__(self, result, eras=None):
        self.result = result
        if eras is None:
            eras = {p.params["storage_type"]: ERAS[p.params["storage_type"]]
                    for p in result.points}
        self.eras = {st: [tuple(e) for e in v] for st, v in eras.items()}

    # -- access --

    @property
    def storage_types(self):
        return [st for st in ("socket", "task") if st in self.eras]

    @property
    def batch_sizes(self):
        return sorted({p.params["batch_size"] for p in self.result.points})

    def points(self, storage_type, era, batch_size):
        from ..policy import Policy

        spec = str(Policy(self.eras[storage_type][era][1]))
        return [p for p in self.result.points
                if p.params["storage_type"] == storage_type and p.params["policy"] == spec
                and p.params["batch_size"] == batch_size]

    def _values(self, storage_type, era, batch_size, metric):
        out = []
        for p in self.points(storage_type, era, batch_size):
            if metric in p.data:
                out += [float(x) for x in np.asarray(p.data[metric], dtype=float)]
        return np.array(out)

    def _mean(self, storage_type, era, batch_size, metric):
        v = self._values(storage_type, era, batch_size, metric)
        return float(np.nanmean(v)) if len(v) and np.any(np.isfinite(v)) else float("nan")

    def speed(self, storage_type, era, batch_size):
        """(mean k/s, sd k/s) over the runs' per-sample means and deviations:
        one run gives the seed's 'M ± S' (sd over samples within the run);
        several runs pool their samples' variance."""
        m = self._values(storage_type, era, batch_size, "wl.creates_per_s")
        s = self._values(storage_type, era, batch_size, "wl.creates_per_s_sd")
        if not len(m) or not np.any(np.isfinite(m)):
            return float("nan"), float("nan")
        mean = float(np.nanmean(m))
        within = float(np.sqrt(np.nanmean(s ** 2))) if np.any(np.isfinite(s)) else 0.0
        between = float(np.std(m, ddof=1)) if len(m) > 1 else 0.0
        return mean / 1e3, math.sqrt(within ** 2 + between ** 2) / 1e3

    def per_create(self, storage_type, era, batch_size, key):
        """A counter per create (mean over runs); key None: traced kmallocs."""
        creates = self._values(storage_type, era, batch_size, "wl.creates")
        if not len(creates) or not np.nansum(creates):
            return float("nan")
        if key is None:
            pts = self.points(storage_type, era, batch_size)
            tot = np.zeros(len(creates))
            for p in pts:
                for k, v in p.data.items():
                    if k.endswith(".traced_kmallocs") or k == "wl.owner_kmallocs":
                        tot = tot + np.asarray(v, dtype=float)[:len(tot)]
            vals = tot
        else:
            vals = self._values(storage_type, era, batch_size, key)
            if not len(vals):
                return float("nan")
        return float(np.nansum(vals) / np.nansum(creates))

    def kmallocs(self, storage_type, era, batch_size):
        """(traced kmallocs/create, slab kmallocs/create)."""
        return (self.per_create(storage_type, era, batch_size, None),
                self.per_create(storage_type, era, batch_size, "slab.kmallocs"))

    def diff(self, storage_type, batch_size):
        """Creation speed of the second era against the first, in percent."""
        return _diff(self.speed(storage_type, 1, batch_size)[0],
                     self.speed(storage_type, 0, batch_size)[0])

    # -- the seed's tables --

    def table(self, storage_type, seed=True):
        """One table in the seed's layout; seed=True adds the seed's numbers."""
        lines = [TITLES[storage_type] + " (this machine)"]
        lines.append("memory alloc            batch  creation speed      kmallocs/create   "
                     "creation speed diff")
        lines.append("                               (k/s, mean ± sd)    traced   slab")
        lines.append("----------------------  -----  ------------------  -------  -----  ----")
        for e, (label, _) in enumerate(self.eras[storage_type]):
            names = [label, "(before)" if e == 0 else "(after)"]
            for i, b in enumerate(self.batch_sizes):
                m, s = self.speed(storage_type, e, b)
                tr, sl = self.kmallocs(storage_type, e, b)
                d = "" if e == 0 else "%+.1f%%" % self.diff(storage_type, b)
                lines.append("%-22s  %5d  %9.3f ± %-6.3f  %7.2f  %5.2f  %s" % (
                    names[i] if i < 2 else "", b, m, s, tr, sl, d))
            if len(self.batch_sizes) < 2:
                lines.append(names[1])
            lines.append("")
        if seed:
            lines.append("%s (the seed)" % TITLES[storage_type])
            for e, (label, _) in enumerate(ERAS[storage_type]):
                for b in self.batch_sizes:
                    v = SEED.get((storage_type, e, b))
                    if not v:
                        continue
                    d = "" if e == 0 else "%+.1f%%" % _diff(
                        v[0], SEED[(storage_type, 0, b)][0])
                    lines.append("%-22s  %5d  %9.3f ± %-6.3f  %7.2f  %5s  %s" % (
                        label if b == self.batch_sizes[0] else "", b, v[0], v[1], v[2], "-",
                        d))
        return "\n".join(lines).rstrip()

    def counters(self):
        """The counters that explain each difference, per create."""
        out = ["Counters per create (measured phase, mean over runs):"]
        for st in self.storage_types:
            out.append("")
            out.append("%s, batch %s:" % (TITLES[st], "/".join(map(str, self.batch_sizes))))
            head = "  %-16s" % "counter"
            for e, (label, _) in enumerate(self.eras[st]):
                head += "".join(("%s %d" % ("before" if e == 0 else "after", b)).rjust(11)
                                for b in self.batch_sizes)
            out.append(head)
            for name, key in COUNTERS:
                vals = [self.per_create(st, e, b, key) for e in range(2)
                        for b in self.batch_sizes]
                if all(not np.isfinite(v) or v == 0 for v in vals):
                    continue
                out.append("  %-16s" % name + "".join(
                    ("%.3f" % v if np.isfinite(v) else "-").rjust(11) for v in vals))
            ns = [self._mean(st, e, b, "wl.ns_per_create")
                  for e in range(2) for b in self.batch_sizes]
            out.append("  %-16s" % "ns per create" + "".join(
                ("%.0f" % v if np.isfinite(v) else "-").rjust(11) for v in ns))
        return "\n".join(out)

    # -- verdicts --

    def _noise(self, st, b):
        """Combined sd of the two eras' speeds, in percent of the first."""
        m0, s0 = self.speed(st, 0, b)
        _, s1 = self.speed(st, 1, b)
        return 100.0 * math.sqrt(s0 ** 2 + s1 ** 2) / m0 if m0 else float("nan")

    # A speed claim is judged against 2 sd of the two eras' combined sample
    # deviation: beyond it a difference counts; below PRECISION percent of
    # 2 sd the data can decide; otherwise the verdict is None (inconclusive).
    PRECISION = 10.0

    def _judge(self, st, claim_ok, claim_broken):
        bs = self.batch_sizes
        d = [self.diff(st, b) for b in bs]
        n2 = [2 * self._noise(st, b) for b in bs]
        evidence = ", ".join("batch %d %+.1f%% (2 sd ±%.1f%%)" % (b, x, y)
                             for b, x, y in zip(bs, d, n2))
        if not all(np.isfinite(x) and np.isfinite(y) for x, y in zip(d, n2)):
            return None, evidence
        if any(claim_broken(x, y) for x, y in zip(d, n2)):
            return False, evidence
        if all(claim_ok(x, y) for x, y in zip(d, n2)) and max(n2) <= self.PRECISION:
            return True, evidence
        return None, evidence + "; noise too large to decide"

    def verdicts(self):
        """The seed's claims checked on this machine: [(claim, holds, evidence)],
        holds True, False, or None when the noise is too large to decide."""
        out = []
        bs = self.batch_sizes
        if "socket" in self.eras:
            holds, ev = self._judge("socket", lambda d, n: abs(d) <= 10,
                                    lambda d, n: abs(d) > 10 + n)
            out.append(("socket: kmalloc_nolock is within a few percent (10%) of kzalloc "
                        "(seed: -3.5% to -5.1%)", holds, ev))
            holds, ev = self._judge("socket", lambda d, n: d <= n, lambda d, n: d > n)
            out.append(("socket: kmalloc_nolock is not faster than kzalloc", holds, ev))
            k0 = [self.kmallocs("socket", 0, b)[0] for b in bs]
            k1 = [self.kmallocs("socket", 1, b)[0] for b in bs]
            out.append(("socket: kzalloc's creates fire the kmalloc tracepoint, "
                        "kmalloc_nolock's do not (seed: 4.15 against 1.13 per create)",
                        all(a - b >= 1.9 for a, b in zip(k0, k1)),
                        ", ".join("%.2f against %.2f" % (a, b) for a, b in zip(k0, k1))))
        if "task" in self.eras:
            holds, ev = self._judge("task", lambda d, n: d >= -n, lambda d, n: d < -n)
            out.append(("task: kmalloc_nolock is at or above the BPF memory allocator "
                        "(seed: +2.6% to +5.1%)", holds, ev))
            k0 = [self.kmallocs("task", 0, b)[0] for b in bs]
            k1 = [self.kmallocs("task", 1, b)[0] for b in bs]
            out.append(("task: both fire about as many kmallocs per create "
                        "(seed: 2.54-2.67 against 2.51-2.66)",
                        all(abs(a - b) < 0.5 for a, b in zip(k0, k1)),
                        ", ".join("%.2f against %.2f" % (a, b) for a, b in zip(k0, k1))))
        return out

    def notes(self):
        r = self.result.metadata.get("run", {})
        ow = r.get("owner_work")
        lines = ["Setup: %s producer%s, %s s measured per cell in %s s samples, %s run%s per "
                 "cell, owner_work=%s." % (
                     r.get("producers"), "" if r.get("producers") == 1 else "s",
                     r.get("duration"), r.get("sample"), r.get("runs"),
                     "" if r.get("runs") == 1 else "s", ow)]
        if ow == "real":
            lines.append("Each create opens a real socket or creates a real thread, as the "
                         "bench: compare percentages with the seed's.")
        else:
            lines.append("owner_work=none: the allocators alone, so differences are far "
                         "larger than the seed's (where a real socket or thread dominates "
                         "each create); compare directions, not percentages.")
        lines.append("traced kmallocs = allocations the kmalloc tracepoint sees (kmalloc, "
                     "kzalloc and bpf_ma's refill kmalloc_node; not kmalloc_nolock) plus the "
                     "owner's own (owner_kmallocs, from the seed's kmalloc_nolock rows, in "
                     "real mode); slab kmallocs = every object the slab layer handed out.")
        lines.append(self.result.machine_line())
        return "\n".join(lines)

    def __str__(self):
        parts = []
        for st in self.storage_types:
            parts.append(self.table(st))
            parts.append("")
        parts.append(self.notes())
        parts.append("")
        parts.append(self.counters())
        parts.append("")
        parts.append("Seed conclusions on this machine:")
        for claim, holds, ev in self.verdicts():
            parts.append("- [%s] %s: %s" % (
                {True: "holds", False: "does not hold", None: "inconclusive"}[holds], claim, ev))
        return "\n".join(parts)

    # -- data --

    def to_json(self, path=None):
        s = json.dumps({"format": "alloclab-local-storage-report", "eras": self.eras,
                        "result": json.loads(self.result.to_json())})
        if path:
            with open(path, "w") as f:
                f.write(s)
        return s

    @classmethod
    def from_json(cls, s):
        if not s.lstrip().startswith("{"):
            with open(s) as f:
                s = f.read()
        d = json.loads(s)
        return cls(Result.from_json(json.dumps(d["result"])),
                   {k: [tuple(e) for e in v] for k, v in d["eras"].items()})

    # -- plots --

    def plot(self, ax=None):
        """Creation speed (k/s, ± sd) against batch size, a panel per storage
        type, the seed's numbers dashed. Returns the figure."""
        import matplotlib.pyplot as plt

        sts = self.storage_types
        fig, axes = plt.subplots(1, len(sts), figsize=(5 * len(sts), 3.6), squeeze=False)
        bs = self.batch_sizes
        for ax, st in zip(axes[0], sts):
            for e, (label, _) in enumerate(self.eras[st]):
                ms = [self.speed(st, e, b) for b in bs]
                line = ax.errorbar(bs, [m for m, _ in ms], yerr=[s for _, s in ms],
                                   marker="o", capsize=3, label=label)
                seed = [SEED.get((st, e, b), (np.nan,))[0] for b in bs]
                if np.any(np.isfinite(seed)):
                    ax.plot(bs, seed, linestyle="--", marker="x",
                            color=line[0].get_color(), label="%s (seed)" % label)
            ax.set_title(TITLES[st])
            ax.set_xlabel("batch size")
            ax.set_xticks(bs)
            ax.set_ylabel("creates (k/s)")
            ax.legend(fontsize="small")
        fig.tight_layout()
        return fig

    def plot_kmallocs(self):
        """kmallocs per create (traced and slab-level) per era and batch size."""
        import matplotlib.pyplot as plt

        sts = self.storage_types
        fig, axes = plt.subplots(1, len(sts), figsize=(5 * len(sts), 3.4), squeeze=False)
        bs = self.batch_sizes
        w = 0.2
        for ax, st in zip(axes[0], sts):
            x = np.arange(len(bs))
            for e, (label, _) in enumerate(self.eras[st]):
                tr = [self.kmallocs(st, e, b)[0] for b in bs]
                sl = [self.kmallocs(st, e, b)[1] for b in bs]
                ax.bar(x + (2 * e - 1.5) * w, tr, w, label="%s, traced" % label)
                ax.bar(x + (2 * e - 0.5) * w, sl, w, label="%s, slab" % label)
            ax.set_xticks(x)
            ax.set_xticklabels([str(b) for b in bs])
            ax.set_xlabel("batch size")
            ax.set_ylabel("kmallocs per create")
            ax.set_title(TITLES[st])
            ax.legend(fontsize="x-small")
        fig.tight_layout()
        return fig
