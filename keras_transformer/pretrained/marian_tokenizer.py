"""OPUS-MT (Marian) tokenization as TensorFlow ops.

`MarianTokenizer` gives, inside the TensorFlow graph, the ids and texts that
`MarianVocabulary` (and Hugging Face's `MarianTokenizer`) give in Python, so
that a text-in SavedModel of a converted OPUS-MT model tokenizes exactly as
the original. It has the interface of `keras_transformer.data.Tokenizer`.

How Hugging Face's steps map to graph ops:
  - split the text at the strings `</s>`, `<unk>`, `<pad>` (its added-token
    trie): a regex marks them, `tf.strings.split` cuts at the marks;
  - a leading `>>xx<<` language code of each part: regexes;
  - SentencePiece on the rest, as piece strings (`out_type=tf.string`; the
    Marian ids belong to the strings, and an unknown character's piece is its
    own text, which may still be in the shared vocabulary), then a
    `StaticHashTable` piece -> id with `<unk>` as default;
  - decoding: a dense id -> piece table (`tf.gather`), SentencePiece's
    `detokenize` on piece strings, "▁" -> " ", and Python's `str.strip`.
"""

import hashlib
import os

import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.vocabularies.marian import (
    LANGUAGE_CODE_PREFIX_RE2,
    SOURCE_SPM,
    SPECIAL_TOKENS,
    SPIECE_UNDERLINE,
    TARGET_SPM,
    WHITESPACE_RE2,
    MarianVocabulary,
)

# The special tokens' strings hold no regex metacharacters.
_SPECIAL_PATTERN = "|".join(SPECIAL_TOKENS)
_MARK = b"\xff"
# A part that starts with ">>" and has a "<<" later: the code runs to the
# first "<<" ((?s): "." also matches newlines, like Python's str.find).
_CODE_FULL_MATCH = r"(?s)>>.*?<<.*"


class MarianTokenizer(tf.Module):
    """OPUS-MT tokenization as TensorFlow ops (tf-text SentencePiece + tables).

    Args:
        vocabulary: a `MarianVocabulary`.

    Attributes:
        pad_id, unk_id, eos_id: the vocabulary's special ids.
        bos_id: the decoder start id (Marian's pad id).
        vocab_size, target_vocab_size: source / target number of ids.
        vocabulary: the `MarianVocabulary`.

    Like `keras_transformer.data.Tokenizer`, create it after seeding:
    `tf.random.set_seed` clears tf-text's SentencePiece resources of
    tokenizers made before.
    """

    in_graph = True

    def __init__(self, vocabulary):
        super().__init__(name="marian_tokenizer")
        if not isinstance(vocabulary, MarianVocabulary):
            raise TypeError(f"MarianTokenizer needs a MarianVocabulary; got {type(vocabulary).__name__}.")
        self.vocabulary = vocabulary
        self.pad_id = vocabulary.pad_id
        self.unk_id = vocabulary.unk_id
        self.eos_id = vocabulary.eos_id
        self.bos_id = vocabulary.decoder_start_id
        self.vocab_size = vocabulary.source_vocab_size
        self.target_vocab_size = vocabulary.target_vocab_size

        self._source_spm = _sentencepiece(vocabulary.files[SOURCE_SPM])
        self._target_spm = _sentencepiece(vocabulary.files[TARGET_SPM])
        self._source_table = _piece_to_id_table(vocabulary.source_vocab, self.unk_id)
        self._target_table = (_piece_to_id_table(vocabulary.target_vocab, self.unk_id)
                              if vocabulary.separate_vocabs else self._source_table)
        # Hugging Face decodes with the source SentencePiece model when the
        # vocabulary is shared; `MarianVocabulary` says which.
        self._decode_spm = self._target_spm if vocabulary.decode_spm_name == TARGET_SPM else self._source_spm
        table = vocabulary.decode_piece_table()
        self._decode_pieces = tf.constant([piece or "" for piece in table], tf.string)
        # Ids the graph drops when decoding: the special ids, and ids with no
        # piece (holes in the vocabulary past SentencePiece's end, where
        # Hugging Face raises).
        self._decode_keep = tf.constant(
            [piece is not None and index not in vocabulary.special_ids
             for index, piece in enumerate(table)], tf.bool)

    @classmethod
    def from_directory(cls, directory):
        """A tokenizer on an OPUS-MT folder (see `MarianVocabulary.from_directory`)."""
        return cls(MarianVocabulary.from_directory(directory))

    def save(self, directory):
        """Writes the tokenizer files into `directory`."""
        self.vocabulary.save(os.fspath(directory))

    def pieces(self, ids):
        """The source-side vocabulary strings of some ids (for display)."""
        return self.vocabulary.pieces([int(i) for i in ids])

    def target_pieces(self, ids):
        """The target-side vocabulary strings of some ids (for display)."""
        return self.vocabulary.pieces([int(i) for i in ids], target=True)

    def tokenize(self, texts):
        """Strings `(batch,)` -> ragged int32 source ids `(batch, None)`, no
        end id; one string -> int32 ids `(None,)`."""
        return self._tokenize(texts, self._source_spm, self._source_table)

    def tokenize_target(self, texts):
        """Strings `(batch,)` -> ragged int32 target ids `(batch, None)`, no
        end id; one string -> int32 ids `(None,)`."""
        return self._tokenize(texts, self._target_spm, self._target_table)

    def _tokenize(self, texts, spm, table):
        texts = tf.convert_to_tensor(texts, tf.string)
        if texts.shape.rank == 0:  # one string, as tf.data maps pairs
            return self._tokenize(texts[None], spm, table)[0]
        # Hugging Face's added-token split: the special tokens' strings
        # become parts of their own; each part is tokenized alone. Not
        # `tensorflow_text.regex_split`, which cuts a text at a NUL
        # character: mark the tokens with the byte 0xFF (never in UTF-8) and
        # split there; the empty parts this leaves give no ids.
        parts = tf.strings.split(
            tf.strings.regex_replace(texts, f"({_SPECIAL_PATTERN})", _MARK + rb"\1" + _MARK), _MARK)
        flat = parts.flat_values
        is_special = tf.strings.regex_full_match(flat, _SPECIAL_PATTERN)
        has_code = tf.logical_and(tf.logical_not(is_special),
                                  tf.strings.regex_full_match(flat, _CODE_FULL_MATCH))
        rest = tf.strings.regex_replace(flat, LANGUAGE_CODE_PREFIX_RE2, "", replace_global=False)
        code = tf.strings.substr(flat, tf.zeros_like(tf.strings.length(flat)),
                                 tf.strings.length(flat) - tf.strings.length(rest))
        rest = tf.where(is_special, "", rest)
        # A part's first id: its special token's, or its language code's;
        # then the ids of its SentencePiece pieces.
        head = tf.where(is_special, flat, code)
        has_head = tf.logical_or(is_special, has_code)
        head_ids = tf.RaggedTensor.from_row_lengths(
            table.lookup(tf.boolean_mask(head, has_head)), tf.cast(has_head, tf.int64))
        piece_ids = table.lookup(spm.tokenize(rest))
        part_ids = tf.concat([head_ids, piece_ids], axis=1)
        return tf.RaggedTensor.from_row_splits(part_ids, parts.row_splits).merge_dims(1, 2)

    def detokenize(self, ids):
        """Target ids `(batch, length)` (dense or ragged) -> strings `(batch,)`.

        Everything from the first end id on is dropped, and so are pad (the
        start id) and unk; the text is Hugging Face's
        `decode(ids, skip_special_tokens=True)`. Ids outside the target
        vocabulary are dropped too (where `MarianVocabulary.decode` raises).
        """
        if isinstance(ids, tf.RaggedTensor):
            ids = ids.to_tensor(default_value=self.pad_id)
        ids = tf.cast(ids, tf.int32)
        before_end = tf.cumsum(tf.cast(ids == self.eos_id, tf.int32), axis=-1, exclusive=True) == 0
        in_range = (ids >= 0) & (ids < self.target_vocab_size)
        safe = tf.where(in_range, ids, 0)
        keep = before_end & in_range & tf.gather(self._decode_keep, safe)
        pieces = tf.gather(self._decode_pieces, tf.ragged.boolean_mask(safe, keep))
        return self._join_pieces(pieces)

    def _join_pieces(self, pieces):
        """`marian_vocabulary.join_pieces` on ragged pieces `(batch, None)`.

        Runs of ordinary pieces between special tokens' strings are decoded
        separately (SentencePiece drops the leading "▁" of each run); each
        special string is kept, followed by a space. Rows are split into
        segments: a segment is a run plus the special string that ends it.
        """
        flat = pieces.flat_values
        is_special = tf.zeros_like(flat, tf.bool)
        for token in SPECIAL_TOKENS:
            is_special |= tf.equal(flat, token)
        special = tf.cast(is_special, tf.int64)
        # Row r has (its special count + 1) segments; a piece's segment
        # number counts the rows and the special strings before it.
        segment = pieces.value_rowids() + tf.cumsum(special, exclusive=True)
        specials_per_row = tf.math.unsorted_segment_sum(special, pieces.value_rowids(), pieces.nrows())
        segments_per_row = specials_per_row + 1
        num_segments = tf.reduce_sum(segments_per_row)
        ordinary = tf.logical_not(is_special)
        runs = tf.RaggedTensor.from_value_rowids(
            tf.boolean_mask(flat, ordinary), tf.boolean_mask(segment, ordinary), nrows=num_segments)
        decoded = self._decode_spm.detokenize(runs)
        endings = tf.tensor_scatter_nd_update(
            tf.fill([num_segments], ""),
            tf.boolean_mask(segment, is_special)[:, None],
            tf.boolean_mask(flat, is_special) + " ")
        texts = tf.strings.reduce_join(
            tf.RaggedTensor.from_row_lengths(decoded + endings, segments_per_row), axis=1)
        texts = tf.strings.regex_replace(texts, SPIECE_UNDERLINE, " ")
        return tf.strings.regex_replace(texts, f"^{WHITESPACE_RE2}+|{WHITESPACE_RE2}+$", "")


def _sentencepiece(model):
    """A tf-text SentencePiece tokenizer giving piece strings.

    Named after a digest of the model: tf-text's SentencePiece resource is
    owned by its kernel and, in a reloaded SavedModel, found again by the
    name of the node that created it, so two models under the default name
    (source and target) would both get the first one's.
    """
    digest = hashlib.sha256(model).hexdigest()[:16]
    return tf_text.SentencepieceTokenizer(model=model, out_type=tf.string, name=f"spm_{digest}")


def _piece_to_id_table(vocab, unk_id):
    """A `StaticHashTable` piece -> int32 id; pieces not in it give `unk_id`."""
    pieces = list(vocab)
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(pieces, tf.string), tf.constant([vocab[p] for p in pieces], tf.int32)),
        default_value=unk_id)
