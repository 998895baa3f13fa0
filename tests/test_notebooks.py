"""Every notebook in notebooks/ runs top to bottom without error (outputs are
not kept: they are committed cleared)."""
import glob
import os

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "notebooks", "*.ipynb")))
# Text each notebook's outputs must show once it has run: its own content.
EXPECT = {
    "libarena.ipynb": ["transfer cache", "buddy locks/op"],
    "custom_policy.ipynb": ["compiled and registered", "halfspill > buddy", "buddy locks/op"],
    "vmalloc.ipynb": ["micromm/vmalloc", "zone locks/vmalloc"],
    "local_storage.ipynb": ["Socket local storage", "kmallocs/create", "deferred frees"],
    "tutorial.ipynb": ["presets:", "buddy locks/op", "refused:"],
    "replay.ipynb": ["exit status 0", "ops by kind", "replay, allocation latency", "peak held"],
    "gallery.ipynb": ["16 figures checked, 0 with problems", "heatmap", "trace overview"],
}


def test_notebooks_exist():
    names = [os.path.basename(p) for p in NOTEBOOKS]
    assert all(n in names for n in EXPECT)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=os.path.basename)
def test_notebook_runs(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "commit notebooks with outputs cleared"
    os.environ.setdefault("MPLBACKEND", "Agg")
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    for needle in EXPECT.get(os.path.basename(path), []):
        assert needle in text, "%s: %r not in its outputs" % (os.path.basename(path), needle)
