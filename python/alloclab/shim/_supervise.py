"""The recorder's supervisor: runs the recorded command in a process group of
its own and kills that group when the recorder dies (docs/record.md).

    python3 -S _supervise.py RAW_DIR RECORDER_PID -- CMD [ARGS...]

Run as a script by alloclab.record (never imported: it starts in a few ms,
without the package). Why a process of its own: PR_SET_PDEATHSIG, the
kernel's "signal me when my parent dies", reaches only the direct child and
is cleared when that child execs a set-uid program, so the command cannot
hold it; the supervisor holds it (it never execs) and, told that the
recorder died, SIGKILLs the command's whole process group (the command and
everything it started that stayed in the group) and removes the recorder's
raw folder, RAW_DIR, which nobody else would finalise.

The command's environment is RAW_DIR/env.json (written by the recorder,
read and removed here): the supervisor itself runs with the recorder's
environment, never under the preload shim, so it is no image of the trace.
It writes its pid to RAW_DIR/supervisor.pid: the command's first image is
the one whose parent that is.

Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to the supervisor (the
recorder forwards what kill(1) sends it; a terminal's ^C reaches the whole
foreground group) go on to the command's group. When the recorder's group
owns the terminal, the command's group is made the foreground group while
it runs (so the command can read the terminal, and ^C goes to it) and the
terminal is given back after. The supervisor ends as the command did: its
exit status, or the same signal (with core dumps off), so the recorder
reads the command's status as its own child's.

Cost: one fork and one Python start-up per record; nothing per call.
"""

import json
import os
import resource
import shutil
import signal
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
PDEATH = signal.SIGUSR1  # PR_SET_PDEATHSIG's signal: the recorder died
PR_SET_PDEATHSIG = 1


def _set_pdeathsig(sig):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def _terminal(pgrp):
    """The controlling terminal's descriptor when pgrp is its foreground
    group (the command then gets it), else None."""
    try:
        fd = os.open("/dev/tty", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.tcgetpgrp(fd) == pgrp:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _exec(argv, env, mask, tty):
    """In the forked child: a group of its own (the terminal's foreground
    group when the recorder's was: taken here too, before the exec, or a
    command that reads the terminal at once would stop on SIGTTIN), default
    signal actions (Python ignores SIGPIPE and SIGXFSZ, and ignored stays
    ignored through exec), the recorder's signal mask, then the command."""
    try:
        os.setpgid(0, 0)
        if tty is not None:
            os.tcsetpgrp(tty, os.getpid())  # SIGTTOU is still ignored here
        for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTTOU, signal.SIGTTIN,
                  signal.SIGTSTP, PDEATH):
            signal.signal(s, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.execvpe(argv[0], argv, env)
    except OSError as e:
        os.write(2, ("alloclab: cannot run %s: %s\n" % (argv[0], e.strerror)).encode())
    os._exit(127)


def _killed(pid, raw_dir, tty, pgrp):
    """The recorder died: kill the command's group, give the terminal back,
    remove the raw folder, and end."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    _give_back(tty, pgrp)
    shutil.rmtree(raw_dir, ignore_errors=True)
    os._exit(128 + signal.SIGKILL)


def _give_back(tty, pgrp):
    if tty is not None:
        try:
            os.tcsetpgrp(tty, pgrp)
        except OSError:
            pass


def _end_as(status):
    """Exit as the command did: its code, or its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot be caught anyway
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


def main(args):
    raw_dir, recorder = args[0], int(args[1])
    argv = args[3:]
    env_file = os.path.join(raw_dir, "env.json")
    with open(env_file, encoding="utf-8") as f:
        env = json.load(f)
    os.unlink(env_file)
    with open(os.path.join(raw_dir, "supervisor.pid"), "w") as f:
        f.write("%d\n" % os.getpid())  # the command's parent: the recorder finds its image by it
    waited = set(FORWARDED) | {signal.SIGCHLD, PDEATH}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # to take and give back the terminal
    if not _set_pdeathsig(PDEATH) or os.getppid() != recorder:
        shutil.rmtree(raw_dir, ignore_errors=True)  # the recorder is gone already
        os._exit(128 + signal.SIGKILL)
    pgrp = os.getpgrp()
    tty = _terminal(pgrp)
    pid = os.fork()
    if pid == 0:
        _exec(argv, env, mask, tty)
    try:
        os.setpgid(pid, pid)  # as the child does: whichever runs first
    except OSError:
        pass  # the child has exec'd already, in its own group
    if tty is not None:
        try:
            os.tcsetpgrp(tty, pid)
        except OSError:
            pass
    while True:
        info = signal.sigwaitinfo(waited)
        if info.si_signo == signal.SIGCHLD:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
        elif info.si_signo == PDEATH and os.getppid() != recorder:
            _killed(pid, raw_dir, tty, pgrp)
        else:  # a signal for the command (SIGUSR1 from anyone but the kernel's PDEATHSIG)
            try:
                os.killpg(pid, info.si_signo)
            except OSError:
                pass
    _give_back(tty, pgrp)
    _end_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
