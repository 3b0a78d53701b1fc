"""Beam search inside one ONNX graph: onnxruntime's `com.microsoft.BeamSearch`
operator (in the CPU provider of the standard onnxruntime wheel) over an
encoder subgraph and a decoder subgraph of the model, converted with tf2onnx.

`search_model(model)` is that graph with token ids in and out:
`source_ids` `(batch, S)` (padded with the pad id, each source ending with
the end id) and the scalars `beam_size`, `n_best`, `alpha` and
`decode_margin` -> `target_ids` `(batch, n_best, length)` (best first, each
ending with the end id, then padding; no start id) and `scores`
`(batch, n_best)`. The scalars are inputs with defaults (initializers of the
same name: the model config's beam size, length penalty and margin, and
n_best 1), so a caller may leave them out. `onnx_text.translate_model`
wraps the same nodes in text in, text out.

What the operator asks of the subgraphs (onnxruntime's encoder-decoder
contract, `model_type=1`):
- encoder: `encoder_input_ids`, `encoder_attention_mask`,
  `decoder_input_ids` (the start id) -> `logits` of the first step,
  `encoder_hidden_states`, then per decoder layer `present_key_self_i`,
  `present_value_self_i` (the first position's keys and values), then
  `present_key_cross_i`, `present_value_cross_i` (the cross-attention keys
  and values, computed once);
- decoder: `input_ids` `(rows, 1)`, `encoder_attention_mask`, the self
  caches `past_key_self_i`, `past_value_self_i` `(rows, heads, P, dim)` and
  the cross ones -> `logits` `(rows, 1, vocabulary)` and the self caches one
  position longer (`Transformer.decode_step_growing`).
The operator repeats the encoder's outputs for each beam and reorders the
self caches between steps. The model parts of both are converted by tf2onnx
from `encoder_function` and `decoder_function` (`subgraph_models`, which
`onnx_int8.quantize` can take for int8 weights).

How its search is made to be ours (`keras_transformer.decoding`):
- log-softmax, then padding and the start id banned (`vocab_mask`, applied
  after the log-softmax, as ours), beams ranked by summed log-probability,
  a finished hypothesis taken only from the best K extensions, a sentence
  done at K finished hypotheses (`early_stopping`): the same rules;
- the output limit is per sentence (source length + margin, capped by the
  model's `max_length`): the operator's `max_length` is one number for the
  batch (set to the longest limit), so nodes added to both subgraphs
  (`_end_at_limit`, behind an `If` that skips them at the steps where no
  sentence is at its limit) read each sentence's limit (`output_limits`, a
  value of the outer graph) and, at the last position a sentence may
  reach, leave only the end token possible, keeping its log-probability
  (the rest of the probability goes to padding, which `vocab_mask` bans);
- the length penalty differs: the operator collects the K finished
  hypotheses with `log_prob / length ** alpha`, ours with GNMT's
  `log_prob / ((5 + length) / 6) ** alpha`. The graph rescores the K it
  returns with GNMT's rule and sorts them, so `scores` are ours. The two
  agree exactly at alpha = 0 (both rank by log-probability); with alpha > 0
  they can keep different hypotheses when more than K have ended by the
  step that completes a sentence (the operator evicts by its rule).
"""

import numpy as np
import tensorflow as tf
from onnx import TensorProto, helper

from keras_transformer.export import onnx_builder, onnx_graphs
from keras_transformer.export.onnx_graphs import OPSET
from keras_transformer.export.traced import graph_function

DOMAIN = "com.microsoft"
OUTPUT_LIMITS = "output_limits"
"""The outer graph's value the subgraphs read: each sentence's output limit."""
_NEG_INF = -1e9  # as keras_transformer.decoding.search


def _banned(config):
    """The ids our search bans after the softmax: padding, and the start id
    unless it is also the end id (as `keras_transformer.decoding`)."""
    banned = sorted({config.pad_id, config.decoder_start_id} - {config.eos_id})
    if not banned:
        raise ValueError("translate.onnx needs a padding id other than the end id (it puts the "
                         "probability of the tokens that cannot follow at the limit there).")
    return banned


def _layer_names(model, *kinds):
    return [f"{kind}_{i}" for i in range(model.config.num_decoder_layers) for kind in kinds]


def _cache_names(model, prefix):
    """`prefix_key_self_0, prefix_value_self_0, ..., prefix_key_cross_0, ...`."""
    return (_layer_names(model, f"{prefix}_key_self", f"{prefix}_value_self")
            + _layer_names(model, f"{prefix}_key_cross", f"{prefix}_value_cross"))


def encoder_function(model):
    """The encoder subgraph's model part as a `tf.function`: the encoder,
    the cross-attention keys and values, and the first decoder step."""
    signature = [tf.TensorSpec([None, None], tf.int32, name="encoder_input_ids"),
                 tf.TensorSpec([None, None], tf.int32, name="encoder_attention_mask"),
                 tf.TensorSpec([None, None], tf.int32, name="decoder_input_ids")]
    layers = model.config.num_decoder_layers

    def encoder(encoder_input_ids, encoder_attention_mask, decoder_input_ids):
        del encoder_attention_mask  # the model masks padding by its pad id
        encoder_output = model.encode(encoder_input_ids, training=False)
        cache = model.initial_cache(encoder_output, encoder_input_ids, 0)
        logits, cache = model.decode_step_growing(decoder_input_ids, cache)
        outputs = {"logits": logits, "encoder_hidden_states": encoder_output}
        for i in range(layers):
            outputs[f"present_key_self_{i}"] = cache["self_keys"][i]
            outputs[f"present_value_self_{i}"] = cache["self_values"][i]
        for i in range(layers):
            outputs[f"present_key_cross_{i}"] = cache["cross_keys"][i]
            outputs[f"present_value_cross_{i}"] = cache["cross_values"][i]
        return outputs

    return graph_function(encoder, signature)


def decoder_function(model):
    """The decoder subgraph's model part as a `tf.function`: one step with
    growing self-attention caches."""
    config = model.config
    layers = config.num_decoder_layers

    def cache_spec(name):
        dim = config.head_value_dim if "_value_" in name else config.head_key_dim
        return tf.TensorSpec([None, config.num_heads, None, dim], model.compute_dtype, name=name)

    signature = [tf.TensorSpec([None, None], tf.int32, name="input_ids"),
                 tf.TensorSpec([None, None], tf.int32, name="encoder_attention_mask"),
                 *[cache_spec(name) for name in _cache_names(model, "past")]]

    def decoder(input_ids, encoder_attention_mask, *caches):
        self_caches, cross_caches = caches[:2 * layers], caches[2 * layers:]
        cache = {"source_padding": encoder_attention_mask > 0,
                 "self_keys": list(self_caches[0::2]), "self_values": list(self_caches[1::2]),
                 "cross_keys": list(cross_caches[0::2]), "cross_values": list(cross_caches[1::2])}
        logits, cache = model.decode_step_growing(input_ids, cache)
        outputs = {"logits": logits}
        for i in range(layers):
            outputs[f"present_key_self_{i}"] = cache["self_keys"][i]
            outputs[f"present_value_self_{i}"] = cache["self_values"][i]
        return outputs

    return graph_function(decoder, signature)


def subgraph_models(model, opset=OPSET):
    """The model parts of the encoder and decoder subgraphs as standalone
    `onnx.ModelProto`s, converted with tf2onnx, inputs and outputs named and
    ordered as the operator expects (`search_nodes` adds the search's rule
    for the output limit). Standalone, so that `onnx_int8.quantize` can
    take them."""
    models = []
    for function, inputs, outputs in (
            (encoder_function(model),
             ["encoder_input_ids", "encoder_attention_mask", "decoder_input_ids"],
             ["logits", "encoder_hidden_states", *_cache_names(model, "present")]),
            (decoder_function(model),
             ["input_ids", "encoder_attention_mask", *_cache_names(model, "past")],
             ["logits", *_layer_names(model, "present_key_self", "present_value_self")])):
        proto = onnx_graphs.convert(function, opset)
        # tf2onnx drops an input the function does not read (the encoder's
        # mask); the operator wants it all the same.
        known = {value.name: value for value in proto.graph.input}
        known.update({name: helper.make_tensor_value_info(name, TensorProto.INT32,
                                                          ["rows", "source"])
                      for name in set(inputs) - set(known)})
        _reorder(proto.graph.input, [known[name] for name in inputs])
        known = {value.name: value for value in proto.graph.output}
        _reorder(proto.graph.output, [known[name] for name in outputs])
        # The functions take target ids of any length, so that the logits
        # are one MatMul with the transposed embedding, which onnxruntime
        # packs once (for one position the model uses an einsum that suits
        # oneDNN; converted, it was 20% slower at batch 1); the operator wants
        # the decoder's length declared 1.
        proto.graph.input[2 if inputs[2] == "decoder_input_ids" else 0].type.tensor_type.shape \
            .dim[1].dim_value = 1
        models.append(proto)
    return tuple(models)


def _reorder(values, ordered):
    """Replaces a repeated field's items with `ordered` (copies of them)."""
    ordered = [_copy(value) for value in ordered]
    del values[:]
    values.extend(ordered)


def _copy(message):
    copied = type(message)()
    copied.CopyFrom(message)
    return copied


def _nested(proto, model):
    """A subgraph model's graph for the operator's attribute, its logits
    passed through `_end_at_limit`."""
    graph = _copy(proto.graph)
    model_logits = "end_at_limit/model_logits"
    for node in graph.node:
        node.output[:] = [model_logits if name == "logits" else name for name in node.output]
    b = onnx_builder.GraphBuilder("end_at_limit")
    inputs = [value.name for value in graph.input]
    if inputs[2] == "decoder_input_ids":  # the encoder subgraph: the first step
        step, rows = b.constant(0, np.int32), inputs[2]
    else:  # the decoder: the step is the length of the self-attention caches
        step = b.op("Cast", b.op("Gather", b.op("Shape", inputs[2]), b.constant(2, np.int64)),
                    to=TensorProto.INT32)
        rows = inputs[0]
    _end_at_limit(b, model, model_logits, step, rows)
    graph.node.extend(b.nodes)
    graph.initializer.extend(b.initializers)
    return graph


def _end_at_limit(b, model, model_logits, step, rows):
    """Adds nodes that make `logits` from `model_logits` `(rows, 1,
    vocabulary)` at position `step`. The rows whose output limit (the outer
    graph's `output_limits`, one per sentence; `rows` is a value with one row
    per hypothesis, sentence-major) this position reaches get their end
    token's log-probability as its logit and the rest of the probability on
    padding (which `vocab_mask` bans after the softmax), -1e9 elsewhere:
    after the operator's log-softmax the end token is their only choice and
    scores as in our search, which bans the other tokens at the limit after
    its softmax. A conditional, so that at the steps where no row is at its
    limit (most) the logits pass through untouched."""
    config = model.config
    dump = _banned(config)[0]
    count = b.op("Gather", b.op("Shape", rows), b.constant(0, np.int64))
    sentences = b.op("Gather", b.op("Shape", OUTPUT_LIMITS), b.constant(0, np.int64))
    per_sentence = b.op("Div", count, b.op("Max", sentences, b.constant(1, np.int64)))
    sentence = b.op("Div", b.op("Range", b.constant(0, np.int64), count, b.constant(1, np.int64)),
                    per_sentence)
    at_limit = b.op("GreaterOrEqual", b.op("Add", step, b.constant(1, np.int32)),
                    b.op("Gather", OUTPUT_LIMITS, sentence))

    force = onnx_builder.GraphBuilder("end_at_limit/force")
    log_probs = force.op("LogSoftmax", model_logits, axis=-1)
    end = force.op("Slice", log_probs, force.constant([config.eos_id], np.int64),
                   force.constant([config.eos_id + 1], np.int64), force.constant([2], np.int64))
    rest = force.op("Log", force.op("Sub", force.constant(1.0, np.float32), force.op("Exp", end)))
    vocab = np.arange(model.target_vocab_size)[None, None]
    forced = force.op("Where", force.constant(vocab == config.eos_id), end, force.op(
        "Where", force.constant(vocab == dump), rest, force.constant(_NEG_INF, np.float32)))
    forced = force.op("Where", force.op("Unsqueeze", at_limit, force.constant([1, 2], np.int64)),
                      forced, model_logits)
    keep = onnx_builder.GraphBuilder("end_at_limit/keep")
    kept = keep.op("Identity", model_logits)
    branches = {name: branch.graph(name, [], [helper.make_tensor_value_info(output,
                                                                            TensorProto.FLOAT, None)])
                for name, branch, output in (("then_branch", force, forced),
                                             ("else_branch", keep, kept))}
    any_at_limit = b.op("Cast", b.op("ReduceMax", b.op("Cast", at_limit, to=TensorProto.INT32),
                                     keepdims=0), to=TensorProto.BOOL)
    b.op("If", any_at_limit, name="logits", **branches)


def parameter_defaults(model):
    """The search inputs' defaults: the model config's beam size, length
    penalty and decode margin, and one translation per sentence."""
    config = model.config
    return {"beam_size": np.int32(config.beam_size), "n_best": np.int32(1),
            "alpha": np.float32(config.length_penalty),
            "decode_margin": np.int32(config.decode_margin)}


def parameter_inputs(builder, model):
    """Scalar graph inputs `beam_size`, `n_best`, `alpha`, `decode_margin`,
    each with an initializer of its name as its default; returns their
    `ValueInfoProto`s."""
    inputs = []
    for name, value in parameter_defaults(model).items():
        builder.constant(value, name=name)
        elem = TensorProto.FLOAT if value.dtype == np.float32 else TensorProto.INT32
        inputs.append(helper.make_tensor_value_info(name, elem, []))
    return inputs


def search_nodes(builder, model, source_ids, subgraphs):
    """Adds the search over `source_ids` (a value name) to `builder`, reading
    the scalar inputs `beam_size`, `n_best`, `alpha` and `decode_margin`;
    `subgraphs` are `subgraph_models(model)` (quantized or not). Returns the
    names of `(target_ids, scores)`."""
    encoder, decoder = (_nested(proto, model) for proto in subgraphs)
    config = model.config
    b = builder
    one = b.constant([1], np.int64)
    not_pad = b.op("Not", b.op("Equal", source_ids, b.constant(config.pad_id, np.int32)))
    attention_mask = b.op("Cast", not_pad, to=TensorProto.INT32)
    # Our output limit: source tokens without the end id, + margin, capped.
    real = b.op("And", not_pad, b.op("Not", b.op("Equal", source_ids,
                                                 b.constant(config.eos_id, np.int32))))
    real_length = b.op("ReduceSum", b.op("Cast", real, to=TensorProto.INT32), one, keepdims=0)
    b.op("Min", b.op("Add", real_length, "decode_margin"), b.constant(config.max_length, np.int32),
         name=OUTPUT_LIMITS)
    # The operator's sequences hold the start id too; it needs at least 3
    # positions to run its first decoder step.
    max_length = b.op("Max", b.op("Add", b.op("ReduceMax", OUTPUT_LIMITS, keepdims=1, axes=[0]),
                                  b.constant([1], np.int32)),
                      b.constant([3], np.int32))
    beams = b.op("Reshape", "beam_size", one)
    vocab_mask = np.ones(model.target_vocab_size, np.int32)
    vocab_mask[_banned(config)] = 0
    # It returns all K hypotheses, which are rescored below. min_length is
    # optional, but onnxruntime 1.31 fails without it.
    sequences, operator_scores = b.op(
        "BeamSearch", source_ids, max_length, b.constant([0], np.int32), beams, beams,
        b.op("Reshape", "alpha", one), b.constant([1.0], np.float32), b.constant(vocab_mask), "",
        attention_mask,
        outputs=2, domain=DOMAIN, model_type=1, early_stopping=1, no_repeat_ngram_size=0,
        eos_token_id=config.eos_id, pad_token_id=config.pad_id,
        decoder_start_token_id=config.decoder_start_id, encoder=encoder, decoder=decoder)
    # Drop the start id; the operator's hypotheses stop before the end id.
    tokens = b.op("Slice", sequences, one, b.constant([np.iinfo(np.int64).max]),
                  b.constant([2], np.int64))
    count = b.op("ReduceSum", b.op("Cast", b.op("Not", b.op("Equal", tokens, b.constant(
        config.pad_id, np.int32))), to=TensorProto.INT32), b.constant([2], np.int64), keepdims=1)
    # GNMT's score from the operator's: log_prob = score * length ** alpha,
    # with length = tokens + the end token.
    length = b.op("Cast", b.op("Add", count, b.constant(1, np.int32)), to=TensorProto.FLOAT)
    length = b.op("Squeeze", length, b.constant([2], np.int64))
    log_prob = b.op("Mul", operator_scores, b.op("Pow", length, "alpha"))
    penalty = b.op("Pow", b.op("Div", b.op("Add", length, b.constant(5.0, np.float32)),
                               b.constant(6.0, np.float32)), "alpha")
    scores, order = b.op("TopK", b.op("Div", log_prob, penalty),
                         b.op("Cast", b.op("Reshape", "n_best", one), to=TensorProto.INT64),
                         outputs=2, axis=1)
    # The end id after each hypothesis, padding after that.
    padded = b.op("Pad", tokens, b.constant([0, 0, 0, 0, 0, 1], np.int64),
                  b.constant(config.pad_id, np.int32))
    positions = b.op("Range", b.constant(0, np.int32), b.op("Add", b.op(
        "Gather", b.op("Cast", b.op("Shape", tokens), to=TensorProto.INT32),
        b.constant(2, np.int64)), b.constant(1, np.int32)), b.constant(1, np.int32))
    ended = b.op("Where", b.op("Less", positions, count), padded,
                 b.op("Where", b.op("Equal", positions, count), b.constant(config.eos_id, np.int32),
                      b.constant(config.pad_id, np.int32)))
    width = b.op("Slice", b.op("Shape", ended), b.constant([2], np.int64), b.constant([3], np.int64))
    index = b.op("Expand", b.op("Unsqueeze", order, b.constant([2], np.int64)),
                 b.op("Concat", b.op("Shape", scores), width, axis=0))
    return b.op("GatherElements", ended, index, axis=1), scores


def search_model(model, subgraphs=None):
    """The search with token ids in and out (see the module docstring) as an
    `onnx.ModelProto`, on `subgraphs` (default: `subgraph_models(model)`)."""
    subgraphs = subgraphs or subgraph_models(model)
    builder = onnx_builder.GraphBuilder("search")
    inputs = [helper.make_tensor_value_info("source_ids", TensorProto.INT32, ["batch", "source"]),
              *parameter_inputs(builder, model)]
    target_ids, scores = search_nodes(builder, model, "source_ids", subgraphs)
    builder.op("Identity", target_ids, name="target_ids")
    builder.op("Identity", scores, name="scores")
    outputs = [helper.make_tensor_value_info("target_ids", TensorProto.INT32,
                                             ["batch", "n_best", "length"]),
               helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", "n_best"])]
    return onnx_builder.make_model(builder.graph("search", inputs, outputs))
