"""The module paths alloclab had before its modules moved into rooms.

``import alloclab.plot``, ``from alloclab import cli_format`` and every
other path that user code, notebooks, docs and pickles may name keeps
working: a finder on sys.meta_path answers an old name with the module at
its new place, the very same module object (so a monkeypatch, an
isinstance check or a pickle sees one module under both names). The
package's own code imports the new places only (tests/test_house.py).
"""

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "_build": "cbind._build",
    "_ffi": "cbind._ffi",
    "schema": "cbind.schema",
    "machine": "host.machine",
    "_tracefmt": "traces._tracefmt",
    "trace": "traces.trace",
    "traceinfo": "traces.traceinfo",
    "tracegen": "traces.tracegen",
    "replay": "traces.replay",
    "policy": "policies.policy",
    "plugin": "policies.plugin",
    "peers": "policies.peers",
    "allocator": "policies.allocator",
    "libarena_real": "policies.libarena_real",
    "metrics": "results.metrics",
    "_counters": "results._counters",
    "_measures": "results._measures",
    "hist": "results.hist",
    "stats": "results.stats",
    "result": "results.result",
    "compare": "judge.compare",
    "verdict": "judge.verdict",
    "executors": "measure.executors",
    "progress": "measure.progress",
    "run": "measure.run",
    "sweep": "measure.sweep",
    "_peer": "measure._peer",
    "preload": "shim.preload",
    "record": "shim.record",
    "_supervise": "shim._supervise",
    "plot_style": "present.plot_style",
    "plot": "present.plot",
    "plot_reproduce": "present.plot_reproduce",
    "plot_trace": "present.plot_trace",
    "cli_compare": "cli.compare",
    "cli_format": "cli.format",
    "cli_libarena": "cli.libarena",
    "cli_list": "cli.list",
    "cli_quoting": "cli.run",
    "cli_record": "cli.record",
    "cli_show": "cli.show",
    "cli_trace": "cli.trace",
}
"""Old module name (under alloclab.) -> its place now."""

_OWN_SPECS = {}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds alloclab.OLD and loads it as the module at its new place."""

    def find_spec(self, fullname, path=None, target=None):
        pkg, _, leaf = fullname.partition(".")
        if pkg != "alloclab" or leaf not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = importlib.import_module("alloclab." + MOVED[spec.name.partition(".")[2]])
        # the import system sets __spec__ to the alias's: kept to put back
        _OWN_SPECS[spec.name] = module.__spec__
        return module

    def get_code(self, fullname):
        # python -m alloclab.OLD: the module runs under its own name only
        raise ImportError("%s moved to alloclab.%s: run python -m alloclab.%s"
                          % (fullname, MOVED[fullname.partition(".")[2]],
                             MOVED[fullname.partition(".")[2]]))

    def exec_module(self, module):
        # the module ran when it was imported at its new place; it keeps its own spec
        module.__spec__ = _OWN_SPECS.pop(module.__spec__.name)


def install():
    """Put the finder on sys.meta_path once."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())


def register_loaded():
    """sys.modules["alloclab.OLD"] for every moved module already imported
    (code that reads sys.modules by the old name, as a monkeypatch does)."""
    for old, new in MOVED.items():
        module = sys.modules.get("alloclab." + new)
        if module is not None:
            sys.modules.setdefault("alloclab." + old, module)
