"""Tiny OPUS-MT style tokenizer files (German -> English) for tests.

Real OPUS-MT model folders hold two SentencePiece models (`source.spm`,
`target.spm`) and a Marian vocabulary `vocab.json` (piece -> id) shared by
both sides: `</s>` = 0, `<unk>` = 1, then the pieces of both SentencePiece
models, and `<pad>` as the last id (Hugging Face's conversion appends it).
Models with separate vocabularies add `target_vocab.json`, built the same way
from the target model only, with `<pad>` at the same id as the source's.

`write_marian_tokenizer_files` trains two small unigram SentencePiece models
on made-up sentences (a fraction of a second; the trained bytes are cached per
process) and writes such a folder, so that tests can compare our tokenizer
with `transformers.MarianTokenizer` without downloading anything.
"""

import dataclasses
import functools
import io
import itertools
import json
import os

import sentencepiece

SPM_VOCAB_SIZE = 240
LANGUAGE_CODES = (">>fra<<", ">>deu<<")

_GERMAN = (
    ("Der Hund", "Die Katze", "Das Mädchen", "Ein alter Mann", "Meine Großmutter",
     "Der Lehrer", "Unsere Nachbarin", "Das kleine Kind", "Der Bäcker", "Die Ärztin",
     "Mein Bruder", "Die Studentin", "Der Polizist", "Eine junge Frau", "Der König"),
    ("sieht", "liest", "kauft", "mag", "findet", "öffnet", "schließt", "verkauft",
     "sucht", "braucht", "vergisst", "bringt", "zeichnet", "wäscht"),
    ("einen roten Apfel", "das Buch", "die Tür", "den langen Brief", "eine schöne Straße",
     "das Café", "zwölf Äpfel", "3 Flaschen Wasser", "den grünen Schlüssel",
     "ein warmes Brot", "die Zeitung von gestern", "das Fenster", "einen Regenschirm",
     "die Blumen", "ein Geschenk für Jürgen"),
    (".", "!", "?", " heute.", " im Garten.", ", oder nicht?", " um 7 Uhr.",
     " am Bahnhof.", " jeden Morgen.", " (wirklich)."),
)
_ENGLISH = (
    ("The dog", "The cat", "The girl", "An old man", "My grandmother",
     "The teacher", "Our neighbour", "The little child", "The baker", "The doctor",
     "My brother", "The student", "The policeman", "A young woman", "The king"),
    ("sees", "reads", "buys", "likes", "finds", "opens", "closes", "sells",
     "searches for", "needs", "forgets", "brings", "draws", "washes"),
    ("a red apple", "the book", "the door", "the long letter", "a beautiful street",
     "the café", "twelve apples", "3 bottles of water", "the green key",
     "a warm loaf", "yesterday's newspaper", "the window", "an umbrella",
     "the flowers", "a present for Jürgen"),
    (".", "!", "?", " today.", " in the garden.", ", doesn't it?", " at 7 o'clock.",
     " at the station.", " every morning.", " (really)."),
)


def sentence_pairs(count=1500):
    """`count` (German, English) pairs: the two languages' word lists are
    aligned item by item, so each English sentence translates its German one
    (for the SentencePiece models, and for training small models in tests).
    They are spread evenly over all combinations of the word lists."""
    combinations = list(itertools.product(*(range(len(part)) for part in _GERMAN)))
    step = max(1, len(combinations) // count)

    def sentence(parts, choice):
        words = [part[i] for part, i in zip(parts, choice)]
        return " ".join(words[:3]) + words[3]

    return [(sentence(_GERMAN, choice), sentence(_ENGLISH, choice))
            for choice in combinations[::step][:count]]


@functools.lru_cache(maxsize=None)
def _trained_spm(language):
    """The bytes of a unigram SentencePiece model (OPUS-MT's ids: <unk>=0,
    <s>=1, </s>=2, no padding piece) trained on one language."""
    sentences = [pair[0 if language == "de" else 1] for pair in sentence_pairs()]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model,
        vocab_size=SPM_VOCAB_SIZE,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        num_threads=1,
        minloglevel=2,
    )
    return model.getvalue()


def _spm_pieces(model_bytes):
    """The ordinary pieces of a SentencePiece model, in id order (no <unk>,
    <s>, </s>: Marian's vocabulary holds its own </s> and <unk>)."""
    processor = sentencepiece.SentencePieceProcessor()
    processor.LoadFromSerializedProto(model_bytes)
    return [
        processor.id_to_piece(i) for i in range(processor.vocab_size())
        if not (processor.is_control(i) or processor.is_unknown(i))
    ]


def _marian_vocab(piece_lists, language_codes):
    """`</s>`=0, `<unk>`=1, language codes, the pieces (first occurrence
    wins), and `<pad>` as the last id."""
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in itertools.chain(language_codes, *piece_lists):
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    return vocab


@dataclasses.dataclass(frozen=True)
class MarianFiles:
    """What `write_marian_tokenizer_files` wrote.

    Attributes:
        directory: the folder.
        source_spm, target_spm, vocab_file: paths of `source.spm`,
            `target.spm`, `vocab.json`.
        target_vocab_file: path of `target_vocab.json`, or None when the
            vocabulary is shared.
        vocab, target_vocab: the piece -> id dicts (target_vocab is `vocab`
            when shared).
        pad_id, eos_id, unk_id: the special ids (the same on both sides).
        vocab_size, target_vocab_size: number of ids of each side (`<pad>` +
            1), what a Marian config's `vocab_size` / `decoder_vocab_size` hold.
        separate_vocabs: whether `target_vocab.json` exists.
        language_codes: the `>>xx<<` codes in the vocabulary (may be empty).
    """

    directory: str
    source_spm: str
    target_spm: str
    vocab_file: str
    target_vocab_file: str | None
    vocab: dict
    target_vocab: dict
    pad_id: int
    eos_id: int
    unk_id: int
    vocab_size: int
    target_vocab_size: int
    separate_vocabs: bool
    language_codes: tuple

    def hf_tokenizer(self):
        """`transformers.MarianTokenizer` on these files (imported here, so
        that only tests comparing with Hugging Face need transformers)."""
        import warnings

        from transformers import MarianTokenizer

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # sacremoses recommendation
            return MarianTokenizer(
                self.source_spm, self.target_spm, self.vocab_file,
                target_vocab_file=self.target_vocab_file,
                separate_vocabs=self.separate_vocabs,
            )


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as file:
        json.dump(data, file, ensure_ascii=False, indent=2)


def write_marian_tokenizer_files(directory, separate_vocabs=False, language_codes=False):
    """Writes `source.spm` (German), `target.spm` (English), `vocab.json` and,
    with `separate_vocabs`, `target_vocab.json` into `directory`.

    Args:
        directory: the folder (created if missing).
        separate_vocabs: write source pieces to `vocab.json` and target
            pieces to `target_vocab.json` (same number of ids, so `<pad>` has
            one id on both sides as Marian requires).
        language_codes: put `>>fra<<` and `>>deu<<` into the vocabulary
            (ids 2 and 3), as multilingual OPUS-MT models have.

    Returns:
        A `MarianFiles`.
    """
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    source_bytes, target_bytes = _trained_spm("de"), _trained_spm("en")
    paths = {name: os.path.join(directory, name) for name in
             ("source.spm", "target.spm", "vocab.json", "target_vocab.json")}
    with open(paths["source.spm"], "wb") as file:
        file.write(source_bytes)
    with open(paths["target.spm"], "wb") as file:
        file.write(target_bytes)
    codes = LANGUAGE_CODES if language_codes else ()
    source_pieces, target_pieces = _spm_pieces(source_bytes), _spm_pieces(target_bytes)
    if separate_vocabs:
        vocab = _marian_vocab([source_pieces], codes)
        target_vocab = _marian_vocab([target_pieces], codes)
        # Marian's separate vocabularies have one size (HF's conversion
        # assumes it); pad the shorter with unused placeholder pieces.
        for smaller in sorted((vocab, target_vocab), key=len)[:1]:
            del smaller["<pad>"]
            while len(smaller) < max(len(vocab), len(target_vocab)) - 1:
                smaller[f"<unused{len(smaller)}>"] = len(smaller)
            smaller["<pad>"] = len(smaller)
        _write_json(paths["target_vocab.json"], target_vocab)
    else:
        vocab = target_vocab = _marian_vocab([source_pieces, target_pieces], codes)
        if os.path.exists(paths["target_vocab.json"]):
            os.remove(paths["target_vocab.json"])
    _write_json(paths["vocab.json"], vocab)
    return MarianFiles(
        directory=directory,
        source_spm=paths["source.spm"],
        target_spm=paths["target.spm"],
        vocab_file=paths["vocab.json"],
        target_vocab_file=paths["target_vocab.json"] if separate_vocabs else None,
        vocab=vocab,
        target_vocab=target_vocab,
        pad_id=vocab["<pad>"],
        eos_id=vocab["</s>"],
        unk_id=vocab["<unk>"],
        vocab_size=max(vocab.values()) + 1,
        target_vocab_size=max(target_vocab.values()) + 1,
        separate_vocabs=separate_vocabs,
        language_codes=codes,
    )

