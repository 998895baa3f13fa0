"""`alloclab list` and `alloclab list NAME`, and the quoting hint for an
unquoted '>' in --policy, run as a user runs them (subprocesses)."""

import json
import os
import subprocess
import sys

import pytest

from alloclab import schema
from alloclab.policy import presets
from test_cli import cli


def test_overview_is_a_line_per_entry():
    out = cli("list", check=0).stdout.splitlines()
    entries = len(schema.layers()) + len(schema.workloads()) + len(presets)
    assert len(out) < entries + 25  # + headings and the peer allocators
    for name in list(schema.layers()) + list(schema.workloads()) + list(presets):
        assert any(line.split()[:1] == [name] for line in out), name
    assert out[-1] == ("metrics: `alloclab list metrics`; one entry in full: `alloclab list "
                       "NAME`; one kind: `alloclab list layers|workloads|presets|peers`")


@pytest.mark.parametrize("kind, names", [
    ("layers", list(schema.layers())), ("workloads", list(schema.workloads())),
    ("presets", list(presets)),
    ("peers", ["glibc", "jemalloc", "gperftools-tcmalloc", "mimalloc"])])
def test_list_one_kind(kind, names):
    """`list layers` (a user's first guess) prints that section of the
    overview, an entry a line, and nothing else; --json its entries."""
    out = cli("list", kind, check=0).stdout.splitlines()
    assert out[0].startswith(kind[:-1]) and len(out) == 1 + len(names)
    assert [line.split()[0] for line in out[1:]] == names
    every = cli("list", "--json", check=0).stdout
    js = json.loads(cli("list", kind, "--json", check=0).stdout)
    got = js[kind]
    assert list(js) == [kind]
    assert ([e["name"] for e in got] if isinstance(got, list) else list(got)) == names
    if kind != "peers":
        assert js[kind] == json.loads(every)[kind]


@pytest.mark.parametrize("name", list(schema.layers()))
def test_list_layer(name):
    s = schema.layer(name)
    out = cli("list", name, check=0).stdout
    assert out.startswith("%s: %s\n  a layer; features: " % (name, s.doc))
    for p in s.params:
        assert "    %-20s" % p.name in out
    for c in s.counters:
        assert "    %-26s %-7s %-3s" % (c.name, c.kind, "key" if c.key else "") in out
    d = json.loads(cli("list", name, "--json", check=0).stdout)
    assert d["kind"] == "layer" and d["name"] == name


@pytest.mark.parametrize("name", list(schema.workloads()))
def test_list_workload(name):
    w = schema.workloads()[name]
    out = cli("list", name, check=0).stdout
    assert out.startswith("%s: %s\n  a workload: `alloclab run %s`" % (name, w.doc, name))
    for p in w.params:
        assert "    %-20s %-5s default %s" % (p.name, p.type_name, p.format(p.default)) in out
    assert json.loads(cli("list", name, "--json", check=0).stdout)["kind"] == "workload"


@pytest.mark.parametrize("name", [p for p in presets if p not in schema.layers()])
def test_list_preset(name):
    from alloclab.policy import Policy
    out = cli("list", name, check=0).stdout
    assert out.startswith("%s: %s\n  a preset (--policy %s); " % (name, presets[name], name))
    for i, (layer, nondefault) in enumerate(Policy(name).layers):
        assert "  %d. %s: " % (i + 1, layer) in out
        for k in nondefault:
            assert "*%-20s" % k in out
    d = json.loads(cli("list", name, "--json", check=0).stdout)
    assert [x["layer"] for x in d["stack"]] == Policy(name).names


def test_list_metrics():
    from alloclab.metrics import BASE_METRICS
    out = cli("list", "metrics", check=0).stdout
    for m in BASE_METRICS:
        assert "\n  %-22s " % m in out
    assert "<layer>.<counter>_per_op" in out


@pytest.mark.parametrize("name, close", [("bud", "buddy"), ("libarena", "libarena-spill"),
                                         ("malloc_fre", "malloc-free"), ("metric", "metrics"),
                                         ("zzzz", None)])
def test_list_unknown_name_names_close_matches(name, close):
    p = cli("list", name, check=2)
    assert p.stdout == "" and len(p.stderr.splitlines()) == 1
    assert p.stderr.startswith("alloclab: error: unknown name %r" % name)
    assert ("did you mean" in p.stderr) == (close is not None)
    if close:
        assert close in p.stderr.split("did you mean", 1)[1].split(";")[0]
    assert "layers: buddy" in p.stderr and "workloads: malloc-free" in p.stderr


# ---------------------------------------------------------------- quoting

def _run_redirected(tmp_path, spec, target, extra=()):
    """`alloclab run malloc-free --policy SPEC > TARGET` as a shell runs it."""
    with open(tmp_path / target, "w") as out:
        return subprocess.run([sys.executable, "-m", "alloclab", "run", "malloc-free",
                               "--policy", spec, "--cycles", "5", "--runs", "1", *extra],
                              stdout=out, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              timeout=120)


def test_unquoted_chain_gets_the_quoting_hint(tmp_path):
    p = _run_redirected(tmp_path, "percpu", "transfer")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert "needs a layer below" in p.stderr
    assert "stdout went into the file ./transfer; quote the spec: " \
        "--policy 'percpu > transfer'" in p.stderr


def test_complete_spec_into_a_layer_file_warns(tmp_path):
    p = _run_redirected(tmp_path, "libarena-spill", "buddy")
    assert p.returncode == 0
    assert p.stderr.startswith("alloclab: warning: '>' in an unquoted --policy")
    assert "--policy 'libarena-spill > buddy'" in p.stderr
    assert "allocation latency" in (tmp_path / "buddy").read_text()


def test_no_hint_without_such_a_file(tmp_path):
    p = _run_redirected(tmp_path, "percpu", "out.txt")
    assert p.returncode == 2 and "quote" not in p.stderr
    p = _run_redirected(tmp_path, "buddy", "out.txt")
    assert p.returncode == 0 and p.stderr == ""
    stale = tmp_path / "transfer"  # an old file named like a layer is no redirection
    stale.write_text("x")
    os.utime(stale, (1, 1))
    p = _run_redirected(tmp_path, "percpu", "out.txt")
    assert p.returncode == 2 and "quote" not in p.stderr
