"""Lexically constrained beam search (`decoding.constraints`): the phrase
automata against a brute-force reading, every constraint met on random
models (or said unmet, only at the output limit), each sentence's result
the same alone and in a batch of mixed constrained and unconstrained
sentences, no constraints giving today's results bit for bit, and the
sooner stop of a constrained sentence's best-only search; the
Translator with a glossary (its warnings and refusals)."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.small_run import WORDS
from keras_transformer.decoding import Translator, beam_search, search
from keras_transformer.decoding.constraints import MAX_PHRASE_TOKENS, Constraints, transitions
from keras_transformer.glossary import Glossary, GlossaryError, GlossaryWarning
from keras_transformer.models import BASE, transformer

CONFIG = BASE.replace(num_encoder_layers=2, num_decoder_layers=2, d_model=32, d_ff=64,
                      num_heads=4, max_length=40, decode_margin=12, dropout=0.0)
VOCAB = 48


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests: the module's models and tokenizers stay
    (see tests/serving/test_serve.py)."""


def _model(seed):
    keras.utils.set_random_seed(seed)
    model = transformer(CONFIG, VOCAB)
    for weight in model.weights:  # peaked distributions: clear winners
        if "embeddings" in weight.path:
            weight.assign(weight * 4.0)
    return model


@pytest.fixture(scope="module")
def models():
    return [_model(seed) for seed in (1, 2)]


def _sources(rng, count):
    rows = np.full((count, 9), CONFIG.pad_id, np.int32)
    for row in rows:
        n = rng.integers(3, 8)
        row[:n], row[n] = rng.integers(4, VOCAB, n), CONFIG.eos_id
    return rows


def _random_constraints(rng, count, every=2):
    """For every `every`-th sentence none, else 1 to 3 constraints of 1 or 2
    alternatives of 1 to 3 tokens."""
    return [[] if index % every == 0 else
            [[[int(t) for t in rng.integers(4, VOCAB, rng.integers(1, 4))]
              for _ in range(rng.integers(1, 3))] for _ in range(rng.integers(1, 4))]
            for index in range(count)]


def _holds(tokens, phrase):
    return any(tokens[i:i + len(phrase)] == phrase for i in range(len(tokens) - len(phrase) + 1))


_TRACED = {}


def _search(model, sources, constraints, **options):
    """The constrained search of `sources`, traced once for each model and
    options (its signature leaves the shapes free, as the Translator's
    does): a trace costs seconds, a call milliseconds."""
    key = (id(model), tuple(sorted(options.items())))
    if key not in _TRACED:
        _TRACED[key] = tf.function(lambda s, p, o: {
            name: value for name, value in vars(beam_search(
                model, s, constraints=Constraints(p, o), **options)).items()
            if value is not None}, autograph=False, input_signature=[
                tf.TensorSpec([None, None], tf.int32),
                tf.TensorSpec([None, None, MAX_PHRASE_TOKENS], tf.int32),
                tf.TensorSpec([None, None], tf.int32)])
    bound = Constraints.of(constraints)
    found = _TRACED[key](tf.constant(sources, tf.int32), bound.phrases, bound.owner)
    return {name: value.numpy() for name, value in found.items()}


def test_the_phrase_automata_give_the_longest_prefix_the_text_ends_with():
    rng = np.random.default_rng(0)
    for _ in range(100):
        phrase = [int(t) for t in rng.integers(0, 3, rng.integers(1, 7))]
        table = transitions(Constraints.of([[[phrase]]]).phrases).numpy()[0, 0]
        text, progress = [], 0
        for token in rng.integers(0, 4, 30):
            text.append(int(token))
            positions = [q for q, t in enumerate(phrase) if t == token]
            # Every position holding the token gives the same next state.
            assert len({int(table[progress, q]) for q in positions}) <= 1
            progress = table[progress, positions[0]] if positions else 0
            expected = max([m for m in range(1, len(phrase) + 1)
                            if m <= len(text) and text[-m:] == phrase[:m]] + [0])
            assert progress == expected, (phrase, text)


@pytest.mark.parametrize("options", [dict(beam_size=4), dict(beam_size=4, best_only=True),
                                     dict(beam_size=3, drop_finished=False)])
def test_every_constraint_is_met_or_said_unmet_at_the_output_limit(models, options):
    rng = np.random.default_rng(3)
    for model in models:
        sources = _sources(rng, 8)
        constraints = _random_constraints(rng, 8)
        found = _search(model, sources, constraints, **options)
        limits = (sources != CONFIG.pad_id).sum(1) - 1 + CONFIG.decode_margin
        for index, asked in enumerate(constraints):
            if not asked:
                continue
            for tokens, met, score in zip(found["tokens"][index], found["met"][index],
                                          found["scores"][index]):
                if score < -1e8:  # no hypothesis in this place
                    continue
                written = [int(t) for t in tokens if t != CONFIG.pad_id]
                holds = all(any(_holds(written, alternative) for alternative in constraint)
                            for constraint in asked)
                assert met == holds, (index, written, asked)
                # An unmet hypothesis ended only at the limit.
                assert met or len(written) == limits[index], (index, written, limits[index])
            # Those holding their constraints come first.
            flags = list(found["met"][index])
            assert flags == sorted(flags, reverse=True)
        assert np.mean([found["met"][i][0] for i, asked in enumerate(constraints) if asked]) > 0.5


@pytest.mark.parametrize("best_only", [False, True])
def test_each_sentence_is_the_same_alone_and_among_mixed_sentences(models, best_only):
    rng = np.random.default_rng(4)
    model = models[0]
    sources = _sources(rng, 8)
    constraints = _random_constraints(rng, 8)
    together = _search(model, sources, constraints, beam_size=4, best_only=best_only)
    for index, asked in enumerate(constraints):
        length = int((sources[index] != CONFIG.pad_id).sum())
        alone = _search(model, sources[index:index + 1, :length], [asked], beam_size=4,
                        best_only=best_only)
        tokens = alone["tokens"][0]
        np.testing.assert_array_equal(tokens, together["tokens"][index][:, :tokens.shape[1]])
        np.testing.assert_allclose(alone["scores"][0], together["scores"][index], rtol=1e-6)


@pytest.mark.parametrize("best_only", [False, True])
def test_no_constraints_give_today_s_results_bit_for_bit(models, best_only):
    rng = np.random.default_rng(5)
    for model in models:
        sources = _sources(rng, 6)
        plain = tf.function(lambda s: vars(beam_search(model, s, beam_size=4,
                                                       best_only=best_only)) | {
            "attended": 0, "met": 0}, autograph=False)(sources)  # traced, as _search is
        none = _search(model, sources, [[]] * 6, beam_size=4, best_only=best_only)
        for name in ("tokens", "scores", "log_probs"):
            np.testing.assert_array_equal(none[name], plain[name].numpy())


def test_a_constrained_sentence_settles_once_none_would_beat_its_best_ending_now():
    """`best_only`'s stop (`search._settled`): an unconstrained sentence's
    best finished score S against its best alive log-probability L over
    the largest length penalty still possible (the one at its limit); a
    constrained sentence's against L over the penalty at the next length."""
    step, limit, alpha = 9, 30, 0.6
    now, at_limit = (((5 + length) / 6) ** alpha for length in (step + 1, limit))
    alive = -6.0
    # S between L / now and L / at_limit: only the constrained one settles;
    # below L / now neither does; above L / at_limit both.
    for best, expected in (((alive / now + alive / at_limit) / 2, [True, False]),
                           (alive / now - 0.01, [False, False]),
                           (alive / at_limit + 0.01, [True, True])):
        sentences = {"finished_scores": tf.constant([[best, -1e9]] * 2),
                     "alive_log_probs": tf.constant([[alive, -7.0]] * 2),
                     "limit": tf.constant([limit] * 2), "constrained": tf.constant([True, False])}
        assert list(search._settled(tf.constant(step), sentences, alpha).numpy()) == expected


def test_a_phrase_must_have_one_to_the_most_tokens():
    with pytest.raises(ValueError, match="1 to 16 tokens"):
        Constraints.of([[[list(range(4, 4 + MAX_PHRASE_TOKENS + 1))]]])
    with pytest.raises(ValueError, match="1 to 16 tokens"):
        Constraints.of([[[[]]]])


# ------------------------------------------------------------ the Translator

@pytest.fixture(scope="module")
def translator(small_run):
    return Translator.from_directory(str(small_run), in_flight=1)


def _pieces(translator, text):
    return translator.tokenizer.tokenize_target(tf.constant([text])).to_list()[0]


def test_a_glossary_s_terms_are_in_every_translation_and_the_rest_unchanged(translator):
    sentences = ["das Haus ist groß", "der Baum ist klein", "hier war ein Haus",
                 "dort ist nicht hier", "ein Baum und ein Haus"]
    glossary = Glossary.of([("Haus", "Baum"), ("klein", "oder dort")], "de")
    plain = translator.translate(sentences)
    with warnings.catch_warnings():
        warnings.simplefilter("error", GlossaryWarning)
        bound = translator.translate(sentences, glossary=glossary)
        n_best = translator.translate(sentences, glossary=glossary, n_best=3)
    for sentence, translation, before, hypotheses in zip(sentences, bound, plain, n_best):
        asked, _ = glossary.constraints(sentence)
        if not asked:
            assert translation == before  # a sentence without a term: as without the glossary
            continue
        tokens = _pieces(translator, translation)
        for alternatives in asked:
            assert any(_holds(tokens, _pieces(translator, text)) for text in alternatives), (
                sentence, translation, alternatives)
        assert hypotheses[0][0] == translation
    # Alone or among the others: the same.
    assert [translator.translate([s], glossary=glossary)[0] for s in sentences] == bound


def test_under_a_glossary_one_search_is_traced_and_the_others_keep_their_results(small_run):
    """The sentences without a term, and the guard's searches of those that
    run away, go through the constrained search's trace with no
    constraints: the plain search is never traced (a trace is most of a
    short file's time), and their translations and scores are those
    without the glossary. (The small run's random model runs away on some
    of them, so the guard searches again under the glossary too.)"""
    sentences = ["das Haus ist groß.", "der Baum", "Haus Baum und", "ein Haus", "klein",
                 "ein Haus oder ein Baum ist nicht hier", "hier", "Haus Haus"]
    glossary = Glossary.of([("Baum", "Haus")], "de")
    fresh = Translator.from_directory(str(small_run))
    bound = fresh.translate(sentences, glossary=glossary, n_best=2)
    assert fresh._translate_n_best.experimental_get_tracing_count() == 0
    assert fresh._bound[False, False].experimental_get_tracing_count() == 1
    free = [i for i, sentence in enumerate(sentences) if not glossary.find(sentence)]
    unguarded = Translator.from_directory(str(small_run), guard=False).translate(
        [sentences[i] for i in free], n_best=2)
    assert any(fresh._guarded_flags(sentences[i], hypotheses[0][0], len(
        fresh.tokenizer.vocabulary.encode(sentences[i]))) for i, hypotheses in zip(free, unguarded))
    # (The same batches as the glossary's sentences without a term: a
    # sentence's score in another batch may differ by rounding.)
    plain = Translator.from_directory(str(small_run)).translate([sentences[i] for i in free],
                                                               n_best=2)
    assert [bound[i] for i in free] == plain


def test_too_many_terms_and_unplaceable_terms_are_warned_of_by_sentence(translator):
    words = ["Haus", "Baum", "groß", "klein", "hier"]
    glossary = Glossary.of([(word, target) for word, target in zip(
        words, ["der", "die", "das", "ein", "eine"])], "de")
    with pytest.warns(GlossaryWarning, match=r"Sentence 1 holds 5 terms .* kept the first 4, "
                                             r"left out 'hier'"):
        translator.translate(["klein", "Haus Baum groß klein hier"], glossary=glossary)
    # A sentence of one word has an output limit of 1 + the margin, 6 tokens:
    # a term of 7 tokens cannot be placed before it.
    long = " ".join(WORDS[:7])
    assert len(_pieces(translator, long)) > CONFIG.decode_margin - 5
    with pytest.warns(GlossaryWarning, match=r"Sentence 0: its translation does not hold"):
        translator.translate(["Haus"], glossary=Glossary.of([("Haus", long)], "de"))


def test_refusals_are_one_line(translator, small_run):
    long = " ".join(WORDS * 2)
    with pytest.raises(GlossaryError, match=r"line 1: the target term .* is \d+ tokens; a term "
                                            r"is 1 to 16"):
        translator.translate(["das Haus"], glossary=Glossary.of([("Haus", long)], "de"))
    slots = Translator.from_directory(str(small_run), slots=4)
    with pytest.raises(GlossaryError, match="searches slots"):
        slots.translate(["das Haus"], glossary=Glossary.of([("Haus", "Baum")], "de"))
