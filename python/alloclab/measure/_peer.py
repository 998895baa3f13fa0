"""Child-process entry for one run: read {task, run_index, peer} as JSON on
stdin, run it in this process (whose malloc is the preloaded peer, or its
own when peer is null: a fresh process per run), print {"raw": ...} or
{"error": ...} as one JSON line on stdout. The task's plugin layers are
loaded by path first (task["plugins"]: the shared objects that hold them),
so a plugin runs here exactly as it does in the parent. The policy comes
parsed (task["parsed"]): its layers are found by name, the text is not
parsed again.

Invariant: stdout carries exactly that one JSON line (the parent parses
it); anything else this process has to say goes to stderr."""

import json
import sys


def main():
    req = json.loads(sys.stdin.read())
    try:
        from .. import errors
        from ..policies.peers import current
        from ..policies.plugin import load
        from .run import run_once

        if req["peer"] is not None and current() != req["peer"]:
            raise errors.RunError("the child's malloc is %s, not %s: LD_PRELOAD did not take"
                                  % (current(), req["peer"]))
        load(req["task"].get("plugins") or ())
        out = {"raw": run_once(req["task"], req["run_index"], in_child=True)}
    except Exception as e:  # reported to the parent, which re-raises it
        out = {"error": {"type": type(e).__name__, "message": str(e),
                         "code": getattr(e, "code", None)}}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
