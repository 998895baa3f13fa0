"""Trace file size and load speed per compressor (docs/traces.md).

For program-like synthetic traces (alloclab.tracegen) of 1, 4 and 16
threads, and any trace files given on the command line (recorded with
`alloclab record`), writes one row per (trace, compressor): ops, raw body
bytes per op, file bytes per op, save and load time. Timings need an idle
machine; the sizes do not.

    python bench/trace_codec.py [--ops N] [FILE.altrace ...]
"""

import argparse
import os
import sys
import tempfile
import time

from alloclab import trace, tracegen


def measure(name, t, out):
    """One row per compressor for trace t."""
    for comp in trace.COMPRESSORS:
        path = os.path.join(out, "t.altrace")
        t0 = time.perf_counter()
        header = t.save(path, compress=comp)
        t1 = time.perf_counter()
        trace.load(path).close()
        t2 = time.perf_counter()
        size = os.path.getsize(path)
        print("%-24s %-5s %9d %7.2f %7.2f %8.1f %8.1f" % (
            name, comp, t.nops, header["body_length"] / t.nops, size / t.nops,
            (t1 - t0) * 1e9 / t.nops, (t2 - t1) * 1e9 / t.nops))
        sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200000)
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    print("%-24s %-5s %9s %7s %7s %8s %8s" % ("trace", "comp", "ops", "raw B/op",
                                                "file B/op", "save ns/op", "load ns/op"))
    with tempfile.TemporaryDirectory() as out:
        for threads in (1, 4, 16):
            t = tracegen.program_like(args.ops, threads=threads, seed=threads)
            measure("synthetic-%dt" % threads, t, out)
        for f in args.files:
            measure(os.path.basename(f), trace.load(f), out)


if __name__ == "__main__":
    main()
