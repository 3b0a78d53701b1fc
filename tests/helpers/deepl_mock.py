"""DeepL's own mock server (github DeepLcom/deepl-mock), run on node, to
check that what our DeepL API answers is what DeepL's answers.

It is not on a package registry, so a machine without GitHub cannot get
it; the tests that use it run where `DEEPL_MOCK` names a checkout of it
whose npm dependencies are installed:

    git clone https://github.com/DeepLcom/deepl-mock && (cd deepl-mock && npm install)
    DEEPL_MOCK=$PWD/deepl-mock bash tools/run_tests.sh
"""

import os
import shutil
import subprocess
import time
import urllib.request

from helpers import processes

FOLDER = os.environ.get("DEEPL_MOCK", "")


def available():
    return bool(FOLDER) and shutil.which("node") is not None and os.path.isdir(
        os.path.join(FOLDER, "node_modules"))


def start(log):
    """The mock on a free loopback port (its output to the open file
    `log`): `(process, url)` once it answers."""
    port, proxy = processes.free_ports(2)
    process = subprocess.Popen(
        ["node", "index.js"], cwd=FOLDER, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "DEEPL_MOCK_SERVER_PORT": str(port),
             "DEEPL_MOCK_PROXY_SERVER_PORT": str(proxy)})
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "deepl-mock exited"
        try:
            urllib.request.urlopen(url + "healthz", timeout=5)
            return process, url
        except OSError:
            assert time.monotonic() < deadline, "deepl-mock did not start"
            time.sleep(0.2)
