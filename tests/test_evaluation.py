"""Scores, and choosing a run's length penalty on held-out pairs."""

import pytest

from keras_transformer.decoding import Translator
from keras_transformer.evaluation import choose_length_penalty, score

SOURCES = ["der Baum ist groß und das Haus ist klein.", "ein Haus war hier.",
           "die Bäume dort sind klein.", "das Haus.", "eine Tür und ein Dach.",
           "hier ist nicht dort.", "der Baum war dort und nicht hier."]


def test_the_penalty_whose_translations_score_best_is_chosen(small_run):
    translator = Translator.from_directory(small_run)
    alphas = (0.0, 0.6, 3.0)
    by_alpha = {}
    for alpha in alphas:
        translator.alpha = alpha
        by_alpha[alpha] = translator.translate(SOURCES)
    assert by_alpha[3.0] != by_alpha[0.0]  # the penalty changes some translations
    for wanted in (0.0, 3.0):  # references that one of them translates exactly
        chosen, scores = choose_length_penalty(translator, zip(SOURCES, by_alpha[wanted]), alphas)
        assert chosen == wanted == translator.alpha  # the translator is left at the best
        for alpha in alphas:
            assert scores[alpha].chrf == pytest.approx(score(by_alpha[alpha], by_alpha[wanted]).chrf)
    with pytest.raises(ValueError, match="No held-out pairs"):
        choose_length_penalty(translator, [], alphas)
