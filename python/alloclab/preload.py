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
"""

import errno
import glob
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile

from . import errors, schema
from ._ffi import preload_path
from .policy import Policy
from .run import STATS_LEVEL_NAMES, STATS_LEVELS

MIN_SHARE = 0.99
"""The share of a process's allocations the policy must serve (refusals and
alignments it could not give go to glibc; fallbacks by design are not
counted against it)."""

BY_DESIGN = ("libc_early", "libc_large", "libc_threads")
REFUSED = ("libc_refused", "libc_aligned")
EXIT_ON_GLIBC = 125
"""The exit status of ``alloclab preload`` when a process ran on glibc."""

GUARD_LOCAL_REFUSED = (
    "guard=local is refused under the preload shim (a free from a thread without a model "
    "CPU, or from a signal handler inside the shim, reaches CPU 0's caches from another "
    "thread); use guard=atomic")
"""The shim's own reason (csrc/preload/preload.c), word for word, so that
``check()`` and a process's record say the same."""

_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def check(policy):
    """The Policy, or an InvalidArgument saying why the shim cannot run it."""
    pol = Policy(policy)
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


def _open_stats(path, mode):
    """The stats file at path opened for writing (mode "a" or "w"); an open
    that would wait (a named pipe with no reader) fails with ENXIO instead.
    The writes then block as usual (a pipe whose reader is slow)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | (os.O_TRUNC if mode == "w" else 0)
    fd = os.open(path, flags, 0o666)
    os.set_blocking(fd, True)
    return os.fdopen(fd, mode)


def check_stats_path(path, what="stats file"):
    """Raise InvalidArgument unless a stats file can be written at path (it
    is checked before the program starts, and left as it was). ``what``
    names it in the message ("--json file" for the CLI)."""
    if path == "":
        raise errors.InvalidArgument("cannot write the %s '': the name is empty" % what,
                                     value=path)
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
        with _open_stats(path, "a"):
            pass
    except OSError as e:
        why = ("it is a named pipe with no reader" if e.errno == errno.ENXIO
               and mode is not None and stat.S_ISFIFO(mode) else e.strerror)
        raise errors.InvalidArgument("cannot write the %s %s: %s"
                                     % (what, path, why), value=path) from None
    if mode is None:
        os.unlink(made)


def write_stats(path, st):
    """Write merged stats (collect()) to path as JSON; OSError when it fails."""
    with _open_stats(path, "w") as f:
        json.dump(st, f, indent=1)
        f.write("\n")


def status_text(returncode):
    """The program's end in words: "the program exited N" or "the program was
    ended by SIGNAME"."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal %d" % -returncode
        return "the program was ended by %s" % name
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


def _image_skips_preload(path, depth=0):
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
        return _image_skips_preload(os.fsdecode(interp[0]), depth + 1) if interp else None
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
    return _image_skips_preload(target) if target else None


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


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""The signals a ``forward_signals`` run passes on to the program."""


def _run_forwarding(argv, env, **kwargs):
    """Run argv to its end, passing FORWARDED signals sent to this process on
    to it (to its process group when it leads one), so that the program ends
    as the signal asks and this process still reports its stats.

    The signals (and SIGCHLD) are blocked here and taken with sigwaitinfo,
    which says who sent each: a terminal's ^C or ^\\ (sent by the kernel to
    the whole foreground group) already reached a program in this process
    group and is not sent twice; kill(1) aimed at this process is passed on.
    The program starts with the signal mask this process had."""
    sigs = set(FORWARDED) | {signal.SIGCHLD}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        proc = subprocess.Popen(
            argv, env=env, preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, old),
            **kwargs)
        try:
            while proc.poll() is None:
                info = signal.sigwaitinfo(sigs)
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
    return subprocess.CompletedProcess(proc.args, proc.returncode)


_SI_KERNEL = 0x80
"""si_code of a signal the kernel sent: the terminal's ^C, ^\\ or hangup."""


def run(policy, argv, stats=None, allow_glibc=False, min_share=MIN_SHARE, shim=None,
        verbose=False, forward_signals=False, level=None, **kwargs):
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

    ``stats`` is checked before argv starts (InvalidArgument: a stats
    level's name, a path that cannot be written, a directory, a socket, a
    named pipe with no reader);
    a write that fails after the run raises InvalidArgument naming the file
    and the program's status, with ``.proc`` and ``.stats``."""
    _not_a_level(stats, "file")
    if stats is not None:
        check_stats_path(stats)
    tmp = tempfile.mkdtemp(prefix="alloclab-preload-")
    try:
        argv, env = command(policy, argv, stats=tmp, env=kwargs.pop("env", None),
                            shim=shim, verbose=verbose, level=level)
        if forward_signals:
            proc = _run_forwarding(argv, env, **kwargs)
        else:
            proc = subprocess.run(argv, env=env, **kwargs)
        st = collect(tmp, policy, allow_glibc, min_share, root_ppid=os.getpid())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    st["returncode"] = proc.returncode
    proc.stats = st
    if stats is not None:
        try:
            write_stats(stats, st)
        except OSError as e:
            raise errors.InvalidArgument(
                "cannot write the stats file %s: %s (%s; its counters are .stats of this "
                "error)" % (stats, e.strerror or e, status_text(proc.returncode)),
                value=stats, proc=proc, stats=st) from None
    if st["on_glibc"] and not allow_glibc:
        raise errors.RunError(glibc_error(st, proc.returncode), proc=proc, stats=st)
    return proc


def read_stats(path):
    """The merged stats a run wrote (see collect())."""
    with open(path) as f:
        return json.load(f)
