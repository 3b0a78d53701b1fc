"""Tokenizes a corpus once into TFRecord shards (`keras-transformer prepare-data`),
for `train.py --dataset prepared:DIR` (the folder's layout and how training
reads it: `keras_transformer.data.prepared`).

The pipeline follows TFDS's and seqio's: `Create(parts)` -> read and tokenize
each part of the training split, a batch of pairs at a time ->
`tf.train.Example`s, each batch to one of the N shards in turn ->
`GroupByKey` -> each shard written by one worker. Pairs
are encoded by training's own `encode_pairs` and kept or dropped by its
`fits` rule, so a prepared pair holds exactly the ids the on-the-fly
pipeline makes. The held-out splits are copied in order as text, and
`dataset.json` is written last, once the shards are in place.
"""

import json
import os

import apache_beam as beam
import tensorflow as tf

from keras_transformer import data, run_folder
from keras_transformer.data import prepared
from keras_transformer.pipelines.runner import check_output_folder, output_folder, pipeline_options

COUNTS = ("kept", "dropped", "source_tokens", "target_tokens")


def _one_thread():
    """`tf.data.Options` that run a dataset in the thread reading it: no
    thread pool, no map made parallel or prefetch added by tf.data, and no
    autotuning (which made such a pipeline wait: each part took longer for
    the same CPU time)."""
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.inject_prefetch = False
    options.autotune.enabled = False
    return options


class _EncodePart(beam.DoFn):
    """Part `i` of the training split -> `(shard, serialized examples)`, one
    element a batch of pairs (the pairs that fit), the batches of each part
    dealt round-robin over the shards; and (tagged "counts") how many pairs
    were kept and dropped.

    Each worker runs on one thread (`_one_thread`), a batch at a time:
    Beam's parallelism is its workers (Dataflow runs one per CPU). A worker
    that also tokenized on a second thread, beside its Python, was faster
    alone but used more than one core, so with a worker per core the
    workers made less in all than with one thread each. A batch travels as
    one element: every element costs the runner's data plane more than
    writing it does."""

    def __init__(self, corpus, tokenizer_files, max_length, parts, shards, batch_size=256):
        self.corpus = corpus
        self.tokenizer_files = tokenizer_files
        self.max_length = max_length
        self.parts = parts
        self.shards = shards
        self.batch_size = batch_size

    def setup(self):
        self.tokenizer = run_folder.tokenizer_from_files(self.tokenizer_files)

    def process(self, part):
        pairs = self.corpus.pairs("train", part=(part, self.parts), batch_size=self.batch_size)
        encoded = data.encode_pairs(pairs, self.tokenizer, parallel=False)
        counts = dict.fromkeys(COUNTS, 0)
        for index, (source_ids, _, labels) in enumerate(encoded.with_options(_one_thread())):
            source_lengths = source_ids.row_lengths().numpy()
            target_lengths = labels.row_lengths().numpy()
            keep = data.fits(source_lengths, target_lengths, self.max_length).numpy()
            examples = [prepared.ids_example(source, target) for source, target, fit
                        in zip(source_ids.to_list(), labels.to_list(), keep) if fit]
            counts["kept"] += len(examples)
            counts["dropped"] += len(keep) - len(examples)
            counts["source_tokens"] += int(source_lengths[keep].sum())
            counts["target_tokens"] += int(target_lengths[keep].sum())
            yield (part + index) % self.shards, examples
        yield beam.pvalue.TaggedOutput("counts", counts)


class _WriteShard(beam.DoFn):
    """`(shard, batches of serialized examples)` -> the shard's file
    `train-SSSSS-of-NNNNN.tfrecord` in `folder`, written under a temporary
    name and renamed when whole; yields its path.

    Our own sink because Beam's `WriteToTFRecord` writes one element a
    record, so every pair would pass through the runner on its own (with
    it, one worker's job took longer)."""

    def __init__(self, folder, shards):
        self.folder = folder
        self.shards = shards

    def process(self, element):
        shard, batches = element
        path = os.path.join(self.folder, prepared.train_file(shard, self.shards))
        with tf.io.TFRecordWriter(path + ".partial") as writer:
            for examples in batches:
                for example in examples:
                    writer.write(example)
        tf.io.gfile.rename(path + ".partial", path, overwrite=True)
        yield path


def _add_counts(counts):
    return {key: sum(c[key] for c in counts) for key in COUNTS}


class _CopyHeldOut(beam.DoFn):
    """A held-out split -> `<split>.tfrecord` of its text pairs, in order;
    yields `(split, pairs)`, or nothing when the corpus has no such split."""

    def __init__(self, corpus, folder):
        self.corpus = corpus
        self.folder = folder

    def process(self, split):
        try:
            pairs = self.corpus.pairs(split, batch_size=1024)
        except (FileNotFoundError, ValueError):  # a local folder or TFDS dataset without it
            return
        count = 0
        with tf.io.TFRecordWriter(os.path.join(self.folder, split + prepared.SUFFIX)) as writer:
            for sources, targets in pairs.with_options(_one_thread()).as_numpy_iterator():
                for source, target in zip(sources, targets):
                    writer.write(prepared.text_example(source, target))
                count += len(sources)
        yield split, count


def _write_info(counts, written, held_out, info, folder):
    info = info | {"train": counts, "held_out": dict(sorted(held_out.items())),
                   "files": sorted(os.path.basename(path) for path in written)}
    path = os.path.join(folder, prepared.INFO_FILE)
    with tf.io.gfile.GFile(path + ".partial", "w") as file:
        file.write(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    tf.io.gfile.rename(path + ".partial", path, overwrite=True)


def prepare_data(corpus, tokenizer, output, shards, max_length, beam_args=(), parts=None,
                 overwrite=False, settings=None):
    """Runs the pipeline and returns the `dataset.json` it wrote.

    Args:
        corpus: a `data.Corpus` (`data.corpus(name, ...)`).
        tokenizer: the tokenizer to encode with (a run's, an imported
            model's: `run_folder.load_tokenizer`).
        output: the folder to write (local, or remote such as gs://).
        shards: training shard files (at least the number of training
            workers that will read them).
        max_length: pairs with more tokens on a side (end token included)
            are dropped, and counted.
        beam_args: Beam pipeline options (`--runner`, ...).
        parts: pieces the training split is read in, in parallel (default:
            `shards`).
        overwrite: replace an existing output.
        settings: recorded in `dataset.json` (the command's options).

    Raises:
        ValueError, FileExistsError: bad options or data, found before any
            work; or no pair fits in `max_length`.
    """
    options = pipeline_options(beam_args)
    if isinstance(corpus, data.PreparedCorpus):
        raise ValueError(f"{corpus.directory} is prepared already; give the corpus it came from.")
    if shards < 1 or max_length < 2:
        raise ValueError(f"shards must be >= 1 and max_length >= 2; got {shards} and {max_length}.")
    output = os.fspath(output)
    check_output_folder(output, overwrite, prepared.INFO_FILE)
    corpus.pairs("train")  # prepares a TFDS dataset, checks local files
    files = run_folder.tokenizer_files(tokenizer)
    parts = parts or shards
    info = {
        "format": prepared.FORMAT,
        "corpus": {"name": corpus.name, "kind": corpus.kind,
                   "source_language": corpus.source_language,
                   "target_language": corpus.target_language},
        "tokenizer": {"checksum": run_folder.tokenizer_checksum(files), "files": sorted(files),
                      "vocab_size": tokenizer.vocab_size,
                      "target_vocab_size": tokenizer.target_vocab_size,
                      "pad_id": tokenizer.pad_id, "bos_id": tokenizer.bos_id,
                      "eos_id": tokenizer.eos_id},
        "max_length": max_length,
        "shards": shards,
        "settings": settings or {},
    }
    with output_folder(output, prepared.INFO_FILE) as folder:
        tokenizer_folder = os.path.join(folder, prepared.TOKENIZER_FOLDER)
        tf.io.gfile.makedirs(tokenizer_folder)
        for name, content in files.items():
            with tf.io.gfile.GFile(os.path.join(tokenizer_folder, name), "wb") as file:
                file.write(content)
        with beam.Pipeline(options=options) as pipeline:
            encoded = (pipeline
                       | "Parts" >> beam.Create(range(parts))
                       | "Spread" >> beam.Reshuffle()
                       | "Encode" >> beam.ParDo(_EncodePart(corpus, files, max_length, parts, shards))
                       .with_outputs("counts", main="examples"))
            every_shard = pipeline | "Shards" >> beam.Create([(shard, []) for shard in
                                                             range(shards)])
            written = ((encoded.examples, every_shard)
                       | "Batches" >> beam.Flatten()
                       | "ByShard" >> beam.GroupByKey()
                       | "Write" >> beam.ParDo(_WriteShard(folder, shards)))
            held_out = (pipeline
                        | "HeldOut" >> beam.Create(prepared.HELD_OUT)
                        | "CopyHeldOut" >> beam.ParDo(_CopyHeldOut(corpus, folder)))
            _ = (encoded.counts
                 | "Count" >> beam.CombineGlobally(_add_counts)
                 | "Info" >> beam.Map(_write_info, written=beam.pvalue.AsList(written),
                                      held_out=beam.pvalue.AsDict(held_out), info=info,
                                      folder=folder))
        info = prepared.read_info(folder)
        if not info["train"]["kept"]:
            raise ValueError(f"No training pair of {corpus.name} fits in max_length={max_length} "
                             f"({info['train']['dropped']} pairs, all dropped); raise --max-length.")
    return info
