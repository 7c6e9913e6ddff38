"""Entry point of one tf.data service worker process started by ``LocalDataService``.

Usage (vizdist starts it through its supervisor; you do not need to)::

    python -P -m vizdist.instrument.service._service_worker --dispatcher 127.0.0.1:5050 \
        --port 5051 --worker-id 0

The process writes its worker id into the file ``vizdist_worker_id`` in its
working directory (``LocalDataService`` gives every worker its own private
folder), starts a real ``tf.data.experimental.service.WorkerServer``, reports
``ready`` (:func:`vizdist.instrument.processes.supervisor.report`) and serves until it
receives SIGTERM/SIGINT or its parent exits.

Because each worker is its own process with its own working directory, a
pipeline step ``tf.io.read_file("vizdist_worker_id")`` reads *this* worker's id:
that is how ``LocalDataService.trace`` learns, for real, which worker produced
each element. Start it with ``python -P`` (as vizdist does) so that the working
directory is not on the import path.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from vizdist._files import write_file
from vizdist.instrument.ids.own_service import WORKER_ID_FILE
from vizdist.instrument.tfapi import service as tf_service


def main(argv: list[str] | None = None) -> int:
    """Serve one worker until told to stop."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dispatcher", required=True, help="dispatcher address host:port (no protocol)")
    p.add_argument("--port", type=int, required=True, help="port to serve on")
    p.add_argument("--worker-id", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1", help="address the worker advertises")
    p.add_argument("--dispatcher-timeout-ms", type=int, default=20_000)
    args = p.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    write_file(WORKER_ID_FILE, str(args.worker_id))

    import tensorflow as tf

    from vizdist.instrument.processes.supervisor import report

    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=args.dispatcher, worker_address=f"{args.host}:%port%", port=args.port,
        heartbeat_interval_ms=200, dispatcher_timeout_ms=args.dispatcher_timeout_ms,
    )
    server = tf.data.experimental.service.WorkerServer(config)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    report("ready")
    done.wait()
    try:
        tf_service.stop_server(server)
    finally:
        # Skip interpreter teardown of TF's threads: the server is stopped, exit now.
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
