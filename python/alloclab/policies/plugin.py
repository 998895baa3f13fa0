"""Policies written in C at run time: compile, register, run beside the built-ins.

    import alloclab as al
    src = r'''
    #include <alloclab/alloclab.h>
    static int mine_create(const struct al_layer_desc *d, const int64_t *params,
                           struct al_allocator *below, unsigned ncpu,
                           struct al_allocator **out) { ... }
    '''
    al.plugin.compile("mine", src, params=[("depth", "int", 32, 1, 1024, "slots")],
                      features=["backend"], create="mine_create")
    al.run("malloc-free", "mine(depth=64) > buddy")

``compile`` builds the source with cffi (``set_source`` + ``compile`` into a
cache directory, one module name per distinct source, so a rebuild of the
same source is a cache hit) against the public headers, links it to the
liballoclab.so this process already runs (same soname: the loader shares it,
so the plugin registers into the same registry), imports it, and checks that
the layer is there. Either the source registers itself
(``AL_REGISTER_LAYER(desc)``), or ``params``/``features``/``create`` describe
it and the descriptor is generated.

Compiler errors raise PluginCompileError carrying the compiler's messages,
with line numbers of the source as given (a ``#line`` directive maps them).

Extension modules built outside alloclab reach the registry through a
PyCapsule named "alloclab._C_API" (``api_capsule()``: a ``struct al_api``, see
registry.h), and hand layers in with ``register(desc)``, which accepts a PyCapsule
named "alloclab.layer_desc", a cffi pointer to ``struct al_layer_desc`` (from
any FFI), or an address.
"""

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time

from .. import errors, files
from ..cbind import schema
from ..cbind._ffi import cstr, ffi, include_dir, lib, lib_path, strerror
from .policy import Policy

TYPES = {"int": "AL_PARAM_INT", "size": "AL_PARAM_SIZE", "bool": "AL_PARAM_BOOL",
         "enum": "AL_PARAM_ENUM", "ns": "AL_PARAM_NS"}
# A feature's name -> its C constant, from the one list (alloclab/features.h).
FEATURES = {name: "AL_F_" + name.upper() for name, _ in schema.FEATURES}
_NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_-]*$")
_IDENT_RE = re.compile(r"^[a-z_][a-z0-9_]*$")

_loaded = {}  # name -> Plugin
_keep = []    # objects whose memory the registry points into: never freed


class Plugin:
    """A compiled and registered plugin layer."""

    def __init__(self, name, digest, module_path, compile_s):
        self.name = name
        self.digest = digest              # hash of everything that went into the build
        self.module_path = module_path    # the cffi extension
        self.compile_s = compile_s        # compile + load time (0 on a cache hit)

    @property
    def schema(self):
        return schema.layer(self.name)

    def __repr__(self):
        return "<alloclab plugin %s (%s)>" % (self.name, self.module_path)


def cache_dir():
    """Where built plugins are kept: $ALLOCLAB_CACHE, else ~/.cache/alloclab."""
    base = os.environ.get("ALLOCLAB_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "alloclab")
    path = os.path.join(base, "plugins")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:  # the environment names a file, or a folder not ours to write
        env = "$ALLOCLAB_CACHE=%s" % os.environ["ALLOCLAB_CACHE"] \
            if os.environ.get("ALLOCLAB_CACHE") else "the cache %s" % base
        raise errors.InvalidArgument(
            "%s: cannot make its folder %s for built plugins and libarena trees: %s; set "
            "$ALLOCLAB_CACHE to a folder alloclab may write" % (
                env, path, e.strerror or e), name="ALLOCLAB_CACHE", value=base) from None
    return path


def _headers_digest():
    """A build against other headers (another ABI) is another build."""
    h = hashlib.sha256()
    hdir = os.path.join(include_dir(), "alloclab")
    for f in sorted(os.listdir(hdir)):
        with open(os.path.join(hdir, f), "rb") as fh:
            h.update(f.encode() + b"\0" + fh.read())
    return h.hexdigest()


def _c_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'


_TEXT_TYPES = {"size": (schema.SIZE, 'a size: 4096 or "4K", "1M", "1G"'),
               "ns": (schema.NS, 'a duration in ns: 250000000 or "500ns", "10us", "250ms", "1s"'),
               "bool": (schema.BOOL, 'a bool: True/False, 0/1, "true"/"false"')}


def _param_value(name, typ, what, v):
    """A schema value as the raw integer the registry stores, read with the
    syntax of a policy spec: a size 4096 or "4K", a duration 250000000 or
    "250ms", a bool True, 1 or "true"; an int is an int."""
    if typ in _TEXT_TYPES:
        code, expected = _TEXT_TYPES[typ]
        probe = schema.Param(name, code, 0, -(1 << 63), (1 << 63) - 1, None, "")
        try:
            return probe.parse(v)
        except (errors.ParameterTypeError, errors.ParameterRangeError):
            pass
    else:
        expected = "an integer"
        if schema.is_int(v):
            return int(v)
    raise errors.ParameterTypeError("parameter %r: %s must be %s, not %r" % (
        name, what, expected, v), name=name, value=v)


def _param_rows(params):
    """Validate the Python-side schema; returns C initialisers."""
    rows, seen = [], set()
    for p in params:
        p = tuple(p)
        if len(p) not in (6, 7):
            raise errors.InvalidArgument(
                "a parameter is (name, type, default, min, max, doc[, choices]), not %r" % (p,))
        name, typ, default, lo, hi, doc = p[:6]
        choices = p[6] if len(p) == 7 else None
        if not isinstance(name, str) or not _IDENT_RE.match(name):
            raise errors.InvalidArgument(
                "parameter name %r must match [a-z_][a-z0-9_]*" % (name,), value=name)
        if name in seen:
            raise errors.InvalidArgument("parameter %r declared twice" % name, value=name)
        seen.add(name)
        if typ not in TYPES:
            raise errors.UnknownNameError.make("parameter type", typ, list(TYPES))
        if typ == "enum":
            if not choices or not all(isinstance(c, str) and c for c in choices):
                raise errors.InvalidArgument(
                    "enum parameter %r needs choices, e.g. ('atomic', 'local')" % name)
            lo, hi = 0, len(choices) - 1
            if isinstance(default, str):
                if default not in choices:
                    raise errors.UnknownNameError.make("choice", default, list(choices))
                default = list(choices).index(default)
        if typ == "bool":
            lo, hi, default = 0, 1, _param_value(name, typ, "default", default)
        else:
            default, lo, hi = (_param_value(name, typ, what, v) for what, v in
                               (("default", default), ("min", lo), ("max", hi)))
        if not lo <= default <= hi:
            raise errors.ParameterRangeError(
                "parameter %r: default %d is outside [%d, %d]" % (name, default, lo, hi),
                name=name, value=default, min=lo, max=hi)
        rows.append("{ %s, %s, %dLL, %dLL, %dLL, %s, %s }" % (
            _c_string(name), TYPES[typ], default, lo, hi,
            _c_string(",".join(choices)) if choices else "NULL", _c_string(doc or name)))
    return rows


def _glue(name, params, features, doc, max_size, create, min_align=0):
    if create is None:
        return ""
    if not _IDENT_RE.match(create):
        raise errors.InvalidArgument("create=%r is not a C identifier" % (create,))
    if isinstance(min_align, bool) or not isinstance(min_align, int) or min_align < 0 or \
            min_align & (min_align - 1):
        raise errors.InvalidArgument(
            "min_align=%r must be 0 (that of the layer below) or a power of two" % (min_align,),
            value=min_align)
    bad = [f for f in features if f not in FEATURES]
    if bad:
        raise errors.UnknownNameError.make("feature", bad[0], list(FEATURES))
    rows = _param_rows(params or ())
    flags = " | ".join(FEATURES[f] for f in features) or "0"
    return """
#line 1 "<alloclab plugin glue>"
static const struct al_param_desc alp_params_[] = { %(rows)s };
static const struct al_layer_desc alp_desc_ = {
	.name = %(name)s,
	AL_LAYER_DESC_INIT,
	.doc = %(doc)s,
	.features = %(flags)s,
	.max_size = %(max)dULL,
	.nparams = %(n)d,
	.params = %(params)s,
	.create = %(create)s,
	.min_align = %(align)d,
};
static int alp_status_ = 1;
__attribute__((constructor)) static void alp_register_(void)
{
	alp_status_ = al_layer_register(&alp_desc_);
}
int alloclab_plugin_status(void) { return alp_status_; }
""" % dict(rows=", ".join(rows) or "{ 0 }", name=_c_string(name), doc=_c_string(doc or name),
           flags=flags, max=max_size, n=len(rows), params="alp_params_" if rows else "NULL",
           create=create, align=min_align)


@contextlib.contextmanager
def _capture_fd2():
    """Collect what the compiler writes to fd 2 (cffi lets it through)."""
    with tempfile.TemporaryFile(mode="w+b") as f:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        out = {}
        try:
            yield out
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            out["text"] = f.read().decode("utf-8", "replace")


def library_cflags(preload=False):
    """The flags liballoclab.so is compiled with (csrc/CFLAGS, shipped beside
    the headers): its language, code model, visibility and optimisation, so a
    plugin layer is built as the built-in ones are. Warning flags are left to
    the plugin's author (extra_compile_args)."""
    sets = {}
    with open(os.path.join(include_dir(), os.pardir, "CFLAGS")) as f:
        for line in f:
            name, sep, flags = line.partition(":")
            if sep and not line.lstrip().startswith("#"):
                sets.setdefault(name.strip(), []).extend(shlex.split(flags))
    want = ["common", "release"] + (["preload"] if preload else [])
    return [fl for s in want for fl in sets.get(s, []) if not fl.startswith("-W")]


def compile(name, source, params=None, features=(), doc="", max_size=0, create=None,
            extra_compile_args=(), force=False, min_align=0):
    """Compile C source into a layer named ``name`` and register it.

    Either ``source`` registers the layer itself (``AL_REGISTER_LAYER``), or
    ``create`` names its constructor and ``params`` (tuples ``(name, type,
    default, min, max, doc[, choices])``, type one of int/size/bool/enum/ns,
    values written as in a policy spec: ``"1M"``, ``"250ms"``, ``"true"``),
    ``features`` (bulk, owns, backend, usable, validates), ``doc``,
    ``max_size`` and ``min_align`` (the alignment of every object it hands
    out; 0, the default: that of the layer below) describe it.
    ``extra_compile_args``: a list of flags, one str each (a str is refused,
    not split). Returns a Plugin. Raises PluginCompileError (with the
    compiler's messages), PluginError (it does not load, e.g. an undefined
    symbol, named; it would not register the layer ``name``; or the name is
    taken), ParameterTypeError (source not a str, extra_compile_args not a
    list of strs), or the parameter errors of the schema checks. A build is
    loaded here only once a child process has shown that it registers
    ``name``: when compile refuses, nothing is registered."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise errors.InvalidArgument("plugin name %r must match [a-z0-9_][a-z0-9_-]*" % (name,),
                                     value=name)
    if not isinstance(source, str):
        raise errors.ParameterTypeError(
            "plugin %r: source must be C source text (a str), not %s; for a file use "
            "compile_file(path)" % (name, errors.shown(source)), name="source", value=source)
    glue = _glue(name, params, features, doc, max_size, create, min_align)
    flags = library_cflags() + _extra_args(extra_compile_args)
    digest = hashlib.sha256("\0".join([name, source, glue, " ".join(flags), lib_path(),
                                       cstr(lib.al_version()), _headers_digest()]
                                      ).encode()).hexdigest()[:16]
    prev = _loaded.get(name)
    if prev is not None:
        if prev.digest == digest:
            return prev
        raise errors.PluginError(
            "a plugin named %r is already registered in this process (from other source); "
            "choose another name or restart the interpreter" % name, name=name)
    if lib.al_layer_find(name.encode()) != ffi.NULL:
        raise errors.PluginError("%r is already a registered layer (%s)" % (
            name, ", ".join(schema.layers())), name=name)
    modname = "_alp_%s_%s" % (re.sub(r"[^a-z0-9_]", "_", name), digest)
    t0 = time.perf_counter()
    path = _build(name, modname, '#include <alloclab/alloclab.h>\n#line 1 "%s.c"\n%s\n%s'
                  % (name, source, glue), bool(glue), flags, force)
    _check_layers(name, path, bool(glue))
    _load(name, modname, path, bool(glue))
    plugin = Plugin(name, digest, path, time.perf_counter() - t0)
    _loaded[name] = plugin
    return plugin


def _extra_args(args):
    """extra_compile_args as a list of flags: a list (or tuple) of strs, each
    one argument. A str is refused, not split: "-O3 -g" is two flags to a
    shell but one to the compiler, and a str iterates as characters."""
    if isinstance(args, (list, tuple)) and all(isinstance(a, str) for a in args):
        return list(args)
    raise errors.ParameterTypeError(
        "extra_compile_args must be a list of strs, one flag each (e.g. [\"-O3\", \"-g\"]), "
        "not %s" % errors.shown(args), name="extra_compile_args", value=args)


# Run in a child process: the layers that loading a built plugin registers
# (argv: liballoclab.so, the plugin, the offset of a descriptor's name), or
# why the loader refuses it. The registry cannot take a layer back, so a
# plugin is loaded here only once a child has shown what it registers.
_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1], ctypes.RTLD_GLOBAL)
lib.al_layer_count.restype = ctypes.c_uint
lib.al_layer_get.restype = ctypes.c_void_p
lib.al_layer_get.argtypes = [ctypes.c_uint]
off = int(sys.argv[3])
def names():
    return [ctypes.c_char_p.from_address(lib.al_layer_get(i) + off).value.decode("latin-1")
            for i in range(lib.al_layer_count())]
before = names()
try:
    ctypes.CDLL(sys.argv[2])
except OSError as e:
    got = {"error": str(e)}
else:
    got = {"added": [n for n in names() if n not in before]}
print("\n" + MARK + json.dumps(got), flush=True)
"""
PROBE_SECONDS = 60
# What starts the child's answer: a plugin's constructors may print too.
PROBE_MARK = "alloclab-plugin-probe: "


def _remove(path):
    """Drop a cached build that cannot be loaded, so the next compile builds it again."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def _load_error(name, path, text):
    """PluginError for a build the loader refuses (its cached file removed)."""
    _remove(path)
    m = re.search(r"undefined symbol: (\S+)", text)
    why = ("it references the undefined symbol %r: define it in the source" % m.group(1)
           if m else text)
    return errors.PluginError("plugin %r compiled but does not load: %s" % (name, why),
                              name=name, symbol=m.group(1) if m else None)


def _probe(name, path):
    """The layers that loading ``path`` registers, as a child process sees
    them; PluginError when the loader refuses it or loading it crashes;
    None when no child can tell (this interpreter cannot be started again:
    an embedding program), and the build is then loaded here unprobed."""
    off = ffi.offsetof("struct al_layer_desc", "name")
    if not sys.executable or not os.access(sys.executable, os.X_OK):
        return None
    try:
        proc = subprocess.run([sys.executable, "-I", "-S", "-c",
                               "MARK = %r\n%s" % (PROBE_MARK, _PROBE), lib_path(), path,
                               str(off)], capture_output=True, text=True, errors="replace",
                              timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        raise errors.PluginError("plugin %r did not finish loading in %d s (its constructors "
                                 "run at load)" % (name, PROBE_SECONDS), name=name) from None
    except OSError:
        return None
    # the answer counts when it came, whatever the exit (a destructor's crash
    # or LeakSanitizer's exit status at the child's end is not the load's)
    answer = [ln[len(PROBE_MARK):] for ln in proc.stdout.splitlines()
              if ln.startswith(PROBE_MARK)]
    if not answer and proc.returncode:
        _remove(path)
        raise errors.PluginError(
            "plugin %r compiled but loading it %s: %s" % (
                name, "ended by signal %d" % -proc.returncode if proc.returncode < 0 else
                "failed (exit status %d)" % proc.returncode,
                proc.stderr.strip()[-2000:] or "no message"), name=name)
    if not answer:
        return None  # not an interpreter that runs the probe: nothing learnt
    got = json.loads(answer[-1])
    if "error" in got:
        raise _load_error(name, path, got["error"])
    return got["added"]


def _check_layers(name, path, glue):
    """PluginError, before it is loaded here, for a build that would not
    register the layer ``name`` (nothing is registered then)."""
    added = _probe(name, path)
    if added is None or name in added:
        return
    if glue:
        raise errors.PluginError(
            "the registry refused plugin %r: its generated descriptor is invalid (wrong "
            "abi_version or desc_size, a bad name or parameter schema, or no create); nothing "
            "was registered" % name, name=name)
    other = " (it registers %s)" % ", ".join(map(repr, added)) if added else ""
    raise errors.PluginError(
        "plugin %r compiled but registered no layer named %r%s, so it was not loaded and "
        "nothing was registered: call AL_REGISTER_LAYER(desc) with .name = \"%s\", or pass "
        "create= and params=" % (name, name, other, name), name=name, registers=added)


def _build(name, modname, text, glue, flags, force):
    """The cached module of this source, built first when it is not there."""
    import cffi

    out_dir = cache_dir()
    libdir = os.path.dirname(lib_path())
    built = [os.path.join(out_dir, f) for f in os.listdir(out_dir)
             if f.startswith(modname + ".") and f.endswith(".so")]
    if built and not force:
        return built[0]
    builder = cffi.FFI()
    builder.cdef("int alloclab_plugin_status(void);" if glue else "")
    builder.set_source(modname, text, include_dirs=[include_dir()], library_dirs=[libdir],
                       libraries=["alloclab"], extra_compile_args=flags,
                       extra_link_args=["-Wl,-rpath," + libdir])
    with tempfile.TemporaryDirectory(prefix="alloclab-plugin-") as tmp:
        with _capture_fd2() as cap:
            try:
                so = builder.compile(tmpdir=tmp, verbose=False)
            except Exception as e:
                failure = e
            else:
                failure = None
        if failure is not None:
            msgs = [l for l in cap["text"].splitlines()
                    if "error" in l or "warning" in l or l.startswith(" ")]
            raise errors.PluginCompileError(
                "plugin %r does not compile:\n%s" % (name, "\n".join(msgs) or str(failure)),
                name=name, compiler_output=cap["text"]) from None
        dest = os.path.join(out_dir, os.path.basename(so))
        shutil.copy2(so, dest + ".tmp")
        os.replace(dest + ".tmp", dest)
    return dest


def _load(name, modname, path, glue):
    """Import the built module (its constructor registers the layer) and check
    that the layer ``name`` is now in the registry."""
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except (ImportError, OSError) as e:
        raise _load_error(name, path, str(e)) from None
    if glue:
        rc = mod.lib.alloclab_plugin_status()
        if rc:
            raise errors.PluginError("the registry refused plugin %r: %s" % (
                name, "name taken" if rc == -17 else
                "invalid descriptor (%s: wrong abi_version or desc_size, a bad name or parameter "
                "schema, or no create)" % strerror(rc)), name=name)
    if lib.al_layer_find(name.encode()) == ffi.NULL:
        raise errors.PluginError(
            "plugin %r compiled but registered no layer named %r: call "
            "AL_REGISTER_LAYER(desc) with .name = \"%s\", or pass create= and params=" % (
                name, name, name), name=name)
    _keep.append(mod)
    _sources[name] = {"path": os.path.realpath(path), "offset": None}


SOURCE_LIMIT = 16 << 20
"""The largest plugin source read (16 MiB): a larger file is no C source
someone wrote, and a huge sparse one would be read for ever."""


def read_source(path, what="plugin source"):
    """The text of the C source at ``path``: a regular file (alloclab.files
    refuses anything else without opening it) of UTF-8 text. A binary file
    (an object file, an executable given by mistake) is FileFormatError
    naming the first byte that is not UTF-8."""
    data = files.read_bytes(path, what, limit=SOURCE_LIMIT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise errors.FileFormatError(
            "%s %s is not C source: byte %d (0x%02x) is not UTF-8 text%s"
            % (what, path, e.start, data[e.start],
               " (it is an ELF binary)" if data[:4] == b"\x7fELF" else ""),
            path=path) from None


def compile_file(path, what="plugin source", **kwargs):
    """Compile a .c file that registers its own layer(s); returns the Plugins
    of every layer it added (the CLI's --plugin). ``what`` names the file in
    errors (read_source)."""
    source = read_source(path, what)
    before = set(schema.layers())
    base = re.sub(r"[^a-z0-9_-]", "_", os.path.splitext(os.path.basename(path))[0].lower())
    # the layer's name, as the source gives it (a descriptor's .name, or
    # AL_LAYER's first argument); else the file's
    m = re.search(r'\.name\s*=\s*"([a-z0-9_-]+)"', source) or \
        re.search(r'^\s*AL_LAYER\s*\(\s*([a-z0-9_]+)\s*,', source, re.M)
    name = m.group(1) if m else base
    plugin = compile(name, source, **kwargs)
    added = [n for n in schema.layers() if n not in before]
    for n in added:
        _sources.setdefault(n, {"path": os.path.realpath(plugin.module_path), "offset": None})
    return [plugin] + [Plugin(n, plugin.digest, plugin.module_path, 0) for n in added
                       if n != name]


# ---- the registry for extension modules built outside alloclab ----

_CAPSULE_NAME = b"alloclab._C_API"
_DESC_CAPSULE = b"alloclab.layer_desc"
_capi = ctypes.pythonapi
_capi.PyCapsule_New.restype = ctypes.py_object
_capi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_capi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capi.PyCapsule_IsValid.restype = ctypes.c_int
_capi.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]


def api_capsule():
    """A PyCapsule named "alloclab._C_API" holding ``const struct al_api *``."""
    addr = int(ffi.cast("uintptr_t", lib.al_get_api()))
    return _capi.PyCapsule_New(addr, _CAPSULE_NAME, None)


def register(desc):
    """Register a layer built elsewhere: ``desc`` is a PyCapsule named
    "alloclab.layer_desc", a cffi pointer to a ``struct al_layer_desc`` (from any
    FFI), or its address as an int. The memory must live as long as the
    process (the registry keeps the pointer). Returns the layer's name.

    Before the registry reads it, the descriptor is checked from Python
    without dereferencing anything: the address is aligned and readable, its
    strings are readable, its functions lie in executable memory. A bad value
    raises InvalidArgument (not a descriptor: not an address, unreadable) or
    PluginError (a descriptor the registry refuses), naming it; a wrong type
    raises ParameterTypeError."""
    kinds = "a PyCapsule named %r, a cffi pointer to struct al_layer_desc or its address " \
            "as an int" % _DESC_CAPSULE.decode()
    if type(desc).__name__ == "PyCapsule":
        if not _capi.PyCapsule_IsValid(desc, _DESC_CAPSULE):
            raise errors.InvalidArgument(
                "a capsule for register() must be named %r" % _DESC_CAPSULE.decode(),
                value=desc)
        addr = _capi.PyCapsule_GetPointer(desc, _DESC_CAPSULE) or 0
    elif isinstance(desc, int) and not isinstance(desc, bool):
        addr = desc
    elif isinstance(desc, ffi.CData) and ffi.typeof(desc).kind in ("pointer", "array"):
        addr = int(ffi.cast("uintptr_t", desc))  # any FFI: they share one backend
    else:
        raise errors.ParameterTypeError("register(%s): takes %s, not %s"
                                        % (_show(desc), kinds, type(desc).__name__), value=desc)
    where = "register(%s)" % (_show(desc),)
    _check_descriptor(addr, where)
    d = ffi.cast("const struct al_layer_desc *", addr)
    rc = lib.al_layer_register(d)
    if rc == -17:  # EEXIST
        raise errors.PluginError("%s: a layer named %r is already registered"
                                 % (where, cstr(d.name)), name=cstr(d.name))
    if rc:
        raise errors.PluginError(
            "%s: the registry refused the descriptor of %r (%s): check its parameter schema "
            "(names [a-z_][a-z0-9_]*, min <= default <= max, choices for an enum)"
            % (where, cstr(d.name), cstr(lib.al_strerror(rc))), name=cstr(d.name), code=rc)
    _keep.append(desc)
    name = cstr(d.name)
    _sources[name] = _object_of(addr)
    return name


def _show(v):
    if isinstance(v, int) and not isinstance(v, bool):
        return "%d" % v
    return repr(v) if len(repr(v)) < 80 else type(v).__name__


# ---- reading memory that may not be there, without touching it ----

_libc = ctypes.CDLL(None, use_errno=True)
_libc.write.restype = ctypes.c_ssize_t
_libc.write.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _read(addr, n):
    """n bytes at addr, or None when any of them is not readable: the
    kernel copies them into a pipe (EFAULT instead of a fault)."""
    if addr <= 0 or addr + n > 1 << 64:
        return None
    r, w = os.pipe()
    try:
        out = b""
        while len(out) < n:
            k = min(n - len(out), 4096)
            got = _libc.write(w, addr + len(out), k)
            if got <= 0:
                return None
            out += os.read(r, got)
        return out
    finally:
        os.close(r)
        os.close(w)


def _read_cstring(addr, limit=4096):
    """The NUL-terminated string at addr (bytes), or None when unreadable or
    longer than limit."""
    out = b""
    while len(out) < limit:
        chunk = _read(addr + len(out), min(_PAGE - (addr + len(out)) % _PAGE, limit - len(out)))
        if chunk is None:
            return None
        nul = chunk.find(b"\0")
        if nul >= 0:
            return out + chunk[:nul]
        out += chunk
    return None


def _executable(addr):
    """Whether addr lies in an executable mapping of this process."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                rng, perms = line.split()[:2]
                lo, hi = (int(x, 16) for x in rng.split("-"))
                if lo <= addr < hi:
                    return "x" in perms
    except OSError:  # pragma: no cover - /proc is there on Linux
        return True
    return False


def _check_descriptor(addr, where):
    """Everything the registry and the schema reader will dereference."""
    buf = _read_descriptor(addr, where)
    d = ffi.cast("const struct al_layer_desc *", buf)  # the copy: nothing else is read yet
    name = _descriptor_name(d, addr, where)
    _check_descriptor_pointers(d, name, where)
    _check_param_strings(d, name, where)


def _read_descriptor(addr, where):
    """A copy of the descriptor at addr, once it is known to be one of this ABI."""
    if addr == 0:
        raise errors.InvalidArgument("%s: a NULL descriptor" % where, value=addr)
    if not 0 < addr < 1 << 64:
        raise errors.InvalidArgument(
            "%s: %d is not an address (addresses are 1 to 2**64-1)" % (where, addr), value=addr)
    align = ffi.alignof("struct al_layer_desc")
    if addr % align:
        raise errors.InvalidArgument(
            "%s: 0x%x is not aligned to %d bytes: no struct al_layer_desc there"
            % (where, addr, align), value=addr)
    size = ffi.sizeof("struct al_layer_desc")
    raw = _read(addr, size)
    if raw is None:
        raise errors.InvalidArgument(
            "%s: address 0x%x is not readable memory (%d bytes): no struct al_layer_desc there"
            % (where, addr, size), value=addr)
    buf = ffi.new("char[]", raw)
    d = ffi.cast("const struct al_layer_desc *", buf)
    sizes = (size, ffi.offsetof("struct al_layer_desc", "min_align"))  # with, without it
    if d.abi_version != lib.AL_ABI_VERSION or d.desc_size not in sizes:
        raise errors.PluginError(
            "%s: not a descriptor of this alloclab: abi_version %d and desc_size %d, expected "
            "%d and %s (rebuild it against these headers)"
            % (where, d.abi_version, d.desc_size, lib.AL_ABI_VERSION,
               " or ".join(map(str, sizes))), value=addr)
    return buf


def _descriptor_name(d, addr, where):
    name = _read_cstring(int(ffi.cast("uintptr_t", d.name)), 64) if d.name else None
    if name is None or not _NAME_RE.match(name.decode("latin-1")):
        raise errors.PluginError(
            "%s: the descriptor's name %s is not a layer name ([a-z0-9_][a-z0-9_-]*, at most "
            "63 characters)" % (where, repr(name.decode("latin-1")) if name is not None
                                else "is NULL or unreadable"), value=addr)
    return name.decode()


def _check_descriptor_pointers(d, name, where):
    """Its functions point into executable memory, its doc string is readable."""
    for field in ("create", "max_size_of", "check_params"):
        fn = int(ffi.cast("uintptr_t", getattr(d, field)))
        if field == "create" and not fn:
            raise errors.PluginError("%s: layer %r has no create function" % (where, name),
                                     name=name)
        if fn and not _executable(fn):
            raise errors.PluginError(
                "%s: layer %r: %s (0x%x) does not point into executable memory"
                % (where, name, field, fn), name=name)
    for field in ("doc",):
        p = int(ffi.cast("uintptr_t", getattr(d, field)))
        if p and _read_cstring(p) is None:
            raise errors.PluginError("%s: layer %r: its %s string is not readable"
                                     % (where, name, field), name=name)


def _check_param_strings(d, name, where):
    """At most AL_MAX_PARAMS parameters, each with readable strings."""
    if d.nparams > lib.AL_MAX_PARAMS:
        raise errors.PluginError("%s: layer %r declares %d parameters, at most %d"
                                 % (where, name, d.nparams, lib.AL_MAX_PARAMS), name=name)
    if d.nparams:
        psize = ffi.sizeof("struct al_param_desc")
        praw = _read(int(ffi.cast("uintptr_t", d.params)), psize * d.nparams) \
            if d.params else None
        if praw is None:
            raise errors.PluginError("%s: layer %r: its %d parameter descriptions are not "
                                     "readable" % (where, name, d.nparams), name=name)
        pbuf = ffi.new("char[]", praw)
        ps = ffi.cast("const struct al_param_desc *", pbuf)
        for i in range(d.nparams):
            for field in ("name", "choices", "doc"):
                p = int(ffi.cast("uintptr_t", getattr(ps[i], field)))
                if (p or field == "name") and _read_cstring(p) is None:
                    raise errors.PluginError(
                        "%s: layer %r: parameter %d's %s string is not readable"
                        % (where, name, i, field), name=name)


# ---- where a plugin layer comes from: what a child process loads ----

class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


_libc.dladdr.restype = ctypes.c_int
_libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
_libc.dlinfo.restype = ctypes.c_int
_libc.dlinfo.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
_RTLD_DI_LINKMAP = 2
_RTLD_NOLOAD = 4

_sources = {}  # layer name -> {"path": shared object or None, "offset": descriptor offset}


def _load_bias(handle):
    """The load bias (link_map.l_addr) of a dlopen handle."""
    lm = ctypes.c_void_p()
    if _libc.dlinfo(handle, _RTLD_DI_LINKMAP, ctypes.byref(lm)) or not lm.value:
        return None
    return ctypes.c_size_t.from_address(lm.value).value


def _object_of(addr):
    """{"path", "offset"} of the shared object holding addr (path None when
    the memory belongs to none: a descriptor built at run time)."""
    info = _DlInfo()
    if not _libc.dladdr(addr, ctypes.byref(info)) or not info.dli_fname:
        return {"path": None, "offset": None}
    path = os.path.realpath(os.fsdecode(info.dli_fname))
    if not os.path.isfile(path) or path == os.path.realpath(sys.executable):
        return {"path": None, "offset": None}
    try:
        h = ctypes.CDLL(path, mode=_RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return {"path": None, "offset": None}
    bias = _load_bias(h._handle)
    return {"path": path, "offset": None if bias is None else addr - bias}


_builtin = set()  # layers whose descriptor lives in liballoclab.so


def is_plugin(name):
    """Whether layer ``name`` was added at run time (its descriptor does not
    live in liballoclab.so)."""
    if name in _sources:
        return True
    if name in _builtin:
        return False
    d = lib.al_layer_find(name.encode())
    if d == ffi.NULL:
        return False
    src = _object_of(int(ffi.cast("uintptr_t", d)))
    if src["path"] == os.path.realpath(lib_path()):
        _builtin.add(name)
        return False
    _sources[name] = src  # registered through the C API capsule: found by address
    return True


def plugin_layers(policy):
    """The plugin layers of a policy, top first (each once)."""

    out = []
    for n in Policy(policy).names:
        if n not in out and is_plugin(n):
            out.append(n)
    return out


def source(name, why="a child process"):
    """What a child process loads to get layer ``name``: {"name", "path",
    "offset"}. Raises PluginError when the layer lives in no shared object."""
    is_plugin(name)
    src = _sources.get(name) or {"path": None, "offset": None}
    if not src["path"]:
        raise errors.PluginError(
            "plugin layer %r was registered from memory that belongs to no shared object, so "
            "%s cannot load it: build it with alloclab.plugin.compile()/compile_file() or into "
            "a .so and register it from there, or pass isolate=False to run it in this process "
            "(a crash in it then ends this process)" % (name, why), name=name)
    if not os.path.isfile(src["path"]):
        raise errors.PluginError(
            "plugin layer %r was loaded from %s, which is gone, so %s cannot load it: compile "
            "it again, or pass isolate=False to run it in this process"
            % (name, src["path"], why), name=name)
    return {"name": name, "path": src["path"], "offset": src["offset"]}


def load(sources):
    """In a child process: load the shared objects that hold these plugin
    layers (their constructors register them; a descriptor registered by
    address in the parent is registered at the same offset here)."""
    for s in sources:
        if lib.al_layer_find(s["name"].encode()) != ffi.NULL:
            continue
        try:
            h = ctypes.CDLL(s["path"])
        except OSError as e:
            raise errors.PluginError("cannot load plugin layer %r from %s: %s"
                                     % (s["name"], s["path"], e), name=s["name"]) from None
        _keep.append(h)
        if lib.al_layer_find(s["name"].encode()) == ffi.NULL and s["offset"] is not None:
            bias = _load_bias(h._handle)
            if bias is not None:
                lib.al_layer_register(ffi.cast("const struct al_layer_desc *",
                                               bias + s["offset"]))
        if lib.al_layer_find(s["name"].encode()) == ffi.NULL:
            raise errors.PluginError("%s holds no layer %r in this process"
                                     % (s["path"], s["name"]), name=s["name"])
        _sources[s["name"]] = {"path": s["path"], "offset": s["offset"]}


# ---- plugins under the preload shim ----

def preload_archive():
    """The shim's objects as a static archive, shipped beside the library."""
    return os.path.join(os.path.dirname(lib_path()), "liballoclab-preload.a")


def preload_shim(path_or_source, name=None):
    """Build (cached) a preload shim with the plugin compiled in, so that
    ``alloclab preload --plugin FILE.c`` can run the plugin's layer under a
    real program. Returns the path of the shim .so."""
    if os.path.exists(str(path_or_source)):
        with open(path_or_source) as f:
            source = f.read()
    else:
        source = path_or_source
    ar = preload_archive()
    if not os.path.exists(ar):
        raise errors.AlloclabError("the shim archive is not built: %s is missing" % ar)
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    digest = hashlib.sha256((source + str(os.path.getmtime(ar)) + _headers_digest()).encode()
                            ).hexdigest()[:16]
    out = os.path.join(cache_dir(), "shim-%s.so" % digest)
    if os.path.exists(out):
        return out
    with tempfile.TemporaryDirectory(prefix="alloclab-shim-") as tmp:
        src = os.path.join(tmp, "plugin.c")
        with open(src, "w") as f:
            f.write('#include <alloclab/alloclab.h>\n#line 1 "plugin.c"\n' + source)
        cmd = cc + ["-shared"] + library_cflags(preload=True) + [
                    "-I" + include_dir(), src, "-Wl,--whole-archive", ar,
                    "-Wl,--no-whole-archive", "-lm", "-ldl", "-o", out + ".tmp"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise errors.PluginCompileError("the plugin does not compile into the shim:\n%s"
                                            % proc.stderr, compiler_output=proc.stderr)
        os.replace(out + ".tmp", out)
    return out
