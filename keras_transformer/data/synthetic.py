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

    def examples():
        rng = np.random.default_rng(seed)
        for _ in range(count):
            length = rng.integers(min_length, max_length + 1)
            source = rng.integers(EOS_ID + 1, REVERSE_VOCAB, length).astype("int32")
            target = source[::-1]
            yield (np.append(source, EOS_ID).astype("int32"),
                   np.insert(target, 0, BOS_ID).astype("int32"),
                   np.append(target, EOS_ID).astype("int32"))

    spec = tf.TensorSpec([None], tf.int32)
    return tf.data.Dataset.from_generator(examples, output_signature=(spec, spec, spec))


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
