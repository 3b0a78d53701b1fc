"""From string pairs to padded, length-bucketed batches of about N tokens
(paper section 5.1: "sentence pairs were batched together by approximate
sequence length; each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens").

Pairs are grouped by their source length and their target length together
(`tf.data.Dataset.group_by_window` with a two-dimensional bucket key), not by
the longer of the two as `bucket_by_sequence_length` would: when the two
languages' lengths differ, as in a dictionary, one key padded both sides to
the longer one and wasted about half of every batch.
"""

import dataclasses

import tensorflow as tf

from keras_transformer.data.tokenizer import clean_texts


def encode_pairs(pairs, tokenizer):
    """`(source, target)` strings -> `(source_ids, target_ids, labels)`.

    `source_ids` is the source and an end id; `target_ids` (the decoder
    input) is a start id and the target; `labels` is the target and an end id
    (the tokenizer's special ids). Bytes that are not UTF-8 become U+FFFD,
    NUL a space (`clean_texts`), as in translation. `pairs` may also be
    batched (`(batch,)` strings): the ids are then ragged `(batch, None)`,
    which tokenizes faster (one op call a batch; `unbatch()` gives pairs).
    """

    def encode(source, target):
        source_ids = tokenizer.tokenize(clean_texts(source))
        target_ids = tokenizer.tokenize_target(clean_texts(target))
        return (
            _join(source_ids, tokenizer.eos_id, at_end=True),
            _join(target_ids, tokenizer.bos_id, at_end=False),
            _join(target_ids, tokenizer.eos_id, at_end=True),
        )

    return pairs.map(encode, num_parallel_calls=tf.data.AUTOTUNE)


def _join(ids, special, at_end):
    """`ids` with one `special` id added at the end or the start (of each
    row, for a ragged batch)."""
    if isinstance(ids, tf.RaggedTensor):
        column = tf.fill([ids.nrows(), 1], special)
        return tf.concat([ids, column] if at_end else [column, ids], axis=1)
    return tf.concat([ids, [special]] if at_end else [[special], ids], axis=0)


def fits(source_ids, target_ids, labels, max_length):
    """Whether an encoded pair's source and target fit in `max_length`
    tokens (end token included): the rule of `length_filter`,
    `length_report` and prepared data (`keras_transformer.pipelines`)."""
    return tf.maximum(tf.size(source_ids), tf.size(labels)) <= max_length


def length_filter(encoded, max_length):
    """Keeps the pairs whose source and target fit in `max_length` tokens
    (end token included)."""
    return encoded.filter(lambda *pair: fits(*pair, max_length))


@dataclasses.dataclass(frozen=True)
class LengthReport:
    """How many encoded pairs fit in `max_length`, and how many do not."""

    kept: int
    dropped: int
    source_tokens: int
    target_tokens: int

    def __str__(self):
        total = self.kept + self.dropped
        return (
            f"{self.kept} of {total} pairs kept; {self.dropped} dropped for being longer "
            f"than max_length ({self.source_tokens} source and {self.target_tokens} "
            "target tokens kept)"
        )


def length_report(encoded, max_length):
    """Counts, in one pass over `encoded`, the pairs `length_filter` keeps and drops."""

    def count(totals, pair):
        kept = tf.cast(fits(*pair, max_length), tf.int64)
        return (
            totals[0] + kept,
            totals[1] + 1 - kept,
            totals[2] + kept * tf.cast(tf.size(pair[0]), tf.int64),
            totals[3] + kept * tf.cast(tf.size(pair[2]), tf.int64),
        )

    zero = tf.constant(0, tf.int64)
    totals = encoded.reduce((zero, zero, zero, zero), count)
    return LengthReport(*(int(t) for t in totals))


def bucket_boundaries(max_length, growth=1.1):
    """Upper lengths of the buckets: every length while lengths are short,
    then growing by `growth` (as tensor2tensor does), so that padding stays
    under about 10% of a batch."""
    boundaries, length = [], 1
    while length < max_length:
        boundaries.append(length)
        length = max(length + 1, int(length * growth))
    return boundaries + [max_length]


class _Buckets:
    """The buckets of `token_batches`: each pair's bucket key (its source
    and target length buckets) and each bucket's batch size."""

    def __init__(self, batch_tokens, max_length, batch_multiple):
        if batch_tokens < max_length * batch_multiple:
            raise ValueError(
                f"batch_tokens={batch_tokens} cannot hold {batch_multiple} pair(s) of "
                f"max_length={max_length}; raise batch_tokens or lower max_length."
            )
        self.boundaries = tf.constant(bucket_boundaries(max_length), tf.int32)
        self.count = int(self.boundaries.shape[0]) ** 2
        longest = tf.maximum(self.boundaries[:, None], self.boundaries[None, :])  # (source, target)
        self.sizes = tf.reshape(tf.maximum(
            batch_multiple, batch_tokens // longest // batch_multiple * batch_multiple), [-1])

    def _bucket(self, length):
        return tf.searchsorted(self.boundaries, [length], side="left")[0]

    def key(self, source_ids, target_ids, labels):
        buckets = int(self.boundaries.shape[0])
        return tf.cast(self._bucket(tf.size(source_ids)) * buckets + self._bucket(tf.size(labels)),
                       tf.int64)

    def size(self, key):
        return tf.cast(tf.gather(self.sizes, key), tf.int64)


def token_batches(encoded, batch_tokens, max_length, batch_multiple=1,
                  shuffle_buffer=0, seed=None, pad_id=0, drop_remainder=False):
    """Groups encoded pairs into padded batches of about `batch_tokens` tokens.

    Pairs are bucketed by source length and target length; a bucket's batch
    size is the number of its longest pairs that fit in `batch_tokens` source
    and target tokens, rounded down to a multiple of `batch_multiple` (the
    number of replicas, so that every replica gets an equal share). Pairs
    longer than `max_length` are dropped: count them first with
    `length_report`. On a finite dataset the last batch of each bucket holds
    what is left, which may be fewer pairs (training repeats its data and
    never meets one; evaluation tolerates them), unless `drop_remainder`
    leaves those pairs out: then every batch is full, and the number of
    batches of a pass, `batch_count`, does not depend on the order of the
    pairs.

    Returns:
        A dataset of `({"source_ids", "target_ids"}, labels)`, int32, padded
        with `pad_id` (the model config's).
    """
    buckets = _Buckets(batch_tokens, max_length, batch_multiple)

    def batch(bucket_key, pairs):
        return pairs.padded_batch(buckets.size(bucket_key), padding_values=pad_id,
                                  drop_remainder=drop_remainder)

    encoded = length_filter(encoded, max_length)
    if shuffle_buffer:
        encoded = encoded.shuffle(shuffle_buffer, seed=seed)
    batches = encoded.group_by_window(key_func=buckets.key, reduce_func=batch,
                                      window_size_func=buckets.size)
    if shuffle_buffer:
        # Also mix the order of the batches, which buckets emit in runs; each
        # batch holds tens to hundreds of pairs, so a 64th of the pair buffer
        # is enough batches to mix.
        batches = batches.shuffle(max(1, shuffle_buffer // 64), seed=seed)

    def to_model_inputs(source_ids, target_ids, labels):
        return {"source_ids": source_ids, "target_ids": target_ids}, labels

    return batches.map(to_model_inputs)


def batch_count(encoded, batch_tokens, max_length, batch_multiple=1):
    """How many batches `token_batches(..., drop_remainder=True)` makes of one
    pass over the finite dataset `encoded`, in any order and with any
    shuffle: the sum over buckets of (pairs in the bucket) // (its batch
    size). One pass that reads only the lengths (for resuming a run at its
    place in the data: `keras_transformer.data.prepared`)."""
    buckets = _Buckets(batch_tokens, max_length, batch_multiple)
    keys = length_filter(encoded, max_length).map(buckets.key, num_parallel_calls=tf.data.AUTOTUNE)
    counts = keys.batch(4096).reduce(
        tf.zeros([buckets.count], tf.int64),
        lambda totals, batch: totals + tf.math.bincount(batch, minlength=buckets.count,
                                                        maxlength=buckets.count, dtype=tf.int64))
    return int(tf.reduce_sum(counts // tf.cast(buckets.sizes, tf.int64)))
