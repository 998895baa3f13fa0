"""The recorder: `alloclab record` and alloclab.record capture every
malloc-family call of a program (tests/preload/recprog.c: calls whose
kinds, sizes, alignments, NULL results and moves are known) with threads
and their parents, cross-thread frees, one trace per process image (fork,
exec) named in the index, a process killed mid-run finalised up to its last
chunk, on glibc and on a policy; the finaliser (al_rec_finish) on raw files
built here: copies dropped, address reuse inside a realloc, unknown frees,
truncated and corrupt files; bad input refused before anything runs.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

import pytest

import alloclab as al
from alloclab import errors
from alloclab._tracefmt import (FLAG_CROSS, FLAG_MOVED, FLAG_NULL, FLAG_UNKNOWN, FLAG_ZERO,
                                KINDS, NOID)
from alloclab.record import finish
from alloclab.trace import load

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = 987654
CLI = [sys.executable, "-m", "alloclab", "record"]
POLICIES = [None, "libarena-transfer"]
K = {name: i for i, name in enumerate(KINDS)}
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    exe = str(tmp_path_factory.mktemp("record") / "recprog")
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.check_call([cc, "-O1", "-fno-builtin", "-w", "-pthread", "-o", exe,
                           os.path.join(HERE, "preload", "recprog.c")])
    return exe


def marked(trace, thread=0):
    """The ops of `thread` between malloc(MARK) and malloc(MARK + 1)."""
    ops = trace.ops(thread)
    marks = [i for i, o in enumerate(ops) if o["kind"] == K["malloc"]
             and o["size"] in (MARK, MARK + 1)]
    assert len(marks) == 2, [(KINDS[o["kind"]], o["size"]) for o in ops]
    return ops[marks[0] + 1:marks[1]]


def rows(ops):
    return [(KINDS[o["kind"]], int(o["size"]), int(o["aux"]),
             int(o["flags"]) & ~(FLAG_MOVED | FLAG_CROSS)) for o in ops]


@pytest.mark.parametrize("policy", POLICIES)
def test_every_kind_recorded_with_its_arguments(policy, prog):
    rec = al.record([prog, "calls"], policy=policy, capture_output=True, text=True)
    try:
        assert rec.returncode == 0 and rec.out is None and rec.index is None
        (im,) = rec.images
        assert im["complete"] and im["end"] == "exit" and im["how"] == "first"
        t = im["trace"]
        ops = marked(t)
        huge = (1 << 63) - 1
        assert rows(ops) == [
            ("malloc", 100, 0, 0), ("malloc", 0, 0, FLAG_ZERO), ("calloc", 120, 3, 0),
            ("realloc", 1 << 20, 100, 0), ("realloc", (1 << 20) - 4096, 1 << 20, 0),
            ("free", 0, 0, FLAG_NULL), ("posix_memalign", 300, 64, 0),
            ("aligned_alloc", 256, 128, 0), ("memalign", 50, 32, 0), ("valloc", 10, PAGE, 0),
            ("pvalloc", 10, PAGE, 0), ("usable_size", int(ops[11]["size"]), 0, 0),
            ("malloc", huge, 0, FLAG_NULL), ("realloc", 2**64 - 1, 120, FLAG_NULL)] + \
            [("free", 0, 0, 0)] * 8 + [("free", 0, 0, FLAG_NULL)]
        ids = [int(o["id"]) for o in ops]
        refs = [int(o["ref"]) for o in ops]
        a, z, b, big, r, c, d, e, f, g = (ids[i] for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10))
        assert NOID not in (a, z, b, big, r, c, d, e, f, g)
        assert len({a, z, b, big, r, c, d, e, f, g}) == 10 and ids[12] == ids[13] == NOID
        assert refs[3] == a and refs[4] == big and refs[11] == c and refs[13] == b
        assert refs[14:22] == [b, z, r, c, d, e, f, g] and refs[5] == refs[22] == NOID
        assert ops[11]["size"] >= 300  # what malloc_usable_size returned
        moved, inplace = (int(w) for w in rec_words(rec.stdout, ("moved", "inplace")))
        assert bool(ops[3]["flags"] & FLAG_MOVED) == bool(moved)
        assert bool(ops[4]["flags"] & FLAG_MOVED) == (not inplace)
        assert t._t.unknown_refs == 0 and t._t.cross_refs == 0
        seq = t.seq(0)
        assert (seq[1:] > seq[:-1]).all()
        if policy:
            assert rec.stats["on_glibc"] == [] and rec.stats["served"] == 1.0
    finally:
        rec.close()


def rec_words(text, names):
    words = text.split()
    return [words[words.index(n) + 1] for n in names]


def test_threads_parents_and_cross_thread_frees(prog):
    rec = al.record([prog, "threads"])
    try:
        t = rec.images[0]["trace"]
        assert t.nthreads == 6
        kinds = t._t.kind_ops
        assert kinds[K["thread_start"]] == 6 and kinds[K["thread_exit"]] == 5
        parents = [t._t.threads[i].parent for i in range(6)]
        sizes = {}
        for k in range(1, 6):
            ops = t.ops(k)
            assert ops[0]["kind"] == K["thread_start"] and ops[-1]["kind"] == K["thread_exit"]
            mine = [int(o["size"]) for o in ops if o["kind"] == K["malloc"]]
            sizes[k] = set(mine)
            if len(mine) == 100:
                assert len(set(mine)) == 1 and 32 <= mine[0] < 36
        workers = {min(s): k for k, s in sizes.items() if len(s) == 1 and min(s) != 55}
        nested = [k for k, s in sizes.items() if s == {55}]
        assert sorted(workers) == [32, 33, 34, 35] and len(nested) == 1
        assert parents[0] == NOID and all(parents[k] == 0 for k in workers.values())
        assert parents[nested[0]] == workers[32]
        objs = {int(o["id"]) for k in workers.values() for o in t.ops(k)
                if o["kind"] == K["malloc"]}
        # main frees the workers' objects (pthread_join frees glibc's own too)
        frees = [o for o in marked(t) if o["kind"] == K["free"] and int(o["ref"]) in objs]
        owner = t.owner()
        assert len(objs) == len(frees) == 400
        assert all(o["flags"] & FLAG_CROSS for o in frees)
        assert sorted(int(owner[o["ref"]]) for o in frees) == \
            sorted(k for k in workers.values() for _ in range(100))
    finally:
        rec.close()


@pytest.fixture(scope="module")
def stress(tmp_path_factory):
    out = tmp_path_factory.mktemp("stress")
    cc = shutil.which("cc") or shutil.which("gcc")
    built = {}
    for name in ("xstress", "mt"):
        built[name] = str(out / name)
        subprocess.check_call([cc, "-O1", "-pthread", "-o", built[name],
                               os.path.join(HERE, "preload", name + ".c")])
    return built


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name, args", [("xstress", []), ("mt", ["4"])])
def test_threads_handing_objects_over_give_a_consistent_trace(name, args, policy, stress):
    """Objects freed and reallocated across threads, addresses reused at
    once: the finaliser's seal (every id created once, used after its
    creation and before its free, in seq order) holds, so the seq order
    the shim took agrees with every address reuse."""
    rec = al.record([stress[name]] + args, policy=policy, capture_output=True, text=True)
    try:
        assert rec.returncode == 0 and "done 0" in rec.stdout
        (im,) = rec.images
        t = im["trace"]
        assert im["complete"] and im["duplicates"] == 0
        # glibc's own teardown of a thread (__libc_thread_freeres frees its
        # per-thread buffers) comes after the thread's exit was recorded
        assert im["unrecorded"] <= 4 * 4
        assert t.nthreads == 5 and t._t.kind_ops[K["thread_exit"]] == 4
        assert t._t.unknown_refs == 0
        if name == "xstress":
            assert t._t.cross_refs > 100 and t._t.kind_ops[K["realloc"]] > 1000
        else:
            assert t.nops > 4 * 500 * 256
    finally:
        rec.close()


def test_fork_and_exec_are_traces_of_their_own(prog, tmp_path):
    out = tmp_path / "f.trace"
    rec = al.record([prog, "fork"], out, capture_output=True, text=True)
    assert rec.returncode == 0
    child = int(rec_words(rec.stdout, ("child",))[0])
    assert [im["how"] for im in rec.images] == ["first", "fork", "exec"]
    assert [im["parent"] for im in rec.images] == [None, 0, 1]
    assert [im["pid"] for im in rec.images][1:] == [child, child]
    with open(rec.index) as f:
        index = json.load(f)
    assert rec.index == str(out) + ".index.json"
    files = [im["file"] for im in index["images"]]
    assert files == ["f.trace", "f.%d.trace" % child, "f.%d.1.trace" % child]
    assert sorted(os.listdir(tmp_path)) == sorted(files + ["f.trace.index.json"])
    assert index["returncode"] == 0 and index["command"] == [prog, "fork"]
    sizes = []
    for name in files:
        t = load(tmp_path / name)
        sizes.append(sorted({int(s) for s in t.ops(0)["size"]} & {111, 222, 333}))
        assert t.meta["pid"] in (child, rec.images[0]["pid"]) and t.meta["complete"]
        t.close()
    # the child never sees the parent's unflushed calls; exec starts afresh
    assert sizes == [[111], [222], [333]]


def test_killed_process_is_finalised_up_to_its_last_chunk(prog, tmp_path):
    out = tmp_path / "k.trace"
    proc = subprocess.run(CLI + ["--out", str(out), "--", prog, "kill"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 128 + 9, proc.stderr
    assert "incomplete" in proc.stderr
    with open(str(out) + ".index.json") as f:
        (im,) = json.load(f)["images"]
    assert not im["complete"] and im["end"] == "killed" and "no end record" in im["note"]
    t = load(out)
    ops = t.ops(0)[2:]  # after the start and the mark: malloc/free pairs in order
    n = len(ops) // 2
    assert 1000 < n < 50000 and t.meta["complete"] is False
    assert (ops["size"][0:2 * n:2] == [16 + (i & 255) for i in range(n)]).all()
    assert (ops["kind"][1:2 * n:2] == K["free"]).all()
    assert (ops["ref"][1:2 * n:2] == ops["id"][0:2 * n:2]).all()
    t.close()


def test_a_signal_to_alloclab_goes_on_to_the_command(tmp_path):
    """SIGTERM sent to `alloclab record` ends the command, which is waited
    for; its trace is still written (cut short: no exit handlers ran)."""
    import signal
    out = tmp_path / "t.trace"
    script = "import signal; print('ready', flush=True); signal.pause()"
    proc = subprocess.Popen(CLI + ["--out", str(out), "--", sys.executable, "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONMALLOC="malloc"))
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
    with open(str(out) + ".index.json") as f:
        index = json.load(f)
    assert index["returncode"] == -signal.SIGTERM
    # what python3 had flushed: its start-up is more than a buffer of calls
    assert index["images"][0]["end"] == "killed" and index["images"][0]["ops"] > 1000


def test_exit_status_passes_through(tmp_path):
    proc = subprocess.run(CLI + ["--out", str(tmp_path / "s.trace"), "--quiet", "--", "sh",
                                 "-c", "exit 5"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5 and proc.stderr == ""
    assert os.path.exists(tmp_path / "s.trace")


@pytest.mark.parametrize("args, what", [
    ([], "needs a command"),
    (["--", "no-such-command-xyz"], "command not found"),
    (["--policy", "libc", "--", "true"], "cannot back a program's malloc"),
    (["--policy", "nosuch", "--", "true"], "unknown layer"),
    (["--compress", "zip", "--", "true"], "zip"),
])
def test_bad_input_is_one_error_line_and_nothing_written(args, what, tmp_path):
    proc = subprocess.run(CLI + ["--out", str(tmp_path / "x.trace")] + args,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("alloclab: error: ") and proc.stderr.count("\n") == 1
    assert what in proc.stderr and os.listdir(tmp_path) == []


@pytest.mark.parametrize("out, why", [("nodir/x.trace", "does not exist"),
                                      (".", "it is a directory")])
def test_unwritable_out_is_refused(out, why, tmp_path):
    proc = subprocess.run(CLI + ["--out", str(tmp_path / out), "--", "true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("alloclab: error: trace ")
    assert why in proc.stderr and proc.stderr.count("\n") == 1
    assert os.listdir(tmp_path) == []


# ---- --out that is not a regular file (alloclab.files judges it) ----

def _socket(path):
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


@pytest.mark.parametrize("kind, why", [
    ("fifo", "a named pipe with no reader"), ("socket", "it is a socket"),
    ("directory", "it is a directory"), ("emptyname", "the name is empty")])
def test_out_that_cannot_take_a_trace_is_refused_before_the_command_runs(kind, why,
                                                                          tmp_path):
    out = tmp_path / "out"
    {"fifo": os.mkfifo, "socket": _socket, "directory": os.mkdir,
     "emptyname": lambda p: None}[kind](out)
    ran = tmp_path / "ran"
    proc = subprocess.run(CLI + ["--out", "" if kind == "emptyname" else str(out), "--",
                                 "sh", "-c", "touch %s" % ran],
                          capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert proc.returncode == 2 and proc.stderr.startswith("alloclab: error: ")
    assert why in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not ran.exists()  # refused before the command ran
    if kind == "emptyname":
        assert os.listdir(tmp_path) == []
    else:  # left as it was
        import stat
        test = {"fifo": stat.S_ISFIFO, "socket": stat.S_ISSOCK, "directory": stat.S_ISDIR}
        assert test[kind](os.lstat(out).st_mode) and os.listdir(tmp_path) == ["out"]


def _chardev(path):
    """A character device like /dev/null at path (mknod), or a symlink to
    /dev/null where mknod is not allowed."""
    import stat
    try:
        os.mknod(str(path), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        os.symlink("/dev/null", str(path))


def test_a_device_out_takes_the_first_trace_in_place_and_nothing_else(tmp_path):
    import stat
    dev = tmp_path / "dev"
    _chardev(dev)
    proc = subprocess.run(CLI + ["--out", str(dev), "--", "sh", "-c", "ls / > /dev/null"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.stat(dev).st_mode) and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(os.listdir(tmp_path)) == ["dev"]  # no index, no sibling traces
    assert "%s: first pid" % dev in proc.stderr
    assert "(not written): fork pid" in proc.stderr
    assert "warning: %s is a character device: only the first process image's trace " \
        "was written there; 1 further image(s) and the index were not written" % dev \
        in proc.stderr


def test_a_symlinked_out_writes_its_target(tmp_path):
    target = tmp_path / "real.trace"
    target.write_bytes(b"old")
    link = tmp_path / "link.trace"
    link.symlink_to(target)
    rec = al.record(["sh", "-c", "true"], link)
    assert rec.returncode == 0 and os.path.islink(link)
    with load(target) as t:
        assert t.nops > 0
    assert sorted(os.listdir(tmp_path)) == ["link.trace", "link.trace.index.json",
                                            "real.trace"]


def test_a_sibling_name_taken_by_something_not_a_file_is_passed_over(tmp_path):
    from alloclab.record import _names
    out = tmp_path / "s.trace"
    os.mkdir(tmp_path / "s.4242.trace")
    os.mkfifo(tmp_path / "s.4242.1.trace")
    (tmp_path / "s.77.trace").write_bytes(b"old")  # a regular file is replaced
    images = [{"pid": 1}, {"pid": 4242}, {"pid": 4242}, {"pid": 77}]
    _names(out, images)
    assert [im["path"] for im in images] == [str(out)] + [
        str(tmp_path / n) for n in ("s.4242.2.trace", "s.4242.3.trace", "s.77.trace")]


def test_non_ascii_program_and_argv_are_recorded_as_they_are(tmp_path, monkeypatch):
    """The shim writes bytes; the header names the real file: UTF-8 names
    as they are, a byte that is not UTF-8 as os.fsdecode gives it back."""
    names = ["prög", os.fsdecode(b"pr\xffg")]
    monkeypatch.chdir(tmp_path)
    for name in names:
        exe = os.path.join(os.fsencode(str(tmp_path)), os.fsencode(name))
        shutil.copyfile("/bin/sh", exe)
        os.chmod(exe, 0o755)
    for name in names:
        out = tmp_path / ("t-%d.trace" % names.index(name))
        rec = al.record(["./" + name, "-c", ": ärg"], out)
        assert rec.returncode == 0
        im = rec.images[0]
        assert im["argv"] == ["./" + name, "-c", ": ärg"]
        assert os.fsencode(im["exe"]) == os.path.join(os.fsencode(os.path.realpath(
            str(tmp_path))), os.fsencode(name))
        with load(out) as t:
            assert t.meta["program"] == im["exe"] and os.path.exists(t.meta["program"])
            assert t.meta["argv"] == im["argv"]
        with open(rec.index, encoding="utf-8") as f:
            assert json.load(f)["images"][0]["exe"] == im["exe"]


# ---- the finaliser on raw files built here (csrc/trace/raw.h) ----

def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def zz(d):
    return varint(d << 1 if d >= 0 else (-d << 1) - 1)


class Raw:
    """A raw file: header, then chunks of ops encoded as the shim does."""
    NULL, ZERO, OLD = 0x10, 0x20, 0x40

    HDR = struct.Struct("<8sIIQdiiIIQQQ")  # struct rec_file_hdr

    def __init__(self, version=1):
        self.data = self.HDR.pack(b"ALRECRAW", version, self.HDR.size, 1000, 1.0, 42, 1, 0,
                                  0, 0, 0, 0)

    def chunk(self, thread, ops, base_seq=0, base_tick=1000):
        """ops: (kind, seq, tick, fields...) with addresses as ("a", value)."""
        body, seq, tick, last = bytearray(), base_seq, base_tick, 0
        for kind, flags, s, t, *fields in ops:
            body += bytes([K[kind] | flags]) + varint(s - seq) + varint(t - tick)
            seq, tick = s, t
            for f in fields:
                if isinstance(f, tuple):
                    body += zz(f[1] - last)
                    last = f[1]
                else:
                    body += varint(f)
        c = struct.pack("<IIIIQQ", 0x4B43524C, thread, len(body), len(ops), base_seq,
                        base_tick) + bytes(body)
        self.data += c
        return c

    def end(self):
        self.data += struct.pack("<IIIIQQQQII", 0x4B43524C, 0xFFFFFFFF, 24, 0, 0, 0,
                                 2000, 0, 1, 1)

    def write(self, path):
        path.write_bytes(self.data)
        return str(path)


def test_finish_drops_copies_and_keeps_addresses_consistent_inside_a_realloc(tmp_path):
    raw = Raw()
    t0 = [("thread_start", 0, 1, 1001, 0), ("malloc", 0, 2, 1002, 64, ("a", 0x1000)),
          ("realloc", Raw.OLD, 3, 1003, ("a", 0x1000), 128, 3, ("a", 0x2000))]
    raw.chunk(0, t0)
    raw.chunk(0, t0)  # written twice (an end flush, then the owner's)
    # thread 1 gets 0x1000 between the realloc's two seqs (3 and 6)
    raw.chunk(1, [("thread_start", 0, 4, 1004, 1), ("malloc", 0, 5, 1005, 32, ("a", 0x1000)),
                  ("free", 0, 7, 1007, ("a", 0x1000)), ("free", 0, 8, 1008, ("a", 0x9000)),
                  ("free", Raw.NULL, 9, 1009)])
    raw.end()
    t, info = finish(raw.write(tmp_path / "raw"))
    assert info["complete"] and info["duplicates"] == 3 and info["end"] == "exit"
    assert info["pid"] == 42 and info["threads"] == 2 and info["note"] == ""
    r0, r1 = t.ops(0), t.ops(1)
    assert list(r0["id"][1:]) == [0, 2] and r0[2]["ref"] == 0 and r0[2]["aux"] == 64
    assert r0[2]["flags"] & FLAG_MOVED and list(t.seq(0)) == [1, 2, 6]
    assert r1[1]["id"] == 1 and r1[2]["ref"] == 1 and r1[0]["aux"] == 0
    assert r1[3]["ref"] == NOID and r1[3]["flags"] & FLAG_UNKNOWN
    assert r1[4]["flags"] & FLAG_NULL and t._t.unknown_refs == 1
    assert t.t_ns(1)[2] == 7 and r1[2]["dt"] == 2
    t.close()


def test_finish_of_a_truncated_file_stops_at_the_last_whole_chunk(tmp_path):
    raw = Raw()
    raw.chunk(0, [("thread_start", 0, 1, 1001, 0), ("malloc", 0, 2, 1002, 8, ("a", 0x10))])
    whole = len(raw.data)
    raw.chunk(0, [("free", 0, 3, 1003, ("a", 0x10))], base_seq=2, base_tick=1002)
    raw.data = raw.data[:-3]
    t, info = finish(raw.write(tmp_path / "raw"))
    assert not info["complete"] and info["valid_bytes"] == whole
    assert "offset %d" % whole in info["note"] and t.nops == 2
    t.close()


def test_finish_refuses_corrupt_and_foreign_files(tmp_path):
    raw = Raw(version=7)
    with pytest.raises(errors.FileFormatError, match="version 7 at offset 8"):
        finish(raw.write(tmp_path / "v"))
    raw = Raw()
    c = raw.chunk(0, [("thread_start", 0, 1, 1001, 0)])
    raw.data = raw.data[:-len(c)] + c[:-1] + b"\xff"  # a varint that never ends
    with pytest.raises(errors.FileFormatError,
                       match="corrupt chunk at offset %d" % Raw.HDR.size):
        finish(raw.write(tmp_path / "c"))
    (tmp_path / "n").write_bytes(b"not a raw file " * 8)
    with pytest.raises(errors.FileFormatError, match="bad magic at offset 0"):
        finish(str(tmp_path / "n"))
    (tmp_path / "s").write_bytes(b"ALRECRAW")
    with pytest.raises(errors.FileFormatError, match="8 bytes, shorter than its header"):
        finish(str(tmp_path / "s"))
    with pytest.raises(errors.InvalidArgument, match="raw file .*missing: no such file"):
        finish(str(tmp_path / "missing"))
    os.mkfifo(tmp_path / "fifo")  # refused without being opened: an open would block
    with pytest.raises(errors.InvalidArgument, match="it is a named pipe, not a regular file"):
        finish(str(tmp_path / "fifo"))


def test_the_first_example_of_the_page_compiles_and_records(tmp_path):
    """docs/record.md's first command, as printed, from the repository's
    root (its paths are the tree's); only the files it writes go to tmp."""
    import re
    import shlex
    root = os.path.dirname(HERE)
    with open(os.path.join(root, "docs", "record.md"), encoding="utf-8") as f:
        block = re.search(r"^```\n(.*?)^```$", f.read(), re.S | re.M).group(1)
    argv = shlex.split(block.splitlines()[0])
    assert argv[:2] == ["alloclab", "record"] and "gcc.trace" in argv and "pages.o" in argv
    argv = [str(tmp_path / a) if a in ("gcc.trace", "pages.o") else a for a in argv]
    proc = subprocess.run([sys.executable, "-m", "alloclab"] + argv[1:], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "pages.o").exists()
    with open(str(tmp_path / "gcc.trace") + ".index.json") as f:
        assert len(json.load(f)["images"]) > 1  # the driver and what it ran


# ---- processes that ran without the recorder ----

@pytest.fixture(scope="module")
def static_prog(tmp_path_factory):
    """A statically linked program (the loader preloads nothing into it), or
    None where this machine cannot link one."""
    d = tmp_path_factory.mktemp("static")
    (d / "s.c").write_text("int main(void) { return 0; }\n")
    cc = shutil.which("cc") or shutil.which("gcc")
    p = subprocess.run([cc, "-static", "-o", str(d / "sprog"), str(d / "s.c")],
                       capture_output=True)
    return str(d / "sprog") if p.returncode == 0 else None


def test_processes_that_ran_without_the_recorder_are_named_and_exit_125(tmp_path,
                                                                        static_prog):
    if static_prog is None:
        pytest.skip("cannot link a static program here")
    out = tmp_path / "u.trace"
    script = "ls / > /dev/null; %s; env -i /bin/ls / > /dev/null; true" % static_prog
    proc = subprocess.run(CLI + ["--out", str(out), "--", "sh", "-c", script],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 125, proc.stderr
    errs = [x for x in proc.stderr.splitlines() if x.startswith("alloclab: error:")]
    assert len(errs) == 1 and errs[0].startswith("alloclab: error: 2 of ")
    assert "exec'd %s, which ran without the recorder (a statically linked program)" \
        % static_prog in errs[0]
    assert "exec'd /bin/ls, which ran without the recorder (the environment it was given " \
        "drops LD_PRELOAD or ALLOCLAB_RECORD)" in errs[0]
    with open(str(out) + ".index.json") as f:  # the others' traces are written
        index = json.load(f)
    assert len(index["not_recorded"]) == 2 and len(index["images"]) >= 3
    accepted = subprocess.run(CLI + ["--out", str(out), "--allow-unrecorded", "--", "sh", "-c",
                                     script], capture_output=True, text=True, timeout=120)
    assert accepted.returncode == 0 and "alloclab: error" not in accepted.stderr
    assert "alloclab: warning: 2 of " in accepted.stderr


def test_a_run_whose_every_process_was_recorded_names_none(tmp_path):
    rec = al.record(["sh", "-c", "ls / > /dev/null; /bin/ls / > /dev/null; true"],
                    tmp_path / "a.trace")
    assert rec.returncode == 0 and rec.unrecorded == [] and len(rec.images) == 3
    rec = al.record(["sh", "-c", "env -i /bin/ls / > /dev/null; true"])
    assert len(rec.unrecorded) == 1 and "exec'd /bin/ls" in rec.unrecorded[0]
    rec.close()


# ---- the recorder's death ends the command (the supervisor) ----

def _alive_in_group(pgid):
    """The pids of processes of group pgid that are not zombies (/proc)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            out.append(int(name))
    return out


def _until(test, limit=10.0):
    """Poll test() until it is true or limit seconds passed; its last value."""
    import time
    end = time.monotonic() + limit
    while not test() and time.monotonic() < end:
        time.sleep(0.02)
    return test()


def test_sigkill_of_the_recorder_kills_the_command_group_and_removes_its_raw_folder(
        tmp_path):
    import signal
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = "sleep 600 & echo $$; sleep 600; wait"  # the command and two in its group
    proc = subprocess.Popen(CLI + ["--out", str(tmp_path / "x.trace"), "--", "sh", "-c",
                                   script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, TMPDIR=str(tmp)), start_new_session=True)
    pid = None
    try:
        pid = int(proc.stdout.readline())
        assert os.getpgid(pid) == pid != os.getpgid(proc.pid)  # a group of its own
        assert _until(lambda: len(_alive_in_group(pid)) == 3), _alive_in_group(pid)
        (raw,) = os.listdir(tmp)
        assert raw.startswith("alloclab-record-%d-" % proc.pid)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert _until(lambda: not _alive_in_group(pid)), _alive_in_group(pid)
        assert _until(lambda: not os.listdir(tmp)), os.listdir(tmp)
        assert not (tmp_path / "x.trace").exists()
    finally:
        for p in _alive_in_group(pid) if pid else ():
            os.kill(p, signal.SIGKILL)
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_raw_folders_of_dead_recorders_are_removed_by_the_next_record(tmp_path):
    from alloclab.record import OWNER_FILE, RAW_PREFIX, _pid_namespace, _start_time
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    folders = {
        "dead": {"pid": gone.pid, "start": 1, "pid_namespace": _pid_namespace()},
        "alive": {"pid": os.getpid(), "start": _start_time(os.getpid()),
                  "pid_namespace": _pid_namespace()},
        "elsewhere": {"pid": gone.pid, "start": 1, "pid_namespace": "pid:[1]"},
    }
    for name, owner in folders.items():
        d = tmp / ("%s%d-%s" % (RAW_PREFIX, owner["pid"], name))
        d.mkdir()
        (d / OWNER_FILE).write_text(json.dumps(owner))
        (d / "raw.1").write_bytes(b"x" * 100)
    proc = subprocess.run(CLI + ["--out", str(tmp_path / "x.trace"), "--", "true"],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, TMPDIR=str(tmp)))
    assert proc.returncode == 0, proc.stderr
    dead = str(tmp / ("%s%d-dead" % (RAW_PREFIX, gone.pid)))
    assert sorted(os.listdir(tmp)) == sorted(
        "%s%d-%s" % (RAW_PREFIX, o["pid"], n) for n, o in folders.items() if n != "dead")
    assert "alloclab: warning: removed 1 raw folder(s) left by recorders that were " \
        "killed: %s\n" % dead in proc.stderr


def test_in_a_terminal_the_command_reads_it_and_ctrl_c_ends_it(tmp_path):
    """The command's group is the terminal's foreground group while it runs:
    it reads the terminal (a background group would be stopped by SIGTTIN)
    and ^C reaches it; alloclab exits 130 and writes the traces."""
    import fcntl
    import pty
    import select
    import termios
    import time
    master, slave = pty.openpty()

    def own_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    out = tmp_path / "t.trace"
    # python3 takes SIGINT from its start (a shell between "echo" and its
    # next child may defer a ^C until that child ends), and an uncaught
    # KeyboardInterrupt ends it by SIGINT
    script = "import time; x = input(); print('got', x, flush=True); time.sleep(600)"
    proc = subprocess.Popen(CLI + ["--out", str(out), "--", sys.executable, "-c", script],
                            stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal)
    os.close(slave)
    seen, end = b"", time.monotonic() + 30

    def until(word):
        nonlocal seen
        while word not in seen and time.monotonic() < end:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    seen += os.read(master, 4096)
                except OSError:  # the terminal's last process is gone
                    break
        return word in seen

    try:
        os.write(master, b"hello\n")
        assert until(b"got hello"), seen
        os.write(master, b"\x03")
        assert proc.wait(timeout=30) == 130, seen
        assert until(b"index: "), seen
    finally:
        proc.kill()
        proc.wait()
        os.close(master)
    with open(str(out) + ".index.json") as f:
        assert json.load(f)["returncode"] == -2


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("env, keeps", [("", True), ("env -u ALLOCLAB_RECORD", False),
                                        ("env -u LD_PRELOAD", False)])
def test_the_shim_says_whether_an_exec_keeps_the_recorder(tmp_path, policy, env, keeps):
    """An image's stats record says whether the image it exec'd loads the
    shim as it did (exec_preload): recording, that needs ALLOCLAB_RECORD;
    on glibc no policy is needed. record trusts it to tell an image killed
    before it started from one that ran without the recorder."""
    import importlib
    from alloclab import preload
    rec_mod = importlib.import_module("alloclab.record")
    raw = tmp_path / "raw"
    raw.mkdir()
    argv, e = rec_mod.command(["sh", "-c", "%s /bin/true" % env], str(raw), policy)
    subprocess.run(argv, env=e, check=True, timeout=60)
    env_image = [r for r in preload.records(str(raw / "stats"))
                 if r.get("end") == "exec" and r.get("exec", "").endswith("/true")]
    assert len(env_image) == 1 and env_image[0]["exec_preload"] is keeps
