"""Whole sentences among a corpus's pairs: the TensorFlow rule that training
uses is the Python rule that evaluation uses, and repeating them reads each
sentence pair the given number of times, in the corpus's order."""

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_transformer.data import (
    is_full_sentence,
    is_full_sentence_tensor,
    repeat_full_sentences,
)

EXAMPLES = {
    "Wo ist der Bahnhof?": True,
    "Er hat seinen Schlüssel verloren.": True,
    "Besser spät als nie!  ": True,          # spaces after the end
    "Wo ist der Bahnhof ?": True,            # the mark alone counts as a word
    "Guten Morgen!": False,                  # two words
    "Er kommt heute.": False,                # three
    "Ich habe keine Zeit": False,            # no end mark
    "eel ladder (water engineering)": False,
    "Er sagte: \"Wo ist er?\"": False,       # ends in a quote
    "": False,
    "   ": False,
}

WORDS = st.text(alphabet="abcäöüßXY.,?!:;\"'()-", min_size=1, max_size=6)
SPACES = st.sampled_from([" ", "  ", "\t", " \t "])


def tensor_rule(texts):
    return [bool(is_full_sentence_tensor(tf.constant(text))) for text in texts]


def test_the_rule_on_examples():
    assert [is_full_sentence(text) for text in EXAMPLES] == list(EXAMPLES.values())
    assert tensor_rule(EXAMPLES) == list(EXAMPLES.values())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(WORDS, SPACES), max_size=7), SPACES, SPACES)
def test_the_tensor_rule_is_the_python_rule(words, before, after):
    text = before + "".join(word + space for word, space in words).rstrip() + after
    assert tensor_rule([text]) == [is_full_sentence(text)]


@pytest.mark.parametrize("times", [1, 2, 3])
def test_sentence_pairs_are_read_the_given_times_in_order(times):
    pairs = [(source, f"target {i}") for i, source in enumerate(EXAMPLES)]
    dataset = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    read = [(s.decode(), t.decode()) for s, t in
            repeat_full_sentences(dataset, times).as_numpy_iterator()]
    assert read == [pair for pair in pairs
                    for _ in range(times if is_full_sentence(pair[0]) else 1)]
