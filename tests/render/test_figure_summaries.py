"""A figure's text repr says what it drew, so nbval compares figure cells (it cannot compare PNGs)."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import vizdist


def test_the_split_figure_names_the_empty_cells_plain_tf_delivers(tf, mirrored):
    ds = tf.data.Dataset.range(10).batch(4)
    empty, steps, n = [], 0, 0
    for step, batch in enumerate(mirrored.experimental_distribute_dataset(ds)):
        for replica, part in enumerate(mirrored.experimental_local_results(batch)):
            n += int(tf.size(part))
            if int(tf.size(part)) == 0:
                empty.append((step, replica))
        steps += 1
    fig = vizdist.trace_distribution(mirrored, ds).plot.split()
    assert f"empty (step, replica): {empty}" in repr(fig)
    replicas = mirrored.num_replicas_in_sync
    assert repr(fig).startswith(f"<Figure: split of {steps} of {steps} step(s) x {replicas} replica(s), {n} element(s)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # still a matplotlib Figure
    assert buf.getvalue().startswith(b"\x89PNG")


def test_the_timeline_names_its_steps_and_host_lanes():
    trace = vizdist.Trace.from_records(events=[
        dict(lane="w0 host", stage="consume", step=s, t_start_ns=10 * s, t_end_ns=10 * s + 5) for s in range(3)])
    assert repr(trace.plot.timeline()) == "<Figure: timeline of steps 0..2; lanes: w0 host>"
