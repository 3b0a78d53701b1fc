"""FSMT (fairseq WMT19) tokenization behind the interface of
`keras_transformer.data.Tokenizer`.

FSMT tokenizes with the Moses scripts: hundreds of language-specific regular
expressions that no TensorFlow op reproduces exactly. `FsmtTokenizer`
therefore runs `FsmtVocabulary` (plain Python, exact against
`transformers.FSMTTokenizer`) through `tf.numpy_function`: it takes and
returns tensors like the other tokenizers and works eagerly, inside a
`tf.function` and in a `tf.data` pipeline, but its ops call back into this
Python process, so it cannot be saved into a SavedModel (and so cannot run
in TensorFlow Serving or a text-in export). `in_graph = False` tells callers
so: the exporter then writes no text-in SavedModel.
"""

import os

import numpy as np
import tensorflow as tf

from keras_transformer.vocabularies.fsmt import FsmtVocabulary
from keras_transformer.data.python_tokenize import python_tokenize


class FsmtTokenizer(tf.Module):
    """FSMT's Moses and BPE tokenization with the `Tokenizer` interface.

    Args:
        vocabulary: an `FsmtVocabulary`.

    Attributes:
        pad_id, unk_id, eos_id: the vocabulary's special ids (fairseq: 1, 3, 2).
        bos_id: the decoder start id, which for fairseq models is the end id
            (2); FSMT's own start token `<s>` (0) is never used by the models.
        vocab_size, target_vocab_size: source / target number of ids.
        vocabulary: the `FsmtVocabulary`.
        in_graph: False: `tokenize` and `detokenize` run Python through
            `tf.numpy_function` and cannot be exported into a SavedModel.

    Text is UTF-8; undecodable bytes become U+FFFD before tokenizing.
    """

    in_graph = False

    def __init__(self, vocabulary):
        super().__init__(name="fsmt_tokenizer")
        if not isinstance(vocabulary, FsmtVocabulary):
            raise TypeError(f"FsmtTokenizer needs an FsmtVocabulary; got {type(vocabulary).__name__}.")
        self.vocabulary = vocabulary
        self.pad_id = vocabulary.pad_id
        self.unk_id = vocabulary.unk_id
        self.eos_id = vocabulary.eos_id
        self.bos_id = vocabulary.decoder_start_id
        self.vocab_size = vocabulary.source_vocab_size
        self.target_vocab_size = vocabulary.target_vocab_size

    @classmethod
    def from_directory(cls, directory):
        """A tokenizer on an FSMT folder (see `FsmtVocabulary.from_directory`)."""
        return cls(FsmtVocabulary.from_directory(directory))

    def save(self, directory):
        """Writes the tokenizer files (`vocab-src.json`, `vocab-tgt.json`,
        `merges.txt`, `tokenizer_config.json`) into `directory`."""
        self.vocabulary.save(os.fspath(directory))

    def pieces(self, ids):
        """The source-side vocabulary strings of some ids (for display)."""
        return self.vocabulary.pieces([int(i) for i in ids])

    def target_pieces(self, ids):
        """The target-side vocabulary strings of some ids (for display)."""
        return self.vocabulary.pieces([int(i) for i in ids], target=True)

    def tokenize(self, texts):
        """Source-language strings `(batch,)` -> ragged int32 source ids
        `(batch, None)`, no end id (a scalar string gives a 1-D tensor)."""
        return self._tokenize(texts, self.vocabulary.encode)

    def tokenize_target(self, texts):
        """Target-language strings `(batch,)` -> ragged int32 target ids
        `(batch, None)`, no end id."""
        return self._tokenize(texts, self.vocabulary.encode_target)

    def _tokenize(self, texts, encode):
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:
            return self._tokenize(texts[None], encode)[0]

        return python_tokenize(
            texts, lambda batch: [encode(text.decode("utf-8", errors="replace")) for text in batch],
            name="fsmt_tokenize")

    def detokenize(self, ids):
        """Target ids `(batch, length)` (dense or ragged, without the start
        id) -> strings `(batch,)`.

        Everything from the first end id on is dropped, and so are the other
        special ids and ids outside the target vocabulary; the text is
        Hugging Face's `decode(ids, skip_special_tokens=True)`. Leave out the
        decoder's start id: it is the end id, and would end the text there.
        A 1-D tensor of ids gives a scalar string.
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=self.pad_id)
        ids = tf.cast(ids, tf.int32)
        size = self.target_vocab_size
        decode = self.vocabulary.decode

        def run(batch):
            rows = batch.reshape(int(np.prod(batch.shape[:-1])), batch.shape[-1])
            texts = [decode([int(i) for i in row if 0 <= i < size]).encode("utf-8") for row in rows]
            return np.array(texts, dtype=object).reshape(batch.shape[:-1])

        texts = tf.numpy_function(run, [ids], tf.string, name="fsmt_detokenize")
        texts.set_shape(ids.shape[:-1] if ids.shape.rank is not None else None)
        return texts
