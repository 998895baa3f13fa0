"""libarena's presets under real interruption: the per-CPU cache, the
transfer cache and the buddy run in a signal handler (the NMI model) at 10k
signals per second per worker with no error, and every lock failure is
counted under one reason (the arena lock has no deadlock check, so none is
a deadlock)."""
import pytest

import alloclab as al

LIBARENA = ["libarena-spill", "libarena-transfer"]


def _locks(point, metrics):
    """The layers that count lock failures by reason in this run."""
    return sorted(m.split(".")[0] for m in metrics if m.endswith(".lock_timeouts"))


@pytest.mark.parametrize("preset", LIBARENA)
def test_libarena_runs_under_nmi(preset):
    assert al.Policy(preset).nmi_safe
    r = al.run("nmi", preset, runs=1, warmup_cycles=5, duration=0.2, producers=2,
               cpu="virtual", rate=10000, handler_objs=2, handler_frees=2)
    p = r.points[0]
    runs, served, refused = (p["wl.nmi_handler_runs"][0], p["wl.nmi_served"][0],
                             p["wl.nmi_refused"][0])
    assert runs > 0
    assert served + refused == 2 * runs
    assert p["wl.nmi_refused_busy"][0] + p["wl.nmi_refused_nomem"][0] == refused
    assert p["wl.nmi_free_errors"][0] == 0
    layers = _locks(p, r.metrics())
    assert "buddy" in layers and (preset != "libarena-transfer" or "transfer" in layers)
    for layer in layers:
        failed = p[layer + ".lock_failed"][0]
        reasons = sum(p["%s.lock_%s" % (layer, w)][0]
                      for w in ("timeouts", "deadlocks", "no_node"))
        assert failed == reasons
        assert p[layer + ".lock_deadlocks"][0] == 0  # arena mode has no AA check


@pytest.mark.parametrize("layer", ["buddy", "transfer > buddy"])
def test_lock_mode_is_a_parameter(layer):
    """The libarena layers default to the arena lock; the queued lock with
    rqspinlock's deadlock check stays available."""
    top = layer.split(" ")[0]
    assert al.Policy(layer).params(0)["lock"] == "arena"
    assert al.Policy(layer.replace(top, top + "(lock=queued)", 1)).params(0)["lock"] == "queued"
    with pytest.raises(al.errors.AlloclabError, match="mcs"):
        al.Policy(layer.replace(top, top + "(lock=mcs)", 1))


@pytest.mark.parametrize("preset", ["buddy"] + LIBARENA)
def test_irq_context_is_masked_by_the_arena_lock(preset):
    """context=irq: the signal is an IRQ, held pending while its worker holds
    an arena lock (irqsave) and run at the release. The handler then never
    interrupts a critical section of its own CPU, and the buddy, which
    refuses only NMIs, serves every handler allocation: nothing refused, no
    lock failure. As an NMI (the default) the buddy refuses them all."""
    kw = dict(runs=1, warmup_cycles=5, duration=0.2, producers=2, cpu="virtual", rate=10000,
              handler_objs=2, handler_frees=2)
    p = al.run("nmi", preset, context="irq", **kw).points[0]
    runs = p["wl.nmi_handler_runs"][0]
    assert runs > 0 and p["wl.nmi_served"][0] == 2 * runs
    assert p["wl.nmi_free_errors"][0] == 0
    assert p["buddy.nmi_alloc_refused"][0] == 0 and p["buddy.lock_failed"][0] == 0
    if preset == "buddy":
        q = al.run("nmi", preset, **kw).points[0]
        assert q["wl.nmi_served"][0] == 0
        assert q["buddy.nmi_alloc_refused"][0] == q["wl.nmi_refused"][0] > 0


def test_the_counters_behind_a_refusal_are_key():
    """`run --counters key` (the default) must keep what explains an NMI
    refusal or a lock failure: each lock's failure counters by reason, the
    per-CPU guards found held and the buddy's NMI refusals. Key counters that
    are zero in every column are hidden, so this costs a normal table nothing."""
    from alloclab import schema
    want = {("percpu", "guard_busy_allocs"), ("magazine", "guard_busy"),
            ("buddy", "nmi_alloc_refused")}
    for name, layer in schema.layers().items():
        for c in layer.counters:
            if c.name.endswith(("lock_failed", "lock_timeouts", "lock_deadlocks",
                                "lock_no_node")):
                want.add((name, c.name))
    assert ("transfer", "lock_timeouts") in want and ("buddy", "lock_failed") in want
    key = {(n, c.name) for n, layer in schema.layers().items() for c in layer.counters
           if c.key}
    assert sorted(want - key) == []
