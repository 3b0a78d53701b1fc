"""Parallel corpora by name: TFDS translation datasets, the Ding dictionary,
and local files. Each split comes back as a `tf.data.Dataset` of
`(source, target)` string pairs."""

import dataclasses
import os

import tensorflow as tf
import tensorflow_datasets as tfds

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

    def pairs(self, split, part=None):
        """`tf.data.Dataset` of `(source, target)` tf.string scalars.

        `part=(index, count)` reads only part `index` of `count` disjoint
        parts that together hold the split, for jobs that read a corpus in
        parallel (`keras_transformer.pipelines`): a TFDS dataset reads only
        its part's records (`tfds.even_splits`), local files are read
        whole and every `count`-th pair kept.
        """
        if split not in SPLITS:
            raise ValueError(f"Unknown split {split!r}; expected one of {SPLITS}.")
        if self.kind in ("tsv", "text"):
            if self.kind == "tsv":
                pairs = _tsv_pairs(os.path.join(self.name, f"{split}.tsv"))
            else:
                pairs = _text_pairs(
                    *(os.path.join(self.name, f"{split}.{language}")
                      for language in (self.source_language, self.target_language))
                )
            return pairs if part is None else pairs.shard(part[1], part[0])
        source, target = self.source_language, self.target_language

        def select(example):
            return example[source], example[target]

        # Training data: interleave the shard files in a fixed order, so that
        # corpora stored one after another (WMT's Europarl, Common Crawl, News
        # Commentary) mix before the shuffle buffer, and every worker of a
        # multi-machine run (and its tokenizer training) sees the same stream.
        examples = self._builder().as_dataset(
            split=split if part is None else tfds.even_splits(split, part[1])[part[0]],
            shuffle_files=split == "train" and part is None,
            read_config=tfds.ReadConfig(shuffle_seed=0))
        return examples.map(select, num_parallel_calls=tf.data.AUTOTUNE)

    def _builder(self):
        if self.kind == "ding":
            builder = ding.DingDeEn(data_dir=self.data_dir, source_path=self.ding_path)
        else:
            builder = tfds.builder(self.name, data_dir=self.data_dir)
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
            - `"prepared:DIR"`: a folder written by `examples/prepare_data.py`
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


def _tsv_pairs(path):
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

    def columns(line):
        parts = tf.strings.split(line, "\t", maxsplit=1)
        check = tf.debugging.assert_equal(
            tf.size(parts), 2, message=f"every line of {path} must be 'source<TAB>target'"
        )
        with tf.control_dependencies([check]):
            return parts[0], parts[1]

    return tf.data.TextLineDataset(path).map(columns)


def _text_pairs(source_path, target_path):
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
