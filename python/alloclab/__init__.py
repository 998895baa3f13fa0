"""alloclab: a laboratory for kernel-style memory allocator policies.

    import alloclab as al
    pol = al.Policy("buddy(arena_limit=64M)")
    res = al.run("malloc-free", pol, producers=[1, 2], allocs_per_cycle=[16, 64], runs=3)
    print(res.table("alloc_ns"))

Layers, workloads and their parameters come from the C library's registry:
see ``al.policies()``, ``al.workloads()`` and ``al.presets``.

Layout: rooms that follow a result's path, each importing only the rooms
below it (tests/test_house.py holds the order). Bottom up: errors and
files (the exceptions; how every path is judged), cbind (the C boundary:
the cffi build, loading, the registry), host (the machine's state and the
metadata of a run), traces (trace files, what they hold, replay's trace),
policies (specs, plugins, peers, live allocators), results (Result, what
every metric means, statistics over runs), judge (compare, verdicts),
measure (run, sweep, executors), shim (the LD_PRELOAD shim and record),
present (plots and tables), reproduce (the seed discussions), cli (the
command line, a module per command). The old flat module paths
(alloclab.plot, alloclab.result, alloclab.cli_format, ...) still import:
_moved maps each to its room.

Importing the package loads the library and NumPy; matplotlib and pandas
are imported only by the functions that need them. NumPy's BLAS gets one
thread unless the environment says otherwise: OpenBLAS otherwise starts a
thread per CPU that spins after each call, on the CPUs the pinned workers
measure on (5% of a 2-CPU run's samples), and alloclab does no linear
algebra that needs threads.
"""

import os as _os

for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    _os.environ.setdefault(_var, "1")

from . import _moved  # noqa: E402
_moved.install()

from ._version import __version__  # noqa: E402
from .cbind._ffi import include_dir, lib_path, preload_path
from .errors import (
    AllocatorExhausted, AlloclabError, FileFormatError, IncomparableError, IncompatiblePolicyError,
    InvalidArgument, InvalidFreeError, InvalidPointerError, NotPicklableError,
    UnsupportedCombination, InvariantError, ParameterRangeError, ParameterTypeError,
    PeerUnavailable, PluginCompileError, PluginError, PolicySyntaxError, PoolingError, RunError,
    RunStalled, UnknownNameError)
from .policies.policy import Policy, counters, policies, presets, workloads
from .policies.allocator import Allocator
from .results.result import Point, Result
from .present.table import Table
from .measure.run import run
from .shim.record import record
from .traces import trace
from .traces.trace import Trace
from .policies import peers, plugin
from .policies import libarena_real
from .present import plot, plot_trace
from .results import stats
from .judge.compare import Comparison, compare
from .results.hist import Histogram
from .measure.sweep import sweep
from .traces.traceinfo import TraceInfo, trace_info
from .host import machine
from .judge import verdict
from .judge.verdict import Claim, Verdict, claim, judge


_moved.register_loaded()


# Rooms imported when first read as an attribute (al.reproduce.libarena()):
# each costs its import time only to the programs that use it
_LAZY = ("reproduce",)


def __getattr__(name):
    """alloclab.schema, alloclab.result, ...: an old module path read as an
    attribute imports the module at its new place (alloclab._moved); a lazy
    room (_LAZY) is imported on first use."""
    if name in _moved.MOVED or name in _LAZY:
        import importlib
        return importlib.import_module("alloclab." + name)
    raise AttributeError("module 'alloclab' has no attribute %r" % name)


__all__ = [
    "__version__",
    "Policy",
    "presets",
    "policies",
    "counters",
    "workloads",
    "run",
    "record",
    "Trace",
    "trace",
    "sweep",
    "trace_info",
    "TraceInfo",
    "compare",
    "Comparison",
    "claim",
    "judge",
    "Claim",
    "Verdict",
    "verdict",
    "machine",
    "Histogram",
    "stats",
    "plot",
    "plot_trace",
    "Result",
    "Point",
    "Table",
    "Allocator",
    "lib_path",
    "preload_path",
    "include_dir",
    "AlloclabError",
    "UnknownNameError",
    "ParameterTypeError",
    "ParameterRangeError",
    "InvalidArgument",
    "FileFormatError",
    "IncomparableError",
    "IncompatiblePolicyError",
    "PoolingError",
    "PolicySyntaxError",
    "AllocatorExhausted",
    "InvalidFreeError",
    "InvalidPointerError",
    "NotPicklableError",
    "UnsupportedCombination",
    "RunError",
    "RunStalled",
    "PeerUnavailable",
    "PluginError",
    "PluginCompileError",
    "plugin",
    "InvariantError",
]
