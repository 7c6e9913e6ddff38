"""What the model itself saw: a pass-through layer that logs each replica's batch (its ids) through
``tf.py_function``, the ground truth the recorder's tests compare with (test_fidelity, test_user_run,
test_stream, test_restart)."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np


class Log:
    """What each replica's batch held, as the model saw it: one entry per replica call, in call order."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self._lock = threading.Lock()

    def add(self, replica: Any, x: Any) -> np.int32:
        with self._lock:
            self.calls.append((int(replica.numpy()), np.asarray(x.numpy()).reshape(-1).astype(int).tolist()))
        return np.int32(0)

    def steps(self, replicas: int = 4) -> list[list[list[int]]]:
        """Per step, the ids each replica got (replicas log in any order within a step)."""
        assert len(self.calls) % replicas == 0, "every step logs one call per replica"
        out = []
        for i in range(0, len(self.calls), replicas):
            chunk = dict(self.calls[i:i + replicas])
            out.append([chunk[r] for r in range(replicas)])
        return out


def spy_layer(tf: Any, keras: Any, log: Any) -> Any:
    """A layer that passes its input on and logs ``(replica, ids)`` into ``log.add`` for each replica's call."""

    class Spy(keras.layers.Layer):
        def call(self, x):
            ctx = tf.distribute.get_replica_context()
            rid = ctx.replica_id_in_sync_group if ctx is not None else tf.constant(0)
            tf.py_function(log.add, [rid, x], tf.int32)
            return x

    return Spy()
