"""Whole sentences among a corpus's pairs, and reading them more often.

A dictionary such as Ding (the demo's corpus) is mostly single words and
phrases: its whole sentences are 5% of its pairs and 12% of its tokens,
yet sentences are what its users translate and what the demo
scores. `repeat_full_sentences` reads each such pair more than once per pass
over the training data (upsampling the part of a corpus that resembles the
task, as in-domain data is upsampled in machine translation), and
`full_sentences` and `switched` let the last part of a run read them alone
(as a model is fine-tuned on in-domain data after training on all of it).
"""

import re

import tensorflow as tf

MIN_WORDS = 4
SENTENCE_ENDS = (".", "?", "!")


def is_full_sentence(text):
    """Four or more words ending in . ? or !: a whole sentence, not a word
    or phrase of the dictionary."""
    return len(text.split()) >= MIN_WORDS and text.rstrip()[-1:] in SENTENCE_ENDS


def is_full_sentence_tensor(text):
    """`is_full_sentence` of one scalar string tensor, in TensorFlow ops (for
    tf.data, where a Python call per pair would cost more than the rest of
    the input pipeline). Words are split at ASCII whitespace, where Python's
    `str.split` also splits at Unicode spaces; the two agree on text whose
    words are separated by ASCII spaces, as corpora's are."""
    words = tf.size(tf.strings.split(text))
    ends = tf.strings.regex_full_match(tf.strings.strip(text),
                                       f"(?s).*[{re.escape(''.join(SENTENCE_ENDS))}]")
    return tf.logical_and(words >= MIN_WORDS, ends)


def repeat_full_sentences(pairs, times):
    """`pairs` (a dataset of `(source, target)` strings) with every pair
    whose source is a full sentence read `times` times in a row (the
    training input shuffles and batches by length afterwards), the others
    once."""
    if times == 1:
        return pairs

    def repeated(source, target):
        count = tf.where(is_full_sentence_tensor(source), times, 1)
        return tf.data.Dataset.from_tensors((source, target)).repeat(tf.cast(count, tf.int64))

    return pairs.flat_map(repeated)


def full_sentences(pairs):
    """The pairs of `pairs` (a dataset of `(source, target)` strings) whose
    source is a whole sentence."""
    return pairs.filter(lambda source, target: is_full_sentence_tensor(source))


def switched(phase, before, after):
    """The elements of the dataset `before` while the integer variable
    `phase` is 0, then those of `after` once it is 1 (a training callback
    sets it; each element is chosen as it is made, so a prefetched few
    come from `before`). Both must be infinite, with the same structure."""
    # tf.data reads a captured variable's value each time the map runs.
    choice = tf.data.Dataset.from_tensors(0).repeat().map(
        lambda _: tf.cast(phase.read_value(), tf.int64))
    return tf.data.Dataset.choose_from_datasets([before, after], choice)
