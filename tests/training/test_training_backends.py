"""Training on JAX and on PyTorch is the same learning as on TensorFlow: from
the same weights and batches their first updates give TensorFlow's losses;
on JAX, two virtual devices with `--strategy data-parallel`, and two local
processes acting as hosts, end at one device's weights; `keras-transformer
train` on JAX writes a run that the TensorFlow commands translate and
average; and what a backend cannot do is refused in one line before any
work."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import processes
from helpers.commands import command
from helpers.files import ding_file
from helpers.backend_training_job import train
from keras_transformer.data import shape_boundaries
from keras_transformer.training import backends

pytestmark = pytest.mark.slow  # trains or runs jobs in processes of their own

STEPS = 5
# Added to the XLA flags tests/conftest.py sets.
TWO_DEVICES = {"XLA_FLAGS": os.environ["XLA_FLAGS"] + " --xla_force_host_platform_device_count=2"}


def _trained(path):
    with np.load(path) as archive:
        weights = [archive[f"arr_{i}"] for i in range(len(archive.files) - 1)]
        return weights, archive["losses"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """STEPS updates from the same initial weights on the same batches: on
    TensorFlow (in this process), on JAX on one device and data-parallel on
    two virtual devices (one process), and on PyTorch."""
    folder = tmp_path_factory.mktemp("backends")
    initial = folder / "initial.npz"
    train("default", STEPS, str(initial), str(folder / "tensorflow.npz"))
    jobs = [processes.start("helpers.backend_training_job", "default,data-parallel", STEPS,
                            initial, folder, KERAS_BACKEND="jax", **TWO_DEVICES),
            processes.start("helpers.backend_training_job", "default", STEPS, initial,
                            folder / "torch.npz", KERAS_BACKEND="torch")]
    outputs = [job.communicate(timeout=600)[0] for job in jobs]
    for job, output in zip(jobs, outputs):
        assert job.returncode == 0, output[-3000:]
    assert f"data-parallel: 2 replicas, step {STEPS}" in outputs[0]
    return folder, initial


def _assert_same_weights(weights, reference, tolerance):
    difference = max(np.abs(a - b).max() for a, b in zip(weights, reference))
    assert difference < tolerance, difference


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_first_updates_give_tensorflows_losses(runs, backend):
    folder, initial = runs
    reference, tensorflow_losses = _trained(folder / "tensorflow.npz")
    name = "default.npz" if backend == "jax" else "torch.npz"
    weights, losses = _trained(folder / name)
    with np.load(initial) as start:
        moved = max(np.abs(a - start[f"arr_{i}"]).max() for i, a in enumerate(reference))
    assert moved > 1e-2, "training did not change the weights"
    assert len(losses) == STEPS and losses[-1] < losses[0]
    np.testing.assert_allclose(losses, tensorflow_losses, rtol=1e-5)
    _assert_same_weights(weights, reference, 1e-4)


def test_two_virtual_jax_devices_end_at_one_devices_weights(runs):
    folder, _ = runs
    one, one_losses = _trained(folder / "default.npz")
    two, two_losses = _trained(folder / "data-parallel.npz")
    np.testing.assert_allclose(two_losses, one_losses, rtol=1e-5)
    _assert_same_weights(two, one, 1e-4)


def test_two_jax_processes_as_hosts_end_at_one_devices_weights(runs, tmp_path):
    folder, initial = runs
    port, = processes.free_ports(1)
    hosts = [processes.start("helpers.backend_training_job", "data-parallel", STEPS, initial,
                             tmp_path / "hosts.npz", KERAS_BACKEND="jax",
                             KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}",
                             KERAS_DISTRIBUTION_NUM_PROCESSES=2, KERAS_DISTRIBUTION_PROCESS_ID=index)
             for index in range(2)]
    for host in hosts:
        output, _ = host.communicate(timeout=600)
        assert host.returncode == 0, output[-3000:]
        assert f"data-parallel: 2 replicas, step {STEPS}" in output
    weights, _ = _trained(tmp_path / "hosts.npz")  # the chief's
    _assert_same_weights(weights, _trained(folder / "default.npz")[0], 1e-4)


def _command(*argv, backend, stdin="", **extra_env):
    """`keras-transformer ARGV` in a process of its own on a Keras backend."""
    return subprocess.run(
        [sys.executable, "-c", "from keras_transformer.commands import main; main()", *map(str, argv)],
        input=stdin, capture_output=True, text=True, timeout=600, cwd=processes.ROOT,
        env=processes.environment(KERAS_BACKEND=backend, **extra_env))


def test_a_jax_data_parallel_run_translates_and_averages_on_tensorflow(tmp_path):
    run = tmp_path / "run"
    trained = _command(
        "train", "--output", run, "--dataset", "ding", "--ding-path", ding_file(tmp_path / "de-en"),
        "--data-dir", tmp_path / "tfds", "--vocab-size", 120, "--preset", "small",
        "--set", "d_model=32", "--set", "d_ff=64", "--set", "max_length=24",
        "--batch-tokens", 512, "--steps", 20, "--eval-every-steps", 10,
        "--checkpoint-every-steps", 10, "--bleu-sentences", 8, "--strategy", "data-parallel",
        backend="jax", **TWO_DEVICES)
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    summary = json.loads((run / "run.json").read_text())
    assert summary["backend"] == "jax" and summary["replicas"] == 2
    assert summary["final_step"] == 20 and "val_bleu" in summary["last_logs"]
    # A handful of compiled programs: at most one a length of the grid.
    assert 1 <= summary["compiled_shapes"]["count"] <= len(shape_boundaries(24))
    assert sorted(os.listdir(run / "checkpoints")) == [
        "ckpt-10.safetensors", "ckpt-20.safetensors", "saved.jsonl"]

    # On TensorFlow (the other commands run there whatever KERAS_BACKEND
    # says, and say so): translate, then average the safetensors checkpoints.
    translated = _command("translate", run, backend="jax",
                          stdin="Haus 3 und Baum\nHund 7 und Katze\n")
    assert translated.returncode == 0, translated.stderr[-3000:]
    assert len(translated.stdout.splitlines()) == 2
    warnings = [line for line in translated.stderr.splitlines() if ": warning: " in line]
    assert len(warnings) == 1 and "KERAS_BACKEND" in warnings[0], warnings
    status, averaged, lines = command("examples/average_checkpoints.py", run, "--last", 2,
                                      "--output-file", "two.keras")  # here, on TensorFlow
    assert status == 0, lines
    assert b"ckpt-10.safetensors, ckpt-20.safetensors" in averaged


@pytest.mark.parametrize("backend, strategy, xla, refusal", [
    ("jax", "mirrored", False, "--strategy mirrored is not available on the Keras backend jax: "
                               "on JAX use --strategy data-parallel (keras.distribution)."),
    ("jax", "multi_worker", False, "with KERAS_DISTRIBUTION_JOB_ADDRESSES"),
    ("torch", "data-parallel", False, "--strategy data-parallel is not available on the Keras "
                                      "backend torch: it trains with --strategy default."),
    ("tensorflow", "data-parallel", False, "on TensorFlow use --strategy mirrored"),
    ("torch", "default", True, "--xla compiles the step with XLA"),
])
def test_a_backend_refuses_what_it_cannot_do(backend, strategy, xla, refusal):
    with pytest.raises(ValueError) as refused:
        backends.check(strategy, xla, backend=backend)
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_mixed_float16_is_refused_off_tensorflow(backend):
    with pytest.raises(ValueError, match="use --precision mixed_bfloat16"):
        backends.check(backend=backend, precision="mixed_float16")
    backends.check(backend=backend, precision="mixed_bfloat16")


def test_a_run_is_resumed_only_on_a_backend_that_reads_its_checkpoints(tmp_path):
    # A JAX run's safetensors checkpoints, resumed on TensorFlow: refused in
    # one line before any work, the run left as it was.
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "ckpt-10.safetensors").write_bytes(b"")
    status, _, lines = command("examples/train.py", "--output", run, "--preset", "small",
                               "--steps", "20")  # here, on TensorFlow
    assert status == 1 and len(lines) == 1, lines
    assert "holds safetensors checkpoints, which the Keras backend tensorflow does not resume" \
        in lines[0]
    assert sorted(path.name for path in run.rglob("*")) == ["checkpoints", "ckpt-10.safetensors"]


def test_the_command_refuses_in_one_line_before_any_work(tmp_path):
    result = _command("train", "--output", tmp_path / "run", "--strategy", "mirrored",
                      backend="jax")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("keras-transformer")]
    assert lines == ["keras-transformer train: error: --strategy mirrored is not available on "
                     "the Keras backend jax: on JAX use --strategy data-parallel "
                     "(keras.distribution)."]
    assert not (tmp_path / "run").exists() and result.stdout == ""


# Runs a script with `import tensorflow` failing, as on a GPU machine that has
# JAX and PyTorch but no TensorFlow.
WITHOUT_TENSORFLOW = """
import functools, os, runpy, sys
class NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoTensorFlow())
sys.argv = sys.argv[1:]
# The matmul peak the MFU column divides by is measured on small squares:
# the test is about what the benchmark imports and prints, and the peak's
# 4096 x 4096 products on 2 cores took 30 of its 45 CPU-s.
sys.path.insert(0, os.path.dirname(sys.argv[0]))
import common
common.matmul_peak_run = functools.partial(common.matmul_peak_run, sizes=(256,), seconds=0.05)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_the_jax_training_benchmark_runs_without_tensorflow():
    script = os.path.join(processes.ROOT, "benchmarks", "train_throughput.py")
    result = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORFLOW, script, "--backend", "jax", "--sizes",
         "small:8", "--vocab", "500", "--length", "8", "--steps", "1", "--no-torch"],
        capture_output=True, text=True, timeout=600, cwd=os.path.dirname(script),
        env=processes.environment())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no TensorFlow column" in result.stdout
    assert "small x8, ours (Keras on JAX)" in result.stdout, result.stdout
