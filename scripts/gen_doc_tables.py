"""The docs' reference tables, generated from the C registry.

docs/models.md's table of every layer's parameters (name, type, default)
is the registry's, not a hand copy: this script writes it between the
markers ``<!-- registry: layer-params -->`` and ``<!-- end registry -->``.
``--check`` writes nothing and exits 1 when the file differs from what it
would write (the test suite runs it), naming the first differing line.

Usage: python scripts/gen_doc_tables.py [--check]
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "models.md")
BEGIN = "<!-- registry: layer-params -->"
END = "<!-- end registry -->"


def layer_table():
    """The Markdown table of every layer's parameters, in registry order."""
    import alloclab as al

    rows = ["| layer | parameters |", "|---|---|"]
    for name in al.schema.layers():
        params = al.schema.layer(name).params
        cell = ", ".join("`%s` (%s, %s)" % (p.name, p.type_name, p.format(p.default))
                         for p in params) or "none"
        rows.append("| `%s` | %s |" % (name, cell))
    return "\n".join(rows)


def render(text):
    """text with the generated block replaced; ValueError without markers."""
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        raise ValueError("%s: no %s ... %s block" % (DOC, BEGIN, END))
    return text[:i + len(BEGIN)] + "\n" + layer_table() + "\n" + text[j:]


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
    print("%s: layer table written" % DOC)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
