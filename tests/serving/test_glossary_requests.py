"""Glossaries through the server: LibreTranslate's /translate with a
`glossary` field naming a served glossary or holding entries inline, each
answered as the Translator answers with that glossary; HTML keeping a
term's tag; and each mistake a 4xx of one line. Traffic goes to 127.0.0.1
only (Starlette's test client)."""

import pytest
from starlette.testclient import TestClient

from helpers.small_run import pair_runs
from keras_transformer import runtimes
from keras_transformer.decoding import Translator
from keras_transformer.documents.sentences import split_sentences
from keras_transformer.glossary import Glossary
from keras_transformer.serving import ServedGlossary, ServedModel, Settings, create_app

TERMS = [("Haus", "Baum"), ("klein", "oder dort")]


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (see tests/serving/test_serve.py)."""


@pytest.fixture(scope="module")
def runs(small_run, tmp_path_factory):
    """The small run as German -> English and English -> French."""
    return pair_runs(small_run, tmp_path_factory.mktemp("glossary-pair"))


@pytest.fixture(scope="module")
def client(runs):
    models = [ServedModel(runtimes.open_runtime(str(run), in_flight=1), *pair)
              for run, pair in zip(runs, (("de", "en"), ("en", "fr")))]
    glossaries = {"terms": ServedGlossary(Glossary.of(TERMS, "de"), "de", "en")}
    with TestClient(create_app(Settings(models, glossaries=glossaries,
                                        max_glossary_entries=50)),
                    raise_server_exceptions=False) as client:
        yield client


@pytest.fixture(scope="module")
def translator(runs):
    return Translator.from_directory(str(runs[0]))


def _expected(translator, text, glossary):
    parts = split_sentences(text, "de")
    return parts.join(translator.translate(list(parts.sentences), glossary=glossary))


def test_a_served_glossary_and_inline_entries_as_the_translator_obeys_them(client, translator):
    glossary = Glossary.of(TERMS, "de")
    texts = ["das Haus ist groß. der Baum ist klein", "dort war ein Haus", "der Baum"]
    expected = [_expected(translator, text, glossary) for text in texts]
    inline = {"TSV": "Haus\tBaum\nklein\toder dort", "an object": dict(TERMS),
              "pairs": [list(pair) for pair in TERMS]}
    answers = {"served": client.post("/translate", json={
        "q": texts, "source": "de", "target": "en", "glossary": "terms"})}
    answers |= {name: client.post("/translate", json={
        "q": texts, "source": "de", "target": "en", "glossary": value})
        for name, value in inline.items()}
    answers["a form"] = client.post("/translate", data={
        "q": texts[0], "source": "de", "target": "en", "glossary": inline["TSV"]})
    for name, answer in answers.items():
        assert answer.status_code == 200, (name, answer.text)
        found = answer.json()["translatedText"]
        assert found == (expected[0] if name == "a form" else expected), name
    assert "Baum" in expected[1]  # the term placed
    # Without the glossary: the plain translations.
    plain = client.post("/translate", json={"q": texts, "source": "de", "target": "en"})
    assert plain.json()["translatedText"] == [
        split_sentences(text, "de").join(translator.translate(
            list(split_sentences(text, "de").sentences))) for text in texts]
    served = client.get("/models").json()["glossaries"]
    assert served == [{"name": "terms", "languages": ["de", "en"], "entries": 2}]


def test_html_keeps_the_tag_around_a_term(client):
    answer = client.post("/translate", json={"q": "<p>Dort war ein <b>Haus</b>.</p>",
                                             "source": "de", "target": "en", "format": "html",
                                             "glossary": "terms"})
    text = answer.json()["translatedText"]
    assert answer.status_code == 200 and text.startswith("<p>") and "<b>" in text
    assert "Baum" in text


@pytest.mark.parametrize("fields, message", [
    ({"glossary": "nothing"}, "no glossary 'nothing' is served here"),
    ({"glossary": "terms", "target": "fr"}, "a glossary applies where one model translates "
                                            "the pair; de to fr goes through en"),
    ({"glossary": "terms", "source": "auto"}, "a glossary needs its source language"),
    ({"glossary": "Haus\tBaum\nHaus\tklein"}, "the request's glossary, lines 1 and 2: the "
                                             "source term 'Haus' has two targets"),
    ({"glossary": "Haus\tBaum\tklein"}, "the request's glossary, line 1: a TSV glossary line"),
    ({"glossary": "\t\n"}, "the request's glossary holds no entry"),  # an empty one
    ({"glossary": "Haus\t "}, "line 1: an entry needs a source and a target term"),
    ({"glossary": [["Haus"]]}, "glossary must be a served glossary's name, TSV lines"),
    ({"glossary": 5}, "glossary must be a served glossary's name"),
    ({"glossary": "x\ty\n" * 51}, "the glossary's 52 entries are more than this server takes "
                                  "(50)"),
    ({"glossary": "Haus\t" + "Baum " * 40}, "the target term"),
])
def test_each_glossary_mistake_is_a_400_of_one_line(client, fields, message):
    answer = client.post("/translate", json={"q": "das Haus", "source": "de", "target": "en"}
                         | fields)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert message in error and "\n" not in error, error
