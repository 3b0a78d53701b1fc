"""A synthetic translation task for checking that a model and its training
learn at all: the target is the source sequence reversed. It needs attention
to positions across the whole source, is fast, and is scored exactly."""

import numpy as np
import tensorflow as tf

from keras_transformer.data.tokenizer import BOS_ID, EOS_ID

REVERSE_VOCAB = 24
"""Ids 4 .. 23 are symbols; 0 to 3 are the usual padding, unknown, start and end."""


def reverse_task(seed, count, min_length=5, max_length=12):
    """A dataset of `count` encoded pairs `(source_ids, target_ids, labels)`,
    ready for `token_batches`; the same seed gives the same pairs."""
    # The symbols are drawn here, up front, and sliced by tf.data: a Python
    # generator (`Dataset.from_generator`) costs a Python call per pair,
    # which made it slower than training the small models that use it.
    rng = np.random.default_rng(seed)
    sources = []
    for _ in range(count):
        length = rng.integers(min_length, max_length + 1)
        sources.append(rng.integers(EOS_ID + 1, REVERSE_VOCAB, length).astype("int32"))
    ragged = tf.RaggedTensor.from_row_lengths(
        np.concatenate(sources) if sources else np.zeros([0], "int32"),
        np.array([len(source) for source in sources], "int64"))

    def pair(source):
        target = tf.reverse(source, [0])
        return (tf.concat([source, [EOS_ID]], 0), tf.concat([[BOS_ID], target], 0),
                tf.concat([target, [EOS_ID]], 0))

    return tf.data.Dataset.from_tensor_slices(ragged).map(pair)


def exact_match(model, batches):
    """Fraction of pairs whose every target token (end included) is the
    argmax of the teacher-forced logits. When all of them are, greedy
    decoding produces exactly the target too."""
    hits = total = 0
    for inputs, labels in batches:
        predicted = np.argmax(model(inputs, training=False), axis=-1)
        labels = labels.numpy()
        rows = np.all((predicted == labels) | (labels == 0), axis=1)
        hits, total = hits + int(rows.sum()), total + len(rows)
    return hits / max(total, 1)
