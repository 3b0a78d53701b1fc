"""The Transformer model, its config, presets and factories."""

from keras_transformer.models.config import (
    BASE,
    BIG,
    PRESETS,
    SMALL,
    TABLE3_VARIANTS,
    TransformerConfig,
)
from keras_transformer.models.transformer import (
    DECODING_PRECISIONS,
    PAD_ID,
    Transformer,
    in_precision,
    transformer,
    transformer_base,
    transformer_big,
)

__all__ = [
    "BASE",
    "BIG",
    "DECODING_PRECISIONS",
    "PAD_ID",
    "PRESETS",
    "SMALL",
    "TABLE3_VARIANTS",
    "Transformer",
    "TransformerConfig",
    "in_precision",
    "transformer",
    "transformer_base",
    "transformer_big",
]
