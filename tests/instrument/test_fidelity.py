"""Recording changes nothing: each scenario runs plain and recorded from the same seeds, in one process.

What is compared comes from the model and from plain TF, never from vizdist: the batches each replica's
model received (a layer whose ``tf.py_function`` logs them), Keras's ``History``, the final weights, and
what a plain read of the user's dataset gives after the run. Then the recorded trace is checked against
what the model received. The scenarios are the shapes of everyday Keras and custom-loop code in which an
earlier recorder changed the training: a shuffled dataset read more than once (a second ``fit``,
``evaluate`` and validation taken from it, a resumed ``fit``, two blocks, a read before the block),
``steps_per_epoch``, a custom loop over a train and a test dataset, and a plain run in another thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import vizdist
from tests.instrument._model_log import Log, spy_layer

pytestmark = [pytest.mark.filterwarnings("ignore:`shuffle=True` was passed", "ignore:Your input ran out of data"),
              pytest.mark.usefixtures("no_global_seed_after")]  # each run sets Keras's global seed

REPLICAS = 4


class Run:
    """One run of a scenario, plain or recorded: the model's log, the blocks it opened, what it returned."""

    def __init__(self, tf: Any, keras: Any, strategy: Any, *, recorded: bool, tmp: Any) -> None:
        self.tf, self.keras, self.strategy, self.recorded, self.tmp = tf, keras, strategy, recorded, tmp
        self.log = Log()
        self.recordings: list[Any] = []

    def block(self) -> Any:
        """``vizdist.record()`` in the recorded run; nothing in the plain one."""
        if not self.recorded:
            return contextlib.nullcontext()
        rec = vizdist.record()
        self.recordings.append(rec)
        return rec

    def model(self, seed: int = 7) -> Any:
        tf, keras = self.tf, self.keras
        keras.utils.set_random_seed(seed)
        with self.strategy.scope():
            inp = keras.Input((1,))
            model = keras.Model(inp, keras.layers.Dense(1)(spy_layer(tf, keras, self.log)(inp)))
            model.compile("sgd", "mse", jit_compile=False)
        return model

    def shuffled(self, n: int = 22, *, batch: int = 8, seed: int | None = 3) -> Any:
        """``n`` examples whose feature is their index, shuffled (``seed=None``: by the global seed)."""
        x = np.arange(n, dtype="float32").reshape(-1, 1)
        return self.tf.data.Dataset.from_tensor_slices((x, 0.5 * x)).shuffle(n, seed=seed).batch(batch)


def ids_of(ds: Any) -> list[int]:
    """A plain read of a dataset of ``(x, y)`` batches: the feature values (the examples' indexes), in order."""
    return [int(v) for x, *_ in ds for v in np.asarray(x).reshape(-1)]


def outcome(model: Any, histories: list[Any], after: Any = None) -> dict[str, Any]:
    return {"history": [h.history for h in histories], "weights": [w.tolist() for w in model.get_weights()],
            "after": after}


def compare(tf: Any, keras: Any, strategy: Any, scenario: Callable[[Run], dict[str, Any]],
            tmp_path: Any) -> Run:
    """Run ``scenario`` plain, then recorded, from the same seeds; assert that nothing differs."""
    plain = Run(tf, keras, strategy, recorded=False, tmp=tmp_path / "plain")
    want = scenario(plain)
    recorded = Run(tf, keras, strategy, recorded=True, tmp=tmp_path / "recorded")
    got = scenario(recorded)
    assert recorded.log.steps() == plain.log.steps(), "the model received other batches when recorded"
    assert got == want, "History, weights or the next plain read changed when recorded"
    return recorded


def trace_steps(trace: Any, phases: tuple[str, ...] = ("train", "validation", "evaluate", "predict", "loop"),
                replicas: int = REPLICAS) -> list[list[list[int]]]:
    """Per recorded step (in run order, build reads left out), the source ids each replica got."""
    b = trace.batches[trace.batches["phase"].astype(str).isin(phases)]
    e = trace.elements.sort_values(["step", "replica", "position"])
    out = []
    for step in sorted(b["step"].unique()):
        rows = e[e["step"] == step]
        out.append([rows[rows["replica"] == r]["source_id"].tolist() for r in range(replicas)])
    return out


# -- scenarios on a shuffled tf.data dataset -------------------------------------------------------------

@pytest.mark.smoke
@pytest.mark.parametrize("seed", [3, None], ids=["seeded", "global-seed"])
def test_a_second_fit_on_the_same_shuffled_dataset(tf, keras, mirrored, tmp_path, seed):
    def scenario(run: Run) -> dict[str, Any]:
        model, ds = run.model(), run.shuffled(seed=seed)
        with run.block():
            first = model.fit(ds, epochs=2, verbose=0)
            second = model.fit(ds, epochs=2, verbose=0)
        return outcome(model, [first, second], ids_of(ds))

    run = compare(tf, keras, mirrored, scenario, tmp_path)
    trace = run.recordings[0].trace
    assert trace_steps(trace) == run.log.steps()  # what the model received, step by step
    train = trace.batches[trace.batches["phase"].astype(str) == "train"].drop_duplicates("step")
    assert train.groupby("dataset")["epoch"].unique().map(sorted).tolist() == [[0, 1], [0, 1]]  # Keras's


def test_evaluate_validation_and_predict_taken_from_the_training_dataset(tf, keras, mirrored, tmp_path):
    def scenario(run: Run) -> dict[str, Any]:
        model, ds = run.model(), run.shuffled()
        with run.block():
            history = model.fit(ds, validation_data=ds.take(2), epochs=2, verbose=0)
            evaluated = model.evaluate(ds, verbose=0)
            predicted = model.predict(ds.map(lambda x, y: x), verbose=0)
        return {**outcome(model, [history], ids_of(ds)), "evaluate": evaluated, "predict": predicted.tolist()}

    compare(tf, keras, mirrored, scenario, tmp_path)


def test_one_fit_in_each_of_two_blocks(tf, keras, mirrored, tmp_path):
    def scenario(run: Run) -> dict[str, Any]:
        model, ds = run.model(), run.shuffled()
        with run.block():
            first = model.fit(ds, epochs=1, verbose=0)
        with run.block():
            second = model.fit(ds, epochs=1, verbose=0)
        return outcome(model, [first, second], ids_of(ds))

    compare(tf, keras, mirrored, scenario, tmp_path)


def test_a_dataset_read_before_the_block(tf, keras, mirrored, tmp_path):
    def scenario(run: Run) -> dict[str, Any]:
        model, ds = run.model(), run.shuffled()
        before = ids_of(ds)
        with run.block():
            history = model.fit(ds, epochs=2, verbose=0)
        return {**outcome(model, [history], ids_of(ds)), "before": before}

    compare(tf, keras, mirrored, scenario, tmp_path)


def test_a_fit_resumed_by_backup_and_restore(tf, keras, mirrored, tmp_path):
    def scenario(run: Run) -> dict[str, Any]:
        model, ds = run.model(), run.shuffled()
        keras_ = run.keras

        class Crash(keras_.callbacks.Callback):
            armed, epoch = True, 0

            def on_epoch_begin(self, epoch, logs=None):
                self.epoch = epoch

            def on_train_batch_end(self, batch, logs=None):
                if self.armed and self.epoch == 1 and batch == 1:
                    self.armed = False
                    raise RuntimeError("the job crashed")

        callbacks = [keras_.callbacks.BackupAndRestore(str(run.tmp / "backup"), save_freq=2), Crash()]
        with run.block():
            with pytest.raises(RuntimeError, match="crashed"):
                model.fit(ds, epochs=3, callbacks=callbacks, verbose=0)
            resumed = model.fit(ds, epochs=3, callbacks=callbacks, verbose=0)
        return outcome(model, [resumed], ids_of(ds))

    compare(tf, keras, mirrored, scenario, tmp_path)


def test_steps_per_epoch_over_a_repeated_dataset(tf, keras, mirrored, tmp_path):
    def scenario(run: Run) -> dict[str, Any]:
        model = run.model()
        ds = run.shuffled().repeat()
        with run.block():
            history = model.fit(ds, epochs=3, steps_per_epoch=2, verbose=0)
        return outcome(model, [history], ids_of(ds.take(3)))

    run = compare(tf, keras, mirrored, scenario, tmp_path)
    b = run.recordings[0].trace.batches
    train = b[b["phase"].astype(str) == "train"]
    assert sorted(train["epoch"].unique()) == [0, 1, 2]  # Keras's epochs, though one pass spans them all
    assert train.groupby("epoch")["step"].nunique().tolist() == [2, 2, 2]


def test_a_custom_loop_over_a_train_and_a_test_dataset(tf, keras, mirrored, tmp_path):
    def scenario(run: Run) -> dict[str, Any]:
        strategy, tf_ = run.strategy, run.tf
        log = run.log

        def step(x):
            ctx = tf_.distribute.get_replica_context()
            tf_.py_function(log.add, [ctx.replica_id_in_sync_group, x], tf_.int32)
            return tf_.reduce_sum(x)

        @tf_.function
        def epoch(dist):
            total = tf_.constant(0.0)
            for x, _ in dist:
                total += strategy.reduce("SUM", strategy.run(step, args=(x,)), axis=None)
            return total

        train, test = run.shuffled(seed=5), run.shuffled(10, batch=4, seed=6)
        with run.block():
            dist_train = strategy.experimental_distribute_dataset(train)
            dist_test = strategy.experimental_distribute_dataset(test)
            totals = [(float(epoch(dist_train)), float(epoch(dist_test))) for _ in range(3)]
        return {"totals": totals, "after": ids_of(train) + ids_of(test)}

    run = compare(tf, keras, mirrored, scenario, tmp_path)
    b = run.recordings[0].trace.batches
    epochs = b.drop_duplicates("step").groupby("dataset")["epoch"].unique()
    assert [sorted(e) for e in epochs] == [[0, 1, 2], [0, 1, 2]]  # each dataset's own passes
    assert trace_steps(run.recordings[0].trace) == run.log.steps()


def test_a_plain_fit_in_another_thread_stays_out_and_unchanged(tf, keras, mirrored, tmp_path):
    """While one thread records a fit, another thread's plain fit is neither recorded nor changed."""
    def other_fit(run: Run, model: Any, ds: Any, out: dict[str, Any], ready: threading.Barrier) -> None:
        ready.wait(timeout=60)
        out["history"] = model.fit(ds, epochs=3, verbose=0).history

    def scenario(run: Run) -> dict[str, Any]:
        model = run.model()
        # The other thread trains under TF's default strategy: two fits at once under one MirroredStrategy
        # interleave their all-reduces, which changes their numbers with or without vizdist.
        other = Run(run.tf, run.keras, run.tf.distribute.get_strategy(), recorded=False, tmp=run.tmp)
        other_model = other.model(seed=11)
        ds, other_ds = run.shuffled(seed=3), other.shuffled(seed=4)
        out: dict[str, Any] = {}
        ready = threading.Barrier(2)
        thread = threading.Thread(target=other_fit, args=(other, other_model, other_ds, out, ready))
        with run.block():
            thread.start()
            ready.wait(timeout=60)
            history = model.fit(ds, epochs=3, verbose=0)
            thread.join(timeout=300)
        assert not thread.is_alive()
        return {**outcome(model, [history], ids_of(ds)), "other": out["history"], "other_steps": other.log.steps(1),
                "other_weights": [w.tolist() for w in other_model.get_weights()]}

    run = compare(tf, keras, mirrored, scenario, tmp_path)
    trace = run.recordings[0].trace
    assert len(trace.meta["datasets"]) == 1  # only the block's own fit
    assert trace_steps(trace, ("train",)) == run.log.steps()


# -- Keras's other inputs: arrays, PyDataset, generators ---------------------------------------------------

def _xy(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows whose feature is the row's number in what the user passes."""
    x = np.arange(n, dtype="float32").reshape(-1, 1)
    return x, 0.5 * x


def _ids_by_phase(trace: Any, phase: str) -> list[list[list[int]]]:
    return trace_steps(trace, (phase,))


def test_numpy_arrays_with_validation_split_sample_weight_and_shuffle(tf, keras, mirrored, tmp_path):
    x, y = _xy(40)  # 32 training rows, 8 validation rows: Keras's build read needs an even first batch
    weights = np.linspace(0.5, 1.5, 40).astype("float32")

    def scenario(run: Run) -> dict[str, Any]:
        model = run.model()
        with run.block():
            history = model.fit(x, y, sample_weight=weights, batch_size=8, validation_split=0.2, epochs=2,
                                shuffle=True, verbose=0)
            evaluated = model.evaluate(x, y, batch_size=8, verbose=0)
        return {**outcome(model, [history]), "evaluate": evaluated}

    run = compare(tf, keras, mirrored, scenario, tmp_path)
    trace = run.recordings[0].trace
    assert trace_steps(trace) == run.log.steps()  # every row id is the row the model received
    split_at = int(np.floor(40 * (1 - 0.2)))  # Keras's rule (array_slicing.train_validation_split)
    val = {i for step in _ids_by_phase(trace, "validation") for ids in step for i in ids}
    assert val == set(range(split_at, 40))  # validation rows keep their number in what the user passed
    train = trace.elements[trace.elements["phase"].astype(str) == "train"]
    assert sorted(train[train["epoch"] == 1]["source_id"]) == list(range(split_at))


def test_class_weight_and_a_pandas_frame(tf, keras, mirrored, tmp_path):
    pd = pytest.importorskip("pandas")
    n = 20
    frame = pd.DataFrame({"x": np.arange(n, dtype="float32")})
    labels = (np.arange(n) % 2).astype("float32")

    def scenario(run: Run) -> dict[str, Any]:
        model = run.model()
        with run.block():
            history = model.fit(frame, labels, class_weight={0: 1.0, 1: 3.0}, batch_size=8, epochs=2, verbose=0)
        return outcome(model, [history])

    run = compare(tf, keras, mirrored, scenario, tmp_path)
    assert trace_steps(run.recordings[0].trace) == run.log.steps()


class _Rows:
    """A ``keras.utils.PyDataset`` of ``n`` rows in batches; row ``r``'s feature is ``r``."""

    @staticmethod
    def make(keras: Any, n: int, batch: int, **kwargs: Any) -> Any:
        class Rows(keras.utils.PyDataset):
            def __init__(self) -> None:
                super().__init__(**kwargs)

            def __len__(self) -> int:
                return -(-n // batch)

            def __getitem__(self, i: int) -> Any:
                x = np.arange(i * batch, min(n, (i + 1) * batch), dtype="float32").reshape(-1, 1)
                return x, 0.5 * x

        return Rows()


def _rows_received(run: Run) -> tuple[list[int], list[int]]:
    """(rows the trace says each train step's replicas got, in order; rows the model logged)."""
    trace = run.recordings[0].trace
    e = trace.elements[trace.elements["phase"].astype(str) == "train"].sort_values(["step", "replica", "position"])
    return (e["source_id"] * 8 + e["source_line"]).tolist(), [i for s in run.log.steps() for ids in s for i in ids]


def test_a_py_dataset_shuffled_by_keras(tf, keras, mirrored, tmp_path):
    def scenario(run: Run) -> dict[str, Any]:
        model = run.model()
        rows = _Rows.make(run.keras, 26, 8)
        with run.block():
            history = model.fit(rows, epochs=2, shuffle=True, verbose=0)
        return outcome(model, [history])

    recorded, seen = _rows_received(compare(tf, keras, mirrored, scenario, tmp_path))
    assert recorded == seen  # batch i, row j: row 8 i + j


def test_a_py_dataset_read_by_two_worker_threads(tf, keras, mirrored):
    """With workers, Keras's enqueuer threads fetch batches ahead; the build read's pass drops what it
    fetched, and how much depends on timing (plain runs alone differ): the trace is checked against what
    the model received."""
    run = Run(tf, keras, mirrored, recorded=True, tmp=None)
    model = run.model()
    rows = _Rows.make(keras, 26, 8, workers=2)
    with run.block():
        model.fit(rows, epochs=2, shuffle=True, verbose=0)
    recorded, seen = _rows_received(run)
    assert recorded == seen


def test_a_python_generator(tf, keras, mirrored):
    """Plain and recorded runs cannot be compared here: under a strategy, Keras's build read starts a pass
    whose prefetch pulls batches from the generator and drops them with the pass, and how many depends on
    timing (plain runs alone differ). The trace is checked against what the model received."""
    def batches():
        k = 0
        while True:
            x = np.arange(8 * k, 8 * k + 8, dtype="float32").reshape(-1, 1)
            yield x, 0.5 * x
            k += 1

    run = Run(tf, keras, mirrored, recorded=True, tmp=None)
    model = run.model()
    with run.block():
        model.fit(batches(), steps_per_epoch=3, epochs=2, verbose=0)
    trace = run.recordings[0].trace
    e = trace.elements[trace.elements["phase"].astype(str) == "train"].sort_values(["step", "replica", "position"])
    seen = [i for step in run.log.steps() for ids in step for i in ids]
    assert (e["source_id"] * 8 + e["source_line"]).tolist() == seen  # the k-th batch yielded, row j
    assert "in the order the generator yielded them" in trace.meta["provenance_note"]
