"""Policy specs: parsing, canonical form, round trips, and every bad input."""

import importlib
import json
import pickle

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import alloclab as al
from alloclab import schema

LAYERS = schema.layers()


# ---------------------------------------------------------------- strategies

def _value_text(p):
    """A strategy of (text or Python value) for parameter p, within range."""
    if p.type == schema.BOOL:
        return st.sampled_from([True, False, "true", "false", 0, 1])
    if p.type == schema.ENUM:
        return st.sampled_from(list(p.choices))
    ints = st.integers(min_value=p.min, max_value=p.max)
    if p.type in (schema.SIZE, schema.NS):
        # Powers of two and round numbers too: cross-parameter checks
        # (chunk_size must be a power of two) need them to be likely.
        special = [v for v in [1 << k for k in range(63)] + [10**k for k in range(19)]
                   if p.min <= v <= p.max]
        if special:
            ints = st.one_of(st.sampled_from(special), ints)
        return st.one_of(ints, ints.map(p.format))
    return ints


@st.composite
def specs(draw):
    """(spec text, [(layer, {param: raw int})]) over the registry's layers."""
    fronts = [s for s in LAYERS.values() if s.needs_backend]
    bottoms = [s for s in LAYERS.values() if not s.needs_backend]
    stack = draw(st.lists(st.sampled_from(fronts), max_size=3)) if fronts else []
    stack.append(draw(st.sampled_from(bottoms)))
    parts, expect = [], []
    for sch in stack:
        chosen = draw(st.lists(st.sampled_from(sch.params), unique_by=lambda p: p.name,
                               max_size=len(sch.params))) if sch.params else []
        kv, raw = [], {}
        for p in chosen:
            v = draw(_value_text(p))
            text = v if isinstance(v, str) else (
                ("true" if v else "false") if p.type == schema.BOOL else str(int(v)))
            kv.append("%s=%s" % (p.name, text))
            raw[p.name] = p.parse(v)
        ws = draw(st.sampled_from(["", " "]))
        parts.append(sch.name + ("(%s)" % (("," + ws).join(kv)) if kv else ""))
        expect.append((sch.name, raw))
    sep = draw(st.sampled_from([" > ", ">", "  >  "]))
    return sep.join(parts), expect


def _make(spec):
    """Policy(spec), rejecting the example when only the C cross-parameter
    check (e.g. arena_limit below chunk_size) refuses it."""
    try:
        return al.Policy(spec)
    except al.ParameterRangeError:
        raise
    except al.InvalidArgument:
        assume(False)


# ---------------------------------------------------------------- round trips

@given(specs())
def test_round_trip(case):
    spec, expect = case
    p = _make(spec)
    s = str(p)
    q = al.Policy(s)
    assert q == p
    assert hash(q) == hash(p)
    assert str(q) == s
    assert al.Policy(p) == p
    assert pickle.loads(pickle.dumps(p)) == p
    # the parsed form a task carries, through pickle and JSON, back unparsed
    for back in (pickle.loads(pickle.dumps(p.parsed())), json.loads(json.dumps(p.parsed()))):
        r = al.Policy.from_parsed(back)
        assert r == p and hash(r) == hash(p) and str(r) == s and r.name == p.name
    # layers() keeps exactly the non-default parameters, params(i) all of them.
    assert [n for n, _ in p.layers] == [n for n, _ in expect]
    for i, (name, raw) in enumerate(expect):
        sch = LAYERS[name]
        full = p.raw_params(i)
        for prm, v in zip(sch.params, full):
            assert v == raw.get(prm.name, prm.default)
        assert set(p.layers[i][1]) == {k for k, v in raw.items() if v != sch.param(k).default}
        assert set(p.params(i)) == {prm.name for prm in sch.params}


@pytest.mark.parametrize("name", [n for n, s in LAYERS.items() if not s.needs_backend])
def test_bare_layer_is_canonical(name):
    assert str(al.Policy(name)) == name
    assert al.Policy(name).layers == [(name, {})]


@pytest.mark.parametrize("name", [n for n, s in LAYERS.items() if s.needs_backend])
def test_front_layer_over_each_bottom(name):
    for bottom in (n for n, s in LAYERS.items() if not s.needs_backend):
        spec = "%s > %s" % (name, bottom)
        if LAYERS[name].has("needs_pages") and not LAYERS[bottom].has("pages"):
            with pytest.raises(al.InvalidArgument, match="page allocator"):
                al.Policy(spec)
            continue
        if LAYERS[name].has("needs_distinct") and LAYERS[bottom].has("shared_blocks"):
            with pytest.raises(al.UnsupportedCombination, match="one block per CPU"):
                al.Policy(spec)
            continue
        assert str(al.Policy(spec)) == spec
        assert al.Policy(spec).names == [name, bottom]


def test_canonical_form():
    p = al.Policy("buddy( populate = true , arena_limit=2097152,lock_budget=1000000000)")
    assert str(p) == "buddy(arena_limit=2M, lock_budget=1s, populate=true)"
    # Defaults are dropped; params come in schema order.
    assert str(al.Policy("buddy(chunk_size=1M, fill=false)")) == "buddy"
    assert al.Policy("buddy(chunk_size=1M)") == al.Policy("buddy")
    assert al.Policy("buddy(arena_limit=4M)") != al.Policy("buddy")


def test_value_syntax():
    p = al.Policy("buddy(arena_limit=3M, lock_budget=250ms, fill=1)")
    assert p.params(0)["arena_limit"] == 3 << 20
    assert p.params(0)["lock_budget"] == 250_000_000
    assert p.params(0)["fill"] is True
    assert str(al.Policy("buddy(lock_budget=1500us)")) == "buddy(lock_budget=1500us)"
    assert str(al.Policy("buddy(lock_budget=1.5ms)")) == "buddy(lock_budget=1500us)"
    assert str(al.Policy("buddy(lock_budget=0)")) == "buddy(lock_budget=0ns)"


def test_presets():
    assert set(al.presets) >= {"buddy", "libc", "null"}
    for name, spec in al.presets.items():
        assert al.Policy(name) == al.Policy(spec)
        assert str(al.Policy(spec)) == spec  # presets are stored canonically


def test_presets_are_the_c_registrys():
    """alloclab.presets is the C registry's table (al_preset_get), docs and
    where each runs beside it; the C parser alone reads a preset's name as
    its spec, so the shim and C callers take the same names."""
    from alloclab._ffi import ffi, lib
    table = schema.presets()
    assert al.presets == {name: p.spec for name, p in table.items()}
    assert [n for n, p in table.items() if p.peer] == [
        "glibc", "jemalloc", "gperftools-tcmalloc", "mimalloc"]
    for name, p in table.items():
        assert p.doc and "\n" not in p.doc and p.to_dict()["spec"] == p.spec
        stacks = []
        for text in (name, p.spec):
            out, err = ffi.new("struct al_stack_spec *"), ffi.new("struct al_spec_error *")
            assert lib.al_spec_parse_report(text.encode(), out, err) == 0, name
            stacks.append([(out.layer[i].desc, list(out.layer[i].params))
                           for i in range(out.n)])
        assert stacks[0] == stacks[1], name
        assert al.Policy(" %s\t" % name).name == name


@pytest.mark.parametrize("spec", ["libarena-spill > buddy", "percpu > libarena-spill",
                                  "libarena-spill(capacity=8)", "glibc > buddy"])
def test_a_preset_stands_alone(spec):
    """A preset is a whole spec: stacked or given parameters, it is refused
    as a preset, with its layers to write instead (docs/policies.md)."""
    name = "glibc" if "glibc" in spec else "libarena-spill"
    with pytest.raises(al.UnknownNameError) as e:
        al.Policy(spec)
    assert "%r in policy %r is a preset (%s), not a layer" % (name, spec, al.presets[name]) \
        in str(e.value)


def test_feature_names_are_the_c_list():
    """The features' names and bits are ops.h's one list, read through
    al_feature_name: every bit a layer sets has a name, and a plugin may
    declare each of them."""
    from alloclab import plugin
    names = [n for n, _ in schema.FEATURES]
    assert names[:5] == ["bulk", "owns", "backend", "usable", "validates"]
    assert len(set(names)) == len(names) and "passes_size" in names
    bits = 0
    for _, bit in schema.FEATURES:
        assert bit and not bit & (bit - 1) and not bit & bits
        bits |= bit
    for sch in LAYERS.values():
        assert sch.features_mask & ~bits == 0, sch.name
    assert plugin.FEATURES == {n: "AL_F_" + n.upper() for n in names}
    assert schema.layer("percpu").needs_backend and not schema.layer("buddy").needs_backend


# Value texts the one reader (al_value_parse, the C parser's) takes or refuses.
VALUE_TEXTS = [("arena_limit", t) for t in (
    "4K", " 4 KiB ", "2g", "4096b", "1T", "4X", "-4K", "\u0664K", "99999999999999999999G",
    "", "4\x00K")] + [("lock_budget", t) for t in (
    "1.5ms", ".5us", "2\u00b5s", "2\u00b5S", "2\u03bcs", "2\u039cs", "1.5ns", "1.", "10s",
    "0.0000000001s", "5 ms", "5m")] + [("fill", t) for t in ("Yes", "off", "2", "tru")]


@pytest.mark.parametrize("param, text", VALUE_TEXTS)
def test_a_value_reads_the_same_in_a_spec_and_alone(param, text):
    """Param.parse_text (the command line, the API) and a policy spec read a
    value's text with one reader: both take it, as the same number, or both
    refuse it, in the schema's words (a Greek mu is not the micro sign)."""
    p = schema.layer("buddy").param(param)
    try:
        alone = p.parse_text(text)
    except al.AlloclabError as e:
        alone = type(e)
    try:
        in_spec = al.Policy("buddy(%s=%s)" % (param, text)).raw_params(0)[
            schema.layer("buddy").params.index(p)]
    except al.AlloclabError as e:
        in_spec = type(e)
    if text in ("", "4\x00K"):  # not a value a spec can hold: a syntax fault there
        assert alone is al.ParameterTypeError
    else:
        assert alone == in_spec


def test_from_layers_and_max_size():
    p = al.Policy.from_layers([("buddy", {"arena_limit": "8M", "fill": True})])
    assert str(p) == "buddy(arena_limit=8M, fill=true)"
    assert p.max_size == LAYERS["buddy"].max_size
    assert al.Policy("libc").max_size == 0
    assert len(p) == 1 and p.names == ["buddy"]


def test_policies_and_workloads_describe_the_registry():
    pols = {d["name"]: d for d in al.policies()}
    assert {"buddy", "libc", "null"} <= set(pols)
    b = pols["buddy"]
    assert "validates" in b["features"] and b["max_size"] > 0 and b["doc"]
    names = [p["name"] for p in b["params"]]
    assert names == [p.name for p in LAYERS["buddy"].params]
    for prm in b["params"]:
        assert {"name", "type", "default", "min", "max", "doc"} <= set(prm)
    wls = {d["name"]: d for d in al.workloads()}
    assert {"malloc-free", "malloc", "calloc"} <= set(wls)
    assert "one_producer" in wls["malloc"]["flags"]
    assert wls["malloc-free"]["size_param"] == "size"


# ---------------------------------------------------------------- bad input

def test_unknown_layer_lists_valid_ones():
    with pytest.raises(al.UnknownNameError) as ei:
        al.Policy("nosuch > buddy")
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, al.AlloclabError)
    assert "nosuch" in str(e)
    for name in LAYERS:
        assert name in str(e)
        assert name in e.valid


def test_unknown_param_lists_valid_ones():
    with pytest.raises(al.UnknownNameError) as ei:
        al.Policy("buddy(bogus=1)")
    assert "bogus" in str(ei.value)
    for p in LAYERS["buddy"].params:
        assert p.name in str(ei.value)
        assert p.name in ei.value.valid


@pytest.mark.parametrize("spec, bad", [
    ("buddy(arena_limit=lots)", "lots"),
    ("buddy(arena_limit=1.5M)", "1.5M"),
    ("buddy(fill=maybe)", "maybe"),
    ("buddy(lock_budget=5 parsecs)", "5 parsecs"),
])
def test_wrong_type(spec, bad):
    with pytest.raises(al.ParameterTypeError) as ei:
        al.Policy(spec)
    assert isinstance(ei.value, TypeError)
    assert bad in str(ei.value)


@pytest.mark.parametrize("spec, bad", [
    ("buddy(arena_limit=1K)", "1K"),
    ("buddy(arena_limit=1T)", "1T"),
    ("buddy(chunk_size=2M)", "2M"),
    ("buddy(lock_budget=100s)", "100s"),
])
def test_out_of_range_names_value_and_range(spec, bad):
    with pytest.raises(al.ParameterRangeError) as ei:
        al.Policy(spec)
    msg = str(ei.value)
    assert bad in msg
    p = LAYERS["buddy"].param(ei.value.name)
    assert "[%s, %s]" % (p.format(p.min), p.format(p.max)) in msg


def test_cross_parameter_check_from_c():
    with pytest.raises(al.InvalidArgument) as ei:
        al.Policy("buddy(chunk_size=100K)")
    assert "chunk_size" in str(ei.value) and "power of two" in str(ei.value)


@pytest.mark.parametrize("spec", [
    "", "   ", "buddy >", "> buddy", "buddy(", "buddy)", "buddy(arena_limit)",
    "buddy(arena_limit=1M,)", "buddy(=1M)", "buddy(fill=true) x", "buddy((fill=true))",
    "buddy(fill=true, fill=false)", "9buddy",
])
def test_syntax_errors(spec):
    with pytest.raises(al.PolicySyntaxError) as ei:
        al.Policy(spec)
    assert isinstance(ei.value, ValueError)


def test_stack_shape():
    bottoms = [n for n, s in LAYERS.items() if not s.needs_backend]
    with pytest.raises(al.InvalidArgument, match="bottom layer and must be last"):
        al.Policy("%s > %s" % (bottoms[0], bottoms[-1]))
    fronts = [n for n, s in LAYERS.items() if s.needs_backend]
    for f in fronts:
        with pytest.raises(al.InvalidArgument, match="needs a layer below"):
            al.Policy(f)


def test_not_a_spec():
    with pytest.raises(al.ParameterTypeError):
        al.Policy(42)


@pytest.mark.parametrize("name", sorted(al.presets))
def test_parsed_form_is_plain_data_that_comes_back_unparsed(name, monkeypatch):
    p = al.Policy(name)
    form = p.parsed()
    assert (form.name, form.spec) == (name, str(p))
    assert [n for n, _ in form.layers] == p.names
    assert all(type(v) is int for _, raw in form.layers for v in raw)
    assert [list(raw) for _, raw in form.layers] == [p.raw_params(i) for i in range(len(p))]

    def no_parse(text, spec):  # pragma: no cover - reached only when it parses again
        raise AssertionError("parsed again: %r" % spec)
    monkeypatch.setattr(importlib.import_module(al.Policy.__module__), "_parse", no_parse)
    for back in (pickle.loads(pickle.dumps(form)), json.loads(json.dumps(form))):
        r = al.Policy.from_parsed(back)
        assert r == p and r.name == name and repr(r) == repr(p) and r.layers == p.layers
        # the same C spec: what the engine reads of it
        assert (r.max_size, r.min_align, r.nmi_safe) == (p.max_size, p.min_align, p.nmi_safe)


def test_parsed_form_of_a_layer_not_registered_fails_when_filled():
    form = al.Policy("buddy").parsed()._replace(spec="ghost > buddy", name="ghost > buddy")
    r = al.Policy.from_parsed(form._replace(layers=(("ghost", ()),) + form.layers))
    with pytest.raises(al.UnknownNameError, match="ghost"):
        r.stack_spec()


def test_exceptions_pickle():
    try:
        al.Policy("nosuch")
    except al.UnknownNameError as e:
        e2 = pickle.loads(pickle.dumps(e))
        assert type(e2) is type(e) and str(e2) == str(e) and e2.valid == e.valid


# ---- layers that need distinct objects over a layer of shared blocks ----

CACHES = sorted(n for n, s in LAYERS.items() if s.has("needs_distinct"))
SHARED = sorted(n for n, s in LAYERS.items() if s.has("shared_blocks"))


def test_distinct_features_declared():
    # every layer that keeps the objects freed to it, and the floor
    assert set(CACHES) >= {"percpu", "transfer", "magazine", "sheaves", "nolock", "bpf_ma"}
    assert SHARED == ["null"]
    assert not LAYERS["failnth"].has("needs_distinct")  # a pass-through


@pytest.mark.parametrize("middle", ["", "failnth > ", "failnth(op=free, nth=2) > "])
@pytest.mark.parametrize("cache", CACHES)
def test_cache_over_shared_blocks_refused(cache, middle):
    spec = "%s > %s%s" % (cache, middle, "null")
    with pytest.raises(al.UnsupportedCombination) as ei:
        al.Policy(spec)
    e = ei.value
    assert isinstance(e, al.InvalidArgument) and e.layer == "null"
    for word in (cache, "'null'", "one block per CPU", "distinct objects", "%s > buddy" % cache):
        assert word in str(e), word
    with pytest.raises(al.UnsupportedCombination):
        al.Allocator(spec)


@pytest.mark.parametrize("spec", ["null", "failnth > null", "percpu > buddy", "bpf-ma"])
def test_shared_layer(spec):
    p = al.Policy(spec)
    shared = "null" if "null" in spec else None
    assert p.shared_layer == shared and p.distinct_objects is (shared is None)
    if shared:
        with pytest.raises(al.IncompatiblePolicyError, match="xmalloc cannot run"):
            p.check_workload("xmalloc")
    p.check_workload("malloc-free")  # never refused


def test_owns_below_is_declared_by_the_pass_through_layers():
    """The preload shim skips the layers that declare owns_below when it asks
    who owns a freed pointer: exactly the layers whose objects are their
    backend's, and never a bottom layer (it has nothing below to ask)."""
    assert {n for n, s in LAYERS.items() if s.has("owns_below")} == {
        "percpu", "transfer", "magazine", "sheaves", "nolock", "failnth"}
    assert all(s.needs_backend for s in LAYERS.values() if s.has("owns_below"))


def test_pow2_classes_is_the_buddy_s_and_true_of_it():
    """pow2_classes lets a per-CPU cache above take a refill's objects as of
    the class it asked for without reading each one: only the buddy declares
    it, and every power-of-two size it serves is a block of exactly that
    size, through alloc and alloc_bulk, and through the pass-through layers."""
    assert {n for n, s in LAYERS.items() if s.has("pow2_classes")} == {"buddy"}
    # the layers a cache sees it through: never kmalloc_nolock (its retry asks for more)
    assert {n for n, s in LAYERS.items() if s.has("passes_size")} == {
        "percpu", "transfer", "magazine", "failnth"}
    for spec in ("buddy", "transfer > buddy", "failnth > buddy", "percpu > transfer > buddy",
                 "magazine > failnth > buddy"):
        with al.Allocator(spec) as a:
            size = 16
            while size <= 64 << 10:
                p = a.alloc(size)
                bulk = a.alloc_bulk(size, 8)
                assert [a.usable_size(x) for x in [p] + bulk] == [size] * 9, (spec, size)
                a.free(p)
                a.free_bulk(bulk)
                size *= 2


@pytest.mark.parametrize("spec", ["bpf_ma > vmalloc > pages",
                                  "bpf_ma(irq_work=thread) > vmalloc > pages",
                                  "bpf_ma > percpu > vmalloc > pages",
                                  "bpf_ma > failnth > vmalloc(va_size=64M) > pages"])
def test_irq_refill_over_task_only_refused(spec):
    """bpf_ma refills from irq_work (IRQ level) and vmalloc allocates only at
    task level: every refill would fail, so the stack is refused up front,
    by Policy and by al_stack_create, naming both layers and a fix."""
    assert LAYERS["bpf_ma"].has("below_in_irq") and LAYERS["vmalloc"].has("task_only")
    with pytest.raises(al.UnsupportedCombination) as ei:
        al.Policy(spec)
    e = ei.value
    assert e.layer == "vmalloc"
    for word in ("'bpf_ma'", "'vmalloc'", "irq_work", "task level", "'bpf_ma > slab'"):
        assert word in str(e), word
    with pytest.raises(al.UnsupportedCombination):
        al.Allocator(spec)


@pytest.mark.parametrize("spec", ["percpu > vmalloc > pages", "bpf_ma > slab"])
def test_task_level_caches_over_vmalloc_stand(spec):
    a = al.Allocator(spec)
    try:
        ptrs = [a.alloc(64) for _ in range(64)]
        for p in ptrs:
            a.free(p)
    finally:
        a.close()


# ---- one parser: the C library reads every spec, Python words its refusals ----

def _c_parse(text):
    from alloclab._ffi import ffi, lib
    out = ffi.new("struct al_stack_spec *")
    err = ffi.new("struct al_spec_error *")
    data = text.encode()
    rc = lib.al_spec_parse_report(data, out, err)
    return rc, out, err, data


@pytest.mark.parametrize("spec, fault, layer, param, token", [
    ("buddy(", "SYNTAX", None, None, ""),  # parentheses first, before any layer
    ("buddy > nosuch(x=1)", "LAYER", 1, None, "nosuch"),
    ("percpu > buddy(bogus=1)", "PARAM", 1, None, "bogus"),
    ("buddy(fill=maybe)", "VALUE", 0, "fill", "maybe"),
    ("buddy(lock_budget=0.5ns)", "VALUE", 0, "lock_budget", "0.5ns"),
    ("buddy(arena_limit= 1T )", "RANGE", 0, "arena_limit", "1T"),
    ("buddy(fill=true, fill=false)", "SYNTAX", 0, "fill", "fill"),
    (" > ".join(["percpu"] * 9 + ["buddy"]), "TOO_MANY", None, None, None),
])
def test_c_parser_reports_what_where_and_which_text(spec, fault, layer, param, token):
    from alloclab._ffi import ffi, lib
    rc, _, err, data = _c_parse(spec)
    assert rc == (-34 if fault == "RANGE" else -22)  # -ERANGE / -EINVAL
    assert err.fault == getattr(lib, "AL_SPEC_" + fault)
    assert err.layer == (-1 if layer is None else layer)
    if param is None:
        assert err.param == -1
    else:
        assert ffi.string(err.desc.params[err.param].name).decode() == param
    if token is not None:
        assert data[err.tok:err.tok + err.toklen].decode() == token
    if fault == "TOO_MANY":
        assert err.nlayers == 10
    assert ffi.string(err.msg)


@pytest.mark.parametrize("text, raw", [
    ("4096KiB", 4 << 20), ("4 m", 4 << 20), ("4MB", 4 << 20), ("1g", 1 << 30),
])
def test_size_text_forms(text, raw):
    assert al.Policy("buddy(arena_limit=%s)" % text).params(0)["arena_limit"] == raw


@pytest.mark.parametrize("text, ns", [
    ("1.5ms", 1_500_000), (".5us", 500), ("5.ms", 5_000_000), ("2µs", 2000), ("7 MS", 7_000_000),
    ("1.50000000000000000000s", 1_500_000_000), ("0.000000001s", 1), ("42", 42),
])
def test_duration_text_forms(text, ns):
    assert al.Policy("buddy(lock_budget=%s)" % text).params(0)["lock_budget"] == ns


@pytest.mark.parametrize("text, value", [
    ("yes", True), ("On", True), ("1", True), ("TRUE", True), ("no", False), ("off", False),
])
def test_bool_text_forms(text, value):
    assert al.Policy("buddy(fill=%s)" % text).params(0)["fill"] is value


def test_dashes_stand_for_underscores_and_enums_are_names():
    assert al.Policy("buddy(arena-limit=8M)") == al.Policy("buddy(arena_limit=8M)")
    with pytest.raises(al.UnknownNameError, match="valid choices: bulk, single"):
        al.Policy("transfer(full=1) > buddy")  # an enum by its name only


@given(specs())
def test_c_parser_reads_the_canonical_text_python_prints(case):
    """The canonical text of every policy reads back, in C, to the same raw
    parameters Python holds: one grammar, printed by Python, read by C."""
    text, _ = case
    try:
        p = al.Policy(text)
    except (al.InvalidArgument, al.UnsupportedCombination):
        assume(False)
    rc, out, _, _ = _c_parse(str(p))
    assert rc == 0 and out.n == len(p)
    for i in range(len(p)):
        assert [out.layer[i].params[j] for j in range(len(p.raw_params(i)))] == p.raw_params(i)


def test_nul_in_a_spec_is_a_syntax_error_not_a_truncation():
    with pytest.raises(al.PolicySyntaxError, match="NUL"):
        al.Policy("buddy\0(fill=maybe)")


@pytest.mark.parametrize("spec, fault, layer, below", [
    ("percpu", "NO_BACKEND", 0, -1),
    ("buddy > slab", "BOTTOM", 0, 1),
    ("vmalloc > buddy", "NO_PAGES", 0, 1),
    ("percpu > null", "DISTINCT", 0, 1),
    ("bpf_ma > vmalloc > pages", "TASK_ONLY", 0, 1),
])
def test_c_stack_check_reports_the_layers_at_fault(spec, fault, layer, below):
    """al_stack_check (what al_stack_create checks first) names the fault,
    the layer and the layer below it; Policy words it."""
    from alloclab._ffi import ffi, lib
    names = [n.strip() for n in spec.split(">")]
    s = ffi.new("struct al_stack_spec *")
    s.n = len(names)
    for i, n in enumerate(names):
        s.layer[i].desc = lib.al_layer_find(n.encode())
        sch = LAYERS[n]
        for j, v in enumerate(sch.defaults()):
            s.layer[i].params[j] = v
    err = ffi.new("struct al_spec_error *")
    assert lib.al_stack_check(s, err) == -22
    assert (err.fault, err.layer, err.below) == (getattr(lib, "AL_SPEC_" + fault), layer, below)
    with pytest.raises(al.InvalidArgument) as ei:
        al.Policy(spec)
    assert repr(names[layer]) in str(ei.value)


def test_c_stack_check_keeps_a_layers_own_code():
    with pytest.raises(al.InvalidArgument) as ei:
        al.Policy("buddy(chunk_size=100K)")
    assert ei.value.code == -22 and "power of two" in str(ei.value)


# ---- what the parser refuses, worded so that it can be read


@pytest.mark.parametrize("spec, where", [
    ("percpu(capacity=%s) > buddy" % ("9" * 5000), "capacity"),
    ("buddy(lock_budget=%sms)" % ("1" * 5000), "lock_budget"),
    ("buddy(chunk_size=%sK)" % ("1" * 5000), "chunk_size"),
    ("percpu(capacity=-%s) > buddy" % ("9" * 5000), "capacity"),
])
def test_a_number_past_any_range_is_a_range_error(spec, where):
    # int() refuses more than 4300 digits: the wording must not fall over on it
    with pytest.raises(al.ParameterRangeError, match=r"%s=.*\(500\d characters\) is out of "
                       r"range" % where):
        al.Policy(spec)


@pytest.mark.parametrize("spec", ["percpu(capacity=\uff18) > buddy", "buddy(chunk_size=\uff11M)",
                                  "buddy(lock_budget=\u0661ms)"])
def test_digits_are_ascii_digits(spec):
    # the C parser reads [0-9] only; the wording of its refusal agrees
    with pytest.raises(al.ParameterTypeError, match="not '"):
        al.Policy(spec)


def test_workload_parameters_read_digits_as_the_policy_does():
    from alloclab.run import plan
    with pytest.raises(al.ParameterTypeError):
        plan("malloc-free", "buddy", size="\uff18K")


@pytest.mark.parametrize("spec, shown", [
    ("buddy \u200b", r"got '\u200b'"),
    ("1\udcff", r"bad layer name '1\udcff'"),
    ("buddy\x01(x=1)", r"got '\x01(x=1)'"),
])
def test_invisible_characters_are_shown_escaped(spec, shown):
    with pytest.raises(al.PolicySyntaxError) as e:
        al.Policy(spec)
    assert shown in str(e.value)


@pytest.mark.parametrize("spec, kind, name", [
    ("b\u00f9ddy", "layer", "b\u00f9ddy"), ("\u00f9buddy", "layer", "\u00f9buddy"),
    ("b\u00f9ddy > buddy", "layer", "b\u00f9ddy"), ("\udcffbuddy", "layer", r"\udcffbuddy"),
    ("buddy\u200b", "layer", r"buddy\u200b"),
    ("buddy(ar\u00e8na_limit=1M)", "parameter", "ar\u00e8na_limit"),
])
def test_a_name_with_a_non_ascii_letter_is_an_unknown_name(spec, kind, name):
    # the parser read a name up to its first non-ASCII byte ('b'), then
    # refused what followed as syntax; the whole name is the unknown one
    with pytest.raises(al.UnknownNameError) as e:
        al.Policy(spec)
    assert e.value.kind == kind and ("unknown %s '%s'" % (kind, name)) in str(e.value)
    assert "valid %ss: " % kind in str(e.value)


def test_a_fault_in_a_layer_reads_of_policy():
    with pytest.raises(al.PolicySyntaxError,
                       match=r"given twice in layer 'percpu' of policy 'percpu\(capacity=16, "):
        al.Policy("percpu(capacity=16, capacity=8) > buddy")
    with pytest.raises(al.PolicySyntaxError, match=r"got 'buddy' in policy 'buddy buddy'"):
        al.Policy("buddy buddy")


@pytest.mark.parametrize("spec", ["libarena-transfer(lock=queued)", "libarena-spill > buddy",
                                  "percpu > kzalloc"])
def test_a_preset_where_a_layer_goes_names_its_layers(spec):
    # a preset is a whole spec: with parameters or inside a stack it is not
    # an "unknown layer" (it is listed among the presets), it is to be spelled out
    name = next(p for p in al.presets if p in spec and p not in schema.layers())
    with pytest.raises(al.UnknownNameError) as ei:
        al.Policy(spec)
    msg = str(ei.value)
    assert "%r in policy %r is a preset (%s)" % (name, spec, al.presets[name]) in msg
    assert "write its layers instead: %r" % al.presets[name] in msg
    assert ei.value.name == name and "transfer" in ei.value.valid
    al.Policy(al.presets[name])  # the spelled-out stack is accepted


@pytest.mark.parametrize("bad", ["2", "y", "maybe"])
def test_a_bad_bool_names_every_spelling_accepted(bad):
    # the refusal lists the spellings the parser takes, and each of them parses
    with pytest.raises(al.ParameterTypeError) as ei:
        al.Policy("slab(cpu_partial=%s)" % bad)
    msg = str(ei.value)
    assert "must be a bool: true/false, yes/no, on/off or 1/0, not %r" % bad in msg
    for pair in ("true/false", "yes/no", "on/off", "1/0"):
        on, off = pair.split("/")
        assert al.Policy("slab(memcg=%s)" % on).params(0)["memcg"] is True
        assert al.Policy("slab(memcg=%s)" % off).params(0)["memcg"] is False


@pytest.mark.parametrize("text", ["64\u212a", "\u200964K", "64K\u00a0", "1\u212aB"])
def test_sizes_read_ascii_letters_and_blanks_only(text):
    """re.I read the Kelvin sign as k and str.strip() took any Unicode
    blank: '64\u212a' was 64K here, while the C parser refuses it."""
    from alloclab.run import plan
    with pytest.raises(al.ParameterTypeError):
        plan("malloc-free", "buddy", size=text)
    with pytest.raises(al.AlloclabError):
        al.Policy("buddy(chunk_size=%s)" % text)
