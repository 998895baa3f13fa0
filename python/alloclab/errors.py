"""The exceptions alloclab raises.

Every exception is an AlloclabError and also the matching builtin, so callers
may catch either: ``except ValueError`` catches a bad parameter as well as
``except alloclab.ParameterRangeError`` does.

Extra attributes (``valid``, ``code``, ...) are keyword arguments, so every
exception pickles (it may cross a process pool).

A message names the bad value and, where there is a closed set, the valid
ones (``UnknownNameError.make`` builds that sentence); the CLI prints it as
its one error line. A value a message echoes goes through ``shown`` (or
``Echo``), which cuts a long one, so that a megabyte of input never makes a
megabyte of message. C error codes become these exceptions in one place,
alloclab._ffi.check.
"""

__all__ = [
    "SimulationError",
    "AlloclabError",
    "UnknownNameError",
    "ParameterTypeError",
    "shown",
    "Echo",
    "cut_runs",
    "InvalidArgument",
    "FileFormatError",
    "ParameterRangeError",
    "IncomparableError",
    "MissingMetricError",
    "IncompatiblePolicyError",
    "PoolingError",
    "PolicySyntaxError",
    "AllocatorExhausted",
    "InvalidPointerError",
    "InvalidFreeError",
    "NotPicklableError",
    "UnsupportedCombination",
    "RunError",
    "InvariantError",
]


ECHO_LIMIT = 120
"""The most characters of a value a message echoes (its repr); a longer one
is cut to its start and end, with its length."""


def shown(value, limit=ECHO_LIMIT):
    """repr(value) as a message echoes it: whole when at most ``limit``
    characters, else its start, "...", its end and its length ("'qqq...qqq'
    (1000000 characters)"), so that the reader still sees what it was."""
    if isinstance(value, Echo):  # cut already
        return repr(value)
    s = repr(value)
    if len(s) <= limit:
        return s
    head, tail = s[:limit * 2 // 3], s[-(limit // 4):]
    size = len(value) if isinstance(value, (str, bytes, bytearray, list, tuple, dict)) \
        else len(s)
    what = "characters" if isinstance(value, str) else \
        "bytes" if isinstance(value, (bytes, bytearray)) else \
        "items" if isinstance(value, (list, tuple, dict)) else "characters of repr"
    return "%s...%s (%d %s)" % (head, tail, size, what)


def cut_runs(text, limit=ECHO_LIMIT):
    """``text`` with every run of more than ``limit`` non-blank characters
    cut as ``shown`` cuts a value: for a message already formatted by code
    that echoes whole (argparse's "invalid choice: '...'", "unrecognized
    arguments: ...")."""
    import re

    def cut(m):
        s = m.group(0)
        return "%s...%s (%d characters)" % (s[:limit * 2 // 3], s[-(limit // 4):], len(s))
    return re.sub(r"\S{%d,}" % (limit + 1), cut, text)


class Echo:
    """A value to echo with ``%r`` (or ``%s``) in a message, cut as ``shown``
    cuts it: ``"in policy %r" % Echo(spec)``."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return shown(self.value)

    def __str__(self):
        s = shown(self.value)
        if isinstance(self.value, str) and s == repr(self.value):
            return self.value
        return s


class AlloclabError(Exception):
    """Base of every alloclab error. ``code`` is the C errno (negative) when
    the error came from the library, else None."""

    code = None

    def __init__(self, message="", **attrs):
        super().__init__(message)
        self.message = message
        for k, v in attrs.items():
            setattr(self, k, v)

    def __str__(self):
        return self.message

    def __reduce__(self):
        attrs = {k: v for k, v in self.__dict__.items() if k != "message"}
        return (_rebuild, (type(self), self.message, attrs))


def _rebuild(cls, message, attrs):
    return cls(message, **attrs)


class UnknownNameError(AlloclabError, ValueError):
    """An unknown layer, workload, preset, parameter or mode name.

    ``name`` is the bad name, ``kind`` what it should have named, and
    ``valid`` the list of valid names (also in the message)."""

    name = None
    kind = None
    valid = ()

    @classmethod
    def make(cls, kind, name, valid, context="", extra=""):
        valid = list(valid)
        where = " in %s" % context if context else ""
        plural = kind if kind.endswith("s") else kind[:-1] + "ies" if kind.endswith("y") \
            and kind[-2:-1] not in "aeiou" else kind + "s"
        msg = "unknown %s %s%s; valid %s: %s" % (
            kind, shown(name), where, plural, ", ".join(valid) if valid else "(none)")
        if extra:
            msg += "; " + extra
        return cls(msg, name=name, kind=kind, valid=valid)


class ParameterTypeError(AlloclabError, TypeError):
    """A parameter value of the wrong type (e.g. a float for an INT)."""


class InvalidArgument(AlloclabError, ValueError):
    """A value the library rejects (-EINVAL)."""


class FileFormatError(InvalidArgument):
    """A file (or JSON text) that is not what it should be: a result file
    that is not an alloclab result, a sweep journal whose header or a line is
    not what a journal holds, text that is not UTF-8 or not JSON. ``path``
    names the file (None for text); the file is left as it was."""

    path = None


class ParameterRangeError(InvalidArgument):
    """A parameter value outside its schema range. The message names the
    value and [min, max]; ``value``, ``min`` and ``max`` hold them."""


class IncomparableError(InvalidArgument):
    """compare() was asked to set results side by side that measure
    different things (different workloads); the message names both."""


class MissingMetricError(InvalidArgument):
    """A result lacks metrics that a computation needs (lock hold times
    are measured at stats="full" only, and only for timed locks). The
    message names them and how to get them; ``missing`` lists the metric
    names and ``needed_for`` what wanted them."""

    missing = ()
    needed_for = None


class IncompatiblePolicyError(InvalidArgument):
    """A workload that cannot run on a policy, known before running (nmi
    needs an NMI-safe stack, test_vmalloc a vmalloc layer on top).
    ``workload`` and ``policy`` name them; ``valid`` lists the presets the
    workload runs on (also in the message)."""


class PoolingError(InvalidArgument):
    """compare() would pool the runs of different cells: a side holds
    several values of a parameter that the cell key does not separate.
    ``pooled`` holds [(side, parameter, [values])]; the message names them
    and how to proceed (add the parameter to ``on``, filter, or pool=True)."""


class PolicySyntaxError(AlloclabError, ValueError):
    """A policy spec string that does not parse."""


class AllocatorExhausted(AlloclabError, MemoryError):
    """The allocator ran out of memory (-ENOMEM)."""


class InvalidPointerError(InvalidArgument):
    """An address given where a live block of this allocator goes (e.g.
    usable_size) that is not one: never handed out by this allocator, not a
    block start, or already freed. ``addr`` holds it."""


class InvalidFreeError(InvalidPointerError):
    """free() of an address that is not an allocated block: never allocated,
    misaligned, not a block start, or already freed. ``addr`` holds it."""


class NotPicklableError(AlloclabError, TypeError):
    """pickle (or copy) of an object that holds live C state, an Allocator:
    the message says what to pass instead (its policy string)."""


class UnsupportedCombination(InvalidArgument):
    """A policy stack, or a workload on a policy, that cannot work (e.g. a
    cache over ``null``, which hands out one block per CPU). The message names
    the layer or workload, the reason and what to use instead; ``layer`` and
    ``workload`` hold the names involved (None when not)."""

    layer = None
    workload = None


class RunError(AlloclabError, RuntimeError):
    """A run or library call failed; ``code`` is the negative errno."""


class SimulationError(AlloclabError, RuntimeError):
    """A simulated-CPU run cannot be made as asked (a workload that cannot
    be simulated, a calibration that cannot be measured here); the message
    says why and what to do instead."""


class RunStalled(RunError):
    """The engine's watchdog ended a run that made no progress; the
    message names the policy, the workload and where each worker was. The
    stuck threads were left running and their allocator leaked."""


class PeerUnavailable(AlloclabError, LookupError):
    """A peer allocator (jemalloc, gperftools-tcmalloc, mimalloc) is not
    installed; the message says which package to install."""


class PluginError(AlloclabError):
    """A plugin compiled but could not be registered (name taken, bad
    descriptor, no layer of that name)."""


class PluginCompileError(PluginError):
    """A plugin's C source does not compile; ``compiler_output`` holds the
    compiler's messages (line numbers are those of the source as given)."""


class InvariantError(AlloclabError):
    """A layer's invariant check (ops.check) found a violation."""
