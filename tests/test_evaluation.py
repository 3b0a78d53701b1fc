"""Scores, choosing a run's length penalty on held-out pairs, and the
calibrator's refusal of too few of them."""

import pytest

from keras_transformer.decoding import Translator
from keras_transformer.evaluation import choose_length_penalty, fit_calibrator, score

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


def test_too_few_pairs_for_a_calibrator_are_refused_before_any_is_translated(small_run):
    """A run trained on a small corpus ends with its calibration refused:
    before its validation sentences are translated, not after (blank
    sources do not count)."""
    translator = Translator.from_directory(small_run, calibrator=None)
    translated = []
    translator.translate = lambda sources, **options: translated.append(sources)
    pairs = [(SOURCES[i % len(SOURCES)], "a reference") for i in range(49)] + [(" ", "blank")]
    with pytest.raises(ValueError, match=r"^A calibrator is fitted on at least 50 held-out "
                                         r"sentences; got 49\.$"):
        fit_calibrator(translator, pairs)
    assert translated == []
