"""A synthetic translation task for checking that a model and its training
learn at all: the target is the source sequence reversed. It needs attention
to positions across the whole source, is fast, and is scored exactly."""

import numpy as np
import tensorflow as tf

from keras_transformer.data.tokenizer import BOS_ID, EOS_ID

REVERSE_VOCAB = 24
"""Ids 4 .. 23 are symbols; 0 to 3 are the usual padding, unknown, start and end."""


def reverse_task(seed, count, min_length=5, max_length=12, block_size=None):
    """A dataset of `count` encoded pairs `(source_ids, target_ids, labels)`,
    the same pairs for the same seed: one by one, for `token_batches`, or
    with `block_size` in ragged blocks of that many pairs, for
    `block_token_batches`, which batches them several times more cheaply."""
    # The pairs are made here, up front, with NumPy, and tf.data only slices
    # them: it runs a function per element at a cost of microseconds an op,
    # so batching the pairs one at a time took a noticeable share of the CPU
    # time of the small model's training they fed; in blocks it takes
    # several times less.
    rng = np.random.default_rng(seed)
    sources = []
    for _ in range(count):
        length = rng.integers(min_length, max_length + 1)
        sources.append(rng.integers(EOS_ID + 1, REVERSE_VOCAB, length).astype("int32"))
    row_lengths = np.array([len(source) + 1 for source in sources], "int64")

    def ragged(rows):
        values = np.concatenate(rows).astype("int32") if rows else np.zeros([0], "int32")
        return tf.RaggedTensor.from_row_lengths(values, row_lengths)

    pairs = tf.data.Dataset.from_tensor_slices((
        ragged([np.append(source, EOS_ID) for source in sources]),
        ragged([np.insert(source[::-1], 0, BOS_ID) for source in sources]),
        ragged([np.append(source[::-1], EOS_ID) for source in sources])))
    if block_size:
        return pairs.batch(block_size)
    # A slice of a ragged tensor comes typed as ragged, which `padded_batch`
    # refuses; `tf.identity` gives the same values typed as a tensor.
    return pairs.map(lambda *pair: tuple(tf.identity(ids) for ids in pair))


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
