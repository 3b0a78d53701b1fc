"""The training steps on PyTorch, on one device (Keras' distribution API
does not reach PyTorch, and its `fit` trains on one device there too).

An update is Keras' own PyTorch step: a forward pass, `backward()` through
the loss of each micro-batch (PyTorch adds the gradients up in `.grad`),
then one optimizer update without autograd.

Imports no TensorFlow.
"""

import keras
import numpy as np
import torch

from keras_transformer.training.loop import SUMS, TrainingLoop
from keras_transformer.training.loss import token_statistics


class TorchTrainer(TrainingLoop):
    """Trains a `Transformer` on the PyTorch backend, on the device Keras
    places it on (a GPU where PyTorch sees one).

    Args:
        model: as for `JaxTrainer`.
        optimizer: as for `JaxTrainer`.
        label_smoothing: eps_ls.
        accumulation_steps: micro-batches per update.
        pad_id: the label id that is padding (default: `model.config.pad_id`).

    As on JAX, "mixed_float16" (loss scaling) is refused (`backends.check`).
    """

    def __init__(self, model, optimizer, label_smoothing=0.1, accumulation_steps=1, pad_id=None):
        self._set_recipe(model, label_smoothing, accumulation_steps, pad_id)
        optimizer.build(model.trainable_variables)
        self.optimizer = optimizer

    @property
    def step(self):
        return int(keras.ops.convert_to_numpy(self.optimizer.iterations))

    @property
    def learning_rate(self):
        return float(keras.ops.convert_to_numpy(self.optimizer.learning_rate))

    def _statistics(self, inputs, labels, training):
        inputs = {name: keras.ops.convert_to_tensor(ids) for name, ids in inputs.items()}
        labels = keras.ops.convert_to_tensor(labels)
        logits = self.model(inputs, training=training)
        return token_statistics(labels, logits, self.label_smoothing, self.pad_id)

    def train_step(self, iterator):
        """One update from the next `accumulation_steps` NumPy micro-batches
        of `iterator`; returns its `SUMS`."""
        batches = [next(iterator) for _ in range(self.accumulation_steps)]
        tokens = max(sum(int(np.count_nonzero(labels != self.pad_id)) for _, labels in batches), 1)
        variables = self.model.trainable_variables
        self.model.zero_grad()
        totals = dict.fromkeys(SUMS, 0.0)
        for inputs, labels in batches:
            stats = self._statistics(inputs, labels, training=True)
            (stats["loss"] / tokens).backward()
            for key in SUMS:
                totals[key] += float(stats[key].detach())
        with torch.no_grad():
            self.optimizer.apply([variable.value.grad for variable in variables], variables)
        return totals

    def _training_iterator(self, dataset):
        return dataset.as_numpy_iterator() if hasattr(dataset, "as_numpy_iterator") \
            else iter(dataset)

    def _evaluation_sums(self, dataset):
        with torch.no_grad():
            for inputs, labels in dataset.as_numpy_iterator():
                stats = self._statistics(inputs, labels, training=False)
                yield {key: float(stats[key]) for key in SUMS}
