"""Build liballoclab.so from csrc/SOURCES with the flags of csrc/CFLAGS, then
the cffi extension that links it.

Everything declarative lives in pyproject.toml. This file only adds one build
step that runs before build_ext:

  1. compile every source listed in csrc/SOURCES into one shared library,
     liballoclab.so, placed inside the package next to the extension
     (build_lib/alloclab/ for a normal build, python/alloclab/ as well for
     ``build_ext --inplace`` and ``pip install -e .``);
  2. copy the public headers to alloclab/include/alloclab/ (normal builds)
     so that plugins can compile against the installed package;
  3. point the cffi extension's library_dirs at the library; the extension
     finds it at run time through rpath=$ORIGIN.

Environment: CC (compiler, default from sysconfig), CFLAGS (appended),
ALLOCLAB_WERROR=1 (warnings are errors).
"""

import os
import re
import shlex
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB_NAME = "liballoclab.so"
PRELOAD_NAME = "liballoclab-preload.so"  # the LD_PRELOAD shim: the library + csrc/preload
PRELOAD_AR = "liballoclab-preload.a"  # its objects, to link plugins into a shim
PKG = "alloclab"
PKG_SRC_DIR = os.path.join(ROOT, "python", PKG)
INCLUDE_SRC = os.path.join(ROOT, "csrc", "include", "alloclab")


def read_version():
    with open(os.path.join(PKG_SRC_DIR, "_version.py")) as f:
        m = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not m:
        raise RuntimeError("python/alloclab/_version.py has no __version__")
    return m.group(1)


def read_sources():
    srcs = []
    with open(os.path.join(ROOT, "csrc", "SOURCES")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                srcs.append(line)
    return srcs


def read_cflags():
    """{set name: [flags]} from csrc/CFLAGS, the flag list the Makefile reads
    too: one "SET: flags" line per set, lines of one set joined in order."""
    sets = {}
    with open(os.path.join(ROOT, "csrc", "CFLAGS")) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, sep, flags = line.partition(":")
            if not sep:
                raise RuntimeError("csrc/CFLAGS: %r is not 'SET: flags'" % line)
            sets.setdefault(name.strip(), []).extend(shlex.split(flags))
    return sets


def c_compiler():
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(cc)


class build_ext_alloclab(build_ext):
    """build_ext that first builds liballoclab.so (see the module doc)."""

    def run(self):
        inplace = bool(self.inplace or getattr(self, "editable_mode", False))
        out_dir = os.path.join(os.path.abspath(self.build_lib), PKG)
        lib, preload = self.build_alloclab_library(out_dir)
        if inplace:
            self.copy_file(lib, os.path.join(PKG_SRC_DIR, LIB_NAME))
            self.copy_file(preload, os.path.join(PKG_SRC_DIR, PRELOAD_NAME))
            self.copy_file(os.path.join(out_dir, PRELOAD_AR), os.path.join(PKG_SRC_DIR, PRELOAD_AR))
        else:
            self.copy_headers(os.path.join(out_dir, "include", "alloclab"))
        headers = sorted(os.path.join(INCLUDE_SRC, h) for h in os.listdir(INCLUDE_SRC))
        for ext in self.extensions:
            if ext.name == PKG + "._alloclab" and out_dir not in ext.library_dirs:
                ext.library_dirs.append(out_dir)
            if ext.name == PKG + "._alloclab":
                # The extension compiles constants from the headers (cdef "..."):
                # rebuild it when they change, not only when the cffi source does.
                ext.depends = list(ext.depends or []) + [h for h in headers
                                                         if h not in (ext.depends or [])]
        super().run()

    def build_alloclab_library(self, out_dir):
        cc = c_compiler()
        version = read_version()
        sets = read_cflags()
        cflags = sets["common"] + sets["release"] + [
            "-I" + os.path.join(ROOT, "csrc", "include"),
            '-DAL_VERSION_STR="%s"' % version,
            '-DAL_BUILD_FLAGS="%s"' % " ".join(cc + sets["release"] + ["-g"]),
        ]
        if os.environ.get("ALLOCLAB_WERROR") == "1":
            cflags += sets["werror"]
        cflags += shlex.split(os.environ.get("CFLAGS", ""))
        # every header under csrc/: the public ones and the private ones beside
        # their sources (csrc/workloads/list.h, csrc/engine/sim.h, ...)
        headers = [os.path.join(d, h) for d, _, fs in os.walk(os.path.join(ROOT, "csrc"))
                   for h in fs if h.endswith(".h")]
        # An object is stale when its source, a header or the flag list is newer.
        newest_header = max((os.path.getmtime(h) for h in headers +
                             [os.path.join(ROOT, "csrc", "CFLAGS")]), default=0)
        obj_dir = os.path.join(os.path.abspath(self.build_temp), "liballoclab")

        def compile_one(src, obj_dir=obj_dir, extra=()):
            path = os.path.join(ROOT, src)
            obj = os.path.join(obj_dir, os.path.splitext(src)[0] + ".o")
            if (not self.force and os.path.exists(obj)
                    and os.path.getmtime(obj) >= max(os.path.getmtime(path), newest_header)):
                return obj
            os.makedirs(os.path.dirname(obj), exist_ok=True)
            cmd = cc + cflags + list(extra) + ["-c", path, "-o", obj]
            print(" ".join(shlex.quote(c) for c in cmd))
            subprocess.check_call(cmd)
            return obj

        srcs = read_sources()
        pre_dir = os.path.join(os.path.abspath(self.build_temp), "liballoclab-preload")
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            objs = list(pool.map(compile_one, srcs))
            # The shim embeds the library with its API hidden (AL_PRELOAD_BUILD).
            pre_objs = list(pool.map(
                lambda src: compile_one(src, pre_dir, sets["preload"]),
                srcs + ["csrc/preload/preload.c", "csrc/preload/record.c"]))

        os.makedirs(out_dir, exist_ok=True)
        lib = os.path.join(out_dir, LIB_NAME)
        cmd = cc + cflags + ["-shared", "-Wl,-soname," + LIB_NAME, "-o", lib] + objs + ["-lm"]
        print(" ".join(shlex.quote(c) for c in cmd))
        subprocess.check_call(cmd)
        preload = os.path.join(out_dir, PRELOAD_NAME)
        cmd = (cc + cflags + ["-shared", "-Wl,-soname," + PRELOAD_NAME, "-o", preload] +
               pre_objs + ["-lm", "-ldl"])
        print(" ".join(shlex.quote(c) for c in cmd))
        subprocess.check_call(cmd)
        archive = os.path.join(out_dir, PRELOAD_AR)
        if os.path.exists(archive):
            os.remove(archive)
        subprocess.check_call(["ar", "rcs", archive] + pre_objs)
        return lib, preload

    def copy_headers(self, dest):
        """The public headers, and csrc/CFLAGS beside include/ (plugins are
        compiled with the library's own language and optimisation flags)."""
        os.makedirs(dest, exist_ok=True)
        for h in sorted(os.listdir(INCLUDE_SRC)):
            if h.endswith(".h"):
                shutil.copy2(os.path.join(INCLUDE_SRC, h), os.path.join(dest, h))
        shutil.copy2(os.path.join(ROOT, "csrc", "CFLAGS"),
                     os.path.join(dest, os.pardir, os.pardir, "CFLAGS"))


class sdist_alloclab(sdist):
    """sdist that also ships the C sources, headers and the Makefile (the
    wheel is built from them)."""

    def make_release_tree(self, base_dir, files):
        extra = []
        for root, _, names in os.walk(os.path.join(ROOT, "csrc")):
            extra += [os.path.relpath(os.path.join(root, n), ROOT) for n in sorted(names)]
        extra += [f for f in ("Makefile", "README.md") if os.path.exists(os.path.join(ROOT, f))]
        files = list(files) + [f for f in extra if f not in files]
        super().make_release_tree(base_dir, files)


setup(
    cmdclass={"build_ext": build_ext_alloclab, "sdist": sdist_alloclab},
    cffi_modules=["python/alloclab/cbind/_build.py:ffibuilder"],
)
