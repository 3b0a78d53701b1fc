"""The tokenization of fairseq's WMT19 translation models in their Hugging Face
FSMT form (`facebook/wmt19-en-de` and the like), in plain Python.

FSMT tokenizes with the Moses scripts (punctuation normalisation, then the
Moses tokenizer) and then byte-pair encoding with one merge list and two
vocabularies, one per language. The Moses rules are hundreds of regular
expressions per language, which no TensorFlow op reproduces exactly, so this
runs in Python, outside the model's graph: `encode` gives the ids to feed the
model and `decode` turns its output ids back into text. The results are those
of `transformers.FSMTTokenizer` on the same files:

    vocabulary.encode(text) == tokenizer(text)["input_ids"][:-1]
    vocabulary.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True)

(`decode` stops at the first end id, see there). This module needs only the
`sacremoses` package (`pip install sacremoses`, or the `keras-transformer[pretrained]`
extra); it does not import TensorFlow, Keras or `transformers`.
"""

import json
import os
import re
import unicodedata

SOURCE_VOCAB_FILE = "vocab-src.json"
TARGET_VOCAB_FILE = "vocab-tgt.json"
MERGES_FILE = "merges.txt"
CONFIG_FILE = "tokenizer_config.json"

END_OF_WORD = "</w>"
"""FSMT's BPE marks the last piece of a word with this suffix."""

DEFAULT_SPECIAL_TOKENS = {"bos_token": "<s>", "pad_token": "<pad>", "sep_token": "</s>", "unk_token": "<unk>"}
"""fairseq's four symbols, ids 0 to 3 in its dictionaries. FSMT calls the end
token `sep_token`; `tokenizer_config.json` may rename any of them."""

_INSTALL_HINT = "pip install sacremoses (or pip install 'keras-transformer[pretrained]')"
_CACHE_LIMIT = 1 << 16


def _import_sacremoses():
    try:
        import sacremoses
    except ImportError:
        raise ImportError(f"FSMT tokenization needs the sacremoses package: {_INSTALL_HINT}.") from None
    return sacremoses


def _drop_control_characters(text):
    # Every character of a Unicode "Other" category (Cc, Cf, Cs, Co, Cn) goes,
    # as in Moses' remove-non-printing-char.perl. This uses Python's own
    # `unicodedata` rather than sacremoses' `remove_control_chars`, whose
    # `regex` module can ship a newer Unicode table: characters assigned
    # since Python's table would then be kept here and dropped by FSMT.
    return "".join(char for char in text if not unicodedata.category(char).startswith("C"))


def _check_vocab(vocab, where):
    """A {piece: id} dict whose ids are exactly 0..n-1; ValueError otherwise."""
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError(f"{where} is not an FSMT vocabulary (a non-empty JSON object of piece: id); "
                         "save the tokenizer again with FSMTTokenizer.save_pretrained.")
    if not all(isinstance(piece, str) for piece in vocab) or not all(
            isinstance(value, int) and not isinstance(value, bool) for value in vocab.values()):
        raise ValueError(f"{where} must map strings to integer ids; save the tokenizer again "
                         "with FSMTTokenizer.save_pretrained.")
    ids = sorted(vocab.values())
    if ids != list(range(len(ids))):
        raise ValueError(f"{where} must number its {len(ids)} pieces 0 to {len(ids) - 1}, each once; "
                         "save the tokenizer again with FSMTTokenizer.save_pretrained.")


class FsmtVocabulary:
    """FSMT's Moses and BPE tokenization, from `FSMTTokenizer`'s files.

    Load one with `FsmtVocabulary.from_directory(directory)`. The constructor
    takes the files' contents:

    Args:
        source_vocab: {piece: id} of the source language (`vocab-src.json`).
        target_vocab: {piece: id} of the target language (`vocab-tgt.json`).
        merges: the BPE merges, best first, as pairs of pieces (the lines of
            `merges.txt` split on whitespace).
        langs: (source language, target language), e.g. ("en", "de"): they
            choose the Moses rules.
        do_lower_case: lower-case the text before tokenizing.
        special_tokens: the strings of "bos_token", "pad_token", "sep_token"
            (the end token) and "unk_token", if not fairseq's `<s>`, `<pad>`,
            `</s>` and `<unk>`. Both vocabularies must hold each of them, at
            the same id.

    Attributes:
        pad_id, unk_id, bos_id, eos_id: the special ids (fairseq: 1, 3, 0, 2).
        decoder_start_id: the id the decoder starts from. fairseq starts it
            from the end id, and FSMT's `decoder_start_token_id` is the end id
            too; the start id `bos_id` is never used by these models.
        source_vocab_size, target_vocab_size: the sizes of the vocabularies
            (FSMT's `src_vocab_size` and `tgt_vocab_size`).
        special_ids: the four special ids, as a frozenset.
        source_language, target_language: the language codes.
        do_lower_case: whether text is lower-cased first.

    Raises:
        ValueError: malformed contents.
        ImportError: sacremoses is not installed.
    """

    def __init__(self, source_vocab, target_vocab, merges, langs, do_lower_case=False, special_tokens=None):
        sacremoses = _import_sacremoses()
        _check_vocab(source_vocab, "The source vocabulary")
        _check_vocab(target_vocab, "The target vocabulary")
        langs = tuple(langs) if isinstance(langs, (list, tuple)) else ()
        if len(langs) != 2 or not all(isinstance(lang, str) and lang for lang in langs):
            raise ValueError(f"langs must be two language codes such as ['en', 'de']; got {langs!r}.")
        names = dict(DEFAULT_SPECIAL_TOKENS)
        unknown = set(special_tokens or {}) - set(names)
        if unknown:
            raise ValueError(f"special_tokens takes {sorted(names)}; got {sorted(unknown)}.")
        names.update(special_tokens or {})
        special_ids = {}
        for key, token in names.items():
            if not isinstance(token, str) or not token:
                raise ValueError(f"The {key} must be a non-empty string; got {token!r}.")
            if token not in source_vocab or source_vocab[token] != target_vocab.get(token):
                raise ValueError(f"The {key} {token!r} must be in both vocabularies, at the same id.")
            special_ids[key] = source_vocab[token]
        if len(set(special_ids.values())) != len(special_ids):
            raise ValueError(f"The special tokens must have different ids; got {special_ids}.")

        self.source_language, self.target_language = langs
        self.do_lower_case = bool(do_lower_case)
        self.special_tokens = names
        self.bos_id = special_ids["bos_token"]
        self.pad_id = special_ids["pad_token"]
        self.eos_id = special_ids["sep_token"]
        self.unk_id = special_ids["unk_token"]
        self.decoder_start_id = self.eos_id
        self.source_vocab_size = len(source_vocab)
        self.target_vocab_size = len(target_vocab)

        self._source_vocab = dict(source_vocab)
        self._target_vocab = dict(target_vocab)
        self._source_pieces = [None] * len(source_vocab)
        for piece, index in source_vocab.items():
            self._source_pieces[index] = piece
        self._target_pieces = [None] * len(target_vocab)
        for piece, index in target_vocab.items():
            self._target_pieces[index] = piece
        self._merges = [tuple(str(symbol) for symbol in merge) for merge in merges]
        # A merge listed twice ranks where it is listed last, as FSMT reads it.
        self._ranks = {merge: rank for rank, merge in enumerate(self._merges)}
        self._bpe_cache = {}
        # FSMT treats the special tokens' strings in the input as those tokens
        # rather than as text (fairseq itself would not).
        self._special_pattern = re.compile(
            "(" + "|".join(re.escape(token) for token in sorted(names.values(), key=len, reverse=True)) + ")")
        self.special_ids = frozenset(special_ids.values())

        # The Moses steps, per language. MosesPunctNormalizer's
        # pre_replace_unicode_punct is Moses' replace-unicode-punctuation.perl,
        # which FSMT runs first.
        self._normalizers = {lang: sacremoses.MosesPunctNormalizer(lang=lang, pre_replace_unicode_punct=True)
                             for lang in langs}
        self._tokenizers = {lang: sacremoses.MosesTokenizer(lang=lang) for lang in langs}
        self._detokenizer = sacremoses.MosesDetokenizer(lang=self.target_language)

    # -- files --------------------------------------------------------------

    @classmethod
    def from_directory(cls, directory):
        """Reads `vocab-src.json`, `vocab-tgt.json`, `merges.txt` and
        `tokenizer_config.json` (for `langs` and `do_lower_case`), as
        `FSMTTokenizer.save_pretrained` writes them.

        Raises:
            ValueError: a file is missing or malformed (the message names it).
            ImportError: sacremoses is not installed.
        """
        _import_sacremoses()
        directory = os.fspath(directory)
        if not os.path.isdir(directory):
            raise ValueError(f"{directory!r} is not a directory; pass the folder of an FSMT tokenizer "
                             "(vocab-src.json, vocab-tgt.json, merges.txt, tokenizer_config.json).")

        def path_of(name):
            path = os.path.join(directory, name)
            if not os.path.isfile(path):
                raise ValueError(f"{path} is missing; an FSMT tokenizer folder needs {SOURCE_VOCAB_FILE}, "
                                 f"{TARGET_VOCAB_FILE}, {MERGES_FILE} and {CONFIG_FILE}, as "
                                 "FSMTTokenizer.save_pretrained writes them.")
            return path

        def read_json(name):
            path = path_of(name)
            try:
                with open(path, encoding="utf-8") as file:
                    return path, json.load(file)
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ValueError(f"{path} is not valid UTF-8 JSON ({error}); download or save it again.") from None

        vocabs = []
        for name in (SOURCE_VOCAB_FILE, TARGET_VOCAB_FILE):
            path, vocab = read_json(name)
            _check_vocab(vocab, path)
            vocabs.append(vocab)
        config_path, config = read_json(CONFIG_FILE)
        if not isinstance(config, dict):
            raise ValueError(f"{config_path} must hold a JSON object; save the tokenizer again "
                             "with FSMTTokenizer.save_pretrained.")
        langs = config.get("langs")
        if not isinstance(langs, list) or len(langs) != 2 or not all(isinstance(x, str) and x for x in langs):
            raise ValueError(f"{config_path} must give \"langs\" as two language codes such as "
                             f"[\"en\", \"de\"]; got {langs!r}.")
        do_lower_case = config.get("do_lower_case", False)
        if not isinstance(do_lower_case, bool):
            raise ValueError(f"{config_path}: \"do_lower_case\" must be true or false; got {do_lower_case!r}.")
        special_tokens = {}
        for key in DEFAULT_SPECIAL_TOKENS:
            token = config.get(key)
            if isinstance(token, dict):  # an AddedToken, as older versions wrote them
                token = token.get("content")
            if token is not None:
                special_tokens[key] = token
        added = config.get("added_tokens_decoder") or {}
        wanted = {vocabs[0].get(token) for token in {**DEFAULT_SPECIAL_TOKENS, **special_tokens}.values()}
        if not isinstance(added, dict) or any(not str(key).isdigit() or int(key) not in wanted for key in added):
            raise ValueError(f"{config_path} declares added tokens beyond the four special ones, which "
                             "FsmtVocabulary does not support; remove them from \"added_tokens_decoder\".")

        merges_path = path_of(MERGES_FILE)
        try:
            with open(merges_path, encoding="utf-8") as file:
                lines = file.read().split("\n")
        except UnicodeDecodeError as error:
            raise ValueError(f"{merges_path} is not valid UTF-8 ({error}); download or save it again.") from None
        # FSMT reads every line before the last newline (a last line without
        # one is ignored), each as its first two whitespace-separated fields.
        merges = [tuple(line.split()[:2]) for line in lines[:-1]]
        if not any(len(merge) == 2 for merge in merges):
            raise ValueError(f"{merges_path} holds no merges (lines \"piece piece\"); download or save it again.")
        try:
            return cls(vocabs[0], vocabs[1], merges, langs, do_lower_case, special_tokens)
        except ValueError as error:
            raise ValueError(f"{directory}: {error}") from None

    def save(self, directory):
        """Writes the four files into `directory` (created if need be), for
        `from_directory` or `transformers.FSMTTokenizer.from_pretrained`."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        for name, vocab in ((SOURCE_VOCAB_FILE, self._source_vocab), (TARGET_VOCAB_FILE, self._target_vocab)):
            with open(os.path.join(directory, name), "w", encoding="utf-8") as file:
                file.write(json.dumps(vocab, indent=2, ensure_ascii=False) + "\n")
        with open(os.path.join(directory, MERGES_FILE), "w", encoding="utf-8") as file:
            file.writelines(" ".join(merge) + "\n" for merge in self._merges)
        config = {"langs": [self.source_language, self.target_language], "do_lower_case": self.do_lower_case,
                  "model_max_length": 1024, "tokenizer_class": "FSMTTokenizer", **self.special_tokens}
        with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as file:
            file.write(json.dumps(config, indent=2, ensure_ascii=False) + "\n")

    @property
    def source_vocab(self):
        """A copy of the source vocabulary, piece -> id."""
        return dict(self._source_vocab)

    @property
    def target_vocab(self):
        """A copy of the target vocabulary, piece -> id."""
        return dict(self._target_vocab)

    # -- text to ids ----------------------------------------------------------

    def encode(self, text):
        """Source text -> source ids, without the end id (append `eos_id`
        before feeding the encoder)."""
        return self._encode(text, self.source_language, self._source_vocab)

    def encode_target(self, text):
        """Target-language text -> target ids, without the end id: the same
        Moses steps and merges, with the target language's rules and
        vocabulary. `FSMTTokenizer` has no such method; this is what it gives
        on the same files with the languages and vocabularies swapped."""
        return self._encode(text, self.target_language, self._target_vocab)

    def _encode(self, text, lang, vocab):
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise TypeError(f"text must be a string; got {type(text).__name__}.")
        ids = []
        for index, part in enumerate(self._special_pattern.split(text)):
            if index % 2:  # a special token's string
                ids.append(self._source_vocab[part])
            elif part:
                unk = self.unk_id
                ids.extend(vocab.get(piece, unk) for piece in self._tokenize(part, lang))
        return ids

    def _tokenize(self, text, lang):
        """Moses, then BPE: a list of pieces."""
        if self.do_lower_case:
            text = text.lower()
        text = _drop_control_characters(self._normalizers[lang].normalize(text))
        words = self._tokenizers[lang].tokenize(text, aggressive_dash_splits=True, return_str=False, escape=True)
        pieces = []
        for word in words:
            if word:
                pieces.extend(self._bpe(word))
        return pieces

    def _bpe(self, word):
        # Our own BPE: sacremoses only learns merges, and the `tokenizers`
        # package's BPE model behaves differently from FSMT's on what matters
        # here (it wants every merge result in its vocabulary and maps
        # characters missing from it to unknown before merging, whereas FSMT
        # merges with one list shared by two vocabularies and looks each
        # finished piece up afterwards).
        #
        # The word starts as its characters, the last one carrying the
        # end-of-word mark. While some adjacent pair is a merge, the best
        # ranked one is joined wherever it occurs, from left to right.
        cached = self._bpe_cache.get(word)
        if cached is not None:
            return cached
        symbols = list(word[:-1]) + [word[-1] + END_OF_WORD]
        ranks = self._ranks
        while len(symbols) > 1:
            best = None
            for pair in zip(symbols, symbols[1:]):
                rank = ranks.get(pair)
                if rank is not None and (best is None or rank < ranks[best]):
                    best = pair
            if best is None:
                break
            first, second = best
            joined = []
            position = 0
            while position < len(symbols):
                if (symbols[position] == first and position + 1 < len(symbols)
                        and symbols[position + 1] == second):
                    joined.append(first + second)
                    position += 2
                else:
                    joined.append(symbols[position])
                    position += 1
            symbols = joined
        if len(self._bpe_cache) >= _CACHE_LIMIT:
            self._bpe_cache.clear()
        self._bpe_cache[word] = symbols
        return symbols

    # -- ids to text ----------------------------------------------------------

    def decode(self, ids):
        """Target ids -> text.

        Everything from the first end id on is dropped, and so are the other
        special ids (start, padding, unknown), so leave out the decoder's
        start id (which is the end id). The rest is joined at the `</w>`
        marks and detokenized with Moses' rules for the target language.

        Raises:
            ValueError: an id outside [0, target_vocab_size).
        """
        pieces = []
        for index in self._target_ids(ids):
            if index == self.eos_id:
                break
            if index not in self.special_ids:
                pieces.append(self._target_pieces[index])
        words = "".join(piece.replace(" ", "").replace(END_OF_WORD, " ") for piece in pieces).split()
        return self._detokenizer.detokenize(words)

    def piece(self, index, target=False):
        """The vocabulary string of one id (source side unless `target`).

        Raises:
            ValueError: an id outside the vocabulary.
        """
        table = self._target_pieces if target else self._source_pieces
        index = int(index)
        if not 0 <= index < len(table):
            side = "Target" if target else "Source"
            raise ValueError(f"{side} id {index} is outside [0, {len(table)}).")
        return table[index]

    def pieces(self, ids, target=False):
        """The vocabulary strings of some ids (for display), of the source
        vocabulary, or of the target one with `target=True`."""
        return [self.piece(index, target) for index in ids]

    def _target_ids(self, ids):
        size = self.target_vocab_size
        for index in ids:
            index = int(index)
            if not 0 <= index < size:
                raise ValueError(f"Target id {index} is outside [0, {size}).")
            yield index

    def __repr__(self):
        return (f"FsmtVocabulary({self.source_language}->{self.target_language}, "
                f"source_vocab_size={self.source_vocab_size}, target_vocab_size={self.target_vocab_size})")
