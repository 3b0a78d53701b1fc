"""Trains a tiny model for a few steps under chosen strategies and saves its
weights; the distribution tests run it in separate processes and compare.

    python -m helpers.distributed_job MODES STEPS INITIAL_WEIGHTS OUTPUT

MODES is "default" (one device), "mirrored" (two logical CPU devices),
"multi_worker" (TF_CONFIG set by the test), or several of them joined by
commas, run one after the other in this process: "default,mirrored" gives
the one-device reference and the two-replica run for one TensorFlow start
(the default strategy uses one of the two logical devices, the same CPU
kernels). INITIAL_WEIGHTS is written by the first run that finds it
missing, so every run starts from the same weights. OUTPUT is the weights
file of a single mode; with several it is a folder that gets MODE.npz for
each.
"""

import os
import sys

import numpy as np

from keras_transformer.training import simulate_cpu_devices

MODES, STEPS, INITIAL, OUTPUT = sys.argv[1].split(","), int(sys.argv[2]), sys.argv[3], sys.argv[4]
devices = simulate_cpu_devices(2) if "mirrored" in MODES else None

import keras  # noqa: E402

from helpers.tasks import VOCAB, reverse_dataset  # noqa: E402
from keras_transformer.data import token_batches  # noqa: E402
from keras_transformer.models import BASE, transformer  # noqa: E402
from keras_transformer.training import Trainer, make_strategy, paper_optimizer  # noqa: E402
from keras_transformer.training.checkpoints import current_step  # noqa: E402

CONFIG = BASE.replace(
    num_encoder_layers=1, num_decoder_layers=1, d_model=32, d_ff=64, num_heads=4,
    dropout=0.0, max_length=16, warmup_steps=10,
)


def train(mode, output):
    keras.utils.set_random_seed(0)
    strategy = make_strategy(mode, devices=devices if mode == "mirrored" else None)
    with strategy.scope():
        model = transformer(CONFIG, VOCAB)
        optimizer = paper_optimizer(CONFIG)
    if not os.path.exists(INITIAL):
        np.savez(INITIAL, *model.get_weights())
    with np.load(INITIAL) as initial:
        model.set_weights([initial[f"arr_{i}"] for i in range(len(initial.files))])
    # Global batches of about 256 tokens, each split evenly between two replicas.
    batches = token_batches(reverse_dataset(7, 400), 256, 16, batch_multiple=2).repeat()
    trainer = Trainer(model, optimizer, strategy, label_smoothing=0.1,
                      accumulation_steps=int(os.environ.get("ACCUMULATION_STEPS", "1")))
    trainer.train(batches, steps=STEPS, steps_per_epoch=STEPS, verbose=0)
    np.savez(output, *model.get_weights())
    print(f"{mode}: {strategy.num_replicas_in_sync} replicas, step {current_step(optimizer)}")


for mode in MODES:
    train(mode, OUTPUT if len(MODES) == 1 else os.path.join(OUTPUT, f"{mode}.npz"))
