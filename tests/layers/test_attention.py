"""MultiHeadAttention against a NumPy softmax(QK^T/sqrt(d_k))V with the same weights."""

import keras
import numpy as np
import pytest
from keras import ops

import reference
from keras_transformer.layers import MultiHeadAttention

BATCH, TQ, TK, DIM = 2, 5, 7, 12


def _inputs():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(BATCH, TQ, DIM)).astype("float32"),
            rng.normal(size=(BATCH, TK, DIM)).astype("float32"))


@pytest.mark.parametrize("key_dim,value_dim", [(4, None), (3, 6)])
def test_matches_numpy_without_mask(key_dim, value_dim):
    query, value = _inputs()
    layer = MultiHeadAttention(num_heads=3, key_dim=key_dim, value_dim=value_dim)
    output, weights = layer(query, value, return_attention_scores=True)
    expected, expected_weights = reference.multi_head_attention(layer, query, value)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    # The fused path (ops.dot_product_attention) computes the same thing.
    np.testing.assert_allclose(layer(query, value), expected, atol=1e-5)


@pytest.mark.parametrize("num_heads", [1, 3])
def test_matches_numpy_in_a_graph_of_unknown_shapes(num_heads):
    # Traced with every axis but the features unknown (as in a decoding
    # loop); one head makes a size-1 axis that the one-position reshape of
    # the heads must not take for a query length of one.
    import tensorflow as tf

    query, value = _inputs()
    layer = MultiHeadAttention(num_heads=num_heads, key_dim=4)
    layer(query, value)  # built
    spec = tf.TensorSpec([None, None, DIM])
    graph = tf.function(lambda q, v: layer(q, v), input_signature=[spec, spec])
    expected, _ = reference.multi_head_attention(layer, query, value)
    np.testing.assert_allclose(graph(query, value), expected, atol=1e-5)


def test_padding_mask_matches_numpy_and_zeroes_weights():
    query, value = _inputs()
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    lengths = np.array([7, 3])
    padding = np.arange(TK)[None, :] < lengths[:, None]
    output, weights = layer(query, value, value_mask=padding, return_attention_scores=True)
    mask = np.broadcast_to(padding[:, None, :], (BATCH, TQ, TK))
    expected, _ = reference.multi_head_attention(layer, query, value, mask)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    assert np.all(np.asarray(weights)[1, :, :, 3:] == 0.0)
    # Same result through an explicit attention_mask.
    np.testing.assert_allclose(layer(query, value, attention_mask=mask), expected, atol=1e-5)


def test_causal_mask_matches_numpy():
    query, _ = _inputs()
    layer = MultiHeadAttention(num_heads=4, key_dim=3)
    actual = layer(query, query, use_causal_mask=True)
    causal = np.tril(np.ones((TQ, TQ), bool))[None].repeat(BATCH, 0)
    expected, _ = reference.multi_head_attention(layer, query, query, causal)
    np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_explicit_mask_combines_with_causal_and_padding():
    query, _ = _inputs()
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    layer(query, query)
    rng = np.random.default_rng(1)
    explicit = rng.random((BATCH, TQ, TQ)) < 0.7
    explicit[:, :, 0] = True  # every row keeps one allowed key
    padding = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]], bool)
    combined = explicit & np.tril(np.ones((TQ, TQ), bool)) & padding[:, None, :]
    expected, _ = reference.multi_head_attention(layer, query, query, combined)
    actual = layer(query, query, attention_mask=explicit, use_causal_mask=True, value_mask=padding)
    np.testing.assert_allclose(actual, expected, atol=1e-5)


def test_keras_mask_from_embedding_is_applied():
    ids = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]])
    embedding = keras.layers.Embedding(10, DIM, mask_zero=True)
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    vectors = embedding(ids)
    masked = layer(vectors, vectors)
    expected = layer(vectors, vectors, attention_mask=np.broadcast_to((ids != 0)[:, None, :], (2, 5, 5)))
    np.testing.assert_allclose(masked, expected, atol=1e-6)


@pytest.mark.slow
def test_attention_dropout_only_in_training():
    query, value = _inputs()
    layer = MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.5)
    inference = np.asarray(layer(query, value, training=False))
    np.testing.assert_allclose(inference, layer(query, value), atol=1e-6)
    samples = np.stack([layer(query, value, training=True) for _ in range(400)])
    assert not np.allclose(samples[0], inference, atol=1e-3)
    # Inverted dropout keeps the expectation: the mean of many draws converges
    # to the inference output.
    assert np.abs(samples.mean(0) - inference).max() < 0.25 * np.abs(samples[0] - inference).max()
    # The weights returned for inspection are the softmax before dropout.
    _, weights = layer(query, value, return_attention_scores=True, training=True)
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-5)


def test_self_attention_cache_equals_full_causal_attention():
    query, _ = _inputs()
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=5)
    full = layer(query, query, use_causal_mask=True)
    cache = (np.zeros((BATCH, 2, 9, 4), "float32"), np.zeros((BATCH, 2, 9, 5), "float32"))
    for step in range(TQ):
        row = query[:, step:step + 1]
        output, cache = layer(row, row, use_causal_mask=True, cache=cache, cache_update_index=step)
        np.testing.assert_allclose(output[:, 0], full[:, step], atol=1e-5)
    # The heads-first cache holds the projected keys at the written
    # positions, zeros after.
    keys = np.asarray(reference.dense(query, layer.key_dense)).reshape(BATCH, TQ, 2, 4)
    np.testing.assert_allclose(cache[0][:, :, :TQ], keys.transpose(0, 2, 1, 3), atol=1e-5)
    assert np.all(np.asarray(cache[0])[:, :, TQ:] == 0)


def test_cache_accepts_several_rows_at_once():
    query, _ = _inputs()
    layer = MultiHeadAttention(num_heads=2, key_dim=4)
    full = layer(query, query, use_causal_mask=True)
    cache = (np.zeros((BATCH, 2, 8, 4), "float32"),) * 2
    first, cache = layer(query[:, :3], query[:, :3], use_causal_mask=True, cache=cache, cache_update_index=0)
    # Without `value` a cached call is self-attention too.
    rest, cache = layer(query[:, 3:], use_causal_mask=True, cache=cache, cache_update_index=3)
    np.testing.assert_allclose(ops.concatenate([first, rest], axis=1), full, atol=1e-5)


def test_growing_cache_equals_full_causal_attention():
    # onnxruntime's BeamSearch form: the cache holds the earlier positions
    # only and grows by what each call appends.
    query, _ = _inputs()
    layer = MultiHeadAttention(num_heads=2, key_dim=4, value_dim=5)
    full = layer(query, query, use_causal_mask=True)
    cache = (np.zeros((BATCH, 2, 0, 4), "float32"), np.zeros((BATCH, 2, 0, 5), "float32"))
    first, cache = layer(query[:, :2], use_causal_mask=True, cache=cache, append_to_cache=True)
    np.testing.assert_allclose(first, full[:, :2], atol=1e-5)
    for step in range(2, TQ):
        output, cache = layer(query[:, step:step + 1], use_causal_mask=True, cache=cache,
                              append_to_cache=True)
        np.testing.assert_allclose(output[:, 0], full[:, step], atol=1e-5)
    keys = np.asarray(reference.dense(query, layer.key_dense)).reshape(BATCH, TQ, 2, 4)
    np.testing.assert_allclose(cache[0], keys.transpose(0, 2, 1, 3), atol=1e-5)
    with pytest.raises(ValueError, match="append_to_cache"):
        layer(query, cache=cache, cache_update_index=0, append_to_cache=True)


def test_precomputed_cross_attention_cache():
    query, value = _inputs()
    layer = MultiHeadAttention(num_heads=3, key_dim=4)
    padding = np.array([[1] * 7, [1] * 4 + [0] * 3], bool)
    expected = layer(query, value, value_mask=padding)
    cache = layer.key_value_cache(value)
    values = np.asarray(reference.dense(value, layer.value_dense)).reshape(BATCH, TK, 3, 4)
    np.testing.assert_allclose(cache[1], values.transpose(0, 2, 1, 3), atol=1e-5)  # heads-first
    output, returned = layer(query, None, cache=cache, value_mask=padding)
    np.testing.assert_allclose(output, expected, atol=1e-5)
    np.testing.assert_array_equal(returned[0], cache[0])  # handed back unchanged


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_heads"):
        MultiHeadAttention(num_heads=0, key_dim=4)
    with pytest.raises(ValueError, match=r"dropout.*\[0, 1\)"):
        MultiHeadAttention(num_heads=2, key_dim=4, dropout=1.0)
