"""The WhatIf widget's own behaviour, on plain traces (no TensorFlow here: the real runs are in
tests/instrument/test_whatif.py)."""

from __future__ import annotations

import pytest

from vizdist.render.whatif import Knob, WhatIf
from vizdist.trace import Trace


def _split(n_replicas: int, n: int = 4) -> Trace:
    return Trace.from_records(elements=[dict(step=i // n_replicas, replica=i % n_replicas, source_id=i)
                                        for i in range(n)])


def test_knobs_are_checked_when_made():
    with pytest.raises(ValueError, match="kind must be one of"):
        Knob("k", "k", "float", 1.0)
    with pytest.raises(ValueError, match=r"options=\(min, max\)"):
        Knob("k", "k", "int", 5, options=(1, 3))
    with pytest.raises(ValueError, match="is not one of"):
        Knob("k", "k", "choice", "x", options=("a", "b"))


def test_every_move_reruns_with_every_knob_and_marks_what_moved():
    calls = []

    def run(*, replicas: int, tag: str) -> Trace:
        calls.append((replicas, tag))
        return _split(replicas)

    w = WhatIf(run, [Knob("replicas", "replicas", "int", 2, options=(1, 4)),
                     Knob("tag", "<tag>", "choice", "a", options=("a", "b"))], title="<t>")
    w.controls["replicas"].value = 4
    w.controls["tag"].value = "b"
    assert calls == [(2, "a"), (4, "a"), (4, "b")] and w.runs == 3
    assert w.last_diff is not None and w.last_diff.unchanged  # same trace twice: nothing marked
    assert "data-changed" not in w.picture.value and "nothing moved" in w.picture.value
    assert "&lt;tag&gt; b" in w.picture.value and "<tag>" not in w.picture.value
    assert "&lt;t&gt;" in w.static_html() and "replicas 2" in repr(w).splitlines()[1]  # static: the first run


def test_a_failing_first_run_is_shown_not_raised():
    def run(*, n: int) -> Trace:
        raise ValueError("TF says <no>")

    w = WhatIf(run, [Knob("n", "n", "int", 1, options=(1, 2))], title="t")
    assert w.trace is None and "TF says <no>" in w.error and "&lt;no&gt;" in w.status.value
    assert "the first run failed" in repr(w) and "&lt;no&gt;" in w.static_html()
    w2 = WhatIf(lambda *, n: "not a trace", [Knob("n", "n", "int", 1, options=(1, 2))], title="t")
    assert "not a vizdist.Trace" in w2.error


def test_a_run_cut_short_is_reported_and_the_last_finished_run_stays():
    """A run stopped by its timeout (or Ctrl-C) holds only the steps before it stopped: drawn, its diff
    would call every later element gone. The widget says the run did not finish and keeps the picture."""
    def run(*, replicas: int) -> Trace:
        if replicas == 2:
            return _split(replicas)
        cut = _split(replicas)  # trace_distribution's partial trace: its first step, stopped by timeout
        return Trace(elements=cut.elements[cut.elements["step"] == 0], batches=cut.batches,
                     meta={**cut.meta, "stopped": "timeout", "timeout_s": 60.0, "steps_run": 1})

    w = WhatIf(run, [Knob("replicas", "replicas", "int", 2, options=(1, 4))], title="t")
    before = w.picture.value
    w.controls["replicas"].value = 1
    assert w.runs == 1 and w.trace is not None and w.trace.replicas == [0, 1] and w.last_diff is None
    assert w.picture.value == before
    assert "60 s timeout passed after 1 step," in w.error and "did not finish" in w.status.value
    assert "still shows the last run that finished" in w.error
    w.controls["replicas"].value = 2  # a finished run draws again
    assert w.runs == 2 and w.error == "" and w.last_diff is not None and w.last_diff.unchanged


def test_an_experiment_is_shown_and_cleaned_up_when_its_widget_goes():
    """A widget lives as long as the kernel holds it; its experiment's cleanup runs when it goes (at exit here)."""
    import subprocess
    import sys

    code = ("from vizdist.analysis.whatif import Experiment, Knob\n"
            "from vizdist.render.whatif import WhatIf\n"
            "from vizdist.trace import Trace\n"
            "run = lambda *, n: Trace.from_records(elements=[dict(step=0, replica=0, source_id=n)])\n"
            "w = WhatIf.of(Experiment(run, [Knob('n', 'n', 'int', 1, options=(1, 2))], title='t',\n"
            "                         cleanup=lambda: print('cleaned', flush=True)))\n"
            "print('runs', w.runs, w.title, flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split("\n")[:2] == ["runs 1 t", "cleaned"]


def test_an_experiment_is_cleaned_up_when_its_widget_cannot_be_built():
    from vizdist.analysis.whatif import Experiment

    cleaned = []
    with pytest.raises(TypeError, match="run must be a function"):
        WhatIf.of(Experiment("not callable", [Knob("n", "n", "int", 1, options=(1, 2))], title="t",
                             cleanup=lambda: cleaned.append(1)))
    assert cleaned == [1]
