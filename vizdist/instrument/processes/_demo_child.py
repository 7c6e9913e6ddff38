"""A tiny supervised child for the supervisor's tests and docs (no TensorFlow).

``python -P -m vizdist.instrument.processes._demo_child MODE`` where MODE is ``ready``
(report ready, then sleep), ``fail`` (print and exit 1), ``tree`` (start a
grandchild, report ready, sleep), ``interfaces`` (print the network
interfaces and whether loopback works, as JSON), ``tempfile`` (leave a
temporary file, print its path and end with ``os._exit``, as workers do) or
``gpu-env`` (print ``TF_FORCE_GPU_ALLOW_GROWTH``) or ``modules`` (print, as JSON, the files
``argparse`` and ``vizdist.errors`` were imported from) or ``detached`` (start a ``sleep`` in a
session of its own and a double-forked one, print their pids as JSON, end with ``os._exit``).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

from vizdist.instrument.processes.supervisor import report


def _interfaces() -> None:
    s = socket.socket(socket.AF_INET6)
    s.bind(("::", 0))
    s.listen()
    try:
        socket.create_connection(("127.0.0.1", s.getsockname()[1]), timeout=2).close()
        ok = True
    except OSError:
        ok = False
    print(json.dumps({"interfaces": [n for _, n in socket.if_nameindex()], "loopback_ok": ok}), flush=True)


def detached_sleeps(token: str) -> list[int]:
    """Start two ``sleep`` processes that leave this process's tree: one in a session of its own
    (``start_new_session``), one double-forked (its parent exits at once). Returns their pids.

    ``token`` (a number of seconds such as ``"299.123"``) makes their command lines unique.
    """
    detached = subprocess.Popen(["sleep", token], start_new_session=True, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:  # only async-signal-safe calls until exec: this may be a threaded (TF) process
        os.setsid()
        grand = os.fork()
        if grand == 0:
            os.execvp("sleep", ["sleep", token])
        os.write(w, str(grand).encode())
        os._exit(0)
    os.close(w)
    os.waitpid(middle, 0)
    with os.fdopen(r, "rb") as fh:
        return [detached.pid, int(fh.read())]


def main(mode: str) -> int:
    """Behave as ``mode`` says (see the module docstring)."""
    if mode == "fail":
        print("demo child failed on purpose", flush=True)
        return 1
    if mode == "interfaces":
        _interfaces()
        return 0
    if mode == "modules":
        import argparse

        from vizdist import errors

        print(json.dumps({"argparse": argparse.__file__, "vizdist": os.path.realpath(errors.__file__)}), flush=True)
        return 0
    if mode == "gpu-env":
        print(os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH"), flush=True)
        return 0
    if mode == "tempfile":
        with tempfile.NamedTemporaryFile(delete=False) as fh:
            print(fh.name, flush=True)
        os._exit(0)
    if mode == "detached":
        print(json.dumps(detached_sleeps(sys.argv[2])), flush=True)
        os._exit(0)
    if mode == "tree":
        grand = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(f"grandchild {grand.pid}", flush=True)
    report("ready")
    time.sleep(600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
