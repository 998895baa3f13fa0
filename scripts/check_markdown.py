#!/usr/bin/env python3
"""Check the project's Markdown for the mistakes that break its rendering.

Usage: python3 scripts/check_markdown.py [FILE.md ...]   (default: README.md docs/*.md)

Per file, one pass over the lines, tracking whether a fenced code block is
open (``` or ~~~, closed by a fence of the same character at least as long,
with no info string, as CommonMark has it):

- fences are balanced: a block still open at the end of the file is named
  by the line that opened it;
- a fence with an info string (```sh) inside an open block means a closing
  fence is missing before it: the prose after it would render as code;
- a Markdown heading (## Title) inside a block is a heading swallowed by a
  missing fence (shell and Python comments take one #, which is allowed);
- a table (a header row, then a |---| delimiter row) has the header's
  number of cells in every row, and no blank line splits it (a row of
  pipes right after a blank line that follows a table);
- a relative link or image ([text](path), ![alt](path)) names a file or
  folder that exists, relative to the Markdown file (anchors ignored).

Prints one "file:line: problem" per finding and exits 1 when there is any,
0 otherwise. Standard library only; cost linear in the text.
"""
import glob
import os
import re
import sys

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
HEADING_IN_CODE = re.compile(r"^#{2,6} \S")
DELIM = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def cells(row):
    """The number of cells of a table row: unescaped pipes split it, leading
    and trailing pipes excepted (GFM splits inside code spans too)."""
    s = row.strip().replace("\\|", "")
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return s.count("|") + 1


def check_links(path, n, line, out):
    base = os.path.dirname(path)
    for target in LINK.findall(CODE_SPAN.sub("", line)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue
        rel = target.split("#", 1)[0]
        if rel and not os.path.exists(os.path.join(base, rel)):
            out.append("%s:%d: link to %s: no such file" % (path, n, rel))


def check_fence(path, n, line, fence, out):
    """The fence state after ``line``: None (prose) or (char, length, first line)."""
    m = FENCE.match(line)
    if fence is None:
        if m:
            return (m.group(1)[0], len(m.group(1)), n)
        return None
    if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= fence[1]:
        if not m.group(2).strip():
            return None
        out.append("%s:%d: fence %r inside the code block opened at line %d: a closing fence "
                   "is missing before it" % (path, n, line.strip(), fence[2]))
    elif HEADING_IN_CODE.match(line):
        out.append("%s:%d: heading %r inside the code block opened at line %d: a fence is "
                   "missing" % (path, n, line.strip(), fence[2]))
    return fence


def check_file(path):
    out, fence, lines = [], None, []
    with open(path, encoding="utf-8") as f:
        text = f.read().split("\n")
    for n, line in enumerate(text, 1):
        was_code = fence is not None
        fence = check_fence(path, n, line, fence, out)
        in_code = was_code or fence is not None
        lines.append((n, line, in_code))
        if not in_code:
            check_links(path, n, line, out)
    if fence is not None:
        out.append("%s:%d: code block never closed" % (path, fence[2]))
    # a table starts at a row followed by a delimiter row
    marked = []
    for i, (n, line, in_code) in enumerate(lines):
        nxt = lines[i + 1] if i + 1 < len(lines) else (0, "", True)
        marked.append((n, line, in_code, not in_code and line.lstrip().startswith("|") and
                       not nxt[2] and DELIM.match(nxt[1]) is not None))
    _tables(path, marked, out)
    return out


def _tables(path, marked, out):
    table, ended = None, None
    for n, line, in_code, header in marked:
        row = not in_code and line.lstrip().startswith("|")
        if header and table is None:  # a new table (after a blank line too: legal)
            table, ended = (cells(line), n), None
        elif table is not None and row:
            k = cells(line)
            if k != table[0]:
                out.append("%s:%d: table row of %d cells, the header (line %d) has %d" % (
                    path, n, k, table[1], table[0]))
        elif table is not None:
            table, ended = None, (table if not line.strip() else None)
        elif row and ended is not None:
            out.append("%s:%d: a blank line splits the table of line %d" % (path, n, ended[1]))
            ended = None
        elif line.strip():
            ended = None


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = argv or [os.path.join(root, "README.md")] + sorted(
        glob.glob(os.path.join(root, "docs", "*.md")))
    shown = [os.path.relpath(f) if not os.path.relpath(f).startswith("..") else f for f in files]
    problems = [p for f in shown for p in check_file(f)]
    for p in problems:
        print(p)
    print("%d Markdown file%s checked, %d problem%s" % (
        len(files), "" if len(files) == 1 else "s", len(problems),
        "" if len(problems) == 1 else "s"), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
