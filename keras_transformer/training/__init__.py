"""The paper's training recipe on `tf.distribute` (TensorFlow only).

- `LabelSmoothedCrossEntropy`, `token_statistics`: the loss and metrics.
- `TransformerSchedule`, `paper_optimizer`, `FusedAdam`: Adam and the warmup
  schedule.
- `make_strategy`, `set_precision`: one device, several GPUs, several
  machines, TPUs; float32, mixed_float16, mixed_bfloat16.
- `Trainer`: the distributed training loop, with gradient accumulation.
- `CheckpointCallback`, `checkpoint_paths`, `average_checkpoints`: resumable
  checkpoints and the paper's checkpoint averaging.
"""

from keras_transformer.training.checkpoints import (
    CheckpointCallback,
    average_checkpoints,
    checkpoint_paths,
)
from keras_transformer.training.distribution import (
    PRECISIONS,
    STRATEGIES,
    is_chief,
    make_strategy,
    set_precision,
    simulate_cpu_devices,
)
from keras_transformer.training.fused_adam import FusedAdam
from keras_transformer.training.loss import LabelSmoothedCrossEntropy, token_statistics
from keras_transformer.training.schedule import (
    TransformerSchedule,
    fine_tuning_recipe,
    paper_optimizer,
)
from keras_transformer.training.trainer import Trainer

__all__ = [
    "PRECISIONS",
    "STRATEGIES",
    "CheckpointCallback",
    "FusedAdam",
    "LabelSmoothedCrossEntropy",
    "Trainer",
    "TransformerSchedule",
    "average_checkpoints",
    "checkpoint_paths",
    "fine_tuning_recipe",
    "is_chief",
    "make_strategy",
    "paper_optimizer",
    "set_precision",
    "simulate_cpu_devices",
    "token_statistics",
]
