"""Parallel corpora by name: TFDS translation datasets, the Ding dictionary,
and local files. Each split comes back as a `tf.data.Dataset` of
`(source, target)` string pairs."""

import dataclasses
import os

import tensorflow as tf
import tensorflow_datasets as tfds

from keras_transformer import startup
from keras_transformer.data import ding, prepared
from keras_transformer.textfiles import describe_lines

SPLITS = ("train", "validation", "test")
DING_NAMES = ("ding", "ding_de_en")


@dataclasses.dataclass(frozen=True)
class Corpus:
    """Where a parallel corpus comes from and which way it is translated.

    Build it with `corpus()`; read a split with `pairs(split)`.
    """

    name: str
    source_language: str
    target_language: str
    kind: str  # "tfds", "ding", "tsv" or "text"
    data_dir: str | None = None
    ding_path: str = ding.DEFAULT_PATH

    def pairs(self, split, part=None, batch_size=None):
        """`tf.data.Dataset` of `(source, target)` tf.string scalars.

        `part=(index, count)` reads only part `index` of `count` disjoint
        parts that together hold the split, for jobs that read a corpus in
        parallel (`keras_transformer.pipelines`): a TFDS dataset reads only
        its part's records (`tfds.even_splits`), local files are read
        whole and every `count`-th pair kept.

        `batch_size` gives batches of pairs instead (`(batch,)` strings a
        side, the last batch smaller), read a batch at a time with no work
        per pair: what one pipeline worker on one thread wants. TFDS
        datasets are then read from their record files in order (see
        `_tfds_batches`); training reads pairs, in parallel on every core.
        """
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; expected one of {SPLITS}.")
        if self.kind == "tsv":
            path = os.path.join(self.name, f"{split}.tsv")
            lines = _tsv_lines(path)
            if part is not None:
                lines = lines.shard(part[1], part[0])
            # Columns split a batch of lines at a time (one call, not one a line).
            pairs = lines.batch(batch_size or _LINE_BATCH).map(
                lambda batch: _tsv_columns(batch, path))
            return pairs if batch_size else pairs.unbatch()
        if self.kind == "text":
            pairs = _text_lines(*(os.path.join(self.name, f"{split}.{language}")
                                  for language in (self.source_language, self.target_language)))
            if part is not None:
                pairs = pairs.shard(part[1], part[0])
            return pairs.batch(batch_size) if batch_size else pairs
        source, target = self.source_language, self.target_language
        if part is not None:
            split = tfds.even_splits(split, part[1])[part[0]]
        builder = self._builder()
        if batch_size and builder.info.file_format == tfds.core.FileFormat.TFRECORD:
            return _tfds_batches(builder, split, (source, target), batch_size)

        def select(example):
            return example[source], example[target]

        # Training data: interleave the shard files in a fixed order, so that
        # corpora stored one after another (WMT's Europarl, Common Crawl, News
        # Commentary) mix before the shuffle buffer, and every worker of a
        # multi-machine run (and its tokenizer training) sees the same stream.
        examples = builder.as_dataset(
            split=split, shuffle_files=split == "train" and part is None,
            read_config=tfds.ReadConfig(shuffle_seed=0))
        pairs = examples.map(select, num_parallel_calls=tf.data.AUTOTUNE)
        return pairs.batch(batch_size) if batch_size else pairs

    def _builder(self):
        """The dataset's TFDS builder, its records prepared (once); TFDS's
        progress bars off while a command holds the libraries' lines back
        (`startup.quiet`)."""
        if self.kind == "ding":
            builder = ding.DingDeEn(data_dir=self.data_dir, source_path=self.ding_path)
        else:
            builder = tfds.builder(self.name, data_dir=self.data_dir)
        if startup.quiet():
            tfds.disable_progress_bar()
        builder.download_and_prepare()
        return builder


def corpus(name, source_language=None, target_language=None, data_dir=None,
           ding_path=ding.DEFAULT_PATH):
    """Resolves a dataset name into a `Corpus`.

    Args:
        name: one of
            - `"ding"`: the German-English Ding dictionary (Debian's
              `trans-de-en`), German to English unless the languages say
              otherwise;
            - a TFDS translation dataset, e.g. `"wmt14_translate/de-en"`,
              `"ted_hrlr_translate/pt_to_en"`; the languages default to the
              dataset's supervised keys (for WMT14 de-en that is German to
              English: pass `source_language="en", target_language="de"` for
              the paper's EN-DE);
            - a local folder holding `train.tsv`, `validation.tsv`,
              `test.tsv` (source TAB target, a pair a line), or
              `train.<source_language>` and `train.<target_language>` (and the
              same for validation and test), a sentence a line;
            - `"prepared:DIR"`: a folder written by `keras-transformer prepare-data`
              (a `prepared.PreparedCorpus`: token ids for training, text for
              the held-out splits).
        source_language: the source side's language code.
        target_language: the target side's language code.
        data_dir: where TFDS keeps prepared datasets.
        ding_path: the Ding dictionary file.

    Raises:
        ValueError: unknown name, or languages the dataset does not have.
    """
    if name.startswith(prepared.PREFIX):
        return prepared.PreparedCorpus(name[len(prepared.PREFIX):], source_language, target_language)
    if name in DING_NAMES:
        languages = _languages(name, ("de", "en"), source_language, target_language)
        return Corpus("ding_de_en", *languages, kind="ding", data_dir=data_dir, ding_path=ding_path)
    if os.path.isdir(name):
        return _local_corpus(name, source_language, target_language)
    try:
        builder = tfds.builder(name, data_dir=data_dir)
    except ValueError as error:  # DatasetNotFoundError is a ValueError
        raise ValueError(
            f"Unknown dataset {name!r}: expected 'ding', a TFDS translation dataset "
            "such as 'wmt14_translate/de-en' or 'ted_hrlr_translate/pt_to_en', or a "
            "folder with train.tsv (or train.<lang> files). TFDS said: "
            f"{str(error).splitlines()[0]}"
        ) from None
    available = tuple(builder.info.features.keys())
    default = builder.info.supervised_keys or available[:2]
    languages = _languages(name, available, source_language or default[0],
                           target_language or default[1])
    return Corpus(name, *languages, kind="tfds", data_dir=data_dir)


def _languages(name, available, source, target):
    source, target = source or available[0], target or available[1]
    for language in (source, target):
        if language not in available:
            raise ValueError(
                f"Dataset {name!r} has no language {language!r}; it has {list(available)}."
            )
    if source == target:
        raise ValueError(f"Source and target language are both {source!r}.")
    return source, target


def _local_corpus(folder, source_language, target_language):
    if os.path.isfile(os.path.join(folder, "train.tsv")):
        return Corpus(folder, source_language or "source", target_language or "target", kind="tsv")
    if not (source_language and target_language):
        raise ValueError(
            f"Folder {folder!r} has no train.tsv; for one-sentence-a-line files "
            "give source_language and target_language (files train.<language>)."
        )
    for language in (source_language, target_language):
        path = os.path.join(folder, f"train.{language}")
        if not os.path.isfile(path):
            raise ValueError(f"Folder {folder!r} has neither train.tsv nor {path}.")
    return Corpus(folder, source_language, target_language, kind="text")


_LINE_BATCH = 1024
"""Lines of a TSV file split into columns at once."""


def _tsv_lines(path):
    """The lines of a `source<TAB>target` file, each checked for a TAB."""
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path} does not exist.")
    without_tab = []
    with tf.io.gfile.GFile(path, "rb") as lines:
        for number, line in enumerate(lines, start=1):
            if b"\t" not in line:
                without_tab.append(number)
    if without_tab:
        raise ValueError(f"{path}: no TAB in {describe_lines(without_tab)}; every line must be "
                         "'source<TAB>target': fix or remove them.")
    return tf.data.TextLineDataset(path)


def _tsv_columns(lines, path):
    """A batch of `source<TAB>target` lines of `path` -> `(sources, targets)`."""
    columns = tf.strings.split(lines, "\t", maxsplit=1)
    check = tf.debugging.assert_equal(
        columns.row_lengths(), tf.constant(2, tf.int64),
        message=f"every line of {path} must be 'source<TAB>target'")
    with tf.control_dependencies([check]):
        columns = columns.to_tensor()
    return columns[:, 0], columns[:, 1]


def _text_lines(source_path, target_path):
    """`(source, target)` lines of two files of the same number of lines."""
    counts = []
    for path in (source_path, target_path):
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"{path} does not exist.")
        with tf.io.gfile.GFile(path, "rb") as lines:  # bytes: any encoding damage is repaired later
            counts.append(sum(1 for _ in lines))
    if counts[0] != counts[1]:
        raise ValueError(
            f"{source_path} has {counts[0]} lines but {target_path} has {counts[1]}; "
            "line i of one must translate line i of the other."
        )
    return tf.data.Dataset.zip(
        (tf.data.TextLineDataset(source_path), tf.data.TextLineDataset(target_path))
    )


def _tfds_batches(builder, split, languages, batch_size):
    """Batches of `languages` text of a prepared TFDS split, read from its
    record files in order and parsed a batch at a time.

    Our own reader, because it is faster where one thread reads: TFDS's
    `as_dataset` parses each example in its own map call, and the thread
    hand-offs of one call an example made a single-threaded Beam worker
    spend many times as long on 46,000 Ding pairs as this reader does."""
    instructions = builder.info.splits[split].file_instructions
    files = tf.data.Dataset.from_tensor_slices((
        [instruction.filename for instruction in instructions],
        tf.constant([instruction.skip for instruction in instructions], tf.int64),
        tf.constant([instruction.take for instruction in instructions], tf.int64)))
    records = files.flat_map(
        lambda path, skip, take: tf.data.TFRecordDataset(path).skip(skip).take(take))
    features = {language: tf.io.FixedLenFeature([], tf.string) for language in languages}

    def parse(serialized):
        texts = tf.io.parse_example(serialized, features)
        return tuple(texts[language] for language in languages)

    return records.batch(batch_size).map(parse)
