"""How far to trust a translation, from the model's own signals: what
`trust.Calibrator` turns into the confidence of `trust.Quality` for each
`(source, translation)`.

The signals (`SIGNALS`) are read in one teacher-forced pass of the model
over the source and the translation (the model's forward pass with the
translation as its target: the same log-probabilities and cross-attention
the search computed for it, without keeping them through the beam), and
from the two texts, and so are the same for a sentence alone and in a
batch, and for translations made by any runtime:

- `score`: the search's own score, the log-probability divided by the GNMT
  length penalty; `mean_log_prob` and `min_log_prob` of its tokens (a low
  sequence log-probability is the strongest single sign of a hallucination:
  Guerreiro et al., EACL 2023);
- `margin`: each token's log-probability above the best other token's,
  averaged (the margin to the second-best, token by token);
- the cross-attention (every decoder layer's, heads averaged): the share it
  gives the source's end token (`end_attention`), its distance from
  uniform attention over the source's tokens (`attention_to_uniform`, the
  Wasserstein-1 distance of the attention each source position receives to
  the uniform distribution, positions scaled to [0, 1]; detached attention
  is what Guerreiro et al., arXiv 2212.09631, catch hallucinations by),
  and `coverage`, the mean over source tokens of min(1, the attention it
  received summed over the translation's tokens);
- the lengths: `length_ratio` (log of target over source tokens, end
  tokens counted), `character_ratio` (log of target over source
  characters, plus one each), `source_length` (log of its tokens plus one);
- the words: `source_pieces_per_word` and `target_pieces_per_word`
  (tokens over whitespace-separated words: rare words, and words the model
  makes up, take many pieces), `mean_word_length` (the translation's
  letters over its words: strings of short function words are a
  hallucination's sign) and `repeats` (log of the most copies of any run of
  up to `MAX_REPEAT_UNIT` tokens repeated in a row).

On the Ding runs of `benchmarks/trust.py`, chosen on their validation
sentences, the character ratio, the margin, the pieces per word and the
mean log-probability told good translations from bad ones best; the
attention's signals add little there, where hallucinations are rare, and
are kept for the models where they are not.
"""

import hashlib

import numpy as np
import tensorflow as tf

from keras_transformer.data.tokenizer import encode_targets
from keras_transformer.decoding.search import length_penalty, token_ban, top_k

SIGNALS = ("score", "mean_log_prob", "min_log_prob", "margin", "end_attention",
           "attention_to_uniform", "coverage", "length_ratio", "character_ratio",
           "source_length", "source_pieces_per_word", "target_pieces_per_word",
           "mean_word_length", "repeats")
"""The signals of a translation the calibrator reads, in its order."""

MAX_REPEAT_UNIT = 4
"""The longest run of tokens `repeats` counts copies of."""


def model_digest(model):
    """A digest of `model`'s weights (their float32 values, in order): what a
    calibrator is fitted for. A model's copy in another precision
    (`models.in_precision`) has another; take the float32 original's."""
    digest = hashlib.blake2b(digest_size=16)
    for weight in model.weights:
        value = np.asarray(weight.numpy(), np.float32)
        digest.update(str(value.shape).encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def _most_copies(tokens, real):
    """The most copies of any run of 1 to `MAX_REPEAT_UNIT` tokens repeated
    in a row in each row of `tokens` `(rows, length)` (`real` marks the
    tokens; padding repeats nothing): float32 `(rows,)`, at least 1."""
    length = tf.shape(tokens)[1]
    positions = tf.range(length)
    earlier = positions[None, :] <= positions[:, None]  # (t, s): s at or before t
    most = tf.ones([tf.shape(tokens)[0]], tf.int32)
    for unit in range(1, MAX_REPEAT_UNIT + 1):
        shift = tf.minimum(unit, length)
        same = tf.concat([tf.equal(tokens[:, shift:], tokens[:, :length - shift])
                          & real[:, shift:], tf.zeros([tf.shape(tokens)[0], shift], tf.bool)],
                         axis=1)
        # The longest run of `same`: at each t, t minus the last position
        # at or before it where `same` fails (-1 where none did).
        last_break = tf.reduce_max(tf.where(earlier[None] & ~same[:, None, :], positions[None, None],
                                            -1), axis=2)
        run = tf.reduce_max(positions[None] - last_break, axis=1)
        most = tf.maximum(most, 1 + run // unit)
    return tf.cast(most, tf.float32)


def read_signals(model, source_ids, target_ids, sources, translations, alpha):
    """The `SIGNALS` of each translation, in one teacher-forced pass.

    Args:
        source_ids: int32 `(batch, S)`, each source ending with the end
            token, padded with the pad id (as a search reads them).
        target_ids: int32 `(batch, T)`, each translation's tokens and the
            end token, padded with the pad id.
        sources: the sources' texts, strings `(batch,)`.
        translations: the translations' texts, strings `(batch,)`.
        alpha: the length penalty of `score`.

    Returns:
        `(signals, received)`: float32 `(batch, len(SIGNALS))`, and the
        attention each source position received, summed over the
        translation's tokens, `(batch, S)` (what `omission` reads).
    """
    config = model.config
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    batch = tf.shape(target_ids)[0]
    decoder_input = tf.concat([tf.fill([batch, 1], config.decoder_start_id),
                               target_ids[:, :-1]], axis=1)
    encoder_output = model.encode(source_ids, training=False)
    logits, layers = model.decode(decoder_input, encoder_output, source_ids, training=False,
                                  return_attention_scores=True)
    logits = tf.cast(logits, tf.float32)
    real = tf.not_equal(target_ids, config.pad_id)
    weight = tf.cast(real, tf.float32)
    count = tf.reduce_sum(weight, axis=1)
    # Each token's log-probability as the search scored it (the softmax over
    # every token, padding and start banned after it), and the best other
    # token's, neither banned nor the one written: the vocabulary-wide
    # tensor is read by two reductions and a blocked top-k, not copied.
    chosen = tf.gather(logits, target_ids, batch_dims=2) - tf.reduce_logsumexp(logits, axis=-1)
    flat = tf.reshape(logits, [-1, model.target_vocab_size])
    best, ids = top_k(flat, 4)
    ban = tf.gather(token_ban(model), ids) < 0
    best = tf.where(ban | tf.equal(ids, tf.reshape(target_ids, [-1, 1])), -np.inf, best)
    others = tf.reshape(tf.reduce_max(best, axis=1), tf.shape(target_ids))
    margin = (tf.gather(logits, target_ids, batch_dims=2) - others)
    total = tf.reduce_sum(chosen * weight, axis=1)

    attention = tf.add_n([tf.reduce_mean(tf.cast(cross, tf.float32), axis=1)
                          for _, cross in layers]) / len(layers)  # (batch, T, S)
    received = tf.reduce_sum(attention * weight[:, :, None], axis=1)  # (batch, S)
    share = received / count[:, None]
    end = tf.equal(source_ids, config.eos_id)
    tokens = tf.not_equal(source_ids, config.pad_id) & ~end
    source_count = tf.reduce_sum(tf.cast(tokens, tf.float32), axis=1)
    on_tokens = tf.where(tokens, share, 0.0)
    spread = on_tokens / tf.maximum(tf.reduce_sum(on_tokens, axis=1, keepdims=True), 1e-9)
    # Wasserstein-1 on the line: the area between the two CDFs (sources are
    # left-aligned: their tokens are the first positions).
    uniform = tf.cumsum(tf.cast(tokens, tf.float32), axis=1) / tf.maximum(source_count[:, None], 1)
    to_uniform = tf.reduce_sum(tf.where(tokens, tf.abs(tf.cumsum(spread, axis=1) - uniform), 0.0),
                               axis=1) / tf.maximum(source_count, 1)
    coverage = tf.reduce_sum(tf.where(tokens, tf.minimum(received, 1.0), 0.0),
                             axis=1) / tf.maximum(source_count, 1)

    characters = lambda texts: tf.cast(tf.strings.length(texts, unit="UTF8_CHAR"), tf.float32)  # noqa: E731
    words = lambda texts: tf.cast(tf.strings.split(texts).row_lengths(), tf.float32)  # noqa: E731
    letters = characters(tf.strings.regex_replace(translations, r"\s+", ""))
    mean = lambda values: tf.reduce_sum(values * weight, axis=1) / count  # noqa: E731
    signals = tf.stack([
        total / length_penalty(count, alpha),
        total / count,
        tf.reduce_min(tf.where(real, chosen, 0.0), axis=1),
        mean(margin),
        tf.reduce_sum(tf.where(end, share, 0.0), axis=1),
        to_uniform,
        coverage,
        tf.math.log(count / (source_count + 1.0)),
        tf.math.log((characters(translations) + 1.0) / (characters(sources) + 1.0)),
        tf.math.log(source_count + 1.0),
        source_count / tf.maximum(words(sources), 1.0),
        (count - 1.0) / tf.maximum(words(translations), 1.0),
        letters / tf.maximum(words(translations), 1.0),
        tf.math.log(_most_copies(target_ids, real & tf.not_equal(target_ids, config.eos_id))),
    ], axis=1)
    return signals, received


def confidence_in_graph(model, tokenizer, calibrator, source_ids, sources, translations):
    """What `Translator.assess` gives as each translation's confidence, in
    TensorFlow ops (the SavedModel's `translate` signature): `translations`
    (strings `(batch,)`) read back into the target ids a search writes, their
    `SIGNALS` read with `sources` (strings, cleaned) and their `source_ids`
    (as a search reads them), and `calibrator` applied
    (`trust.Calibrator.confidence`): float32 `(batch,)`."""
    target_ids, _ = encode_targets(tokenizer, translations, model.config.max_length - 1)
    signals, _ = read_signals(model, source_ids, target_ids, sources, translations,
                              calibrator.alpha)
    standardized = (signals - calibrator.mean.astype(np.float32)) \
        / calibrator.scale.astype(np.float32)
    predicted = tf.linalg.matvec(standardized, calibrator.weights.astype(np.float32)) \
        + np.float32(calibrator.bias)
    return tf.sigmoid(np.float32(calibrator.slope) * predicted + np.float32(calibrator.intercept))
