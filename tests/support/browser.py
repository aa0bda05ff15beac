"""
A headless Chromium driven over the DevTools protocol on a pipe.

Chromium (Debian's ``chromium`` package) is started with
``--remote-debugging-pipe``: it reads commands on file descriptor 3 and writes
replies and events on 4, each a JSON object ended by a NUL byte. No port is
opened, and with the flags below it makes no request of its own.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ("Browser", "PageResult", "chromium_path", "open_page")

#: The longest one command may wait for its reply (a guard, not a pacing).
GUARD = 60.0


def chromium_path() -> str | None:
    """Return the Chromium executable, or None when it is not installed."""
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


class PageResult:
    """What a loaded page showed: console messages, exceptions, and a way to evaluate."""

    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str) -> Any:
        """Evaluate ``expression`` in the page and return its value (JSON-serializable)."""
        reply = self.browser.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            session=self.session,
        )
        if "exceptionDetails" in reply:
            raise AssertionError(f"evaluation failed: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def screenshot(self, path: Path, width: int = 1200, height: int = 1500) -> None:
        """Save a PNG of the page's top ``width`` x ``height`` pixels."""
        self.browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=self.session,
        )
        reply = self.browser.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
            },
            session=self.session,
        )
        path.write_bytes(base64.b64decode(reply["data"]))


class Browser:
    """One Chromium process and its DevTools pipe."""

    def __init__(self, executable: str, profile: str) -> None:
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # Chromium expects the pipe on fds 3 and 4.
        os.dup2(to_child_r, 3 + 100)
        os.dup2(from_child_w, 4 + 100)
        os.close(to_child_r)
        os.close(from_child_w)

        def wire() -> None:
            os.dup2(103, 3)
            os.dup2(104, 4)

        self.process = subprocess.Popen(
            [
                executable,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                f"--user-data-dir={profile}",
                "--remote-debugging-pipe",
                "about:blank",
            ],
            pass_fds=(3, 4, 103, 104),
            preexec_fn=wire,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(103)
        os.close(104)
        self._buffer = b""
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._to_child, json.dumps(message).encode() + b"\0")

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message: dict[str, Any] = json.loads(raw)
        return message

    def call(
        self, method: str, params: dict[str, Any] | None = None, *, session: str | None = None
    ) -> dict[str, Any]:
        """Send one command and return its result; events that arrive meanwhile are kept."""
        self._next += 1
        message: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self._send(message)
        deadline = time.monotonic() + GUARD
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, session: str) -> dict[str, Any]:
        """Return the first event ``method`` of ``session``, waiting for it if need be."""
        for index, event in enumerate(self.events):
            if event.get("method") == method and event.get("sessionId") == session:
                return self.events.pop(index)
        deadline = time.monotonic() + GUARD
        while True:
            event = self._receive(deadline)
            if event.get("method") == method and event.get("sessionId") == session:
                return event
            self.events.append(event)

    def close(self) -> None:
        """End Chromium."""
        try:
            self._send({"id": -1, "method": "Browser.close", "params": {}})
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            os.close(self._to_child)
            os.close(self._from_child)


@contextmanager
def open_page(path: Path) -> Iterator[tuple[PageResult, list[str]]]:
    """
    Load the file at ``path`` in a fresh headless Chromium.

    Yields the page and the list of problems seen: console errors, uncaught
    exceptions, and every request the page made that was not for the file itself.
    """
    executable = chromium_path()
    if executable is None:
        raise RuntimeError("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="proctor-chromium-") as profile:
        browser = Browser(executable, profile)
        try:
            target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"
            ]
            for domain in ("Page", "Runtime", "Log", "Network"):
                browser.call(f"{domain}.enable", session=session)
            url = path.resolve().as_uri()
            browser.call("Page.navigate", {"url": url}, session=session)
            browser.wait_event("Page.loadEventFired", session)
            page = PageResult(browser, session)
            problems: list[str] = []
            for event in browser.events:
                method = event.get("method")
                params = event.get("params", {})
                if method == "Runtime.exceptionThrown":
                    problems.append(f"exception: {params['exceptionDetails']}")
                elif method == "Runtime.consoleAPICalled" and params.get("type") in (
                    "error",
                    "assert",
                ):
                    problems.append(f"console.{params['type']}: {params.get('args')}")
                elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                    problems.append(f"log: {params['entry'].get('text')}")
                elif method == "Network.requestWillBeSent":
                    requested = params["request"]["url"]
                    if requested != url:
                        problems.append(f"request: {requested}")
            yield page, problems
        finally:
            browser.close()
