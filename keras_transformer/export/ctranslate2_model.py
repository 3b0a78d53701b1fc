"""A `Transformer` as a CTranslate2 model, built with CTranslate2's own
model-spec API (`ctranslate2.specs.TransformerSpec`), for fast CPU serving.

What carries over, and how:
- Linear layers: CTranslate2 stores `(out, in)` matrices, Keras `(in, out)`
  kernels: each is transposed. Self-attention's query, key and value
  projections are one fused matrix, cross-attention's key and value another
  (`ctranslate2.converters.utils.fuse_linear`); our key projections have no
  bias, which fusing fills with zeros (exact: the softmax cancels it anyway).
- Positions: CTranslate2's own sinusoid is not the paper's (it concatenates
  sines and cosines, spaces the frequencies differently and counts from 1),
  so every model exports its table as weights (`position_encodings.encodings`,
  row r added at position r): the paper's interleaved sinusoid, Marian's,
  fairseq's, or the learned table, `config.max_length` rows, the longest
  source (with its end token) and the longest output the model accepts.
- The layer-norm epsilon (one for all norms in both), post- or pre-norm (with
  the final norms), the activation, `scale_embedding`, the logits bias (the
  output projection's bias), tied or separate vocabularies.
- Special ids: CTranslate2 names tokens by string. Its vocabularies are the
  tokenizer's pieces in id order (ids line up one for one; a piece string
  that repeats, or an id with none, gets a unique stand-in name), its
  config names the pieces of our unknown, start and end ids
  (`decoder_start_token`, `bos_token`, `eos_token`, `unk_token`), and it
  appends the end token to every source itself (`add_source_eos`).

What CTranslate2 cannot store goes into `decoding.json` beside `model.bin`
(see `runtimes.ctranslate2_runner`): the beam size, alpha and decode margin, and
the tokens the search must never produce (padding, and the start token
unless it is also the end token), which CTranslate2 takes per call.
"""

import json
import os

import numpy as np
import tensorflow as tf

from keras_transformer.decoding import greedy_search
from keras_transformer.data import encode_sources
from keras_transformer.export.checks import CHECK_SENTENCES, require
from keras_transformer.export.formats import ExportFormat
from keras_transformer.runtimes.ctranslate2_runner import (
    DEFAULTS_FILE,
    CTranslate2Translator,
    ctranslate2_length_penalty,
    require_ctranslate2,
)

# Keras activation names (as `TransformerConfig.activation` holds them) ->
# CTranslate2's `Activation` member names. Keras' "gelu" is the exact (erf) one.
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH", "swish": "SWISH",
               "tanh": "Tanh", "sigmoid": "Sigmoid"}


def check_exportable(config):
    """Raises a one-line ValueError for a config CTranslate2 cannot run
    exactly; checked before any work starts."""
    if config.activation not in ACTIVATIONS:
        raise ValueError(f"CTranslate2 has no {config.activation!r} activation; it runs "
                         f"{sorted(ACTIVATIONS)}: export this model without the ctranslate2 format.")
    if config.head_key_dim != config.head_value_dim:
        raise ValueError(f"CTranslate2 needs key_dim == value_dim (one head size); this model has "
                         f"{config.head_key_dim} and {config.head_value_dim}: export it without the "
                         "ctranslate2 format.")


def vocabulary(pieces_of, size):
    """CTranslate2's token list for ids 0 .. size - 1: each id's piece from
    `pieces_of` (a tokenizer's `pieces` or `target_pieces`), made unique so
    that CTranslate2's string -> id lookup gives back every id. An id whose
    piece repeats one before it, or that has none, is named `<id:N>`."""
    tokens, seen = [], set()
    for index in range(size):
        try:
            piece = pieces_of([index])[0]
        except ValueError:  # an id with no piece (a hole in a Marian vocabulary)
            piece = None
        if piece is None or piece in seen:
            piece = f"<id:{index}>"
        seen.add(piece)
        tokens.append(piece)
    return tokens


def decoding_defaults(model, target_tokens):
    """The `decoding.json` of an export: our search's defaults (beam size,
    GNMT alpha, decode margin, length limit), the `length_penalty` to give a
    plain `ctranslate2.Translator` for the nearest ranking to GNMT's, and
    what CTranslate2 must be told at every call to decode as we do."""
    config = model.config
    banned = sorted({config.pad_id, config.decoder_start_id} - {config.eos_id})
    return {
        "beam_size": config.beam_size,
        "alpha": config.length_penalty,
        "length_penalty": "gnmt",
        "ctranslate2_length_penalty": ctranslate2_length_penalty(config.length_penalty),
        "decode_margin": config.decode_margin,
        "max_length": config.max_length,
        "pad_token": target_tokens[config.pad_id],
        "eos_token": target_tokens[config.eos_id],
        "suppress_sequences": [[target_tokens[i]] for i in banned],
    }


def _array(weight):
    return np.asarray(weight.numpy() if hasattr(weight, "numpy") else weight, np.float32)


def _linear(spec, dense):
    """A Keras Dense into a CTranslate2 LinearSpec: `(out, in)`, with its bias if any."""
    spec.weight = _array(dense.kernel).T.copy()
    if dense.bias is not None:
        spec.bias = _array(dense.bias)


def _fused(spec, denses):
    """Several Dense layers of one input into one fused LinearSpec."""
    from ctranslate2.converters.utils import fuse_linear
    from ctranslate2.specs import common_spec

    parts = []
    for dense in denses:
        part = common_spec.LinearSpec()
        _linear(part, dense)
        parts.append(part)
    fuse_linear(spec, parts)


def _norm(spec, norm):
    spec.gamma = _array(norm.gamma)
    spec.beta = _array(norm.beta)


def _attention(spec, attention, norm, cross=False):
    if cross:
        _linear(spec.linear[0], attention.query_dense)
        _fused(spec.linear[1], [attention.key_dense, attention.value_dense])
    else:
        _fused(spec.linear[0], [attention.query_dense, attention.key_dense, attention.value_dense])
    _linear(spec.linear[-1], attention.output_dense)
    _norm(spec.layer_norm, norm)


def _feed_forward(spec, layer):
    _linear(spec.linear_0, layer.feed_forward.inner_dense)
    _linear(spec.linear_1, layer.feed_forward.output_dense)
    _norm(spec.layer_norm, layer.feed_forward_norm)


def _positions(layer, config):
    """The `(max_length, d_model)` table that `layer` adds at positions
    0 .. max_length - 1, whatever its kind."""
    if hasattr(layer, "position_embeddings"):
        return _array(layer.position_embeddings)
    return _array(layer.encoding(config.max_length, config.d_model))


def _embeddings(side_spec, embeddings_spec, embedding, positions, config):
    embeddings_spec.weight = _array(embedding.embeddings)
    side_spec.scale_embeddings = config.scale_embedding
    side_spec.position_encodings.encodings = _positions(positions, config)


def transformer_spec(model, source_tokens, target_tokens):
    """A validated `ctranslate2.specs.TransformerSpec` holding `model`'s
    weights (float32) and vocabularies (token strings in id order, see
    `vocabulary`)."""
    require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec as specs

    config = model.config
    check_exportable(config)
    for name in ("eos_id", "unk_id"):
        index = getattr(config, name)
        if source_tokens[index] != target_tokens[index]:
            raise ValueError(f"CTranslate2 names {name}={index} by one string on both sides; the "
                             f"vocabularies have {source_tokens[index]!r} and {target_tokens[index]!r}.")
    # CTranslate2 assumes d_model / heads per head unless told (Table 3 rows A).
    head_dim = None if config.head_key_dim * config.num_heads == config.d_model else config.head_key_dim
    options = dict(pre_norm=config.norm_first, head_dim=head_dim,
                   activation=getattr(common_spec.Activation, ACTIVATIONS[config.activation]))
    spec = specs.TransformerSpec(
        specs.TransformerEncoderSpec(config.num_encoder_layers, config.num_heads, **options),
        specs.TransformerDecoderSpec(config.num_decoder_layers, config.num_heads, **options))
    # The encoder takes a list of embeddings (one per input feature); ours has one.
    _embeddings(spec.encoder, spec.encoder.embeddings[0], model.source_embedding,
                model.source_positions, config)
    _embeddings(spec.decoder, spec.decoder.embeddings, model.target_embedding,
                model.target_positions, config)
    for layer_spec, layer in zip(spec.encoder.layer, model.encoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm)
        _feed_forward(layer_spec.ffn, layer)
    for layer_spec, layer in zip(spec.decoder.layer, model.decoder_layers):
        _attention(layer_spec.self_attention, layer.self_attention, layer.self_attention_norm)
        _attention(layer_spec.attention, layer.cross_attention, layer.cross_attention_norm,
                   cross=True)
        _feed_forward(layer_spec.ffn, layer)
    if config.norm_first:
        _norm(spec.encoder.layer_norm, model.encoder_norm)
        _norm(spec.decoder.layer_norm, model.decoder_norm)
    # The output projection is the target embedding (tied), plus Marian's bias.
    spec.decoder.projection.weight = _array(model.target_embedding.embeddings)
    if model.target_embedding.bias is not None:
        spec.decoder.projection.bias = _array(model.target_embedding.bias)

    spec.config.layer_norm_epsilon = float(config.layer_norm_epsilon)
    spec.config.unk_token = target_tokens[config.unk_id]
    spec.config.bos_token = spec.config.decoder_start_token = target_tokens[config.decoder_start_id]
    spec.config.eos_token = target_tokens[config.eos_id]
    spec.config.add_source_eos = True
    spec.register_source_vocabulary(source_tokens)
    spec.register_target_vocabulary(target_tokens)
    spec.validate()
    return spec


def save(model, tokenizer, directory, quantization="float32"):
    """Writes `model` as a CTranslate2 model into `directory` (created):
    `model.bin` with the weights stored as `quantization` ("float32" or
    "int8"), `config.json`, the vocabularies, `decoding.json`, and the
    tokenizer's own files, so that the folder is all a
    `CTranslate2Translator` needs. Returns `directory`."""
    if quantization not in CTranslate2Format.quantizations:
        raise ValueError(f"quantization must be one of {CTranslate2Format.quantizations}; got "
                         f"{quantization!r}.")
    source_tokens = vocabulary(tokenizer.pieces, model.source_vocab_size)
    target_tokens = vocabulary(tokenizer.target_pieces, model.target_vocab_size)
    spec = transformer_spec(model, source_tokens, target_tokens)
    spec.optimize(quantization=quantization)
    os.makedirs(directory, exist_ok=True)
    spec.save(directory)
    with open(os.path.join(directory, DEFAULTS_FILE), "w") as file:
        json.dump(decoding_defaults(model, target_tokens), file, indent=2)
    tokenizer.save(directory)
    return directory


class CTranslate2Format(ExportFormat):
    """ctranslate2/ (`save`). The check loads it with CTranslate2 and
    compares it with the model on the check sentences: the log-probability
    of every target token (teacher forced), and greedy search's tokens. In
    float32 they must be equal (within 1e-4); in int8 they are measured."""

    name = "ctranslate2"
    quantizations = ("float32", "int8")

    def require(self):
        require_ctranslate2()

    def check_exportable(self, model, tokenizer):
        check_exportable(model.config)

    def write_and_check(self, checks, folder):
        model, tokenizer = checks.model, checks.tokenizer
        directory = save(model, tokenizer, os.path.join(folder, self.name), checks.quantization)
        translator = CTranslate2Translator(directory)
        texts = tf.constant([s for s in CHECK_SENTENCES if s])
        limit = model.config.max_source_tokens
        sources = tokenizer.tokenize(texts)[:, :limit].to_list()
        targets = tokenizer.tokenize_target(texts)[:, :limit].to_list()
        source_ids, _ = encode_sources(tokenizer, texts, limit)
        config = model.config
        target_ids = tf.ragged.constant([[config.decoder_start_id] + t for t in targets]) \
            .to_tensor(default_value=config.pad_id)
        log_probs = tf.nn.log_softmax(
            model({"source_ids": source_ids, "target_ids": target_ids})).numpy()
        difference = max(
            float(np.abs(np.array(scored) - log_probs[row, np.arange(len(scored)),
                                                      target + [config.eos_id]]).max())
            for row, (target, scored) in enumerate(zip(targets,
                                                       translator.score(sources, targets))))
        expected = [_until_end(row[0], config.eos_id)
                    for row in greedy_search(model, source_ids).tokens.numpy()]
        found = [best[0][0] for best in translator.search(sources, beam_size=1)]
        matches = sum(a == b for a, b in zip(expected, found))
        if checks.quantization == "float32":
            require(difference < 1e-4,
                    f"CTranslate2 log-probabilities differ from Keras by {difference} (> 1e-4)")
            require(matches == len(expected), "CTranslate2's greedy search differs from ours")
        return {"path": self.name, "quantization": checks.quantization,
                "max_log_prob_difference": difference,
                "greedy_agreement": matches / len(expected)}


def _until_end(ids, eos_id):
    """Search output up to and including the first end id, as a list."""
    ids = [int(i) for i in ids]
    return ids[:ids.index(eos_id) + 1] if eos_id in ids else ids
