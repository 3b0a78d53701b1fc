"""The `Transformer` on this process's Keras backend: its logits against a
NumPy forward pass, causality, padding invariance, cached decoding against
the full pass, its halves, attention weights and `.keras` files."""

import keras
import numpy as np
import pytest

import reference
from helpers.backends import VOCAB, batch, numpy, small_model, small_models
from keras_transformer.models import Transformer


@pytest.fixture(scope="module", params=sorted(small_models()))
def model(request):
    return small_model(request.param)


def _logits(model, source, target):
    return numpy(model({"source_ids": source, "target_ids": target}))


def test_logits_match_a_numpy_forward_pass(model):
    source, target = batch(model.config)
    logits = _logits(model, source, target)
    assert logits.shape == (3, 6, model.target_vocab_size) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, reference.transformer_logits(model, source, target),
                               atol=1e-4)


def test_no_logit_depends_on_a_later_target_token(model):
    source, target = batch(model.config)
    before = _logits(model, source, target)
    for t in (2, 5):
        changed = target.copy()
        changed[0, t] = changed[0, t] % (VOCAB - 2) + 1
        after = _logits(model, source, changed)
        np.testing.assert_allclose(after[:, :t], before[:, :t], atol=1e-5)
        assert not np.allclose(after[0, t:], before[0, t:], atol=1e-4)


def test_padding_changes_no_logit_of_a_real_position(model):
    pad = model.config.pad_id
    source, target = batch(model.config)
    logits = _logits(model, source, target)
    padded = _logits(model, np.pad(source, ((0, 0), (0, 3)), constant_values=pad),
                     np.pad(target, ((0, 0), (0, 2)), constant_values=pad))
    np.testing.assert_allclose(padded[:, :6], logits, atol=1e-5)
    # The short sentence alone, without the batch's padding, gives its rows.
    alone = _logits(model, source[1:2, :4], target[1:2, :3])
    np.testing.assert_allclose(alone[0], logits[1, :3], atol=1e-5)


def test_cached_decoding_equals_the_full_pass(model):
    source, target = batch(model.config)
    full = _logits(model, source, target)
    cache = model.initial_cache(model.encode(source), source, max_length=8)
    for step in range(target.shape[1]):
        logits, cache = model.decode_step(target[:, step:step + 1], step, cache)
        np.testing.assert_allclose(numpy(logits)[:, 0], full[:, step], atol=1e-5)


def test_cached_decoding_of_hypotheses_that_share_a_sentence():
    # Beam search's layout: rows 2i and 2i+1 are sentence i's hypotheses.
    model = small_model("paper")
    source, _ = batch(model.config)
    _, target = batch(model.config, seed=1, rows=6)
    full = _logits(model, np.repeat(source, 2, axis=0), target)
    cache = model.initial_cache(model.encode(source), source, max_length=8, hypotheses=2)
    assert cache["cross_keys"][0].shape[0] == 3 and cache["self_keys"][0].shape[0] == 6
    for step in range(target.shape[1]):
        logits, cache = model.decode_step(target[:, step:step + 1], step, cache)
        np.testing.assert_allclose(numpy(logits)[:, 0], full[:, step], atol=1e-5)


def test_halves_compose_to_the_full_pass(model):
    source, target = batch(model.config)
    full = _logits(model, source, target)
    encoded = model.encode(source)
    np.testing.assert_allclose(numpy(model.decode(target, encoded, source)), full, atol=1e-5)
    encoder, decoder = model.encoder_model(), model.decoder_model()
    composed = decoder({"target_ids": target, "encoder_output": numpy(encoder(source)),
                        "source_ids": source})
    np.testing.assert_allclose(numpy(composed), full, atol=1e-5)
    assert {id(v) for v in encoder.weights + decoder.weights} == {id(v) for v in model.weights}


def test_attention_weights_are_distributions_that_respect_the_masks():
    model = small_model("paper")
    source, target = batch(model.config)
    weights = {k: [numpy(w) for w in v] for k, v in model.attention_weights(source, target).items()}
    assert [len(weights[k]) for k in ("encoder_self", "decoder_self", "cross")] == [2, 2, 2]
    cross, encoder_self = weights["cross"][0], weights["encoder_self"][1]
    assert cross.shape == (3, model.config.num_heads, 6, 7)
    np.testing.assert_allclose(cross.sum(-1), 1.0, atol=1e-5)
    np.testing.assert_allclose(encoder_self.sum(-1), 1.0, atol=1e-5)
    assert np.all(cross[1, :, :, 4:] == 0) and np.all(encoder_self[1, :, :, 4:] == 0)
    assert np.all(np.triu(weights["decoder_self"][1], k=1) == 0)


def test_keras_file_round_trip(model, tmp_path):
    source, target = batch(model.config)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras", safe_mode=True)
    assert isinstance(loaded, Transformer) and loaded.config == model.config
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights]
    np.testing.assert_array_equal(_logits(loaded, source, target), _logits(model, source, target))


def _numpy_greedy(model, source):
    """Greedy search by full NumPy forward passes over each prefix (banned
    padding and start tokens, the end token forced at the length limit)."""
    config = model.config
    real = int(np.sum((source != config.pad_id) & (source != config.eos_id)))
    limit = min(real + config.decode_margin, config.max_length)
    banned = {config.pad_id, config.decoder_start_id} - {config.eos_id}
    tokens = [config.decoder_start_id]
    while len(tokens) <= limit and tokens[-1] != config.eos_id or len(tokens) == 1:
        logits = reference.transformer_logits(model, source[None], np.array([tokens]))[0, -1]
        logits[sorted(banned)] = -np.inf
        if len(tokens) >= limit:
            logits[np.arange(len(logits)) != config.eos_id] = -np.inf
        tokens.append(int(np.argmax(logits)))
    return tokens


def test_the_keras_greedy_search_matches_a_numpy_greedy_search(model):
    # What validates a run training on this backend (`training.validation`).
    from keras_transformer.training.validation import greedy_tokens

    config = model.config
    model.config = config.replace(decode_margin=5)
    try:
        for weight in model.weights:  # peaked distributions: no near-ties
            if "embeddings" in weight.path:
                weight.assign(numpy(weight) * 4.0)
        source, _ = batch(config, seed=3)
        source = np.concatenate([source, np.full((3, 1), config.pad_id, "int32")], axis=1)
        for row in range(3):  # the end token after each source
            source[row, int(np.sum(source[row] != config.pad_id))] = config.eos_id
        found = numpy(greedy_tokens(model, source))
        for row in range(3):
            expected = _numpy_greedy(model, source[row])
            assert found[row, :len(expected)].tolist() == expected
            assert np.all(found[row, len(expected):] == config.pad_id)
    finally:
        model.config = config
        for weight in model.weights:
            if "embeddings" in weight.path:
                weight.assign(numpy(weight) / 4.0)
