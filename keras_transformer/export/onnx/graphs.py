"""ONNX graphs of a model, converted with tf2onnx, for onnxruntime.

Three graphs, because a search loop does not convert well (tf2onnx cannot
convert loops that stack a TensorArray) and because a runtime should keep its
own loop (`runtimes/onnx_runner.py`, or onnxruntime's BeamSearch operator in
`translate.onnx`, which nests the encoder and decoder graphs:
`beam_search.py`). Encoder and decoder follow that operator's
encoder-decoder contract (`model_type=1`), so that one conversion of each
serves both searches:

- `forward.onnx`: `source_ids`, `target_ids` -> `logits` (the full model).
- `encoder.onnx`: `encoder_input_ids` `(batch, S)`, `encoder_attention_mask`
  (unread: the model masks padding by its pad id), `decoder_input_ids`
  `(batch, 1)` (the start id) -> `logits` `(batch, 1, vocabulary)` of the
  first step, `encoder_hidden_states`, then per decoder layer
  `present_key_self_i`, `present_value_self_i` (the first position's keys
  and values), then `present_key_cross_i`, `present_value_cross_i` (the
  cross-attention keys and values, computed once per sentence).
- `decoder_step.onnx`: `input_ids` `(rows, 1)` (the newest token of each
  hypothesis), `encoder_attention_mask` (1 at the real source positions),
  the self-attention caches `past_key_self_i`, `past_value_self_i`
  `(rows, heads, P, dim)` of the P positions decoded so far and the cross
  ones `past_key_cross_i`, `past_value_cross_i` -> `logits` `(rows, 1,
  vocabulary)` and the self caches one position longer
  (`Transformer.decode_step_growing`). The mask and cross caches may have
  one row per sentence, which its k hypotheses (rows `i*k ... i*k + k-1`)
  share, or one row per hypothesis (as the operator gives them).
"""

import os

import onnx
import tensorflow as tf
import tf2onnx
from onnx import TensorProto, helper

from keras_transformer.export.traced import graph_function

OPSET = 17


def _layer_names(model, *kinds):
    """`kind_0` for each of `kinds`, then `kind_1`, ...: one per decoder layer."""
    return [f"{kind}_{i}" for i in range(model.config.num_decoder_layers) for kind in kinds]


def _cache_names(model, prefix):
    """`prefix_key_self_0, prefix_value_self_0, ..., prefix_key_cross_0, ...`."""
    return (_layer_names(model, f"{prefix}_key_self", f"{prefix}_value_self")
            + _layer_names(model, f"{prefix}_key_cross", f"{prefix}_value_cross"))


def forward_function(model):
    def forward(source_ids, target_ids):
        return {"logits": model({"source_ids": source_ids, "target_ids": target_ids})}

    signature = [tf.TensorSpec([None, None], tf.int32, name="source_ids"),
                 tf.TensorSpec([None, None], tf.int32, name="target_ids")]
    return graph_function(forward, signature)


def _step_outputs(model, logits, cache, cross=False):
    """The named outputs of a step: logits, the self caches, and with
    `cross` the cross caches."""
    outputs = {"logits": logits}
    for i in range(model.config.num_decoder_layers):
        outputs[f"present_key_self_{i}"] = cache["self_keys"][i]
        outputs[f"present_value_self_{i}"] = cache["self_values"][i]
    for i in range(model.config.num_decoder_layers if cross else 0):
        outputs[f"present_key_cross_{i}"] = cache["cross_keys"][i]
        outputs[f"present_value_cross_{i}"] = cache["cross_values"][i]
    return outputs


def encoder_function(model):
    """encoder.onnx's model as a `tf.function`: the encoder, the
    cross-attention keys and values, and the first decoder step."""
    signature = [tf.TensorSpec([None, None], tf.int32, name="encoder_input_ids"),
                 tf.TensorSpec([None, None], tf.int32, name="encoder_attention_mask"),
                 tf.TensorSpec([None, None], tf.int32, name="decoder_input_ids")]

    def encoder(encoder_input_ids, encoder_attention_mask, decoder_input_ids):
        del encoder_attention_mask  # the model masks padding by its pad id
        encoder_output = model.encode(encoder_input_ids, training=False)
        cache = model.initial_cache(encoder_output, encoder_input_ids, 0)
        logits, cache = model.decode_step_growing(decoder_input_ids, cache)
        return {"encoder_hidden_states": encoder_output} | _step_outputs(model, logits, cache,
                                                                         cross=True)

    return graph_function(encoder, signature)


def decoder_function(model):
    """decoder_step.onnx's model as a `tf.function`: one step with growing
    self-attention caches."""
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
        return _step_outputs(model, logits, cache)

    return graph_function(decoder, signature)


CATCH_ERRORS = "TF2ONNX_CATCH_ERRORS"
"""tf2onnx's switch for keeping a copy of the graph before each optimizer
pass (see `convert`); when it is set at all, tf2onnx 1.17 keeps none."""


def convert(function, opset=OPSET):
    """A `tf.function` with an input signature -> `onnx.ModelProto`.

    tf2onnx deep-copies the whole graph before each pass of its optimizer,
    so as to go on without a pass that fails. The copies are a large part
    of the time converting the graphs here takes, and the nodes come out
    the same without them. So the passes run without the copies, and only
    if the conversion fails is it run again with them; where the user set
    `TF2ONNX_CATCH_ERRORS`, that choice is kept."""
    if CATCH_ERRORS in os.environ:
        return _from_function(function, opset)
    os.environ[CATCH_ERRORS] = "FALSE"
    try:
        return _from_function(function, opset)
    except Exception:  # any pass may fail; with the copies tf2onnx skips it
        pass
    finally:
        del os.environ[CATCH_ERRORS]
    return _from_function(function, opset)


def _from_function(function, opset):
    proto, _ = tf2onnx.convert.from_function(function, input_signature=function.input_signature,
                                             opset=opset)
    return proto


def step_models(model, opset=OPSET):
    """encoder.onnx's and decoder_step.onnx's `onnx.ModelProto`s, converted
    with tf2onnx, inputs and outputs named and ordered as onnxruntime's
    BeamSearch operator expects (see the module docstring)."""
    models = []
    for function, inputs, outputs in (
            (encoder_function(model),
             ["encoder_input_ids", "encoder_attention_mask", "decoder_input_ids"],
             ["logits", "encoder_hidden_states", *_cache_names(model, "present")]),
            (decoder_function(model),
             ["input_ids", "encoder_attention_mask", *_cache_names(model, "past")],
             ["logits", *_layer_names(model, "present_key_self", "present_value_self")])):
        proto = convert(function, opset)
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
        # oneDNN; converted, it was slower at batch 1); the operator wants
        # the decoder's length declared 1.
        proto.graph.input[2 if inputs[2] == "decoder_input_ids" else 0].type.tensor_type.shape \
            .dim[1].dim_value = 1
        models.append(proto)
    return tuple(models)


def _reorder(values, ordered):
    """Replaces a repeated field's items with `ordered` (copies of them)."""
    ordered = [copy_message(value) for value in ordered]
    del values[:]
    values.extend(ordered)


def copy_message(message):
    """A copy of a protobuf message."""
    copied = type(message)()
    copied.CopyFrom(message)
    return copied


def export(model, directory, opset=OPSET):
    """Writes forward.onnx, encoder.onnx and decoder_step.onnx to `directory`;
    returns their paths by name."""
    os.makedirs(directory, exist_ok=True)
    protos = dict(zip(("encoder", "decoder_step"), step_models(model, opset)))
    protos["forward"] = convert(forward_function(model), opset)
    paths = {}
    for name in ("forward", "encoder", "decoder_step"):
        paths[name] = os.path.join(directory, f"{name}.onnx")
        onnx.save(protos[name], paths[name])
    return paths
