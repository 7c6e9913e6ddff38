"""Isolation fails closed: where user namespaces are off, ``isolate=True`` refuses before anything starts.

The no-user-namespace machine is real: the check runs inside ``unshare -U -r`` with
``user.max_user_namespaces`` set to 0 in that namespace, so every namespace vizdist then asks for
fails as it would on a machine that turns them off. Nothing here starts a TensorFlow server.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vizdist.instrument.processes.supervisor import vizdist_root

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="user namespaces are a Linux feature")

# sh -c SCRIPT PYTHON CODE: turn user namespaces off inside this one, then run CODE there.
_NO_USERNS = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" -c "$1"'

_CHECK = r"""
import json, sys, warnings
import psutil, vizdist
from vizdist.instrument.processes.supervisor import Namespace

ns, why = Namespace.start()
out = {"namespace": ns is not None, "why": why}
makers = {
    "LocalCluster": lambda: vizdist.LocalCluster(workers=2, progress=False),
    "LocalDataService": lambda: vizdist.LocalDataService(workers=1, progress=False),
    "what_if_cluster": lambda: vizdist.what_if_cluster(workers=2),
}
for name, make in makers.items():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning instead of the error fails the check
        try:
            make()
            out[name] = "started"
        except vizdist.IsolationError as e:
            out[name] = str(e)
    if name == "LocalDataService":  # what_if's module imports TensorFlow; the servers' classes do not
        out["tensorflow imported"] = "tensorflow" in sys.modules
out["opt_out"] = repr(vizdist.LocalCluster(workers=2, isolate=False))
out["children left"] = [p.pid for p in psutil.Process().children(recursive=True)]
print(json.dumps(out))
"""


def _run_without_user_namespaces(code: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    if subprocess.run(["unshare", "-U", "-r", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine has no user namespaces to turn off inside")
    env = dict(os.environ, PYTHONPATH=vizdist_root(), TMPDIR=str(tmp))
    return subprocess.run(["unshare", "-U", "-r", "sh", "-c", _NO_USERNS, sys.executable, code],
                          capture_output=True, text=True, env=env, timeout=120)


def test_no_user_namespaces_refuse_isolate_true_before_anything_starts(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = _run_without_user_namespaces(_CHECK, tmp)
    if done.returncode != 0 and "max_user_namespaces" in done.stderr:
        pytest.skip(f"cannot turn user namespaces off inside one here: {done.stderr.strip()[-200:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["namespace"] is False
    assert "user.max_user_namespaces = 0" in out["why"]  # the cause, read from the machine
    for name, opt_out in [("LocalCluster", "LocalCluster(isolate=False)"),
                          ("LocalDataService", "LocalDataService(isolate=False), or in_process=True"),
                          ("what_if_cluster", "what_if_cluster(..., isolate=False)")]:
        msg = out[name]
        assert msg.startswith(f"{name}: could not create a private network namespace"), msg
        assert "user.max_user_namespaces = 0" in msg and opt_out in msg, msg
        assert "anyone who can reach this machine can run code in them" in msg, msg
    assert out["opt_out"].startswith("LocalCluster(workers=2")
    assert out["tensorflow imported"] is False and out["children left"] == []
    assert list(tmp.iterdir()) == []  # the service's work folder went with the refusal


def test_the_no_user_namespace_machine_is_real() -> None:
    """The set-up the test above relies on: inside it, a nested ``unshare -rn`` fails."""
    if shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    if subprocess.run(["unshare", "-U", "-r", "true"], capture_output=True).returncode != 0:
        pytest.skip("this machine has no user namespaces to turn off inside")
    script = 'echo 0 > /proc/sys/user/max_user_namespaces && unshare -rn true'
    done = subprocess.run(["unshare", "-U", "-r", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "unshare failed" in done.stderr, (done.returncode, done.stderr)


def test_workers_for_your_own_dispatcher_are_refused_unless_isolate_false() -> None:
    import vizdist

    with pytest.raises(vizdist.IsolationError, match=r"cannot be isolated.*Pass isolate=False"):
        vizdist.LocalDataService(workers=1, dispatcher="127.0.0.1:1", progress=False)


def test_opting_out_says_plainly_who_can_run_code_in_the_servers():
    """isolate=False starts nothing yet; it warns at once that the servers will be reachable by anyone."""
    import vizdist
    from vizdist.instrument.processes.cluster import IsolationWarning

    with pytest.warns(IsolationWarning, match=r"LocalCluster\(isolate=False\).*anyone who can reach"):
        cluster = vizdist.LocalCluster(workers=2, isolate=False)
    assert cluster.pids == []
