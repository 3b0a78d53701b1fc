"""The training loop on any `tf.distribute` strategy: the paper's loss and
optimiser, with gradient accumulation, mixed precision and XLA.

One custom loop serves every strategy. Keras 3's `fit` cannot run under
`MultiWorkerMirroredStrategy` (it fails while building the model from the
first distributed batch; keras-team/keras#20585, reproduced with Keras 3.15
and TensorFlow 2.21), and one loop keeps one-device, multi-GPU and
multi-machine runs identical. The loop itself (`loop.TrainingLoop`, shared
with the JAX and PyTorch trainers) drives Keras callbacks and Keras'
progress bar; this module holds TensorFlow's steps.
"""

import keras
import tensorflow as tf

from keras_transformer.training.checkpoints import current_step
from keras_transformer.training.distribution import is_chief
from keras_transformer.training.loop import SUMS, TrainingLoop
from keras_transformer.training.loss import token_statistics


class Trainer(TrainingLoop):
    """Trains a `Transformer` (or any model with `{source_ids, target_ids}`
    inputs and logits output) on batches from `keras_transformer.data`.

    Args:
        model: the model, created inside `strategy.scope()`.
        optimizer: its optimizer, created inside `strategy.scope()`.
        strategy: a `tf.distribute.Strategy` (see `make_strategy`).
        label_smoothing: eps_ls.
        accumulation_steps: micro-batches per update; the update uses their
            summed gradient, so a run on fewer devices can match a larger
            effective batch (the paper's 25,000 tokens per side on 8 GPUs).
        jit_compile: compile the per-replica step with XLA.
        pad_id: the label id that is padding (default: `model.config.pad_id`,
            or 0 for a model without a `TransformerConfig`).

    Under the "mixed_float16" policy the optimizer is wrapped in a
    `keras.optimizers.LossScaleOptimizer` (dynamic loss scaling).
    """

    def __init__(self, model, optimizer, strategy, label_smoothing=0.1, accumulation_steps=1,
                 jit_compile=False, pad_id=None):
        self._set_recipe(model, label_smoothing, accumulation_steps, pad_id)
        self.strategy = strategy
        with strategy.scope():
            if keras.config.dtype_policy().name == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)
        self.optimizer = optimizer
        # No autograph: the steps' loops run over Python ranges and tuples and
        # the model branches on settings, not tensors, so its rewriting of every
        # function a trace reaches changed nothing and cost time at every
        # trace: a small run's training was slower with it.
        self._compute = tf.function(self._gradients_and_statistics, jit_compile=jit_compile,
                                    autograph=False)
        # One update from an iterator over the distributed dataset; returns the
        # sums of `loss`, `nll`, `correct` and `tokens` over the update.
        self._train_step = tf.function(self._distributed_train_step, autograph=False)
        # Validation batches come in many shapes; one general trace serves them.
        self._eval_step = tf.function(self._distributed_eval_step, reduce_retracing=True,
                                      autograph=False)

    # ---------------------------------------------------------------- steps

    def _statistics(self, labels, logits):
        # Not compiled apart with XLA: with its gradient written out the loss
        # is a few element-wise passes over the logits, and a step of one
        # shape took as long with it compiled (base model, 37,000-token
        # vocabulary, 32 x 64 tokens, on CPU), while every new batch shape
        # (about 650 on Ding) paid a compile, so a run on Ding's batches
        # took longer with it than without.
        return token_statistics(labels, logits, self.label_smoothing, self.pad_id)

    def _gradients_and_statistics(self, inputs, labels, global_tokens):
        with tf.GradientTape() as tape:
            logits = self.model(inputs, training=True)
            stats = self._statistics(labels, logits)
            loss = self.optimizer.scale_loss(stats["loss"] / global_tokens)
        return tape.gradient(loss, self.model.trainable_variables), stats

    def _replica_train_step(self, batches):
        local_tokens = tf.add_n(
            [tf.reduce_sum(tf.cast(labels != self.pad_id, tf.float32)) for _, labels in batches]
        )
        context = tf.distribute.get_replica_context()
        global_tokens = tf.maximum(context.all_reduce("sum", local_tokens), 1.0)
        gradients, totals = None, None
        for inputs, labels in batches:
            grads, stats = self._compute(inputs, labels, global_tokens)
            if gradients is None:
                gradients, totals = grads, stats
            else:  # sparse embedding gradients are summed as dense ones
                gradients = [tf.convert_to_tensor(a) + tf.convert_to_tensor(b)
                             for a, b in zip(gradients, grads)]
                totals = {k: totals[k] + stats[k] for k in SUMS}
        self.optimizer.apply(gradients, self.model.trainable_variables)
        return totals

    def _distributed_train_step(self, iterator):
        batches = tuple(next(iterator) for _ in range(self.accumulation_steps))
        totals = self.strategy.run(self._replica_train_step, args=(batches,))
        return {k: self.strategy.reduce("sum", v, axis=None) for k, v in totals.items()}

    def _replica_eval_step(self, inputs, labels):
        return self._statistics(labels, self.model(inputs, training=False))

    def _distributed_eval_step(self, batch):
        totals = self.strategy.run(self._replica_eval_step, args=batch)
        return {k: self.strategy.reduce("sum", v, axis=None) for k, v in totals.items()}

    # ------------------------------------------------- what the loop reads

    @property
    def step(self):
        return current_step(self.optimizer)

    @property
    def learning_rate(self):
        return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))

    @property
    def chief(self):
        return is_chief(self.strategy)

    def train_step(self, iterator):
        return {key: float(value) for key, value in self._train_step(iterator).items()}

    def _training_iterator(self, dataset):
        if callable(dataset):
            return iter(self.strategy.distribute_datasets_from_function(dataset))
        return iter(self.strategy.experimental_distribute_dataset(dataset))

    def _evaluation_sums(self, dataset):
        for batch in self.strategy.experimental_distribute_dataset(dataset):
            yield {key: float(value) for key, value in self._eval_step(batch).items()}
