"""FsmtVocabulary against Hugging Face's FSMTTokenizer on the same small files."""

import json
import os
import random
import sys

import pytest
import transformers

from helpers.fsmt_files import SOURCE_CORPUS, TARGET_CORPUS, write_fsmt_tokenizer_files
from keras_transformer.vocabularies.fsmt import FsmtVocabulary

SENTENCES = [
    "The house is small, but the garden is very large.",
    "Hello, world! Isn't it great? (Yes - it is.)",
    '"Quotes", \'single\' & <angles> | [brackets] {braces} 50% $3.50 #1 @home',
    "Well-known brother-in-law: re-tokenized... --- ok!!",
    "Unknown characters: Zürich, ☃, 中文, emoji 🙂, ß and ǅ.",
    "Full-width，punctuation。 「quoted」 ％ … ！ ？ ’s — “curly”",
    "Control\u200bcharacters\x00 and\ttabs\nand newlines\r\n",
    "Das Haus ist klein, aber der Garten ist sehr groß.",
    "Numbers 1,200.50 and 3.14 and 10:30",
    "Special strings <s> and </s> and <pad> and <unk> inside, a<s>b",
    "",
    "   ",
    "x",
    ".",
]


def long_sentence(words=3000):
    pool = (SOURCE_CORPUS + " " + TARGET_CORPUS + " ☃ Zürich 中文 ,,, ... --").split()
    rng = random.Random(7)
    return " ".join(rng.choice(pool) for _ in range(words))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fsmt")
    write_fsmt_tokenizer_files(directory)
    return directory


@pytest.fixture(scope="module")
def vocabulary(folder):
    return FsmtVocabulary.from_directory(folder)


@pytest.fixture(scope="module")
def reference(folder):
    return transformers.FSMTTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def target_reference(folder):
    """FSMTTokenizer with the sides swapped: it encodes target text."""
    return transformers.FSMTTokenizer(
        langs=["de", "en"],
        src_vocab_file=os.path.join(folder, "vocab-tgt.json"),
        tgt_vocab_file=os.path.join(folder, "vocab-src.json"),
        merges_file=os.path.join(folder, "merges.txt"),
    )


def before_end(ids, end_id=2):
    return ids[:ids.index(end_id)] if end_id in ids else ids


def reference_ids(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert ids[-1] == tokenizer.sep_token_id
    return ids[:-1]


def test_helper_files(folder):
    files = write_fsmt_tokenizer_files(folder / "again")
    for name in ("vocab-src.json", "vocab-tgt.json", "merges.txt", "tokenizer_config.json"):
        assert (folder / "again" / name).read_bytes() == (folder / name).read_bytes()
    source = json.loads((folder / "vocab-src.json").read_text(encoding="utf-8"))
    target = json.loads((folder / "vocab-tgt.json").read_text(encoding="utf-8"))
    for vocab, size in ((source, files.src_vocab_size), (target, files.tgt_vocab_size)):
        assert len(vocab) == size and sorted(vocab.values()) == list(range(size))
        assert [vocab[s] for s in ("<s>", "<pad>", "</s>", "<unk>")] == [0, 1, 2, 3]
        assert any(piece.endswith("</w>") and len(piece) > 5 for piece in vocab)  # real merges
    assert source != target
    assert len(files.merges) > 50
    assert files.langs == ("en", "de")


def test_ids_and_sizes(vocabulary, reference):
    assert (vocabulary.bos_id, vocabulary.pad_id, vocabulary.eos_id, vocabulary.unk_id) == (0, 1, 2, 3)
    assert vocabulary.pad_id == reference.pad_token_id
    assert vocabulary.unk_id == reference.unk_token_id
    assert vocabulary.eos_id == reference.sep_token_id
    assert vocabulary.bos_id == reference.bos_token_id
    config = transformers.FSMTConfig(src_vocab_size=vocabulary.source_vocab_size,
                                     tgt_vocab_size=vocabulary.target_vocab_size)
    assert vocabulary.decoder_start_id == config.decoder_start_token_id == config.eos_token_id
    assert vocabulary.source_vocab_size == reference.src_vocab_size
    assert vocabulary.target_vocab_size == reference.tgt_vocab_size
    assert (vocabulary.source_language, vocabulary.target_language) == ("en", "de")
    assert vocabulary.do_lower_case is False


@pytest.mark.parametrize("text", SENTENCES)
def test_encode_matches(vocabulary, reference, text):
    assert vocabulary.encode(text) == reference_ids(reference, text)


def test_encode_covers_merges_and_unknowns(vocabulary, reference):
    ids = vocabulary.encode(SENTENCES[0] + " " + SENTENCES[4])
    assert vocabulary.unk_id in ids
    assert any(piece.endswith("</w>") and len(piece) > 5 for piece in vocabulary.pieces(ids))
    assert vocabulary.encode(b"The house") == vocabulary.encode("The house")
    with pytest.raises(TypeError):
        vocabulary.encode(None)


def test_long_input(vocabulary, reference, target_reference):
    text = long_sentence()
    ids = vocabulary.encode(text)
    assert len(ids) > 3000
    assert ids == reference_ids(reference, text)
    target_ids = vocabulary.encode_target(text)
    assert target_ids == reference_ids(target_reference, text)
    assert vocabulary.decode(target_ids) == reference.decode(target_ids, skip_special_tokens=True)


@pytest.mark.parametrize("text", SENTENCES)
def test_encode_target_matches_swapped_tokenizer(vocabulary, target_reference, text):
    assert vocabulary.encode_target(text) == reference_ids(target_reference, text)


@pytest.mark.parametrize("text", SENTENCES + [TARGET_CORPUS])
def test_decode_matches(vocabulary, reference, text):
    ids = vocabulary.encode_target(text)
    assert vocabulary.decode(ids) == reference.decode(before_end(ids), skip_special_tokens=True)


def test_decode_of_its_own_corpus_round_trips(vocabulary):
    # (Lines that Moses' normalisation and detokenization give back unchanged.)
    lines = TARGET_CORPUS.splitlines()
    for line in [lines[0], *lines[5:8], lines[9]]:
        assert vocabulary.decode(vocabulary.encode_target(line)) == line


def test_decode_random_ids_and_specials(vocabulary, reference):
    rng = random.Random(3)
    for _ in range(200):
        ids = [rng.randrange(vocabulary.target_vocab_size) for _ in range(rng.randrange(0, 30))]
        assert vocabulary.decode(ids) == reference.decode(before_end(ids), skip_special_tokens=True), ids


def test_decode_stops_at_the_first_end_id(vocabulary, reference):
    body = vocabulary.encode_target("Das Haus ist klein.")
    assert vocabulary.decode(body + [2, 1, 1]) == vocabulary.decode(body)
    assert vocabulary.decode(body + [2] + body) == vocabulary.decode(body)
    assert vocabulary.decode([0, 1] + body + [3, 1]) == reference.decode(body, skip_special_tokens=True)
    assert vocabulary.decode([2] + body) == ""
    assert vocabulary.decode([]) == ""
    import numpy as np

    assert vocabulary.decode(np.array(body + [2], np.int64)) == vocabulary.decode(body)
    for bad in ([vocabulary.target_vocab_size], [-1]):
        with pytest.raises(ValueError, match="outside"):
            vocabulary.decode(bad)


def test_pieces(vocabulary, reference):
    text = SENTENCES[0]
    source_vocab = reference.get_src_vocab()
    expected = [p if p in source_vocab else "<unk>" for p in reference.tokenize(text)]
    assert vocabulary.pieces(vocabulary.encode(text)) == expected
    target_ids = vocabulary.encode_target(SENTENCES[7])
    assert vocabulary.pieces(target_ids, target=True) == reference.convert_ids_to_tokens(target_ids)
    with pytest.raises(ValueError, match="outside"):
        vocabulary.pieces([vocabulary.source_vocab_size])
    assert vocabulary.piece(2, target=True) == "</s>"
    assert vocabulary.source_vocab == reference.get_src_vocab()
    assert vocabulary.target_vocab == {piece: index for index, piece in reference.decoder.items()}
    assert vocabulary.special_ids == {0, 1, 2, 3}


def test_lower_case(tmp_path):
    write_fsmt_tokenizer_files(tmp_path, do_lower_case=True)
    vocabulary = FsmtVocabulary.from_directory(tmp_path)
    reference = transformers.FSMTTokenizer.from_pretrained(tmp_path)
    assert vocabulary.do_lower_case
    for text in SENTENCES[:5] + ["THE HOUSE <S> <s>"]:
        assert vocabulary.encode(text) == reference_ids(reference, text)
    assert vocabulary.encode("THE HOUSE") == vocabulary.encode("the house")


def test_other_language_pair(tmp_path):
    write_fsmt_tokenizer_files(tmp_path, langs=("de", "en"))
    vocabulary = FsmtVocabulary.from_directory(tmp_path)
    reference = transformers.FSMTTokenizer.from_pretrained(tmp_path)
    for text in SENTENCES:
        assert vocabulary.encode(text) == reference_ids(reference, text)
        ids = vocabulary.encode_target(text)
        assert vocabulary.decode(ids) == reference.decode(before_end(ids), skip_special_tokens=True)


def test_bpe_edge_cases(tmp_path):
    """Repeated pairs, a merge listed twice, merge results missing from the
    vocabulary, and a last line without a newline (which FSMT ignores)."""
    pieces = ["a", "aa", "a</w>", "aa</w>", "aaa</w>", "b", "b</w>", "ab", "ba</w>"]
    vocab = {s: i for i, s in enumerate(["<s>", "<pad>", "</s>", "<unk>"] + pieces)}
    for name in ("vocab-src.json", "vocab-tgt.json"):
        (tmp_path / name).write_text(json.dumps(vocab), encoding="utf-8")
    merges = "a a\na a</w>\naa a</w>\nb a</w>\na b\n\na a\nab ab\nb b</w>"  # no final newline
    (tmp_path / "merges.txt").write_text(merges, encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"langs": ["en", "en"]}), encoding="utf-8")
    vocabulary = FsmtVocabulary.from_directory(tmp_path)
    reference = transformers.FSMTTokenizer.from_pretrained(tmp_path)
    words = ["a", "aa", "aaa", "aaaa", "aaaaa", "aaaaaaa", "ab", "abab", "ababab", "ba", "bba", "abba", "bb", "baaab"]
    text = " ".join(words)
    assert reference.tokenize(text) == [p for w in words for p in vocabulary._bpe(w)]
    assert vocabulary.encode(text) == reference_ids(reference, text)
    assert vocabulary.decode(vocabulary.encode(text)) == reference.decode(vocabulary.encode(text),
                                                                         skip_special_tokens=True)


def test_save_round_trip(vocabulary, tmp_path):
    vocabulary.save(tmp_path / "ours")
    again = FsmtVocabulary.from_directory(tmp_path / "ours")
    reference = transformers.FSMTTokenizer.from_pretrained(tmp_path / "ours")
    text = SENTENCES[1] + " " + SENTENCES[4]
    assert again.encode(text) == vocabulary.encode(text) == reference_ids(reference, text)
    ids = vocabulary.encode_target(TARGET_CORPUS)
    assert again.decode(ids) == vocabulary.decode(ids)
    # And the files as FSMTTokenizer.save_pretrained writes them.
    reference.save_pretrained(tmp_path / "theirs")
    theirs = FsmtVocabulary.from_directory(tmp_path / "theirs")
    assert theirs.encode(text) == vocabulary.encode(text)
    assert theirs.decode(ids) == vocabulary.decode(ids)


def _copy(folder, destination):
    destination.mkdir()
    for name in os.listdir(folder):
        if os.path.isfile(folder / name):
            (destination / name).write_bytes((folder / name).read_bytes())
    return destination


@pytest.mark.parametrize("name", ["vocab-src.json", "vocab-tgt.json", "merges.txt", "tokenizer_config.json"])
def test_missing_file(folder, tmp_path, name):
    broken = _copy(folder, tmp_path / "broken")
    os.remove(broken / name)
    with pytest.raises(ValueError, match=f"{name} is missing") as error:
        FsmtVocabulary.from_directory(broken)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("name, content, message", [
    ("vocab-src.json", '{"<s>": 0, "<pad>": ', "not valid UTF-8 JSON"),
    ("vocab-tgt.json", b"\xff\xfe\x00", "not valid UTF-8 JSON"),
    ("vocab-src.json", "[1, 2, 3]", "not an FSMT vocabulary"),
    ("vocab-src.json", '{"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 5}', "0 to 3"),
    ("vocab-tgt.json", '{"<s>": 0, "<pad>": "1"}', "integer ids"),
    ("vocab-tgt.json", '{"<s>": 0, "<pad>": 1, "</s>": 2, "x": 3}', "unk_token"),
    ("merges.txt", "", "holds no merges"),
    ("tokenizer_config.json", "{}", "langs"),
    ("tokenizer_config.json", '{"langs": ["en"]}', "langs"),
    ("tokenizer_config.json", '{"langs": ["en", "de"], "do_lower_case": "yes"}', "do_lower_case"),
    ("tokenizer_config.json", '{"langs": ["en", "de"], "added_tokens_decoder": {"77": {}}}', "added tokens"),
])
def test_corrupt_file(folder, tmp_path, name, content, message):
    broken = _copy(folder, tmp_path / "broken")
    (broken / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=message) as error:
        FsmtVocabulary.from_directory(broken)
    assert "\n" not in str(error.value)
    assert str(broken) in str(error.value)


def test_not_a_directory(tmp_path):
    with pytest.raises(ValueError, match="not a directory"):
        FsmtVocabulary.from_directory(tmp_path / "nothing")


def test_without_sacremoses(folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "sacremoses", None)
    with pytest.raises(ImportError, match=r"pip install sacremoses.*keras-transformer\[pretrained\]"):
        FsmtVocabulary.from_directory(folder)
