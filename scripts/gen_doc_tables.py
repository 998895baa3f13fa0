"""The docs' reference tables, generated from the C registry.

docs/models.md's table of every layer's parameters (name, type, default)
and its table of presets (name, spec, doc, where it runs) are the
registry's, not hand copies: this script writes each between the markers
``<!-- registry: NAME -->`` and the next ``<!-- end registry -->`` (NAME:
layer-params, presets).
``--check`` writes nothing and exits 1 when the file differs from what it
would write (the test suite runs it), naming the first differing line.

Usage: python scripts/gen_doc_tables.py [--check]
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "models.md")
BEGIN = "<!-- registry: %s -->"
END = "<!-- end registry -->"


def layer_table():
    """The Markdown table of every layer's parameters, in registry order."""
    import alloclab as al

    rows = ["| layer | parameters |", "|---|---|"]
    for name in al.schema.BUILTIN_LAYERS:
        params = al.schema.layer(name).params
        cell = ", ".join("`%s` (%s, %s)" % (p.name, p.type_name, p.format(p.default))
                         for p in params) or "none"
        rows.append("| `%s` | %s |" % (name, cell))
    return "\n".join(rows)


def preset_table():
    """The Markdown table of every preset (al_preset_get), in registry order."""
    import alloclab as al

    rows = ["| preset | spec | what | runs |", "|---|---|---|---|"]
    for p in al.schema.presets().values():
        rows.append("| `%s` | `%s` | %s | %s |" % (
            p.name, p.spec, p.doc, "child process (peer)" if p.peer else "in process"))
    return "\n".join(rows)


BLOCKS = {"layer-params": layer_table, "presets": preset_table}


def render(text):
    """text with every generated block replaced; ValueError without markers."""
    for name, table in BLOCKS.items():
        begin = BEGIN % name
        i = text.find(begin)
        j = text.find(END, i)
        if i < 0 or j < i:
            raise ValueError("%s: no %s ... %s block" % (DOC, begin, END))
        text = text[:i + len(begin)] + "\n" + table() + "\n" + text[j:]
    return text


def main(argv):
    check = "--check" in argv[1:]
    with open(DOC, encoding="utf-8") as f:
        old = f.read()
    new = render(old)
    if new == old:
        return 0
    if check:
        for n, (a, b) in enumerate(zip(old.splitlines(), new.splitlines()), 1):
            if a != b:
                print("%s:%d: differs from the registry:\n  file:     %s\n  registry: %s"
                      % (DOC, n, a, b))
                break
        print("run: python scripts/gen_doc_tables.py")
        return 1
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(new)
    print("%s: registry tables written" % DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
