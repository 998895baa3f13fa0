"""The model's buddy held against the real code: the same workload on
alloclab's ``buddy`` and on a libarena tree's own buddy.bpf.c, side by side.

    import alloclab.reproduce as rep
    f = rep.libarena_fidelity("/path/to/linux/tools/testing/selftests/bpf/libarena")
    print(f)         # one row per producers x allocs/cycle x side
    f.rows()         # the same as dicts

For each cell (producers, allocations per cycle) and each side (model, real):
the per-operation cost (alloc, free and their mean, ns, medians over runs),
arena spin lock acquisitions per operation, the time the lock is held per
acquisition (stats=full: two clock reads per hold, so every figure of such a
run is a little slower; NaN below full), and at teardown (the end of the
measured phase, every object freed): the bytes still held by the layer, the
arena bytes it keeps committed, and that over the peak bytes the workload
had requested ("committed/peak": the arena the design keeps per byte ever
live; for malloc-free the peak is producers x allocs/cycle x size, every
producer's cycle live at once, exact at any duration, where the engine's
10 ms samples may catch no cycle). Both sides run in one interleaved run, isolated and unchecked (the
engine's pointer checks would add a lock per operation to the real side
only).

What runs as "real" is the tree's C compiled natively by the host compiler
against alloclab's BPF stand-in: the algorithms side by side, not BPF's
JIT'd arena accesses, may_goto or the kernel's arena lock.
"""

import math
import statistics

from ..policies.libarena_real import caches_note
from .. import errors
from ..results.result import Result, dump_json, load_json

PRODUCERS = (1, 2)
ALLOCS_PER_CYCLE = (64, 256)
# workloads whose every cycle allocates allocs_per_cycle objects, holds them
# all live, then frees them: their peak demand is known exactly
HOLDS_A_CYCLE = ("malloc-free",)
LEGEND = ("comm/peak: arena bytes committed at teardown over the peak bytes requested "
          "(producers x allocs/cycle x size: every producer's cycle live at once), the arena "
          "each design keeps per byte ever live")
WITHIN = 1.5  # the model's per-op cost is faithful within this factor of the real code's
NOTE = ("real: the tree's C compiled natively as user-space C against alloclab's BPF stand-in "
        "(not BPF's JIT'd arena accesses, may_goto or the kernel's arena lock); both sides take "
        "alloclab's lock in arena mode")


def libarena_fidelity(tree, producers=PRODUCERS, allocs_per_cycle=ALLOCS_PER_CYCLE, size=64,
                      runs=5, duration=0.2, stats="full", workload="malloc-free",
                      timing="batch", model="buddy", progress=False):
    """Run ``model`` and the tree's buddy on ``workload`` over producers x
    allocs/cycle (interleaved, isolated, unchecked) and return a Fidelity."""
    from ..measure.run import run
    from ..policies import libarena_real

    real = libarena_real.load(tree)
    res = run(workload, [model, real], size=size, allocs_per_cycle=list(allocs_per_cycle),
              producers=list(producers), runs=runs, duration=duration, stats=stats,
              timing=timing, check=False, progress=progress)
    return Fidelity(res, {"tree": libarena_real.info(tree), "model": model, "real": real,
                          "workload": workload, "size": size, "stats": stats,
                          "timing": timing})


def _median(values):
    v = [float(x) for x in values if not math.isnan(float(x))]
    return statistics.median(v) if v else float("nan")


class Fidelity:
    """A fidelity run: ``result`` (the Result) and ``settings``."""

    FORMAT = "alloclab-libarena-fidelity"

    def __init__(self, result, settings):
        self.result = result
        self.settings = settings

    def _layer(self, point):
        pol = point.params["policy"]
        return pol, ("real" if pol == self.settings["real"] else "model")

    def rows(self):
        """One dict per (producers, allocs/cycle, side), in that order."""
        out = []
        for p in self.result.points:
            layer, which = self._layer(p)
            d = p.data
            acq = sum(float(x) for x in d.get("%s.lock_acquired" % layer, []))
            hold = sum(float(x) for x in d.get("%s.lock_hold_ns" % layer, [float("nan")]))
            committed = _median(d.get("%s.arena_bytes_committed" % layer, [float("nan")]))
            peak = self._peak_requested(p)
            alloc, free = _median(d["alloc_ns"]), _median(d["free_ns"])
            out.append({
                "producers": p.params.get("producers"),
                "allocs_per_cycle": p.params.get("allocs_per_cycle"),
                "side": which, "layer": layer,
                "alloc_ns": alloc, "free_ns": free, "op_ns": (alloc + free) / 2,
                "locks_per_op": _median(d.get("%s.lock_acquired_per_op" % layer,
                                              [float("nan")])),
                "hold_ns_per_acquisition": hold / acq if acq else float("nan"),
                "held_at_teardown": _median(d.get("%s.bytes_held" % layer, [float("nan")])),
                "committed_at_teardown": committed, "peak_requested": peak,
                "committed_per_peak_requested": committed / peak if peak else float("nan"),
            })
        return sorted(out, key=lambda r: (r["producers"], r["allocs_per_cycle"],
                                          r["side"] != "model"))

    def _peak_requested(self, point):
        """The peak bytes the workload requested: for a workload whose
        cycle holds all its allocations live at once (HOLDS_A_CYCLE),
        producers x allocs/cycle x size, exact whatever the run's length;
        the engine's sampled peak (every 10 ms, NaN or 0 in a short run)
        where that is larger, or for other workloads."""
        sampled = _median(point.data.get("mem_requested_peak", [float("nan")]))
        if self.settings["workload"] not in HOLDS_A_CYCLE:
            return sampled
        prm = point.params
        demand = float(prm.get("producers", 1) * prm.get("allocs_per_cycle", 0) *
                       self.settings["size"])
        return demand if math.isnan(sampled) else max(demand, sampled)

    def ratios(self):
        """{(producers, allocs/cycle): model op_ns / real op_ns}."""
        by = {}
        for r in self.rows():
            by.setdefault((r["producers"], r["allocs_per_cycle"]), {})[r["side"]] = r["op_ns"]
        return {k: v["model"] / v["real"] for k, v in sorted(by.items())
                if "model" in v and "real" in v and v["real"] > 0}

    def __str__(self):
        s = self.settings
        lines = ["%s, %d B: the model's %s against the real buddy of %s (layer %s)" % (
            s["workload"], s["size"], s["model"], s["tree"]["tree"], s["real"]),
            "(%s; the tree: %s; stats=%s, %s timing, medians over runs)" % (
                NOTE, caches_note(s["tree"]), s["stats"], s["timing"]), "",
            "%4s %5s %-5s %8s %8s %8s %8s %8s %9s %10s %9s" % (
                "prod", "apc", "side", "alloc ns", "free ns", "op ns", "locks/op",
                "hold ns", "held end", "committed", "comm/peak")]
        for r in self.rows():
            lines.append("%4s %5s %-5s %8.1f %8.1f %8.1f %8.3f %8.1f %9.0f %10.0f %9.1f" % (
                r["producers"], r["allocs_per_cycle"], r["side"], r["alloc_ns"], r["free_ns"],
                r["op_ns"], r["locks_per_op"], r["hold_ns_per_acquisition"],
                r["held_at_teardown"], r["committed_at_teardown"],
                r["committed_per_peak_requested"]))
        ratios = self.ratios()
        if ratios:
            ok = [k for k, v in ratios.items() if 1 / WITHIN <= v <= WITHIN]
            lines += ["", "model/real per-op cost: " + ", ".join(
                "%dp/%d %.2f" % (k[0], k[1], v) for k, v in ratios.items()),
                "the model within %gx of the real code: %d of %d cells" % (
                    WITHIN, len(ok), len(ratios))]
        lines.append(LEGEND if s["workload"] in HOLDS_A_CYCLE else LEGEND.replace(
            "producers x allocs/cycle x size: every producer's cycle live at once",
            "sampled every 10 ms: nan when no sample caught a cycle"))
        if s["stats"] != "full":
            lines.append("hold ns: n/a below stats=full (nan)")
        lines += self.result.notes_lines()
        lines.append(self.result.cpu_line())
        return "\n".join(lines)

    def to_json(self, path=None):
        """The rows, the settings and the Result as JSON text; also written to
        ``path`` when given, as every output is (alloclab.files: a regular
        file replaced whole, so a failed write leaves the old one)."""
        return dump_json({"format": self.FORMAT, "settings": self.settings,
                          "rows": self.rows(), "result": self.result.to_dict()}, path,
                         indent=1)

    @classmethod
    def from_json(cls, s):
        """A Fidelity from to_json() text, or a path to such a file."""
        d = load_json(s)
        if not isinstance(d, dict) or d.get("format") != cls.FORMAT or not isinstance(
                d.get("result"), dict) or not isinstance(d.get("settings"), dict):
            raise errors.FileFormatError("not an %s (format %r)" % (
                cls.FORMAT, d.get("format") if isinstance(d, dict) else type(d).__name__))
        return cls(Result.from_dict(d["result"]), d["settings"])
