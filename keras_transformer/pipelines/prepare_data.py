"""Tokenizes a corpus once into TFRecord shards (`examples/prepare_data.py`),
for `train.py --dataset prepared:DIR` (the folder's layout and how training
reads it: `keras_transformer.data.prepared`).

The pipeline follows TFDS's and seqio's: `Create(parts)` -> read and tokenize
each part of the training split -> `tf.train.Example` -> `WriteToTFRecord(
num_shards=N)`, which spreads the pairs over the N shards at random. Pairs
are encoded by training's own `encode_pairs` and kept or dropped by its
`fits` rule, so a prepared pair holds exactly the ids the on-the-fly
pipeline makes. The held-out splits are copied in order as text, and
`dataset.json` is written last, once the shards are in place.
"""

import json
import os

import apache_beam as beam
import tensorflow as tf

from keras_transformer import data
from keras_transformer.data import prepared
from keras_transformer.pipelines.runner import check_output_folder, output_folder, pipeline_options

COUNTS = ("kept", "dropped", "source_tokens", "target_tokens")


class _EncodePart(beam.DoFn):
    """Part `i` of the training split -> serialized examples of the pairs
    that fit, and (tagged "counts") how many were kept and dropped.

    Each worker tokenizes on one thread: Beam's parallelism is its workers
    (Dataflow runs one per CPU), so a worker that spread over every core
    would only compete with the others."""

    def __init__(self, corpus, tokenizer_files, max_length, parts, batch_size=256):
        self.corpus = corpus
        self.tokenizer_files = tokenizer_files
        self.max_length = max_length
        self.parts = parts
        self.batch_size = batch_size

    def setup(self):
        self.tokenizer = data.tokenizer_from_files(self.tokenizer_files)

    def process(self, part):
        pairs = self.corpus.pairs("train", part=(part, self.parts))
        # Batched: one tokenizer call for many pairs.
        encoded = data.encode_pairs(pairs.batch(self.batch_size), self.tokenizer)
        options = tf.data.Options()
        options.threading.private_threadpool_size = 1
        options.threading.max_intra_op_parallelism = 1
        counts = dict.fromkeys(COUNTS, 0)
        for source_ids, _, labels in encoded.with_options(options):
            keep = data.fits(source_ids.row_lengths(), labels.row_lengths(), self.max_length).numpy()
            for source, target, fit in zip(source_ids.to_list(), labels.to_list(), keep):
                if fit:
                    counts["kept"] += 1
                    counts["source_tokens"] += len(source)
                    counts["target_tokens"] += len(target)
                    yield prepared.ids_example(source, target)
                else:
                    counts["dropped"] += 1
        yield beam.pvalue.TaggedOutput("counts", counts)


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
            pairs = self.corpus.pairs(split)
        except (FileNotFoundError, ValueError):  # a local folder or TFDS dataset without it
            return
        count = 0
        with tf.io.TFRecordWriter(os.path.join(self.folder, split + prepared.SUFFIX)) as writer:
            for source, target in pairs.as_numpy_iterator():
                writer.write(prepared.text_example(source, target))
                count += 1
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
            model's: `data.load_tokenizer`).
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
    files = data.tokenizer_files(tokenizer)
    parts = parts or shards
    info = {
        "format": prepared.FORMAT,
        "corpus": {"name": corpus.name, "kind": corpus.kind,
                   "source_language": corpus.source_language,
                   "target_language": corpus.target_language},
        "tokenizer": {"checksum": data.tokenizer_checksum(files), "files": sorted(files),
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
                       | "Encode" >> beam.ParDo(_EncodePart(corpus, files, max_length, parts))
                       .with_outputs("counts", main="examples"))
            written = encoded.examples | "Write" >> beam.io.WriteToTFRecord(
                os.path.join(folder, prepared.TRAIN_PREFIX), file_name_suffix=prepared.SUFFIX,
                num_shards=shards)
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
