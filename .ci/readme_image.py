"""Draw the README's picture from a real run (make notebooks regenerates it)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import vizdist

vizdist.virtual_devices(4)
import tensorflow as tf  # noqa: E402

trace = vizdist.trace_distribution(tf.distribute.MirroredStrategy(), tf.data.Dataset.range(23).batch(10))
fig = trace.plot.split(title="tf.data.Dataset.range(23).batch(10) over 4 replicas (MirroredStrategy)")
out = sys.argv[1] if len(sys.argv) > 1 else "notebooks/img/split.png"
fig.savefig(out, dpi=110)
print("wrote", out)
