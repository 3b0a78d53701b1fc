"""Glossaries (`keras_transformer.glossary`): DeepL's TSV and CSV and TBX
read, each mistake named by file and line; terms found as whole words, in
their inflected forms, the longest where two overlap, by the case rules;
do-not-translate entries asked for verbatim; 100,000 entries matched in one
pass."""

import time

import pytest

from keras_transformer.glossary import Glossary, GlossaryError

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
    ("g.tsv", "Bank\tbank\nHaus\thouse\nbank\tshore\n",
     r"g.tsv, lines 1 and 3: the source term 'bank' has two targets \('bank' and 'shore'\)"),
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
