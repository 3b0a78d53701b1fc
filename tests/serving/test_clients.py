"""What the LibreTranslate clients people run send, sent as they send it to
a server of two models (German -> English and English -> French, so that
German -> French goes through English): Mastodon's JSON batches of HTML
with "source": "auto", Discourse's form-encoded /detect and /translate of
a whole post, Weblate's batches of strings with api_key, the official
Python client (libretranslatepy) over HTTP; and each kind of bad input,
answered with a 4xx and one line, never a 500 or a hang. Traffic goes to
127.0.0.1 only."""

import io
import json
import re
import threading
import time
import urllib.parse
import urllib.request

import docx
import pytest
from starlette.testclient import TestClient

from helpers import processes
from helpers.files import zip_bomb
from helpers.small_run import pair_runs
from keras_transformer import runtimes
from keras_transformer.documents.sentences import split_sentences
from keras_transformer.serving import ServedModel, Settings, create_app

KEY = "client-key"
GERMAN_POST = ("<p>Das Haus ist <b>groß</b> und <a href=\"https://example.org/?a=1&amp;b=2\">der "
               "Baum</a> ist klein.</p>\n<p>Hier war <em>ein</em> Haus. Dort ist nicht <code>"
               "x &lt; y</code>!</p><!-- Ende -->")
ENGLISH_POST = "<p>The house is <b>big</b>. The tree is small.</p>"


@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (see tests/serving/test_serve.py)."""


@pytest.fixture(scope="module")
def models(small_run, tmp_path_factory):
    """Two run folders of the small run's model, one German -> English and
    one English -> French (as their run.json says), opened as runtimes."""
    served = []
    for run in pair_runs(small_run, tmp_path_factory.mktemp("pair")):
        runtime = runtimes.open_runtime(str(run), in_flight=1, slots=8)  # as serve opens it
        served.append(ServedModel(runtime, *runtime.languages))
    return served


@pytest.fixture(scope="module")
def client(models, tmp_path_factory):
    settings = Settings(models, api_keys={KEY}, max_file_bytes=2**20,
                        files_dir=str(tmp_path_factory.mktemp("files")))
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def _translate(runtime, sentences):
    return [found[0][0] for found in runtime.translate(sentences)]


def _text_translation(runtime, text, language):
    """A text translated as its sentences, joined with its own whitespace."""
    parts = split_sentences(text, language)
    return parts.join(_translate(runtime, list(parts.sentences)))


def test_languages_list_every_pair_and_the_pivot(client):
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German", "targets": ["en", "fr"]},
        {"code": "en", "name": "English", "targets": ["fr"]},
        {"code": "fr", "name": "French", "targets": []}]


@pytest.mark.slow
def test_a_paragraph_is_its_sentences_translated_and_joined(client, models):
    text = "Das Haus ist groß. Der Baum war hier!\n\nEin Haus?  Dort  ist nicht hier."
    answer = client.post("/translate", json={"q": text, "source": "de", "target": "en",
                                             "api_key": KEY}).json()
    assert answer == {"translatedText": _text_translation(models[0].runtime, text, "de")}
    assert answer["translatedText"].count("\n") == 2


def test_mastodon_s_batch_of_html_with_source_auto(client, models):
    # app/lib/translation_service/libre_translate.rb: JSON, q a list of HTML,
    # source "auto", format "html", api_key; reads translatedText[i] and
    # detectedLanguage[i].language; GET /languages reads code and targets.
    languages = {entry["code"]: entry["targets"] for entry in client.get("/languages").json()}
    assert "fr" in languages["de"] and "fr" in languages["en"]
    response = client.post("/translate", content=json.dumps({
        "q": [GERMAN_POST, ENGLISH_POST], "source": "auto", "target": "fr", "format": "html",
        "api_key": KEY}), headers={"Content-Type": "application/json"})
    assert response.status_code == 200
    answer = response.json()
    assert [entry["language"] for entry in answer["detectedLanguage"]] == ["de", "en"]
    assert all(entry["confidence"] > 50 for entry in answer["detectedLanguage"])
    german, english = answer["translatedText"]
    for translation, post in ((german, GERMAN_POST), (english, ENGLISH_POST)):
        assert re.findall(r"</?[a-z]+", translation) == re.findall(r"</?[a-z]+", post)
    assert '<a href="https://example.org/?a=1&amp;b=2">' in german
    assert "<code>x &lt; y</code>" in german and german.endswith("<!-- Ende -->")
    # Mastodon treats 403 (a bad key) as its own error; a missing key, as
    # LibreTranslate answers it, is a 400.
    bad_key = {"q": ["x"], "source": "auto", "target": "fr", "format": "html"}
    assert client.post("/translate", json=bad_key | {"api_key": "wrong"}).status_code == 403
    assert client.post("/translate", json=bad_key).status_code == 400


def test_discourse_detects_then_translates_the_whole_post_form_encoded(client):
    # discourse-translator's libretranslate.rb: form-encoded bodies; /detect
    # with the post stripped of tags, cut to 5,000 characters, reading
    # [0]["language"]; then /translate with format=html and the whole post.
    post = "\n".join([GERMAN_POST] * 40)  # over 5,000 characters
    stripped = re.sub(r"<[^>]+>", "", post)[:5000]
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    detected = client.post("/detect", content=urllib.parse.urlencode(
        {"q": stripped, "api_key": KEY}), headers=headers)
    assert detected.status_code == 200 and detected.json()[0]["language"] == "de"
    translated = client.post("/translate", content=urllib.parse.urlencode(
        {"q": post, "source": "de", "target": "en", "format": "html", "api_key": KEY}),
        headers=headers)
    assert translated.status_code == 200
    text = translated.json()["translatedText"]
    assert isinstance(text, str) and text.count("<p>") == 80 and text.count("<!-- Ende -->") == 40


def test_weblate_s_batches_of_strings_with_api_key(client, models):
    strings = ["Das Haus", "Der Baum ist klein.", "Hier war ein Haus. Dort nicht."]
    codes = [entry["code"] for entry in client.get("/languages").json()]
    assert codes == ["de", "en", "fr"]
    expected = [_text_translation(models[0].runtime, text, "de") for text in strings]
    by_form = client.post("/translate", data={"q": strings, "source": "de", "target": "en",
                                              "api_key": KEY})
    by_json = client.post("/translate", json={"q": strings, "source": "de", "target": "en",
                                              "api_key": KEY})
    assert by_form.json() == by_json.json() == {"translatedText": expected}


def test_pivot_through_english_is_english_to_french_of_german_to_english(client, models):
    text = "Das Haus ist groß. Der Baum war hier."
    through = client.post("/translate", json={"q": text, "source": "de", "target": "fr",
                                              "api_key": KEY}).json()["translatedText"]
    parts = split_sentences(text, "de")
    english = _translate(models[0].runtime, list(parts.sentences))
    assert through == parts.join(_translate(models[1].runtime, english))


@pytest.mark.parametrize("language, texts", [
    ("de", ["Guten Morgen!", "Wo ist der Bahnhof?", "Danke schön"]),
    ("en", ["Good morning!", "Where is the station?", "Thank you"])])
def test_detect_answers_short_texts_in_each_served_language(client, language, texts):
    for text in texts:
        for request in (dict(json={"q": text, "api_key": KEY}),
                        dict(data={"q": text, "api_key": KEY})):
            answer = client.post("/detect", **request).json()
            assert answer[0]["language"] == language and 0 < answer[0]["confidence"] <= 100


def test_a_docx_keeps_its_styles_and_every_paragraph_changes(client, models):
    document = docx.Document()
    document.add_heading("Das Haus", level=1)
    paragraph = document.add_paragraph("Das ist ")
    paragraph.add_run("ein großes").bold = True
    paragraph.add_run(" Haus. Der Baum war hier.").italic = True
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = "Ein Haus", "Der Baum"
    document.sections[0].header.paragraphs[0].text = "Kopfzeile hier"
    data = io.BytesIO()
    document.save(data)
    response = client.post("/translate_file", data={"source": "de", "target": "en",
                                                    "api_key": KEY},
                           files={"file": ("brief.docx", data.getvalue())})
    assert response.status_code == 200, response.text
    url = response.json()["translatedFileUrl"]
    assert url.startswith("http") and url.endswith(".brief.docx")
    download = client.get(url)
    assert download.status_code == 200
    assert 'filename="brief.docx"' in download.headers["content-disposition"]
    translated = docx.Document(io.BytesIO(download.content))
    before = [(p.style.name, [(run.bold, run.italic) for run in p.runs])
              for p in document.paragraphs]
    after = [(p.style.name, [(run.bold, run.italic) for run in p.runs])
             for p in translated.paragraphs]
    assert after == before
    runtime = models[0].runtime
    for original, new in zip(document.paragraphs, translated.paragraphs):
        assert new.text == _text_translation(runtime, original.text, "de") != original.text
    assert translated.tables[0].cell(0, 1).text == _text_translation(runtime, "Der Baum", "de")
    assert translated.sections[0].header.paragraphs[0].text != "Kopfzeile hier"
    assert client.get("/download_file/" + "0" * 32 + ".missing.docx").status_code == 404
    assert client.get("/download_file/..%2F..%2Fetc%2Fpasswd").status_code == 404


@pytest.mark.slow
def test_bad_input_gets_a_4xx_and_one_line(client):
    good = {"source": "de", "target": "en", "api_key": KEY}
    deep = "<span>" * 10_000 + "Das Haus" + "</span>" * 10_000
    started = time.monotonic()
    answered = [
        client.post("/translate", json=good | {"q": "<p>Offen <b>fett", "format": "html"}),
        client.post("/translate", json=good | {"q": "Das Haus. " * 500, "format": "text"}),
        client.post("/translate", json=good | {"q": deep, "format": "html"}),
        client.post("/translate", json=good | {"q": ["<p></p>", "  ", ""], "format": "html"}),
    ]
    assert [response.status_code for response in answered] == [200] * 4
    assert answered[0].json()["translatedText"].endswith("</b></p>")
    assert answered[2].json()["translatedText"].count("</span>") == 10_000
    assert answered[3].json()["translatedText"] == ["<p></p>", "  ", ""]
    refused = [
        (dict(json=good | {"q": "你好，世界。今天天气很好。", "source": "auto", "target": "de"}),
         "could not be detected"),
        (dict(json=good | {"q": "x", "format": "markdown"}), "markdown format is not supported"),
        (dict(data={k: v for k, v in good.items()}, files={"file": ("a.docx", b"not a zip")}),
         "not a .docx file"),
        (dict(data=good, files={"file": ("bomb.docx", zip_bomb())}), "unzip"),
        (dict(data=good, files={"file": ("a.pdf", b"%PDF")}), "file format not supported"),
        (dict(data=good), "missing file parameter"),
    ]
    for request, message in refused:
        path = "/translate_file" if "files" in request or "data" in request else "/translate"
        response = client.post(path, **request)
        assert 400 <= response.status_code < 500, (message, response.text)
        error = response.json()["error"]
        assert message in error and "\n" not in error, (message, error)
    assert time.monotonic() - started < 120


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    """The two-model application on a real socket (uvicorn, in a thread)."""
    import uvicorn

    port, = processes.free_ports(1)
    settings = Settings(models, files_dir=str(tmp_path_factory.mktemp("served-files")))
    config = uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "health", timeout=5)
            break
        except OSError:
            time.sleep(0.1)
    yield url
    server.should_exit = True
    thread.join(timeout=30)


def test_the_official_python_client_translates_detects_and_lists(server, models):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server)
    text = "Das Haus ist groß. Der Baum war hier."
    assert client.translate(text, "de", "en") == _text_translation(models[0].runtime, text, "de")
    assert client.detect("Guten Morgen, wie geht es dir?")[0]["language"] == "de"
    assert [language["code"] for language in client.languages()] == ["de", "en", "fr"]
    page = urllib.request.urlopen(server, timeout=10).read().decode()
    assert "textContent = answer.translatedText" in page and "innerHTML" not in page
