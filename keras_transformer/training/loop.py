"""The training loop every backend shares: updates until a step count, Keras
callbacks and Keras' progress bar, validation every N updates, and the logs
(TensorBoard and `metrics.jsonl`).

A backend's trainer (`trainer.Trainer` on `tf.distribute`,
`jax_trainer.JaxTrainer` on JAX with `keras.distribution`,
`torch_trainer.TorchTrainer` on PyTorch) subclasses `TrainingLoop` and
supplies the update and the evaluation of one batch; the loop, the logs and
what a callback sees are the same on all of them.

The loss of an update is the label-smoothed cross-entropy summed over the
real target tokens of the whole global batch (every replica, every
accumulated micro-batch) and divided by their number: with token-based
batches, each token weighs the same however the batch is split.

Importing this module imports neither TensorFlow nor any backend's own
library (the logs import TensorFlow's summary writer when training starts
with a `log_dir`).
"""

import json
import math
import os
import time

import keras
import numpy as np

from keras_transformer.special_ids import PAD_ID

METRICS_FILE = "metrics.jsonl"
SUMS = ("loss", "nll", "correct", "tokens")
"""The statistics a step returns, summed over its real target tokens
(`loss.token_statistics`)."""


class TrainingLoop:
    """`train` and `evaluate` on top of a backend's steps.

    A subclass sets `self.model` and `self.optimizer` and defines:
        `train_step(iterator)`: one update from the micro-batches it takes
            from `iterator`; returns the `SUMS` of the updates it has
            finished since the last call, as Python floats (this one's,
            or, on JAX, the one before: see `pending_sums`).
        `_training_iterator(dataset)`: the iterator `train_step` reads.
        `_evaluation_sums(dataset)`: the `SUMS` of each batch of a finite
            dataset, as dicts of floats.
        `step`: the updates made so far, a Python int.
        `learning_rate`: the rate of the next update, a Python float.
        `chief`: whether this process writes logs (and checkpoints).
    and, where its steps keep the weights outside the Keras variables (JAX),
    `sync()`, which writes them back; the loop calls it before anything
    outside the steps reads the model (validators, the end of training).
    """

    chief = True
    validates_everywhere = False
    """Whether the validators run on every process (JAX across hosts:
    every process must run each computation over the global arrays), their
    metrics logged by the chief; else on the chief alone."""

    def _set_recipe(self, model, label_smoothing, accumulation_steps, pad_id):
        """What every backend's trainer keeps of its arguments (see
        `trainer.Trainer`); `pad_id` None reads `model.config.pad_id`
        (PAD_ID for a model without a `TransformerConfig`)."""
        if accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be >= 1; got {accumulation_steps}.")
        self.model = model
        self.label_smoothing = label_smoothing
        self.accumulation_steps = accumulation_steps
        self.pad_id = (getattr(getattr(model, "config", None), "pad_id", PAD_ID) if pad_id is None
                       else pad_id)

    def sync(self):
        """Makes the model's and the optimizer's variables current."""

    def pending_sums(self):
        """The `SUMS` of updates made that `train_step` has not returned
        yet, as Python floats: `{}` where it returns each update's own (a
        trainer that reads an update's statistics only after dispatching
        the next, as `JaxTrainer` does, returns the last one's here). The
        loop adds them at the end of an epoch, so the epoch's logs count
        every update; within an epoch, the progress bar runs one update
        behind."""
        return {}

    def evaluate(self, dataset):
        """Teacher-forced loss, perplexity and accuracy over a finite dataset."""
        sums = dict.fromkeys(SUMS, 0.0)
        for batch_sums in self._evaluation_sums(dataset):
            for key in SUMS:
                sums[key] += batch_sums[key]
        return averages(sums)

    def train(self, dataset, steps, callbacks=(), steps_per_epoch=100, validation_data=None,
              validators=(), log_dir=None, verbose=1):
        """Runs updates until the optimizer has made `steps` of them.

        Training resumes from the optimizer's step counter, which a
        checkpoint callback restores in `on_train_begin`; a restarted run
        therefore ends at the same step as an uninterrupted one.

        Args:
            dataset: an endless `tf.data.Dataset` of `(inputs, labels)`
                global micro-batches (`token_batches(...).repeat()` or
                `token_batches` of a repeated dataset), which the trainer
                splits between replicas; or, on TensorFlow, a function from
                a `tf.distribute.InputContext` to the dataset of one input
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
                each epoch on the chief (on every process where
                `validates_everywhere`), e.g. `evaluation.BleuValidator`.
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
        step = self.step
        log = _MetricLog(log_dir, step) if log_dir and self.chief else None
        iterator = self._training_iterator(dataset)
        self.model.stop_training = False
        history, logs = [], {}
        while step < steps and not self.model.stop_training:
            epoch = step // steps_per_epoch
            callbacks.on_epoch_begin(epoch)
            sums, started, batch = dict.fromkeys(SUMS, 0.0), time.monotonic(), 0
            epoch_end = min(steps, (epoch + 1) * steps_per_epoch)
            while step < epoch_end and not self.model.stop_training:
                callbacks.on_train_batch_begin(batch)
                _add(sums, self.train_step(iterator))
                step = self.step
                if step == epoch_end:
                    # Validate and log before the batch-end callbacks, so that
                    # a checkpoint of this step never exists without its log.
                    _add(sums, self.pending_sums())
                    logs = self._end_epoch(_logs(sums, started, step, self.learning_rate),
                                           validation_data, validators, log, history)
                else:
                    logs = _logs(sums, started, step, self.learning_rate)
                callbacks.on_train_batch_end(batch, logs)
                batch += 1
            if batch and step != epoch_end:  # stopped early by a callback
                _add(sums, self.pending_sums())
                logs = self._end_epoch(_logs(sums, started, step, self.learning_rate),
                                       validation_data, validators, log, history)
            callbacks.on_epoch_end(epoch, logs)
        self.sync()
        callbacks.on_train_end(logs)
        return history

    def _end_epoch(self, logs, validation_data, validators, log, history):
        if validation_data is not None:
            logs = logs | {f"val_{k}": v for k, v in self.evaluate(validation_data).items()}
        if validators and (self.chief or self.validates_everywhere):
            self.sync()
            for validator in validators:
                logs = logs | validator(self.model)
        if log is not None:
            log.write(logs)
        history.append(logs)
        return logs


def _add(sums, more):
    for key, value in more.items():
        sums[key] += value


def _logs(sums, started, step, learning_rate):
    """What the callbacks see after an update: the epoch's averages so far."""
    return averages(sums) | {
        "learning_rate": learning_rate,
        "step": step,
        "tokens_per_second": sums["tokens"] / (time.monotonic() - started),
    }


def averages(sums):
    """Loss, perplexity and accuracy per real token from summed `SUMS`."""
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
        import tensorflow as tf  # the summary writer; on JAX and PyTorch, on the CPU

        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, METRICS_FILE)
        if os.path.exists(self.path):
            with open(self.path) as lines:
                kept = [line for line in lines if json.loads(line)["step"] <= start_step]
            with open(self.path, "w") as lines:
                lines.writelines(kept)
        self.summary = tf.summary
        self.writer = tf.summary.create_file_writer(directory)

    def write(self, logs):
        with self.writer.as_default():
            for key, value in logs.items():
                if key != "step" and np.isscalar(value):
                    self.summary.scalar(key, value, step=logs["step"])
        self.writer.flush()
        with open(self.path, "a") as lines:
            lines.write(json.dumps({k: float(v) for k, v in logs.items()} | {"time": time.time()}) + "\n")
