"""Writing a benchmark's figures: the JSON beside the text it prints.

Through alloclab.files, so that a result path that names something other
than a regular file (a FIFO, a device node) is refused, not replaced.
"""

import json

from alloclab import files


def save(out, base, text):
    """Write ``out`` to base.json and ``text`` to base.txt, and print it."""
    files.write_text(base + ".json", json.dumps(out, indent=1) + "\n", "result file")
    files.write_text(base + ".txt", text + "\n", "result file")
    print(text)
