"""The red-team file matrix's entries for results and their commands (see
redteam_files.py): `alloclab show`, `compare` (either side, and its
heatmap), `run`'s --json/--csv/--plot/--journal outputs, `run`/`list`
--plugin, and the Python readers and writers of a Result.

A valid result is made once per matrix (a 20-ms run of malloc-free on
buddy, written by `alloclab run --json`) and copied where a cell needs one.
`alloclab check` takes no file argument (its --json is a switch: the state
as JSON on stdout), so it has no entry.
"""

import json
import os
import shutil
import subprocess
import tempfile
import threading

from redteam_files import PY, ROOT, Entry, is_png

_LOCK = threading.Lock()
_MADE = {}
RUN = ["run", "malloc-free", "--policy", "buddy", "--runs", "1", "--duration", "0.02"]
PLUGIN_SRC = os.path.join(ROOT, "examples", "plugins", "pool.c")


def _made_result():
    """The path of one valid result file, made by the first cell that asks."""
    with _LOCK:
        if "result" not in _MADE:
            d = tempfile.mkdtemp(prefix="alloclab-rtf-result-")
            p = os.path.join(d, "r.json")
            env = dict(os.environ)
            subprocess.run([PY, "-m", "alloclab"] + RUN + ["--json", p], env=env, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
            _MADE["result"] = p
        return _MADE["result"]


def valid_result(tmp):
    p = os.path.join(tmp, "valid.json")
    shutil.copyfile(_made_result(), p)
    return p


def other_result(tmp):
    """A valid result beside the cell's FILE, for compare's other side."""
    p = os.path.join(tmp, "other.json")
    shutil.copyfile(_made_result(), p)
    return p


def _compare_argv(first):
    def argv(tmp):
        o = other_result(tmp)
        return ["compare", "FILE", o] if first else ["compare", o, "FILE"]
    return argv


def _is_result(path, out, err):
    """A written result file reads back as one (a device or a pipe: nothing to read)."""
    if not path or not os.path.isfile(path):
        return None
    with open(path) as f:
        d = json.load(f)
    if d.get("format") != "alloclab-result" or not d.get("points"):
        return "FILE is not a result: %r" % str(d)[:200]
    return None


def _is_csv(path, out, err):
    if not path or not os.path.isfile(path):
        return None
    with open(path) as f:
        head = f.readline()
    if "run" not in head.split(","):
        return "FILE is not the CSV of a run: %r" % head[:200]
    return None


def _is_journal(path, out, err):
    if not path or not os.path.isfile(path):
        return None
    with open(path) as f:
        first = json.loads(f.readline())
    if first.get("format") != "alloclab-sweep-journal":
        return "FILE is not a sweep journal: %r" % str(first)[:200]
    return None


def _plugin_source():
    with open(PLUGIN_SRC, "rb") as f:
        return f.read()


# As root a mode-000 file is still readable: then it is a valid input.
_AS_ROOT = {"unreadable": "ok"} if os.geteuid() == 0 else {}
_READ = dict(role="input", valid=valid_result, expect=_AS_ROOT)
_PLUGIN = dict(role="input", valid=_plugin_source(), expect=_AS_ROOT)
_RESULT_PY = ("res = al.run('malloc-free', 'buddy', runs=1, duration=0.02, isolate=False)\n")

ENTRIES = [
    Entry("results:show", argv=["show", "FILE"], **_READ),
    Entry("results:compare FILE B", argv=_compare_argv(True), **_READ),
    Entry("results:compare A FILE", argv=_compare_argv(False), **_READ),
    Entry("results:run --json", role="output", argv=RUN + ["--json", "FILE"], ok=_is_result),
    Entry("results:run --csv", role="output", argv=RUN + ["--csv", "FILE"], ok=_is_csv),
    Entry("results:run --plot", role="output", argv=RUN + ["--plot", "FILE"], ok=is_png),
    # A journal is read before it is written: an existing regular file that is
    # not a journal of this sweep (a 64-GiB hole, an ELF binary) is refused
    # and left as it is, and so is a device (a journal is read back to
    # resume). An empty file holds no runs: a new journal starts in it (the
    # truncated and unreadable cells are empty files too).
    Entry("results:run --journal", role="output", argv=RUN + ["--journal", "FILE"],
          ok=_is_journal,
          expect={"sparse": "refused", "foreign": "refused", "chardev": "refused",
                  "unreadable": "ok" if os.geteuid() == 0 else "refused"}),
    Entry("results:run --plugin", argv=["run", "--plugin", "FILE", "malloc-free",
                                        "--policy", "pool", "--runs", "1",
                                        "--duration", "0.02"], **_PLUGIN),
    Entry("results:list --plugin", argv=["list", "--plugin", "FILE", "layers"], **_PLUGIN),
    Entry("results:compare --plot", role="output",
          argv=lambda tmp: ["compare", valid_result(tmp), other_result(tmp), "--plot", "FILE"],
          ok=is_png),
    Entry("results:Result.from_json(Path)", code="import pathlib\n"
          "al.Result.from_json(pathlib.Path(FILE))", **_READ),
    Entry("results:Result.from_json(str)", code="al.Result.from_json(FILE)", **_READ,
          # '' and a missing name are not paths to from_json but JSON text,
          # which is refused as not JSON
          ),
    Entry("results:Result.to_json", role="output", ok=_is_result,
          code=_RESULT_PY + "res.to_json(FILE)"),
    Entry("results:Result.to_csv", role="output", ok=_is_csv,
          code=_RESULT_PY + "res.to_csv(FILE)"),
    # An Allocator over a plugin layer compiled from FILE.
    Entry("results:Allocator(plugin FILE)",
          code="al.plugin.compile_file(FILE)\n"
               "with al.Allocator('pool') as a:\n    a.free(a.alloc(64))", **_PLUGIN),
]
