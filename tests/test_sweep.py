"""sweep(): seeded interleaved order, resume after an interruption (and after
a write cut short), refusal of a different sweep's journal, the executor
path (a one-worker process pool; dask's LocalCluster when installed), the
refusal of local executors that run timed cells side by side, progress."""

import concurrent.futures as cf
import importlib
import json
import warnings

import pytest

import alloclab as al

sweep_mod = importlib.import_module("alloclab.sweep")  # al.sweep is the function

GRID = dict(producers=[1, 2], allocs_per_cycle=[1, 16], runs=2, cycles=10, warmup_cycles=1,
            mem_sample=0)
POLICIES = ["buddy", "libc"]


def _lines(path):
    with open(path) as f:
        return [json.loads(x) for x in f.read().splitlines()]


def test_sweep_matches_run_grid_and_interleaves(tmp_path):
    j = tmp_path / "s.jsonl"
    res = al.sweep("malloc-free", POLICIES, journal=j, **GRID)
    ref = al.run("malloc-free", POLICIES, **GRID)
    assert [p.params for p in res.points] == [p.params for p in ref.points]
    assert all(p.runs == 2 for p in res.points)
    assert res.metadata["run"] == ref.metadata["run"]
    sw = res.metadata["sweep"]
    assert sw["units"] == 16 and sw["resumed_units"] == 0 and sw["order"] == "shuffled"
    assert sw["session_wall_s"] >= sw["session_run_s"] > 0
    lines = _lines(j)
    assert lines[0]["format"] == "alloclab-sweep-journal"
    units = [(json.dumps(d["point"], sort_keys=True), d["run"]) for d in lines[1:]]
    assert len(units) == 16 and len(set(units)) == 16
    # round by round: every cell's run 0 before any run 1
    assert [d["run"] for d in lines[1:]] == [0] * 8 + [1] * 8
    # policies interleaved in a seeded random order, not grid order
    order0 = [d["point"]["policy"] for d in lines[1:9]]
    order1 = [d["point"]["policy"] for d in lines[9:]]
    grid = [p.params["policy"] for p in ref.points]
    assert order0 != grid or order1 != grid
    assert order0 != ["buddy"] * 4 + ["libc"] * 4
    # the same seed gives the same order; another order_seed another one
    j2 = tmp_path / "s2.jsonl"
    al.sweep("malloc-free", POLICIES, journal=j2, **GRID)
    assert [d["point"] for d in _lines(j2)[1:]] == [d["point"] for d in lines[1:]]
    j3 = tmp_path / "s3.jsonl"
    al.sweep("malloc-free", POLICIES, journal=j3, order_seed=12345, **GRID)
    assert [d["point"] for d in _lines(j3)[1:]] != [d["point"] for d in lines[1:]]
    j4 = tmp_path / "s4.jsonl"
    al.sweep("malloc-free", POLICIES, journal=j4, shuffle=False, **GRID)
    assert [d["point"]["policy"] for d in _lines(j4)[1:9]] == grid


def test_resume_after_interruption(tmp_path, monkeypatch):
    j = tmp_path / "s.jsonl"
    real = sweep_mod._run_unit
    calls = []

    def interrupted(task, run_index):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append((task["point"]["policy"], run_index))
        return real(task, run_index)

    monkeypatch.setattr(sweep_mod, "_run_unit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        al.sweep("malloc-free", POLICIES, journal=j, **GRID)
    assert len(_lines(j)) == 1 + 5  # header + the five finished units

    calls.clear()

    def counting(task, run_index):
        calls.append((json.dumps(task["point"], sort_keys=True), run_index))
        return real(task, run_index)

    monkeypatch.setattr(sweep_mod, "_run_unit", counting)
    res = al.sweep("malloc-free", POLICIES, journal=j, **GRID)
    assert len(calls) == 16 - 5  # only what was missing ran
    assert res.metadata["sweep"]["resumed_units"] == 5
    assert len(res.points) == 8 and all(p.runs == 2 for p in res.points)
    assert len(_lines(j)) == 1 + 16

    calls.clear()
    again = al.sweep("malloc-free", POLICIES, journal=j, **GRID)
    assert calls == [] and again.metadata["sweep"]["resumed_units"] == 16
    assert again.points == res.points  # all from the journal, identical

    # a write cut short: the partial line is dropped and that unit redone
    text = j.read_text().splitlines(keepends=True)
    j.write_text("".join(text[:-1]) + text[-1][: len(text[-1]) // 2])
    calls.clear()
    res2 = al.sweep("malloc-free", POLICIES, journal=j, **GRID)
    assert len(calls) == 1 and len(_lines(j)) == 1 + 16
    assert [p.params for p in res2.points] == [p.params for p in res.points]


def test_journal_of_another_sweep_is_refused(tmp_path):
    j = tmp_path / "s.jsonl"
    al.sweep("malloc-free", POLICIES, journal=j, **GRID)
    with pytest.raises(al.InvalidArgument, match="different sweep.*sweep"):
        al.sweep("malloc-free", POLICIES, journal=j, **dict(GRID, producers=[1]))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"hello": 1}\n')
    with pytest.raises(al.InvalidArgument, match="not an alloclab sweep journal"):
        al.sweep("malloc-free", POLICIES, journal=bad, **GRID)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(j.read_text().splitlines()[0] + "\nnot json\n")
    with pytest.raises(al.InvalidArgument, match="line 2"):
        al.sweep("malloc-free", POLICIES, journal=broken, **GRID)


def test_process_pool_of_one_worker(tmp_path):
    j = tmp_path / "s.jsonl"
    with cf.ProcessPoolExecutor(max_workers=1) as ex:
        res = al.sweep("malloc-free", POLICIES, executor=ex, journal=j, **GRID)
    assert len(res.points) == 8 and all(p.runs == 2 for p in res.points)
    assert res.metadata["sweep"]["executor"] == "ProcessPoolExecutor"
    assert len(_lines(j)) == 17
    assert all(p.data["alloc_ops"].tolist() == [10 * p.params["producers"] *
                                                p.params["allocs_per_cycle"]] * 2
               for p in res.points)


def test_local_executors_that_overlap_cells_are_refused():
    with cf.ThreadPoolExecutor(max_workers=2) as ex:
        with pytest.raises(al.InvalidArgument, match="side by side"):
            al.sweep("malloc-free", "libc", executor=ex, **GRID)
        with pytest.warns(sweep_mod.ConcurrentExecutorWarning, match="side by side"):
            res = al.sweep("malloc-free", "libc", executor=ex, allow_concurrent=True, **GRID)
    assert len(res.points) == 4
    with cf.ThreadPoolExecutor(max_workers=1) as ex, warnings.catch_warnings():
        warnings.simplefilter("error")
        al.sweep("malloc-free", "libc", executor=ex, **GRID)
    with pytest.raises(al.InvalidArgument, match="Executor"):
        al.sweep("malloc-free", "libc", executor=object(), **GRID)


def test_dask_local_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client, warnings.catch_warnings():
        warnings.simplefilter("error", sweep_mod.ConcurrentExecutorWarning)
        res = al.sweep("malloc-free", POLICIES, executor=client.get_executor(),
                       journal=tmp_path / "d.jsonl", **GRID)
    assert len(res.points) == 8 and all(p.runs == 2 for p in res.points)
    # pure=False: identical runs are run, not served from dask's cache
    seeds = [p.info["seeds"] for p in res.points]
    assert all(s == [1, 2] for s in seeds)
    assert res.metadata["sweep"]["executor"] == "ClientExecutor"


def test_progress_bar(capsys):
    al.sweep("malloc-free", "libc", progress=True, **GRID)
    err = capsys.readouterr().err
    assert "alloclab sweep" in err and "8/8" in err


def test_sweep_validates_first():
    with pytest.raises(al.UnknownNameError, match="nosuch"):
        al.sweep("malloc-free", "nosuch", **GRID)


# ---------------------------------------------------------------- journals refused unwritten
#
# A journal is read and checked whole before anything is written to it: a
# file that is refused is byte for byte what it was, and nothing has run.

SMALL = dict(runs=1, cycles=5, warmup_cycles=1, mem_sample=0)


@pytest.fixture
def no_unit(monkeypatch):
    def boom(*a, **k):  # pragma: no cover - reached only when validation misses
        raise AssertionError("a unit ran before the journal was refused")
    monkeypatch.setattr(sweep_mod, "_run_unit", boom)


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    """A real journal of the SMALL sweep on buddy: (header line, unit line)."""
    j = tmp_path_factory.mktemp("j") / "s.jsonl"
    al.sweep("malloc-free", "buddy", journal=j, **SMALL)
    lines = j.read_bytes().split(b"\n")
    return lines[0], lines[1]


def _hdr(header, **change):
    d = json.loads(header)
    d.update(change)
    return json.dumps(d).encode()


def _bad_journals(h, u):
    unit = json.loads(u)
    return [
        # not a journal at all (the reported cases: a result file, a notes file)
        (b'{"format": "alloclab-result", "points": []}\n{"a": 1}', "not an alloclab sweep journal"),
        (b"my notes\nthe last line", "not an alloclab sweep journal"),
        (b"a single line without an end", "no complete line"),
        (bytes(range(256)), "not an alloclab sweep journal"),
        (b"\xff\xfe\xfd\n", "not an alloclab sweep journal"),
        (b"[1, 2]\n", "not an alloclab sweep journal"),
        (b"null\n", "not an alloclab sweep journal"),
        (b"\n\n", "not an alloclab sweep journal"),
        (h[: len(h) // 2], "header line was cut short"),
        # a header of the wrong types
        (_hdr(h, version="1") + b"\n", "version is '1', not an integer"),
        (_hdr(h, version=True) + b"\n", "version is True"),
        (_hdr(h, version=99) + b"\n", "newer than this alloclab"),
        (_hdr(h, settings=[1]) + b"\n", "settings is a JSON list"),
        (_hdr(h, metadata="x") + b"\n", "metadata is a JSON string"),
        # unit lines of the wrong shape (valid JSON), not UTF-8, cut in the middle
        (h + b"\n[1, 2]\n", "line 2 is not a finished run (not a JSON object)"),
        (h + b'\n{"point": {}, "run": 0}\n', "line 2 is not a finished run (no raw)"),
        (h + b'\n' + json.dumps(dict(unit, run="0")).encode() + b"\n", "run='0'"),
        (h + b'\n' + json.dumps(dict(unit, run=-1)).encode() + b"\n", "run=-1"),
        (h + b'\n' + json.dumps(dict(unit, point=[1])).encode() + b"\n", "point is not an"),
        (h + b'\n' + json.dumps(dict(unit, wall_s="1")).encode() + b"\n", "wall_s='1'"),
        (h + b'\n' + json.dumps(dict(unit, raw={"alloc_ops": 1})).encode() + b"\n",
         "its raw run lacks"),
        (h + b'\n' + json.dumps(dict(unit, raw=[])).encode() + b"\n", "raw is not an object"),
        (h + b"\n\xff\xfe\n", "line 2 is not a finished run (not UTF-8 text)"),
        (h + b"\n" + u[: len(u) // 2] + b"\n" + u + b"\n", "line 2 is not a finished run (not "
         "JSON)"),
        (h + b"\n\n" + u + b"\n", "line 2 is not a finished run (not JSON)"),
    ]


def test_bad_journals_are_refused_byte_identical(tmp_path, header, no_unit):
    for i, (data, words) in enumerate(_bad_journals(*header)):
        j = tmp_path / ("bad%d.jsonl" % i)
        j.write_bytes(data)
        with pytest.raises(al.FileFormatError) as ei:
            al.sweep("malloc-free", "buddy", journal=j, **SMALL)
        assert words in str(ei.value), (data[:80], str(ei.value))
        assert ei.value.path == str(j)
        assert j.read_bytes() == data, "refused journal %d was changed" % i
        with pytest.raises(al.FileFormatError):  # the CLI's check, the same verdict
            sweep_mod.check_journal(j, sweep_mod.plan("malloc-free", "buddy", **SMALL)[0])
        assert j.read_bytes() == data


def test_units_outside_the_sweep_are_refused_byte_identical(tmp_path, header, no_unit):
    """A unit line of the right shape that names no unit of this sweep (an
    empty point, a run index past runs) is an edited journal: refused before
    any run and before the cut last line is dropped, never run twice."""
    h, u = header
    unit = json.loads(u)
    for i, bad in enumerate([dict(unit, point={}), dict(unit, run=SMALL["runs"] + 5)]):
        j = tmp_path / ("stray%d.jsonl" % i)
        data = h + b"\n" + json.dumps(bad).encode() + b"\n" + u[: len(u) // 2]
        j.write_bytes(data)
        with pytest.raises(al.FileFormatError, match="1 line.*not in this sweep") as ei:
            al.sweep("malloc-free", "buddy", journal=j, **SMALL)
        assert ei.value.path == str(j)
        assert j.read_bytes() == data


def test_another_sweeps_journal_is_refused_byte_identical(tmp_path, header, no_unit):
    j = tmp_path / "s.jsonl"
    data = header[0] + b"\n" + header[1] + b"\n"
    j.write_bytes(data)
    with pytest.raises(al.InvalidArgument, match="different sweep.*producers"):
        al.sweep("malloc-free", "buddy", journal=j, **dict(SMALL, producers=2))
    assert j.read_bytes() == data


@pytest.mark.parametrize("where, words", [
    ("missing/s.jsonl", "does not exist"),
    ("file/s.jsonl", "is not a directory"),
    ("dir", "is a directory"),
    ("/dev/full", "not a regular file"),
    ("/dev/null", "not a regular file"),
    ("/proc/alloclab.jsonl", "cannot be written"),
])
def test_journals_that_cannot_be_written_are_refused_first(tmp_path, no_unit, where, words):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    path = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(al.InvalidArgument, match=words):
        al.sweep("malloc-free", "buddy", journal=path, **SMALL)
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.parametrize("bad", [12, True, b"", "", None.__class__])
def test_journal_must_be_a_path(bad, no_unit):
    with pytest.raises((al.ParameterTypeError, al.InvalidArgument)):
        al.sweep("malloc-free", "buddy", journal=bad, **SMALL)


def test_check_journal_counts_finished_runs_and_writes_nothing(tmp_path, header):
    settings = sweep_mod.plan("malloc-free", "buddy", **SMALL)[0]
    j = tmp_path / "new.jsonl"
    assert sweep_mod.check_journal(j, settings) == 0 and not j.exists()
    data = header[0] + b"\n" + header[1] + b"\n" + header[1][:20]  # a last line cut short
    j.write_bytes(data)
    assert sweep_mod.check_journal(j, settings) == 1 and j.read_bytes() == data
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert sweep_mod.check_journal(empty, settings) == 0


def test_a_header_cut_short_alone_is_refused_not_rewritten(tmp_path, header, no_unit):
    j = tmp_path / "s.jsonl"
    j.write_bytes(header[0][:40])
    with pytest.raises(al.FileFormatError, match="remove the file"):
        al.sweep("malloc-free", "buddy", journal=j, **SMALL)
    assert j.read_bytes() == header[0][:40]


# ---- the spec is parsed once per sweep, and travels parsed ----

policy_mod = importlib.import_module(al.Policy.__module__)


def test_a_sweep_parses_each_policy_once(tmp_path, monkeypatch):
    pols = ["libarena-spill", "slab(zero=true)"]
    for p in pols:  # a Result's labels read canonical(), cached per process
        policy_mod.canonical(p)
    calls, real = [], policy_mod._parse

    def parse(text, spec):
        calls.append(spec)
        return real(text, spec)
    monkeypatch.setattr(policy_mod, "_parse", parse)
    j = tmp_path / "s.jsonl"
    res = al.sweep("malloc-free", pols, journal=j, **GRID)
    assert len(res.points) == 8 and sorted(calls) == sorted(pols)
    del calls[:]
    al.sweep("malloc-free", pols, journal=j, **GRID)  # resumed: the plan parses, no run
    assert sorted(calls) == sorted(pols)


def test_a_spawned_worker_runs_the_parsed_form_as_this_process_does():
    import multiprocessing
    kw = dict(GRID, producers=1, cycles=30, seed=3)  # one producer: exact counters
    pols = ["libarena-transfer", "percpu(capacity=4, batch=2) > slab"]
    here = al.sweep("malloc-free", pols, **kw)
    with cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        there = al.sweep("malloc-free", pols, executor=ex, **kw)
    assert [p.params for p in here.points] == [p.params for p in there.points]
    for a, b in zip(here.points, there.points):
        names = [m for m in a.data if "." in m and not m.startswith("wl.")
                 and not m.endswith("_ns")]
        assert len(names) > 10 and sorted(a.data) == sorted(b.data)
        for m in names + ["alloc_ops", "free_ops"]:
            assert list(a.data[m]) == list(b.data[m]), m
