"""One encoder layer (paper section 3.1): self-attention, then feed-forward."""

import keras

from keras_transformer.layers.residual import TransformerLayerBase, residual_block


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerEncoderLayer(TransformerLayerBase):
    """Multi-head self-attention and a position-wise feed-forward network, each
    wrapped in residual dropout and LayerNorm (post-norm, as in the paper,
    unless `norm_first=True`).

    Constructor arguments: see `TransformerLayerBase` (`num_heads`, `d_ff`,
    `key_dim`, `value_dim`, `dropout`, `attention_dropout`, `ffn_dropout`,
    `activation`, `norm_first`, `layer_norm_epsilon`, initializers).

    Call arguments:
        inputs: `(batch, length, d_model)`.
        padding_mask: `(batch, length)`, True for real tokens. Defaults to the
            Keras mask that `inputs` carries, if any.
        attention_mask: `(batch, length, length)`, True where attention is
            allowed; combined with the padding mask.
        return_attention_scores: also return the self-attention weights
            `(batch, heads, length, length)`.

    Example:

    >>> layer = TransformerEncoderLayer(num_heads=2, d_ff=16)
    >>> padding = keras.ops.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0]], "bool")
    >>> tuple(layer(keras.ops.ones((2, 5, 8)), padding_mask=padding).shape)
    (2, 5, 8)
    """

    def call(self, inputs, padding_mask=None, attention_mask=None,
             return_attention_scores=False, training=None):
        def attend(x):
            return self.self_attention(
                x, x, attention_mask=attention_mask, value_mask=padding_mask,
                return_attention_scores=return_attention_scores, training=training,
            )

        x, extras = residual_block(
            inputs, attend, self.self_attention_norm, self.residual_dropout,
            self.norm_first, training,
        )
        x = self._feed_forward_block(x, training)
        return (x, extras[0]) if return_attention_scores else x
