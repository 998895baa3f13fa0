"""Run a program with its malloc on an alloclab policy (the LD_PRELOAD shim).

    alloclab preload --policy libarena-transfer --json out.json -- python3 script.py

``run(policy, argv, stats=None)`` runs argv under the shim and returns the
CompletedProcess with the merged stats as ``.stats`` (written to the file
``stats`` as JSON when given); it raises RunError when
a process ran without the policy, or the policy refused more than 1% of a
process's allocations (glibc served them), unless ``allow_glibc=True``.
``command(policy, argv, stats=DIR)`` returns (argv, env) to run yourself;
``collect(DIR, policy)`` then merges the records each process wrote.
``read_stats(path)`` reads a merged stats file. ``level`` (both) is the
stats level the policy's layers count at, as ``alloclab.run(stats=...)``:
lite (the default), off (the layers report no counters: not measured; the
shim's own counters, which the served share is read from, are kept) or full
(also lock hold and wait times). Here ``stats`` is where the records go,
never a level: a level's name given as ``stats`` is refused.

The stats file is checked before the program starts: a directory, a
socket, a block device and a named pipe with no reader (its open would
wait for one) are refused; a regular file, a character device (/dev/null,
a terminal) and a pipe with a reader (/dev/stdout into `jq`) are written
when the program ends. A write that still
fails once the program has ended raises InvalidArgument naming the file
and the program's status, with ``.proc`` and ``.stats``.

Every process image under the shim (the program, what it forks, what it or
they exec: a compiler driver's cc1/as/ld, git's children, ``sh -c``'s
commands) writes its own record: pid, ppid, argv0, whether the policy was
built and why not, how its fix-up reaches malloc's 16-byte alignment, the
shim's counters and every layer's stats. ``served`` in each record is the
share of its allocations the policy served, of those it was asked for and
could have served: requests larger than the policy's max size, allocations
before the policy existed (while it is built), and threads beyond the model
CPUs are glibc's by design, counted apart (``by_design``).

The shim refuses what it cannot serve safely: a bottom layer that does not
own its memory by address range (libc, system, null: the shim could not tell
its frees from glibc's, and libc would call malloc, that is the shim itself),
a top layer that cannot tell an object's size (realloc needs it), and
guard=local (a free from a thread without a model CPU, or from a signal
handler inside the shim, reaches CPU 0's caches from another thread).
``check()`` says so before anything runs, in the shim's words.

The watchdog (``watchdog`` seconds, 30 as the engine's; 0: off): a policy
call that makes no progress for that long (a plugin that loops, a lock never
released) in any process under the shim ends the program. No thread is added
to it: every thread bumps a word of its own in a file mapped MAP_SHARED
(ALLOCLAB_WATCH, laid out in csrc/preload/preload.c) on entering and leaving
the policy, and this process reads the words while it waits. A process that
stays inside one call that long is killed (SIGKILL), and the program with
it; run() then raises RunStalled naming the pid, the seconds and the policy
(``.pid``, ``.proc``, ``.stats``), and `alloclab preload` exits
EXIT_STALLED. A process stopped (SIGSTOP, ^Z) is not counted as stuck.
"""

import errno
import glob
import json
import mmap
import os
import re
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import time

from .. import errors
from .. import files
from ..cbind import schema
from ..cbind._ffi import preload_path
from ..policies import libarena_real
from ..policies.policy import Policy
from ..measure.run import STATS_LEVEL_NAMES, STATS_LEVELS, check_watchdog
from ..cbind._ffi import lib

MIN_SHARE = 0.99
"""The share of a process's allocations the policy must serve (refusals and
alignments it could not give go to glibc; fallbacks by design are not
counted against it)."""

BY_DESIGN = ("libc_early", "libc_large", "libc_threads")
REFUSED = ("libc_refused", "libc_aligned")
EXIT_ON_GLIBC = 125
"""The exit status of ``alloclab preload`` when a process ran on glibc."""
EXIT_STALLED = 124
"""The exit status of ``alloclab preload`` when its watchdog ended the
program (as timeout(1) exits 124 when its time ran out)."""
WATCHDOG = 30.0
"""Seconds a policy call may go without progress (the engine's default)."""

GUARD_LOCAL_REFUSED = (
    "guard=local is refused under the preload shim (a free from a thread without a model "
    "CPU, or from a signal handler inside the shim, reaches CPU 0's caches from another "
    "thread); use guard=atomic")
"""The shim's own reason (csrc/preload/preload.c), word for word, so that
``check()`` and a process's record say the same."""

PEER_REFUSED = (
    "preset %s is a peer (%s): a real allocator, run in a child process of its own, never "
    "inside the shim; give the shim alloclab's layers or an in-process preset")
"""The shim's refusal of a peer preset given by name (csrc/preload/preload.c),
word for word: its name, then its spec."""

_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def check(policy):
    """The Policy, or an InvalidArgument saying why the shim cannot run it."""
    pol = Policy(policy)
    preset = schema.presets().get(pol.name)
    if preset is not None and preset.peer:
        raise errors.InvalidArgument(PEER_REFUSED % (preset.name, preset.spec),
                                     value=preset.name)
    bottom = pol.layers[-1][0]
    if not schema.layer(bottom).has("owns"):
        ok = [p for p, spec in __import__("alloclab").presets.items()
              if schema.layer(Policy(spec).layers[-1][0]).has("owns")]
        raise errors.InvalidArgument(
            "policy %r cannot back a program's malloc: its bottom layer %s does not own its "
            "memory by address range (libc and system are malloc itself); use e.g. %s"
            % (str(pol), bottom, ", ".join(ok)), value=str(pol))
    top = pol.layers[0][0]
    if not (schema.layer(top).has("usable") and schema.layer(top).has("owns")):
        raise errors.InvalidArgument(
            "policy %r cannot back a program's malloc: its top layer %s cannot tell an "
            "object's size or owner (features usable and owns), which realloc and free need"
            % (str(pol), top), value=str(pol))
    for i in range(len(pol.layers)):
        if pol.params(i).get("guard") == "local":
            raise errors.InvalidArgument(GUARD_LOCAL_REFUSED, value="local")
    return pol


def _not_a_level(stats, what):
    """Refuse a stats level's name given as stats= (the records' file or
    directory): InvalidArgument naming it, level= and the valid levels."""
    if isinstance(stats, str) and stats in STATS_LEVELS:
        raise errors.InvalidArgument(
            "stats=%r is the %s the records are written to, not a stats level: the stats "
            "level is level=%r (valid levels: %s)" % (stats, what, stats, ", ".join(STATS_LEVEL_NAMES)),
            value=stats, valid=STATS_LEVEL_NAMES)


def _open_stats(path):
    """The stats file at path opened for appending, made when missing; an
    open that would wait (a named pipe with no reader) fails with ENXIO."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_APPEND, 0o666)
    return os.fdopen(fd, "a")


def check_stats_path(path, what="stats file"):
    """Raise InvalidArgument unless a stats file can be written at path (it
    is checked before the program starts, and left as it was). ``what``
    names it in the message ("--json file" for the CLI)."""
    if path == "":
        raise errors.InvalidArgument("cannot write the %s '': the name is empty" % what,
                                     value=path)
    if files.descriptor(path) is not None:  # written through this process's descriptor
        try:
            files.check_output(path, what)
        except errors.InvalidArgument as e:
            raise errors.InvalidArgument("cannot write the %s %s: %s" % (what, path, e.why),
                                         value=path) from None
        return
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None  # missing (the open below says why when it cannot be made)
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISCHR(mode)
                                 or stat.S_ISFIFO(mode)):
        kind = next((k for test, k in _FILE_KINDS if test(mode)), "not a file")
        raise errors.InvalidArgument("cannot write the %s %s: it is %s" % (what, path, kind),
                                     value=path)
    made = os.path.realpath(path)  # what the open creates (a dangling link's target)
    try:
        with _open_stats(path):
            pass
    except OSError as e:
        why = ("it is a named pipe with no reader" if e.errno == errno.ENXIO
               and mode is not None and stat.S_ISFIFO(mode) else e.strerror)
        raise errors.InvalidArgument("cannot write the %s %s: %s"
                                     % (what, path, why), value=path) from None
    if mode is None:
        os.unlink(made)
    elif stat.S_ISREG(mode):  # written through a temporary file renamed over it
        d = os.path.dirname(made) or "."
        if not os.access(d, os.W_OK | os.X_OK):
            raise errors.InvalidArgument(
                "cannot write the %s %s: its directory %s cannot be written, so the file "
                "cannot be replaced whole" % (what, path, d), value=path)


def write_stats(path, st):
    """Write merged stats (collect()) to path as JSON, as alloclab.files
    writes every output (a regular file replaced whole, so a failed write
    leaves the old one; a device or a pipe with a reader in place); OSError
    when the write fails."""
    try:
        files.write_text(path, json.dumps(st, indent=1) + "\n", "stats file")
    except errors.InvalidArgument as e:  # the path became unusable since it was checked
        raise OSError(0, getattr(e, "why", str(e))) from None


def _signal_name(signum):
    try:
        return signal.Signals(signum).name
    except ValueError:
        return "signal %d" % signum


def status_text(returncode):
    """The program's end in words: "the program exited N" or "the program was
    ended by SIGNAME"."""
    if returncode is not None and returncode < 0:
        return "the program was ended by %s" % _signal_name(-returncode)
    return "the program exited %s" % returncode


def check_level(level):
    """The stats level name, or an InvalidArgument naming it and the valid
    ones (None: the default, lite)."""
    if level is not None and (not isinstance(level, str) or level not in STATS_LEVELS):
        raise errors.InvalidArgument(
            "level=%r is not a stats level; valid levels: %s"
            % (level, ", ".join(STATS_LEVEL_NAMES)), value=level, valid=STATS_LEVEL_NAMES)
    return level


def command(policy, argv, stats=None, env=None, shim=None, verbose=False, level=None):
    """(argv, env) that run argv with its malloc on the policy. ``stats``: a
    directory (created if missing) where every process writes its record
    (merge them with ``collect``; a stats level's name is refused there).
    ``shim``: a shim built with plugins in (alloclab.plugin.preload_shim),
    else the stock one. ``verbose``: the shim
    says on stderr what it does in each process (otherwise it writes nothing
    there). ``level``: the stats level the policy's layers count at (lite,
    off or full; None: lite), set as ALLOCLAB_STATS_LEVEL (and an inherited
    one removed when None); the shim's own counters count at every level."""
    pol = check(policy)
    check_level(level)
    _not_a_level(stats, "directory")
    if stats == "":
        raise errors.InvalidArgument("stats='' names no directory: give one, or None for "
                                     "no records", value=stats)
    if not argv:
        raise errors.InvalidArgument("preload needs a command to run")
    real = libarena_real.layers_in(pol)
    if real and shim:
        raise errors.InvalidArgument(
            "policy %r runs libarena's own code (%s), which the shim gets compiled in: it "
            "cannot be combined with a shim built with another plugin" % (str(pol),
                                                                        ", ".join(real)),
            value=str(pol))
    if real:
        shim = libarena_real.preload_shim(real)
    # ld.so searches its library path for a name without a slash, and a
    # relative path is read from each process's own working directory
    shim = os.path.abspath(shim or preload_path())
    if not os.path.exists(shim):
        raise errors.AlloclabError("the preload shim is not built: %s is missing" % shim)
    env = dict(os.environ if env is None else env)
    pre = [p for p in env.get("LD_PRELOAD", "").split() if p and p != shim]
    env["LD_PRELOAD"] = " ".join([shim] + pre)
    env["ALLOCLAB_POLICY"] = str(pol)
    if stats is not None:
        os.makedirs(stats, exist_ok=True)
        env["ALLOCLAB_STATS"] = os.path.abspath(stats)
    else:
        env.pop("ALLOCLAB_STATS", None)
    env.pop("ALLOCLAB_WATCH", None)  # run() watches its own program, nothing inherits one
    if verbose:
        env["ALLOCLAB_VERBOSE"] = "1"
    else:
        env.pop("ALLOCLAB_VERBOSE", None)
    if level is not None:
        env["ALLOCLAB_STATS_LEVEL"] = level
    else:
        env.pop("ALLOCLAB_STATS_LEVEL", None)
    return list(argv), env


_RECORD = re.compile(r"\.(\d+)(?:\.(\d+))?$")


def _served(rec):
    sh = rec.get("shim", {})
    asked = sh.get("policy_allocs", 0) + sum(sh.get(k, 0) for k in REFUSED)
    return sh.get("policy_allocs", 0) / asked if asked else None


def records(stats):
    """The records of a stats directory (or prefix), in pid order, each with
    ``served`` (the policy's share, None when it saw no allocation) and
    ``by_design`` (allocations glibc served by design) added."""
    prefix = os.path.join(stats, "alloclab") if os.path.isdir(stats) else stats
    out = []
    for path in glob.glob(glob.escape(prefix) + ".*"):
        m = _RECORD.search(path[len(prefix):])
        if not m or path.endswith(".tmp"):
            continue
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue  # claimed but never written: a process killed at start
        rec["generation"] = int(m.group(2) or 0)
        rec["served"] = _served(rec)
        rec["by_design"] = sum(rec.get("shim", {}).get(k, 0) for k in BY_DESIGN)
        out.append(rec)
    out.sort(key=lambda r: (r["pid"], r["generation"]))
    return out


def _name(rec):
    return "pid %d (%s)" % (rec["pid"], os.path.basename(rec.get("argv0") or "?"))


def image_skips_preload(path, depth=0):
    """Why the dynamic loader would not preload the shim into the image at
    path (static, setuid or setgid; a script's interpreter likewise), or
    None."""
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None  # cannot have run: the exec failed
    if st.st_mode & 0o6000:
        return "a setuid or setgid program"
    if head.startswith(b"#!") and depth < 4:
        interp = head[2:].split(b"\n", 1)[0].split()
        return image_skips_preload(os.fsdecode(interp[0]), depth + 1) if interp else None
    if head[:4] != b"\x7fELF" or len(head) < 64:
        return None
    is64, order = head[4] == 2, "little" if head[5] == 1 else "big"

    def num(off, size):
        return int.from_bytes(head[off:off + size], order)

    phoff, phentsize, phnum = (num(32, 8), num(54, 2), num(56, 2)) if is64 else \
        (num(28, 4), num(42, 2), num(44, 2))
    for i in range(phnum):
        off = phoff + i * phentsize
        if off + 4 > len(head):
            return None  # program headers past what was read: assume dynamic
        if num(off, 4) == 3:  # PT_INTERP: the dynamic loader runs, and preloads
            return None
    return "a statically linked program"


def _exec_without_shim(rec):
    """Why the image a record's last exec loaded ran without the shim, or
    None: its environment no longer preloaded it, or the image is static or
    setuid. A record that ends in an exec the shim would have followed, with
    no record after it, is a process killed before its new image started."""
    if not rec.get("exec_preload", True):
        return "the environment it was given drops LD_PRELOAD or ALLOCLAB_POLICY"
    target = rec.get("exec") or ""
    if "/" not in target:
        target = shutil.which(target) or ""
    return image_skips_preload(target) if target else None


def problems(recs, min_share=MIN_SHARE):
    """One line per process that ran on glibc: the policy was not built, it
    served less than min_share of what it was asked, or it exec'd an image
    that wrote no record (that image ran without the shim)."""
    out = []
    last = {}
    for r in recs:  # in (pid, generation) order: the last record of each pid wins
        last[r["pid"]] = r
    for r in recs:
        why = _exec_without_shim(r) if r.get("end") == "exec" and last[r["pid"]] is r \
            else None
        if why:
            target = r.get("exec") or "?"
            out.append("pid %d (%s): exec'd %s, which ran without the shim (%s)"
                       % (r["pid"], os.path.basename(target), target, why))
        if r.get("state") != "ready":
            out.append("%s: no policy (%s)" % (_name(r), r.get("error") or "not built"))
        elif r.get("end") != "running" and r["served"] is not None and \
                r["served"] < min_share:
            sh = r["shim"]
            out.append("%s: the policy served %.1f%% (%d of %d allocations refused, %d not "
                       "aligned)" % (_name(r), 100 * r["served"], sh["libc_refused"],
                                     sh["policy_allocs"] + sh["libc_refused"]
                                     + sh["libc_aligned"], sh["libc_aligned"]))
    return out


def collect(stats, policy=None, allow_glibc=False, min_share=MIN_SHARE, root_ppid=None):
    """Merge the records of a stats directory into one dict: ``processes``
    (every record), ``shim`` (counters summed), ``served`` (the policy's
    share over all processes), ``on_glibc`` (problems()), ``ok``, and, for
    the first process (the one whose parent is root_ppid, after its execs),
    its ``state``, ``stats_level`` and ``layers`` (at stats level off each
    layer has only ``layer`` and ``bytes_held``: its counters were not
    measured)."""
    recs = records(stats)
    tot = {}
    for r in recs:
        for k, v in r.get("shim", {}).items():
            tot[k] = tot.get(k, 0) + v
    asked = tot.get("policy_allocs", 0) + sum(tot.get(k, 0) for k in REFUSED)
    roots = [r for r in recs if root_ppid is None or r.get("ppid") == root_ppid] or recs
    root = max(roots, key=lambda r: (-r["pid"], r["generation"])) if roots else {}
    bad = problems(recs, min_share)
    if not recs:
        bad = ["no process loaded the shim (a statically linked or setuid program ignores "
               "LD_PRELOAD)"]
    return {
        "policy": str(Policy(policy)) if policy else (recs[0]["policy"] if recs else None),
        "allow_glibc": bool(allow_glibc),
        "min_share": min_share,
        "processes": recs,
        "shim": tot,
        "served": tot.get("policy_allocs", 0) / asked if asked else None,
        "on_glibc": bad,
        "ok": not bad,
        "note": ("ran with --allow-glibc: %d process(es) partly or wholly on glibc, whose "
                 "figures are not the policy's" % len(bad)) if bad and allow_glibc else "",
        "state": "ready" if recs and all(r.get("state") == "ready" for r in recs) else "off",
        "stats_level": root.get("stats_level"),
        "layers": root.get("layers", []),
        "root": root.get("pid"),
    }


def summary(st):
    """One line: processes, the policy's share, what ran on glibc."""
    n = len(st["processes"])
    sh = st["shim"]
    asked = sh.get("policy_allocs", 0) + sum(sh.get(k, 0) for k in REFUSED)
    if st["served"] is None:
        served = "the policy was asked for no allocation"
    else:
        served = "the policy served %.2f%% of %d allocations" % (100 * st["served"], asked)
    line = ("%d process%s on %s: %s; by design on glibc: %d larger than its max size, %d "
            "before it was built, %d on threads past the model CPUs"
            % (n, "" if n == 1 else "es", st["policy"], served, sh.get("libc_large", 0),
               sh.get("libc_early", 0), sh.get("libc_threads", 0)))
    if st["on_glibc"]:
        line += "; on glibc: " + "; ".join(st["on_glibc"])
    return line


def glibc_error(st, returncode=None):
    """The one-line message for a run where processes ran on glibc."""
    if st["processes"]:
        msg = "%d of %d process(es) did not run on %s: %s" % (
            len(st["on_glibc"]), len(st["processes"]), st["policy"],
            "; ".join(st["on_glibc"]))
    else:
        msg = "nothing ran on %s: %s" % (st["policy"], st["on_glibc"][0])
    if returncode:
        msg += " (the program exited %d)" % returncode
    return msg + "; --allow-glibc (allow_glibc=True) accepts such a run"


class _Watch:
    """The watchdog's shared file (the layout is csrc/preload/preload.c's)
    and what was seen in it: a call in progress is an odd word, and one
    that keeps the same odd value for ``limit`` seconds made no progress."""

    MAGIC = b"alwatch1"
    SLOTS_AT = 4096
    NSLOTS = 256
    LINE = 64

    def __init__(self, folder, limit, shim):

        self.limit = limit
        self.period = min(1.0, max(0.01, limit / 8))
        self.shim = os.path.basename(shim)
        self.nwords = int(lib.AL_MAX_CPUS)
        self.area = self.LINE * self.nwords  # a slot's seq words, a line each
        self.words_at = self.SLOTS_AT + -(-self.NSLOTS * self.LINE // 4096) * 4096
        self.path = os.path.join(folder, "watch")
        size = self.words_at + self.NSLOTS * self.area
        with open(self.path, "wb") as f:
            f.write(self.MAGIC + struct.pack("<IIQ", self.NSLOTS, self.nwords,
                                             self.words_at))
            f.truncate(size)  # sparse: the slots are zero, free
        with open(self.path, "rb") as f:
            self.map = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
        self.seen = {}

    def close(self):
        self.map.close()

    def _words(self, k, off, hw):
        yield "init", struct.unpack_from("<Q", self.map, off + 8)[0]
        area = self.words_at + k * self.area
        for i in range(min(hw, self.nwords)):
            yield i, struct.unpack_from("<Q", self.map, area + self.LINE * i)[0]

    def _stuck_here(self, pid):
        """Whether pid is still a live, running process with the shim loaded
        (not a zombie, not stopped, not a reused pid without it)."""
        try:
            with open("/proc/%d/stat" % pid) as f:
                st = f.read().rsplit(")", 1)[1].split()[0]
            if st in "ZXxTt":
                return st in "Tt" and None  # stopped: not stuck; gone: no
            with open("/proc/%d/maps" % pid) as f:
                return any(self.shim in line for line in f)
        except (OSError, IndexError):
            return False

    def stuck(self):
        """The pid of a process inside one policy call for ``limit`` seconds,
        or None."""
        now = time.monotonic()
        for k in range(self.NSLOTS):
            off = self.SLOTS_AT + k * self.LINE
            pid, hw = struct.unpack_from("<iI", self.map, off)
            if pid <= 0:
                continue
            for i, seq in self._words(k, off, hw):
                key = (k, pid, i)
                if not seq & 1:
                    self.seen.pop(key, None)
                    continue
                old = self.seen.get(key)
                if old is None or old[0] != seq:
                    self.seen[key] = (seq, now)
                elif now - old[1] >= self.limit:
                    here = self._stuck_here(pid)
                    if here:
                        return pid
                    if here is None:  # stopped: its time starts again
                        self.seen[key] = (seq, now)
        return None

    def fire(self, pid, proc):
        """Kill the stuck process and the program; (pid, its name)."""
        try:  # argv[0], as the process's stats record names it
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                name = os.path.basename(os.fsdecode(f.read().split(b"\0", 1)[0])) or "?"
        except OSError:
            name = "?"
        for victim in dict.fromkeys((pid, proc.pid)):
            try:
                os.kill(victim, signal.SIGKILL)
            except OSError:
                pass
        return pid, name


def stalled_error(stalled, limit, policy):
    """The one-line message for a program the watchdog ended (stalled: the
    stuck process's (pid, name)), in the words of the engine's watchdog."""
    return ("watchdog: a policy call made no progress for %g s in pid %d (%s) (policy %s); "
            "the program was killed (SIGKILL)" % (limit, stalled[0], stalled[1], policy))


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""The signals a ``forward_signals`` run passes on to the program."""


USER_SIGNALS = FORWARDED + (signal.SIGPIPE,)
"""Signals that end a program as a user or its pipeline asked (^C, kill,
a reader gone), not as a fault: `alloclab preload` reports none of them."""


def signal_error(st, returncode, plugin=None):
    """The one-line message for a program a signal ended that no user sent
    (SIGSEGV, SIGBUS, SIGABRT, SIGKILL, ...), naming the signal, the process
    and the policy, as ``run --isolate`` does; None when the program exited,
    or ended by one of USER_SIGNALS. ``plugin``: the plugin file compiled
    into the shim, the likeliest cause."""
    if returncode is None or returncode >= 0 or -returncode in USER_SIGNALS:
        return None
    sig = _signal_name(-returncode)
    root = next((r for r in st["processes"] if r["pid"] == st.get("root")), None)
    who = _name(root) if root else "the program"
    msg = "%s was killed by %s on policy %s" % (who, sig, st["policy"])
    if plugin:
        msg += (" with plugin %s (a fault in a layer, most likely the plugin's: the "
                "built-in layers are tested, plugins are not)" % plugin)
    if sig == "SIGKILL":
        msg += " (or by the kernel's out-of-memory killer)"
    return msg


def _run_watched(argv, env, watch, input=None, timeout=None, check=False,
                 capture_output=False, **kwargs):
    """subprocess.run(argv), watching for a stuck policy call while it
    waits; the CompletedProcess has ``.stalled`` (None, or which process
    the watchdog killed)."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    deadline = None if timeout is None else time.monotonic() + timeout
    stalled = None
    with subprocess.Popen(argv, env=env, **kwargs) as proc:
        try:
            while True:
                step = watch.period if deadline is None else \
                    max(0.0, min(watch.period, deadline - time.monotonic()))
                try:
                    out, err = proc.communicate(input, timeout=step)
                    break
                except subprocess.TimeoutExpired:
                    if deadline is not None and time.monotonic() >= deadline:
                        proc.kill()
                        out, err = proc.communicate()
                        raise subprocess.TimeoutExpired(argv, timeout, out, err) from None
                    pid = None if stalled else watch.stuck()
                    if pid is not None:
                        stalled = watch.fire(pid, proc)
        except BaseException:
            proc.kill()
            raise
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check and not stalled:
        done.check_returncode()
    done.stalled = stalled
    return done


def run_forwarding(argv, env, watch=None, **kwargs):
    """Run argv to its end, passing FORWARDED signals sent to this process on
    to it (to its process group when it leads one), so that the program ends
    as the signal asks and this process still reports its stats.

    The signals (and SIGCHLD) are blocked here and taken with sigwaitinfo,
    which says who sent each: a terminal's ^C or ^\\ (sent by the kernel to
    the whole foreground group) already reached a program in this process
    group and is not sent twice; kill(1) aimed at this process is passed on.
    The program starts with the signal mask this process had. With a watch,
    the wait wakes every watch.period to look for a stuck policy call."""
    sigs = set(FORWARDED) | {signal.SIGCHLD}
    stalled = None
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        proc = subprocess.Popen(
            argv, env=env, preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, old),
            **kwargs)
        try:
            while proc.poll() is None:
                info = signal.sigtimedwait(sigs, watch.period) if watch else \
                    signal.sigwaitinfo(sigs)
                if info is None:
                    pid = None if stalled else watch.stuck()
                    if pid is not None:
                        stalled = watch.fire(pid, proc)
                    continue
                if info.si_signo == signal.SIGCHLD:
                    continue
                try:
                    pgid = os.getpgid(proc.pid)
                except OSError:
                    continue  # gone: poll() reaps it
                if info.si_code == _SI_KERNEL and pgid == os.getpgrp():
                    continue  # the terminal sent it to the program as well
                try:
                    if pgid == proc.pid:
                        os.killpg(pgid, info.si_signo)
                    else:
                        os.kill(proc.pid, info.si_signo)
                except OSError:
                    pass
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        # A signal that came with the program's end (the terminal's ^C that
        # ended it too) is taken here, not raised here once unblocked.
        while signal.sigtimedwait(sigs, 0) is not None:
            pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    done = subprocess.CompletedProcess(proc.args, proc.returncode)
    done.stalled = stalled
    return done


_SI_KERNEL = 0x80
"""si_code of a signal the kernel sent: the terminal's ^C, ^\\ or hangup."""


def _launch(argv, env, watch, forward_signals, kwargs):
    """Run argv to its end as run() asked: forwarding signals, watching
    for a stuck policy call, or plainly; the CompletedProcess has
    ``.stalled`` (None, or the (pid, name) the watchdog killed)."""
    if forward_signals:
        return run_forwarding(argv, env, watch, **kwargs)
    if watch:
        return _run_watched(argv, env, watch, **kwargs)
    proc = subprocess.run(argv, env=env, **kwargs)
    proc.stalled = None
    return proc


def _end_status(st, proc, watchdog):
    """Add the program's end to merged stats: ``returncode`` as a shell
    reports it (128 + N when signal N ended it; proc.returncode stays -N, as
    subprocess has it), ``signal`` (its name or None) and ``stalled`` (the
    watchdog's message or None)."""
    rc = proc.returncode
    st["returncode"] = 128 - rc if rc < 0 else rc
    st["signal"] = _signal_name(-rc) if rc < 0 else None
    st["stalled"] = stalled_error(proc.stalled, watchdog, st["policy"]) if proc.stalled \
        else None


def run(policy, argv, stats=None, allow_glibc=False, min_share=MIN_SHARE, shim=None,
        verbose=False, forward_signals=False, level=None, watchdog=WATCHDOG, **kwargs):
    """Run argv under the shim; returns the CompletedProcess with the merged
    stats as ``.stats`` (written to the file ``stats`` as JSON when given).
    ``level``: the stats level of the policy's layers (see command()).
    Raises RunError (with ``.proc`` and ``.stats``) when a process ran
    without the policy or it served less than min_share of a process's
    allocations, unless allow_glibc (then ``.stats["note"]`` says so).

    ``forward_signals`` (main thread only; kwargs then go to Popen, so no
    capture_output or input): SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to
    this process are passed on to the program, which is waited for, and its
    stats are merged as for a run that ended by itself.

    ``watchdog``: seconds a policy call may make no progress in any process
    (0: off; see the module's doc); past them the program is killed and
    RunStalled raised (``.pid``: the stuck process), its stats written
    first, with ``stalled`` saying what happened (None otherwise).

    The stats' ``returncode`` is the program's status as a shell reports
    it, 128 + N after signal N (see _end_status); ``proc.returncode`` -N.

    ``stats`` is checked before argv starts (InvalidArgument: a stats
    level's name, a path that cannot be written, a directory, a socket, a
    named pipe with no reader);
    a write that fails after the run raises InvalidArgument naming the file
    and the program's status, with ``.proc`` and ``.stats``."""
    _not_a_level(stats, "file")
    watchdog = check_watchdog(watchdog)
    if stats is not None:
        check_stats_path(stats)
    tmp = tempfile.mkdtemp(prefix="alloclab-preload-")
    watch = None
    try:
        argv, env = command(policy, argv, stats=tmp, env=kwargs.pop("env", None),
                            shim=shim, verbose=verbose, level=level)
        if watchdog:
            watch = _Watch(tmp, watchdog, env["LD_PRELOAD"].split()[0])
            env["ALLOCLAB_WATCH"] = watch.path
        proc = _launch(argv, env, watch, forward_signals, kwargs)
        st = collect(tmp, policy, allow_glibc, min_share, root_ppid=os.getpid())
    finally:
        if watch:
            watch.close()
        shutil.rmtree(tmp, ignore_errors=True)
    _end_status(st, proc, watchdog)
    proc.stats = st
    if stats is not None:
        try:
            write_stats(stats, st)
        except OSError as e:
            raise errors.InvalidArgument(
                "cannot write the stats file %s: %s (%s; its counters are .stats of this "
                "error)" % (stats, e.strerror or e, status_text(proc.returncode)),
                value=stats, proc=proc, stats=st) from None
    if st["stalled"]:
        raise errors.RunStalled(st["stalled"], proc=proc, stats=st, pid=proc.stalled[0])
    if st["on_glibc"] and not allow_glibc:
        raise errors.RunError(glibc_error(st, proc.returncode), proc=proc, stats=st)
    return proc


def read_stats(path):
    """The merged stats a run wrote (see collect())."""
    with open(path) as f:
        return json.load(f)
