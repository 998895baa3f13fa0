"""Seed 003: the local-storage-create workload, its eras' exact
counts per create, the workload results (metrics "wl.<name>"), the new
layers and presets, and the reproduction's report, JSON and CLI."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import alloclab as al
import alloclab.reproduce as rep
from alloclab import schema

WL = "local-storage-create"


def one(policy, cycles=10, batch_size=16, **kw):
    kw.setdefault("warmup_cycles", 2)
    res = al.run(WL, policy, runs=1, cycles=cycles, batch_size=batch_size, **kw)
    return res.points[0]


def leaks(p):
    return {k: v[0] for k, v in p.data.items() if k.endswith(".leaked") and v[0]}


def test_schema():
    w = schema.workload(WL)
    names = [p.name for p in w.params]
    for n in ("storage_type", "batch_size", "value_size", "owner_work", "free_path",
              "gp_latency", "rcu_nocb", "charge", "sample"):
        assert n in names
    # the model counts its own allocations; no seed figure is a parameter
    assert "owner_kmallocs" not in names
    assert w.param("storage_type").choices == ("socket", "task")
    for layer in ("slab", "sheaves", "nolock", "bpf_ma"):
        assert layer in schema.layers()
    assert "trylock" in schema.layer("nolock").features


@pytest.mark.parametrize("name, spec", [
    ("kzalloc", "slab(zero=true)"),
    ("kmalloc-sheaves", "sheaves > slab(form=sheaves)"),
    ("kmalloc-nolock", "nolock > slab"),
    ("bpf-ma", "bpf_ma(mode=fixed) > slab"),
])
def test_presets_are_canonical(name, spec):
    assert al.presets[name] == spec
    assert str(al.Policy(spec)) == spec


def test_kzalloc_socket_exact():
    p = one("kzalloc", storage_type="socket")
    n = 10 * 16
    assert p["wl.creates"][0] == n
    assert p["wl.create_errs"][0] == 0 and p["wl.eagain"][0] == 0
    assert p["slab.kmallocs"][0] == 2 * n           # selem + storage
    assert p["slab.traced_kmallocs"][0] == 2 * n    # kzalloc fires the tracepoint
    assert p["wl.kfree_rcu"][0] == 2 * n
    assert p["wl.charges"][0] == 2 * n == p["wl.uncharges"][0]
    assert p["alloc_ops"][0] == 2 * n and p["free_ops"][0] == 2 * n
    assert not leaks(p)


def test_nolock_socket_call_rcu_and_deferred_frees():
    p = one("kmalloc-nolock", storage_type="socket")
    n = 10 * 16
    assert p["wl.call_rcu"][0] == 2 * n
    assert p["slab.traced_kmallocs"][0] == 0        # kmalloc_nolock: no tracepoint
    assert p["slab.kmallocs"][0] == 2 * n
    # every deferred free was freed by the irq_work
    assert p["nolock.frees_deferred"][0] == p["nolock.deferred_freed"][0]
    assert p["nolock.frees_deferred"][0] > 0
    assert not leaks(p)


@pytest.mark.parametrize("storage_type", ["socket", "task"])
@pytest.mark.parametrize("policy, traced, path", [
    ("kzalloc", True, "wl.kfree_rcu"), ("kmalloc-nolock", False, "wl.call_rcu"),
    ("bpf-ma", False, "wl.reuse_now")])
@pytest.mark.parametrize("other", [0, 1, 3])
def test_other_maps_add_one_element_each(storage_type, policy, traced, path, other):
    """Another service's map on every owner: one more element per create and map,
    allocated, charged, freed with the owner's storage, through the era's path."""
    p = one(policy, storage_type=storage_type, other_maps=other, task_exit="inline")
    n = 10 * 16
    objs = (2 + other) * n  # the bench's element and storage, then one per other map
    assert p["wl.creates"][0] == n and p["wl.create_errs"][0] == 0
    assert p["wl.other_elems"][0] == other * n and p["wl.other_errs"][0] == 0
    assert p["alloc_ops"][0] == objs and p["free_ops"][0] == objs
    assert p[path][0] == objs
    if policy != "bpf-ma":
        assert p["slab.kmallocs"][0] == objs
        assert p["slab.traced_kmallocs"][0] == (objs if traced else 0)
    if storage_type == "socket":
        assert p["wl.charges"][0] == objs == p["wl.uncharges"][0]
    else:
        assert p["wl.charges"][0] == 0  # task storage has no charge callback
    assert not leaks(p)


def test_other_maps_elements_fail_as_their_programs():
    """An allocation failure of another map's element is that program's, counted
    apart; the bench's creates all succeed."""
    # every third allocation fails: each create's third, the other map's element
    p = one("failnth(op=alloc, nth=3, every=true) > slab(zero=true)", other_maps=1, cycles=4)
    n = 4 * 16
    assert p["wl.creates"][0] == n and p["wl.create_errs"][0] == 0
    assert p["wl.other_errs"][0] == n and p["wl.other_elems"][0] == 0
    assert p["failnth.failed_alloc"][0] == n
    assert p["wl.charges"][0] == p["wl.uncharges"][0] == 3 * n  # the failed one undone
    assert not leaks(p)


def test_bpf_ma_task_reuse_now():
    # freed where they were made (no reaper): the measured phase frees what
    # it allocated, nothing of the warmup's
    p = one("bpf-ma", storage_type="task", reaper=False)
    n = 10 * 16
    assert p["wl.reuse_now"][0] == 2 * n
    assert p["wl.charges"][0] == 0                  # task storage: no charge callback
    assert p["bpf_ma.frees"][0] == 2 * n
    assert p["bpf_ma.alloc_hits"][0] == 2 * n       # every object from the per-CPU lists
    assert p["slab.kmallocs"][0] == 0               # steady state: no refill needed
    assert not leaks(p)


def test_free_path_override_and_value_size():
    p = one("kmalloc-nolock", free_path="kfree_rcu", value_size=512)
    assert p["wl.kfree_rcu"][0] == 2 * 10 * 16 and p["wl.call_rcu"][0] == 0
    assert not leaks(p)
    with pytest.raises(al.RunError, match="value_size too large"):
        one("bpf_ma > slab", value_size=4096)     # any-size bpf_ma takes 4088 at most


@pytest.mark.parametrize("policy", ["kzalloc", "kmalloc-nolock", "bpf-ma", "kmalloc-sheaves",
                                    "nolock > sheaves > slab(form=sheaves)",
                                    "nolock(irq_work=thread) > slab",
                                    "bpf_ma(mode=fixed, irq_work=thread) > slab"])
def test_every_era_with_producers_and_grace_periods(policy):
    res = al.run(WL, policy, runs=1, cycles=8, warmup_cycles=1, producers=2,
                 storage_type=["socket", "task"], rcu_nocb=[False, True], gp_latency=[0, 100000],
                 batch_size=8)
    for p in res.points:
        assert p["wl.creates"][0] + p["wl.create_errs"][0] == 2 * 8 * 8
        assert not leaks(p), p.params


def test_samples_and_json_round_trip():
    res = al.run(WL, "kmalloc-nolock", runs=1, duration=0.2, warmup_cycles=2,
                 sample=40_000_000)
    p = res.points[0]
    assert p["wl.samples"][0] >= 2
    assert p["wl.creates_per_s"][0] > 0 and p["wl.creates_per_s_sd"][0] >= 0
    assert p["wl.ns_per_create"][0] > 0
    back = al.Result.from_json(res.to_json())
    assert back == res
    assert "wl.creates_per_s" in res.metrics()
    t = res.table("wl.creates_per_s", rows="storage_type", cols="producers")
    assert t.values.shape == (1, 1)


def test_short_run_rate_without_deviation():
    p = one("kzalloc", cycles=3, sample=60_000_000_000)
    assert p["wl.samples"][0] == 0
    assert p["wl.creates_per_s"][0] > 0  # over the whole measured span
    assert math.isnan(p["wl.creates_per_s_sd"][0])


def test_owner_work_real():
    for st in ("socket", "task"):
        p = one("kmalloc-nolock", cycles=2, batch_size=4, storage_type=st, owner_work="real")
        assert p["wl.owner_errs"][0] == 0
        assert p["wl.creates"][0] == 8
        assert "wl.owner_kmallocs" not in p.data  # nothing taken from the seed
        assert p["slab.traced_kmallocs"][0] == 0  # kmalloc_nolock fires no tracepoint
        assert not leaks(p)


# ---------------------------------------------------------------- reproduction

@pytest.fixture(scope="module")
def report():
    return rep.local_storage(batch_sizes=[16, 32], runs=3, duration=0.05, sample=0.02,
                             owner_work="none", warmup_cycles=5)


def test_report_tables(report):
    text = str(report)
    for needle in ("Socket local storage (this machine)", "Task local storage (the seed)",
                   "kzalloc", "kmalloc_nolock", "BPF memory allocator", "104.217 ± 0.974",
                   "Counters per create", "deferred frees", "Seed conclusions"):
        assert needle in text
    m, s = report.speed("socket", 0, 16)
    assert m > 0 and s >= 0
    # the bench's element and storage, and the other service's element (other_maps=1)
    tr, sl = report.kmallocs("socket", 0, 16)
    assert tr == pytest.approx(3.0) and sl == pytest.approx(3.0)   # kzalloc
    tr, sl = report.kmallocs("socket", 1, 16)
    assert tr == pytest.approx(0.0) and sl == pytest.approx(3.0)   # kmalloc_nolock
    # bpf_ma: the exited tasks' storage is freed on the reaper's CPU, so the
    # creator's CPU refills its caches with kmalloc (traced, as the seed
    # counts them): some, never more than the two bpf_ma objects of a create
    tr, sl = report.kmallocs("task", 0, 32)
    assert 0 < sl <= 2.0 and tr == pytest.approx(sl)
    d = report.diff("socket", 16)
    assert d == pytest.approx(100 * (report.speed("socket", 1, 16)[0] /
                                     report.speed("socket", 0, 16)[0] - 1))


def test_report_says_where_task_storage_was_freed(report):
    """The note reads the runs: every task's storage freed on the reaper's
    CPU (one remote free per create), not a sentence written in advance."""
    note = report._task_free_note()
    assert "on a reaper" in note and note.endswith("task frees remote per create 1.00.")
    assert note in str(report)


def test_the_seed_background_is_its_own_labelled_column(report):
    text = report.table("socket")
    # the model's traced kmallocs (3.00 kzalloc, 0.00 nolock), then + 1.13 from the seed
    assert "4.13" in text and "1.13" in text
    assert "taken from the seed" in text and "no verdict uses it" in text
    d = json.loads(report.to_json())
    assert d["settings"]["seed_background"]["socket"] == 1.13
    assert "taken from the seed" in d["settings"]["seed_background"]["source"]
    for p in report.result.points:  # the model's data hold no seed figure
        assert "wl.owner_kmallocs" not in p.data


def test_report_verdicts_judge_only_what_the_model_counts(report):
    from alloclab import verdict as V
    vs = {v.claim.text: v for _, v, _ in report.verdicts()}
    fire = [v for t, v in vs.items() if t.startswith("kzalloc's creates fire")][0]
    assert fire.outcome == V.HOLDS and fire.decided_by() == "counters"
    # with the seed machine's other service (one more element per socket) the model
    # makes the seed's 3.02 traced kmallocs per create, on its own counts
    seed302 = [v for t, v in vs.items() if "3.02" in t][0]
    assert "other_maps=1" in seed302.claim.text
    assert seed302.outcome == V.HOLDS
    assert all(c.est.theta == pytest.approx(-3.0) for c in seed302.cells)
    for _, v, _ in report.verdicts():
        assert v.text() in str(report)
    d = json.loads(report.to_json())
    assert d["settings"]["other_maps"]["socket"] == 1 and d["settings"]["other_maps"]["task"] == 0
    assert "Amery Hung" in d["settings"]["other_maps"]["source"]
    assert "Other maps: every socket also gets an element" in str(report)


def test_report_without_the_other_service_fails_the_302_claim():
    """The bench alone (other_maps=0): 2 traced kmallocs per create, so the claim
    that the allocator makes the seed's 3.02 does not hold: the verdict flips."""
    from alloclab import verdict as V
    r = rep.local_storage(storage_types=["socket"], batch_sizes=[16], runs=3, duration=0.05,
                          sample=0.02, owner_work="none", warmup_cycles=5, other_maps=0)
    seed302 = [v for _, v, _ in r.verdicts() if "3.02" in v.claim.text][0]
    assert "other_maps=0" in seed302.claim.text
    assert seed302.outcome == V.FAILS
    assert all(c.est.theta == pytest.approx(-2.0) for c in seed302.cells)
    assert r.kmallocs("socket", 0, 16) == (pytest.approx(2.0), pytest.approx(2.0))
    assert "other_maps=0: the bench's own elements alone" in str(r)


def test_report_from_before_other_maps_reads_as_the_bench_alone(report):
    """A report written before other_maps (no such setting) was the bench alone: read
    back, its 3.02 claim and notes say so, and name no other maps."""
    d = json.loads(report.to_json())
    del d["settings"]["other_maps"]
    r = type(report).from_json(json.dumps(d))
    seed302 = [v for _, v, _ in r.verdicts() if "3.02" in v.claim.text][0]
    assert "the bench's own elements alone, other_maps=0" in seed302.claim.text
    assert "Other maps:" not in str(r) and "other_maps=0:" not in str(r)


@pytest.mark.parametrize("other, words, note", [
    (3, "with elements of 3 other storage maps on every socket, as asked (the seed's "
        "machine: 1): other_maps=3",
     "every socket also gets elements of 3 other storage maps (socket other_maps=3), as "
     "asked; on the seed's machine socket other_maps=1: "),
    ({"socket": 1}, "with an element of another storage map on every socket, as on the "
                    "seed's machine: other_maps=1",
     "every socket also gets an element of another storage map (socket other_maps=1), as "
     "the seed's machine also ran a service")])
def test_report_says_the_seed_machine_only_for_its_count(other, words, note):
    """A count of other maps the user chose is theirs: the claim and the notes say the
    seed's machine only for the one map on sockets its author described."""
    r = rep.local_storage(storage_types=["socket"], batch_sizes=[16], runs=1, duration=0.02,
                          sample=0.01, owner_work="none", warmup_cycles=2, other_maps=other)
    seed302 = [v for _, v, _ in r.verdicts() if "3.02" in v.claim.text][0]
    assert words in seed302.claim.text
    assert note in str(r)
    # the same words from the JSON
    r2 = type(r).from_json(r.to_json())
    assert words in [v for _, v, _ in r2.verdicts() if "3.02" in v.claim.text][0].claim.text
    assert note in str(r2)


@pytest.mark.parametrize("bad, exc", [
    (16, "InvalidArgument"), (-1, "InvalidArgument"), ("1", "InvalidArgument"),
    (True, "InvalidArgument"), ({"sockets": 1}, "UnknownNameError"),
    ({"socket": 1.5}, "InvalidArgument")])
def test_report_refuses_bad_other_maps(bad, exc):
    from alloclab import errors
    with pytest.raises(getattr(errors, exc)) as e:
        rep.local_storage(storage_types=["socket"], batch_sizes=[16], runs=1, duration=0.05,
                          owner_work="none", other_maps=bad)
    assert ("sockets" if isinstance(bad, dict) and "sockets" in bad else "other_maps") in str(
        e.value)


def test_report_json_round_trip(report, tmp_path):
    path = tmp_path / "ls.json"
    report.to_json(str(path))
    back = rep.LocalStorageReport.from_json(str(path))
    assert str(back) == str(report)


def test_report_plots(report):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for fig in (report.plot(), report.plot_kmallocs()):
        assert len(fig.axes) >= 2
        plt.close(fig)


# The storage path alone against the seed's change per create: each reading
# flips with the data.
@pytest.mark.parametrize("seed, sd, before, after, kind", [
    (-1000.0, 100.0, [100, 110, 105], [300, 310, 305], "exceeds"),  # more than it all costs
    (-1000.0, 450.0, [100, 110, 105], [300, 310, 305], "opposite"),  # not past twice its sd
    (-1000.0, 600.0, [100, 110, 105], [300, 310, 305], "seed within its spread"),
    (-50.0, 0.0, [100, 110, 105], [300, 310, 305], "opposite"),    # the path alone is slower
    (-50.0, 0.0, [300, 310, 305], [100, 110, 105], "same"),
    (+300.0, 10.0, [100, 110, 105], [300, 310, 305], "same"),
    (+300.0, 10.0, [300, 310, 305], [100, 110, 105], "opposite"),
    (+300.0, 10.0, [100, 200, 150], [110, 190, 160], "inconclusive"),
    (+300.0, 10.0, [100], [300, 310], "too few runs"),
    (float("nan"), float("nan"), [100, 110], [300, 310], "no seed cell"),
])
def test_alone_reading_follows_the_data(seed, sd, before, after, kind):
    from alloclab.reproduce.local_storage import _alone_reading, _alone_words
    r = _alone_reading(seed, sd, 5000.0, before, after)
    assert r["kind"] == kind
    # the times measured are kept whatever the reading
    assert r["before_ns"] == pytest.approx(np.mean(before))
    assert r["after_ns"] == pytest.approx(np.mean(after))
    if kind not in ("too few runs", "no seed cell"):
        assert r["diff_ns"] == pytest.approx(np.mean(after) - np.mean(before))
        assert r["lo"] <= r["diff_ns"] <= r["hi"]
        # the path's change as a share of a whole create here (5000 ns)
        assert r["pct"] == pytest.approx(100 * r["diff_ns"] / 5000.0)
    assert _alone_words(r)


def test_seed_change_per_create():
    ns, sd = rep.LocalStorageReport.seed_change_ns("task", 16)
    assert ns == pytest.approx(1e6 / 25.399 - 1e6 / 24.668)   # -1167 ns: after is faster
    assert sd == pytest.approx(math.hypot(1e6 * 0.142 / 25.399 ** 2, 1e6 * 0.121 / 24.668 ** 2))
    assert all(math.isnan(x) for x in rep.LocalStorageReport.seed_change_ns("task", 8))


def test_seed_cells_change_in_ns_per_create(report):
    # the model's change per create comes from its two eras' mean creates/s
    for st in ("socket", "task"):
        before, after = report.speed(st, 0, 16)[0], report.speed(st, 1, 16)[0]
        model, seed = report.cell_ns("%s batch 16" % st)
        assert model == pytest.approx(1e6 / after - 1e6 / before)
        assert seed == pytest.approx(rep.LocalStorageReport.seed_change_ns(st, 16)[0])
    detail = {x["cell"]: x for x in report.direction_share()["detail"]}
    assert detail["socket batch 16"]["seed_ns"] == pytest.approx(1e6 / 100.566 - 1e6 / 104.217)


def test_report_with_the_path_alone(tmp_path):
    r = rep.local_storage(batch_sizes=[16], runs=3, duration=0.05, sample=0.02,
                          warmup_cycles=5)   # real owners: the path alone runs too
    assert r.alone is not None and len(r.alone_ns("task", 0, 16)) <= 3
    text = str(r)
    assert "The storage path alone (owner_work=none, 3 runs" in text
    assert "seed: after -1167 ns per create (sd 297), -2.9%" in text
    d = json.loads(r.to_json())
    cells = {(x["storage_type"], x["batch_size"]): x for x in d["alone"]}
    assert set(cells) == {("socket", 16), ("task", 16)}
    assert cells[("task", 16)]["kind"] == r.alone_reading("task", 16)["kind"]
    back = rep.LocalStorageReport.from_json(r.to_json())
    assert str(back) == text
    # without owners the main runs are the path alone: no second pass, no section
    r = rep.local_storage(storage_types=["socket"], batch_sizes=[16], runs=2, duration=0.02,
                          sample=0.01, warmup_cycles=2, owner_work="none", alone=True)
    assert r.alone is None and "storage path alone" not in str(r)
    assert "alone" not in json.loads(r.to_json())


def test_report_rejects_unknown_storage_type():
    with pytest.raises(al.UnknownNameError, match="inode"):
        rep.local_storage(storage_types=["inode"])


def test_cli_reproduce_local_storage(tmp_path):
    out = tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "alloclab", "reproduce", "local-storage",
                        "--storage-types", "socket", "--batch-sizes", "16", "--runs", "3",
                        "--duration", "0.05", "--sample", "0.02", "--owner-work", "none",
                        "--json", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "Socket local storage (this machine)" in r.stdout
    assert "Task local storage" not in r.stdout
    assert json.loads(out.read_text())["format"] == "alloclab-local-storage-report"
    r = subprocess.run([sys.executable, "-m", "alloclab", "reproduce", "local-storage",
                        "--storage-types", "inode"], capture_output=True, text=True)
    assert r.returncode == 2 and "inode" in r.stderr


def test_cli_reproduce_local_storage_other_maps(tmp_path):
    out = tmp_path / "r.json"
    base = [sys.executable, "-m", "alloclab", "reproduce", "local-storage", "--storage-types",
            "socket", "--batch-sizes", "16", "--runs", "2", "--duration", "0.05", "--sample",
            "0.02", "--owner-work", "none"]
    r = subprocess.run(base + ["--other-maps", "0", "--json", str(out)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "other_maps=0: the bench's own elements alone" in r.stdout
    assert json.loads(out.read_text())["settings"]["other_maps"]["socket"] == 0
    for bad in ("16", "-1"):
        r = subprocess.run(base + ["--other-maps", bad], capture_output=True, text=True)
        assert r.returncode == 2
        assert r.stderr.count("alloclab: error:") == 1 and "--other-maps" in r.stderr


def test_cli_reproduce_local_storage_alone_flag():
    base = [sys.executable, "-m", "alloclab", "reproduce", "local-storage", "--storage-types",
            "socket", "--batch-sizes", "16", "--runs", "2", "--duration", "0.05", "--sample",
            "0.02"]
    r = subprocess.run(base, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "The storage path alone (owner_work=none, 2 runs" in r.stdout
    r = subprocess.run(base + ["--no-alone"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "storage path alone" not in r.stdout


def test_cli_run_workload_metric():
    r = subprocess.run([sys.executable, "-m", "alloclab", "run", WL, "--policy", "kzalloc",
                        "--metric", "wl.creates_per_s", "--cycles", "5", "--runs", "1",
                        "--sample", "1ms"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "creates_per_s (workload metric" in r.stdout


# ---- the owner's lifetime, per-CPU partial slabs, memcg charging ----

def test_task_storage_goes_with_the_task_struct_one_producer():
    """task_exit=rcu without the reaper: every joined task queues
    delayed_put_task_struct, whose callback frees the storage on the worker
    that runs it (one producer: its own CPU); inline frees at the join."""
    p = one("bpf-ma", storage_type="task", reaper=False)
    n = 10 * 16
    assert p["wl.task_puts"][0] == n
    assert p["wl.task_frees"][0] == n and p["wl.task_frees_remote"][0] == 0
    assert p["wl.reuse_now"][0] == 2 * n
    assert not leaks(p)
    q = one("bpf-ma", storage_type="task", task_exit="inline")
    assert q["wl.task_puts"][0] == 0 and q["wl.task_frees"][0] == 0
    assert q["wl.reuse_now"][0] == 2 * n
    # socket storage is freed at close whatever task_exit says
    s = one("kzalloc", storage_type="socket")
    assert s["wl.task_puts"][0] == 0


@pytest.mark.parametrize("policy", ["bpf-ma", "kzalloc"])
def test_task_storage_is_freed_on_the_reapers_cpu(policy):
    """By default an exited task is put by its reaper (the parent's wait, on
    a CPU of its own), as in the kernel, where release_task runs in the
    waiter's context: every task's storage is freed remotely, one put per
    task, and nothing leaks."""
    p = one(policy, storage_type="task")
    n = 10 * 16
    assert p["wl.reaper"][0] == 1
    assert p["wl.task_puts"][0] == n
    assert p["wl.task_frees"][0] == n
    assert p["wl.task_frees_remote"][0] == n
    assert not leaks(p)
    # the socket owner has no task to reap: no reaper runs
    s = one(policy, storage_type="socket")
    assert s["wl.reaper"][0] == 0


def test_remote_task_frees_charge_bpf_ma_per_refill():
    """With the callbacks on the next producer's CPU (rcu_nocb) every task's
    storage is freed remotely, into that CPU's bpf_ma cache; whatever
    refills follow, bpf_mem_alloc charges the memcg per refilled object
    (kmalloc_node with __GFP_ACCOUNT), never per allocation. How many
    refills reuse freed objects depends on when the callbacks run, so the
    test checks the accounting, not a count of charges."""
    p = one("bpf-ma", storage_type="task", producers=2, rcu_nocb=True, reaper=False)
    assert p["wl.task_frees"][0] > 0
    assert p["wl.task_frees_remote"][0] == p["wl.task_frees"][0]
    # every allocation is served from the per-CPU cache: two per create
    assert p["bpf_ma.allocs"][0] == 2 * p["wl.creates"][0]
    assert p["bpf_ma.alloc_hits"][0] + p["bpf_ma.alloc_empty"][0] == p["bpf_ma.allocs"][0]
    # a refilled object is either reused (no charge) or kmalloc'd (one charge)
    assert p["bpf_ma.refill_objects"][0] == (p["bpf_ma.refill_kmallocs"][0]
                                             + p["bpf_ma.refill_reused"][0])
    assert p["slab.memcg_charges"][0] == (p["bpf_ma.refill_kmallocs"][0]
                                          + p["bpf_ma.fallback_kmallocs"][0])
    # the same run through kzalloc charges once per allocation
    k = one("kzalloc", storage_type="task", producers=2, rcu_nocb=True, reaper=False)
    assert k["slab.memcg_charges"][0] == 2 * k["wl.creates"][0]
    assert not leaks(p)


def test_cpu_partial_slabs_avoid_list_lock():
    base = one("slab(zero=true, cpu_partial=false)", storage_type="socket")
    cp = one("kzalloc", storage_type="socket")
    assert base["slab.cpu_partial_free"][0] == 0 == base["slab.cpu_partial_alloc"][0]
    assert cp["slab.cpu_partial_free"][0] > 0 and cp["slab.cpu_partial_alloc"][0] > 0
    assert cp["slab.list_lock_acquired"][0] * 4 <= base["slab.list_lock_acquired"][0]
    assert not leaks(cp) and not leaks(base)


def test_memcg_charges_every_map_object_through_the_stock():
    n = 10 * 16
    p = one("kzalloc", storage_type="socket")
    assert p["slab.memcg_charges"][0] == 2 * n
    assert p["slab.memcg_stock_hits"][0] + p["slab.memcg_stock_refills"][0] == 2 * n
    # obj_full_size 200 B: a charged page serves 20 objects; frees give bytes back
    assert 0 < p["slab.memcg_stock_refills"][0] * 10 < p["slab.memcg_stock_hits"][0]
    off = one("slab(zero=true, memcg=false)", storage_type="socket")
    assert off["slab.memcg_charges"][0] == 0 and off["slab.obj_exts_allocs"][0] == 0
    assert off["slab.traced_kmallocs"][0] == 2 * n


@pytest.mark.parametrize("policy, traced", [("kzalloc", True), ("kmalloc-nolock", False)])
def test_new_cg_slabs_kcalloc_their_obj_exts(policy, traced):
    """Each new kmalloc-cg slab gets an obj_exts vector: a kmalloc of its own,
    traced under kzalloc, untraced under kmalloc_nolock."""
    p = one(policy, storage_type="socket", batch_size=512)
    n = 10 * 512
    ext = p["slab.obj_exts_allocs"][0]
    assert ext > 0
    assert p["slab.kmallocs"][0] == 2 * n + ext
    assert p["slab.traced_kmallocs"][0] == (2 * n + ext if traced else 0)
    assert not leaks(p)
