"""A real browser for the tests: Debian's headless Chromium, driven over its DevTools protocol.

The protocol runs over a pipe (``--remote-debugging-pipe``: JSON messages separated by NUL on
file descriptors 3 and 4), so there is no driver binary to match, no debugging port and nothing
downloaded at test time. The flags keep Chromium off the network (the background services,
updates and sync it would otherwise contact) and let it run as root (``--no-sandbox``).
"""

from __future__ import annotations

import base64
import fcntl
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
MISSING = (
    "Chromium is not installed (no chromium or chromium-browser on PATH): `bash scripts/setup_env.sh "
    "--system chromium` installs Debian's package (apt-get, as root); elsewhere install chromium"
)
# CI sets CI=true (as GitHub Actions, GitLab and most runners do): there nothing may be skipped for
# want of a tool the project installs itself.
ON_CI = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
FLAGS = [
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--window-size=1280,1600",
    "--remote-debugging-pipe",
]


class BrowserError(RuntimeError):
    pass


def require_chromium() -> str:
    """Chromium's path. Without it, a test fails under CI (``$CI`` set: the browser tests must run
    there) and is skipped elsewhere, with a reason that says what is missing and how to install it."""
    if CHROMIUM:
        return CHROMIUM
    import pytest

    if ON_CI:
        pytest.fail(f"{MISSING}. CI={os.environ['CI']}: the browser tests must run in CI, not skip", pytrace=False)
    pytest.skip(f"browser tests NOT RUN: {MISSING}")


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is still running."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Browser:
    """One headless Chromium process with one page. Use as a context manager."""

    def __init__(self, log_path: str | Path | None = None):
        if CHROMIUM is None:
            raise BrowserError(MISSING)
        self._profile = tempfile.mkdtemp(prefix="cookbook-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def fds_3_and_4():  # Chromium reads commands on fd 3 and writes answers on fd 4
            a = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        flags = [*FLAGS, f"--user-data-dir={self._profile}"] + (["--no-sandbox"] if os.geteuid() == 0 else [])
        self._log = open(log_path or os.devnull, "wb")  # noqa: SIM115  (closed in close())
        self.process = subprocess.Popen(
            [CHROMIUM, *flags, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            preexec_fn=fds_3_and_4,
            pass_fds=(3, 4),
            start_new_session=True,
        )
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._ids = itertools.count(1)
        self._answers: dict[int, dict] = {}
        self._ready = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._new_page()

    def _new_page(self) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True}, session=False)[
            "sessionId"
        ]
        self.send("Page.enable")
        self.send("Runtime.enable")

    def _read(self) -> None:
        buf = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            for raw in messages:
                msg = json.loads(raw)
                if "id" in msg:
                    with self._ready:
                        self._answers[msg["id"]] = msg
                        self._ready.notify_all()
        with self._ready:
            self._answers[-1] = {"error": {"message": "Chromium closed the pipe"}}
            self._ready.notify_all()

    def send(self, method: str, params: dict | None = None, *, session: bool = True, timeout_s: float = 60) -> dict:
        """One protocol command; returns its result or raises :class:`BrowserError`."""
        n = next(self._ids)
        msg: dict[str, Any] = {"id": n, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        with self._ready:
            while n not in self._answers and -1 not in self._answers:
                if not self._ready.wait(timeout=max(deadline - time.monotonic(), 0)):
                    raise BrowserError(f"{method}: no answer from Chromium within {timeout_s:.0f} s")
            answer = self._answers.pop(n, None) or self._answers[-1]
        if "error" in answer:
            raise BrowserError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result", {})

    def evaluate(self, expression: str, *, timeout_s: float = 60) -> Any:
        """The JSON value of a JavaScript expression (promises awaited)."""
        r = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout_s=timeout_s,
        )
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise BrowserError(f"JavaScript error: {d.get('exception', {}).get('description') or d.get('text')}")
        return r["result"].get("value")

    def wait_for(self, expression: str, *, timeout_s: float = 120, what: str = "") -> Any:
        """Poll ``expression`` until it is truthy; returns its value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"timed out after {timeout_s:.0f} s waiting for {what or expression}")
            time.sleep(0.25)

    def navigate(self, url: str, *, timeout_s: float = 120) -> str | None:
        """Open ``url`` and wait for the page to load; returns Chromium's error text, if any."""
        r = self.send("Page.navigate", {"url": url}, timeout_s=timeout_s)
        if r.get("errorText"):
            self._new_page()  # Chromium's error page detaches this session; carry on in a fresh page
            return r["errorText"]
        self.wait_for("document.readyState === 'complete'", timeout_s=timeout_s, what=f"{url} to load")
        return None

    def click(self, x: float, y: float) -> None:
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})

    def press(self, key: str, *, shift: bool = False) -> None:
        """A non-text key (``Enter``, ``Tab``), optionally with Shift, as the keyboard sends it."""
        codes = {"Enter": 13, "Tab": 9, "Escape": 27}
        event = {"key": key, "code": key, "windowsVirtualKeyCode": codes[key], "modifiers": 8 if shift else 0}
        # Enter also sends its character (a keypress event, which text boxes commit on), as a keyboard does.
        down = {"type": "keyDown", "text": "\r"} if key == "Enter" else {"type": "rawKeyDown"}
        self.send("Input.dispatchKeyEvent", {**down, **event})
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **event})

    def type_text(self, text: str) -> None:
        self.send("Input.insertText", {"text": text})

    def screenshot(self, path: str | Path, *, full_page: bool = True) -> Path:
        r = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": full_page})
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(r["data"]))
        return path

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.send("Browser.close", session=False, timeout_s=10)
        except (BrowserError, OSError):
            pass
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=15)
        # Chromium's helpers (zygote, crashpad) share its process group and leave after it.
        deadline = time.monotonic() + 15
        while group_alive(self.process.pid):
            if time.monotonic() > deadline:
                os.killpg(self.process.pid, 9)
                break
            time.sleep(0.1)
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
