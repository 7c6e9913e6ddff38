"""Reading and run time of each notebook, for the plan table in notebooks/README.md.

Usage: python .ci/course_times.py [run_notebooks.log]
Reading: the notebook's markdown words (split on whitespace) at 200 words a minute. Run: the
"<path>: ran in Xs" lines that .ci/run_notebooks.py printed, when its output is given.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
WORDS_PER_MINUTE = 200


def markdown_words(path: Path) -> int:
    cells = json.loads(path.read_text())["cells"]
    return sum(len("".join(c["source"]).split()) for c in cells if c["cell_type"] == "markdown")


def main(argv: list[str]) -> int:
    ran = {}
    if argv:
        for m in re.finditer(r"([\w./-]+\.ipynb): ran in ([\d.]+)s", Path(argv[0]).read_text()):
            ran[Path(m.group(1)).name] = float(m.group(2))
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb")):
        words = markdown_words(path)
        run = f"{ran[path.name]:.0f} s" if path.name in ran else "-"
        print(f"{path.name:36s} {words:5d} words  ~{words / WORDS_PER_MINUTE:4.1f} min reading  run {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
