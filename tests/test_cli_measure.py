"""The measurement command line: run --hist/--ci/--plot/--journal and
alloclab compare, run as a user runs them (subprocesses)."""

import json

from test_cli import cli

FAST = ["--cycles", "20", "--warmup-cycles", "2"]


def test_run_hist_ci_plot(tmp_path):
    png = tmp_path / "lat.png"
    p = cli("run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--producers", "1,2",
            "--runs", "2", "--hist", "--ci", "--plot", str(png), *FAST, check=0)
    out = p.stdout
    assert "95% CI" in out and "per-operation latency" in out
    assert out.count("p99.9") == 8  # 2 policies x 2 producers x alloc/free
    assert "clock pair" in out and "warnings:" in out
    assert png.stat().st_size > 1000 and (tmp_path / "lat-1.png").exists()  # the histograms
    # every file written is named on stderr, and nothing else is said there
    assert p.stderr.splitlines() == ["alloclab: wrote %s" % (tmp_path / f)
                                     for f in ("lat.png", "lat-1.png", "lat-2.png")]


def test_run_hist_with_batch_timing_is_refused():
    p = cli("run", "malloc-free", "--hist", "--timing", "batch", *FAST, check=2)
    assert "per_op_sum" in p.stderr and "Traceback" not in p.stderr


def test_run_journal_resumes(tmp_path):
    j = tmp_path / "s.jsonl"
    args = ("run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--runs", "2",
            "--journal", str(j), *FAST)
    cli(*args, check=0)
    n = len(j.read_text().splitlines())
    assert n == 1 + 4
    p = cli(*args, check=0)
    assert len(j.read_text().splitlines()) == n  # nothing rerun
    assert "allocation latency" in p.stdout


def test_compare_files(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    cli("run", "malloc-free", "--policy", "buddy", "--producers", "1,2", "--runs", "3",
        "--json", str(a), *FAST, check=0)
    cli("run", "malloc-free", "--policy", "libc", "--producers", "1,2", "--runs", "3",
        "--json", str(b), *FAST, check=0)
    p = cli("compare", str(a), str(b), check=0)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("+---") and "| Benchmark" in lines[1] and "libc" in lines[1]
    # header + 2 metrics x 2 producers + a geometric-mean row per metric
    assert sum(1 for x in lines if x.startswith("| ")) == 1 + 4 + 2
    assert sum(1 for x in lines if "geometric mean" in x and x.startswith("| ")) == 2
    assert sum(1 for x in lines if " ns -> " in x) == 4
    assert "Benjamini-Hochberg" in p.stdout
    p = cli("compare", str(a), str(b), "--markdown", "--metric", "alloc_ns", "--names", "new",
            "--threshold", "5%", check=0)
    assert p.stdout.startswith("| Benchmark | Result Class | new |")
    assert "|---|---|---:|" in p.stdout and "|change| >= 5%" in p.stdout
    heat = tmp_path / "heat.png"
    cli("compare", str(a), str(b), "--plot", str(heat), check=0)
    assert heat.stat().st_size > 1000
    # one file: compare the policies inside it
    both = tmp_path / "both.json"
    cli("run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--runs", "2",
        "--json", str(both), *FAST, check=0)
    p = cli("compare", str(both), "--baseline", "buddy", check=0)
    assert "libc" in p.stdout.splitlines()[1] and "against buddy" in p.stdout


def test_compare_errors(tmp_path):
    p = cli("compare", str(tmp_path / "nope.json"), str(tmp_path / "x.json"), check=2)
    assert "cannot read" in p.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    p = cli("compare", str(bad), str(bad), check=2)
    assert "not an alloclab result" in p.stderr
    p = cli("compare", str(bad), check=2)
    assert "not an alloclab result" in p.stderr
    a = tmp_path / "a.json"
    cli("run", "malloc-free", "--runs", "1", "--json", str(a), *FAST, check=0)
    p = cli("compare", str(a), check=2)
    assert "two or more files" in p.stderr
    p = cli("compare", str(a), str(a), "--test", "ttest", check=2)
    assert "ttest" in p.stderr
    p = cli("compare", str(a), "--baseline", "libc", check=2)
    assert "libc" in p.stderr and "buddy" in p.stderr
    p = cli("compare", str(a), str(a), "--threshold", "lots", check=2)
    assert "percentage" in p.stderr


def _synthetic(path, policies, workload="malloc-free", mean=100.0, runs=5, seed=0):
    """A result file as `alloclab run --json` writes it, with known numbers."""
    import numpy as np
    import alloclab as al
    rng = np.random.default_rng(seed)
    pts = []
    for pol in policies:
        for prod in (1, 2):
            data = {"alloc_ns": mean + rng.normal(0, 1, runs),
                    "free_ns": mean + rng.normal(0, 1, runs), "steal_pct": np.zeros(runs)}
            pts.append(al.Point({"workload": workload, "policy": pol, "size": 64,
                                 "allocs_per_cycle": 16, "producers": prod}, {}, data))
    al.Result({"cpu_model": "synthetic"}, pts).to_json(str(path))


def test_compare_refuses_to_pool_two_policies(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _synthetic(a, ["buddy", "libarena-spill"], mean=100)
    _synthetic(b, ["libc", "libarena-magazine"], mean=80, seed=1)
    p = cli("compare", str(a), str(b), "--on", "producers,allocs_per_cycle", check=2)
    assert p.stdout == ""
    err = p.stderr.splitlines()
    assert len(err) == 1 and err[0].startswith("alloclab: error: ")
    assert "side A holds 2 values of policy (buddy; libarena-spill)" in err[0]
    assert "--pool" in err[0] and "Traceback" not in p.stderr
    p = cli("compare", str(a), str(b), "--on", "producers,allocs_per_cycle", "--pool", check=0)
    assert "Pooled on request" in p.stdout
    assert "A: 2 values of policy (buddy; libarena-spill)" in p.stdout
    assert "Runs per cell: 10." in p.stdout
    assert "--pool" in cli("compare", "--help", check=0).stdout


def test_compare_refuses_different_workloads(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    _synthetic(a, ["buddy"])
    _synthetic(b, ["buddy"], workload="larson")
    for extra in ([], ["--pool"]):
        p = cli("compare", str(a), str(b), *extra, check=2)
        err = p.stderr.splitlines()
        assert len(err) == 1 and err[0].startswith("alloclab: error: ")
        assert "malloc-free" in err[0] and "larson" in err[0]
