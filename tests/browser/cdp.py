"""Headless Chromium driven over the Chrome DevTools Protocol, on a pipe (`--remote-debugging-pipe`):
Chromium reads commands on its fd 3 and writes answers and events on its fd 4, each message one
JSON object ended by a NUL byte. Standard library only; no browser download (Debian's chromium).

    with Browser() as browser:
        page = browser.open(Path("report.html"))
        page.problems      # console errors, exceptions, error log entries (CSP refusals included)
        page.requests      # every URL the page asked for
        page.evaluate("document.title")
        page.screenshot()  # PNG bytes of the whole page
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--hide-scrollbars", "--mute-audio", "--force-device-scale-factor=1")
"""The project machine's flags for headless Chromium as root (a closed network: nothing in the
background may try to reach out), a fixed scale so CSS pixels are screenshot pixels."""


def chromium() -> str | None:
    """The Chromium binary, or None: KVAUDIT_CHROMIUM, else Debian's `chromium` on the PATH."""
    return os.environ.get("KVAUDIT_CHROMIUM") or shutil.which("chromium")


class BrowserError(RuntimeError):
    pass


@dataclass
class LoadedPage:
    browser: Browser
    session: str
    url: str
    problems: list[str] = field(default_factory=list)
    """Console errors and assertions, uncaught exceptions, error-level log entries."""
    requests: list[str] = field(default_factory=list)
    """The URL of every request the page made (the page itself first)."""

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-serialisable values)."""
        answer = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True},
                                   session=self.session)
        if "exceptionDetails" in answer:
            raise BrowserError(f"{expression!r} threw: {answer['exceptionDetails']}")
        return answer["result"].get("value")

    def screenshot(self) -> bytes:
        """PNG of the whole page, not only the viewport."""
        size = self.browser.send("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.browser.send("Page.captureScreenshot", {"format": "png", "clip": clip,
                                                            "captureBeyondViewport": True}, session=self.session)
        return base64.b64decode(shot["data"])


class Browser:
    def __init__(self, binary: str | None = None, width: int = 1100, height: int = 900, timeout_s: float = 60.0):
        self.binary = binary or chromium()
        if self.binary is None:
            raise BrowserError("no chromium: apt-get install chromium, or set KVAUDIT_CHROMIUM")
        self.width, self.height, self.timeout_s = width, height, timeout_s
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict] = []

    def __enter__(self) -> Browser:
        self._profile = tempfile.mkdtemp(prefix="kvaudit-chromium-")
        to_chrome_r, to_chrome_w = os.pipe()
        from_chrome_r, from_chrome_w = os.pipe()
        # park the child's ends far above 3 and 4, so the dup2s below cannot clobber each other
        high_r = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 100)
        high_w = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 100)
        for fd in (to_chrome_r, from_chrome_w):
            os.close(fd)

        def child_fds() -> None:
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [self.binary, *FLAGS, f"--user-data-dir={self._profile}", "--remote-debugging-pipe",
             f"--window-size={self.width},{self.height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=child_fds, close_fds=False)
        os.close(high_r)
        os.close(high_w)
        self._write, self._read = to_chrome_w, from_chrome_r
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", timeout_s=10)
                except (BrowserError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self._write, self._read):
                try:
                    os.close(fd)
                except OSError:
                    pass
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    # -- the protocol ------------------------------------------------------------------------

    def send(self, method: str, params: dict | None = None, *, session: str | None = None,
             timeout_s: float | None = None) -> dict:
        """One command; its result (events that arrive meanwhile are kept for `_drain`)."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._write, data):]
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            for reply in self._messages(deadline):
                if reply.get("id") == self._next_id:
                    if "error" in reply:
                        raise BrowserError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
                self._events.append(reply)

    def _messages(self, deadline: float) -> list[dict]:
        """The next complete messages from Chromium (waits for at least one)."""
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._read], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._read, 1 << 20)
            if not chunk:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.stderr else ""
                raise BrowserError(f"chromium closed its pipe (exit {self.proc.poll()}): {err}")
            self._buffer += chunk
        *complete, self._buffer = self._buffer.split(b"\0")
        return [json.loads(m) for m in complete if m]

    def wait_for(self, method: str, session: str, timeout_s: float | None = None) -> dict:
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            for i, event in enumerate(self._events):
                if event.get("method") == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            self._events.extend(self._messages(deadline))

    # -- pages -------------------------------------------------------------------------------

    def open(self, path: Path, settle_s: float = 0.3) -> LoadedPage:
        """Load a file in a fresh tab, wait for its load event (and `settle_s` for late errors),
        and collect what it logged and requested."""
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(f"{domain}.enable", session=session)
        url = path.resolve().as_uri()
        self._events.clear()
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_for("Page.loadEventFired", session)
        end = time.monotonic() + settle_s
        while time.monotonic() < end:  # late console messages and refusals
            try:
                self._events.extend(self._messages(end))
            except BrowserError:
                break
        page = LoadedPage(self, session, url)
        for event in self._events:
            if event.get("sessionId") != session:
                continue
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                page.problems.append("console: " + " ".join(str(a.get("value", a.get("description", "")))
                                                            for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                page.problems.append("exception: " + str(details.get("exception", {}).get("description")
                                                         or details.get("text")))
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                page.problems.append(f"log ({entry.get('source')}): {entry.get('text')}")
            elif method == "Network.requestWillBeSent":
                page.requests.append(params.get("request", {}).get("url", ""))
        self._events.clear()
        return page


if __name__ == "__main__":  # python tests/browser/cdp.py PAGE.html SHOT.png: docs/html-report.png
    import sys
    if len(sys.argv) != 3:
        raise SystemExit("usage: cdp.py PAGE.html SHOT.png")
    with Browser() as browser:
        loaded = browser.open(Path(sys.argv[1]))
        if loaded.problems:
            raise SystemExit(f"{sys.argv[1]}: {loaded.problems}")
        Path(sys.argv[2]).write_bytes(loaded.screenshot())
