"""The only part of vizdist that imports TensorFlow: it runs real pipelines and records them.

Loading it registers TensorFlow's file systems (``tf.io.gfile``, :mod:`vizdist.instrument.core.storage`) for
every URL scheme, so ``vizdist.record(path="gs://...")`` and ``vizdist.load_trace("gs://...")`` read and
write where the cluster's TensorFlow does (TensorFlow itself is imported when such a path is first used).
"""

from vizdist._storage import register_scheme
from vizdist.instrument.core.storage import GFILE

register_scheme("*", GFILE)
