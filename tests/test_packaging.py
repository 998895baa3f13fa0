"""The wheel as a user installs it: built from this tree, installed into a
fresh folder of its own, and imported from there with every room, the old
module paths and the package data a layer built at run time reads."""

import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IMPORT_EVERY_ROOM = r"""
import importlib, os, pkgutil, sys
import alloclab
where = os.path.dirname(alloclab.__file__)
assert where.startswith(sys.argv[1]), (where, sys.argv[1])
names = [m.name for m in pkgutil.walk_packages(alloclab.__path__, "alloclab.")
         if not m.name.endswith("__main__") and "liballoclab" not in m.name
         and not m.name.endswith("_alloclab")]
for n in names:
    importlib.import_module(n)
from alloclab import _moved
for old in _moved.MOVED:
    importlib.import_module("alloclab." + old)
assert os.path.isfile(os.path.join(where, "bpfcompat", "vmlinux.h"))
assert os.path.isfile(alloclab.lib_path()) and os.path.isfile(alloclab.preload_path())
a = alloclab.Allocator("buddy")
p = a.alloc(64)
a.free(p)
a.close()
print(len(names))
"""


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, "setup.py")), reason="no source tree")
def test_the_built_wheel_imports_every_room(tmp_path):
    wheels = tmp_path / "wheels"
    b = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(wheels), ROOT], capture_output=True, text=True, timeout=900)
    assert b.returncode == 0, b.stderr[-3000:]
    (wheel,) = glob.glob(str(wheels / "alloclab-*.whl"))
    site = tmp_path / "site"
    i = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(site), wheel], capture_output=True, text=True, timeout=300)
    assert i.returncode == 0, i.stderr[-3000:]
    env = dict(os.environ, PYTHONPATH=str(site))
    r = subprocess.run([sys.executable, "-c", IMPORT_EVERY_ROOM, str(site)], cwd=str(tmp_path),
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert int(r.stdout.split()[-1]) >= 50  # every module of every room was imported
