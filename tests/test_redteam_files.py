"""The red-team matrix's file cells (tests/redteam_files.py): every file
argument of every command and Python object against every kind of file.
The cells run side by side in child processes (module fixture); each test
asserts one cell, and test_file_matrix_totals prints the counts."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import redteam_files as rf  # noqa: E402

ENTRIES = rf.entries()
CELLS = [(e.name, k) for e in ENTRIES for k in rf.KINDS]


@pytest.fixture(scope="module")
def results(request):
    """The cells this session runs (all of them, or those -k selects)."""
    chosen = {(it.callspec.params["name"], it.callspec.params["kind"])
              for it in request.session.items
              if getattr(it, "module", None) is request.module
              and "name" in getattr(getattr(it, "callspec", None), "params", {})}
    return rf.run_all(selected=chosen or None)


@pytest.mark.parametrize("name, kind", CELLS, ids=["%s:%s" % c for c in CELLS])
def test_file_cell(results, name, kind):
    outcome, detail, note = results[(name, kind)]
    if outcome == "skip":
        pytest.skip(detail)
    assert outcome == "pass", "%s (%s): %s" % (outcome, kind, detail)


def test_file_matrix_totals(results, capsys):
    t = rf.totals(results)
    with capsys.disabled():
        print("\nred-team file matrix: %(cells)d cells, %(pass)d pass, %(skip)d skipped, "
              "failures by class %(failures)s" % t)
        for n in t["notes"]:
            print("  note: %s" % n)
    assert t["cells"] == len(results) and t["pass"] + t["skip"] + sum(t["failures"].values()) \
        == t["cells"]
