"""Training checkpoints: written every N steps or minutes, the last K kept,
restored on restart; and the paper's checkpoint averaging (section 6.1: "the
base models ... averaging the last 5 checkpoints ... big models, the last 20").

A checkpoint holds the model's variables and the optimizer's (its step
counter included), so that a killed run restarted with the same command
continues from the last one and loses only the steps since. It comes in the
backend's format:
- on TensorFlow, a TensorFlow checkpoint (`CheckpointCallback`), which
  holds `tf.distribute` variables of any strategy, written by
  `tf.train.CheckpointManager`;
- on JAX and PyTorch, one safetensors file a checkpoint,
  `ckpt-<step>.safetensors` (`SafetensorsCheckpoints`): the model's weights,
  its other variables (dropout's seeds) and the optimizer's, in their order,
  written under a temporary name and renamed into place.
Either way a kill during a save leaves the previous checkpoint as the
latest, `saved.jsonl` records every save, and `checkpoint_paths` and
`average_checkpoints` read the run's checkpoints on TensorFlow whichever
backend trained it (as `keras-transformer average` does).
"""

import json
import os
import re
import shutil
import time

import keras
import numpy as np

HISTORY_FILE = "saved.jsonl"
SAFETENSORS_SUFFIX = ".safetensors"
_SAFETENSORS_NAME = re.compile(r"ckpt-(\d+)\.safetensors$")


def current_step(optimizer):
    """The number of updates the optimizer has made, as a Python int (its
    counter may be a distributed variable)."""
    return int(keras.ops.convert_to_numpy(optimizer.iterations))


class _Saving(keras.callbacks.Callback):
    """When to save (shared by both formats): restores the latest checkpoint
    when training begins, saves when `every_steps` steps or `every_minutes`
    minutes have passed since the last save (whichever comes first; at least
    one must be given) and when training ends; each save is appended to
    `<directory>/saved.jsonl` (step, path, time), a record that survives
    the pruning of old checkpoints, by the chief alone."""

    def __init__(self, directory, keep, every_steps, every_minutes, chief):
        super().__init__()
        if not (every_steps or every_minutes):
            raise ValueError("Give every_steps or every_minutes (or both).")
        self.directory = os.fspath(directory)
        self.keep = keep
        self.every_steps = every_steps
        self.every_seconds = every_minutes * 60 if every_minutes else None
        self.chief = chief
        self._last_step = 0
        self._last_time = time.monotonic()

    def on_train_begin(self, logs=None):
        latest = self._restore_latest()
        if latest:
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
        path = self._write(step)
        self._last_step, self._last_time = step, time.monotonic()
        if self.chief:
            with open(os.path.join(self.directory, HISTORY_FILE), "a") as history:
                history.write(json.dumps({"step": step, "path": path, "time": time.time()}) + "\n")
        return path


class CheckpointCallback(_Saving):
    """TensorFlow checkpoints of a `tf.distribute` run (see the module
    docstring for when it saves).

    Args:
        directory: where checkpoints go (`ckpt-<step>.*`). For several
            machines it must be a folder all of them can read.
        model: the model whose weights are saved and restored.
        optimizer: the optimizer whose state is saved and restored.
        strategy: the training strategy; only the chief's checkpoints are
            kept (every worker writes, as collective ops require).
        keep: how many of the newest checkpoints to keep.
        every_steps: save every this many updates (or None).
        every_minutes: save every this many minutes (or None).
    """

    def __init__(self, directory, model, optimizer, strategy, keep=5, every_steps=None,
                 every_minutes=None):
        # TensorFlow's, imported here: the module serves JAX and PyTorch runs too.
        import tensorflow as tf

        from keras_transformer.training.distribution import is_chief

        super().__init__(directory, keep, every_steps, every_minutes, is_chief(strategy))
        self.optimizer = optimizer
        resolver = getattr(strategy, "cluster_resolver", None)
        write_directory = self.directory
        if not self.chief:
            write_directory = os.path.join(self.directory, f".worker-{resolver.task_id}")
        # The model's checkpoint leaves out its seed generators' states; they
        # are saved beside it, so that a resumed run draws the dropout masks
        # an uninterrupted one would (a checkpoint without them, written
        # before they were added, still restores the rest).
        seeds = {str(index): variable for index, variable in enumerate(_seed_states(model))}
        self._manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model, optimizer=optimizer, seeds=seeds),
            write_directory,
            max_to_keep=keep,
        )
        # Non-chief workers restore from the chief's folder.
        self._read_manager = self._manager if self.chief else tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model, optimizer=optimizer, seeds=seeds), self.directory,
            max_to_keep=None
        )

    @property
    def step(self):
        return current_step(self.optimizer)

    def _restore_latest(self):
        latest = self._read_manager.latest_checkpoint
        if latest:
            self._read_manager.checkpoint.restore(latest).assert_existing_objects_matched()
        return latest

    def _write(self, step):
        path = self._manager.save(checkpoint_number=step)
        if not self.chief:
            shutil.rmtree(self._manager.directory, ignore_errors=True)
        return path


class SafetensorsCheckpoints(_Saving):
    """Safetensors checkpoints of a run on JAX or PyTorch (see the module
    docstring for when it saves).

    Args:
        directory: where checkpoints go (`ckpt-<step>.safetensors`); on
            several hosts a folder all of them can read (only the chief
            writes).
        trainer: the `JaxTrainer` or `TorchTrainer` whose model and
            optimizer are saved and restored.
        keep: how many of the newest checkpoints to keep.
        every_steps: save every this many updates (or None).
        every_minutes: save every this many minutes (or None).
    """

    def __init__(self, directory, trainer, keep=5, every_steps=None, every_minutes=None):
        super().__init__(directory, keep, every_steps, every_minutes, trainer.chief)
        self.trainer = trainer

    @property
    def step(self):
        return self.trainer.step

    def _groups(self):
        model, optimizer = self.trainer.model, self.trainer.optimizer
        return {"weights": model.weights, "state": _seed_states(model),
                "optimizer": optimizer.variables}

    def _restore_latest(self):
        paths = _safetensors_paths(self.directory)
        if not paths:
            return None
        arrays = read_safetensors_checkpoint(paths[-1])
        groups = self._groups()
        for group, variables in groups.items():
            stored = [key for key in arrays if key.startswith(group + "/")]
            shapes = [tuple(arrays[f"{group}/{i}"].shape) if f"{group}/{i}" in arrays else None
                      for i in range(len(variables))]
            if len(stored) != len(variables) or shapes != [tuple(v.shape) for v in variables]:
                raise ValueError(f"The checkpoint {paths[-1]} does not fit this model and "
                                 "optimizer (other variables or shapes); use a new --output "
                                 "folder or the options of that run.")
        self.trainer.sync()
        for group, variables in groups.items():
            for index, variable in enumerate(variables):
                variable.assign(arrays[f"{group}/{index}"])
        return paths[-1]

    def _write(self, step):
        from safetensors.numpy import save_file

        self.trainer.sync()
        path = os.path.join(self.directory, f"ckpt-{step}{SAFETENSORS_SUFFIX}")
        if not self.chief:
            return path
        arrays = {f"{group}/{index}": _to_numpy(variable)
                  for group, variables in self._groups().items()
                  for index, variable in enumerate(variables)}
        os.makedirs(self.directory, exist_ok=True)
        partial = path + ".partial"
        save_file(arrays, partial, metadata={"step": str(step)})
        os.replace(partial, path)
        for old in _safetensors_paths(self.directory)[:-self.keep]:
            os.remove(old)
        return path


def _to_numpy(variable):
    """A variable's value as a NumPy array; on JAX, from this process's copy
    (a replicated variable of a multi-host run is whole on every device)."""
    value = variable.value
    if hasattr(value, "addressable_data"):
        return np.asarray(value.addressable_data(0))
    return keras.ops.convert_to_numpy(value)


def read_safetensors_checkpoint(path):
    """The arrays of a safetensors checkpoint, with a one-line error for a
    damaged file."""
    from safetensors.numpy import load_file

    try:
        return load_file(path)
    except Exception as error:  # safetensors raises its own error types for damaged files
        raise ValueError(f"Cannot read the checkpoint {path} ({error}); it is damaged: delete "
                         "it to resume from the one before, or use a new --output folder.") \
            from None


def _seed_states(model):
    """The model's variables that are not weights: its dropout layers'
    seed generators' states, which a resumed run needs to draw the masks
    an uninterrupted one would."""
    weights = {id(variable) for variable in model.weights}
    return [variable for variable in model.variables if id(variable) not in weights]


def _safetensors_paths(directory):
    """The safetensors checkpoints in `directory`, oldest (lowest step) first."""
    if not os.path.isdir(directory):
        return []
    found = [(int(match.group(1)), name) for name in os.listdir(directory)
             if (match := _SAFETENSORS_NAME.match(name))]
    return [os.path.join(directory, name) for _, name in sorted(found)]


def _safetensors_only(directory):
    """The safetensors checkpoints of a local `directory` that has no
    TensorFlow checkpoint index, found without importing TensorFlow (a JAX
    run on a machine without it); else None."""
    paths = _safetensors_paths(directory)
    if paths and not os.path.exists(os.path.join(directory, "checkpoint")):
        return paths
    return None


def checkpoint_paths(directory):
    """The kept checkpoints of a run, oldest first (either format)."""
    directory = os.fspath(directory)
    if (paths := _safetensors_only(directory)) is not None:
        return paths
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(directory)
    if state is not None:
        return list(state.all_model_checkpoint_paths)
    paths = _safetensors_paths(directory)
    if not paths:
        raise FileNotFoundError(
            f"No checkpoints in {directory!r} (neither a 'checkpoint' index file nor "
            "ckpt-*.safetensors files)."
        )
    return paths


def checkpoint_format(directory):
    """"tensorflow" or "safetensors", the format of the checkpoints kept in
    `directory`, or None where there are none."""
    directory = os.fspath(directory)
    if _safetensors_only(directory) is not None:
        return "safetensors"
    import tensorflow as tf

    if tf.train.get_checkpoint_state(directory) is not None:
        return "tensorflow"
    return "safetensors" if _safetensors_paths(directory) else None


def latest_step(directory):
    """The update count of a run's latest checkpoint (0 when there is none).

    Under `mixed_float16` the optimizer is a `LossScaleOptimizer` whose own
    counter stays at 0 while its inner optimizer's counts the updates, so
    take the largest iteration counter in a TensorFlow checkpoint."""
    paths = _safetensors_paths(directory)
    if paths:
        return int(_SAFETENSORS_NAME.search(paths[-1]).group(1))
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(directory)
    if latest is None:
        return 0
    try:
        counters = [name for name, _ in tf.train.list_variables(latest)
                    if name.startswith("optimizer/") and "_iterations/" in name]
        return max(int(tf.train.load_variable(latest, name)) for name in counters)
    except Exception as error:  # TensorFlow's reader raises many types for a damaged file
        message = getattr(error, "message", None) or str(error) or type(error).__name__
        raise ValueError(f"Cannot resume from the checkpoint {latest} ({message.splitlines()[0]}); "
                         f"it is damaged: delete its files, and its lines in "
                         f"{directory}/checkpoint, to resume from the one before, or use a "
                         "new --output folder.") from None


def average_checkpoints(model, paths):
    """Sets `model`'s weights to the mean of the weights in `paths`
    (TensorFlow checkpoints, read on the TensorFlow backend, or safetensors
    checkpoints, read on any).

    The paper averages the last 5 (base) or 20 (big) checkpoints before
    decoding. Only the model's weights are read; optimizer state is ignored.

    Raises:
        ValueError: no paths, or a checkpoint that does not fit the model
            (the model's weights are then left unchanged).
    """
    import tensorflow as tf

    if not paths:
        raise ValueError("No checkpoints to average.")
    original = model.get_weights()
    total = None
    for path in paths:
        try:
            weights = _checkpoint_weights(model, path, original)
        except (tf.errors.OpError, AssertionError, ValueError) as error:
            model.set_weights(original)
            raise ValueError(f"Cannot read checkpoint {path!r} into this model: {error}") from None
        weights = [w.astype(np.float64) for w in weights]
        total = weights if total is None else [t + w for t, w in zip(total, weights)]
    model.set_weights([(t / len(paths)).astype(o.dtype) for t, o in zip(total, original)])
    return model


def _checkpoint_weights(model, path, original):
    """The model weights stored in one checkpoint, in `model.get_weights()` order."""
    if os.fspath(path).endswith(SAFETENSORS_SUFFIX):
        arrays = read_safetensors_checkpoint(path)
        weights = [arrays.get(f"weights/{index}") for index in range(len(original))]
        if any(w is None or w.shape != o.shape for w, o in zip(weights, original)) or \
                f"weights/{len(original)}" in arrays:
            raise ValueError("its weights have other shapes or another count")
        return weights
    if keras.backend.backend() != "tensorflow":
        raise ValueError("TensorFlow checkpoints are read on the TensorFlow backend; run this "
                         "with KERAS_BACKEND=tensorflow")
    import tensorflow as tf

    tf.train.Checkpoint(model=model).restore(path).expect_partial().assert_existing_objects_matched()
    return model.get_weights()
