"""Whole sentences among a corpus's pairs: the TensorFlow rule that training
uses is the Python rule that evaluation uses, repeating them reads each
sentence pair the given number of times, in the corpus's order, and the
last part of a run reads them alone once its variable says so."""

import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_transformer.data import (
    full_sentences,
    is_full_sentence,
    is_full_sentence_tensor,
    repeat_full_sentences,
    switched,
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


def _pairs():
    pairs = [(source, f"target {i}") for i, source in enumerate(EXAMPLES)]
    return pairs, tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs],
                                                     [t for _, t in pairs]))


def test_full_sentences_keeps_the_sentence_pairs_in_order():
    pairs, dataset = _pairs()
    assert [(s.decode(), t.decode()) for s, t in full_sentences(dataset).as_numpy_iterator()] \
        == [pair for pair in pairs if is_full_sentence(pair[0])]


def test_switched_reads_the_first_dataset_until_its_variable_is_set():
    """Elements come from the first dataset (here the targets of every pair)
    while the variable is 0, and from the second (the sources of the
    sentence pairs) once it is 1, after at most a few made ahead, whether it
    is set between reads or before the first."""
    pairs, dataset = _pairs()
    phase = tf.Variable(0)
    targets = dataset.map(lambda source, target: target).repeat()
    sentences = full_sentences(dataset).map(lambda source, target: source).repeat()
    read = iter(switched(phase, targets, sentences))
    before = [next(read).numpy().decode() for _ in range(len(pairs))]
    phase.assign(1)
    after = [next(read).numpy().decode() for _ in range(40)]
    assert before == [target for _, target in pairs]
    ahead = sum(text.startswith("target ") for text in after)
    assert ahead <= 10 and after[:ahead] == [target for _, target in pairs][:ahead]
    in_order = [source for source, _ in pairs if is_full_sentence(source)] * 10
    assert after[ahead:] == in_order[:40 - ahead]
    assert [element.numpy().decode() for element in switched(phase, targets, sentences).take(5)] \
        == in_order[:5]
