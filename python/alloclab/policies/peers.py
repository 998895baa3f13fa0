"""Peer allocators (glibc, jemalloc, gperftools-tcmalloc, mimalloc) run under
LD_PRELOAD in a child process.

The `system(allocator=NAME)` layer is the process's own malloc, checked by the
C side to be NAME. A peer other than this process's malloc cannot be loaded
in-process (Debian's jemalloc cannot be dlopen'ed: "cannot allocate memory in
static TLS block"; gperftools does not support dlopen), so each run of such a
cell is one child process (``python -m alloclab.measure._peer``) started with
LD_PRELOAD=<the peer's .so>: a fresh heap per run, and the same raw result
format as an in-process run, so Results do not care where a cell ran.

Cost: one interpreter start and library load per run, before and after the
measured phase, never inside it.
"""

import glob
import json
import os
import signal
import subprocess
import sys

from .. import errors
from ..cbind._ffi import lib
from .policy import Policy
from .libarena_real import layer_words

# name -> (shared object, Debian package)
PEERS = {
    "glibc": (None, None),
    "jemalloc": ("libjemalloc.so.2", "libjemalloc2"),
    "gperftools-tcmalloc": ("libtcmalloc_minimal.so.4", "libtcmalloc-minimal4"),
    "mimalloc": ("libmimalloc.so.2", "libmimalloc2.0"),
}
NAMES = list(PEERS)  # in the order of the C layer's `allocator` choices

_LIB_DIRS = ["/usr/lib/*-linux-gnu", "/lib/*-linux-gnu", "/usr/lib64", "/usr/lib",
             "/usr/local/lib"]


def current():
    """The peer serving this process's malloc."""
    return NAMES[lib.al_system_allocator()]


def library(name):
    """Path of the peer's shared object, or None when it is not installed."""
    so = PEERS[name][0]
    if so is None:
        return None
    for pattern in _LIB_DIRS:
        for d in sorted(glob.glob(pattern)):
            path = os.path.join(d, so)
            if os.path.exists(path):
                return path
    return None


def available(name):
    return name == "glibc" or library(name) is not None


def install_hint(name):
    return "apt-get install %s" % PEERS[name][1] if PEERS[name][1] else ""


def status():
    """{peer: (available, path or None, install hint)}."""
    return {n: (available(n), library(n), install_hint(n)) for n in NAMES}


def needed(policy):
    """The peer a policy needs preloaded, or None when it runs in-process."""

    pol = Policy(policy)
    if pol.names[-1] != "system":  # the bottom layer alone: the others may be plugins
        return None                # not loaded in this process
    peer = pol.params(len(pol) - 1)["allocator"]
    if peer == current():
        return None
    if peer == "glibc":
        # This process runs another malloc: run glibc's cells without the preload.
        return peer
    if not available(peer):
        raise errors.PeerUnavailable(
            "%s is not installed: %s (then it runs as policy %r)"
            % (peer, install_hint(peer), str(pol)), peer=peer)
    return peer


def _child_env(peer):
    env = dict(os.environ)
    pre = [p for p in env.get("LD_PRELOAD", "").split() if p and "alloclab" not in p]
    pre = [p for p in pre if not any(PEERS[n][0] and PEERS[n][0] in p for n in NAMES)]
    if peer != "glibc":
        pre.insert(0, library(peer))
    if pre:
        env["LD_PRELOAD"] = " ".join(pre)
    else:
        env.pop("LD_PRELOAD", None)
    return env


def _killed(task, run_index, peer, signum, stderr):
    """RunError for a child that a signal ended (a fault in a layer, most
    likely in a plugin: the built-in layers are tested, plugins are not)."""
    try:
        sig = signal.Signals(signum).name
    except ValueError:
        sig = "signal %d" % signum
    layers = [p["name"] for p in task.get("plugins") or ()]
    if len(layers) == 1:
        where = "in plugin layer %s (the stack's only plugin)" % layer_words(layers[0])
    elif layers:
        where = "in one of its plugin layers (%s)" % ", ".join(map(layer_words, layers))
    else:
        where = "under %s" % peer if peer else "(no plugin layer in it)"
    if sig == "SIGKILL":
        where += " (or by the kernel's out-of-memory killer)"
    tail = (stderr or "").strip()[-500:]
    return errors.RunError(
        "run %d of %s on policy %r was killed by %s %s: the child process running it died, "
        "this one carries on%s" % (run_index + 1, task["workload"], task["policy"], sig, where,
                                   "; its stderr: " + tail if tail else ""),
        code=None, signal=sig, policy=task["policy"], layers=layers)


def run_in_child(task, run_index, peer=None):
    """One run of a task in a fresh child process, with the peer preloaded
    (peer=None: this process's own malloc); returns the raw result dict, or
    raises what the child raised."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "alloclab.measure._peer"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_child_env(peer) if peer is not None else None)
    try:
        stdout, stderr = proc.communicate(
            json.dumps({"task": task, "run_index": run_index, "peer": peer}))
    except BaseException:
        # Ctrl-C (or any error) here ends the child and reaps it before the
        # exception goes on: no orphan keeps running the run.
        proc.kill()
        proc.wait()
        raise
    if proc.returncode < 0:
        raise _killed(task, run_index, peer, -proc.returncode, stderr)
    try:
        out = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise errors.RunError(
            "the %s child process failed (exit %d): %s"
            % (peer or "run", proc.returncode, (stderr or stdout).strip()[-2000:]),
            code=None) from None
    if "error" in out:
        e = out["error"]
        cls = getattr(errors, e.get("type", "RunError"), errors.RunError)
        if not (isinstance(cls, type) and issubclass(cls, errors.AlloclabError)):
            cls = errors.RunError
        raise cls(e.get("message", ""), code=e.get("code"))
    return out["raw"]
