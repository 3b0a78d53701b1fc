"""LiteRT (TensorFlow Lite) files of a model, for phones and other devices,
with the cached beam search inside:

- `search_ids.tflite`: `source_ids` int32 `(batch, S)` (padded with the pad
  id, each source ending with the end id) -> `target_ids` int32
  `(batch, K, T)` (best first, each ending with the end id, then padding; no
  start id) and `scores` float32 `(batch, K)`. LiteRT builtin ops only.
- `translate.tflite`: `text` string `(batch,)` -> `translations` string
  `(batch, K)` and `scores` float32 `(batch, K)`, best first, SentencePiece
  tokenizing and detokenizing inside (tf-text's `FastSentencepieceTokenizer`,
  two custom ops); a blank sentence gives "" and score 0; a sentence longer
  than the model's `max_length - 1` tokens is cut to them. Where LiteRT
  cannot tokenize as the model was trained (`text_in_refusal`: a BPE
  SentencePiece model), it takes `source_ids` as `search_ids.tflite` does
  and detokenizes inside; a row without tokens (just the end id) is blank.

The search is the model's `decoding.beam_search` (greedy search with one
beam) with the model config's beam size, length penalty and decode margin,
fixed in the files.

How the files are made, and why so (DESIGN.md, section 8):
- the functions are saved as a SavedModel and loaded back, and the loaded
  concrete functions converted (`TFLiteConverter.from_concrete_functions`):
  converting the in-process functions leaves the weights as resource
  variables that nothing initializes;
- builtins only (`OpsSet.TFLITE_BUILTINS`): Flex (TensorFlow kernels inside
  LiteRT) makes an app many megabytes larger (docs/on-device.md), and
  Python's LiteRT interpreters refuse it.
  Custom ops must be allowed for tf-text's; `check_ops` then refuses a file
  with any other (an op the converter could not lower arrives as a custom
  op of its TensorFlow name);
- `int8` stores the weights as int8 (LiteRT's dynamic-range quantization:
  matmuls in int8 with activations quantized on the fly), `float16` as
  float16 (computed in float32).

Text in LiteRT, what differs from the SavedModel:
- `FastSentencepieceTokenizer` tokenizes exactly only unigram SentencePiece
  models (the imported OPUS-MT models', and runs trained with
  `--tokenizer-type unigram`); its detokenizer is exact for BPE too;
- the text is not cleaned in the file (NUL, invalid UTF-8: the string ops
  that do it are Flex-only): clean it first
  (`keras_transformer.textfiles.clean_text`), as the runtimes do;
- Marian (OPUS-MT): a leading `>>xx<<` language code is one id (byte ops of
  tf-text: two more custom ops), SentencePiece ids of `source.spm` map to
  the vocabulary's through a table, target ids are decoded by a
  SentencePiece model whose pieces are the vocabulary's; as in
  `translate.onnx`, the strings `</s>`, `<unk>` and `<pad>` in a text are
  tokenized as text, and a character `source.spm` lacks becomes `<unk>`.
"""

import os
import tempfile
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from keras_transformer.data import Tokenizer, encode_sources
from keras_transformer.decoding.translator import search
from keras_transformer.export import saved_model
from keras_transformer.export.checks import CHECK_SENTENCES, agreement, require, run_checker
from keras_transformer.export.formats import ExportFormat
from keras_transformer.export.traced import graph_function
from keras_transformer.names import QUANTIZATIONS as WEIGHTS
from keras_transformer.pretrained.marian_tokenizer import MarianTokenizer
from keras_transformer.runtimes import translate_litert
from keras_transformer.runtimes.translate_litert import SEARCH_FILE, TRANSLATE_FILE
from keras_transformer.vocabularies import sentencepiece_proto
from keras_transformer.vocabularies.marian import SOURCE_SPM, SPIECE_UNDERLINE

SENTENCEPIECE_OPS = ("TFText>FastSentencepieceTokenize", "TFText>FastSentencepieceDetokenize")
BYTE_OPS = ("TFText>ByteSplitWithOffsets", "TFText>ByteSplitByOffsets")
"""tf-text's ops a Marian `translate.tflite` adds (its language codes)."""

_IDS = tf.TensorSpec([None, None], tf.int32)
_TEXT = tf.TensorSpec([None], tf.string)


def check_exportable(tokenizer):
    """Raises a one-line ValueError for a tokenizer LiteRT cannot hold even
    as a detokenizer (FSMT's Moses and BPE, in Python)."""
    if not isinstance(tokenizer, (Tokenizer, MarianTokenizer)):
        raise ValueError(f"A {type(tokenizer).__name__} is not SentencePiece, which is the only "
                         "tokenizer LiteRT can hold; export this model --formats onnx or "
                         "ctranslate2.")


def text_in_refusal(tokenizer):
    """None where `translate.tflite` can take text, else why not (one line
    that says how to get it)."""
    kind = sentencepiece_proto.model_type(tokenizer.vocabulary.files[SOURCE_SPM]) \
        if isinstance(tokenizer, MarianTokenizer) else tokenizer.model_type
    if kind == "unigram":
        return None
    return (f"its SentencePiece model is {kind.upper()}, which LiteRT's SentencePiece op (tf-text's "
            "FastSentencepieceTokenizer) tokenizes differently from the model's training, so "
            f"{TRANSLATE_FILE} takes token ids (tokenize with sentencepiece); for text in, train "
            "with --tokenizer-type unigram")


def convert(model, tokenizer, weights=("float32",)):
    """The two files, converted once for each of `weights` (`WEIGHTS`):
    `{weights: {file name: bytes}}`.

    Raises:
        ValueError: a tokenizer LiteRT cannot hold (`check_exportable`), or
            a file the converter could make only with ops LiteRT lacks.
    """
    check_exportable(tokenizer)
    unknown = set(weights) - set(WEIGHTS)
    if unknown:
        raise ValueError(f"Unknown LiteRT weights {sorted(unknown)}; choose from {WEIGHTS}.")
    module = LiteRTModule(model, tokenizer, text_in=text_in_refusal(tokenizer) is None)
    files = {}
    with tempfile.TemporaryDirectory(prefix="litert-") as scratch:
        saved_model.save_traced(scratch, module.signatures(), [model])
        loaded = tf.saved_model.load(scratch)
        for kind in weights:
            files[kind] = {name: _convert(loaded, loaded.signatures[signature], kind)
                           for name, signature in ((SEARCH_FILE, "search_ids"),
                                                   (TRANSLATE_FILE, "translate"))}
    return files


def _convert(loaded, function, weights):
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function], loaded)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.allow_custom_ops = True  # tf-text's; `check_ops` refuses any other
    if weights != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if weights == "float16":
        converter.target_spec.supported_types = [tf.float16]
    data = converter.convert()
    check_ops(data)
    return data


def custom_ops(data):
    """The custom ops a .tflite file (its bytes) uses, sorted."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    codes = (model.OperatorCodes(i) for i in range(model.OperatorCodesLength()))
    return sorted(code.CustomCode().decode() for code in codes
                  if max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
                  == schema.BuiltinOperator.CUSTOM)


def check_ops(data):
    """Raises a one-line ValueError if a .tflite file uses custom ops other
    than tf-text's SentencePiece and byte ops (what the converter could not
    lower to builtins: Flex, which LiteRT's Python interpreters refuse)."""
    others = sorted(set(custom_ops(data)) - set(SENTENCEPIECE_OPS + BYTE_OPS))
    if others:
        raise ValueError(f"LiteRT has no builtin op for TensorFlow's {', '.join(others)} in this "
                         "model, and Flex ops are not exported; the model cannot be a "
                         "LiteRT file.")


class LiteRTModule(tf.Module):
    """The functions the two files hold (see the module docstring).

    Args:
        model: a `Transformer`.
        tokenizer: its `Tokenizer` or `MarianTokenizer`.
        text_in: whether `translate` takes text (else source ids).
    """

    def __init__(self, model, tokenizer, text_in):
        super().__init__(name="litert")
        self.model = model
        config = model.config
        self._settings = (config.beam_size, float(config.length_penalty), config.decode_margin)
        self._max_tokens = config.max_length - 1
        self._ids = {"pad": tokenizer.pad_id, "eos": tokenizer.eos_id}
        self._text = (_MarianText if isinstance(tokenizer, MarianTokenizer)
                      else _SentencePieceText)(tokenizer)
        self.search_ids = graph_function(self._search_ids, [_IDS])
        self.translate = graph_function(self._translate_text if text_in else self._translate_ids,
                                        [_TEXT if text_in else _IDS])

    def signatures(self):
        """Name -> concrete function, for `tf.saved_model.save`."""
        return {"search_ids": self.search_ids.get_concrete_function(),
                "translate": self.translate.get_concrete_function()}

    def _search(self, source_ids):
        return search(self.model, source_ids, *self._settings)

    def _search_ids(self, source_ids):
        result = self._search(source_ids)
        return {"target_ids": result.tokens, "scores": result.scores}

    def _translate_text(self, text):
        values, splits, heads = self._text.tokenize(text)
        source_ids, blank = _padded(values, splits, heads, self._max_tokens, self._ids)
        return self._translate(source_ids, blank)

    def _translate_ids(self, source_ids):
        real = (source_ids != self._ids["pad"]) & (source_ids != self._ids["eos"])
        return self._translate(source_ids, ~tf.reduce_any(real, axis=1))

    def _translate(self, source_ids, blank):
        result = self._search(source_ids)
        tokens = result.tokens
        batch, n_best, length = tf.shape(tokens)[0], tf.shape(tokens)[1], tf.shape(tokens)[2]
        rows = tf.reshape(tokens, [batch * n_best, length])
        eos = self._ids["eos"]
        before_end = tf.cumsum(tf.cast(tf.equal(rows, eos), tf.int32), axis=1, exclusive=True) == 0
        row_blank = tf.reshape(tf.tile(tf.expand_dims(blank, 1), [1, n_best]), [-1])
        keep = before_end & ~tf.expand_dims(row_blank, 1)
        texts = tf.reshape(self._text.detokenize(rows, keep), [batch, n_best])
        return {"translations": texts,
                "scores": tf.where(tf.expand_dims(blank, 1), 0.0, result.scores)}


def _padded(values, splits, heads, max_tokens, ids):
    """Tokens as flat `values` and row `splits` (int32), with an optional
    head id per row (`heads`: -1 for none) -> `(source_ids (batch, S),
    blank (batch,))`: each row's head and tokens cut to `max_tokens`, the
    end id after them, then padding (`encode_sources`, with builtin ops:
    LiteRT has no ragged tensors)."""
    starts, ends = splits[:-1], splits[1:]
    has_head = tf.cast(heads >= 0, tf.int32)
    kept = tf.minimum(ends - starts + has_head, max_tokens)
    width = tf.reduce_max(tf.concat([kept, [0]], 0)) + 1
    column = tf.expand_dims(tf.range(width), 0)
    # One padding id after the tokens: a valid index when no row has any.
    flat = tf.concat([values, [ids["pad"]]], 0)
    index = tf.expand_dims(starts - has_head, 1) + column
    pieces = tf.gather(flat, tf.clip_by_value(index, 0, tf.shape(flat)[0] - 1))
    is_head = tf.equal(column, 0) & tf.expand_dims(has_head > 0, 1)
    pieces = tf.where(is_head, tf.expand_dims(heads, 1), pieces)
    kept_column = tf.expand_dims(kept, 1)
    source_ids = tf.where(column < kept_column, pieces,
                          tf.where(tf.equal(column, kept_column), ids["eos"], ids["pad"]))
    return source_ids, tf.equal(kept, 0)


def _detokenized(decoder, ids, keep):
    """`decoder` (a `FastSentencepieceTokenizer`) on the kept ids of each row
    of `ids` `(rows, length)` -> strings `(rows,)`.

    The detokenizer's LiteRT kernel writes one string per row but keeps the
    shape the file gives its output (`[1]`), so that later ops would see one
    string; GATHER counts the strings it was given, so gathering rows
    0..rows-1 gives a tensor of the right shape."""
    counts = tf.reduce_sum(tf.cast(keep, tf.int32), axis=1)
    splits = tf.concat([[0], tf.cumsum(counts)], 0)
    texts = decoder.detokenize(tf.RaggedTensor.from_row_splits(
        tf.boolean_mask(ids, keep), splits, validate=False))
    return tf.gather(texts, tf.range(tf.shape(ids)[0]))


class _SentencePieceText:
    """This package's SentencePiece tokenizer (`data.Tokenizer`): its ids
    are the model's."""

    def __init__(self, tokenizer):
        self.sentencepiece = tf_text.FastSentencepieceTokenizer(tokenizer.model_proto)
        self.special = sorted({tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id})
        self.unk_id, self.pad_id = tokenizer.unk_id, tokenizer.pad_id
        pieces = tokenizer.pieces(range(tokenizer.vocab_size))
        self.spaces = [index for index, piece in enumerate(pieces) if piece == SPIECE_UNDERLINE]

    def tokenize(self, text):
        """Strings -> `(values, splits, heads)` (see `_padded`)."""
        tokens = self.sentencepiece.tokenize(text)
        heads = tf.fill(tf.shape(text), -1)
        return tokens.values, tf.cast(tokens.row_splits, tf.int32), heads

    def detokenize(self, ids, keep):
        """Ids `(rows, length)` -> strings, of the ids `keep` marks that are
        not special: `Tokenizer.detokenize`'s text.

        tf-text's decoder drops the leading space of the first piece only;
        sentencepiece's, of every leading piece until one is not just "▁",
        and never the space before an unknown piece's " ⁇ ". So leading "▁"
        pieces are dropped, and a row that then starts with the unknown id
        gets a padding id (which decodes to nothing) in front."""
        for special in self.special:
            keep &= tf.not_equal(ids, special)
        space = tf.zeros_like(keep)
        for index in self.spaces:
            space |= tf.equal(ids, index)
        before_text = tf.cumsum(tf.cast(keep & ~space, tf.int32), axis=1, exclusive=True) == 0
        keep &= ~(space & before_text)
        first = keep & (tf.cumsum(tf.cast(keep, tf.int32), axis=1, exclusive=True) == 0)
        starts_unknown = tf.reduce_any(first & tf.equal(ids, self.unk_id), axis=1, keepdims=True)
        rows = tf.shape(ids)[0]
        ids = tf.concat([tf.fill([rows, 1], self.pad_id), ids], axis=1)
        return _detokenized(self.sentencepiece, ids, tf.concat([starts_unknown, keep], axis=1))


class _MarianText:
    """An OPUS-MT (Marian) tokenizer: SentencePiece ids of `source.spm`
    mapped to the vocabulary's, a leading language code as one id, and
    decoding as Hugging Face's `MarianTokenizer.decode` (see the module
    docstring)."""

    def __init__(self, tokenizer):
        vocabulary = tokenizer.vocabulary
        self.unk_id = tokenizer.unk_id
        self.sentencepiece = tf_text.FastSentencepieceTokenizer(vocabulary.files[SOURCE_SPM])
        self.id_table = tf.constant(vocabulary.source_spm_id_table(), tf.int32)
        codes = [code.encode("utf-8") for code in vocabulary.language_codes]
        width = max([len(code) for code in codes], default=0)
        self.code_bytes = tf.constant(
            np.array([list(code) + [-1] * (width - len(code)) for code in codes], np.int32)
            .reshape(len(codes), width))
        self.code_lengths = tf.constant([len(code) for code in codes], tf.int32)
        self.code_ids = tf.constant([vocabulary.source_vocab[code]
                                     for code in vocabulary.language_codes], tf.int32)
        pieces, keep, blank = _decoding_pieces(tokenizer)
        self.decoder = tf_text.FastSentencepieceTokenizer(sentencepiece_proto.with_pieces(
            vocabulary.files[vocabulary.decode_spm_name], pieces))
        self.decodable = tf.constant(keep, tf.bool)
        self.whitespace = tf.constant(blank, tf.bool)

    def tokenize(self, text):
        """Strings -> `(values, splits, heads)` (see `_padded`)."""
        code_end, heads, lengths = self._language_codes(text)
        rest = tf_text.ByteSplitter().split_by_offsets(
            text, tf.expand_dims(code_end, 1), tf.expand_dims(lengths, 1))
        tokens = self.sentencepiece.tokenize(rest.values)
        return (tf.gather(self.id_table, tokens.values), tf.cast(tokens.row_splits, tf.int32),
                heads)

    def _language_codes(self, text):
        """Each text's language code, as Hugging Face's
        `remove_language_code`: if it starts with ">>", up to the first "<<"
        after that. Returns `(code_end, heads, lengths)`: the byte where the
        rest starts (0 without a code), the code's id (unk for a code the
        vocabulary lacks; -1 without a code), and each text's length in
        bytes. In bytes and integer ops: LiteRT has no regular expressions."""
        split = tf_text.ByteSplitter().split(text)
        lengths = tf.cast(split.row_lengths(), tf.int32)
        starts = tf.cast(split.row_starts(), tf.int32)
        # At least 4 columns: ">>", then a "<<" from column 2 (a batch of
        # short texts, with or without codes, still has one column to search).
        width = tf.maximum(tf.reduce_max(tf.concat([lengths, [0]], 0)),
                           tf.shape(self.code_bytes)[1] + 4)
        column = tf.expand_dims(tf.range(width), 0)
        flat = tf.concat([tf.cast(split.values, tf.int32), [-1]], 0)
        index = tf.where(column < tf.expand_dims(lengths, 1),
                         tf.expand_dims(starts, 1) + column, tf.shape(flat)[0] - 1)
        data = tf.gather(flat, index)  # (batch, width), -1 past the end
        opens = tf.equal(data[:, 0], ord(">")) & tf.equal(data[:, 1], ord(">"))
        lt = tf.equal(data, ord("<"))
        pairs = lt[:, 2:-1] & lt[:, 3:]  # "<<" starting at column 2, 3, ...
        found = tf.reduce_any(pairs, axis=1)
        first = tf.argmax(tf.cast(pairs, tf.int32), axis=1, output_type=tf.int32)
        has_code = opens & found
        code_end = tf.where(has_code, first + 4, 0)
        # The code's id: the vocabulary's code of the same bytes, else unk.
        code_width = tf.shape(self.code_bytes)[1]
        code_columns = tf.expand_dims(tf.range(code_width), 0)
        same = tf.equal(tf.expand_dims(data[:, :code_width], 1), tf.expand_dims(self.code_bytes, 0))
        same |= tf.expand_dims(code_columns >= tf.expand_dims(self.code_lengths, 1), 0)
        match = tf.reduce_all(same, axis=2) & tf.equal(
            tf.expand_dims(code_end, 1), tf.expand_dims(self.code_lengths, 0))
        matched = tf.reduce_sum(tf.cast(match, tf.int32) * tf.expand_dims(self.code_ids, 0), 1)
        code_id = tf.where(tf.reduce_any(match, axis=1), matched, self.unk_id)
        return code_end, tf.where(has_code, code_id, -1), lengths

    def detokenize(self, ids, keep):
        """Target ids `(rows, length)` -> strings, as
        `MarianTokenizer.detokenize`: special ids and ids without a piece
        dropped, and whitespace-only pieces at either end (Hugging Face
        strips the text)."""
        size = tf.shape(self.decodable)[0]
        safe = tf.where((ids >= 0) & (ids < size), ids, 0)
        keep &= (ids >= 0) & (ids < size) & tf.gather(self.decodable, safe)
        visible = keep & ~tf.gather(self.whitespace, safe)
        seen = tf.cast(visible, tf.int32)
        before_text = tf.cumsum(seen, axis=1, exclusive=True) == 0
        after_text = tf.cumsum(seen, axis=1, exclusive=True, reverse=True) == 0
        keep &= visible | ~(before_text | after_text)
        return _detokenized(self.decoder, safe, keep)


def _decoding_pieces(tokenizer):
    """For each target id: its piece for a SentencePiece model that decodes
    the vocabulary's ids directly (`(piece, type)`), whether it is decoded
    at all (not special, has a piece, not a SentencePiece control symbol:
    as `onnx_text`), and whether its text is only whitespace."""
    vocabulary = tokenizer.vocabulary
    spm = vocabulary.decode_spm
    pieces, keep, blank = [], [], []
    for index, piece in enumerate(vocabulary.decode_piece_table()):
        decoded = not (piece is None or index in vocabulary.special_ids
                       or spm.is_control(spm.piece_to_id(piece)))
        kind = "unknown" if index == tokenizer.unk_id else "normal" if decoded else "control"
        pieces.append((piece if piece is not None else f"<none {index}>", kind))
        keep.append(decoded)
        blank.append(decoded and not piece.replace(SPIECE_UNDERLINE, " ").strip())
    return pieces, keep, blank


def write(files, directory):
    """Writes `{file name: bytes}` into `directory`; returns the sizes."""
    os.makedirs(directory, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(directory, name), "wb") as file:
            file.write(data)
    return {name: len(data) for name, data in files.items()}


class LiteRTFormat(ExportFormat):
    """litert/ (`convert`, `write`). The check runs the files in a process
    that loads nothing of this package (`runtimes/translate_litert.py`): in
    float32, translate.tflite's n-best translations of the check sentences
    (their ids, for a file that takes ids) must be the SavedModel's
    translate function's, and search_ids.tflite's ids TensorFlow's
    search's, each with the model config's beam size, length penalty and
    margin; then the int8 or float16 files replace them, and how often they
    agree goes into the report."""

    name = "litert"
    quantizations = WEIGHTS

    def check_exportable(self, model, tokenizer):
        check_exportable(tokenizer)

    def write_and_check(self, checks, folder):
        model, tokenizer, quantization = checks.model, checks.tokenizer, checks.quantization
        directory = os.path.join(folder, self.name)
        weights = ("float32",) + ((quantization,) if quantization != "float32" else ())
        files = convert(model, tokenizer, weights)
        refusal = text_in_refusal(tokenizer)
        if refusal:
            warnings.warn(f"litert/{TRANSLATE_FILE} takes token ids: {refusal}.", stacklevel=4)
        settings = checks.settings()
        (expected, expected_scores), = checks.saved_model_translations([settings])
        expected_ids = search(model, tf.constant(checks.source), *settings).tokens.numpy()
        request = {"sentences": list(CHECK_SENTENCES)} if refusal is None else {
            "source_ids": encode_sources(tokenizer, tf.constant(list(CHECK_SENTENCES)),
                                         model.config.max_source_tokens)[0].numpy().tolist()}
        report = {"path": self.name, "files": [TRANSLATE_FILE, SEARCH_FILE],
                  "text_in": refusal is None, "beam_size": settings[0],
                  "length_penalty": settings[1], "decode_margin": settings[2],
                  "quantization": quantization}
        if refusal:
            report["text_in_refusal"] = refusal
        for kind in weights:
            sizes = write(files[kind], directory)
            (translations, scores), (ids, _) = _run_files(
                {"model": os.path.join(directory, TRANSLATE_FILE)} | request,
                {"model": os.path.join(directory, SEARCH_FILE),
                 "source_ids": checks.source.tolist()})
            found = {"sizes": sizes, "custom_ops": custom_ops(files[kind][TRANSLATE_FILE])}
            if kind == "float32":
                require(translations == expected,
                        f"litert/{TRANSLATE_FILE} translated differently from the SavedModel")
                require(np.array_equal(ids, expected_ids),
                        f"litert/{SEARCH_FILE} searched differently from TensorFlow")
                found["max_score_difference"] = float(np.abs(scores - expected_scores).max())
            else:
                found["translate_agreement"] = agreement(translations, expected)
                found["search_agreement"] = agreement(list(ids), list(expected_ids))
            report[kind] = found
        return report


def _run_files(*runs):
    """`translate_litert.py --json` on the `runs` (dicts of the file's path
    and its input) in a process of its own: for each, the translations (or
    target ids) and the scores."""
    output = run_checker([translate_litert.__file__, "--json"], {"runs": list(runs)},
                         "the LiteRT files")
    require("keras_transformer" not in output["loaded"],
            "the check of the LiteRT files loaded keras_transformer")
    return [(result["translations"] if "translations" in result
             else np.array(result["target_ids"]), np.array(result["scores"], np.float32))
            for result in output["results"]]
