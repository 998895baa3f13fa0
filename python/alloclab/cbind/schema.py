"""Layer and workload schemas, read from the C registry.

Nothing here duplicates a schema: names, types, defaults, ranges, choices and
docs all come from ``struct al_param_desc`` tables in the library, so a
parameter added in C appears in Python, the CLI and ``--help`` at once.
Plugins may register layers at run time; the cache is rebuilt whenever the
registry's count changes.

Value syntax (``Param.parse`` for Python values, ``Param.parse_text`` for
policy specs and the command line; the text is read by the C parser,
al_value_parse, the one grammar of values, and worded here):

- SIZE: an int, or "64", "4K", "1M", "1G" (K = 1024)
- NS: an int (ns), or "500ns", "10us", "250ms", "1s"
- BOOL: True/False, 0/1, "true"/"false"
- ENUM: the choice's name
- INT: an int (bool and float are rejected)

Feature names come from the C list (ops.h's AL_FEATURES) and presets from
the C registry's table (``presets()``).
"""

import errno
import numbers
import threading
from dataclasses import dataclass, field
from typing import Optional, Tuple

from .. import errors
from ._ffi import cstr, ffi, lib

INT, SIZE, BOOL, ENUM, NS = (lib.AL_PARAM_INT, lib.AL_PARAM_SIZE, lib.AL_PARAM_BOOL,
                             lib.AL_PARAM_ENUM, lib.AL_PARAM_NS)
TYPE_NAMES = {INT: "int", SIZE: "size", BOOL: "bool", ENUM: "enum", NS: "ns"}



def _read_features():
    """[(name, bit)] of every layer feature, in the order of ops.h's
    AL_FEATURES, the one list of them."""
    out, mask = [], ffi.new("unsigned *")
    while True:
        name = lib.al_feature_name(len(out), mask)
        if name == ffi.NULL:
            return out
        out.append((cstr(name), mask[0]))


FEATURES = _read_features()
_FEATURE_BIT = dict(FEATURES)
WORKLOAD_FLAGS = [
    ("reset", lib.AL_WL_RESET),
    ("one_producer", lib.AL_WL_ONE_PRODUCER),
    ("live", lib.AL_WL_LIVE),  # keeps live requested bytes
    ("distinct", lib.AL_WL_DISTINCT),  # links, checks or shares objects: not on shared_blocks
    ("finite", lib.AL_WL_FINITE),  # a worker's work ends (replay): the phase ends when all are done
]

_SIZE_UNITS = [("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)]
_NS_UNITS = [("s", 10**9), ("ms", 10**6), ("us", 10**3), ("ns", 1)]
# What a value's text is not, by type: the words of a ParameterTypeError.
_TEXT_EXPECTED = {INT: "an integer", SIZE: 'a size: 64, "4K", "1M", "1G"',
                  NS: 'a duration: "500ns", "10us", "250ms", "1s"',
                  BOOL: "a bool: true/false, yes/no, on/off or 1/0"}
# A number beyond int64 (al_value_parse: -ERANGE) is beyond every range.
_HUGE = 10**40


def _read_value(param, text):
    """al_value_parse of text for a parameter of param's type and choices:
    (0, raw) or (-errno, None). The range is not checked."""
    desc = ffi.new("struct al_param_desc *")
    desc.type = param.type
    choices = ffi.new("char[]", ",".join(param.choices or ()).encode())
    desc.choices = choices
    out = ffi.new("int64_t *")
    data = text.encode("utf-8", "surrogatepass")
    ret = lib.al_value_parse(desc, data, len(data), out)
    return ret, (out[0] if ret == 0 else None)


def format_size(v):
    """Bytes with the largest exact K/M/G suffix: 4096 -> "4K"."""
    v = int(v)
    if v:
        for suffix, unit in _SIZE_UNITS:
            if v % unit == 0:
                return "%d%s" % (v // unit, suffix)
    return str(v)


def format_ns(v):
    """Nanoseconds with the largest exact unit: 250000000 -> "250ms"."""
    v = int(v)
    if v == 0:
        return "0ns"
    for suffix, unit in _NS_UNITS:
        if v % unit == 0:
            return "%d%s" % (v // unit, suffix)
    return "%dns" % v  # unreachable: unit 1 divides everything


def is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


@dataclass(frozen=True)
class Param:
    """One parameter of a layer or workload, as its C schema declares it."""

    name: str
    type: int
    default: int  # raw int64 as the C side stores it
    min: int
    max: int
    choices: Optional[Tuple[str, ...]]
    doc: str
    owner: str = ""  # "layer buddy" / "workload malloc-free", for messages

    @property
    def type_name(self):
        return TYPE_NAMES.get(self.type, "type%d" % self.type)

    # -- raw int64 <-> Python value <-> text --

    def format(self, raw):
        """Canonical text of a raw value."""
        if self.type == SIZE:
            return format_size(raw)
        if self.type == NS:
            return format_ns(raw)
        if self.type == BOOL:
            return "true" if raw else "false"
        if self.type == ENUM and self.choices and 0 <= raw < len(self.choices):
            return self.choices[raw]
        return str(int(raw))

    def value(self, raw):
        """The natural Python value of a raw one: int, bool, or enum name."""
        if self.type == BOOL:
            return bool(raw)
        if self.type == ENUM and self.choices and 0 <= raw < len(self.choices):
            return self.choices[raw]
        return int(raw)

    def _where(self):
        return "%s parameter %s" % (self.owner, self.name) if self.owner else \
            "parameter %s" % self.name

    def _type_error(self, value, expected):
        return errors.ParameterTypeError(
            "%s must be %s, not %s (%s)" % (self._where(), expected, errors.shown(value),
                                            type(value).__name__),
            name=self.name, value=value)

    def _checked(self, raw, shown):
        shown = str(errors.Echo(shown))  # a number no parameter takes: cut
        if not (self.min <= raw <= self.max):
            raise errors.ParameterRangeError(
                "%s=%s is out of range [%s, %s]" % (self._where(), shown, self.format(self.min),
                                                    self.format(self.max)),
                name=self.name, value=raw, min=self.min, max=self.max)
        return raw

    def parse(self, value):
        """A Python value (or text, for SIZE/NS/BOOL/ENUM) -> validated raw int."""
        t = self.type
        if t == INT:
            if not is_int(value):
                raise self._type_error(value, "an int")
            return self._checked(int(value), str(int(value)))
        if isinstance(value, str):
            return self.parse_text(value)
        if t in (SIZE, NS):
            if not is_int(value):
                raise self._type_error(
                    value, "an int or a string like %s" % ('"4K"' if t == SIZE else '"250ms"'))
            return self._checked(int(value), self.format(int(value)))
        if t == BOOL:
            if isinstance(value, bool) or (is_int(value) and value in (0, 1)):
                return self._checked(int(bool(value)), "true" if value else "false")
            raise self._type_error(value, 'a bool (True/False, 0/1, "true"/"false")')
        if t == ENUM:
            raise self._type_error(value, "one of: %s" % ", ".join(self.choices or ()))
        raise self._type_error(value, "a value of type %s" % self.type_name)

    def parse_text(self, text):
        """Text from a policy spec or the command line -> validated raw int."""
        s = text.strip(" \t\n\r\f\v")  # ASCII blanks, as the C parser trims
        t = self.type
        if t not in TYPE_NAMES:
            raise self._type_error(text, "a value of type %s" % self.type_name)
        ret, raw = _read_value(self, text)
        if ret == -errno.ERANGE:
            return self._checked(-_HUGE if s.startswith("-") else _HUGE, s)
        if ret == -errno.EDOM:  # finer than a nanosecond at any unit
            raise self._type_error(text, "a whole number of nanoseconds")
        if ret and t == ENUM:
            raise errors.UnknownNameError.make(
                "choice", s, self.choices or (), context=self._where())
        if ret:
            raise self._type_error(text, _TEXT_EXPECTED[t])
        return self._checked(raw, s)

    def to_dict(self):
        d = {
            "name": self.name,
            "type": self.type_name,
            "default": self.value(self.default),
            "default_text": self.format(self.default),
            "min": self.value(self.min) if self.type != ENUM else self.min,
            "max": self.value(self.max) if self.type != ENUM else self.max,
            "doc": self.doc,
        }
        if self.choices is not None:
            d["choices"] = list(self.choices)
        return d


def _read_params(descs, n, owner):
    out = []
    for i in range(n):
        p = descs[i]
        choices = None
        if p.type == ENUM:
            choices = tuple(c.strip() for c in cstr(p.choices).split(",") if c.strip())
        out.append(Param(name=cstr(p.name), type=p.type, default=getattr(p, "def"),
                         min=p.min, max=p.max, choices=choices, doc=cstr(p.doc),
                         owner=owner))
    return tuple(out)


NO_DOC = "(no description)"  # what an undocumented counter's doc reads


@dataclass(frozen=True)
class Counter:
    """One counter of a layer, as its C descriptor (struct al_counter_desc)
    declares it: name, doc, kind ("counter": events, summed over the run;
    "gauge": a level read at the end), the formula of a derived counter
    ("hits+misses", computed when reported, never counted; None otherwise),
    whether it is a key counter (the tables need it), its unit ("ns" for
    lock times, measured at stats="full" only; "" for counts), and whether
    the layer's own stats() code reports it rather than the counter block."""

    name: str
    doc: str
    kind: str
    formula: Optional[str]
    key: bool
    unit: str
    reported: bool = False
    layer: str = ""

    @property
    def levels(self):
        """The stats levels at which the counter is measured (at "off" a
        layer reports none of its declared counters, gauges included)."""
        return ("full",) if self.unit == "ns" else ("lite", "full")

    def to_dict(self):
        return {"name": self.name, "doc": self.doc, "kind": self.kind,
                "formula": self.formula, "key": self.key, "unit": self.unit,
                "reported": self.reported, "levels": list(self.levels)}


def _read_counters(d, layer):
    """The counter descriptors of a layer descriptor; () when it has none or
    was built before descriptors had them (its desc_size ends earlier)."""
    end = ffi.offsetof("struct al_layer_desc", "ncounters") + ffi.sizeof("unsigned")
    if d.desc_size < end or d.counters == ffi.NULL:
        return ()
    out = []
    for i in range(d.ncounters):
        c = d.counters[i]
        f = c.flags
        out.append(Counter(
            name=cstr(c.name), doc=cstr(c.doc) if c.doc != ffi.NULL and cstr(c.doc) else NO_DOC,
            kind="gauge" if f & lib.AL_CTR_GAUGE else "counter",
            formula=cstr(c.formula) if f & lib.AL_CTR_DERIVED and c.formula != ffi.NULL else None,
            key=bool(f & lib.AL_CTR_KEY), unit="ns" if f & lib.AL_CTR_NS else "",
            reported=bool(f & lib.AL_CTR_REPORTED), layer=layer))
    return tuple(out)


class _HasParams:
    """param(name) for a schema with .name, .params and a _kind."""

    def param(self, name):
        for p in self.params:
            if p.name == name:
                return p
        raise errors.UnknownNameError.make(
            "parameter", name, [p.name for p in self.params],
            context="%s %s" % (self._kind, self.name))


@dataclass(frozen=True)
class LayerSchema(_HasParams):
    """A layer of the registry: name, doc, features, max_size, params,
    min_align and counters (() for a layer that declares none: its counters
    are reported by name only, undocumented)."""

    _kind = "layer"

    name: str
    doc: str
    features_mask: int
    max_size: int  # 0 = unlimited
    params: Tuple[Param, ...]
    desc: object = field(repr=False, compare=False, hash=False, default=None)
    min_align: int = 0  # 0 = that of the layer below
    counters: Tuple[Counter, ...] = ()

    def counter(self, name):
        """The Counter ``name`` of this layer, or None when it is undocumented."""
        for c in self.counters:
            if c.name == name:
                return c
        return None

    @property
    def features(self):
        return [n for n, bit in FEATURES if self.features_mask & bit]

    @property
    def needs_backend(self):
        return bool(self.features_mask & _FEATURE_BIT["backend"])

    def has(self, feature):
        return feature in self.features

    def defaults(self):
        return [p.default for p in self.params]

    def to_dict(self):
        return {
            "name": self.name,
            "doc": self.doc,
            "features": self.features,
            "max_size": self.max_size,
            "min_align": self.min_align,
            "params": [p.to_dict() for p in self.params],
            "counters": [c.to_dict() for c in self.counters],
        }


@dataclass(frozen=True)
class WorkloadSchema(_HasParams):
    """A workload of the registry: name, doc, flags, params, size param."""

    _kind = "workload"

    name: str
    doc: str
    flags_mask: int
    params: Tuple[Param, ...]
    size_param: Optional[str]
    desc: object = field(repr=False, compare=False, hash=False, default=None)

    @property
    def flags(self):
        return [n for n, bit in WORKLOAD_FLAGS if self.flags_mask & bit]

    @property
    def one_producer(self):
        return bool(self.flags_mask & lib.AL_WL_ONE_PRODUCER)

    @property
    def needs_distinct(self):
        """Whether it needs distinct objects (it links objects through their
        memory, checks their contents, or keeps them live while other workers
        write theirs): a policy with a shared_blocks layer (null) is refused."""
        return bool(self.flags_mask & lib.AL_WL_DISTINCT)


    def defaults(self):
        return [p.default for p in self.params]

    def to_dict(self):
        return {
            "name": self.name,
            "doc": self.doc,
            "flags": self.flags,
            "size_param": self.size_param,
            "params": [p.to_dict() for p in self.params],
        }


_lock = threading.Lock()
_cache = {"layers": (None, {}), "workloads": (None, {})}


def _read_layer(d):
    name = cstr(d.name)
    return LayerSchema(name=name, doc=cstr(d.doc), features_mask=d.features,
                       max_size=int(d.max_size),
                       params=_read_params(d.params, d.nparams, "layer %s" % name), desc=d,
                       min_align=int(lib.al_layer_min_align(d)),
                       counters=_read_counters(d, name))


def _read_workload(d):
    name = cstr(d.name)
    params = _read_params(d.params, d.nparams, "workload %s" % name)
    sp = d.size_param
    return WorkloadSchema(name=name, doc=cstr(d.doc), flags_mask=d.flags, params=params,
                          size_param=params[sp].name if 0 <= sp < len(params) else None, desc=d)


def _registry(kind, count, get, read):
    """{name: schema} for one registry, re-read only when its count changed
    (a plugin registered since)."""
    with _lock:
        n = count()
        cached_n, table = _cache[kind]
        if cached_n != n:
            table = {}
            for i in range(n):
                d = get(i)
                if d != ffi.NULL:
                    s = read(d)
                    table[s.name] = s
            _cache[kind] = (n, table)
        return table


def layers():
    """Every registered layer: {name: LayerSchema}, registry order."""
    return _registry("layers", lib.al_layer_count, lib.al_layer_get, _read_layer)


def workloads():
    """Every registered workload: {name: WorkloadSchema}, registry order."""
    return _registry("workloads", lib.al_workload_count, lib.al_workload_get, _read_workload)


def layer(name):
    """The schema of layer ``name`` (UnknownNameError listing the valid ones)."""
    table = layers()
    if name in table:
        return table[name]
    alt = name.replace("-", "_") if isinstance(name, str) else name
    if alt in table:
        return table[alt]
    raise errors.UnknownNameError.make("layer", name, list(table))


def workload(name):
    """The schema of workload ``name`` (dashes or underscores)."""
    table = workloads()
    if not isinstance(name, str):
        raise errors.ParameterTypeError("workload must be a name (str), not %s"
                                        % errors.shown(name))
    for cand in (name, name.replace("_", "-"), name.replace("-", "_")):
        if cand in table:
            return table[cand]
    raise errors.UnknownNameError.make("workload", name, list(table))


@dataclass(frozen=True)
class Preset:
    """A preset of the C registry (struct al_preset): a policy by a short
    name, its canonical spec, a one-line doc, and whether it is a peer (a
    real allocator, run in a child process; never inside the preload shim)."""

    name: str
    spec: str
    doc: str
    peer: bool

    def to_dict(self):
        return {"name": self.name, "spec": self.spec, "doc": self.doc,
                "runs": "child process" if self.peer else "in process"}


def presets():
    """Every preset of the C registry: {name: Preset}, registry order."""
    out = {}
    for i in range(lib.al_preset_count()):
        p = lib.al_preset_get(i)
        out[cstr(p.name)] = Preset(name=cstr(p.name), spec=cstr(p.spec), doc=cstr(p.doc),
                                   peer=p.where == lib.AL_PRESET_PEER)
    return out


BUILTIN_LAYERS = tuple(layers())
"""The layers liballoclab registers itself, read when alloclab is imported,
before a plugin or a libarena tree can add one: the docs' reference
tables list these, whatever a process has registered since."""
