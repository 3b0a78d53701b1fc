"""The tokenizer files of OPUS-MT (Marian) models, in plain Python.

An OPUS-MT folder on the Hugging Face Hub holds two SentencePiece models,
`source.spm` and `target.spm`, and a Marian vocabulary `vocab.json` (piece ->
id) that numbers the pieces of both; models with separate vocabularies add
`target_vocab.json` for the target side. The ids are the vocabulary's, not
SentencePiece's: a text is split into pieces by SentencePiece, and each piece
is looked up by its string.

`MarianVocabulary` gives exactly the ids and texts of Hugging Face's
`MarianTokenizer` (transformers 5) without TensorFlow, so that the
onnxruntime runner can use it; `marian_tokenizer.MarianTokenizer` does the
same inside the TensorFlow graph.
"""

import json
import os
import re
import sys

import sentencepiece

SOURCE_SPM = "source.spm"
TARGET_SPM = "target.spm"
VOCAB = "vocab.json"
TARGET_VOCAB = "target_vocab.json"
TOKENIZER_CONFIG = "tokenizer_config.json"

UNK = "<unk>"
EOS = "</s>"
PAD = "<pad>"
# Hugging Face treats these as "special tokens": found as whole strings in the
# input text before SentencePiece runs, and skipped by decode.
SPECIAL_TOKENS = (EOS, UNK, PAD)
SPIECE_UNDERLINE = "\u2581"


def _python_whitespace_class():
    """A RE2 character class of exactly the characters Python's `str.strip()`
    removes (RE2's own classes and `tf.strings.strip` know ASCII whitespace
    only, and Hugging Face strips the decoded text with `str.strip()`)."""
    spaces = [code for code in range(sys.maxunicode + 1) if chr(code).isspace()]
    return "[" + "".join(f"\\x{{{code:x}}}" for code in spaces) + "]"


# The rules below as RE2 patterns, for the tokenizers that run as graph ops
# (TensorFlow's `marian_tokenizer`, the ONNX `export.onnx_text`):
LANGUAGE_CODE_PREFIX_RE2 = r"(?s)^>>.*?<<"
"""A leading language code (see `split_language_code`); (?s): "." also
matches newlines, like Python's `str.find`."""
WHITESPACE_RE2 = _python_whitespace_class()
"""The characters `join_pieces` strips from both ends."""

# Marian vocabularies number their pieces 0..n-1; allow some holes (Hugging
# Face fills them from SentencePiece), but not ids so sparse that the dense
# id -> piece tables would be mostly empty (a corrupt file).
_MAX_SPARSITY = 2


# Splitting with this keeps the special tokens' strings as parts of their own.
_SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(token) for token in SPECIAL_TOKENS) + ")")


def split_language_code(text):
    """`(code, rest)`: a leading `>>xx<<` language code and the text after it
    (code is "" when there is none).

    Like Hugging Face's `remove_language_code`: the text must start with
    ">>", and the code runs to the first "<<" anywhere after that, whatever
    lies between.
    """
    if text.startswith(">>"):
        end = text.find("<<")
        if end != -1:
            return text[: end + 2], text[end + 2:]
    return "", text


class MarianVocabulary:
    """The source and target SentencePiece models and Marian vocabularies.

    Args:
        source_spm: bytes of `source.spm`.
        target_spm: bytes of `target.spm`.
        vocab: bytes of `vocab.json` (UTF-8 JSON object, piece -> id).
        target_vocab: bytes of `target_vocab.json` for models with separate
            vocabularies, else None.

    Attributes:
        pad_id, unk_id, eos_id: ids of `<pad>`, `<unk>`, `</s>` (one id each
            for both sides, as a Marian config has one `pad_token_id`).
        decoder_start_id: the first decoder input, Marian's pad id.
        source_vocab_size, target_vocab_size: number of ids of each side
            (largest id + 1), the model's embedding rows.
        separate_vocabs: whether the target side has its own vocabulary.
        language_codes: the `>>xx<<` entries of the vocabulary, in id order.
        special_ids: the ids `decode` skips (pad, unk, eos).
        decode_spm_name: the SentencePiece model `decode` uses, as Hugging
            Face does: `source.spm` when the vocabulary is shared,
            `target.spm` when separate.
        files: the file name -> bytes this vocabulary was built from.

    Raises:
        ValueError: a file is not a SentencePiece model / not a vocabulary
            JSON object, or lacks `<unk>`, `</s>` or `<pad>`.
    """

    def __init__(self, source_spm, target_spm, vocab, target_vocab=None, *, _names=None):
        names = {SOURCE_SPM: SOURCE_SPM, TARGET_SPM: TARGET_SPM, VOCAB: VOCAB,
                 TARGET_VOCAB: TARGET_VOCAB, **(_names or {})}
        self.files = {SOURCE_SPM: bytes(source_spm), TARGET_SPM: bytes(target_spm), VOCAB: bytes(vocab)}
        if target_vocab is not None:
            self.files[TARGET_VOCAB] = bytes(target_vocab)
        self.separate_vocabs = target_vocab is not None
        self._source_spm = _load_spm(source_spm, names[SOURCE_SPM])
        self._target_spm = _load_spm(target_spm, names[TARGET_SPM])
        self._source_vocab = _load_vocab(vocab, names[VOCAB])
        self._target_vocab = (_load_vocab(target_vocab, names[TARGET_VOCAB])
                              if self.separate_vocabs else self._source_vocab)

        self.unk_id = self._source_vocab[UNK]
        self.eos_id = self._source_vocab[EOS]
        self.pad_id = self._source_vocab[PAD]
        if self.separate_vocabs:
            for token in SPECIAL_TOKENS:
                if self._target_vocab[token] != self._source_vocab[token]:
                    raise ValueError(
                        f"{names[TARGET_VOCAB]} gives {token} id {self._target_vocab[token]} but "
                        f"{names[VOCAB]} gives {self._source_vocab[token]}; a Marian model has one "
                        f"id for it on both sides, so use the vocabularies the model was converted with."
                    )
        self.decoder_start_id = self.pad_id
        self.special_ids = frozenset((self.unk_id, self.eos_id, self.pad_id))
        self.source_vocab_size = max(self._source_vocab.values()) + 1
        self.target_vocab_size = max(self._target_vocab.values()) + 1
        self.language_codes = [piece for piece in sorted(self._source_vocab, key=self._source_vocab.get)
                               if piece.startswith(">>") and piece.endswith("<<")]

        # Hugging Face decodes with the *source* SentencePiece model unless
        # the vocabularies are separate (`use_source_tokenizer` defaults to
        # `not separate_vocabs`); we do the same so that texts match.
        self.decode_spm = self._target_spm if self.separate_vocabs else self._source_spm
        self.decode_spm_name = TARGET_SPM if self.separate_vocabs else SOURCE_SPM
        self._source_pieces = self._id_to_piece_table(self._source_vocab, self._source_spm)
        self._target_pieces = self._id_to_piece_table(self._target_vocab, self.decode_spm)

    @classmethod
    def from_directory(cls, directory):
        """Reads `source.spm`, `target.spm`, `vocab.json` and, when present,
        `target_vocab.json` from an OPUS-MT folder.

        A `tokenizer_config.json` with a boolean `separate_vocabs` decides,
        as for Hugging Face, whether `target_vocab.json` is used.
        """
        directory = os.fspath(directory)
        paths = {name: os.path.join(directory, name)
                 for name in (SOURCE_SPM, TARGET_SPM, VOCAB, TARGET_VOCAB, TOKENIZER_CONFIG)}
        separate = os.path.exists(paths[TARGET_VOCAB])
        if os.path.exists(paths[TOKENIZER_CONFIG]):
            config = _parse_json(_read(paths[TOKENIZER_CONFIG]), paths[TOKENIZER_CONFIG])
            if isinstance(config, dict) and isinstance(config.get("separate_vocabs"), bool):
                separate = config["separate_vocabs"]
        return cls(
            _read(paths[SOURCE_SPM]),
            _read(paths[TARGET_SPM]),
            _read(paths[VOCAB]),
            _read(paths[TARGET_VOCAB]) if separate else None,
            _names=paths,
        )

    def save(self, directory):
        """Writes the files (byte copies of those read) into `directory`.

        With a shared vocabulary, a `target_vocab.json` left there is removed,
        as `from_directory` would otherwise read the folder as separate.
        """
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        for name, data in self.files.items():
            with open(os.path.join(directory, name), "wb") as file:
                file.write(data)
        stale = os.path.join(directory, TARGET_VOCAB)
        if not self.separate_vocabs and os.path.exists(stale):
            os.remove(stale)

    @property
    def source_vocab(self):
        """A copy of the source vocabulary, piece -> id."""
        return dict(self._source_vocab)

    @property
    def target_vocab(self):
        """A copy of the target vocabulary, piece -> id (the source's when
        shared)."""
        return dict(self._target_vocab)

    def encode(self, text):
        """Source ids of `text`, without the end id.

        `MarianTokenizer(text)["input_ids"][:-1]`: the special tokens'
        strings in the text become their ids, a leading `>>xx<<` stays one
        token, SentencePiece splits the rest, and pieces missing from the
        vocabulary become `<unk>`.
        """
        return self._encode(text, self._source_spm, self._source_vocab)

    def encode_target(self, text):
        """Target ids of `text`, without the end id (HF's `text_target=`)."""
        return self._encode(text, self._target_spm, self._target_vocab)

    def _encode(self, text, spm, vocab):
        ids = []
        # Hugging Face first splits the text at the special tokens' strings
        # (its added-token trie), then tokenizes each part on its own: each
        # part gets SentencePiece's leading "▁", and may start with a
        # language code.
        for part in _SPECIAL_SPLIT.split(text):
            if not part:
                continue
            if part in SPECIAL_TOKENS:
                ids.append(self._source_vocab[part])
                continue
            code, rest = split_language_code(part)
            pieces = ([code] if code else []) + spm.encode(rest, out_type=str)
            ids.extend(vocab.get(piece, self.unk_id) for piece in pieces)
        return ids

    def decode(self, ids):
        """Target ids -> text, as `MarianTokenizer.decode(ids,
        skip_special_tokens=True)`.

        Everything from the first end id on is dropped (Hugging Face goes on
        past it, but what follows a generated end id is padding, which it
        skips), and so are `<pad>` (the start id) and `<unk>`.

        Raises:
            ValueError: an id outside the target vocabulary.
        """
        pieces = []
        for index in ids:
            index = int(index)
            if index == self.eos_id:
                break
            if index in self.special_ids:
                continue
            pieces.append(self._piece(index, self._target_pieces, "target"))
        return join_pieces(pieces, self.decode_spm.decode_pieces)

    def piece(self, index, target=False):
        """The vocabulary string of one id (source side unless `target`)."""
        return self._piece(int(index), self._target_pieces if target else self._source_pieces,
                           "target" if target else "source")

    def pieces(self, ids, target=False):
        """The vocabulary strings of some ids (for display)."""
        return [self.piece(index, target) for index in ids]

    def source_spm_id_table(self):
        """The source vocabulary's id of each `source.spm` id (`unk_id` for
        pieces the vocabulary lacks), for graph-side tables: what `encode`
        gives for a piece, by SentencePiece id."""
        return [self._source_vocab.get(self._source_spm.id_to_piece(index), self.unk_id)
                for index in range(self._source_spm.get_piece_size())]

    def decode_piece_table(self):
        """The piece `decode` uses for each target id 0..n-1 (None for an id
        that has none), for graph-side tables."""
        return list(self._target_pieces)

    def _piece(self, index, table, side):
        piece = table[index] if 0 <= index < len(table) else None
        if piece is None:
            raise ValueError(f"Id {index} is not in the {side} vocabulary (0..{len(table) - 1}).")
        return piece

    @staticmethod
    def _id_to_piece_table(vocab, spm):
        """id -> piece for ids 0..max, as Hugging Face's `_convert_id_to_token`:
        the vocabulary's piece (the last entry with that id wins, as in its
        inverted dict); for an id missing from the vocabulary, SentencePiece's
        piece of that number, or None past the SentencePiece model's end
        (where Hugging Face raises)."""
        table = [None] * (max(vocab.values()) + 1)
        for piece, index in vocab.items():
            table[index] = piece
        for index, piece in enumerate(table):
            if piece is None and index < spm.get_piece_size():
                table[index] = spm.id_to_piece(index) or UNK
        return table


def join_pieces(pieces, decode_pieces):
    """Hugging Face's `MarianTokenizer.convert_tokens_to_string`.

    Runs of ordinary pieces are decoded by SentencePiece (`decode_pieces`);
    a special token's string (which only an id missing from the vocabulary
    can bring, through SentencePiece's own `<unk>` or `</s>` piece) is put in
    as it is, followed by a space; then any "▁" left (pieces SentencePiece
    does not know are passed through unchanged) becomes a space, and the
    ends are stripped.
    """
    text, run = "", []
    for piece in pieces:
        if piece in SPECIAL_TOKENS:
            text += decode_pieces(run) + piece + " "
            run = []
        else:
            run.append(piece)
    text += decode_pieces(run)
    return text.replace(SPIECE_UNDERLINE, " ").strip()


def _read(path):
    if not os.path.isfile(path):
        raise ValueError(f"{path} does not exist; an OPUS-MT tokenizer folder needs source.spm, "
                         f"target.spm and vocab.json (download them with the model).")
    with open(path, "rb") as file:
        return file.read()


def _load_spm(data, name):
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(bytes(data))
    except (RuntimeError, OSError, TypeError) as error:
        raise ValueError(f"{name} is not a SentencePiece model ({error}); "
                         f"use the .spm file that came with the model.") from None
    return processor


def _parse_json(data, name):
    try:
        return json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{name} is not valid UTF-8 JSON ({error}); "
                         f"use the file that came with the model.") from None


def _load_vocab(data, name):
    vocab = _parse_json(data, name)
    if not isinstance(vocab, dict) or not all(
            isinstance(index, int) and not isinstance(index, bool) and index >= 0
            for index in vocab.values()):
        raise ValueError(f"{name} is not a Marian vocabulary (a JSON object of piece -> "
                         f"non-negative integer id); use the file that came with the model.")
    missing = [token for token in (UNK, EOS, PAD) if token not in vocab]
    if missing:
        raise ValueError(f"{name} has no {', '.join(missing)} entry; Hugging Face's OPUS-MT "
                         f"conversion adds <pad> as the last id, so use its converted vocab files.")
    if max(vocab.values()) + 1 > _MAX_SPARSITY * len(vocab):
        raise ValueError(f"{name} has ids up to {max(vocab.values())} for {len(vocab)} entries; "
                         f"Marian vocabularies number their pieces 0..n-1.")
    return vocab
