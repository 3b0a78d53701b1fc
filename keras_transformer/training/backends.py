"""What each Keras backend trains with. The recipe (`run.py`) is one; it takes
these pieces from the backend the process runs on, chosen as every Keras
program chooses it (`KERAS_BACKEND`, else `~/.keras/keras.json`):

| backend | `--strategy` | trainer | checkpoints | batch shapes |
|---|---|---|---|---|
| tensorflow | default, mirrored, multi_worker, tpu (`tf.distribute`) | `Trainer` | TensorFlow | any, or a few with `--xla` |
| jax | default, data-parallel (`keras.distribution`, one or several hosts) | `JaxTrainer` | safetensors | a few (compiled) |
| torch | default (one device) | `TorchTrainer` | safetensors | any |

On JAX and PyTorch TensorFlow still reads and batches the data (`tf.data`,
tf-text), on the CPU alone: it is told to see no GPU, so that it takes none
of the memory the model needs.

`check` refuses, in one line and before any work, what the backend cannot
do; it imports nothing but Keras, so that the command can check its options
at once.
"""

import contextlib
import os

import keras

from keras_transformer import names

STRATEGIES = {
    "tensorflow": names.STRATEGIES,
    "jax": ("default", "data-parallel"),
    "torch": ("default",),
}
"""The `--strategy` names each Keras backend trains with (`names.ALL_STRATEGIES`
in all)."""

_INSTEAD = {
    ("jax", "mirrored"): "on JAX use --strategy data-parallel (keras.distribution)",
    ("jax", "multi_worker"): "on JAX use --strategy data-parallel with "
                             "KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES and _PROCESS_ID "
                             "set on every host",
    ("jax", "tpu"): "on JAX use --strategy data-parallel, which spreads over the TPU's cores",
    ("tensorflow", "data-parallel"): "on TensorFlow use --strategy mirrored (one machine) or "
                                     "multi_worker (several)",
}

MULTI_HOST_VARIABLE = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
"""Set (with KERAS_DISTRIBUTION_NUM_PROCESSES and KERAS_DISTRIBUTION_PROCESS_ID)
on every host of a multi-host JAX run: `keras.distribution.initialize`
reads them."""


def check(strategy="default", xla=False, backend=None, precision="float32"):
    """Raises a one-line ValueError if `backend` (default: Keras') cannot
    train with these options."""
    backend = backend or keras.backend.backend()
    if backend not in STRATEGIES:
        raise ValueError(f"training runs on the Keras backends {sorted(STRATEGIES)}; this process "
                         f"has {backend!r} (set KERAS_BACKEND).")
    if strategy not in STRATEGIES[backend]:
        instead = _INSTEAD.get((backend, strategy),
                               f"it trains with --strategy {' or '.join(STRATEGIES[backend])}")
        raise ValueError(f"--strategy {strategy} is not available on the Keras backend "
                         f"{backend}: {instead}.")
    if xla and backend == "torch":
        raise ValueError("--xla compiles the step with XLA, which the Keras backend torch does "
                         "not use; drop it (or train on JAX, which always compiles).")
    if precision == "mixed_float16" and backend != "tensorflow":
        raise ValueError(f"--precision mixed_float16 needs dynamic loss scaling, which the "
                         f"{backend} trainer does not do; use --precision mixed_bfloat16 (no "
                         "scaling needed), or train on TensorFlow.")


def current():
    """The pieces of the process's Keras backend."""
    return {"tensorflow": TensorFlowPieces, "jax": JaxPieces, "torch": TorchPieces}[
        keras.backend.backend()]()


def keep_tensorflow_off_the_gpus():
    """Makes TensorFlow, used for the data alone, see no GPU (before its
    first op)."""
    import tensorflow as tf

    tf.config.set_visible_devices([], "GPU")


# Each backend's pieces import its own trainer and checkpoints inside their
# methods: a run never loads another backend's libraries, and `check` answers
# while the command line is parsed.
class TensorFlowPieces:
    """`tf.distribute` strategies, `Trainer`, TensorFlow checkpoints."""

    name = "tensorflow"
    checkpoint_format = "tensorflow"

    def strategy(self, name):
        from keras_transformer.training.distribution import make_strategy

        return make_strategy(name)

    def replicas(self, strategy):
        return strategy.num_replicas_in_sync

    def chief(self, strategy):
        from keras_transformer.training.distribution import is_chief

        return is_chief(strategy)

    def scope(self, strategy):
        return strategy.scope()

    def fixed_shapes(self, xla):
        return xla

    def trainer(self, model, optimizer, strategy, label_smoothing, accumulation_steps, xla):
        from keras_transformer.training.trainer import Trainer

        return Trainer(model, optimizer, strategy, label_smoothing, accumulation_steps,
                       jit_compile=xla)

    def checkpoints(self, directory, trainer, strategy, **when):
        from keras_transformer.training.checkpoints import CheckpointCallback

        return CheckpointCallback(directory, trainer.model, trainer.optimizer, strategy, **when)

    def training_input(self, input_fn, replicas):
        """Prepared data's per-worker input function, as `Trainer` takes it."""
        return input_fn


class JaxPieces(TensorFlowPieces):
    """`keras.distribution`, `JaxTrainer`, safetensors checkpoints; batches
    of a few fixed shapes."""

    name = "jax"
    checkpoint_format = "safetensors"

    def strategy(self, name):
        """None (one device) or a `DataParallel` over every local device, or
        over every device of every host once `keras.distribution.initialize`
        has joined them (when KERAS_DISTRIBUTION_JOB_ADDRESSES is set)."""
        keep_tensorflow_off_the_gpus()
        if name == "default":
            return None
        if os.environ.get(MULTI_HOST_VARIABLE):
            keras.distribution.initialize()
        return keras.distribution.DataParallel(devices=keras.distribution.list_devices())

    def replicas(self, strategy):
        return 1 if strategy is None else int(strategy.device_mesh.devices.size)

    def chief(self, strategy):
        import jax

        return jax.process_index() == 0

    def scope(self, strategy):
        return contextlib.nullcontext() if strategy is None else strategy.scope()

    def fixed_shapes(self, xla):
        return True

    def trainer(self, model, optimizer, strategy, label_smoothing, accumulation_steps, xla):
        from keras_transformer.training.jax_trainer import JaxTrainer

        return JaxTrainer(model, optimizer, strategy, label_smoothing, accumulation_steps)

    def checkpoints(self, directory, trainer, strategy, **when):
        from keras_transformer.training.checkpoints import SafetensorsCheckpoints

        return SafetensorsCheckpoints(directory, trainer, **when)

    def training_input(self, input_fn, replicas):
        """The global batches of prepared data: one input pipeline for all of
        this run's devices (every host reads the same batches and keeps its
        rows: `JaxTrainer`)."""
        import tensorflow as tf

        return input_fn(tf.distribute.InputContext(1, 0, 1))


class TorchPieces(JaxPieces):
    """One device, `TorchTrainer`, safetensors checkpoints; batches of any shape."""

    name = "torch"

    def strategy(self, name):
        keep_tensorflow_off_the_gpus()
        return None

    def chief(self, strategy):
        return True

    def fixed_shapes(self, xla):
        return False

    def trainer(self, model, optimizer, strategy, label_smoothing, accumulation_steps, xla):
        from keras_transformer.training.torch_trainer import TorchTrainer

        return TorchTrainer(model, optimizer, label_smoothing, accumulation_steps)
