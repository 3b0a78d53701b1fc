"""Distribution is real: two replicas (MirroredStrategy on two logical CPU
devices, and MultiWorkerMirroredStrategy with two local worker processes)
train to the same weights as one device given the same global batches."""

import numpy as np
import pytest

from helpers import processes

pytestmark = pytest.mark.slow  # trains or runs jobs in processes of their own

STEPS = 5


def _weights(path):
    with np.load(path) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The initial weights, and the weights after STEPS updates on one device
    and on two mirrored replicas: both runs in one job process (one
    TensorFlow start fewer than a process each)."""
    folder = tmp_path_factory.mktemp("reference")
    initial = folder / "initial.npz"
    output = processes.run("helpers.distributed_job", "default,mirrored", STEPS, initial, folder)
    assert f"default: 1 replicas, step {STEPS}" in output
    assert f"mirrored: 2 replicas, step {STEPS}" in output
    one_device = _weights(folder / "default.npz")
    moved = max(np.abs(a - b).max() for a, b in zip(_weights(initial), one_device))
    assert moved > 1e-2, "training did not change the weights"
    return initial, one_device, _weights(folder / "mirrored.npz")


def _assert_same(weights, reference):
    difference = max(np.abs(a - b).max() for a, b in zip(weights, reference))
    assert difference < 1e-4, difference


def test_mirrored_two_replicas_match_one_device(trained):
    _, reference, mirrored = trained
    _assert_same(mirrored, reference)


def test_multi_worker_two_processes_match_one_device(trained, tmp_path):
    initial, reference, _ = trained
    ports = processes.free_ports(2)
    workers = [
        processes.start("helpers.distributed_job", "multi_worker", STEPS, initial,
                        tmp_path / f"w{index}.npz", TF_CONFIG=processes.tf_config(ports, index))
        for index in range(2)
    ]
    for worker in workers:
        output, _ = worker.communicate(timeout=600)
        assert worker.returncode == 0, output[-3000:]
        assert f"multi_worker: 2 replicas, step {STEPS}" in output
    for index in range(2):
        _assert_same(_weights(tmp_path / f"w{index}.npz"), reference)
