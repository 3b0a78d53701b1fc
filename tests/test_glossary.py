"""Glossaries (`keras_transformer.glossary`): DeepL's TSV and CSV and TBX
read, each mistake named by file and line; terms found as whole words, in
their inflected forms, the longest where two overlap, by the case rules;
terms that share a stem each found where its written form fits best (hand
written pairs, and every headword pair of Debian's Ding dictionary where it
is installed); symbols and emoji matched as written; do-not-translate
entries asked for verbatim; 100,000 entries matched in one pass."""

import collections
import functools
import json
import os
import re
import subprocess
import sys
import time

import pytest
import simplemma
import snowballstemmer

from keras_transformer.glossary import Glossary, GlossaryError, _Words

TBX = """<?xml version="1.0" encoding="UTF-8"?>
<martif type="TBX" xml:lang="en">
 <martifHeader><fileDesc><sourceDesc><p>test</p></sourceDesc></fileDesc></martifHeader>
 <text><body>
  <termEntry id="c1">
   <langSet xml:lang="de"><tig><term>Detektiv</term></tig></langSet>
   <langSet xml:lang="en"><tig><term>detective</term></tig><tig><term>sleuth</term></tig></langSet>
  </termEntry>
  <termEntry id="c2">
   <langSet xml:lang="de"><tig><term>Schmutzrand</term></tig></langSet>
   <langSet xml:lang="fr"><tig><term>trace</term></tig></langSet>
  </termEntry>
  <termEntry id="c3">
   <langSet xml:lang="de-DE"><ntig><termGrp><term>Bahnhof</term></termGrp></ntig></langSet>
   <langSet xml:lang="en-GB"><ntig><termGrp><term>railway station</term></termGrp></ntig></langSet>
  </termEntry>
 </body></text>
</martif>
"""


def _terms(glossary, text):
    return [(text[found.start:found.end], found.entry.targets) for found in glossary.find(text)]


def test_deepl_s_tsv_and_csv_and_tbx_are_read(tmp_path):
    (tmp_path / "g.tsv").write_text("Detektiv\tdetective\nBahnhof|Station\tstation|railway "
                                    "station\n\n", encoding="utf-8")
    tsv = Glossary.read(str(tmp_path / "g.tsv"), "de")
    assert [(e.sources, e.targets, e.line) for e in tsv.entries] == [
        (("Detektiv",), ("detective",), 1),
        (("Bahnhof", "Station"), ("station", "railway station"), 2)]
    (tmp_path / "g.csv").write_text('Detektiv,detective,de,en\n"Haus, groß",mansion,de,en\n'
                                    "Haus,maison,de,fr\n", encoding="utf-8")
    csv = Glossary.read(str(tmp_path / "g.csv"), "de", "en")
    assert [(e.sources, e.targets) for e in csv.entries] == [
        (("Detektiv",), ("detective",)), (("Haus, groß",), ("mansion",))]
    (tmp_path / "g.tbx").write_text(TBX, encoding="utf-8")
    tbx = Glossary.read(str(tmp_path / "g.tbx"), "de", "en")
    assert [(e.sources, e.targets, e.line) for e in tbx.entries] == [
        (("Detektiv",), ("detective", "sleuth"), 1),
        (("Bahnhof",), ("railway station",), 3)]  # the second concept has no English term


@pytest.mark.parametrize("name, data, message", [
    ("g.tsv", "Haus\thouse\nBaum tree\n", r"g.tsv, line 2: a TSV glossary line is a source term, "
                                         r"a tab and a target term; this one has 1 field"),
    ("g.tsv", "Haus\thouse\tmaison\n", r"g.tsv, line 1: .* 3 field"),
    ("g.tsv", "Haus\t \n", r"g.tsv, line 1: an entry needs a source and a target term"),
    ("g.tsv", "", r"g.tsv holds no entry"),
    ("g.tsv", "\n\n", r"g.tsv holds no entry"),
    ("g.tsv", "Bank\tbank\nHaus\thouse\nBank\tshore\n",
     r"g.tsv, lines 1 and 3: the source term 'Bank' has two targets \('bank' and 'shore'\)"),
    ("g.tsv", b"Haus\thouse\n\xff\xfe\n", r"g.tsv is not UTF-8 text"),
    ("g.csv", 'Haus,house\n"Baum,tree\n', r"g.csv, line 2: not CSV"),
    ("g.csv", "Haus,house,de\n", r"g.csv, line 1: a CSV glossary row is source,target or "
                                 r"source,target,source_lang,target_lang; this one has 3"),
    ("g.tbx", "<martif><text><body><termEntry>", r"g.tbx: not TBX \(.*line 1"),
    ("g.xlsx", "x", r"g.xlsx: a glossary is a .tsv, .csv or .tbx file"),
])
def test_each_mistake_is_one_line_naming_the_file_and_line(tmp_path, name, data, message):
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    with pytest.raises(GlossaryError, match=message) as raised:
        Glossary.read(str(path), "de", "en")
    assert "\n" not in str(raised.value)
    with pytest.raises(GlossaryError, match="Cannot read the glossary"):
        Glossary.read(str(tmp_path / "missing.tsv"), "de")


def test_terms_are_whole_words_in_their_inflected_forms_the_longest_first():
    glossary = Glossary.of([("Detektiv", "detective"), ("Haus", "house"),
                            ("großes Haus", "mansion"), ("Haustür", "front door")], "de")
    assert _terms(glossary, "Der Hut des Detektivs, die Detektive.") == [
        ("Detektivs", ("detective",)), ("Detektive", ("detective",))]
    assert _terms(glossary, "Ein großes Haus, zwei Häuser und eine Haustür.") == [
        ("großes Haus", ("mansion",)), ("Häuser", ("house",)), ("Haustür", ("front door",))]
    assert _terms(glossary, "Das Hausboot") == []  # not a whole word


def test_case_rules_and_do_not_translate_entries():
    glossary = Glossary.of([("bank", "riverbank"), ("IBM", "IBM"), ("Keras", "Keras"),
                            ("iPhone", "iPhone")], "en")
    assert _terms(glossary, "Bank of the river, two banks.") == [
        ("Bank", ("riverbank",)), ("banks", ("riverbank",))]
    # Capitals past a word's first letter must match as written.
    assert _terms(glossary, "IBM and ibm, iPhone and iphone") == [
        ("IBM", ("IBM",)), ("iPhone", ("iPhone",))]
    asked, found = glossary.constraints("keras by IBM, near the bank")
    # Do-not-translate: the words as the text has them; a lower-case target
    # also capitalised (the sentence's start); each entry asked once.
    assert asked == [["keras", "Keras"], ["IBM"], ["riverbank", "Riverbank"]]
    assert [term.entry.sources[0] for term in found] == ["Keras", "IBM", "bank"]
    assert glossary.constraints("the bank and the banks")[0] == [["riverbank", "Riverbank"]]


def test_terms_that_share_a_stem_each_get_the_words_their_form_fits():
    """"Ärger" and "ärgerlich" reduce to one stem: both are kept, and a word
    goes to the entry whose written form fits it best: the same form (as
    written, then in another case), then the same lemma, then the stem
    (then the first entry). Only the same term as written with two targets
    is refused."""
    glossary = Glossary.of([("Ärger", "anger"), ("ärgerlich", "annoying"), ("Arm", "arm"),
                            ("arm", "poor"), ("Haus", "house"), ("Haus", "house")], "de")
    assert len(glossary) == 5  # (the same entry twice is one)
    assert _terms(glossary, "Sein Ärger ist ärgerlich. Ärgerlich!") == [
        ("Ärger", ("anger",)), ("ärgerlich", ("annoying",)), ("Ärgerlich", ("annoying",))]
    # The same lemma: "ärgerliche" is a form of "ärgerlich", "Ärgers" of "Ärger".
    assert _terms(glossary, "eine ärgerliche Sache voller Ärgers") == [
        ("ärgerliche", ("annoying",)), ("Ärgers", ("anger",))]
    # Lemmas in their case: "arme" is the adjective's, "Arme" the noun's.
    assert _terms(glossary, "Der arme Mann hebt die Arme.") == [
        ("arme", ("poor",)), ("Arme", ("arm",))]
    # The stem alone ("ärgern", a verb, fits neither better): the first entry.
    assert _terms(glossary, "Sie ärgern sich.") == [("ärgern", ("anger",))]
    with pytest.raises(GlossaryError, match=r"lines 1 and 2: the source term 'Ärger' has two "
                                            r"targets \('anger' and 'worry'\)"):
        Glossary.of([("Ärger", "anger"), ("Ärger", "worry")], "de")
    kept = Glossary.of([("Ärger", "anger"), ("Ärger|Sorge", "worry")], "de", keep_first=True)
    assert _terms(kept, "Ärger und Sorge") == [("Ärger", ("anger",)), ("Sorge", ("worry",))]


DING = "/usr/share/trans/de-en"


def test_words_are_stemmed_by_snowball_s_c_stemmers_as_by_its_python_ones():
    """PyStemmer, a dependency, is what `snowballstemmer.stemmer` gives the
    glossaries (most of the time of loading a large one is stemming): the
    same stems as snowballstemmer's pure-Python stemmers."""
    import Stemmer
    from snowballstemmer.english_stemmer import EnglishStemmer
    from snowballstemmer.german_stemmer import GermanStemmer

    for language, python in (("de", GermanStemmer()), ("en", EnglishStemmer())):
        stemmer = _Words(language)._stemmer
        assert isinstance(stemmer, Stemmer.Stemmer)
        words = ["häuser", "detektivs", "ärgerliche", "gegangen", "running", "happiness",
                 "generalizations", "straße"]
        assert [stemmer.stemWord(word) for word in words] == [python.stemWord(word)
                                                              for word in words]


@functools.lru_cache(maxsize=None)
def _stem(word, stemmer=snowballstemmer.stemmer("german")):
    """A German word as the module docstring says terms are compared: its
    lemma, lower case, reduced to its Snowball stem."""
    return stemmer.stemWord(simplemma.lemmatize(word, lang="de").lower())


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isfile(DING), reason=f"Ding's dictionary is not installed at "
                                                     f"{DING} (apt-get install trans-de-en)")
def test_a_glossary_of_ding_s_headword_pairs_loads_and_each_term_finds_its_own_entry():
    """Every headword pair of Ding (the first German and English synonym of
    each line's first sub-entry, `data.ding.parse_line`), one target per
    German term as written, as a CAT tool exports a glossary: thousands of
    its terms share their stems with another term of another target, and
    each is found in its own written form as its own entry. The same
    German term with two targets, as Ding lists many, is refused."""
    from keras_transformer.data.ding import parse_line  # (TensorFlow Datasets': slow to import)

    every, pairs, second_target = [], {}, None
    with open(DING, encoding="utf-8", errors="replace") as file:
        for line in file:
            found = parse_line(line)
            if found:
                every.append(found[0])
                source, target = found[0]
                if pairs.setdefault(source, target) != target and second_target is None:
                    second_target = len(every)
    glossary = Glossary.of(pairs.items(), "de", name="Ding's headwords")
    assert len(glossary) == len(pairs) > 100_000
    shared = collections.defaultdict(list)
    for source, target in pairs.items():
        shared[tuple(_stem(token) if re.match(r"\w", token) else token
                     for token in re.findall(r"\w+|[^\w\s]", source))].append((source, target))
    colliding = [(source, target) for found in shared.values()
                 if len({target for _, target in found}) > 1 for source, target in found]
    assert len(colliding) > 5000, len(colliding)
    for source, target in colliding:
        assert [(text, targets) for text, targets in _terms(glossary, source)] == [
            (source, (target,))], source
    # Ding's pairs up to the first term with a second target (building
    # the whole glossary again would only repeat the first build).
    with pytest.raises(GlossaryError, match=rf"lines \d+ and {second_target}: the source term "
                                            r"'.+' has two targets"):
        Glossary.of(every[:second_target], "de", name="Ding's headwords")


LEMMAS = """
import json
import simplemma
from keras_transformer.glossary import _lemmatizer
words = ["Häuser", "des", "Detektivs", "ärgerliche", "ging", "Bäume"]
found = [_lemmatizer().lemmatize(word, lang="de") for word in words]
print(json.dumps([found, [simplemma.lemmatize(word, lang="de") for word in words]]))
"""


def _lemmas_with_cache(cache):
    """What a fresh process whose cache folder is `cache` lemmatizes, what
    simplemma's default dictionaries give, and its stderr."""
    done = subprocess.run([sys.executable, "-c", LEMMAS], capture_output=True, text=True,
                          env=os.environ | {"XDG_CACHE_HOME": str(cache)}, check=True)
    return json.loads(done.stdout) + [done.stderr]


def test_lemmas_come_from_tries_kept_on_disk_or_where_none_can_be_from_the_dictionaries(
        tmp_path):
    """simplemma's German dictionary as a trie, built at its first use and
    kept in the cache folder, loaded by the next process: the same lemmas
    as its default dictionaries. Where the cache folder cannot be made (a
    read-only home), the default dictionaries, and nothing said (a trie
    that cannot be kept is built at every start, and simplemma says so)."""
    first = _lemmas_with_cache(tmp_path / "cache")
    assert first[0] == first[1] == ["Haus", "der", "Detektiv", "ärgerlich", "gehen", "Baum"]
    kept = list((tmp_path / "cache").rglob("de.dic"))
    assert len(kept) == 1
    written = kept[0].stat().st_mtime_ns
    assert _lemmas_with_cache(tmp_path / "cache")[:2] == first[:2]
    assert kept[0].stat().st_mtime_ns == written  # loaded, not built again
    (tmp_path / "a-file").write_text("")
    assert _lemmas_with_cache(tmp_path / "a-file" / "cache") == first[:2] + [""]


def test_symbols_and_emoji_are_terms_matched_as_written():
    """An entry that is not a word ("🪨", "→", "C++", as DeepL takes any
    text) is accepted and matched as written: its symbols in their places,
    spaced as it spaces them; its words by the word rules. A typographic
    apostrophe counts as the plain one."""
    glossary = Glossary.of([("🪨", "rock"), ("→", "→"), ("C++", "C++"), ("E-Mail", "email"),
                            ("AT&T", "AT&T")], "de")
    assert _terms(glossary, "C++ und C, 🪨→Haus; zwei E-Mails bei AT&T") == [
        ("C++", ("C++",)), ("🪨", ("rock",)), ("→", ("→",)), ("E-Mails", ("email",)),
        ("AT&T", ("AT&T",))]
    assert _terms(glossary, "C + + und C, E - Mail, AT & T, Vitamin C") == []
    assert glossary.constraints("Ich lerne C++ 🪨")[0] == [["C++"], ["rock", "Rock"]]
    french = Glossary.of([("l'ordinateur", "the computer")], "fr")
    assert _terms(french, "Il allume l’ordinateur.") == [("l’ordinateur", ("the computer",))]


def test_a_hundred_thousand_entries_are_matched_in_one_pass():
    pairs = [(f"wort{index} teil{index % 97}", f"word{index}") for index in range(100_000)]
    started = time.perf_counter()
    glossary = Glossary.of(pairs + [("Detektiv", "detective")], "de")
    built = time.perf_counter() - started
    sentence = "Der Detektiv sah wort4242 teil71 und wort99999 teil89 hier."
    assert _terms(glossary, sentence) == [("Detektiv", ("detective",)),
                                          ("wort4242 teil71", ("word4242",)),
                                          ("wort99999 teil89", ("word99999",))]
    assert len(glossary) == 100_001 and built < 120
