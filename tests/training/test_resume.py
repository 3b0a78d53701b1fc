"""Resume is real, on TensorFlow and on JAX: a run killed part-way and
started again with the same command ends at the same step with the same
weights as a run never killed (no update lost or repeated, the optimizer's
state and dropout's seeds restored), and no checkpoint is lost or written
twice."""

import json
import os
import signal
import time

import numpy as np
import pytest

from helpers import processes
from keras_transformer.training import checkpoint_paths
from keras_transformer.training.checkpoints import latest_step

pytestmark = pytest.mark.slow  # trains or runs jobs in processes of their own

STEPS = 60


def _saved_steps(run_dir):
    path = os.path.join(run_dir, "checkpoints", "saved.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as lines:
        return [json.loads(line)["step"] for line in lines if line.strip()]


def _weights(run_dir):
    with np.load(os.path.join(run_dir, "weights.npz")) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_killed_run_resumes_without_lost_or_repeated_updates(tmp_path, backend):
    run_dir, uninterrupted = str(tmp_path / "run"), str(tmp_path / "uninterrupted")
    # The uninterrupted run first, alone: on JAX the two runs after it load
    # its compiled steps from JAX's cache (tests/conftest.py) instead of
    # compiling them again, which took most of this test's time.
    processes.run("helpers.resume_job", uninterrupted, STEPS, KERAS_BACKEND=backend)
    first = processes.start("helpers.resume_job", run_dir, STEPS, "--slow", KERAS_BACKEND=backend)
    deadline = time.monotonic() + 300
    while len(_saved_steps(run_dir)) < 3:
        assert first.poll() is None, first.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no checkpoints appeared"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = _saved_steps(run_dir)
    assert killed_at[-1] < STEPS

    output = processes.run("helpers.resume_job", run_dir, STEPS, KERAS_BACKEND=backend)
    assert "Restored" in output and f"finished at step {STEPS}" in output

    saved = _saved_steps(run_dir)
    assert saved == list(range(10, STEPS + 1, 10)), saved
    # The last three are kept, the newest being the final step.
    kept = checkpoint_paths(os.path.join(run_dir, "checkpoints"))
    assert [int(p.rsplit("-", 1)[1].split(".")[0]) for p in kept] == [STEPS - 20, STEPS - 10, STEPS]
    assert latest_step(os.path.join(run_dir, "checkpoints")) == STEPS
    # The metrics log holds each epoch's step once, in order.
    with open(os.path.join(run_dir, "logs", "metrics.jsonl")) as lines:
        logged = [json.loads(line)["step"] for line in lines]
    assert logged == list(range(10, STEPS + 1, 10)), logged
    # Every update made once, on the batch an uninterrupted run makes it on.
    for resumed, whole in zip(_weights(run_dir), _weights(uninterrupted)):
        np.testing.assert_allclose(resumed, whole, atol=1e-6)
