"""Tokenizing in Python inside TensorFlow: a function of a batch of strings,
run through `tf.numpy_function`, its lists of ids returned as one ragged
tensor. FSMT's Moses tokenization needs it (no TensorFlow op reproduces
it), and training input uses it for speed (`data.tokenizer.input_tokenizer`).
Such ops call back into the Python process, so a SavedModel cannot hold
them."""

import itertools

import numpy as np
import tensorflow as tf


def python_tokenize(texts, encode, name):
    """Strings `(batch,)` -> ragged int32 ids `(batch, None)`.

    Args:
        texts: a 1-D string tensor.
        encode: a Python function, a list of `bytes` -> a list of id lists
            (one a text).
        name: the op's name.
    """

    def run(batch):
        ids = encode(list(batch.reshape(-1)))
        lengths = np.fromiter(map(len, ids), np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int32, count=int(lengths.sum()))
        return flat, lengths

    flat, lengths = tf.numpy_function(run, [texts], (tf.int32, tf.int64), name=name)
    flat.set_shape([None])
    lengths.set_shape(texts.shape[:1] if texts.shape.rank is not None else [None])
    return tf.RaggedTensor.from_row_lengths(flat, lengths, validate=False)
