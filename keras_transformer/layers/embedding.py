"""Token embeddings shared with the pre-softmax projection (paper section 3.4).

"We share the same weight matrix between the two embedding layers and the
pre-softmax linear transformation ... In the embedding layers, we multiply
those weights by sqrt(d_model)."
"""

import math

import keras
from keras import ops

from keras_transformer.layers import _validation
from keras_transformer.layers._dense import over_positions


# Rows of the embedding transposed at a time (see `transposed_embeddings`).
_TRANSPOSE_ROWS = 4096


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """Embeds token ids, scaled by sqrt(d_model); reversed, turns vectors into logits.

    `layer(ids)` looks up `E[ids] * sqrt(d_model)`. `layer(x, reverse=True)`
    returns `x E^T`, the pre-softmax logits tied to the same matrix E. Under
    mixed precision the product runs in the compute dtype (the matmul
    accumulates in float32) and is returned as float32, so that the softmax
    and the loss run in float32, as Keras' mixed-precision guide advises.
    Calling one instance for the source ids, the target ids and the logits
    shares E between all three, as the paper does with a shared vocabulary.

    Args:
        vocab_size: number of token ids.
        d_model: embedding size.
        scale: multiply looked-up vectors by sqrt(d_model) (the paper does).
        mask_zero: id 0 is padding, and looked-up vectors carry a Keras mask.
        logits_bias: the reverse call adds a trained bias per token id (not
            in the paper; Marian's `final_logits_bias`).
        embeddings_initializer: defaults to a normal with standard deviation
            d_model^-0.5, so that the scaled embeddings have unit variance (as
            tensor2tensor initialises them).

    Example:

    >>> embed = SharedEmbedding(vocab_size=100, d_model=8)
    >>> vectors = embed(keras.ops.array([[5, 9, 0]]))
    >>> tuple(embed(vectors, reverse=True).shape)
    (1, 3, 100)
    """

    def __init__(
        self,
        vocab_size,
        d_model,
        scale=True,
        mask_zero=True,
        logits_bias=False,
        embeddings_initializer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _validation.check_positive_int("vocab_size", vocab_size)
        _validation.check_positive_int("d_model", d_model)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = scale
        self.mask_zero = mask_zero
        self.logits_bias = logits_bias
        self.embeddings_initializer = keras.initializers.get(
            embeddings_initializer
            or keras.initializers.RandomNormal(stddev=d_model**-0.5)
        )

    def build(self, input_shape=None):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=self.embeddings_initializer,
        )
        self.bias = None
        if self.logits_bias:
            self.bias = self.add_weight(name="logits_bias", shape=(self.vocab_size,),
                                        initializer="zeros")

    def transposed_embeddings(self):
        """E^T, `(d_model, vocab_size)` in the compute dtype: give it as
        `transposed` to reverse calls that run many times on the same
        weights (a decoding loop transposes once, not at every step).

        Transposed in blocks of `_TRANSPOSE_ROWS` rows, joined: oneDNN
        transposes one large matrix slowly without AVX-512 and its blocks
        quickly (with AVX-512 the whole matrix is the faster, but both are
        quick), and a search pays it at every call, which made a base
        model's batch of 16 slower to decode on AVX2 than the one-position
        form without E^T (docs/benchmarks-log.md, "Whole files").
        """
        embeddings = ops.cast(self.embeddings, self.compute_dtype)
        blocks = [ops.transpose(embeddings[start:start + _TRANSPOSE_ROWS])
                  for start in range(0, self.vocab_size, _TRANSPOSE_ROWS)]
        return blocks[0] if len(blocks) == 1 else ops.concatenate(blocks, axis=1)

    def call(self, inputs, reverse=False, transposed=None):
        if reverse and transposed is not None:
            # x E^T with E^T stored: the fastest form on oneDNN for any
            # number of rows, faster than the one-position form below.
            weights = ops.cast(transposed, inputs.dtype)
            logits = ops.cast(over_positions(lambda x: ops.matmul(x, weights), inputs), "float32")
            return logits if self.bias is None else logits + ops.cast(self.bias, "float32")
        if reverse:
            embeddings = ops.cast(self.embeddings, inputs.dtype)
            if len(inputs.shape) == 3 and inputs.shape[1] == 1:
                # One position per row (incremental decoding): E x^T, then
                # transposed, is faster on oneDNN than x E^T when there are
                # few rows. Training keeps x E^T, faster there.
                logits = ops.einsum("vd,bd->bv", embeddings, inputs[:, 0])[:, None]
            else:
                logits = ops.matmul(inputs, ops.transpose(embeddings))
            logits = ops.cast(logits, "float32")
            return logits if self.bias is None else logits + ops.cast(self.bias, "float32")
        vectors = ops.take(self.embeddings, ops.cast(inputs, "int32"), axis=0)
        if self.scale:
            vectors = vectors * ops.cast(math.sqrt(self.d_model), vectors.dtype)
        return ops.cast(vectors, self.compute_dtype)

    def compute_mask(self, inputs, mask=None):
        # Only a lookup (integer input) creates a mask; the reverse call keeps
        # whatever mask its input carried.
        if self.mask_zero and "int" in str(inputs.dtype):
            return ops.not_equal(inputs, 0)
        return mask

    def compute_output_spec(self, inputs, reverse=False, transposed=None):
        if reverse:
            return keras.KerasTensor(inputs.shape[:-1] + (self.vocab_size,), "float32")
        return keras.KerasTensor(inputs.shape + (self.d_model,), self.compute_dtype)

    def get_config(self):
        return super().get_config() | {
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "scale": self.scale,
            "mask_zero": self.mask_zero,
            "logits_bias": self.logits_bias,
            "embeddings_initializer": keras.initializers.serialize(
                self.embeddings_initializer
            ),
        }
