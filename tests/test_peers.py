"""Peer allocators (glibc, jemalloc, gperftools-tcmalloc, mimalloc) and the
mimalloc-bench workloads (xmalloc, larson, cache-scratch).

Peers run in child processes under LD_PRELOAD; .ci/run installs the Debian
packages, so none of these tests is skipped there.
"""
import importlib
import os
import subprocess
import sys

import pytest

import alloclab as al
from alloclab import peers

PEERS = [n for n in peers.NAMES if n != peers.current()]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_peer_is_installed():
    missing = [n for n in peers.NAMES if not peers.available(n)]
    assert not missing, "install: " + "; ".join(peers.install_hint(n) for n in missing)


@pytest.mark.parametrize("peer", peers.NAMES)
def test_peer_runs_with_exact_counts(peer):
    res = al.run("malloc-free", peer, runs=2, cycles=10, warmup_cycles=1, producers=[1, 2],
                 allocs_per_cycle=32)
    for p in res.points:
        n = 10 * 32 * p.params["producers"]
        assert list(p["alloc_ops"]) == [n, n]
        assert list(p["system.allocs"]) == [n, n]  # counted inside the peer's process
        assert list(p["system.frees"]) == [n, n]
        assert list(p["system.leaked"]) == [0, 0]


@pytest.mark.parametrize("peer", PEERS)
def test_peer_cannot_be_faked_in_process(peer):
    with pytest.raises(al.AlloclabError, match="EOPNOTSUPP"):
        al.Allocator(al.presets[peer])


def test_missing_peer_names_the_package(monkeypatch):
    monkeypatch.setattr(peers, "library", lambda name: None)
    with pytest.raises(al.PeerUnavailable, match="apt-get install libjemalloc2"):
        al.run("malloc-free", "jemalloc", runs=1, cycles=1)


def test_peer_errors_come_back_as_exceptions():
    # plan() refuses larson's sizes before any child starts ...
    with pytest.raises(al.InvalidArgument, match="min_size=100 is above max_size=10"):
        al.run("larson", "jemalloc", runs=1, cycles=1, min_size=100, max_size=10)
    # ... so the planned task is altered: al_run refuses it inside the child, and that
    # failure is re-raised here
    run_mod = importlib.import_module("alloclab.run")  # al.run is the function
    task = run_mod.plan("larson", "jemalloc", runs=1, cycles=1)[1][0]
    names = [p.name for p in al.schema.workload("larson").params]
    task["wparams"][names.index("min_size")] = 100
    task["wparams"][names.index("max_size")] = 10
    with pytest.raises(al.RunError, match="EINVAL.*min_size=100 is above max_size=10"):
        run_mod.run_once(task)


@pytest.mark.parametrize("peer", PEERS[:1])
def test_a_peer_run_parses_its_policy_once_and_the_child_not_at_all(peer, monkeypatch):
    policy_mod = importlib.import_module(al.Policy.__module__)
    policy_mod.canonical(peer)  # a Result's labels read canonical(), cached per process
    calls, real = [], policy_mod._parse

    def parse(text, spec):
        calls.append(spec)
        return real(text, spec)
    monkeypatch.setattr(policy_mod, "_parse", parse)
    run_mod = importlib.import_module("alloclab.run")
    task = run_mod.plan("malloc-free", peer, runs=3, cycles=5, warmup_cycles=0,
                        allocs_per_cycle=8)[1][0]
    assert calls == [peer]
    # the child reads the parsed form, never the label: one that would not parse runs
    raw = run_mod.run_once(dict(task, policy="%s >> not a spec" % peer), 0)
    assert raw["pid"] != os.getpid() and raw["alloc_ops"] == 5 * 8
    res = al.run("malloc-free", peer, runs=3, cycles=5, warmup_cycles=0)
    assert calls == [peer, peer] and res.points[0].runs == 3


@pytest.mark.parametrize("peer", PEERS)
def test_contract_suite_over_peer(peer):
    """The shared contract tests, rerun in a child whose malloc is the peer."""
    env = dict(os.environ, ALLOCLAB_TEST_PEER=peer, LD_PRELOAD=peers.library(peer),
               HYPOTHESIS_PROFILE="default")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          os.path.join(ROOT, "tests", "test_allocator.py"),
                          "-k", "every_stack_round_trip"],
                         capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "1 passed" in out.stdout


# ---- mimalloc-bench workloads ----

@pytest.mark.parametrize("policy", ["libarena-transfer", "libarena-spill", "libc"])
def test_xmalloc_counts(policy):
    res = al.run("xmalloc", policy, runs=1, cycles=20, warmup_cycles=0, producers=[1, 2, 4],
                 batch=50)
    for p in res.points:
        prod = max(1, p.params["producers"] // 2)
        assert p["alloc_ops"][0] == prod * 20 * 50
        assert p["free_ops"][0] <= p["alloc_ops"][0]
        for k in p.data:
            if k.endswith(".leaked"):
                assert p[k][0] == 0
        # consumers free whole batches; whether they find any within 20 cycles is a race
        assert p["cross_frees"][0] <= p["free_ops"][0]
        assert p["cross_frees"][0] % 50 == 0
        if p.params["producers"] == 1:
            assert p["cross_frees"][0] == 0


@pytest.mark.parametrize("policy", ["libarena-transfer", "libarena-magazine", "libc"])
def test_larson_counts(policy):
    res = al.run("larson", policy, runs=1, cycles=30, warmup_cycles=0, producers=[1, 3],
                 chunks=200, rounds=1000, ops_per_cycle=100)
    for p in res.points:
        n = p.params["producers"] * 30 * 100
        assert p["alloc_ops"][0] == n and p["free_ops"][0] == n
        assert p["cross_frees"][0] > 0  # the warm-up objects came from the main thread
        for k in p.data:
            if k.endswith(".leaked"):
                assert p[k][0] == 0


def test_larson_bad_sizes():
    # refused by plan(), before any run: not a failed run
    with pytest.raises(al.InvalidArgument, match="min_size=100 is above max_size=10") as ei:
        al.run("larson", "libc", runs=1, cycles=1, min_size=100, max_size=10)
    assert not isinstance(ei.value, al.RunError)


def test_cache_scratch_counts():
    res = al.run("cache-scratch", ["libarena-spill", "libc"], runs=1, cycles=10,
                 warmup_cycles=0, producers=2, repetitions=10)
    for p in res.points:
        assert p["alloc_ops"][0] == 20
        assert p["cross_frees"][0] == 2  # each worker freed the object handed to it


def test_cli_list_shows_peers():
    out = subprocess.run([sys.executable, "-m", "alloclab", "list"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0
    for n in peers.NAMES:
        assert n in out.stdout
