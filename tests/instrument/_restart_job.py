"""One run of the restart scenario, as its own process: ``python -m tests.instrument._restart_job MODE FOLDER``.

``MODE`` is ``crash`` (a ``fit`` that stops at epoch 1, batch 2, by an exception out of the script, as a
preempted job) or ``resume`` (the same script run again: ``BackupAndRestore`` resumes it). Both record
with ``vizdist.record(path=FOLDER/trace)`` and back up into ``FOLDER/backup``; the model's own log of
what each replica trained on (a layer's ``tf.py_function``) and Keras's epoch numbers (a callback) goes to
``FOLDER/<MODE>.json``, written also when the fit raises.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.instrument.test_restart import Log, N, crash_at, model_and_data


def main(mode: str, folder: Path) -> None:
    import vizdist

    vizdist.virtual_devices(4)
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(4)])
    log = Log()
    model, ds, callbacks = model_and_data(tf, strategy, log, backup=folder / "backup", save_freq=2)
    if mode == "crash":
        callbacks.append(crash_at(epoch=1, batch=2))
    try:
        with vizdist.record(path=str(folder / "trace")):
            model.fit(ds, epochs=3, callbacks=callbacks, verbose=0)
    finally:
        (folder / f"{mode}.json").write_text(json.dumps({"calls": log.calls, "n": N}))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
