"""`keras-transformer serve` started in a process of its own, on a free
loopback port, for the tests that send it real HTTP traffic."""

import subprocess
import sys
import time
import urllib.request

from helpers import processes

SERVE = processes.ROOT + "/examples/serve.py"


def start(model, *options, languages="de-en", log=None):
    """`serve MODEL --languages LANGUAGES OPTIONS` on a free loopback port:
    `(process, url)` once it answers /health. Its output goes to `log` (an
    open file) where given, else to a pipe the caller reads at the end."""
    port, = processes.free_ports(1)
    process = subprocess.Popen([sys.executable, SERVE, str(model), "--port", str(port),
                                "--languages", languages, *map(str, options)],
                               stdout=log or subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=processes.environment())
    url = f"http://127.0.0.1:{port}/"
    wait_until_up(url, process, lambda: process.communicate()[0] if log is None else "")
    return process, url


def wait_until_up(url, process, output, seconds=180):
    """Waits until the server `process` answers `url`/health; raises with
    the end of its `output()` if it exits, or kills it after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"the server exited with {process.returncode}: "
                                 f"{output()[-3000:]}")
        try:
            urllib.request.urlopen(url + "health", timeout=5)
            return
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise TimeoutError(f"the server did not start: {output()[-3000:]}")
