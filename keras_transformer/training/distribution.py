"""Where training runs: the `tf.distribute` strategy, numeric precision and
XLA, chosen by name (the training script's --strategy, --precision, --xla)."""

import json
import os

import keras
import tensorflow as tf

from keras_transformer.cpu_features import check_precision
from keras_transformer.names import STRATEGIES
from keras_transformer.names import TRAINING_PRECISIONS as PRECISIONS


def make_strategy(name="default", devices=None, tpu=None):
    """Creates a `tf.distribute.Strategy`.

    Args:
        name: "default" (one device, whatever TensorFlow picks), "mirrored"
            (synchronous data parallelism over the GPUs of this machine, or
            over `devices`), "multi_worker" (several machines, each running
            the same command, described by the TF_CONFIG environment
            variable), or "tpu".
        devices: for "mirrored", e.g. ["/gpu:0", "/gpu:1"]; default all GPUs.
        tpu: for "tpu", the TPU name or address ("" for a local TPU VM).
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "The multi_worker strategy needs TF_CONFIG, e.g. "
                '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                '"task": {"type": "worker", "index": 0}}, set on every machine '
                "with its own index."
            )
        try:
            json.loads(os.environ["TF_CONFIG"])
        except ValueError as error:
            raise ValueError(f"TF_CONFIG is not valid JSON: {error}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    raise ValueError(f"Unknown strategy {name!r}; expected one of {STRATEGIES}.")


def is_chief(strategy):
    """Whether this process writes checkpoints and logs (worker 0, or the
    chief, in a multi-worker cluster; always true on one machine)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def set_precision(precision):
    """Sets Keras' global dtype policy: "float32", "mixed_float16" (GPUs; the
    trainer adds dynamic loss scaling) or "mixed_bfloat16" (TPUs, recent GPUs
    and CPUs; no loss scaling needed). Variables stay float32. (Any Keras
    backend; the check of the CPU's half precisions is TensorFlow's.)"""
    if precision not in PRECISIONS:
        raise ValueError(f"Unknown precision {precision!r}; expected one of {PRECISIONS}.")
    if keras.backend.backend() == "tensorflow":
        check_precision(precision)
    keras.config.set_dtype_policy(precision)


def simulate_cpu_devices(count):
    """Splits the CPU into `count` logical devices, so that MirroredStrategy
    can run `count` replicas on a machine without GPUs (for tests). Must run
    before TensorFlow executes any op."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * count
    )
    return [device.name for device in tf.config.list_logical_devices("CPU")]
