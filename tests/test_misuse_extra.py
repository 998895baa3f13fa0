"""Misuse a new user tries: conflicting options, corrupt files, shims that
do not load; each refused by name, or run as asked."""

import subprocess
import sys

import pytest

import alloclab.reproduce as rep
from alloclab import errors


def cli(*argv):
    return subprocess.run([sys.executable, "-m", "alloclab", *argv], capture_output=True,
                          text=True)


def one_error(r, *words):
    """r exited 2 with one `alloclab: error:` line naming every word, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.count("alloclab: error:") == 1 and "Traceback" not in r.stderr, r.stderr
    for w in words:
        assert w in r.stderr, (w, r.stderr)


# -- other maps for a storage type the reproduction does not run


def test_reproduce_other_maps_for_a_storage_type_left_out():
    """{"socket": 2} with storage_types=["task"] ran the task cells with no other
    maps at all and said other_maps=0; it names both now. A zero count for a
    type left out changes nothing and stays accepted (the CLI passes one)."""
    with pytest.raises(errors.InvalidArgument) as e:
        rep.local_storage(storage_types=["task"], batch_sizes=[16], runs=1, duration=0.05,
                          owner_work="none", other_maps={"socket": 2})
    assert "other_maps=2" in str(e.value) and "socket" in str(e.value) and \
        "['task']" in str(e.value)


def test_cli_reproduce_other_maps_without_socket_storage():
    """`--other-maps 3 --storage-types task` printed a report saying other_maps=0."""
    r = cli("reproduce", "local-storage", "--storage-types", "task", "--batch-sizes", "16",
            "--runs", "1", "--other-maps", "3")
    one_error(r, "--other-maps=3", "--storage-types=task", "socket")
