"""The LD_PRELOAD shim: real programs run correctly with their malloc on every
buddy-backed preset, and the counters show the traffic went through alloclab.
"""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import alloclab as al
from alloclab import preload, schema

HERE = os.path.dirname(os.path.abspath(__file__))
# bpf-ma is bpf_mem_alloc in fixed-size mode (one instance per object type, at
# most 8, as a BPF map uses it): not a general-purpose malloc. Its any-size
# mode is, and stands in for it; the fixed mode's refusals are tested apart.
SHIM_PRESETS = [name for name, spec in al.presets.items()
                if schema.layer(al.Policy(spec).layers[-1][0]).has("owns")
                and name != "bpf-ma"] + ["bpf_ma(mode=any) > slab"]


def test_there_are_shim_presets():
    assert {"libarena-spill", "libarena-transfer", "buddy"} <= set(SHIM_PRESETS)


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    out = tmp_path_factory.mktemp("preload")
    cc = shutil.which("cc") or shutil.which("gcc")
    built = {}
    for name in ("mt", "freeall", "forker", "xstress"):
        exe = str(out / name)
        subprocess.check_call([cc, "-O1", "-pthread", "-o", exe,
                               os.path.join(HERE, "preload", name + ".c")])
        built[name] = exe
    return built


def spec(policy):
    return str(al.Policy(al.presets.get(policy, policy)))


def run(policy, argv, tmp_path, **kw):
    stats = str(tmp_path / "stats.json")
    proc = preload.run(policy, argv, stats=stats, capture_output=True, text=True, timeout=300,
                       **kw)
    return proc, preload.read_stats(stats)


@pytest.mark.parametrize("policy", SHIM_PRESETS)
def test_multithreaded_c_program(policy, programs, tmp_path):
    proc, st = run(policy, [programs["mt"]], tmp_path)
    assert proc.returncode == 0 and "done 0" in proc.stdout, proc.stderr
    assert st["state"] == "ready" and st["policy"] == spec(policy)
    sh = st["shim"]
    assert sh["policy_allocs"] > 8 * 500 * 256  # every malloc went through the policy
    assert sh["free_errors"] == 0
    assert sh["threads"] >= 9 and sh["thread_exits"] == 8  # caches drained per thread
    if al.Policy(spec(policy)).layers[-1][0] == "buddy":
        assert sh["libc_aligned"] == 0  # buddy blocks are naturally aligned
    # (others may hand an over-aligned request to glibc: the program checked alignment)


@pytest.mark.parametrize("policy", SHIM_PRESETS)
def test_checked_stress_with_realloc_and_handoff(policy, programs, tmp_path):
    """Issue 8: random malloc/calloc/realloc/free with cross-thread handoff,
    every fill pattern checked, through the shim on every shim preset."""
    proc, st = run(policy, [programs["xstress"]], tmp_path)
    assert proc.returncode == 0 and "done 0" in proc.stdout, (proc.stdout, proc.stderr)
    assert st["shim"]["free_errors"] == 0


@pytest.mark.parametrize("policy", SHIM_PRESETS)
def test_everything_freed_means_nothing_held(policy, programs, tmp_path):
    proc, st = run(policy, [programs["freeall"]], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert st["shim"]["policy_allocs"] >= 100000
    assert st["layers"][0]["bytes_held"] == 0


def test_fixed_size_bpf_ma_refuses_and_falls_back(programs, tmp_path):
    proc, st = run("bpf-ma", [programs["freeall"]], tmp_path)
    assert proc.returncode == 0, proc.stderr
    sh = st["shim"]
    # 8 object sizes get an instance; every other size is refused, counted, and
    # served by glibc; nothing is lost either way
    assert sh["policy_allocs"] > 0 and sh["libc_refused"] > 0
    assert sh["policy_allocs"] + sh["libc_refused"] == 100000
    assert sh["free_errors"] == 0 and st["layers"][0]["bytes_held"] == 0


def test_fork_with_threads(programs, tmp_path):
    proc, st = run("libarena-transfer", [programs["forker"]], tmp_path)
    assert proc.returncode == 0 and "forks 0" in proc.stdout, proc.stderr
    assert st["shim"]["forks"] >= 20


SCRIPT = textwrap.dedent("""
    import hashlib, json, threading
    out = {}
    def work(i):
        d = {}
        for k in range(3000):
            d[str(k) * (1 + k % 7)] = [k] * (k % 50)
        out[i] = hashlib.sha256(json.dumps(sorted(d.items())).encode()).hexdigest()
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(sorted(out.values())[0])
""")


@pytest.mark.parametrize("policy", ["libarena-spill", "libarena-transfer", "libarena-magazine"])
def test_python3_multithreaded(policy, tmp_path):
    env = dict(os.environ, PYTHONMALLOC="malloc")
    ref = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         env=env, check=True).stdout
    proc, st = run(policy, [sys.executable, "-c", SCRIPT], tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ref
    assert st["shim"]["policy_allocs"] > 100000 and st["shim"]["free_errors"] == 0


@pytest.mark.skipif(not shutil.which("sqlite3"), reason="sqlite3 not installed")
def test_sqlite3(tmp_path):
    sql = "create table t(a, b); " + "".join(
        "insert into t values(%d, '%s'); " % (i, "x" * (i % 100)) for i in range(2000)) + \
        "select count(*), sum(length(b)) from t;"
    proc, st = run("libarena-transfer", ["sqlite3", str(tmp_path / "db")], tmp_path,
                   input=sql)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2000|99000"
    assert st["shim"]["policy_allocs"] > 1000


def test_git_and_gcc(tmp_path):
    src = tmp_path / "x.c"
    src.write_text("#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n")
    proc, st = run("libarena-spill", ["gcc", "-O2", "-c", str(src), "-o",
                                      str(tmp_path / "x.o")], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "x.o").exists()
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for argv in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x", "--allow-empty"],
                 ["log", "--oneline"]):
        proc, st = run("libarena-transfer", git + argv, tmp_path)
        assert proc.returncode == 0, (argv, proc.stderr)
    assert st["shim"]["policy_allocs"] > 0


@pytest.mark.parametrize("policy,needle", [
    ("libc", "does not own its memory"),
    ("percpu(guard=local) > buddy", "guard=local is refused"),
    ("null", "does not own its memory"),
])
def test_refused_policies(policy, needle):
    with pytest.raises(al.InvalidArgument, match=needle):
        preload.command(policy, ["true"])
    out = subprocess.run([sys.executable, "-m", "alloclab", "preload", "--policy", policy,
                          "--", "true"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and needle in out.stderr


def test_shim_refuses_bad_policy_itself(programs, tmp_path):
    """Set the environment by hand: the shim says why and stays on glibc."""
    env = dict(os.environ, LD_PRELOAD=al.preload_path(), ALLOCLAB_POLICY="libc",
               ALLOCLAB_STATS=str(tmp_path / "s.json"))
    proc = subprocess.run([programs["freeall"]], env=env, capture_output=True, text=True)
    assert proc.returncode == 0
    assert "does not own its memory" in proc.stderr
    st = preload.read_stats(str(tmp_path / "s.json"))
    assert st["state"] == "off" and st["shim"]["policy_allocs"] == 0


def test_cli_preload_runs_command(programs, tmp_path):
    stats = tmp_path / "s.json"
    out = subprocess.run([sys.executable, "-m", "alloclab", "preload", "--policy",
                          "libarena-transfer", "--stats", str(stats), "--",
                          programs["freeall"]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert preload.read_stats(str(stats))["shim"]["policy_allocs"] > 0
