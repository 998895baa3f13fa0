"""Trace files (alloclab.trace: Trace.save, load; docs/traces.md).

Round trips are exact (every op field, seq, t_ns, owners, the header's
metadata) for every compressor; a program-like trace stays under 6 bytes an
op; every truncation, every byte change and every kind of bad file gives a
FileFormatError naming the path, the byte offset and what is wrong, and
nothing else.
"""

import gc
import json
import os
import pathlib
import zlib

import numpy as np
import pytest

from alloclab import errors, trace, tracegen
from alloclab._tracefmt import FLAG_CROSS, FLAG_MOVED, FLAG_NULL, FLAG_UNKNOWN, FLAG_ZERO, KINDS

BIG = 1 << 40
GAP = (1 << 34) + 5  # a gap between two ops beyond 32 bits of ns


def sample(meta=None):
    """Three threads: every kind, every stored flag, cross-thread refs, an
    unknown ref, NOID results, 2^40 sizes, a gap beyond 32 bits, an op with
    a field its kind does not carry, a dt that does not follow from t_ns."""
    t0 = [
        {"kind": "thread_start", "aux": None},
        {"kind": "malloc", "size": 24, "id": 0, "dt": 10},
        {"kind": "calloc", "size": BIG, "aux": 1 << 20, "id": 1, "dt": 0xFFFFFFFF, "t_ns": GAP},
        {"kind": "realloc", "size": BIG * 2, "aux": BIG, "ref": 1, "id": 2, "dt": 7,
         "flags": FLAG_MOVED},
        {"kind": "realloc", "size": 10, "aux": BIG * 2, "ref": 2, "id": None, "flags": FLAG_NULL},
        {"kind": "free", "ref": None, "flags": FLAG_NULL},
        {"kind": "free", "ref": None, "flags": FLAG_UNKNOWN},
        {"kind": "malloc", "size": 0, "id": None, "flags": FLAG_NULL | FLAG_ZERO},
        {"kind": "usable_size", "ref": 0, "size": 24},
        {"kind": "posix_memalign", "size": 100, "aux": 64, "id": 3},
        {"kind": "aligned_alloc", "size": 128, "aux": 128, "id": 4},
        {"kind": "memalign", "size": 8, "aux": 32, "id": 5},
        {"kind": "valloc", "size": 10, "aux": 4096, "id": 6},
        {"kind": "pvalloc", "size": 10, "aux": 4096, "id": 7},
        {"kind": "malloc", "size": 5, "aux": 9, "id": 8, "dt": 12345},
        {"kind": "thread_exit"},
    ]
    t1 = [{"kind": "thread_start", "aux": 0, "t_ns": 5000},
          {"kind": "free", "ref": 0, "dt": 3},
          {"kind": "malloc", "size": 48, "id": 9, "dt": 1},
          {"kind": "usable_size", "ref": 3, "size": 112}]
    t2 = [{"kind": "thread_start", "aux": 1, "t_ns": 6000},
          {"kind": "free", "ref": 9, "t_ns": 7000},  # dt 0 against a 1000 ns gap
          {"kind": "free", "ref": 3}]
    return trace.Trace.from_ops([t0, t1, t2], meta=meta)


def same(a, b):
    assert (a.nthreads, a.nops, a.nobjects) == (b.nthreads, b.nops, b.nobjects)
    for k in range(a.nthreads):
        assert a.ops(k).tobytes() == b.ops(k).tobytes()
        np.testing.assert_array_equal(a.seq(k), b.seq(k))
        np.testing.assert_array_equal(a.t_ns(k), b.t_ns(k))
        assert a._t.threads[k].parent == b._t.threads[k].parent
    np.testing.assert_array_equal(a.owner(), b.owner())
    assert a._t.cross_refs == b._t.cross_refs and a._t.unknown_refs == b._t.unknown_refs


@pytest.mark.parametrize("compress", trace.COMPRESSORS)
def test_round_trip_every_kind_and_flag(tmp_path, compress):
    t = sample()
    assert {KINDS[k] for k in np.concatenate([t.ops(k)["kind"] for k in range(3)])} == \
        set(KINDS)
    assert t._t.cross_refs == 4 and t._t.unknown_refs == 1
    path = tmp_path / "s.altrace"
    header = t.save(path, compress=compress)
    assert header["compressor"] == compress
    u = trace.load(path)
    same(t, u)
    ops = u.ops(0)
    assert ops["size"][3] == BIG * 2 and ops["aux"][2] == 1 << 20
    assert ops["dt"][2] == 0xFFFFFFFF and u.t_ns(0)[2] == GAP
    assert ops["dt"][14] == 12345 and ops["aux"][14] == 9
    assert ops["flags"][7] == FLAG_NULL | FLAG_ZERO
    assert u.ops(2)["flags"][1] & FLAG_CROSS and u._t.threads[2].parent == 1


def test_round_trip_program_like_threads(tmp_path):
    t = tracegen.program_like(5000, threads=6, seed=3)
    assert t._t.cross_refs > 0 and t.nthreads == 6
    t.save(tmp_path / "p.altrace")
    same(t, trace.Trace.load(str(tmp_path / "p.altrace")))


def test_empty_thread_and_empty_trace(tmp_path):
    for threads in ([[]], [[{"kind": "malloc", "size": 1, "id": 0}], []]):
        t = trace.Trace.from_ops(threads)
        t.save(tmp_path / "e.altrace")
        same(t, trace.load(tmp_path / "e.altrace"))


@pytest.mark.parametrize("threads", [1, 8])
def test_program_like_bytes_per_op_under_goal(tmp_path, threads):
    t = tracegen.program_like(40000, threads=threads, seed=threads)
    path = tmp_path / "p.altrace"
    header = t.save(path)
    assert header["compressor"] == trace.DEFAULT_COMPRESSOR == "zlib"
    assert os.path.getsize(path) / t.nops <= 6.0
    assert header["stored_length"] < header["body_length"]


def test_meta_round_trips(tmp_path):
    meta = {"program": "/usr/bin/sqlite3", "argv": ["sqlite3", ":memory:"], "pid": 41,
            "ppid": 7, "policy": "glibc", "recorded": trace.now_utc(),
            "machine": trace.machine_info(), "note": {"any": [1, "json"]}}
    t = sample(meta)
    t.save(tmp_path / "m.altrace", compress="lzma")
    u = trace.load(tmp_path / "m.altrace")
    assert {k: u.meta[k] for k in meta} == meta
    assert (u.meta["threads"], u.meta["ops"], u.meta["objects"]) == (3, t.nops, t.nobjects)
    assert u.meta["compressor"] == "lzma"
    assert set(u.meta["machine"]) == {"uname", "cpu_model", "cpus"}
    u.save(tmp_path / "n.altrace", compress="bz2")
    v = trace.load(tmp_path / "n.altrace")
    assert {k: v.meta[k] for k in meta} == meta and v.meta["compressor"] == "bz2"
    assert trace.read_meta(tmp_path / "n.altrace") == v.meta


def test_built_trace_header_has_every_key(tmp_path):
    header = sample().save(tmp_path / "b.altrace")
    for key in trace.META_KEYS:
        assert header[key] is None
    assert trace.load(tmp_path / "b.altrace").meta == header


def test_unknown_compressor_refused_and_old_file_kept(tmp_path):
    path = tmp_path / "k.altrace"
    sample().save(path)
    before = path.read_bytes()
    with pytest.raises(errors.UnknownNameError) as e:
        sample().save(path, compress="zstd")
    assert "'zstd'" in str(e.value) and "lzma, zlib, bz2, none" in str(e.value)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["k.altrace"]  # no temporary file left


def test_undefined_flag_bits_and_closed_trace_refused(tmp_path):
    t = trace.Trace.from_ops([[{"kind": "malloc", "size": 8, "id": 0, "flags": 0x40}]])
    with pytest.raises(errors.InvalidArgument, match="thread 0, op 0: flags 0x40"):
        t.save(tmp_path / "f.altrace")
    t.close()
    with pytest.raises(errors.InvalidArgument, match="closed"):
        t.save(tmp_path / "f.altrace")
    assert not os.listdir(tmp_path)


# ---------------------------------------------------------------- bad files

@pytest.fixture
def small(tmp_path):
    """A small valid trace file's path and bytes."""
    path = tmp_path / "small.altrace"
    sample({"program": "p"}).save(path)
    return path, path.read_bytes()


def load_fails(path, data):
    path.write_bytes(data)
    with pytest.raises(errors.FileFormatError) as e:
        trace.load(path)
    err = e.value
    assert err.path == str(path) and str(err).startswith("%s: byte %d: " % (path, err.offset))
    assert 0 <= err.offset <= len(data)
    return err


def test_every_truncation_fails(small):
    path, data = small
    for n in range(len(data)):
        assert "truncated" in str(load_fails(path, data[:n]))


def test_every_byte_change_fails(small):
    path, data = small
    for i in range(len(data)):
        for x in (0x01, 0x10, 0x80, 0xFF):
            bad = bytearray(data)
            bad[i] ^= x
            load_fails(path, bytes(bad))


def test_trailing_bytes_fail(small):
    path, data = small
    err = load_fails(path, data + b"\0")
    assert err.offset == len(data) and "1 bytes after the body" in str(err)


def craft(path, header, stored, version=trace.FORMAT_VERSION, magic=trace.MAGIC):
    """Write a file whose prefix and checksums are right for what it holds."""
    full = {key: None for key in trace.META_KEYS}
    full.update(threads=1, ops=1, objects=0, compressor="none", body_length=len(stored),
                stored_length=len(stored), body_crc32=zlib.crc32(stored))
    full.update(header)
    text = json.dumps(full).encode()
    path.write_bytes(trace._PREFIX.pack(magic, version, len(text), zlib.crc32(text))
                     + text + stored)
    return trace._PREFIX.size + len(text)


EXIT_BODY = bytes([1, 0, 1, 0, 3, 0x0B, 1, 0])  # one thread, one thread_exit


def expect(path, match, offset=None):
    with pytest.raises(errors.FileFormatError, match=match) as e:
        trace.load(path)
    assert str(e.value).startswith(str(path) + ": byte ")
    if offset is not None:
        assert e.value.offset == offset
    return e.value


def test_crafted_valid_body_loads(tmp_path):
    craft(tmp_path / "c", {}, EXIT_BODY)
    assert trace.load(tmp_path / "c").ops(0)["kind"].tolist() == [KINDS.index("thread_exit")]


def test_bad_magic(tmp_path):
    (tmp_path / "c").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    expect(tmp_path / "c", "byte 0: not an alloclab trace", 0)
    craft(tmp_path / "d", {}, EXIT_BODY, magic=b"ALTRACE00000")
    expect(tmp_path / "d", "not an alloclab trace", 0)


def test_other_format_version(tmp_path):
    craft(tmp_path / "c", {}, EXIT_BODY, version=2)
    expect(tmp_path / "c", "format version 2; this alloclab reads version 1", 12)


def test_bad_checksums(small):
    path, data = small
    n = trace._PREFIX.size
    err = load_fails(path, data[:n] + bytes([data[n] ^ 1]) + data[n + 1:])
    assert "header's checksum" in str(err) and err.offset == n
    err = load_fails(path, data[:-1] + bytes([data[-1] ^ 1]))
    assert "body's checksum" in str(err)


def test_decompression_failure(tmp_path):
    at = craft(tmp_path / "c", {"compressor": "zlib", "body_length": 8}, b"not zlib data")
    expect(tmp_path / "c", "the zlib body does not decompress", at)
    bomb = zlib.compress(bytes(1 << 20))
    craft(tmp_path / "d", {"compressor": "zlib", "body_length": 100}, bomb)
    expect(tmp_path / "d", "does not decompress to one stream of 100 bytes")
    craft(tmp_path / "e", {"compressor": "lzma", "body_length": 8}, zlib.compress(EXIT_BODY))
    expect(tmp_path / "e", "the lzma body does not decompress")


def test_body_that_does_not_decode(tmp_path):
    at = craft(tmp_path / "c", {}, EXIT_BODY[:-1])
    expect(tmp_path / "c", r"does not decode: body offset 1: thread 0's 3-byte stream runs "
           r"past the body's end \(2 bytes left\)", at)
    craft(tmp_path / "d", {}, bytes([1, 0, 1, 0, 3, 0x0C, 1, 0]))
    expect(tmp_path / "d", "body offset 5: thread 0's stream: op kind 12; kinds are 0..11")


def test_body_that_does_not_seal(tmp_path):
    craft(tmp_path / "c", {}, bytes([1, 0, 1, 0, 4, 0x03, 1, 0, 5]))  # free of id 1
    expect(tmp_path / "c", "do not seal: thread 0, op 0: ref 1 was never created")


def test_header_not_what_it_should_be(tmp_path):
    craft(tmp_path / "c", {"ops": 2}, EXIT_BODY)
    expect(tmp_path / "c", "the header says 2 ops, the body holds 1")
    craft(tmp_path / "d", {"compressor": "zstd"}, EXIT_BODY)
    expect(tmp_path / "d", "compressor 'zstd' is not one of lzma, zlib, bz2, none")
    craft(tmp_path / "e", {"body_crc32": "x"}, EXIT_BODY)
    expect(tmp_path / "e", "'body_crc32' is 'x'; expected a non-negative int")
    text = b"[1, 2]"
    (tmp_path / "f").write_bytes(trace._PREFIX.pack(trace.MAGIC, 1, len(text),
                                                    zlib.crc32(text)) + text)
    expect(tmp_path / "f", "the header is not a JSON object")
    text = b"{nope"
    (tmp_path / "g").write_bytes(trace._PREFIX.pack(trace.MAGIC, 1, len(text),
                                                    zlib.crc32(text)) + text)
    expect(tmp_path / "g", "the header is not JSON")


def test_error_classes(tmp_path):
    (tmp_path / "c").write_bytes(b"")
    err = expect(tmp_path / "c", "truncated", 0)
    assert isinstance(err, errors.InvalidArgument) and isinstance(err, ValueError)
    with pytest.raises(errors.InvalidArgument, match="missing: no such file"):
        trace.load(pathlib.Path(tmp_path / "missing"))


def test_views_keep_the_trace_alive(small):
    path, _ = small
    kinds = trace.load(path).ops(0)["kind"]  # the Trace itself is gone at once
    gc.collect()
    assert kinds[0] == KINDS.index("thread_start") and kinds[-1] == KINDS.index("thread_exit")
    t = trace.load(path)
    seq = t.seq(1)
    t.close()  # a view still lives: unregistered, freed when the last view goes
    gc.collect()
    assert seq.tolist() == [17, 18, 19, 20]
    assert not seq.flags.writeable and type(seq) is np.ndarray
    with pytest.raises(errors.InvalidArgument, match="closed"):
        t.ops(0)


def test_thread_index_checked(small):
    t = trace.load(small[0])
    for bad in (3, -1):
        with pytest.raises(errors.ParameterRangeError, match="thread %d is outside 0..2" % bad):
            t.ops(bad)


@pytest.mark.parametrize("compress", trace.COMPRESSORS)
def test_levels(tmp_path, compress):
    t = sample()
    lo, default, hi = trace.LEVELS[compress]
    for level in {lo, default, hi}:
        t.save(tmp_path / "l.altrace", compress=compress, level=level)
        same(t, trace.load(tmp_path / "l.altrace"))
    if hi is None:
        with pytest.raises(errors.InvalidArgument, match="takes no level; 3 given"):
            t.save(tmp_path / "l.altrace", compress=compress, level=3)
        return
    for bad in (lo - 1, hi + 1, 2.0, True):
        with pytest.raises(errors.ParameterRangeError, match="level %r is outside %d..%d"
                           % (bad, lo, hi)):
            t.save(tmp_path / "l.altrace", compress=compress, level=bad)


def test_file_mode_follows_umask(tmp_path):
    old = os.umask(0o022)
    try:
        sample().save(tmp_path / "u.altrace")
    finally:
        os.umask(old)
    assert (tmp_path / "u.altrace").stat().st_mode & 0o777 == 0o644


def test_meta_that_is_not_json_refused(tmp_path):
    with pytest.raises(errors.InvalidArgument, match="meta is not JSON"):
        sample({"program": object()}).save(tmp_path / "j.altrace")
    assert not os.listdir(tmp_path)


def test_implausible_body_length(tmp_path):
    craft(tmp_path / "c", {"compressor": "zlib", "body_length": 1 << 70}, b"x")
    expect(tmp_path / "c", "body_length 1180591620717411303424 is beyond", 24)


def test_read_meta_checks_the_header(small):
    path, data = small
    assert trace.read_meta(path)["program"] == "p"
    for bad in (data[:10], data[:30], b"#!" + data[2:]):
        path.write_bytes(bad)
        with pytest.raises(errors.FileFormatError, match="truncated|not an alloclab trace"):
            trace.read_meta(path)


@pytest.mark.parametrize("seed", range(4))
def test_round_trip_random_program_like(tmp_path, seed):
    t = tracegen.program_like(1500 + 500 * seed, threads=1 + seed * 3, seed=100 + seed)
    t.save(tmp_path / "r.altrace", compress=trace.COMPRESSORS[seed])
    same(t, trace.load(tmp_path / "r.altrace"))


GOLDEN = pathlib.Path(__file__).parent / "data" / "trace_v1.altrace"


def test_version_1_file_still_reads_and_writes_the_same(tmp_path):
    """A file written by the first version of the format loads to the same
    trace, and the writer still produces it byte for byte: a change to the
    coding must come with a new format version."""
    same(trace.load(GOLDEN), sample())
    sample({"program": "sample"}).save(tmp_path / "g.altrace", compress="none")
    assert (tmp_path / "g.altrace").read_bytes() == GOLDEN.read_bytes()
