"""Small FSMT tokenizer folders for tests, in the layout of the Hugging Face
`facebook/wmt19-*` checkpoints: `vocab-src.json`, `vocab-tgt.json`,
`merges.txt` and `tokenizer_config.json`.

The merges are learnt here from a tiny two-language corpus with a plain
byte-pair-encoding loop (most frequent adjacent pair first), over words as the
Moses tokenizer splits them, each word ending in a `</w>` symbol as FSMT
writes them. Each side's vocabulary holds fairseq's four special symbols
(`<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3) and then the pieces that side's
corpus breaks into, most frequent first. Both sides share the merges but not
the vocabulary, as in the English-Russian checkpoints, so that a piece of the
other language is unknown.

`write_fsmt_tokenizer_files` needs `sacremoses`; it does not need
`transformers`. Size an `FSMTConfig` with the returned vocabulary sizes to
build a whole model folder next to these files.
"""

import collections
import dataclasses
import json
import os

SPECIAL_SYMBOLS = ("<s>", "<pad>", "</s>", "<unk>")

SOURCE_CORPUS = """\
The house is small, but the garden is very large.
This is a small test of the tokenizer: does it work?
"Hello," she said. "Where is the station?"
We don't know whether the train arrives at 10:30 or at 11:45.
The committee's report costs $1,200.50 - about 1.100 euros.
Machine learning is great, isn't it?
The translation of long sentences is harder than the translation of short ones.
My brother-in-law lives in a well-known city (near the river).
Numbers like 3.14, 2,718 and 42 are tokenized as well.
The quick brown fox jumps over the lazy dog; the dog sleeps on.
"""

TARGET_CORPUS = """\
Das Haus ist klein, aber der Garten ist sehr groß.
Dies ist ein kleiner Test des Tokenisierers: funktioniert er?
„Hallo", sagte sie. „Wo ist der Bahnhof?"
Wir wissen nicht, ob der Zug um 10:30 oder um 11:45 ankommt.
Der Bericht des Ausschusses kostet 1.200,50 $ - etwa 1.100 Euro.
Maschinelles Lernen ist großartig, nicht wahr?
Die Übersetzung langer Sätze ist schwerer als die Übersetzung kurzer Sätze.
Mein Schwager wohnt in einer bekannten Stadt (in der Nähe des Flusses).
Zahlen wie 3,14, 2.718 und 42 werden ebenfalls zerlegt.
Der schnelle braune Fuchs springt über den faulen Hund; der Hund schläft weiter.
"""


@dataclasses.dataclass(frozen=True)
class FsmtTokenizerFiles:
    """What `write_fsmt_tokenizer_files` wrote."""

    directory: str
    langs: tuple
    src_vocab_size: int
    tgt_vocab_size: int
    merges: tuple


def _split_word(word):
    return tuple(word[:-1]) + (word[-1] + "</w>",)


def _apply_merge(symbols, pair):
    merged, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            merged.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            merged.append(symbols[i])
            i += 1
    return tuple(merged)


def learn_bpe(word_counts, num_merges, min_count=2):
    """Greedy BPE learning: repeatedly join the most frequent adjacent pair.

    Args:
        word_counts: {word: count}.
        num_merges: the most merges to learn.
        min_count: stop when no pair occurs this often.

    Returns:
        (merges, segmentation): the merges in the order learnt, and each
        word's symbols after all of them.
    """
    segmentation = {word: _split_word(word) for word in word_counts}
    merges = []
    for _ in range(num_merges):
        pair_counts = collections.Counter()
        for word, symbols in segmentation.items():
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] += word_counts[word]
        if not pair_counts:
            break
        # Most frequent first; ties go to the alphabetically larger pair, so
        # that the result does not depend on dictionary order.
        best = max(pair_counts, key=lambda pair: (pair_counts[pair], pair))
        if pair_counts[best] < min_count:
            break
        merges.append(best)
        segmentation = {word: _apply_merge(symbols, best) for word, symbols in segmentation.items()}
    return merges, segmentation


def _moses_words(corpus, lang):
    import sacremoses

    tokenizer = sacremoses.MosesTokenizer(lang=lang)
    counts = collections.Counter()
    for line in corpus.splitlines():
        counts.update(tokenizer.tokenize(line, aggressive_dash_splits=True, escape=True))
    return counts


def _vocabulary(word_counts, segmentation):
    piece_counts = collections.Counter()
    for word, count in word_counts.items():
        for piece in segmentation[word]:
            piece_counts[piece] += count
    pieces = sorted(piece_counts, key=lambda piece: (-piece_counts[piece], piece))
    return {symbol: index for index, symbol in enumerate(list(SPECIAL_SYMBOLS) + pieces)}


def write_fsmt_tokenizer_files(directory, langs=("en", "de"), num_merges=150, do_lower_case=False):
    """Writes a small FSMT tokenizer folder and returns its `FsmtTokenizerFiles`.

    Args:
        directory: the folder (created if need be).
        langs: (source, target) language codes, as FSMT's `langs`.
        num_merges: the most BPE merges to learn.
        do_lower_case: written to `tokenizer_config.json`.
    """
    source_lang, target_lang = langs
    source_words = _moses_words(SOURCE_CORPUS, source_lang)
    target_words = _moses_words(TARGET_CORPUS, target_lang)
    merges, segmentation = learn_bpe(source_words + target_words, num_merges)
    source_vocab = _vocabulary(source_words, segmentation)
    target_vocab = _vocabulary(target_words, segmentation)

    os.makedirs(directory, exist_ok=True)
    for name, vocab in (("vocab-src.json", source_vocab), ("vocab-tgt.json", target_vocab)):
        with open(os.path.join(directory, name), "w", encoding="utf-8") as file:
            json.dump(vocab, file, ensure_ascii=False, indent=2)
            file.write("\n")
    with open(os.path.join(directory, "merges.txt"), "w", encoding="utf-8") as file:
        file.writelines(f"{first} {second}\n" for first, second in merges)
    config = {"langs": list(langs), "model_max_length": 1024, "do_lower_case": do_lower_case}
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as file:
        json.dump(config, file, indent=2)
        file.write("\n")
    return FsmtTokenizerFiles(
        directory=os.fspath(directory),
        langs=tuple(langs),
        src_vocab_size=len(source_vocab),
        tgt_vocab_size=len(target_vocab),
        merges=tuple(merges),
    )
