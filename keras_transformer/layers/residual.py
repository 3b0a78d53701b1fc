"""The residual sub-layer connection (paper sections 3.1 and 5.4) and the
skeleton that encoder and decoder layers share.

    post-norm (the paper):  LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (later work):  x + Dropout(Sublayer(LayerNorm(x)))

Pre-norm trains more stably in deep stacks and needs a final LayerNorm after
the last layer, which the model adds.
"""

import inspect

import keras

from keras_transformer.layers import _validation
from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.normalization import LayerNormalization


def residual_block(inputs, sublayer, norm, dropout, norm_first, training):
    """Applies `sublayer` with dropout, a residual sum and layer normalisation.

    `sublayer` may return a tuple whose first item is its output; the other
    items (attention weights, caches) are handed back unchanged.

    Returns:
        `(output, extras)`, `extras` being a tuple, empty for plain sublayers.
    """
    result = sublayer(norm(inputs) if norm_first else inputs)
    output, extras = (result[0], tuple(result[1:])) if isinstance(result, tuple) else (result, ())
    output = inputs + dropout(output, training=training)
    return (output if norm_first else norm(output)), extras


class TransformerLayerBase(keras.layers.Layer):
    """Holds the arguments, the self-attention and the feed-forward sub-layers
    common to `TransformerEncoderLayer` and `TransformerDecoderLayer`.

    Args:
        num_heads: number of attention heads h.
        d_ff: inner size of the feed-forward network.
        key_dim: per-head size d_k of queries and keys; default d_model / h.
        value_dim: per-head size d_v of values; default d_model / h.
        dropout: residual dropout P_drop on each sub-layer output.
        attention_dropout: dropout on the attention weights (0 in the paper).
        ffn_dropout: dropout on the feed-forward inner activations (0 in the
            paper).
        activation: feed-forward activation (ReLU in the paper).
        norm_first: pre-norm instead of the paper's post-norm.
        layer_norm_epsilon: epsilon of the LayerNorms.
        kernel_initializer: for every dense projection.
        bias_initializer: for every dense projection.
    """

    def __init__(
        self,
        num_heads,
        d_ff,
        key_dim=None,
        value_dim=None,
        dropout=0.1,
        attention_dropout=0.0,
        ffn_dropout=0.0,
        activation="relu",
        norm_first=False,
        layer_norm_epsilon=1e-6,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        _validation.check_positive_int("num_heads", num_heads)
        _validation.check_positive_int("d_ff", d_ff)
        for name, rate in (("dropout", dropout), ("attention_dropout", attention_dropout),
                           ("ffn_dropout", ffn_dropout)):
            _validation.check_rate(name, rate)
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.key_dim = key_dim
        self.value_dim = value_dim
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.ffn_dropout = ffn_dropout
        self.activation = keras.activations.get(activation)
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def _attention(self, sequence_shape, name):
        key_dim = _validation.head_size(self.key_dim, sequence_shape[-1], self.num_heads)
        return MultiHeadAttention(
            self.num_heads,
            key_dim,
            self.value_dim,
            dropout=self.attention_dropout,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name=name,
        )

    def _norm(self, sequence_shape, name):
        norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name=name
        )
        norm.build(sequence_shape)
        return norm

    def build(self, sequence_shape):
        """Builds self-attention, feed-forward, their norms and the dropout."""
        self.self_attention = self._attention(sequence_shape, "self_attention")
        self.self_attention.build(sequence_shape, sequence_shape)
        self.self_attention_norm = self._norm(sequence_shape, "self_attention_norm")
        self.feed_forward = PositionwiseFeedForward(
            self.d_ff,
            self.activation,
            dropout=self.ffn_dropout,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
            name="feed_forward",
        )
        self.feed_forward.build(sequence_shape)
        self.feed_forward_norm = self._norm(sequence_shape, "feed_forward_norm")
        self.residual_dropout = Dropout(self.dropout, dtype=self.dtype_policy)

    def compute_output_spec(self, sequence, *args, **kwargs):
        """The output of a symbolic call (a functional model being built or
        loaded): the input's shape in the compute dtype, given here because
        Keras would otherwise trace `call` in a scratch graph to find it,
        which was most of the time a model took to load. With attention
        scores or a cache, whose structure varies, Keras traces as usual."""
        arguments = inspect.signature(self.call).bind(sequence, *args, **kwargs).arguments
        if arguments.get("return_attention_scores") or arguments.get("self_attention_cache"):
            return super().compute_output_spec(sequence, *args, **kwargs)
        return keras.KerasTensor(sequence.shape, self.compute_dtype)

    def _feed_forward_block(self, x, training):
        output, _ = residual_block(
            x, lambda y: self.feed_forward(y, training=training), self.feed_forward_norm,
            self.residual_dropout, self.norm_first, training,
        )
        return output

    def get_config(self):
        return super().get_config() | {
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "key_dim": self.key_dim,
            "value_dim": self.value_dim,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "ffn_dropout": self.ffn_dropout,
            "activation": keras.activations.serialize(self.activation),
            "norm_first": self.norm_first,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
