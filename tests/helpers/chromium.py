"""Headless Chromium driven through the DevTools protocol over a pipe
(`--remote-debugging-pipe`: JSON messages ending in NUL, read by Chromium
from file descriptor 3 and written to 4), so that a test can type into a
page and click on it with nothing installed but Debian's chromium."""

import fcntl
import json
import os
import shutil
import subprocess
import time

CHROMIUM = shutil.which("chromium")
# As root and offline: no sandbox (root), and nothing that reaches for the
# network (updates, sync, QUIC, background services).
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Browser:
    """One headless Chromium with one page; `evaluate` runs JavaScript in it."""

    def __init__(self, profile):
        to_chromium, self._send = os.pipe()
        self._receive, from_chromium = os.pipe()
        self.process = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
             "about:blank"],
            pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_as_descriptors_3_and_4(to_chromium, from_chromium))
        os.close(to_chromium)
        os.close(from_chromium)
        self._buffer, self._next_id = b"", 0
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target,
                                   flatten=True)["sessionId"]

    def _call(self, method, session=None, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._send, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._receive, 1 << 16)
                if not chunk:
                    raise RuntimeError("Chromium closed its pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            answer = json.loads(raw)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]

    def open(self, url):
        self._call("Page.navigate", self._session, url=url)

    def evaluate(self, expression):
        """The value of a JavaScript expression (promises awaited)."""
        result = self._call("Runtime.evaluate", self._session, expression=expression,
                            awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def wait_for(self, expression, timeout=60):
        """Evaluates `expression` until it is truthy (an exception counts as
        not yet: the page may still be loading); returns its value."""
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except RuntimeError as error:
                value, last = None, error
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{expression} stayed false for {timeout} s (last error: {last})")

    def close(self):
        self.process.kill()
        self.process.wait()
        os.close(self._send)
        os.close(self._receive)


def _as_descriptors_3_and_4(read_end, write_end):
    """In the child, before it runs Chromium: the pipe ends as descriptors 3
    (Chromium reads) and 4 (Chromium writes), moved out of the way first so
    that neither overwrites the other."""

    def move():
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (read_end, write_end)]
        os.dup2(high[0], 3)
        os.dup2(high[1], 4)

    return move
