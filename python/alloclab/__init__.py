"""alloclab: a laboratory for kernel-style memory allocator policies.

    import alloclab as al
    pol = al.Policy("buddy(arena_limit=64M)")
    res = al.run("malloc-free", pol, producers=[1, 2], allocs_per_cycle=[16, 64], runs=3)
    print(res.table("alloc_ns"))

Layers, workloads and their parameters come from the C library's registry:
see ``al.policies()``, ``al.workloads()`` and ``al.presets``.

Layout, bottom up: _ffi loads the cffi extension and liballoclab.so and
maps C error codes to errors.py's exceptions; schema and policy read the
registry and parse policy specs; allocator drives one stack call by call
(tests, notebooks); run/sweep plan a grid, run it wholly in C and build a
Result (result.py, with the metric catalogue in metrics.py); compare,
verdict and stats judge Results; plot draws them; machine reads the
machine state that makes numbers noisy; peers, plugin and preload bring in
other allocators, C layers written at run time and the LD_PRELOAD shim;
reproduce reruns the seed discussions; cli is the command line over all of
it.

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

from ._version import __version__  # noqa: E402
from ._ffi import include_dir, lib_path, preload_path
from .errors import (
    AllocatorExhausted,
    AlloclabError,
    FileFormatError,
    IncomparableError,
    IncompatiblePolicyError,
    InvalidArgument,
    InvalidFreeError,
    InvalidPointerError,
    NotPicklableError,
    UnsupportedCombination,
    InvariantError,
    ParameterRangeError,
    ParameterTypeError,
    PeerUnavailable,
    PluginCompileError,
    PluginError,
    PolicySyntaxError,
    PoolingError,
    RunError,
    RunStalled,
    UnknownNameError,
)
from .policy import Policy, counters, policies, presets, workloads
from .allocator import Allocator
from .result import Point, Result, Table
from .run import run
from .record import record
from . import trace
from .trace import Trace
from . import peers, plugin
from . import libarena_real
from . import plot, plot_trace, stats
from .compare import Comparison, compare
from .hist import Histogram
from .sweep import sweep
from .traceinfo import TraceInfo, trace_info
from . import machine, verdict
from .verdict import Claim, Verdict, claim, judge

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
