#!/usr/bin/env python3
"""How long a Ctrl-C takes to stop a run (goal: median <= 1 s).

Each case starts `alloclab run ...` as a child process, waits until the run
is known to be running, sends SIGINT, and measures the time until the
process has exited (status 130 expected). Known to be running:
  - run, run-cycles: `--progress` prints "measuring" on stderr when a run
    enters its measured phase;
  - sweep: the journal's header is written (it is, just before the first
    unit starts; a unit's stack is set up in milliseconds);
  - processes: a child process (alloclab._peer) exists with its engine and
    worker threads started (/proc/PID/task).
Cases:
  run          alloclab run malloc-free --duration 30
  run-cycles   alloclab run malloc-free --cycles 100000000000
  sweep        alloclab run malloc-free --policy buddy --policy libc --runs 1
               --duration 30 --journal J
  processes    alloclab run malloc-free --processes --cycles 100000000000
Median and max of --reps repetitions (default 10) per case; the time is
from the signal to the exit seen by waitpid, including the interpreter's
own exit. Writes bench/results/ctrl_c.{txt,json}.

    python bench/ctrl_c.py [--reps 10] [--cases run,run-cycles,sweep,processes]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

LIMIT_S = 60.0  # a run still going this long after SIGINT counts as a failure


def _cli(args, env=None):
    return subprocess.Popen([sys.executable, "-m", "alloclab"] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)


def _wait_stderr(proc, marker):
    buf = b""
    while marker not in buf:
        chunk = proc.stderr.read1(4096)
        if not chunk:
            raise RuntimeError("exited before %r: %r" % (marker, buf[-2000:]))
        buf += chunk


def _wait_until(proc, ready):
    while not ready():
        if proc.poll() is not None:
            raise RuntimeError("exited early: %r" % proc.stderr.read()[-2000:])
        time.sleep(0.005)  # polling an observable condition


def _children_with(mark):
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open("/proc/%s/environ" % pid, "rb") as f:
                    if mark in f.read():
                        out.append(int(pid))
            except OSError:
                pass
    return out


def _interrupt(proc):
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, LIMIT_S
    return proc.returncode, time.perf_counter() - t0


def one(case, tmp):
    if case in ("run", "run-cycles"):
        bound = ["--duration", "30"] if case == "run" else ["--cycles", "100000000000"]
        proc = _cli(["run", "malloc-free", "--progress"] + bound)
        _wait_stderr(proc, b"measuring")
        return _interrupt(proc)
    if case == "sweep":
        j = os.path.join(tmp, "j-%s.jsonl" % uuid.uuid4().hex)
        proc = _cli(["run", "malloc-free", "--policy", "buddy", "--policy", "libc", "--runs",
                     "1", "--duration", "30", "--journal", j])
        _wait_until(proc, lambda: os.path.exists(j) and os.path.getsize(j) > 0)
        return _interrupt(proc)
    if case == "processes":
        mark = uuid.uuid4().hex
        env = dict(os.environ, ALLOCLAB_BENCH_MARK=mark)
        proc = _cli(["run", "malloc-free", "--processes", "--cycles", "100000000000"], env=env)

        def ready():
            for pid in _children_with(mark.encode()):
                if pid != proc.pid:
                    try:
                        if len(os.listdir("/proc/%d/task" % pid)) >= 3:
                            return True
                    except OSError:
                        pass
            return False

        _wait_until(proc, ready)
        rc, took = _interrupt(proc)
        end = time.monotonic() + LIMIT_S
        while _children_with(mark.encode()) and time.monotonic() < end:
            time.sleep(0.005)
        if _children_with(mark.encode()):
            return "orphans", took
        return rc, took
    raise ValueError(case)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--cases", default="run,run-cycles,sweep,processes")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    args = ap.parse_args()
    out = {"load_before": os.getloadavg()[0]}
    lines = ["Ctrl-C: seconds from SIGINT to the process's exit (median / max of %d)"
             % args.reps]
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            times, bad = [], []
            for _ in range(args.reps):
                rc, took = one(case, tmp)
                times.append(took)
                if rc != 130:
                    bad.append(rc)
            out[case] = {"times_s": times, "median_s": statistics.median(times),
                         "max_s": max(times), "bad_exits": bad}
            lines.append("  %-11s median %.3f s, max %.3f s%s" % (
                case, out[case]["median_s"], out[case]["max_s"],
                ", exits other than 130: %s" % bad if bad else ""))
            print(lines[-1], flush=True)
    out["load_after"] = os.getloadavg()[0]
    lines.append("load average before %.2f, after %.2f" % (out["load_before"], out["load_after"]))
    print(lines[-1])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ctrl_c.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(args.out, "ctrl_c.json"), "w") as f:
        json.dump(out, f, indent=1)
    return 0 if all(not v["bad_exits"] for v in out.values() if isinstance(v, dict)) else 1


if __name__ == "__main__":
    sys.exit(main())
