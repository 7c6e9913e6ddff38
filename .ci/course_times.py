"""Each notebook's slot in a workshop, counted, for the plan table in notebooks/README.md.

Usage: python .ci/course_times.py [run_notebooks.log]

A slot is what the room spends on the notebook, predictions and discussion included:
- reading: the notebook's markdown words at 200 words a minute;
- outputs: the words its cells print (splits, findings, tables), read at 250 words a minute;
- run: the "<path>: ran in Xs" lines that .ci/run_notebooks.py printed, when its output is given;
- predictions: 2 minutes for each **Predict** prompt (write the guess down, then talk it over);
- exercise: 5 minutes;
rounded up to 5 minutes. The core path (CORE) with a 10-minute break must fit 2½ hours.

Example:
    >>> slot_minutes(words=400, output_words=250, run_s=30, prompts=2)
    20
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
WORDS_PER_MINUTE, OUTPUT_WORDS_PER_MINUTE = 200, 250
PREDICT_MIN, EXERCISE_MIN, BREAK_MIN, BUDGET_MIN = 2, 5, 10, 150
#: The core path of notebooks/README.md's plan, in order.
CORE = ("00_tour", "01_batch_splitting", "02_input_context", "02b_keras_fit", "03_multi_worker_sharding",
        "05_prefetch_and_timelines")


def counts(path: Path) -> tuple[int, int, int]:
    """(markdown words, words the code cells print, **Predict** prompts) of one notebook."""
    cells = json.loads(path.read_text())["cells"]
    md = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    printed = 0
    for c in cells:
        for o in c.get("outputs", []) if c["cell_type"] == "code" else []:
            text = o.get("text") or o.get("data", {}).get("text/plain", "")
            printed += len("".join(text).split())
    return sum(len(m.split()) for m in md), printed, sum(len(re.findall(r"\*\*Predict", m)) for m in md)


def slot_minutes(*, words: int, output_words: int, run_s: float, prompts: int) -> int:
    """The notebook's slot, rounded up to 5 minutes (see the module's docstring)."""
    minutes = (words / WORDS_PER_MINUTE + output_words / OUTPUT_WORDS_PER_MINUTE + run_s / 60
               + PREDICT_MIN * prompts + EXERCISE_MIN)
    return 5 * math.ceil(minutes / 5)


def main(argv: list[str]) -> int:
    ran = {}
    if argv:
        for m in re.finditer(r"([\w./-]+\.ipynb): ran in ([\d.]+)s", Path(argv[0]).read_text()):
            ran[Path(m.group(1)).name] = float(m.group(2))
    core = 0
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb")):
        words, printed, prompts = counts(path)
        run = ran.get(path.name, 60.0)  # without a log: a minute
        slot = slot_minutes(words=words, output_words=printed, run_s=run, prompts=prompts)
        core += slot if path.stem in CORE else 0
        print(f"{path.name:36s} {words:5d} words  {printed:5d} printed  {prompts:2d} predict  "
              f"run {run:4.0f} s  slot {slot:3d} min{'  (core)' if path.stem in CORE else ''}")
    total = core + BREAK_MIN
    print(f"core path with a {BREAK_MIN}-minute break: {total // 60}:{total % 60:02d} "
          f"({'within' if total <= BUDGET_MIN else 'OVER'} {BUDGET_MIN // 60}:{BUDGET_MIN % 60:02d})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
