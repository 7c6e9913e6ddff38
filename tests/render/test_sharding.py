"""The shard-policy figure and HTML, from plain traces (no TensorFlow)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from vizdist.instrument.experiments.sharding import ShardComparison, write_text_files
from vizdist.render.sharding import element_grid, plot_shard_policies, shard_policies_html
from vizdist.trace import Trace


def _comparison(tmp_path: Path) -> ShardComparison:
    files = write_text_files(tmp_path, n_files=2, lines_per_file=2, prefix="<b>x")
    rows = [dict(step=0, replica=w, worker=w, source_file=files[w], source_line=i, source_id=i, position=i,
                 value=f"<i>{2 * w + i}") for w in range(2) for i in range(2)]
    traces = {"FILE": Trace.from_records(elements=rows, meta={"shard_policy": "FILE"})}
    return ShardComparison(traces, files=files, workers=2, global_batch_size=4,
                           errors={"DATA": {"worker-1": "Err: <script>alert(1)</script>"}},
                           notes={"OFF": "not <run>"})


def test_html_escapes_every_value(tmp_path: Path) -> None:
    html = shard_policies_html(_comparison(tmp_path))
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<i>" not in html and "&lt;i&gt;0 &lt;i&gt;1" in html
    assert "&lt;b&gt;x-0.txt" in html and "not &lt;run&gt;" in html


def test_grid_marks_reads_per_worker(tmp_path: Path) -> None:
    cmp = _comparison(tmp_path)
    universe, reads = element_grid(cmp, "FILE")
    assert [ln for _, ln in universe] == [0, 1, 0, 1]
    assert sorted(reads) == sorted((w, (cmp.files[w], i)) for w in range(2) for i in range(2))


def test_figure_has_one_panel_per_policy_with_status(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = plot_shard_policies(_comparison(tmp_path))
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles[0] == "FILE" and titles[1].startswith("DATA  —  failed: worker-1")
    assert titles[2] == "OFF  —  not run: fewer files than workers"
    assert len(fig.axes[0].texts) == 4  # four elements read
    plt.close(fig)


def test_docstring_examples_run() -> None:
    import doctest

    import vizdist.instrument.experiments.sharding
    import vizdist.render.sharding

    for mod in (vizdist.render.sharding, vizdist.instrument.experiments.sharding):
        assert doctest.testmod(mod, optionflags=doctest.ELLIPSIS).failed == 0
