"""Choosing a run's length penalty on held-out pairs, and making it the run's;
the greedy search that validates runs training on JAX or PyTorch."""

import shutil

import numpy as np
import pytest

from keras_transformer.decoding import Translator, load_model_and_tokenizer
from keras_transformer.evaluation import choose_length_penalty, score, set_length_penalty
from keras_transformer.models import TransformerConfig

SOURCES = ["der Baum ist groß und das Haus ist klein.", "ein Haus war hier.",
           "die Bäume dort sind klein.", "das Haus.", "eine Tür und ein Dach.",
           "hier ist nicht dort.", "der Baum war dort und nicht hier."]


def test_the_penalty_whose_translations_score_best_is_chosen(small_run):
    model, tokenizer = load_model_and_tokenizer(small_run)
    alphas = (0.0, 0.6, 3.0)
    by_alpha = {a: Translator(model, tokenizer, alpha=a).translate(SOURCES) for a in alphas}
    assert by_alpha[3.0] != by_alpha[0.0]  # the penalty changes some translations
    for wanted in (0.0, 3.0):  # references that one of them translates exactly
        chosen, scores = choose_length_penalty(model, tokenizer, zip(SOURCES, by_alpha[wanted]),
                                               alphas)
        assert chosen == wanted
        for alpha in alphas:
            assert scores[alpha].chrf == pytest.approx(score(by_alpha[alpha], by_alpha[wanted]).chrf)
    with pytest.raises(ValueError, match="No held-out pairs"):
        choose_length_penalty(model, tokenizer, [], alphas)


def test_the_set_penalty_is_what_the_run_decodes_with(small_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    shutil.copy(run / "model.keras", run / "averaged.keras")
    before, tokenizer = load_model_and_tokenizer(small_run)
    set_length_penalty(run, 1.5)
    assert TransformerConfig.from_file(run / "config.json").length_penalty == 1.5
    for name in ("averaged.keras", "model.keras"):
        translator = Translator.from_directory(run, model_file=name)
        assert translator.alpha == 1.5
        assert translator.model.config == before.config.replace(length_penalty=1.5)
        for got, want in zip(translator.model.get_weights(), before.get_weights()):
            np.testing.assert_array_equal(got, want)
    assert (Translator.from_directory(run).translate(SOURCES)
            == Translator(before, tokenizer, alpha=1.5).translate(SOURCES))


def test_the_keras_greedy_translator_translates_as_the_translators_greedy_search(small_run):
    # What BleuValidator searches with off TensorFlow (decoding.keras_greedy:
    # fixed shapes, blank rows filling the last batch), here run on
    # TensorFlow beside the Translator it must agree with.
    from helpers.small_run import WORDS
    from keras_transformer.decoding.keras_greedy import KerasGreedyTranslator

    model, tokenizer = load_model_and_tokenizer(small_run)
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 30))) for _ in range(70)] + ["", " "]
    with pytest.warns(UserWarning):  # the longest are cut, as the Translator cuts them
        expected = Translator(model, tokenizer, beam_size=1).translate(texts)
    found = KerasGreedyTranslator(model, tokenizer, rows=32).translate(texts)
    assert found == expected and found[-2:] == ["", ""]
