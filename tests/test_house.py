"""The house rules, checked on the source tree: short functions, headers of one
role, a design header on every file, lock rules that are asserted rather than
implied by a suffix, and no comment that tells how the code was planned.

Each rule names the offenders, so a failure says what to split or fix.
"""
import ast
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_MAX_LINES = 80  # a C function, signature to closing brace
PY_MAX_LINES = 60  # a Python function, def to last line, docstring included
HEADER_MAX_LINES = 300  # a public header


def _files(*patterns):
    out = []
    for p in patterns:
        out += glob.glob(os.path.join(ROOT, p), recursive=True)
    return sorted(f for f in out if "/build/" not in f and "/.venv" not in f)


def _rel(f):
    return os.path.relpath(f, ROOT)


C_FILES = _files("csrc/**/*.c", "csrc/**/*.h")
PY_FILES = _files("python/alloclab/**/*.py")


def c_functions(path):
    """(name, first line, length) of every function defined in a C file in the
    kernel style clang-format gives this tree: the body opens with `{` alone
    in column 0 and closes with `}` alone in column 0."""
    lines = open(path).read().split("\n")
    out = []
    for i, line in enumerate(lines):
        if line != "{":
            continue
        j = i - 1
        while j > 0 and "(" not in lines[j]:
            j -= 1
        names = re.findall(r"(\w+)\s*\(", lines[j])
        k = i + 1
        while k < len(lines) and lines[k] != "}":
            k += 1
        out.append((names[0] if names else "?", j + 1, k - j + 1, lines[i + 1:k]))
    return out


def test_c_parser_sees_functions():
    # the rule below is only as good as this parser: it must find real functions
    fns = {n for n, *_ in c_functions(os.path.join(ROOT, "csrc/policies/buddy.c"))}
    assert {"buddy_alloc", "buddy_free"} <= fns


def test_c_functions_are_short():
    long = ["%s:%d %s (%d lines)" % (_rel(f), ln, n, size)
            for f in C_FILES for n, ln, size, _ in c_functions(f)
            if size > C_MAX_LINES and not n.endswith("_check")]
    assert not long, "C functions over %d lines (split them along their phases):\n  %s" % (
        C_MAX_LINES, "\n  ".join(long))


def test_python_functions_are_short():
    long = []
    for f in PY_FILES:
        for node in ast.walk(ast.parse(open(f).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1
                if size > PY_MAX_LINES:
                    long.append("%s:%d %s (%d lines)" % (_rel(f), node.lineno, node.name, size))
    assert not long, "Python functions over %d lines:\n  %s" % (PY_MAX_LINES, "\n  ".join(long))


def test_public_headers_have_one_role():
    big = ["%s (%d lines)" % (_rel(f), sum(1 for _ in open(f)))
           for f in _files("csrc/include/alloclab/*.h") if sum(1 for _ in open(f)) > HEADER_MAX_LINES]
    assert not big, "public headers over %d lines: %s" % (HEADER_MAX_LINES, big)


def test_umbrella_header_includes_every_public_header():
    umbrella = open(os.path.join(ROOT, "csrc/include/alloclab/alloclab.h")).read()
    names = {os.path.basename(f) for f in _files("csrc/include/alloclab/*.h")} - {"alloclab.h"}
    missing = [n for n in sorted(names) if '#include "%s"' % n not in umbrella]
    assert not missing, "alloclab.h does not include %s" % missing


def _c_design_header(path):
    """The first comment block after the SPDX line, in lines."""
    text = open(path).read()
    text = re.sub(r"\A/\* SPDX-License-Identifier: [^*]*\*/\n", "", text)
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    return m.group(1).strip().count("\n") + 1 if m else 0


def test_every_c_file_has_a_design_header():
    bare = [_rel(f) for f in C_FILES if _c_design_header(f) < 3]
    assert not bare, "C files without a design header (what, algorithm, invariants, locks):\n  " \
        + "\n  ".join(bare)


def test_every_python_module_has_a_design_header():
    bare = []
    for f in PY_FILES:
        doc = ast.get_docstring(ast.parse(open(f).read())) or ""
        if os.path.basename(f) in ("_version.py",):
            continue
        if doc.count("\n") < 2:
            bare.append(_rel(f))
    assert not bare, "Python modules without a design docstring:\n  " + "\n  ".join(bare)


PLANNING = re.compile(r"\b[Ii]ssue\s*#?\d+|\bitem\s+\d+\b|\(#\d+\)")


def test_no_code_refers_to_how_it_was_planned():
    files = C_FILES + PY_FILES + _files("tests/**/*.py", "tests/c/*.[ch]", "examples/**/*.c",
                                        "bench/*.py", "scripts/*", "Makefile", "setup.py")
    hits = []
    for f in files:
        if os.path.abspath(f) == os.path.abspath(__file__):
            continue
        for i, line in enumerate(open(f, errors="replace"), 1):
            if PLANNING.search(line):
                hits.append("%s:%d: %s" % (_rel(f), i, line.strip()))
    assert not hits, "references to issue/item numbers:\n  " + "\n  ".join(hits)


def _locked_functions():
    for f in C_FILES:
        for name, ln, size, body in c_functions(f):
            if name.endswith("_locked"):
                yield f, name, ln, body


def test_locked_functions_exist():
    assert sum(1 for _ in _locked_functions()) >= 10


@pytest.mark.parametrize("f,name,ln,body", [pytest.param(*x, id=x[1]) for x in _locked_functions()])
def test_every_locked_function_asserts_its_lock(f, name, ln, body):
    # among the first statements: the rule the suffix names is checked (held by
    # this context where the function has one, held by someone where it has not)
    head = "\n".join(body[:8])
    assert re.search(r"\bal_\w*assert_(held|locked)\s*\(", head), \
        "%s:%d %s does not assert its lock near the top" % (_rel(f), ln, name)


# The Python rooms, bottom up. A module imports only its own room and the
# rooms below it; the package's root holds what every room stands on.
PY_ROOMS = ["", "cbind", "host", "traces", "policies", "results", "judge", "measure", "shim",
            "present", "reproduce", "cli"]
ROOM_MAX_MODULES = 12  # a room's __init__, its door, not counted
# The imports that run inside a function, each with its reason; every other
# import of an alloclab module is at module level.
FUNCTION_IMPORTS = {
    ("alloclab.results.result", "alloclab.present.plot"):
        "Result.plot() draws with the presentation room, which sits above results",
    ("alloclab.results.result", "alloclab.present.table"):
        "Result.table() returns the presentation room's Table, which sits above results",
    ("alloclab.judge.compare", "alloclab.present.plot"):
        "Comparison.heatmap() draws with the presentation room, which sits above judge",
    ("alloclab.measure._peer", "alloclab.errors"):
        "the peer child reports even a failed import of alloclab to its parent as a line",
    ("alloclab.measure._peer", "alloclab.policies.peers"): "as above (the peer child)",
    ("alloclab.measure._peer", "alloclab.policies.plugin"): "as above (the peer child)",
    ("alloclab.measure._peer", "alloclab.measure.run"): "as above (the peer child)",
    ("alloclab.cli.reproduce", "alloclab.policies.libarena_real"):
        "the real-code layer compiles a tree on demand; loaded only when a tree is named",
    ("alloclab.reproduce.libarena", "alloclab.policies.libarena_real"): "as above (a tree)",
    ("alloclab.reproduce.libarena_fidelity", "alloclab.policies.libarena_real"):
        "as above (a tree)",
    ("alloclab.reproduce.libarena_fidelity", "alloclab.measure.run"):
        "reproduce sits beside measure; the report plans its runs only when asked",
    ("alloclab.policies.libarena_real", "alloclab.cbind._ffi"):
        "the layer's loader reaches the library only when a tree is loaded",
    ("alloclab.measure.sim", "alloclab.measure.run"):
        "a calibration plans and runs cells; run imports sim for every simulated cell",
}


def _py_modules():
    """{dotted module name: file} of the package."""
    mods = {}
    for f in PY_FILES:
        rel = os.path.relpath(f, os.path.join(ROOT, "python")).replace("/", ".")[:-3]
        mods[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = f
    return mods


def _imports(m, f, mods):
    """(target module, imported name or None, inside a function, line) of every
    import of an alloclab module in module m."""
    pkg = m if f.endswith("__init__.py") else m.rsplit(".", 1)[0]
    out = []

    def visit(node, in_fn):
        for n in ast.iter_child_nodes(node):
            fn = in_fn or isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(n, ast.ImportFrom) and (n.level or (n.module or "").startswith(
                    "alloclab")):
                parts = pkg.split(".")[:len(pkg.split(".")) - (n.level - 1)] if n.level else []
                target = ".".join(parts + ([n.module] if n.module else []))
                for a in n.names:
                    sub = target + "." + a.name
                    out.append((sub, None, in_fn, n.lineno) if sub in mods
                               else (target, a.name, in_fn, n.lineno))
            elif isinstance(n, ast.Import):
                out.extend((a.name, None, in_fn, n.lineno) for a in n.names
                           if a.name.startswith("alloclab"))
            visit(n, fn)
    visit(ast.parse(open(f).read()), False)
    return out


def _room(m):
    parts = m.split(".")
    return PY_ROOMS.index(parts[1]) if len(parts) > 2 or (
        len(parts) == 2 and parts[1] in PY_ROOMS) else 0


def _module_imports():
    """{module: the alloclab modules it imports}, at module level or inside a
    function alike (a lazy import is a dependency too); the package itself
    (alloclab/__init__) is left out, as every module is inside it."""
    mods = _py_modules()
    return {m: {t for t, _, _, _ in _imports(m, f, mods) if t in mods and t not in (m, "alloclab")}
            for m, f in mods.items()}


def test_every_module_is_in_a_room_of_a_few_modules():
    rooms = {}
    for m in _py_modules():
        parts = m.split(".")
        if len(parts) > 2 or (len(parts) == 2 and parts[1] in PY_ROOMS):
            assert parts[1] in PY_ROOMS, "%s is in no room of PY_ROOMS" % m
            if len(parts) > 2:
                rooms.setdefault(parts[1], []).append(m)
            rooms.setdefault(parts[1], [])
        else:
            rooms.setdefault("", []).append(m)
    assert set(rooms) == set(PY_ROOMS), sorted(rooms)
    big = {r: len(ms) for r, ms in rooms.items() if len(ms) > ROOM_MAX_MODULES}
    assert not big, "rooms of more than %d modules: %s" % (ROOM_MAX_MODULES, big)


def test_imports_only_go_down_the_rooms():
    mods = _py_modules()
    up = []
    for m, f in mods.items():
        if m in ("alloclab", "alloclab.__main__"):
            continue  # the package's face and its command line stand on every room
        for t, _, in_fn, ln in _imports(m, f, mods):
            if t in mods and _room(t) > _room(m) and (m, t) not in FUNCTION_IMPORTS:
                up.append("%s:%d imports %s, a room above it" % (m, ln, t))
    assert not up, "imports back up the rooms:\n  " + "\n  ".join(up)


def test_function_level_imports_are_the_named_exceptions():
    mods = _py_modules()
    found, stray = set(), []
    for m, f in mods.items():
        for t, _, in_fn, ln in _imports(m, f, mods):
            if in_fn and t in mods:
                found.add((m, t))
                if (m, t) not in FUNCTION_IMPORTS:
                    stray.append("%s:%d imports %s inside a function" % (m, ln, t))
    assert not stray, "imports inside functions, not named in FUNCTION_IMPORTS with a " \
        "reason:\n  " + "\n  ".join(stray)
    stale = sorted(set(FUNCTION_IMPORTS) - found)
    assert not stale, "FUNCTION_IMPORTS names imports that are gone: %s" % stale


def test_no_module_imports_another_modules_private_names():
    mods = _py_modules()
    private = ["%s:%d imports %s.%s" % (m, ln, t, name)
               for m, f in mods.items() for t, name, _, ln in _imports(m, f, mods)
               if name and name.startswith("_") and not name.startswith("__") and t != m]
    assert not private, "private names borrowed across modules:\n  " + "\n  ".join(private)


def test_old_module_paths_are_the_same_modules():
    import importlib

    import alloclab
    from alloclab import _moved
    for old, new in _moved.MOVED.items():
        assert importlib.import_module("alloclab." + old) is \
            importlib.import_module("alloclab." + new), old
        assert getattr(alloclab, old) is importlib.import_module("alloclab." + new) or \
            old in alloclab.__all__  # alloclab.run is run(), alloclab.trace the module


# The C rooms, bottom up: core (the layer contract and its services), then the
# builder (a spec turned into a stack of layers), then the engine and the
# rest. Core is what core.h includes; nothing in csrc/core reaches above it.
CORE_UMBRELLA = "csrc/include/alloclab/core.h"
C_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _core_headers():
    """The public headers that belong to core: core.h and what it includes."""
    text = open(os.path.join(ROOT, CORE_UMBRELLA)).read()
    return {"core.h"} | set(C_INCLUDE.findall(text))


def _c_calls(text):
    """The al_* names a C text calls, its comments left out."""
    code = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    return set(re.findall(r"\b(al_\w+)\s*\(", code))


def _api_functions(header):
    text = open(os.path.join(ROOT, "csrc/include/alloclab", header)).read()
    return set(re.findall(r"\bAL_API\b[^;(]*?\b(\w+)\s*\(", text))


def test_core_includes_only_core():
    core = _core_headers()
    assert {"ops.h", "registry.h", "layer.h"} <= core  # the umbrella is read
    up = []
    for f in _files("csrc/core/*.[ch]") + ["csrc/include/alloclab/" + h for h in sorted(core)]:
        f = os.path.join(ROOT, f)
        public = "/include/alloclab/" in f
        for inc in C_INCLUDE.findall(open(f).read()):
            name = inc[len("alloclab/"):] if inc.startswith("alloclab/") else inc
            ok = (name in core) if public or inc.startswith("alloclab/") else "/" not in inc
            if not ok:
                up.append("%s includes %s" % (_rel(f), inc))
    assert not up, "core reaches up into the builder or the engine:\n  " + "\n  ".join(up)


def test_core_calls_nothing_above_it():
    above = set()
    for h in os.listdir(os.path.join(ROOT, "csrc/include/alloclab")):
        if h.endswith(".h") and h not in _core_headers() and h != "alloclab.h":
            above |= _api_functions(h)
    assert {"al_stack_create", "al_run_check", "al_spec_parse"} <= above
    calls = ["%s: %s" % (_rel(f), n) for f in _files("csrc/core/*.[ch]")
             for n in sorted(_c_calls(open(f).read()) & above)]
    assert not calls, "core calls up into the builder or the engine:\n  " + "\n  ".join(calls)


# What the layer skeleton (alloclab/layer.h) writes, and a built-in layer
# therefore never writes by hand.
HAND_WRITTEN_GLUE = re.compile(
    r"static const struct al_layer_desc|AL_REGISTER_LAYER\(|_destroy\(struct al_allocator")
SKELETON = re.compile(r"^AL_(LAYER|COUNTED_LAYER|LAYER_SHUTDOWN|LAYER_VARIANT)\(", re.M)


def _builtin_layer_files():
    return _files("csrc/policies/*.c", "csrc/pages/*.c")


def test_builtin_layers_use_the_skeleton():
    files = _builtin_layer_files()
    assert len(files) >= 13
    glue = ["%s:%d: %s" % (_rel(f), i, line.strip())
            for f in files for i, line in enumerate(open(f), 1) if HAND_WRITTEN_GLUE.search(line)]
    bare = [_rel(f) for f in files if not SKELETON.search(open(f).read())]
    assert not glue and not bare, (
        "built-in layers hand-write what AL_LAYER writes (destroy, ops, descriptor):\n  %s"
        % "\n  ".join(glue + ["%s: no AL_LAYER" % f for f in bare]))


def test_preload_shim_runs_no_engine():
    # the shim builds its stack with the builder (spec, stack, guard) alone
    engine = set()
    for h in ("workload.h", "measure.h", "run.h"):
        engine |= _api_functions(h)
    assert "al_run_start" in engine or "al_run" in engine
    calls = ["%s: %s" % (_rel(f), n) for f in _files("csrc/preload/*.c")
             for n in sorted(_c_calls(open(f).read()) & engine)]
    assert not calls, "the preload shim calls into the engine:\n  " + "\n  ".join(calls)


BUILDER_HEADERS = {"stack.h", "spec.h"}


def test_builder_stands_on_core_alone():
    # spec -> registry -> stack -> guard: below the engine, so the shim needs no engine
    files = _files("csrc/builder/*.c")
    assert {os.path.basename(f) for f in files} >= {"spec.c", "stack.c", "guard.c"}
    allowed = _core_headers() | BUILDER_HEADERS
    engine = set()
    for h in ("workload.h", "measure.h", "run.h"):
        engine |= _api_functions(h)
    up = []
    for f in files:
        text = open(f).read()
        for inc in C_INCLUDE.findall(text):
            name = inc[len("alloclab/"):] if inc.startswith("alloclab/") else None
            if not (name in allowed or inc.startswith("../core/")):
                up.append("%s includes %s" % (_rel(f), inc))
        up += ["%s calls %s" % (_rel(f), n)
               for n in sorted(_c_calls(text) & engine)]
    assert not up, "the builder reaches up into the engine:\n  " + "\n  ".join(up)


def test_reproduce_is_an_attribute_imported_on_first_use():
    """The docs call al.reproduce.libarena() after ``import alloclab as al``:
    the room is there when read, and costs nothing to a program that never
    reads it."""
    code = ("import sys, alloclab as al\n"
            "assert 'alloclab.reproduce' not in sys.modules\n"
            "print(al.reproduce.libarena.__module__, al.reproduce.vmalloc.__module__,\n"
            "      al.reproduce.local_storage.__module__)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["alloclab.reproduce.libarena", "alloclab.reproduce.vmalloc",
                                "alloclab.reproduce.local_storage"]
