"""From string pairs to padded, length-bucketed batches of about N tokens
(paper section 5.1: "sentence pairs were batched together by approximate
sequence length; each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens").

Pairs are grouped by their source length and their target length together
(`tf.data.Dataset.group_by_window` with a two-dimensional bucket key), not by
the longer of the two as `bucket_by_sequence_length` would: when the two
languages' lengths differ, as in a dictionary, one key padded both sides to
the longer one and wasted about half of every batch.

Batches come in two kinds of shapes. By default a batch is padded to its
longest pair, and the buckets are narrow (every length up to 10, then 10%
wider each), so that padding stays low; on Ding that gives some 650
different shapes, which TensorFlow's graphs take in their stride. A step
compiled with XLA (JAX always, TensorFlow with `--xla`) compiles a program
for every shape it meets, so `fixed_shapes=True` keys pairs by the longer
side on a coarse grid of lengths (`shape_boundaries`: each about 1.4 times
the one before) and pads every batch, both sides, to its bucket's length
and number of rows: on Ding (small preset, 2,048-token batches) 9 shapes at
82% real tokens on the source side and 77% on the target side, and 89% of
the real tokens an update of the default batches holds.
"""

import dataclasses

import tensorflow as tf

from keras_transformer.data.tokenizer import clean_texts, input_tokenizer


def encode_pairs(pairs, tokenizer, parallel=True):
    """`(source, target)` strings -> `(source_ids, target_ids, labels)`.

    `source_ids` is the source and an end id; `target_ids` (the decoder
    input) is a start id and the target; `labels` is the target and an end id
    (the tokenizer's special ids). Bytes that are not UTF-8 become U+FFFD,
    NUL a space (`clean_texts`), as in translation. `pairs` may also be
    batched (`(batch,)` strings): the ids are then ragged `(batch, None)`,
    which tokenizes faster (one call a batch; `unbatch()` gives pairs), and
    faster still with our own tokenizer (`data.tokenizer.input_tokenizer`).
    `parallel=False` tokenizes in the thread that reads the dataset.
    """
    reader = input_tokenizer(tokenizer)

    def encode(source, target):
        source_ids = reader.tokenize(clean_texts(source))
        target_ids = reader.tokenize_target(clean_texts(target))
        return (
            _join(source_ids, tokenizer.eos_id, at_end=True),
            _join(target_ids, tokenizer.bos_id, at_end=False),
            _join(target_ids, tokenizer.eos_id, at_end=True),
        )

    encoded = pairs.map(encode, num_parallel_calls=tf.data.AUTOTUNE if parallel else None)
    if reader is not tokenizer:
        # Calls into Python (our tokenizer's reader) side by side ran at one
        # core's speed in most runs on 2 cores while tf.data's autotuning
        # was on, and never with it off; parallel maps then run a call per
        # core (docs/benchmarks.md, "Training input"). Datasets made from
        # this one inherit the setting: `autotuned` turns it back on.
        encoded = encoded.with_options(_autotune_options(False))
    return encoded


def autotuned(dataset):
    """`dataset` with tf.data's autotuning on, whatever its inputs set:
    for reading the cache of what `encode_pairs` tokenized in Python
    (autotuning off) once the cache is full, so that no Python runs."""
    return dataset.with_options(_autotune_options(True))


def _autotune_options(enabled):
    options = tf.data.Options()
    options.autotune.enabled = enabled
    return options


ENCODE_BLOCK = 512
"""Pairs `encode_blocks` tokenizes in one call."""


def encode_blocks(pairs, tokenizer, block=ENCODE_BLOCK):
    """`encode_pairs` of `pairs` a block of `block` at a time: ragged
    `(block, None)` ids (the last block smaller), in the pairs' order, for
    `block_token_batches` (and `length_report`).

    tf.data runs a function for each element with a fixed cost of its own,
    and tf-text's tokenizer takes a batch of strings as cheaply as a few:
    tokenizing pair by pair, then bucketing pair by pair, was what limited
    training's first pass over its corpus (docs/benchmarks.md, "Training
    input"). Blocks keep the order, so a pass holds the same pairs."""
    return encode_pairs(pairs.batch(block), tokenizer)


def _join(ids, special, at_end):
    """`ids` with one `special` id added at the end or the start (of each
    row, for a ragged batch)."""
    if isinstance(ids, tf.RaggedTensor):
        column = tf.fill([ids.nrows(), 1], special)
        return tf.concat([ids, column] if at_end else [column, ids], axis=1)
    return tf.concat([ids, [special]] if at_end else [[special], ids], axis=0)


def fits(source_length, label_length, max_length):
    """Whether encoded pairs whose `source_ids` and `labels` have these
    lengths (end token included; scalars or vectors) fit in `max_length`:
    the rule of `length_filter`, `length_report`, `batch_count` and
    prepared data (`keras_transformer.pipelines.prepare_data`)."""
    return tf.maximum(source_length, label_length) <= max_length


def length_filter(encoded, max_length):
    """Keeps the pairs whose source and target fit in `max_length` tokens
    (end token included)."""
    return encoded.filter(lambda source_ids, target_ids, labels: fits(
        tf.size(source_ids), tf.size(labels), max_length))


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
    """Counts, in one pass over `encoded` (pairs, or blocks of them as
    `encode_blocks` gives), the pairs `length_filter` keeps and drops."""

    def lengths(ids):
        if isinstance(ids, tf.RaggedTensor):
            return tf.cast(ids.row_lengths(), tf.int64)
        return tf.cast(tf.size(ids), tf.int64)

    def count(totals, pair):
        source, label = lengths(pair[0]), lengths(pair[2])
        kept = tf.cast(fits(source, label, max_length), tf.int64)
        return (
            totals[0] + tf.reduce_sum(kept),
            totals[1] + tf.reduce_sum(1 - kept),
            totals[2] + tf.reduce_sum(kept * source),
            totals[3] + tf.reduce_sum(kept * label),
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


def shape_boundaries(max_length, first=4):
    """The lengths of `fixed_shapes` batches: `first` times powers of two
    and 1.5 times those (4, 6, 8, 12, 16, 24, 32, 48, ...: each about 1.4
    times the one before, on multiples of 2 and 4, as matmul kernels like),
    the last being `max_length`. A coarser grid compiles fewer programs and
    pads more: on Ding's pairs (small preset, 2,048-token batches, keyed by
    the longer side), lengths doubling from 8 gave 4 shapes at 58-62% real
    tokens, this grid 9 at 77-82%, and 17 lengths (every one from 4 to 8,
    then steps of 2, 4, 8) 84-89%."""
    lengths, size = set(), first
    while size < max_length:
        lengths.update((size, size * 3 // 2))
        size *= 2
    return sorted(length for length in lengths if length < max_length) + [max_length]


class _Buckets:
    """The buckets of `token_batches`: the bucket key of a pair's source and
    target lengths (scalars or vectors), each bucket's batch size, and with
    `fixed_shapes` the padding of a batch to its bucket's shape.

    Pairs are keyed by their source and their target length together (a
    bucket per pair of length ranges), or, with `fixed_shapes`, by the
    longer of the two alone, both sides then padded to the bucket's length:
    as many rows fit the budget either way (the longer side sets them), and
    there are far fewer shapes (9 instead of 68 for Ding's small preset)."""

    def __init__(self, batch_tokens, max_length, batch_multiple, fixed_shapes=False):
        if batch_tokens < max_length * batch_multiple:
            raise ValueError(
                f"batch_tokens={batch_tokens} cannot hold {batch_multiple} pair(s) of "
                f"max_length={max_length}; raise batch_tokens or lower max_length."
            )
        self.fixed_shapes = fixed_shapes
        boundaries = (shape_boundaries if fixed_shapes else bucket_boundaries)(max_length)
        self.boundaries = tf.constant(boundaries, tf.int32)
        self.count = len(boundaries) if fixed_shapes else len(boundaries) ** 2
        # The longest pair of each bucket, by key.
        longest = self.boundaries if fixed_shapes else tf.reshape(
            tf.maximum(self.boundaries[:, None], self.boundaries[None, :]), [-1])
        self.sizes = tf.maximum(batch_multiple,
                                batch_tokens // longest // batch_multiple * batch_multiple)

    def _bucket(self, lengths):
        found = tf.searchsorted(self.boundaries, tf.reshape(lengths, [-1]), side="left")
        return tf.reshape(found, tf.shape(lengths))

    def key(self, source_length, label_length):
        source, label = (tf.cast(length, tf.int32) for length in (source_length, label_length))
        if self.fixed_shapes:
            return tf.cast(self._bucket(tf.maximum(source, label)), tf.int64)
        buckets = int(self.boundaries.shape[0])
        return tf.cast(self._bucket(source) * buckets + self._bucket(label), tf.int64)

    def size(self, key):
        return tf.cast(tf.gather(self.sizes, key), tf.int64)

    def pad_to_shape(self, inputs, labels, pad_id):
        """A batch padded with `pad_id` to its bucket's rows and length (both
        sides). Its bucket is that of its widths: every pair of a bucket has
        lengths in the bucket's range, so the longest of them too. Padding
        rows hold only padding labels, which the loss does not count."""
        key = self.key(tf.shape(inputs["source_ids"])[1], tf.shape(labels)[1])
        rows, width = tf.cast(self.size(key), tf.int32), self.boundaries[key]

        def pad(ids):
            return tf.pad(ids, [[0, rows - tf.shape(ids)[0]], [0, width - tf.shape(ids)[1]]],
                          constant_values=pad_id)

        return {name: pad(ids) for name, ids in inputs.items()}, pad(labels)


def token_batches(encoded, batch_tokens, max_length, batch_multiple=1,
                  shuffle_buffer=0, seed=None, pad_id=0, drop_remainder=False,
                  fixed_shapes=False):
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

    With `fixed_shapes` the buckets' lengths are `shape_boundaries` and
    every batch is padded to its bucket's lengths and rows (a last, short
    batch gets rows of padding), so that an XLA-compiled step meets only a
    few shapes (see the module docstring).

    Returns:
        A dataset of `({"source_ids", "target_ids"}, labels)`, int32, padded
        with `pad_id` (the model config's).
    """
    buckets = _Buckets(batch_tokens, max_length, batch_multiple, fixed_shapes)

    def key(source_ids, target_ids, labels):
        return buckets.key(tf.size(source_ids), tf.size(labels))

    def to_model_inputs(source_ids, target_ids, labels):
        return {"source_ids": source_ids, "target_ids": target_ids}, labels

    finish = _with_fixed_shapes(to_model_inputs, buckets, pad_id) if fixed_shapes else to_model_inputs
    return _grouped(length_filter(encoded, max_length), buckets, key, finish,
                    shuffle_buffer, seed, pad_id, drop_remainder)


def block_token_batches(blocks, batch_tokens, max_length, shuffle_buffer=0, seed=None, pad_id=0,
                        drop_remainder=False, batch_multiple=1, fixed_shapes=False):
    """`token_batches` of pairs that come in blocks: ragged batches
    `(source_ids, target_ids, labels)` of any size, as batched parsing (or
    `encode_pairs` of batched pairs) gives them. The same batches as
    `token_batches` of the pairs one by one, with the length filter and the
    bucket keys computed a block at a time: tf.data runs a function for each
    element at a cost of a few microseconds an op, so one that only picks a
    precomputed key instead of three (slice, filter, key) makes the prepared
    data's reader (`data.prepared`) several times faster."""
    buckets = _Buckets(batch_tokens, max_length, batch_multiple, fixed_shapes)

    def rows(source_ids, target_ids, labels):
        lengths = [tf.cast(ids.row_lengths(), tf.int32) for ids in (source_ids, labels)]
        keep = fits(*lengths, max_length)
        columns = [ids.to_tensor(pad_id) for ids in (source_ids, target_ids, labels)]
        return tuple(tf.boolean_mask(column, keep)
                     for column in columns + lengths + [buckets.key(*lengths)])

    def key(source_ids, target_ids, labels, source_length, label_length, bucket):
        return bucket  # no op at all: even a cast doubles the cost of the call

    def cut(source_ids, target_ids, labels, source_lengths, label_lengths, buckets_):
        source_width, label_width = tf.reduce_max(source_lengths), tf.reduce_max(label_lengths)
        return ({"source_ids": source_ids[:, :source_width],
                 "target_ids": target_ids[:, :label_width]}, labels[:, :label_width])

    pairs = blocks.map(rows, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    padding = (pad_id, pad_id, pad_id, 0, 0, tf.constant(0, tf.int64))
    finish = _with_fixed_shapes(cut, buckets, pad_id) if fixed_shapes else cut
    return _grouped(pairs, buckets, key, finish, shuffle_buffer, seed, padding, drop_remainder)


def _with_fixed_shapes(finish, buckets, pad_id):
    """`finish`, then `buckets.pad_to_shape`."""

    def fixed(*batch):
        return buckets.pad_to_shape(*finish(*batch), pad_id)

    return fixed


def _grouped(pairs, buckets, key, finish, shuffle_buffer, seed, padding, drop_remainder):
    """The bucketing of `token_batches`: `pairs` (shuffled first with a
    buffer of `shuffle_buffer`) grouped by `key(*pair)` into batches of their
    bucket's size, padded with `padding` (`padded_batch`'s padding_values),
    which come out mixed, each through `finish`."""

    def batch(bucket_key, window):
        return window.padded_batch(buckets.size(bucket_key), padding_values=padding,
                                   drop_remainder=drop_remainder)

    if shuffle_buffer:
        pairs = pairs.shuffle(shuffle_buffer, seed=seed)
    batches = pairs.group_by_window(key_func=key, reduce_func=batch,
                                    window_size_func=buckets.size)
    if shuffle_buffer:
        # Also mix the order of the batches, which buckets emit in runs; each
        # batch holds tens to hundreds of pairs, so a 64th of the pair buffer
        # is enough batches to mix.
        batches = batches.shuffle(max(1, shuffle_buffer // 64), seed=seed)
    return batches.map(finish)


def batch_count(lengths, batch_tokens, max_length, batch_multiple=1, fixed_shapes=False):
    """How many batches `token_batches(..., drop_remainder=True)` makes of one
    pass over a finite dataset, in any order and with any shuffle: the sum
    over buckets of (pairs in the bucket) // (its batch size), from
    `lengths`, a dataset of the pairs' `(source_ids, labels)` lengths, as
    scalars or in vectors of any size (for resuming a run at its place in
    the data: `data.prepared`)."""
    buckets = _Buckets(batch_tokens, max_length, batch_multiple, fixed_shapes)

    def add(totals, pair_lengths):
        source, label = (tf.reshape(length, [-1]) for length in pair_lengths)
        keys = tf.boolean_mask(buckets.key(source, label), fits(source, label, max_length))
        return totals + tf.math.bincount(keys, minlength=buckets.count, maxlength=buckets.count,
                                         dtype=tf.int64)

    counts = lengths.reduce(tf.zeros([buckets.count], tf.int64), add)
    return int(tf.reduce_sum(counts // tf.cast(buckets.sizes, tf.int64)))
