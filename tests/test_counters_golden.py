"""Every preset counts the same events per operation as before the counter
rework: same names, same values, on deterministic 1-producer runs
(tests/counters_golden.py records them)."""
import json

import pytest

import counters_golden as g

with open(g.GOLDEN) as f:
    GOLDEN = json.load(f)


@pytest.mark.parametrize("policy,workload,params", g.CELLS,
                         ids=[g.cell_key(*c) for c in g.CELLS])
def test_counters_unchanged(policy, workload, params):
    want = GOLDEN[g.cell_key(policy, workload, params)]
    got = g.measure(policy, workload, params, stats="full")
    missing = sorted(set(want) - set(got))
    assert not missing, "counters no longer reported: %s" % missing
    changed = {k: (want[k], got[k]) for k in want if got[k] != want[k]}
    assert not changed, "counters changed (golden, now): %s" % changed
