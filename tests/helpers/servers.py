"""`keras-transformer serve` started in a process of its own, or the
server's application on uvicorn in a thread of the test's process, on a
free loopback port, for the tests that send it real HTTP traffic."""

import contextlib
import subprocess
import sys
import threading
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


def in_thread(config):
    """`(url, stop)` of uvicorn serving `config` (a `uvicorn.Config` on a
    loopback port) in a thread of this process, once it has started;
    `stop()` ends it (the requests in flight answered)."""
    import uvicorn

    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)

    def stop():
        server.should_exit = True
        thread.join(timeout=30)

    return f"http://{config.host}:{config.port}/", stop


@contextlib.contextmanager
def serving(app):
    """The ASGI application `app` on a free loopback port, in a thread of
    this process, for the `with` block: its URL. Idle connections are kept
    as `serve` keeps them (`serve.KEEP_ALIVE`)."""
    import uvicorn

    from keras_transformer.commands.serve import KEEP_ALIVE

    port, = processes.free_ports(1)
    url, stop = in_thread(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                         timeout_keep_alive=KEEP_ALIVE))
    try:
        yield url
    finally:
        stop()
