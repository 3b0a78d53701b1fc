"""ONNX graphs of a model, converted with tf2onnx, for onnxruntime.

Three graphs, because a search loop does not convert well (tf2onnx cannot
convert loops that stack a TensorArray) and because a runtime should keep its
own loop: the search lives in `onnx_runner.py`.

- `forward.onnx`: `source_ids`, `target_ids` -> `logits` (the full model).
- `encoder.onnx`: `source_ids` -> `encoder_output`, and the cross-attention
  keys and values of every decoder layer (`cross_keys_<i>`,
  `cross_values_<i>`), computed once per sentence.
- `decoder_step.onnx`: the newest `target_ids` `(rows, 1)`, the `step`
  (its position), `source_ids` (for the padding mask) and the
  cross-attention keys and values, one row per sentence, and the
  self-attention caches `self_keys_<i>`, `self_values_<i>`
  `(rows, heads, max_length, head_dim)`, k rows per sentence for k
  hypotheses -> `logits` `(rows, vocabulary)` and the updated caches
  `new_self_keys_<i>`, `new_self_values_<i>`.
"""

import os

import onnx
import tensorflow as tf
import tf2onnx

from keras_transformer.export.traced import graph_function

OPSET = 17


def _cache_spec(model, name, dim):
    """A heads-first cache: `(rows, heads, length, dim)`."""
    return tf.TensorSpec([None, model.config.num_heads, None, dim], model.compute_dtype, name=name)


def _layer_names(model, prefix):
    return [f"{prefix}_{i}" for i in range(model.config.num_decoder_layers)]


def forward_function(model):
    def forward(source_ids, target_ids):
        return {"logits": model({"source_ids": source_ids, "target_ids": target_ids})}

    signature = [tf.TensorSpec([None, None], tf.int32, name="source_ids"),
                 tf.TensorSpec([None, None], tf.int32, name="target_ids")]
    return graph_function(forward, signature)


def encoder_function(model):
    def encoder(source_ids):
        encoder_output = model.encode(source_ids, training=False)
        outputs = {"encoder_output": encoder_output}
        for i, layer in enumerate(model.decoder_layers):
            keys, values = layer.cross_attention_cache(encoder_output)
            outputs[f"cross_keys_{i}"], outputs[f"cross_values_{i}"] = keys, values
        return outputs

    return graph_function(encoder, [tf.TensorSpec([None, None], tf.int32, name="source_ids")])


def decoder_step_function(model):
    config = model.config
    key_dim, value_dim = config.head_key_dim, config.head_value_dim
    cross_keys, cross_values = _layer_names(model, "cross_keys"), _layer_names(model, "cross_values")
    self_keys, self_values = _layer_names(model, "self_keys"), _layer_names(model, "self_values")
    signature = [
        tf.TensorSpec([None, 1], tf.int32, name="target_ids"),
        tf.TensorSpec([], tf.int32, name="step"),
        tf.TensorSpec([None, None], tf.int32, name="source_ids"),
        *[_cache_spec(model, name, key_dim) for name in cross_keys],
        *[_cache_spec(model, name, value_dim) for name in cross_values],
        *[_cache_spec(model, name, key_dim) for name in self_keys],
        *[_cache_spec(model, name, value_dim) for name in self_values],
    ]
    layers = config.num_decoder_layers

    def decoder_step(target_ids, step, source_ids, *caches):
        groups = [list(caches[i * layers:(i + 1) * layers]) for i in range(4)]
        cache = {"source_padding": tf.not_equal(source_ids, config.pad_id), "cross_keys": groups[0],
                 "cross_values": groups[1], "self_keys": groups[2], "self_values": groups[3]}
        logits, cache = model.decode_step(target_ids, step, cache)
        outputs = {"logits": logits[:, 0]}
        for i in range(layers):
            outputs[f"new_self_keys_{i}"] = cache["self_keys"][i]
            outputs[f"new_self_values_{i}"] = cache["self_values"][i]
        return outputs

    return graph_function(decoder_step, signature)


CATCH_ERRORS = "TF2ONNX_CATCH_ERRORS"
"""tf2onnx's switch for keeping a copy of the graph before each optimizer
pass (see `convert`); when it is set at all, tf2onnx 1.17 keeps none."""


def convert(function, opset=OPSET):
    """A `tf.function` with an input signature -> `onnx.ModelProto`.

    tf2onnx deep-copies the whole graph before each pass of its optimizer,
    so as to go on without a pass that fails: about 40% of converting the
    graphs here (a Marian decoder step: 6.4 s instead of 11.7 s without the
    copies, as many nodes). So the passes run without the copies, and only
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


def export(model, directory, opset=OPSET):
    """Writes forward.onnx, encoder.onnx and decoder_step.onnx to `directory`."""
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name, make in (("forward", forward_function), ("encoder", encoder_function),
                       ("decoder_step", decoder_step_function)):
        path = os.path.join(directory, f"{name}.onnx")
        onnx.save(convert(make(model), opset), path)
        paths[name] = path
    return paths
