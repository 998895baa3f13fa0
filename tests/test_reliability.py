"""Reliability. The engine's watchdog (a stuck run ends with
RunStalled naming the policy, the workload and each worker's state)."""
import ctypes
import errno
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import alloclab as al
from alloclab import errors
from alloclab._ffi import ffi, lib
from alloclab.run import plan

from conftest import stacks

STUCK_SOURCE = r"""
/* A front layer whose allocations block while armed, until released. */
static int armed, released, blocked, returned;

__attribute__((visibility("default"))) void t_stuck_arm(void)
{
	__atomic_store_n(&released, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&returned, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&blocked, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&armed, 1, __ATOMIC_RELEASE);
}
__attribute__((visibility("default"))) void t_stuck_release(void)
{
	__atomic_store_n(&armed, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&released, 1, __ATOMIC_RELEASE);
}
/* 1 when no allocation is (still) blocked */
__attribute__((visibility("default"))) int t_stuck_idle(void)
{
	return !__atomic_load_n(&blocked, __ATOMIC_ACQUIRE) ||
	       __atomic_load_n(&returned, __ATOMIC_ACQUIRE);
}

static void *st_alloc(struct al_allocator *a, struct al_ctx *c, size_t size, unsigned flags)
{
	if (__atomic_exchange_n(&armed, 0, __ATOMIC_ACQ_REL)) {
		__atomic_store_n(&blocked, 1, __ATOMIC_RELEASE);
		while (!__atomic_load_n(&released, __ATOMIC_ACQUIRE))
			sched_yield();
		__atomic_store_n(&returned, 1, __ATOMIC_RELEASE);
	}
	return al_alloc(a->below, c, size, flags);
}
static void st_stats(struct al_allocator *a, struct al_stats *out)
{
	(void)a;
	out->layer = "t_stuck";
	out->bytes_held = 0;
}
static void st_destroy(struct al_allocator *a)
{
	al_meta_free(a, sizeof(*a));
}
static const struct al_ops st_ops = {
	.name = "t_stuck", AL_OPS_INIT, .alloc = st_alloc, .free = al_below_free,
	.usable_size = al_below_usable_size, .stats = st_stats,
	.destroy = st_destroy,
};
int st_create(const struct al_layer_desc *d, const int64_t *params,
	      struct al_allocator *below, unsigned ncpu, struct al_allocator **out)
{
	struct al_allocator *a = al_meta_alloc(sizeof(*a));

	(void)params;
	if (!a)
		return -ENOMEM;
	*out = al_allocator_init(a, &st_ops, d, below, ncpu);
	return 0;
}
"""


@pytest.fixture(scope="module")
def stuck():
    p = al.plugin.compile("t_stuck", "#include <sched.h>\n" + STUCK_SOURCE, create="st_create",
                          params=[], features=["backend", "usable"], doc="test: blocks")
    so = ctypes.CDLL(p.module_path)
    so.t_stuck_idle.restype = ctypes.c_int
    return so


def _release(so):
    so.t_stuck_release()
    while not so.t_stuck_idle():  # the stuck allocation returns: wait for it
        os.sched_yield()


def test_watchdog_ends_a_stuck_run(stuck):
    stuck.t_stuck_arm()
    try:
        with pytest.raises(al.RunStalled) as ei:
            # in this process: the test arms the plugin's own state here
            al.run("malloc-free", "t_stuck > buddy", isolate=False, runs=1, warmup_cycles=1,
                   cycles=5, watchdog=0.2)
    finally:
        _release(stuck)
    msg = str(ei.value)
    assert isinstance(ei.value, errors.RunError)
    assert ei.value.code == -110  # ETIMEDOUT
    assert "watchdog: no progress for 0.2 s" in msg
    assert "policy t_stuck>buddy" in msg and "workload malloc-free" in msg
    assert "worker 0 in a cycle" in msg
    assert "allocator leaked" in msg


def test_watchdog_names_every_worker(stuck):
    stuck.t_stuck_arm()
    try:
        with pytest.raises(al.RunStalled) as ei:
            al.run("malloc-free", "t_stuck > buddy", isolate=False, runs=1, producers=3,
                   cpu="virtual", warmup_cycles=1, cycles=5, watchdog=0.1)
    finally:
        _release(stuck)
    msg = str(ei.value)
    for w in range(3):
        assert "worker %d " % w in msg
    assert "in a cycle" in msg


def test_watchdog_quiet_run(stuck):
    al.run("malloc-free", "t_stuck > buddy", isolate=False, runs=1, warmup_cycles=1, cycles=5,
           watchdog=5)


def test_watchdog_parameter():
    assert plan("malloc-free", "buddy")[1][0]["watchdog_ns"] == 30 * 10**9
    assert plan("malloc-free", "buddy", watchdog=0)[1][0]["watchdog_ns"] == 0
    with pytest.raises(errors.ParameterRangeError, match="watchdog=-1.0 is out of range"):
        plan("malloc-free", "buddy", watchdog=-1)
    with pytest.raises(errors.ParameterTypeError, match="watchdog must be a number"):
        plan("malloc-free", "buddy", watchdog="30")


# ---- exhaustion and fault injection ----

# The smallest arena each bottom layer accepts, so exhaustion comes quickly.
LIMITS = {"buddy": {"arena_limit": "1M"}, "slab": {"arena_limit": "1M"},
          "pages": {"memory": "4M"}}


def _limited(spec):
    layers = al.Policy(spec).layers
    name, params = layers[-1]
    if name not in LIMITS:
        return None
    layers[-1] = (name, dict(params, **LIMITS[name]))
    return al.Policy.from_layers(layers)


def _check(a):
    a.check()


def _held(a):
    return [(s["layer"], s["bytes_held"]) for s in a.stats()]


def _free_all(a, live, tries=20):
    """Free (addr, cpu) pairs; a free that fails with a transient error (a
    lock that gave up, an injected failure) is retried, never dropped."""
    for addr, cpu in live:
        for t in range(tries):
            try:
                a.free(addr, cpu=cpu)
                break
            except errors.InvalidFreeError:
                raise
            except errors.RunError as e:
                if e.code not in (-errno.ETIMEDOUT, -errno.EBUSY) or t == tries - 1:
                    raise
    live.clear()


def _drain_until_stable(a, base, rounds=20):
    for _ in range(rounds):
        a.drain()
        if _held(a) == base:
            break


@pytest.mark.parametrize("spec", stacks())
def test_exhaustion(spec):
    """Allocate until the arena limit, then free everything: a clean
    AllocatorExhausted (ENOMEM, counted), the policy keeps serving after
    frees, invariants hold, and bytes held return to the baseline."""
    pol = _limited(spec)
    if pol is None:
        pytest.skip("%s has no arena limit (memory comes from the process's malloc "
                    "or is fixed)" % spec)
    with al.Allocator(pol, ncpu=2) as a:
        a.drain()
        base = _held(a)
        size = min(a.max_size or 4096, 4096)
        live = []
        for i in range(200000):
            try:
                live.append((a.alloc(size, cpu=i % 2), i % 2))
            except errors.AllocatorExhausted as e:
                assert e.code == -errno.ENOMEM
                break
        else:
            pytest.fail("%s never ran out with %s" % (spec, pol))
        _check(a)
        assert sum(s.get("enomem", 0) for s in a.stats()) >= 1  # counted
        half = live[: len(live) // 2]
        _free_all(a, half)
        live = live[len(live) // 2:]
        for i in range(8):  # keeps serving after frees
            live.append((a.alloc(size, cpu=0), 0))
        _free_all(a, live)
        _drain_until_stable(a, base)
        _check(a)
        assert _held(a) == base


def _over_failnth(spec, fparams):
    """spec with failnth(fparams) right above its bottom layer, or None."""
    layers = al.Policy(spec).layers
    if len(layers) < 2 or al.Policy(spec).features(len(layers) - 2).count("needs_pages"):
        return None
    return al.Policy.from_layers(layers[:-1] + [("failnth", fparams)] + layers[-1:])


def _fronts():
    return [s for s in stacks() if len(al.Policy(s).layers) >= 2
            and "failnth" not in al.Policy(s).names]


@pytest.mark.parametrize("op", ["alloc", "alloc_bulk", "free", "free_bulk", "any"])
@pytest.mark.parametrize("spec", _fronts())
def test_layers_over_failnth(spec, op):
    """Every layer over a backend that fails every 3rd call of a kind: the
    calls fail cleanly (NULL/ENOMEM or a transient error), nothing is lost,
    invariants hold, and bytes held return to the baseline."""
    pol = _over_failnth(spec, {"op": op, "nth": 3, "every": True})
    if pol is None:
        pytest.skip("%s needs a page allocator right below its front layer" % spec)
    with al.Allocator(pol, ncpu=2) as a:
        a.drain()
        base = _held(a)
        mx = a.max_size or 4096
        sizes = [s for s in (8, 16, 64, 100, 256, 1024, 4096) if s <= mx]
        live, failed = [], 0
        for i in range(400):
            try:
                live.append((a.alloc(sizes[i % len(sizes)], cpu=i % 2), i % 2))
            except (errors.AllocatorExhausted, errors.RunError) as e:
                assert e.code in (-errno.ENOMEM, -errno.EBUSY, -errno.ETIMEDOUT), e
                failed += 1
            if i % 7 == 6 and live:  # interleave frees, from the other CPU too
                _free_all(a, [(live.pop(0)[0], (i // 7) % 2)])
        _check(a)
        _free_all(a, live)
        _drain_until_stable(a, base)
        _check(a)
        st = {s["layer"]: s for s in a.stats()}
        calls = sum(v for k, v in st["failnth"].items() if k.startswith("calls_"))
        injected = sum(v for k, v in st["failnth"].items() if k.startswith("failed_"))
        assert calls == 0 or injected >= 1 or op != "any"
        assert _held(a) == base, (str(pol), failed, st["failnth"])


# ---- the nmi workload ----

NMI_SAFE = [s for s in stacks() if al.Policy(s).nmi_safe]
NMI_UNSAFE = [s for s in stacks() if not al.Policy(s).nmi_safe]


def test_nmi_safe_set():
    assert {"buddy", "percpu > buddy", "magazine > buddy", "nolock > slab",
            "bpf_ma > buddy", "bpf_ma(mode=fixed) > slab", "transfer > buddy"} <= set(NMI_SAFE)
    assert {"libc", "slab", "sheaves > buddy"} <= set(NMI_UNSAFE)


def _deliverable_rate(want):
    """want, or less where this machine cannot deliver that many timer signals
    per worker (the engine refuses such a rate, naming the most it measured:
    a slow or busy machine measures less)."""
    cost = ffi.new("double *")
    most = lib.al_nmi_max_rate(cost)  # measured once per process, as the engine's check
    return want if most <= 0 else max(20000, min(want, int(most * 0.9)))  # 20k: always taken


@pytest.mark.parametrize("spec", NMI_SAFE)
def test_nmi_workload_survives(spec):
    """Real timer signals interrupt the workers anywhere; the handler
    allocates and frees at AL_CTX_NMI, and frees what its worker handed it:
    no error, no leak (the engine's leak check), every handler allocation
    either served or refused, every NMI free done or deferred, never failed."""
    r = al.run("nmi", spec, runs=1, warmup_cycles=5, duration=0.05, producers=2, cpu="virtual",
               rate=_deliverable_rate(50000), handler_objs=2, keep=[False, True],
               handler_frees=3)
    for p in r.points:
        runs, served, refused = p["wl.nmi_handler_runs"][0], p["wl.nmi_served"][0], \
            p["wl.nmi_refused"][0]
        assert served + refused == 2 * runs
        assert p["wl.nmi_refused_busy"][0] + p["wl.nmi_refused_nomem"][0] == refused
        assert p["wl.nmi_free_errors"][0] == 0
        # each worker's handler may free one batch handed in the warmup and
        # leave the last one for the teardown
        handed, freed = p["wl.nmi_handed"][0], p["wl.nmi_handed_freed"][0]
        assert handed > 0 and abs(handed - freed) <= 3 * 2
        deferred = sum(p[k][0] for k in r.metrics() if k.endswith(".nmi_frees_deferred"))
        assert deferred <= served + freed + 2 * 2  # keep: a warmup run's objects


def test_nmi_rate_zero_hands_nothing():
    """Without signals no handler would free them: the baseline worker holds
    no objects the runs with signals do not."""
    r = al.run("nmi", "percpu > buddy", runs=1, warmup_cycles=2, cycles=50, rate=0,
               handler_frees=4)
    p = r.points[0]
    assert (p["wl.nmi_handed"][0], p["wl.nmi_handler_runs"][0]) == (0, 0)


def test_nmi_buddy_defers_every_handed_free():
    """The buddy alone refuses every NMI allocation, so only handler_frees
    reaches its deferred free: every one of them is deferred, and drained.
    The handler works only inside cycles, so the workload's counts and the
    layer's cover the same window: exact."""
    r = al.run("nmi", "buddy", runs=1, warmup_cycles=5, duration=0.05, producers=2,
               cpu="virtual", rate=20000, handler_objs=1, handler_frees=2)
    p = r.points[0]
    handed = p["wl.nmi_handed_freed"][0]
    assert handed > 0 and p["wl.nmi_served"][0] == 0
    assert p["buddy.nmi_frees_deferred"][0] == handed
    assert p["buddy.nmi_alloc_refused"][0] == p["wl.nmi_refused"][0] == \
        p["wl.nmi_refused_busy"][0]
    assert p["buddy.deferred_drained"][0] >= handed - 2 * 2  # the last ones: at teardown


@pytest.mark.parametrize("spec", NMI_UNSAFE)
def test_nmi_workload_refuses_unsafe_policies(spec):
    with pytest.raises(errors.IncompatiblePolicyError, match="is not NMI-safe"):  # by plan()
        al.run("nmi", spec, runs=1, cycles=2, warmup_cycles=0)


def test_nmi_xfree_mode():
    """malloc-xfree: every batch is freed by the next worker (cross-CPU frees)
    while the handlers run; nothing is lost (the engine's leak check)."""
    r = al.run("nmi", ["buddy", "percpu > buddy", "nolock > slab"], runs=1, warmup_cycles=2,
               cycles=200, producers=3, cpu="virtual", rate=20000, mode="malloc-xfree")
    for p in r.points:
        assert p["cross_frees"][0] > 0
        assert p["wl.nmi_free_errors"][0] == 0


def test_cli_watchdog_flag():
    from alloclab.cli import main
    assert main(["run", "malloc-free", "--policy", "buddy", "--runs", "1", "--cycles", "3",
                 "--watchdog", "5"]) == 0


def test_nmi_buddy_refuses_and_defers_exactly():
    """Through Python, nested contexts by hand: the buddy's NMI path."""
    from alloclab._ffi import ffi, lib
    with al.Allocator("buddy") as a:
        p = a.alloc(64)
        top = a._a()
        c = ffi.new("struct al_ctx *")
        c.cpu, c.level = 0, lib.AL_CTX_NMI
        assert lib.al_call_alloc(top, c, 64, 0) == ffi.NULL and c.err == -errno.EBUSY
        assert lib.al_call_free(top, c, ffi.cast("void *", p)) == 0
        st = a.stats()[0]
        assert (st["nmi_alloc_refused"], st["nmi_frees_deferred"], st["bytes_held"]) == \
            (1, 1, 64)
        a.alloc(16)  # the next ordinary operation drains
        st = a.stats()[0]
        assert (st["deferred_drained"], st["bytes_held"]) == (1, 16)


# ---- the stress workload ----

@pytest.mark.parametrize("spec", stacks())
def test_stress_every_policy(spec):
    """Short stress on every policy: random alloc/free/bulk/handoff with every
    fill pattern checked before its free; no error, no leak."""
    pol = al.Policy(spec)
    if not pol.distinct_objects:  # one block per CPU: refused before running, not "corruption"
        with pytest.raises(al.IncompatiblePolicyError, match="needs distinct objects"):
            al.run("stress", spec, runs=1, producers=2, cycles=5)
        return
    size_max = min(pol.max_size or 2048, 2048)
    r = al.run("stress", spec, runs=1, producers=2, cpu="virtual", warmup_cycles=1, cycles=5,
               ops_per_cycle=300, size_max=size_max, slots=64)
    p = r.points[0]
    assert p["wl.stress_errors"][0] == 0
    assert p["wl.checked_bytes"][0] > 0




# ---------------------------------------------------------------- Ctrl-C

STOP_LIMIT_S = 10.0  # generous: the bound is about a second, tests never time tightly


def _cli(args, env=None):
    return subprocess.Popen([sys.executable, "-m", "alloclab"] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def _read_until(proc, marker, limit=120.0):
    """stderr of proc up to (and including) marker; fails if it exits first."""
    buf = b""
    end = time.monotonic() + limit
    while marker not in buf:
        assert time.monotonic() < end, "no %r on stderr: %r" % (marker, buf[-500:])
        chunk = proc.stderr.read1(4096)
        assert chunk, "exited before %r: %r" % (marker, buf[-2000:])
        buf += chunk
    return buf


def _interrupt(proc, sig=signal.SIGINT):
    """sig to proc; (exit status, stderr rest, seconds until it exited)."""
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=STOP_LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("still running %.0f s after SIGINT" % STOP_LIMIT_S)
    return proc.returncode, err, time.monotonic() - t0


@pytest.mark.parametrize("bound", [["--duration", "30"], ["--cycles", "100000000000"]],
                         ids=["duration", "huge-cycles"])
def test_ctrl_c_stops_a_cli_run(bound):
    proc = _cli(["run", "malloc-free", "--progress"] + bound)
    _read_until(proc, b"measuring")  # the run is in its measured phase
    rc, err, took = _interrupt(proc)
    assert rc == 130, err
    assert err.endswith(b"alloclab: interrupted\n"), err
    assert b"Traceback" not in err
    assert took < STOP_LIMIT_S


def _marked(mark):
    """pids of the processes whose environment holds mark."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if mark in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_ctrl_c_stops_processes_runs_without_orphans(sig):
    """Ctrl-C, and SIGTERM alike (a service manager's stop), end the run and
    its child process: exit 128 + the signal, no orphan keeps running."""
    mark = "ALLOCLAB_TEST_MARK=%s" % uuid.uuid4().hex
    env = dict(os.environ, ALLOCLAB_TEST_MARK=mark.split("=", 1)[1])
    proc = _cli(["run", "malloc-free", "--processes", "--cycles", "100000000000"], env=env)
    end = time.monotonic() + 120
    child = None
    while child is None:  # a child process running the run: its engine and worker threads
        assert time.monotonic() < end and proc.poll() is None, "no child process ran"
        for pid in _marked(mark.encode()):
            if pid != proc.pid:
                try:
                    if len(os.listdir("/proc/%d/task" % pid)) >= 3:
                        child = pid
                except OSError:
                    pass
        time.sleep(0.01)  # polling /proc for the child, not waiting on a thread
    rc, err, _ = _interrupt(proc, sig)
    assert rc == 128 + sig, err
    assert err.decode().strip().splitlines()[-1] == (
        "alloclab: interrupted" if sig == signal.SIGINT else "alloclab: terminated (SIGTERM)")
    end = time.monotonic() + STOP_LIMIT_S
    while _marked(mark.encode()):
        assert time.monotonic() < end, "orphans left: %s" % _marked(mark.encode())
        time.sleep(0.01)


def test_ctrl_c_keeps_a_sweep_journal_whole(tmp_path):
    journal = tmp_path / "j.jsonl"
    args = ["run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--runs", "3",
            "--duration", "0.3", "--warmup-cycles", "1", "--journal", str(journal)]
    proc = _cli(args)
    end = time.monotonic() + 120
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 2):
        assert time.monotonic() < end and proc.poll() is None, proc.stderr.read()
        time.sleep(0.01)  # polling the journal: the first unit is done
    rc, err, _ = _interrupt(proc)
    assert rc == 130, err
    data = journal.read_bytes()
    assert data.endswith(b"\n")
    lines = data.decode().splitlines()
    assert 2 <= len(lines) <= 7
    for line in lines:
        json.loads(line)  # every line whole
    done = subprocess.run([sys.executable, "-m", "alloclab"] + args, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert len(journal.read_text().splitlines()) == 1 + 6  # header + every unit once


def test_keyboard_interrupt_propagates_from_a_run():
    from alloclab.run import run_once
    _, tasks = plan("malloc-free", "buddy", cycles=10 ** 11, runs=1)

    def on_phase(phase):
        if phase == lib.AL_RUN_MEASURED:
            os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):  # 10^11 cycles: only the interrupt ends it
        run_once(tasks[0], on_phase=on_phase)
    # the run was torn down: the next one works
    raw = run_once(plan("malloc-free", "buddy", cycles=5, runs=1)[1][0])
    assert raw["cycles"] == 5 and raw["truncated"] == 0


# ---------------------------------------------------------------- duration bounds

def test_duration_bounds_cycles_only_when_given():
    _, t = plan("malloc-free", "buddy", cycles=100)
    assert t[0]["cycles"] == 100 and t[0]["duration_ns"] == 0
    settings, t = plan("malloc-free", "buddy", cycles=100, duration=0.5)
    assert t[0]["duration_ns"] == 500000000 and settings["duration"] == 0.5
    _, t = plan("malloc-free", "buddy")
    assert t[0]["cycles"] == 0 and t[0]["duration_ns"] == 250000000


def test_duration_cuts_a_fixed_cycles_run():
    res = al.run("malloc-free", "buddy", cycles=10 ** 11, warmup_cycles=10 ** 11, duration=0.05,
                 runs=2)
    assert res.points[0].info["truncated"] == [1, 1]
    assert res.truncated() == [(res.points[0].params, [0, 1])]


def test_truncated_runs_marked_shown_and_left_out_of_verdicts():
    res = al.run("test_vmalloc", ["vmalloc-default", "vmalloc-large"], producers=2,
                 test_loop_count=10 ** 8, duration=0.05, runs=3, warmup_cycles=0)
    for p in res.points:
        assert p.info["truncated"] == [2, 2, 2]  # both workers cut, every run
    text = res.table("alloc_ns", rows=None, cols="policy").to_text()
    assert "truncated: the duration cut the run's loop short" in text
    assert "(3 of 3 runs)" in text
    again = al.Result.from_json(res.to_json())
    assert again.truncated() == res.truncated()
    v = al.verdict.claim(res, new="vmalloc-large", old="vmalloc-default").judge()
    assert v.outcome == al.verdict.OPEN
    assert "truncated" in v.reason and "3 runs cut short by the duration" in v.reason

    whole = al.run("test_vmalloc", "vmalloc-default", test_loop_count=10, cycles=2, runs=1,
                   warmup_cycles=0)
    assert "truncated" not in whole.points[0].info and whole.truncated() == []


def test_a_worker_whose_turn_never_came_is_truncated():
    """More workers than CPUs share a CPU's turn; a worker whose turn had not
    come when the duration ended ran none of its loop: cut short as much as
    the one whose loop the duration cut, whichever came first."""
    n = lib.al_cpus_usable()
    res = al.run("test_vmalloc", "vmalloc-default", producers=n + 1, cpu="virtual",
                 test_loop_count=10 ** 8, duration=0.05, runs=3, warmup_cycles=0)
    assert res.points[0].info["truncated"] == [n + 1] * 3


def test_verdict_leaves_truncated_pairs_out():
    from alloclab.verdict import Side, estimate
    starts_a = np.arange(6) * 10.0
    a = Side([100, 101, 99, 100, 1, 102], starts=starts_a,
             truncated=[0, 0, 0, 0, 1, 0])
    b = Side([80, 81, 79, 80, 80, 82], starts=starts_a + 5,
             truncated=[0, 0, 0, 1, 0, 0])
    est, problems = estimate(a, b)
    assert est.cut == 2 and est.n == 4  # pairs 3 and 4 out; the 1 ns outlier gone
    assert est.test.startswith("paired")
    assert 0.78 < est.factor(est.theta) < 0.82
    assert not problems


# ---------------------------------------------------------------- nmi rate

def test_nmi_rate_above_what_is_delivered_is_refused_or_runs():
    from alloclab._ffi import ffi
    cost = ffi.new("double *")
    mx = lib.al_nmi_max_rate(cost)
    if mx and mx < 1000000:
        with pytest.raises(errors.ParameterRangeError, match=r"rate=1000000 .*use rate <= %d"
                           % int(mx)) as ei:
            al.run("nmi", "buddy", rate=1000000, runs=1, duration=0.05)
        assert ei.value.max == int(mx)
        # the C side refuses it too (callers that skip plan())
        _, tasks = plan("nmi", "buddy", rate=10000, runs=1, duration=0.05, watchdog=5)
        tasks[0]["wparams"][[p.name for p in al.schema.workload("nmi").params].index("rate")] \
            = 1000000
        from alloclab.run import run_once
        with pytest.raises(errors.RunError, match="rate=1000000 is more timer signals"):
            run_once(tasks[0])
        rate = max(1, int(mx) // 2)
    else:  # this machine delivers the schema's maximum: it must run
        rate = 1000000
    res = al.run("nmi", "buddy", rate=rate, runs=1, duration=0.05, watchdog=10)
    assert res.points[0]["cycles"][0] > 0


def test_duration_cuts_a_long_cache_scratch_cycle():
    # 2^30 passes over 256 KiB in one cycle: ended by the duration, truncated
    res = al.run("cache-scratch", "buddy", repetitions=2 ** 30, size="256K", duration=0.05,
                 runs=1, warmup_cycles=1)
    assert res.points[0].info["truncated"] == [1]


# Both stuck-simulation scenarios run in a child process with a deadline: a
# regression hangs the child, not the suite, and the child's abandoned
# simulation (it ends once released) cannot keep this process's clock
# virtual for the tests after.
_STUCK_SIM = """
import ctypes, os, sys, threading, _thread
sys.path.insert(0, {tests!r})
import alloclab as al
from alloclab.measure import run as mrun
from alloclab.measure import sim
from test_reliability import STUCK_SOURCE
p = al.plugin.compile("t_stuck", "#include <sched.h>\\n" + STUCK_SOURCE, create="st_create",
                      params=[], features=["backend", "usable"], doc="test: blocks")
so = ctypes.CDLL(p.module_path)
so.t_stuck_idle.restype = ctypes.c_int
cal = sim.Calibration({{}}, 0.0, 0.0, {{"test": True}})
so.t_stuck_arm()
if {interrupt}:  # Ctrl-C once the policy call is stuck
    def interrupt():
        while so.t_stuck_idle():
            os.sched_yield()
        _thread.interrupt_main()
    threading.Thread(target=interrupt, daemon=True).start()
try:
    al.run("malloc-free", "t_stuck > buddy", isolate=False, runs=1, warmup_cycles=1, cycles=5,
           watchdog={watchdog}, cpu="simulated", calibration=cal)
    print("returned")
except KeyboardInterrupt:
    print("interrupted")
except al.RunStalled as e:
    cfg, res, keep = mrun._ABANDONED[-1]
    print("stalled", len(mrun._ABANDONED), bool(keep) and cfg.sim.table == keep[0],
          "left running" in str(e))
so.t_stuck_release()
"""


def _stuck_sim(interrupt, watchdog):
    code = _STUCK_SIM.format(tests=os.path.dirname(os.path.abspath(__file__)),
                             interrupt=interrupt, watchdog=watchdog)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip()


def test_a_simulated_run_left_running_keeps_what_it_reads():
    """A run whose watchdog leaves its threads running (here the simulated
    CPUs' engine thread, stuck in the allocator) keeps its configuration and
    the buffers it points to (the cost table) for the life of the process:
    freeing them under the running thread crashed the interpreter later."""
    assert _stuck_sim(False, 0.2) == "stalled 1 True True"


def test_ctrl_c_ends_a_simulated_run_stuck_in_a_policy_call():
    """With no watchdog, a stop (Ctrl-C) still ends a simulated run whose
    policy call never returns: the simulation is the engine thread's step,
    and the stop's grace leaves that thread running."""
    assert _stuck_sim(True, 0) == "interrupted"
