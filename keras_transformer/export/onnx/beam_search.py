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
n_best 1), so a caller may leave them out. `text.translate_model`
wraps the same nodes in text in, text out.

The subgraphs are the export's encoder.onnx and decoder_step.onnx
(`graphs.step_models`, converted once for both searches, and taken by
`int8.quantize` for int8 weights), which follow the operator's
encoder-decoder contract (`model_type=1`, see `graphs`). The operator
repeats the encoder's outputs for each beam and reorders the self caches
between steps.

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
from onnx import TensorProto, helper

from keras_transformer.export.onnx import builder as onnx_builder
from keras_transformer.export.onnx import graphs as onnx_graphs

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


def _nested(proto, model):
    """A subgraph model's graph for the operator's attribute, its logits
    passed through `_end_at_limit`."""
    graph = onnx_graphs.copy_message(proto.graph)
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
    `subgraphs` are `graphs.step_models(model)` (quantized or not). Returns the
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
    `onnx.ModelProto`, on `subgraphs` (default: `graphs.step_models(model)`)."""
    subgraphs = subgraphs or onnx_graphs.step_models(model)
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
