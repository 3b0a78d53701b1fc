"""Choosing the model width for a time budget from the machine's speed.

A run given minutes rather than days learns most with a model small enough
to make many updates in them (the compute-optimal model shrinks with the
compute). `choose_width` times a training update of each width in turn,
widest first, on this machine and in the run's precision, and takes the
first whose predicted updates in the budget reach `min_updates`, else the
narrowest: a fast machine keeps the preset, a slower one trades width for
updates.

For the demo (small preset, Ding German-English, 15 minutes on 2 cores,
float32 with oneDNN capped at AVX2), d_model 192 (d_ff 768) made more
updates than the preset's 256 and reached a higher chrF on the test
sentences; d_model 128 made more updates still but did no better than 192,
at a higher validation perplexity. The threshold of 3,000 predicted updates
sits between 256 and 192 there (docs/benchmarks-log.md, "Results of the demo").
"""

import time

import keras
import numpy as np

from keras_transformer.names import MIN_UPDATES, WIDTHS


def narrowed(config, width):
    """`config` with `d_model = width` and `d_ff = 4 * width`."""
    return config.replace(d_model=width, d_ff=4 * width)


def random_batch(batch, length, vocab_size, seed=0):
    """Random source ids, target inputs and labels (`batch` x `length`
    int32 arrays, ids from 4 up: no padding or special tokens). (Any
    backend: this module imports TensorFlow only to time its step.)"""
    rng = np.random.default_rng(seed)
    source = rng.integers(4, vocab_size, (batch, length)).astype("int32")
    target = rng.integers(4, vocab_size, (batch, length + 1)).astype("int32")
    return source, target[:, :-1], target[:, 1:]


def synthetic_step(config, vocab_size, batch, length, precision="float32", xla=False, seed=0):
    """One training update of a fresh model of `config` on a fixed random
    batch (`batch` x `length` tokens), as a callable returning the loss:
    the library's `Trainer` step, as training runs it, for timing."""
    # TensorFlow's trainer, imported here: `random_batch` serves the JAX
    # benchmark where TensorFlow is not installed.
    import tensorflow as tf

    from keras_transformer.models import transformer
    from keras_transformer.training.distribution import make_strategy, set_precision
    from keras_transformer.training.schedule import paper_optimizer
    from keras_transformer.training.trainer import Trainer

    source, target_in, labels = random_batch(batch, length, vocab_size, seed)
    previous = keras.config.dtype_policy()
    set_precision(precision)
    try:
        model = transformer(config, vocab_size)
        trainer = Trainer(model, paper_optimizer(config), make_strategy("default"),
                          config.label_smoothing, jit_compile=xla)
    finally:
        keras.config.set_dtype_policy(previous)
    dataset = tf.data.Dataset.from_tensors(
        ({"source_ids": source, "target_ids": target_in}, labels)).repeat()
    iterator = iter(dataset)
    return lambda: float(trainer.train_step(iterator)["loss"])


def update_seconds(config, vocab_size, precision="float32", length=16, repeats=5):
    """Seconds one update of `config.batch_tokens` tokens takes here (the
    median of `repeats`, after two untimed updates that trace the step)."""
    step = synthetic_step(config, vocab_size, max(1, config.batch_tokens // length), length,
                          precision)
    step()
    step()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def choose_width(config, vocab_size, seconds, precision="float32", widths=WIDTHS,
                 min_updates=MIN_UPDATES, report=print):
    """The first of `widths` (widest first) whose measured update time
    predicts at least `min_updates` updates in `seconds`, else the last.

    Returns `(width, table)`, `table` a list of `(width, seconds per
    update, predicted updates)` for the widths timed; `report` gets a line
    for each."""
    table = []
    for width in widths:
        per_update = update_seconds(narrowed(config, width), vocab_size, precision)
        table.append((width, per_update, int(seconds / per_update)))
        report(f"d_model {width}: {per_update * 1000:.0f} ms an update, about "
               f"{table[-1][2]:,} updates in the budget.")
        if table[-1][2] >= min_updates:
            return width, table
    return widths[-1], table
