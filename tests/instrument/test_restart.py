"""Through a restart: ``trace.coverage()`` and its findings after a ``fit`` that crashes and is run again with
``keras.callbacks.BackupAndRestore``, in one block and across two processes (a crashed script and its resumed
run, each recording with ``path=``, loaded together).

Ground truth is the model's own log: a layer whose ``tf.py_function`` records the ids each replica's batch
held, and a callback that records Keras's epoch number as each epoch begins. The times each example was
trained on in each epoch are counted from that log, never typed by hand; a plain run (no vizdist) from the
same seeds gives the same log.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import vizdist
from tests.instrument._model_log import spy_layer

pytestmark = pytest.mark.filterwarnings("ignore:`shuffle=True` was passed")

N, BATCH = 200, 40  # 5 steps of 40 per epoch over 4 replicas
ROOT = Path(__file__).resolve().parents[2]


class Log:
    """The model's log: ``["epoch", e]`` as Keras begins epoch ``e``, ``[replica, ids]`` for each replica's batch."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self._lock = threading.Lock()

    def add(self, replica: Any, x: Any) -> np.int32:
        with self._lock:
            self.calls.append([int(replica.numpy()), np.asarray(x.numpy()).reshape(-1).astype(int).tolist()])
        return np.int32(0)


def trained(calls: list[list[Any]]) -> Counter[tuple[int, int]]:
    """(epoch, example) -> times the model trained on it, from the log."""
    out: Counter[tuple[int, int]] = Counter()
    epoch = -1
    for who, what in calls:
        if who == "epoch":
            epoch = int(what)
        else:
            out.update((epoch, int(i)) for i in what)
    return out


def model_and_data(tf: Any, strategy: Any, log: Log, *, backup: Path, save_freq: Any) -> tuple[Any, Any, list[Any]]:
    import keras

    keras.utils.set_random_seed(7)

    class EpochMark(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            log.calls.append(["epoch", int(epoch)])

    with strategy.scope():
        inp = keras.Input((1,))
        model = keras.Model(inp, keras.layers.Dense(1)(spy_layer(tf, keras, log)(inp)))
        model.compile("sgd", "mse", jit_compile=False)
    x = np.arange(N, dtype="float32").reshape(-1, 1)
    ds = tf.data.Dataset.from_tensor_slices((x, 0.5 * x)).shuffle(N, seed=3).batch(BATCH)
    return model, ds, [keras.callbacks.BackupAndRestore(str(backup), save_freq=save_freq), EpochMark()]


def crash_at(*, epoch: int, batch: int) -> Any:
    """A callback that raises once, after Keras's ``batch`` of ``epoch`` has trained."""
    import keras

    class Crash(keras.callbacks.Callback):
        armed, now = True, -1

        def on_epoch_begin(self, e, logs=None):
            self.now = e

        def on_train_batch_end(self, b, logs=None):
            if self.armed and self.now == epoch and b == batch:
                self.armed = False
                raise RuntimeError("the job crashed")

    return Crash()


def weights_log() -> Any:
    """A callback that keeps the model's weights after each batch, ``(epoch, batch) -> weights``, and those a fit
    starts from (``"begin"``, after ``BackupAndRestore`` restored its last save: it comes first in the list)."""
    import keras

    class Weights(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.after: dict[Any, list[Any]] = {}
            self.epoch = -1

        def on_train_begin(self, logs=None):
            self.after["begin"] = self.model.get_weights()

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            self.after[(self.epoch, batch)] = self.model.get_weights()

    return Weights()


def _same(a: list[Any], b: list[Any]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def coverage_counts(trace: Any) -> dict[tuple[int, int], int]:
    """(epoch, example) -> delivered, for the training input, from ``trace.coverage()``."""
    cov = trace.coverage()
    train = cov[cov["phase"] == "train"]
    assert set(train["data"]) == {0}, "the fit run again reads the same input"
    return {(int(e), int(i)): int(d) for e, i, d in train[["epoch", "source_id", "delivered"]].itertuples(index=False)}


def expected(counts: Counter[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """Every example of every epoch the model trained in: its count, 0 where it never trained."""
    return {(e, i): counts.get((e, i), 0) for e in sorted({e for e, _ in counts}) for i in range(N)}


def twice_in(counts: Counter[tuple[int, int]], epoch: int) -> list[int]:
    return sorted(i for (e, i), n in counts.items() if e == epoch and n == 2)


@pytest.mark.parametrize("save_freq", [2, "epoch"])
def test_a_restart_in_one_block(tf, mirrored, tmp_path, save_freq):
    def run(recorded: bool) -> tuple[Log, Any, Any, Any]:
        log, crashed, resumed = Log(), weights_log(), weights_log()
        model, ds, callbacks = model_and_data(tf, mirrored, log, backup=tmp_path / f"backup-{recorded}",
                                              save_freq=save_freq)
        block = vizdist.record() if recorded else contextlib.nullcontext()
        with block:
            with pytest.raises(RuntimeError, match="crashed"):
                model.fit(ds, epochs=3, callbacks=[*callbacks, crashed, crash_at(epoch=1, batch=2)], verbose=0)
            model.fit(ds, epochs=3, callbacks=[*callbacks, resumed], verbose=0)
        return log, block, crashed, resumed

    plain, _, crashed, resumed = run(False)
    log, rec, _, _ = run(True)
    assert log.calls == plain.calls, "recording changed what the model trained on"
    counts = trained(plain.calls)
    assert coverage_counts(rec.trace) == expected(counts)
    twice = twice_in(counts, 1)  # Keras resumed at epoch 1 and read it again from its first batch
    assert twice and not twice_in(counts, 0) and not twice_in(counts, 2)
    # which weights the resumed fit starts from: BackupAndRestore's last save, at the end of epoch 0 with
    # save_freq="epoch" (the crashed run's epoch-1 steps are dropped), after a batch of epoch 1 with save_freq=2
    start = resumed.after["begin"]
    if save_freq == "epoch":
        last = max(k[1] for k in crashed.after if k != "begin" and k[0] == 0)
        assert _same(start, crashed.after[(0, last)])
    else:
        assert any(_same(start, w) for k, w in crashed.after.items() if k != "begin" and k[0] == 1)
    found = vizdist.diagnose(rec.trace)
    again = found[found["code"] == "epoch-read-again"]
    assert len(again) == 1, found
    message = again["message"].iloc[0]
    assert f"In train epoch 1, {len(twice)} of {N} source elements were delivered twice" in message
    assert ", ".join(map(str, twice[:12])) in message and "from the data's first batch" in message


def _job(mode: str, folder: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0", PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "tests.instrument._restart_job", mode, str(folder)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def test_a_crashed_script_and_its_resumed_run_loaded_together(tmp_path):
    crashed = _job("crash", tmp_path)
    assert crashed.returncode != 0 and "the job crashed" in crashed.stderr, crashed.stderr[-3000:]
    resumed = _job("resume", tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    logs = [json.loads((tmp_path / f"{m}.json").read_text())["calls"] for m in ("crash", "resume")]
    counts = trained(logs[0] + logs[1])

    trace = vizdist.load_trace(tmp_path / "trace")
    assert coverage_counts(trace) == expected(counts)
    runs = trace.meta["recording"]["runs"]
    assert [r["error"] is not None for r in runs] == [True, False]
    first = trace.batches.drop_duplicates("step").groupby("dataset")["step"].min()
    assert trace.steps == list(range(len(trace.steps)))  # one step numbering across the two runs
    assert runs[0]["first_step"] == 0 and runs[1]["first_step"] == first[runs[1]["first_dataset"]]
    twice = twice_in(counts, 1)
    found = vizdist.diagnose(trace)
    message = found.loc[found["code"] == "epoch-read-again", "message"].iloc[0]
    assert f"In train epoch 1, {len(twice)} of {N} source elements were delivered twice" in message

    # the crashed script alone: epoch 1 stopped, and the examples it never reached are named
    from vizdist._parts import load_recording

    alone = load_recording(tmp_path / "trace", run=runs[0]["run"])
    crash_counts = trained(logs[0])
    assert coverage_counts(alone) == expected(crash_counts)
    never = sorted(i for i in range(N) if crash_counts.get((1, i), 0) == 0)
    found = vizdist.diagnose(alone)
    message = found.loc[found["code"] == "epoch-never-delivered", "message"].iloc[0]
    assert f"In train epoch 1, {len(never)} of {N} source elements were never delivered" in message
    assert "RuntimeError: the job crashed" in message
