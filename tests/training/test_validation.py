"""Validation while a run trains: the greedy search in `keras.ops` that
translates the validation sentences (on every backend; `tests/backends`
checks it against NumPy on each), and the BLEU and chrF it reports."""

import numpy as np
import pytest

from helpers.small_run import WORDS
from keras_transformer import run_folder
from keras_transformer.decoding import Translator
from keras_transformer.evaluation import score
from keras_transformer.training.validation import BleuValidator, KerasGreedyTranslator


@pytest.mark.slow
def test_the_keras_greedy_translator_translates_as_the_translators_greedy_search(small_run):
    # What BleuValidator searches with (fixed shapes, blank rows filling the
    # last batch), beside the Translator it must agree with.
    model, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    rng = np.random.default_rng(4)
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(1, 30))) for _ in range(70)] + ["", " "]
    with pytest.warns(UserWarning):  # the longest are cut, as the Translator cuts them
        expected = Translator(model, tokenizer, beam_size=1, guard=False).translate(texts)
    found = KerasGreedyTranslator(model, tokenizer, rows=32).translate(texts)
    assert found == expected and found[-2:] == ["", ""]


def test_the_validator_scores_the_greedy_translations_against_the_references(small_run):
    model, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    sources = ["das Haus ist groß.", "der Baum war hier.", "ein Haus."]
    translations = Translator(model, tokenizer, beam_size=1).translate(sources)
    references = [translations[0], "ganz anders", translations[2]]
    expected = score(translations, references)
    assert BleuValidator(tokenizer, sources, references)(model) == {
        "val_bleu": pytest.approx(expected.bleu), "val_chrf": pytest.approx(expected.chrf)}
