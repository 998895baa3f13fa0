"""The seed-000 reproduction sweeps the transfer cache's capacity (batches
per order) at 256 allocs/cycle and prints from which capacity "batches rarely
go back to the buddy" holds, with the transfer hit rate there. At one
producer the counts per cycle are exact: of the (256 - 16) / 8 = 30 batches a
cycle spills past the per-CPU cache, a transfer cache of b batches parks b
and the rest go to the buddy."""
import importlib

import pytest

import alloclab.reproduce as rep

L = importlib.import_module("alloclab.reproduce.libarena")

CAPS = (8, 16, 32, 64)
SPILLS = (L.SWEEP_APC - L.CACHE_CAPACITY) // L.BATCH


@pytest.fixture(scope="module")
def report():
    return rep.libarena(producers=[1], allocs_per_cycle=[256], runs=1, timings=["batch"],
                        duration=0.005, warmup_cycles=2, workloads=["malloc-free"],
                        baseline=False, capacities=CAPS)


def test_sweep_counts_are_exact_at_one_producer(report):
    rows = report.capacity_rows("malloc-free")
    assert sorted(rows) == list(CAPS)
    for b in CAPS:
        flushed, hit = rows[b][1]
        parked = min(b, SPILLS)
        assert flushed == pytest.approx((SPILLS - parked) / SPILLS)
        assert hit == pytest.approx(parked / SPILLS)  # as many refills come back


def test_sweep_names_the_capacity_and_hit_rate(report):
    assert report.capacity_holds("malloc-free") == 32
    text = str(report)
    assert "transfer cache capacity swept at 256 allocs/cycle" in text
    assert "holds from batches=32 (256 objects per order), transfer hit rate 1.00-1.00" in text


def test_sweep_too_small_does_not_hold():
    r = rep.libarena(producers=[1], allocs_per_cycle=[256], runs=1, timings=["batch"],
                     duration=0.005, warmup_cycles=2, workloads=["malloc-free"],
                     baseline=False, capacities=(2, 8))
    assert r.capacity_holds("malloc-free") is None
    assert "does not hold up to batches=8" in r.capacity_table("malloc-free")


def test_sweep_survives_json(report, tmp_path):
    path = tmp_path / "r.json"
    report.to_json(str(path))
    back = rep.LibarenaReport.from_json(str(path))
    assert back.workloads == ["malloc-free"]
    assert back.capacity_rows("malloc-free") == report.capacity_rows("malloc-free")
    # the sweep's cells are not the seed's grid
    assert back.producers == [1] and back.allocs_per_cycle == [256]


def test_no_sweep():
    r = rep.libarena(producers=[1], allocs_per_cycle=[4], runs=1, timings=["batch"],
                     duration=0.005, warmup_cycles=2, workloads=["malloc-free"],
                     baseline=False, capacities=())
    assert r.capacity_rows("malloc-free") == {} and r.capacity_table("malloc-free") == ""
