"""A real JupyterLab on loopback for the browser test and the widget benchmark (no pytest here).

``jupyter_lab(tmp)`` starts ``jupyter lab`` on 127.0.0.1 with a fresh token and its own runtime,
config, settings and workspace dirs under ``tmp``, waits (bounded) until it answers, yields
``(base url, token)`` and always stops it with its kernels (its process group), also on failure
or Ctrl-C. ``CHROMIUM`` / ``CHROMIUM_ARGS`` launch Debian's Chromium through Playwright.

Example:
    >>> from pathlib import Path
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d, jupyter_lab(Path(d)) as (base, token):  # doctest: +SKIP
    ...     print(base.startswith("http://127.0.0.1:"))
    True
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
SERVER_START_S = 90


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(port: int, token: str, root: Path, tmp: Path, args: Sequence[str]) -> list[str]:
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
        f"--LabApp.workspaces_dir={tmp / 'workspaces'}", f"--LabApp.user_settings_dir={tmp / 'settings'}",
        "--LabApp.expose_app_in_browser=True", "--ServerApp.port_retries=0",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", *args,
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def _wait_until_up(proc: subprocess.Popen[bytes], base: str, token: str, log: Path) -> None:
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n"
                               + log.read_text(errors="replace")[-3000:])
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"jupyter lab did not answer on {base} within {SERVER_START_S} s; log: {log}")
        time.sleep(0.5)


def stop_group(proc: subprocess.Popen[bytes], *, grace: float = 15) -> None:
    """Stop a process started with ``start_new_session=True`` and everything in its group (for
    JupyterLab: the server and the kernels it started): SIGTERM, then SIGKILL after ``grace`` s."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextlib.contextmanager
def jupyter_lab(tmp: Path, *, root: Path | None = None, args: Sequence[str] = ()) -> Iterator[tuple[str, str]]:
    """Start ``jupyter lab`` on 127.0.0.1; yield (base url, token); always stop it and its kernels.

    ``root`` is the directory it serves (default: a copy of the repo's ``notebooks/`` under
    ``tmp/root``, so JupyterLab's autosave never rewrites the committed ones); ``args`` are more
    command-line options (``--ZMQChannelsWebsocketConnection.…=…``). Its log is ``tmp/jupyter.log``.
    """
    port, token = free_port(), secrets.token_hex(16)
    if root is None:
        root = tmp / "root"
        shutil.copytree(ROOT / "notebooks", root / "notebooks")
    # Render every cell, not only those on screen (JupyterLab's notebook windowing), so locators find them.
    tracker = tmp / "settings" / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings"
    tracker.parent.mkdir(parents=True, exist_ok=True)
    tracker.write_text(json.dumps({"windowingMode": "none"}))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", TF_ENABLE_ONEDNN_OPTS="0",
               JUPYTER_RUNTIME_DIR=str(tmp / "runtime"), JUPYTER_CONFIG_DIR=str(tmp / "config"))
    log = open(tmp / "jupyter.log", "wb")  # noqa: SIM115 - closed in finally
    try:
        proc = subprocess.Popen(_command(port, token, root, tmp, args), stdout=log, stderr=subprocess.STDOUT,
                                env=env, cwd=ROOT, start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_until_up(proc, base, token, tmp / "jupyter.log")
            yield base, token
        finally:
            stop_group(proc)
    finally:
        log.close()


def open_notebook(page, base: str, token: str, notebook: str) -> None:  # type: ignore[no-untyped-def]
    """Open ``notebook`` (a path under the served root) in ``page``; return once its kernel is idle."""
    page.goto(f"{base}/lab/tree/{notebook}?token={token}", wait_until="domcontentloaded")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell", timeout=60_000)
    page.wait_for_function(
        """(name) => {
            const w = window.jupyterapp.shell.currentWidget;
            return w && w.context && w.context.path.endsWith(name) && w.sessionContext &&
                   w.sessionContext.session && w.sessionContext.session.kernel &&
                   w.sessionContext.session.kernel.status === 'idle';
        }""",
        arg=Path(notebook).name, timeout=90_000,
    )
