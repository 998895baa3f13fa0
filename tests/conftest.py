"""Shared fixtures and Hypothesis profiles.

HYPOTHESIS_PROFILE picks the profile: "default" (quick, for development),
"ci" (more examples, derandomized so CI is reproducible), "expensive" (a
long soak before a release).
"""

import os
import shutil
import signal

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("default", max_examples=40, deadline=None)
settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True,
                          print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("expensive", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# A shell without job control starts its background commands with SIGINT
# ignored, and an ignored signal stays ignored across exec: the children
# the Ctrl-C tests interrupt would then never see their SIGINT (Python only
# installs its KeyboardInterrupt handler where SIGINT is not ignored).
# Caught here, SIGINT is back to its default in every child.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _schema():
    from alloclab import schema
    return schema


def bottom_layers():
    """Names of layers that need no backend."""
    return [n for n, s in _schema().layers().items() if not s.needs_backend]


def validating_bottom_layers():
    """Bottom layers whose free() rejects invalid and double frees."""
    return [n for n, s in _schema().layers().items()
            if not s.needs_backend and s.has("validates")]


# Fast run settings: fixed cycles, little warmup, one run.
FAST = dict(cycles=20, warmup_cycles=2, runs=1)


@pytest.fixture
def fast():
    return dict(FAST)


def front_layers():
    """Names of layers that need a layer below."""
    return [n for n, s in _schema().layers().items() if s.needs_backend]


def stacks():
    """A policy per variant: every bottom layer alone, every front layer over
    the first validating bottom layer (buddy) or, for a layer that needs a
    page allocator, over the first page allocator (pages), and every preset."""
    from alloclab import presets

    peer = os.environ.get("ALLOCLAB_TEST_PEER")
    if peer:  # tests/test_peers.py reruns the contract suite in a child under LD_PRELOAD
        return ["system(allocator=%s)" % peer if peer != "glibc" else "system"]
    base = (validating_bottom_layers() or bottom_layers())[0]
    pages = [n for n, s in _schema().layers().items() if s.has("pages")]

    def below(f):
        return pages[0] if _schema().layer(f).has("needs_pages") and pages else base

    out = bottom_layers() + ["%s > %s" % (f, below(f)) for f in front_layers()]
    from alloclab import peers

    # Peers run through LD_PRELOAD children (tests/test_peers.py); only this
    # process's own malloc can back an in-process Allocator.
    return out + [p for p in presets.values() if p not in out and peers.needed(p) is None]


# The red-team matrix (tests/test_redteam.py): "sample" (the default) runs a
# seeded 10% of its cells, "full" every cell (.ci/run), "off" none.
def pytest_addoption(parser):
    group = parser.getgroup("alloclab")
    group.addoption("--redteam", choices=["sample", "full", "off"],
                    default=os.environ.get("ALLOCLAB_REDTEAM", "sample"),
                    help="red-team matrix cells to run: a seeded 10%% sample (default), "
                         "every cell, or none (env ALLOCLAB_REDTEAM)")
    group.addoption("--redteam-seed", type=int,
                    default=int(os.environ.get("ALLOCLAB_REDTEAM_SEED", "14")),
                    help="seed of the red-team sample (env ALLOCLAB_REDTEAM_SEED, default 14)")


def pytest_report_header(config):
    mode = config.getoption("--redteam")
    if mode == "sample":
        return "red-team matrix: seeded 10%% sample, seed %d (--redteam=full for every cell)" \
            % config.getoption("--redteam-seed")
    return "red-team matrix: %s" % mode


def pytest_terminal_summary(terminalreporter, config):
    """The red-team matrix's totals, wall time and failing cells by cause."""
    import sys

    mod = sys.modules.get("test_redteam")
    rep = mod and config.stash.get(mod.REPORT, None)
    if not rep:
        return
    runner, wall = rep
    rt = sys.modules["redteam_cells"]
    outs = list(runner.results.values())
    by = runner.summary()
    tw = terminalreporter
    tw.section("red-team matrix")
    tw.write_line("%s, seed %d: %d cells, %s; %.1f s wall on %d workers" % (
        config.getoption("--redteam"), config.getoption("--redteam-seed"), len(outs),
        ", ".join("%d %s" % (by.get(k, 0), k) for k in (rt.PASS, rt.FAIL, rt.CRASH, rt.HANG)),
        wall, runner.nworkers))
    for line in rt.format_groups(rt.group_failures(outs)):
        tw.write_line(line)


def python_under_address_limit(code, limit_bytes):
    """Run ``code`` in a child Python whose address space is capped at
    ``limit_bytes`` (ulimit -v), with one BLAS thread (a BLAS pool's stacks
    would take the room); returns its stdout lines, asserting it exited 0."""
    import subprocess
    import sys

    def limit():
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, preexec_fn=limit, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.splitlines()


EXAMPLE_TREE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "examples", "bpf_tree")


def example_tree_with(tmp_path, rel, old, new):
    """A copy of the example libarena tree in tmp_path/tree, with ``new``
    written before the first ``old`` of its file ``rel``: its path."""
    dst = tmp_path / "tree"
    shutil.copytree(EXAMPLE_TREE, dst)
    f = dst / rel
    text = f.read_text()
    assert old in text
    f.write_text(text.replace(old, new + old, 1))
    return str(dst)
