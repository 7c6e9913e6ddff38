"""vizdist.record() around the user's own code: Keras fit/evaluate/predict and hand-written loops.

Ground truth comes from the run itself: a Keras layer (or a step function) whose ``tf.py_function``
logs what each replica's batch held (``replica_id_in_sync_group`` and the ids, which are the feature
values), never from vizdist's output or numbers typed by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

import vizdist
from tests.instrument._model_log import Log, spy_layer

pytestmark = [pytest.mark.filterwarnings("ignore:`shuffle=True` was passed"),  # Keras: a dataset is shuffled already
              pytest.mark.usefixtures("no_global_seed_after")]  # _model sets Keras's global seed

N = 22  # 22 examples in batches of 8 over 4 replicas: a short last batch every epoch


def _spy(tf, keras, log: Log):
    return spy_layer(tf, keras, log)


def _model(tf, keras, strategy, log: Log):
    keras.utils.set_random_seed(7)
    with strategy.scope():
        inp = keras.Input((1,))
        model = keras.Model(inp, keras.layers.Dense(1)(_spy(tf, keras, log)(inp)))
        model.compile("sgd", "mse", jit_compile=False)
    return model


def _data(tf, n: int = N, *, seed: int | None = 3, batch: int = 8):
    x = np.arange(n, dtype="float32").reshape(-1, 1)
    ds = tf.data.Dataset.from_tensor_slices((x, 0.5 * x))
    return (ds.shuffle(n, seed=seed) if seed != -1 else ds).batch(batch)


def _recorded_steps(trace, phase: str, replicas: int) -> list[list[list[int]]]:
    """Per step of ``phase`` (in run order), the source ids each replica got, from the trace."""
    e = trace.elements[trace.elements["phase"] == phase].sort_values(["step", "replica", "position"])
    b = trace.batches[trace.batches["phase"] == phase]
    out = []
    for step in sorted(b["step"].unique()):
        rows = e[e["step"] == step]
        out.append([rows[rows["replica"] == r]["source_id"].tolist() for r in range(replicas)])
    return out


@pytest.mark.smoke
def test_fit_with_validation_records_what_each_replica_trained_on(tf, keras, mirrored):
    log = Log()
    model = _model(tf, keras, mirrored, log)
    with vizdist.record() as rec:
        model.fit(_data(tf), validation_data=_data(tf, 7, seed=-1, batch=4), epochs=2, verbose=0)
    seen = log.steps(4)
    train, val = _recorded_steps(rec.trace, "train", 4), _recorded_steps(rec.trace, "validation", 4)
    assert len(train) == 2 * 3 and len(val) == 2 * 2
    # The model ran train steps and validation steps in this order: 3 train, 2 validation, per epoch.
    assert seen == train[:3] + val[:2] + train[3:] + val[2:]
    epochs = rec.trace.batches.groupby("phase", observed=True)["epoch"].unique()
    assert sorted(epochs["train"]) == [0, 1] and sorted(epochs["validation"]) == [0, 1]


@pytest.mark.parametrize("seed", [3, None], ids=["seeded", "unseeded"])
def test_shuffled_epochs_show_the_real_order(tf, keras, mirrored, seed):
    log = Log()
    model = _model(tf, keras, mirrored, log)
    with vizdist.record() as rec:
        model.fit(_data(tf, seed=seed), epochs=2, verbose=0)
    train = _recorded_steps(rec.trace, "train", 4)
    assert log.steps(4) == train
    first, second = ([i for step in train[k:k + 3] for ids in step for i in ids] for k in (0, 3))
    assert sorted(first) == sorted(second) == list(range(N))


@pytest.mark.smoke
def test_history_is_the_same_with_and_without_recording(tf, keras, mirrored):
    plain = _model(tf, keras, mirrored, Log()).fit(
        _data(tf), validation_data=_data(tf, 7, seed=-1, batch=4), epochs=2, verbose=0).history
    with vizdist.record():
        recorded = _model(tf, keras, mirrored, Log()).fit(
            _data(tf), validation_data=_data(tf, 7, seed=-1, batch=4), epochs=2, verbose=0).history
    assert recorded == plain


def test_keras_build_read_is_its_own_phase(tf, keras, mirrored):
    """Keras 3 reads one batch of a fresh pass to build the model (trainer._maybe_symbolic_build)."""
    model = _model(tf, keras, mirrored, Log())
    with vizdist.record() as rec:
        model.fit(_data(tf, seed=-1), epochs=1, verbose=0)
    build = rec.trace.batches[rec.trace.batches["phase"] == "build"]
    assert build["epoch_step"].tolist() == [0] * 4  # one step, four replicas
    first_train = _recorded_steps(rec.trace, "train", 4)[0]
    assert _recorded_steps(rec.trace, "build", 4)[0] == first_train  # unshuffled: the same first batch


def test_keras_reads_a_build_batch_only_for_a_model_made_under_a_strategy(tf, keras, mirrored):
    """Plain Keras 3, no vizdist (trainer.py, _maybe_symbolic_build: it returns at once when the model has no
    distribution strategy): fit reads batches of a fresh pass before it trains only for a model made under a
    strategy's scope. Counted at the source; read-ahead makes the build pass read one batch or more."""
    import contextlib

    reads = {}
    for name, strategy in [("under MirroredStrategy", mirrored), ("no strategy", None)]:
        seen: list[int] = []

        def note(i, seen=seen):  # runs on the host for every source element read
            seen.append(int(i))
            return i

        ds = (tf.data.Dataset.range(8).map(lambda i: tf.py_function(note, [i], tf.int64))
              .map(lambda i: (tf.reshape(tf.cast(i, tf.float32), [1]),) * 2).batch(4))
        keras.utils.set_random_seed(7)
        with strategy.scope() if strategy else contextlib.nullcontext():
            model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
            model.compile("sgd", "mse", jit_compile=False)
        model.fit(ds, epochs=1, verbose=0)
        reads[name] = len(seen)
    assert reads["no strategy"] == 8 and reads["under MirroredStrategy"] >= 8 + 4, reads


def test_evaluate_and_predict(tf, keras, mirrored):
    log = Log()
    model = _model(tf, keras, mirrored, log)
    data = _data(tf, 7, seed=-1, batch=4)
    plain = model.predict(data, verbose=0)
    log.calls.clear()
    with vizdist.record() as rec:
        model.evaluate(data, verbose=0)
        out = model.predict(data, verbose=0)
    np.testing.assert_array_equal(out, plain)
    seen = log.steps(4)
    assert seen == _recorded_steps(rec.trace, "evaluate", 4) + _recorded_steps(rec.trace, "predict", 4)


def test_default_strategy_fit(tf, keras):
    log = Log()
    model = _model(tf, keras, tf.distribute.get_strategy(), log)
    with vizdist.record() as rec:
        model.fit(_data(tf), epochs=1, verbose=0)
    assert log.steps(1) == _recorded_steps(rec.trace, "train", 1)
    assert rec.trace.meta["strategy"] == "default strategy"


def _step_log(tf, log: Log):
    def step(x):
        ctx = tf.distribute.get_replica_context()
        tf.py_function(log.add, [ctx.replica_id_in_sync_group, x], tf.int32)
        return tf.reduce_sum(x)

    return step


@pytest.mark.filterwarnings("ignore:To make it possible to preserve tf.data options")  # TF's own, plain TF too
@pytest.mark.smoke
def test_loop_inside_a_tf_function_over_the_dataset(tf, mirrored):
    """The custom-training tutorial's variant: the distributed dataset is the tf.function's argument."""
    log = Log()
    step = _step_log(tf, log)

    @tf.function
    def epoch(dist):
        total = tf.constant(0, tf.int64)
        for x in dist:
            total += mirrored.reduce("SUM", mirrored.run(step, args=(x,)), axis=None)
        return total

    ds = tf.data.Dataset.range(10).shuffle(10, seed=1).batch(4)
    with vizdist.record() as rec:
        dist = mirrored.experimental_distribute_dataset(ds)
        totals = [int(epoch(dist)) for _ in range(2)]
    assert totals == [45, 45]
    loop = _recorded_steps(rec.trace, "loop", 4)
    assert log.steps(4) == loop
    assert rec.trace.batches["epoch"].max() == 1  # each call of the function is a pass


def test_next_on_an_iterator_inside_a_tf_function(tf, mirrored):
    log = Log()
    step = _step_log(tf, log)

    @tf.function
    def two_steps(it):
        for _ in tf.range(2):
            mirrored.run(step, args=(next(it),))

    with vizdist.record() as rec:
        it = iter(mirrored.experimental_distribute_dataset(tf.data.Dataset.range(16).batch(4)))
        two_steps(it)
        two_steps(it)
    assert log.steps(4) == _recorded_steps(rec.trace, "loop", 4)
    assert len(rec.trace.batches["step"].unique()) == 4 and rec.trace.batches["epoch"].max() == 0


@pytest.mark.parametrize("as_text", [False, True], ids=["ints", "strings"])
def test_eager_and_graph_steps_are_read_by_one_reader(tf, mirrored, as_text):
    """A loop run eagerly and the same loop inside a ``tf.function`` record the same rows (one ``StepReader``):
    what plain TF hands each replica (``experimental_local_results`` of each step, read here without vizdist)."""
    ds = tf.data.Dataset.range(10)
    ds = (ds.map(lambda i: tf.strings.as_string(i)) if as_text else ds).batch(4)
    plain = [[[int(v) for v in r.numpy()] for r in mirrored.experimental_local_results(x)]
             for x in mirrored.experimental_distribute_dataset(ds)]

    @tf.function
    def graph_loop(dist):
        n = tf.constant(0, tf.int64)
        for _ in dist:
            n += 1
        return n

    with vizdist.record() as eager:
        for _ in mirrored.experimental_distribute_dataset(ds):
            pass
    with vizdist.record() as graph:
        graph_loop(mirrored.experimental_distribute_dataset(ds))
    assert _recorded_steps(eager.trace, "loop", 4) == plain == _recorded_steps(graph.trace, "loop", 4)
    cols = ["step", "replica", "device", "replica_device", "n_elements", "shape", "dtype"]
    assert eager.trace.batches[cols].equals(graph.trace.batches[cols])


def test_eager_loops_see_the_plain_values_and_specs(tf, mirrored):
    ds = tf.data.Dataset.range(10).map(lambda v: v * 10).batch(4)
    plain = mirrored.experimental_distribute_dataset(ds)
    want = [[t.numpy().tolist() for t in mirrored.experimental_local_results(x)] for x in plain]
    with vizdist.record() as rec:
        dist = mirrored.experimental_distribute_dataset(ds)
        assert dist.element_spec == plain.element_spec
        got = [[t.numpy().tolist() for t in mirrored.experimental_local_results(x)] for x in dist]
        it = iter(dist)
        assert it.element_spec == iter(plain).element_spec
        opt_got = []
        while (opt := it.get_next_as_optional()).has_value():
            opt_got.append([t.numpy().tolist() for t in mirrored.experimental_local_results(opt.get_value())])
    assert got == want and opt_got == want
    ids = _recorded_steps(rec.trace, "loop", 4)
    assert [[[v // 10 for v in r] for r in s] for s in want] * 2 == ids


def test_distribute_datasets_from_function(tf, mirrored):
    def fn(ctx):
        return tf.data.Dataset.range(8).batch(2)  # ignores the context: every replica reads everything

    plain = [[t.numpy().tolist() for t in mirrored.experimental_local_results(x)]
             for x in mirrored.distribute_datasets_from_function(fn)]
    with vizdist.record() as rec:
        got = [[t.numpy().tolist() for t in mirrored.experimental_local_results(x)]
               for x in mirrored.distribute_datasets_from_function(fn)]
    assert got == plain == _recorded_steps(rec.trace, "loop", 4)
    assert rec.trace.meta["api"] == "record" and rec.trace.meta["datasets"][0]["input_contexts"]


def test_record_after_the_block_strips_but_records_nothing(tf, mirrored):
    with vizdist.record() as rec:
        dist = mirrored.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(4))
    after = [t.numpy().tolist() for x in dist for t in mirrored.experimental_local_results(x)]
    assert after == [[0], [1], [2], [3], [4], [5], [6], [7]]
    assert rec.trace.elements.empty and rec.trace.meta["steps_run"] == 0


def test_blocks_do_not_nest_and_trace_inside_is_the_steps_so_far(tf):
    with vizdist.record() as rec:
        with pytest.raises(vizdist.TracingError, match="do not nest"):
            vizdist.record().__enter__()
        inside = rec.trace  # a snapshot: no step yet
        assert inside.elements.empty and inside.meta["stopped"] == "running"
    assert rec.trace.elements.empty


def test_trace_distribution_inside_a_block_is_not_recorded_twice(tf, mirrored):
    with vizdist.record() as rec:
        t = vizdist.trace_distribution(mirrored, tf.data.Dataset.range(8).batch(4))
    assert t.ids(step=0, replica=0) == [0] and rec.trace.elements.empty


@pytest.mark.filterwarnings("ignore:Your input ran out of data")  # Keras, for data of unknown length
def test_fit_on_a_plain_tf_data_service(tf, keras, mirrored):
    """A dispatcher and a worker of plain TF in this process; the model reads through the service."""
    svc = tf.data.experimental.service
    dispatcher = svc.DispatchServer()
    worker = svc.WorkerServer(svc.WorkerConfig(dispatcher_address=dispatcher.target.split("://")[1]))
    log = Log()
    model = _model(tf, keras, mirrored, log)
    with vizdist.record() as rec:
        ds = _data(tf, seed=-1).apply(svc.distribute("distributed_epoch", dispatcher.target))
        model.fit(ds, epochs=1, verbose=0)
    assert log.steps(4) == _recorded_steps(rec.trace, "train", 4)
    assert sorted(rec.trace.elements.query("phase == 'train'")["source_id"]) == list(range(N))
    del worker, dispatcher


def _mwms_loop(ctx):
    import tensorflow as tf

    strategy = ctx.multi_worker_strategy()
    log = Log()
    step = _step_log(tf, log)

    @tf.function
    def run(it):
        for _ in tf.range(2):
            strategy.run(step, args=(next(it),))

    with vizdist.record() as rec:
        dist = strategy.experimental_distribute_dataset(tf.data.Dataset.range(16).batch(4))
        run(iter(dist))
    t = rec.trace
    return vizdist.Trace(elements=t.elements, batches=t.batches, meta=dict(t.meta, raw=[[ids] for _, ids in log.calls]))


@pytest.mark.slow
@pytest.mark.smoke
def test_multi_worker_loop_in_a_local_cluster():
    with vizdist.LocalCluster(workers=2, timeout=180, progress=False) as cluster:
        trace = cluster.run(_mwms_loop)
    shards = {s["task"]: s for s in trace.meta["shards"]}
    for w in (0, 1):
        e = trace.elements[trace.elements["worker"] == w].sort_values(["step", "position"])
        got = [[e[e["step"] == s]["source_id"].tolist()] for s in sorted(e["step"].unique())]
        assert got == shards[f"worker-{w}"]["raw"]
        assert set(e["replica"]) == {w} and set(e["phase"].astype(str)) == {"loop"}


def test_empty_replica_in_fit_names_keras_rule(tf, keras, mirrored):
    """22 examples in batches of 8: the last batch splits 2, 2, 2, 0. Plain Keras's loss stays finite
    there (divide_no_nan), while a plain mean over the empty batch is NaN: the finding says both."""
    model = _model(tf, keras, mirrored, Log())
    with vizdist.record() as rec:
        history = model.fit(_data(tf, seed=-1), epochs=1, verbose=0).history
    assert np.isfinite(history["loss"]).all() and np.isnan(float(tf.reduce_mean(tf.zeros([0]))))
    found = vizdist.diagnose(rec.trace)
    empty = found[found["code"] == "empty-replica"]
    assert len(empty) == 1 and "never NaN" in empty["message"].iloc[0] and "train epoch 0" in empty["message"].iloc[0]
    assert empty["replicas"].iloc[0] == [3]


@pytest.mark.parametrize("batch", [12, 8])  # 12: the second step splits 3, 3, 3, 1; 8: the last 2, 2, 2, 0
def test_keras_trains_on_the_mean_of_the_replicas_means(tf, keras, mirrored, batch):
    """Plain Keras 3 (no vizdist): each replica's training loss is its own mean divided by the replicas
    (keras/src/losses/loss.py, scale_loss_for_distribution; divide_no_nan makes an empty replica's 0) and the
    optimizer all-reduces the gradients with SUM (keras/src/backend/tensorflow/optimizer.py,
    _all_reduce_sum_gradients). Replayed in NumPy on the per-replica batches plain TF hands out, that rule
    gives Keras's weight after one epoch of SGD; weighing every example of a step the same does not."""
    lr, replicas = 0.001, mirrored.num_replicas_in_sync
    x = np.arange(N, dtype="float32").reshape(-1, 1)
    ds = tf.data.Dataset.from_tensor_slices((x, 0.5 * x)).batch(batch)
    with mirrored.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
        model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", jit_compile=False)
    model.fit(ds, epochs=1, verbose=0)
    steps = [[v.numpy()[:, 0].astype("float64") for v in mirrored.experimental_local_results(xb)]
             for xb, _ in mirrored.experimental_distribute_dataset(ds)]  # plain TF: each replica's inputs
    assert any(len({len(p) for p in parts}) > 1 for parts in steps)  # some step splits unevenly

    def grad(w, xs):  # d/dw of (w x - 0.5 x)^2, per example
        return 2 * (w * xs - 0.5 * xs) * xs

    replica_means = per_example = 0.0
    for parts in steps:
        replica_means -= lr * sum(grad(replica_means, p).mean() / replicas for p in parts if len(p))
        per_example -= lr * np.concatenate([grad(per_example, p) for p in parts]).mean()
    weight = float(model.get_weights()[0][0, 0])
    assert weight == pytest.approx(replica_means, rel=1e-5)
    assert abs(weight - per_example) > 100 * abs(weight - replica_means) + 1e-4


def _mwms_fit(ctx, record: bool):
    import keras
    import tensorflow as tf

    strategy = ctx.multi_worker_strategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse", jit_compile=False)
    x = np.arange(16, dtype="float32").reshape(-1, 1)
    ds = tf.data.Dataset.from_tensor_slices((x, x)).batch(4)
    try:
        if record:
            with vizdist.record():
                model.fit(ds, epochs=1, verbose=0)
        else:
            model.fit(ds, epochs=1, verbose=0)
    except Exception as exc:  # what plain TF / Keras raised, kept as text for the test
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
    return {"error": ""}


@pytest.mark.slow
def test_multi_worker_fit_fails_in_plain_keras_and_record_shows_the_same_error():
    """keras-team/keras#20585: MultiWorkerMirroredStrategy + fit fails in TF 2.21 / Keras 3 without vizdist."""
    errors = {}
    for record in (False, True):
        with vizdist.LocalCluster(workers=2, timeout=180, progress=False) as cluster:
            trace = cluster.run(_mwms_fit, record)
        errors[record] = {task: r["error"] for task, r in trace.meta["results"].items()}
    assert errors[False] == errors[True]
    assert all(e.startswith("ValueError: Attempt to convert a value") for e in errors[False].values())


def test_a_dataset_fn_vizdist_cannot_follow_runs_unchanged_and_is_named(tf, mirrored, tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(8)))

    def fn(ctx):  # window above a file reader: vizdist cannot carry an id through it (tagging.Untaggable)
        return tf.data.TextLineDataset([str(path)]).window(2).flat_map(lambda w: w.batch(2))

    def values(dist):
        return [[t.numpy().tolist() for t in mirrored.experimental_local_results(x)] for x in dist]

    plain = values(mirrored.distribute_datasets_from_function(fn))
    with vizdist.record() as rec:
        got = values(mirrored.distribute_datasets_from_function(fn))
    assert got == plain
    assert rec.trace.elements.empty and "was not recorded" in rec.trace.meta["note"]


def test_placement_under_record_shows_the_users_step_on_each_replica(tf, mirrored):
    @tf.function
    def step(x):
        return tf.reduce_sum(tf.cast(x, tf.float32) * 2.0)

    with vizdist.record(placement="NO_TENSOR") as rec:
        for x in mirrored.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(4)):
            mirrored.run(step, args=(x,))
    ops = rec.trace.meta["placement"]["ops"]
    mul_devices = {o["device"] for o in ops if o.get("op_type") == "Mul"}
    want = {d.split("device:")[-1] for d in mirrored.extended.worker_devices}
    assert {d.split("device:")[-1] for d in mul_devices} == want
    with pytest.raises(ValueError, match="placement must be"):
        vizdist.record(placement="yes")


@pytest.mark.parametrize("make", [lambda tf: tf.distribute.OneDeviceStrategy("/cpu:1"),
                                  lambda tf: tf.distribute.experimental.CentralStorageStrategy()],
                         ids=["OneDeviceStrategy", "CentralStorageStrategy"])
def test_other_single_process_strategies(tf, make):
    strategy = make(tf)
    ds = tf.data.Dataset.range(10).map(lambda v: v * 3).batch(4)

    def values(dist):
        return [[t.numpy().tolist() for t in strategy.experimental_local_results(x)] for x in dist]

    plain = values(strategy.experimental_distribute_dataset(ds))
    with vizdist.record() as rec:
        got = values(strategy.experimental_distribute_dataset(ds))
    assert got == plain
    ids = _recorded_steps(rec.trace, "loop", strategy.num_replicas_in_sync)
    assert ids == [[[v // 3 for v in r] for r in step] for step in plain]
    devices = {str(t.device) for x in strategy.experimental_distribute_dataset(ds)
               for t in strategy.experimental_local_results(x)}
    assert set(rec.trace.elements["device"].astype(str)) == devices


def test_timing_under_record_spans_each_read_and_the_step_between(tf, mirrored):
    import time

    with vizdist.record(timing=True) as rec:
        for _ in mirrored.experimental_distribute_dataset(tf.data.Dataset.range(12).batch(4)):
            time.sleep(0.03)  # the user's step: at least 30 ms between two reads
    ev = rec.trace.events
    steps = sorted(rec.trace.batches["step"].unique())
    assert sorted(ev.loc[ev["stage"] == "transfer", "step"]) == steps
    consume = ev[ev["stage"] == "consume"]
    assert sorted(consume["step"]) == steps[:-1]  # the last step's step time ends with no read after it
    assert ((consume["t_end_ns"] - consume["t_start_ns"]) >= 30_000_000).all()
    assert "host spans only" in " ".join(rec.trace.meta["timing"]["notes"])
    import matplotlib

    matplotlib.use("Agg")
    assert rec.trace.plot.timeline() is not None


def test_timing_under_record_inside_keras_fit(tf, keras, mirrored):
    model = _model(tf, keras, mirrored, Log())
    with vizdist.record(timing=True) as rec:
        model.fit(_data(tf), epochs=1, verbose=0)
    ev, b = rec.trace.events, rec.trace.batches
    assert sorted(ev.loc[ev["stage"] == "transfer", "step"]) == sorted(b["step"].unique())
    assert (ev["t_end_ns"] >= ev["t_start_ns"]).all()


def _calls_in(path: str, name: str):
    """A function named ``name`` whose code says it is defined in ``path``: calling it with ``inner`` calls
    ``inner()`` from a frame that looks, to a stack walk, like that Keras method."""
    scope: dict = {}
    exec(compile(f"def {name}(inner):\n    return inner()\n", path, "exec"), scope)
    return scope[name]


@pytest.mark.smoke
def test_phases_follow_where_the_installed_keras_defines_fit_evaluate_and_predict(keras):
    """Keras 3 starts passes in keras/src/backend/tensorflow/trainer.py, Keras 2 (TF 2.15) in
    keras/src/engine/training.py: the phase of a pass follows the installed Keras's own files (each method
    unwrapped from Keras's traceback filter), and the same names anywhere else are the user's loop."""
    import inspect

    from vizdist.instrument.run.user_run import phase_now

    def frame(name: str, *, keras_file: bool = True):
        path = inspect.unwrap(getattr(keras.Model, name)).__code__.co_filename if keras_file else __file__
        return _calls_in(path, name)

    fit, evaluate, predict = frame("fit"), frame("evaluate"), frame("predict")
    assert fit(phase_now) == "train"
    assert evaluate(phase_now) == "evaluate"
    assert fit(lambda: evaluate(phase_now)) == "validation"
    assert predict(phase_now) == "predict"
    if hasattr(keras.Model, "_maybe_symbolic_build"):  # Keras 3's build read (Keras 2 and 3.3 have none)
        assert fit(lambda: frame("_maybe_symbolic_build")(phase_now)) == "build"
    assert frame("fit", keras_file=False)(phase_now) == "loop"
    assert frame("fit", keras_file=False)(lambda: frame("evaluate", keras_file=False)(phase_now)) == "loop"
