"""Positional encodings against the paper's formula, written out with loops."""

import numpy as np
import pytest

import reference
from keras_transformer.layers import LearnedPositionalEmbedding, SinusoidalPositionalEncoding


@pytest.mark.parametrize("length,d_model", [(1, 2), (50, 16), (7, 512)])
def test_sinusoid_values_match_formula(length, d_model):
    encoded = SinusoidalPositionalEncoding()(np.zeros((2, length, d_model), "float32"))
    expected = reference.sinusoid_table(length, d_model)
    np.testing.assert_allclose(encoded[0], expected, atol=2e-5)
    np.testing.assert_allclose(encoded[1], expected, atol=2e-5)


def test_sinusoid_interleaves_sin_and_cos():
    encoded = np.asarray(SinusoidalPositionalEncoding()(np.zeros((1, 4, 6), "float32")))[0]
    # Position 0: sin(0) = 0 on even channels, cos(0) = 1 on odd channels.
    assert encoded[0].tolist() == [0, 1, 0, 1, 0, 1]
    # Channel pair (0, 1) at position 3 is (sin 3, cos 3).
    np.testing.assert_allclose(encoded[3, :2], [np.sin(3), np.cos(3)], atol=1e-6)


def test_sinusoid_is_added_and_start_index_shifts_positions():
    layer = SinusoidalPositionalEncoding()
    x = np.random.default_rng(0).normal(size=(1, 3, 8)).astype("float32")
    shifted = layer(x, start_index=1000)
    np.testing.assert_allclose(shifted[0], x[0] + reference.sinusoid_table(3, 8, start=1000), atol=1e-4)


def test_sinusoid_any_length():
    encoded = SinusoidalPositionalEncoding()(np.zeros((1, 5000, 4), "float32"))
    np.testing.assert_allclose(encoded[0, 4999], reference.sinusoid_table(1, 4, start=4999)[0], atol=1e-3)


def test_sinusoid_rejects_odd_width():
    with pytest.raises(ValueError, match="even"):
        SinusoidalPositionalEncoding()(np.zeros((1, 3, 5), "float32"))


def test_learned_positions_add_table_rows():
    layer = LearnedPositionalEmbedding(max_length=10)
    x = np.ones((2, 4, 6), "float32")
    output = np.asarray(layer(x, start_index=3))
    table = np.asarray(layer.position_embeddings)
    np.testing.assert_allclose(output, 1.0 + np.broadcast_to(table[3:7], (2, 4, 6)), atol=1e-6)


def test_learned_positions_reject_overlong_input():
    layer = LearnedPositionalEmbedding(max_length=4)
    with pytest.raises(ValueError, match="max_length=4"):
        layer(np.zeros((1, 5, 6), "float32"))
