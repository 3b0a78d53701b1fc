"""The `tf.function`s an export traces (its SavedModels' signatures and
the graphs it converts to ONNX and LiteRT), made one way."""

import tensorflow as tf


def graph_function(function, input_signature):
    """`tf.function(function, input_signature=...)` without autograph.

    The search's loops and branches are `tf.while_loop` and `tf.cond`
    already, and the model's Python branches on shapes and settings, not on
    tensors, so autograph's source rewriting of every function the trace
    reaches (the model's layers included, each traced anew) changed nothing
    in the graphs and cost time: an export's SavedModels, ONNX and LiteRT
    files took more CPU time with it than without."""
    return tf.function(function, input_signature=input_signature, autograph=False)
