"""Distribution is real: two replicas (MirroredStrategy on two logical CPU
devices, and MultiWorkerMirroredStrategy with two local worker processes)
train to the same weights as one device given the same global batches."""

import numpy as np
import pytest

from helpers import processes

STEPS = 5


def _weights(path):
    with np.load(path) as archive:
        return [archive[f"arr_{i}"] for i in range(len(archive.files))]


@pytest.fixture(scope="module")
def single_device(tmp_path_factory):
    folder = tmp_path_factory.mktemp("single")
    initial, trained = folder / "initial.npz", folder / "default.npz"
    output = processes.run("helpers.distributed_job", "default", STEPS, initial, trained)
    assert f"default: 1 replicas, step {STEPS}" in output
    moved = max(np.abs(a - b).max() for a, b in zip(_weights(initial), _weights(trained)))
    assert moved > 1e-2, "training did not change the weights"
    return initial, _weights(trained)


def _assert_same(weights, reference):
    difference = max(np.abs(a - b).max() for a, b in zip(weights, reference))
    assert difference < 1e-4, difference


def test_mirrored_two_replicas_match_one_device(single_device, tmp_path):
    initial, reference = single_device
    output = processes.run("helpers.distributed_job", "mirrored", STEPS, initial, tmp_path / "m.npz")
    assert f"mirrored: 2 replicas, step {STEPS}" in output
    _assert_same(_weights(tmp_path / "m.npz"), reference)


def test_multi_worker_two_processes_match_one_device(single_device, tmp_path):
    initial, reference = single_device
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
