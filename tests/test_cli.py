"""The command line, run as a user runs it: a subprocess."""

import json
import subprocess
import sys

import pytest


def cli(*args, check=None):
    p = subprocess.run([sys.executable, "-m", "alloclab", *args], capture_output=True,
                       text=True, timeout=120)
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def test_run_prints_the_table():
    p = cli("run", "malloc-free", "--policy", "buddy", "--producers", "1,2",
            "--allocs-per-cycle", "1,16", "--cycles", "50", "--runs", "1", check=0)
    out = p.stdout
    assert "allocation latency" in out and "free latency" in out
    lines = out.splitlines()
    headers = [line for line in lines if line.split()[:1] == ["allocs/cycle"]]
    assert len(headers) == 2  # alloc_ns and free_ns
    assert headers[0].split() == ["allocs/cycle", "1p", "2p"]
    i = lines.index(headers[0])
    assert [row.split()[0] for row in lines[i + 1:i + 3]] == ["1", "16"]
    assert all(len(row.split()) == 3 for row in lines[i + 1:i + 3])
    assert "cpu: " in out and "timer overhead" in out and "clock" in out
    assert "buddy.lock_acquired" in out
    assert p.stderr == ""


def test_run_two_policies_json_csv(tmp_path):
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    p = cli("run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--cycles", "10",
            "--warmup-cycles", "1", "--runs", "2", "--metric", "throughput", "--json", str(j),
            "--csv", str(c), check=0)
    assert "throughput" in p.stdout and "libc" in p.stdout
    d = json.loads(j.read_text())
    assert len(d["points"]) == 2
    assert len(c.read_text().splitlines()) == 1 + 2 * 2


def test_run_malloc_rows_default_to_its_param():
    p = cli("run", "malloc", "--nallocs", "10,20", "--cycles", "2", "--runs", "1",
            "--warmup-cycles", "0", check=0)
    assert "nallocs" in p.stdout


@pytest.mark.parametrize("args, words", [
    (["run", "nope"], ["nope", "malloc-free"]),
    (["run", "malloc-free", "--policy", "nosuch"], ["nosuch", "buddy"]),
    (["run", "malloc-free", "--policy", "buddy(bogus=1)"], ["bogus", "arena_limit"]),
    (["run", "malloc-free", "--policy", "buddy(arena_limit=1K)"], ["1K", "[1M, 64G]"]),
    (["run", "malloc-free", "--producers", "0"], ["producers=0"]),
    (["run", "malloc-free", "--producers", "100000"], ["100000"]),
    (["run", "malloc-free", "--producers", "two"], ["two"]),
    (["run", "malloc-free", "--size", "0"], ["size=0"]),
    (["run", "malloc-free", "--size", "1M"], ["1M", "512K"]),
    (["run", "malloc-free", "--allocs-per-cycle", "1.5"], ["1.5"]),
    (["run", "malloc-free", "--runs", "0"], ["runs=0"]),
    (["run", "malloc-free", "--cycles", "0"], ["cycles=0"]),
    (["run", "malloc-free", "--duration", "-1"], ["duration"]),
    (["run", "malloc-free", "--cpu", "sideways"], ["sideways", "virtual"]),
    (["run", "malloc-free", "--timing", "fast"], ["fast", "per_op_sum"]),
    (["run", "malloc", "--producers", "2"], ["malloc", "producers=2"]),
    (["run", "malloc-free", "--bogus", "1"], ["--bogus"]),
    (["run", "malloc-free", "--metric", "nope"], ["nope", "alloc_ns"]),
    (["run"], ["workload"]),
    (["frob"], ["frob"]),
])
def test_bad_input_exits_2(args, words):
    p = cli(*args, check=2)
    assert p.stderr.startswith("alloclab: error: "), p.stderr
    assert "Traceback" not in p.stderr
    for w in words:
        assert w in p.stderr, (w, p.stderr)


def test_failed_run_exits_1():
    p = cli("run", "malloc-free", "--policy", "buddy(arena_limit=2M)", "--size", "4096",
            "--allocs-per-cycle", "1000", "--cycles", "1", "--runs", "1", check=1)
    assert p.stderr.startswith("alloclab: error: ") and "ENOMEM" in p.stderr
    assert "Traceback" not in p.stderr


def test_list():
    p = cli("list", check=0)
    assert "buddy" in p.stdout and "malloc-free" in p.stdout and "presets" in p.stdout
    assert "arena_limit" in p.stdout and "allocs_per_cycle" in p.stdout
    p = cli("list", "--json", check=0)
    d = json.loads(p.stdout)
    assert {"layers", "workloads", "presets"} <= set(d)


def test_workload_help_lists_its_flags():
    p = cli("run", "malloc-free", "--help", check=0)
    assert "--allocs-per-cycle" in p.stdout and "--size" in p.stdout
    assert "default: 64" in p.stdout
    p = cli("run", "malloc", "--help", check=0)
    assert "--nallocs" in p.stdout and "--allocs-per-cycle" not in p.stdout
    p = cli("run", "--help", check=0)
    assert "malloc-free" in p.stdout


def test_version():
    import alloclab
    p = cli("--version", check=0)
    assert alloclab.__version__ in p.stdout
