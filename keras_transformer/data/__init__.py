"""Parallel text in, batches of token ids out (TensorFlow only).

- `corpus(name)`: TFDS translation datasets, the Ding dictionary, local files.
- `train_tokenizer`, `Tokenizer`: the shared SentencePiece vocabulary;
  `load_tokenizer`: a run folder's tokenizer, ours or an imported model's.
- `encode_pairs`, `length_report`, `token_batches`: ids, length filtering
  (counted, never silent) and token-budget batching by length buckets.
"""

from keras_transformer.data.batching import (
    LengthReport,
    bucket_boundaries,
    encode_pairs,
    length_filter,
    length_report,
    token_batches,
)
from keras_transformer.data.corpora import Corpus, corpus
from keras_transformer.data.ding import DingDeEn
from keras_transformer.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Tokenizer,
    clean_texts,
    has_tokenizer,
    load_tokenizer,
    train_tokenizer,
)

__all__ = [
    "BOS_ID",
    "EOS_ID",
    "PAD_ID",
    "UNK_ID",
    "Corpus",
    "DingDeEn",
    "LengthReport",
    "Tokenizer",
    "bucket_boundaries",
    "corpus",
    "encode_pairs",
    "clean_texts",
    "has_tokenizer",
    "load_tokenizer",
    "length_filter",
    "length_report",
    "token_batches",
    "train_tokenizer",
]
