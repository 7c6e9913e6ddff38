"""Each notebook's slot in a workshop, counted, for the plan in notebooks/README.md and the course table of
README.md (tests/test_course_times.py checks that both agree with what this prints).

Usage: python .ci/course_times.py [run_notebooks.log]

A slot is what the room spends on the notebook, predictions and discussion included:
- reading: the notebook's markdown words at 200 words a minute;
- outputs: the words its cells print (splits, findings, tables), read at 250 words a minute;
- run: its run time on 2 cores, the upper end of what .ci/run_notebooks.py printed ("<path>: ran in Xs")
  on a machine shared with other work (RUN_S), or the times in the log given;
- predictions: 2 minutes for each **Predict** prompt (write the guess down, then talk it over);
- exercise: 5 minutes;
rounded up to 5 minutes. The core path (CORE) with a 10-minute break must fit 2½ hours; the electives
(ELECTIVES) follow it, in order, in a longer workshop, and EXTRA are for homework.

Example:
    >>> slot_minutes(words=400, output_words=250, run_s=30, prompts=2)  # 2 + 1 + 0.5 + 4 + 5 = 12.5 minutes
    15
    >>> hours(145)
    '2:25'
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import NamedTuple

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
WORDS_PER_MINUTE, OUTPUT_WORDS_PER_MINUTE = 200, 250
PREDICT_MIN, EXERCISE_MIN, BREAK_MIN, BUDGET_MIN = 2, 5, 10, 150
#: The core path of notebooks/README.md's plan, in order; the break comes after BREAK_AFTER.
CORE = ("00_tour", "01_batch_splitting", "02_input_context", "02b_keras_fit", "03_multi_worker_sharding")
BREAK_AFTER = "02_input_context"
#: The electives, in the order that fills a longer workshop, and the homework.
ELECTIVES = ("05_prefetch_and_timelines", "07_finding_a_bad_element", "06_placement", "06b_reduction_and_loss",
             "04_tf_data_service", "08_parameter_servers")
EXTRA = ("09_from_tf1_to_tf2", "10_cluster_topology")
#: Seconds each notebook runs on 2 cores shared with other work (the upper end .ci/run_notebooks.py printed).
RUN_S = {"00_tour": 7, "01_batch_splitting": 24, "02_input_context": 8, "02b_keras_fit": 120,
         "03_multi_worker_sharding": 120, "04_tf_data_service": 64, "05_prefetch_and_timelines": 33,
         "06_placement": 9, "06b_reduction_and_loss": 39, "07_finding_a_bad_element": 13,
         "08_parameter_servers": 106, "09_from_tf1_to_tf2": 13, "10_cluster_topology": 19}


class Slot(NamedTuple):
    """One notebook's counts and slot."""

    name: str
    words: int
    printed: int
    prompts: int
    run_s: float
    minutes: int


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


def plan(ran: dict[str, float] | None = None) -> dict[str, Slot]:
    """Every notebook's :class:`Slot`, by its name without ``.ipynb``, in file order; ``ran`` (seconds by
    notebook name) replaces :data:`RUN_S`."""
    out = {}
    for path in sorted(NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb")):
        words, printed, prompts = counts(path)
        run = (ran or {}).get(path.stem, RUN_S.get(path.stem, 60.0))
        out[path.stem] = Slot(path.stem, words, printed, prompts, run,
                              slot_minutes(words=words, output_words=printed, run_s=run, prompts=prompts))
    return out


def core_minutes(slots: dict[str, Slot]) -> int:
    """The core path's length, the break included."""
    return sum(slots[name].minutes for name in CORE) + BREAK_MIN


def hours(minutes: int) -> str:
    """``h:mm``."""
    return f"{minutes // 60}:{minutes % 60:02d}"


def main(argv: list[str]) -> int:
    ran = {}
    if argv:
        for m in re.finditer(r"([\w./-]+\.ipynb): ran in ([\d.]+)s", Path(argv[0]).read_text()):
            ran[Path(m.group(1)).stem] = float(m.group(2))
    slots = plan(ran)
    for s in slots.values():
        where = "core" if s.name in CORE else "elective" if s.name in ELECTIVES else "homework"
        print(f"{s.name + '.ipynb':36s} {s.words:5d} words  {s.printed:5d} printed  {s.prompts:2d} predict  "
              f"run {s.run_s:4.0f} s  slot {s.minutes:3d} min  ({where})")
    total = core_minutes(slots)
    print(f"core path with a {BREAK_MIN}-minute break: {hours(total)} "
          f"({'within' if total <= BUDGET_MIN else 'OVER'} {hours(BUDGET_MIN)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
