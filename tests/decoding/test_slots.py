"""Continuous batching (`decoding.slots`): each sentence's search is the one
it gets alone, whatever joins and leaves around it."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.decoding import SearchResult, beam_search, greedy_search
from keras_transformer.decoding.slots import SlotSearch, Wakeup, pad_sources, search_all
from keras_transformer.models import BASE, transformer

TINY = BASE.replace(num_encoder_layers=1, num_decoder_layers=2, d_model=32, d_ff=64, num_heads=4,
                    dropout=0.0, max_length=24, decode_margin=6)
VOCAB = 40


@pytest.fixture(scope="module")
def model():
    """A random model whose tied embedding is scaled up, so that its
    next-token distributions are peaked: outputs of many lengths, from an
    immediate end to the length limit, with clear winners."""
    keras.utils.set_random_seed(3)
    model = transformer(TINY, VOCAB)
    for weight in model.weights:
        if "embeddings" in weight.path:
            weight.assign(weight * 3.0)
    return model


def _sources(count, seed):
    rng = np.random.default_rng(seed)
    return [np.append(rng.integers(4, VOCAB, size=rng.integers(0, 16)), TINY.eos_id).astype(np.int32)
            for _ in range(count)]


_TRACED = {}


def _alone(model, source, beam_size, best_only=True, alignment_layer=None):
    """The search of `source` alone (`search.greedy_search` or
    `search.beam_search`), traced once for each setting."""
    key = (id(model), beam_size, best_only, alignment_layer)
    if key not in _TRACED:
        def search(ids):
            if beam_size == 1:
                result = greedy_search(model, ids, alignment_layer=alignment_layer)
            else:
                result = beam_search(model, ids, beam_size=beam_size, best_only=best_only,
                                     alignment_layer=alignment_layer)
            return {name: value for name, value in vars(result).items() if value is not None}

        _TRACED[key] = tf.function(search, autograph=False,
                                   input_signature=[tf.TensorSpec([1, None], tf.int32)])
    result = _TRACED[key](tf.constant(source[None]))
    return SearchResult(**result)


def _assert_same(found, alone):
    """Tokens equal (the padding after the end aside) and scores close; with
    an alignment, the attended positions equal."""
    tokens, scores, log_probs, *attended = found
    expected = alone.tokens.numpy()[0]
    width = max(tokens.shape[-1], expected.shape[-1])
    pad = lambda t: np.pad(t, [(0, 0), (0, width - t.shape[-1])])  # noqa: E731
    np.testing.assert_array_equal(pad(tokens), pad(expected))
    if attended:
        np.testing.assert_array_equal(pad(attended[0]), pad(alone.attended.numpy()[0]))
    np.testing.assert_allclose(scores, alone.scores.numpy()[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(log_probs, alone.log_probs.numpy()[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("beam_size,best_only", [  # the quick tier has greedy search's
    (1, True), pytest.param(3, True, marks=pytest.mark.slow),
    pytest.param(3, False, marks=pytest.mark.slow)])
def test_each_sentence_gets_its_search_alone_whatever_joins_around_it(model, beam_size,
                                                                      best_only):
    """Sentences join at random steps (a few steps a call, slots freed at
    random), in random order; n-best lists too (`best_only=False`)."""
    sources = _sources(24, seed=beam_size)
    alone = [_alone(model, source, beam_size, best_only) for source in sources]
    lengths = [int(np.count_nonzero(a.tokens.numpy()[0, 0])) for a in alone]
    assert len(set(lengths)) > 5  # outputs of many lengths
    rng = np.random.default_rng(7)
    search = SlotSearch(model, slots=5, beam_size=beam_size, best_only=best_only)
    results = [None] * len(sources)
    waiting = list(rng.permutation(len(sources)))
    joins = set()
    while waiting or search.live:
        # A random number of newcomers (up to the free slots) at a random step.
        count = int(rng.integers(0, search.free + 1)) if search.live else max(search.free, 1)
        newcomers, waiting = waiting[:count], waiting[count:]
        if newcomers:
            joins.add(search.live)
            search.join(pad_sources([sources[i] for i in newcomers], TINY.pad_id), newcomers)
        for key, *found in search.advance(max_steps=int(rng.integers(1, 4))):
            results[key] = found
    assert len(joins) > 2  # sentences joined searches of several sizes
    for found, expected in zip(results, alone):
        _assert_same(found, expected)


@pytest.mark.slow
def test_a_search_that_runs_to_the_end_of_every_slot_frees_them_and_caches_stay_bounded(model):
    sources = _sources(40, seed=11)
    search = SlotSearch(model, slots=6, beam_size=2)
    results = search_all(search, sources, max_steps=2)
    assert search.live == 0 and search.free == 6
    cache = search._state[1]
    widths = [int(tf.shape(cache["self_keys"][0])[2]), int(tf.shape(cache["cross_keys"][0])[2])]
    assert widths == [0, 0] and int(tf.shape(cache["self_keys"][0])[0]) == 0
    for found, source in zip(results, sources):
        _assert_same(found, _alone(model, source, 2))


@pytest.mark.slow
@pytest.mark.parametrize("beam_size", [1, 3])
def test_an_aligned_search_keeps_the_attention_of_its_search_alone(model, beam_size):
    sources = _sources(12, seed=5)
    search = SlotSearch(model, slots=4, beam_size=beam_size, alignment_layer=1)
    for found, source in zip(search_all(search, sources, max_steps=2), sources):
        _assert_same(found, _alone(model, source, beam_size, alignment_layer=1))


@pytest.mark.slow
def test_cancelled_sentences_free_their_slots_and_the_others_end_as_alone(model):
    """A client that goes away: its sentences leave at once, the slots take
    newcomers, and nothing else changes."""
    sources = _sources(10, seed=9)
    search = SlotSearch(model, slots=4, beam_size=2)
    search.join(pad_sources(sources[:4], TINY.pad_id), [0, 1, 2, 3])
    search.advance(max_steps=1)
    live = list(search.keys)
    search.cancel([live[0], live[2], "never joined"])
    assert search.keys == [live[1], live[3]] and search.free == 2
    search.join(pad_sources(sources[4:6], TINY.pad_id), [4, 5])
    results = {}
    while search.live:
        results.update((key, found) for key, *found in search.advance())
    assert set(results) == {live[1], live[3], 4, 5}
    for key, found in results.items():
        _assert_same(found, _alone(model, sources[key], 2))


def test_sentences_are_handed_out_at_their_step_and_a_wakeup_brings_the_search_back(model):
    """A server's search: each sentence that ends goes to `on_ended` from
    inside the loop, at the step it ends, as searched alone; the loop runs
    on until a `Wakeup` says newcomers are due (and a slot is free) or
    sentences must be cancelled, and then returns after one step."""
    sources = _sources(12, seed=4)
    search = SlotSearch(model, slots=4, beam_size=1)
    handed = []  # the sentences of each call of on_ended

    search.join(pad_sources(sources[:4], TINY.pad_id), [0, 1, 2, 3])
    assert search.advance(on_ended=handed.append) == [] and search.live == 0
    # Greedy search: a sentence ends at the step of its length, so the calls
    # come one a step, in the order of their outputs' lengths.
    lengths = [{int(np.count_nonzero(tokens[0])) for _, tokens, *_ in call} for call in handed]
    assert all(len(each) == 1 for each in lengths)
    assert [min(each) for each in lengths] == sorted(set.union(*lengths))

    def steps_since(before):  # each live sentence's steps since `before`
        now = dict(zip(search.keys, search._state[0]["position"].numpy().tolist()))
        return {key: position - before.get(key, 0) for key, position in now.items()}

    wakeup = Wakeup()
    search.join(pad_sources(sources[4:7], TINY.pad_id), [4, 5, 6])
    wakeup.admit_at(0.0)  # newcomers due, a slot free: back after one step
    search.advance(on_ended=handed.append, wakeup=wakeup)
    assert set(steps_since({}).values()) == {1}
    search.join(pad_sources(sources[7:8], TINY.pad_id), [7])
    search.advance(on_ended=handed.append, wakeup=wakeup)  # full: back once one has ended
    assert search.live < 4
    wakeup.admit_at(float("inf"))
    newcomers = list(range(8, 8 + search.free))
    search.join(pad_sources([sources[i] for i in newcomers], TINY.pad_id), newcomers)
    before = steps_since({})
    wakeup.recall_now()  # sentences to cancel, slots full: back after one step
    search.advance(on_ended=handed.append, wakeup=wakeup)
    assert set(steps_since(before).values()) <= {1}
    wakeup.recalled()
    search.advance(on_ended=handed.append, wakeup=wakeup)
    assert search.live == 0
    found = {key: found for call in handed for key, *found in call}
    assert sorted(found) == list(range(8 + len(newcomers)))
    for key, result in found.items():
        _assert_same(result, _alone(model, sources[key], 1))


def test_the_caches_hold_no_more_than_the_longest_live_sentence(model):
    """Memory is bounded by the slots and the model's length, whatever the
    load: columns before every live sentence's start are cut off."""
    sources = _sources(30, seed=2)
    search = SlotSearch(model, slots=4, beam_size=1)
    waiting = list(range(len(sources)))
    while waiting or search.live:
        newcomers, waiting = waiting[:search.free], waiting[search.free:]
        if newcomers:
            search.join(pad_sources([sources[i] for i in newcomers], TINY.pad_id), newcomers)
        search.advance(max_steps=1)
        sentences, cache = search._state
        if search.live:
            positions = sentences["position"].numpy()
            assert int(tf.shape(cache["self_keys"][0])[2]) <= TINY.max_length
            # Each sentence's cached columns are its own positions.
            np.testing.assert_array_equal(
                int(tf.shape(cache["self_keys"][0])[2]) - sentences["start"].numpy(), positions)
            assert int(sentences["start"].numpy().min()) == 0
            assert int(tf.shape(cache["self_keys"][0])[0]) == search.live  # greedy: a row each


def test_too_many_sentences_are_refused_at_join(model):
    search = SlotSearch(model, slots=2, beam_size=1)
    with pytest.raises(ValueError, match="3 sentences join a search with 2 free slots"):
        search.join(pad_sources(_sources(3, seed=0), TINY.pad_id), [0, 1, 2])
    with pytest.raises(ValueError, match="slots must be >= 1"):
        SlotSearch(model, slots=0)
