"""OPUS-MT tokenization: `MarianVocabulary` (Python) and `MarianTokenizer`
(TensorFlow graph) give exactly the ids and texts of Hugging Face's
`MarianTokenizer`, on tiny SentencePiece models trained here."""

import json
import os
import random

import pytest
import tensorflow as tf

from helpers.marian_files import sentence_pairs, write_marian_tokenizer_files
from keras_transformer.pretrained.marian_tokenizer import MarianTokenizer
from keras_transformer.vocabularies.marian import MarianVocabulary

VARIANTS = {
    "shared": {},
    "shared_codes": {"language_codes": True},
    "separate": {"separate_vocabs": True},
    "separate_codes": {"separate_vocabs": True, "language_codes": True},
}

_PAIRS = sentence_pairs(count=6)
TEXTS = [text for pair in _PAIRS for text in pair] + [
    "",
    " ",
    " \t\n\u3000\xa0 ",
    "Der König liest 中文 und 😀!",
    "e\u0301 cafe\u0301 Cafe\u0301 \u212b \ufb01 \u00bd",  # combining accents, NFKC cases
    "Zwölf  Äpfel\u200b\x00,   bitte\u2028.",
    ">>fra<< Der Hund sieht das Buch.",
    ">>deu<<The dog opens the door.",
    ">>xyz<< unknown code",
    ">> x << not quite a code",
    "a >>fra<< inside",
    "Text with </s> and <unk> and<pad>in it, then </s>>>fra<<after",
    "▁Der ▁▁Hund",
    " ".join(["Der Hund sieht das Buch."] * 150) + " 中文" * 100,  # thousands of characters
]
# Random texts of tricky pieces, for both sides.
_ALPHABET = list("abeDHKüßé. ") + [
    "</s>", "<unk>", "<pad>", ">>", "<<", "<", ">", "\u3000", "\xa0", "\t", "\n", "\u200b",
    "中", "😀", "\u0301", "▁", "fra", "Hund ", "The ", "\u2028", "\x1c", "\x0b", "\u1680", "\x85"]
_random = random.Random(0)
FUZZ = ["".join(_random.choice(_ALPHABET) for _ in range(_random.randrange(14))) for _ in range(200)]


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, tmp_path_factory):
    """(MarianFiles, Hugging Face tokenizer, MarianVocabulary) per variant."""
    files = write_marian_tokenizer_files(tmp_path_factory.mktemp(request.param), **VARIANTS[request.param])
    return files, files.hf_tokenizer(), MarianVocabulary.from_directory(files.directory)


def _hf_ids(hf, text, target=False):
    ids = hf(text_target=text)["input_ids"] if target else hf(text)["input_ids"]
    assert ids[-1] == hf.eos_token_id
    return ids[:-1]


def _ragged(tokenizer_method, texts):
    function = tf.function(tokenizer_method, input_signature=[tf.TensorSpec([None], tf.string)])
    return function(tf.constant(texts)).to_list()


def test_vocabulary_attributes(variant):
    files, hf, vocabulary = variant
    assert (vocabulary.pad_id, vocabulary.eos_id, vocabulary.unk_id) == (
        hf.pad_token_id, hf.eos_token_id, hf.unk_token_id) == (files.pad_id, 0, 1)
    assert vocabulary.decoder_start_id == vocabulary.pad_id
    assert vocabulary.source_vocab_size == files.vocab_size == vocabulary.pad_id + 1
    assert vocabulary.target_vocab_size == files.target_vocab_size
    assert vocabulary.separate_vocabs == files.separate_vocabs
    assert vocabulary.language_codes == list(files.language_codes)
    tokenizer = MarianTokenizer(vocabulary)
    assert (tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.bos_id) == (
        files.pad_id, 0, 1, files.pad_id)
    assert (tokenizer.vocab_size, tokenizer.target_vocab_size) == (
        files.vocab_size, files.target_vocab_size)
    assert tokenizer.vocabulary is vocabulary


def test_ids_match_hugging_face(variant):
    _, hf, vocabulary = variant
    tokenizer = MarianTokenizer(vocabulary)
    texts = TEXTS + FUZZ
    source = [_hf_ids(hf, text) for text in texts]
    target = [_hf_ids(hf, text, target=True) for text in texts]
    assert [vocabulary.encode(text) for text in texts] == source
    assert [vocabulary.encode_target(text) for text in texts] == target
    assert _ragged(tokenizer.tokenize, texts) == source
    assert _ragged(tokenizer.tokenize_target, texts) == target
    # The cases that must not be vacuous: unknown characters and codes.
    assert vocabulary.unk_id in vocabulary.encode("中文")
    if vocabulary.language_codes:
        assert vocabulary.encode(">>fra<< Der")[0] == vocabulary.source_vocab[">>fra<<"]


def _decode_cases(hf, vocabulary):
    """Id sequences as a model generates them (ending in </s> and padding),
    and odd ones: unk, pad and the start id inside, language codes, nothing
    after the end id, an early end id, text after an end id."""
    eos, pad, unk = vocabulary.eos_id, vocabulary.pad_id, vocabulary.unk_id
    cases = [vocabulary.encode_target(text) + [eos, pad, pad] for text in TEXTS if "</s>" not in text]
    cases += [[pad] + vocabulary.encode_target(english) + [eos] for _, english in _PAIRS]
    some = vocabulary.encode_target("The dog sees the book.")
    cases += [
        [], [eos], [pad], [unk], [pad, eos, 5, 6], [eos, pad, pad],
        some[:2] + [unk] + some[2:], some[:3] + [pad, unk, pad] + some[3:],
        some + [eos] + some, some[:1] + [eos],
    ]
    cases += [[vocabulary.target_vocab[code]] + some for code in vocabulary.language_codes]
    rng = random.Random(1)
    cases += [[rng.randrange(vocabulary.target_vocab_size) for _ in range(rng.randrange(12))]
              for _ in range(100)]
    return cases


def _hf_decode(hf, ids, eos):
    """HF's decode of what precedes the first end id (what follows it in a
    generated sequence is padding, which HF skips too)."""
    return hf.decode(ids[:ids.index(eos)] if eos in ids else ids, skip_special_tokens=True)


def test_decode_matches_hugging_face(variant):
    _, hf, vocabulary = variant
    tokenizer = MarianTokenizer(vocabulary)
    cases = _decode_cases(hf, vocabulary)
    expected = [_hf_decode(hf, ids, vocabulary.eos_id) for ids in cases]
    assert [vocabulary.decode(ids) for ids in cases] == expected
    ragged = tf.ragged.constant(cases, dtype=tf.int32, row_splits_dtype=tf.int64)
    assert [text.decode() for text in tokenizer.detokenize(ragged).numpy()] == expected
    dense = ragged.to_tensor(default_value=vocabulary.pad_id)
    function = tf.function(tokenizer.detokenize, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    assert [text.decode() for text in function(dense).numpy()] == expected
    # Generated sequences (end id, then padding): HF on the whole sequence.
    generated = [ids for ids in cases if ids and ids[-1] in (vocabulary.eos_id, vocabulary.pad_id)
                 and vocabulary.eos_id in ids and set(ids[ids.index(vocabulary.eos_id):]) <= {
                     vocabulary.eos_id, vocabulary.pad_id}]
    assert len(generated) > 10
    assert [vocabulary.decode(ids) for ids in generated] == [
        hf.decode(ids, skip_special_tokens=True) for ids in generated]
    assert vocabulary.decode(vocabulary.encode_target("The dog sees the book.")) == "The dog sees the book."


def test_holes_in_the_vocabulary_decode_as_hugging_face(tmp_path):
    """Ids missing from vocab.json: HF decodes them with SentencePiece's own
    piece of that number, which for id 2 is SentencePiece's `</s>`, rendered
    as the text "</s> "."""
    files = write_marian_tokenizer_files(tmp_path)
    vocab = {piece: index for piece, index in files.vocab.items() if index not in (2, 5, 9)}
    with open(files.vocab_file, "w", encoding="utf-8") as file:
        json.dump(vocab, file)
    hf, vocabulary = files.hf_tokenizer(), MarianVocabulary.from_directory(tmp_path)
    tokenizer = MarianTokenizer(vocabulary)
    rng = random.Random(2)
    choices = [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, files.pad_id]
    cases = [[rng.choice(choices) for _ in range(rng.randrange(10))] for _ in range(200)] + [[3, 2, 4]]
    expected = [_hf_decode(hf, ids, vocabulary.eos_id) for ids in cases]
    assert "</s>" in expected[-1]
    assert [vocabulary.decode(ids) for ids in cases] == expected
    ragged = tf.ragged.constant(cases, dtype=tf.int32)
    assert [text.decode() for text in tokenizer.detokenize(ragged).numpy()] == expected


@pytest.mark.slow
def test_saved_model_round_trip(tmp_path):
    files = write_marian_tokenizer_files(tmp_path / "files", language_codes=True)
    tokenizer = MarianTokenizer.from_directory(files.directory)
    module = tf.Module()
    module.tokenizer = tokenizer
    module.tokenize = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    module.tokenize_target = tf.function(
        tokenizer.tokenize_target, input_signature=[tf.TensorSpec([None], tf.string)])
    module.detokenize = tf.function(
        tokenizer.detokenize, input_signature=[tf.TensorSpec([None, None], tf.int32)])
    tf.saved_model.save(module, str(tmp_path / "saved"))
    reloaded = tf.saved_model.load(str(tmp_path / "saved"))
    texts = tf.constant(TEXTS)
    assert reloaded.tokenize(texts).to_list() == tokenizer.tokenize(texts).to_list()
    assert reloaded.tokenize_target(texts).to_list() == tokenizer.tokenize_target(texts).to_list()
    ids = tokenizer.tokenize_target(texts).to_tensor(default_value=tokenizer.pad_id)
    ids = tf.concat([tf.fill([len(TEXTS), 1], tokenizer.bos_id), ids,
                     tf.fill([len(TEXTS), 1], tokenizer.eos_id)], axis=1)
    assert reloaded.detokenize(ids).numpy().tolist() == tokenizer.detokenize(ids).numpy().tolist()


def test_save_and_pieces(tmp_path):
    files = write_marian_tokenizer_files(tmp_path / "a", separate_vocabs=True)
    vocabulary = MarianVocabulary.from_directory(files.directory)
    vocabulary.save(tmp_path / "b")
    for name in ("source.spm", "target.spm", "vocab.json", "target_vocab.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert MarianVocabulary.from_directory(tmp_path / "b").separate_vocabs
    # A shared vocabulary saved over a separate one leaves no target_vocab.json.
    shared = write_marian_tokenizer_files(tmp_path / "c")
    MarianTokenizer.from_directory(shared.directory).save(tmp_path / "b")
    assert not (tmp_path / "b" / "target_vocab.json").exists()
    assert not MarianVocabulary.from_directory(tmp_path / "b").separate_vocabs

    ids = vocabulary.encode("Der Hund")
    by_id = {index: piece for piece, index in files.vocab.items()}
    assert vocabulary.pieces(ids) == [by_id[index] for index in ids]
    assert "".join(vocabulary.pieces(ids)).replace("\u2581", " ").strip() == "Der Hund"
    assert vocabulary.piece(vocabulary.pad_id) == "<pad>"
    assert vocabulary.pieces(vocabulary.encode_target("The dog"), target=True)[0].startswith("\u2581")
    tokenizer = MarianTokenizer(vocabulary)
    assert tokenizer.pieces(ids) == vocabulary.pieces(ids)
    target_ids = vocabulary.encode_target("The dog")
    assert tokenizer.target_pieces(target_ids) == vocabulary.pieces(target_ids, target=True)
    with pytest.raises(ValueError, match="not in the target vocabulary"):
        vocabulary.decode([vocabulary.target_vocab_size])


def _break(directory, name, content):
    path = os.path.join(directory, name)
    if content is None:
        os.remove(path)
    else:
        with open(path, "wb") as file:
            file.write(content)


@pytest.mark.parametrize("name, content, message", [
    ("source.spm", None, r"source\.spm does not exist"),
    ("vocab.json", None, r"vocab\.json does not exist"),
    ("target.spm", b"not a model", r"target\.spm is not a SentencePiece model"),
    ("vocab.json", b"{not json", r"vocab\.json is not valid UTF-8 JSON"),
    ("vocab.json", b'["</s>"]', r"vocab\.json is not a Marian vocabulary"),
    ("vocab.json", b'{"</s>": 0, "<unk>": 1}', r"vocab\.json has no <pad> entry"),
    ("vocab.json", b'{"</s>": 0, "<pad>": 2}', r"vocab\.json has no <unk> entry"),
    ("vocab.json", b'{"<unk>": 1, "<pad>": 2}', r"vocab\.json has no </s> entry"),
])
def test_clear_errors(tmp_path, name, content, message):
    write_marian_tokenizer_files(tmp_path)
    _break(tmp_path, name, content)
    with pytest.raises(ValueError, match=message):
        MarianVocabulary.from_directory(tmp_path)


def test_separate_vocabularies_must_share_special_ids(tmp_path):
    files = write_marian_tokenizer_files(tmp_path, separate_vocabs=True)
    target = dict(files.target_vocab, **{"<pad>": files.pad_id + 1})
    _break(tmp_path, "target_vocab.json", json.dumps(target).encode())
    with pytest.raises(ValueError, match=r"target_vocab\.json gives <pad> id"):
        MarianVocabulary.from_directory(tmp_path)
