"""The red-team matrix as tests: every workload x preset x producers
{1, 2, 5} run, and every abuse of a live Allocator x preset, one test per
cell (tests/redteam_cells.py defines the cells and what each must do).

Each cell runs in one of a few long-lived worker processes with a timeout,
so a crash (a fatal signal) or a hang fails that cell's test, naming the
signal, and the suite goes on with a fresh worker. ``pytest`` runs a seeded
10% sample; ``pytest --redteam=full tests/test_redteam.py`` (or
ALLOCLAB_REDTEAM=full) every cell, as .ci/run does. docs/redteam.md.
"""
import atexit
import json
import os
import time

import pytest

import redteam_cells as rt

pytestmark = pytest.mark.redteam


def pytest_generate_tests(metafunc):
    if "cell" in metafunc.fixturenames:
        cfg = metafunc.config
        cells = rt.select_cells(cfg.getoption("--redteam"), cfg.getoption("--redteam-seed"))
        metafunc.parametrize("cell", cells)


@pytest.fixture(scope="session")
def redteam(request):
    """The worker pool. Without xdist, every selected cell of the session is
    queued at once, so both workers stay busy while tests report in order."""
    xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    runner = rt.Runner(workers=1 if xdist else rt.WORKERS)
    atexit.register(runner.close)  # also after Ctrl-C, which may skip teardown
    if not xdist:
        runner.prefetch([it.callspec.params["cell"] for it in request.session.items
                         if getattr(it, "originalname", None) == "test_cell"
                         and it.module is not None and it.module.__name__ == __name__])
    t0 = time.monotonic()
    yield runner
    runner.close()
    request.config.stash[REPORT] = (runner, time.monotonic() - t0)
    path = os.environ.get("ALLOCLAB_REDTEAM_REPORT")
    if path:  # every outcome, for comparing two runs of the matrix
        with open(path, "w") as f:
            json.dump([o.__dict__ for o in runner.results.values()], f, indent=1)


REPORT = pytest.StashKey()


def test_cell(cell, redteam):
    o = redteam.get(cell)
    if o.status != rt.PASS:
        pytest.fail("%s: %s after %.1f s: %s" % (cell, o.status, o.seconds, o.detail),
                    pytrace=False)


def test_sample_is_seeded_and_a_tenth():
    """The sample is a fixed function of the seed, a tenth of the matrix,
    and another seed picks other cells."""
    cells = rt.all_cells()
    a, b = rt.select_cells("sample", 14), rt.select_cells("sample", 14)
    assert a == b
    assert len(a) == round(len(cells) * rt.SAMPLE_FRACTION)
    assert set(a) <= set(cells) and len(set(cells)) == len(cells)
    assert rt.select_cells("sample", 15) != a
    assert rt.select_cells("full", 14) == cells


def test_matrix_covers_every_workload_preset_and_abuse():
    import alloclab as al

    cells = set(rt.all_cells())
    for w in al.workloads():
        for preset in al.presets:
            for p in rt.PRODUCERS:
                assert "run:%s:%s:p%d" % (w["name"], preset, p) in cells
    for name in rt.ABUSES:
        presets = rt.peer_presets() if name == "peer_in_process" else rt.in_process_presets()
        for preset in presets:
            assert "abuse:%s:%s" % (name, preset) in cells
    # the shim's entry points at the limits of size_t, on every shim preset
    assert {"memalign", "aligned_alloc", "posix_memalign", "valloc", "pvalloc", "reallocarray",
            "realloc", "calloc"} <= set(rt.PRELOAD_ENTRIES)
    assert {"buddy", "kzalloc", "bpf_ma(mode=any) > slab"} <= set(rt.shim_presets())
    for entry in rt.PRELOAD_ENTRIES:
        for preset in rt.shim_presets():
            assert "preload:%s:%s" % (entry, preset) in cells


def test_runner_reports_crash_hang_and_failure_by_cell(monkeypatch):
    """The runner itself: a cell that kills its worker with a signal is a
    crash naming the signal, one that never answers is a hang, a failed
    expectation is a failure with its message, and the next cell runs on a
    fresh worker."""
    monkeypatch.setitem(os.environ, "ALLOCLAB_REDTEAM_SELFTEST", "1")
    runner = rt.Runner(workers=2, timeout=3)
    try:
        outs = runner.run_all(["selftest:segv", "selftest:hang", "selftest:fail",
                               "selftest:pass", "selftest:abort", "selftest:pass2"])
    finally:
        runner.close()
    got = {o.cell: o for o in outs}
    assert got["selftest:segv"].status == rt.CRASH
    assert "SIGSEGV" in got["selftest:segv"].detail
    assert got["selftest:abort"].status == rt.CRASH
    assert "SIGABRT" in got["selftest:abort"].detail
    assert got["selftest:hang"].status == rt.HANG
    assert got["selftest:fail"].status == rt.FAIL
    assert got["selftest:fail"].detail == "expected failure"
    assert got["selftest:pass"].status == rt.PASS
    assert got["selftest:pass2"].status == rt.PASS
    # two workers, and a fresh one after each of the four cells that did not pass
    assert len(runner.spawned) == 6
    assert all(p.poll() is not None for p in runner.spawned)
