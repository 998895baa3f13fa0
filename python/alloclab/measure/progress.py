"""Progress bars on stderr for runs, sweeps and reproductions.

One rule for every long job, as pyperf and pip behave: a tqdm bar (done/total,
rate, ETA) on stderr when stderr is a terminal and the job has lasted more
than DELAY_S seconds, so a quick run prints nothing and a piped or captured
stderr gets nothing at all (no carriage-return litter in logs). stdout is
never touched: the tables and --format output stay parseable.

The ``progress`` argument of run(), sweep() and the reproductions:
None (the default from the command line) = the rule above; True (the
``--progress`` flag) = a bar from the start, whatever stderr is (a log then
gets tqdm's updates, at most a few a second); False (``--no-progress``, and
the library's default where a caller asked for none) = never.

Bar.update() may be called from several threads (an executor's callbacks):
a lock orders the counts. Cost: one lock and a tqdm update per finished run
(tqdm redraws at most every 0.1 s); nothing while a run measures.
"""

import io
import os
import sys
import threading

DELAY_S = 2.0  # a job shorter than this shows no bar at all


def wanted(progress, file=None):
    """Whether a bar is drawn: ``progress`` True/False, or None = when
    ``file`` (default stderr) is a terminal."""
    if progress is not None:
        return bool(progress)
    f = sys.stderr if file is None else file
    try:
        return bool(f.isatty())
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False


def _has_width(f):
    """Whether ``f`` is a terminal that reports its size: a pseudo-terminal
    nobody sized (a test harness, `script`, some CI runners) reports 0 x 0,
    which tqdm takes literally and draws nothing; 80 x 20 are assumed then."""
    try:
        return os.get_terminal_size(f.fileno()).columns > 0
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


class Bar:
    """A progress bar over ``total`` units (runs, rows), or nothing.

    progress: None / True / False as in the module doc; desc: what is
    counted ("malloc-free", "sweep"); initial: units already done (a
    resumed sweep). Use as a context manager, or call close()."""

    def __init__(self, total, desc="alloclab", progress=None, unit="run", initial=0,
                 file=None):
        self.total, self.done = total, initial
        self._lock = threading.Lock()
        self._tqdm = None
        self._note = None
        f = sys.stderr if file is None else file
        if not wanted(progress, f) or not total:
            return
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - tqdm is a dependency
            return
        sized = _has_width(f)
        self._tqdm = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=f,
                          dynamic_ncols=sized, ncols=None if sized else 80,
                          nrows=None if sized else 20, leave=True,
                          mininterval=0.1,
                          delay=0 if progress else DELAY_S,
                          bar_format="{desc}: {percentage:3.0f}%%|{bar}| {n_fmt}/{total_fmt} "
                                     "%ss [{elapsed}<{remaining}, {rate_fmt}{postfix}]" % unit)

    @property
    def shown(self):
        """Whether this bar draws anything (False when not wanted)."""
        return self._tqdm is not None

    def update(self, n=1):
        with self._lock:
            self.done += n
            if self._tqdm is not None:
                self._tqdm.update(n)

    def note(self, text):
        """A short word after the counts ("measuring"); "" clears it."""
        with self._lock:
            t = self._tqdm
            if t is None or text == self._note:  # unchanged: the next update draws it
                return
            self._note = text
            # drawn now (a run may last minutes, and a reader waits for the
            # phase), unless the bar is still hidden
            t.set_postfix_str(text, refresh=t._time() - t.start_t >= t.delay)

    def close(self):
        with self._lock:
            if self._tqdm is not None:
                self._tqdm.close()
                self._tqdm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
