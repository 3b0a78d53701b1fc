"""Training data tokenized once: a folder of TFRecord shards written by
`keras-transformer prepare-data` (the Apache Beam pipeline is in
`keras_transformer.pipelines.prepare_data`), read by
`keras-transformer train --dataset prepared:DIR` with the same bucketing and
token-budget batching as on-the-fly tokenization, and no tokenizing.

A prepared folder holds:

    train-SSSSS-of-NNNNN.tfrecord   one `tf.train.Example` a training pair:
                                    `source_ids` (the source and the end id)
                                    and `labels` (the target and the end id),
                                    int64 lists, as `encode_pairs` makes them
                                    (the decoder input is the start id and
                                    `labels[:-1]`); pairs longer than
                                    `max_length` were left out and counted
    validation.tfrecord,            the held-out pairs as text (`source`,
    test.tfrecord                   `target`), in the corpus's order
                                    (training tokenizes these few itself and
                                    translates the first for BLEU)
    tokenizer/                      the tokenizer's files
    dataset.json                    written last: pairs and tokens kept, pairs
                                    dropped, the tokenizer's checksum, the
                                    corpus and the settings

Reading for training (`PreparedCorpus.training_input`): each input pipeline
(one a worker) reads every n-th shard file, so that workers read disjoint
files; each pass over its files ("epoch") has its own file order and
shuffle, from the run's seed and the epoch's number, and keeps only full
batches (`token_batches(drop_remainder=True)`), so that the number of
batches of a pass is known from the pairs' lengths alone
(`batch_count`). A resumed run therefore starts where the killed one's
checkpoint left the data: `divmod(batches consumed, batches a pass)` gives
the pass and the batch within it, and only that pass's earlier batches are
made again and skipped.
"""

import json
import os
import warnings

import tensorflow as tf

from keras_transformer.data.batching import (
    LengthReport,
    batch_count,
    block_token_batches,
    length_report,
)
from keras_transformer.run_folder import tokenizer_checksum, tokenizer_files, tokenizer_from_files

PREFIX = "prepared:"
"""`--dataset prepared:DIR` names a prepared folder."""
INFO_FILE = "dataset.json"
FORMAT = 1
TRAIN_PREFIX = "train"
SUFFIX = ".tfrecord"
TOKENIZER_FOLDER = "tokenizer"
HELD_OUT = ("validation", "test")


def train_file(shard, shards):
    """The name of training shard `shard` of `shards`:
    `train-SSSSS-of-NNNNN.tfrecord`."""
    return f"{TRAIN_PREFIX}-{shard:05d}-of-{shards:05d}{SUFFIX}"


_IDS = {"source_ids": tf.io.RaggedFeature(tf.int64), "labels": tf.io.RaggedFeature(tf.int64)}
_TEXT = {"source": tf.io.FixedLenFeature([], tf.string), "target": tf.io.FixedLenFeature([], tf.string)}


def ids_example(source_ids, labels):
    """A training pair as a serialized `tf.train.Example` (int lists)."""
    return tf.train.Example(features=tf.train.Features(feature={
        "source_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=source_ids)),
        "labels": tf.train.Feature(int64_list=tf.train.Int64List(value=labels)),
    })).SerializeToString()


def text_example(source, target):
    """A held-out pair (bytes) as a serialized `tf.train.Example`."""
    return tf.train.Example(features=tf.train.Features(feature={
        "source": tf.train.Feature(bytes_list=tf.train.BytesList(value=[source])),
        "target": tf.train.Feature(bytes_list=tf.train.BytesList(value=[target])),
    })).SerializeToString()


def read_info(directory):
    """The `dataset.json` of a prepared folder (local or remote)."""
    path = os.path.join(directory, INFO_FILE)
    if not tf.io.gfile.exists(path):
        raise ValueError(f"{directory} holds no {INFO_FILE}: it is not a folder written by "
                         "keras-transformer prepare-data, or one it did not finish; run it again.")
    with tf.io.gfile.GFile(path, "rb") as file:
        try:
            info = json.loads(file.read().decode("utf-8"))
        except ValueError as error:
            raise ValueError(f"{path} is not valid JSON ({error}); the file is damaged: prepare "
                             "the data again.") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise ValueError(f"{path} is not a prepared dataset of format {FORMAT}; prepare the data "
                         "again with this version's keras-transformer prepare-data.")
    return info


class PreparedCorpus:
    """A prepared folder (see the module docstring), read as a corpus: the
    held-out splits as text pairs, the training split as token ids.

    Args:
        directory: the folder (a local path or one TensorFlow's file system
            reads, such as gs://).
        source_language: if given, must be the folder's source language.
        target_language: if given, must be the folder's target language.

    Raises:
        ValueError: not a complete prepared folder, or other languages.
    """

    kind = "prepared"

    def __init__(self, directory, source_language=None, target_language=None):
        self.directory = directory = os.fspath(directory)
        self.name = PREFIX + directory
        self.info = info = read_info(directory)
        corpus = info["corpus"]
        self.source_language, self.target_language = corpus["source_language"], corpus["target_language"]
        for given, own in ((source_language, self.source_language),
                           (target_language, self.target_language)):
            if given and given != own:
                raise ValueError(f"{directory} holds {self.source_language}-{self.target_language} "
                                 f"pairs, not {source_language}-{target_language}; leave out the "
                                 "languages or prepare the data again.")
        pattern = os.path.join(directory, f"{TRAIN_PREFIX}-*-of-*{SUFFIX}")
        self.files = sorted(tf.io.gfile.glob(pattern))
        if len(self.files) != info["shards"]:
            raise ValueError(f"{directory} should hold {info['shards']} training shards but has "
                             f"{len(self.files)}; copy the folder again, or prepare the data again.")
        self.max_length = info["max_length"]

    # ------------------------------------------------------------ corpus

    def pairs(self, split):
        """The held-out `split`'s `(source, target)` tf.string pairs, in the
        corpus's order (the training split is token ids: `training_input`)."""
        if split == "train":
            raise ValueError(f"{self.directory} holds the training pairs as token ids only; "
                             "train on them with --dataset prepared:DIR.")
        if split not in HELD_OUT:
            raise ValueError(f"Unknown split {split!r}; expected one of {HELD_OUT}.")
        if split not in self.info["held_out"]:
            raise FileNotFoundError(f"{self.directory} has no {split} split: the corpus it was "
                                    "prepared from had none.")
        records = tf.data.TFRecordDataset(os.path.join(self.directory, split + SUFFIX))
        return records.map(_parse_text, num_parallel_calls=tf.data.AUTOTUNE)

    # --------------------------------------------------------- tokenizer

    def load_tokenizer(self):
        """The tokenizer the training pairs were made with."""
        folder = os.path.join(self.directory, TOKENIZER_FOLDER)
        files = {}
        for name in tf.io.gfile.listdir(folder):
            with tf.io.gfile.GFile(os.path.join(folder, name), "rb") as file:
                files[name] = file.read()
        return tokenizer_from_files(files)

    def check_tokenizer(self, tokenizer, owner):
        """Raises a one-line ValueError unless `tokenizer` (that of `owner`,
        for the message) is the one the pairs were made with."""
        if tokenizer_checksum(tokenizer_files(tokenizer)) != self.info["tokenizer"]["checksum"]:
            raise ValueError(
                f"{self.directory} was prepared with another tokenizer than {owner}'s; train on "
                "it with a new --output (which takes its tokenizer), or prepare the data again "
                f"with keras-transformer prepare-data --tokenizer {owner}.")

    # ---------------------------------------------------------- training

    def length_report(self, max_length):
        """The `LengthReport` of training with `max_length`: the prepared
        counts, or, for a shorter `max_length` than the data's, one pass
        over the shards with the pairs dropped in preparation added."""
        prepared = LengthReport(**self.info["train"])
        if max_length > self.max_length:
            warnings.warn(f"{self.directory} was prepared with max_length {self.max_length}; "
                          f"training's {max_length} would keep {prepared.dropped} longer pairs "
                          "it left out: prepare the data again to train on them.", stacklevel=2)
        if max_length >= self.max_length:
            return prepared
        report = length_report(self.encoded(self.files), max_length)
        return LengthReport(report.kept, report.dropped + prepared.dropped,
                            report.source_tokens, report.target_tokens)

    def _parsed(self, files, seed=None):
        """Batches of up to 1024 records of `files`, read in turn (shuffled
        with `seed`, an int or int64 tensor, if given): `(source_ids,
        labels)`, ragged int32."""
        names = tf.data.Dataset.from_tensor_slices(files)
        if seed is not None:
            names = names.shuffle(len(files), seed=seed)
        records = names.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 16),
                                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

        def parse(batch):
            pairs = tf.io.parse_example(batch, _IDS)
            return tuple(tf.cast(pairs[key], tf.int32) for key in ("source_ids", "labels"))

        return records.batch(1024).map(parse, num_parallel_calls=tf.data.AUTOTUNE)

    def _decoder_input(self, labels):
        """The start id and `labels[:-1]`, of each row of a ragged batch."""
        starts = tf.fill([labels.nrows(), 1], self.info["tokenizer"]["bos_id"])
        return tf.concat([starts, labels[:, :-1]], axis=1)

    def _blocks(self, files, seed=None):
        """`(source_ids, target_ids, labels)` of `files` in ragged batches,
        as `encode_pairs` makes them (see `_parsed`)."""

        def pairs(source_ids, labels):
            return source_ids, self._decoder_input(labels), labels

        return self._parsed(files, seed).map(pairs, num_parallel_calls=tf.data.AUTOTUNE)

    def encoded(self, files, seed=None):
        """`(source_ids, target_ids, labels)` int32 pairs of `files`, one by
        one (the training input reads `_blocks`)."""
        # Back to plain tensors: unbatch() of ragged batches gives ragged specs.
        return self._blocks(files, seed).unbatch().map(lambda *pair: pair)

    def _lengths(self, files):
        return self._parsed(files).map(lambda source_ids, labels: (source_ids.row_lengths(),
                                                                   labels.row_lengths()))

    def training_input(self, batch_tokens, max_length, shuffle_buffer, seed, pad_id=0,
                       start_step=0, accumulation_steps=1, batch_multiple=1, fixed_shapes=False):
        """The training data for `Trainer.train`, as a function of a
        `tf.distribute.InputContext` (see the module docstring).

        Args:
            batch_tokens: tokens a side of one global micro-batch, split
                evenly between the replicas.
            max_length: as for `token_batches`.
            shuffle_buffer: as for `token_batches`.
            pad_id: as for `token_batches`.
            seed: the run's seed.
            start_step: the update the run resumes at; with
                `accumulation_steps` it says how many micro-batches each
                replica has already consumed.
            batch_multiple: as for `token_batches`, for a pipeline whose
                batches are split between devices later (one input context
                of one replica: keras.distribution on JAX).
            fixed_shapes: as for `token_batches` (for XLA's compiled steps).

        Raises (when the function is called):
            ValueError: fewer shard files than input pipelines, or too few
                pairs for one batch a pass.
        """

        def input_fn(context):
            pipelines, index = context.num_input_pipelines, context.input_pipeline_id
            files = self.files[index::pipelines]
            if not files:
                raise ValueError(f"{self.directory} has {len(self.files)} shard files for "
                                 f"{pipelines} workers; prepare it with --shards {pipelines} or more.")
            replica_tokens = batch_tokens // context.num_replicas_in_sync
            per_pass = batch_count(self._lengths(files), replica_tokens, max_length,
                                   batch_multiple, fixed_shapes)
            if not per_pass:
                raise ValueError(f"{self.directory} has too few pairs in worker {index}'s files to "
                                 f"fill one batch of {replica_tokens} tokens; lower batch_tokens.")
            local_replicas = context.num_replicas_in_sync // pipelines
            first_pass, skip = divmod(start_step * accumulation_steps * local_replicas, per_pass)

            def one_pass(number):
                pass_seed = tf.cast(seed, tf.int64) + number
                return block_token_batches(
                    self._blocks(files, pass_seed), replica_tokens, max_length,
                    shuffle_buffer=shuffle_buffer, seed=pass_seed, pad_id=pad_id,
                    drop_remainder=True, batch_multiple=batch_multiple, fixed_shapes=fixed_shapes)

            passes = tf.data.Dataset.range(first_pass, tf.int64.max)
            return passes.flat_map(one_pass).skip(skip).prefetch(tf.data.AUTOTUNE)

        return input_fn


def _parse_text(record):
    pair = tf.io.parse_single_example(record, _TEXT)
    return pair["source"], pair["target"]
