"""Glossaries: source terms and the target terms their translations must use
(terminology, names and product names kept as they are), read from the
files people keep them in, and found in the sentences to translate. Plain
Python, no TensorFlow: the search that obeys them is
`decoding.constraints`, through `Translator.translate(..., glossary=)`.

Files (`Glossary.read`, by extension or `format`):
- DeepL's TSV (`.tsv`): `source<TAB>target` a line, UTF-8;
- DeepL's CSV (`.csv`): `source,target` a row, or `source,target,
  source_lang,target_lang` (rows of other language pairs left out);
- TBX (`.tbx`, ISO 30042, what CAT tools export), read by translate-toolkit
  (the `tbx` extra): each concept's terms in the source language are its
  source forms, those in the target language its target terms.
In a TSV or CSV cell, `|` separates a term's forms: `Detektiv|Detektei` as
source forms, `detective|detectives` as target alternatives (any one meets
the term). A mistake names the file and line.

Matching (`Glossary.find`):
- Whole words only, the longest entry where two overlap (then the first).
- A term in lower case, or with only its first letter capitalised, matches
  any case ("bank" matches "Bank" at the sentence's start) and its
  inflected forms: every word is compared as its lemma (simplemma's
  dictionaries, `_lemmatizer`) reduced to its Snowball stem
  (snowballstemmer), so "Detektiv" matches "des Detektivs" and "Häuser"
  matches "Haus". Other capitals ("IBM", "iPhone") must match as written.
- What is not a word (a symbol, an emoji, punctuation: "C++", "→", "🪨")
  matches as written, each character in its place, spaced as the entry
  spaces it (a typographic apostrophe or quote counts as the plain one).
- Two entries whose terms reduce to the same stems ("Ärger" and
  "ärgerlich") are both kept: a word goes to the entry whose written form
  fits it best, the same form first (as written, then in another case),
  then the same lemma, then the stem alone (then the first entry).
- The automaton over all entries is Aho-Corasick's (pyahocorasick): a
  sentence is matched in one pass whatever the glossary's size.

What a found term asks of the translation (`Glossary.constraints`): one of
its entry's target terms, and for a lower-case target its capitalised
form too (for the sentence's start). A do-not-translate entry (its target
the source term itself: a name, a product) asks for the words exactly as
the sentence has them, or as the entry writes them (an inflected form in
the source). The same source term, as written, with two different targets
is refused (as DeepL refuses it), naming both lines; two entries of the
same source term and target are one.
"""

import csv
import dataclasses
import functools
import io
import os
import re

import ahocorasick
import platformdirs
import snowballstemmer
from simplemma import Lemmatizer
from simplemma.strategies import DefaultStrategy
from simplemma.strategies.dictionaries import DefaultDictionaryFactory, TrieDictionaryFactory

FORMATS = ("tsv", "csv", "tbx")

SNOWBALL = {"ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german",
            "el": "greek", "en": "english", "es": "spanish", "et": "estonian", "eu": "basque",
            "fi": "finnish", "fr": "french", "ga": "irish", "hi": "hindi", "hu": "hungarian",
            "hy": "armenian", "id": "indonesian", "it": "italian", "lt": "lithuanian",
            "ne": "nepali", "nl": "dutch", "no": "norwegian", "pl": "polish", "pt": "portuguese",
            "ro": "romanian", "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil",
            "tr": "turkish", "fa": "persian", "yi": "yiddish", "eo": "esperanto"}
"""Snowball's stemmer for a language code (others: words as they are).
`snowballstemmer.stemmer` gives PyStemmer's C stemmers (a dependency: the
same stems, 39x faster) and falls back to its own pure-Python ones."""

_TOKEN = re.compile(r"\w+|[^\w\s]")
"""What a term and a text are matched by: each word, and each character that
is neither a word's nor a space (a symbol, an emoji, punctuation)."""

_SYMBOL = re.compile(r"[^\w\s]")

_QUOTES = str.maketrans({"’": "'", "‘": "'", "ʼ": "'", "“": '"', "”": '"', "„": '"'})
"""Typographic apostrophes and quotes, matched as the plain ones."""

_SEPARATOR = "\x1f"


@functools.cache
def _lemmatizer():
    """simplemma's lemmatizer over its dictionaries as MARISA tries
    (marisa-trie), each built at a language's first use on the machine and
    kept in the user's cache folder by simplemma: its default dictionaries
    are decoded into a Python dict at every process's first lemma (German's
    million forms: 1.2 s on a Zen 3, most of what a glossary added to a
    short file's command), a kept trie loads in milliseconds. Where that
    folder can be neither written nor holds tries (a read-only home), the
    default dictionaries: a trie built at every start costs more than
    they do."""
    folder = platformdirs.user_cache_dir("simplemma")
    try:
        os.makedirs(folder, exist_ok=True)
        kept = os.access(folder, os.W_OK)
    except OSError:
        kept = False
    kept = kept or any(name.endswith(".dic") for _, _, names in os.walk(folder)
                       for name in names)
    return Lemmatizer(lemmatization_strategy=DefaultStrategy(
        dictionary_factory=TrieDictionaryFactory() if kept else DefaultDictionaryFactory()))


@dataclasses.dataclass(frozen=True)
class Entry:
    """One glossary entry: its source forms, its target terms
    (alternatives), and where it was read (`line`, 1-based)."""

    sources: tuple
    targets: tuple
    line: int = 0

    @property
    def verbatim(self):
        """A do-not-translate entry: its targets are its source forms."""
        return set(self.targets) <= set(self.sources)


@dataclasses.dataclass(frozen=True)
class Found:
    """A term found in a text: its characters `start` to `end`, and its
    entry."""

    start: int
    end: int
    entry: Entry


class GlossaryError(ValueError):
    """A glossary that cannot be read or used; its message is one line."""


class GlossaryWarning(UserWarning):
    """A glossary's terms that a translation could not all hold (too many
    for its beam, or its output limit came first)."""


class _Words:
    """The matching keys of tokens (`_TOKEN`) in a language: a word's lemma
    and its key (the lemma's Snowball stem, lower case); a symbol is its
    own lemma and key (`_QUOTES` made plain)."""

    def __init__(self, language):
        self.language = language
        self._stemmer = (snowballstemmer.stemmer(SNOWBALL[language]) if language in SNOWBALL
                         else None)
        self._known = {}  # token -> (lemma, key): the same words recur in every sentence

    def lemma_and_key(self, token):
        """`(lemma, key)` of a token, remembered for the next sentences (a
        million tokens at most)."""
        found = self._known.get(token)
        if found is None:
            if _SYMBOL.match(token):
                found = (token.translate(_QUOTES),) * 2
            else:
                try:
                    lemma = _lemmatizer().lemmatize(token, lang=self.language)
                except ValueError:  # a language simplemma has no dictionary of
                    lemma = token
                key = lemma.lower()
                found = (lemma, self._stemmer.stemWord(key) if self._stemmer else key)
            if len(self._known) < 1_000_000:
                self._known[token] = found
        return found

    def key(self, token):
        """What the automaton compares a token by (`lemma_and_key`)."""
        return self.lemma_and_key(token)[1]

    def fit(self, form_token, token):
        """How well a text's `token` fits an entry's `form_token` whose key
        it shares: 0 the same as written, 1 in another case, 2 the same
        lemma, 3 the same lemma in another case, 4 the stem alone."""
        if token == form_token:
            return 0
        if token.translate(_QUOTES).lower() == form_token.translate(_QUOTES).lower():
            return 1
        lemma, form_lemma = self.lemma_and_key(token)[0], self.lemma_and_key(form_token)[0]
        return 2 if lemma == form_lemma else 3 if lemma.lower() == form_lemma.lower() else 4


@dataclasses.dataclass(frozen=True)
class _Form:
    """A source form as the automaton holds it: its entry's index, its
    tokens, and whether the form puts space between each two."""

    entry: int
    tokens: tuple
    spaced: tuple


def _exact(token):
    """Whether a term's word must match as written: capitals other than its
    first letter."""
    return token[1:] != token[1:].lower()


def _tokens(text):
    """`(tokens, spans)` of `text`: its `_TOKEN`s and their character spans."""
    spans = [match.span() for match in _TOKEN.finditer(text)]
    return [text[start:end] for start, end in spans], spans


def _spaced(spans):
    """Whether there is space between each two neighbouring tokens (by
    their spans: what lies between two tokens is space)."""
    return tuple(before[1] < after[0] for before, after in zip(spans, spans[1:]))


class Glossary:
    """Entries (`Entry`) for translating from `source_language` (a code
    such as "de", whose words are matched by their lemmas and stems);
    `name` is what messages call it (its file).

    Raises `GlossaryError` for no entry, or a source term, as written,
    given two different targets (with `keep_first`, the later entry's form
    is left out instead: a large glossary merged from several). Entries
    whose forms differ but reduce to the same stems are all kept: `find`
    gives a word to the one that fits it best."""

    def __init__(self, entries, source_language, name="the glossary", keep_first=False):
        self.name, self.source_language = name, source_language
        self._words = _Words(source_language)
        merged, written, by_key = [], {}, {}
        for entry in entries:
            new = []
            for form in entry.sources:
                if form in written:
                    other = merged[written[form]]
                    if set(other.targets) != set(entry.targets) and not keep_first:
                        raise GlossaryError(
                            f"{name}, lines {other.line} and {entry.line}: the source term "
                            f"{form!r} has two targets ({' | '.join(other.targets)!r} and "
                            f"{' | '.join(entry.targets)!r}); keep one")
                elif form not in new:
                    new.append(form)
            if not new:  # (an entry whose forms all repeat another's adds nothing)
                continue
            for form in new:
                written[form] = len(merged)
                tokens, spans = _tokens(form)
                key = _SEPARATOR.join(self._words.key(token) for token in tokens)
                by_key.setdefault(key, []).append(_Form(len(merged), tuple(tokens),
                                                        _spaced(spans)))
            merged.append(entry)
        if not merged:
            raise GlossaryError(f"{name} holds no entry; write one source and target term a "
                                "line")
        self.entries = tuple(merged)
        self._automaton = ahocorasick.Automaton()
        for key, forms in by_key.items():
            self._automaton.add_word(_SEPARATOR + key + _SEPARATOR, tuple(forms))
        self._automaton.make_automaton()

    def __len__(self):
        return len(self.entries)

    @classmethod
    def read(cls, path, source_language, target_language=None, format=None):
        """The glossary in the file `path` (see the module docstring for the
        formats; `format` default: by its extension); `target_language`
        chooses the rows or terms of a CSV with languages and of a TBX."""
        kind = (format or os.path.splitext(path)[1].lstrip(".")).lower()
        if kind not in FORMATS:
            raise GlossaryError(f"{path}: a glossary is a .tsv, .csv or .tbx file (or give its "
                                f"format: one of {', '.join(FORMATS)})")
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError as error:
            raise GlossaryError(f"Cannot read the glossary {path}: "
                                f"{error.strerror or error}") from None
        return cls.parse(data, kind, source_language, target_language, name=path)

    @classmethod
    def parse(cls, data, format, source_language, target_language=None, name="the glossary"):
        """The glossary in `data` (bytes or str) of `format` (`FORMATS`)."""
        return cls(parse_entries(data, format, source_language, target_language, name),
                   source_language, name)

    @classmethod
    def of(cls, pairs, source_language, name="the glossary", keep_first=False):
        """The glossary of `(source, target)` pairs (each a str, `|`
        separating forms), numbered from 1 as lines."""
        return cls([_entry(source, target, line, name)
                    for line, (source, target) in enumerate(pairs, 1)], source_language, name,
                   keep_first)

    def find(self, text):
        """The terms found in `text` (`Found`), in order, none overlapping:
        where two overlap the one of more tokens wins, then the first."""
        tokens, spans = _tokens(text)
        if not tokens:
            return []
        keys = [self._words.key(token) for token in tokens]
        joined = _SEPARATOR + _SEPARATOR.join(keys) + _SEPARATOR
        # The index of the token that ends at each separator of `joined`.
        ends, at = {}, 0
        for index, key in enumerate(keys):
            at += 1 + len(key)
            ends[at] = index
        candidates = []
        for end, forms in self._automaton.iter(joined):
            last = ends.get(end)  # the token whose separator ends the match
            if last is None:
                continue
            first = last - len(forms[0].tokens) + 1
            entry = self._best(forms, tokens[first:last + 1], _spaced(spans[first:last + 1]))
            if entry is not None:
                candidates.append((first - last, first, last, entry))
        found, taken = [], set()
        for _, first, last, entry in sorted(candidates):
            if taken.isdisjoint(range(first, last + 1)):
                taken.update(range(first, last + 1))
                found.append(Found(spans[first][0], spans[last][1], self.entries[entry]))
        return sorted(found, key=lambda term: term.start)

    def _best(self, forms, tokens, spaced):
        """The index of the entry whose form, of `forms` (which share the
        key of `tokens`), fits `tokens` best (`_Words.fit`, summed; then the
        first entry), among the forms spaced as `spaced` and whose words
        that must match as written (`_exact`) do; None where none is."""
        fitting = [(sum(self._words.fit(want, got) for want, got in zip(form.tokens, tokens)),
                    form.entry) for form in forms
                   if form.spaced == spaced and all(
                       not _exact(want) or want == got for want, got in zip(form.tokens, tokens))]
        return min(fitting)[1] if fitting else None

    def constraints(self, text):
        """What each term found in `text` asks of its translation: a list,
        one for each term found (each entry once), of the target strings
        any one of which meets it (see the module docstring), and the terms
        (`Found`) in the same order."""
        found, seen, asked = [], set(), []
        for term in self.find(text):
            if term.entry in seen:
                continue
            seen.add(term.entry)
            if term.entry.verbatim:  # as written here, or as the entry writes it
                alternatives = list(dict.fromkeys([text[term.start:term.end],
                                                   *term.entry.targets]))
            else:
                alternatives = list(dict.fromkeys(
                    form for target in term.entry.targets
                    for form in (target, target[:1].upper() + target[1:])))
            asked.append(alternatives)
            found.append(term)
        return asked, found


def parse_entries(data, format, source_language, target_language=None, name="the glossary"):
    """The entries (`Entry`, in order) of `data` (bytes or str) of
    `format` (`FORMATS`), as written, before a `Glossary` merges them: what
    a server keeps of a glossary sent to it."""
    if format == "tbx":
        return _tbx_entries(data, source_language, target_language, name)
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise GlossaryError(f"{name} is not UTF-8 text (byte {error.start}); save it as "
                                "UTF-8") from None
    if format == "tsv":
        return _tsv_entries(data, name)
    return _csv_entries(data, source_language, target_language, name)


def _entry(source, target, line, name):
    sources = tuple(form.strip() for form in source.split("|") if form.strip())
    targets = tuple(form.strip() for form in target.split("|") if form.strip())
    if not sources or not targets:
        raise GlossaryError(f"{name}, line {line}: an entry needs a source and a target term")
    return Entry(sources, targets, line)


def _tsv_entries(text, name):
    entries = []
    for line, row in enumerate(text.splitlines(), 1):
        if not row.strip():
            continue
        fields = row.split("\t")
        if len(fields) != 2:
            raise GlossaryError(f"{name}, line {line}: a TSV glossary line is a source term, "
                                f"a tab and a target term; this one has {len(fields)} "
                                "field(s)")
        entries.append(_entry(*fields, line, name))
    return entries


def _csv_entries(text, source_language, target_language, name):
    entries = []
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            line = reader.line_num
            if not any(field.strip() for field in row):
                continue
            if len(row) not in (2, 4):
                raise GlossaryError(f"{name}, line {line}: a CSV glossary row is source,target "
                                    f"or source,target,source_lang,target_lang; this one has "
                                    f"{len(row)} field(s)")
            if len(row) == 4 and (row[2].strip().lower() != source_language.lower() or (
                    target_language and row[3].strip().lower() != target_language.lower())):
                continue  # another language pair's row
            entries.append(_entry(row[0], row[1], line, name))
    except csv.Error as error:
        raise GlossaryError(f"{name}, line {reader.line_num}: not CSV ({error})") from None
    return entries


def _tbx_entries(data, source_language, target_language, name):
    """The TBX file's concepts with terms in both languages, read by
    translate-toolkit; `line` numbers the concepts from 1."""
    try:
        from translate.storage import tbx  # the tbx extra; only TBX needs it
    except ImportError:
        raise GlossaryError(f"{name}: reading TBX needs translate-toolkit: pip install "
                            "\"keras-transformer[tbx]\"") from None
    if target_language is None:
        raise GlossaryError(f"{name}: a TBX glossary needs the target language to choose its "
                            "terms")
    try:
        store = tbx.tbxfile.parsestring(data if isinstance(data, bytes) else data.encode())
    except Exception as error:  # lxml's parse errors say where: line N, column M
        raise GlossaryError(f"{name}: not TBX ({' '.join(str(error).split())})") from None
    entries = []
    for number, unit in enumerate(store.units, 1):
        forms = {}
        for node in unit.getlanguageNodes():
            language = (node.get("{http://www.w3.org/XML/1998/namespace}lang")
                        or node.get("lang") or "").split("-")[0].lower()
            terms = [term.text.strip() for term in node.iter()
                     if isinstance(term.tag, str) and term.tag.endswith("term") and term.text
                     and term.text.strip()]
            forms.setdefault(language, []).extend(terms)
        sources, targets = forms.get(source_language.lower()), forms.get(target_language.lower())
        if sources and targets:
            entries.append(Entry(tuple(dict.fromkeys(sources)), tuple(dict.fromkeys(targets)),
                                 number))
    return entries
