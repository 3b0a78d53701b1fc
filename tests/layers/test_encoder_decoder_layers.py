"""Encoder and decoder layers against the paper's composition in NumPy."""

import numpy as np
import pytest
import tensorflow as tf

import reference
from keras_transformer.layers import TransformerDecoderLayer, TransformerEncoderLayer

EPS = 1e-6


def _sequences():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(2, 5, 8)).astype("float32"),
            rng.normal(size=(2, 6, 8)).astype("float32"))


def _block(x, sublayer, norm, norm_first):
    if norm_first:
        return x + sublayer(reference.layer_norm(x, norm, EPS))
    return reference.layer_norm(x + sublayer(x), norm, EPS)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_numpy(norm_first):
    x, _ = _sequences()
    padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], bool)
    layer = TransformerEncoderLayer(num_heads=2, d_ff=16, norm_first=norm_first)
    output = layer(x, padding_mask=padding)
    mask = np.broadcast_to(padding[:, None, :], (2, 5, 5))
    y = _block(x, lambda h: reference.multi_head_attention(layer.self_attention, h, h, mask)[0],
               layer.self_attention_norm, norm_first)
    y = _block(y, lambda h: reference.feed_forward(layer.feed_forward, h), layer.feed_forward_norm, norm_first)
    np.testing.assert_allclose(output, y, atol=1e-4)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_numpy(norm_first):
    target, source = _sequences()
    source_padding = np.array([[1] * 6, [1, 1, 1, 1, 0, 0]], bool)
    layer = TransformerDecoderLayer(num_heads=2, d_ff=16, key_dim=3, value_dim=5, norm_first=norm_first)
    output = layer(target, source, encoder_padding_mask=source_padding)
    causal = np.broadcast_to(np.tril(np.ones((5, 5), bool)), (2, 5, 5))
    cross = np.broadcast_to(source_padding[:, None, :], (2, 5, 6))
    y = _block(target, lambda h: reference.multi_head_attention(layer.self_attention, h, h, causal)[0],
               layer.self_attention_norm, norm_first)
    y = _block(y, lambda h: reference.multi_head_attention(layer.cross_attention, h, source, cross)[0],
               layer.cross_attention_norm, norm_first)
    y = _block(y, lambda h: reference.feed_forward(layer.feed_forward, h), layer.feed_forward_norm, norm_first)
    np.testing.assert_allclose(output, y, atol=1e-4)


def test_decoder_layer_returns_both_attention_weights():
    target, source = _sequences()
    layer = TransformerDecoderLayer(num_heads=2, d_ff=16)
    output, (self_weights, cross_weights) = layer(target, source, return_attention_scores=True)
    assert self_weights.shape == (2, 2, 5, 5) and cross_weights.shape == (2, 2, 5, 6)
    # Causal: no weight on later positions.
    assert np.all(np.triu(np.asarray(self_weights), k=1) == 0)
    np.testing.assert_allclose(output, layer(target, source), atol=1e-6)


def test_decoder_layer_cached_steps_equal_full_pass():
    target, source = _sequences()
    layer = TransformerDecoderLayer(num_heads=2, d_ff=16)
    padding = np.array([[1] * 6, [1, 1, 1, 0, 0, 0]], bool)
    full = layer(target, source, encoder_padding_mask=padding)
    cache = (np.zeros((2, 2, 5, 4), "float32"),) * 2
    cross = layer.cross_attention_cache(source)
    for step in range(5):
        row, cache = layer(target[:, step:step + 1], encoder_padding_mask=padding,
                           self_attention_cache=cache, self_attention_cache_update_index=step,
                           cross_attention_cache=cross)
        np.testing.assert_allclose(row[:, 0], full[:, step], atol=1e-5)


def test_cross_attention_cache_shared_by_groups_of_rows():
    # Beam search: 3 hypotheses for each of the 2 sentences read one cache
    # row per sentence; they must get what 3 copies of the cache give.
    rng = np.random.default_rng(1)
    target, source = _sequences()
    hypotheses = rng.normal(size=(6, 2, 8)).astype("float32")
    layer = TransformerDecoderLayer(num_heads=2, d_ff=16)
    layer(target, source)
    padding = np.array([[1] * 6, [1, 1, 1, 0, 0, 0]], bool)
    shared = layer.cross_attention_cache(source)
    copied = [np.repeat(np.asarray(t), 3, axis=0) for t in shared]
    output, (_, weights) = layer(hypotheses, encoder_padding_mask=padding,
                                 cross_attention_cache=shared, return_attention_scores=True)
    expected, (_, expected_weights) = layer(
        hypotheses, encoder_padding_mask=np.repeat(padding, 3, axis=0),
        cross_attention_cache=copied, return_attention_scores=True)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    assert weights.shape == (6, 2, 2, 6)
    with pytest.raises(ValueError, match="must be a multiple of 2"):
        layer(hypotheses[:5], encoder_padding_mask=padding, cross_attention_cache=shared)
    # With row counts known only at run time, the mismatch fails there too
    # instead of mixing hypotheses of different sentences.
    unknown_rows = tf.function(
        lambda x: layer(x, encoder_padding_mask=padding, cross_attention_cache=shared),
        input_signature=[tf.TensorSpec([None, None, 8])])
    np.testing.assert_allclose(unknown_rows(hypotheses), output, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError):
        unknown_rows(hypotheses[:5])


def test_decoder_without_encoder_is_decoder_only():
    target, _ = _sequences()
    layer = TransformerDecoderLayer(num_heads=2, d_ff=16)
    output = layer(target)
    assert layer.cross_attention is None and output.shape == target.shape
    with pytest.raises(ValueError, match="without an encoder sequence"):
        layer(target, target)


def test_cache_without_index_is_an_error():
    target, source = _sequences()
    layer = TransformerDecoderLayer(num_heads=2, d_ff=16)
    with pytest.raises(ValueError, match="self_attention_cache_update_index"):
        layer(target, source, self_attention_cache=(np.zeros((2, 2, 5, 4), "float32"),) * 2)


def test_layers_reject_indivisible_width():
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        TransformerEncoderLayer(num_heads=3, d_ff=16)(np.zeros((1, 2, 8), "float32"))
