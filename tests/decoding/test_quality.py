"""How far to trust a translation, from the model (`decoding.quality`, and
the Translator's guard and `assess`): the signals against NumPy computing
them from the model's own forward pass, the score against the search's;
loops built on purpose (a model biased towards a token) mended or cut and
flagged; translations not flagged untouched, alone and in batches; the
confidence the same alone and in a batch; the calibrator fitted, kept with
the run and set aside for another model."""

import itertools
import threading

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import run_folder, trust
from keras_transformer.decoding import Translator, beam_search, greedy_search, quality
from keras_transformer.decoding.search import repeated_ngram_ban
from keras_transformer.decoding.slots import pad_sources

SENTENCES = ["das Haus ist groß.", "der Baum", "Haus Baum und", "die die die",
             "ein Haus oder ein Baum ist nicht hier", "klein"]


@pytest.fixture(scope="module")
def model_and_tokenizer(small_run):
    return run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)


def _ids(tokenizer, texts, target=False):
    encode = tokenizer.vocabulary.encode_target if target else tokenizer.vocabulary.encode
    return pad_sources([encode(text) + [tokenizer.eos_id] for text in texts], tokenizer.pad_id)


def test_signals_are_what_numpy_reads_from_the_models_forward_pass(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    config = model.config
    texts = ["das Haus ist groß.", "der Baum", "Haus"]
    translations = ["Haus Baum ist", "der der der der", "klein ."]
    sources = _ids(tokenizer, texts)
    targets = _ids(tokenizer, translations, target=True)
    signals, received = quality.read_signals(model, sources, targets, tf.constant(texts),
                                             tf.constant(translations), 0.6)
    signals, received = signals.numpy(), received.numpy()
    decoder_input = np.concatenate([np.full((3, 1), config.decoder_start_id), targets[:, :-1]], 1)
    logits = np.asarray(model({"source_ids": sources, "target_ids": decoder_input}), np.float64)
    cross = np.mean([np.asarray(w, np.float64).mean(axis=1) for w in
                     model.attention_weights(sources, decoder_input)["cross"]], axis=0)
    for row in range(3):
        n = int(np.sum(targets[row] != config.pad_id))
        log_probs = logits[row, :n] - np.log(np.exp(logits[row, :n]).sum(-1, keepdims=True))
        for banned in {config.pad_id, config.decoder_start_id} - {config.eos_id}:
            log_probs[:, banned] -= 1e9  # as the search bans them
        chosen = log_probs[np.arange(n), targets[row, :n]]
        others = log_probs.copy()
        others[np.arange(n), targets[row, :n]] = -np.inf
        tokens = [j for j, t in enumerate(sources[row]) if t not in (config.pad_id, config.eos_id)]
        end = list(sources[row]).index(config.eos_id)
        got = cross[row, :n].sum(axis=0)
        share = got / n
        spread = share[tokens] / share[tokens].sum()
        to_uniform = np.abs(np.cumsum(spread) - np.arange(1, len(tokens) + 1) / len(tokens)).sum()
        words = targets[row, :n - 1].tolist()
        copies = max(1 + max((k for start in range(len(words)) for k in range(len(words))
                              if words[start:start + (k + 1) * u] ==
                              words[start:start + u] * (k + 1) and start + (k + 1) * u
                              <= len(words)), default=0)
                     for u in range(1, quality.MAX_REPEAT_UNIT + 1))
        source_words, target_words = texts[row].split(), translations[row].split()
        expected = {
            "score": chosen.sum() / ((5 + n) / 6) ** 0.6, "mean_log_prob": chosen.mean(),
            "min_log_prob": chosen.min(), "margin": (chosen - others.max(-1)).mean(),
            "end_attention": share[end], "attention_to_uniform": to_uniform / len(tokens),
            "coverage": np.minimum(got[tokens], 1).mean(),
            "length_ratio": np.log(n / (len(tokens) + 1)),
            "character_ratio": np.log((len(translations[row]) + 1) / (len(texts[row]) + 1)),
            "source_length": np.log(len(tokens) + 1),
            "source_pieces_per_word": len(tokens) / len(source_words),
            "target_pieces_per_word": (n - 1) / len(target_words),
            "mean_word_length": len("".join(target_words)) / len(target_words),
            "repeats": np.log(copies)}
        for index, name in enumerate(quality.SIGNALS):
            assert abs(signals[row, index] - expected[name]) < 2e-4 * max(1, abs(expected[name])), \
                (row, name)
        np.testing.assert_allclose(received[row], got, atol=1e-4)
    assert np.exp(signals[1, quality.SIGNALS.index("repeats")]) == 4  # "der" four times


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_score_signal_is_the_score_the_search_gave(model_and_tokenizer, beam_size):
    model, tokenizer = model_and_tokenizer
    sources = _ids(tokenizer, SENTENCES)
    search = greedy_search if beam_size == 1 else beam_search
    options = {} if beam_size == 1 else {"beam_size": beam_size}
    found = search(model, sources, alpha=0.6, **options)
    tokens = found.tokens[:, 0].numpy()
    texts = tf.constant(SENTENCES)  # (the texts' signals are not compared here)
    signals, _ = quality.read_signals(model, sources, tokens, texts, texts, 0.6)
    np.testing.assert_allclose(signals.numpy()[:, 0], found.scores[:, 0].numpy(), atol=2e-4)
    np.testing.assert_allclose(signals.numpy()[:, 1] * np.sum(tokens != tokenizer.pad_id, 1),
                               found.log_probs[:, 0].numpy(), atol=2e-4)


def test_the_ngram_ban_is_fairseqs_rule():
    def reference(tokens, step, n, vocabulary):
        ban = np.zeros((len(tokens), vocabulary))
        for row, written in enumerate(tokens):
            prefix = list(written[1:step + 1])
            for start in range(len(prefix) - n + 1):
                if n == 1 or prefix[start:start + n - 1] == prefix[len(prefix) - n + 1:]:
                    ban[row, prefix[start + n - 1]] = -1e9
        return ban

    rng = np.random.default_rng(0)
    for _ in range(200):
        tokens = rng.integers(2, 6, size=(3, 12))
        tokens[:, 0] = 1
        step, n = int(rng.integers(0, 11)), int(rng.integers(1, 6))
        np.testing.assert_array_equal(
            repeated_ngram_ban(tf.constant(tokens, tf.int32), step, tf.constant(n), 6).numpy(),
            reference(tokens.tolist(), step, n, 6))


def _looping(model, tokenizer, second=None):
    """`model` made to write "Haus" at every step (its last layer's output
    fixed near the word's embedding), or with `second`, a token it writes
    next where "Haus" is banned; returns the loop's token."""
    embeddings = model.target_embedding.embeddings.numpy()
    token = tokenizer.vocabulary.encode_target("Haus")[0]
    direction = embeddings[token] + (0.9 * embeddings[second] if second is not None else 0)
    last = len(model.decoder_layers) - 1
    for weight in model.weights:
        if weight.path == f"decoder_layer_{last}/feed_forward_norm/gamma":
            weight.assign(np.zeros(weight.shape, np.float32))
        if weight.path == f"decoder_layer_{last}/feed_forward_norm/beta":
            weight.assign((8 * direction / np.linalg.norm(direction)).astype(np.float32))
    return token


@pytest.mark.parametrize("beam_size", [1, 4])
def test_a_loop_is_searched_again_and_mended(small_run, beam_size):
    model, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    _looping(model, tokenizer, second=model.config.eos_id)
    unguarded = Translator(model, tokenizer, beam_size=beam_size, guard=False)
    guarded = Translator(model, tokenizer, beam_size=beam_size)
    sentences = ["das Haus", "der Baum ist groß"]
    for before in unguarded.translate(sentences):
        assert trust.loop_of("das Haus", before) is not None
    found = guarded.translate(sentences, n_best=1, quality=True)
    for (hypotheses, assessed), sentence in zip(found, sentences):
        assert hypotheses[0][0] == "Haus Haus" and assessed.flags == ()
    # The mended translation's score is its search's: the ban changes which
    # tokens are written, not how they are scored.
    signals = guarded.assess(["das Haus"], ["Haus Haus"])[0].signals
    assert abs(signals["score"] - found[0][0][0][1]) < 2e-4


def test_a_windows_loops_are_searched_again_while_its_last_search_runs(small_run):
    """With two searches in flight, the loops found in a window's first
    batches are searched again on the thread that its last batches leave
    free, while the last one still searches; the tries' translations are
    the same whichever search ends first."""
    model, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    _looping(model, tokenizer, second=model.config.eos_id)
    sentences = ["das Haus", "der Baum ist groß", "ein Haus", "klein", "der Baum"]
    translator = Translator(model, tokenizer, batch_size=1, in_flight=2)
    before = Translator(model, tokenizer, batch_size=1, guard=False).translate(sentences)
    assert all(trust.loop_of(s, found) is not None for s, found in zip(sentences, before))
    expected = translator.translate(sentences, n_best=1)
    assert all(trust.loop_of(s, found[0][0]) is None for s, found in zip(sentences, expected))
    searched, started, tried, waits = translator._translate, itertools.count(1), \
        threading.Event(), []

    def search(*inputs):
        # The last argument is the n-gram ban: a try's, or 0 in a first search.
        if int(inputs[-1]):
            tried.set()
        elif next(started) == len(sentences):  # the window's last batch
            waits.append(tried.wait(30))
        return searched(*inputs)

    translator._translate = search
    assert translator.translate(sentences, n_best=1) == expected
    assert waits == [True]


def test_a_loop_no_search_escapes_is_cut_before_it_and_stays_flagged(small_run):
    model, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    _looping(model, tokenizer)
    guarded = Translator(model, tokenizer)
    assert trust.loop_of("das Haus", Translator(model, tokenizer, guard=False).translate(
        ["das Haus"])[0]) is not None
    (translation, assessed), = guarded.translate(["das Haus"], quality=True)
    assert translation == "Haus"
    assert {"repetition", "runaway"} <= set(assessed.flags)
    (pair, assessed), = guarded.translate(["das Haus"], aligned=True, quality=True)
    assert pair[0] == "Haus" and all(end <= len("Haus") for _, end, _, _ in pair[1].pairs)


def test_translations_not_flagged_are_the_same_with_or_without_the_guard(small_run):
    """The small run's random model runs away on some sentences: those are
    searched again; every other is the same, text and score, in a batch and
    alone (where a sentence's score differs from the batch's by rounding
    already, with or without the guard)."""
    plain = Translator.from_directory(small_run, guard=False)
    guarded = Translator.from_directory(small_run)
    before = plain.translate(SENTENCES, n_best=2)
    after = guarded.translate(SENTENCES, n_best=2)
    flagged = [i for i, hypotheses in enumerate(before)
               if guarded._guarded_flags(SENTENCES[i], hypotheses[0][0],
                                         len(guarded.tokenizer.vocabulary.encode(SENTENCES[i])))]
    assert 0 < len(flagged) < len(SENTENCES)
    for i in set(range(len(SENTENCES))) - set(flagged):
        assert after[i] == before[i]
        assert guarded.translate([SENTENCES[i]], n_best=2) == plain.translate([SENTENCES[i]],
                                                                              n_best=2)
    for i in flagged:
        assert after[i] != before[i] or not guarded._runaway(
            SENTENCES[i], after[i][0][0], len(guarded.tokenizer.vocabulary.encode(SENTENCES[i])))


def _calibrated(translator, seed=0):
    """`translator` with a calibrator of random weights for its model."""
    rng = np.random.default_rng(seed)
    count = len(quality.SIGNALS)
    calibrator = trust.Calibrator(quality.SIGNALS, rng.normal(size=count),
                                  rng.uniform(0.5, 2, count), rng.normal(size=count), 0.1, 0.5,
                                  -0.2, quality.model_digest(translator.model), translator.alpha)
    translator.calibrator, translator.calibration_note = calibrator, None
    return translator


def test_each_confidence_is_the_same_alone_and_in_a_batch(small_run):
    translator = _calibrated(Translator.from_directory(small_run))
    together = translator.translate(SENTENCES, quality=True)
    for sentence, (translation, assessed) in zip(SENTENCES, together):
        (alone_translation, alone), = translator.translate([sentence], quality=True)
        assert alone_translation == translation and alone.flags == assessed.flags
        assert 0 <= assessed.confidence <= 1
        assert abs(alone.confidence - assessed.confidence) < 1e-5
    assert len({round(assessed.confidence, 4) for _, assessed in together}) > 3


def test_a_blank_line_has_no_confidence_and_odd_lines_get_one(small_run):
    translator = _calibrated(Translator.from_directory(small_run))
    found = translator.translate(["", "   ", "🪨", "→", "!!!", "Haus " * 40], quality=True)
    assert found[0] == ("", trust.Quality(None)) and found[1] == ("", trust.Quality(None))
    for translation, assessed in found[2:]:
        assert isinstance(translation, str) and 0 <= assessed.confidence <= 1


def test_the_runs_calibrator_is_loaded_and_set_aside_for_another_model(small_run, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    translator = _calibrated(Translator.from_directory(run))
    translator.calibrator.save(run)
    loaded = Translator.from_directory(run)
    assert loaded.calibration_note is None
    assert loaded.translate(SENTENCES, quality=True) == translator.translate(SENTENCES,
                                                                             quality=True)
    other = _calibrated(Translator.from_directory(run))
    other.calibrator.model_digest = "another model's"
    other.calibrator.save(run)
    refused = Translator.from_directory(run)
    assert refused.calibrator is None and "fitted for another model" in refused.calibration_note
    assert all(assessed.confidence is None for _, assessed in
               refused.translate(SENTENCES, quality=True))
    (run / trust.CALIBRATION_FILE).write_text("{")
    with pytest.raises(ValueError, match="is damaged"):
        Translator.from_directory(run)
