"""Policy specs: a stack of layers, top first.

    Policy("percpu(capacity=16, batch=8) > transfer > buddy")

Grammar: layers separated by ``>``; each is ``name`` or ``name(k=v, ...)``.
A whole spec may also be a preset name (``alloclab.presets``, the C
registry's: al_spec_parse reads one in C too, and the shim). Names and
values are checked against the C schemas; the stack's shape is checked
against the layers' features (a layer that needs a backend has one below it,
a bottom layer is last).

``str(policy)`` is canonical: params in schema order, only those that differ
from their default, values in their canonical text ("4K", "250ms", "true").
``Policy(str(p)) == p`` always holds.

Parsing is the C library's (al_spec_parse_report, csrc/builder/spec.c: the one
grammar, shared with the preload shim): it reports a refusal as facts (fault
kind, layer, parameter, offending text) and this module words the exception
(PolicySyntaxError, UnknownNameError with the valid names, ParameterTypeError
or ParameterRangeError as the schema words a value). Parsing costs one C
call; the shape checks below read the registry's schemas.

``policy.name`` is what the user called it: the preset name when the policy
was made from one (``Policy("libarena-spill").name == "libarena-spill"``),
else the canonical spec. Results, tables and plots label policies by name;
the expanded spec stays beside it (``Point.info["policy_spec"]``).
"""

import collections
import functools
import re

from .. import errors
from ..cbind import schema
from ..cbind._ffi import cstr, ffi, lib

# name -> canonical spec string: the C registry's presets (al_preset_get),
# the seeds' variants by their short names; schema.presets() has their docs
# and where they run.
presets = {name: p.spec for name, p in schema.presets().items()}

# A Policy as plain data, what a task carries to wherever it runs: the label
# (name), the canonical spec, and the C parser's reading, ((layer name,
# (int64 params, schema order)), ...) top first. Tuples of str and int: it
# pickles (executors in other processes) and JSON keeps it as lists (the
# peer child); Policy.from_parsed() takes it back without parsing the text.
ParsedPolicy = collections.namedtuple("ParsedPolicy", "name spec layers")

# Rewrites of a spec's text run before it is parsed, each text -> text:
# libarena_real adds the one that compiles libarena(tree=PATH) into a layer.
expanders = []


def _parse(text, spec):
    """The C parser's reading of ``text`` (al_spec_parse_report): a tuple of
    (layer name, raw int64 params) top first. A refusal becomes the exception
    that names the fault, worded here from the facts the parser reports."""
    if "\0" in text:
        raise errors.PolicySyntaxError(
            "NUL character at offset %d in policy %r" % (text.index("\0"), errors.Echo(spec)))
    for rewrite in expanders:  # names of layers made at first use (libarena(tree=PATH))
        text = rewrite(text)
    data = text.encode("utf-8", "surrogatepass")
    out = ffi.new("struct al_stack_spec *")
    err = ffi.new("struct al_spec_error *")
    if lib.al_spec_parse_report(data, out, err):
        raise _refusal(err, data, spec)
    layers = []
    for i in range(out.n):
        d = out.layer[i].desc
        layers.append((cstr(d.name), tuple(out.layer[i].params[j] for j in range(d.nparams))))
    return tuple(layers)


def _shown(text):
    """text with what would not be seen escaped (zero-width and control
    characters, lone surrogates), as repr() writes them."""
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _in_policy(why, spec):
    """The parser's message, then the whole spec: "... in layer 'x' of policy
    '...'", "... in policy '...'"."""
    return "%s %s policy %r" % (why, "of" if re.search(r" in layer '[^']*'$", why) else "in",
                                errors.Echo(spec))


def _preset_as_layer(name, spec):
    """The refusal of a preset written where a layer goes (with parameters, or
    stacked): a preset is a whole spec, so the fix is to spell out its layers."""
    return errors.UnknownNameError(
        "%r in policy %r is a preset (%s), not a layer: a preset takes no parameters "
        "and stands alone; write its layers instead: %r; valid layers: %s"
        % (name, spec, presets[name], presets[name], ", ".join(schema.layers())),
        name=name, kind="layer", valid=list(schema.layers()))


def _refusal(err, data, spec):
    """The exception for a spec the C parser refused: each fault as the
    schema words it, naming the bad text and the valid choices."""
    token = data[err.tok:err.tok + err.toklen].decode("utf-8", "surrogatepass")
    fault = err.fault
    spec = errors.Echo(spec)  # every message below echoes it, cut when long
    try:  # the message quotes the token's bytes: decode them as the token's
        why = ffi.string(err.msg).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # cut inside a character
        why = cstr(err.msg)
    if token and _shown(token) != token:
        why = why.replace(token, _shown(token))
    if fault == lib.AL_SPEC_LAYER and token in presets:
        return _preset_as_layer(token, spec)
    if fault == lib.AL_SPEC_LAYER:
        return errors.UnknownNameError.make(
            "layer", token, schema.layers(), context="policy %r" % spec,  # %r escapes it
            extra="presets: %s" % ", ".join(presets))
    if fault == lib.AL_SPEC_TOO_MANY:
        return errors.InvalidArgument(
            "policy %r has %d layers; at most %d" % (spec, err.nlayers, lib.AL_MAX_LAYERS))
    if fault not in (lib.AL_SPEC_PARAM, lib.AL_SPEC_VALUE, lib.AL_SPEC_RANGE):
        return errors.PolicySyntaxError(_in_policy(why, spec))
    sch = schema.layer(cstr(err.desc.name))
    try:
        if fault == lib.AL_SPEC_PARAM:
            sch.param(token.replace("-", "_"))
        else:
            sch.params[err.param].parse_text(token)
    except errors.AlloclabError as e:
        return e
    # The schema's wording accepts what the parser refused: report the parser's.
    cls = errors.ParameterRangeError if fault == lib.AL_SPEC_RANGE else errors.ParameterTypeError
    return cls(_in_policy(why, spec))


def _shape_refusal(err, names, spec):
    """The exception for a stack al_stack_check refused: the layer at fault,
    the one below it where that matters, and a stack that would do."""
    fault, name = err.fault, names[err.layer] if err.layer >= 0 else None
    below = names[err.below] if err.below >= 0 else None
    spec = errors.Echo(spec)  # every message below echoes it, cut when long
    if fault == lib.AL_SPEC_NO_BACKEND:
        return errors.InvalidArgument(
            "layer %r in policy %r needs a layer below it (a backend such as %s)"
            % (name, spec, ", ".join(_bottom_layers()) or "buddy"))
    if fault == lib.AL_SPEC_BOTTOM:
        return errors.InvalidArgument(
            "layer %r in policy %r is a bottom layer and must be last; found %r below it"
            % (name, spec, below))
    if fault == lib.AL_SPEC_NO_PAGES:
        return errors.InvalidArgument(
            "layer %r in policy %r needs a page allocator right below it (e.g. "
            "'%s > pages'), not %r" % (name, spec, name, below))
    if fault == lib.AL_SPEC_DISTINCT:
        return errors.UnsupportedCombination(
            "layer %r in policy %r cannot stack over %r: %s caches the objects freed to it "
            "and needs distinct objects, but %s hands out one block per CPU; use a real "
            "backend below it (e.g. '%s > buddy')" % (name, spec, below, name, below, name),
            layer=below)
    if fault == lib.AL_SPEC_TASK_ONLY:
        return errors.UnsupportedCombination(
            "layer %r in policy %r cannot stack over %r: %s refills its caches from irq_work "
            "(IRQ level), but %s allocates only at task level, so every refill would fail; "
            "use a backend that serves IRQ level below it (e.g. '%s > slab')"
            % (name, spec, below, name, below, name), layer=below)
    why = cstr(err.msg)
    if fault == lib.AL_SPEC_PARAMS:  # the engine's words: "<layer>: <why>"
        why = why[len(name) + 2:] if why.startswith(name + ": ") else why
        return errors.InvalidArgument("layer %s in policy %r: %s" % (name, spec, why),
                                      code=err.code)
    return errors.InvalidArgument("policy %r: %s" % (spec, why))


class Policy:
    """An allocator stack: ``Policy("percpu > buddy")``, ``Policy(other)``, or a
    preset name. Hashable, comparable, and printed canonically."""

    __slots__ = ("_layers", "_str", "_name")

    def __init__(self, spec):
        if isinstance(spec, Policy):
            self._layers = spec._layers
            self._str = spec._str
            self._name = spec._name
            return
        if not isinstance(spec, str):
            raise errors.ParameterTypeError(
                "a policy is a spec string, a preset name or a Policy, not %s"
                % errors.shown(spec))
        self._layers = _parse(spec, spec)  # the C parser reads a preset's name
        preset = lib.al_spec_preset(spec.encode("utf-8", "surrogatepass"))
        preset = cstr(preset.name) if preset != ffi.NULL else None
        self._validate(spec)
        self._str = self._canonical()
        self._name = preset or self._str

    @classmethod
    def from_layers(cls, layers):
        """Build from [(name, {param: value}), ...] (top first)."""
        parts = []
        for name, params in layers:
            sch = schema.layer(name)
            raw = sch.defaults()
            for k, v in (params or {}).items():
                p = sch.param(k.replace("-", "_"))
                raw[sch.params.index(p)] = p.parse(v)
            parts.append(_format_layer(sch, raw))
        return cls(" > ".join(parts))

    @classmethod
    def from_parsed(cls, parsed):
        """The Policy of a ``parsed()`` form (or of its JSON lists), without
        parsing or checking it again: it was checked when it was parsed, and
        the engine checks every stack again before it builds one
        (al_stack_check). Its layers are looked up by name only when a spec
        is filled: a plugin layer must be loaded by then, not before."""
        name, spec, layers = parsed
        pol = cls.__new__(cls)
        pol._layers = tuple((n, tuple(raw)) for n, raw in layers)
        pol._str = spec
        pol._name = name
        return pol

    def parsed(self):
        """This policy as a ParsedPolicy: plain data that pickles, for a task
        to carry so that the spec is parsed once, where the task is made."""
        return ParsedPolicy(self._name, self._str, self._layers)

    def _validate(self, spec):
        """The stack's shape, as the C library checks it before it builds a
        stack (al_stack_check: each layer's place and parameters, then the
        pairs that cannot stack); a refusal is worded by _shape_refusal."""
        err = ffi.new("struct al_spec_error *")
        if lib.al_stack_check(self.stack_spec(), err):
            raise _shape_refusal(err, [name for name, _ in self._layers], spec)

    @property
    def distinct_objects(self):
        """Whether every live allocation is distinct memory: False when a
        layer hands out one block per CPU (shared_blocks, e.g. null)."""
        return self.shared_layer is None

    @property
    def shared_layer(self):
        """The first layer that hands out one block per CPU, or None."""
        for name, _ in self._layers:
            if schema.layer(name).has("shared_blocks"):
                return name
        return None

    def check_workload(self, workload):
        """Refuse, before anything runs, a workload this policy cannot serve
        (IncompatiblePolicyError, as run() does): e.g. one that needs distinct
        objects on a policy with a shared_blocks layer. ``workload`` is a
        name or a WorkloadSchema."""
        check_compatible(workload, self)

    def _canonical(self):
        return " > ".join(_format_layer(schema.layer(name), raw) for name, raw in self._layers)

    # -- public view --

    @property
    def layers(self):
        """[(name, {param: value})] with only the non-default params, top first."""
        out = []
        for name, raw in self._layers:
            sch = schema.layer(name)
            out.append((name, {p.name: p.value(v) for p, v in zip(sch.params, raw)
                               if v != p.default}))
        return out

    @property
    def names(self):
        """The layers' names, top first."""
        return [name for name, _ in self._layers]

    @property
    def name(self):
        """The preset name this policy was made from, else its canonical spec."""
        return self._name

    @property
    def spec(self):
        """The canonical spec (the same as ``str(policy)``)."""
        return self._str

    def params(self, i):
        """Every parameter of layer i (defaults included), as Python values."""
        name, raw = self._layers[i]
        sch = schema.layer(name)
        return {p.name: p.value(v) for p, v in zip(sch.params, raw)}

    def raw_params(self, i):
        """Every parameter of layer i as the int64 values the C side gets."""
        return list(self._layers[i][1])

    @property
    def max_size(self):
        """Largest request the stack accepts for these parameters: the smallest
        non-zero limit over its layers (al_spec_max_size; e.g. buddy's is
        chunk_size / 2), 0 = any."""
        return int(lib.al_spec_max_size(self.stack_spec()))

    @property
    def min_align(self):
        """Alignment every object of the stack has, whatever its size: the
        declared min_align of the topmost layer that declares one (a cache
        hands out the objects of the layer below), e.g. 8 over slab (its
        kmalloc-8 class) and under bpf_ma (its 8-byte list node in front)."""
        return int(lib.al_spec_min_align(self.stack_spec()))

    def features(self, i=0):
        """Feature names of layer i (top by default)."""
        return schema.layer(self._layers[i][0]).features

    @property
    def nmi_safe(self):
        """Whether every call may run at NMI (what the nmi workload accepts):
        from the top, every layer nmi_safe down to one with nmi_shield (or the
        bottom), as the C side's al_stack_nmi_unsafe."""
        return self.nmi_unsafe is None

    @property
    def nmi_unsafe(self):
        """The name of the layer that makes the stack not NMI-safe (the first
        one from the top without nmi_safe, above any nmi_shield), or None."""
        for i in range(len(self)):
            f = self.features(i)
            if "nmi_safe" not in f:
                return self._layers[i][0]
            if "nmi_shield" in f:
                return None
        return None

    def __len__(self):
        return len(self._layers)

    def __str__(self):
        return self._str

    def __repr__(self):
        if self._name != self._str:  # a preset: its name, then what it expands to
            return "Policy(%r)  # %s" % (self._name, self._str)
        return "Policy(%r)" % self._str

    def __eq__(self, other):
        if not isinstance(other, Policy):
            return NotImplemented
        return self._layers == other._layers

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(self._layers)

    def __reduce__(self):
        return (Policy, (self._name,))

    # -- C side --

    def fill_spec(self, s):
        """Fill a ``struct al_stack_spec`` (a cdata struct or pointer)."""
        s.n = len(self._layers)
        for i, (name, raw) in enumerate(self._layers):
            # By name, not by the registry's index: an index is not the same in
            # another process (plugins register in the order they load), and
            # the lookup is a strcmp over a few dozen names, no parsing.
            d = lib.al_layer_find(name.encode())
            if d == ffi.NULL:  # a plugin layer not loaded in this process
                raise errors.UnknownNameError.make("layer", name, list(schema.layers()))
            s.layer[i].desc = d
            for j, v in enumerate(raw):
                s.layer[i].params[j] = v
        return s

    def stack_spec(self):
        """A new ``struct al_stack_spec *`` for this policy."""
        return self.fill_spec(ffi.new("struct al_stack_spec *"))


@functools.lru_cache(maxsize=512)
def canonical(spec):
    """The canonical spec of a spec or preset name, or None when it is not a
    valid policy (for matching labels against specs)."""
    try:
        return str(Policy(spec))
    except (errors.AlloclabError, TypeError):
        return None


def same_policy(a, b):
    """Whether two policy labels (preset names or specs) name the same stack."""
    if a == b:
        return True
    ca = canonical(a) if isinstance(a, str) else None
    cb = canonical(b) if isinstance(b, str) else None
    if ca is None and cb is not None:
        # b may have registered the layer a names (libarena(tree=PATH) loads
        # the tree as libarena_<hash>, the name a Result keeps): read a again
        ca = canonical(a)
    return ca is not None and ca == cb


def _format_layer(sch, raw):
    args = ["%s=%s" % (p.name, p.format(v)) for p, v in zip(sch.params, raw) if v != p.default]
    return "%s(%s)" % (sch.name, ", ".join(args)) if args else sch.name


def _bottom_layers():
    return [n for n, s in schema.layers().items() if not s.needs_backend]


def check_compatible(workload, policy):
    """Raise IncompatiblePolicyError when ``workload`` cannot run on
    ``policy`` whatever its parameters: what the workload's descriptor
    declares it needs of a policy (its flags), checked on the policy's
    layers and features before anything is built. plan() calls it for every
    policy of a sweep, so a sweep refuses a bad cell before its first run."""
    wl = workload if isinstance(workload, schema.WorkloadSchema) else schema.workload(workload)
    pol = policy if isinstance(policy, Policy) else Policy(policy)
    why = _incompatible(wl, pol)
    if why is None:
        return
    valid = [name for name, spec in presets.items() if _incompatible(wl, Policy(spec)) is None]
    label = repr(pol.name) if pol.name == str(pol) else "%r (%s)" % (pol.name, str(pol))
    raise errors.IncompatiblePolicyError(
        "workload %s cannot run on policy %s: %s; presets it runs on: %s"
        % (wl.name, label, why, ", ".join(valid) or "(none)"),
        workload=wl.name, policy=str(pol), valid=valid)


def _incompatible(wl, pol):
    """Why ``wl`` cannot run on ``pol`` (one reason), or None."""
    if wl.flags_mask & lib.AL_WL_NMI and pol.nmi_unsafe is not None:
        return ("it calls the policy at NMI (a signal handler), and layer %s is not "
                "NMI-safe: the handler could spin on a lock the code it interrupted "
                "holds" % pol.nmi_unsafe)
    if wl.flags_mask & lib.AL_WL_VMALLOC and pol.names[0] != "vmalloc":
        return ("it drives vmalloc's own API and needs a vmalloc layer at the top of the "
                "policy (e.g. 'vmalloc > pages'), not %s" % pol.names[0])
    if wl.needs_distinct and pol.shared_layer is not None:
        return ("it needs distinct objects (it links objects through their memory, checks "
                "their contents or keeps them live while other workers write theirs), but "
                "layer %r hands out one block per CPU; run it on a real allocator (e.g. "
                "'buddy', 'slab' or 'libc'); %s serves only workloads that never keep "
                "objects (e.g. malloc-free)" % (pol.shared_layer, pol.shared_layer))
    return None


def policies():
    """Every layer as a dict: name, doc, features, max_size, params (each with
    type, default, min, max, choices, doc) and counters (as counters())."""
    return [s.to_dict() for s in schema.layers().values()]


def counters(layer):
    """The documented counters of ``layer`` (a layer name), in declaration
    order, each a dict: name, doc, kind ("counter" or "gauge"), formula (of
    a derived counter, e.g. "hits+misses"; else None), key (shown by
    default), unit ("ns" for lock times; "" for counts), reported (reported
    by the layer's own code) and levels (the stats levels that measure it).
    [] for a layer that declares no descriptors: its counters are reported
    by name only ("(no description)"). UnknownNameError for an unknown layer."""
    if not isinstance(layer, str):
        raise errors.ParameterTypeError("layer must be a layer name (str), not %r" % (layer,),
                                        name="layer", value=layer)
    return [c.to_dict() for c in schema.layer(layer).counters]


def workloads():
    """Every workload as a dict: name, doc, flags, size_param, params."""
    return [s.to_dict() for s in schema.workloads().values()]
