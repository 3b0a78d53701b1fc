"""Feed-forward network and shared embedding against their formulas."""

import math

import keras
import numpy as np
import pytest

import reference
from keras_transformer.layers import PositionwiseFeedForward, SharedEmbedding


def test_feed_forward_is_relu_of_two_affine_maps_per_position():
    x = np.random.default_rng(0).normal(size=(3, 6, 8)).astype("float32")
    layer = PositionwiseFeedForward(d_ff=20)
    output = np.asarray(layer(x))
    np.testing.assert_allclose(output, reference.feed_forward(layer, x), atol=1e-5)
    # Position-wise: each position alone gives the same row.
    np.testing.assert_allclose(np.asarray(layer(x[:, 2:3]))[:, 0], output[:, 2], atol=1e-6)


def test_feed_forward_activation_and_dropout():
    x = np.random.default_rng(1).normal(size=(2, 4, 8)).astype("float32")
    layer = PositionwiseFeedForward(d_ff=16, activation="gelu", dropout=0.5)
    layer(x)
    expected = reference.dense(np.asarray(keras.activations.gelu(reference.dense(x, layer.inner_dense))),
                               layer.output_dense)
    np.testing.assert_allclose(layer(x, training=False), expected, atol=1e-5)
    assert not np.allclose(layer(x, training=True), expected, atol=1e-3)


def test_embedding_lookup_is_scaled_by_sqrt_d_model():
    layer = SharedEmbedding(vocab_size=30, d_model=16)
    ids = np.array([[4, 7, 0], [29, 1, 2]])
    vectors = np.asarray(layer(ids))
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(vectors, table[ids] * math.sqrt(16), rtol=1e-6)


def test_reverse_call_gives_logits_tied_to_the_same_matrix():
    layer = SharedEmbedding(vocab_size=30, d_model=16)
    ids = np.array([[4, 7, 0]])
    x = np.random.default_rng(2).normal(size=(1, 3, 16)).astype("float32")
    layer(ids)
    logits = layer(x, reverse=True)
    np.testing.assert_allclose(logits, x @ np.asarray(layer.embeddings).T, atol=1e-5)
    assert logits.dtype == "float32"
    assert len(layer.weights) == 1


@pytest.mark.parametrize("vocab_size", [100, 4096, 9000])
def test_transposed_embeddings_are_the_matrix_transposed(vocab_size):
    # Transposed in blocks of rows: one, exactly one, and a partial last one.
    layer = SharedEmbedding(vocab_size, 8)
    layer.build()
    transposed = np.asarray(layer.transposed_embeddings())
    np.testing.assert_array_equal(transposed, np.asarray(layer.embeddings).T)
    x = np.random.default_rng(1).normal(size=(2, 1, 8)).astype("float32")
    np.testing.assert_allclose(np.asarray(layer(x, reverse=True, transposed=transposed)),
                               np.asarray(layer(x, reverse=True)), rtol=1e-5, atol=1e-5)


def test_embedding_mask_marks_padding():
    layer = SharedEmbedding(vocab_size=10, d_model=4)
    mask = layer.compute_mask(np.array([[3, 0, 5]]))
    assert np.asarray(mask).tolist() == [[True, False, True]]
    assert SharedEmbedding(10, 4, mask_zero=False).compute_mask(np.array([[3, 0]])) is None


def test_embedding_initial_scale_gives_unit_variance_after_scaling():
    layer = SharedEmbedding(vocab_size=4000, d_model=64)
    vectors = np.asarray(layer(np.arange(1, 4000)[None]))
    assert abs(vectors.std() - 1.0) < 0.05


def test_embedding_rejects_bad_sizes():
    with pytest.raises(ValueError, match="vocab_size"):
        SharedEmbedding(vocab_size=0, d_model=4)
