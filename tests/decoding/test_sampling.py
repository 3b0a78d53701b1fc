"""Sampling for back-translation: draws follow the model's distribution (its
top-k and temperature versions), are reproducible for a seed, and top-k 1
is greedy search, in the search, the Translator, the SavedModel and
CTranslate2."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import Sampling, Translator, greedy_search, translate_text
from keras_transformer.runtimes.ctranslate2_runner import CTranslate2Translator
from keras_transformer.models import transformer

SENTENCES = ["Das Haus ist groß.", "der Baum und das Haus", "Hier war ein Haus nicht klein.",
             "klein", "", "Das Haus war hier."]


def _first_step_distribution(model, source, top_k, temperature):
    """NumPy: the probabilities of the first output token that sampling
    should draw from (padding and start banned, as in the search)."""
    config = model.config
    logits = model({"source_ids": source, "target_ids": tf.constant([[config.decoder_start_id]])})
    logits = logits.numpy()[0, 0].astype("float64")
    log_probs = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
    allowed = np.ones_like(log_probs, bool)
    allowed[[config.pad_id, config.decoder_start_id]] = False
    scaled = np.where(allowed, log_probs / temperature, -np.inf)
    if top_k:
        scaled[scaled < np.sort(scaled)[-top_k]] = -np.inf
    probabilities = np.exp(scaled - scaled.max())
    return probabilities / probabilities.sum()


@pytest.mark.parametrize("top_k, temperature", [(0, 1.0), (4, 1.0), (0, 0.5)])
def test_draws_follow_the_models_distribution(tiny_config, top_k, temperature):
    model = transformer(tiny_config, 12)
    for weight in model.weights:  # flatter next-token distributions: more to compare
        if "embeddings" in weight.path:
            weight.assign(weight * 0.5)
    source = tf.constant([[5, 6, 7, 8, 3]])
    whole = _first_step_distribution(model, source, 0, 1.0)
    assert whole.max() < 0.5 and np.count_nonzero(whole > 0.02) >= 6  # a spread to test
    expected = _first_step_distribution(model, source, top_k, temperature)
    draws = 20_000
    # The output limit of 2 leaves the first token free and makes the second the end.
    result = greedy_search(model, tf.repeat(source, draws, axis=0), max_output_length=2,
                           sampling=Sampling(top_k, temperature, seed=11))
    frequencies = np.bincount(result.tokens.numpy()[:, 0, 0], minlength=12) / draws
    # Total variation: about 0.01 is expected from 20,000 draws of 12 outcomes.
    assert 0.5 * np.abs(frequencies - expected).sum() < 0.025, (frequencies, expected)
    assert not frequencies[expected == 0].any()


@pytest.mark.slow
def test_same_seed_same_draws_and_top_1_is_greedy(tiny_config):
    model = transformer(tiny_config, 12)
    source = tf.constant(np.random.default_rng(0).integers(4, 12, (16, 7)), tf.int32)
    source = tf.concat([source, tf.fill([16, 1], 3)], axis=1)
    draw = lambda **kw: greedy_search(model, source, sampling=Sampling(**kw)).tokens.numpy()  # noqa: E731
    np.testing.assert_array_equal(draw(seed=1), draw(seed=1))
    assert (draw(seed=1) != draw(seed=2)).any()
    greedy = greedy_search(model, source)
    top_1 = greedy_search(model, source, sampling=Sampling(top_k=1, seed=5))
    np.testing.assert_array_equal(top_1.tokens.numpy(), greedy.tokens.numpy())
    np.testing.assert_allclose(top_1.scores.numpy(), greedy.scores.numpy(), rtol=1e-6)


@pytest.mark.slow
def test_translator_batches_draw_independently_and_reproducibly(small_run):
    flat = Sampling(top_k=0, temperature=3.0, seed=7)
    lines = ["der Baum und das Haus"] * 8
    first = Translator.from_directory(str(small_run), batch_size=2, sampling=flat).translate(lines)
    again = Translator.from_directory(str(small_run), batch_size=2, sampling=flat).translate(lines)
    assert first == again and len(set(first)) > 1  # the same line, other draws in each batch
    greedy = Translator.from_directory(str(small_run), beam_size=1, guard=False).translate(
        SENTENCES)  # (a sampling translator has no guard)
    top_1 = Translator.from_directory(str(small_run), sampling=Sampling(top_k=1)).translate(SENTENCES)
    assert top_1 == greedy and top_1[4] == ""


@pytest.mark.slow
def test_saved_model_sample_signature_draws_as_translate_text(small_export, small_run):
    import tensorflow_text  # noqa: F401

    served = tf.saved_model.load(str(small_export / "saved_model"))
    text = tf.constant([s.encode("utf-8") for s in SENTENCES])
    outputs = served.signatures["sample"](text=text, top_k=tf.constant(0),
                                          temperature=tf.constant(2.0), seed=tf.constant(9),
                                          decode_margin=tf.constant(6))
    translator = Translator.from_directory(str(small_run))
    expected, _ = translate_text(translator.model, translator.tokenizer, text, 1, 0.6, 6,
                                 sampling=Sampling(0, 2.0, 9))
    assert outputs["translations"].numpy().tolist() == expected.numpy()[:, 0].tolist()


def test_ctranslate2_samples_reproducibly_and_top_1_is_its_greedy(small_ct2):
    folder = str(small_ct2[0] / "ctranslate2")
    draws = [CTranslate2Translator(folder, seed=seed).sample(SENTENCES * 3, temperature=3.0)
             for seed in (1, 1, 2)]
    assert draws[0] == draws[1] != draws[2]
    translator = CTranslate2Translator(folder)
    assert translator.sample(SENTENCES, top_k=1) == translator.translate(SENTENCES, beam_size=1)
