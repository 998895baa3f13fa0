"""libarena's own allocator, run as a layer: the real buddy.bpf.c, not a model.

    import alloclab as al
    name = al.libarena_real.load("/path/to/linux/tools/testing/selftests/bpf/libarena")
    al.run("malloc-free", "percpu > transfer > %s" % name)
    al.run("malloc-free", "libarena(tree=/path/to/libarena)")   # the same, in a spec

    alloclab libarena test /path/to/libarena      # the tree's selftests, in user space
    alloclab preload --policy 'libarena(tree=/path/to/libarena)' -- CMD   # a program's malloc

A *tree* is the libarena folder of a kernel checkout, or any copy of it:
``src/buddy.bpf.c``, ``src/common.bpf.c`` and ``include/libarena/``. Its
sources are compiled at first use as user-space C (``-D__BPF__
-D__BPF_FEATURE_ADDR_SPACE_CAST``) against alloclab's own stand-in for the
BPF environment (``alloclab/bpfcompat/``: vmlinux.h, the helper macros, the
arena kfuncs on a 4-GiB-aligned arena, the arena spin lock as alloclab's
lock in arena mode, can_loop as a loop budget, printk counted), which is
searched before the tree's ``include/``: the tree's own copies of the
helper headers (bpf_arena_common.h, bpf_arena_spin_lock.h, bpf_atomic.h,
bpf_may_goto.h) are shadowed, so a change to them is not measured (the
Result's note lists them: shadowed_headers()). What is
measured is the tree's algorithm compiled natively by the host compiler,
not BPF's JIT'd code, may_goto or the kernel's arena lock.

The object is cached by content (every file of the tree's src/, include/
and selftests/ that is compiled, not the shadowed headers, the stand-in,
the flags without the tree's path, and the compiler),
as plugins are, under ``plugin.cache_dir()``. Each allocator instance loads
a private copy of it (its own globals and its own arena: see
bpfcompat/layer.c), so fresh stacks and two trees never share state.

The layer is registered as ``libarena`` for the tree named by
``$ALLOCLAB_LIBARENA`` and as ``libarena_<hash>`` for a tree named in a spec
(``libarena(tree=PATH)``, rewritten to that name before the spec is parsed,
with the layer's other parameters kept).

Under the preload shim (alloclab.shim.preload.command), a policy with such a
layer gets a shim with layer.c compiled in for each tree (preload_shim()),
cached by content; each process image loads its private copy of the tree's
object when it builds its policy.

Errors: LibarenaTreeError (not a libarena tree), LibarenaCompileError (the
compiler's first errors, with file and line; a helper the stand-in lacks is
named as such), LibarenaInitError (the tree's buddy_init failed). Nothing is
left behind by a failed build: objects are written under a temporary name
and renamed when whole.
"""

import ctypes
import hashlib
import json
import math
import numbers
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

from .. import errors
from . import plugin, policy

ENV_TREE = "ALLOCLAB_LIBARENA"
ENV_NOTES = "ALLOCLAB_LIBARENA_NOTES"  # where instances write their printk texts (layer.c)
ALR_EV_PRINTK = 1  # enum alr_event (bpfcompat/alr.h)
COMPAT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bpfcompat")
_RUNTIME = ("runtime.c", "bind.c")
CFLAGS = ["-std=gnu11", "-O2", "-g", "-fPIC", "-fvisibility=hidden", "-pthread",
          "-D__BPF__", "-D__BPF_FEATURE_ADDR_SPACE_CAST",
          "-Werror=implicit-function-declaration", "-fno-strict-aliasing"]
LDFLAGS = ["-shared", "-pthread", "-Wl,-Bsymbolic", "-Wl,-z,defs"]
# An ASan build of the tree (in alloclab's sanitizer builds, or asked for with
# $ALLOCLAB_LIBARENA_ASAN=1): the tree's own ASan hooks on (BPF_ARENA_ASAN),
# standing on alloclab's poisoning (bpfcompat/asan_rt.c), its accesses checked.
ASAN_CFLAGS = ["-fsanitize=address", "-fno-omit-frame-pointer", "-DBPF_ARENA_ASAN"]
ENV_ASAN = "ALLOCLAB_LIBARENA_ASAN"
_REQUIRED = ("src/buddy.bpf.c", "src/common.bpf.c", "include/libarena/buddy.h",
             "include/libarena/common.h")
# How long one selftest program may run before its child is killed and the
# program reported as timed out (seconds; run_tests(timeout=), --timeout).
DEFAULT_TEST_TIMEOUT = 30.0
MAX_TEST_TIMEOUT = 86400.0
_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)
_PROG_RE = re.compile(r'SEC\(\s*"syscall"\s*\)\s*(?:__weak\s+|static\s+|__always_inline\s+)*'
                      r'int\s+([A-Za-z_]\w*)\s*\(\s*(?:void)?\s*\)')


class LibarenaTreeError(errors.PluginError, ValueError):
    """The folder given is not a libarena tree (or is not there)."""


class LibarenaCompileError(errors.PluginCompileError):
    """The tree does not compile against alloclab's BPF stand-in."""


class LibarenaInitError(errors.PluginError):
    """The tree compiled, but its buddy_init failed."""


def default_tree():
    """The tree named by $ALLOCLAB_LIBARENA, or None."""
    return os.environ.get(ENV_TREE) or None


def check_tree(tree):
    """The tree's absolute path, once it looks like a libarena tree."""
    if tree is None:
        raise LibarenaTreeError(
            "no libarena tree given: name one (libarena(tree=PATH), --tree PATH) or set $%s "
            "to the libarena folder of a kernel checkout "
            "(tools/testing/selftests/bpf/libarena)" % ENV_TREE)
    path = os.path.abspath(os.path.expanduser(str(tree)))
    if not os.path.isdir(path):
        what = ("it is a file, not a folder" if os.path.isfile(path) else
                "it is not a folder" if os.path.exists(path) else "no such folder")
        raise LibarenaTreeError("libarena tree %s: %s" % (path, what), value=str(tree))
    missing = [f for f in _REQUIRED if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise LibarenaTreeError(
            "%s is not a libarena tree: %s missing (a tree has src/buddy.bpf.c, "
            "src/common.bpf.c and include/libarena/)" % (path, ", ".join(missing)),
            value=str(tree))
    return path


def _files(tree, sub, suffixes):
    d = os.path.join(tree, sub)
    out = []
    for root, _, names in os.walk(d):
        out += [os.path.join(root, n) for n in names if n.endswith(suffixes)]
    return sorted(out)


def selftest_programs(tree, asan=False):
    """The selftest programs the tree's runner would run (userspace.h picks
    SEC("syscall") programs named test_*, and asan_test_* in an ASan build;
    parallel_test_* are not run here): [(file, name)] in file order."""
    prefixes = ("test_", "asan_test_") if asan else ("test_",)
    out = []
    for f in _files(tree, "selftests", (".bpf.c",)):
        with open(f, errors="replace") as fh:
            text = fh.read()
        out += [(f, n) for n in _PROG_RE.findall(text) if n.startswith(prefixes)]
    return out


def asan_build():
    """Whether trees are built as ASan builds: alloclab itself is a sanitizer
    build (its build flags name -fsanitize=address), or $ALLOCLAB_LIBARENA_ASAN
    asks (1; 0 or empty: no)."""
    env = os.environ.get(ENV_ASAN, "")
    if env not in ("", "0"):
        return True
    from ..cbind._ffi import cstr, lib

    return "sanitize=address" in cstr(lib.al_build_flags())


def _asan_loaded():
    """Whether this process runs with AddressSanitizer's runtime (preloaded or
    linked in): an ASan build of a tree can only be loaded into such a one."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return False
    return "libasan" in maps or "libclang_rt.asan" in maps


def _check_loadable(obj):
    """Refuse to load an ASan build of a tree into a process without ASan's
    runtime (ASan would end the process at the load)."""
    if obj.endswith("-asan.so") and not _asan_loaded():
        raise LibarenaInitError(
            "an ASan build of a libarena tree (%s, or alloclab built with -fsanitize=address) "
            "loads only into a process started with AddressSanitizer's runtime: run it with "
            "LD_PRELOAD=%s ASAN_OPTIONS=detect_leaks=0, or unset %s" % (
                ENV_ASAN + "=1", asan_runtime() or "libasan.so", ENV_ASAN))


def asan_runtime():
    """The compiler's ASan runtime (to preload into a process that loads an
    ASan build of a tree), or None."""
    try:
        out = subprocess.run(_cc() + ["-print-file-name=libasan.so"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if os.path.isabs(out) and os.path.exists(out) else None


def _features(tree):
    """What the tree has, read from its text: the libarena chunk layout
    (block sizes from the order nibbles), native bulk calls, per-CPU caches
    of its own (its sources, preprocessed as they are compiled, call
    bpf_get_smp_processor_id: a tree that asks which CPU it runs on keeps
    something per CPU), in a plain build and in an ASan build (the seed's
    patch switches its caches off under BPF_ARENA_ASAN)."""
    with open(os.path.join(tree, "include/libarena/buddy.h"), errors="replace") as f:
        header = f.read()
    src = ""
    for f in _files(tree, "src", (".bpf.c",)):
        with open(f, errors="replace") as fh:
            src += fh.read()
    layout = "struct buddy_chunk" in header and re.search(r"\borders\s*\[", header) is not None
    bulk = all(re.search(r"\b%s\s*\([^;{]*\)\s*\{" % fn, src)
               for fn in ("buddy_alloc_bulk", "buddy_free_bulk"))
    named = _CPU_RE.search(src) is not None
    return {"libarena_layout": layout, "bulk": bulk,
            "own_caches": named and _calls_cpu_id(tree, False),
            "own_caches_asan": named and _calls_cpu_id(tree, True)}


_CPU_RE = re.compile(r"\bbpf_get_smp_processor_id\s*\(")
_cpu_seen = {}  # (tree, asan, the sources' mtimes) -> bool


def _calls_cpu_id(tree, asan):
    """Whether the tree's src/*.bpf.c, preprocessed as they are compiled
    (asan: as an ASan build, BPF_ARENA_ASAN defined), call
    bpf_get_smp_processor_id in the tree's own lines (the stand-in's helper
    header defines it, which does not count). A unit the preprocessor
    refuses counts as calling it (the compile says why)."""
    srcs = _files(tree, "src", (".bpf.c",))
    key = (tree, asan, tuple((f, os.path.getmtime(f)) for f in srcs))
    if key in _cpu_seen:
        return _cpu_seen[key]
    flags = CFLAGS + (ASAN_CFLAGS if asan else []) + [
        "-I" + COMPAT_DIR, "-I" + os.path.join(tree, "include"), "-I" + os.path.dirname(tree)]
    found = False
    for f in srcs:
        proc = subprocess.run(_cc() + flags + ["-E", f], capture_output=True, text=True)
        if proc.returncode:
            found = True
            break
        here = None
        for line in proc.stdout.splitlines():
            m = re.match(r'# \d+ "([^"]*)"', line)
            if m:
                here = os.path.abspath(m.group(1))
            elif here and here.startswith(tree + os.sep) and _CPU_RE.search(line):
                found = True
                break
        if found:
            break
    _cpu_seen[key] = found
    return found


def _cc():
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def _cc_id(cc):
    try:
        return subprocess.run(cc + ["--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def _sources(tree, selftests):
    srcs = [os.path.join(tree, "src", "common.bpf.c"), os.path.join(tree, "src", "buddy.bpf.c")]
    if selftests:
        srcs += _files(tree, "selftests", (".bpf.c",))
    return srcs


def _progs_c(progs):
    """The generated unit that lists the selftest programs for the runner."""
    decls = "".join("int %s(void);\n" % n for _, n in progs)
    rows = "".join('\t{ "%s", %s },\n' % (n, n) for _, n in progs)
    return ('#include <vmlinux.h>\n#include "alr.h"\n%s'
            "const struct alr_prog alr_progs[] = {\n%s\t{ 0, 0 }\n};\n"
            "const unsigned alr_nprogs = %d;\n" % (decls, rows, len(progs)))


def _flags(tree, feats, cc_id):
    """The compile flags: the stand-in before the tree's include/ (and the
    folder above the tree, as the kernel's Makefile has it); the tree's
    path is left out of the object (file names relative to the tree), so
    two copies of one tree build the same object. GCC on x86-64
    gets TLS descriptors: can_loop reads a thread-local budget, which they
    make one load in a dlopen()ed object."""
    gnu2 = sysconfig.get_platform().endswith("x86_64") and "clang" not in cc_id
    return CFLAGS + ["-DALR_LIBARENA_LAYOUT=%d" % feats["libarena_layout"],
                     "-I" + COMPAT_DIR, "-I" + os.path.join(tree, "include"),
                     "-I" + os.path.dirname(tree), "-ffile-prefix-map=%s/=" % tree] + (
                         ["-mtls-dialect=gnu2"] if gnu2 else [])


def _compat_headers():
    """The stand-in's headers, relative to COMPAT_DIR (vmlinux.h, bpf/bpf_helpers.h, ...)."""
    return sorted(os.path.relpath(f, COMPAT_DIR) for f in _files(COMPAT_DIR, "", (".h",)))


def shadowed_headers(tree):
    """The tree's own headers that the stand-in shadows (the same path under
    include/ as one of alloclab's bpfcompat/, which is searched first): they
    are not compiled, so a change to them is not measured. Relative to the
    tree, sorted."""
    return [os.path.join("include", h) for h in _compat_headers()
            if os.path.isfile(os.path.join(tree, "include", h))]


def _digest(tree, srcs, progs_c, flags, cc, cc_id):
    """The content hash of what is compiled: the tree's sources and its
    headers but the shadowed ones, the stand-in, the flags (the tree's path
    written as <tree>, so two copies of one tree share the object and the
    layer name) and the compiler."""
    h = hashlib.sha256()
    skip = {os.path.join(tree, f) for f in shadowed_headers(tree)}
    for f in sorted(set(srcs + _files(tree, "include", (".h",))) - skip):
        with open(f, "rb") as fh:
            h.update(os.path.relpath(f, tree).encode() + b"\0" + fh.read() + b"\0")
    for f in sorted(_files(COMPAT_DIR, "", (".c", ".h"))):
        with open(f, "rb") as fh:
            h.update(b"compat/" + os.path.relpath(f, COMPAT_DIR).encode() + b"\0" + fh.read())
    where = {"-I" + os.path.join(tree, "include"): "-I<tree>/include",
             "-I" + os.path.dirname(tree): "-I<tree>/..",
             "-ffile-prefix-map=%s/=" % tree: "-ffile-prefix-map=<tree>/="}
    flags = [where.get(f, f) for f in flags]
    h.update(progs_c.encode() + "\0".join(flags + cc).encode() + cc_id.encode())
    return h.hexdigest()[:16]


def _object_dir():
    d = os.path.join(os.path.dirname(plugin.cache_dir()), "libarena")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise errors.InvalidArgument("cannot make the folder %s for built libarena trees: %s; "
                                     "set $ALLOCLAB_CACHE to a folder alloclab may write"
                                     % (d, e.strerror or e), name="ALLOCLAB_CACHE",
                                     value=d) from None
    return d


def _first_errors(text, limit=8):
    """The compiler's first error lines (with file:line), and what they mean
    for a helper the stand-in lacks."""
    lines = [l for l in text.splitlines()
             if " error: " in l or l.startswith("error:") or "undefined reference" in l]
    out = []
    for l in lines[:limit]:
        m = re.search(r"(?:implicit declaration of function|undefined reference to) "
                      r"['‘`\"]?([A-Za-z_]\w*)", l)
        if m:
            out.append("%s\n  (the tree calls %s, which alloclab's BPF stand-in does not "
                       "provide)" % (l, m.group(1)))
        else:
            out.append(l)
    return "\n".join(out) or text.strip()[-2000:]


def build(tree, selftests=False, asan=None):
    """The compiled object of this tree (cached by content): its path. With
    selftests, the tree's selftests/*.bpf.c are compiled in with a table of
    their test_* programs (and asan_test_* in an ASan build). asan: an ASan
    build (BPF_ARENA_ASAN, -fsanitize=address, the hooks on alloclab's
    poisoning); None: asan_build()."""
    asan = asan_build() if asan is None else asan
    tree = check_tree(tree)
    feats = _features(tree)
    if not feats["libarena_layout"]:
        with open(os.path.join(tree, "include/libarena/buddy.h"), errors="replace") as f:
            if "buddy_usable_size" not in f.read():
                raise LibarenaTreeError(
                    "%s: its buddy.h has neither libarena's struct buddy_chunk (block sizes are "
                    "read from its order nibbles) nor a declaration of buddy_usable_size("
                    "struct buddy __arena *, void __arena *)" % tree, value=tree)
    progs = selftest_programs(tree, asan) if selftests else []
    srcs = _sources(tree, selftests)
    progs_c = _progs_c(progs)
    cc = _cc()
    cc_id = _cc_id(cc)
    flags = _flags(tree, feats, cc_id) + (ASAN_CFLAGS if asan else [])
    digest = _digest(tree, srcs, progs_c, flags, cc, cc_id)
    out = os.path.join(_object_dir(), "tree-%s%s%s.so" % (
        digest, "-tests" if selftests else "", "-asan" if asan else ""))
    if os.path.exists(out):
        return out
    with tempfile.TemporaryDirectory(prefix="alloclab-libarena-") as tmp:
        with open(os.path.join(tmp, "alr_progs.c"), "w") as f:
            f.write(progs_c)
        units = srcs + [os.path.join(COMPAT_DIR, f) for f in _RUNTIME + (
            ("asan_rt.c",) if asan else ())] + [os.path.join(tmp, "alr_progs.c")]
        objs = []
        for i, u in enumerate(units):
            o = os.path.join(tmp, "%d.o" % i)
            proc = subprocess.run(cc + flags + ["-c", u, "-o", o], capture_output=True,
                                  text=True)
            if proc.returncode:
                raise LibarenaCompileError(
                    "libarena tree %s does not compile as user-space C against alloclab's BPF "
                    "stand-in (%s):\n%s" % (tree, os.path.relpath(u, os.path.dirname(tree))
                                            if u.startswith(tree) else os.path.basename(u),
                                            _first_errors(proc.stderr)),
                    name="libarena", compiler_output=proc.stderr)
            objs.append(o)
        so = os.path.join(tmp, "tree.so")
        proc = subprocess.run(cc + LDFLAGS + (["-fsanitize=address"] if asan else []) + objs +
                              ["-o", so], capture_output=True, text=True)
        if proc.returncode:
            raise LibarenaCompileError(
                "libarena tree %s does not link against alloclab's BPF stand-in:\n%s" % (
                    tree, _first_errors(proc.stderr)),
                name="libarena", compiler_output=proc.stderr)
        os.replace(so, out)  # whole or not at all
    return out


# ---- a private copy in this process (the selftest runner, the init check) ----

_ffi = None


def _cffi():
    global _ffi
    if _ffi is None:
        import cffi

        ffi = cffi.FFI()
        with open(os.path.join(COMPAT_DIR, "alr.h")) as f:
            text = f.read()
        body = text[text.index("enum alr_event"):text.index("typedef int (*alr_bind_fn)")]
        ffi.cdef(re.sub(r"#define ALR_ABI \d+", "", body) +
                 "int alr_bind(const struct alr_env *env, struct alr_entry *out);")
        _ffi = ffi
    return _ffi


class Copy:
    """A private copy of a compiled tree, bound with no driver (its own
    test-and-set lock): for the selftests and the init check."""

    def __init__(self, obj):
        ffi = _cffi()
        _check_loadable(obj)
        # kept open while loaded: the loader knows a copy by its path first
        self.fd = os.memfd_create("alloclab-libarena")
        try:
            with open(obj, "rb") as f:
                os.write(self.fd, f.read())
            self.lib = ffi.dlopen("/proc/self/fd/%d" % self.fd)
        except BaseException:
            os.close(self.fd)
            raise
        self.entry = ffi.new("struct alr_entry *")
        rc = self.lib.alr_bind(ffi.NULL, self.entry)
        if rc:
            raise LibarenaInitError("the compiled tree could not reserve its arena (%s)"
                                    % os.strerror(-rc))

    def last_msg(self):
        return _cffi().string(self.entry.last_msg()).decode("utf-8", "replace")

    def stat(self, ev):
        return int(self.entry.stat(ev))

    def close(self):
        if self.lib is not None:
            self.entry.unbind()
            _cffi().dlclose(self.lib)
            self.lib = None
            os.close(self.fd)


def check_init(obj, tree):
    """Raise LibarenaInitError unless the tree's buddy_init succeeds; else
    the largest request the tree serves (0: unknown)."""
    c = Copy(obj)
    try:
        rc = c.entry.init()
        if rc:
            msg = c.last_msg()
            raise LibarenaInitError(
                "libarena tree %s: buddy_init failed: %d (%s)%s" % (
                    tree, rc, os.strerror(-rc) if rc < 0 else "not an errno",
                    "; it said: %s" % msg if msg else ""), value=tree)
        c.entry.destroy()
        return int(c.entry.max_size)
    finally:
        c.close()


def _run_from(obj, first, w):
    """In a child: run the programs from index first on, a JSON line each
    to fd w as it finishes (so a crash loses only the program it hit)."""
    c = Copy(obj)
    for i in range(first, c.entry.nprogs):
        p = c.entry.progs[i]
        before = c.stat(ALR_EV_PRINTK)
        ret = int(c.entry.run(_cffi().NULL, 0, p.fn))
        os.write(w, (json.dumps({"name": _cffi().string(p.name).decode(), "ret": ret,
                                 "message": c.last_msg() if c.stat(ALR_EV_PRINTK) > before
                                 else ""}) + "\n").encode())
    c.close()


def die_with_parent(parent):
    """End this process (SIGKILL) when its parent dies, even of SIGKILL
    (PR_SET_PDEATHSIG), or at once if ``parent`` is gone already: a
    selftest child, or the interpreter of an ASan run, is never left
    running as an orphan."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) or os.getppid() != parent:
        os._exit(1)


def _child_dies_with(parent):
    """In a child: die_with_parent. The inherited Python handlers of
    SIGINT, SIGTERM and SIGHUP only set a flag that the tree's C never
    reads: they go back to the default action, so that those signals end
    the child (ignored ones stay ignored)."""
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) not in (signal.SIG_IGN, None):
            signal.signal(s, signal.SIG_DFL)
    die_with_parent(parent)


def _pidfd(pid):
    """A pidfd of the child (readable once it has ended), or None where the
    kernel has none (Linux before 5.3): the results pipe's end of file
    then says that it ended."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _drain(fd):
    """What is left in a pipe whose writer has ended, without waiting."""
    os.set_blocking(fd, False)
    data = b""
    try:
        for chunk in iter(lambda: os.read(fd, 65536), b""):
            data += chunk
    except BlockingIOError:  # a process of the child's own still holds it open
        pass
    return data


def _collect(r, pidfd, timeout):
    """The child's result lines, read until it ends or one program runs
    past timeout seconds (the clock starts at the fork and again at each
    line: a line is a program finished). (data, whether it timed out)."""
    data = b""
    poll = select.poll()  # not select(): a descriptor may be past 1023 in a busy process
    for fd in (r, pidfd):
        if fd is not None:
            poll.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, True
        ready = {fd for fd, _ in poll.poll(max(1, math.ceil(left * 1000)))}
        if pidfd is not None and pidfd in ready:  # it ended: its lines are all in the pipe
            return data + _drain(r), False
        if r not in ready:
            continue
        chunk = os.read(r, 65536)
        if not chunk:  # its end of the pipe is closed
            if pidfd is None:
                return data, False
            poll.unregister(r)
        elif b"\n" in chunk:
            deadline = time.monotonic() + timeout
        data += chunk


def _end_child(pid, kill):
    """Reap the child (kill: SIGKILL it first; SIGINT and SIGTERM may not
    reach a program spinning in C); its os.waitpid status."""
    if kill:
        os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


def _child_main(obj, first, parent, r, w, err):  # pragma: no cover - in the child
    """The forked child: report programs first.. through the pipe w, its
    stderr into err; never returns."""
    os.close(r)
    try:
        _child_dies_with(parent)
        os.dup2(err.fileno(), 2)
        _run_from(obj, first, w)
    finally:
        os._exit(0)


def _child_results(obj, first, timeout):
    """The results a child process sends for programs first.., how it
    ended (os.waitpid status), what it wrote on stderr (an ASan report
    when ASan ended it; passed on to this process's stderr otherwise) and
    whether a program ran past timeout seconds. The child is killed and
    reaped however this returns: a time-out, Ctrl-C, SIGTERM, an error;
    the pipe, the pidfd and the stderr file are closed, a failed fork
    included."""
    fds = dict(zip("rw", os.pipe()))
    pid, ended = None, False
    try:
        with tempfile.TemporaryFile() as err:
            try:
                parent = os.getpid()
                pid = os.fork()
                if pid == 0:
                    _child_main(obj, first, parent, fds["r"], fds["w"], err)
                os.close(fds.pop("w"))
                fds["pidfd"] = _pidfd(pid)
                data, timed_out = _collect(fds["r"], fds["pidfd"], timeout)
                ended = not timed_out
            finally:
                if pid:
                    status = _end_child(pid, kill=not ended)
            err.seek(0)
            stderr = err.read().decode("utf-8", "replace")
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
    if stderr and os.WIFEXITED(status) and not os.WEXITSTATUS(status):
        sys.stderr.write(stderr)
    lines = data.decode("utf-8", "replace").split("\n")[:-1]  # whole lines only
    results = [json.loads(l) for l in lines if l.strip()]
    return results, status, stderr, timed_out


def asan_summary(stderr):
    """The first lines of an AddressSanitizer report (the error's kind and
    its SUMMARY line with file:line), or "" when stderr has none."""
    lines = [l.strip() for l in stderr.splitlines()]
    first = next((l for l in lines if "ERROR: AddressSanitizer:" in l), None)
    if first is None:
        return ""
    kind = first[first.index("AddressSanitizer:"):].split(" on address")[0]
    # SUMMARY: AddressSanitizer: KIND FILE:LINE in FUNC
    where = next((l.split(" ", 3)[3] for l in lines
                  if l.startswith("SUMMARY: AddressSanitizer:") and l.count(" ") >= 3), "")
    if not where:  # the first frame of the tree's, FUNC FILE:LINE
        m = next((re.match(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S+:\d+)", l) for l in lines
                  if re.match(r"#\d+ 0x[0-9a-f]+ in \S+ \S+:\d+", l)), None)
        where = "%s in %s" % (m.group(2), m.group(1)) if m else ""
    return "%s at %s" % (kind, where) if where else kind


def _ended_early(status, stderr):
    """Why a child ended before its last program, in words."""
    why = ("crashed: %s" % signal.Signals(os.WTERMSIG(status)).name
           if os.WIFSIGNALED(status) else "ended early (exit %d)"
           % os.waitstatus_to_exitcode(status))
    report = asan_summary(stderr)
    return "%s: %s" % (why, report) if report else why


def check_timeout(timeout):
    """A selftest program's time limit in seconds (a float), once it is a
    finite number above 0 and at most MAX_TEST_TIMEOUT; else InvalidArgument."""
    ok = isinstance(timeout, numbers.Real) and not isinstance(timeout, bool)
    if not (ok and math.isfinite(timeout) and 0 < timeout <= MAX_TEST_TIMEOUT):
        raise errors.InvalidArgument(
            "timeout %r is not a time limit: seconds, more than 0 and at most %g"
            % (errors.Echo(timeout), MAX_TEST_TIMEOUT), value=timeout)
    return float(timeout)


def _run_tests_under_asan(tree, timeout):
    """run_tests(tree, asan=True, timeout=timeout) in a fresh interpreter
    started with ASan's runtime preloaded (this one has none). It dies with
    this process (die_with_parent), and its children with it: nothing is
    left running when this process is killed outright; subprocess.run kills
    it when an exception (Ctrl-C, SIGTERM) stops this one."""
    rt = asan_runtime()
    if rt is None:
        raise LibarenaInitError("an ASan build of %s needs the compiler's ASan runtime "
                                "(libasan.so), which %s does not have" % (tree, " ".join(_cc())),
                                value=tree)
    env = dict(os.environ, LD_PRELOAD=" ".join([rt] + os.environ.get("LD_PRELOAD", "").split()),
               ASAN_OPTIONS="detect_leaks=0", **{ENV_ASAN: "1"})
    code = ("import json, sys\nfrom alloclab.policies import libarena_real as lr\n"
            "lr.die_with_parent(int(sys.argv[3]))\n"
            "print('\\n' + json.dumps(lr.run_tests(sys.argv[1], asan=True, "
            "timeout=float(sys.argv[2]))))\n")
    proc = subprocess.run([sys.executable, "-c", code, tree, repr(timeout), str(os.getpid())],
                          capture_output=True, text=True, env=env)
    if proc.returncode:
        raise LibarenaInitError("the ASan selftest run of %s failed (exit %d):\n%s" % (
            tree, proc.returncode, proc.stderr.strip()[-2000:]), value=tree)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_tests(tree, asan=None, timeout=DEFAULT_TEST_TIMEOUT):
    """Run the tree's selftest programs (test_*, and asan_test_* in an ASan
    build) in order in one private copy, as the tree's runner would in a VM,
    in a child process: a program that crashes, or runs past ``timeout``
    seconds (check_timeout), is reported (ret None; its signal, or "timed
    out after N s", in message), its child killed, and the programs after
    it run in a fresh copy. asan: an ASan build (None: asan_build()), run
    in a fresh interpreter with ASan's runtime when this one has none.
    [{"name", "file", "ret", "passed", "message"}]."""
    timeout = check_timeout(timeout)
    asan = asan_build() if asan is None else asan
    tree = check_tree(tree)
    progs = selftest_programs(tree, asan)
    if not progs:
        raise LibarenaTreeError("%s: no selftests (SEC(\"syscall\") programs named test_* in "
                                "selftests/*.bpf.c)" % tree, value=tree)
    if asan and not _asan_loaded():
        return _run_tests_under_asan(tree, timeout)
    obj = build(tree, selftests=True, asan=asan)
    files = dict((n, os.path.relpath(f, tree)) for f, n in progs)
    out = []
    while len(out) < len(progs):
        got, status, stderr, timed_out = _child_results(obj, len(out), timeout)
        out += [dict(r, file=files.get(r["name"], ""), passed=r["ret"] == 0) for r in got]
        if len(out) < len(progs):  # the child died in the next program, or was killed in it
            name = progs[len(out)][1]
            why = ("timed out after %g s" % timeout if timed_out
                   else _ended_early(status, stderr))
            out.append({"name": name, "file": files[name], "ret": None, "passed": False,
                        "message": why})
    return out


# ---- the tree's printk texts, for the Result's notes ----

_notes_made = None  # the folder this process made for $ALLOCLAB_LIBARENA_NOTES


def _notes_dir():
    """The folder instances write their printk texts to (layer.c): this
    process's own, made at the first load and removed at its exit, and
    inherited by the child processes that run its layers; one named in the
    environment already (a parent's) is kept."""
    global _notes_made
    if os.environ.get(ENV_NOTES):
        return os.environ[ENV_NOTES]
    import atexit
    import shutil

    _notes_made = tempfile.mkdtemp(prefix="alloclab-libarena-notes-")
    atexit.register(shutil.rmtree, _notes_made, True)
    os.environ[ENV_NOTES] = _notes_made
    return _notes_made


def notes_for(runs):
    """The printk texts of the instances created in each run: ``runs`` is
    [(key, pid, t_start (time.time()), policy name)]; returns {key: [text
    with its layer and count]}. An instance belongs to the run of its process
    that started last before it was created, if that run's policy names its
    layer. Each text is {"layer", "text", "count"}, count over the
    instances' whole lives (warmup included; the measured phase's count is
    the layer's printk counter). Empty where no layer of this process
    printed."""
    d = os.environ.get(ENV_NOTES)
    if not d or not os.path.isdir(d) or not runs:
        return {}
    out = {}
    for pid in {r[1] for r in runs}:
        try:
            with open(os.path.join(d, "notes.%d" % pid), errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        mine = sorted((r for r in runs if r[1] == pid), key=lambda r: r[2])
        for line in lines:
            parts = line.split("\t", 3)
            if len(parts) != 4 or not parts[0].lstrip("-").isdigit():
                continue
            created, layer, count, text = int(parts[0]) / 1e9, parts[1], parts[2], parts[3]
            run = None
            for r in mine:
                if r[2] <= created:
                    run = r
            if run is None or not re.search(r"(?<![\w-])%s(?![\w-])" % re.escape(layer),
                                             str(run[3])):
                continue
            notes = out.setdefault(run[0], {})
            key = (layer, text.rstrip())
            notes[key] = notes.get(key, 0) + int(count or 0)
    return {k: [{"layer": lay, "text": t, "count": n} for (lay, t), n in v.items()]
            for k, v in out.items()}


def layers_info(policy):
    """What a Result says of each libarena layer a policy (its text) names:
    [{"layer", "tree", "own_caches", "asan", "note"}], [] for none."""
    out = []
    for part in str(policy).split(">"):
        name = part.strip().partition("(")[0].strip()
        lay = _layers.get(name)
        if lay is None or any(x["layer"] == name for x in out):
            continue
        note = "%s runs buddy.bpf.c of the libarena tree %s, compiled natively as user-space " \
               "C%s; %s; %s" % (name, lay["tree"], " (an ASan build)" if lay["asan"] else "",
                                caches_note({"own_caches": lay["own_caches"],
                                             "own_caches_plain": lay["own_caches_plain"],
                                             "own_caches_asan": lay["own_caches_asan"]}),
                                shadowed_note(lay["tree"]))
        out.append({"layer": name, "tree": lay["tree"], "own_caches": lay["own_caches"],
                    "asan": lay["asan"], "note": note})
    return out


def shadowed_note(tree):
    """Which of the tree's headers alloclab's stand-in replaces, in words."""
    hs = shadowed_headers(tree)
    if not hs:
        return "none of its headers is shadowed by alloclab's BPF stand-in"
    one = len(hs) == 1
    return "its %s %s shadowed by alloclab's BPF stand-in (not measured: a change to %s does " \
        "not change what runs)" % (", ".join(hs), "is" if one else "are", "it" if one else "them")


def note_text(printk):
    """One printk entry (notes_for) as a note."""
    n = printk["count"]
    return "%s printed %r %d time%s (bpf_stream_printk, over its instances' lives)" % (
        printk["layer"], printk["text"], n, "" if n == 1 else "s")


# ---- the layer ----

_by_tree = {}  # (tree, object) -> layer name
_layers = {}   # layer name -> {"tree", "object", "args": how layer.c is compiled for it}


def load(tree=None, name=None):
    """Compile (or find cached) the tree, check that its buddy_init works, and
    register its layer; returns the layer's name: ``libarena`` for the tree
    of $ALLOCLAB_LIBARENA (or name), else ``libarena_<hash>``."""
    if tree is None:
        tree = default_tree()
    tree = check_tree(tree)
    obj = build(tree)
    _notes_dir()
    key = (tree, obj)
    if key in _by_tree and name in (None, _by_tree[key]):
        return _by_tree[key]
    if name is None:
        env = default_tree()
        digest = os.path.basename(obj)[len("tree-"):-len(".so")]
        name = "libarena" if env and os.path.abspath(env) == tree else "libarena_" + digest[:8]
    _check_loadable(obj)
    try:
        max_size = check_init(obj, tree)
    except LibarenaInitError:
        os.unlink(obj)  # nothing left behind: the next try builds it again
        raise
    feats = _features(tree)
    feats["own_caches"] = _own_caches(feats, obj.endswith("-asan.so"))
    args = _layer_args(name, obj, feats, max_size)
    plugin.compile(name, _layer_source(), extra_compile_args=args)
    _by_tree[key] = name
    _layers[name] = {"tree": tree, "object": obj, "args": args, "own_caches": feats["own_caches"],
                     "own_caches_plain": _features(tree)["own_caches"],
                     "own_caches_asan": feats["own_caches_asan"],
                     "asan": obj.endswith("-asan.so")}
    return name


def _layer_source():
    with open(os.path.join(COMPAT_DIR, "layer.c")) as f:
        return f.read()


def _c_str(s):
    return '"%s"' % s.replace("\\", "\\\\").replace('"', '\\"')


def _layer_args(name, obj, feats, max_size):
    """How layer.c is compiled for one tree (a plugin module, or a unit of a
    preload shim)."""
    return ["-D_GNU_SOURCE", "-I" + COMPAT_DIR, "-DALR_LAYER_NAME=" + _c_str(name),
            "-DALR_OBJECT=" + _c_str(obj), "-DALR_HAS_BULK=%d" % feats["bulk"],
            "-DALR_MAX_SIZE=%dULL" % max_size, "-DALR_LAYER_DOC=" + _c_str(_doc(feats))]


def layer_words(name):
    """A layer's name for a message: a libarena layer's with its tree
    ("libarena_1a2b3c4d of the libarena tree /src/x"), what a user wrote in
    its spec; any other layer's as it is."""
    lay = _layers.get(name)
    return name if lay is None else "%s of the libarena tree %s" % (name, lay["tree"])


def layers_in(policy):
    """The libarena layers (registered in this process) a policy names, top first."""
    return [n for n in policy.names if n in _layers]


def preload_shim(names):
    """A preload shim (its path; built once, cached by content) with the
    libarena layers ``names`` compiled in, so that ``alloclab preload
    --policy 'libarena(tree=DIR)'`` runs a program's malloc on the tree's
    own buddy: each layer is a unit of the shim (registered through its
    al_layers section, so the shim finds it before any constructor runs),
    and each process image loads its private copy of the tree's object from
    the cache when its policy is built."""
    from ..cbind._ffi import include_dir

    ar = plugin.preload_archive()
    if not os.path.exists(ar):
        raise errors.AlloclabError("the shim archive is not built: %s is missing" % ar)
    cc = _cc()
    flags = plugin.library_cflags(preload=True) + ["-I" + include_dir()]
    source = _layer_source()
    h = hashlib.sha256()
    with open(ar, "rb") as f:
        h.update(f.read())
    for hdr in _files(include_dir(), "", (".h",)) + [os.path.join(COMPAT_DIR, "alr.h")]:
        with open(hdr, "rb") as f:
            h.update(hdr.encode() + b"\0" + f.read())
    h.update("\0".join(cc + flags + [source] + [a for n in names for a in _layers[n]["args"]]
                       + [_cc_id(cc)]).encode())
    out = os.path.join(_object_dir(), "shim-%s.so" % h.hexdigest()[:16])
    if os.path.exists(out):
        return out
    with tempfile.TemporaryDirectory(prefix="alloclab-libarena-shim-") as tmp:
        src = os.path.join(tmp, "layer.c")
        with open(src, "w") as f:
            f.write(source)
        objs = []
        for i, n in enumerate(names):
            o = os.path.join(tmp, "%d.o" % i)
            proc = subprocess.run(cc + flags + _layers[n]["args"] + ["-c", src, "-o", o],
                                  capture_output=True, text=True)
            if proc.returncode:
                raise LibarenaCompileError("the libarena layer %s does not compile into the "
                                           "preload shim:\n%s" % (n, _first_errors(proc.stderr)),
                                           name=n, compiler_output=proc.stderr)
            objs.append(o)
        so = os.path.join(tmp, "shim.so")
        proc = subprocess.run(cc + ["-shared"] + flags + objs + [
            "-Wl,--whole-archive", ar, "-Wl,--no-whole-archive", "-lm", "-ldl", "-o", so],
            capture_output=True, text=True)
        if proc.returncode:
            raise LibarenaCompileError("the preload shim with the libarena layers %s does not "
                                       "link:\n%s" % (", ".join(names),
                                                       _first_errors(proc.stderr)),
                                       name=names[0], compiler_output=proc.stderr)
        os.replace(so, out)  # whole or not at all
    return out


def _doc(feats):
    """The layer's one-line doc: what runs, and whether it caches per CPU."""
    return "libarena's own buddy.bpf.c, compiled natively as user-space C (not BPF's JIT)%s" % (
        "; the tree has per-CPU caches of its own" if feats["own_caches"] else "")


def _own_caches(feats, asan):
    return feats["own_caches_asan" if asan else "own_caches"]


def info(tree):
    """What the Result should say about a tree: its path, object, features
    (own_caches: whether the build that runs, plain or ASan, has per-CPU
    caches of its own; own_caches_plain / own_caches_asan: each build's)."""
    tree = check_tree(tree)
    f = _features(tree)
    asan = asan_build()
    return {"tree": tree, "object": build(tree), "bulk": f["bulk"],
            "libarena_layout": f["libarena_layout"], "asan": asan,
            "own_caches": _own_caches(f, asan), "own_caches_plain": f["own_caches"],
            "own_caches_asan": f["own_caches_asan"],
            "shadowed": shadowed_headers(tree),
            "measured": "the tree's C compiled natively as user-space C (not BPF's JIT); "
                        "its helper headers are alloclab's stand-in: %s" % (
                            shadowed_note(tree)) + (
                            "; an ASan build (its hooks on alloclab's poisoning)" if asan
                            else "")}


def caches_note(tree_info):
    """Whether the tree keeps per-CPU caches of its own, in words (and
    whether its ASan build switches them off)."""
    t = tree_info
    s = "its own per-CPU caches: %s" % ("yes" if t["own_caches"] else "no")
    plain, asan = t.get("own_caches_plain"), t.get("own_caches_asan")
    if plain is not None and asan is not None and plain != asan:
        s += " (%s in its ASan build)" % ("off" if not asan else "on")
    return s


# ---- specs: libarena(tree=PATH, ...) ----

_SPEC_RE = re.compile(r"(?<![A-Za-z0-9_-])libarena(?![A-Za-z0-9_-])(\s*\(([^()]*)\))?")


def _check_caches_above(tree, spec, at, params):
    """Refuse the model's caches above a tree with per-CPU caches of its own
    (two caches stacked measure neither design) unless caches_above=true."""
    allowed = any(p.replace(" ", "").lower() in ("caches_above=true", "caches_above=1")
                  for p in params)
    if spec[:at].strip() and not allowed and _own_caches(_features(
            check_tree(tree if tree is not None else default_tree())), asan_build()):
        raise errors.IncompatiblePolicyError(
            "policy %r: the libarena tree %s has per-CPU caches of its own, so the layers above "
            "it would stack the model's caches on the tree's; run it alone, or write "
            "libarena(tree=..., caches_above=true) to measure both" % (
                spec, tree if tree is not None else default_tree()))


def expand(spec):
    """The spec with each ``libarena(tree=PATH, ...)`` (or bare ``libarena``,
    the tree of $ALLOCLAB_LIBARENA) replaced by the registered layer of that
    tree, its other parameters kept. Specs without it are returned as given."""
    if "libarena" not in spec:
        return spec

    def one(m):
        params = [p.strip() for p in (m.group(2) or "").split(",") if p.strip()]
        tree, rest = None, []
        for p in params:
            k, sep, v = p.partition("=")
            if sep and k.strip() == "tree":
                tree = v.strip().strip("'\"")
            else:
                rest.append(p)
        if tree is None and default_tree() is None:
            raise LibarenaTreeError(
                "layer 'libarena' needs a tree: libarena(tree=PATH) or $%s=PATH (the libarena "
                "folder of a kernel checkout)" % ENV_TREE)
        name = load(tree)
        _check_caches_above(tree, spec, m.start(), rest)
        return name + ("(%s)" % ", ".join(rest) if rest else "")

    out = _SPEC_RE.sub(one, spec) if _SPEC_RE.search(spec) else spec
    _check_registered(out)
    return out


def _check_registered(spec):
    """The same refusal for a tree's layer named by its registered name
    (libarena_<hash>) below other layers."""
    parts = [p.strip() for p in spec.split(">")]
    for i, part in enumerate(parts[1:], 1):
        name, _, params = part.partition("(")
        lay = _layers.get(name.strip())
        if lay is None or not lay.get("own_caches"):
            continue
        if "caches_above=true" in params.replace(" ", "").lower() or \
                "caches_above=1" in params.replace(" ", ""):
            continue
        raise errors.IncompatiblePolicyError(
            "policy %r: the libarena tree %s (layer %s) has per-CPU caches of its own, so the "
            "layers above it would stack the model's caches on the tree's; run it alone, or "
            "write %s(caches_above=true) to measure both" % (spec, lay["tree"], name.strip(),
                                                           name.strip()))


policy.expanders.append(expand)
