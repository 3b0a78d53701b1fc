"""The paper's optimiser (section 5.3): Adam with beta1 = 0.9, beta2 = 0.98,
eps = 1e-9, and the learning rate

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

which rises linearly for `warmup_steps` steps, then decays with the inverse
square root of the step. `fine_tuning_recipe` gives the same curve a short
warmup and a low peak, for training on from pretrained weights.
`LinearDecaySchedule` (not in the paper) keeps the warmup and the peak and
then falls in a straight line to zero at the run's last update: for runs
whose length is known in advance, such as a time budget.

The schedule and the optimiser work on every Keras backend: `FusedAdam`,
which needs TensorFlow, is imported only where the backend is TensorFlow.
"""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The paper's warmup then inverse-square-root learning rate.

    Args:
        d_model: model width.
        warmup_steps: 4000 in the paper.
        scale: multiplies the whole curve (1.0 is the paper; tensor2tensor
            later used 2.0 for its base model).

    Steps are counted from 1, so the rate at optimizer step 0 is that of step 1.
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        if d_model < 1 or warmup_steps < 1 or scale <= 0:
            raise ValueError(
                f"d_model and warmup_steps must be positive and scale > 0; got "
                f"d_model={d_model}, warmup_steps={warmup_steps}, scale={scale}."
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        decay = ops.minimum(ops.rsqrt(step), step * self.warmup_steps**-1.5)
        return self.scale * self.d_model**-0.5 * decay

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_transformer")
class LinearDecaySchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The paper's warmup and peak, then a straight line to zero at
    `total_steps`.

    Not in the paper. A run that knows when it ends learns more by annealing
    to zero than by the inverse square root, which is still high at the end
    (the reason the paper averages checkpoints): with the demo's 15 minutes
    on an AVX2 CPU, about 1,700 updates of 1,024 tokens, the end is always
    near. `total_steps` is a variable: `TimeBudget` sets it from the
    measured step rate, so a time budget ends where the rate reaches zero.

    Args:
        d_model: model width.
        warmup_steps: updates of the linear warmup; the peak, at
            `warmup_steps`, is `TransformerSchedule`'s.
        scale: multiplies the whole curve, as for `TransformerSchedule`.
        total_steps: the update at which the rate reaches zero.
    """

    def __init__(self, d_model, warmup_steps, scale, total_steps):
        if d_model < 1 or warmup_steps < 1 or scale <= 0 or total_steps <= warmup_steps:
            raise ValueError(
                f"d_model and warmup_steps must be positive, scale > 0 and total_steps > "
                f"warmup_steps; got d_model={d_model}, warmup_steps={warmup_steps}, "
                f"scale={scale}, total_steps={total_steps}."
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.total_steps = keras.Variable(float(total_steps), trainable=False, name="total_steps")

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        peak = self.scale * self.d_model**-0.5 * self.warmup_steps**-0.5
        remaining = (self.total_steps - step) / (self.total_steps - self.warmup_steps)
        return peak * ops.maximum(0.0, ops.minimum(step / self.warmup_steps, remaining))

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale,
                "total_steps": float(ops.convert_to_numpy(self.total_steps))}


def learning_rate_schedule(config, total_steps=None):
    """The schedule `config.learning_rate_decay` names: the paper's
    `TransformerSchedule`, or `LinearDecaySchedule` ending at `total_steps`
    (default: `config.train_steps`)."""
    if config.learning_rate_decay == "linear":
        return LinearDecaySchedule(config.d_model, config.warmup_steps,
                                   config.learning_rate_scale, total_steps or config.train_steps)
    return TransformerSchedule(config.d_model, config.warmup_steps, config.learning_rate_scale)


def paper_optimizer(config, schedule=None):
    """Adam with the paper's betas and epsilon from a `TransformerConfig`,
    and `schedule` (default: `learning_rate_schedule(config)`).

    On the TensorFlow backend this is `FusedAdam` (Keras' Adam updating with
    TensorFlow's fused kernel: the same results, faster); on JAX and
    PyTorch, `keras.optimizers.Adam` with the same arguments.
    """
    if keras.backend.backend() == "tensorflow":  # imported here: it imports TensorFlow
        from keras_transformer.training.fused_adam import FusedAdam as adam
    else:
        adam = keras.optimizers.Adam
    return adam(
        learning_rate=schedule or learning_rate_schedule(config),
        beta_1=config.adam_beta_1,
        beta_2=config.adam_beta_2,
        epsilon=config.adam_epsilon,
    )


FINE_TUNING_PEAK = 5e-5
"""Peak learning rate when fine-tuning: a pretrained model is already at a
good minimum, so updates stay about 15 times smaller than the paper's peak
for the base model (7e-4), in the range Hugging Face's translation examples
fine-tune Marian with (2e-5 to 1e-4)."""

FINE_TUNING_WARMUP = 500
"""Warmup steps when fine-tuning: Adam's moments start from zero again, so
a short warmup still protects the pretrained weights from its first,
badly scaled updates."""


def fine_tuning_recipe(config):
    """`config` with the schedule set for fine-tuning: the paper's curve,
    warmup `FINE_TUNING_WARMUP` steps, peaking at `FINE_TUNING_PEAK`, then
    decaying with the inverse square root of the step."""
    scale = FINE_TUNING_PEAK * math.sqrt(config.d_model * FINE_TUNING_WARMUP)
    return config.replace(warmup_steps=FINE_TUNING_WARMUP, learning_rate_scale=scale)
