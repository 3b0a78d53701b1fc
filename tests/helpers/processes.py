"""Running the helper jobs in their own Python processes."""

import json
import os
import socket
import subprocess
import sys

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def environment(**extra):
    env = dict(os.environ, PYTHONPATH=TESTS, TF_CPP_MIN_LOG_LEVEL="2")
    env.update({key: str(value) for key, value in extra.items()})
    return env


def start(module, *args, **extra_env):
    return subprocess.Popen(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=TESTS, env=environment(**extra_env),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def run(module, *args, timeout=600, **extra_env):
    process = start(module, *args, **extra_env)
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-3000:]
    return output


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def tf_config(ports, index):
    return json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
        "task": {"type": "worker", "index": index},
    })
