"""Training checkpoints: written every N steps or minutes, the last K kept,
restored on restart; and the paper's checkpoint averaging (section 6.1: "the
base models ... averaging the last 5 checkpoints ... big models, the last 20").

A checkpoint holds the model weights and the optimizer state (its step
counter included) as a TensorFlow checkpoint, so that a killed run restarted
with the same command continues from the last one and loses only the steps
since. `tf.train.CheckpointManager` writes each one before it records it, so
a kill during a save leaves the previous checkpoint as the latest.
"""

import json
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.training.distribution import is_chief

HISTORY_FILE = "saved.jsonl"


def current_step(optimizer):
    """The number of updates the optimizer has made, as a Python int (its
    counter may be a distributed variable)."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


class CheckpointCallback(keras.callbacks.Callback):
    """Restores the latest checkpoint when training begins, then saves.

    Args:
        directory: where checkpoints go (`ckpt-<step>.*`). For several
            machines it must be a folder all of them can read.
        model: the model whose weights are saved and restored.
        optimizer: the optimizer whose state is saved and restored.
        strategy: the training strategy; only the chief's checkpoints are
            kept (every worker writes, as collective ops require).
        keep: how many of the newest checkpoints to keep.
        every_steps: save when this many steps have passed since the last
            save (this or `every_minutes`, whichever comes first; at least
            one must be given).
        every_minutes: save when this many minutes have passed since the
            last save.

    Each save is also appended to `<directory>/saved.jsonl` (step, path,
    time), a record that survives the pruning of old checkpoints.
    """

    def __init__(self, directory, model, optimizer, strategy, keep=5, every_steps=None,
                 every_minutes=None):
        super().__init__()
        if not (every_steps or every_minutes):
            raise ValueError("Give every_steps or every_minutes (or both).")
        self.directory = os.fspath(directory)
        self.optimizer = optimizer
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60 if every_minutes else None
        self.chief = is_chief(strategy)
        resolver = getattr(strategy, "cluster_resolver", None)
        write_directory = self.directory
        if not self.chief:
            write_directory = os.path.join(self.directory, f".worker-{resolver.task_id}")
        self._manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model, optimizer=optimizer),
            write_directory,
            max_to_keep=keep,
        )
        # Non-chief workers restore from the chief's folder.
        self._read_manager = self._manager if self.chief else tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model, optimizer=optimizer), self.directory, max_to_keep=None
        )
        self._last_step = 0
        self._last_time = time.monotonic()

    @property
    def step(self):
        return current_step(self.optimizer)

    def on_train_begin(self, logs=None):
        latest = self._read_manager.latest_checkpoint
        if latest:
            self._read_manager.checkpoint.restore(latest).assert_existing_objects_matched()
            print(f"Restored {latest} (step {self.step}).")
        self._last_step = self.step
        self._last_time = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        step = self.step
        due_by_steps = self.every_steps and step - self._last_step >= self.every_steps
        due_by_time = self.every_seconds and time.monotonic() - self._last_time >= self.every_seconds
        if due_by_steps or due_by_time:
            self.save()

    def on_train_end(self, logs=None):
        if self.step != self._last_step:
            self.save()

    def save(self):
        step = self.step
        path = self._manager.save(checkpoint_number=step)
        self._last_step, self._last_time = step, time.monotonic()
        if self.chief:
            with open(os.path.join(self.directory, HISTORY_FILE), "a") as history:
                history.write(json.dumps({"step": step, "path": path, "time": time.time()}) + "\n")
        else:
            shutil.rmtree(self._manager.directory, ignore_errors=True)
        return path


def checkpoint_paths(directory):
    """The kept checkpoints of a run, oldest first."""
    state = tf.train.get_checkpoint_state(os.fspath(directory))
    if state is None:
        raise FileNotFoundError(
            f"No checkpoints in {os.fspath(directory)!r} (no 'checkpoint' index file)."
        )
    return list(state.all_model_checkpoint_paths)


def average_checkpoints(model, paths):
    """Sets `model`'s weights to the mean of the weights in `paths`.

    The paper averages the last 5 (base) or 20 (big) checkpoints before
    decoding. Only the model's weights are read; optimizer state is ignored.

    Raises:
        ValueError: no paths, or a checkpoint that does not fit the model
            (the model's weights are then left unchanged).
    """
    if not paths:
        raise ValueError("No checkpoints to average.")
    checkpoint = tf.train.Checkpoint(model=model)
    original = model.get_weights()
    total = None
    for path in paths:
        try:
            checkpoint.restore(path).expect_partial().assert_existing_objects_matched()
        except (tf.errors.OpError, AssertionError, ValueError) as error:
            model.set_weights(original)
            raise ValueError(f"Cannot read checkpoint {path!r} into this model: {error}") from None
        weights = [w.astype(np.float64) for w in model.get_weights()]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([(t / len(paths)).astype(o.dtype) for t, o in zip(total, original)])
    return model
