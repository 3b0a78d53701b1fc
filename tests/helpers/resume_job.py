"""A small training run with checkpoints every 10 steps, slowed down so that
the resume test can kill it part-way.

    python -m helpers.resume_job RUN_DIR STEPS
"""

import os
import sys
import time

import keras

from helpers.tasks import VOCAB, reverse_dataset
from keras_transformer.data import token_batches
from keras_transformer.models import BASE, transformer
from keras_transformer.training import CheckpointCallback, Trainer, make_strategy, paper_optimizer
from keras_transformer.training.checkpoints import current_step

RUN_DIR, STEPS = sys.argv[1], int(sys.argv[2])


class SlowDown(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.05)


config = BASE.replace(num_encoder_layers=1, num_decoder_layers=1, d_model=16, d_ff=32,
                      num_heads=2, max_length=16)
strategy = make_strategy("default")
with strategy.scope():
    model = transformer(config, VOCAB)
    optimizer = paper_optimizer(config)
trainer = Trainer(model, optimizer, strategy)
checkpoints = CheckpointCallback(os.path.join(RUN_DIR, "checkpoints"), model, trainer.optimizer,
                                 strategy, keep=3, every_steps=10)
batches = token_batches(reverse_dataset(0, 500), 256, 16).repeat()
trainer.train(batches, steps=STEPS, callbacks=[checkpoints, SlowDown()], steps_per_epoch=10,
              log_dir=os.path.join(RUN_DIR, "logs"), verbose=0)
print(f"finished at step {current_step(trainer.optimizer)}")
