"""Trains a tiny model for a few updates on this process's Keras backend
(KERAS_BACKEND), through the pieces `keras-transformer train` takes from it
(`training.backends`), from given initial weights and on the same batches
whatever the backend; saves the weights and each update's loss.

    python -m helpers.backend_training_job MODES STEPS INITIAL OUTPUT

MODES is a strategy of the backend ("default"; "data-parallel" on JAX, over
the local devices, or over the hosts KERAS_DISTRIBUTION_* describe), or
several joined by commas, run one after the other in this process. INITIAL
is the weights file (.npz); the first run that finds it missing writes it.
OUTPUT is the .npz of a single mode (weights `arr_0 ...`, `losses`), or a
folder that gets MODE.npz for each. With ACCUMULATION_STEPS=k in the
environment, updates sum the gradients of k micro-batches.
"""

import os
import sys

import keras
import numpy as np

from helpers.tasks import VOCAB, reverse_dataset
from keras_transformer.data import token_batches
from keras_transformer.models import BASE, transformer
from keras_transformer.training import backends, paper_optimizer

CONFIG = BASE.replace(
    num_encoder_layers=1, num_decoder_layers=1, d_model=32, d_ff=64, num_heads=4,
    dropout=0.0, max_length=16, warmup_steps=10,
)


def batches():
    """Global batches of about 256 tokens, each splitting evenly in two, of
    the few fixed shapes (the same batches on every backend)."""
    return token_batches(reverse_dataset(7, 400), 256, 16, batch_multiple=2,
                         fixed_shapes=True).repeat()


def train(mode, steps, initial, output):
    keras.utils.set_random_seed(0)
    backend = backends.current()
    strategy = backend.strategy(mode)
    with backend.scope(strategy):
        model = transformer(CONFIG, VOCAB)
        optimizer = paper_optimizer(CONFIG)
        trainer = backend.trainer(model, optimizer, strategy, 0.1,
                                  int(os.environ.get("ACCUMULATION_STEPS", "1")), False)
    if not os.path.exists(initial):
        np.savez(initial, *model.get_weights())
    with np.load(initial) as weights:
        model.set_weights([weights[f"arr_{i}"] for i in range(len(weights.files))])
    history = trainer.train(batches(), steps=steps, steps_per_epoch=1, verbose=0)
    if trainer.chief:
        np.savez(output, *model.get_weights(), losses=[logs["loss"] for logs in history])
    print(f"{mode}: {backend.replicas(strategy)} replicas, step {trainer.step}")


if __name__ == "__main__":
    modes, steps, initial, output = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3], \
        sys.argv[4]
    for mode in modes:
        train(mode, steps, initial, output if len(modes) == 1 else os.path.join(output, f"{mode}.npz"))
