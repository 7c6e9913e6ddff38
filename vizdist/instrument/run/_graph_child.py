"""Entry point of the child process :func:`vizdist.run_in_graph_mode` starts.

``-m vizdist.instrument.run._graph_child JOB_DIR DEVICES``: splits the CPU into DEVICES logical devices,
calls ``tf.compat.v1.disable_eager_execution()``, runs the cloudpickled ``fn`` from
``JOB_DIR/job.pkl`` and writes what it returned (``result.json``: a Trace; ``value.json``: plain
data) or what it raised (``error.json``) into JOB_DIR. Only JSON comes back to the parent.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    from vizdist.instrument.run.legacy import child_main

    sys.exit(child_main(Path(sys.argv[1]), int(sys.argv[2])))
