"""The docs' reference tables are the registry's (scripts/gen_doc_tables.py)."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gen_doc_tables.py")


def test_layer_parameter_table_is_current():
    r = subprocess.run([sys.executable, SCRIPT, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_names_a_drifted_row(tmp_path, monkeypatch):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    try:
        import gen_doc_tables as g
    finally:
        sys.path.pop(0)
    with open(g.DOC, encoding="utf-8") as f:
        text = f.read()
    drifted = text.replace("`lock` (enum, arena) |", "|", 1)
    assert drifted != text
    doc = tmp_path / "models.md"
    doc.write_text(drifted, encoding="utf-8")
    monkeypatch.setattr(g, "DOC", str(doc))
    assert g.main(["gen", "--check"]) == 1
    assert doc.read_text(encoding="utf-8") == drifted  # --check writes nothing
    assert g.main(["gen"]) == 0
    assert doc.read_text(encoding="utf-8") == text


def test_preset_table_is_the_registrys():
    """The presets block of docs/models.md lists every preset of the C
    registry, its spec and where it runs, in registry order."""
    import alloclab as al
    with open(os.path.join(ROOT, "docs", "models.md"), encoding="utf-8") as f:
        text = f.read()
    block = text.split("<!-- registry: presets -->")[1].split("<!-- end registry -->")[0]
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert [r.split("`")[1] for r in rows] == list(al.presets)
    for row, p in zip(rows, al.schema.presets().values()):
        assert row.startswith("| `%s` | `%s` | %s |" % (p.name, p.spec, p.doc))
        assert row.endswith("| child process (peer) |" if p.peer else "| in process |")
