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
    PAD_ID,
    Transformer,
    transformer,
    transformer_base,
    transformer_big,
)

__all__ = [
    "BASE",
    "BIG",
    "PAD_ID",
    "PRESETS",
    "SMALL",
    "TABLE3_VARIANTS",
    "Transformer",
    "TransformerConfig",
    "transformer",
    "transformer_base",
    "transformer_big",
]
