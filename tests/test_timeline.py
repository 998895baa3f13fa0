"""A simulated run's timeline as Chrome trace-event JSON
(alloclab.present.timeline): what Perfetto needs is there, in time order,
bounded, written only where a file may be written, and bad events are
refused by name."""
import json
import os
import socket

import pytest

from alloclab import errors
from alloclab.present import timeline as T

META = {"workload": "malloc-free", "policy": "libarena-spill", "seed": 7}


def events():
    # given out of order, as several model CPUs would report them
    return [
        (1, "op", "alloc", 250.0, 40.0),
        (0, "op", "alloc", 0.0, 120.0),
        (0, "wait", "buddy.lock", 10.0, 30.0),
        (1, "hold", "buddy.lock", 260.0, 20.0),
        (0, "hold", "buddy.lock", 40.0, 50.0),
        (2, "handoff", "buddy.lock", 90.0, 15.0),
        (0, "cycle", "cycle 0", 0.0, 1000.0),
    ]


def complete(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def test_round_trip_through_json(tmp_path):
    path = tmp_path / "t.json"
    got = T.write_chrome_trace(str(path), events(), META)
    with open(path) as f:
        back = json.load(f)
    assert back == got
    assert back["displayTimeUnit"] == "ns"
    other = back["otherData"]
    assert {k: other[k] for k in META} == META
    assert other["note"] == "simulated: times are predictions"
    assert (other["events_total"], other["events_kept"], other["events_dropped"]) == (7, 7, 0)
    x = complete(back)
    assert len(x) == 7 and all(e["pid"] == 1 for e in x)
    hold = next(e for e in x if e["cat"] == "hold" and e["tid"] == 0)
    assert hold == {"name": "buddy.lock", "cat": "hold", "ph": "X", "ts": 0.04, "dur": 0.05,
                    "pid": 1, "tid": 0}  # microseconds


def test_names_the_process_and_every_model_cpu():
    tr = T.chrome_trace(events(), META)
    meta = [e for e in tr["traceEvents"] if e["ph"] == "M"]
    assert {"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
            "args": {"name": "alloclab simulated run"}} in meta
    names = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert names == {0: "model CPU 0", 1: "model CPU 1", 2: "model CPU 2"}
    # metadata first, then the events
    phases = [e["ph"] for e in tr["traceEvents"]]
    assert phases == sorted(phases, key=lambda p: p != "M")


def test_events_are_in_time_order_enclosing_first():
    x = complete(T.chrome_trace(events(), META))
    ts = [e["ts"] for e in x]
    assert ts == sorted(ts)
    # at ts 0 on CPU 0: the cycle (1000 ns) encloses the op (120 ns)
    assert [(e["cat"], e["tid"]) for e in x[:2]] == [("cycle", 0), ("op", 0)]
    assert [e["cat"] for e in x] == ["cycle", "op", "wait", "hold", "handoff", "op", "hold"]


def test_bound_keeps_the_first_in_time_and_counts_the_rest():
    many = ((i % 4, "op", "alloc", float(10000 - i), 1.0) for i in range(10000))
    tr = T.chrome_trace(many, META, max_events=100)
    x = complete(tr)
    assert len(x) == 100
    assert [e["ts"] for e in x] == [(i + 1) / 1000.0 for i in range(100)]
    other = tr["otherData"]
    assert (other["events_total"], other["events_kept"], other["events_dropped"]) == \
        (10000, 100, 9900)
    assert other["max_events"] == 100
    assert T.chrome_trace(events(), META)["otherData"]["max_events"] == T.MAX_EVENTS == 200000


def test_unknown_kind_is_refused_naming_the_kinds():
    bad = events() + [(0, "spin", "buddy.lock", 5.0, 1.0)]
    with pytest.raises(errors.UnknownNameError) as e:
        T.chrome_trace(bad, META)
    msg = str(e.value)
    assert "'spin'" in msg and "event 7" in msg
    for k in ("op", "hold", "wait", "handoff", "cycle"):
        assert k in msg
    assert e.value.valid == list(T.KINDS)


@pytest.mark.parametrize("ev,exc,text", [
    ((0, "op", "a", 1.0), errors.ParameterTypeError, "tuple"),
    ((-1, "op", "a", 1.0, 1.0), errors.InvalidArgument, "cpu -1"),
    ((True, "op", "a", 1.0, 1.0), errors.InvalidArgument, "cpu True"),
    ((0, "op", 3, 1.0, 1.0), errors.ParameterTypeError, "name must be a str"),
    ((0, "op", "a", float("nan"), 1.0), errors.ParameterRangeError, "start_ns is nan"),
    ((0, "op", "a", 1.0, -2.0), errors.ParameterRangeError, "dur_ns is -2.0"),
    ((0, "op", "a", "1", 1.0), errors.ParameterTypeError, "start_ns must be a number"),
])
def test_bad_events_are_refused(ev, exc, text):
    with pytest.raises(exc, match=text):
        T.chrome_trace([ev], META)


def test_bad_metadata_and_bounds():
    with pytest.raises(errors.InvalidArgument, match="lacks seed"):
        T.chrome_trace(events(), {"workload": "w", "policy": "p"})
    with pytest.raises(errors.InvalidArgument, match="'events_dropped' is the timeline's"):
        T.chrome_trace(events(), dict(META, events_dropped=0))
    with pytest.raises(errors.ParameterTypeError, match="'seed' is not JSON"):
        T.chrome_trace(events(), dict(META, seed=object()))
    with pytest.raises(errors.ParameterRangeError, match="max_events is 0"):
        T.chrome_trace(events(), META, max_events=0)
    with pytest.raises(errors.ParameterTypeError, match="max_events must be an integer"):
        T.chrome_trace(events(), META, max_events=1.5)
    with pytest.raises(errors.ParameterTypeError, match="iterable"):
        T.chrome_trace("op", META)


def test_refuses_a_directory_before_reading_events(tmp_path):
    read = []

    def gen():
        read.append(1)
        yield from events()
    with pytest.raises(errors.InvalidArgument, match="a directory"):
        T.write_chrome_trace(str(tmp_path), gen(), META)
    assert not read and os.path.isdir(tmp_path)


def test_refuses_a_fifo_with_no_reader(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(errors.InvalidArgument, match="named pipe with no reader"):
        T.write_chrome_trace(str(fifo), events(), META)
    assert os.path.exists(fifo) and not os.path.isfile(fifo)


def test_refuses_a_socket(tmp_path):
    path = str(tmp_path / "sock")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(path)
        with pytest.raises(errors.InvalidArgument, match="a socket"):
            T.write_chrome_trace(path, events(), META)
    finally:
        s.close()


def test_a_failed_timeline_leaves_the_old_file(tmp_path):
    path = tmp_path / "t.json"
    path.write_text("old")
    with pytest.raises(errors.UnknownNameError):
        T.write_chrome_trace(str(path), [(0, "nap", "x", 0.0, 1.0)], META)
    assert path.read_text() == "old"
    T.write_chrome_trace(str(path), events(), META, max_events=2)
    assert len(complete(json.loads(path.read_text()))) == 2
