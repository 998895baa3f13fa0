"""The red-team matrix's file cells: every file argument of every command and
of the Python objects, given every kind of file a hostile or careless user
can name.

A *file cell* is (entry, argument, kind). ``entry`` is a command line
(``alloclab show FILE``) or a Python call (``Trace.save(FILE)``) with one
argument named FILE; ``kind`` is what FILE is made to be, in a fresh
temporary folder (``make_kind``):

  missing, empty, directory, fifo, chardev, socket, symlink (to a valid
  file), dangling (a symlink to nothing), unreadable, truncated (the first
  half of a valid file), sparse (a hole of 64 GiB), foreign (another
  tool's file: an ELF binary), emptyname ('')

A character device is made with mknod (1, 3: what /dev/null is) in the
temporary folder; where mknod is not allowed, the cell is a symlink in the
folder to /dev/null, and /dev/null must still be a character device
afterwards. Never a system node.

Each cell runs in its own process group, in a child, with a 10-s limit. It
passes when the entry gives a clear error (the CLI: exit 2 and one
``alloclab: error:`` line on stderr, no traceback; Python: an AlloclabError
subclass, never a generic exception) or the right result (exit 0, or what
the cell's ``ok`` check says), and afterwards nothing was destroyed (the
device is still a device, the pipe still a pipe, the directory still a
directory, the symlink still a symlink) and nothing is left running in its
process group. Anything else is a failure of one class: crash (a signal or
a traceback), hang (the limit), destroyed, left-running, silent (exit 0
where the cell expects a refusal), unclear (an error that is not one
``alloclab: error:`` line).

The entries themselves are declared by the modules that own the commands
(``redteam_files_*.py`` beside this file); each exports ``ENTRIES``, a list
of Entry.
"""

import dataclasses
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

CELL_LIMIT = 10.0
KINDS = ("missing", "empty", "directory", "fifo", "chardev", "socket", "symlink", "dangling",
         "unreadable", "truncated", "sparse", "foreign", "emptyname")
INPUT_REFUSED = frozenset(KINDS) - {"symlink"}
"""For an input, every kind but a symlink to a valid file must be refused."""
OUTPUT_OK = frozenset({"missing", "empty", "chardev", "symlink", "dangling", "unreadable"})
"""For an output: a new file, an existing regular file (as root even a
mode-000 one), a device written in place and a symlink whose target is
judged are written; the rest (a directory, a FIFO with no reader, a socket,
'') refused. truncated/sparse/foreign are regular files: written over."""
OUTPUT_OK_TOO = frozenset({"truncated", "sparse", "foreign"})

PY = sys.executable
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass
class Entry:
    """One file argument of one command or call.

    name: the cell's name ("show", "record --out");
    argv: for the CLI, the arguments after ``alloclab`` with "FILE" where the
      path goes (a function of the temporary folder is allowed: argv(tmp));
    code: for Python, source run in a child with FILE bound to the path; it
      raises to refuse and returns (falls off the end) to succeed;
    role: "input" or "output";
    valid: the bytes (or a function of tmp returning a path) of a valid file
      for this argument, from which symlink/truncated are made;
    expect: kind -> "ok" | "refused", overriding the role's defaults;
    ok: optional check(path, proc) -> None or a failure text, run after a
      success (e.g. that a written file is a trace);
    env: extra environment.
    """
    name: str
    role: str
    argv: object = None
    code: str = None
    valid: object = b""
    expect: dict = dataclasses.field(default_factory=dict)
    ok: object = None
    env: dict = dataclasses.field(default_factory=dict)
    skip: str = None

    def expected(self, kind):
        if kind in self.expect:
            return self.expect[kind]
        if self.role == "input":
            return "refused" if kind in INPUT_REFUSED else "ok"
        return "ok" if kind in OUTPUT_OK | OUTPUT_OK_TOO else "refused"


def is_png(path, out, err):
    """An entry's ok check for a figure written to FILE: a PNG (a device or a
    pipe: nothing to read back)."""
    if not path or not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return "FILE is not a PNG"
    return None


def _valid_path(entry, tmp):
    v = entry.valid
    if callable(v):
        return v(tmp)
    p = os.path.join(tmp, "valid.bin")
    with open(p, "wb") as f:
        f.write(v)
    return p


def make_kind(kind, tmp, entry):
    """Make FILE of ``kind`` in tmp; returns (path, note) where note names a
    fallback ("chardev: symlink to /dev/null, mknod refused")."""
    p = os.path.join(tmp, "FILE")
    note = None
    if kind == "missing":
        pass
    elif kind == "empty":
        open(p, "wb").close()
    elif kind == "directory":
        os.mkdir(p)
    elif kind == "fifo":
        os.mkfifo(p)
    elif kind == "chardev":
        try:
            os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            os.symlink("/dev/null", p)
            note = "chardev: a symlink to /dev/null (mknod refused)"
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(p)
        s.close()
    elif kind == "symlink":
        os.symlink(_valid_path(entry, tmp), p)
    elif kind == "dangling":
        os.symlink(os.path.join(tmp, "nowhere", "x") if entry.role == "input"
                   else os.path.join(tmp, "target"), p)
    elif kind == "unreadable":
        shutil.copyfile(_valid_path(entry, tmp), p)
        os.chmod(p, 0)
    elif kind == "truncated":
        with open(_valid_path(entry, tmp), "rb") as f:
            data = f.read()
        with open(p, "wb") as f:
            f.write(data[:len(data) // 2])
    elif kind == "sparse":
        with open(p, "wb") as f:
            f.truncate(64 << 30)
    elif kind == "foreign":
        shutil.copyfile(sys.executable if os.path.exists(sys.executable) else "/bin/true", p)
    elif kind == "emptyname":
        p = ""
    else:
        raise ValueError(kind)
    return p, note


def _snapshot(path):
    try:
        st = os.lstat(path)
    except (FileNotFoundError, ValueError):
        return None
    kinds = [("link", stat.S_ISLNK), ("dir", stat.S_ISDIR), ("fifo", stat.S_ISFIFO),
             ("chr", stat.S_ISCHR), ("sock", stat.S_ISSOCK), ("reg", stat.S_ISREG)]
    return next(k for k, t in kinds if t(st.st_mode))


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _child_code(entry, path):
    return ("import os, sys\nFILE = %r\nimport alloclab as al\n"
            "try:\n%s\nexcept al.AlloclabError as e:\n"
            "    sys.stderr.write('REFUSED %%s: %%s\\n' %% (type(e).__name__, e)); sys.exit(2)\n"
            % (path, "\n".join("    " + ln for ln in entry.code.strip().splitlines())))


def run_cell(entry, kind):
    """Run one cell; returns (outcome, detail, note): outcome "pass", or the
    failure's class (crash, hang, destroyed, left-running, silent, unclear,
    wrong)."""
    if entry.skip:
        return "skip", entry.skip, None
    tmp = tempfile.mkdtemp(prefix="alloclab-rtf-")
    try:
        path, note = make_kind(kind, tmp, entry)
        before = _snapshot(path) if path else None
        devnull_before = _snapshot("/dev/null")
        if entry.argv is not None:
            argv = entry.argv(tmp) if callable(entry.argv) else entry.argv
            cmd = [PY, "-m", "alloclab"] + [path if a == "FILE" else a for a in argv]
        else:
            cmd = [PY, "-c", _child_code(entry, path)]
        env = dict(os.environ, **entry.env)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(timeout=CELL_LIMIT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return "hang", "no answer within %.0f s: %s" % (CELL_LIMIT, cmd[2:]), note
        wall = time.monotonic() - t0
        err = err.decode("utf-8", "replace")
        leftover = _group_alive(proc.pid)
        if leftover:
            os.killpg(proc.pid, signal.SIGKILL)
        after = _snapshot(path) if path else None
        if before is not None and before != "reg" and after != before:
            return "destroyed", "FILE was %s, is now %s" % (before, after), note
        if devnull_before == "chr" and _snapshot("/dev/null") != "chr":
            return "destroyed", "/dev/null is no longer a character device", note
        if leftover:
            return "left-running", "processes of the cell's group still ran after it", note
        rc = proc.returncode
        if rc < 0:
            return "crash", "killed by signal %d: %s" % (-rc, err[-400:]), note
        if "Traceback (most recent call last)" in err:
            return "crash", err[-600:], note
        want = entry.expected(kind)
        if rc == 0:
            if want == "refused":
                return "silent", "exit 0 where a refusal was expected (%.1f s)" % wall, note
            if entry.ok is not None:
                why = entry.ok(path, out, err)
                if why:
                    return "wrong", why, note
            return "pass", None, note
        if rc == 2:
            lines = [ln for ln in err.splitlines() if ln.strip()]
            if entry.argv is not None:
                errs = [ln for ln in lines if ln.startswith("alloclab: error:")]
                if len(errs) != 1:
                    return "unclear", "exit 2 without exactly one 'alloclab: error:' line: %r" \
                        % err[-400:], note
            elif not any(ln.startswith("REFUSED ") for ln in lines):
                return "unclear", err[-400:], note
            if want == "ok":
                return "wrong", "refused a file it should take: %s" % err[-300:].strip(), note
            return "pass", None, note
        return "unclear", "exit %d: %s" % (rc, err[-400:]), note
    finally:
        for root, dirs, files in os.walk(tmp):
            for d in dirs:
                try:
                    os.chmod(os.path.join(root, d), 0o700)
                except OSError:
                    pass
        shutil.rmtree(tmp, ignore_errors=True)


def entries():
    """Every module's ENTRIES."""
    import importlib
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    out = []
    for fn in sorted(os.listdir(here)):
        if fn.startswith("redteam_files_") and fn.endswith(".py"):
            out.extend(importlib.import_module(fn[:-3]).ENTRIES)
    return out


def run_all(selected=None, workers=None):
    """{(entry name, kind): (outcome, detail, note)} for every cell, run
    ``workers`` at a time (each is a child process: the threads only wait)."""
    from concurrent.futures import ThreadPoolExecutor
    cells = [(e, k) for e in entries() for k in KINDS
             if selected is None or (e.name, k) in selected]
    workers = workers or max(2, (os.cpu_count() or 2))
    with ThreadPoolExecutor(workers) as pool:
        outs = list(pool.map(lambda c: run_cell(*c), cells))
    return {(e.name, k): o for (e, k), o in zip(cells, outs)}


def totals(results):
    """The matrix's counts: cells, passed, skipped and failures by class."""
    by = {}
    for outcome, _, _ in results.values():
        by[outcome] = by.get(outcome, 0) + 1
    notes = sorted({n for _, _, n in results.values() if n})
    return {"cells": len(results), "pass": by.pop("pass", 0), "skip": by.pop("skip", 0),
            "failures": by, "notes": notes}


if __name__ == "__main__":
    import json
    res = run_all()
    for (name, kind), (outcome, detail, _) in sorted(res.items()):
        if outcome not in ("pass", "skip"):
            print("%-10s %-28s %-10s %s" % (outcome, name, kind, (detail or "")[:200]))
    print(json.dumps(totals(res)))
