"""The paper's training recipe.

On any Keras backend (`keras.ops` only; importing them imports no TensorFlow):
- `LabelSmoothedCrossEntropy`, `token_statistics`: the loss and metrics.
- `TransformerSchedule`, `paper_optimizer`, `fine_tuning_recipe`: Adam and
  the warmup schedule; `LinearDecaySchedule`, `learning_rate_schedule`: the
  same warmup with a linear decay to zero, for runs of known length. With these, `model.compile(optimizer=
  paper_optimizer(config), loss=LabelSmoothedCrossEntropy(...))` and
  `model.fit` train a `Transformer` on one device with plain Keras.

The training loop and its steps, one trainer a backend, imported on first
use (each imports its own backend's library; the TensorFlow ones also when
the Keras backend is another, as the data library):
- `TrainingLoop` (`training.loop`): the loop, callbacks, validation and
  logs every trainer shares.
- `Trainer`: the steps on `tf.distribute`, with gradient accumulation;
  `make_strategy`, `set_precision`: one device, several GPUs, several
  machines, TPUs; float32, mixed_float16, mixed_bfloat16.
- `JaxTrainer`: the steps on JAX, compiled, on one device or data-parallel
  with `keras.distribution` (`training.jax_trainer`); `TorchTrainer`: on
  PyTorch, one device.
- `training.backends`: which strategies, trainer and checkpoints each
  backend trains with (what `keras-transformer train` picks).
- `FusedAdam`: Keras' Adam with TensorFlow's fused update kernel, which
  `paper_optimizer` returns on the TensorFlow backend (imported with this
  package there).
- `CheckpointCallback` (TensorFlow checkpoints), `SafetensorsCheckpoints`
  (JAX, PyTorch), `checkpoint_paths`, `average_checkpoints`: resumable
  checkpoints and the paper's checkpoint averaging.
- `training.sizing`: a model width chosen for a time budget by timing
  updates on the machine (what the demo does).
"""

import importlib

import keras

from keras_transformer.training.loss import LabelSmoothedCrossEntropy, token_statistics
from keras_transformer.training.schedule import (
    LinearDecaySchedule,
    TransformerSchedule,
    fine_tuning_recipe,
    learning_rate_schedule,
    paper_optimizer,
)

# A model compiled with `paper_optimizer` saves its optimizer as
# "keras_transformer>FusedAdam" on TensorFlow. Loading it needs the name
# registered: on TensorFlow by importing FusedAdam, elsewhere as Keras' Adam,
# whose updates FusedAdam computes.
if keras.backend.backend() == "tensorflow":
    from keras_transformer.training.fused_adam import FusedAdam
else:
    keras.saving.get_custom_objects()["keras_transformer>FusedAdam"] = keras.optimizers.Adam

# Names imported on first use, and the modules that define them.
_LAZY = {
    "CheckpointCallback": "checkpoints",
    "SafetensorsCheckpoints": "checkpoints",
    "average_checkpoints": "checkpoints",
    "checkpoint_paths": "checkpoints",
    "JaxTrainer": "jax_trainer",
    "TorchTrainer": "torch_trainer",
    "TrainingLoop": "loop",
    "PRECISIONS": "distribution",
    "STRATEGIES": "distribution",
    "is_chief": "distribution",
    "make_strategy": "distribution",
    "set_precision": "distribution",
    "simulate_cpu_devices": "distribution",
    "FusedAdam": "fused_adam",
    "Trainer": "trainer",
}


def __getattr__(name):
    """Imports a name's module when the name is first used."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "PRECISIONS",
    "STRATEGIES",
    "CheckpointCallback",
    "FusedAdam",
    "JaxTrainer",
    "LabelSmoothedCrossEntropy",
    "SafetensorsCheckpoints",
    "TorchTrainer",
    "Trainer",
    "TrainingLoop",
    "LinearDecaySchedule",
    "TransformerSchedule",
    "average_checkpoints",
    "checkpoint_paths",
    "fine_tuning_recipe",
    "is_chief",
    "learning_rate_schedule",
    "make_strategy",
    "paper_optimizer",
    "set_precision",
    "simulate_cpu_devices",
    "token_statistics",
]
