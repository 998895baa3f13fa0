"""The quoting hint: an unquoted ``--policy percpu > transfer`` is a shell
redirection, not a stack.

The shell runs ``alloclab run malloc-free --policy percpu > transfer`` as
``--policy percpu`` with stdout written into a new file ``transfer`` (and
``> a > b`` creates both files, stdout going to the last). alloclab sees
only the spec ``percpu``, which needs a layer below; the tables vanish
into the file. Detection: the files in the current directory named like a
layer or a preset, modified in the last FRESH_S seconds (the shell created
or truncated them just before starting alloclab), counted only when the
policy spec ends in a layer that needs a layer below, or when stdout is
one of them (a spec that runs by itself, its output lost in the file). The
hint names the quoted form, the files in the order the shell made them.

Cost: one directory listing of names the registry knows, at startup of
`run` only.
"""

import os
import sys
import time

from ..cbind import schema
from ..policies.policy import presets

FRESH_S = 60.0


def _fresh_files():
    """Files in the cwd named like a layer or preset, freshly written, oldest first."""
    now = time.time()
    out = []
    for name in list(schema.layers()) + list(presets):
        try:
            st = os.stat(name)
        except OSError:
            continue
        if os.path.isfile(name) and now - st.st_mtime <= FRESH_S and name not in \
                [n for n, _ in out]:
            out.append((name, st))
    return sorted(out, key=lambda x: x[1].st_mtime_ns)


def _needs_below(spec):
    """Whether the last '>'-part of ``spec`` is a layer that needs one below."""
    last = spec.split(">")[-1].strip().split("(", 1)[0].strip()
    s = schema.layers().get(last)
    return bool(s is not None and s.needs_backend)


def _is_stdout(st):
    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return False
    return (out.st_dev, out.st_ino) == (st.st_dev, st.st_ino)


def hint_text(specs):
    """The hint for ``specs`` (the --policy values) in this cwd, or ""."""
    files = _fresh_files()
    if not files:
        return ""
    for spec in specs:
        if _needs_below(spec) or any(_is_stdout(st) for _, st in files):
            chain = " > ".join([spec.strip()] + [n for n, _ in files])
            return ("'>' in an unquoted --policy is a shell redirection: stdout went into "
                    "the file%s %s; quote the spec: --policy '%s'" % (
                        "s" if len(files) > 1 else "",
                        ", ".join("./" + n for n, _ in files), chain))
    return ""


def hint(specs):
    """Warn on stderr when the run's stdout went into a file named like a layer."""
    text = hint_text(specs)
    if text:
        sys.stderr.write("alloclab: warning: %s\n" % text)
        sys.stderr.flush()
