"""A real headless Chromium, driven over the DevTools protocol, for tests of pages inferplan writes.

`browser` starts `chromium --headless --remote-debugging-port=0` with its own temporary profile, reads the
port it chose from DevToolsActivePort, attaches to its page and yields a `Page`. The browser's whole process
group is ended at teardown, whatever the test did. `CHROMIUM` names another binary (default: `chromium`,
Debian's package). Without it the tests are skipped, except in CI (`CI=true`), where they must run.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("CHROMIUM", "chromium")
START_TIMEOUT_S = 60.0  # how long Chromium may take to open its DevTools port before the fixture gives up
REPLY_TIMEOUT_S = 60.0  # how long one DevTools command may take before the test fails instead of hanging


def _skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (CI=true) a missing browser fails the run: the browser tests must run there."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: browser tests must run, not skip)", pytrace=False)
    pytest.skip(reason)


@dataclass
class Page:
    """One browser tab over a DevTools WebSocket: send commands, collect the events they cause."""

    socket: Any  # websocket.WebSocket
    events: list[dict[str, Any]] = field(default_factory=list)
    next_id: int = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Run a DevTools command and return its result; events that arrive meanwhile are kept."""
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})
            if "method" in message:
                self.events.append(message)

    def wait_for(self, event: str) -> dict[str, Any]:
        """Read events until `event` arrives, and return it."""
        while True:
            message = json.loads(self.socket.recv())
            if "method" in message:
                self.events.append(message)
                if message["method"] == event:
                    return message

    def open(self, url: str) -> None:
        """Navigate to `url` and wait for its load event; events of earlier pages are dropped."""
        self.events.clear()
        self.send("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.evaluate("1")  # a round trip, so that console and log events of the load have arrived

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable results only)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Uncaught exceptions, console errors and error log entries since the page was opened."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails'].get('text')}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(f"console.error: {[a.get('value') for a in params.get('args', [])]}")
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(f"log: {params['entry'].get('text')}")
        return found

    def requests(self) -> list[str]:
        """The URL of every request the page made since it was opened (the document's own included)."""
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]


def _devtools_port(profile: Path, process: subprocess.Popen[bytes]) -> int:
    """The port Chromium wrote to DevToolsActivePort once it listens."""
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + START_TIMEOUT_S
    while not (active.is_file() and active.read_text().strip()):
        if process.poll() is not None:
            pytest.fail(f"{CHROMIUM} exited with {process.returncode} before opening its DevTools port")
        if time.monotonic() > deadline:
            pytest.fail(f"{CHROMIUM} did not open its DevTools port within {START_TIMEOUT_S:.0f} s")
        time.sleep(0.05)
    return int(active.read_text().splitlines()[0])


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End Chromium and the helper processes it started (they share its process group)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.fixture(scope="module")
def browser() -> Iterator[Page]:
    """A headless Chromium with Runtime, Log, Page and Network events enabled on its one tab."""
    binary = shutil.which(CHROMIUM)
    if binary is None:
        _skip_or_fail(f"{CHROMIUM} not installed; apt-get install -y --no-install-recommends chromium")
    import websocket  # websocket-client: the kubernetes client's dependency, listed in the dev extra

    with tempfile.TemporaryDirectory(prefix="inferplan-chromium-") as folder:
        profile = Path(folder)
        log = (profile / "chromium.log").open("wb")
        process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--remote-debugging-port=0", f"--user-data-dir={profile}",
             "--no-first-run", "--no-default-browser-check", "--disable-gpu", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "about:blank"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            port = _devtools_port(profile, process)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=REPLY_TIMEOUT_S) as reply:
                targets = json.load(reply)
            url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            socket = websocket.create_connection(url, timeout=REPLY_TIMEOUT_S, suppress_origin=True)
            try:
                page = Page(socket)
                for domain in ("Runtime", "Log", "Page", "Network"):
                    page.send(f"{domain}.enable")
                yield page
            finally:
                socket.close()
        finally:
            _stop(process)
            log.close()
