"""vizdist.what_if: every knob move re-runs real TensorFlow; what it shows is what plain TF delivers."""

from __future__ import annotations

import pytest

import vizdist
from vizdist.instrument.experiments.whatif import INPUT_APIS
from vizdist.render.whatif import marked_cells

N = 10  # the source: range(10)


def _plain(tf, devices, *, global_batch_size, replicas, drop_remainder=False, input_api=INPUT_APIS[0]):
    """step -> replica -> ids, from plain TF (no vizdist) on the first ``replicas`` devices; or TF's error."""
    strategy = tf.distribute.MirroredStrategy(devices[:replicas])
    if input_api == INPUT_APIS[0]:
        dist = strategy.experimental_distribute_dataset(
            tf.data.Dataset.range(N).batch(global_batch_size, drop_remainder=drop_remainder))
    else:
        per_replica = input_api.endswith("PER_REPLICA")

        def fn(ctx):
            ds = tf.data.Dataset.range(N).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
            return ds.batch(ctx.get_per_replica_batch_size(global_batch_size), drop_remainder=drop_remainder)

        mode = tf.distribute.InputReplicationMode.PER_REPLICA if per_replica else \
            tf.distribute.InputReplicationMode.PER_WORKER
        opts = tf.distribute.InputOptions(experimental_replication_mode=mode,
                                          experimental_fetch_to_device=not per_replica)
        try:
            dist = strategy.distribute_datasets_from_function(fn, opts)
        except ValueError as exc:
            return str(exc)
    return {s: {r: t.numpy().tolist() for r, t in enumerate(strategy.experimental_local_results(b))}
            for s, b in enumerate(dist)}


def _shown(trace) -> dict[int, dict[int, list[int]]]:
    split = trace.split()
    return {int(s): {int(r): [int(i) for i in split.loc[s, r]] for r in split.columns} for s in split.index}


@pytest.fixture(scope="module")
def widget(tf, devices):
    return vizdist.what_if(tf.data.Dataset.range(N), global_batch_size=4)


MOVES = [("replicas", 3), ("global_batch_size", 6), ("drop_remainder", True),
         ("input_api", INPUT_APIS[2]), ("input_api", INPUT_APIS[1]), ("replicas", 2)]


def test_every_knob_move_shows_what_plain_tf_delivers(tf, devices, widget):
    assert _shown(widget.trace) == _plain(tf, devices, global_batch_size=4, replicas=len(devices))
    for name, value in MOVES:
        before = widget.runs
        widget.controls[name].value = value
        assert widget.error == "" and widget.runs == before + 1, (name, value, widget.error)
        assert _shown(widget.trace) == _plain(tf, devices, **widget.values), widget.values
        k = widget.values["replicas"]
        assert sorted(set(widget.trace.batches["replica_device"])) == \
            [f"/job:localhost/replica:0/task:0/device:CPU:{i}" for i in range(k)]  # the first k devices


def test_changes_since_the_last_run_are_the_diff_of_two_real_runs(tf, devices, widget):
    widget.controls["drop_remainder"].value = False
    keep = _plain(tf, devices, **widget.values)
    widget.controls["drop_remainder"].value = True
    drop = _plain(tf, devices, **widget.values)
    ids = lambda split: sorted(i for s in split.values() for r in s.values() for i in r)  # noqa: E731
    assert sorted(widget.last_diff.gone["source_id"]) == sorted(set(ids(keep)) - set(ids(drop)))
    html = widget.picture.value
    assert html.count("data-changed=1") == len(marked_cells(widget.last_diff))
    assert f'data-run="{widget.runs}"' in html
    for i in widget.last_diff.gone["source_id"]:
        assert f"{i}" in html.split("no longer arrive:")[1].split("<")[0]


def test_a_combination_tf_refuses_shows_tfs_error_and_keeps_the_picture(tf, devices, widget):
    widget.controls["input_api"].value = INPUT_APIS[1]
    widget.controls["replicas"].value = 3
    picture, runs = widget.picture.value, widget.runs
    widget.controls["global_batch_size"].value = 5
    refused = _plain(tf, devices, **widget.values)
    assert isinstance(refused, str) and "not divisible" in refused  # plain TF refuses it too
    assert refused in widget.error and 'data-error="1"' in widget.status.value
    assert widget.picture.value == picture and widget.runs == runs
    widget.controls["global_batch_size"].value = 6
    assert widget.error == "" and _shown(widget.trace) == _plain(tf, devices, **widget.values)


def test_static_view_is_the_first_run(tf, devices, widget):
    bundle = widget._repr_mimebundle_()
    first = _plain(tf, devices, global_batch_size=4, replicas=len(devices))
    text = bundle["text/plain"].splitlines()
    assert text[1] == f"knobs: global batch 4 · replicas {len(devices)} · drop_remainder False · input {INPUT_APIS[0]}"
    steps = [ln for ln in text if ln.startswith("  step ")]
    assert len(steps) == len(first)
    for line, (s, reps) in zip(steps, first.items(), strict=True):
        assert line == f"  step {s}: " + " | ".join(
            f"r{r} " + ("[" + ", ".join(map(str, ids)) + "]" if ids else "empty") for r, ids in reps.items())
    assert "<table" in bundle["text/html"] and "vizdist-whatif-static" in bundle["text/html"]


def test_map_knobs_rerun_with_input_wait_recorded_and_values_untouched(tf, devices):
    w = vizdist.what_if(tf.data.Dataset.range(8), global_batch_size=4, map_fn=lambda x: x * 2)
    assert {"num_parallel_calls", "prefetch"} <= set(w.controls)
    w.controls["num_parallel_calls"].value = "AUTOTUNE"
    w.controls["prefetch"].value = 2
    assert w.error == "" and w.runs == 3
    strategy = tf.distribute.MirroredStrategy(devices)
    plain = [[int(v) // 2 for t in strategy.experimental_local_results(b) for v in t.numpy()]
             for b in strategy.experimental_distribute_dataset(
                 tf.data.Dataset.range(8).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE).batch(4).prefetch(2))]
    assert [sorted(ids for r in row for ids in r) for row in w.trace.split().values.tolist()] == \
        [sorted(r) for r in plain]
    assert set(w.trace.events["stage"]) >= {"transfer"} and "vizdist-whatif-timing" in w.picture.value


def test_bad_input_is_a_clear_error(tf):
    with pytest.raises(TypeError, match=r"tf\.data\.Dataset of single elements"):
        vizdist.what_if([1, 2, 3])
    with pytest.raises(ValueError, match=r"replicas must be 1 to 4 .*virtual_devices"):
        vizdist.what_if(tf.data.Dataset.range(4), replicas=99)


@pytest.mark.slow
def test_cluster_knobs_rerun_a_real_cluster(tf, tmp_path):
    """FILE follows TF's documented rule (worker w reads files w, w + workers, ...); OFF gives both everything."""
    from pathlib import Path

    from vizdist.instrument.experiments.sharding import write_text_files

    files = write_text_files(tmp_path, n_files=4, lines_per_file=2)
    w = vizdist.what_if_cluster(files, workers=2, shard_policy="FILE", global_batch_size=2, timeout=120)
    assert w.error == "", w.error
    read = lambda t, k: sorted(Path(f).name for f in set(t.elements[t.elements["worker"] == k]["source_file"]))  # noqa: E731
    assert [read(w.trace, k) for k in (0, 1)] == [[Path(f).name for f in files[k::2]] for k in (0, 1)]
    w.controls["shard_policy"].value = "OFF"
    assert w.error == "" and w.runs == 2
    assert read(w.trace, 0) == read(w.trace, 1) == sorted(Path(f).name for f in files)
    assert "worker-duplicates" in set(w.last_diff.findings_appeared["code"])
    assert any(c.startswith("finding appeared: worker-duplicates") for c in w.changes)


_KEEP_A_WHATIF = """
import types, vizdist
from pathlib import Path
from vizdist.instrument.experiments import sharding

def fake_compare(files, *, policies, **kw):  # says where the files are instead of starting a cluster
    print("FILES", Path(files[0]).parent, flush=True)
    t = vizdist.Trace.from_records(elements=[dict(step=0, replica=0, worker=0, source_id=0)])
    return types.SimpleNamespace(traces={policies[0]: t}, notes={}, errors={})

sharding.compare_shard_policies = fake_compare
w = vizdist.what_if_cluster(workers=2, isolate=False)  # kept to the end, as a notebook keeps its widgets
assert Path(w.note) and not w.error, w.error
"""


def test_the_files_what_if_cluster_writes_go_with_it(tmp_path):
    """Its default files live as long as the WhatIf (knob moves re-read them), at most to the end of the process."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from vizdist.instrument.processes.supervisor import vizdist_root

    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=vizdist_root())
    done = subprocess.run([sys.executable, "-c", _KEEP_A_WHATIF], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = Path(next(line.split(" ", 1)[1] for line in done.stdout.splitlines() if line.startswith("FILES ")))
    assert folder.name.startswith("vizdist-whatif-") and folder.parent == tmp_path
    assert not folder.exists()


@pytest.mark.slow
def test_service_knobs_rerun_a_real_service(tf):
    """parallel_epochs: each element once per worker; DATA: worker i keeps element k when k % 2 == i (TF's rule)."""
    w = vizdist.what_if_service(tf.data.Dataset.range(8), workers=2)
    assert w.error == "", w.error
    e = w.trace.elements
    assert sorted(e["source_id"]) == sorted(list(range(8)) * 2) and set(e["worker"]) == {0, 1}
    w.controls["sharding_policy"].value = "DATA"
    assert w.error == "" and w.runs == 2
    e = w.trace.elements
    assert sorted(e["source_id"]) == list(range(8)) and (e["worker"] == e["source_id"] % 2).all()
    assert len(w.last_diff.gone) == 8  # the second copy of every element
