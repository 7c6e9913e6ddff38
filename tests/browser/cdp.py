"""Debian's Chromium driven over the DevTools protocol directly, for benchmarks of big websocket traffic.

Playwright enables DevTools' Network domain on every page it drives, and Chromium then copies
each websocket frame the page receives onto the DevTools connection (``webSocketFrameReceived``,
binary payloads base64-encoded): a timeline widget's 24 MB ``comm_open`` became a 32 MB JSON
event here, and a 240 MB one killed Playwright's driver (``Zone Allocation failed - process out
of memory``). This client never enables the Network domain (only Page, for a script to run
before the page's own, and Performance, for ``getMetrics``) and evaluates JavaScript with
``Runtime.evaluate``, so the page receives its frames as a user's browser does.

Example:
    >>> from pathlib import Path
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d, chromium_page(Path(d)) as page:  # doctest: +SKIP
    ...     page.evaluate("(x) => x + 1", 41)
    42
"""

from __future__ import annotations

import contextlib
import itertools
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.browser.lab import stop_group

START_S = 60
_IDS = itertools.count(1)  # command ids, unique on the one connection every session shares


class CDPError(RuntimeError):
    """The page answered a DevTools command with an error, or a script in it threw."""


class Page:
    """One target of a Chromium over a flat DevTools session (``session=None``: the browser itself)."""

    def __init__(self, ws: Any, session: str | None) -> None:
        self._ws, self._session = ws, session

    def call(self, method: str, params: dict[str, Any] | None = None, *, timeout_s: float = 60) -> dict[str, Any]:
        """Send one command to the page; return its result (events in between are dropped)."""
        i = next(_IDS)
        cmd = {"id": i, "method": method, "params": params or {}}
        self._ws.send(json.dumps(cmd if self._session is None else {**cmd, "sessionId": self._session}))
        deadline = time.monotonic() + timeout_s
        while True:
            self._ws.settimeout(max(deadline - time.monotonic(), 0.01))
            msg = json.loads(self._ws.recv())  # raises WebSocketTimeoutException past the deadline
            if msg.get("id") == i:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg["result"]

    def evaluate(self, fn: str, arg: Any = None, *, timeout_s: float = 60) -> Any:
        """``(fn)(arg)`` in the page, awaited; its JSON value. A script error raises :class:`CDPError`."""
        res = self.call("Runtime.evaluate", {"expression": f"({fn})({json.dumps(arg)})", "awaitPromise": True,
                                             "returnByValue": True}, timeout_s=timeout_s)
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            raise CDPError(d.get("exception", {}).get("description") or d.get("text"))
        return res["result"].get("value")

    def wait_for(self, fn: str, arg: Any = None, *, timeout_s: float, poll_s: float = 0.05) -> Any:
        """Poll ``(fn)(arg)`` until it is truthy; raise TimeoutError after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(fn, arg, timeout_s=max(deadline - time.monotonic(), 1))
                if value:
                    return value
            except CDPError as e:  # e.g. the page is navigating: no context to evaluate in yet
                last = e
            time.sleep(poll_s)
        raise TimeoutError(f"not true within {timeout_s} s: {fn[:200]}" + (f" (last error: {last})" if last else ""))

    def metric(self, name: str) -> float:
        """A ``Performance.getMetrics`` value (``TaskDuration``: seconds the page's main thread ran tasks)."""
        return next(m["value"] for m in self.call("Performance.getMetrics")["metrics"] if m["name"] == name)


def _launch(chromium: str, args: list[str], tmp: Path, size: tuple[int, int]) -> subprocess.Popen[bytes]:
    """Start Chromium with a DevTools port on 127.0.0.1 (its own process group and profile under ``tmp``)."""
    cmd = [chromium, *args, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
           f"--user-data-dir={tmp / 'chromium-profile'}", f"--window-size={size[0]},{size[1]}", "about:blank"]
    with open(tmp / "chromium.log", "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _devtools_url(proc: subprocess.Popen[bytes], tmp: Path) -> str:
    """The browser's DevTools websocket url, once Chromium has written it (bounded wait)."""
    port_file = tmp / "chromium-profile" / "DevToolsActivePort"
    deadline = time.monotonic() + START_S
    while not (port_file.exists() and len(port_file.read_text().split()) == 2):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"Chromium gave no DevTools port within {START_S} s (exit {proc.returncode}); "
                               f"log: {(tmp / 'chromium.log').read_text(errors='replace')[-2000:]}")
        time.sleep(0.1)
    port, path = port_file.read_text().split()
    return f"ws://127.0.0.1:{port}{path}"


@contextlib.contextmanager
def chromium_page(tmp: Path, *, chromium: str = "/usr/bin/chromium", args: list[str] | None = None,
                  size: tuple[int, int] = (1400, 1000)) -> Iterator[Page]:
    """Start headless Chromium, yield its page (``about:blank``); always stop it (its process group)."""
    import websocket  # websocket-client, a dependency of jupyter_server

    proc = _launch(chromium, list(args or ["--headless", "--no-sandbox", "--disable-gpu"]), tmp, size)
    ws = None
    try:
        ws = websocket.create_connection(_devtools_url(proc, tmp), timeout=START_S, suppress_origin=True)
        yield _attach(ws)
    finally:
        if ws is not None:
            ws.close()
        stop_group(proc, grace=10)


def _attach(ws: Any) -> Page:
    """Attach (flat session) to the browser's first page target; Performance metrics on, focus emulated."""
    browser = Page(ws, None)
    target = next(t for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
    session = browser.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})
    page = Page(ws, session["sessionId"])
    page.call("Performance.enable")
    page.call("Emulation.setFocusEmulationEnabled", {"enabled": True})  # focused, as a user's page is
    return page
