"""Position information added to the token embeddings (paper section 3.5).

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

Even channels carry the sine, odd channels the cosine of the same frequency
(interleaved, as the formula says). Pretrained models of this architecture
use other tables, which `SinusoidalPositionalEncoding(style=...)` reproduces
exactly (with n = d_model / 2 frequencies, i = 0 ... n - 1):

| style | channels | frequency i | first position |
|---|---|---|---|
| "paper" | sin, cos interleaved | 10000^(-i / n) | 0 |
| "marian" (Marian, OPUS-MT) | n sines, then n cosines | 10000^(-i / n) | 0 |
| "tensor2tensor" (tensor2tensor, Marian's own C++) | n sines, then n cosines | 10000^(-i / (n - 1)) | 0 |
| "fairseq" (fairseq, FSMT) | n sines, then n cosines | 10000^(-i / (n - 1)) | `first_position` (fairseq: padding id + 1) |

(Hugging Face's port of the OPUS-MT models computes "marian", which differs
from the table Marian itself trained them with, "tensor2tensor".)

Table 3 row (E) replaces the sinusoids with learned vectors.

Both layers return `inputs + encoding`, pass the Keras mask through, and take a
`start_index` (or one for each row of a batch) so that cached decoding can encode
one position at a time.
"""

import keras
from keras import ops

from keras_transformer.layers import _validation
from keras_transformer.layers._shapes import size


STYLES = ("paper", "marian", "tensor2tensor", "fairseq")


@keras.saving.register_keras_serializable(package="keras_transformer")
class SinusoidalPositionalEncoding(keras.layers.Layer):
    """The paper's fixed sinusoids (or a pretrained model's), for any length.

    Args:
        max_wavelength: the 10000 of the formula.
        style: "paper", "marian", "tensor2tensor" or "fairseq" (see the
            module docstring).
        first_position: the position of the first token (fairseq counts
            from the padding id + 1; everyone else from 0).

    Example:

    >>> encoded = SinusoidalPositionalEncoding()(keras.ops.zeros((1, 3, 4)))
    >>> [round(float(v), 3) for v in encoded[0, 1]]  # sin 1, cos 1, sin .01, cos .01
    [0.841, 0.54, 0.01, 1.0]
    """

    def __init__(self, max_wavelength=10000.0, style="paper", first_position=0, **kwargs):
        super().__init__(**kwargs)
        if style not in STYLES:
            raise ValueError(f"style must be one of {STYLES}; got {style!r}.")
        _validation.check_non_negative_int("first_position", first_position)
        self.max_wavelength = max_wavelength
        self.style = style
        self.first_position = first_position
        self.supports_masking = True

    def build(self, input_shape):
        if input_shape[-1] is not None and input_shape[-1] % 2:
            raise ValueError(
                "SinusoidalPositionalEncoding pairs a sine with a cosine, so the "
                f"last dimension must be even; got {input_shape[-1]}."
            )

    def encoding(self, length, dim, start_index=0):
        """The `(length, dim)` table of positions `start_index ...`, float32;
        with one `start_index` for each row of a batch `(batch,)`, one table
        for each, `(batch, length, dim)`."""
        positions = ops.cast(_positions(length, start_index) + self.first_position, "float32")
        half = dim // 2
        steps = max(half - 1, 1) if self.style in ("tensor2tensor", "fairseq") else half
        exponents = ops.cast(ops.arange(half), "float32") / steps  # the paper's 2i / d_model
        frequencies = ops.power(float(self.max_wavelength), -exponents)
        angles = ops.expand_dims(positions, -1) * frequencies
        if self.style != "paper":
            return ops.concatenate([ops.sin(angles), ops.cos(angles)], axis=-1)
        # Stacking (sin, cos) on a new last axis and flattening it interleaves
        # them: channel 2i gets sin, channel 2i + 1 gets cos.
        interleaved = ops.stack([ops.sin(angles), ops.cos(angles)], axis=-1)
        return ops.reshape(interleaved, (length, dim) if len(positions.shape) == 1
                           else (-1, length, dim))

    def compute_output_shape(self, input_shape):
        return input_shape

    def call(self, inputs, start_index=0):
        length, dim = size(inputs, 1), size(inputs, 2)
        return inputs + ops.cast(self.encoding(length, dim, start_index), inputs.dtype)

    def get_config(self):
        return super().get_config() | {"max_wavelength": self.max_wavelength,
                                       "style": self.style,
                                       "first_position": self.first_position}


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

    def _check_length(self, length, start_index=0):
        if isinstance(length, int) and isinstance(start_index, int):
            if start_index + length > self.max_length:
                raise ValueError(
                    f"Positions up to {start_index + length} requested but this "
                    f"LearnedPositionalEmbedding has only max_length={self.max_length}; "
                    "shorten the input or build the layer with a larger max_length."
                )

    def compute_output_spec(self, inputs, start_index=0):
        # Given, so that Keras need not run `call` on symbolic inputs: the
        # PyTorch backend does that with a stand-in size (83) for unknown
        # lengths, which could exceed `max_length`.
        self._check_length(inputs.shape[1], start_index)
        return keras.KerasTensor(inputs.shape, inputs.dtype)

    def call(self, inputs, start_index=0):
        self._check_length(inputs.shape[1], start_index)
        length = ops.shape(inputs)[1]
        positions = _positions(length, start_index)
        table = ops.take(self.position_embeddings, positions, axis=0)
        return inputs + ops.cast(table, inputs.dtype)

    def get_config(self):
        return super().get_config() | {
            "max_length": self.max_length,
            "initializer": keras.initializers.serialize(self.initializer),
        }


def _positions(length, start_index):
    """The positions `start_index ... start_index + length - 1`: `(length,)`
    for a scalar `start_index`, `(batch, length)` for one a row `(batch,)`
    (rows that began at different steps of a decoding batch)."""
    if len(getattr(start_index, "shape", ())) == 1:
        return ops.arange(length)[None, :] + ops.expand_dims(start_index, 1)
    return ops.arange(length) + start_index
