"""A small training run on this process's Keras backend (KERAS_BACKEND),
with checkpoints every 10 steps in the backend's format, which the resume
test kills part-way and starts again; at the end it saves the weights to
RUN_DIR/weights.npz.

    python -m helpers.resume_job RUN_DIR STEPS [--slow]

The batch of update k is the k-th of one fixed stream (the run starts
reading it at the step it resumes from), so that a killed and resumed run
reads what an uninterrupted one reads; `--slow` sleeps 50 ms after each
update, so that the test can kill it part-way.
"""

import os
import sys
import time

import keras
import numpy as np

from helpers.tasks import VOCAB, reverse_dataset
from keras_transformer.data import token_batches
from keras_transformer.models import BASE, transformer
from keras_transformer.training import backends, paper_optimizer
from keras_transformer.training.checkpoints import latest_step

RUN_DIR, STEPS, SLOW = sys.argv[1], int(sys.argv[2]), "--slow" in sys.argv


class SlowDown(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)


config = BASE.replace(num_encoder_layers=1, num_decoder_layers=1, d_model=16, d_ff=32,
                      num_heads=2, max_length=16)
keras.utils.set_random_seed(0)
backend = backends.current()
strategy = backend.strategy("default")
checkpoint_dir = os.path.join(RUN_DIR, "checkpoints")
start = latest_step(checkpoint_dir)
with backend.scope(strategy):
    model = transformer(config, VOCAB)
    trainer = backend.trainer(model, paper_optimizer(config), strategy, 0.1, 1, False)
checkpoints = backend.checkpoints(checkpoint_dir, trainer, strategy, keep=3, every_steps=10)
batches = token_batches(reverse_dataset(0, 500), 256, 16,
                        fixed_shapes=backend.fixed_shapes(False)).repeat().skip(start)
trainer.train(batches, steps=STEPS, callbacks=[checkpoints] + [SlowDown()] * SLOW,
              steps_per_epoch=10, log_dir=os.path.join(RUN_DIR, "logs"), verbose=0)
np.savez(os.path.join(RUN_DIR, "weights.npz"), *model.get_weights())
print(f"finished at step {trainer.step}")
