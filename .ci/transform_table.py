"""Rewrite README.md's transformation table from the transformation tests' results.

``tests/instrument/test_transformations.py`` runs every ``tf.data`` transformation on 4 replicas,
compares the trace with plain TensorFlow and writes each outcome (exact / by content / positional)
to a ``transformations.json`` in a temporary folder (not the source tree). This script renders that
file into the block of README.md between ``<!-- transformations:start -->`` and
``<!-- transformations:end -->``; the test fails while the two differ, naming the file, so the table
cannot drift from what the tests show.

Usage: ``python .ci/transform_table.py RESULTS_JSON`` (the path the test's failure message gives;
``--check`` only compares).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
START, END = "<!-- transformations:start -->", "<!-- transformations:end -->"
LEGEND = (
    "*exact*: every row is the real source element that produced the value (flat_map/interleave parts in "
    "`source_line`, repetitions under `repeat` in `epoch`; zip/enumerate: the first dataset's element). "
    "*by content*: ids are matched by content, so equal values look alike. *positional*: ids number that "
    "transformation's output. For the last two, `vizdist.diagnose` says so at `info` and raises no error about ids."
)


def render_table(results: dict[str, str]) -> str:
    """The README block for ``results`` (transformation -> outcome), in the tests' order."""
    lines = ["| transformation | provenance in a trace |", "| --- | --- |"]
    lines += [f"| {name} | {outcome} |" for name, outcome in results.items()]
    return "\n".join([*lines, "", LEGEND])


def readme_block(text: str) -> str:
    """What README.md holds between the markers ("" when they are missing)."""
    if START not in text or END not in text:
        return ""
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def main(argv: list[str]) -> int:
    paths = [a for a in argv if not a.startswith("--")]
    if len(paths) != 1:
        print("usage: python .ci/transform_table.py RESULTS_JSON [--check]: RESULTS_JSON is the file "
              "tests/instrument/test_transformations.py wrote (its failure message names it)", file=sys.stderr)
        return 2
    results = json.loads(Path(paths[0]).read_text())
    text = README.read_text()
    if START not in text or END not in text:
        print(f"README.md has no {START} ... {END} block", file=sys.stderr)
        return 1
    want = render_table(results)
    if readme_block(text) == want:
        return 0
    if "--check" in argv:
        print(f"README.md's transformation table is out of date: run python .ci/transform_table.py {paths[0]}",
              file=sys.stderr)
        return 1
    head, rest = text.split(START, 1)
    README.write_text(f"{head}{START}\n{want}\n{END}{rest.split(END, 1)[1]}")
    print(f"README.md: transformation table rewritten ({len(results)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
