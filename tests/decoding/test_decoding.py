"""Greedy and beam search, the length penalty, and the Translator."""

import gc
import itertools
import os
import sys
import threading

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.tasks import VOCAB, reverse_dataset
from keras_transformer.batch_defaults import decoding_kernels, length_batches, share_cores
from keras_transformer.data import EOS_ID, Tokenizer, block_token_batches, train_tokenizer
from keras_transformer.decoding import (
    Sampling,
    Translator,
    beam_search,
    greedy_search,
    length_penalty,
)
from keras_transformer.data import encode_sources
from keras_transformer.models import BASE, transformer
from keras_transformer.textfiles import TruncationWarning
from keras_transformer.training import Trainer, make_strategy, paper_optimizer

TINY = BASE.replace(num_encoder_layers=1, num_decoder_layers=2, d_model=32, d_ff=64, num_heads=4,
                    dropout=0.0, max_length=24, warmup_steps=50, decode_margin=4)


def _sharpen(model, factor=4.0):
    """Scales the tied embedding so that a random model's next-token
    distributions are peaked: searches then have clear winners, not ties."""
    for weight in model.weights:
        if "embeddings" in weight.path:
            weight.assign(weight * factor)
    return model


@pytest.fixture(scope="module")
def reverse_model(learning_seed):
    """A model trained briefly on the reverse task: its outputs are real
    sequences of varying length, not just an immediate end token. The tests
    check the searches' rules on it, not what it learned."""
    keras.utils.set_random_seed(learning_seed)
    model = transformer(TINY, VOCAB)
    trainer = Trainer(model, paper_optimizer(TINY), make_strategy("default"))
    data = block_token_batches(reverse_dataset(learning_seed, 5000, min_length=3, max_length=8,
                                               block_size=1024).cache().repeat(),
                               512, 16, shuffle_buffer=1000, seed=learning_seed)
    trainer.train(data, steps=300, steps_per_epoch=300, verbose=0)
    return model


def _sources(seed=5, count=6):
    rows = [s for s, _, _ in reverse_dataset(seed, count, min_length=3, max_length=8).as_numpy_iterator()]
    return keras.utils.pad_sequences(rows, padding="post").astype("int32")


def test_length_penalty_matches_the_gnmt_formula():
    for length, alpha in [(1, 0.6), (7, 0.6), (30, 1.0), (5, 0.0)]:
        assert float(length_penalty(length, alpha)) == pytest.approx(((5 + length) / 6) ** alpha)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_of_one_is_exactly_greedy(reverse_model, alpha):
    sources = _sources()
    greedy = greedy_search(reverse_model, sources, alpha=alpha)
    beam = beam_search(reverse_model, sources, beam_size=1, alpha=alpha)
    np.testing.assert_array_equal(beam.tokens, greedy.tokens)
    np.testing.assert_allclose(beam.scores, greedy.scores, rtol=1e-5)
    lengths = np.count_nonzero(greedy.tokens.numpy()[:, 0], axis=1)
    assert len(set(lengths)) > 1  # real outputs of several lengths


@pytest.mark.slow
@pytest.mark.parametrize("search", [greedy_search, beam_search])
def test_cached_decoding_gives_exactly_the_uncached_result(reverse_model, search):
    sources = _sources(seed=8)
    uncached = search(reverse_model, sources, use_cache=False)
    for static_cache in (False, True):  # growing caches (the default), fixed-length ones
        cached = search(reverse_model, sources, static_cache=static_cache)
        np.testing.assert_array_equal(cached.tokens, uncached.tokens)
        np.testing.assert_allclose(cached.scores, uncached.scores, rtol=1e-4)


def _mixed_sources():
    """Sources of very different lengths (1 to 8 tokens), in no order."""
    rng = np.random.default_rng(9)
    rows = [list(rng.integers(4, VOCAB, n)) + [EOS_ID] for n in (1, 8, 3, 6, 4, 7, 5, 2)]
    return keras.utils.pad_sequences(rows, padding="post").astype("int32")


@pytest.mark.slow
@pytest.mark.parametrize("beam_size,alpha,use_cache", [
    (1, 0.6, True), (4, 0.6, True), (4, 0.0, True), (1, 0.0, False), (4, 0.6, False)])
def test_dropping_finished_sentences_changes_no_result(reverse_model, beam_size, alpha,
                                                       use_cache):
    sources = tf.constant(_mixed_sources())
    # Outputs of at most 6 tokens: the longer sources hit that limit, the
    # shorter ones end on their own before it.
    options = dict(alpha=alpha, max_output_length=6, use_cache=use_cache)
    if beam_size > 1:
        options["beam_size"] = beam_size
    search = greedy_search if beam_size == 1 else beam_search
    def run(sources, drop):
        result = search(reverse_model, sources, drop_finished=drop, **options)
        return result.tokens, result.scores, result.log_probs

    run = tf.function(run)
    kept, dropped = run(sources, False), run(sources, True)
    np.testing.assert_array_equal(dropped[0], kept[0])  # tokens
    np.testing.assert_allclose(dropped[1], kept[1], rtol=1e-5)  # scores
    np.testing.assert_allclose(dropped[2], kept[2], rtol=1e-5)  # log-probabilities
    lengths = np.count_nonzero(kept[0].numpy(), axis=2)
    assert lengths.shape[1] == beam_size  # n-best lists, compared whole
    assert (lengths[:, 0] == 6).any() and (lengths[:, 0] < 6).any() and len(set(lengths[:, 0])) > 2


@pytest.mark.slow  # trains the reverse model: the quick tier leaves it out
def test_finished_sentences_leave_the_batch(reverse_model):
    """Each step decodes only the unfinished sentences: with greedy search a
    sentence is decoded once per output token (so the rows decoded add up
    to the output lengths); with beam search, one row per sentence at the
    first step (its one alive prefix), then K rows per sentence until it
    is done, fewer in all than when every sentence waits for the last."""
    sources = _mixed_sources()
    decoded = []
    step = reverse_model.decode_step_growing

    def counting(target_ids, cache, *projection):
        decoded.append(int(target_ids.shape[0]))
        return step(target_ids, cache, *projection)

    reverse_model.decode_step_growing = counting
    try:
        tokens = greedy_search(reverse_model, sources, max_output_length=6).tokens.numpy()
        assert sum(decoded) == np.count_nonzero(tokens) < len(sources) * max(decoded)
        assert decoded == sorted(decoded, reverse=True)
        decoded.clear()
        beam_search(reverse_model, sources, beam_size=4, max_output_length=6)
        dropping = decoded.copy()
        decoded.clear()
        beam_search(reverse_model, sources, beam_size=4, max_output_length=6, drop_finished=False)
        assert decoded == [len(sources)] + [len(sources) * 4] * (len(decoded) - 1)
        assert sum(dropping) < sum(decoded)
        assert dropping[0] == len(sources) and all(rows % 4 == 0 for rows in dropping[1:])
        assert dropping[-1] < dropping[1]
    finally:
        del reverse_model.decode_step_growing
    with pytest.raises(ValueError, match="drop_finished=True changes the batch size"):
        beam_search(reverse_model, sources, static_cache=True, drop_finished=True)


@pytest.mark.slow
def test_best_only_ends_sooner_with_the_full_search_best(reverse_model):
    """`best_only` stops a sentence once no alive hypothesis can beat its
    best finished one: the full search's best hypothesis and score, from
    no more decoder rows, and from fewer where scores only fall (alpha 0)."""
    sources = tf.constant(_mixed_sources())
    rows = tf.Variable(0)
    step = reverse_model.decode_step_growing

    def counting(target_ids, cache, *projection):
        with tf.control_dependencies([rows.assign_add(tf.shape(target_ids)[0])]):
            return step(tf.identity(target_ids), cache, *projection)

    def searches(best_only=False):
        def run(alpha):
            result = beam_search(reverse_model, sources, beam_size=4, alpha=alpha,
                                 best_only=best_only)
            return result.tokens, result.scores
        return tf.function(run, autograph=False)

    reverse_model.decode_step_growing = counting
    try:
        full, best = searches(), searches(best_only=True)
        fewer = {}
        for alpha in (0.0, 0.6, 2.0):
            alpha = tf.constant(alpha)
            rows.assign(0)
            full_tokens, full_scores = full(alpha)
            full_rows = int(rows.numpy())
            rows.assign(0)
            tokens, scores = best(alpha)
            assert tokens.shape[1] == scores.shape[1] == 1
            np.testing.assert_array_equal(tokens[:, 0], full_tokens[:, 0])
            # (Rows leave the batch at other steps, which can move a matmul's last bit.)
            np.testing.assert_allclose(scores[:, 0], full_scores[:, 0], rtol=1e-5)
            assert int(rows.numpy()) <= full_rows
            fewer[float(alpha)] = full_rows - int(rows.numpy())
    finally:
        del reverse_model.decode_step_growing
    # With alpha 0 a score only falls as a hypothesis grows, so a sentence
    # ends once its best finished one beats every alive one (16-20 rows fewer
    # of 152-160 for learning seeds 0-2). With a length reward the bound is
    # the best score reachable by the length limit, and whether a sentence
    # settles before it hangs on the model: 0-8 rows fewer at alpha 2, and
    # none for seed 0 with one float rounding of its training.
    assert fewer[0.0] > 0, fewer


def _log_probs(model, sources, prefixes):
    """Next-token log-probabilities after each prefix (all of one length)
    of its source, by one full forward pass (no cache), padding and start
    banned after the softmax."""
    target_in = np.array([[2, *prefix] for prefix in prefixes], "int32")
    logits = model({"source_ids": sources, "target_ids": target_in}).numpy()[:, -1]
    shifted = logits.astype("float64") - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    log_probs[:, [0, 2]] = -np.inf
    return log_probs


def _reference_beam(model, sources, k, alpha, limits):
    """Beam search by the rules `decoding.search` states (fairseq's and
    Hugging Face's), each sentence on its own over full forward passes: at
    each step the 2K best extensions of its alive prefixes by
    log-probability (ties: the lower beam, then the lower token); end
    tokens among the K best of them finish, scored with the GNMT penalty;
    the K best others stay alive; at its limit only the end token may come;
    done with K finished. Returns each sentence's finished `(score,
    tokens)`, best first."""
    alive = [[((), 0.0)] for _ in sources]
    finished = [[] for _ in sources]
    for step in range(max(limits)):
        going = [i for i in range(len(sources)) if len(finished[i]) < k and step < limits[i]]
        if not going:
            break
        rows = [(i, b) for i in going for b in range(len(alive[i]))]
        log_probs = _log_probs(model, sources[[i for i, _ in rows]],
                               [alive[i][b][0] for i, b in rows])
        for i in going:
            mine = log_probs[[r for r, (j, _) in enumerate(rows) if j == i]]
            if step + 1 >= limits[i]:
                mine[:, [t for t in range(mine.shape[1]) if t != EOS_ID]] = -np.inf
            ranked = sorted(((total + mine[b, t], b, t) for b, (_, total) in enumerate(alive[i])
                             for t in range(mine.shape[1])), key=lambda c: (-c[0], c[1], c[2]))
            ranked = [(total, alive[i][b][0] + (t,)) for total, b, t in ranked[:2 * k]]
            finished[i] += [(total / ((5 + step + 1) / 6) ** alpha, sequence)
                            for rank, (total, sequence) in enumerate(ranked)
                            if sequence[-1] == EOS_ID and rank < k and total > -np.inf]
            alive[i] = [(sequence, total) for total, sequence in ranked
                        if sequence[-1] != EOS_ID][:k]
    return [sorted(hypotheses, key=lambda h: -h[0])[:k] for hypotheses in finished]


@pytest.mark.slow
def test_beam_search_finds_what_the_reference_search_finds(reverse_model):
    """Beam 4 on 20 sentences of a trained model (outputs of many lengths,
    beams pruned at every step) gives the hypotheses and scores of
    `_reference_beam`: the search's rules checked on their own, whatever the
    model learned (its training decides only which hypotheses there are)."""
    sources = _sources(seed=11, count=20)
    alpha = 0.6
    result = beam_search(reverse_model, sources, beam_size=4, alpha=alpha)
    limits = np.count_nonzero(sources, axis=1) - 1 + TINY.decode_margin
    references = _reference_beam(reverse_model, sources, 4, alpha, limits)
    for tokens, scores, reference in zip(result.tokens.numpy(), result.scores.numpy(),
                                         references):
        # The best hypothesis, and every score (hypotheses whose order a
        # rounding could swap have scores within the tolerance).
        assert [int(t) for t in tokens[0] if t] == list(reference[0][1])
        np.testing.assert_allclose(scores, [score for score, _ in reference], atol=1e-4)
    lengths = [len(reference[0][1]) for reference in references]
    assert len(set(lengths)) > 3, lengths  # real outputs, not an immediate end token


def _exhaustive(model, source, max_length, alpha):
    """Scores every output of up to `max_length` tokens ending in EOS
    (PAD and BOS are never generated) with full forward passes."""
    allowed = [t for t in range(model.target_vocab_size) if t not in (0, 2)]
    best = []
    for length in range(1, max_length + 1):
        for body in itertools.product([t for t in allowed if t != EOS_ID], repeat=length - 1):
            sequence = list(body) + [EOS_ID]
            target_in = np.array([[2] + sequence[:-1]], "int32")
            logits = model({"source_ids": source[None], "target_ids": target_in}).numpy()[0]
            log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True)) - logits.max(-1, keepdims=True)
            log_probs[:, [0, 2]] = -np.inf  # banned after the softmax, as fairseq and HF do
            total = sum(log_probs[i, t] for i, t in enumerate(sequence))
            best.append((total / ((5 + length) / 6) ** alpha, sequence))
    return max(best)


@pytest.mark.parametrize("seed,alpha", [(0, 0.6), (1, 0.6), (2, 0.0), (3, 2.0), (4, 0.6)])
def test_beam_as_wide_as_the_vocabulary_finds_the_exhaustive_best(seed, alpha):
    keras.utils.set_random_seed(seed)
    vocab = 5  # pad, unk, bos, eos and one symbol
    model = _sharpen(transformer(TINY.replace(max_length=8), vocab), factor=3.0)
    source = np.array([4, 1, 4, EOS_ID], "int32")
    best_score, best_sequence = _exhaustive(model, source, 3, alpha)
    for best_only in (False, True):
        result = beam_search(model, source[None], beam_size=vocab, alpha=alpha,
                             max_output_length=3, best_only=best_only)
        found = [int(t) for t in result.tokens.numpy()[0, 0] if t]
        assert found == best_sequence
        assert float(result.scores[0, 0]) == pytest.approx(best_score, abs=1e-4)


@pytest.mark.slow  # trains the reverse model: the quick tier leaves it out
def test_n_best_is_sorted_and_respects_the_length_limit(reverse_model):
    sources = _sources(seed=3)
    result = beam_search(reverse_model, sources, beam_size=4, decode_margin=2)
    scores = result.scores.numpy()
    assert np.all(np.diff(scores, axis=1) <= 0)
    source_lengths = np.count_nonzero(sources, axis=1) - 1  # without the end token
    output_lengths = np.count_nonzero(result.tokens.numpy(), axis=2)
    assert np.all(output_lengths <= source_lengths[:, None] + 2)
    # Every hypothesis ends with exactly one end token.
    assert np.all((result.tokens.numpy() == EOS_ID).sum(axis=2) == 1)


@pytest.mark.slow
def test_search_runs_in_tf_function_with_xla_and_a_tensor_beam_size(reverse_model):
    sources = tf.constant(_sources(seed=4))
    eager = beam_search(reverse_model, sources, beam_size=3)
    # XLA needs loop variables of fixed shapes: caches of the maximum length.
    compiled = tf.function(lambda s: beam_search(reverse_model, s, beam_size=3,
                                                 static_cache=True).tokens, jit_compile=True)
    np.testing.assert_array_equal(compiled(sources), eager.tokens)
    dynamic = tf.function(lambda s, k: beam_search(reverse_model, s, beam_size=k).tokens)
    np.testing.assert_array_equal(dynamic(sources, tf.constant(3)), eager.tokens)


@pytest.fixture(scope="module")
def tokenizer_path(tmp_path_factory):
    words = "der die das Haus Baum groß klein ist war hier dort und oder nicht ein eine".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=rng.integers(3, 10))) + "." for _ in range(500)]
    path = tmp_path_factory.mktemp("spm") / "tokenizer.model"
    train_tokenizer(texts, path, vocab_size=60)
    return str(path)


@pytest.fixture
def translator(tokenizer_path):
    keras.utils.set_random_seed(0)
    tokenizer = Tokenizer(tokenizer_path)
    model = _sharpen(transformer(TINY.replace(max_length=16), tokenizer.vocab_size))
    return Translator(model, tokenizer, beam_size=3, batch_size=4)


SENTENCES = ["Das Haus ist groß.", "der Baum", "Hier und dort war ein Haus nicht klein.",
             "die", "Ein Baum ist hier, ein Haus ist dort.", "klein oder groß"]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
def test_batch_translation_equals_one_by_one(translator):
    together = translator.translate(SENTENCES)
    alone = [translator.translate([s])[0] for s in SENTENCES]
    assert together == alone
    assert len(set(together)) > 2  # not all the same string
    n_best = translator.translate(SENTENCES[:2], n_best=3)
    assert [len(h) for h in n_best] == [3, 3] and n_best[0][0][0] == together[0]
    assert all(a[1] >= b[1] for hyps in n_best for a, b in zip(hyps, hyps[1:]))


@pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
# Each activation the graphs write, and greedy and beam search each after
# post-norm and pre-norm layers: not every pairing, since the search does
# not depend on how the graphs compute a step.
@pytest.mark.parametrize("norm_first, activation, beam_size", [
    (False, "relu", 3), (True, "gelu", 1), (True, "gelu", 3), (False, "silu", 1)])
def test_lone_sentences_on_onnxruntime_translate_as_the_traced_search(tokenizer_path, beam_size,
                                                                       norm_first, activation):
    """`search_lone_on_onnxruntime`: each lone sentence (blank, short, long,
    overlong) is searched over the graphs written from the weights, with the
    traced search's translation and alignment and its score within 1e-5,
    post-norm and pre-norm, each activation the graphs write; batches and
    n-best lists keep the traced search."""
    keras.utils.set_random_seed(1)
    tokenizer = Tokenizer(tokenizer_path)
    model = _sharpen(transformer(TINY.replace(max_length=40, norm_first=norm_first,
                                              activation=activation), tokenizer.vocab_size))
    plain, fast = (Translator(model, tokenizer, beam_size=beam_size, guard=False)
                   for _ in range(2))
    fast.search_lone_on_onnxruntime(threads=1)
    searched, search_lone = [], fast._search_lone
    fast._search_lone = lambda aligned, source, blank: (
        searched.append(source.shape[1]), search_lone(aligned, source, blank))[1]
    lines = ["", *SENTENCES, " ".join(SENTENCES[2:5]), " ".join(SENTENCES) * 3]
    for line in lines:
        for aligned in (False, True):
            (expected, expected_alignment), (found, alignment) = (
                (t.translate([line], n_best=1, aligned=True)[0] if aligned else
                 (t.translate([line], n_best=1)[0], None)) for t in (plain, fast))
            assert found[0][0] == expected[0][0] and alignment == expected_alignment, line
            np.testing.assert_allclose(found[0][1], expected[0][1], rtol=1e-5, atol=1e-6)
    assert len(searched) == 2 * len(lines) and max(searched) == 40  # the overlong line, cut
    assert len({text for line in lines for text in plain.translate([line])}) > 3
    searched.clear()
    assert fast.translate(SENTENCES) == plain.translate(SENTENCES)
    if beam_size > 1:  # (greedy search's n-best list is its best alone)
        assert fast.translate(SENTENCES[:1], n_best=2) == plain.translate(SENTENCES[:1], n_best=2)
    assert searched == []
    with pytest.raises(ValueError, match="samples"):
        Translator(model, tokenizer, sampling=Sampling()).search_lone_on_onnxruntime()
    with pytest.raises(ValueError, match="activation"):
        Translator(transformer(TINY.replace(activation="tanh"), tokenizer.vocab_size),
                   tokenizer).search_lone_on_onnxruntime()


@pytest.mark.parametrize("vocabulary, norm_first, activation", [
    (60, False, "relu"), (60, True, "gelu"), (5, False, "silu")])
def test_batches_on_the_step_graphs_search_as_the_traced_search(vocabulary, norm_first,
                                                                activation):
    """`onnx_step.StepSearch.search_batch`: a padded batch (a source of the
    end token alone among them) searched on onnxruntime gives the traced
    search's tokens, and its scores within 1e-5, greedy and beam, best-only
    (ending a sentence once its best is settled) and n-best; also where a
    row has fewer than 2K extensions (a vocabulary of 5), whose first step
    decodes K rows. Its batches drop the sentences that end, so later
    steps run on fewer rows."""
    from keras_transformer import onnx_step
    from keras_transformer.decoding.alignment import alignment_layer

    keras.utils.set_random_seed(1)
    model = _sharpen(transformer(TINY.replace(norm_first=norm_first, activation=activation),
                                 vocabulary))
    search = onnx_step.StepSearch(onnx_step.StepGraphs(model, alignment_layer(model)),
                                  model.config, threads=1)
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 14, 9)
    source = np.zeros((9, lengths.max() + 1), np.int32)
    for row, length in enumerate(lengths):
        source[row, :length] = rng.integers(4, vocabulary, length)
        source[row, length] = EOS_ID
    source[3] = 0
    source[3, 0] = EOS_ID
    rows, step = [], search._step
    search._step = lambda ids, *rest: (rows.append(len(ids)), step(ids, *rest))[1]
    for beam_size, n_best in ((1, 1), (3, 1), (3, 3)):
        expected = beam_search(model, source, beam_size=beam_size, alpha=0.6,
                               best_only=n_best == 1)
        rows.clear()
        tokens, scores = search.search_batch(source, beam_size, 0.6, TINY.decode_margin, n_best)
        width = expected.tokens.shape[2]
        assert tokens.shape[:2] == (9, n_best) and not tokens[:, :, width:].any()
        np.testing.assert_array_equal(tokens[:, :, :width], expected.tokens.numpy())
        np.testing.assert_allclose(scores, expected.scores.numpy(), rtol=1e-5, atol=1e-6)
        assert min(rows) < max(rows) <= 9 * beam_size  # sentences left as they ended
    assert len({tuple(row) for row in tokens[:, 0]}) > 1  # not one output for all


def test_length_batches_fill_the_budget_longest_first():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, 200)
    batches = length_batches(lengths, batch_tokens=100, batch_size=7)
    assert sorted(np.concatenate(batches)) == list(range(200))  # every sentence once
    longest = [lengths[rows].max() for rows in batches]
    assert longest == sorted(longest, reverse=True)
    for rows in batches:
        padded = len(rows) * lengths[rows].max()
        assert len(rows) <= 7 and (padded <= 100 or len(rows) == 1)
    # Full batches: one more sentence would break the budget or the cap.
    for rows, after in zip(batches, batches[1:]):
        assert len(rows) == 7 or (len(rows) + 1) * lengths[rows].max() > 100
    assert [list(b) for b in length_batches([50, 300, 20], 100)] == [[1], [0, 2]]


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
def test_streams_and_batches_of_any_shape_keep_the_input_order_and_trace_once(translator):
    sentences = SENTENCES * 3 + [""]
    expected = translator.translate(sentences)
    small = Translator(translator.model, translator.tokenizer, beam_size=3, batch_tokens=12,
                       in_flight=2)
    streamed = list(small.translate_stream(iter(sentences), window=5))
    assert streamed == expected
    # Batches of 1 to 3 sentences of 2 to 16 tokens: one trace for all.
    assert small._translate.experimental_get_tracing_count() == 1
    counted = []
    small.translate(sentences, on_batch=lambda count, tokens: counted.append((count, tokens)))
    assert sum(c for c, _ in counted) == len(sentences) and len(counted) > 5
    # The tokens of the best translations, each with its end token.
    source_ids, _ = encode_sources(translator.tokenizer, tf.constant(sentences), 15)
    tokens = beam_search(translator.model, source_ids, beam_size=3).tokens.numpy()[:, 0]
    assert sum(t for _, t in counted) == np.count_nonzero(tokens)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
def test_ctrl_c_while_a_search_thread_starts_leaves_no_thread_behind(translator, monkeypatch):
    # Thread.start waits for the new thread, so a Ctrl-C in Executor.map most
    # often lands there: the thread runs but its pool never registered it.
    # A CI run of translate.py then waited for that thread at exit forever.
    start = threading.Thread.start

    def interrupted(thread):
        start(thread)
        raise KeyboardInterrupt

    small = Translator(translator.model, translator.tokenizer, beam_size=2, batch_tokens=12,
                       in_flight=2)
    before = set(threading.enumerate())
    monkeypatch.setattr(threading.Thread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        small.translate(SENTENCES)
    monkeypatch.undo()
    started = set(threading.enumerate()) - before
    assert started  # the interrupted thread did start
    for thread in started:
        thread.join(timeout=60)
    left = [thread.name for thread in started if thread.is_alive()]
    # The translator goes on working, and as one that was never interrupted.
    assert small.translate(SENTENCES[:3]) == Translator(
        translator.model, translator.tokenizer, beam_size=2, in_flight=1).translate(SENTENCES[:3])
    # Should a pool the translator holds have kept the thread, collecting it
    # wakes the thread, so that a failure here does not also hang pytest's exit.
    del small
    gc.collect()
    assert not left


def test_each_search_in_flight_gets_its_share_of_the_cores(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    for in_flight, threads in ((1, 8), (2, 4), (3, 2), (16, 1)):
        monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
        assert share_cores(in_flight) == threads
        assert os.environ["TF_NUM_INTRAOP_THREADS"] == str(threads)
    # A setting of the user's stays.
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "3")
    assert share_cores(2) == 3 and os.environ["TF_NUM_INTRAOP_THREADS"] == "3"
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "two")
    with pytest.raises(ValueError, match="TF_NUM_INTRAOP_THREADS must be a whole number"):
        share_cores(2)


def test_float32_searches_get_eigens_kernels_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    imported = sys.modules["tensorflow"]
    monkeypatch.delitem(sys.modules, "tensorflow")  # as before TensorFlow's import
    # Half precisions keep oneDNN's kernels, their fast ones on a CPU.
    for precision in ("bfloat16", "float16"):
        assert not decoding_kernels(precision) and "TF_ENABLE_ONEDNN_OPTS" not in os.environ
    assert decoding_kernels() and os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    assert decoding_kernels("float32") and os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"
    # A setting of the user's stays.
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    assert not decoding_kernels() and os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
    # Once TensorFlow is imported, its kernels are chosen: nothing changes.
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS")
    monkeypatch.setitem(sys.modules, "tensorflow", imported)
    assert not decoding_kernels() and "TF_ENABLE_ONEDNN_OPTS" not in os.environ


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_file_translates_as_one_batch_of_the_previous_search(translator, tmp_path, beam_size):
    """The Translator's path (a stream of lines, sorted into token batches,
    greedy search for a beam of one, finished sentences leaving the batch)
    against the search before it: the whole file as one padded batch, beam
    search keeping every sentence to the end."""
    path = tmp_path / "source.de"
    path.write_text("".join(s + "\n" for s in SENTENCES * 4 + ["", SENTENCES[2] * 3]),
                    encoding="utf-8")
    lines = path.read_text(encoding="utf-8").splitlines()
    fast = Translator(translator.model, translator.tokenizer, beam_size=beam_size, batch_tokens=20,
                      guard=False)
    with open(path, encoding="utf-8") as file:
        streamed = list(fast.translate_stream(line.rstrip("\n") for line in file))
    source_ids, blank = encode_sources(translator.tokenizer, tf.constant(lines), 15)
    tokens = beam_search(translator.model, source_ids, beam_size=beam_size,
                         drop_finished=False).tokens[:, 0]
    previous = [b"" if empty else text for text, empty in
                zip(translator.tokenizer.detokenize(tokens).numpy(), blank.numpy())]
    assert streamed == [text.decode("utf-8") for text in previous]
    assert len(set(streamed)) > 3


@pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_continuous_batching_translates_as_batches(translator, beam_size):
    """`slots`: sentences join searches in flight as others end, and each
    gets what a batch gives it: best translations, n-best lists and their
    scores, blank and overlong lines, in the input's order; progress
    reports count every sentence."""
    lines = SENTENCES * 3 + ["", "  ", SENTENCES[2] * 3, SENTENCES[0]]
    batches = Translator(translator.model, translator.tokenizer, beam_size=beam_size)
    slots = Translator(translator.model, translator.tokenizer, beam_size=beam_size, slots=3)
    reported = []
    assert slots.translate(lines, on_batch=lambda n, tokens: reported.append(n)) == (
        batches.translate(lines))
    assert sum(reported) == len(lines) and len(reported) > 3
    found, expected = (t.translate(lines[:8], n_best=3) for t in (slots, batches))
    assert [[text for text, _ in row] for row in found] == [[text for text, _ in row]
                                                            for row in expected]
    np.testing.assert_allclose([[score for _, score in row] for row in found],
                               [[score for _, score in row] for row in expected], rtol=1e-4)
    assert slots.translate([]) == []
    # Sampling searches batches, with each batch's seed: the same draws.
    drawn = [Translator(translator.model, translator.tokenizer, sampling=Sampling(seed=5),
                        **options).translate(lines) for options in ({}, {"slots": 3})]
    assert drawn[0] == drawn[1]


@pytest.mark.slow
def test_empty_and_blank_inputs_translate_to_empty_strings(translator):
    assert translator.translate(["", "   ", SENTENCES[0]]) == ["", "", translator.translate([SENTENCES[0]])[0]]
    assert translator.translate(["", "Haus"], n_best=2)[0] == [("", 0.0), ("", 0.0)]
    assert translator.translate([]) == []


@pytest.mark.slow
def test_overlong_inputs_are_truncated_or_refused(translator):
    limit = translator.model.config.max_length - 1
    long_sentence = " ".join(["Haus Baum groß"] * 20)
    ids = translator.tokenizer.tokenize(tf.constant([long_sentence]))[0].numpy()
    assert len(ids) > limit
    cut = translator.tokenizer.detokenize(tf.constant([ids[:limit]])).numpy()[0].decode()
    with pytest.warns(TruncationWarning, match=r"1 sentence\(s\) \(0, counted from 0\) are longer "
                                               r"than the model's 15 tokens and were cut"):
        truncated = translator.translate([long_sentence])
    assert truncated == translator.translate([cut])
    strict = Translator(translator.model, translator.tokenizer, overlong="error")
    with pytest.raises(ValueError, match=r"Sentence\(s\) \[1\] are longer than the model's 15 tokens"):
        strict.translate(["Haus", long_sentence])


@pytest.mark.parametrize("k", [1, 3, 8, 40])
def test_blocked_top_k_equals_tf_top_k_ties_included(k):
    from keras_transformer.decoding.search import top_k

    rng = np.random.default_rng(k)
    for values in (rng.normal(size=(5, 9000)),                # distinct values, 18 blocks (padded)
                   rng.integers(0, 3, size=(5, 8192)) * 1.0,  # many ties
                   np.full((2, 8192), -1e9)):                 # everything banned
        values = tf.constant(values, tf.float32)
        expected, got = tf.math.top_k(values, k), top_k(values, tf.constant(k))
        np.testing.assert_array_equal(got[0], expected.values)
        np.testing.assert_array_equal(got[1], expected.indices)
