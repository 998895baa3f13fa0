"""Run a program with its malloc on an alloclab policy (the LD_PRELOAD shim).

    alloclab preload --policy libarena-transfer --stats out.json -- python3 script.py

``command(policy, argv, stats=None)`` returns (argv, env) to run; ``run()``
runs it and returns the CompletedProcess; ``read_stats(path)`` reads what the
shim wrote at exit. The shim refuses what it cannot serve safely: a bottom
layer that does not own its memory by address range (libc, system, null: the
shim could not tell its frees from glibc's, and libc would call malloc, that
is the shim itself), and guard=local (a signal handler that allocates would
share the interrupted thread's cache unguarded).
"""

import json
import os
import subprocess

from . import errors, schema
from ._ffi import preload_path
from .policy import Policy


def check(policy):
    """The Policy, or an InvalidArgument saying why the shim cannot run it."""
    pol = Policy(policy)
    bottom = pol.layers[-1][0]
    if not schema.layer(bottom).has("owns"):
        ok = [p for p, spec in __import__("alloclab").presets.items()
              if schema.layer(Policy(spec).layers[-1][0]).has("owns")]
        raise errors.InvalidArgument(
            "policy %r cannot back a program's malloc: its bottom layer %s does not own its "
            "memory by address range (libc and system are malloc itself); use e.g. %s"
            % (str(pol), bottom, ", ".join(ok)), value=str(pol))
    for i, (name, _) in enumerate(pol.layers):
        if pol.params(i).get("guard") == "local":
            raise errors.InvalidArgument(
                "guard=local is refused under the preload shim (%s): a signal handler that "
                "allocates would share the interrupted thread's cache unguarded; use "
                "guard=atomic" % name, value="local")
    return pol


def command(policy, argv, stats=None, env=None):
    """(argv, env) that run argv with its malloc on the policy."""
    pol = check(policy)
    if not argv:
        raise errors.InvalidArgument("preload needs a command to run")
    shim = preload_path()
    if not os.path.exists(shim):
        raise errors.AlloclabError("the preload shim is not built: %s is missing" % shim)
    env = dict(os.environ if env is None else env)
    pre = [p for p in env.get("LD_PRELOAD", "").split() if p and p != shim]
    env["LD_PRELOAD"] = " ".join([shim] + pre)
    env["ALLOCLAB_POLICY"] = str(pol)
    if stats:
        env["ALLOCLAB_STATS"] = os.path.abspath(stats)
    else:
        env.pop("ALLOCLAB_STATS", None)
    return list(argv), env


def run(policy, argv, stats=None, **kwargs):
    """Run argv under the shim; returns the CompletedProcess."""
    argv, env = command(policy, argv, stats=stats, env=kwargs.pop("env", None))
    return subprocess.run(argv, env=env, **kwargs)


def read_stats(path):
    """The JSON the shim wrote at exit: policy, state, shim counters, layers."""
    with open(path) as f:
        return json.load(f)
