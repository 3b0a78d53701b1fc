"""`translate.onnx`: text in, text out in one ONNX file, for onnxruntime with
onnxruntime-extensions' SentencePiece ops (no TensorFlow, no Python
tokenizer).

    import numpy as np, onnxruntime, onnxruntime_extensions
    options = onnxruntime.SessionOptions()
    options.register_custom_ops_library(onnxruntime_extensions.get_library_path())
    session = onnxruntime.InferenceSession("exported/onnx/translate.onnx", options)
    translations, scores = session.run(None, {"text": np.array(["Guten Morgen!"])})

Inputs: `text` (string `(batch,)`), and optionally the scalars `beam_size`
(int32), `n_best` (int32, at most `beam_size`), `alpha` (float32) and
`decode_margin` (int32), whose defaults are the model config's (n_best 1).
Outputs: `translations` (string `(batch, n_best)`) and `scores` (float32
`(batch, n_best)`), best first. The search is `beam_search`'s.

The text steps are those of `keras_transformer.decoding.translate_text`:
SentencePiece (`SentencepieceTokenizer`), ids cut to the model's
`max_length - 1` tokens with the end id appended, padded; a blank sentence
translates to "" with score 0; target ids before the end id, without
padding and start ids, detokenized. For our tokenizer (`tokenizer.model`)
the SentencePiece ids are the model's ids and `SentencepieceDecoder` gives
the text. For an imported OPUS-MT (Marian) model the ids are the Marian
vocabulary's: SentencePiece ids of `source.spm` map to them through a
constant table, a leading `>>xx<<` language code becomes its own id, and
target ids map back to vocabulary pieces, joined with "▁" as a space and
stripped at both ends (Hugging Face's `convert_tokens_to_string`).

Where it differs from the Translator and the SavedModel:
- onnxruntime-extensions' string ops read a string up to its first NUL
  character (ours turn NUL into a space): clean the text first
  (`keras_transformer.textfiles.clean_text`). Inputs must be Python `str`
  (onnxruntime turns `bytes` into their repr).
- Marian: the strings `</s>`, `<unk>` and `<pad>` written in the text are
  tokenized as text, not as their ids; a character missing from
  `source.spm` becomes `<unk>` (Hugging Face looks its text up in the
  shared vocabulary); byte-fallback pieces, which OPUS-MT models do not
  have, would decode as their names.
- No warning names the sentences cut to the model's length.
FSMT models (Moses tokenization and BPE in Python) get no `translate.onnx`.
"""

import numpy as np
from onnx import TensorProto, helper

from keras_transformer.data import Tokenizer
from keras_transformer.export.onnx import beam_search as onnx_beam_search
from keras_transformer.export.onnx import builder as onnx_builder
from keras_transformer.export.onnx import graphs as onnx_graphs
from keras_transformer.pretrained.marian_tokenizer import MarianTokenizer
from keras_transformer.vocabularies.marian import (
    LANGUAGE_CODE_PREFIX_RE2,
    SPIECE_UNDERLINE,
    WHITESPACE_RE2,
)

FILE = "translate.onnx"
EXTENSIONS = "ai.onnx.contrib"


def supports(tokenizer):
    """Whether `translate_model` can put this tokenizer into the graph."""
    return isinstance(tokenizer, (Tokenizer, MarianTokenizer))


def translate_model(model, tokenizer, subgraphs=None):
    """`translate.onnx` of `model` and its tokenizer, as an `onnx.ModelProto`,
    on the search's `subgraphs` (default: `graphs.step_models(model)`,
    the export's encoder.onnx and decoder_step.onnx; quantized ones for int8).

    Raises:
        ValueError: a tokenizer that cannot be graph ops (FSMT's).
    """
    if not supports(tokenizer):
        raise ValueError(f"A {type(tokenizer).__name__} cannot be ONNX ops (only SentencePiece "
                         "tokenizers can), so this model gets no translate.onnx.")
    subgraphs = subgraphs or onnx_graphs.step_models(model)
    b = onnx_builder.GraphBuilder("translate")
    inputs = [helper.make_tensor_value_info("text", TensorProto.STRING, ["batch"]),
              *onnx_beam_search.parameter_inputs(b, model)]
    source_ids, blank = _source_ids(b, tokenizer, model.config.max_length - 1)
    target_ids, scores = onnx_beam_search.search_nodes(b, model, source_ids, subgraphs)
    texts = _texts(b, tokenizer, target_ids)
    blank = b.op("Unsqueeze", blank, b.constant([1], np.int64))
    b.op("Where", blank, b.constant(""), texts, name="translations")
    b.op("Where", blank, b.constant(0.0, np.float32), scores, name="scores")
    outputs = [helper.make_tensor_value_info("translations", TensorProto.STRING,
                                             ["batch", "n_best"]),
               helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "n_best"])]
    return onnx_builder.make_model(b.graph("translate", inputs, outputs), doc_string=__doc__)


def _source_ids(b, tokenizer, max_tokens):
    """Text -> `(source_ids (batch, S), blank (batch,))`: each row's ids cut
    to `max_tokens`, the end id appended, padded with the pad id."""
    one = b.constant([1], np.int64)
    if isinstance(tokenizer, MarianTokenizer):
        vocabulary = tokenizer.vocabulary
        # A leading language code is one id (unk if the vocabulary lacks it).
        code = b.op("StringRegexReplace", "text",
                    b.constant(f"({LANGUAGE_CODE_PREFIX_RE2})?(?s:.*)"), b.constant("\\1"),
                    domain=EXTENSIONS)
        codes = vocabulary.language_codes
        head = b.op("LabelEncoder", code, domain="ai.onnx.ml", keys_strings=[""] + codes,
                    values_int64s=[-1] + [vocabulary.source_vocab[c] for c in codes],
                    default_int64=tokenizer.unk_id)
        text = b.op("StringRegexReplace", "text", b.constant(LANGUAGE_CODE_PREFIX_RE2),
                    b.constant(""), domain=EXTENSIONS, global_replace=0)
        pieces, splits = _sentencepiece(b, text, vocabulary.files["source.spm"])
        ids = b.op("Gather", b.constant(vocabulary.source_spm_id_table(), np.int32), pieces)
        heads = b.op("Cast", b.op("Max", head, b.constant(0, np.int64)), to=TensorProto.INT32)
        has_head = b.op("Cast", b.op("GreaterOrEqual", head, b.constant(0, np.int64)),
                        to=TensorProto.INT32)
    else:
        ids, splits = _sentencepiece(b, "text", tokenizer.model_proto)
        rows = b.op("Sub", b.op("Shape", splits), one)
        heads = has_head = b.op("ConstantOfShape", rows, value=helper.make_tensor(
            "zero", TensorProto.INT32, [1], [0]))
    # Row i: its head id if it has one, then ids[starts[i]:ends[i]].
    starts = b.op("Cast", b.op("Slice", splits, b.constant([0], np.int64),
                                b.constant([-1], np.int64)), to=TensorProto.INT32)
    ends = b.op("Cast", b.op("Slice", splits, one, b.constant([np.iinfo(np.int64).max], np.int64)),
                to=TensorProto.INT32)
    total = b.op("Add", b.op("Sub", ends, starts), has_head)
    kept = b.op("Min", total, b.constant(max_tokens, np.int32))
    width = b.op("Add", b.op("ReduceMax", kept, keepdims=0, axes=[0]), b.constant(1, np.int32))
    column = b.op("Unsqueeze", b.op("Range", b.constant(0, np.int32), width,
                                    b.constant(1, np.int32)), b.constant([0], np.int64))
    column_of_piece = b.op("Sub", column, b.op("Unsqueeze", has_head, one))
    # One padding id behind the pieces, so that the gather below has a valid
    # index even when no sentence has any piece.
    flat = b.op("Concat", ids, b.constant([tokenizer.pad_id], np.int32), axis=0)
    index = b.op("Add", b.op("Unsqueeze", starts, one), column_of_piece)
    index = b.op("Min", b.op("Max", index, b.constant(0, np.int32)),
                 b.op("Cast", b.op("Sub", b.op("Shape", flat), one), to=TensorProto.INT32))
    pieces = b.op("Gather", flat, index)
    kept = b.op("Unsqueeze", kept, one)
    head = b.op("And", b.op("Equal", column, b.constant(0, np.int32)),
                b.op("Cast", b.op("Unsqueeze", has_head, one), to=TensorProto.BOOL))
    source_ids = b.op("Where", b.op("Less", column, kept),
                      b.op("Where", head, b.op("Unsqueeze", heads, one), pieces),
                      b.op("Where", b.op("Equal", column, kept),
                           b.constant(tokenizer.eos_id, np.int32),
                           b.constant(tokenizer.pad_id, np.int32)))
    blank = b.op("Equal", total, b.constant(0, np.int32))
    return source_ids, blank


def _sentencepiece(b, text, model_proto):
    """SentencePiece ids of each string, as flat int32 ids and int64 row
    splits."""
    return b.op("SentencepieceTokenizer", text, b.constant(0, np.int64),
                b.constant(0.0, np.float32), b.constant(False), b.constant(False),
                b.constant(False), outputs=2, domain=EXTENSIONS, model=model_proto)


def _texts(b, tokenizer, target_ids):
    """Target ids `(batch, n_best, length)` -> strings `(batch, n_best)`:
    the ids before the first end id, without padding and start ids."""
    shape = b.op("Shape", target_ids)
    length = b.op("Slice", shape, b.constant([2], np.int64), b.constant([3], np.int64))
    rows = b.op("Reshape", target_ids, b.op("Concat", b.constant([-1], np.int64), length, axis=0))
    ended = b.op("CumSum", b.op("Cast", b.op("Equal", rows, b.constant(tokenizer.eos_id, np.int32)),
                                to=TensorProto.INT32), b.constant(1, np.int32), exclusive=1)
    keep = b.op("Equal", ended, b.constant(0, np.int32))
    for special in {tokenizer.eos_id, tokenizer.pad_id, tokenizer.bos_id}:
        keep = b.op("And", keep, b.op("Not", b.op("Equal", rows, b.constant(special, np.int32))))
    if isinstance(tokenizer, MarianTokenizer):
        texts = _marian_texts(b, tokenizer.vocabulary, rows, keep)
    else:
        texts = _sentencepiece_texts(b, tokenizer.model_proto, rows, keep)
    return b.op("Reshape", texts, b.op("Slice", shape, b.constant([0], np.int64),
                                       b.constant([2], np.int64)))


def _sentencepiece_texts(b, model_proto, rows, keep):
    """SentencePiece's decoding of the kept ids of each row (the decoder op
    takes one sequence at a time: a Loop over the rows)."""
    body = onnx_builder.GraphBuilder("translate/detokenize")
    row, condition, text = "translate/row", "translate/condition", "translate/row_text"
    ids = body.op("Compress", body.op("Gather", rows, row), body.op("Gather", keep, row), axis=0)
    body.op("SentencepieceDecoder", body.op("Cast", ids, to=TensorProto.INT64), domain=EXTENSIONS,
            model=model_proto, name=text)
    graph = body.graph("detokenize", [
        helper.make_tensor_value_info(row, TensorProto.INT64, []),
        helper.make_tensor_value_info(condition, TensorProto.BOOL, [])], [
        helper.make_tensor_value_info(condition, TensorProto.BOOL, []),
        helper.make_tensor_value_info(text, TensorProto.STRING, [1])])
    count = b.op("Slice", b.op("Shape", rows), b.constant([0], np.int64), b.constant([1], np.int64))
    texts = b.op("Loop", b.op("Squeeze", count, b.constant([0], np.int64)), b.constant(True),
                 body=graph)
    return texts


def _marian_texts(b, vocabulary, rows, keep):
    """Hugging Face's Marian decoding of the kept ids of each row: their
    vocabulary pieces joined, "▁" as a space, stripped. Special ids, ids
    without a piece and pieces SentencePiece treats as control symbols give
    nothing (as `MarianTokenizer.detokenize`)."""
    spm = vocabulary.decode_spm
    table = ["" if piece is None or index in vocabulary.special_ids
             or spm.is_control(spm.piece_to_id(piece)) else piece
             for index, piece in enumerate(vocabulary.decode_piece_table())]
    vocab_size = len(table)
    safe = b.op("Where", b.op("Less", rows, b.constant(vocab_size, np.int32)), rows,
                b.constant(0, np.int32))
    pieces = b.op("Where", keep, b.op("Gather", b.constant(np.array(table, object)), safe),
                  b.constant(""))
    text = b.op("StringJoin", pieces, b.constant(""), b.constant(1, np.int64), domain=EXTENSIONS)
    text = b.op("StringRegexReplace", text, b.constant(SPIECE_UNDERLINE), b.constant(" "),
                domain=EXTENSIONS)
    return b.op("StringRegexReplace", text, b.constant(f"^{WHITESPACE_RE2}+|{WHITESPACE_RE2}+$"),
                b.constant(""), domain=EXTENSIONS)
