"""Position information added to the token embeddings (paper section 3.5).

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Even channels carry the sine, odd channels the cosine of the same frequency
(interleaved, as the formula says; tensor2tensor and keras-hub instead put all
sines before all cosines). Table 3 row (E) replaces this with learned vectors.

Both layers return `inputs + encoding`, pass the Keras mask through, and take a
`start_index` so that cached decoding can encode one position at a time.
"""

import keras
from keras import ops

from keras_transformer.layers import _validation


def _static_or_dynamic_shape(x):
    return tuple(
        static if static is not None else dynamic
        for static, dynamic in zip(x.shape, ops.shape(x))
    )


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """The paper's fixed sinusoids, for any sequence length.

    Args:
        max_wavelength: the 10000 of the formula.

    Example:

    >>> encoded = SinusoidalPositionalEncoding()(keras.ops.zeros((1, 3, 4)))
    >>> [round(float(v), 3) for v in encoded[0, 1]]  # sin 1, cos 1, sin .01, cos .01
    [0.841, 0.54, 0.01, 1.0]
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = max_wavelength
        self.supports_masking = True

    def build(self, input_shape):
        if input_shape[-1] is not None and input_shape[-1] % 2:
            raise ValueError(
                "SinusoidalPositionalEncoding pairs a sine with a cosine, so the "
                f"last dimension must be even; got {input_shape[-1]}."
            )

    def encoding(self, length, dim, start_index=0):
        """The `(length, dim)` table of positions `start_index ...`, float32."""
        positions = ops.cast(ops.arange(length) + start_index, "float32")
        even_channels = ops.cast(ops.arange(0, dim, 2), "float32")  # the 2i
        frequencies = ops.power(float(self.max_wavelength), -even_channels / dim)
        angles = positions[:, None] * frequencies[None, :]
        # Stacking (sin, cos) on a new last axis and flattening it interleaves
        # them: channel 2i gets sin, channel 2i + 1 gets cos.
        return ops.reshape(ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1), (length, dim))

    def call(self, inputs, start_index=0):
        _, length, dim = _static_or_dynamic_shape(inputs)
        return inputs + ops.cast(self.encoding(length, dim, start_index), inputs.dtype)

    def get_config(self):
        return super().get_config() | {"max_wavelength": self.max_wavelength}


@keras.saving.register_keras_serializable(package="keras_transformer")
class LearnedPositionalEmbedding(keras.layers.Layer):
    """One trained vector per position (Table 3 row E).

    Args:
        max_length: number of positions that have a vector; longer inputs are
            an error.
        initializer: for the position vectors.

    Example:

    >>> layer = LearnedPositionalEmbedding(max_length=16)
    >>> tuple(layer(keras.ops.zeros((2, 5, 8))).shape)
    (2, 5, 8)
    """

    def __init__(self, max_length, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        _validation.check_positive_int("max_length", max_length)
        self.max_length = max_length
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_length, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs, start_index=0):
        length = inputs.shape[1]
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.max_length:
                raise ValueError(
                    f"Positions up to {start_index + length} requested but this "
                    f"LearnedPositionalEmbedding has only max_length={self.max_length}; "
                    "shorten the input or build the layer with a larger max_length."
                )
        length = ops.shape(inputs)[1]
        positions = ops.arange(length) + start_index
        table = ops.take(self.position_embeddings, positions, axis=0)
        return inputs + ops.cast(table, inputs.dtype)[None]

    def get_config(self):
        return super().get_config() | {
            "max_length": self.max_length,
            "initializer": keras.initializers.serialize(self.initializer),
        }
