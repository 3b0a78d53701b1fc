"""Alignment from the model's attention: each piece of a translation aligned
to the source piece its encoder-decoder attention weighs most (heads of the
chosen layer averaged), given as character spans of the two texts."""

import keras
import numpy as np
import pytest

from keras_transformer import run_folder
from keras_transformer.decoding import Translator, beam_search, greedy_search
from keras_transformer.decoding.alignment import alignment_layer, attention_alignments
from keras_transformer.models import BASE, transformer
from helpers.small_run import WORDS
from keras_transformer.vocabularies.offsets import piece_offsets


def test_each_target_piece_is_aligned_to_the_source_piece_it_attends_to_most(small_run):
    model, tokenizer = run_folder.load_model(small_run), run_folder.load_tokenizer(small_run)
    sources = ["das Haus ist groß", "der Baum"]
    translations = ["groß ist Haus das", "Baum der hier"]
    source_ids = [tokenizer.tokenize([text]).to_list()[0] for text in sources]
    target_ids = [tokenizer.tokenize_target([text]).to_list()[0] for text in translations]
    rng = np.random.default_rng(0)
    chosen = [rng.integers(0, len(s), size=len(t)) for s, t in zip(source_ids, target_ids)]
    heads, layers = model.config.num_heads, model.config.num_decoder_layers

    rows = {tuple(ids): row for row, ids in enumerate(source_ids)}

    def cross_attention(source, target, layer):
        """Cross-attention that puts each target piece on its chosen source
        piece (on average over the heads), noise elsewhere; the batch's rows
        told apart by their sources (the pairs come in length order)."""
        assert layer == alignment_layer(model) and layers > layer
        weights = rng.random((len(source), heads, target.shape[1], source.shape[1])) * 0.1
        for batch_row, ids in enumerate(source.tolist()):
            picks = chosen[rows[tuple(ids[:ids.index(model.config.eos_id)])]]
            for position, pick in enumerate(picks):
                weights[batch_row, 0, position, pick] += float(heads)  # one head: enough
        return weights

    model.cross_attention = cross_attention
    found = attention_alignments(model, tokenizer, sources, translations)
    for row, alignment in enumerate(found):
        source_spans = piece_offsets(sources[row], tokenizer.pieces(source_ids[row]))
        target_spans = piece_offsets(translations[row], tokenizer.target_pieces(target_ids[row]))
        expected = sorted((*target_spans[t], *source_spans[s]) for t, s in enumerate(chosen[row])
                          if target_spans[t][1] > target_spans[t][0]
                          and source_spans[s][1] > source_spans[s][0])
        assert list(alignment.pairs) == expected
        assert expected


def test_the_translator_aligns_its_own_translations_inside_both_texts(small_run):
    translator = Translator.from_directory(small_run)
    sources = ["das Haus ist groß.", "ein Baum und ein Haus", ""]
    translations = ["groß Haus.", "Baum", ""]
    alignments = translator.align(sources, translations)
    assert len(alignments) == 3 and alignments[2].pairs == ()
    for source, translation, alignment in zip(sources, translations, alignments):
        for t_start, t_end, s_start, s_end in alignment.pairs:
            assert 0 <= t_start < t_end <= len(translation)
            assert 0 <= s_start < s_end <= len(source)
    assert alignment_layer(translator.model) == max(translator.model.config.num_decoder_layers - 2,
                                                    0)


@pytest.mark.parametrize("search, options", [  # the quick tier has greedy search's
    pytest.param(beam_search, {"beam_size": 3}, marks=pytest.mark.slow),
    pytest.param(beam_search, {"beam_size": 3, "best_only": True}, marks=pytest.mark.slow),
    pytest.param(beam_search, {"beam_size": 3, "static_cache": True}, marks=pytest.mark.slow),
    pytest.param(beam_search, {"beam_size": 3, "drop_finished": False}, marks=pytest.mark.slow),
    (greedy_search, {}),
])
def test_a_search_keeps_the_attention_a_second_pass_reads(search, options):
    """With `alignment_layer`, a search's tokens and scores are unchanged,
    and the position kept for each token is where the teacher-forced pass
    (`Transformer.cross_attention`, heads averaged) attends most when it
    predicts that token."""
    keras.utils.set_random_seed(3)
    config = BASE.replace(num_encoder_layers=1, num_decoder_layers=2, d_model=32, d_ff=64,
                          num_heads=4, dropout=0.0, max_length=16, decode_margin=4)
    model = transformer(config, 40)
    for weight in model.weights:  # peaked distributions: outputs of several lengths, few ties
        if "embeddings" in weight.path:
            weight.assign(weight * 4.0)
    rng = np.random.default_rng(0)
    lengths = [3, 7, 5, 9]
    source = np.full((len(lengths), max(lengths) + 1), config.pad_id, np.int32)
    for row, length in enumerate(lengths):
        source[row, :length] = rng.integers(4, 40, length)
        source[row, length] = config.eos_id
    layer = 0
    plain = search(model, source, **options)
    aligned = search(model, source, alignment_layer=layer, **options)
    np.testing.assert_array_equal(aligned.tokens, plain.tokens)
    np.testing.assert_allclose(aligned.scores, plain.scores, atol=1e-5)
    assert plain.attended is None and aligned.attended.shape == aligned.tokens.shape
    checked = 0
    for row in range(len(lengths)):
        for hypothesis in range(aligned.tokens.shape[1]):
            tokens = aligned.tokens[row, hypothesis].numpy().tolist()
            if config.eos_id not in tokens:
                continue  # a hypothesis never finished (fewer than K)
            length = tokens.index(config.eos_id) + 1
            prefix = np.array([[config.decoder_start_id] + tokens[:length - 1]], np.int32)
            weights = np.asarray(model.cross_attention(source[row:row + 1], prefix, layer))
            weights = weights.mean(axis=1)[0][:, :lengths[row]]  # (length, source), no end
            kept = aligned.attended[row, hypothesis].numpy()
            assert (kept[length:] == 0).all()
            for position in range(length):
                top = np.sort(weights[position])[-2:]
                if top[1] - top[0] > 1e-4:  # a clear winner (rounding may swap near ties)
                    assert kept[position] == weights[position].argmax()
                    checked += 1
    assert checked > 20


@pytest.mark.slow
def test_the_translator_keeps_the_alignment_its_second_pass_would_give(small_run):
    """`translate(..., aligned=True)` gives the translations of `translate`
    and, from the search, the alignments `align` reads in a second pass
    (without the guard, whose cut translations keep part of theirs)."""
    translator = Translator.from_directory(small_run, guard=False)
    rng = np.random.default_rng(1)
    sources = [" ".join(rng.choice(WORDS, size=rng.integers(2, 9))) + "." for _ in range(24)]
    found = translator.translate(sources + [""], aligned=True)
    translations = [translation for translation, _ in found]
    assert translations == translator.translate(sources + [""])
    assert found[-1][1].pairs == ()
    # The second pass reads a translation tokenized again, which for a
    # random model's output is not always the search's own pieces: compare
    # where it is.
    config, tokenizer = translator.model.config, translator.tokenizer
    rows = [tokenizer.tokenize([source]).to_list()[0] + [config.eos_id] for source in sources]
    source = np.full((len(rows), max(map(len, rows))), config.pad_id, np.int32)
    for index, row in enumerate(rows):
        source[index, :len(row)] = row
    searched = beam_search(translator.model, source, beam_size=translator.beam_size,
                           best_only=True).tokens[:, 0].numpy().tolist()
    same_pieces = [index for index, translation in enumerate(translations[:-1])
                   if tokenizer.tokenize_target([translation]).to_list()[0]
                   == searched[index][:searched[index].index(config.eos_id)]]
    assert len(same_pieces) >= len(sources) // 2
    second = translator.align([sources[i] for i in same_pieces],
                              [translations[i] for i in same_pieces])
    assert [found[i][1].pairs for i in same_pieces] == [read.pairs for read in second]
    assert sum(len(kept.pairs) for _, kept in found) > 3 * len(sources)
    with pytest.raises(ValueError, match="n_best must be None or 1"):
        translator.translate(sources, n_best=2, aligned=True)


def test_the_keras_runtime_aligns_its_own_translations_from_their_search(small_run):
    from keras_transformer import runtimes

    runtime = runtimes.open_runtime(small_run, "keras")
    sources = ["das Haus ist groß.", "der Baum und ein Haus"]
    best = [found[0][0] for found in runtime.translate(sources)]
    calls = []
    second_pass = runtime.translator.align
    runtime.translator.align = lambda *args: calls.append(args) or second_pass(*args)
    kept = runtime.align(sources, best)
    assert calls == []  # kept from the search
    other = runtime.align(["die Tür"], ["door"])
    assert len(calls) == 1 and len(other) == 1
    searched = runtime.translator.translate(sources, aligned=True)
    assert [a.pairs for a in kept] == [alignment.pairs for _, alignment in searched]
