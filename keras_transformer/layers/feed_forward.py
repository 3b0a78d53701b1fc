"""Position-wise feed-forward network (paper section 3.3).

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2

applied to every position separately and identically.
"""

import keras

from keras_transformer.layers import _validation
from keras_transformer.layers._dense import over_positions
from keras_transformer.layers.dropout import Dropout


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """Two dense layers with an activation between them.

    Args:
        d_ff: inner size (2048 in the base model, 4096 in the big one).
        activation: inner activation; ReLU in the paper.
        dropout: dropout on the inner activations (0 in the paper; tensor2tensor
            calls it `relu_dropout`). The residual dropout around this layer
            belongs to the encoder and decoder layers.
        output_dim: defaults to the input's last dimension (d_model).
        kernel_initializer: for both dense layers.
        bias_initializer: for both dense layers.

    Example:

    >>> ffn = PositionwiseFeedForward(d_ff=32)
    >>> tuple(ffn(keras.ops.ones((2, 7, 8))).shape)
    (2, 7, 8)
    """

    def __init__(
        self,
        d_ff,
        activation="relu",
        dropout=0.0,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        _validation.check_positive_int("d_ff", d_ff)
        _validation.check_rate("dropout", dropout)
        self.d_ff = d_ff
        self.activation = keras.activations.get(activation)
        self.dropout = dropout
        self.output_dim = output_dim
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        def dense(units, activation, name):
            return keras.layers.Dense(
                units,
                activation=activation,
                kernel_initializer=self.kernel_initializer,
                bias_initializer=self.bias_initializer,
                dtype=self.dtype_policy,
                name=name,
            )

        self.inner_dense = dense(self.d_ff, self.activation, "inner")
        self.inner_dense.build(input_shape)
        self.inner_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self.output_dense = dense(self.output_dim or input_shape[-1], None, "output")
        self.output_dense.build(tuple(input_shape[:-1]) + (self.d_ff,))

    def call(self, inputs, training=None):
        hidden = self.inner_dropout(over_positions(self.inner_dense, inputs), training=training)
        return over_positions(self.output_dense, hidden)

    def get_config(self):
        return super().get_config() | {
            "d_ff": self.d_ff,
            "activation": keras.activations.serialize(self.activation),
            "dropout": self.dropout,
            "output_dim": self.output_dim,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        }
