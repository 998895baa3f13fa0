"""The decoded trace's constants, shared by alloclab.trace (files, the C
trace) and the analysis: op kinds in enum al_trace_kind order, the flags of
enum al_trace_flags, and one op's layout (struct al_trace_op, 32 bytes), so
NumPy reads the C arrays without a copy."""

import numpy as np

NOID = 0xFFFFFFFF

KINDS = ("malloc", "calloc", "realloc", "free", "posix_memalign", "aligned_alloc",
         "memalign", "valloc", "pvalloc", "usable_size", "thread_start", "thread_exit")

FLAG_NULL, FLAG_MOVED, FLAG_CROSS, FLAG_UNKNOWN, FLAG_ZERO = 1, 2, 4, 8, 16

# One op as C lays it out (struct al_trace_op, 32 bytes).
OP_DTYPE = np.dtype([("size", "<u8"), ("aux", "<u8"), ("id", "<u4"), ("ref", "<u4"),
                     ("dt", "<u4"), ("kind", "u1"), ("flags", "u1"), ("pad", "<u2")])
