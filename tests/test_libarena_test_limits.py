"""`alloclab libarena test` and libarena_real.run_tests: a selftest program
that never returns is killed at its time limit and reported, the programs
after it still run, and its child process never outlives the command: not
at the limit, not when the command is interrupted (Ctrl-C to the process
group, SIGTERM), not when it is killed outright, not when an error stops it;
in a plain build and in an ASan build (run by a second interpreter).

The hanging program writes its pid to a FIFO (named by $%s) before it
spins, so each test knows when it spins and which process to watch (through
a pidfd: no pid reuse).""" % "ALLOCLAB_TEST_HANG_FIFO"
import math
import os
import select
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import example_tree_with

from alloclab import errors
from alloclab import libarena_real as lr

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "bpf_tree")
WAIT = 120  # seconds: the most a test waits for an event before it fails
FIFO_ENV = "ALLOCLAB_TEST_HANG_FIFO"
HANG = r"""
extern char *getenv(const char *name);
extern int open(const char *path, int flags, ...);
extern int getpid(void);
extern long write(int fd, const void *buf, unsigned long n);

SEC("syscall")
__weak int test_hang(void)
{
	char buf[16];
	int n = getpid(), i = 15, fd = open(getenv("%s"), 1 /* O_WRONLY */);
	volatile int spin = 1;

	buf[i] = '\n';
	do {
		buf[--i] = '0' + n %% 10;
		n /= 10;
	} while (n);
	write(fd, buf + i, 16 - i);
	while (spin)
		;
	return 0;
}

""" % FIFO_ENV
pytestmark = pytest.mark.skipif(shutil.which(lr._cc()[0]) is None,
                                reason="no C compiler (%s) to build the tree" % lr._cc()[0])


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """One build cache for the module's tests, not the user's."""
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture
def children():
    """The pidfds of the hanging children a test saw: any still running at
    its end is killed, so a failing test leaves no spinning process."""
    fds = []
    yield fds
    for fd in fds:
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(fd)


@pytest.fixture
def tree(tmp_path):
    """The example tree with test_hang between test_pool_reuse and test_pool_bulk."""
    return example_tree_with(tmp_path, "selftests/test_pool.bpf.c",
                             'SEC("syscall")\n__weak int test_pool_bulk(void)', HANG)


@pytest.fixture
def fifo(tmp_path, monkeypatch):
    """The read end of the FIFO test_hang writes its pid to (opened first,
    so the program's open does not block)."""
    path = str(tmp_path / "hang.fifo")
    os.mkfifo(path)
    monkeypatch.setenv(FIFO_ENV, path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    yield fd
    os.close(fd)


def _start(*args):
    return subprocess.Popen([sys.executable, "-m", "alloclab", "libarena", "test"] + list(args),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)


def _hang_pid(fifo, children):
    """The pid test_hang wrote (it spins from then on), watched by a pidfd."""
    assert select.select([fifo], [], [], WAIT)[0], "test_hang did not start in %d s" % WAIT
    text = os.read(fifo, 64)
    assert text.strip().isdigit(), text
    pid = int(text)
    children.append(os.pidfd_open(pid))
    return pid, children[-1]


HEADER = ("libarena selftests of %s (compiled natively as user-space C against alloclab's BPF "
          "stand-in, not run by BPF's JIT%s):")
needs_asan = pytest.mark.skipif(lr.asan_runtime() is None,
                                reason="the compiler has no ASan runtime (libasan.so)")


@pytest.mark.parametrize("asan", [False, pytest.param(True, marks=needs_asan)])
def test_cli_hanging_program_times_out_and_the_rest_run(tree, fifo, children, asan):
    proc = _start(tree, "--timeout", "1", *(["--asan"] if asan else []))
    pid, pidfd = _hang_pid(fifo, children)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 1, err
    assert out.decode().splitlines() == [
        HEADER % (tree, "; an ASan build" if asan else ""),
        "  PASS test_pool_classes (returned 0)",
        "  PASS test_pool_reuse (returned 0)",
        "  FAIL test_hang (timed out after 1 s)",
        "  PASS test_pool_bulk (returned 0)",
        "  PASS test_pool_invalid_free (returned 0)"] + (
            ["  PASS asan_test_pool_poison (returned 0)"] if asan else []) + [
        "%d passed, 1 failed" % (5 if asan else 4)]
    assert err == b""
    assert select.select([pidfd], [], [], 0)[0] == [pidfd], "child %d still runs" % pid
    if not asan:  # reaped by this command (under ASan, by the interpreter that ran it)
        _gone(pid)


def test_run_tests_reports_the_time_out(tree, fifo, children):
    results = lr.run_tests(tree, timeout=0.5)
    assert select.select([fifo], [], [], 0)[0], "test_hang did not run"
    pid = int(os.read(fifo, 64))
    assert [(r["name"], r["passed"], r["ret"]) for r in results] == [
        ("test_pool_classes", True, 0), ("test_pool_reuse", True, 0), ("test_hang", False, None),
        ("test_pool_bulk", True, 0), ("test_pool_invalid_free", True, 0)]
    assert results[2] == {"name": "test_hang", "file": os.path.join("selftests",
                                                                    "test_pool.bpf.c"),
                          "ret": None, "passed": False, "message": "timed out after 0.5 s"}
    try:  # reaped before run_tests returned: there is no such process
        children.append(os.pidfd_open(pid))
    except ProcessLookupError:
        return
    pytest.fail("child %d outlived run_tests" % pid)


def _gone(pid):
    """The child has ended and its parent has reaped it."""
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_default_time_limit_is_30_seconds():
    assert lr.DEFAULT_TEST_TIMEOUT == 30.0
    assert lr.run_tests.__defaults__ == (None, 30.0)
    help_text = subprocess.run([sys.executable, "-m", "alloclab", "libarena", "test", "--help"],
                               capture_output=True, text=True, timeout=WAIT).stdout
    assert "--timeout SECONDS" in " ".join(help_text.split())
    assert "(default 30)" in " ".join(help_text.split())


@pytest.mark.parametrize("signum, sent_to, status, said", [
    (signal.SIGINT, "group", 130, "alloclab: interrupted"),        # Ctrl-C at a terminal
    (signal.SIGINT, "parent", 130, "alloclab: interrupted"),
    (signal.SIGTERM, "parent", 143, "alloclab: terminated (SIGTERM)"),
    (signal.SIGTERM, "group", 143, "alloclab: terminated (SIGTERM)"),  # as timeout(1) sends
])
def test_cli_stopped_by_a_signal_kills_and_reaps_the_child(tree, fifo, children, signum,
                                                           sent_to, status, said):
    # the limit is only a guard here: the signal comes as soon as the program spins
    proc = _start(tree, "--timeout", "10")
    pid, pidfd = _hang_pid(fifo, children)
    if sent_to == "group":
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == status, err
    assert out == b"" and err.decode().splitlines() == [said]
    assert select.select([pidfd], [], [], 0)[0] == [pidfd], "child %d still runs" % pid
    _gone(pid)


@needs_asan
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL])
def test_asan_run_stopped_leaves_no_child(tree, fifo, children, signum):
    # the ASan build runs in a second interpreter: it and its child go too
    proc = _start(tree, "--asan", "--timeout", "10")
    pid, pidfd = _hang_pid(fifo, children)
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)  # Ctrl-C: to the whole group
    else:
        os.kill(proc.pid, signum)
    proc.communicate(timeout=WAIT)
    assert proc.returncode == (130 if signum == signal.SIGINT else -signal.SIGKILL)
    # well before the 10-s limit could end it
    assert select.select([pidfd], [], [], 5)[0] == [pidfd], "child %d outlived alloclab" % pid


def test_parent_killed_outright_takes_the_child_with_it(tree, fifo, children):
    proc = _start(tree, "--timeout", "10")
    pid, pidfd = _hang_pid(fifo, children)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=WAIT)
    # well before the 10-s limit could end it: PR_SET_PDEATHSIG kills it with its parent
    assert select.select([pidfd], [], [], 5)[0] == [pidfd], "child %d outlived its parent" % pid


class _Stop(Exception):
    pass


def test_an_error_in_the_parent_kills_and_reaps_the_child(tree, fifo, children, monkeypatch):
    real_select, real_poll = select.select, select.poll
    seen = []

    class StopOnceItSpins:
        """A poll object that also watches the FIFO, and fails once test_hang spins."""
        def __init__(self):
            self.p = real_poll()
            self.p.register(fifo, select.POLLIN)

        def register(self, fd, events):
            self.p.register(fd, events)

        def unregister(self, fd):
            self.p.unregister(fd)

        def poll(self, ms):
            ready = self.p.poll(ms)
            if any(fd == fifo for fd, _ in ready):
                seen.append(_hang_pid(fifo, children))
                raise _Stop()
            return ready

    monkeypatch.setattr(lr, "select", type("Select", (), {
        "poll": StopOnceItSpins, "POLLIN": select.POLLIN}))
    with pytest.raises(_Stop):
        lr.run_tests(tree, timeout=10)
    assert len(seen) == 1
    pid, pidfd = seen[0]
    assert real_select([pidfd], [], [], 0)[0] == [pidfd], "child %d still runs" % pid
    _gone(pid)


@pytest.mark.parametrize("value", [-1, 0, math.nan, math.inf, -math.inf, 86401, True, "1",
                                   None])
def test_bad_timeout_is_refused(value):
    with pytest.raises(errors.InvalidArgument) as e:
        lr.run_tests(EXAMPLE, timeout=value)
    assert str(e.value) == "timeout %r is not a time limit: seconds, more than 0 and at most " \
                           "86400" % (value,)


@pytest.mark.parametrize("text", ["-1", "0", "nan", "inf", "=-inf", "1e9", "abc", ""])
def test_cli_bad_timeout_is_one_error(text):
    # -inf is given as --timeout=-inf: argparse reads a lone -inf as an option
    flag = ["--timeout" + text] if text.startswith("=") else ["--timeout", text]
    proc = subprocess.run([sys.executable, "-m", "alloclab", "libarena", "test", EXAMPLE] + flag,
                          capture_output=True, text=True, timeout=WAIT)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "alloclab: error: argument --timeout: %r is not a time limit: seconds, more than 0 and "
        "at most 86400" % text.lstrip("=")]
