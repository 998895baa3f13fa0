"""The model's buddy against a tree's real code: `reproduce libarena --tree`
(the seed's designs on the real buddy) and `--fidelity` (the side-by-side
table), on examples/bpf_tree so that they run everywhere."""
import importlib
import os
import subprocess
import sys

import pytest

from conftest import example_tree_with

import alloclab as al
from alloclab import libarena_real as lr
from alloclab import reproduce

on_tree = importlib.import_module("alloclab.reproduce.libarena").on_tree

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "bpf_tree")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))
    monkeypatch.delenv("ALLOCLAB_LIBARENA", raising=False)


def _cli(*args):
    env = {k: v for k, v in os.environ.items() if k != "ALLOCLAB_LIBARENA"}
    return subprocess.run([sys.executable, "-m", "alloclab"] + list(args), capture_output=True,
                          text=True, timeout=300, env=env)


def _with_caches(tmp_path):
    """A copy of the example that asks which CPU it runs on: caches of its own."""
    return example_tree_with(tmp_path, "src/buddy.bpf.c",
                             "\tif (c < 0) {\n\t\tpool_err(\"pool: no class",
                             "\tif (bpf_get_smp_processor_id() > 4096)\n\t\treturn NULL;\n")


def test_fidelity_rows_of_both_sides():
    f = reproduce.libarena_fidelity(EXAMPLE, producers=[1], allocs_per_cycle=[64], runs=1,
                                    duration=0.02)
    rows = f.rows()
    assert [(r["producers"], r["allocs_per_cycle"], r["side"]) for r in rows] == \
        [(1, 64, "model"), (1, 64, "real")]
    model, real = rows
    assert real["layer"] == lr.load(EXAMPLE) and model["layer"] == "buddy"
    # one lock per alloc and per free on both sides, nothing held at teardown
    assert model["locks_per_op"] == 1.0 and real["locks_per_op"] == 1.0
    assert model["held_at_teardown"] == 0 and real["held_at_teardown"] == 0
    # what each keeps committed: the model's one 1 MiB chunk, the example's one 64 KiB slab
    assert model["committed_at_teardown"] == 1 << 20
    assert real["committed_at_teardown"] == 64 << 10
    assert model["hold_ns_per_acquisition"] > 0 and real["hold_ns_per_acquisition"] > 0
    text = str(f)
    assert "not BPF's JIT'd arena accesses" in text and "model/real per-op cost: 1p/64" in text
    assert set(f.ratios()) == {(1, 64)}


def test_fidelity_json_is_written_whole_or_not_at_all(tmp_path):
    import json
    f = reproduce.libarena_fidelity(EXAMPLE, producers=[1], allocs_per_cycle=[64], runs=1,
                                    duration=0.02)
    d = json.loads(f.to_json())
    assert d["format"] == "alloclab-libarena-fidelity" and len(d["rows"]) == 2
    assert str(reproduce.Fidelity.from_json(f.to_json())) == str(f)
    saved = tmp_path / "saved.json"
    f.to_json(str(saved))
    shown = _cli("show", str(saved))
    assert shown.returncode == 0 and shown.stdout == str(f) + "\n", shown.stderr
    saved.unlink()
    path = tmp_path / "f.json"
    path.write_text("OLD")
    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    with pytest.raises(al.InvalidArgument, match="named pipe with no reader"):
        f.to_json(str(fifo))
    f.rows = lambda: [object()]  # cannot be written as JSON: the old file stays
    with pytest.raises(TypeError):
        f.to_json(str(path))
    assert path.read_text() == "OLD" and sorted(os.listdir(tmp_path)) == ["f.json", "p"]


def test_fidelity_committed_per_peak_is_finite_in_a_short_run():
    f = reproduce.libarena_fidelity(EXAMPLE, producers=[1, 2], allocs_per_cycle=[16], runs=1,
                                    duration=0.005, stats="lite")
    for r in f.rows():
        # the workload's peak demand, not a 10 ms sample that caught no cycle
        assert r["peak_requested"] == r["producers"] * 16 * 64
        assert r["committed_per_peak_requested"] == \
            r["committed_at_teardown"] / r["peak_requested"] > 0
    assert "\ncomm/peak: arena bytes committed at teardown over the peak bytes requested " \
        "(producers x allocs/cycle x size" in str(f)


def test_fidelity_below_full_has_no_hold_time():
    f = reproduce.libarena_fidelity(EXAMPLE, producers=[1], allocs_per_cycle=[16], runs=1,
                                    duration=0.01, stats="lite")
    assert all(r["hold_ns_per_acquisition"] != r["hold_ns_per_acquisition"]  # NaN
               for r in f.rows())
    assert "hold ns: n/a below stats=full" in str(f)


def test_reproduce_on_the_real_buddy():
    rep = reproduce.libarena(producers=[1], allocs_per_cycle=[64], runs=3, duration=0.01,
                             workloads=["malloc-free"], capacities=(), tree=EXAMPLE)
    name = lr.load(EXAMPLE)
    assert dict(rep.designs) == {"transfer cache": "percpu > transfer > " + name,
                                 "spill": "percpu > " + name, "no cache": name}
    # the "buddy" rows read the tree's lock: one per operation without caches
    assert rep.counter("malloc-free", "no cache", "buddy locks/op", "per_op_sum", 1, 64) == 1.0
    assert rep.counter("malloc-free", "transfer cache", "buddy locks/op", "per_op_sum", 1,
                       64) < 1.0
    assert "The buddy is the real code" in str(rep) and name in str(rep)


def test_reproduce_on_a_tree_says_its_note_once_and_names_it_in_the_sweep():
    rep = reproduce.libarena(producers=[1], allocs_per_cycle=[64], runs=1, duration=0.01,
                             workloads=["malloc-free"], capacities=(1, 2), tree=EXAMPLE)
    name = lr.load(EXAMPLE)
    lines = str(rep).splitlines()
    notes = [l for l in lines if l.startswith("notes: ") and " runs buddy.bpf.c of " in l]
    assert len(notes) == 1, notes
    sweep = [l for l in lines if "transfer cache capacity swept" in l]
    assert sweep and all("(percpu > transfer(batches=B) > %s, " % name in l for l in sweep)


def test_on_tree_replaces_the_bottom_and_refuses_caches_above_a_caching_tree(tmp_path):
    name = lr.load(EXAMPLE)
    assert on_tree("percpu > transfer(batches=4) > buddy(chunk_size=64K)", EXAMPLE) == \
        "percpu > transfer(batches=4) > " + name
    tree = _with_caches(tmp_path)
    with pytest.raises(al.IncompatiblePolicyError, match="per-CPU caches of its own"):
        on_tree("libarena-transfer", tree)
    spec = on_tree("libarena-transfer", tree, caches_above=True)
    assert spec.startswith("percpu > transfer > libarena_")
    assert on_tree("buddy", tree).startswith("libarena_")  # alone


def test_cli_errors(tmp_path):
    proc = _cli("reproduce", "libarena", "--fidelity")
    assert proc.returncode == 2 and proc.stderr.startswith("alloclab: error:")
    assert "--fidelity needs a libarena tree" in proc.stderr
    proc = _cli("reproduce", "libarena", "--caches-above")
    assert proc.returncode == 2 and "--caches-above needs --tree" in proc.stderr
    proc = _cli("reproduce", "libarena", "--tree", str(tmp_path), "--quick")
    assert proc.returncode == 2 and "not a libarena tree" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = _cli("reproduce", "libarena", "--tree", _with_caches(tmp_path), "--quick")
    assert proc.returncode == 2 and "per-CPU caches of its own" in proc.stderr


def test_cli_fidelity_prints_the_table(tmp_path):
    out = tmp_path / "f.json"
    proc = _cli("reproduce", "libarena", "--fidelity", "--tree", EXAMPLE, "--producers", "1",
                "--allocs-per-cycle", "64", "--runs", "1", "--duration", "0.01", "--json",
                str(out))
    assert proc.returncode == 0, proc.stderr
    assert "  1    64 model" in proc.stdout and "  1    64 real " in proc.stdout
    import json
    d = json.loads(out.read_text())
    assert d["format"] == "alloclab-libarena-fidelity" and len(d["rows"]) == 2
