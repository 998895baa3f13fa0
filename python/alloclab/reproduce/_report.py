"""What the three reproductions share: Results, claims judged by one engine
(alloclab.verdict), the instability warnings, JSON and figures.

A report subclass provides its tables (``body``), its claims (``claims``)
and its figures (``figures``); this base turns them into text whose every
verdict comes from the engine, prints the warnings that say which numbers
not to trust, and reads and writes the same JSON for all three:

    {"format": "alloclab-<name>-report", "version": 2, "settings": {...},
     "results": {key: Result.to_dict(), ...}}

Progress: each reproduction counts its runs (or rows) on a progress_bar
(progress.Bar): a tqdm bar on a terminal for a job that lasts, none when
stderr is piped, always with progress=True (--progress).
"""

from .. import errors, machine
from .. import stats as _stats
from .. import verdict as V
from ..progress import Bar as progress_bar  # noqa: F401 (the reproductions' bars)
from ..result import Result, dump_json, load_json

REPORT_VERSION = 2


class Report:
    """Results keyed by name, the settings they were run with, and their
    reading. Subclasses set FORMAT and TITLE and define body(), claims()
    and figures()."""

    FORMAT = "alloclab-report"
    TITLE = ""
    WARN_METRICS = ("alloc_ns", "free_ns")  # metrics whose cells get stability warnings

    def __init__(self, results, settings=None):
        self.results = dict(results)
        self.settings = dict(settings or {})
        self._verdicts = None

    # -- to be provided --

    def body(self):
        """The tables and counters, as a list of text blocks."""
        return []

    def claims(self):
        """[(section, Claim, seed context)]: what the seed concludes, as claims
        on this data; seed context is a short string shown beside it."""
        return []

    def figures(self):
        """[(matplotlib Figure, file suffix)]."""
        return []

    # -- verdicts --

    @property
    def alpha(self):
        return self.settings.get("alpha", V.ALPHA)

    def verdicts(self):
        """[(section, Verdict, seed context)]: every claim judged together (one
        Benjamini-Hochberg family for the report)."""
        if self._verdicts is None:
            cl = self.claims()
            vs = V.judge([c for _, c, _ in cl], alpha=self.alpha)
            self._verdicts = [(s, v, ctx) for (s, _, ctx), v in zip(cl, vs)]
        return self._verdicts

    def verdict_text(self):
        lines = ["Seed conclusions on this machine (%s):" % self.rule_line()]
        last = None
        for section, v, ctx in self.verdicts():
            if section != last:
                lines.append("%s:" % section)
                last = section
            lines.append("- " + v.text() + (" [seed: %s]" % ctx if ctx else ""))
        n = len(self.verdicts())
        decided = sum(1 for _, v, _ in self.verdicts() if v.outcome != V.OPEN)
        by = {"latency": [0, 0], "counters": [0, 0]}
        for _, v, _ in self.verdicts():
            k = by[v.decided_by()]
            k[0] += v.outcome != V.OPEN
            k[1] += 1
        lines.append("%d of %d claims decided: %d of %d on latency, %d of %d on counters." % (
            decided, n, by["latency"][0], by["latency"][1], by["counters"][0],
            by["counters"][1]))
        return "\n".join(lines)

    def rule_line(self):
        return ("holds = every cell's 95%% CI beyond the claimed size (TOST at %g for "
                "'the same'); does not hold = a cell contradicts it, p < %g after "
                "Benjamini-Hochberg over the report's %d cells; latency on virtual CPUs never "
                "decides" % (self.alpha, self.alpha,
                             sum(len(v.cells) for _, v, _ in self.verdicts())))

    def decided_share(self, real_only=True):
        """(decided, total) over the claims; real_only: those that latency
        measured on real CPUs or counters can decide (no virtual-CPU latency)."""
        n = d = 0
        for _, v, _ in self.verdicts():
            if real_only and any(k == "virtual" for c in v.cells for k, _ in c.problems):
                continue
            n += 1
            d += v.outcome != V.OPEN
        return d, n

    # -- warnings --

    def warning_lines(self, wrap=104):
        """The instability warnings over every cell of the report's metrics,
        the machine's state, and short measured phases."""
        cells = []
        for key, res in self.results.items():
            for m in self.WARN_METRICS:
                for params, st in res.stats(m) if m in res.metrics() else ():
                    cells.append(("%s %s" % (self.cell_label(key, params), m), st))
        lines = _stats.warning_lines(cells, wrap=wrap)
        lines += self.machine_lines()
        return lines

    def cell_label(self, key, params):
        keep = [k for k in ("policy", "producers", "allocs_per_cycle") if k in params]
        return " ".join([str(key)] + ["%s" % params[k] if k == "policy" else "%s=%s" % (
            k, params[k]) for k in keep])

    def machine_lines(self):
        """What was bad in the machine's state: as recorded with the first
        Result, with the load average before and after the whole reproduction
        (the settings' load_before/load_after, else the Results')."""
        if not self.results:
            return []
        res = list(self.results.values())
        md = dict(res[0].metadata)
        md["load_before"] = self.settings.get("load_before", md.get("load_before"))
        md["load_after"] = self.settings.get("load_after", res[-1].metadata.get("load_after"))
        return machine.warnings(md)

    def settings_line(self):
        s = self.settings
        bits = ["effort %s" % s.get("effort", "normal")]
        if s.get("runs") is not None:
            bits.append("%s runs per cell" % s["runs"])
        if s.get("duration") is not None:
            bits.append("%g s measured per run" % s["duration"])
        return "Setup: " + ", ".join(bits) + "."

    # -- text --

    def __str__(self):
        parts = [self.TITLE, self.settings_line(), ""] if self.TITLE else []
        for block in self.body():
            parts += [block, ""]
        parts.append(self.verdict_text())
        w = self.warning_lines()
        if w:
            parts += ["", "warnings:"] + ["  " + x for x in w]
        return "\n".join(parts)

    # -- data --

    def to_dict(self):
        return {"format": self.FORMAT, "version": REPORT_VERSION, "settings": self.settings,
                "results": {k: r.to_dict() for k, r in self.results.items()},
                "verdicts": [dict(v.to_dict(), section=s, seed=ctx)
                             for s, v, ctx in self.verdicts()]}

    def to_json(self, path=None):
        return dump_json(self.to_dict(), path)

    @classmethod
    def from_json(cls, s):
        """A report from to_json() text, or a path to such a file."""
        d = load_json(s)
        if d.get("format") != cls.FORMAT:
            raise errors.FileFormatError("not an %s (format %r)" % (cls.FORMAT, d.get("format")))
        if d.get("version") != REPORT_VERSION:
            raise errors.InvalidArgument(
                "%s version %r: this alloclab reads version %d; rerun the reproduction"
                % (cls.FORMAT, d.get("version"), REPORT_VERSION))
        if not isinstance(d.get("results"), dict) or not isinstance(d.get("settings"), dict):
            raise errors.FileFormatError("not an %s: results and settings must be objects"
                                         % cls.FORMAT)
        return cls({k: Result.from_dict(v) for k, v in d["results"].items()}, d["settings"])

    def save_figures(self, path):
        """Write the figures: one PDF with a page each, or one file per figure
        (the first at PATH, the others at PATH-<suffix>.<ext>). Returns the
        paths written."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.backends.backend_pdf import PdfPages

        figs = self.figures()
        written = []
        if path.endswith(".pdf"):
            with PdfPages(path) as pdf:
                for f, _ in figs:
                    pdf.savefig(f)
            written.append(path)
        else:
            base, dot, ext = path.rpartition(".")
            for f, suffix in figs:
                out = path if not suffix else ("%s-%s.%s" % (base, suffix, ext) if dot
                                               else "%s-%s" % (path, suffix))
                f.savefig(out)
                written.append(out)
        for f, _ in figs:
            plt.close(f)
        return written


def side(points, metric, label=""):
    """verdict.Side over Points (None when none has the metric)."""
    return V.Side.from_points(points, metric, label)
