"""The replay workload: a recorded program's trace replayed on a policy.

Traces are built with Trace.from_ops from a program-order list of
(thread, op), so every op's seq is its place in that list: the counts a
replay must report (ops per kind, cross-thread frees, copied bytes) are
known exactly from the list. Covers every in-process preset, unknown
frees (counted; strict fails), realloc copies, determinism on buddy,
virtual CPUs with more threads than CPUs, stopping a replay, the duration
as a time limit, bad handles and the Python-side refusals.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

import alloclab as al
from alloclab import errors, peers
from alloclab._ffi import cstr, ffi, lib
from alloclab._tracefmt import FLAG_NULL, FLAG_UNKNOWN, KINDS
from alloclab.policy import presets
from alloclab.run import _config, plan, run_once
from alloclab.trace import Trace

ONE = dict(runs=1)


def build(program, nthreads=None):
    """A sealed Trace from [(thread, op dict)] in program order (seq = index)."""
    n = nthreads or 1 + max(k for k, _ in program)
    threads = [[] for _ in range(n)]
    for seq, (k, op) in enumerate(program):
        threads[k].append(dict(op, seq=seq + 1))
    return Trace.from_ops(threads)


def every_kind():
    """Two threads, every op kind: thread 1 frees, reallocs and asks the size
    of thread 0's objects; an unknown free, free(NULL), a malloc the program
    was refused. Returns (trace, {kind: ops}, cross frees, copied bytes)."""
    p = [(0, dict(kind="thread_start", aux=None)),
         (0, dict(kind="malloc", size=32, id=0)),
         (0, dict(kind="calloc", size=96, aux=3, id=1)),
         (0, dict(kind="malloc", size=0, id=2, flags=16)),
         (0, dict(kind="posix_memalign", size=100, aux=64, id=3)),
         (0, dict(kind="aligned_alloc", size=48, aux=16, id=4)),
         (0, dict(kind="memalign", size=40, aux=32, id=5)),
         (0, dict(kind="valloc", size=200, aux=4096, id=6)),
         (0, dict(kind="pvalloc", size=300, aux=4096, id=7)),
         (0, dict(kind="realloc", size=64, aux=0, ref=None, id=8)),
         (0, dict(kind="malloc", size=1 << 20, flags=FLAG_NULL)),  # the program got NULL
         (1, dict(kind="thread_start", aux=0)),
         (1, dict(kind="usable_size", ref=0, size=32)),
         (0, dict(kind="realloc", size=100, aux=32, ref=0, id=9)),  # waits for the read
         (1, dict(kind="free", ref=1)),
         (1, dict(kind="realloc", size=16, aux=100, ref=9, id=10)),  # copies 16
         (1, dict(kind="free", ref=None, flags=FLAG_UNKNOWN)),
         (1, dict(kind="free", ref=None, flags=FLAG_NULL)),  # free(NULL)
         (0, dict(kind="usable_size", ref=3, size=128)),
         (0, dict(kind="realloc", size=0, aux=48, ref=4)),  # realloc(p, 0) frees p
         (1, dict(kind="free", ref=5)),
         (0, dict(kind="free", ref=10)),
         (0, dict(kind="free", ref=2)),
         (1, dict(kind="thread_exit")),
         (0, dict(kind="thread_exit"))]
    kinds = {k: 0 for k in KINDS}
    for _, op in p:
        kinds[op["kind"]] += 1
    # consuming ops on another thread's object: free 1, realloc 9, free 5, free 10
    return build(p), kinds, 4, 32 + 16


def wl(res, name, i=0):
    return res.rows()[i]["wl." + name]


IN_PROCESS = sorted(n for n, spec in presets.items() if peers.needed(spec) is None)


@pytest.mark.parametrize("preset", IN_PROCESS)
def test_every_kind_counted_exactly_on_every_preset(preset):
    tr, kinds, cross, copied = every_kind()
    res = al.run("replay", preset, trace=tr, **ONE)
    row = res.rows()[0]
    for k, n in kinds.items():
        assert row["wl.%s_ops" % k] == n, k
    alloc_side = sum(kinds[k] for k in KINDS[:9] if k != "free")
    assert row["alloc_ops"] == alloc_side and row["free_ops"] == kinds["free"]
    assert row["wl.unknown_frees"] == 1 and row["wl.unfinished_ops"] == 0
    assert row["producers"] == 2 and res.truncated() == []
    leaks = {k: v for k, v in row.items() if k.endswith(".leaked")}
    assert leaks and all(v == 0 for v in leaks.values())  # the live objects were freed
    if row["wl.refused"] == 0:  # a policy that refuses an object skips its later ops
        assert row["wl.skipped"] == 0 and row["cross_frees"] == cross
        if presets[preset] != "null":  # one block per CPU: nothing to copy
            assert row["wl.reallocs_copied_bytes"] == copied
    else:
        assert row["cross_frees"] <= cross


def test_unknown_frees_are_counted_and_strict_refuses_them():
    tr, _, _, _ = every_kind()
    assert wl(al.run("replay", "buddy", trace=tr, **ONE), "unknown_frees") == 1
    with pytest.raises(errors.RunError, match=r"thread 1, op \d+: free of an object "
                                              r"allocated before recording began"):
        al.run("replay", "buddy", trace=tr, strict=True, **ONE)


def _realloc_chain(n=50):
    """One thread: an object grown and shrunk by realloc n times."""
    p, size, copied = [(0, dict(kind="malloc", size=10, id=0))], 10, 0
    for i in range(1, n):
        new = 10 + (i * 37) % 500
        p.append((0, dict(kind="realloc", size=new, aux=size, ref=i - 1, id=i)))
        copied += min(size, new)
        size = new
    p.append((0, dict(kind="free", ref=n - 1)))
    return build(p), copied


@pytest.mark.parametrize("touch", ["none", "first", "all"])
def test_realloc_copies_the_bytes(touch):
    # With touch, every object is filled with a byte of its id and each
    # realloc checks that the new object holds the old one's bytes: a copy
    # that lost them fails the run.
    tr, copied = _realloc_chain()
    res = al.run("replay", ["buddy", "libarena-transfer"], trace=tr, touch=touch, **ONE)
    for i in range(2):
        assert wl(res, "reallocs_copied_bytes", i) == copied
        assert wl(res, "realloc_ops", i) == 49


def test_touch_finishes_writing_an_object_before_another_thread_may_take_it():
    # Thread 1 reallocs each of thread 0's large objects as soon as it
    # exists. The creator fills an object (touch) before it publishes it:
    # published first, the copy could read a half-written object (the run
    # failed its check) and the creator write into memory already freed.
    n, size, p = 80, 256 << 10, []
    for i in range(n):
        p.append((0, dict(kind="malloc", size=size, id=2 * i)))
        p.append((1, dict(kind="realloc", size=size, aux=size, ref=2 * i, id=2 * i + 1)))
        p.append((1, dict(kind="free", ref=2 * i + 1)))
    res = al.run("replay", ["buddy", "libarena-transfer"], trace=build(p), touch="all",
                 runs=3)
    for i in range(6):
        assert wl(res, "reallocs_copied_bytes", i) == n * size
        assert res.rows()[i]["cross_frees"] == n


@pytest.mark.parametrize("preset", ["buddy", "libarena-transfer", "kmalloc-sheaves"])
def test_memalign_of_an_alignment_not_a_power_of_two_is_rounded_up(preset):
    # glibc's memalign rounds such an alignment up (0 asks nothing): the
    # program got these objects, so the replay must not count them refused.
    p = [(0, dict(kind="memalign", size=40, aux=a, id=i)) for i, a in enumerate((0, 3, 24, 100))]
    p += [(0, dict(kind="free", ref=i)) for i in range(4)]
    row = al.run("replay", preset, trace=build(p), **ONE).rows()[0]
    assert row["wl.memalign_ops"] == 4 and row["free_ops"] == 4
    assert row["wl.refused"] == 0 and row["wl.skipped"] == 0


def _random_program(nthreads, nops, seed, cross=True):
    """A program of mallocs and frees; with cross, a thread frees objects of
    the thread before it (a ring), so most frees wait for another thread."""
    import random
    rnd = random.Random(seed)
    live = [[] for _ in range(nthreads)]
    p, nid, ncross = [], 0, 0
    for _ in range(nops):
        k = rnd.randrange(nthreads)
        src = (k - 1) % nthreads if cross else k
        if live[src] and rnd.random() < 0.45:
            obj = live[src].pop(rnd.randrange(len(live[src])))
            p.append((k, dict(kind="free", ref=obj)))
            ncross += src != k
        else:
            p.append((k, dict(kind="malloc", size=rnd.choice([8, 24, 64, 200, 1000, 4000]),
                              id=nid)))
            live[k].append(nid)
            nid += 1
    return p, ncross


def _layer_counters(res):
    return {k: v for k, v in res.rows()[0].items()
            if k.startswith("buddy.") and not k.endswith("_per_op")}


def test_single_thread_replay_is_deterministic_on_buddy():
    p, _ = _random_program(1, 5000, seed=3, cross=False)
    tr = build(p)
    a = al.run("replay", "buddy", trace=tr, **ONE)
    b = al.run("replay", "buddy", trace=tr, **ONE)
    assert _layer_counters(a) and _layer_counters(a) == _layer_counters(b)
    for k in ("malloc_ops", "free_ops", "refused", "skipped"):
        assert wl(a, k) == wl(b, k)


def test_cross_thread_trace_on_more_threads_than_cpus():
    n = max(4, 2 * lib.al_cpus_usable())
    p, ncross = _random_program(n, 6000, seed=5)
    tr = build(p, n)
    res = al.run("replay", ["buddy", "libarena-transfer"], trace=tr, cpu="virtual", runs=1,
                 duration=60)
    nfree = sum(op["kind"] == "free" for _, op in p)
    for i in range(2):
        row = res.rows()[i]
        assert row["producers"] == n and row["cpu_mode_used"] == "virtual"
        assert row["free_ops"] == nfree and row["cross_frees"] == ncross
        assert row["wl.unfinished_ops"] == 0
    assert res.truncated() == []


def _slow_trace(nops=50, gap=10 ** 9):
    """One thread: 5 ops back to back, then each after a recorded gap of `gap` ns."""
    p = []
    for i in range(nops):
        p.append((0, dict(kind="malloc", size=64, id=i, dt=gap if i >= 5 else 0)))
    return build(p)


def test_duration_is_a_time_limit_and_the_cut_pass_is_truncated():
    tr = _slow_trace()
    res = al.run("replay", "buddy", trace=tr, think="recorded", duration=0.2, **ONE)
    # cut in the first gap: 45 ops (and 45 s of gaps) never replayed
    assert res.truncated() and wl(res, "unfinished_ops") == 45
    assert wl(res, "malloc_ops") == 5 and res.rows()[0]["buddy.leaked"] == 0


def test_recorded_gaps_longer_than_the_watchdog_are_progress():
    # Three gaps of 0.4 s in one chunk: spinning them is the replay going as
    # the program went, so the watchdog (0.3 s) must not take it for a stall.
    res = al.run("replay", "buddy", trace=_slow_trace(nops=8, gap=4 * 10 ** 8),
                 think="recorded", watchdog=0.3, **ONE)
    row = res.rows()[0]
    assert row["wl.malloc_ops"] == 8 and row["wl.unfinished_ops"] == 0
    assert row["elapsed_ns"] >= 3 * 4 * 10 ** 8 and res.truncated() == []


def test_stop_ends_a_replay_promptly():
    _, tasks = plan("replay", "buddy", trace=_slow_trace(), think="recorded", runs=1)

    def on_phase(phase):
        if phase == lib.AL_RUN_MEASURED:
            os.kill(os.getpid(), signal.SIGINT)

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_once(tasks[0], on_phase=on_phase)
    assert time.monotonic() - t0 < 10
    tr, kinds, _, _ = every_kind()  # the next replay runs
    assert wl(al.run("replay", "buddy", trace=tr, **ONE), "malloc_ops") == kinds["malloc"]


def test_histograms_count_every_timed_op():
    tr, kinds, _, _ = every_kind()
    res = al.run("replay", "buddy", trace=tr, histogram=True, **ONE)
    row = res.rows()[0]
    assert res.histogram(op="alloc").count == row["alloc_ops"]
    assert res.histogram(op="free").count == row["free_ops"]


def test_bad_handle_is_refused_by_the_engine():
    tr, _, _, _ = every_kind()
    _, tasks = plan("replay", "buddy", trace=tr, runs=1)
    cfg = _config(tasks[0])
    cfg.wparams[tasks[0]["trace_index"]] = 987654321
    err = ffi.new("char[]", 256)
    assert lib.al_run_check(cfg, ffi.NULL, err, 256) == -22
    assert "trace=987654321 is not a registered trace handle" in cstr(err)


def test_python_refusals_name_the_bad_value():
    tr, _, _, _ = every_kind()
    with pytest.raises(errors.ParameterRangeError, match="producers=3, but the trace has 2"):
        plan("replay", "buddy", trace=tr, producers=3)
    with pytest.raises(errors.ParameterTypeError, match="trace must be a trace file"):
        plan("replay", "buddy", trace=5)
    with pytest.raises(errors.InvalidArgument, match="needs trace=FILE"):
        plan("replay", "buddy")
    with pytest.raises(errors.InvalidArgument, match="cycles=4 does not apply"):
        plan("replay", "buddy", trace=tr, cycles=4)
    with pytest.raises(errors.InvalidArgument, match="trace /nonexistent/x.altrace: no such file"):
        plan("replay", "buddy", trace="/nonexistent/x.altrace")
    with pytest.raises(errors.UnsupportedCombination, match="layer null"):
        plan("replay", "null", trace=tr, touch="all")
    many = Trace.from_ops([[dict(kind="malloc", size=8, id=k)] for k in range(1025)])
    with pytest.raises(errors.InvalidArgument, match="1025 threads.* at most 1024 producers"):
        plan("replay", "buddy", trace=many)


def test_result_records_the_trace_identity_not_the_handle():
    tr, _, _, _ = every_kind()
    res = al.run("replay", "buddy", trace=tr, **ONE)
    ident = res.metadata["run"]["trace"]
    assert ident["threads"] == 2 and ident["ops"] == tr.nops and len(ident["digest"]) == 64
    assert res.rows()[0]["trace"] == "<memory>"
    assert "key" not in ident


def test_in_memory_trace_in_a_child_process():
    # saved to a temporary file that the child loads
    tr, kinds, _, _ = every_kind()
    res = al.run("replay", "buddy", trace=tr, processes=True, **ONE)
    assert wl(res, "malloc_ops") == kinds["malloc"] and res.rows()[0]["trace"] == "<memory>"
    assert res.points[0].info["pids"] != [os.getpid()]


PEERS = [n for n in peers.NAMES if peers.available(n)]


@pytest.mark.skipif(not PEERS, reason="no peer allocator installed")
def test_peers_replay_the_same_file(tmp_path):
    tr, kinds, cross, _ = every_kind()
    path = str(tmp_path / "every.altrace")
    tr.save(path)
    res = al.run("replay", ["buddy"] + PEERS, trace=path, **ONE)
    assert res.metadata["run"]["trace"]["path"] == path
    for row in res.rows():
        assert row["trace"] == path
        for k, n in kinds.items():
            assert row["wl.%s_ops" % k] == n, (row["policy"], k)
        assert row["wl.unfinished_ops"] == 0 and row["cross_frees"] <= cross


def test_more_trace_files_than_the_registry_holds_replay_in_one_process(tmp_path):
    # The registry has 64 handles: the traces loaded from files are closed
    # to free theirs, and a file replayed again is loaded again.
    paths = []
    for i in range(70):
        paths.append(str(tmp_path / ("t%d.altrace" % i)))
        build([(0, dict(kind="malloc", size=16 + i, id=0)), (0, dict(kind="free", ref=0))]) \
            .save(paths[-1])
    for i, path in enumerate(paths + paths[:2]):
        row = al.run("replay", "buddy", trace=path, **ONE).rows()[0]
        assert row["buddy.bytes_requested"] == 16 + i % 70 and row["free_ops"] == 1


def test_a_table_says_which_cells_refused_what_the_program_got():
    # The program got 1 TiB; buddy refuses it and skips its free, so its
    # cell times fewer ops than the program made: the table says so.
    tr = build([(0, dict(kind="malloc", size=1 << 40, id=0)),
                (0, dict(kind="malloc", size=64, id=1)),
                (0, dict(kind="free", ref=0)), (0, dict(kind="free", ref=1))])
    res = al.run("replay", "buddy", trace=tr, runs=2)
    assert wl(res, "refused") == 1 and wl(res, "skipped") == 1
    (line,) = [x for x in res.table("alloc_ns").warning_lines() if x.startswith("refused:")]
    assert line.endswith("1p (1 objects, 1 ops a run)")
    fine = al.run("replay", "buddy", trace=_realloc_chain()[0], runs=2)
    assert not [x for x in fine.table("free_ns").warning_lines() if x.startswith("refused:")]


def test_a_file_changed_after_planning_is_refused(tmp_path):
    path = str(tmp_path / "t.altrace")
    every_kind()[0].save(path)
    _, tasks = plan("replay", "buddy", trace=path, processes=True, runs=1)
    _realloc_chain()[0].save(path)  # another trace in the same file
    with pytest.raises(errors.AlloclabError, match="changed since the run was planned"):
        run_once(tasks[0])


def test_cli_replays_a_file(tmp_path):
    path = str(tmp_path / "t.altrace")
    every_kind()[0].save(path)
    p = subprocess.run([sys.executable, "-m", "alloclab", "run", "replay", "--trace", path,
                        "--policy", "buddy", "--runs", "1", "--metric", "wl.malloc_ops"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("replay, malloc_ops (workload metric")
    assert any(line.split() == [path, "3"] for line in p.stdout.splitlines())


def test_memory_over_the_replay_is_kept_as_a_series():
    p, _ = _random_program(1, 20000, seed=7, cross=False)
    res = al.run("replay", "buddy", trace=build(p), mem_sample=0.0001, **ONE)
    (_, run, s), = res.mem_series()
    row = res.rows()[0]
    assert run == 0 and 2 <= len(s["t_ns"]) <= lib.AL_MEM_SERIES
    assert list(s["t_ns"]) == sorted(s["t_ns"])
    assert s["requested"][0] == 0 and s["requested"][-1] == row["mem_requested"]
    assert s["rss"][-1] == row["mem_rss"] and max(s["requested"]) <= row["mem_requested_peak"]
    again = al.Result.from_json(res.to_json()).mem_series()[0][2]
    assert all(list(again[k]) == list(s[k]) for k in s)


def test_a_long_series_is_thinned_within_its_bound():
    res = al.run("malloc-free", "buddy", duration=0.2, mem_sample=0.0001, **ONE)
    (_, _, s), = res.mem_series()
    n = res.rows()[0]["mem_samples"]
    assert len(s["t_ns"]) <= lib.AL_MEM_SERIES
    if n > lib.AL_MEM_SERIES:  # halved at least once: more than half the bound is kept
        assert len(s["t_ns"]) > lib.AL_MEM_SERIES // 2
    else:
        assert len(s["t_ns"]) == n
    assert list(s["t_ns"]) == sorted(s["t_ns"])


def test_thread_start_naming_itself_as_parent_does_not_wait():
    tr = build([(0, dict(kind="thread_start", aux=0)), (0, dict(kind="malloc", size=8, id=0)),
                (0, dict(kind="free", ref=0))])
    res = al.run("replay", "buddy", trace=tr, duration=30, **ONE)
    assert wl(res, "thread_start_ops") == 1 and res.truncated() == []


@pytest.mark.parametrize("args, words", [
    (["--trace", "/nonexistent/x.altrace"],
     "cannot read trace /nonexistent/x.altrace: no such file"),
    ([], "workload replay needs trace=FILE"),
    (["--trace", os.path.dirname(os.path.abspath(__file__))],
     "cannot read trace %s: it is a directory, not a regular file"
     % os.path.dirname(os.path.abspath(__file__))),
])
def test_cli_refusals_are_one_error_line(args, words):
    p = subprocess.run([sys.executable, "-m", "alloclab", "run", "replay", "--policy", "buddy",
                        *args], capture_output=True, text=True)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["alloclab: error: " + words + p.stderr.strip()
                                             .split(words, 1)[1]]


def _alternating(n, run):
    """One thread: runs of `run` mallocs then `run` frees, n objects in all."""
    prog, oid = [], 0
    while oid < n:
        ids = list(range(oid, oid + run))
        prog += [(0, {"kind": "malloc", "id": i, "size": 64}) for i in ids]
        prog += [(0, {"kind": "free", "ref": i}) for i in ids]
        oid += run
    return build(prog)


def test_clock_reads_are_counted_and_a_table_says_when_they_are_a_share():
    alt = al.run("replay", "buddy", trace=_alternating(4096, 1), **ONE)
    runs = al.run("replay", "buddy", trace=_alternating(4096, 512), **ONE)
    # batch timing reads the clock once where one kind gives way to the other
    assert wl(alt, "clock_reads") >= 8192 - 1
    assert wl(runs, "clock_reads") <= 2 * 4096 / 512 + 2
    assert any(line.startswith("clock: the timed regions read the clock 1.00 times per op")
               for line in alt.table("alloc_ns").warning_lines())
    assert not any(line.startswith("clock:") for line in runs.table("alloc_ns").warning_lines())
    assert not any(line.startswith("clock:")
                   for line in alt.table("buddy.allocs_per_op").warning_lines())


def test_an_empty_trace_is_refused(tmp_path):
    empty = Trace.from_ops([[]])
    with pytest.raises(al.InvalidArgument, match="has no ops: nothing to replay"):
        al.run("replay", "buddy", trace=empty, **ONE)


def test_a_comma_in_a_missing_trace_path_says_one_trace_per_run(tmp_path):
    with pytest.raises(al.InvalidArgument, match="one trace per run"):
        al.run("replay", "buddy", trace=str(tmp_path / "a.altrace,b.altrace"), **ONE)


def test_cli_help_gives_replay_its_own_duration_cycles_and_warmup(capsys):
    from alloclab.cli import main
    from alloclab.run import REPLAY_TIME_LIMIT

    def flag_help(workload):
        with pytest.raises(SystemExit):
            main(["run", workload, "--help"])
        return " ".join(capsys.readouterr().out.split())

    replay, synthetic = flag_help("replay"), flag_help("malloc-free")
    assert "--duration SECONDS a time limit per run: a pass it cuts short is truncated " \
           "(default: %g)" % REPLAY_TIME_LIMIT in replay
    assert "--cycles N refused" in replay and "--warmup-cycles N none" in replay
    assert "measured phase per run when --cycles is not given (default: 0.25" in synthetic
    assert "a time limit per run" not in synthetic


def _cut_short(path, complete):
    """every_kind()'s trace saved at path, its header saying whether the
    recording ended (complete) or was cut short, as a killed program's is."""
    tr = every_kind()[0]
    tr.meta.update(complete=complete, note="" if complete else "no end record (killed)")
    tr.save(path)


@pytest.mark.parametrize("complete", [True, False])
def test_a_trace_cut_short_is_replayed_with_a_warning_and_a_note(tmp_path, complete):
    import warnings
    from alloclab.replay import IncompleteTraceWarning
    path = str(tmp_path / "k.altrace")
    _cut_short(path, complete)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = al.run("replay", "buddy", trace=path, **ONE)
    mine = [w for w in caught if issubclass(w.category, IncompleteTraceWarning)]
    ident = res.metadata["run"]["trace"]
    if complete:
        assert not mine and "complete" not in ident and "incomplete" not in ident
    else:
        assert mine and all(str(w.message) == str(mine[0].message) for w in mine)
        assert str(mine[0].message).startswith("trace %s: the recording was cut short "
                                               "(complete: false; no end record (killed))"
                                               % path)
        assert ident["complete"] is False and "cut short" in ident["incomplete"]
    assert wl(res, "malloc_ops") == every_kind()[1]["malloc"]  # replayed all the same


@pytest.mark.parametrize("complete", [True, False])
def test_cli_says_once_that_a_trace_was_cut_short(tmp_path, complete):
    path = str(tmp_path / "k.altrace")
    _cut_short(path, complete)
    p = subprocess.run([sys.executable, "-m", "alloclab", "run", "replay", "--trace", path,
                        "--policy", "buddy", "--runs", "1"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    lines = [x for x in p.stderr.splitlines() if "cut short" in x]
    assert "Warning" not in p.stderr  # no Python warning text
    if complete:
        assert lines == []
    else:
        assert lines == ["alloclab: warning: trace %s: the recording was cut short "
                         "(complete: false; no end record (killed)): it holds only the ops "
                         "the program had written before it ended" % path]


@pytest.mark.parametrize("kind", ["chardev", "fifo"])
def test_cli_names_what_a_trace_path_is_that_is_not_a_file(tmp_path, kind):
    import stat
    path = str(tmp_path / "t")
    if kind == "fifo":
        os.mkfifo(path)
    else:
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
        except PermissionError:
            os.symlink("/dev/zero", path)
    p = subprocess.run([sys.executable, "-m", "alloclab", "run", "replay", "--trace", path,
                        "--policy", "buddy", "--runs", "1"], capture_output=True, text=True,
                       timeout=60)
    words = {"chardev": "a character device", "fifo": "a named pipe"}[kind]
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("alloclab: error: cannot read trace %s: " % path)
    assert "it is %s, not a regular file" % words in p.stderr and "no such" not in p.stderr
