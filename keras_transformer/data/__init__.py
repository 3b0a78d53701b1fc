"""Parallel text in, batches of token ids out (TensorFlow only).

- `corpus(name)`: TFDS translation datasets, the Ding dictionary, local files.
- `train_tokenizer`, `Tokenizer`: the shared SentencePiece vocabulary (a
  run folder's tokenizer, ours or an imported model's, is
  `run_folder.load_tokenizer`'s).
- `encode_pairs` (`encode_blocks`: a block of pairs at a time; `autotuned`
  for reading their cache), `length_report`,
  `token_batches` (`block_token_batches`): ids, length filtering
  (counted, never silent) and token-budget batching by length buckets
  (`shape_boundaries`: the few fixed shapes of batches for XLA).
- `is_full_sentence`, `repeat_full_sentences`, `full_sentences`,
  `switched`: whole sentences among a dictionary's words and phrases, read
  more often in training, or alone in its last part.
- `PreparedCorpus` (`corpus("prepared:DIR")`): training data tokenized once
  by `keras-transformer prepare-data`.

The corpora (`corpus`, `Corpus`, `DingDeEn`, and the modules `corpora` and
`ding`) are imported on first use: they load TensorFlow Datasets, about a
second of a translation's start-up that reads no corpus.
"""

import importlib

from keras_transformer.data.batching import (
    LengthReport,
    autotuned,
    batch_count,
    block_token_batches,
    bucket_boundaries,
    encode_blocks,
    encode_pairs,
    fits,
    length_filter,
    length_report,
    shape_boundaries,
    token_batches,
)
from keras_transformer.data.prepared import PreparedCorpus
from keras_transformer.data.sentences import (
    full_sentences,
    is_full_sentence,
    is_full_sentence_tensor,
    repeat_full_sentences,
    switched,
)
from keras_transformer.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    clean_texts,
    encode_sources,
    encode_targets,
    train_corpus_tokenizer,
    train_tokenizer,
)

# Names imported on first use, and the modules that define them.
_LAZY = {"Corpus": "corpora", "corpus": "corpora", "DingDeEn": "ding"}
_LAZY_MODULES = ("corpora", "ding")


def __getattr__(name):
    """Imports the corpora when first used (see the module docstring)."""
    if name in _LAZY:
        return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))


__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "Corpus",
    "DingDeEn",
    "LengthReport",
    "PreparedCorpus",
    "Tokenizer",
    "autotuned",
    "batch_count",
    "block_token_batches",
    "bucket_boundaries",
    "corpus",
    "encode_blocks",
    "encode_pairs",
    "clean_texts",
    "encode_sources",
    "encode_targets",
    "fits",
    "full_sentences",
    "is_full_sentence",
    "is_full_sentence_tensor",
    "length_filter",
    "length_report",
    "repeat_full_sentences",
    "shape_boundaries",
    "switched",
    "token_batches",
    "train_corpus_tokenizer",
    "train_tokenizer",
]
