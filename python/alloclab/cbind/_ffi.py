"""Loads the compiled cffi module and maps C error codes to exceptions.

``check(rc, what)`` is the one place where a negative errno from the library
becomes a Python exception; every message names the code (``ENOMEM``, ...)
as the library spells it (al_strerror).
"""

import errno
import os

from .. import errors

try:
    from .._alloclab import ffi, lib
except ImportError as e:  # pragma: no cover - depends on the build
    raise ImportError(
        "alloclab's compiled module is missing or cannot load liballoclab.so (%s); "
        "build it with `pip install .` or `pip install -e .`" % e) from e

# the package folder, where the build puts the compiled module and the libraries
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# errno (positive) -> exception class; anything else is a RunError.
_EXC = {
    errno.ENOMEM: errors.AllocatorExhausted,
    errno.EINVAL: errors.InvalidArgument,
    errno.ERANGE: errors.InvalidArgument,
    errno.EFAULT: errors.InvariantError,
}


def strerror(rc):
    """The name of an error code (either sign): "ENOMEM", ... as the library
    spells it (al_strerror), else as the errno module does ("ENOSYS"); never
    a bare number where a name exists."""
    if rc == 0:
        return "OK"
    s = lib.al_strerror(-abs(rc))
    name = ffi.string(s).decode("utf-8", "replace") if s != ffi.NULL else ""
    if not name.startswith("E") or name == "EUNKNOWN":  # a code the library does not name
        name = errno.errorcode.get(abs(rc), "error %d" % -abs(rc))
    return name


def error(rc, what, detail="", cls=None, **attrs):
    """The exception for a negative code ``rc`` while doing ``what``."""
    name = strerror(rc)
    msg = "%s: %s" % (what, name)
    if detail:
        msg += ": " + detail
    if cls is None:
        cls = _EXC.get(abs(rc), errors.RunError)
    return cls(msg, code=-abs(rc), **attrs)


def check(rc, what, detail="", cls=None):
    """Return rc when >= 0, else raise the exception mapped from it."""
    if rc >= 0:
        return rc
    raise error(rc, what, detail, cls)


def cstr(p):
    """A C string as str ('' for NULL)."""
    if p == ffi.NULL:
        return ""
    return ffi.string(p).decode("utf-8", "replace")


def lib_path():
    """Path of the liballoclab.so this package loads."""
    return os.path.join(_PKG_DIR, "liballoclab.so")


def preload_path():
    """Path of liballoclab-preload.so, the LD_PRELOAD shim (``alloclab preload``)."""
    return os.path.join(_PKG_DIR, "liballoclab-preload.so")


def include_dir():
    """Directory to add with -I to compile against alloclab's headers
    (``#include <alloclab/alloclab.h>``): the copy shipped in the package,
    or csrc/include of the source tree for an in-place build."""
    shipped = os.path.join(_PKG_DIR, "include")
    if os.path.exists(os.path.join(shipped, "alloclab", "alloclab.h")):
        return shipped
    src = os.path.normpath(os.path.join(_PKG_DIR, "..", "..", "csrc", "include"))
    if os.path.exists(os.path.join(src, "alloclab", "alloclab.h")):
        return src
    return shipped
