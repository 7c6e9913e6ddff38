"""A killed driver leaves no folder behind: LocalDataService and run_in_graph_mode have janitors too.

A driver process is started for real, reports the folders vizdist made for it, and is killed with
SIGKILL (no clean-up of its own runs); within a bounded time its processes and folders must be gone.
(LocalCluster's own case is in ``test_cluster.py``.)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

_SERVICE = r"""
import json, os, sys, time
import vizdist

s = vizdist.LocalDataService(workers=1, progress=False)
folders = [str(s.work_dir), str(s._sup.folder)]
with open(sys.argv[1] + ".tmp", "w") as fh:
    json.dump({"folders": folders}, fh)
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""

_GRAPH = r"""
import json, os, sys, time
import vizdist

def report_and_wait(state):
    import sys, json, os, time
    with open(state + ".tmp", "w") as fh:
        json.dump({"folders": [sys.argv[1]]}, fh)  # the graph child's job folder (its first argument)
    os.rename(state + ".tmp", state)
    time.sleep(600)

vizdist.run_in_graph_mode(report_and_wait, sys.argv[1], devices=1, timeout=600)
"""


def _alive(procs: list[Any]) -> list[Any]:
    import psutil

    def running(p: Any) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    return [p for p in procs if running(p)]


@pytest.mark.parametrize("script", [_SERVICE, _GRAPH], ids=["LocalDataService", "run_in_graph_mode"])
def test_a_killed_driver_leaves_no_folder_and_no_process(script: str, tmp_path: Path) -> None:
    import psutil

    state = tmp_path / "state.json"
    env = dict(os.environ, TMPDIR=str(tmp_path))  # vizdist's folders are made under tmp_path
    driver = subprocess.Popen([sys.executable, "-c", script, str(state)], cwd=os.getcwd(), env=env)
    tree: list[Any] = []
    try:
        deadline = time.monotonic() + 240
        while not state.exists() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert state.exists(), f"the driver reported nothing (exit code {driver.poll()})"
        folders = [Path(f) for f in json.loads(state.read_text())["folders"]]
        assert folders and all(f.is_dir() and f.is_relative_to(tmp_path) for f in folders), folders
        tree = psutil.Process(driver.pid).children(recursive=True)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        deadline = time.monotonic() + 40
        while (_alive(tree) or any(f.exists() for f in folders)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(tree), _alive(tree)
        assert not [f for f in folders if f.exists()], "folders left after the driver was killed"
    finally:
        for p in [psutil.Process(driver.pid), *tree] if driver.poll() is None else tree:
            with contextlib.suppress(psutil.Error):
                p.kill()
        driver.wait(timeout=30)
