"""Learning is real: a small model learns to reverse sequences (a reduced
version of examples/reverse_task.py: shorter sequences, fewer steps)."""

import pytest
import keras

from keras_transformer.data import block_token_batches, token_batches
from keras_transformer.data.synthetic import REVERSE_VOCAB, exact_match, reverse_task
from keras_transformer.models import BASE, transformer
from keras_transformer.training import Trainer, make_strategy, paper_optimizer

pytestmark = pytest.mark.slow  # trains or runs jobs in processes of their own

LENGTHS = dict(min_length=4, max_length=8)
STEPS, TARGET = 800, 0.95
"""Every 100 updates the held-out sequences are scored, and the run stops
at the first score of TARGET or more; STEPS is its cap. With the learning
rate decayed linearly to zero at STEPS, seeds 0-2 end at 0.998 or more on a
2-core AVX2 EPYC (1,600 updates reached 1.000 with and without
ONEDNN_MAX_CPU_ISA=AVX2 on an AVX-512 EPYC; 500 updates 0.968-0.991, too
near the bar). At the paper's inverse square root the run ends at a high
learning rate and its last updates decide: 0.87-1.0, a pass or a failure
hung on the kernels' float rounding (0.87 for seed 0 with oneDNN capped at
AVX2)."""


def test_small_model_learns_to_reverse_sequences(learning_seed):
    keras.utils.set_random_seed(learning_seed)
    config = BASE.replace(num_encoder_layers=2, num_decoder_layers=2, d_model=64, d_ff=256,
                          num_heads=4, dropout=0.0, max_length=16, warmup_steps=200,
                          learning_rate_scale=1.0, learning_rate_decay="linear",
                          train_steps=STEPS)
    strategy = make_strategy("default")
    model = transformer(config, REVERSE_VOCAB)
    trainer = Trainer(model, paper_optimizer(config), strategy, label_smoothing=0.1)
    held_out = token_batches(reverse_task(99, 1000, **LENGTHS), 4096, 16)
    before = exact_match(model, held_out)
    train = block_token_batches(
        reverse_task(learning_seed, 50_000, block_size=1024, **LENGTHS).cache().repeat(), 1024,
        16, shuffle_buffer=5000, seed=learning_seed)
    reached = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: setattr(
        model, "stop_training", logs["exact_match"] >= TARGET))
    scored = lambda trained: {"exact_match": exact_match(trained, held_out)}  # noqa: E731
    history = trainer.train(train, steps=STEPS, steps_per_epoch=100, callbacks=[reached],
                            validators=[scored], verbose=0)
    print(f"exact match on 1000 held-out sequences: {before:.3f} before training, after each "
          "100 updates " + ", ".join(f"{logs['exact_match']:.3f}" for logs in history))
    assert before < 0.01 and history[-1]["exact_match"] >= TARGET
