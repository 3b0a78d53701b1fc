"""The training loop: the paper's loss and optimiser on any `tf.distribute`
strategy, with gradient accumulation, mixed precision and XLA.

One custom loop serves every strategy. Keras 3's `fit` cannot run under
`MultiWorkerMirroredStrategy` (it fails while building the model from the
first distributed batch; keras-team/keras#20585, reproduced with Keras 3.15
and TensorFlow 2.21), and one loop keeps one-device, multi-GPU and
multi-machine runs identical. The loop still drives Keras callbacks
(`keras.callbacks.CallbackList`, with Keras' progress bar).

The loss of an update is the label-smoothed cross-entropy summed over the
real target tokens of the whole global batch (every replica, every
accumulated micro-batch) and divided by their number: with token-based
batches, each token weighs the same however the batch is split.
"""

import json
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.models import PAD_ID
from keras_transformer.training.distribution import is_chief
from keras_transformer.training.checkpoints import current_step
from keras_transformer.training.loss import token_statistics

METRICS_FILE = "metrics.jsonl"
_SUMS = ("loss", "nll", "correct", "tokens")


class Trainer:
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
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1; got {accumulation_steps}.")
        self.model = model
        self.strategy = strategy
        self.label_smoothing = label_smoothing
        self.accumulation_steps = accumulation_steps
        if pad_id is None:
            pad_id = getattr(getattr(model, "config", None), "pad_id", PAD_ID)
        self.pad_id = pad_id
        with strategy.scope():
            if keras.config.dtype_policy().name == "mixed_float16" and not isinstance(
                optimizer, keras.optimizers.LossScaleOptimizer
            ):
                optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
            optimizer.build(model.trainable_variables)
        self.optimizer = optimizer
        statistics = lambda labels, logits: token_statistics(  # noqa: E731
            labels, logits, label_smoothing, pad_id)
        # The loss reads the (batch, length, vocabulary) logits several times;
        # XLA fuses those passes (a 20% faster base-model step on CPU, see
        # benchmarks/train_throughput.py) while the matmuls stay on the
        # backend's own kernels. With `jit_compile` the whole step is compiled
        # and a nested compiled function would only slow it down.
        self._statistics = statistics if jit_compile else tf.function(statistics, jit_compile=True)
        self._compute = tf.function(self._gradients_and_statistics, jit_compile=jit_compile)
        # One update from an iterator over the distributed dataset; returns the
        # sums of `loss`, `nll`, `correct` and `tokens` over the update.
        self.train_step = tf.function(self._distributed_train_step)
        # Validation batches come in many shapes; one general trace serves them.
        self._eval_step = tf.function(self._distributed_eval_step, reduce_retracing=True)

    # ---------------------------------------------------------------- steps

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
                totals = {k: totals[k] + stats[k] for k in _SUMS}
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

    # ----------------------------------------------------------------- loops

    def evaluate(self, dataset):
        """Teacher-forced loss, perplexity and accuracy over a finite dataset."""
        sums = dict.fromkeys(_SUMS, 0.0)
        for batch in self.strategy.experimental_distribute_dataset(dataset):
            for key, value in self._eval_step(batch).items():
                sums[key] += float(value)
        return _averages(sums)

    def train(self, dataset, steps, callbacks=(), steps_per_epoch=100, validation_data=None,
              validators=(), log_dir=None, verbose=1):
        """Runs updates until the optimizer has made `steps` of them.

        Training resumes from the optimizer's step counter, which a
        `CheckpointCallback` restores in `on_train_begin`; a restarted run
        therefore ends at the same step as an uninterrupted one.

        Args:
            dataset: an endless `tf.data.Dataset` of `(inputs, labels)`
                global micro-batches (`token_batches(...).repeat()` or
                `token_batches` of a repeated dataset), which the strategy
                splits between replicas; or a function from a
                `tf.distribute.InputContext` to the dataset of one input
                pipeline (a worker), whose elements are per-replica
                micro-batches (`strategy.distribute_datasets_from_function`;
                `PreparedCorpus.training_input` makes one).
            steps: total number of updates.
            callbacks: Keras callbacks; they see epoch-to-date `loss`
                (label-smoothed), `perplexity`, `accuracy`, and
                `learning_rate`, `step`, `tokens_per_second`; at the end of an
                epoch also `val_*` from `validation_data`.
            steps_per_epoch: updates between validations (an "epoch" here is
                that many updates, not a pass over the data).
            validation_data: a finite dataset for `evaluate`.
            validators: callables `model -> dict of metrics` run at the end of
                each epoch on the chief, e.g. `evaluation.BleuValidator`.
            log_dir: if given, the chief writes TensorBoard scalars and
                `metrics.jsonl` (one line per epoch and per validation) there.
            verbose: 1 for Keras' progress bar, 0 for none.

        Returns:
            The list of logs written at the end of each epoch.
        """
        epochs = math.ceil(steps / steps_per_epoch)
        callbacks = keras.callbacks.CallbackList(
            list(callbacks), add_progbar=verbose > 0, model=self.model, verbose=verbose,
            epochs=epochs, steps=steps_per_epoch,
        )
        callbacks.on_train_begin()
        step = current_step(self.optimizer)
        log = _MetricLog(log_dir, step) if log_dir and is_chief(self.strategy) else None
        if callable(dataset):
            distributed = self.strategy.distribute_datasets_from_function(dataset)
        else:
            distributed = self.strategy.experimental_distribute_dataset(dataset)
        iterator = iter(distributed)
        self.model.stop_training = False
        history, logs = [], {}
        while step < steps and not self.model.stop_training:
            epoch = step // steps_per_epoch
            callbacks.on_epoch_begin(epoch)
            sums, started, batch = dict.fromkeys(_SUMS, 0.0), time.monotonic(), 0
            epoch_end = min(steps, (epoch + 1) * steps_per_epoch)
            while step < epoch_end and not self.model.stop_training:
                callbacks.on_train_batch_begin(batch)
                for key, value in self.train_step(iterator).items():
                    sums[key] += float(value)
                step = current_step(self.optimizer)
                logs = _averages(sums) | {
                    "learning_rate": float(keras.ops.convert_to_numpy(self.optimizer.learning_rate)),
                    "step": step,
                    "tokens_per_second": sums["tokens"] / (time.monotonic() - started),
                }
                if step == epoch_end:
                    # Validate and log before the batch-end callbacks, so that
                    # a checkpoint of this step never exists without its log.
                    logs = self._end_epoch(logs, validation_data, validators, log, history)
                callbacks.on_train_batch_end(batch, logs)
                batch += 1
            if batch and step != epoch_end:  # stopped early by a callback
                logs = self._end_epoch(logs, validation_data, validators, log, history)
            callbacks.on_epoch_end(epoch, logs)
        callbacks.on_train_end(logs)
        return history


    def _end_epoch(self, logs, validation_data, validators, log, history):
        if validation_data is not None:
            logs = logs | {f"val_{k}": v for k, v in self.evaluate(validation_data).items()}
        if is_chief(self.strategy):
            for validator in validators:
                logs = logs | validator(self.model)
        if log is not None:
            log.write(logs)
        history.append(logs)
        return logs


def _averages(sums):
    tokens = max(sums["tokens"], 1.0)
    return {
        "loss": sums["loss"] / tokens,
        "perplexity": math.exp(min(sums["nll"] / tokens, 50.0)),
        "accuracy": sums["correct"] / tokens,
    }


class _MetricLog:
    """TensorBoard scalars and a JSON-lines file of the logs, per epoch.

    On a resumed run, lines for steps after the restored step (written by the
    killed run after its last checkpoint) are dropped, so the file never holds
    a step twice.
    """

    def __init__(self, directory, start_step):
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, METRICS_FILE)
        if os.path.exists(self.path):
            with open(self.path) as lines:
                kept = [line for line in lines if json.loads(line)["step"] <= start_step]
            with open(self.path, "w") as lines:
                lines.writelines(kept)
        self.writer = tf.summary.create_file_writer(directory)

    def write(self, logs):
        with self.writer.as_default():
            for key, value in logs.items():
                if key != "step" and np.isscalar(value):
                    tf.summary.scalar(key, value, step=logs["step"])
        self.writer.flush()
        with open(self.path, "a") as lines:
            lines.write(json.dumps({k: float(v) for k, v in logs.items()} | {"time": time.time()}) + "\n")
