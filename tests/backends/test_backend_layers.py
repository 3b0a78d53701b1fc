"""Every layer against its NumPy reference, with masks and caches, on this
process's Keras backend; and each layer's config and `.keras` round trip."""

import doctest
import importlib

import keras
import numpy as np
import pytest

import reference
from helpers.backends import numpy
from keras_transformer import layers

BATCH, LENGTH, SOURCE_LENGTH, DIM = 2, 5, 6, 8
PADDING = np.array([[1] * SOURCE_LENGTH, [1, 1, 1, 1, 0, 0]], bool)  # sentence 1: 4 tokens


def _sequences():
    rng = np.random.default_rng(0)
    return (rng.normal(size=(BATCH, LENGTH, DIM)).astype("float32"),
            rng.normal(size=(BATCH, SOURCE_LENGTH, DIM)).astype("float32"))


def test_attention_matches_numpy_with_padding_causal_and_explicit_masks():
    query, value = _sequences()
    layer = layers.MultiHeadAttention(num_heads=2, key_dim=3, value_dim=5)
    output, weights = layer(query, value, value_mask=PADDING, return_attention_scores=True)
    mask = np.broadcast_to(PADDING[:, None, :], (BATCH, LENGTH, SOURCE_LENGTH))
    expected, expected_weights = reference.multi_head_attention(layer, query, value, mask)
    np.testing.assert_allclose(numpy(output), expected, atol=1e-5)
    np.testing.assert_allclose(numpy(weights), expected_weights, atol=1e-6)
    assert np.all(numpy(weights)[1, :, :, 4:] == 0)
    # Self-attention: causal, an explicit mask and padding together.
    explicit = np.random.default_rng(1).random((BATCH, LENGTH, LENGTH)) < 0.7
    explicit[:, :, 0] = True  # every row keeps a key
    self_padding = PADDING[:, :LENGTH]
    combined = explicit & np.tril(np.ones((LENGTH, LENGTH), bool)) & self_padding[:, None, :]
    self_attention = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    actual = self_attention(query, query, attention_mask=explicit, use_causal_mask=True,
                            value_mask=self_padding)
    expected, _ = reference.multi_head_attention(self_attention, query, query, combined)
    np.testing.assert_allclose(numpy(actual), expected, atol=1e-5)


def test_attention_caches_equal_the_full_computation():
    query, value = _sequences()
    layer = layers.MultiHeadAttention(num_heads=2, key_dim=4)
    full = numpy(layer(query, query, use_causal_mask=True))
    cache = (np.zeros((BATCH, 2, 8, 4), "float32"),) * 2
    for step in range(LENGTH):
        row = query[:, step:step + 1]
        output, cache = layer(row, use_causal_mask=True, cache=cache, cache_update_index=step)
        np.testing.assert_allclose(numpy(output)[:, 0], full[:, step], atol=1e-5)
    keys = reference.dense(query, layer.key_dense).reshape(BATCH, LENGTH, 2, 4)
    np.testing.assert_allclose(numpy(cache[0])[:, :, :LENGTH], keys.transpose(0, 2, 1, 3), atol=1e-5)
    # A cache that grows (onnxruntime's BeamSearch form).
    grown = (np.zeros((BATCH, 2, 0, 4), "float32"),) * 2
    for step in range(LENGTH):
        output, grown = layer(query[:, step:step + 1], use_causal_mask=True, cache=grown,
                              append_to_cache=True)
        np.testing.assert_allclose(numpy(output)[:, 0], full[:, step], atol=1e-5)
    np.testing.assert_allclose(numpy(grown[0]), keys.transpose(0, 2, 1, 3), atol=1e-5)
    # Cross-attention over precomputed keys and values.
    expected = numpy(layer(query, value, value_mask=PADDING))
    output, _ = layer(query, None, cache=layer.key_value_cache(value), value_mask=PADDING)
    np.testing.assert_allclose(numpy(output), expected, atol=1e-5)


def test_feed_forward_matches_numpy():
    x, _ = _sequences()
    layer = layers.PositionwiseFeedForward(d_ff=16)
    np.testing.assert_allclose(numpy(layer(x)), reference.feed_forward(layer, x), atol=1e-5)


def test_sinusoidal_encoding_matches_the_formula():
    x, _ = _sequences()
    layer = layers.SinusoidalPositionalEncoding()
    np.testing.assert_allclose(numpy(layer(x)), x + reference.sinusoid_table(LENGTH, DIM), atol=1e-5)
    shifted = layer(x, start_index=100)
    np.testing.assert_allclose(numpy(shifted), x + reference.sinusoid_table(LENGTH, DIM, start=100),
                               atol=1e-4)


def test_learned_positions_add_table_rows():
    x, _ = _sequences()
    layer = layers.LearnedPositionalEmbedding(max_length=10)
    output = numpy(layer(x, start_index=3))
    np.testing.assert_allclose(output, x + np.asarray(layer.position_embeddings)[3:3 + LENGTH], atol=1e-6)
    with pytest.raises(ValueError, match="max_length=10"):
        layer(np.zeros((1, 11, DIM), "float32"))


def test_shared_embedding_lookup_and_tied_logits():
    ids = np.array([[4, 7, 0, 0, 0], [9, 1, 2, 3, 5]], "int32")
    layer = layers.SharedEmbedding(vocab_size=12, d_model=DIM, logits_bias=True)
    vectors = layer(ids)
    table = np.asarray(layer.embeddings)
    np.testing.assert_allclose(numpy(vectors), table[ids] * np.sqrt(DIM), rtol=1e-6)
    assert numpy(layer.compute_mask(ids)).tolist() == (ids != 0).tolist()
    layer.bias.assign(np.arange(12, dtype="float32"))
    x, _ = _sequences()
    logits = layer(x, reverse=True)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    np.testing.assert_allclose(numpy(logits), x @ table.T + np.arange(12), atol=1e-5)
    # One position per row takes another matmul; same logits.
    np.testing.assert_allclose(numpy(layer(x[:, :1], reverse=True)), numpy(logits)[:, :1], atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_numpy(norm_first):
    x, _ = _sequences()
    padding = PADDING[:, :LENGTH]
    layer = layers.TransformerEncoderLayer(num_heads=2, d_ff=16, norm_first=norm_first)
    output = layer(x, padding_mask=padding)
    np.testing.assert_allclose(numpy(output), reference.encoder_layer(layer, x, padding), atol=1e-4)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_numpy_and_its_caches(norm_first):
    target, source = _sequences()
    layer = layers.TransformerDecoderLayer(num_heads=2, d_ff=16, key_dim=3, value_dim=5,
                                           norm_first=norm_first)
    full = numpy(layer(target, source, encoder_padding_mask=PADDING))
    np.testing.assert_allclose(full, reference.decoder_layer(layer, target, source, PADDING), atol=1e-4)
    # Step by step with both caches: the rows of the full pass.
    cache = (np.zeros((BATCH, 2, LENGTH, 3), "float32"), np.zeros((BATCH, 2, LENGTH, 5), "float32"))
    cross = layer.cross_attention_cache(source)
    for step in range(LENGTH):
        row, cache = layer(target[:, step:step + 1], encoder_padding_mask=PADDING,
                           self_attention_cache=cache, self_attention_cache_update_index=step,
                           cross_attention_cache=cross)
        np.testing.assert_allclose(numpy(row)[:, 0], full[:, step], atol=1e-5)
    # Beam layout: 3 hypotheses per sentence read the sentence's one cache row.
    hypotheses = np.repeat(target, 3, axis=0)
    shared = layer(hypotheses, encoder_padding_mask=PADDING, cross_attention_cache=cross)
    np.testing.assert_allclose(numpy(shared), np.repeat(full, 3, axis=0), atol=1e-5)


def test_masks_flow_from_the_embedding_through_a_sequential_model():
    model = keras.Sequential([
        keras.Input((None,), dtype="int32"),
        layers.SharedEmbedding(20, DIM),
        layers.SinusoidalPositionalEncoding(),
        layers.TransformerEncoderLayer(num_heads=2, d_ff=16, dropout=0.0),
        keras.layers.GlobalAveragePooling1D(),  # over unmasked positions only
    ])
    ids = np.array([[3, 4, 5, 0], [6, 7, 8, 9]], "int32")
    np.testing.assert_allclose(numpy(model(np.pad(ids, ((0, 0), (0, 3))))), numpy(model(ids)), atol=1e-5)


CASES = {
    "attention": (lambda: layers.MultiHeadAttention(2, 3, value_dim=5, output_dim=7),
                  lambda layer, x, source: layer(x, source)),
    "feed_forward": (lambda: layers.PositionwiseFeedForward(16, activation="gelu"),
                     lambda layer, x, source: layer(x)),
    "sinusoidal": (lambda: layers.SinusoidalPositionalEncoding(style="fairseq", first_position=2),
                   lambda layer, x, source: layer(x, start_index=3)),
    "learned": (lambda: layers.LearnedPositionalEmbedding(12),
                lambda layer, x, source: layer(x)),
    "embedding": (lambda: layers.SharedEmbedding(10, DIM, scale=False, logits_bias=True),
                  lambda layer, x, source: layer(x, reverse=True)),
    "encoder": (lambda: layers.TransformerEncoderLayer(2, 16, key_dim=3, norm_first=True),
                lambda layer, x, source: layer(x)),
    "decoder": (lambda: layers.TransformerDecoderLayer(2, 12, layer_norm_epsilon=1e-5),
                lambda layer, x, source: layer(x, source)),
}


def test_dropout_drops_at_its_rate_keeps_the_expectation_and_follows_its_seed():
    x = np.random.default_rng(0).normal(size=(8, 100, 501)).astype("float32") + 3.0
    layer = layers.Dropout(0.1, seed=7)
    first, second = numpy(layer(x, training=True)), numpy(layer(x, training=True))
    # Keras' layer on TensorFlow and PyTorch; 16-bit draws on JAX, whose
    # threshold is round(0.1 * 65,536) = 6,554 draws of 65,536.
    rate = 6554 / 65536 if keras.backend.backend() == "jax" else 0.1
    dropped = first == 0
    # 5 standard deviations of the binomial count; also over each element
    # position modulo 4 (on JAX the four draws of one generator call).
    assert abs(dropped.mean() - rate) < 5 * np.sqrt(rate * (1 - rate) / x.size)
    for offset in range(4):
        part = dropped.reshape(-1)[offset::4]
        assert abs(part.mean() - rate) < 5 * np.sqrt(rate * (1 - rate) / part.size)
    np.testing.assert_allclose(first[~dropped], x[~dropped] / (1 - rate), rtol=1e-6)
    assert (dropped != (second == 0)).mean() > 0.1  # each call draws anew
    again = layers.Dropout(0.1, seed=7)
    np.testing.assert_array_equal(numpy(again(x, training=True)), first)
    np.testing.assert_array_equal(numpy(layer(x, training=False)), x)
    np.testing.assert_array_equal(numpy(layers.Dropout(0.0)(x, training=True)), x)


def test_jax_dropout_draws_are_four_16_bit_halves_of_each_threefry_call():
    if keras.backend.backend() != "jax":
        pytest.skip("the 16-bit draws are the JAX backend's")
    import jax
    import jax.numpy as jnp
    from jax.extend.random import threefry_2x32

    from keras_transformer.layers.dropout import _sixteen_bit_dropout

    key = np.array([11, 12345], np.uint32)
    x = np.ones((3, 7, 5), np.float32)  # 105 elements: 27 calls, the last one's draws cut
    output = np.asarray(jax.jit(_sixteen_bit_dropout, static_argnums=1)(x, 20000, key))
    # The generator's two 32-bit words for counts (0, 0), (0, 1), ...:
    # `threefry_2x32` reads its counts as two halves, the first words' and
    # the second's.
    counts = np.arange(27, dtype=np.uint32)
    words = np.asarray(threefry_2x32(jnp.asarray(key), jnp.concatenate(
        [jnp.zeros(27, jnp.uint32), jnp.asarray(counts)]))).reshape(2, 27)
    draws = np.stack(words, axis=-1).view(np.uint16).reshape(-1)[:x.size]  # little-endian
    expected = np.where(draws >= 20000, 65536 / (65536 - 20000), 0).astype(np.float32)
    np.testing.assert_allclose(output.reshape(-1), expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_jax_layer_normalization_and_its_written_out_gradient_equal_keras_own(dtype):
    # On other backends the layer is Keras' own.
    if keras.backend.backend() != "jax":
        pytest.skip("the written-out gradient is the JAX backend's")
    import jax

    rng = np.random.default_rng(0)
    x = keras.ops.convert_to_tensor(rng.normal(size=(3, 5, 16)) * 3 + 1, dtype)
    upstream = keras.ops.convert_to_tensor(rng.normal(size=(3, 5, 16)), dtype)
    gamma, beta = rng.normal(size=16).astype("float32"), np.linspace(-1, 1, 16, dtype="float32")

    def value_and_gradients(layer):
        """`layer(x)` and the gradients of sum(layer(x) * upstream) with
        respect to x, gamma and beta, by JAX's differentiation."""
        layer.build(x.shape)

        def loss(x, gamma, beta):
            with keras.StatelessScope(state_mapping=[(layer.gamma, gamma), (layer.beta, beta)]):
                y = layer(x)
            products = keras.ops.cast(y, "float32") * keras.ops.cast(upstream, "float32")
            return keras.ops.sum(products), y

        (_, y), gradients = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(
            x, gamma, beta)
        return numpy(y).astype("float32"), [numpy(g).astype("float32") for g in gradients]

    ours = value_and_gradients(layers.LayerNormalization(epsilon=1e-6))
    keras_own = value_and_gradients(keras.layers.LayerNormalization(epsilon=1e-6))
    np.testing.assert_allclose(ours[0], keras_own[0], rtol=0, atol=1e-6)
    for got, expected in zip(ours[1], keras_own[1]):
        # float32: rounding only; bfloat16: the input's gradient is rounded
        # to bfloat16 (8 bits) from float32 sums taken in other orders.
        atol = 1e-5 if dtype == "float32" else 2**-7 * np.abs(expected).max()
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_round_trip_gives_the_same_layer(name):
    make, call = CASES[name]
    x, source = _sequences()
    layer = make()
    output = numpy(call(layer, x, source))
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    call(clone, x, source)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(numpy(call(clone, x, source)), output)


def test_user_model_of_every_layer_saves_and_loads_safely(tmp_path):
    source_ids = keras.Input((None,), dtype="int32")
    target_ids = keras.Input((None,), dtype="int32")
    embedding = layers.SharedEmbedding(10, DIM)
    encoded = layers.TransformerEncoderLayer(2, 16)(
        layers.SinusoidalPositionalEncoding()(embedding(source_ids)))
    decoded = layers.LearnedPositionalEmbedding(16)(embedding(target_ids))
    decoded = layers.TransformerDecoderLayer(2, 16)(decoded, encoded)
    decoded = layers.PositionwiseFeedForward(12)(decoded)
    attended = layers.MultiHeadAttention(2, 4)(decoded, encoded)
    model = keras.Model([source_ids, target_ids], embedding(attended, reverse=True))
    ids = np.array([[3, 4, 5, 0, 0], [6, 7, 8, 9, 2]], "int32")
    expected = numpy(model([ids, ids[:, :4]]))
    model.save(tmp_path / "user.keras")
    loaded = keras.models.load_model(tmp_path / "user.keras", safe_mode=True)
    np.testing.assert_array_equal(numpy(loaded([ids, ids[:, :4]])), expected)


@pytest.mark.parametrize("name", ["attention", "positional_encoding", "embedding", "decoder"])
def test_docstring_examples_run(name):
    module = importlib.import_module(f"keras_transformer.layers.{name}")
    result = doctest.testmod(module, extraglobs={"keras": keras})
    assert result.attempted > 0 and result.failed == 0
