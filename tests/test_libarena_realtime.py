"""realtime=True / --realtime: the workers run SCHED_FIFO (the kernel's
arena lock holders cannot be preempted), only with fewer producers than
usable CPUs and where the process may; refused clearly otherwise, and
recorded in the Result."""
import errno
import glob
import os
import resource
import subprocess
import sys
import threading

import pytest

import alloclab as al
from alloclab._ffi import lib

USABLE = int(lib.al_cpus_usable())
PERMITTED = os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_RTPRIO)[0] > 0


def _fifo_threads():
    """Threads of this process whose policy is SCHED_FIFO (/proc stat field 41)."""
    n = 0
    for path in glob.glob("/proc/self/task/*/stat"):
        try:
            with open(path) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        n += int(fields[38]) == os.SCHED_FIFO
    return n


@pytest.mark.parametrize("extra", [0, 1])
def test_refused_without_a_spare_cpu(extra):
    n = USABLE + extra
    with pytest.raises(al.errors.ParameterRangeError, match="fewer producers than usable") as e:
        al.run("malloc-free", "libarena-transfer", runs=1, cycles=5, producers=n,
               cpu="virtual", realtime=True)
    assert e.value.value == n and e.value.max == USABLE - 1
    assert "producers=%d" % n in str(e.value)


def test_not_a_bool():
    with pytest.raises(al.errors.ParameterTypeError, match="realtime must be True or False"):
        al.run("malloc-free", "buddy", runs=1, cycles=5, realtime="yes")


def test_recorded_off_by_default():
    r = al.run("malloc-free", "buddy", runs=1, cycles=5, warmup_cycles=0)
    assert r.metadata["run"]["realtime"] is False


@pytest.mark.skipif(USABLE < 2 or not PERMITTED, reason="needs 2 CPUs and SCHED_FIFO rights")
def test_workers_run_sched_fifo():
    """While the run runs, a thread of this process is SCHED_FIFO; before and
    after, none is."""
    assert _fifo_threads() == 0
    seen, done = [], threading.Event()

    def watch():
        while not done.is_set() and not seen:
            if _fifo_threads():
                seen.append(True)

    t = threading.Thread(target=watch)
    t.start()
    try:
        r = al.run("malloc-free", "libarena-transfer", runs=1, producers=1, duration=0.3,
                   warmup_cycles=0, realtime=True)
    finally:
        done.set()
        t.join()
    assert seen and r.metadata["run"]["realtime"] is True
    assert _fifo_threads() == 0


@pytest.mark.skipif(os.geteuid() != 0 or USABLE < 2, reason="drops root to test the refusal")
def test_refused_when_not_permitted():
    code = (
        "import os, resource\n"
        "import alloclab as al\n"
        "al.run('malloc-free', 'buddy', runs=1, cycles=5)  # every module loaded as root\n"
        "resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))\n"
        "os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
        "try:\n"
        "    al.run('malloc-free', 'buddy', runs=1, cycles=5, realtime=True)\n"
        "except al.errors.RunError as e:\n"
        "    print(type(e).__name__, e.code, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("RunError %d " % -errno.EPERM), out.stdout
    assert "may not use SCHED_FIFO" in out.stdout and "CAP_SYS_NICE" in out.stdout


def test_cli_refusal_is_one_line():
    out = subprocess.run([sys.executable, "-m", "alloclab", "run", "malloc-free", "--policy",
                          "libarena-transfer", "--producers", str(USABLE), "--realtime",
                          "--quick"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alloclab: error: realtime=True needs")


def test_refusal_on_a_single_cpu_says_no_count_fits(monkeypatch):
    # with one usable CPU no producer count is allowed: the refusal says so
    # instead of suggesting producers <= 0
    run_mod = sys.modules["alloclab.run"]

    class OneCpu:
        AL_RUN_REALTIME = lib.AL_RUN_REALTIME

        def al_cpus_usable(self):
            return 1

    monkeypatch.setattr(run_mod, "lib", OneCpu())
    e = run_mod._realtime_refusal(lib.AL_RUN_REALTIME, 1, "")
    assert isinstance(e, al.errors.ParameterRangeError)
    assert str(e) == ("realtime=True needs at least 2 usable CPUs (the main thread and the "
                      "watchdog keep one), this process has 1: leave realtime off")
    assert "<= 0" not in str(e)
