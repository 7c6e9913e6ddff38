"""A recording watched while it runs and streamed to disk: ``rec.trace`` inside the block, ``record(path=...)``
read during and after the run (a local folder and TF's ``ram://`` file system), memory held, the live feed,
and the fail-closed rules for the parts.

Ground truth is the model's own log (a layer whose ``tf.py_function`` records what each replica's batch held),
read at the same moment as the trace, never vizdist's output or numbers typed by hand.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid

import numpy as np
import pytest

import vizdist
from tests.instrument._model_log import Log, spy_layer
from tests.instrument.test_user_run import _recorded_steps

pytestmark = [pytest.mark.filterwarnings("ignore:`shuffle=True` was passed"),
              pytest.mark.usefixtures("no_global_seed_after")]  # _model sets Keras's global seed

REPLICAS = 4


def _model(tf, keras, strategy, log: Log):
    keras.utils.set_random_seed(7)

    with strategy.scope():
        inp = keras.Input((1,))
        model = keras.Model(inp, keras.layers.Dense(1)(spy_layer(tf, keras, log)(inp)))
        model.compile("sgd", "mse", jit_compile=False)
    return model


def _data(tf, n: int = 40, batch: int = 8):
    x = np.arange(n, dtype="float32").reshape(-1, 1)
    return tf.data.Dataset.from_tensor_slices((x, 0.5 * x)).shuffle(n, seed=3).batch(batch)


def _at_each_batch(keras, fn):
    class Each(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            fn()

    return Each()


def test_trace_inside_the_block_is_the_steps_so_far(tf, keras, mirrored):
    log = Log()
    model = _model(tf, keras, mirrored, log)
    seen = []
    with vizdist.record() as rec:
        grab = _at_each_batch(keras, lambda: seen.append((rec.trace, log.steps())))
        model.fit(_data(tf), epochs=2, callbacks=[grab], verbose=0)
    assert len(seen) == 10
    for snapshot, so_far in seen:  # each snapshot: exactly the steps the model had trained on at that moment
        assert _recorded_steps(snapshot, "train", REPLICAS) == so_far
        assert snapshot.meta["stopped"] == "running"
    assert _recorded_steps(rec.trace, "train", REPLICAS) == log.steps()


@pytest.mark.parametrize("where", ["local", "ram"])
def test_path_is_read_while_the_run_goes_on_and_after(tf, keras, mirrored, tmp_path, where):
    log = Log()
    model = _model(tf, keras, mirrored, log)
    path = str(tmp_path / "run") if where == "local" else f"ram://vizdist-test-{uuid.uuid4().hex}/run"
    during = []

    def read_now() -> None:
        so_far = log.steps()
        with contextlib.suppress(vizdist.TraceFormatError):  # no whole part yet
            during.append((vizdist.load_trace(path), so_far))

    with vizdist.record(path=path, part_elements=16) as rec:  # a part every 2 steps of 8
        model.fit(_data(tf), epochs=2, callbacks=[_at_each_batch(keras, read_now)], verbose=0)
    final = vizdist.load_trace(path)
    assert final == rec.trace
    assert _recorded_steps(final, "train", REPLICAS) == log.steps()
    assert len(during) >= 4
    for partial, so_far in during:  # what was on disk: the first steps the model trained on, each step whole
        steps = _recorded_steps(partial, "train", REPLICAS)
        assert steps == so_far[:len(steps)] and len(steps) >= len(so_far) - 3
    names = tf.io.gfile.listdir(path)
    assert len(names) >= 5 and all(n.startswith("record-worker-00000-") for n in names)


def test_path_twin_of_the_in_memory_recording(tf, keras, mirrored, tmp_path):
    """With and without path=, from the same seeds: the same trace (but for the part's task and recording)."""
    def run(**kw):
        model = _model(tf, keras, mirrored, Log())
        with vizdist.record(**kw) as rec:
            model.fit(_data(tf), validation_data=_data(tf, 16), epochs=2, verbose=0)
        return rec.trace

    memory, disk = run(), run(path=str(tmp_path / "run"), part_elements=24)
    meta = {k: v for k, v in disk.meta.items() if k not in ("task", "recording")}
    assert vizdist.Trace(elements=disk.elements, batches=disk.batches, events=disk.events, meta=meta) == memory
    assert disk.meta["task"] == "worker-0" and disk.meta["recording"]["ended"] is True


def test_memory_held_with_path_is_one_part(tf, mirrored, tmp_path):
    dist_steps, part = 300, 64
    with vizdist.record(path=str(tmp_path / "run"), part_elements=part) as rec:
        @tf.function
        def loop(dist):
            for x in dist:
                mirrored.run(lambda v: v + 1, args=(x,))

        loop(mirrored.experimental_distribute_dataset(tf.data.Dataset.range(4 * dist_steps).batch(4)))
        held = rec.datasets[0].reader.rec.n_elements
        labels = len(rec.epochs.step_pass)
    assert held < part and labels <= part  # only the steps since the last part
    t = vizdist.load_trace(tmp_path / "run")
    assert sorted(t.elements["source_id"].tolist()) == list(range(4 * dist_steps))
    assert t.steps == list(range(dist_steps))


def test_the_live_feed_follows_the_newest_steps(tf, keras, mirrored):
    log = Log()
    model = _model(tf, keras, mirrored, log)
    shown = []

    def look() -> None:
        live.refresh()  # what its thread does every interval, here at a known moment
        step = live.step
        cards = {int(c.value.split('data-replica="')[1].split('"')[0]): c.value for c in live.cards.children}
        shown.append((step, cards, log.steps()[-1]))

    with vizdist.record() as rec:
        live = rec.show(display=False, interval=60)  # its own thread stays asleep: look() refreshes
        model.fit(_data(tf), epochs=1, callbacks=[_at_each_batch(keras, look)], verbose=0)
    live.refresh()
    assert [s for s, _, _ in shown] == sorted({s for s, _, _ in shown}) and len(shown) == 5  # it advanced each step
    for _, cards, trained in shown:  # the newest step shown is the batch the model just trained on
        for r, ids in enumerate(trained):
            assert f"{len(ids)} element(s)<br>{', '.join(map(str, ids))}" in cards[r]
    assert 'data-ended="1"' in live.status.value
    live.close()


def test_the_live_feed_reads_the_steps_just_written_to_a_part(tf, mirrored, tmp_path):
    """With ``path=`` a step that filled a part is gone from memory when the live view asks for it: the feed
    reads it from the part's newest steps. Each replica's ids are what TF handed that replica at that step."""
    with vizdist.record(path=str(tmp_path / "run"), part_elements=2 * mirrored.num_replicas_in_sync) as rec:
        it = iter(mirrored.experimental_distribute_dataset(tf.data.Dataset.range(48).batch(8)))
        from_parts = 0
        for step in range(6):
            x = next(it)
            want = [v.numpy().tolist() for v in mirrored.experimental_local_results(x)]
            rows, status = rec.recent_steps(step - 1, 1)
            assert status["steps"] == step + 1 and set(rows["step"]) == {step}
            assert [rows["ids"][rows["replica"].index(r)] for r in range(len(want))] == want
            assert rows["n_elements"] == [len(ids) for ids in rows["ids"]]
            from_parts += rec.datasets[0].reader.rec.n_elements == 0  # the step went into a part: read there
    assert from_parts >= 3


def test_the_live_view_names_the_source_of_each_id(tf, mirrored, tmp_path):
    """Two datasets concatenated number their elements 0.. each: the live cards tell them apart as the trace
    does (``s0:4`` / ``s1:4``), also for a step read back from a part and with one step in view. The source of
    each id follows from plain TF: the first dataset's 8 elements come first (``Dataset.concatenate``)."""
    from vizdist.render.live import LiveExplorer

    first, second = tf.data.Dataset.range(8), tf.data.Dataset.range(8).map(lambda v: v + 100)
    with vizdist.record(path=str(tmp_path / "run"), part_elements=4) as rec:
        live = LiveExplorer(rec.recent_steps, window=1, start=False)
        it = iter(mirrored.experimental_distribute_dataset(first.concatenate(second).batch(4)))
        for _ in range(4):
            values = [v.numpy().tolist() for v in mirrored.experimental_local_results(next(it))]
            live.refresh()
            for card, got in zip(live.cards.children, values, strict=True):
                want = [f"s0:{v}" if v < 100 else f"s1:{v - 100}" for v in got]
                assert f"{len(got)} element(s)<br>{', '.join(want)}" in card.value
    live.close()


def test_a_planted_link_is_neither_written_through_nor_read(tf, mirrored, tmp_path):
    folder, victim = tmp_path / "run", tmp_path / "victim"
    victim.mkdir()
    with pytest.raises(vizdist.TracingError, match="exists already"), \
            pytest.warns(vizdist.RecordingWarning, match="last part could not be written"), \
            vizdist.record(path=str(folder), part_elements=4):
        it = iter(mirrored.experimental_distribute_dataset(tf.data.Dataset.range(16).batch(4)))
        next(it)
        (first,) = os.listdir(folder)  # the first part's name gives the run's id: plant the next one
        os.symlink(victim, folder / first.replace("-000000.parquet", "-000001.parquet"))
        next(it)  # its part is refused: the recording stops, failing closed
    assert os.listdir(victim) == []  # nothing written through the link
    with pytest.warns(UserWarning, match="symbolic link"):
        t = vizdist.load_trace(folder)
    assert t.steps == [0] and any("symbolic link" in s["reason"] for s in t.meta["skipped"])
    assert not [n for n in os.listdir(folder / first) if n.endswith(".tmp")]  # every file renamed into place


def test_a_part_being_written_is_not_read(tf, mirrored, tmp_path):
    folder = tmp_path / "run"
    with vizdist.record(path=str(folder), part_elements=4):
        for _ in mirrored.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(4)):
            pass
    names = sorted(os.listdir(folder))
    whole = vizdist.load_trace(folder)
    os.unlink(folder / names[-1] / "meta.json")  # the last part, as it is while being written
    t = vizdist.load_trace(folder)
    assert t.steps == whole.steps[:-1] or t.steps == whole.steps  # the last part may hold no step
    assert any(s["reason"].startswith("incomplete") for s in t.meta["skipped"])
    os.unlink(folder / names[0] / "meta.json")  # a part missing before others: the steps it held are lost
    with pytest.raises(vizdist.TraceFormatError, match="missing or incomplete"):
        vizdist.load_trace(folder)


def test_time_is_bounded_for_a_part(tf, mirrored, tmp_path, monkeypatch):
    """A part is written at least every PART_SECONDS while steps come in (a reader is at most that far behind)."""
    from vizdist.instrument.run import stream

    monkeypatch.setattr(stream, "PART_SECONDS", 0.0)
    with vizdist.record(path=str(tmp_path / "run")) as rec:
        for _ in mirrored.experimental_distribute_dataset(tf.data.Dataset.range(12).batch(4)):
            time.sleep(0.01)
        parts = rec.stream.parts
    assert parts == 3  # one per step, though far from part_elements
