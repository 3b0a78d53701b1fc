"""Corpora, the Ding TFDS builder, the tokenizer and token-budget batching."""

import collections
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_transformer.data import (
    BOS_ID,
    EOS_ID,
    DingDeEn,
    Tokenizer,
    autotuned,
    batch_count,
    clean_texts,
    bucket_boundaries,
    shape_boundaries,
    corpus,
    encode_blocks,
    encode_pairs,
    length_report,
    block_token_batches,
    token_batches,
    train_tokenizer,
)
from keras_transformer.data import ding
from keras_transformer.data.tokenizer import input_tokenizer
from keras_transformer.names import TOKENIZER_TYPES

DING_LINES = [
    "# Version :: devel 2023-01-30",
    "# License :: GPL Version 2 or later; GNU General Public License",
    "Aalleiter {f}; Aaltreppe {f} (Wasserbau) | Aalleitern {pl}; Aaltreppen {pl} :: "
    "eel ladder (water engineering) | eel ladders",
    "Er ist nicht mehr der Jüngste. [übtr.] :: He's no spring chicken (any more). [fig.]",
    "Sie ruft alle naselang an <anruft>. :: She's forever ringing up/calling up [Br.].",
    "eins | zwei | drei :: one | two",  # misaligned: skipped
]


def _write_ding(path, extra=300):
    words = [f"Wort{i} {{n}} | Wörter{i} {{pl}} :: word{i} | words{i}" for i in range(extra)]
    path.write_text("\n".join(DING_LINES + words) + "\n", encoding="utf-8")
    return path


def test_ding_lines_are_cleaned_and_aligned():
    assert ding.parse_line(DING_LINES[2]) == [("Aalleiter", "eel ladder"), ("Aalleitern", "eel ladders")]
    assert ding.parse_line(DING_LINES[3]) == [("Er ist nicht mehr der Jüngste.", "He's no spring chicken.")]
    assert ding.parse_line(DING_LINES[4]) == [
        ("Sie ruft alle naselang an.", "She's forever ringing up/calling up.")
    ]
    assert ding.parse_line(DING_LINES[0]) == [] and ding.parse_line(DING_LINES[5]) == []


def test_ding_builder_splits_deterministically(tmp_path):
    source = _write_ding(tmp_path / "de-en")
    splits = {}
    for attempt in ("a", "b"):
        builder = DingDeEn(data_dir=str(tmp_path / attempt), source_path=str(source))
        builder.download_and_prepare()
        splits[attempt] = {
            split: [(e["de"].decode(), e["en"].decode()) for e in tfds.as_numpy(builder.as_dataset(split=split))]
            for split in ("train", "validation", "test")
        }
    assert splits["a"] == splits["b"]
    every_pair = [pair for line in source.read_text(encoding="utf-8").splitlines()
                  for pair in ding.parse_line(line)]
    found = [pair for split in splits["a"].values() for pair in split]
    assert sorted(found) == sorted(every_pair) and len(every_pair) == 604
    for split, pairs in splits["a"].items():
        assert pairs and all(ding.split_of(de) == split for de, _ in pairs)
    sizes = {split: len(pairs) for split, pairs in splits["a"].items()}
    assert sizes["train"] > 10 * (sizes["validation"] + sizes["test"]) / 2
    info = builder.info
    assert "GPL" in info.description and "trans-de-en" in info.description
    assert info.supervised_keys == ("de", "en")


def test_missing_ding_file_says_how_to_install_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="apt-get install trans-de-en"):
        corpus("ding", data_dir=str(tmp_path), ding_path=str(tmp_path / "missing")).pairs("train")


def test_ding_corpus_default_direction_and_reverse(tmp_path):
    source = _write_ding(tmp_path / "de-en")
    forward = corpus("ding", data_dir=str(tmp_path), ding_path=str(source))
    backward = corpus("ding", source_language="en", target_language="de",
                      data_dir=str(tmp_path), ding_path=str(source))
    (de, en), = forward.pairs("test").take(1)
    (en2, de2), = backward.pairs("test").take(1)
    assert (de.numpy(), en.numpy()) == (de2.numpy(), en2.numpy())


def _unbatched(batches):
    return [pair for sources, targets in batches.as_numpy_iterator() for pair in zip(sources, targets)]


@pytest.mark.slow
def test_pairs_read_in_batches_are_the_pairs_in_their_order(tmp_path):
    """What one pipeline worker reads: the same pairs as `pairs`, part by
    part, batch by batch; a TFDS dataset's from its record files."""
    ding_corpus = corpus("ding", data_dir=str(tmp_path), ding_path=str(_write_ding(tmp_path / "de-en")))
    tsv = tmp_path / "tsv"
    tsv.mkdir()
    (tsv / "train.tsv").write_text("".join(f"Satz {i}\tsentence {i}\n" for i in range(50)), encoding="utf-8")
    text = tmp_path / "text"
    text.mkdir()
    for language, word in (("de", "Zeile"), ("en", "line")):
        (text / f"train.{language}").write_text("".join(f"{word} {i}\n" for i in range(50)), encoding="utf-8")
    local_text = corpus(str(text), source_language="de", target_language="en")
    for source in (ding_corpus, corpus(str(tsv)), local_text):
        whole = list(source.pairs("train").as_numpy_iterator())
        assert len(whole) >= 50 and _unbatched(source.pairs("train", batch_size=16)) == whole
        shapes = [len(sources) for sources, _ in source.pairs("train", batch_size=16).as_numpy_iterator()]
        assert shapes[:-1] == [16] * (len(shapes) - 1) and 0 < shapes[-1] <= 16
        for index in range(3):
            part = list(source.pairs("train", part=(index, 3)).as_numpy_iterator())
            assert _unbatched(source.pairs("train", part=(index, 3), batch_size=7)) == part
    reverse = corpus("ding", source_language="en", target_language="de", data_dir=str(tmp_path),
                     ding_path=str(tmp_path / "de-en"))
    assert _unbatched(reverse.pairs("test", batch_size=4)) == [
        (en, de) for de, en in ding_corpus.pairs("test").as_numpy_iterator()]


def test_tfds_translation_dataset_with_mock_data():
    with tfds.testing.mock_data(num_examples=6):
        wmt = corpus("wmt14_translate/de-en", source_language="en", target_language="de")
        pairs = list(wmt.pairs("train").as_numpy_iterator())
        assert len(pairs) == 6 and all(isinstance(s, bytes) and isinstance(t, bytes) for s, t in pairs)
        ted = corpus("ted_hrlr_translate/pt_to_en")
        assert (ted.source_language, ted.target_language) == ("pt", "en")
        assert len(list(ted.pairs("validation"))) == 6


def test_unknown_dataset_and_language_errors(tmp_path):
    with pytest.raises(ValueError, match="Unknown dataset 'no_such_corpus'.*'ding'"):
        corpus("no_such_corpus")
    with pytest.raises(ValueError, match="has no language 'fr'"):
        corpus("wmt14_translate/de-en", source_language="fr")
    with pytest.raises(ValueError, match="Unknown split"):
        corpus("ding").pairs("dev")


def test_local_tsv_and_text_folders(tmp_path):
    tsv = tmp_path / "tsv"
    tsv.mkdir()
    (tsv / "train.tsv").write_text("Hallo Welt\thello world\nGuten Tag\tgood day\n", encoding="utf-8")
    pairs = list(corpus(str(tsv)).pairs("train").as_numpy_iterator())
    assert pairs == [(b"Hallo Welt", b"hello world"), (b"Guten Tag", b"good day")]
    (tsv / "test.tsv").write_bytes(b"Hallo\thello\nkein Tabulator\n\nStra\xdfe\tstreet\r\n")
    with pytest.raises(ValueError, match=r"test.tsv: no TAB in lines 2-3; every line must be "
                                         r"'source<TAB>target'"):
        corpus(str(tsv)).pairs("test")

    text = tmp_path / "text"
    text.mkdir()
    (text / "train.de").write_text("eins\nzwei\n", encoding="utf-8")
    (text / "train.en").write_text("one\ntwo\n", encoding="utf-8")
    (text / "validation.de").write_text("drei\n", encoding="utf-8")
    (text / "validation.en").write_text("three\nfour\n", encoding="utf-8")
    local = corpus(str(text), source_language="de", target_language="en")
    assert list(local.pairs("train").as_numpy_iterator()) == [(b"eins", b"one"), (b"zwei", b"two")]
    with pytest.raises(ValueError, match="has 1 lines but .* has 2"):
        local.pairs("validation")
    with pytest.raises(ValueError, match="give source_language and target_language"):
        corpus(str(text))


TOKENIZER_TEXTS = ([f"Das Haus {i} ist groß. The house {i} is big." for i in range(300)]
                   + ["Guten Morgen, wie geht es dir?", "Good morning, how are you?"] * 50)


@pytest.fixture(scope="module")
def tokenizer_model(tmp_path_factory):
    path = tmp_path_factory.mktemp("spm") / "spm.model"
    train_tokenizer(TOKENIZER_TEXTS, path, vocab_size=120)
    return path


@pytest.fixture
def tokenizer(tokenizer_model):
    # Made after the per-test seeding: tf.random.set_seed clears the kernel
    # cache that owns tf-text's SentencePiece resource.
    return Tokenizer(str(tokenizer_model))


def test_a_tokenizer_trained_without_a_path_is_the_same_and_leaves_no_file(
        tokenizer_model, tmp_path, monkeypatch):
    # What a multi-worker run's other workers and prepare-data do: they need
    # the model, not its file, and once left a folder in /tmp at each run.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    in_memory = train_tokenizer(TOKENIZER_TEXTS, None, vocab_size=120)
    assert os.listdir(tmp_path) == []
    written = Tokenizer(str(tokenizer_model))
    assert in_memory.vocab_size == written.vocab_size == 120
    assert in_memory.pieces(range(120)) == written.pieces(range(120))


def test_a_word_tokenizer_gives_one_token_a_word_and_other_types_are_refused(tmp_path):
    # The benchmarks' tokenizers (benchmarks/common.py, word_tokenizer):
    # n known words are exactly n tokens.
    words = [f"wort{chr(97 + i)}{chr(97 + j)}" for i in range(6) for j in range(6)]
    lines = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    tokenizer = train_tokenizer(lines, tmp_path / "words.model", vocab_size=40,
                                model_type="word")
    ids = tokenizer.tokenize(tf.constant([" ".join(words[:7]), words[35]]))
    assert ids.row_lengths().numpy().tolist() == [7, 1]
    assert tokenizer.pieces(ids[0].numpy().tolist()) == ["\u2581" + word for word in words[:7]]
    with pytest.raises(ValueError, match="model_type must be one of"):
        train_tokenizer(lines, tmp_path / "chars.model", vocab_size=40, model_type="char")


def test_tokenizer_round_trips_and_uses_fixed_special_ids(tokenizer):
    sentences = tf.constant(["Guten Morgen, wie geht es dir?", "The house 42 is big."])
    ids = tokenizer.tokenize(sentences)
    assert ids.dtype == tf.int32 and tokenizer.vocab_size == 120
    flat = ids.flat_values.numpy()
    assert flat.min() > EOS_ID and flat.max() < 120
    assert [s.decode() for s in tokenizer.detokenize(ids).numpy()] == [
        "Guten Morgen, wie geht es dir?", "The house 42 is big."]
    # Detokenising stops at the end id and skips start and padding ids.
    row = ids[0].numpy().tolist()
    padded = tf.constant([[BOS_ID] + row + [EOS_ID] + row + [0, 0]])
    assert tokenizer.detokenize(padded).numpy()[0].decode() == "Guten Morgen, wie geht es dir?"


def test_tokenizer_rejects_bad_model_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        Tokenizer(str(tmp_path / "missing.model"))
    broken = tmp_path / "broken.model"
    broken.write_bytes(b"not a sentencepiece model")
    with pytest.raises(ValueError, match="Not a SentencePiece model"):
        Tokenizer(str(broken))


def test_encode_pairs_adds_start_and_end(tokenizer):
    pairs = tf.data.Dataset.from_tensor_slices((["Guten Morgen"], ["Good morning"]))
    source, target, labels = next(iter(encode_pairs(pairs, tokenizer)))
    assert source.numpy()[-1] == EOS_ID and target.numpy()[0] == BOS_ID and labels.numpy()[-1] == EOS_ID
    np.testing.assert_array_equal(target.numpy()[1:], labels.numpy()[:-1])


def test_encode_pairs_repairs_training_text_as_translation_does(tokenizer):
    damaged = tf.data.Dataset.from_tensor_slices(([b"Guten\xff Morgen\x00dir"], [b"Good\xfe day"]))
    repaired = tf.data.Dataset.from_tensor_slices((["Guten\ufffd Morgen dir"], ["Good\ufffd day"]))
    for a, b in zip(next(iter(encode_pairs(damaged, tokenizer))),
                    next(iter(encode_pairs(repaired, tokenizer)))):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# Texts where two tokenizers could part: spaces, normalization (NFKC folds
# "ﬁ" and full-width letters), characters outside the vocabulary, repaired
# bytes, combining accents, control characters and a long line.
ODD_TEXTS = [b"", b" ", b"   Guten   Morgen  ", "Stra\u00dfe \ufb01nden \uff21\uff42c".encode(),
             "Emoji \U0001F600 und \u2713, \u6f22\u5b57, \u03a9\u03bc\u03ad\u03b3\u03b1".encode(),
             "Ke\u0301se".encode(), b"tab\tand\nnewline\r", b"Guten\xff Morgen\x00dir\xfe",
             b"The house 7 is big. " * 400]


def _ids(tokenize, texts):
    return tokenize(clean_texts(tf.constant(texts))).to_list()


@pytest.mark.parametrize("model_type", TOKENIZER_TYPES)
def test_input_tokenizer_gives_tf_text_s_ids(tmp_path, model_type):
    """Training input tokenizes batches of our model's text with the
    `sentencepiece` package (about twice as fast); its ids are tf-text's op's,
    which translation and the SavedModel use: for a batch, a single string,
    and in a dataset's pairs."""
    tokenizer = train_tokenizer(TOKENIZER_TEXTS, tmp_path / "spm.model", vocab_size=70,
                                model_type=model_type)
    texts = [text.encode() for text in TOKENIZER_TEXTS[::7]] + ODD_TEXTS
    want = _ids(tokenizer.tokenize, texts)
    assert len(want) == len(texts) and sum(map(len, want)) > 2000
    reader = input_tokenizer(tokenizer)
    assert _ids(reader.tokenize, texts) == _ids(reader.tokenize_target, texts) == want
    for text, ids in zip(texts[-4:], want[-4:]):
        assert reader.tokenize(clean_texts(tf.constant(text))).numpy().tolist() == ids
    pairs = tf.data.Dataset.from_tensor_slices((texts, texts[::-1]))
    blocks = encode_blocks(pairs, tokenizer, block=8)
    for blocked, one in zip(blocks.unbatch(), encode_pairs(pairs, tokenizer)):
        for got, expected in zip(blocked, one):
            assert got.numpy().tolist() == expected.numpy().tolist()
    # tf.data's autotuning is off where Python tokenizes, on again to read the cache.
    assert blocks.options().autotune.enabled is False
    assert autotuned(block_token_batches(blocks.cache(), 256, 64)).options().autotune.enabled


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=60), min_size=1, max_size=6))
def test_input_tokenizer_gives_tf_text_s_ids_for_any_text(tokenizer_model, texts):
    tokenizer = Tokenizer(str(tokenizer_model))
    texts = [text.encode() for text in texts]
    assert _ids(input_tokenizer(tokenizer).tokenize, texts) == _ids(tokenizer.tokenize, texts)


@pytest.mark.slow
def test_train_input_from_blocks_holds_every_pair_once_in_its_shapes(tokenizer):
    """`train`'s input from the raw corpus (blocks of pairs tokenized at
    once, `block_token_batches`, shuffled, fixed shapes or not) holds the
    pairs that tokenizing pair by pair gives, each once a pass, in the same
    order before the shuffle; its length report is the same."""
    rng = np.random.default_rng(3)
    words = ["Guten", "Morgen", "Abend", "Haus", "klein", "groß", "und", "der"]
    pairs = [(" ".join(rng.choice(words, rng.integers(1, 30))),
              " ".join(rng.choice(words, rng.integers(1, 30)))) for _ in range(700)]
    dataset = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*pairs))))
    one_by_one = list(encode_pairs(dataset, tokenizer).as_numpy_iterator())
    blocks = encode_blocks(dataset, tokenizer, block=64)
    in_blocks = []
    for block in blocks:
        in_blocks.extend(zip(*(ids.to_list() for ids in block)))
    assert len(in_blocks) == len(one_by_one) == len(pairs)
    for got, want in zip(in_blocks, one_by_one):
        assert [list(ids) for ids in got] == [list(ids) for ids in want]
    assert length_report(blocks, 24) == length_report(encode_pairs(dataset, tokenizer), 24)
    assert length_report(blocks, 24).dropped > 0
    kept = collections.Counter(tuple(labels) for source, _, labels in one_by_one
                               if max(len(source), len(labels)) <= 24)
    grid = shape_boundaries(24)
    for fixed_shapes in (False, True):
        seen = collections.Counter()
        for inputs, labels in block_token_batches(blocks, 192, 24, shuffle_buffer=300, seed=5,
                                                  fixed_shapes=fixed_shapes).as_numpy_iterator():
            assert labels.size <= 192 and inputs["source_ids"].size <= 192
            if fixed_shapes:
                assert labels.shape[1] in grid and labels.shape == inputs["source_ids"].shape
            seen.update(tuple(row[row != 0]) for row in labels if row.any())
        assert seen == kept


def _random_encoded(count=3000, seed=0, longest=90):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, longest, size=(count, 2))
    examples = [(rng.integers(4, 50, s).astype("int32"), rng.integers(4, 50, t + 1).astype("int32"),
                 rng.integers(4, 50, t + 1).astype("int32")) for s, t in lengths]
    spec = (tf.TensorSpec([None], tf.int32),) * 3
    return examples, tf.data.Dataset.from_generator(lambda: iter(examples), output_signature=spec)


def test_length_report_counts_what_is_dropped():
    examples, encoded = _random_encoded()
    report = length_report(encoded, max_length=64)
    too_long = sum(max(len(s), len(l)) > 64 for s, _, l in examples)
    assert (report.kept, report.dropped) == (len(examples) - too_long, too_long) and too_long > 0
    assert report.source_tokens == sum(len(s) for s, _, l in examples if max(len(s), len(l)) <= 64)
    assert f"{too_long} dropped" in str(report)


def test_token_batches_respect_the_budget_and_keep_padding_low():
    examples, encoded = _random_encoded()
    batches = list(token_batches(encoded, batch_tokens=1024, max_length=64, batch_multiple=2,
                                 shuffle_buffer=500, seed=1).as_numpy_iterator())
    seen = collections.Counter()
    real = padded = 0
    for inputs, labels in batches:
        source, target = inputs["source_ids"], inputs["target_ids"]
        assert source.size <= 1024 and labels.size <= 1024 and target.shape == labels.shape
        assert len(labels) % 2 == 0 or len(labels) < 2 * 16
        assert source.shape[1] <= 64 and labels.shape[1] <= 64
        seen.update(tuple(row[row != 0]) for row in labels)
        real += np.count_nonzero(labels) + np.count_nonzero(source)
        padded += labels.size + source.size
    kept = [l for s, _, l in examples if max(len(s), len(l)) <= 64]
    assert sum(seen.values()) == len(kept)  # every kept pair exactly once
    # Source and target lengths are independent here; bucketing on both keeps
    # padding low on both sides.
    assert real / padded > 0.85, real / padded


@pytest.mark.slow
def test_blocks_and_a_pass_count_give_token_batches_batches():
    examples, encoded = _random_encoded(count=3000, longest=12)
    expected = list(token_batches(encoded, 32, 8, pad_id=1, drop_remainder=True)
                    .as_numpy_iterator())
    got = list(block_token_batches(encoded.ragged_batch(100), 32, 8, pad_id=1, drop_remainder=True)
               .as_numpy_iterator())
    assert len(got) == len(expected) and len(expected) > 50
    for (inputs, labels), (want_inputs, want_labels) in zip(got, expected):
        np.testing.assert_array_equal(labels, want_labels)
        for key in ("source_ids", "target_ids"):
            np.testing.assert_array_equal(inputs[key], want_inputs[key])
    # Only full batches: their number is known from the lengths alone, in any order.
    lengths = tf.data.Dataset.from_tensor_slices(([len(e[0]) for e in examples[::-1]],
                                                  [len(e[2]) for e in examples[::-1]]))
    assert batch_count(lengths.batch(100), 32, 8) == len(expected)
    assert len(list(token_batches(encoded, 32, 8))) > len(expected)


@pytest.mark.slow
def test_fixed_shapes_are_few_and_hold_every_pair_once():
    # For steps compiled with XLA: each batch padded to its bucket's length
    # (both sides) and rows, rows a multiple of the replicas, the budget kept.
    examples, encoded = _random_encoded()
    grid = shape_boundaries(64)
    assert grid == [4, 6, 8, 12, 16, 24, 32, 48, 64] and shape_boundaries(5) == [4, 5]
    shapes, seen = set(), collections.Counter()
    for inputs, labels in token_batches(encoded, 1024, 64, batch_multiple=2, shuffle_buffer=500,
                                        seed=1, fixed_shapes=True).as_numpy_iterator():
        rows, length = labels.shape
        assert inputs["source_ids"].shape == inputs["target_ids"].shape == labels.shape
        assert length in grid and rows == 1024 // length // 2 * 2 and rows * length <= 1024
        shapes.add(labels.shape)
        seen.update(tuple(row[row != 0]) for row in labels if row.any())
    kept = [l for s, _, l in examples if max(len(s), len(l)) <= 64]
    assert sum(seen.values()) == len(kept)  # every kept pair once; padding rows hold nothing
    assert len(shapes) <= len(grid)
    # Blocks give the same batches, and a pass count knows how many.
    examples, encoded = _random_encoded(count=3000, longest=12)
    expected = list(token_batches(encoded, 48, 12, pad_id=1, drop_remainder=True,
                                  fixed_shapes=True).as_numpy_iterator())
    got = list(block_token_batches(encoded.ragged_batch(100), 48, 12, pad_id=1,
                                   drop_remainder=True, fixed_shapes=True).as_numpy_iterator())
    assert len(got) == len(expected) > 50
    for (inputs, labels), (want_inputs, want_labels) in zip(got, expected):
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(inputs["source_ids"], want_inputs["source_ids"])
    lengths = tf.data.Dataset.from_tensor_slices(([len(e[0]) for e in examples],
                                                  [len(e[2]) for e in examples]))
    assert batch_count(lengths.batch(100), 48, 12, fixed_shapes=True) == len(expected)


def test_bucket_boundaries_grow_to_max_length():
    boundaries = bucket_boundaries(256)
    assert boundaries[:20] == list(range(1, 21)) and boundaries[-1] == 256
    assert all(b > a for a, b in zip(boundaries, boundaries[1:]))
    assert all(b / a <= 1.15 for a, b in zip(boundaries[20:], boundaries[21:]))
    with pytest.raises(ValueError, match="cannot hold"):
        token_batches(tf.data.Dataset.range(1), batch_tokens=100, max_length=64, batch_multiple=2)
