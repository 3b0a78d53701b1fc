"""`keras-transformer serve`: LibreTranslate's request and answer shapes
(a string, a list, a form; the official client unchanged), each error class
with its status, concurrent requests batched together and each answered as
the Translator answers that sentence alone, a burst beyond the queue turned
away with 503 and Retry-After and the server recovering, SIGTERM with
requests in flight (each answered, exit status 0), and the page translating
typed text in Chromium. Traffic goes to 127.0.0.1 only, bounded in count
and time."""

import asyncio
import concurrent.futures
import json
import re
import signal
import time
import types
import urllib.error
import urllib.request

import numpy as np
import pytest
from starlette.testclient import TestClient

from helpers import servers
from helpers.chromium import CHROMIUM, Browser
from helpers.small_run import WORDS
from keras_transformer import runtimes
from keras_transformer.decoding import SlotTranslator, Translator
from keras_transformer.serving import Batcher, ServedModel, Settings, create_app

@pytest.fixture(autouse=True)
def _seed():
    """Not reseeded between tests (conftest's `_seed`): reseeding drops the
    SentencePiece resources of the module's tokenizers (see `Tokenizer`),
    and nothing here draws random numbers."""


def _sentences(count, seed):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(1, 9))) for _ in range(count)]


@pytest.fixture(scope="module")
def translator(small_run):
    return Translator.from_directory(str(small_run))


@pytest.fixture(scope="module")
def runtime(small_run):
    """The Keras runtime with continuous batching, as `serve` opens it."""
    return runtimes.open_runtime(str(small_run), in_flight=1, slots=8)


@pytest.fixture(scope="module")
def client(runtime):
    app = create_app(Settings([ServedModel(runtime, "de", "en")], max_request_bytes=4096,
                              max_queue=8))
    # Faults are answered by the application (500), not raised into the test.
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


def _post(client, body=None, **kwargs):
    response = client.post("/translate", **({"json": body} if body is not None else kwargs))
    return response.status_code, response.json()


@pytest.mark.slow
def test_libretranslate_requests_and_answers(client, translator):
    one, many = "das Haus ist groß", ["der Baum", "", "klein und groß"]
    best = translator.translate([one], n_best=4)[0]
    assert _post(client, {"q": one, "source": "de", "target": "en"}) == \
        (200, {"translatedText": best[0][0]})
    expected = translator.translate(many)
    assert _post(client, {"q": many, "source": "de", "target": "en"}) == \
        (200, {"translatedText": expected})
    assert _post(client, data={"q": one, "source": "de", "target": "en"}) == \
        (200, {"translatedText": best[0][0]})
    assert _post(client, files={"q": (None, one), "source": (None, "de"),
                                "target": (None, "en")}) == (200, {"translatedText": best[0][0]})
    assert _post(client, {"q": one, "source": "de", "target": "en", "alternatives": 2}) == \
        (200, {"translatedText": best[0][0], "alternatives": [best[1][0], best[2][0]]})
    status, answer = _post(client, {"q": many, "source": "auto", "target": "en",
                                    "alternatives": "1", "format": "text"})
    assert status == 200 and answer["translatedText"] == expected
    assert [len(others) for others in answer["alternatives"]] == [1, 0, 1]
    detected = answer["detectedLanguage"]
    assert [entry["language"] for entry in detected] == ["de", "en", "de"]
    assert detected[0]["confidence"] > 50 and detected[1]["confidence"] == 0  # blank: none
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": []}]
    assert client.get("/health").json() == {"status": "ok"}  # LibreTranslate's, exactly
    models = client.get("/models").json()["models"]
    assert len(models) == 1 and models[0]["runtime"] == "keras" and models[0]["aligns"]
    assert models[0]["max_alternatives"] == 3 and models[0]["languages"] == ["de", "en"]
    # Alternatives as LibreTranslate counts them: a negative count is 0, more
    # than the beam holds gives what it holds, html gives none.
    assert _post(client, {"q": one, "source": "de", "target": "en", "alternatives": -2}) == \
        (200, {"translatedText": best[0][0]})
    assert _post(client, {"q": one, "source": "de", "target": "en", "alternatives": 9}) == \
        (200, {"translatedText": best[0][0], "alternatives": [b[0] for b in best[1:]]})
    assert _post(client, {"q": one, "source": "de", "target": "en", "alternatives": 3,
                          "format": "html"}) == \
        (200, {"translatedText": best[0][0], "alternatives": []})


def test_each_error_class_has_its_status_and_a_json_message(client, runtime, monkeypatch):
    good = {"q": "der Baum", "source": "de", "target": "en"}
    refused = [
        (dict(content=b"{not json", headers={"Content-Type": "application/json"}), 400,
         "not JSON"),
        (dict(json=["der Baum"]), 400, "must be a JSON object"),
        (dict(json={"source": "de", "target": "en"}), 400, "missing q parameter"),
        (dict(json=good | {"q": ""}), 400, "missing q parameter"),
        (dict(json=good | {"q": 5}), 400, "q must be a string or a list of strings"),
        (dict(json=good | {"q": ["a", 2]}), 400, "q must be a string or a list of strings"),
        (dict(json={"q": "x", "source": "de"}), 400, "missing target parameter"),
        (dict(json=good | {"source": "fr"}), 400, "fr is not supported"),
        (dict(json=good | {"source": "en", "target": "de"}), 400,
         "German (de) is not available as a target language from English (en)"),
        (dict(json=good | {"format": "xml"}), 400, "xml format is not supported"),
        (dict(json=good | {"alternatives": "many"}), 400, "alternatives parameter is not a "
                                                            "number"),
        (dict(json=good | {"alternatives": "--3"}), 400, "alternatives parameter is not a number"),
        (dict(data={"q": "der Baum", "source": "de", "target": "en", "alternatives": "\u00b2"}),
         400, "alternatives parameter is not a number"),
        (dict(json=good | {"q": "x" * 5000}), 413, "over this server's limit of 4096 bytes"),
        (dict(json=good | {"q": ["x"] * 9}), 413, "9 sentences are more than this server queues"),
    ]
    for request, status, message in refused:
        response = client.post("/translate", **request)
        assert response.status_code == status, (request, response.text)
        assert message in response.json()["error"], (request, response.text)
    assert client.get("/translate").status_code == 405
    assert client.get("/nowhere").json() == {"error": "Not Found"}
    # A fault of the server's own: 500, and the next request is answered.
    monkeypatch.setattr(SlotTranslator, "advance", lambda *args, **kwargs: 1 / 0)
    assert _post(client, good) == (500, {"error": "Internal error: ZeroDivisionError"})
    monkeypatch.undo()
    assert _post(client, good)[0] == 200
    metrics = client.get("/metrics").text
    assert 'translation_requests_total{path="/translate",status="413"} 2.0' in metrics
    assert 'translation_requests_total{path="other",status="404"} 1.0' in metrics


def test_libretranslate_s_own_metrics_come_with_metrics_and_are_bounded(runtime, monkeypatch):
    """LibreTranslate's metric names (checked against LibreTranslate itself
    in test_against_libretranslate.py) only with --metrics, as
    LibreTranslate serves them; past `MAX_ADDRESSES` addresses a new one is
    "other", and a key that is not one of --api-keys is "", so that a flood
    of addresses or made-up keys cannot grow them."""
    from prometheus_client.parser import text_string_to_metric_families

    from keras_transformer.serving.metrics import LibreTranslateMetrics

    models = [ServedModel(runtime, "de", "en")]
    with TestClient(create_app(Settings(models))) as client:
        assert client.post("/detect", json={"q": "Hallo"}).status_code == 200
        assert "libretranslate_" not in client.get("/metrics").text
    monkeypatch.setattr(LibreTranslateMetrics, "MAX_ADDRESSES", 2)
    with TestClient(create_app(Settings(models, libretranslate_metrics=True))) as client:
        for address in ("192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"):
            assert client.post("/detect", json={"q": "Hallo", "api_key": f"made-up-{address}"},
                               headers={"X-Forwarded-For": address}).status_code == 200
        counted = {(sample.labels["request_ip"], sample.labels["api_key"]): sample.value
                   for family in text_string_to_metric_families(client.get("/metrics").text)
                   for sample in family.samples
                   if sample.name == "libretranslate_http_request_duration_seconds_count"
                   and sample.labels["endpoint"] == "/detect"}
    assert counted == {("192.0.2.1", ""): 1, ("192.0.2.2", ""): 1, ("other", ""): 2}


def test_api_keys_are_required_when_given(runtime):
    app = create_app(Settings([ServedModel(runtime, "de", "en")], api_keys={"key-1"}))
    with TestClient(app) as client:
        good = {"q": "der Baum", "source": "de", "target": "en"}
        assert _post(client, good) == (400, {"error": "Please contact the server operator to "
                                                      "get an API key"})
        assert _post(client, good | {"api_key": "key-2"}) == (403, {"error": "Invalid API key"})
        assert _post(client, good | {"api_key": ["key-1"]}) == (403, {"error": "Invalid API key"})
        assert _post(client, good | {"api_key": "key-1"})[0] == 200
        assert client.get("/languages").status_code == 200


class _Echo:
    """A runtime that answers each sentence with itself, a word a token."""

    max_source_tokens = 100

    def __init__(self):
        self.batches = []

    def source_lengths(self, sentences):
        return [len(text.split()) for text in sentences]

    def translate(self, sentences, n_best=1):
        self.batches.append(len(sentences))
        return [[(text, 0.0)] for text in sentences]

    def slot_translator(self, n_best=1):
        return None  # batches, as the exports' runtimes search


def test_stopping_the_batcher_answers_everything_queued():
    # Queued before the workers start, then stopped: every sentence is
    # answered, in batches of the workers' shares.
    runtime = _Echo()
    batcher = Batcher(runtime, max_wait=10.0, workers=2)
    sentences = [f"sentence {index}" for index in range(7)]

    async def main():
        pending = asyncio.ensure_future(batcher.translate(sentences))
        await asyncio.sleep(0)  # queued
        assert batcher.queued == 7
        batcher._stopping = True  # as stop() does, before any worker runs
        batcher.start()
        answers = await asyncio.wait_for(pending, 30)
        await asyncio.to_thread(batcher.stop)
        return answers

    answers = asyncio.run(main())
    assert [found[0][0] for found in answers] == sentences
    assert sum(runtime.batches) == 7 and max(runtime.batches) == 4, runtime.batches


def test_a_request_that_goes_away_takes_its_waiting_sentences_out_of_the_queue():
    """Cancelled while its sentences wait (a document job as the server
    stops): none of them is translated, those of the request beside it
    are, and the stopping batcher has nothing left to translate."""
    runtime = _Echo()
    batcher = Batcher(runtime, max_wait=10.0, workers=1)
    going = [f"going {index}" for index in range(50)]
    staying = ["staying 0", "staying 1"]

    async def main():
        gone = asyncio.ensure_future(batcher.translate(going))
        kept = asyncio.ensure_future(batcher.translate(staying))
        await asyncio.sleep(0)  # both queued
        assert batcher.queued == 52
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert batcher.queued == 2
        batcher.start()
        return await asyncio.wait_for(kept, 30)

    try:
        answers = asyncio.run(main())
    finally:
        batcher.stop()
    assert [found[0][0] for found in answers] == staying and sum(runtime.batches) == 2


@pytest.mark.filterwarnings("ignore::keras_transformer.textfiles.TruncationWarning")
def test_a_client_that_goes_away_frees_its_slots_and_the_others_are_answered(
        runtime, translator, monkeypatch):
    """Continuous batching (the Keras runtime's slots): a request cancelled
    while its sentences decode takes them out of the slots at once; the
    sentences around them, an overlong one among them, are answered as the
    Translator answers them, and nothing is left in the slots."""
    cancelled = []
    cancel = SlotTranslator.cancel
    monkeypatch.setattr(SlotTranslator, "cancel", lambda self, keys: (
        taken := cancel(self, keys), cancelled.extend(item.text for item in taken))[0])
    made = []
    slot_translator = runtime.slot_translator
    monkeypatch.setattr(runtime, "slot_translator", lambda n_best=1: made.append(
        slot_translator(n_best)) or made[-1])
    batcher = Batcher(runtime, workers=1)
    going = _sentences(6, seed=21)
    staying = _sentences(5, seed=22) + [" ".join(WORDS * 8)]
    batcher.start()

    async def main():
        gone = asyncio.ensure_future(batcher.translate(going))
        while batcher._translating < len(going):  # in the slots
            await asyncio.sleep(0.001)
        gone.cancel()
        return await asyncio.wait_for(batcher.translate(staying), 120)

    try:
        answers = asyncio.run(main())
    finally:
        batcher.stop()
    assert [found[0][0] for found in answers] == translator.translate(staying)
    assert cancelled and set(cancelled) <= set(going)  # those not yet ended when it went
    assert batcher._translating == 0 and made[0].live == 0


@pytest.mark.parametrize("method", ["join", "answers"])
def test_an_error_while_admitting_or_answering_fails_those_sentences_and_the_worker_carries_on(
        runtime, translator, monkeypatch, method):
    """Continuous batching: if admitting some sentences into the slots
    (`join`) or turning those a search handed over into answers (`answers`,
    on the worker's own thread) fails, their requests get the error (a 500)
    and every other sentence, then and later, is answered as the Translator
    answers it."""
    original, failed = getattr(SlotTranslator, method), []

    def failing_once(self, *args):
        if not failed:
            items = args[1] if method == "join" else [item for item, *_ in args[0]]
            failed.extend(item.text for item in items)
            raise RuntimeError(f"{method} broke")
        return original(self, *args)

    monkeypatch.setattr(SlotTranslator, method, failing_once)
    batcher = Batcher(runtime, workers=1)
    sentences = _sentences(5, seed=23)
    batcher.start()

    async def main():
        first = await asyncio.wait_for(asyncio.gather(
            *(batcher.translate([sentence]) for sentence in sentences), return_exceptions=True),
            120)
        return first, await asyncio.wait_for(batcher.translate(sentences), 120)

    try:
        first, again = asyncio.run(main())
    finally:
        batcher.stop()
    expected = translator.translate(sentences)
    errors = {sentence for sentence, found in zip(sentences, first)
              if isinstance(found, RuntimeError)}
    assert failed and errors == set(failed)
    assert all(found[0][0][0] == translation for found, translation in zip(first, expected)
               if not isinstance(found, Exception))
    assert [found[0][0] for found in again] == expected
    assert batcher._translating == 0


# ------------------------------------------------------------ real servers


def _request(url, body, timeout=60):
    """POST /translate: `(status, answer, headers)` (headers by any case)."""
    request = urllib.request.Request(url + "translate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read()), response.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read()), error.headers


@pytest.fixture(scope="module")
def server(small_run):
    process, url = servers.start(small_run, "--max-wait-ms", "20")
    yield url
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0


def _metric(url, name):
    """A metric's value, summed over its labels (the models)."""
    text = urllib.request.urlopen(url + "metrics", timeout=10).read().decode()
    return sum(float(value) for value in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.mark.slow
def test_concurrent_requests_are_batched_and_answered_as_each_sentence_alone(server, translator):
    sentences = _sentences(24, seed=3)
    expected = [translator.translate([sentence])[0] for sentence in sentences]
    batches_before = _metric(server, "translation_batch_sentences_count")
    with concurrent.futures.ThreadPoolExecutor(len(sentences)) as threads:
        answers = list(threads.map(lambda s: _request(server, {"q": s, "source": "de",
                                                               "target": "en"}), sentences))
    assert [status for status, _, _ in answers] == [200] * len(sentences)
    assert [answer["translatedText"] for _, answer, _ in answers] == expected
    batches = _metric(server, "translation_batch_sentences_count") - batches_before
    assert batches < len(sentences), "no two requests shared a batch"


@pytest.mark.slow
def test_lone_requests_are_searched_on_onnxruntime_as_the_translator_searches(server, translator):
    """`serve` searches a lone request on onnxruntime
    (`Translator.search_lone_on_onnxruntime`): /models says so, and a lone
    request gets the Translator's translation."""
    model = json.loads(urllib.request.urlopen(server + "models", timeout=10).read())["models"][0]
    assert model["lone"] == "onnxruntime"
    for sentence in _sentences(8, seed=5):
        status, answer, _ = _request(server, {"q": sentence, "source": "de", "target": "en"})
        assert (status, answer["translatedText"]) == (200, translator.translate([sentence])[0])


def test_the_official_libretranslate_client_works_unchanged(server, translator):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(server)
    assert client.translate("das Haus ist groß", "de", "en") == \
        translator.translate(["das Haus ist groß"])[0]
    assert [language["code"] for language in client.languages()] == ["de", "en"]


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get "
                                             "install chromium)")
def test_the_page_translates_typed_text_in_chromium(server, translator, tmp_path):
    lines = ["das Haus ist groß", "der Baum"]
    best = translator.translate(lines, n_best=4)
    browser = Browser(tmp_path / "profile")
    try:
        browser.open(server)
        assert browser.wait_for('document.getElementById("to").options.length && '
                                '[document.getElementById("from").value, '
                                'document.getElementById("to").value].join(" ")') == "de en"
        browser.evaluate(f'document.getElementById("source").value = {json.dumps(chr(10).join(lines))};'
                         'document.getElementById("translate").click(); true')
        shown = browser.wait_for('(text => text !== "…" && text)('
                                 'document.getElementById("translation").textContent)')
        # Each line a sentence, joined back with the line break; the k-th
        # alternative, each line's k-th best.
        assert shown == "\n".join(row[0][0] for row in best)
        alternatives = browser.evaluate('[...document.querySelectorAll("#alternatives li")]'
                                        '.map(item => item.textContent)')
        assert alternatives == ["\n".join(row[k][0] for row in best) for k in (1, 2, 3)]
        # How far to trust it: the API's confidence and flags, and shown as
        # low where either says so (this run has no calibrator).
        _, said, _ = _request(server, {"q": "\n".join(lines), "source": "de", "target": "en",
                                       "quality": True})
        trust = browser.evaluate('[document.getElementById("trust").textContent, '
                                 'document.getElementById("translation").className]')
        assert trust[0].startswith("Confidence: not known") and said["confidence"] is None
        assert all(flag in trust[0] for flag in said["flags"])
        assert (trust[1] == "low") == bool(said["flags"])
        # HTML is shown as text, never as markup.
        browser.evaluate('document.getElementById("format").value = "html";'
                         'document.getElementById("source").value = "<b>der Baum</b>";'
                         'document.getElementById("translate").click(); true')
        shown = browser.wait_for('(text => text !== "…" && text.startsWith("<b>") && text)('
                                 'document.getElementById("translation").textContent)')
        assert shown.startswith("<b>") and shown.endswith("</b>")
        assert browser.evaluate('document.querySelectorAll("#translation b").length') == 0
    finally:
        browser.close()


@pytest.mark.slow
def test_a_burst_beyond_the_queue_is_turned_away_and_sigterm_answers_what_is_in_flight(small_run):
    # One worker of two slots, a queue of 4 sentences.
    process, url = servers.start(small_run, "--max-queue", "4", "--workers", "1", "--slots", "2")
    try:
        body = {"q": "das Haus ist groß", "source": "de", "target": "en"}
        with concurrent.futures.ThreadPoolExecutor(16) as threads:
            burst = list(threads.map(lambda _: _request(url, body), range(16)))
        statuses = sorted(status for status, _, _ in burst)
        assert set(statuses) == {200, 503} and statuses.count(200) >= 4, statuses
        for status, answer, headers in burst:
            if status == 503:
                assert headers["Retry-After"] == "1" and "queue is full" in answer["error"]
        assert _request(url, body)[0] == 200  # recovered

        # SIGTERM with the slots full and a request waiting: each is answered.
        with concurrent.futures.ThreadPoolExecutor(3) as threads:
            in_flight = [threads.submit(_request, url, body | {"q": text})
                         for text in _sentences(3, seed=5)]
            time.sleep(0.1)
            process.send_signal(signal.SIGTERM)
            assert [future.result()[0] for future in in_flight] == [200] * 3
        output, _ = process.communicate(timeout=60)
        assert process.returncode == 0, output[-3000:]
        with pytest.raises(OSError):
            urllib.request.urlopen(url + "health", timeout=5)
    finally:
        process.kill()


def test_models_whose_folders_share_a_name_are_told_apart_by_their_pair():
    first, second = (types.SimpleNamespace(path=path) for path in ("runs/a/model", "runs/b/model"))
    settings = Settings([ServedModel(first, "de", "en"), ServedModel(second, "en", "fr"),
                         ServedModel(types.SimpleNamespace(path="exports/opus/"), "fr", "en")])
    assert [model.name for model in settings.models] == ["model-de-en", "model-en-fr", "opus"]
    with pytest.raises(ValueError, match="one model per language pair"):
        Settings([ServedModel(first, "de", "en"), ServedModel(second, "de", "en")])


def test_the_quality_field_gives_each_translations_confidence_and_flags(small_run, tmp_path):
    """`"quality": true` (ours) adds `confidence` and `flags` to
    LibreTranslate's answer, as the Translator assesses the same
    translation; without it the answer is LibreTranslate's own."""
    import shutil

    from keras_transformer import trust
    from keras_transformer.decoding import quality

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    translator = Translator.from_directory(str(run))
    count = len(quality.SIGNALS)
    trust.Calibrator(quality.SIGNALS, np.zeros(count), np.ones(count),
                     np.linspace(-1, 1, count), 30.0, 0.1, -3.0,
                     quality.model_digest(translator.model), translator.alpha).save(run)
    translator = Translator.from_directory(str(run))
    served = runtimes.open_runtime(str(run), in_flight=1)
    with TestClient(create_app(Settings([ServedModel(served, "de", "en")]))) as client:
        texts = ["das Haus ist groß", "der Baum", "", "42"]
        status, answer = _post(client, {"q": texts, "source": "de", "target": "en",
                                        "quality": True})
        assert status == 200 and set(answer) == {"translatedText", "confidence", "flags"}
        assessed = translator.assess(texts[:2], answer["translatedText"][:2])
        assert answer["confidence"][:2] == [round(q.confidence, 3) for q in assessed]
        assert answer["flags"][:2] == [list(q.flags) for q in assessed]
        # Nothing to translate: no confidence, no flags.
        assert answer["confidence"][2:] == [None, None] and answer["flags"][2:] == [[], []]
        status, one = _post(client, data={"q": texts[0], "source": "de", "target": "en",
                                          "quality": "true"})
        assert status == 200 and one["confidence"] == answer["confidence"][0]
        assert _post(client, {"q": texts[0], "source": "de", "target": "en"}) == \
            (200, {"translatedText": answer["translatedText"][0]})
        assert _post(client, {"q": texts[0], "source": "de", "target": "en",
                              "quality": "maybe"}) == \
            (400, {"error": "Invalid request: quality must be true or false"})
