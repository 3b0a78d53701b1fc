"""Trains a tiny model for a few steps under a chosen strategy and saves its
weights; the distribution tests run it in separate processes and compare.

    python -m helpers.distributed_job MODE STEPS INITIAL_WEIGHTS OUTPUT

MODE is "default", "mirrored" (two logical CPU devices) or "multi_worker"
(TF_CONFIG set by the test). INITIAL_WEIGHTS is written by the first run that
finds it missing, so every run starts from the same weights.
"""

import os
import sys

import numpy as np

from keras_transformer.training import simulate_cpu_devices

MODE, STEPS, INITIAL, OUTPUT = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
devices = simulate_cpu_devices(2) if MODE == "mirrored" else None

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

keras.utils.set_random_seed(0)
strategy = make_strategy(MODE, devices=devices)
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
np.savez(OUTPUT, *model.get_weights())
print(f"{MODE}: {strategy.num_replicas_in_sync} replicas, step {current_step(optimizer)}")
