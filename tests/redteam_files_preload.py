"""The red-team file matrix's entries for `alloclab preload` (see
redteam_files.py): its --json output (the merged stats, written when the
program ends; checked before it starts) and its --plugin input (a C layer
compiled into the shim).

The --plugin cells share one plugin cache, warmed by the first cell that
makes a valid plugin file, so that no cell pays for building the shim with
the plugin inside its time limit.
"""

import json
import os
import subprocess
import tempfile
import threading

from redteam_files import PY, ROOT, Entry

PLUGIN_SRC = os.path.join(ROOT, "examples", "plugins", "halfspill.c")
CACHE = os.path.join(tempfile.gettempdir(), "alloclab-rtf-preload-cache-%d" % os.getuid())
_LOCK = threading.Lock()
_WARM = []


def _valid_plugin(tmp):
    """A copy of halfspill.c (the layer is named for its file), with the
    shared cache holding its shim."""
    with open(PLUGIN_SRC, "rb") as f:
        data = f.read()
    p = os.path.join(tmp, "halfspill.c")
    with open(p, "wb") as f:
        f.write(data)
    with _LOCK:
        if not _WARM:
            env = dict(os.environ, ALLOCLAB_CACHE=CACHE)
            subprocess.run([PY, "-c", "import sys; from alloclab import plugin; "
                            "plugin.compile_file(sys.argv[1]); plugin.preload_shim(sys.argv[1])",
                            p], env=env, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=300)
            _WARM.append(True)
    return p


def _is_stats(path, out, err):
    """A written --json file is the merged stats of a run of `true` that
    exited 0 (a device or a pipe: nothing to read back)."""
    if not path or not os.path.isfile(path):
        return None
    with open(path) as f:
        d = json.load(f)
    if not isinstance(d, dict) or d.get("returncode") != 0 or not d.get("processes"):
        return "FILE is not the stats of the run: %r" % str(d)[:200]
    return None


# As root a mode-000 file is still readable: then it is a valid input.
_AS_ROOT = {"unreadable": "ok"} if os.geteuid() == 0 else {}

ENTRIES = [
    Entry("preload:preload --json", role="output", ok=_is_stats,
          argv=["preload", "--policy", "buddy", "--json", "FILE", "--", "true"]),
    # The layer in FILE is named for the file; the symlink cell links
    # FILE to halfspill.c, whose name is the layer's.
    Entry("preload:preload --plugin", role="input", valid=_valid_plugin, expect=_AS_ROOT,
          env={"ALLOCLAB_CACHE": CACHE},
          argv=["preload", "--plugin", "FILE", "--policy", "buddy", "--", "true"]),
]
