"""Resume is real: a run killed part-way and started again with the same
command ends at the same step, and no checkpoint is lost or written twice."""

import json
import os
import signal
import time

import tensorflow as tf

from helpers import processes
from keras_transformer.training import checkpoint_paths

STEPS = 120


def _saved_steps(run_dir):
    path = os.path.join(run_dir, "checkpoints", "saved.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as lines:
        return [json.loads(line)["step"] for line in lines if line.strip()]


def test_killed_run_resumes_without_lost_or_repeated_checkpoints(tmp_path):
    run_dir = str(tmp_path)
    first = processes.start("helpers.resume_job", run_dir, STEPS)
    deadline = time.monotonic() + 300
    while len(_saved_steps(run_dir)) < 3:
        assert first.poll() is None, first.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no checkpoints appeared"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = _saved_steps(run_dir)
    assert killed_at[-1] < STEPS

    output = processes.run("helpers.resume_job", run_dir, STEPS)
    assert f"Restored" in output and f"finished at step {STEPS}" in output

    saved = _saved_steps(run_dir)
    assert saved == list(range(10, STEPS + 1, 10)), saved
    # The last three are kept, the newest being the final step.
    kept = checkpoint_paths(os.path.join(run_dir, "checkpoints"))
    assert [int(p.rsplit("-", 1)[1]) for p in kept] == [STEPS - 20, STEPS - 10, STEPS]
    assert tf.train.load_variable(kept[-1], "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE") == STEPS
    # The metrics log holds each epoch's step once, in order.
    with open(os.path.join(run_dir, "logs", "metrics.jsonl")) as lines:
        logged = [json.loads(line)["step"] for line in lines]
    assert logged == list(range(10, STEPS + 1, 10)), logged
