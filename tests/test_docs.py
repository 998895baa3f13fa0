"""The documentation, run as printed: every ```sh, ```console and ```python
block of README.md and docs/*.md, in order, page by page, in a temporary
directory (examples/ is linked into it, so the paths the pages give work);
the Markdown checker on the tree and on the mistakes it exists to catch; the
plugin skeletons of docs/plugins.md, identical to examples/plugins/ and run
beside a built-in with exact counters.

A block that cannot run here carries `<!-- not run: reason -->` on the line
just above it. Examples use short phases (--duration 0.05 --runs 2) so that
the whole file stays around two minutes.
"""
import glob
import os
import re
import subprocess
import sys

import pytest

import alloclab as al
from alloclab import plugin

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(os.path.relpath(p, ROOT)
                               for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
RUN_LANGS = ("sh", "console", "python")
NOT_RUN = re.compile(r"^<!-- not run: (\S.*\S) -->$")
MAX_NOT_RUN = 16  # a block that cannot run is the exception; keep it so


def blocks(page):
    """[(line, lang, text, not-run reason or None)] of a page's fenced blocks."""
    out, lines = [], open(os.path.join(ROOT, page), encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^(`{3,})(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != m.group(1):
            j += 1
        prev = [x for x in lines[max(0, i - 3):i] if x.strip()]
        why = NOT_RUN.match(prev[-1].strip()) if prev else None
        out.append((i + 1, m.group(2), "\n".join(lines[i + 1:j]) + "\n",
                    why.group(1) if why else None))
        i = j + 1
    return out


def console_commands(text):
    """The commands of a console block: lines after "$ " (with "\\" continuations)."""
    cmds, cur = [], None
    for line in text.splitlines():
        if cur is not None:
            cur += "\n" + line
        elif line.startswith("$ "):
            cur = line[2:]
        if cur is not None and not cur.endswith("\\"):
            cmds.append(cur)
            cur = None
    return "\n".join(cmds) + "\n"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")
    env = dict(os.environ, ALLOCLAB_CACHE=str(tmp_path / ".cache"), MPLBACKEND="Agg",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return tmp_path, env


@pytest.mark.parametrize("page", PAGES)
def test_every_code_block_runs_as_printed(page, workdir):
    cwd, env = workdir
    for line, lang, text, why in blocks(page):
        if lang not in RUN_LANGS or why:
            continue
        if lang == "python":
            cmd = [sys.executable, "-c", text]
        else:
            cmd = ["bash", "-e", "-o", "pipefail", "-c",
                   console_commands(text) if lang == "console" else text]
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, "%s:%d: the %s block fails (exit %d):\n%s\n%s" % (
            page, line, lang, r.returncode, text, (r.stdout + r.stderr)[-3000:])


def test_blocks_not_run_are_few_and_say_why():
    skipped = [(p, line, why) for p in PAGES for line, lang, _, why in blocks(p)
               if why and lang in RUN_LANGS]
    assert len(skipped) <= MAX_NOT_RUN, skipped
    for p in PAGES:
        text = open(os.path.join(ROOT, p), encoding="utf-8").read()
        for m in re.finditer(r"<!-- not run.*?-->", text):
            assert NOT_RUN.match(m.group(0)), "%s: %r: say why: <!-- not run: reason -->" % (
                p, m.group(0))


def test_readme_is_short_and_keeps_the_two_ci_commands():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(readme.split("\n")) <= 150
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    test_cmd = "sh scripts/install-system-deps.sh && pip install '.[test]' && pytest -q"
    assert test_cmd in readme and test_cmd in ci
    assert "pip install . && alloclab run malloc-free" in readme


def check_markdown(*paths):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "check_markdown.py"),
                           *paths], capture_output=True, text=True, cwd=ROOT)


def test_the_tree_passes_the_markdown_check():
    r = check_markdown()
    assert r.returncode == 0, r.stdout


@pytest.mark.parametrize("text, found", [
    ("# t\n\n```sh\nls\n", ["3: code block never closed"]),
    ("```sh\nls\n\n## Benchmarks\n```\n", ["4: heading '## Benchmarks' inside the code block "
                                            "opened at line 1: a fence is missing"]),
    ("```sh\nls\n```sh\nls\n```\n", ["3: fence '```sh' inside the code block opened at line 1"]),
    ("| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n", ["5: a blank line splits the table of "
                                                        "line 1"]),
    ("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n", ["3: table row of 3 cells, the header (line 1) "
                                               "has 2"]),
    ("see [x](missing.md) and [y](bad.md#top) and [z](https://a.b/c)\n",
     ["1: link to missing.md: no such file"]),
    ("| a | b |\n|---|---|\n| `x \\| y` | 2 |\n\n| c | d |\n|---|---|\n\n```sh\n# comment\n```\n",
     []),
])
def test_the_markdown_check_names_each_mistake(tmp_path, text, found):
    path = tmp_path / "bad.md"
    path.write_text(text)
    r = check_markdown(str(path))
    got = [line.split(":", 1)[1] for line in r.stdout.splitlines()]
    assert len(got) == len(found), r.stdout
    for g, f in zip(got, found):
        assert g.startswith(f), (g, f)
    assert r.returncode == (1 if found else 0)


def skeleton_blocks():
    """{layer name: C text} of the whole layers in docs/plugins.md named skel_*."""
    doc = open(os.path.join(ROOT, "docs", "plugins.md"), encoding="utf-8").read()
    out = {}
    for b in re.findall(r"```c\n(.*?)```", doc, re.S):
        m = re.search(r"AL_(?:COUNTED_)?LAYER\(\s*(skel_\w+)", b)
        if m:
            out[m.group(1)] = b
    return out


def test_the_skeletons_of_the_page_are_the_example_files():
    docs = skeleton_blocks()
    assert sorted(docs) == ["skel_bottom", "skel_front"]
    for name, text in docs.items():
        with open(os.path.join(ROOT, "examples", "plugins", name + ".c")) as f:
            assert f.read() == text, "docs/plugins.md and examples/plugins/%s.c differ" % name


@pytest.mark.parametrize("isolate", [False, True])
def test_the_skeletons_run_beside_a_builtin_with_exact_counts(tmp_path, monkeypatch, isolate):
    monkeypatch.setenv("ALLOCLAB_CACHE", str(tmp_path))
    for name in ("skel_bottom", "skel_front"):
        plugin.compile_file(os.path.join(ROOT, "examples", "plugins", name + ".c"))
    res = al.run("malloc-free", ["skel_front(size=256) > skel_bottom", "skel_front(size=256) "
                                 "> buddy", "skel_bottom(slot=256)", "buddy"], size=200,
                 allocs_per_cycle=16, cycles=3, warmup_cycles=0, runs=1, isolate=isolate)
    for pol in ("skel_front(size=256) > skel_bottom", "skel_front(size=256) > buddy"):
        p = res.select(policy=pol)[0]
        # the first cycle misses 16 times and the frees fill the stack (depth 16)
        assert (p["skel_front.misses"][0], p["skel_front.hits"][0]) == (16, 32), pol
        assert p["skel_front.bytes_held"][0] == 0
    bottom = res.select(policy="skel_bottom(slot=256)")[0]
    assert bottom["skel_bottom.bytes_held"][0] == 0
    with al.Allocator("skel_bottom(slot=64, limit=1M)") as a:
        ptrs = [a.alloc(64) for _ in range(3)]
        assert a.stats()[0]["bytes_held"] == 3 * 64 and a.usable_size(ptrs[0]) == 64
        with pytest.raises(al.AlloclabError):
            a.alloc(65)
        for p in ptrs:
            a.free(p)
        assert a.stats()[0]["bytes_held"] == 0


def test_extras_install_from_the_checkout():
    """alloclab is installed from a checkout, not from PyPI: an extra is
    `pip install '.[name]'` (a bare 'alloclab[name]' would ask the index for
    a package it does not have), and each extra named is one pyproject.toml
    declares."""
    toml = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    declared = set(re.findall(r"^(\w+) = \[", toml.split("[project.optional-dependencies]")[1],
                              re.M))
    seen = 0
    for page in PAGES:
        text = open(os.path.join(ROOT, page), encoding="utf-8").read()
        for m in re.finditer(r"pip install (-\S+ )*'?([\w./-]*)\[(\w+)\]", text):
            assert m.group(2) == ".", "%s: %s" % (page, m.group(0))
            assert m.group(3) in declared, "%s: %s" % (page, m.group(0))
            seen += 1
    assert seen >= 2  # README's test and notebooks extras at least


def _measurement_page():
    return " ".join(open(os.path.join(ROOT, "docs", "measurement.md"),
                         encoding="utf-8").read().split())


def test_measurement_page_says_what_the_plots_and_pools_do():
    """The page said the heatmap saturates at 2x (its default scale adapts)
    and that a local pool of several workers is refused (run() only warned
    about it); what it says is checked against the code here."""
    import concurrent.futures as cf
    import inspect

    from alloclab import plot

    text = _measurement_page()
    # latency bars: the 95% CI by default, as the page says
    assert inspect.signature(plot.latency).parameters["error"].default == "ci"
    assert "95% CI error bars" in text
    # the heatmap's scale adapts by default; vmax=2 fixes it at 2x
    assert inspect.signature(plot.heatmap).parameters["vmax"].default is None
    assert "`vmax=2` saturating at 2x" not in text and "by default the scale adapts" in text
    # a local pool of several workers: refused by run() and sweep() alike
    assert "refused, by `run()` and `sweep()` alike" in text
    with cf.ThreadPoolExecutor(max_workers=2) as ex:
        for f in (al.run, al.sweep):
            with pytest.raises(al.InvalidArgument, match="side by side"):
                f("malloc-free", "buddy", executor=ex, runs=1, cycles=5, warmup_cycles=1)
