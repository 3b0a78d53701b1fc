"""get_config/from_config round trips for every layer, and .keras files."""

import keras
import numpy as np
import pytest

from keras_transformer import layers

X = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
SOURCE = np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")
IDS = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]])

CASES = {
    "attention": (lambda: layers.MultiHeadAttention(2, 3, value_dim=5, dropout=0.1, output_dim=7,
                                                    kernel_initializer="he_normal"),
                  lambda layer: layer(X, SOURCE, use_causal_mask=False)),
    "feed_forward": (lambda: layers.PositionwiseFeedForward(16, activation="gelu", dropout=0.2),
                     lambda layer: layer(X)),
    "sinusoidal": (lambda: layers.SinusoidalPositionalEncoding(max_wavelength=500.0),
                   lambda layer: layer(X, start_index=3)),
    "learned": (lambda: layers.LearnedPositionalEmbedding(12, initializer="uniform"),
                lambda layer: layer(X)),
    "embedding": (lambda: layers.SharedEmbedding(10, 8, scale=False, mask_zero=False),
                  lambda layer: layer(IDS)),
    "encoder": (lambda: layers.TransformerEncoderLayer(2, 16, key_dim=3, value_dim=6, dropout=0.2,
                                                      norm_first=True, activation="gelu"),
                lambda layer: layer(X)),
    "decoder": (lambda: layers.TransformerDecoderLayer(4, 12, dropout=0.0, attention_dropout=0.1,
                                                      ffn_dropout=0.1, layer_norm_epsilon=1e-5),
                lambda layer: layer(X, SOURCE)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_get_config_from_config_round_trip(name):
    make, call = CASES[name]
    layer = make()
    output = call(layer)
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    call(clone)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(call(clone), output)


def test_user_model_with_every_layer_saves_and_loads_safely(tmp_path):
    source_ids = keras.Input((None,), dtype="int32")
    target_ids = keras.Input((None,), dtype="int32")
    embedding = layers.SharedEmbedding(10, 8)
    encoded = layers.TransformerEncoderLayer(2, 16)(layers.SinusoidalPositionalEncoding()(embedding(source_ids)))
    decoded = layers.LearnedPositionalEmbedding(16)(embedding(target_ids))
    decoded = layers.TransformerDecoderLayer(2, 16)(decoded, encoded)
    decoded = layers.PositionwiseFeedForward(12)(decoded)
    attended = layers.MultiHeadAttention(2, 4)(decoded, encoded)
    logits = embedding(attended, reverse=True)
    model = keras.Model([source_ids, target_ids], logits)
    expected = model([IDS, IDS[:, :4]])
    model.save(tmp_path / "user.keras")
    loaded = keras.models.load_model(tmp_path / "user.keras", safe_mode=True)
    np.testing.assert_array_equal(loaded([IDS, IDS[:, :4]]), expected)
