"""alloclab: a laboratory for kernel-style memory allocator policies.

    import alloclab as al
    pol = al.Policy("buddy(arena_limit=64M)")
    res = al.run("malloc-free", pol, producers=[1, 2], allocs_per_cycle=[16, 64], runs=3)
    print(res.table("alloc_ns"))

Layers, workloads and their parameters come from the C library's registry:
see ``al.policies()``, ``al.workloads()`` and ``al.presets``.
"""

from ._version import __version__
from ._ffi import include_dir, lib_path, preload_path
from .errors import (
    AllocatorExhausted,
    AlloclabError,
    FileFormatError,
    IncomparableError,
    IncompatiblePolicyError,
    InvalidArgument,
    InvalidFreeError,
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
from .policy import Policy, policies, presets, workloads
from .allocator import Allocator
from .result import Point, Result, Table
from .run import run
from . import peers, plugin
from . import plot, stats
from .compare import Comparison, compare
from .hist import Histogram
from .sweep import sweep
from . import machine, verdict
from .verdict import Claim, Verdict, claim, judge

__all__ = [
    "__version__",
    "Policy",
    "presets",
    "policies",
    "workloads",
    "run",
    "sweep",
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
    "RunError",
    "RunStalled",
    "PeerUnavailable",
    "PluginError",
    "PluginCompileError",
    "plugin",
    "InvariantError",
]
