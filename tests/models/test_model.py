"""The Transformer model: size, causality, padding, caching, saving."""

import keras
import numpy as np
import pytest

from helpers.bfloat16 import needs_bfloat16, needs_float16
from keras_transformer.models import (
    TABLE3_VARIANTS,
    Transformer,
    transformer,
    transformer_base,
    transformer_big,
)

VOCAB = 40


def _batch(seed=0, batch=3, source_length=7, target_length=6):
    rng = np.random.default_rng(seed)
    source = rng.integers(1, VOCAB, size=(batch, source_length)).astype("int32")
    target = rng.integers(1, VOCAB, size=(batch, target_length)).astype("int32")
    source[1, 4:] = 0  # a shorter sentence in the batch
    target[1, 3:] = 0
    return source, target


def _logits(model, source, target):
    return np.asarray(model({"source_ids": source, "target_ids": target}))


@pytest.mark.slow
@pytest.mark.parametrize("factory, paper_millions", [(transformer_base, 65), (transformer_big, 213)])
def test_parameter_count_matches_table3(factory, paper_millions):
    model = factory(vocab_size=37000)
    millions = model.count_params() / 1e6
    print(f"{factory.__name__}(vocab_size=37000): {millions:.1f}M parameters "
          f"(paper: {paper_millions}M, {100 * (millions / paper_millions - 1):+.1f}%)")
    assert abs(millions / paper_millions - 1) < 0.05
    keras.backend.clear_session()


def test_inputs_and_outputs(tiny_config):
    model = transformer(tiny_config, VOCAB)
    assert {t.name for t in model.inputs} == {"source_ids", "target_ids"}
    assert all(t.dtype == "int32" for t in model.inputs)
    source, target = _batch()
    logits = model({"source_ids": source, "target_ids": target})
    assert logits.shape == (3, 6, VOCAB) and logits.dtype == "float32"


@pytest.mark.parametrize("variant", [{}, {"norm_first": True}, TABLE3_VARIANTS["E-learned"]])
def test_changing_a_target_token_changes_no_earlier_logits(tiny_config, variant):
    model = transformer(tiny_config.replace(**variant), VOCAB)
    source, target = _batch()
    before = _logits(model, source, target)
    for t in (0, 2, 5):
        changed = target.copy()
        changed[:, t] = (changed[:, t] % (VOCAB - 1)) + 1
        after = _logits(model, source, changed)
        np.testing.assert_allclose(after[:, :t], before[:, :t], atol=1e-5)
        assert not np.allclose(after[0, t:], before[0, t:], atol=1e-4)


@pytest.mark.parametrize("variant", [{}, {"norm_first": True}])
def test_padding_changes_no_logits_of_real_positions(tiny_config, variant):
    model = transformer(tiny_config.replace(**variant), VOCAB)
    source, target = _batch()
    logits = _logits(model, source, target)
    padded = _logits(model, np.pad(source, ((0, 0), (0, 5))), np.pad(target, ((0, 0), (0, 4))))
    np.testing.assert_allclose(padded[:, :6], logits, atol=1e-5)
    # The short sentence alone, without the batch's padding, gives its rows too.
    alone = _logits(model, source[1:2, :4], target[1:2, :3])
    np.testing.assert_allclose(alone[0], logits[1, :3], atol=1e-5)


def _step(model, ids, step, cache, growing):
    """One cached decoding step, into a fixed-length or a growing cache."""
    if growing:
        return model.decode_step_growing(ids, cache)
    return model.decode_step(ids, step, cache)


@pytest.mark.slow
@pytest.mark.parametrize(
    "variant", [{}, {"norm_first": True}, TABLE3_VARIANTS["E-learned"], {"shared_vocabulary": False}]
)
@pytest.mark.parametrize("max_length", [10, None], ids=["fixed cache", "growing cache"])
def test_cached_decoding_equals_full_forward_pass_step_by_step(tiny_config, variant, max_length):
    config = tiny_config.replace(**variant)
    model = transformer(config, VOCAB, VOCAB if config.shared_vocabulary else VOCAB + 9)
    source, target = _batch()
    full = _logits(model, source, target)
    cache = model.initial_cache(model.encode(source), source, max_length=max_length)
    for step in range(target.shape[1]):
        logits, cache = _step(model, target[:, step:step + 1], step, cache, max_length is None)
        assert cache["self_keys"][0].shape[2] == (max_length or step + 1)
        np.testing.assert_allclose(logits[:, 0], full[:, step], atol=1e-5)


@pytest.mark.parametrize("max_length", [10, None], ids=["fixed cache", "growing cache"])
def test_cached_decoding_of_several_hypotheses_per_sentence(tiny_config, max_length):
    # Beam search's layout: rows i*3 ... i*3+2 are sentence i's hypotheses,
    # each with its own target, sharing the sentence's cross-attention cache.
    model = transformer(tiny_config, VOCAB)
    source, _ = _batch()
    _, target = _batch(seed=1, batch=9)
    full = _logits(model, np.repeat(source, 3, axis=0), target)
    cache = model.initial_cache(model.encode(source), source, max_length=max_length, hypotheses=3)
    assert cache["cross_keys"][0].shape[0] == 3 and cache["self_keys"][0].shape[0] == 9
    for step in range(target.shape[1]):
        logits, cache = _step(model, target[:, step:step + 1], step, cache, max_length is None)
        np.testing.assert_allclose(logits[:, 0], full[:, step], atol=1e-5)


def test_saved_and_loaded_model_gives_identical_outputs(tiny_config, tmp_path):
    model = transformer(tiny_config.replace(norm_first=True, shared_vocabulary=False), VOCAB, VOCAB + 3)
    source, target = _batch()
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert isinstance(loaded, Transformer) and loaded.config == model.config
    np.testing.assert_array_equal(_logits(loaded, source, target), _logits(model, source, target))
    # Weights are tied after loading too: one matrix per vocabulary.
    assert len(loaded.weights) == len(model.weights)


def test_encoder_and_decoder_models_share_the_weights(tiny_config):
    model = transformer(tiny_config, VOCAB)
    encoder, decoder = model.encoder_model(), model.decoder_model()
    ids = {id(v) for v in model.weights}
    assert {id(v) for v in encoder.weights} <= ids and {id(v) for v in decoder.weights} <= ids
    assert len({id(v) for v in encoder.weights} | {id(v) for v in decoder.weights}) == len(ids)
    source, target = _batch()
    inputs = {"target_ids": target, "encoder_output": np.asarray(encoder(source)), "source_ids": source}
    composed = decoder(inputs)
    np.testing.assert_allclose(composed, _logits(model, source, target), atol=1e-6)


def test_tied_embedding_is_one_matrix(tiny_config):
    shared = transformer(tiny_config, VOCAB)
    separate = transformer(tiny_config.replace(shared_vocabulary=False), VOCAB, 25)
    embedding_size = VOCAB * tiny_config.d_model
    assert separate.count_params() - shared.count_params() == 25 * tiny_config.d_model
    assert shared.get_layer("shared_embedding").count_params() == embedding_size


def test_dropout_is_active_only_in_training(tiny_config):
    model = transformer(tiny_config, VOCAB)
    source, target = _batch()
    inputs = {"source_ids": source, "target_ids": target}
    np.testing.assert_array_equal(model(inputs, training=False), model(inputs, training=False))
    assert not np.allclose(model(inputs, training=True), model(inputs, training=False))


def test_vocabulary_errors(tiny_config):
    with pytest.raises(ValueError, match="shared_vocabulary=True needs one vocabulary"):
        transformer(tiny_config, 10, 12)
    with pytest.raises(ValueError, match="source_vocab_size"):
        transformer(tiny_config, 0)


@pytest.mark.parametrize("policy, tolerance", [
    pytest.param("mixed_float16", 0.05, marks=needs_float16),
    pytest.param("mixed_bfloat16", 0.3, marks=needs_bfloat16)])
def test_mixed_precision_keeps_float32_weights_and_logits(tiny_config, policy, tolerance):
    reference_model = transformer(tiny_config, VOCAB)
    keras.config.set_dtype_policy(policy)
    try:
        model = transformer(tiny_config, VOCAB)
    finally:
        keras.config.set_dtype_policy("float32")
    model.set_weights(reference_model.get_weights())
    assert all(v.dtype == "float32" for v in model.weights)
    source, target = _batch()
    logits = _logits(model, source, target)
    assert logits.dtype == np.float32 and np.isfinite(logits).all()
    np.testing.assert_allclose(logits, _logits(reference_model, source, target), atol=tolerance)
    cache = model.initial_cache(model.encode(source), source, max_length=8)
    assert cache["self_keys"][0].dtype == model.compute_dtype
    step_logits, _ = model.decode_step(target[:, :1], 0, cache)
    np.testing.assert_allclose(step_logits[:, 0], logits[:, 0], atol=tolerance)


def test_attention_weights_are_distributions_that_respect_masks(tiny_config):
    model = transformer(tiny_config, VOCAB)
    source, target = _batch()
    weights = model.attention_weights(source, target)
    assert [len(weights[k]) for k in ("encoder_self", "decoder_self", "cross")] == [2, 2, 2]
    cross = np.asarray(weights["cross"][0])
    assert cross.shape == (3, tiny_config.num_heads, 6, 7)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    assert np.all(cross[1, :, :, 4:] == 0)  # sentence 1's source padding
    decoder_self = np.asarray(weights["decoder_self"][1])
    assert np.all(np.triu(decoder_self, k=1) == 0)  # causal
    encoder_self = np.asarray(weights["encoder_self"][0])
    np.testing.assert_allclose(encoder_self.sum(-1), 1.0, atol=1e-5)
    assert np.all(encoder_self[1, :, :, 4:] == 0)
    for layer in range(tiny_config.num_decoder_layers):  # the lean pass alignment reads
        np.testing.assert_allclose(model.cross_attention(source, target, layer),
                                   weights["cross"][layer], atol=1e-6)
