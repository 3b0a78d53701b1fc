"""Keras layers of the Transformer, one paper section a module.

Every layer is written with `keras.ops` (any Keras backend), serialisable
(`get_config`, registered under the package name "keras_transformer"), and
usable inside functional, sequential and subclassed models.

Mask convention: True means "may attend / real token", as in Keras.
"""

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.decoder import TransformerDecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.embedding import SharedEmbedding
from keras_transformer.layers.encoder import TransformerEncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.normalization import LayerNormalization
from keras_transformer.layers.positional_encoding import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
)

__all__ = [
    "Dropout",
    "LayerNormalization",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "PositionwiseFeedForward",
    "SharedEmbedding",
    "SinusoidalPositionalEncoding",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
]
